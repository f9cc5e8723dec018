//! Command-line grammar.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::engine::ArgValueCandidates;

const ABOUT: &str = "A stateless, single-step workflow engine for multi-agent LLM work.";

const LONG_ABOUT: &str = "\
A stateless, single-step workflow engine for multi-agent LLM work.

Workflows, threads and every agent output are nodes in a content-addressed
store (CAS) under the storage root. Every command prints JSON on stdout (or
YAML with --format yaml); diagnostics go to stderr, and a failed command exits
non-zero with nothing on stdout.";

const AFTER_HELP: &str = r#"Storage root: --root, else $UNCAGED_WORKFLOW_STORAGE_ROOT, else
$WORKFLOW_STORAGE_ROOT, else ~/.uncaged/workflow.

Examples:
  uwf thread run examples/solve-issue.yaml -p "Fix the login bug" \
      --agent "uwf-mock examples/solve-issue.mock.yaml"
  uwf workflow graph examples/solve-issue.yaml
  uwf thread view <thread-id> --html thread.html
  uwf cas schema list                 list the registered types
  uwf cas get 4KNM2PXR3B1QW           print a node
  uwf --format yaml cas walk <hash>   everything reachable from a node
  uwf completions bash > ~/.local/share/bash-completion/completions/uwf"#;

/// The `uwf` command line.
#[derive(Debug, Parser)]
#[command(name = "uwf", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP)]
pub struct Cli {
    /// Global options.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted by every command.
#[derive(Debug, Args)]
pub struct Global {
    /// Storage root (overrides $UNCAGED_WORKFLOW_STORAGE_ROOT and $WORKFLOW_STORAGE_ROOT).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// The store: a directory, or postgres://USER@HOST:PORT/DATABASE with the password in $UWF_STORE_PASSWORD or the root's .env (overrides $UWF_STORE and `store:` in config.yaml; default: the storage root).
    #[arg(long, global = true, value_name = "STORE")]
    pub store: Option<String>,

    /// Output format of stdout [default: json; mermaid for `workflow graph`].
    #[arg(long, global = true, value_enum)]
    pub format: Option<Format>,

    /// More logging on stderr (-v info, -vv debug, -vvv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Colour on stderr: auto follows NO_COLOR, CLICOLOR_FORCE, CLICOLOR and whether stderr is a terminal.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when stderr is a terminal and the environment does not say otherwise.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// The task of a new thread: `-p TEXT`, `-p -` (stdin) or `--prompt-file FILE`.
#[derive(Debug, Args)]
pub struct PromptArgs {
    /// The task; - reads it from stdin.
    #[arg(
        short,
        long,
        allow_hyphen_values = true,
        conflicts_with = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// Read the task from this file (- for stdin).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Pretty-printed JSON.
    Json,
    /// YAML.
    Yaml,
    /// Mermaid flowchart (`workflow graph` only).
    Mermaid,
    /// Graphviz dot (`workflow graph` only).
    Dot,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register, inspect and draw workflows.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Start, step, inspect and fork threads.
    #[command(subcommand)]
    Thread(ThreadCommand),
    /// Inspect and edit the content-addressed store.
    #[command(subcommand)]
    Cas(CasCommand),
    /// For agents in any language: what to work on, and handing the work in.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Configure a provider, model, API key and default agent (interactive without flags).
    #[command(after_help = SETUP_AFTER_HELP)]
    Setup(SetupArgs),
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Evaluate a JSONata expression against a thread's moderator context or any JSON.
    #[command(after_help = EVAL_AFTER_HELP)]
    Eval(EvalArgs),
    /// Evaluate a workflow: run a suite of cases, judge the threads, report and compare runs.
    #[command(subcommand)]
    Suite(SuiteCommand),
    /// Run queued threads (`uwf thread run --detach`) until stopped; SIGTERM drains.
    #[command(after_help = WORKER_AFTER_HELP)]
    Worker(WorkerArgs),
    /// Serve a web page and a JSON API over the store's threads (loopback by default).
    #[command(after_help = crate::cmd::serve::AFTER_HELP)]
    Serve(ServeArgs),
    /// Set up a shared store, see which store is used, copy one store into another.
    #[command(subcommand)]
    Store(StoreCommand),
    /// Print a reference text for an LLM agent or a person: using uwf, authoring workflows, writing agents.
    #[command(
        subcommand,
        after_help = "\
The texts are built from uwf's own documentation (docs/, the README), its
command tree and `uwf workflow schema`, so they say what this uwf does.
Markdown on stdout; --format json|yaml is refused.

Examples:
  uwf prompt workflow-authoring > authoring.md
  uwf prompt usage | less"
    )]
    Prompt(PromptCommand),
    /// Print a shell completion script (it completes thread ids and workflow names too).
    #[command(after_help = "\
The script calls `uwf` while completing (UWF_COMPLETE=<shell> uwf -- <words>), so
thread ids and workflow names come from the storage root of the environment.

Examples:
  uwf completions bash > ~/.local/share/bash-completion/completions/uwf
  uwf completions zsh > ~/.zfunc/_uwf
  uwf completions fish > ~/.config/fish/completions/uwf.fish")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page, or write one per command into a directory.
    #[command(after_help = "\
Examples:
  uwf man | man -l -
  uwf man --dir ~/.local/share/man/man1     then: man uwf-thread-run")]
    Man {
        /// Write uwf.1 and a page per subcommand (uwf-thread-run.1, …) here.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `uwf serve`'s options.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on; port 0 picks a free one. An address other
    /// than loopback needs a token (--new-token).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7878")]
    pub listen: std::net::SocketAddr,
    /// Make a new access token, store it in the root's .env as
    /// UWF_SERVE_TOKEN (mode 0600) and print it once, in the JSON on stdout.
    #[arg(long)]
    pub new_token: bool,
}

/// `uwf prompt …`: which reference text.
#[derive(Debug, Subcommand)]
pub enum PromptCommand {
    /// Using the CLI: threads, steps, the store, every command.
    Usage,
    /// Writing workflows: the YAML format, conditions, edge prompts, validation, examples, the schema.
    WorkflowAuthoring,
    /// Writing agents: the Rust kit and the protocol for any language.
    AdapterDeveloping,
}

const EVAL_AFTER_HELP: &str = r#"The value is printed as JSON; an expression that evaluates to undefined prints
nothing on stdout (and says so on stderr). Evaluation uses the moderator's
limits and key order (a thread's objects sorted by key), so a condition gives
here what it gives in a step; an --input document keeps its members' order. Any builtin may be used, also those refused in
workflows ($now, $random, $eval, ...).

Examples:
  uwf eval '$count(steps[role = "reviewer"])' --thread 01JD...
  uwf eval 'steps[-1].output' --at 1TM6QWPENJAPY
  uwf eval '$sum(items.price)' --input order.json
  echo '{"a": [1, 2]}' | uwf eval '$average(a)' --input -"#;

/// `uwf eval`
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The JSONata expression (may start with `-`, e.g. `-1 * a`).
    #[arg(allow_hyphen_values = true)]
    pub expression: String,
    /// Evaluate against this thread's moderator context ({start, steps}), as its conditions see it.
    #[arg(long, conflicts_with_all = ["at", "input"], add = ArgValueCandidates::new(crate::complete::threads))]
    pub thread: Option<String>,
    /// Evaluate against the moderator context of the thread ending at this StepNode (or StartNode).
    #[arg(long, value_name = "STEP_HASH", conflicts_with = "input")]
    pub at: Option<String>,
    /// Evaluate against this JSON: text, a file, or - for stdin.
    #[arg(long, value_name = "JSON|FILE|-")]
    pub input: Option<String>,
}

/// `uwf agent …`
#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Everything an agent needs for a role, as one JSON object.
    #[command(after_help = "\
{thread, role, workflow, task, roleDescription, outputSchema, outputSchemaHash,
formatInstruction, edgePrompt, systemPrompt, userPrompt, prompt, historyQuota,
stepCount, steps, head, prev}: `prompt` is systemPrompt, a blank line and
userPrompt, as the Rust agent kit builds it; `steps` are the newest steps whose
outputs fit in the history quota. See docs/agent-protocol.md.

Example (inside an agent, which uwf runs as `<agent> <thread> <role>`):
  uwf agent context \"$1\" \"$2\" | jq -r .prompt")]
    Context {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
        /// The role to work as (the one uwf passed the agent).
        role: String,
        /// Characters of history [default: $UWF_HISTORY_QUOTA, else the kit's default].
        #[arg(long, value_name = "CHARS")]
        quota: Option<usize>,
    },
    /// Turn an agent's work into a StepNode and print its hash (the agent's answer to uwf).
    #[command(after_help = "\
--output is validated against the role's outputSchema; --text is a frontmatter
markdown answer, extracted as the kit does (frontmatter, then the LLM fallback
if configured) and stored as the detail. The StepNode follows the thread's
head; uwf checks it and moves the head when the agent exits. Prints the hash
alone (JSON with --format).

Example: uwf agent submit \"$1\" \"$2\" --output '{\"summary\": \"done\"}'")]
    #[command(group = clap::ArgGroup::new("work").required(true).multiple(false))]
    Submit {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
        /// The role worked as.
        role: String,
        /// The structured output: JSON text, a file, or - for stdin.
        #[arg(long, value_name = "JSON|FILE|-", group = "work")]
        output: Option<String>,
        /// A frontmatter markdown answer in a file, or - for stdin.
        #[arg(long, value_name = "FILE|-", group = "work")]
        text: Option<String>,
        /// A detail node already stored (default: the answer text, or the output).
        #[arg(long, value_name = "HASH")]
        detail: Option<String>,
        /// The StepNode's `agent` [default: $UWF_AGENT, which uwf sets, else uwf-agent-submit].
        #[arg(long = "as", value_name = "NAME")]
        name: Option<String>,
    },
}

/// `uwf cas …`
#[derive(Debug, Subcommand)]
pub enum CasCommand {
    /// Print a node: {hash, type, payload}.
    #[command(
        after_help = "Hashes are case-insensitive. Example: uwf cas get 4knm2pxr3b1qw --timestamp"
    )]
    Get {
        /// The node's hash.
        hash: String,
        /// Also print when the node was first stored (ms since the Unix epoch).
        #[arg(long)]
        timestamp: bool,
    },
    /// Store a payload as a node of a type, after validating it against the type's schema.
    #[command(after_help = "\
PAYLOAD is JSON text, a file path, or - for stdin. Text starting with { or [ is
always JSON; otherwise an existing file wins, then JSON (for scalars).

Example:
  T=$(uwf cas schema put '{\"title\":\"note\",\"type\":\"object\"}' | jq -r .hash)
  uwf cas put $T '{\"text\":\"hello\"}'")]
    Put {
        /// Hash of the type (a schema node; see `uwf cas schema list`).
        #[arg(value_name = "TYPE")]
        type_hash: String,
        /// The payload: JSON, a file, or - for stdin.
        payload: String,
    },
    /// Tell whether a node exists: {hash, exists}. Exits 0 either way.
    Has {
        /// The node's hash.
        hash: String,
    },
    /// List the references a node holds: [{path, hash}] (found through its schema).
    Refs {
        /// The node's hash.
        hash: String,
    },
    /// List everything reachable from a node, breadth-first: [{hash, type, depth}].
    Walk {
        /// The node to start from.
        hash: String,
    },
    /// Rebuild the by-type index from the nodes.
    Reindex,
    /// Re-hash every node and check types, schemas and references. Exits 1 if anything is wrong.
    Verify {
        /// First delete the entries of the store that are not nodes (reported
        /// as "stray"); they are listed under "removedStrays".
        #[arg(long)]
        remove_strays: bool,
    },
    /// Remove nodes nothing needs: keeps everything reachable from active and
    /// archived thread heads, registered workflows and schemas.
    #[command(after_help = "\
Nodes younger than --grace are kept even when unreachable: a running agent may
have stored them and not yet referenced them. Example: uwf cas gc --dry-run")]
    Gc {
        /// Only report what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Keep unreachable nodes stored more recently than this.
        #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
        grace: std::time::Duration,
    },
    /// Types: JSON Schemas stored as nodes.
    #[command(subcommand)]
    Schema(SchemaCommand),
}

/// `uwf cas schema …`
#[derive(Debug, Subcommand)]
pub enum SchemaCommand {
    /// List every schema: [{hash, title}], the meta-schema included.
    List,
    /// Print a schema.
    Get {
        /// The schema's hash.
        hash: String,
    },
    /// Register a JSON Schema as a type, so nodes can be stored with it.
    #[command(after_help = "\
SCHEMA is JSON text, a file path, or - for stdin. Only a subset of JSON Schema
2020-12 is accepted (see docs/cas.md); references to other nodes are strings
with \"format\": \"cas_ref\".

Example: uwf cas schema put my-detail.schema.json")]
    Put {
        /// The schema: JSON, a file, or - for stdin.
        schema: String,
    },
}

/// `uwf workflow …`
#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Register a workflow from YAML: {name, hash}. Refuses invalid workflows.
    #[command(
        after_help = "The YAML format is described in docs/workflow.md. Example: uwf workflow put examples/solve-issue.yaml"
    )]
    Put {
        /// The workflow YAML file.
        file: PathBuf,
    },
    /// Check a workflow YAML file without registering it: {valid, errors, warnings}.
    Validate {
        /// The workflow YAML file.
        file: PathBuf,
    },
    /// Print a workflow: {hash, name, type, payload, timestamp}.
    Show {
        /// A registered name or a Workflow node hash.
        #[arg(add = ArgValueCandidates::new(crate::complete::workflows))]
        workflow: String,
    },
    /// List registered workflows: [{name, hash}].
    List,
    /// Draw a workflow's graph (mermaid by default, or --format dot).
    #[command(
        after_help = "Example: uwf workflow graph examples/solve-issue.yaml --format dot | dot -Tsvg > flow.svg"
    )]
    Graph {
        /// A registered name, a Workflow hash, or a YAML file (not registered).
        #[arg(
            required_unless_present = "thread",
            conflicts_with = "thread",
            add = ArgValueCandidates::new(crate::complete::workflows)
        )]
        workflow: Option<String>,
        /// Draw this thread's workflow with the thread's path on it: visit
        /// counts on the roles, taken transitions thick with how often.
        #[arg(long, value_name = "ID", add = ArgValueCandidates::new(crate::complete::threads))]
        thread: Option<String>,
    },
    /// Re-decide recorded threads under a changed workflow: where each would have gone another way.
    #[command(after_help = "\
Every selected thread (active or archived) is replayed from the outputs that
were recorded: at each step, the moderator of WORKFLOW decides from the steps
before it, exactly as a real step would, and the first step where it chooses
another role than the thread took is reported with the condition values on
both sides. A thread whose recorded output no longer satisfies a changed
output schema is `invalid`; steps whose edge prompt would read differently
are listed. Nothing is written and no agent runs.

Without --thread, --all or --workflow, the threads of the workflow with
WORKFLOW's name are replayed. stdout: {workflow, summary, threads, unreadable}
(threads lists those that did not route plainly the same); a table for people
goes to stderr (not with --quiet).

Examples:
  uwf workflow replay solve-issue.v2.yaml
  uwf workflow replay new.yaml --workflow solve-issue --since 7d --fail-on-divergence")]
    Replay(ReplayArgs),
    /// The structural change between two workflows, in words: {same, changes}.
    #[command(
        after_help = "Each argument is a YAML file (not registered), a registered name, or a Workflow hash.\nExample: uwf workflow diff solve-issue examples/solve-issue.yaml"
    )]
    Diff {
        /// The old workflow.
        #[arg(add = ArgValueCandidates::new(crate::complete::workflows))]
        old: String,
        /// The new workflow.
        #[arg(add = ArgValueCandidates::new(crate::complete::workflows))]
        new: String,
    },
    /// Print the JSON Schema of the workflow YAML (both syntaxes), for editors.
    #[command(after_help = "\
For yaml-language-server (VS Code's YAML extension, Neovim, Helix, …):

  uwf workflow schema > workflow.schema.json
  # then, as the first line of a workflow file:
  # yaml-language-server: $schema=./workflow.schema.json

The schema checks the shape; `uwf workflow validate` checks the rest.")]
    Schema,
}

/// `uwf suite …`
#[derive(Debug, Subcommand)]
pub enum SuiteCommand {
    /// Run every case × repetition of a suite as threads, judge them, store the result: {run, …}.
    #[command(after_help = "\
Each run is an ordinary thread of the current store, started and run by a
child `uwf` in a fresh temporary working directory holding a copy of the
case's fixture. Then every judge scores it. The result is stored as a
SuiteRun node; stdout: {run, suite, workflow, runs, runErrors, judgeErrors,
cases}. Progress and a table go to stderr (not with --quiet). A run or judge
that fails is recorded with its error and the suite goes on; the exit status
is 0 once the result is stored. The suite file is described in docs/eval.md.

On a terminal, a progress bar on stderr shows the runs done, the failures and
the time so far; otherwise one line per finished run.

With --detach, every case × repetition is started as a thread and queued for
`uwf worker`s (as `uwf thread run --detach` does), the queued run is stored,
and stdout is {run, suite, workflow, queued: true, threads}. Nothing is
judged yet: `uwf suite wait RUN` waits until every thread is finished, judges
them and stores the result; `uwf suite status RUN` shows where each thread is.
A case with a fixture cannot be queued (a worker runs in its own directory).

Examples:
  uwf suite run examples/suites/solve-issue.suite.yaml
  uwf suite run my.suite.yaml --repetitions 5
  run=$(uwf suite run my.suite.yaml --detach | jq -r .run); uwf suite wait \"$run\" --timeout 1h")]
    Run {
        /// The suite file (YAML).
        suite: PathBuf,
        /// Run each case this many times (instead of the suite's `repetitions`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        repetitions: Option<u32>,
        /// Queue the runs for `uwf worker`s and return at once; `uwf suite wait RUN` judges them.
        #[arg(long)]
        detach: bool,
    },
    /// Wait until every thread of a run queued with --detach is finished, then judge them once: {run, …}.
    #[command(after_help = "\
A thread is finished when no worker will move it on: done, killed, failed
(the worker gave up), or stopped (it waits for a person). The result is
stored as a SuiteRun that names the queued run; stdout is that of `uwf suite
run` plus `queued`. Waiting again prints the stored result (it is judged
once). Past --timeout: exit 1, nothing on stdout, nothing stored (the
threads go on). On a terminal a progress bar shows the threads finished.

Examples:
  uwf suite wait 4KNM2PXR3B1QW
  uwf suite wait 4KNM2PXR3B1QW --timeout 30m --format yaml")]
    Wait {
        /// The run: the hash `uwf suite run --detach` printed.
        run: String,
        /// Give up after this long (90s, 10m, 2h); by default wait as long as it takes.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        timeout: Option<std::time::Duration>,
        /// How often to look at the threads, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..))]
        poll_ms: u64,
    },
    /// Where each thread of a run queued with --detach is: {run, state, total, finished, counts, judged, threads}.
    #[command(after_help = "\
`state` is `running` while a thread is queued or held by a worker, `finished`
once all are (`uwf suite wait` judges them), `judged` once a result is stored
(`judged` is its hash). Each thread's state: queued, running (with its
worker), done, ended (killed, pruned), failed (with the worker's error),
stopped (waits for a person), missing. Reading writes nothing.

Example: uwf suite status 4KNM2PXR3B1QW")]
    Status {
        /// The run: the hash `uwf suite run --detach` printed.
        run: String,
    },
    /// Per case and judge: mean, min, max and spread over the repetitions of a stored run.
    #[command(after_help = "\
`$total` is the weighted mean of the judges (a failed judge counts 0),
`$done` the fraction of runs that reached $END, `$steps` the step count,
`$failedAttempts` the agents' failed attempts, `$tokens` and `$costUsd` what
the agents reported (runs whose agents report nothing are left out). A run
queued with --detach is reported once `uwf suite wait` judged it.

Examples:
  uwf suite report 4KNM2PXR3B1QW
  uwf suite report 4KNM2PXR3B1QW --markdown > report.md")]
    Report {
        /// The run: the hash `uwf suite run` printed.
        run: String,
        /// A Markdown table on stdout instead of JSON.
        #[arg(long)]
        markdown: bool,
    },
    /// Per case and judge, how the mean changed from RUN_A to RUN_B, with a bootstrap 90 % interval.
    #[command(after_help = "\
The verdict is `better` or `worse` only when the whole interval is on one side
of 0 and both runs have at least two scores; otherwise `unclear`. The
resampling has a fixed seed: the same two runs always give the same output.
stdout: {a, b, cases: [{case, judges: [{judge, meanA, meanB, change, low, high, verdict}]}], onlyA, onlyB};
a table on stderr (not with --quiet).

Example: uwf suite diff 4KNM2PXR3B1QW 7Q0ZD3MJ5RWHX")]
    Diff {
        /// The earlier run.
        run_a: String,
        /// The later run.
        run_b: String,
    },
    /// Print the JSON Schema of the suite file, for editors.
    Schema,
}

/// `uwf workflow replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The changed workflow: a YAML file (not registered), a registered name, or a Workflow hash.
    #[arg(add = ArgValueCandidates::new(crate::complete::workflows))]
    pub workflow: String,
    /// Replay this thread (id, unique prefix or @last); repeat for more.
    #[arg(long = "thread", value_name = "ID", conflicts_with_all = ["all", "of"], add = ArgValueCandidates::new(crate::complete::threads))]
    pub threads: Vec<String>,
    /// Replay every thread of the store, whatever its workflow.
    #[arg(long, conflicts_with = "of")]
    pub all: bool,
    /// Replay the threads of the workflow with this name (any version).
    #[arg(long = "workflow", value_name = "NAME", id = "of", add = ArgValueCandidates::new(crate::complete::workflows))]
    pub of: Option<String>,
    /// Only threads started since: a duration ago (7d, 12h) or a time (2026-11-01, 2026-11-01T09:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<u64>,
    /// Exit 1 when a thread diverges or becomes invalid (for CI).
    #[arg(long)]
    pub fail_on_divergence: bool,
}

/// `uwf thread …`
#[derive(Debug, Subcommand)]
pub enum ThreadCommand {
    /// Create a thread (no step runs): {workflow, thread}.
    #[command(
        after_help = "Example: uwf thread start examples/solve-issue.yaml --prompt-file task.md"
    )]
    Start {
        /// A registered name, a Workflow hash, or a YAML file (registered on the way).
        #[arg(add = ArgValueCandidates::new(crate::complete::workflows))]
        workflow: String,
        #[command(flatten)]
        prompt: PromptArgs,
        /// Advanced: start a child thread whose StartNode's parentState is
        /// this node (a StartNode or StepNode of the calling thread; see
        /// docs/nested-workflows.md). `uwf-workflow` uses it.
        #[arg(long, value_name = "HASH", hide_short_help = true)]
        parent: Option<String>,
    },
    /// Run exactly one step: {workflow, thread, head, done}.
    #[command(after_help = "\
The moderator picks the next role; the agent runs as `<agent> <thread-id> <role>`
and prints the new StepNode's hash; uwf checks it and moves the head. The agent
is --agent, else config.yaml agentOverrides[workflow][role], else defaultAgent.
A failed agent is retried as config.yaml `retries` says (timeouts: `timeouts`,
or --timeout). A role bound to a person (`human: true`) runs nothing: the wait
is printed and uwf exits with status 4; answer with `uwf thread answer`.

Example: uwf thread step 01J7K9M2XNPQR5VWBCDF8G3H4T --agent \"uwf-mock scenario.yaml\" --timeout 10m")]
    Step {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Start (or continue) a thread and step it until it is done.
    #[command(after_help = "\
Progress goes to stderr; the final answer is the last step's JSON. A role that
waits for a person stops the run: the wait is printed, exit status 4. Any
other failure prints nothing on stdout and names the thread, which
`uwf thread run <thread-id>` continues.

Examples:
  uwf thread run examples/solve-issue.yaml -p \"Fix the login bug\" --agent \"uwf-mock examples/solve-issue.mock.yaml\"
  git log -1 --format=%B | uwf thread run solve-issue -p -
  uwf thread run @last            continue the newest thread")]
    Run {
        /// A registered name, a Workflow hash, or a YAML file; or a thread
        /// (id, unique prefix or @last) to continue.
        #[arg(
            required_unless_present = "thread",
            conflicts_with = "thread",
            add = ArgValueCandidates::new(crate::complete::workflows_or_threads)
        )]
        workflow: Option<String>,
        #[command(flatten)]
        prompt: PromptArgs,
        /// Continue this thread instead of starting one.
        #[arg(long, value_name = "ID", conflicts_with_all = ["prompt", "prompt_file"], add = ArgValueCandidates::new(crate::complete::threads))]
        thread: Option<String>,
        /// Advanced: when starting, the parentState of the new thread's
        /// StartNode (see `uwf thread start --help`).
        #[arg(
            long,
            value_name = "HASH",
            conflicts_with = "thread",
            hide_short_help = true
        )]
        parent: Option<String>,
        /// Stop after this many steps.
        #[arg(long, default_value_t = 100)]
        max_steps: usize,
        #[command(flatten)]
        agent: AgentArgs,
        /// Queue the thread for `uwf worker` instead of running it here
        /// (prints {workflow, thread, queued}); see docs/worker.md.
        #[arg(long)]
        detach: bool,
    },
    /// What the moderator would run next, without running it: {thread, role, done}.
    #[command(
        after_help = "With --explain, also every transition of the current role with its \
condition's value: {thread, role, done, prompt, from, transitions: [{index, role, condition, \
expression, value, holds, error, taken}]}, and `error` when the moderator cannot decide. \
A finished or killed thread answers too, with `archived` (done or killed): the decision its \
head leads to, which for a finished thread is the `$END` it ended on."
    )]
    Next {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
        /// Show every condition of the current role, its value, and which transition wins.
        #[arg(long)]
        explain: bool,
    },
    /// A thread's head and state: {workflow, thread, head, done, name, task, state, running, lastStep, …}.
    #[command(after_help = "\
`state` is running, waiting, failed (the last attempt at this head failed),
idle, or for archived threads done, killed or pruned. `running` says what runs
now (\"running developer for 42 s on host\", pid, log); a marker left by a uwf
that died shows as `stale` instead. `lastStep.why` is the transition that led
to the head step. A thread queued for `uwf worker` has `run` {state: queued,
claimed, lease-expired or failed; worker, leaseUntil, error} and, when nothing
runs, that state as its `state`.")]
    Show {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
    },
    /// Active threads: [{thread, name, task, age, state, workflow, head, done}].
    List {
        /// Include archived threads.
        #[arg(long)]
        all: bool,
        /// Only top-level threads (leave out the child threads of workflows run as agents).
        #[arg(long)]
        top_level: bool,
        /// Only the threads waiting for a person: [{thread, workflow, waiting, answer, stack}].
        #[arg(long, conflicts_with_all = ["all", "top_level"])]
        waiting: bool,
    },
    /// Answer a role that waits for a person: writes its StepNode and moves the head.
    #[command(after_help = ANSWER_AFTER_HELP)]
    Answer(AnswerArgs),
    /// Continue a thread that reached `$SUSPEND`: one step, from `$START`'s `resume` route.
    #[command(after_help = "\
A thread is suspended when the moderator's next role is $SUSPEND (an edge of an
upstream-syntax workflow, or a role that finished with `$status: \"$SUSPEND\"`):
`thread step` and `thread run` then print the wait and exit 4. `resume` runs one
step whose role is chosen from $START against the whole thread (a `$START:
{new, resume}` map takes `resume`), and prints {workflow, thread, head, done}.
Continue with `uwf thread run --thread <id>`.")]
    Resume {
        /// The thread: an id, a unique prefix of one, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// The call stack of a node: [{node, start, workflow, workflowName, role, depth, thread}].
    #[command(after_help = "\
From a StartNode or StepNode, the threads it runs in, innermost first: its own
thread, then the thread that called it as an agent (through its StartNode's
parentState), up to the top-level thread (depth 0). `role` is the calling
role (null at the top). See docs/nested-workflows.md.

Example: uwf thread stack 8FWKR3TN5V1QA")]
    Stack {
        /// A StartNode or StepNode.
        node: String,
    },
    /// Stop a thread and archive it (a running step is stopped and not applied).
    Kill {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
    },
    /// Follow a thread live: each step as it starts, lands or fails, until the thread ends.
    #[command(after_help = "\
Prints a line per event on stdout (a step started, with its agent, host, pid and
log file; a step landed, with why and how long; a failed attempt; a wait for
a person) and ends when the thread is archived. Ctrl-C stops watching (not the
thread). `uwf thread log -f` follows the agents' stderr instead.

Example: uwf thread watch @last")]
    Watch {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
    },
    /// The stderr of a thread's agents (kept under the storage root in logs/THREAD.log).
    #[command(after_help = "\
With -f, keeps printing what the agents write until the thread is archived
(Ctrl-C stops following). Example: uwf thread log -f @last")]
    Log {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
        /// Follow: print what is written from now on, until the thread ends.
        #[arg(short, long)]
        follow: bool,
    },
    /// Every step of a thread, oldest first, outputs expanded, with why each ran.
    Steps {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
    },
    /// A thread as markdown: the newest steps that fit in the quota.
    #[command(
        after_help = "Markdown only: `uwf thread steps` gives the same steps as JSON or YAML."
    )]
    Read {
        /// The thread: its id, a unique prefix of it, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
        /// Maximum characters of the whole text (a positive integer); the newest
        /// step is always shown, cut if need be.
        #[arg(long, default_value_t = 8000, value_parser = positive_quota)]
        quota: usize,
        /// Only steps before this StepNode (to page back).
        #[arg(long, value_name = "HASH")]
        before: Option<String>,
    },
    /// Archive the threads that never took a step: [{thread, workflow, prompt, age}].
    #[command(after_help = "\
A thread whose head is still its StartNode (a `thread run` whose first agent
failed, a `thread start` never stepped) is archived as `pruned`: it leaves
`thread list` and stays in `thread list --all`. Threads that wait for a person
or are younger than --older-than are kept, so a step starting right now is
not pulled from under it.

Example: uwf thread prune --dry-run --older-than 0s")]
    Prune {
        /// Only list what would be archived.
        #[arg(long)]
        dry_run: bool,
        /// Keep threads started more recently than this.
        #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
        older_than: std::time::Duration,
    },
    /// Start a new thread whose head is an existing StartNode or StepNode.
    Fork {
        /// The node to fork from.
        node: String,
    },
    /// Write a thread as one self-contained HTML page: the graph with its path, every step.
    #[command(after_help = crate::cmd::view::AFTER_HELP)]
    View {
        /// The thread: an id, a unique prefix of one, or @last.
        #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
        thread: String,
        /// Where to write the page; - for stdout [default: uwf-thread-ID.html in the temp dir].
        #[arg(long, value_name = "FILE|-")]
        html: Option<std::path::PathBuf>,
    },
    /// A step's detail node with its references expanded (YAML by default).
    StepDetails {
        /// The StepNode.
        step: String,
    },
}

impl ThreadCommand {
    /// Whether the command only reads the store, once: then it reads it in
    /// one snapshot (`ThreadStore::read_in_one_snapshot`), which on
    /// PostgreSQL is also one transaction. Not `watch` (it waits for
    /// changes) nor anything that writes.
    pub fn only_reads(&self) -> bool {
        matches!(
            self,
            Self::Next { .. }
                | Self::Show { .. }
                | Self::List { .. }
                | Self::Stack { .. }
                | Self::Steps { .. }
                | Self::Read { .. }
                | Self::View { .. }
                | Self::StepDetails { .. }
        )
    }
}

/// `--quota`: a positive integer (upstream refused 0 the same way).
fn positive_quota(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("invalid --quota: must be a positive integer".into()),
    }
}

const ANSWER_AFTER_HELP: &str = "\
The thread must wait for a person: its next role is bound to an agent with
`human: true` in config.yaml (`uwf thread list --waiting` lists them). The answer
becomes a StepNode exactly like an agent's: --output is validated against the
role's outputSchema; --text and --edit go through the frontmatter extraction
(then the LLM fallback, if configured). The StepNode's agent is human:<name>
(--as, else $USER). The head moves by compare-and-swap: an answer to a thread
that moved on, was killed, or waits for another role changes nothing.

Examples:
  uwf thread answer 01J7K9M2XNPQR5VWBCDF8G3H4T --output '{\"approved\": true}'
  uwf thread answer 01J7K9M2XNPQR5VWBCDF8G3H4T --role reviewer --edit
  printf -- '---\\napproved: false\\n---\\nNeeds tests.\\n' | uwf thread answer <id> --text -";

/// `uwf thread answer` options.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("answer").required(true).multiple(false))]
pub struct AnswerArgs {
    /// The thread: its id, a unique prefix of it, or @last.
    #[arg(add = ArgValueCandidates::new(crate::complete::threads))]
    pub thread: String,
    /// The role answered (default: the role the thread waits for; given, it must be that one).
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
    /// The structured output: JSON text, a file, or - for stdin.
    #[arg(long, value_name = "JSON|FILE|-", group = "answer")]
    pub output: Option<String>,
    /// A frontmatter markdown answer in a file, or - for stdin.
    #[arg(long, value_name = "FILE|-", group = "answer")]
    pub text: Option<String>,
    /// Write the answer in $VISUAL / $EDITOR, from a template made from the role's schema.
    #[arg(long, group = "answer")]
    pub edit: bool,
    /// Who answers, recorded as the StepNode's agent `human:<NAME>` [default: $USER].
    #[arg(long = "as", value_name = "NAME")]
    pub name: Option<String>,
}

/// How to run the agent.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Agent alias from config.yaml or a command line, e.g. "uwf-mock scenario.yaml".
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// Stop the agent after this long (e.g. 90s, 10m).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<std::time::Duration>,
}

const WORKER_AFTER_HELP: &str = "\
Claims queued threads and steps each to its end, renewing a lease while its
agent runs; a worker that dies loses its lease and another one takes the thread
over, running the interrupted step again. One line per event goes to stderr
(time, worker, thread, role, event, duration). SIGTERM or Ctrl-C drains: no new
claims, running agents get --grace to finish, then they are stopped and their
threads go back to the queue. See docs/worker.md.

Examples:
  uwf thread run solve-issue -p \"Fix the login bug\" --detach
  uwf worker --concurrency 4 --workflow solve-issue --log-format json";

/// `uwf store …`
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Create or upgrade the store's schema (PostgreSQL; safe to run again, and from several machines at once).
    Init {
        /// Also make this file the store's configuration (agents, models, workflow limits), shared by every machine.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Which store commands use, and where that was decided.
    Show,
    /// Copy every node, thread, history entry, registry entry, the configuration and queued runs of one store into another (resumable, verified, never overwrites).
    Copy {
        /// The store to copy: a directory or a postgres:// URL.
        #[arg(long, value_name = "STORE")]
        from: String,
        /// The store to copy into: a directory or a postgres:// URL.
        #[arg(long, value_name = "STORE")]
        to: String,
    },
}

/// `uwf worker`
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// How many threads to step at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Run only threads of this workflow (by name); repeat for several.
    #[arg(long, value_name = "NAME", add = ArgValueCandidates::new(crate::complete::workflows))]
    pub workflow: Vec<String>,
    /// The lease of a claimed thread, in seconds (renewed every third of it).
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub lease: u64,
    /// At shutdown, how long running agents may go on before they are stopped, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub grace: u64,
    /// How often an idle worker looks at the queue, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..), hide_short_help = true)]
    pub poll_ms: u64,
    /// How the event lines on stderr look.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `uwf worker --log-format`
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

const SETUP_AFTER_HELP: &str = "\
Writes <root>/config.yaml (providers, models, agents; no secrets) and
<root>/.env (API keys, mode 0600), merging with what is there. Without flags
and on a terminal it asks; otherwise it does what the flags say. The key is
never printed.

Presets (--provider): openai, openrouter, anthropic, deepseek, groq, together,
mistral, ollama, lmstudio; any other name is a custom provider and needs
--base-url. Agents (--agent): hermes, llm, claude (Claude Code), codex (Codex
CLI), tools (uwf-agent, built in, with tools), mock, an alias under `agents:`,
or a command line.

Prefer --api-key - (stdin) to a key on the command line, which other users
can see in the process list and which lands in shell history.

Examples:
  uwf setup
  printf %s \"$KEY\" | uwf setup --provider openai --api-key - --model gpt-4o-mini
  uwf setup --provider openrouter --model anthropic/claude-sonnet-4 --model-alias sonnet
  uwf setup --provider ollama --model llama3.2 --agent llm
  printf %s \"$KEY\" | uwf setup --provider anthropic --api-key - --agent claude   (Claude Code)
  printf %s \"$KEY\" | uwf setup --provider openai --api-key - --agent codex       (Codex CLI)
  uwf setup --provider mycorp --base-url https://llm.example.com/v1 --api-key-env MYCORP_KEY";

/// `uwf setup` options. Giving any of them makes setup non-interactive.
#[derive(Debug, Args)]
pub struct SetupArgs {
    /// Provider alias: a preset (openai, openrouter, anthropic, deepseek, groq, together,
    /// mistral, ollama, lmstudio), one already in config.yaml, or a new name with --base-url.
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,
    /// The provider's OpenAI-compatible base URL (http or https), e.g. https://host/v1.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The API key, stored in .env (never in config.yaml, never printed); - reads it from stdin.
    #[arg(long, value_name = "KEY", allow_hyphen_values = true)]
    pub api_key: Option<String>,
    /// Name of the variable holding the key (default: the preset's, or `<PROVIDER>_API_KEY`).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The provider's model name, e.g. gpt-4o-mini; becomes defaultModel.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Alias for the model in config.yaml [default: derived from --model].
    #[arg(long, value_name = "ALIAS", requires = "model")]
    pub model_alias: Option<String>,
    /// Default agent: an alias (hermes, llm, mock, or one in config.yaml) or a command line.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
}

/// `uwf config …`
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// The effective configuration, with API keys masked.
    #[command(after_help = "\
Shows config.yaml as parsed, each provider's key variable (set or not, from the
environment or .env, masked), the storage root and where it came from, and the
resolved defaultAgent and defaultModel. A missing config.yaml prints
\"config\": null. Example: uwf --format yaml config show")]
    Show,
}

/// `--since`: a duration ago (`7d`) or a time (`2026-11-01`,
/// `2026-11-01T09:00:00Z`), as ms since the Unix epoch.
fn parse_since(s: &str) -> Result<u64, String> {
    let now = std::time::SystemTime::now();
    let at = match humantime::parse_duration(s) {
        Ok(d) => now.checked_sub(d).unwrap_or(std::time::UNIX_EPOCH),
        Err(_) => {
            let text = if s.len() == 10 {
                format!("{s}T00:00:00Z")
            } else {
                s.to_string()
            };
            humantime::parse_rfc3339_weak(&text).map_err(|_| {
                format!("{s:?} is neither a duration (7d, 12h) nor a time (2026-11-01, 2026-11-01T09:00:00Z)")
            })?
        }
    };
    Ok(at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
}
