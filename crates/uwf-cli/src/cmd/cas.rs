//! `uwf cas …`

use serde::Serialize;
use serde_json::{Value, json};
use uwf_cas::{Cas, GcOptions, Hash};
use uwf_state::ThreadStore;

use crate::cli::{CasCommand, SchemaCommand};
use crate::engine::{Ctx, verify};
use crate::error::CliError;
use crate::input::read_json;

/// What a `cas` command produced.
pub enum Outcome {
    /// Print this and exit 0.
    Value(Value),
    /// Print this report, then fail with this error.
    Failed(Value, CliError),
}

fn to_value<T: Serialize>(v: T) -> Result<Value, CliError> {
    serde_json::to_value(v).map_err(|e| CliError::Output(e.to_string()))
}

fn parse_hash(s: &str) -> Result<Hash, CliError> {
    s.parse::<Hash>().map_err(CliError::from)
}

/// Deletes every entry of the store that is not a node; returns them.
fn remove_all_strays(cas: &Cas) -> Result<Vec<uwf_cas::Stray>, CliError> {
    // List first, then delete: no backend has to delete under a listing.
    let strays = cas.store().strays().collect::<Result<Vec<_>, _>>()?;
    let mut removed = Vec::new();
    for stray in strays {
        if cas.store().remove_stray(&stray.id)? {
            removed.push(stray);
        }
    }
    Ok(removed)
}

/// `cas verify`: the nodes ([`Cas::verify`]), then the roots of the
/// store's state ([`verify::roots`]): `{nodes, roots, issues}`, where a
/// root that names a missing or mistyped node is an issue of kind
/// `brokenRoot` (docs/cas.md §8).
fn verify(ctx: &Ctx, remove_strays: bool) -> Result<Outcome, CliError> {
    let cas = ctx.cas();
    let removed = if remove_strays {
        remove_all_strays(cas)?
    } else {
        Vec::new()
    };
    let report = cas.verify()?;
    let roots = verify::roots(ctx)?;
    let broken_roots = roots.issues.len();
    let mut issues = Vec::with_capacity(report.issues.len() + broken_roots);
    for issue in &report.issues {
        issues.push(to_value(issue)?);
    }
    for issue in roots.issues {
        issues.push(to_value(issue)?);
    }
    let mut v = json!({ "nodes": report.nodes, "roots": roots.roots, "issues": issues });
    if remove_strays {
        v["removedStrays"] = to_value(removed)?;
    }
    let problems = report.issues.len() + broken_roots;
    Ok(if problems == 0 {
        Outcome::Value(v)
    } else {
        Outcome::Failed(
            v,
            CliError::VerifyFailed {
                problems,
                broken_roots,
            },
        )
    })
}

/// Runs a `cas` subcommand against an opened store.
pub fn run(ctx: &Ctx, cmd: CasCommand) -> Result<Outcome, CliError> {
    let (cas, state): (&Cas, &dyn ThreadStore) = (ctx.cas(), ctx.state());
    let value = match cmd {
        CasCommand::Gc { dry_run, grace } => {
            let opts = GcOptions {
                dry_run,
                grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            };
            let mut report = None;
            let mut failure: Option<CliError> = None;
            let sweep = || -> Result<_, CliError> {
                let mut roots: Vec<Hash> = state.threads()?.into_values().collect();
                roots.extend(state.history()?.into_iter().map(|e| e.head));
                roots.extend(state.registry()?.into_values());
                // Failed attempts of active threads (the entries of threads
                // that are gone are dropped here, so their records go too).
                roots.extend(state.side_table_roots_locked(!dry_run)?);
                // Stored suite results (docs/eval.md): kept like threads.
                roots.extend(uwf_engine::suite::stored_runs(cas)?);
                // Runs queued with `suite run --detach`, judged or not.
                roots.extend(uwf_engine::suite::queued_runs(cas)?);
                let plan = cas.gc_plan(roots, opts)?;
                if !plan.dry_run() && !plan.stale().is_empty() {
                    // Before the first removal: writers now check their nodes.
                    state.begin_sweep()?;
                }
                Ok(cas.gc_sweep(plan)?)
            };
            // Under the store lock, with the collection epoch odd: no root
            // changes while we sweep, and a writer whose nodes were stored
            // meanwhile checks them before it installs a root
            // (docs/state.md, "Garbage collection").
            let mut sweep = Some(sweep);
            state.while_collecting(&mut || {
                if let Some(f) = sweep.take() {
                    match f() {
                        Ok(r) => report = Some(r),
                        Err(e) => failure = Some(e),
                    }
                }
                Ok(())
            })?;
            if let Some(e) = failure {
                return Err(e);
            }
            let Some(report) = report else {
                return Err(CliError::Output("garbage collection did not run".into()));
            };
            to_value(report)?
        }
        CasCommand::Get { hash, timestamp } => {
            let hash = parse_hash(&hash)?;
            let node = cas.get(hash)?;
            let mut v = json!({ "hash": hash, "type": node.type_hash, "payload": node.payload });
            if timestamp {
                v["timestamp"] = json!(node.timestamp);
            }
            v
        }
        CasCommand::Put { type_hash, payload } => {
            let type_hash = parse_hash(&type_hash)?;
            // Check the type before reading stdin or files: cheaper failures first.
            cas.schema(type_hash)?;
            let payload = read_json("the payload", &payload)?;
            let stored = cas.put(type_hash, payload)?;
            json!({ "hash": stored.hash, "type": type_hash, "created": stored.created })
        }
        CasCommand::Has { hash } => {
            let hash = parse_hash(&hash)?;
            json!({ "hash": hash, "exists": cas.has(hash)? })
        }
        CasCommand::Refs { hash } => to_value(cas.refs(parse_hash(&hash)?)?)?,
        CasCommand::Walk { hash } => to_value(cas.walk(parse_hash(&hash)?)?)?,
        CasCommand::Reindex => to_value(cas.reindex()?)?,
        CasCommand::Verify { remove_strays } => return verify(ctx, remove_strays),
        CasCommand::Schema(SchemaCommand::List) => to_value(cas.schemas()?)?,
        CasCommand::Schema(SchemaCommand::Get { hash }) => cas.schema(parse_hash(&hash)?)?,
        CasCommand::Schema(SchemaCommand::Put { schema }) => {
            let schema = read_json("the schema", &schema)?;
            let stored = cas.put_schema(schema)?;
            let title = uwf_cas::schema::title_of(&stored.node.payload).map(str::to_string);
            json!({ "hash": stored.hash, "title": title, "created": stored.created })
        }
    };
    Ok(Outcome::Value(value))
}
