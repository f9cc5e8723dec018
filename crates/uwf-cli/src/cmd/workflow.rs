//! `uwf workflow …`

use std::path::Path;

use serde_json::{Value, json};
use uwf_cas::{Cas, Hash, MemStore};
use uwf_moderator::definition::{self, WorkflowDefinition};
use uwf_protocol::WorkflowPayload;

use crate::cli::{Format, WorkflowCommand};
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
pub fn run(ctx: &Ctx, cmd: WorkflowCommand, format: Option<Format>) -> Result<(), CliError> {
    match cmd {
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
