//! How `thread read` shows a child thread inside its parent's step.

use std::fmt::Write as _;

use uwf_engine::nested::ChildLink;

/// Characters of a child step's output shown in [`child_summary`].
const SUMMARY_OUTPUT_CHARS: usize = 120;

/// The collapsible summary of a child thread that `thread read` puts in the
/// parent's step: a `<details>` element whose summary names the child
/// thread, its step count and workflow, holding one line per child step
/// (role, agent, hash, output cut to one line) and the command that reads
/// it in full.
pub fn child_summary(child: &ChildLink) -> String {
    let link = &child.link;
    let mut out = String::new();
    let who = link
        .thread
        .map_or_else(|| format!("`{}`", link.child_thread), |t| t.to_string());
    let workflow = if link.workflow_name.is_empty() {
        "?"
    } else {
        link.workflow_name.as_str()
    };
    let _ = writeln!(
        out,
        "<details><summary>child thread {who} ({} step{}, workflow {workflow})</summary>\n",
        link.steps,
        if link.steps == 1 { "" } else { "s" },
    );
    match &child.view {
        Some(view) => {
            for (i, s) in view.steps.iter().enumerate() {
                let output = serde_json::to_string(&s.output).unwrap_or_default();
                let cut: String = output.chars().take(SUMMARY_OUTPUT_CHARS).collect();
                let more = if output.chars().count() > SUMMARY_OUTPUT_CHARS {
                    "…"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "{}. {} ({}) · `{}` · `{cut}{more}`",
                    i + 1,
                    s.payload.record.role,
                    s.payload.record.agent,
                    s.hash
                );
            }
        }
        None => {
            let _ = writeln!(out, "_The child thread cannot be read._");
        }
    }
    let _ = writeln!(out, "\nTerminal step `{}`.", link.child_thread);
    match &link.thread {
        Some(id) => {
            let _ = writeln!(out, "Read it in full: `uwf thread read {id}`");
        }
        None => {
            let _ = writeln!(
                out,
                "Its thread id is neither active nor in history.jsonl; \
                 `uwf thread stack {c}` and `uwf cas walk {c}` show it.",
                c = link.child_thread
            );
        }
    }
    out.push_str("\n</details>\n");
    out
}
