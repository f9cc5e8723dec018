//! `uwf thread view` (a thread as one HTML page, rendered by `uwf-view`)
//! and `uwf workflow graph --thread` (the thread's path on the Mermaid or
//! DOT diagram).

use std::path::{Path, PathBuf};

use serde_json::json;
use uwf_cas::Hash;
use uwf_protocol::{AttemptRecord, ThreadId, WaitingRecord};
use uwf_view::report::{self, ThreadState};

use crate::cli::Format;
use crate::engine::nested::ThreadIndex;
use crate::engine::{self, Ctx, Status};
use crate::error::CliError;
use crate::output;

/// `uwf thread view --help`, after the options.
pub const AFTER_HELP: &str = "\
The page needs nothing but a browser: the workflow graph is drawn as inline
SVG with the thread's path (visited roles with their visit counts, the
transitions taken), then every step with why it ran (the condition that
held), its edge prompt, output and detail (agent transcripts as a
conversation), child threads nested, the wait for a person and failed
attempts. No network access, no external file; every text is escaped.

Without --html the page goes to uwf-thread-<id>.html in the temp directory;
stdout says where: {thread, html, bytes}. With --html - the page itself is
printed on stdout.

Examples:
  uwf thread view 01J7K9M2XNPQR5VWBCDF8G3H4T
  uwf thread view 01J7K9M2XNPQR5VWBCDF8G3H4T --html review.html && xdg-open review.html";

/// Why the page cannot be written.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("cannot write {path}: {source}")]
#[diagnostic(
    code(uwf::view::write),
    help("choose another place with --html FILE, or print the page with --html -")
)]
pub struct ViewFailure {
    /// The file.
    path: PathBuf,
    /// What went wrong.
    #[source]
    source: uwf_util::atomic::AtomicError,
}

/// The state files as the page sees them. Reading them is best effort for
/// child threads: a failure is logged and shows as "nothing known".
struct State<'a> {
    ctx: &'a Ctx,
    index: ThreadIndex,
}

impl ThreadState for State<'_> {
    fn thread_id(&self, node: Hash, start: Hash) -> Option<ThreadId> {
        self.index.thread_of(node, start)
    }

    fn waiting(&self, id: ThreadId) -> Option<WaitingRecord> {
        self.ctx.state().waiting_of(id).unwrap_or_else(|e| {
            tracing::warn!(thread = %id, "cannot read waiting.yaml: {e}");
            None
        })
    }

    fn attempts(&self, id: ThreadId) -> Vec<(Hash, AttemptRecord)> {
        crate::engine::retry::attempts(self.ctx, id, ATTEMPTS_SHOWN).unwrap_or_else(|e| {
            tracing::warn!(thread = %id, "cannot read the failed attempts: {e}");
            Vec::new()
        })
    }

    fn head(&self, id: ThreadId) -> Option<Hash> {
        engine::any_head(self.ctx, id).ok()
    }

    fn archived(&self, id: ThreadId) -> bool {
        matches!(engine::status(self.ctx, id), Ok(Status::Archived(_)))
    }

    fn running(&self, id: ThreadId) -> Option<report::RunningNow> {
        let m = engine::running::live_shared(&self.ctx.root, self.ctx.state(), id)?;
        Some(report::RunningNow {
            role: m.role,
            agent: m.agent,
            host: m.host,
            since: m.started_at,
            head: m.head,
        })
    }
}

/// Failed attempts shown per thread.
const ATTEMPTS_SHOWN: usize = 100;

/// The page of thread `id` (also what `uwf serve` shows on a thread's page).
pub fn page(ctx: &Ctx, id: ThreadId) -> Result<String, CliError> {
    let head = engine::any_head(ctx, id)?;
    // The state files the page reads must be sound for the thread itself.
    ctx.state().waiting_of(id)?;
    crate::engine::retry::attempts(ctx, id, 1)?;
    let state = State {
        ctx,
        index: ThreadIndex::load(ctx)?,
    };
    let report = report::collect(ctx.cas(), &state, Some(id), head).map_err(|e| match e {
        uwf_view::ViewError::Thread(t) => CliError::from(t),
    })?;
    Ok(uwf_view::html::page(&report))
}

/// `uwf thread view <id> [--html FILE|-]`.
pub fn thread(
    ctx: &Ctx,
    thread: &str,
    html: Option<PathBuf>,
    format: Option<Format>,
) -> Result<(), CliError> {
    let id = crate::lookup::thread(ctx, thread)?;
    let page = page(ctx, id)?;
    let path = match html {
        Some(p) if p == Path::new("-") => return output::print_text(&page),
        Some(p) => p,
        None => std::env::temp_dir().join(format!("uwf-thread-{id}.html")),
    };
    uwf_util::atomic::write_atomic(&path, page.as_bytes()).map_err(|source| {
        CliError::View(Box::new(ViewFailure {
            path: path.clone(),
            source,
        }))
    })?;
    let shown = std::path::absolute(&path).unwrap_or(path);
    output::print(
        format,
        &json!({ "thread": id, "html": shown, "bytes": page.len() }),
    )
}

/// `uwf workflow graph --thread <id>`: the thread's workflow with its path.
pub fn graph(ctx: &Ctx, thread: &str, format: Option<Format>) -> Result<(), CliError> {
    let id = crate::lookup::thread(ctx, thread)?;
    let view = uwf_moderator::thread::load(ctx.cas(), engine::any_head(ctx, id)?)?;
    let trace = uwf_view::trace::trace(&view);
    let overlay = trace.overlay();
    let w = &view.workflow;
    match format.unwrap_or(Format::Mermaid) {
        Format::Mermaid => {
            output::print_text(&uwf_moderator::diagram::mermaid_overlay(w, &overlay))
        }
        Format::Dot => output::print_text(&uwf_moderator::diagram::dot_overlay(w, &overlay)),
        other => {
            let path: Vec<_> = trace
                .hops
                .iter()
                .chain(trace.next.iter().filter(|h| h.to == uwf_protocol::END))
                .map(|h| {
                    json!({ "from": h.from, "to": h.to, "transition": h.index.map(|i| i + 1), "condition": h.condition })
                })
                .collect();
            output::print(
                Some(other),
                &json!({ "name": w.name, "thread": id, "graph": w.graph, "conditions": w.conditions, "path": path, "visits": overlay.visits }),
            )
        }
    }
}
