//! What an agent did in a step, for `thread read`: the tool calls recorded
//! in the step's transcript.
//!
//! Agents that wrap an agent CLI (`uwf-claude`, `uwf-codex`, `uwf-hermes`)
//! store a detail node whose `turns` are `cas_ref`s to turn nodes with a
//! `toolCalls` array. Two shapes are read: `{name, input}` (Claude Code,
//! Codex) and OpenAI's `{function: {name, arguments}}` (hermes). A step
//! without tool calls gets no summary.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;
use uwf_cas::{Cas, Hash};
use uwf_moderator::thread::ThreadView;

/// Most tool calls listed per step.
const MAX_CALLS: usize = 20;
/// Most characters of one listed call.
const CALL_CHARS: usize = 120;

/// One line for a tool call: `Bash: cargo test`, `Edit: src/main.rs`, or
/// the name and its input as JSON.
fn call_line(call: &Value) -> Option<String> {
    let (name, input) = uwf_view::detail::call_parts(call)?;
    let shown = uwf_view::detail::main_input(&input).unwrap_or_else(|| input.to_string());
    let line = format!(
        "{name}: {}",
        shown.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    Some(match line.char_indices().nth(CALL_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    })
}

/// The collapsible activity summary of step `step`, whose detail is
/// `detail`, if its transcript holds any tool calls.
fn summary(cas: &Cas, step: Hash, detail: Hash) -> Option<String> {
    let node = cas.try_get(detail).ok()??;
    let turns = node.payload.get("turns")?.as_array()?;
    let mut calls = Vec::new();
    let mut count = 0;
    for t in turns {
        let Some(hash) = t.as_str().and_then(|h| h.parse::<Hash>().ok()) else {
            continue;
        };
        let Ok(Some(turn)) = cas.try_get(hash) else {
            continue;
        };
        for call in turn
            .payload
            .get("toolCalls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            count += 1;
            if calls.len() < MAX_CALLS
                && let Some(line) = call_line(call)
            {
                calls.push(line);
            }
        }
    }
    if count == 0 {
        return None;
    }
    let mut out = format!(
        "<details><summary>agent activity: {count} tool call{} in {} turn{}</summary>\n\n",
        if count == 1 { "" } else { "s" },
        turns.len(),
        if turns.len() == 1 { "" } else { "s" },
    );
    for c in &calls {
        let _ = writeln!(out, "- `{}`", c.replace('`', "'"));
    }
    if count > calls.len() {
        let _ = writeln!(out, "- … and {} more", count - calls.len());
    }
    let _ = writeln!(
        out,
        "\n`uwf thread step-details {step}` shows the whole transcript.\n</details>"
    );
    Some(out)
}

/// The activity summaries of the view's steps, by StepNode.
pub fn summaries(cas: &Cas, view: &ThreadView) -> HashMap<Hash, String> {
    view.steps
        .iter()
        .filter_map(|s| Some((s.hash, summary(cas, s.hash, s.payload.record.detail)?)))
        .collect()
}

/// `notes` with each step's `activity` appended (on a line of its own).
pub fn merge(
    mut notes: HashMap<Hash, String>,
    activity: HashMap<Hash, String>,
) -> HashMap<Hash, String> {
    for (step, a) in activity {
        let entry = notes.entry(step).or_default();
        if !entry.is_empty() {
            entry.push('\n');
        }
        entry.push_str(&a);
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn call_lines() {
        let claude = json!({"id": "t", "name": "Bash", "input": {"command": "cargo  test\n-p x"}});
        assert_eq!(call_line(&claude).as_deref(), Some("Bash: cargo test -p x"));
        let hermes =
            json!({"function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}});
        assert_eq!(call_line(&hermes).as_deref(), Some("terminal: ls"));
        let codex = json!({"name": "exec_command", "input": {"cmd": "echo hi"}});
        assert_eq!(call_line(&codex).as_deref(), Some("exec_command: echo hi"));
        let other = json!({"name": "Task", "input": {"n": 1}});
        assert_eq!(call_line(&other).as_deref(), Some("Task: {\"n\":1}"));
        let long = json!({"name": "Bash", "input": {"command": "x".repeat(300)}});
        assert_eq!(
            call_line(&long).map(|l| l.chars().count()),
            Some(CALL_CHARS + 1)
        );
        assert_eq!(call_line(&json!({"input": {}})), None);
    }

    #[test]
    fn merged_notes() {
        let (a, b) = (Hash::from_u64(1), Hash::from_u64(2));
        let notes = HashMap::from([(a, "child".to_owned())]);
        let activity = HashMap::from([(a, "act a".to_owned()), (b, "act b".to_owned())]);
        let m = merge(notes, activity);
        assert_eq!(m[&a], "child\nact a");
        assert_eq!(m[&b], "act b");
    }
}
