//! `uwf workflow …`

use std::path::Path;

use serde_json::{Value, json};
use uwf_cas::{Cas, Hash, MemStore};
use uwf_engine::replay::{Replayed, Selection, Target, ThreadResult};
use uwf_moderator::definition::{self, WorkflowDefinition};
use uwf_moderator::replay::Outcome;
use uwf_protocol::WorkflowPayload;

use crate::cli::{Format, ReplayArgs, WorkflowCommand};
use crate::engine::Ctx;
use crate::error::CliError;
use crate::output;

/// Reads and parses a workflow file: the definition and the text (to place
/// validation findings in it).
fn read_definition(path: &Path) -> Result<(WorkflowDefinition, String), CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Read {
        path: path.into(),
        source,
    })?;
    let def = definition::parse_yaml(&text, &path.display().to_string())?;
    Ok((def, text))
}

/// Registers `def` in `cas`; validation findings are placed in `text`.
fn register_located<S: uwf_cas::Store>(
    cas: &Cas<S>,
    def: &WorkflowDefinition,
    text: &str,
    path: &Path,
) -> Result<definition::Registered, CliError> {
    definition::register(cas, def).map_err(|e| match e {
        definition::RegisterError::Invalid(mut report) => {
            report.locate(text, &path.display().to_string());
            CliError::Register(definition::RegisterError::Invalid(report))
        }
        other => other.into(),
    })
}

fn warn(warnings: &[definition::Finding]) {
    for w in warnings {
        eprintln!("warning {w}");
    }
}

/// Registers a workflow file and records its name: (name, hash, payload).
pub fn put_file(ctx: &Ctx, path: &Path) -> Result<(Hash, WorkflowPayload), CliError> {
    let (def, text) = read_definition(path)?;
    // Bad input changes nothing: compile in memory first, so a schema the
    // CAS refuses does not leave the roles before it stored, and make sure
    // registry.yaml can be updated before writing any node.
    register_located(&Cas::new(MemStore::new())?, &def, &text, path)?;
    ctx.state().registry()?;
    // Read before the nodes are stored: gc may run meanwhile (uwf_engine::keep).
    let epoch = ctx.state().gc_epoch()?;
    let registered = definition::register(ctx.cas(), &def)?;
    let mut located = definition::Report {
        errors: Vec::new(),
        warnings: registered.warnings.clone(),
    };
    located.locate(&text, &path.display().to_string());
    warn(&located.warnings);
    uwf_engine::keep::guarded(ctx.cas(), Some(epoch), registered.hash, &[], |guard| {
        ctx.state()
            .register_workflow(&registered.payload.name, registered.hash, guard)
    })?;
    Ok((registered.hash, registered.payload))
}

/// Resolves a workflow argument: a YAML file (registered when `register`),
/// a registered name, or a Workflow node hash.
pub fn resolve(ctx: &Ctx, arg: &str, register: bool) -> Result<(Hash, WorkflowPayload), CliError> {
    let path = Path::new(arg);
    if path.is_file() {
        if register {
            return put_file(ctx, path);
        }
        // Compile in memory only: nothing is written for a file we only look at.
        let mem = Cas::new(MemStore::new())?;
        let (def, text) = read_definition(path)?;
        let r = register_located(&mem, &def, &text, path)?;
        return Ok((r.hash, r.payload));
    }
    let registry = ctx.state().registry()?;
    if looks_like_path(arg) && !registry.contains_key(arg) {
        return Err(CliError::NoSuchWorkflowFile {
            path: arg.to_string(),
            known: registry.keys().cloned().collect(),
        });
    }
    let hash = match registry.get(arg) {
        Some(h) => *h,
        None => match arg.parse::<Hash>() {
            Ok(h) => h,
            Err(_) => {
                return Err(CliError::UnknownWorkflow {
                    name: arg.to_string(),
                    known: registry.keys().cloned().collect(),
                });
            }
        },
    };
    let node = match ctx.cas().try_get(hash)? {
        Some(n) => n,
        None if registry.contains_key(arg) => return Err(uwf_cas::CasError::NotFound(hash).into()),
        None => {
            return Err(CliError::UnknownWorkflow {
                name: arg.to_string(),
                known: registry.keys().cloned().collect(),
            });
        }
    };
    if node.type_hash != ctx.cas().types().workflow {
        return Err(CliError::NotAWorkflow(hash.to_string()));
    }
    let payload = serde_json::from_value(node.payload)
        .map_err(|_| CliError::NotAWorkflow(hash.to_string()))?;
    Ok((hash, payload))
}

/// A workflow with an in-memory store holding its output schemas (a file
/// compiled without registering it, or a registered workflow's schemas
/// copied), for `replay` and `diff`: nothing is written to the store.
pub struct WithSchemas {
    /// The Workflow node's hash (what `put` would store for a file).
    pub hash: Hash,
    /// The workflow.
    pub payload: WorkflowPayload,
    /// Its output schemas.
    pub schemas: Cas<MemStore>,
}

impl WithSchemas {
    /// The JSON Schema of an output-schema hash, if this workflow has it.
    pub fn schema(&self, hash: Hash) -> Option<Value> {
        self.schemas.schema(hash).ok()
    }
}

/// [`resolve`] without registering, keeping the output schemas.
pub fn resolve_with_schemas(ctx: &Ctx, arg: &str) -> Result<WithSchemas, CliError> {
    let schemas = Cas::new(MemStore::new())?;
    let path = Path::new(arg);
    if path.is_file() {
        let (def, text) = read_definition(path)?;
        let r = register_located(&schemas, &def, &text, path)?;
        return Ok(WithSchemas {
            hash: r.hash,
            payload: r.payload,
            schemas,
        });
    }
    let (hash, payload) = resolve(ctx, arg, false)?;
    for role in payload.roles.values() {
        // Stored again unchanged, the schema keeps its hash.
        schemas.put_schema(ctx.cas().schema(role.output_schema)?)?;
    }
    Ok(WithSchemas {
        hash,
        payload,
        schemas,
    })
}

/// `workflow replay`.
fn replay(
    ctx: &Ctx,
    args: ReplayArgs,
    format: Option<Format>,
    quiet: bool,
) -> Result<(), CliError> {
    let new = resolve_with_schemas(ctx, &args.workflow)?;
    let selection = if !args.threads.is_empty() {
        let ids = args
            .threads
            .iter()
            .map(|t| crate::lookup::thread(ctx, t))
            .collect::<Result<Vec<_>, _>>()?;
        Selection::Threads(ids)
    } else if args.all {
        Selection::All
    } else {
        Selection::Workflow(args.of.unwrap_or_else(|| new.payload.name.clone()))
    };
    let check = |schema: Hash, output: &Value| {
        new.schemas
            .validate(schema, output)
            .map_err(|e| e.to_string())
    };
    let target = Target {
        workflow: &new.payload,
        check: &check,
    };
    let replayed = uwf_engine::replay::replay(ctx, &target, &selection, args.since)?;
    let shown: Vec<&ThreadResult> = notable(&replayed);
    output::print(
        format,
        &json!({
            "workflow": { "name": new.payload.name, "hash": new.hash },
            "summary": replayed.summary,
            "threads": shown,
            "unreadable": replayed.unreadable,
        }),
    )?;
    if !quiet {
        eprint!("{}", replay_text(&new.payload.name, new.hash, &replayed));
    }
    let s = &replayed.summary;
    if args.fail_on_divergence && s.diverged + s.invalid > 0 {
        return Err(CliError::Diverged {
            diverged: s.diverged,
            invalid: s.invalid,
        });
    }
    Ok(())
}

/// The threads a replay shows: those that do not route plainly the same.
fn notable(r: &Replayed) -> Vec<&ThreadResult> {
    r.threads
        .iter()
        .filter(|t| t.replay.outcome != Outcome::Same || !t.replay.prompts.is_empty())
        .collect()
}

/// `value` of a condition as people read it: `undefined` when absent.
fn value_text(t: &uwf_moderator::TransitionReport) -> String {
    match (&t.error, &t.value) {
        (Some(e), _) => format!("error: {}", crate::summary::shorten(e, 40)),
        (None, Some(v)) => crate::summary::shorten(&v.to_string(), 30),
        (None, None) => "undefined".into(),
    }
}

/// One side of a divergence in words: "developer (#1, `notApproved` = true)".
fn side_text(s: &uwf_moderator::replay::Side) -> String {
    let Some(role) = &s.role else {
        return format!(
            "(cannot decide: {})",
            crate::summary::shorten(s.error.as_deref().unwrap_or(""), 60)
        );
    };
    let Some(n) = s.transition else {
        return role.clone();
    };
    // The conditions tried up to the one taken, with their values.
    let values: Vec<String> = s
        .transitions
        .iter()
        .take(n)
        .filter_map(|t| Some(format!("`{}` = {}", t.condition.as_ref()?, value_text(t))))
        .collect();
    if values.is_empty() {
        format!("{role} (#{n}, unconditional)")
    } else {
        format!("{role} (#{n}; {})", values.join(", "))
    }
}

/// The replay for people: counts, where threads diverge, and a row per
/// thread that does not route plainly the same.
fn replay_text(name: &str, hash: Hash, r: &Replayed) -> String {
    use std::fmt::Write as _;
    let s = &r.summary;
    let mut out = format!(
        "replay under {name} ({hash}): {} thread(s): {} same, {} diverge, {} invalid, {} unreadable; {} with changed prompts\n",
        s.threads, s.same, s.diverged, s.invalid, s.unreadable, s.prompt_changed
    );
    if !s.edges.is_empty() {
        out.push_str("\nwhere they diverge:\n");
        let _ = writeln!(
            out,
            "  {:>7}  {:<16} {:<16} now",
            "threads", "after", "recorded"
        );
        for e in &s.edges {
            let _ = writeln!(
                out,
                "  {:>7}  {:<16} {:<16} {}",
                e.threads,
                e.from,
                e.old.as_deref().unwrap_or("(no decision)"),
                e.new.as_deref().unwrap_or("(no decision)")
            );
        }
    }
    let rows = notable(r);
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<26}  {:<7} {:>5}  {:<8} {:>4}  what",
            "thread", "state", "steps", "outcome", "step"
        );
    }
    for t in rows {
        let (outcome, step, what) = match (&t.replay.divergence, &t.replay.invalid) {
            (Some(d), _) => (
                "diverged",
                d.step,
                format!(
                    "after {}: {} → now {}",
                    d.from,
                    side_text(&d.old),
                    side_text(&d.new)
                ),
            ),
            (None, Some(i)) => (
                "invalid",
                i.step,
                format!(
                    "{}'s output refused: {}",
                    i.role,
                    crate::summary::shorten(&i.reason, 70)
                ),
            ),
            (None, None) => {
                let p = &t.replay.prompts[0];
                (
                    "same",
                    p.step,
                    format!(
                        "prompt of {} changes ({} step(s))",
                        p.role,
                        t.replay.prompts.len()
                    ),
                )
            }
        };
        let _ = writeln!(
            out,
            "{:<26}  {:<7} {:>5}  {:<8} {:>4}  {what}",
            t.thread.to_string(),
            t.state,
            t.replay.steps,
            outcome,
            step
        );
    }
    for u in &r.unreadable {
        let _ = writeln!(out, "{:<26}  unreadable: {}", u.thread.to_string(), u.error);
    }
    out
}

/// `workflow diff`: the structural change, and its sentences on stderr.
fn diff(
    ctx: &Ctx,
    old: &str,
    new: &str,
    format: Option<Format>,
    quiet: bool,
) -> Result<(), CliError> {
    let a = resolve_with_schemas(ctx, old)?;
    let b = resolve_with_schemas(ctx, new)?;
    let schema_of = |h: Hash| a.schema(h).or_else(|| b.schema(h));
    let d = uwf_moderator::diff::diff(&a.payload, &b.payload, &schema_of);
    output::print(
        format,
        &json!({
            "old": { "name": a.payload.name, "hash": a.hash },
            "new": { "name": b.payload.name, "hash": b.hash },
            "same": d.same,
            "changes": d.changes,
        }),
    )?;
    if !quiet {
        if d.same {
            eprintln!("{} and {} are the same workflow", a.hash, b.hash);
        }
        for c in &d.changes {
            eprintln!("{}", c.text);
            for detail in &c.details {
                eprintln!("  - {detail}");
            }
        }
    }
    Ok(())
}

/// Whether a workflow argument is meant as a file: it has a path separator
/// or a YAML/JSON extension (workflow names and hashes have neither).
pub fn looks_like_path(arg: &str) -> bool {
    let lower = arg.to_ascii_lowercase();
    arg.contains('/')
        || arg.contains(std::path::MAIN_SEPARATOR)
        || [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| lower.ends_with(ext))
}

/// `workflow schema`: the JSON Schema of the workflow YAML.
pub fn print_schema(format: Option<Format>) -> Result<(), CliError> {
    let schema: Value = serde_json::from_str(definition::WORKFLOW_SCHEMA)
        .map_err(|e| CliError::Output(e.to_string()))?;
    output::print(format, &schema)
}

/// Runs a `workflow` subcommand.
pub fn run(
    ctx: &Ctx,
    cmd: WorkflowCommand,
    format: Option<Format>,
    quiet: bool,
) -> Result<(), CliError> {
    match cmd {
        WorkflowCommand::Replay(args) => replay(ctx, args, format, quiet),
        WorkflowCommand::Diff { old, new } => diff(ctx, &old, &new, format, quiet),
        WorkflowCommand::Put { file } => {
            let (hash, payload) = put_file(ctx, &file)?;
            output::print(format, &json!({ "name": payload.name, "hash": hash }))
        }
        WorkflowCommand::Validate { file } => {
            let (def, text) = read_definition(&file)?;
            let mut report = definition::validate(&def);
            report.locate(&text, &file.display().to_string());
            let errors = report.errors.len();
            output::print(
                format,
                &json!({ "name": def.name, "valid": errors == 0, "errors": report.errors, "warnings": report.warnings }),
            )?;
            if errors > 0 {
                Err(CliError::InvalidWorkflow(errors))
            } else {
                Ok(())
            }
        }
        WorkflowCommand::Show { workflow } => {
            let (hash, payload) = resolve(ctx, &workflow, false)?;
            let Some(node) = ctx.cas().try_get(hash)? else {
                // A file that is not registered: show what `put` would store.
                let payload_json =
                    serde_json::to_value(&payload).map_err(|e| CliError::Output(e.to_string()))?;
                return output::print(
                    format,
                    &json!({ "hash": hash, "name": payload.name, "type": ctx.cas().types().workflow, "payload": payload_json, "timestamp": null, "registered": false }),
                );
            };
            output::print(
                format,
                &json!({ "hash": hash, "name": payload.name, "type": node.type_hash, "payload": node.payload, "timestamp": node.timestamp }),
            )
        }
        WorkflowCommand::Schema => print_schema(format),
        WorkflowCommand::List => {
            let list: Vec<Value> = ctx
                .state()
                .registry()?
                .into_iter()
                .map(|(name, hash)| json!({ "name": name, "hash": hash }))
                .collect();
            output::print(format, &list)
        }
        WorkflowCommand::Graph {
            thread: Some(thread),
            ..
        } => crate::cmd::view::graph(ctx, &thread, format),
        WorkflowCommand::Graph { workflow, .. } => {
            let (_, payload) = resolve(ctx, workflow.as_deref().unwrap_or_default(), false)?;
            match format.unwrap_or(Format::Mermaid) {
                Format::Mermaid => output::print_text(&uwf_moderator::diagram::mermaid(&payload)),
                Format::Dot => output::print_text(&uwf_moderator::diagram::dot(&payload)),
                other => output::print(
                    Some(other),
                    &json!({ "name": payload.name, "graph": payload.graph, "conditions": payload.conditions }),
                ),
            }
        }
    }
}
