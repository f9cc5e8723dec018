//! Errors the binary reports.

use std::path::PathBuf;

use miette::{Diagnostic, SourceSpan};
use uwf_engine::EngineError;
use uwf_protocol::ThreadId;

/// Anything a command can fail with.
#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum CliError {
    /// The storage root could not be determined.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Root(#[from] uwf_util::root::RootError),

    /// An input is not valid JSON.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Json(Box<JsonInputError>),

    /// An input file could not be read.
    #[error("cannot read {path}: {source}")]
    #[diagnostic(code(uwf::input::read))]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// An argument is neither a file nor JSON.
    #[error("{what} {arg:?} is neither an existing file nor JSON")]
    #[diagnostic(
        code(uwf::input::missing),
        help("check the path, or quote the JSON so the shell keeps it whole")
    )]
    NotFileNorJson {
        /// Which input.
        what: String,
        /// The argument (shortened).
        arg: String,
    },

    /// `cas verify` found problems (already printed on stdout).
    #[error("the store has {problems} problem(s); see the report on stdout")]
    #[diagnostic(code(uwf::cas::verify_failed), help("{}", verify_help(*broken_roots)))]
    VerifyFailed {
        /// Every issue found.
        problems: usize,
        /// How many of them are roots (`brokenRoot`).
        broken_roots: usize,
    },

    /// `uwf store copy` left things the destination holds differently.
    #[error(
        "{0} thing(s) were not copied because the destination differs (listed under `conflicts`)"
    )]
    #[diagnostic(
        code(uwf::store::copy_conflicts),
        help(
            "nothing in the destination was overwritten; resolve each conflict (or copy into an empty store), then run the copy again: it skips what is there"
        )
    )]
    CopyConflicts(usize),

    /// `uwf store copy` from a store into itself.
    #[error("--from and --to name the same store ({0}): nothing to copy")]
    #[diagnostic(code(uwf::store::same))]
    SameStore(String),

    /// A workflow definition could not be parsed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Definition(#[from] uwf_moderator::definition::DefinitionError),

    /// A workflow could not be registered.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Register(#[from] uwf_moderator::definition::RegisterError),

    /// The moderator failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Moderator(#[from] uwf_moderator::ModeratorError),

    /// An engine operation failed (with the CLI's hints added).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Engine(Box<EngineFailure>),

    /// A suite file or a stored suite run is refused.
    #[error(transparent)]
    #[diagnostic(code(uwf::suite), help("{}", suite_help(.0)))]
    Suite(Box<uwf_engine::suite::SuiteError>),

    /// A malformed thread id.
    #[error(transparent)]
    #[diagnostic(transparent)]
    ThreadId(#[from] uwf_protocol::ThreadIdError),

    /// A thread-id prefix that more than one thread starts with.
    #[error("{prefix:?} is the start of {count} thread ids (newest: {})", matches.join(", "))]
    #[diagnostic(
        code(uwf::thread::ambiguous),
        help("type more characters of the id; `uwf thread list --all` shows every thread")
    )]
    AmbiguousThread {
        /// What was typed.
        prefix: String,
        /// How many ids start with it.
        count: usize,
        /// The newest of them.
        matches: Vec<String>,
    },

    /// A thread-id prefix that no thread starts with.
    #[error("no thread {prefix}")]
    #[diagnostic(
        code(uwf::thread::unknown),
        help("`uwf thread list --all` shows every thread")
    )]
    UnknownPrefix {
        /// What was typed.
        prefix: String,
    },

    /// `@last` in a root without threads.
    #[error("@last names the newest top-level thread, and there is none")]
    #[diagnostic(
        code(uwf::thread::none),
        help("start one with `uwf thread run <workflow> -p \"…\"`")
    )]
    NoThreads,

    /// A workflow argument that looks like a path to a file that is not there.
    #[error("no such file: {path}")]
    #[diagnostic(
        code(uwf::workflow::no_such_file),
        help("{}", if known.is_empty() { "check the path (`ls` the directory)".to_string() } else { format!("check the path; or use a registered workflow: {}", known.join(", ")) })
    )]
    NoSuchWorkflowFile {
        /// The path given.
        path: String,
        /// Registered workflow names.
        known: Vec<String>,
    },

    /// A failure of `thread run` after the thread exists: says which thread.
    #[error(transparent)]
    #[diagnostic(transparent)]
    InThread(Box<crate::report::InThread>),

    /// `thread run <thread>` with a task: a thread already has one.
    #[error("thread {thread} exists and has its task; -p/--prompt-file only start new threads")]
    #[diagnostic(
        code(uwf::thread::prompt_on_resume),
        help("continue it with `uwf thread run {thread}`, or start a new thread from a workflow")
    )]
    PromptOnResume {
        /// The thread.
        thread: ThreadId,
    },

    /// `--format json|yaml` for a command whose answer is Markdown.
    #[error("`uwf {command}` prints Markdown; --format {format} is not available for it")]
    #[diagnostic(code(uwf::format), help("{instead}"))]
    TextOnly {
        /// The command.
        command: String,
        /// The format asked for.
        format: String,
        /// What gives the same in JSON.
        instead: String,
    },

    /// A workflow name, hash or file that resolves to nothing.
    #[error("no workflow {name:?}{}{}", uwf_moderator::definition::did_you_mean(name, known.iter().map(String::as_str)).map(|g| format!("; did you mean {g:?}?")).unwrap_or_default(), if known.is_empty() { String::new() } else { format!(" (registered: {})", known.join(", ")) })]
    #[diagnostic(
        code(uwf::workflow::unknown),
        help(
            "register one with `uwf workflow put <file.yaml>`, or pass a path to a workflow YAML file"
        )
    )]
    UnknownWorkflow {
        /// What was asked for.
        name: String,
        /// The registered names.
        known: Vec<String>,
    },

    /// A hash that is not a Workflow node.
    #[error("{0} is not a Workflow node")]
    #[diagnostic(code(uwf::workflow::not_a_workflow))]
    NotAWorkflow(String),

    /// `workflow validate` found errors (report printed on stdout).
    #[error("the workflow has {0} error(s); see the report on stdout")]
    #[diagnostic(code(uwf::workflow::invalid))]
    InvalidWorkflow(usize),

    /// `workflow replay --fail-on-divergence` found threads that would go
    /// another way.
    #[error(
        "{diverged} thread(s) diverge and {invalid} become invalid under the replayed workflow; see the report on stdout"
    )]
    #[diagnostic(
        code(uwf::workflow::diverged),
        help(
            "each thread's `divergence` names the step and the condition values on both sides; `uwf workflow diff` shows what changed"
        )
    )]
    Diverged {
        /// Threads that diverge.
        diverged: usize,
        /// Threads whose recorded outputs a changed schema refuses.
        invalid: usize,
    },

    /// `thread run` stopped at --max-steps.
    #[error("thread {thread} is not done after {steps} step(s) (--max-steps)")]
    #[diagnostic(
        code(uwf::thread::max_steps),
        help("continue with `uwf thread run {thread}`")
    )]
    MaxSteps {
        /// The id.
        thread: ThreadId,
        /// Steps run.
        steps: usize,
    },

    /// A format that this command cannot print.
    #[error("--format {format} is not available for this command")]
    #[diagnostic(
        code(uwf::format),
        help("mermaid and dot are for `uwf workflow graph`; other commands print json or yaml")
    )]
    Format {
        /// The format.
        format: String,
    },

    /// Output could not be written.
    #[error("cannot write output: {0}")]
    #[diagnostic(code(uwf::output))]
    Output(String),

    /// `uwf setup` refused its input or could not ask.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Setup(Box<crate::cmd::setup::SetupError>),

    /// The step did not run: its role waits for a person (the wait was
    /// printed on stdout). Exit status [`EXIT_WAITING`].
    #[error("thread {thread} waits for a person: role {role} ({agent}){}", if answer == thread { String::new() } else { format!(", through child thread {answer}") })]
    #[diagnostic(
        code(uwf::thread::waiting),
        help(
            "answer it with `uwf thread answer {answer} --edit` (or --output JSON / --text FILE), then continue with `uwf thread run --thread {thread}`; `uwf thread list --waiting` lists every wait"
        )
    )]
    Waiting {
        /// The thread stepped.
        thread: ThreadId,
        /// Its role that waits.
        role: String,
        /// The agent the role is bound to.
        agent: String,
        /// The thread a person answers (the innermost waiting one).
        answer: ThreadId,
    },

    /// The step did not run: the thread reached `$SUSPEND` (the wait was
    /// printed on stdout). Exit status [`EXIT_WAITING`].
    #[error("thread {thread} is suspended: {prompt}")]
    #[diagnostic(
        code(uwf::thread::suspended),
        help(
            "continue it with `uwf thread resume {thread}` (it goes on from `$START`'s `resume` route), then `uwf thread run --thread {thread}`"
        )
    )]
    Suspended {
        /// The thread.
        thread: ThreadId,
        /// Why (the edge prompt or the output's reason).
        prompt: String,
    },

    /// `thread answer` on a thread that does not wait for that answer.
    #[error("thread {thread} does not wait for this answer: {reason}; nothing was written")]
    #[diagnostic(
        code(uwf::thread::not_waiting),
        help(
            "`uwf thread list --waiting` lists the threads that wait for a person, and for which role"
        )
    )]
    NotWaiting {
        /// The thread.
        thread: ThreadId,
        /// Why not.
        reason: String,
    },

    /// `thread answer` produced a StepNode that fails the checks.
    #[error("the answer to thread {thread} was not applied: {reason}")]
    #[diagnostic(
        code(uwf::thread::answer_rejected),
        help("the thread is unchanged; answer again")
    )]
    AnswerRejected {
        /// The thread.
        thread: ThreadId,
        /// Why.
        reason: String,
    },

    /// `thread answer --edit` came back with the template unchanged.
    #[error("no answer given to thread {thread}: the file was left unchanged; nothing was written")]
    #[diagnostic(
        code(uwf::thread::answer_abandoned),
        help("edit the fields between the --- lines, save, and quit the editor")
    )]
    AnswerAbandoned {
        /// The thread.
        thread: ThreadId,
    },

    /// The editor for `thread answer --edit` failed.
    #[error("the editor {editor:?} failed: {reason}")]
    #[diagnostic(
        code(uwf::thread::editor),
        help(
            "set $VISUAL or $EDITOR to an editor that waits until the file is closed (e.g. `code --wait`), or answer with --output / --text"
        )
    )]
    Editor {
        /// The editor command.
        editor: String,
        /// What went wrong.
        reason: String,
    },

    /// The agent kit failed (reading the thread, extracting or storing an
    /// answer); reported with the kit's `uwf` hint.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Kit(Box<uwf_agent_kit::Reported>),

    /// `uwf thread view` cannot write its page.
    #[error(transparent)]
    #[diagnostic(transparent)]
    View(Box<crate::cmd::view::ViewFailure>),

    /// `uwf serve` cannot start.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Serve(Box<crate::cmd::serve::ServeError>),
}

impl CliError {
    /// Whether this says that one thread's nodes are missing or damaged
    /// ([`EngineError::is_thread_damage`]): a command listing many threads
    /// reports that thread as broken and goes on.
    pub fn is_thread_damage(&self) -> bool {
        matches!(self, CliError::Engine(e) if e.0.is_thread_damage())
    }

    /// Wraps an agent-kit error.
    pub fn kit(e: uwf_agent_kit::KitError) -> Self {
        CliError::Kit(Box::new(uwf_agent_kit::Reported::new(e)))
    }
}

/// The help of [`CliError::VerifyFailed`]: what to do about node issues,
/// and about broken roots when there are any.
fn verify_help(broken_roots: usize) -> String {
    let nodes = "corrupt nodes must be restored or removed; dangling references point at nodes that were never stored or were deleted";
    if broken_roots == 0 {
        return nodes.to_string();
    }
    format!(
        "{nodes}. A brokenRoot is a record of the thread state (its `root`: an active or archived thread's head, a wait, an attempt record, a queued run, a registry entry) naming a node that is missing or of the wrong type: restore the nodes from a backup of the store with `uwf store copy --from <backup> --to <this store>` (it copies what is missing and overwrites nothing); register a workflow name again with `uwf workflow put <file>`; meanwhile `uwf thread list` marks such threads broken and goes on"
    )
}

/// What to do about a [`CliError::Suite`].
fn suite_help(e: &uwf_engine::suite::SuiteError) -> &'static str {
    use uwf_engine::suite::SuiteError as S;
    match e {
        S::Invalid { .. } | S::Read { .. } => {
            "see docs/eval.md for the suite file; `uwf suite schema` prints its JSON Schema; nothing was run or stored"
        }
        S::NotARun { .. } | S::BadRun { .. } => "give the hash `uwf suite run` printed as `run`",
        S::Queue(q) => {
            use uwf_engine::suite::QueueError as Q;
            match q {
                Q::Fixture { .. } => {
                    "run this suite without --detach, or drop the case's fixture; nothing was queued or stored"
                }
                Q::NoQueue { .. } => {
                    "use a store with a run queue (see docs/worker.md), or run without --detach"
                }
                Q::Partly { .. } => {
                    "the threads listed run on workers (`uwf thread list`); fix the cause and queue the suite again"
                }
                Q::Unfinished { .. } => {
                    "`uwf suite wait RUN` waits for the threads and judges them; `uwf suite status RUN` shows where each thread is"
                }
                Q::TimedOut { .. } => {
                    "the threads go on; `uwf suite status RUN` shows where each is, `uwf suite wait RUN` waits again; nothing was stored"
                }
            }
        }
        _ => {
            "the runs finished so far are threads of the store (`uwf thread list`); no suite result was stored"
        }
    }
}

impl From<uwf_engine::suite::SuiteError> for CliError {
    fn from(e: uwf_engine::suite::SuiteError) -> Self {
        match e {
            uwf_engine::suite::SuiteError::Engine(e) => e.into(),
            e => CliError::Suite(Box::new(e)),
        }
    }
}

/// Exit status of a failure without a more specific one.
pub const EXIT_FAILURE: u8 = 1;
/// Exit status of a step that did not run for lack of a slot: none free
/// with `overflow: drop`, or pushed out of a full queue.
pub const EXIT_NO_SLOT: u8 = 3;
/// Exit status of a step that did not run because its role waits for a
/// person (`uwf::thread::waiting`); the wait is printed on stdout.
pub const EXIT_WAITING: u8 = uwf_engine::human::EXIT_WAITING;
/// Exit status of a step whose thread was killed (`uwf::thread::killed`).
pub const EXIT_KILLED: u8 = 5;

impl CliError {
    /// The process exit status for this error (see docs/state.md, "Exit
    /// status"): [`EXIT_NO_SLOT`] when a step got no slot, [`EXIT_WAITING`]
    /// when its role waits for a person, [`EXIT_KILLED`] when its thread
    /// was killed, [`EXIT_FAILURE`] otherwise. Usage errors
    /// exit 2; clap reports them before any command runs.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Engine(e) if e.0.is_no_slot() => EXIT_NO_SLOT,
            CliError::Engine(e) if e.0.is_killed() => EXIT_KILLED,
            CliError::Waiting { .. } | CliError::Suspended { .. } => EXIT_WAITING,
            CliError::InThread(e) => e.error.exit_code(),
            // The status of a SIGINT, as a shell reports one.
            CliError::Setup(e) if matches!(**e, crate::cmd::setup::SetupError::Interrupted) => 130,
            _ => EXIT_FAILURE,
        }
    }
}

/// An input is not valid JSON, with the place it went wrong.
#[derive(Debug, thiserror::Error, Diagnostic)]
#[error("{what} is not valid JSON: {message}")]
#[diagnostic(
    code(uwf::input::json),
    help("pass JSON text, a path to a JSON file, or - to read stdin")
)]
pub struct JsonInputError {
    /// Which input.
    pub what: String,
    /// serde_json's message.
    pub message: String,
    /// The text (a report shows the line at fault, no other).
    #[source_code]
    pub src: uwf_util::text::LineAtFault,
    /// Where it went wrong.
    #[label("here")]
    pub span: SourceSpan,
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        CliError::Engine(Box::new(EngineFailure(e)))
    }
}

impl From<uwf_engine::backend::BackendError> for CliError {
    fn from(e: uwf_engine::backend::BackendError) -> Self {
        EngineError::Backend(e).into()
    }
}

impl From<uwf_cas::CasError> for CliError {
    fn from(e: uwf_cas::CasError) -> Self {
        EngineError::Cas(e).into()
    }
}

impl From<uwf_moderator::thread::ThreadError> for CliError {
    fn from(e: uwf_moderator::thread::ThreadError) -> Self {
        EngineError::Thread(e).into()
    }
}

impl From<uwf_cas::ParseHashError> for CliError {
    fn from(e: uwf_cas::ParseHashError) -> Self {
        EngineError::Cas(e.into()).into()
    }
}

impl From<uwf_state::StateError> for CliError {
    fn from(e: uwf_state::StateError) -> Self {
        EngineError::State(e).into()
    }
}

impl From<uwf_state::policy::PolicyError> for CliError {
    fn from(e: uwf_state::policy::PolicyError) -> Self {
        EngineError::Policy(e).into()
    }
}

/// An [`EngineError`] as the `uwf` binary reports it: the engine's message
/// and code, with a hint naming the `uwf` command that helps.
#[derive(Debug)]
pub struct EngineFailure(pub EngineError);

impl std::fmt::Display for EngineFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for EngineFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl Diagnostic for EngineFailure {
    fn code<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.0.code()
    }
    fn severity(&self) -> Option<miette::Severity> {
        self.0.severity()
    }
    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        match hint(&self.0) {
            Some(h) => Some(Box::new(h)),
            None => self.0.help(),
        }
    }
    fn url<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.0.url()
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.0.source_code()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        self.0.labels()
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        self.0.related()
    }
    fn diagnostic_source(&self) -> Option<&dyn Diagnostic> {
        self.0.diagnostic_source()
    }
}

/// The hint `uwf` gives for an engine error: what to run next.
fn hint(e: &EngineError) -> Option<String> {
    Some(match e {
        EngineError::CorruptState { .. } => {
            "fix or move the file; uwf never overwrites a file it cannot read".into()
        }
        EngineError::UnknownThread { .. } => "`uwf thread list --all` shows every thread".into(),
        EngineError::ThreadFinished { thread } => format!(
            "fork it from any of its nodes to continue: `uwf thread steps {thread}` lists them, `uwf thread fork <hash>` forks"
        ),
        EngineError::NoSlot {
            thread, workflow, ..
        } => format!(
            "step it again later (`uwf thread step {thread}`), or raise `concurrency` or set `overflow: queue` under `workflows.{workflow}` in config.yaml"
        ),
        EngineError::Evicted {
            thread, workflow, ..
        } => format!(
            "step it again later (`uwf thread step {thread}`), or raise `maxQueue` or `concurrency` under `workflows.{workflow}` in config.yaml"
        ),
        EngineError::HeadMoved { .. } => "another `uwf thread step` of the same thread won the race; step again to continue from the new head".into(),
        EngineError::FinishedMeanwhile { thread, .. } => format!(
            "another uwf process won the race and the thread is over; `uwf thread show {thread}` shows how it ended, `uwf thread fork <hash>` continues from any of its steps"
        ),
        EngineError::Interrupted => "the thread is unchanged; step it again to retry".into(),
        // The libraries say what is wrong; which `uwf` command helps is the
        // CLI's to say (docs/architecture.md, "Errors and output").
        EngineError::State(uwf_state::StateError::StoredConfig { .. }) => {
            "write a valid one with `uwf store init --config <file>`; every machine on the store shares it".into()
        }
        EngineError::State(uwf_state::StateError::AlreadyQueued { thread, .. }) => {
            format!("a worker runs it; `uwf thread show {thread}` says which")
        }
        EngineError::Moderator(uwf_moderator::ModeratorError::NoTransitions { role, .. }) => format!(
            "add `graph.{role}` with at least one transition (end with `{{role: $END, condition: null}}`); `uwf workflow put` validates this"
        ),
        EngineError::Moderator(uwf_moderator::ModeratorError::Syntax(_)) => {
            "fix the expression (see https://docs.jsonata.org); `uwf workflow put` checks every expression".into()
        }
        EngineError::Moderator(uwf_moderator::ModeratorError::Evaluation(_)) => {
            "the expression runs against {start, steps} (a condition) or the last output (an edge prompt); check the types it assumes, e.g. with `uwf thread steps`".into()
        }
        EngineError::Backend(uwf_engine::backend::BackendError::UnknownScheme { .. }) => format!(
            "give a directory, or postgres://USER@HOST:PORT/DATABASE (password in {} or .env){}",
            uwf_engine::backend::STORE_PASSWORD_ENV,
            if cfg!(feature = "postgres") {
                ""
            } else {
                "; this uwf was built without its `postgres` feature"
            }
        ),
        EngineError::Backend(uwf_engine::backend::BackendError::Empty { .. }) => {
            "remove the setting to use the storage root, or give a directory or a postgres:// URL"
                .into()
        }
        EngineError::EmptyPrompt => {
            "give the task with -p \"…\", -p - (stdin) or --prompt-file FILE".into()
        }
        EngineError::NotAStep { .. } => {
            "`uwf thread steps <thread>` lists the steps of a thread".into()
        }
        EngineError::BadParent { .. } => "--parent takes the parent thread's head: a StartNode or StepNode of a sound chain (`uwf thread show <parent-thread>` prints it)".into(),
        EngineError::AgentSpawn { .. } => "check the agent command: is it installed and on PATH? Configure agents in config.yaml (`uwf setup`) or pass --agent \"<command> [args]\"".into(),
        EngineError::Agent(_) => {
            "the thread is unchanged; the agent's stderr is above (`uwf thread show` lists failed attempts, `uwf cas get <attempt>` keeps its last lines); fix the agent and step the thread again".into()
        }
        EngineError::Rejected { .. } => "the thread is unchanged; try again".into(),
        EngineError::NotSuspended { thread, .. } => format!(
            "only a thread that reached `$SUSPEND` can be resumed; step it with `uwf thread step {thread}`"
        ),
        EngineError::State(s) => return state_hint(s),
        EngineError::Cas(c) => return cas_hint(c),
        EngineError::Thread(t) => return thread_hint(t),
        _ => return None,
    })
}

/// The hint `uwf` gives for an object-store error.
pub fn cas_hint(e: &uwf_cas::CasError) -> Option<String> {
    use uwf_cas::CasError;
    Some(match e {
        CasError::NotFound(_) => "check the hash; `uwf cas schema list` and `uwf cas walk` show what is stored".into(),
        CasError::Corrupt { .. } => "the file does not hash to its name; restore it from a backup or remove it, then run `uwf cas verify`".into(),
        CasError::UnknownType(_) => "list the registered schemas with `uwf cas schema list`, or register one with `uwf cas schema put`".into(),
        CasError::NotASchema(_) => "types are schema nodes: see `uwf cas schema list`".into(),
        CasError::Invalid { type_hash, .. } => format!(
            "fix the payload at the paths shown; `uwf cas schema get {type_hash}` prints the schema"
        ),
        _ => return None,
    })
}

/// The hint `uwf` gives for an error reading a thread.
pub fn thread_hint(e: &uwf_moderator::thread::ThreadError) -> Option<String> {
    use uwf_moderator::thread::ThreadError;
    Some(match e {
        ThreadError::NotFound { .. } => "the thread refers to a node that is missing; `uwf cas verify` lists dangling references".into(),
        ThreadError::Cycle { .. } => "the store is corrupt; run `uwf cas verify`".into(),
        ThreadError::InvalidPayload { .. } => "the node was written by incompatible software or the store is corrupt; run `uwf cas verify`".into(),
        ThreadError::WorkflowInvalid { .. } => "register the workflow again with `uwf workflow put`; threads keep the hash they started with".into(),
        ThreadError::Cas(c) => return cas_hint(c),
        _ => return None,
    })
}

/// The hint `uwf` gives for a thread-state error.
pub fn state_hint(e: &uwf_state::StateError) -> Option<String> {
    use uwf_state::StateError;
    Some(match e {
        StateError::Conflict { .. } => "another uwf process advanced or archived this thread; re-read it (`uwf thread show`) and retry".into(),
        StateError::NotActive { .. } => "`uwf thread list --all` shows active and archived threads; archived threads cannot be changed".into(),
        StateError::NodeGone { .. } => "nothing was recorded and the thread is where it was: run the command again. `uwf cas gc` keeps unreferenced nodes younger than --grace (1h by default); a grace longer than your slowest step leaves the nodes of running steps alone".into(),
        StateError::NoAgent { .. } => "run `uwf setup`, set defaultAgent in the configuration (`uwf config show` says where it is kept), or pass --agent \"<command>\"".into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The libraries' help says what is wrong; the `uwf` command that helps
    /// is added here, and only here.
    #[test]
    fn library_errors_get_their_uwf_hint_from_the_cli() {
        let thread = uwf_protocol::fixtures::thread("T");
        let queued = EngineError::State(uwf_state::StateError::AlreadyQueued {
            thread,
            state: "queued".into(),
        });
        let library = miette::Diagnostic::help(&queued).map(|h| h.to_string());
        assert!(library.is_some_and(|h| !h.contains("`uwf ")));
        let shown = EngineFailure(queued);
        let help = miette::Diagnostic::help(&shown).map(|h| h.to_string());
        assert_eq!(
            help,
            Some(format!(
                "a worker runs it; `uwf thread show {thread}` says which"
            ))
        );
        let no_way = EngineError::Moderator(uwf_moderator::ModeratorError::NoTransitions {
            workflow: "w".into(),
            role: "planner".into(),
        });
        let library = miette::Diagnostic::help(&no_way).map(|h| h.to_string());
        assert!(library.is_some_and(|h| h.contains("graph.planner") && !h.contains("`uwf ")));
        let help = miette::Diagnostic::help(&EngineFailure(no_way)).map(|h| h.to_string());
        assert!(help.is_some_and(|h| h.contains("`uwf workflow put`")));
        let row = EngineError::State(uwf_state::StateError::StoredConfig {
            origin: "postgres://h/db (table uwf_config)".into(),
            line: 1,
            column: 9,
            message: "did not find expected node content".into(),
        });
        let help = miette::Diagnostic::help(&EngineFailure(row)).map(|h| h.to_string());
        assert!(help.is_some_and(|h| h.contains("`uwf store init --config <file>`")));
    }

    #[test]
    fn exit_codes_tell_no_slot_and_killed_apart() {
        let thread = uwf_protocol::fixtures::thread("T");
        let workflow = "w".to_string();
        let no_slot: CliError = EngineError::NoSlot {
            thread,
            workflow: workflow.clone(),
            concurrency: 1,
        }
        .into();
        let evicted: CliError = EngineError::Evicted {
            thread,
            workflow,
            max_queue: 1,
            waited: "1s".into(),
        }
        .into();
        let killed: CliError = EngineError::Killed { thread }.into();
        let before: CliError = EngineError::KilledBeforeStart { thread }.into();
        let moved: CliError = EngineError::HeadMoved {
            thread,
            actual: uwf_protocol::fixtures::hash("X"),
        }
        .into();
        assert_eq!(no_slot.exit_code(), EXIT_NO_SLOT);
        assert_eq!(evicted.exit_code(), EXIT_NO_SLOT);
        assert_eq!(killed.exit_code(), EXIT_KILLED);
        assert_eq!(before.exit_code(), EXIT_KILLED);
        assert_eq!(moved.exit_code(), EXIT_FAILURE);
        // Lost to a step that finished the thread: a conflict, not a kill.
        let finished: CliError = EngineError::FinishedMeanwhile {
            thread,
            reason: "done".into(),
            head: uwf_protocol::fixtures::hash("H"),
        }
        .into();
        assert_eq!(finished.exit_code(), EXIT_FAILURE);
        assert!(
            finished.to_string().contains("finished by another step"),
            "{finished}"
        );
        assert_eq!(
            CliError::from(EngineError::Interrupted).exit_code(),
            EXIT_FAILURE
        );
        let waiting = CliError::Waiting {
            thread: uwf_protocol::fixtures::thread("T"),
            role: "approver".into(),
            agent: "me".into(),
            answer: uwf_protocol::fixtures::thread("T"),
        };
        assert_eq!(waiting.exit_code(), EXIT_WAITING);
        assert_eq!(
            waiting.code().map(|c| c.to_string()).as_deref(),
            Some("uwf::thread::waiting")
        );
        let code = |e: &CliError| e.code().map(|c| c.to_string());
        assert_eq!(code(&killed).as_deref(), Some("uwf::thread::killed"));
        assert_eq!(code(&finished).as_deref(), Some("uwf::thread::conflict"));
        assert_eq!(code(&moved).as_deref(), Some("uwf::thread::conflict"));
        assert_eq!(code(&before).as_deref(), Some("uwf::thread::killed"));
        assert_eq!(code(&no_slot).as_deref(), Some("uwf::thread::no_slot"));
        assert_eq!(code(&evicted).as_deref(), Some("uwf::thread::evicted"));
    }
}
