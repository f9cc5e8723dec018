//! Plain programs as agents (`protocol: stdio` in `config.yaml`;
//! docs/agent-protocol.md, "Plain programs"): the document a program reads
//! on its stdin, and the step uwf stores from what it prints on stdout.
//!
//! Such a program knows nothing of the store: it is given the step as JSON
//! and answers the role's output as JSON, and the engine writes the output
//! node and the StepNode in its own process, with the schemas it already
//! holds. No agent process reads or writes the store, so a step costs the
//! program's start and nothing more (docs/performance.md).

use std::io::{Seek, Write};
use std::sync::Arc;

use serde_json::{Value, json};
use uwf_cas::{CasError, Hash};
use uwf_moderator::thread::{LoadedStep, ThreadView};
use uwf_protocol::{StepNodePayload, StepRecord, ThreadId};
use uwf_util::redact::Redactor;

use crate::EngineError;
use crate::step::Unstored;

/// Longest part of a program's stdout quoted when it is not JSON.
const QUOTED: usize = 80;

/// What a plain program reads on its stdin for a step of `role` in the
/// thread `id` at `view`'s head (docs/agent-protocol.md lists the fields).
pub(crate) fn input(
    id: ThreadId,
    view: &ThreadView,
    role: &str,
    edge_prompt: Option<&str>,
) -> Value {
    json!({
        "thread": id.to_string(),
        "workflow": view.workflow.name,
        "role": role,
        "head": view.head.to_string(),
        "prompt": view.start.prompt,
        "instructions": view.workflow.roles.get(role).map(|r| r.system_prompt.as_str()),
        "edgePrompt": edge_prompt,
        "last": view.last_step().map(|s| json!({
            "role": s.payload.record.role,
            "output": s.output,
        })),
    })
}

/// `doc` in an unnamed file, at its start: the program's stdin. A file,
/// not a pipe, so a program that never reads it holds nothing up; on Linux
/// in memory (`memfd_create`), elsewhere in the temporary directory.
pub(crate) fn input_file(doc: &Value) -> std::io::Result<std::fs::File> {
    let mut file = unnamed_file()?;
    // One write: a `File` is not buffered.
    let mut bytes = serde_json::to_vec(doc)?;
    bytes.push(b'\n');
    file.write_all(&bytes)?;
    file.rewind()?;
    Ok(file)
}

#[cfg(target_os = "linux")]
fn unnamed_file() -> std::io::Result<std::fs::File> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    // In memory: a file on disk costs an inode to allocate and free, per
    // step (docs/performance.md).
    match memfd_create("uwf-step", MFdFlags::MFD_CLOEXEC) {
        Ok(fd) => Ok(std::fs::File::from(fd)),
        Err(_) => tempfile::tempfile(),
    }
}

#[cfg(not(target_os = "linux"))]
fn unnamed_file() -> std::io::Result<std::fs::File> {
    tempfile::tempfile()
}

/// Why a program's answer was not stored: a failure of the attempt, worth
/// a retry like an agent's (`kind` as in [`crate::retry`]'s records).
#[derive(Debug)]
pub(crate) struct Refused {
    /// `no-output`, `bad-output` or `check`.
    pub kind: &'static str,
    /// The failure in words (not yet redacted).
    pub reason: String,
}

/// Makes what a program printed (`stdout`) the output of `role` and a
/// StepNode after `view`'s head, recording `agent`; returns the StepNode's
/// hash, the step as loaded and the two nodes, not stored yet (they are
/// stored with the head's move, [`crate::step::apply_storing`]), or why the
/// answer was refused. `redactor` cuts the store's secrets out of the
/// output before it is stored. The output node is the step's detail too: a
/// plain program's answer is its output. Store failures other than an
/// invalid output stop the step ([`EngineError`]).
pub(crate) fn store_step(
    cas: &uwf_cas::Cas,
    view: &ThreadView,
    role: &str,
    agent: &str,
    stdout: &str,
    redactor: &Arc<Redactor>,
) -> Result<Result<(Hash, LoadedStep, Unstored), Refused>, EngineError> {
    let text = stdout.trim();
    if text.is_empty() {
        return Ok(Err(Refused {
            kind: "no-output",
            reason: "printed nothing on stdout (expected the role's output as JSON)".into(),
        }));
    }
    let output: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            // Redacted before it is quoted: an escaped secret would no
            // longer be recognised.
            let text = redactor.redact(text);
            return Ok(Err(Refused {
                kind: "bad-output",
                reason: format!(
                    "printed {:?} on stdout, which is not one JSON value ({e})",
                    text.chars().take(QUOTED).collect::<String>()
                ),
            }));
        }
    };
    let Some(definition) = view.workflow.roles.get(role) else {
        return Ok(Err(Refused {
            kind: "check",
            reason: format!("the workflow has no role {role:?}"),
        }));
    };
    // The program's output has the store's secrets cut out before it is
    // stored, as the agent kit does with what an agent stores
    // (docs/state.md, "Secrets and file modes").
    let cas = cas.clone().with_redactor(Arc::clone(redactor));
    let output = match cas.pending(definition.output_schema, output) {
        Ok(pending) => pending,
        Err(e @ CasError::Invalid { .. }) => {
            return Ok(Err(Refused {
                kind: "check",
                reason: format!("printed an output that is not valid for role {role}: {e}"),
            }));
        }
        Err(e) => return Err(e.into()),
    };
    let step = StepNodePayload {
        start: view.start_hash,
        prev: view.last_step().map(|s| s.hash),
        record: StepRecord {
            role: role.to_owned(),
            output: output.hash(),
            detail: output.hash(),
            agent: agent.to_owned(),
        },
        child_thread: None,
    };
    let step_node = cas.pending_value(cas.types().step_node, &step)?;
    let loaded = LoadedStep {
        hash: step_node.hash(),
        payload: step,
        output: output.node().payload.clone(),
        timestamp: step_node.node().timestamp,
    };
    // The output first, as they will be stored.
    Ok(Ok((
        step_node.hash(),
        loaded,
        Unstored(vec![output, step_node]),
    )))
}
