//! Diagrams of a workflow graph: Mermaid and Graphviz DOT.
//!
//! `$START` and `$END` are round nodes, `$SUSPEND` (where a thread waits
//! to be resumed) a hexagon (Mermaid) or octagon (DOT), roles are boxes. An edge is labelled
//! with its condition's name; an unconditional edge is labelled `else` when
//! conditional edges precede it and not at all otherwise. An edge with a
//! prompt is marked with ✎. Edges that can never be taken (after an
//! unconditional one) are dashed.

use std::collections::BTreeSet;
use std::fmt::Write;

use uwf_protocol::{END, START, Transition, WorkflowPayload};

/// Marker appended to the label of an edge that carries a prompt.
pub const PROMPT_MARK: &str = "✎";

/// One edge to draw.
struct Edge<'a> {
    from: &'a str,
    to: &'a str,
    label: String,
    dead: bool,
}

/// Every node name (roles, graph sources, targets) except `$START`/`$END`, sorted.
fn names(w: &WorkflowPayload) -> Vec<&str> {
    let mut set: BTreeSet<&str> = w.roles.keys().map(String::as_str).collect();
    for (from, ts) in &w.graph {
        set.insert(from);
        set.extend(ts.iter().map(|t| t.role.as_str()));
    }
    set.remove(START);
    set.remove(END);
    set.into_iter().collect()
}

fn edges(w: &WorkflowPayload) -> Vec<Edge<'_>> {
    // $START first, then the roles in name order.
    let mut sources: Vec<(&String, &Vec<Transition>)> = w.graph.iter().collect();
    sources.sort_by_key(|(k, _)| (k.as_str() != START, k.as_str()));
    let mut out = Vec::new();
    for (from, ts) in sources {
        let mut unconditional_seen = false;
        for (i, t) in ts.iter().enumerate() {
            let mut label = match &t.condition {
                Some(c) => c.clone(),
                None if i > 0 => "else".into(),
                None => String::new(),
            };
            if t.prompt.is_some() {
                if !label.is_empty() {
                    label.push(' ');
                }
                label.push_str(PROMPT_MARK);
            }
            out.push(Edge {
                from,
                to: &t.role,
                label,
                dead: unconditional_seen,
            });
            unconditional_seen |= t.condition.is_none();
        }
    }
    out
}

/// A Mermaid `flowchart TD`.
///
/// ```
/// # use uwf_protocol::WorkflowPayload;
/// # let w: WorkflowPayload = serde_json::from_value(serde_json::json!({
/// #   "name": "w", "description": "", "roles": {},
/// #   "graph": { "$START": [{ "role": "$END", "condition": null }] } })).unwrap_or_else(|e| panic!("{e}"));
/// let m = uwf_moderator::diagram::mermaid(&w);
/// assert!(m.starts_with("flowchart TD\n"));
/// assert!(m.contains("n_start --> n_end"));
/// ```
pub fn mermaid(w: &WorkflowPayload) -> String {
    let names = names(w);
    let id = |n: &str| -> String {
        match n {
            START => "n_start".into(),
            END => "n_end".into(),
            _ => format!(
                "r{}",
                names.iter().position(|m| *m == n).unwrap_or(usize::MAX)
            ),
        }
    };
    let mut s = String::from("flowchart TD\n");
    let _ = writeln!(s, "    n_start((\"{}\"))", mermaid_text(START));
    let _ = writeln!(s, "    n_end((\"{}\"))", mermaid_text(END));
    for n in &names {
        if *n == crate::SUSPEND {
            let _ = writeln!(s, "    {}{{{{\"{}\"}}}}", id(n), mermaid_text(n));
        } else {
            let _ = writeln!(s, "    {}[\"{}\"]", id(n), mermaid_text(n));
        }
    }
    for e in edges(w) {
        let arrow = if e.dead { "-.->" } else { "-->" };
        if e.label.is_empty() {
            let _ = writeln!(s, "    {} {arrow} {}", id(e.from), id(e.to));
        } else {
            let _ = writeln!(
                s,
                "    {} {arrow}|\"{}\"| {}",
                id(e.from),
                mermaid_text(&e.label),
                id(e.to)
            );
        }
    }
    s
}

/// Text inside a quoted Mermaid label, with entity codes for what would
/// break it.
fn mermaid_text(t: &str) -> String {
    let mut out = String::with_capacity(t.len());
    for c in t.chars() {
        match c {
            '#' => out.push_str("#35;"),
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A Graphviz `digraph`.
///
/// ```
/// # use uwf_protocol::WorkflowPayload;
/// # let w: WorkflowPayload = serde_json::from_value(serde_json::json!({
/// #   "name": "w", "description": "", "roles": {},
/// #   "graph": { "$START": [{ "role": "$END", "condition": null }] } })).unwrap_or_else(|e| panic!("{e}"));
/// let d = uwf_moderator::diagram::dot(&w);
/// assert!(d.starts_with("digraph \"w\" {\n"));
/// assert!(d.contains("\"$START\" -> \"$END\";"));
/// ```
pub fn dot(w: &WorkflowPayload) -> String {
    let mut s = format!("digraph {} {{\n", dot_id(&w.name));
    s.push_str("    rankdir=TB;\n    node [shape=box, style=rounded];\n");
    let _ = writeln!(s, "    {} [shape=circle];", dot_id(START));
    let _ = writeln!(s, "    {} [shape=doublecircle];", dot_id(END));
    for n in names(w) {
        if n == crate::SUSPEND {
            let _ = writeln!(s, "    {} [shape=octagon];", dot_id(n));
        } else {
            let _ = writeln!(s, "    {};", dot_id(n));
        }
    }
    for e in edges(w) {
        let mut attrs = Vec::new();
        if !e.label.is_empty() {
            attrs.push(format!("label={}", dot_id(&e.label)));
        }
        if e.dead {
            attrs.push("style=dashed".into());
        }
        let attrs = if attrs.is_empty() {
            String::new()
        } else {
            format!(" [{}]", attrs.join(", "))
        };
        let _ = writeln!(s, "    {} -> {}{attrs};", dot_id(e.from), dot_id(e.to));
    }
    s.push_str("}\n");
    s
}

/// A DOT quoted string.
fn dot_id(t: &str) -> String {
    let mut out = String::with_capacity(t.len() + 2);
    out.push('"');
    for c in t.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn suspend_has_its_own_shape() {
        let w: WorkflowPayload = serde_json::from_value(json!({
            "name": "s", "description": "",
            "roles": {"a": {"description": "", "systemPrompt": "", "outputSchema": "0000000000000"}},
            "graph": {"$START": [{"role": "a", "condition": null}],
                      "a": [{"role": "$SUSPEND", "condition": "c"}, {"role": "$END", "condition": null}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            mermaid(&w).contains("    r0{{\"$SUSPEND\"}}\n"),
            "{}",
            mermaid(&w)
        );
        assert!(
            dot(&w).contains("    \"$SUSPEND\" [shape=octagon];\n"),
            "{}",
            dot(&w)
        );
    }

    fn sample() -> WorkflowPayload {
        serde_json::from_value(json!({
            "name": "solve \"it\"",
            "description": "",
            "roles": {
                "planner": {"description": "", "systemPrompt": "", "outputSchema": "0000000000000"},
                "developer": {"description": "", "systemPrompt": "", "outputSchema": "0000000000000"},
                "reviewer": {"description": "", "systemPrompt": "", "outputSchema": "0000000000000"}
            },
            "conditions": {"notApproved": "steps[-1].output.approved = false"},
            "graph": {
                "reviewer": [
                    {"role": "developer", "condition": "notApproved", "prompt": "{{comments}}"},
                    {"role": "$END", "condition": null},
                    {"role": "planner", "condition": null}
                ],
                "$START": [{"role": "planner", "condition": null}],
                "planner": [{"role": "developer", "condition": null, "prompt": "go"}],
                "developer": [{"role": "reviewer", "condition": null}]
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn mermaid_golden() {
        assert_eq!(
            mermaid(&sample()),
            r#"flowchart TD
    n_start(("$START"))
    n_end(("$END"))
    r0["developer"]
    r1["planner"]
    r2["reviewer"]
    n_start --> r1
    r0 --> r2
    r1 -->|"✎"| r0
    r2 -->|"notApproved ✎"| r0
    r2 -->|"else"| n_end
    r2 -.->|"else"| r1
"#
        );
    }

    #[test]
    fn dot_golden() {
        assert_eq!(
            dot(&sample()),
            r#"digraph "solve \"it\"" {
    rankdir=TB;
    node [shape=box, style=rounded];
    "$START" [shape=circle];
    "$END" [shape=doublecircle];
    "developer";
    "planner";
    "reviewer";
    "$START" -> "planner";
    "developer" -> "reviewer";
    "planner" -> "developer" [label="✎"];
    "reviewer" -> "developer" [label="notApproved ✎"];
    "reviewer" -> "$END" [label="else"];
    "reviewer" -> "planner" [label="else", style=dashed];
}
"#
        );
    }

    #[test]
    fn escaping() {
        assert_eq!(
            mermaid_text(r#"a "b" <c> #1"#),
            "a #quot;b#quot; #lt;c#gt; #35;1"
        );
        assert_eq!(dot_id("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        // Unknown targets still get a node.
        let mut w = sample();
        w.graph.insert(
            "planner".into(),
            vec![Transition {
                role: "ghost \"x\"".into(),
                condition: Some("c".into()),
                prompt: None,
            }],
        );
        let m = mermaid(&w);
        assert!(m.contains(r#"r1["ghost #quot;x#quot;"]"#), "{m}");
        assert!(m.contains(r#"r2 -->|"c"| r1"#), "{m}");
        assert!(dot(&w).contains(r#""planner" -> "ghost \"x\"" [label="c"];"#));
    }
}
