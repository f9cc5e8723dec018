//! What the benches of this crate share (each bench includes it as a
//! module).

use std::path::{Path, PathBuf};

use uwf_cas::{Cas, Hash};
use uwf_protocol::{StartNodePayload, StepNodePayload, StepRecord};

/// The writer/reviewer loop the replay and store benches record threads
/// of: the reviewer rejects until it approves.
pub const REVIEW_LOOP: &str = r#"name: review-loop
roles:
  writer:
    systemPrompt: "Write the change."
    outputSchema: { type: object, properties: { summary: { type: string }, files: { type: array, items: { type: string } } }, required: [summary] }
  reviewer:
    systemPrompt: "Review the change."
    outputSchema: { type: object, properties: { approved: { type: boolean }, comments: { type: string } }, required: [approved, comments] }
conditions:
  rejected: "steps[-1].output.approved = false"
graph:
  $START: [{ role: writer, condition: null }]
  writer: [{ role: reviewer, condition: null }]
  reviewer:
    - { role: writer, condition: rejected, prompt: "Address the review: {{comments}}" }
    - { role: $END, condition: null }
"#;

/// The number in the environment variable `name`, or `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The `uwf` binary to time: in `$UWF_BENCH_BIN`, by default the
/// workspace's `target/release`. Panics with the command that builds it.
pub fn uwf_binary() -> PathBuf {
    let bin = std::env::var_os("UWF_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release"));
    let uwf = bin.join("uwf");
    assert!(
        uwf.is_file(),
        "{} is missing: cargo build --release -p uwf-cli",
        uwf.display()
    );
    uwf
}

/// The hashes a thread writer needs.
#[derive(Clone, Copy)]
pub struct Types {
    /// The workflow.
    pub workflow: Hash,
    /// The writer's output schema.
    pub writer: Hash,
    /// The reviewer's output schema.
    pub reviewer: Hash,
    /// The schema of a step's detail; `None`: the output is its own detail.
    pub detail: Option<Hash>,
}

/// A chain of `steps` steps of [`REVIEW_LOOP`] from a new StartNode (the
/// reviewer approves at the last step): a StepNode and its output a step,
/// and its detail if [`Types::detail`] says so. Returns its head.
pub fn write_thread(cas: &Cas, ty: Types, label: &str, steps: usize) -> Hash {
    let start = cas
        .put_value(
            cas.types().start_node,
            &StartNodePayload {
                workflow: ty.workflow,
                prompt: format!("Fix {label}"),
                parent_state: None,
            },
        )
        .unwrap()
        .hash;
    let mut prev: Option<Hash> = None;
    for i in 0..steps {
        let last = i + 1 == steps;
        let (role, schema, output) = if i % 2 == 0 {
            let o = serde_json::json!({ "summary": format!("round {i} of {label}"), "files": ["src/lib.rs"] });
            ("writer", ty.writer, o)
        } else {
            let o = serde_json::json!({ "approved": last, "comments": format!("review {i} of {label}") });
            ("reviewer", ty.reviewer, o)
        };
        let output = cas.put(schema, output).unwrap().hash;
        let detail = ty.detail.map_or(output, |detail| {
            cas.put(
                detail,
                serde_json::json!({ "answer": format!("{role} answered {label} at step {i}"), "turns": 3, "model": "bench" }),
            )
            .unwrap()
            .hash
        });
        let step = StepNodePayload {
            start,
            prev,
            record: StepRecord {
                role: role.into(),
                output,
                detail,
                agent: "bench".into(),
            },
            child_thread: None,
        };
        prev = Some(cas.put_value(cas.types().step_node, &step).unwrap().hash);
    }
    prev.unwrap_or(start)
}
