//! The roots of a store checked against its nodes (what `uwf cas verify`
//! adds to [`Cas::verify`](uwf_cas::Cas::verify)): every record of the
//! mutable state that names a node must name one that is there and of the
//! right type.
//!
//! [`Cas::verify`](uwf_cas::Cas::verify) checks the nodes and the
//! references between them; it cannot see a head file (or row) that points
//! at nothing, because nothing in the CAS points at a head. Such a thread
//! breaks every command that reads it, so this checks each root the state
//! keeps (docs/state.md, "Garbage collection" lists them as gc's roots):
//!
//! | root | record | must be |
//! |---|---|---|
//! | `head` | an active thread's head | a StartNode or StepNode |
//! | `waiting` | a current wait's head (`waiting.yaml`) | a StartNode or StepNode |
//! | `attempt` | a thread's newest failed attempt (`attempts.yaml`) | an AttemptRecord (if the thread is no longer active, it may also be gone) |
//! | `run` | a queued, claimed or failed run (`runs/`) | a thread the store knows, whose head (if active) is a StartNode or StepNode |
//! | `registry` | a workflow name (`registry.yaml`) | a Workflow |
//! | `history` | an archived thread's head (`history.jsonl`) | a StartNode or StepNode |
//!
//! Each root is checked on its own, so one missing node may be reported
//! by several roots (a thread's head and its wait). Only the node a root
//! names is checked here; what that node references is the node check's
//! (dangling references).

use std::collections::BTreeSet;

use serde::Serialize;
use uwf_cas::{CasError, Hash};
use uwf_protocol::{ATTEMPT_RECORD_TITLE, ThreadId};

use crate::{Engine, EngineError};

/// Which record of the state a [`BrokenRoot`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RootKind {
    /// The head of an active thread.
    Head,
    /// The head a current wait for a person was recorded at.
    Waiting,
    /// The newest failed-attempt record of a thread.
    Attempt,
    /// A run of the run queue.
    Run,
    /// A workflow name of the registry.
    Registry,
    /// The head of an archived thread.
    History,
}

/// What is wrong with a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Problem {
    /// The node it names is not in the store.
    Missing,
    /// The node is there but of another type.
    WrongType,
    /// The node is there but cannot be read (corrupt: the node check
    /// reports it too).
    Unreadable,
    /// A run names a thread that is neither active nor archived.
    UnknownThread,
}

/// A record of the state that names a node that is missing or of the wrong
/// type (`kind: "brokenRoot"` in `uwf cas verify`'s `issues`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename = "brokenRoot", rename_all = "camelCase")]
pub struct BrokenRoot {
    /// Which record.
    pub root: RootKind,
    /// The thread it belongs to (every root but a registry entry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadId>,
    /// The workflow name of a registry entry (or of a run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The node it names (absent for a run of an unknown thread).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<Hash>,
    /// What is wrong.
    pub problem: Problem,
    /// The type the node must have (`StartNode or StepNode`, `Workflow`,
    /// `AttemptRecord`; `thread` for a run).
    pub expected: &'static str,
    /// The type of the node found instead ([`Problem::WrongType`]).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub found_type: Option<Hash>,
    /// The problem in words, naming the record and the node.
    pub reason: String,
}

/// What [`roots`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RootsReport {
    /// How many roots were checked.
    pub roots: usize,
    /// The broken ones, in the order of [`RootKind`], then by thread or name.
    pub issues: Vec<BrokenRoot>,
}

/// The node types a root may name.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A StartNode or StepNode (a thread's head).
    ThreadNode,
    /// A Workflow.
    Workflow,
    /// An AttemptRecord (a schema titled so: the schema may change between
    /// versions of uwf, the title does not).
    AttemptRecord,
}

impl Expect {
    fn name(self) -> &'static str {
        match self {
            Expect::ThreadNode => "StartNode or StepNode",
            Expect::Workflow => "Workflow",
            Expect::AttemptRecord => ATTEMPT_RECORD_TITLE,
        }
    }
}

/// Where a root is, for [`BrokenRoot`] and its `reason`.
struct At {
    root: RootKind,
    thread: Option<ThreadId>,
    workflow: Option<String>,
}

impl At {
    fn thread(root: RootKind, thread: ThreadId) -> Self {
        At {
            root,
            thread: Some(thread),
            workflow: None,
        }
    }

    /// "the head of thread X", "registry entry `name`", …
    fn describe(&self) -> String {
        let thread = self.thread.map(|t| t.to_string()).unwrap_or_default();
        match self.root {
            RootKind::Head => format!("the head of thread {thread}"),
            RootKind::Waiting => format!("the wait of thread {thread}"),
            RootKind::Attempt => format!("the newest failed attempt of thread {thread}"),
            RootKind::Run => format!("the head of thread {thread}, which has a queued run,"),
            RootKind::Registry => format!(
                "registry entry {:?}",
                self.workflow.as_deref().unwrap_or_default()
            ),
            RootKind::History => format!("the history entry of thread {thread}"),
        }
    }
}

/// Checks every root of `engine`'s store: the heads of active threads,
/// current waits, attempt records, runs of the run queue (if the store has
/// one), registry entries and the heads of archived threads. Errors are
/// failures to read (a state file that does not parse, a store that cannot
/// be reached); a root naming a missing or mistyped node is an issue.
pub fn roots(engine: &Engine) -> Result<RootsReport, EngineError> {
    let mut checker = Checker {
        engine,
        report: RootsReport::default(),
    };
    let state = engine.state();
    let active = state.threads()?;
    for (&thread, &head) in &active {
        checker.node(At::thread(RootKind::Head, thread), head, Expect::ThreadNode)?;
    }
    for (thread, record) in state.waiting()? {
        checker.node(
            At::thread(RootKind::Waiting, thread),
            record.head,
            Expect::ThreadNode,
        )?;
    }
    for (thread, record) in state.attempts()? {
        // The records of a thread that is no longer active are no root:
        // `cas gc` may collect them (dropping the entry first), and readers
        // take a missing record for the end of the list (docs/state.md).
        if !active.contains_key(&thread) && !engine.cas().has(record)? {
            checker.report.roots += 1;
            continue;
        }
        checker.node(
            At::thread(RootKind::Attempt, thread),
            record,
            Expect::AttemptRecord,
        )?;
    }
    let history = state.history()?;
    if let Some(queue) = engine.run_queue() {
        let archived: BTreeSet<ThreadId> = history.iter().map(|e| e.thread).collect();
        for run in queue.runs()? {
            let at = At {
                root: RootKind::Run,
                thread: Some(run.thread),
                workflow: Some(run.workflow.clone()),
            };
            match active.get(&run.thread) {
                Some(&head) => checker.node(at, head, Expect::ThreadNode)?,
                // Archived: the next claim drops it (docs/worker.md).
                None if archived.contains(&run.thread) => checker.report.roots += 1,
                None => {
                    checker.report.roots += 1;
                    let reason = format!(
                        "a queued run names thread {}, which is neither active nor archived",
                        run.thread
                    );
                    checker.broken(at, None, Problem::UnknownThread, "thread", None, reason);
                }
            }
        }
    }
    for (name, hash) in state.registry()? {
        let at = At {
            root: RootKind::Registry,
            thread: None,
            workflow: Some(name),
        };
        checker.node(at, hash, Expect::Workflow)?;
    }
    // A thread archived twice (a crash between the two writes) has two
    // lines, usually with one head: check each (thread, head) once.
    let mut seen = BTreeSet::new();
    for entry in history {
        if seen.insert((entry.thread, entry.head)) {
            checker.node(
                At::thread(RootKind::History, entry.thread),
                entry.head,
                Expect::ThreadNode,
            )?;
        }
    }
    Ok(checker.report)
}

struct Checker<'a> {
    engine: &'a Engine,
    report: RootsReport,
}

impl Checker<'_> {
    /// Checks that the root `at` names a node of type `expect`.
    fn node(&mut self, at: At, hash: Hash, expect: Expect) -> Result<(), EngineError> {
        self.report.roots += 1;
        let cas = self.engine.cas();
        let node = match cas.try_get(hash) {
            Ok(Some(node)) => node,
            Ok(None) => {
                let reason = format!(
                    "{} is {hash}, which is not in the store (expected a {})",
                    at.describe(),
                    expect.name()
                );
                self.broken(
                    at,
                    Some(hash),
                    Problem::Missing,
                    expect.name(),
                    None,
                    reason,
                );
                return Ok(());
            }
            Err(e @ CasError::Corrupt { .. }) => {
                let reason = format!("{} is {hash}, which cannot be read: {e}", at.describe());
                self.broken(
                    at,
                    Some(hash),
                    Problem::Unreadable,
                    expect.name(),
                    None,
                    reason,
                );
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let types = cas.types();
        let fits = match expect {
            Expect::ThreadNode => {
                node.type_hash == types.start_node || node.type_hash == types.step_node
            }
            Expect::Workflow => node.type_hash == types.workflow,
            Expect::AttemptRecord => {
                self.title_of(node.type_hash).as_deref() == Some(ATTEMPT_RECORD_TITLE)
            }
        };
        if !fits {
            let found = self
                .title_of(node.type_hash)
                .map_or_else(|| format!("type {}", node.type_hash), |t| format!("a {t}"));
            let reason = format!(
                "{} is {hash}, which is {found}, not a {}",
                at.describe(),
                expect.name()
            );
            self.broken(
                at,
                Some(hash),
                Problem::WrongType,
                expect.name(),
                Some(node.type_hash),
                reason,
            );
        }
        Ok(())
    }

    /// The title of the schema `type_hash`, if it is a schema with one.
    fn title_of(&self, type_hash: Hash) -> Option<String> {
        let schema = self.engine.cas().schema(type_hash).ok()?;
        uwf_cas::schema::title_of(&schema).map(str::to_string)
    }

    fn broken(
        &mut self,
        at: At,
        hash: Option<Hash>,
        problem: Problem,
        expected: &'static str,
        found_type: Option<Hash>,
        reason: String,
    ) {
        self.report.issues.push(BrokenRoot {
            root: at.root,
            thread: at.thread,
            workflow: at.workflow,
            hash,
            problem,
            expected,
            found_type,
            reason,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_broken_root_serialises_as_an_issue_kind() {
        let issue = BrokenRoot {
            root: RootKind::Head,
            thread: Some(uwf_protocol::fixtures::thread("T")),
            workflow: None,
            hash: Some(uwf_protocol::fixtures::hash("H")),
            problem: Problem::WrongType,
            expected: "StartNode or StepNode",
            found_type: Some(uwf_protocol::fixtures::hash("W")),
            reason: "r".into(),
        };
        let v = ok(serde_json::to_value(&issue));
        assert_eq!(v["kind"], "brokenRoot");
        assert_eq!(v["root"], "head");
        assert_eq!(v["problem"], "wrongType");
        assert_eq!(v["type"], uwf_protocol::fixtures::hash("W").to_string());
        assert!(v.get("workflow").is_none(), "{v}");
    }
}
