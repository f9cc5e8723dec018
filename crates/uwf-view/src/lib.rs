//! uwf's thread viewer: one self-contained HTML page per thread.
//!
//! `uwf thread view` calls this crate. The page needs no network: the
//! workflow graph is laid out here ([`layout`], a layered Sugiyama-style
//! layout) and drawn as inline SVG ([`svg`]) with the thread's path on it
//! ([`trace`]: the transition behind every step, recomputed with the
//! moderator); below it come every step's output and detail ([`detail`]:
//! agent transcripts as a conversation), child threads nested, the wait for
//! a person and failed attempts ([`report`]). CSS and a few lines of script
//! are inline; a Content-Security-Policy forbids every other script and all
//! network access. All text from the thread is escaped ([`escape`]).
//!
//! ```
//! use uwf_cas::{Cas, MemStore};
//! use uwf_moderator::definition;
//! use uwf_protocol::StartNodePayload;
//!
//! let yaml = "name: w\ndescription: d\nroles:\n  r:\n    description: does it\n    systemPrompt: go\n    outputSchema: { type: object }\ngraph:\n  $START: [{ role: r, condition: null }]\n  r: [{ role: $END, condition: null }]\n";
//! let cas = Cas::new(MemStore::new())?;
//! let wf = definition::register(&cas, &definition::parse_yaml(yaml, "w.yaml")?)?;
//! let start = StartNodePayload { workflow: wf.hash, prompt: "a task".into(), parent_state: None };
//! let head = cas.put_value(cas.types().start_node, &start)?.hash;
//! let report = uwf_view::report::collect(&cas, &uwf_view::report::NoState, Some(uwf_protocol::fixtures::thread("T1")), head)?;
//! let html = uwf_view::html::page(&report);
//! assert!(html.starts_with("<!DOCTYPE html>"));
//! assert!(html.contains("a task"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod detail;
pub mod escape;
pub mod html;
pub mod layout;
pub mod report;
pub mod svg;
pub mod trace;

/// Why a view cannot be made.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ViewError {
    /// The thread cannot be read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Thread(#[from] uwf_moderator::thread::ThreadError),
}
