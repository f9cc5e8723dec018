//! `uwf thread …`

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Value, json};
use uwf_cas::Hash;
use uwf_moderator::thread::{self, ThreadView};
use uwf_protocol::{
    ForkedFrom, StartEntry, StartOutput, StepEntry, StepOutput, ThreadForkOutput, ThreadId,
    ThreadListItem, ThreadShowOutput, ThreadStepsEntry, ThreadStepsOutput,
};

use crate::cli::{Format, PromptArgs, ThreadCommand};
use crate::cmd::story::Listed;
use crate::cmd::workflow;
use crate::engine::nested::{self, ThreadIndex};
use crate::engine::{self, Ctx, Progress, Status, StepOptions};
use crate::error::CliError;
use crate::human;
use crate::output;
use crate::progress::{Live, Plain};

fn parse_hash(s: &str) -> Result<Hash, CliError> {
    s.parse::<Hash>().map_err(CliError::from)
}

/// Starts a thread on a resolved workflow; with `parent`, a child thread
/// whose StartNode's `parentState` is that node (which must load as a
/// thread: a StartNode or StepNode of a sound chain).
fn start(
    ctx: &Ctx,
    workflow_arg: &str,
    prompt: &str,
    parent: Option<&str>,
) -> Result<StartOutput, CliError> {
    start_for(ctx, workflow_arg, prompt, parent, None)
}

/// [`start`]; with `run_with` (the `--agent` of `thread run`, if any) the
/// thread is started only if its first step's agent can run
/// ([`engine::check_first_agent`]). Also `uwf serve`'s start action.
pub fn start_for(
    ctx: &Ctx,
    workflow_arg: &str,
    prompt: &str,
    parent: Option<&str>,
    run_with: Option<Option<&str>>,
) -> Result<StartOutput, CliError> {
    if prompt.trim().is_empty() {
        return Err(engine::EngineError::EmptyPrompt.into());
    }
    // Nothing (a registration, a StartNode) is written unless the thread can
    // be added.
    engine::ready_to_start(ctx)?;
    let parent = parent.map(parse_hash).transpose()?;
    if let Some(explicit) = run_with {
        // Before anything is registered or started (nothing is written).
        let (hash, payload) = workflow::resolve(ctx, workflow_arg, false)?;
        engine::check_first_agent(ctx, hash, &payload, prompt, explicit)?;
    }
    let (hash, _) = workflow::resolve(ctx, workflow_arg, true)?;
    let started = engine::start(ctx, hash, prompt, parent)?;
    Ok(StartOutput {
        workflow: hash,
        thread: started.thread,
    })
}

/// The workflow hash of a thread whose head is `head`.
fn workflow_of(ctx: &Ctx, head: Hash) -> Result<Hash, CliError> {
    Ok(engine::workflow_of(ctx, head)?)
}

fn show(ctx: &Ctx, id: ThreadId) -> Result<ThreadShowOutput, CliError> {
    let mut out = ThreadShowOutput {
        head: head_of(ctx, id)?,
        parent: None,
        parent_thread: None,
        child_threads: Vec::new(),
    };
    // The links are extra information: a thread whose chain cannot be read
    // still shows its head, as it always did.
    if let Err(e) = add_links(ctx, &mut out) {
        tracing::debug!(error = %e, "cannot read the thread's parent/child links");
    }
    Ok(out)
}

/// Fills in `parent`, `parentThread` and `childThreads` (docs/nested-workflows.md, "The links").
fn add_links(ctx: &Ctx, out: &mut ThreadShowOutput) -> Result<(), CliError> {
    let view = thread::load(ctx.cas(), out.head.head)?;
    out.parent = view.start.parent_state;
    if out.parent.is_none() && !nested::has_children(&view) {
        return Ok(());
    }
    let index = ThreadIndex::load(ctx)?;
    if let Some(p) = out.parent {
        out.parent_thread = nested::start_of(ctx, p)
            .ok()
            .and_then(|start| index.thread_of(p, start));
    }
    out.child_threads = nested::child_links(ctx, &view, &index)
        .into_iter()
        .map(|c| c.link)
        .collect();
    Ok(())
}

fn head_of(ctx: &Ctx, id: ThreadId) -> Result<StepOutput, CliError> {
    Ok(match engine::status(ctx, id)? {
        Status::Active { head } => StepOutput {
            workflow: workflow_of(ctx, head)?,
            thread: id,
            head,
            done: false,
        },
        Status::Archived(e) => StepOutput {
            workflow: e.workflow,
            thread: e.thread,
            head: e.head,
            done: true,
        },
    })
}

/// What `uwf thread show` prints for thread `id`: its head, links, wait,
/// attempts, state, running marker, last step and queued run (also the
/// answer of `uwf serve`'s `GET /api/threads/{id}`).
pub fn show_value(ctx: &Ctx, id: ThreadId) -> Result<Value, CliError> {
    let shown = show(ctx, id)?;
    let mut v = serde_json::to_value(&shown).map_err(|e| CliError::Output(e.to_string()))?;
    add_waiting_and_attempts(ctx, id, &mut v)?;
    crate::cmd::story::add_to_show(ctx, id, &mut v)?;
    crate::cmd::worker::add_to_show(ctx, id, &mut v)?;
    Ok(v)
}

/// The rows `uwf thread list` prints: the active threads, with `all` the
/// archived ones too, with `top_level` no child threads (also what `uwf
/// serve`'s `GET /api/threads` filters and pages).
pub fn list_values(ctx: &Ctx, all: bool, top_level: bool) -> Result<Vec<Value>, CliError> {
    list_rows_of(ctx, list_entries(ctx, all)?, top_level)
}

/// A thread as the thread state lists it, before any of its nodes is read.
#[derive(Debug, Clone)]
pub struct ListEntry {
    /// The thread.
    pub thread: ThreadId,
    /// Its head.
    pub head: Hash,
    /// Archived: its workflow and why (`None`: done).
    pub archived: Option<(Hash, Option<String>)>,
}

/// The active threads (in the state's order), with `all` then the archived
/// ones (newest archived first, the latest entry of each; an active thread
/// is never also listed as archived). Reads the thread state only.
pub fn list_entries(ctx: &Ctx, all: bool) -> Result<Vec<ListEntry>, CliError> {
    let active = ctx.state().threads()?;
    let mut entries: Vec<ListEntry> = active
        .iter()
        .map(|(&thread, &head)| ListEntry {
            thread,
            head,
            archived: None,
        })
        .collect();
    if all {
        let mut seen: BTreeSet<ThreadId> = active.keys().copied().collect();
        for e in ctx.state().history()?.into_iter().rev() {
            if seen.insert(e.thread) {
                entries.push(ListEntry {
                    thread: e.thread,
                    head: e.head,
                    archived: Some((e.workflow, e.reason)),
                });
            }
        }
    }
    Ok(entries)
}

/// The `thread list` rows of `entries`, in their order, with `top_level`
/// without child threads.
pub fn list_rows_of(
    ctx: &Ctx,
    entries: Vec<ListEntry>,
    top_level: bool,
) -> Result<Vec<Value>, CliError> {
    // A thread whose nodes are missing or damaged is listed as
    // broken (with a warning), never the end of the list.
    let mut items = Vec::with_capacity(entries.len());
    let mut reasons = HashMap::new();
    for entry in entries {
        let (id, head) = (entry.thread, entry.head);
        match entry.archived {
            None => match workflow_of(ctx, head) {
                Ok(workflow) => items.push(Listed::Thread(ThreadListItem {
                    thread: id,
                    workflow,
                    head,
                    done: false,
                })),
                Err(e) if e.is_thread_damage() => items.push(Listed::broken(id, head, false, &e)),
                Err(e) => return Err(e),
            },
            Some((workflow, reason)) => {
                if let Some(r) = reason {
                    reasons.insert(id, r);
                }
                items.push(Listed::Thread(ThreadListItem {
                    thread: id,
                    workflow,
                    head,
                    done: true,
                }));
            }
        }
    }
    if top_level {
        let mut kept = Vec::with_capacity(items.len());
        for listed in items {
            let Listed::Thread(item) = &listed else {
                // Whether it is a child thread cannot be told.
                kept.push(listed);
                continue;
            };
            match nested::parent_of(ctx, item.head) {
                Ok(None) => kept.push(listed),
                Ok(Some(_)) => {}
                Err(e) => {
                    let e = CliError::from(e);
                    if !e.is_thread_damage() {
                        return Err(e);
                    }
                    kept.push(Listed::broken(item.thread, item.head, item.done, &e));
                }
            }
        }
        items = kept;
    }
    let mut rows = crate::cmd::story::list_rows(ctx, items, &reasons)?;
    crate::cmd::worker::add_to_list(ctx, &mut rows)?;
    Ok(rows)
}

/// What `uwf thread steps` prints for thread `id`: every step with why it
/// ran, its duration and the attempts that failed before it.
pub fn steps_value(ctx: &Ctx, id: ThreadId) -> Result<Value, CliError> {
    let view = thread::load(ctx.cas(), engine::any_head(ctx, id)?)?;
    let mut v =
        serde_json::to_value(steps(id, &view)).map_err(|e| CliError::Output(e.to_string()))?;
    crate::cmd::story::add_to_steps(ctx, id, &view, &mut v)?;
    Ok(v)
}

/// Runs a `thread` subcommand.
pub fn run(ctx: &Ctx, cmd: ThreadCommand, format: Option<Format>) -> Result<(), CliError> {
    match cmd {
        ThreadCommand::Start {
            workflow,
            prompt,
            parent,
        } => {
            let prompt = prompt_text(&prompt)?;
            output::print(format, &start(ctx, &workflow, &prompt, parent.as_deref())?)
        }
        ThreadCommand::Step { thread, agent } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            let opts = StepOptions {
                agent: agent.agent.as_deref(),
                timeout: agent.timeout,
                cancel: engine::cancel_token().clone(),
                in_process: None,
                resume: false,
            };
            let progress: Arc<dyn Progress> = Arc::new(Plain);
            let stepped = engine::step(ctx, id, &opts, &progress)?;
            if let Some(waiting) = stepped.waiting {
                return waits(ctx, format, stepped.output, waiting);
            }
            output::print(format, &stepped.output)
        }
        ThreadCommand::Resume { thread, agent } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            let progress: Arc<dyn Progress> = Arc::new(Plain);
            let stepped = resume(ctx, id, agent.agent.as_deref(), agent.timeout, &progress)?;
            if let Some(waiting) = stepped.waiting {
                return waits(ctx, format, stepped.output, waiting);
            }
            output::print(format, &stepped.output)
        }
        ThreadCommand::Run {
            workflow,
            prompt,
            thread,
            parent,
            max_steps,
            agent,
            detach,
        } => {
            let id = match (thread, workflow) {
                (Some(t), _) => crate::lookup::thread(ctx, &t)?,
                (None, Some(w)) => match resume_target(ctx, &w, &prompt)? {
                    Some(id) => id,
                    None => {
                        let prompt = prompt_text(&prompt)?;
                        // A run here checks its first agent first; a run
                        // for the queue is checked by the worker that
                        // takes it (its machine, its configuration).
                        let run_with = (!detach).then_some(agent.agent.as_deref());
                        start_for(ctx, &w, &prompt, parent.as_deref(), run_with)?.thread
                    }
                },
                (None, None) => return Err(engine::EngineError::EmptyPrompt.into()),
            };
            if let Some(finished) = finished_run(ctx, id)? {
                return output::print(format, &finished);
            }
            if detach {
                let request = uwf_state::runs::RunRequest {
                    agent: agent.agent.clone(),
                    max_steps: u64::try_from(max_steps).ok(),
                    timeout_ms: agent
                        .timeout
                        .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                };
                return output::print(format, &queue_run(ctx, id, request)?);
            }
            let opts = StepOptions {
                agent: agent.agent.as_deref(),
                timeout: agent.timeout,
                cancel: engine::cancel_token().clone(),
                in_process: None,
                resume: false,
            };
            run_steps(ctx, id, &opts, max_steps, format).map_err(|e| e.in_thread(id))
        }
        ThreadCommand::Next { thread, explain } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            // An archived thread is asked too: its head decides again what
            // it decided last (deterministic), so a finished thread shows
            // the `$END` it ended on and why; `archived` says the thread
            // will not step again.
            let (head, archived) = match engine::status(ctx, id)? {
                engine::Status::Active { head } => (head, None),
                engine::Status::Archived(e) => {
                    (e.head, Some(e.reason.unwrap_or_else(|| "done".into())))
                }
            };
            let view = thread::load(ctx.cas(), head)?;
            let decision = view.decide();
            if !explain {
                let d = decision?;
                let mut v = json!({ "thread": id, "role": d.next, "done": d.is_end() });
                if let Some(p) = d.prompt {
                    v["prompt"] = json!(p);
                }
                if let Some(a) = archived {
                    v["archived"] = json!(a);
                }
                return output::print(format, &v);
            }
            // Explaining is the point even when the moderator cannot decide:
            // the failure is part of the answer, not a failed command.
            let e = uwf_moderator::explain(&view.workflow, &view.context());
            let mut v = json!({ "thread": id });
            match decision {
                Ok(d) => {
                    v["role"] = json!(d.next);
                    v["done"] = json!(d.is_end());
                    if let Some(p) = d.prompt {
                        v["prompt"] = json!(p);
                    }
                }
                Err(err) => {
                    v["role"] = Value::Null;
                    v["done"] = json!(false);
                    v["error"] = json!(err.to_string());
                }
            }
            if let Some(a) = archived {
                v["archived"] = json!(a);
            }
            v["from"] = json!(e.from);
            v["transitions"] = serde_json::to_value(&e.transitions)
                .map_err(|e| CliError::Output(e.to_string()))?;
            output::print(format, &v)
        }
        ThreadCommand::Show { thread } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            output::print(format, &show_value(ctx, id)?)
        }
        ThreadCommand::List { waiting: true, .. } => {
            output::print(format, &engine::human::list(ctx)?)
        }
        ThreadCommand::Answer(args) => {
            let id = crate::lookup::thread(ctx, &args.thread)?;
            let input = match (args.output, args.text) {
                (Some(o), _) => human::AnswerInput::Output(o),
                (None, Some(t)) => human::AnswerInput::Text(t),
                (None, None) => human::AnswerInput::Edit,
            };
            let out = human::answer(ctx, id, args.role.as_deref(), input, args.name.as_deref())?;
            output::print(format, &out)
        }
        ThreadCommand::List { all, top_level, .. } => {
            output::print(format, &list_values(ctx, all, top_level)?)
        }
        ThreadCommand::Stack { node } => {
            output::print(format, &nested::stack(ctx, parse_hash(&node)?)?)
        }
        ThreadCommand::Kill { thread } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            engine::kill(ctx, id)?;
            output::print(format, &json!({ "thread": id, "archived": true }))
        }
        ThreadCommand::Steps { thread } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            output::print(format, &steps_value(ctx, id)?)
        }
        ThreadCommand::Read {
            thread,
            quota,
            before,
        } => {
            if let Some(f @ (Format::Json | Format::Yaml)) = format {
                let name = format!("{f:?}").to_lowercase();
                return Err(CliError::TextOnly {
                    command: "thread read".into(),
                    instead: format!(
                        "`uwf --format {name} thread steps {thread}` prints every step as data"
                    ),
                    format: name,
                });
            }
            let id = crate::lookup::thread(ctx, &thread)?;
            let view = thread::load(ctx.cas(), engine::any_head(ctx, id)?)?;
            let before = before.map(|b| parse_hash(&b)).transpose()?;
            // What each step's agent did (tool calls of its transcript).
            let activity = crate::activity::summaries(ctx.cas(), &view);
            let children: HashMap<Hash, String> = if nested::has_children(&view) {
                let index = ThreadIndex::load(ctx)?;
                let links = nested::child_links(ctx, &view, &index)
                    .iter()
                    .map(|c| (c.link.step, crate::child_view::child_summary(c)))
                    .collect();
                crate::activity::merge(links, activity)
            } else {
                activity
            };
            let contents = crate::read_content::contents(ctx.cas(), &view);
            let notes = crate::cmd::story::read_notes(ctx, id, &view, quota, before);
            // The attempts of the step still to come close the page, inside
            // the quota (a quarter of it at most).
            let pending = match before {
                None => attempts_text(ctx, id, view.head, quota / 4)?,
                Some(_) => String::new(),
            };
            let rest = quota.saturating_sub(pending.chars().count());
            let mut text = read(id, &view, rest, before, &children, &contents, &notes)?;
            text.push_str(&pending);
            output::print_text(&text)
        }
        ThreadCommand::Watch { thread } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            crate::cmd::story::watch(ctx, id)
        }
        ThreadCommand::Log { thread, follow } => {
            let id = crate::lookup::thread(ctx, &thread)?;
            crate::cmd::story::log(ctx, id, follow)
        }
        ThreadCommand::Prune {
            dry_run,
            older_than,
        } => output::print(format, &prune(ctx, dry_run, older_than)?),
        ThreadCommand::Fork { node } => output::print(format, &fork(ctx, parse_hash(&node)?)?),
        ThreadCommand::View { thread, html } => {
            crate::cmd::view::thread(ctx, &thread, html, format)
        }
        ThreadCommand::StepDetails { step } => {
            let hash = parse_hash(&step)?;
            let node = ctx.cas().get(hash)?;
            if node.type_hash != ctx.cas().types().step_node {
                return Err(engine::EngineError::NotAStep {
                    hash: hash.to_string(),
                }
                .into());
            }
            let detail = parse_hash(
                node.payload
                    .get("detail")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            )?;
            let mut visiting = BTreeSet::new();
            let expanded = expand(ctx, detail, &mut visiting, 0)?;
            output::print(
                Some(format.unwrap_or(Format::Yaml)),
                &json!({ "step": hash, "detail": detail, "content": expanded }),
            )
        }
    }
}

/// `thread resume`: one step of suspended thread `id`, from `$START`'s
/// `resume` route (docs/workflow.md, "Suspend and resume"); also `uwf
/// serve`'s resume action.
pub fn resume(
    ctx: &Ctx,
    id: ThreadId,
    agent: Option<&str>,
    timeout: Option<std::time::Duration>,
    progress: &Arc<dyn Progress>,
) -> Result<engine::Stepped, CliError> {
    let opts = StepOptions {
        agent,
        timeout,
        cancel: engine::cancel_token().clone(),
        in_process: None,
        resume: true,
    };
    Ok(engine::step(ctx, id, &opts, progress)?)
}

/// `thread fork <node>`: a new thread whose head is `node` (also `uwf
/// serve`'s fork action).
pub fn fork(ctx: &Ctx, node: Hash) -> Result<ThreadForkOutput, CliError> {
    let forked = engine::fork(ctx, node)?;
    Ok(ThreadForkOutput {
        thread: forked.thread,
        forked_from: ForkedFrom { step: node },
    })
}

/// `thread run` on a thread that is archived already: run to the end and
/// it is there (an answer finished it, another run did), so its final
/// state, as a run that got there prints it; a killed or pruned thread is
/// refused. `None` while the thread is active (also what `uwf serve`'s run
/// action answers).
pub fn finished_run(ctx: &Ctx, id: ThreadId) -> Result<Option<StepOutput>, CliError> {
    let Status::Archived(e) = engine::status(ctx, id)? else {
        return Ok(None);
    };
    if e.reason.as_deref().unwrap_or("done") != "done" {
        return Err(engine::EngineError::ThreadFinished { thread: id }.into());
    }
    Ok(Some(StepOutput {
        workflow: e.workflow,
        thread: id,
        head: e.head,
        done: true,
    }))
}

/// `thread run --detach` on active thread `id`: queued for a worker
/// (also `uwf serve`'s run action).
pub fn queue_run(
    ctx: &Ctx,
    id: ThreadId,
    request: uwf_state::runs::RunRequest,
) -> Result<Value, CliError> {
    let workflow = workflow_of(ctx, engine::active_head(ctx, id)?)?;
    crate::cmd::worker::detach(ctx, id, workflow, request).map_err(|e| e.in_thread(id))
}

/// The steps of `thread run` on thread `id`, until it is done, waits, fails
/// or has run `max_steps` steps. Only a finished thread or a wait prints
/// anything on stdout.
fn run_steps(
    ctx: &Ctx,
    id: ThreadId,
    opts: &StepOptions<'_>,
    max_steps: usize,
    format: Option<Format>,
) -> Result<(), CliError> {
    let live = Arc::new(Live::new(id));
    let progress: Arc<dyn Progress> = live.clone();
    for _ in 0..max_steps {
        let stepped = engine::step(ctx, id, opts, &progress)?;
        if let Some(waiting) = stepped.waiting {
            return waits(ctx, format, stepped.output, waiting);
        }
        if stepped.output.done {
            live.done();
            return output::print(format, &stepped.output);
        }
    }
    Err(CliError::MaxSteps {
        thread: id,
        steps: max_steps,
    })
}

/// `thread run <arg>` continues a thread when `arg` is not a workflow (a
/// file, a registered name, a Workflow node) but names a known thread.
fn resume_target(ctx: &Ctx, arg: &str, prompt: &PromptArgs) -> Result<Option<ThreadId>, CliError> {
    let looks_like_thread = arg == crate::lookup::LAST || engine::thread_id(arg).is_ok();
    let is_workflow = !looks_like_thread
        && (std::path::Path::new(arg).exists() || ctx.state().registry()?.contains_key(arg));
    if is_workflow {
        return Ok(None);
    }
    let Some(id) = crate::lookup::known_thread(ctx, arg) else {
        return Ok(None);
    };
    if !looks_like_thread
        && let Ok(hash) = arg.parse::<Hash>()
        && ctx
            .cas()
            .try_get(hash)?
            .is_some_and(|n| n.type_hash == ctx.cas().types().workflow)
    {
        return Ok(None);
    }
    if prompt.prompt.is_some() || prompt.prompt_file.is_some() {
        return Err(CliError::PromptOnResume { thread: id });
    }
    Ok(Some(id))
}

/// The task from `-p TEXT`, `-p -` (stdin) or `--prompt-file FILE|-`.
fn prompt_text(p: &PromptArgs) -> Result<String, CliError> {
    let text = match (&p.prompt, &p.prompt_file) {
        (Some(t), _) if t == "-" => crate::input::read_text("-")?,
        (Some(t), _) => t.clone(),
        (None, Some(f)) => crate::input::read_text(&f.to_string_lossy())?,
        (None, None) => {
            // A usage error, reported as clap reports a missing argument
            // (exit status 2); nothing has been written yet.
            use clap::CommandFactory;
            crate::cli::Cli::command()
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "a new thread needs its task: --prompt <PROMPT>, --prompt - (stdin) or --prompt-file <FILE>",
                )
                .exit()
        }
    };
    // A file or a pipe ends its last line; the task does not.
    Ok(text.trim_end_matches(['\n', '\r']).to_string())
}

/// `thread prune`: archives the active threads whose head is their
/// StartNode, that wait for nobody and are older than `older_than`.
fn prune(
    ctx: &Ctx,
    dry_run: bool,
    older_than: std::time::Duration,
) -> Result<Vec<Value>, CliError> {
    let now = uwf_state::state::now_ms();
    let min_age = u64::try_from(older_than.as_millis()).unwrap_or(u64::MAX);
    let mut pruned = Vec::new();
    for (id, head) in ctx.state().threads()? {
        // A broken thread is not archived: nothing about it can be told
        // (docs/state.md, "Thread commands").
        let node = match ctx.cas().get(head) {
            Ok(node) => node,
            Err(e) => {
                let e = CliError::from(e);
                if !e.is_thread_damage() {
                    return Err(e);
                }
                crate::cmd::story::warn_broken(id, &e);
                continue;
            }
        };
        if node.type_hash != ctx.cas().types().start_node {
            continue;
        }
        let age = now.saturating_sub(node.timestamp);
        if age < min_age
            || ctx.state().waiting_of(id)?.is_some()
            || crate::cmd::story::running_now(ctx, id).is_some()
        {
            continue;
        }
        let Some(workflow) = node
            .payload
            .get("workflow")
            .and_then(Value::as_str)
            .and_then(|w| w.parse::<Hash>().ok())
        else {
            continue;
        };
        if !dry_run {
            match ctx.state().archive(id, workflow, Some(head), "pruned") {
                Ok(_) => {}
                // It took a step (or was archived) meanwhile: not ours to prune.
                Err(uwf_state::StateError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        pruned.push(json!({
            "thread": id,
            "workflow": workflow,
            "prompt": node.payload.get("prompt").cloned().unwrap_or(Value::Null),
            "age": humantime::format_duration(std::time::Duration::from_secs(age / 1000)).to_string(),
        }));
    }
    Ok(pruned)
}

fn steps(id: ThreadId, view: &ThreadView) -> ThreadStepsOutput {
    let mut entries = vec![ThreadStepsEntry::Start(StartEntry {
        hash: view.start_hash,
        workflow: view.workflow_hash,
        prompt: view.start.prompt.clone(),
        timestamp: view.start_timestamp,
    })];
    entries.extend(view.steps.iter().map(|s| {
        ThreadStepsEntry::Step(StepEntry {
            hash: s.hash,
            role: s.payload.record.role.clone(),
            output: s.output.clone(),
            detail: s.payload.record.detail,
            agent: s.payload.record.agent.clone(),
            timestamp: s.timestamp,
        })
    }));
    ThreadStepsOutput {
        thread: id,
        workflow: view.workflow_hash,
        steps: entries,
    }
}

/// A node's payload with every reference replaced by the referenced node's
/// expanded payload (cycle-safe, depth-limited).
fn expand(
    ctx: &Ctx,
    hash: Hash,
    visiting: &mut BTreeSet<Hash>,
    depth: usize,
) -> Result<Value, CliError> {
    let node = ctx.cas().get(hash)?;
    if depth >= 16 || !visiting.insert(hash) {
        return Ok(Value::String(hash.to_string()));
    }
    let mut payload = node.payload.clone();
    for r in ctx.cas().refs_of(&node)? {
        let child = match ctx.cas().try_get(r.hash)? {
            Some(_) => expand(ctx, r.hash, visiting, depth + 1)?,
            None => continue,
        };
        if let Some(slot) = payload.pointer_mut(&r.path) {
            *slot = child;
        }
    }
    visiting.remove(&hash);
    Ok(payload)
}

/// Renders a thread as markdown: the task, then the newest steps that fit
/// in `quota` characters, with a pointer to the earlier ones. A step done by
/// a child thread carries the child's collapsible summary from `children`
/// (by StepNode).
///
/// The quota bounds the whole text (heading, task, pointer, each role's
/// prompt and every step), counted in characters as upstream counted it:
/// the newest step is always shown, cut to what is left, but never to less
/// than its heading line.
fn read(
    id: ThreadId,
    view: &ThreadView,
    quota: usize,
    before: Option<Hash>,
    children: &HashMap<Hash, String>,
    contents: &HashMap<Hash, String>,
    notes: &HashMap<Hash, String>,
) -> Result<String, CliError> {
    let mut steps: Vec<(usize, &uwf_moderator::thread::LoadedStep)> =
        view.steps.iter().enumerate().collect();
    if let Some(b) = before {
        let Some(pos) = steps.iter().position(|(_, s)| s.hash == b) else {
            return Err(engine::EngineError::NotAStep {
                hash: format!("{b} (in thread {id})"),
            }
            .into());
        };
        steps.truncate(pos);
    }
    let block_of = |i: usize, s: &uwf_moderator::thread::LoadedStep| {
        let body = serde_yaml::to_string(&s.output).unwrap_or_else(|_| s.output.to_string());
        let mut block = format!(
            "## Step {} · {} ({})\n\n`{}` · detail `{}`\n\n```yaml\n{}```\n",
            i + 1,
            s.payload.record.role,
            s.payload.record.agent,
            s.hash,
            s.payload.record.detail,
            body
        );
        if let Some(note) = notes.get(&s.hash) {
            block.push('\n');
            block.push_str(note);
        }
        if let Some(content) = contents.get(&s.hash) {
            let _ = write!(block, "\n### Content\n\n{}\n", content.trim_end());
        }
        if let Some(summary) = children.get(&s.hash) {
            block.push('\n');
            block.push_str(summary);
        }
        block
    };
    // Each role's prompt once, at its first step shown (upstream's
    // `<prompt>`), after the step's heading line.
    let prompt_of = |role: &str| {
        view.workflow
            .roles
            .get(role)
            .map(|def| def.system_prompt.trim_end())
            .filter(|p| !p.trim().is_empty())
    };

    let mut head = String::new();
    let _ = writeln!(head, "# Thread {id} · {}\n", view.workflow.name);
    let _ = writeln!(head, "**Task:** {}\n", view.start.prompt);
    if let Some(parent) = &view.start.parent_state {
        let _ = writeln!(
            head,
            "> A child thread: started from `{parent}` of its calling thread. `uwf thread stack {}` shows the call stack.\n",
            view.start_hash
        );
    }
    let pointer = |earlier: usize, oldest_shown: Hash| {
        format!(
            "> {earlier} earlier step(s) not shown. Read them with `uwf thread read {id} --before {oldest_shown}`.\n\n"
        )
    };

    // Newest first, as many steps as fit: first without the pointer to
    // earlier steps; when not all fit, again with room for it (counted with
    // the most earlier steps there can be, so the real one is not longer).
    let chars = |s: &str| s.chars().count();
    let mut selection = select(&steps, quota, chars(&head), &block_of, &prompt_of);
    if selection.blocks.len() < steps.len() {
        let reserve = match steps.first() {
            Some((_, s)) => chars(&pointer(steps.len(), s.hash)),
            None => 0,
        };
        selection = select(&steps, quota, chars(&head) + reserve, &block_of, &prompt_of);
    }
    let Selection { mut blocks, used } = selection;
    blocks.reverse();

    let mut out = head;
    let shown = blocks.len();
    let earlier = steps.len() - shown;
    if earlier > 0 {
        out.push_str(&pointer(earlier, steps[earlier].1.hash));
    }
    let mut prompted = BTreeSet::new();
    let cut = shown == 1 && used > quota;
    for (role, b) in blocks {
        let mut block = match prompt_of(role) {
            Some(p) if prompted.insert(role) => with_prompt(&b, role, p),
            _ => b,
        };
        if cut {
            block = cut_block(&block, quota.saturating_sub(chars(&out)), quota);
        }
        out.push_str(&block);
        out.push('\n');
    }
    if steps.is_empty() {
        out.push_str("_No steps yet._\n");
    }
    Ok(out)
}

/// The steps [`read`] shows, newest first, with their roles, and the
/// characters they take with the text before them (`used` exceeds the
/// quota only when the newest step alone does not fit).
struct Selection<'a> {
    blocks: Vec<(&'a str, String)>,
    used: usize,
}

fn select<'a>(
    steps: &[(usize, &'a uwf_moderator::thread::LoadedStep)],
    quota: usize,
    mut used: usize,
    block_of: &dyn Fn(usize, &uwf_moderator::thread::LoadedStep) -> String,
    prompt_of: &dyn Fn(&str) -> Option<&'a str>,
) -> Selection<'a> {
    let mut blocks = Vec::new();
    let mut roles = BTreeSet::new();
    for (i, s) in steps.iter().rev() {
        let role = s.payload.record.role.as_str();
        let block = block_of(*i, s);
        let mut cost = block.chars().count() + 1;
        // A role's prompt is shown once, whichever of its steps ends up the
        // first shown: count it at its newest step.
        if let Some(p) = prompt_of(role).filter(|_| !roles.contains(role)) {
            cost += with_prompt(&block, role, p).chars().count() - block.chars().count();
        }
        if used + cost > quota && !blocks.is_empty() {
            break;
        }
        roles.insert(role);
        used += cost;
        blocks.push((role, block));
        if used > quota {
            break;
        }
    }
    Selection { blocks, used }
}

/// `block` with the role's prompt after its heading line.
fn with_prompt(block: &str, role: &str, prompt: &str) -> String {
    let (heading, rest) = block.split_once('\n').unwrap_or((block, ""));
    format!("{heading}\n\n<prompt role=\"{role}\">\n{prompt}\n</prompt>\n{rest}")
}

/// The newest step cut to `room` characters with a note saying so; never
/// shorter than its heading line.
fn cut_block(block: &str, room: usize, quota: usize) -> String {
    let note = format!("\n… (cut at --quota {quota})");
    let heading = block.split_once('\n').map_or(block, |(h, _)| h);
    let keep = room
        .saturating_sub(note.chars().count() + 1)
        .max(heading.chars().count());
    let cut: String = block.chars().take(keep).collect();
    format!("{cut}{note}")
}

/// How many failed attempts `thread show` and `thread read` list.
const ATTEMPTS_SHOWN: usize = 20;

/// Prints a step's wait and returns the `uwf::thread::waiting` error (exit
/// status 4) that tells whom to answer.
fn waits(
    ctx: &Ctx,
    format: Option<Format>,
    head: StepOutput,
    waiting: uwf_protocol::WaitingRecord,
) -> Result<(), CliError> {
    let thread = head.thread;
    if waiting.role == uwf_moderator::SUSPEND {
        let prompt = waiting.prompt.clone();
        output::print(format, &uwf_protocol::WaitingOutput { head, waiting })?;
        return Err(CliError::Suspended { thread, prompt });
    }
    let answer = engine::human::innermost(ctx, thread, &waiting)?;
    let (role, agent) = (waiting.role.clone(), waiting.agent.clone());
    output::print(format, &uwf_protocol::WaitingOutput { head, waiting })?;
    Err(CliError::Waiting {
        thread,
        role,
        agent,
        answer,
    })
}

/// `thread show`'s `waiting` (what the thread waits for now) and
/// `attempts` (its failed attempts, newest first), when there are any.
fn add_waiting_and_attempts(ctx: &Ctx, id: ThreadId, v: &mut Value) -> Result<(), CliError> {
    if let Some(w) = engine::human::show(ctx, id)? {
        v["waiting"] = w;
    }
    let attempts: Vec<uwf_protocol::AttemptSummary> =
        engine::retry::attempts(ctx, id, ATTEMPTS_SHOWN)?
            .into_iter()
            .map(|(hash, r)| uwf_protocol::AttemptSummary {
                hash,
                role: r.role,
                attempt: r.attempt,
                agent: r.agent,
                reason: r.reason,
                head: r.head,
            })
            .collect();
    if !attempts.is_empty() {
        v["attempts"] =
            serde_json::to_value(attempts).map_err(|e| CliError::Output(e.to_string()))?;
    }
    Ok(())
}

/// The failed attempts section of `thread read` ("" when there are none),
/// in at most `budget` characters: the newest attempts that fit, and how
/// many older ones `thread show` lists.
fn attempts_text(ctx: &Ctx, id: ThreadId, head: Hash, budget: usize) -> Result<String, CliError> {
    // The attempts before a landed step are shown beside it
    // (`read_notes`); these are the ones of the step still to come.
    let attempts: Vec<_> = engine::retry::attempts(ctx, id, ATTEMPTS_SHOWN)?
        .into_iter()
        .filter(|(_, r)| r.head == head)
        .collect();
    if attempts.is_empty() {
        return Ok(String::new());
    }
    let head_line = "## Failed attempts of the next step (newest first)\n\n";
    let foot = "\n`uwf cas get <hash>` shows a record with the agent's stderr tail.\n";
    let mut lines = Vec::new();
    let mut used = head_line.chars().count() + foot.chars().count();
    for (hash, r) in &attempts {
        let line = format!(
            "- `{hash}` · {} attempt {} · {} {} ({} ms) · from `{}`\n",
            r.role, r.attempt, r.agent, r.reason, r.duration_ms, r.head
        );
        // Room kept for the line saying how many were left out.
        if used + line.chars().count() + 80 > budget {
            break;
        }
        used += line.chars().count();
        lines.push(line);
    }
    let left = attempts.len() - lines.len();
    if lines.is_empty() && left > 0 && used + 80 > budget {
        return Ok(String::new());
    }
    let mut out = String::from(head_line);
    for line in &lines {
        out.push_str(line);
    }
    if left > 0 {
        let _ = writeln!(
            out,
            "- … and {left} older (`uwf thread show {id}` lists them)"
        );
    }
    out.push_str(foot);
    Ok(out)
}
