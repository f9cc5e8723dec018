//! Diagrams of a workflow graph: Mermaid and Graphviz DOT.
//!
//! `$START` and `$END` are round nodes, `$SUSPEND` (where a thread waits
//! to be resumed) a hexagon (Mermaid) or octagon (DOT), roles are boxes. An edge is labelled
//! with its condition's name; an unconditional edge is labelled `else` when
//! conditional edges precede it and not at all otherwise. An edge with a
//! prompt is marked with ✎. Edges that can never be taken (after an
//! unconditional one) are dashed.
//!
//! [`mermaid_overlay`] and [`dot_overlay`] draw the same diagram with a
//! thread's path on it ([`Overlay`]): the roles it visited (with their visit
//! counts) filled, the transitions it took (with how often) drawn thick.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use uwf_protocol::{END, START, Transition, WorkflowPayload};

/// Marker appended to the label of an edge that carries a prompt.
pub const PROMPT_MARK: &str = "✎";

/// A thread's path to draw over a workflow's diagram.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlay {
    /// How many steps ran each role (roles the thread never ran are absent).
    pub visits: BTreeMap<String, usize>,
    /// How often each transition was taken: (source role or `$START`,
    /// index in `graph[source]`) → count.
    pub taken: BTreeMap<(String, usize), usize>,
}

impl Overlay {
    fn taken(&self, from: &str, index: usize) -> usize {
        self.taken
            .get(&(from.to_string(), index))
            .copied()
            .unwrap_or(0)
    }

    /// Whether the path passes through node `n` (`$START` always does when
    /// anything was taken; `$END` when a transition to it was).
    fn on_path(&self, w: &WorkflowPayload, n: &str) -> bool {
        if self.visits.get(n).is_some_and(|c| *c > 0) {
            return true;
        }
        match n {
            START => !self.taken.is_empty(),
            END => self.taken.iter().any(|((from, i), c)| {
                *c > 0
                    && w.graph
                        .get(from)
                        .and_then(|ts| ts.get(*i))
                        .is_some_and(|t| t.role == END)
            }),
            _ => false,
        }
    }
}

/// `×n` after a label, when `n` > 0.
fn counted(label: &str, n: usize) -> String {
    match (n, label.is_empty()) {
        (0, _) => label.to_string(),
        (_, true) => format!("×{n}"),
        (_, false) => format!("{label} ×{n}"),
    }
}

/// One transition as the diagrams draw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge<'a> {
    /// The source: a role or `$START`.
    pub from: &'a str,
    /// The target: a role or `$END`.
    pub to: &'a str,
    /// Its index in `graph[from]`.
    pub index: usize,
    /// Its label: the condition's name, `else` for an unconditional
    /// transition after others, nothing for a lone unconditional one, and
    /// [`PROMPT_MARK`] when it has a prompt.
    pub label: String,
    /// Whether it can never be taken (it follows an unconditional one).
    pub dead: bool,
}

/// Every node name (roles, graph sources, targets) except `$START`/`$END`, sorted.
pub fn names(w: &WorkflowPayload) -> Vec<&str> {
    let mut set: BTreeSet<&str> = w.roles.keys().map(String::as_str).collect();
    for (from, ts) in &w.graph {
        set.insert(from);
        set.extend(ts.iter().map(|t| t.role.as_str()));
    }
    set.remove(START);
    set.remove(END);
    set.into_iter().collect()
}

/// Every transition of `w`, `$START`'s first, then by source role name,
/// each source's in order.
pub fn edges(w: &WorkflowPayload) -> Vec<Edge<'_>> {
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
                index: i,
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
    mermaid_overlay(w, &Overlay::default())
}

/// A Mermaid `flowchart TD` with a thread's path on it: visited nodes
/// carry their visit count and the class `visited`, taken edges their
/// count and a thick `linkStyle`.
pub fn mermaid_overlay(w: &WorkflowPayload, overlay: &Overlay) -> String {
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
        let label = counted(n, overlay.visits.get(*n).copied().unwrap_or(0));
        if *n == crate::SUSPEND {
            let _ = writeln!(s, "    {}{{{{\"{}\"}}}}", id(n), mermaid_text(&label));
        } else {
            let _ = writeln!(s, "    {}[\"{}\"]", id(n), mermaid_text(&label));
        }
    }
    let mut taken = Vec::new();
    for (i, mut e) in edges(w).into_iter().enumerate() {
        let n = overlay.taken(e.from, e.index);
        if n > 0 {
            taken.push(i.to_string());
            e.label = counted(&e.label, n);
        }
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
    let visited: Vec<String> = [START, END]
        .into_iter()
        .chain(names.iter().copied())
        .filter(|n| overlay.on_path(w, n))
        .map(id)
        .collect();
    if !visited.is_empty() {
        s.push_str("    classDef visited fill:#fde68a,stroke:#b45309,stroke-width:2px\n");
        let _ = writeln!(s, "    class {} visited", visited.join(","));
    }
    if !taken.is_empty() {
        let _ = writeln!(
            s,
            "    linkStyle {} stroke:#d97706,stroke-width:3px",
            taken.join(",")
        );
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
    dot_overlay(w, &Overlay::default())
}

/// A Graphviz `digraph` with a thread's path on it: visited nodes filled
/// and labelled with their visit count, taken edges thick and labelled
/// with how often.
pub fn dot_overlay(w: &WorkflowPayload, overlay: &Overlay) -> String {
    const VISITED: &str = "style=\"rounded,filled,bold\", fillcolor=\"#fde68a\", color=\"#b45309\"";
    let mut s = format!("digraph {} {{\n", dot_id(&w.name));
    s.push_str("    rankdir=TB;\n    node [shape=box, style=rounded];\n");
    for (n, shape) in [(START, "circle"), (END, "doublecircle")] {
        let mark = if overlay.on_path(w, n) {
            format!(", {VISITED}")
        } else {
            String::new()
        };
        let _ = writeln!(s, "    {} [shape={shape}{mark}];", dot_id(n));
    }
    for n in names(w) {
        let shape = if n == crate::SUSPEND {
            Some("shape=octagon")
        } else {
            None
        };
        match (overlay.visits.get(n).copied().unwrap_or(0), shape) {
            (0, None) => {
                let _ = writeln!(s, "    {};", dot_id(n));
            }
            (0, Some(shape)) => {
                let _ = writeln!(s, "    {} [{shape}];", dot_id(n));
            }
            (c, shape) => {
                let label = dot_id(&format!("{n}\n×{c}"));
                let shape = shape.map(|x| format!("{x}, ")).unwrap_or_default();
                let _ = writeln!(s, "    {} [{shape}label={label}, {VISITED}];", dot_id(n));
            }
        }
    }
    for e in edges(w) {
        let mut attrs = Vec::new();
        let n = overlay.taken(e.from, e.index);
        let label = counted(&e.label, n);
        if !label.is_empty() {
            attrs.push(format!("label={}", dot_id(&label)));
        }
        if e.dead {
            attrs.push("style=dashed".into());
        }
        if n > 0 {
            attrs.push("color=\"#d97706\", penwidth=3".into());
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

    /// planner → developer → reviewer (rejects) → developer → reviewer → $END.
    fn path() -> Overlay {
        Overlay {
            visits: BTreeMap::from([
                ("planner".into(), 1),
                ("developer".into(), 2),
                ("reviewer".into(), 2),
            ]),
            taken: BTreeMap::from([
                (("$START".into(), 0), 1),
                (("planner".into(), 0), 1),
                (("developer".into(), 0), 2),
                (("reviewer".into(), 0), 1),
                (("reviewer".into(), 1), 1),
            ]),
        }
    }

    #[test]
    fn mermaid_overlay_golden() {
        assert_eq!(
            mermaid_overlay(&sample(), &path()),
            r#"flowchart TD
    n_start(("$START"))
    n_end(("$END"))
    r0["developer ×2"]
    r1["planner ×1"]
    r2["reviewer ×2"]
    n_start -->|"×1"| r1
    r0 -->|"×2"| r2
    r1 -->|"✎ ×1"| r0
    r2 -->|"notApproved ✎ ×1"| r0
    r2 -->|"else ×1"| n_end
    r2 -.->|"else"| r1
    classDef visited fill:#fde68a,stroke:#b45309,stroke-width:2px
    class n_start,n_end,r0,r1,r2 visited
    linkStyle 0,1,2,3,4 stroke:#d97706,stroke-width:3px
"#
        );
        // No path: exactly the plain diagram.
        assert_eq!(
            mermaid_overlay(&sample(), &Overlay::default()),
            mermaid(&sample())
        );
    }

    #[test]
    fn dot_overlay_golden() {
        let mut o = path();
        // A thread still running: it has not reached $END.
        o.taken.remove(&("reviewer".to_string(), 1));
        assert_eq!(
            dot_overlay(&sample(), &o),
            r##"digraph "solve \"it\"" {
    rankdir=TB;
    node [shape=box, style=rounded];
    "$START" [shape=circle, style="rounded,filled,bold", fillcolor="#fde68a", color="#b45309"];
    "$END" [shape=doublecircle];
    "developer" [label="developer\n×2", style="rounded,filled,bold", fillcolor="#fde68a", color="#b45309"];
    "planner" [label="planner\n×1", style="rounded,filled,bold", fillcolor="#fde68a", color="#b45309"];
    "reviewer" [label="reviewer\n×2", style="rounded,filled,bold", fillcolor="#fde68a", color="#b45309"];
    "$START" -> "planner" [label="×1", color="#d97706", penwidth=3];
    "developer" -> "reviewer" [label="×2", color="#d97706", penwidth=3];
    "planner" -> "developer" [label="✎ ×1", color="#d97706", penwidth=3];
    "reviewer" -> "developer" [label="notApproved ✎ ×1", color="#d97706", penwidth=3];
    "reviewer" -> "$END" [label="else"];
    "reviewer" -> "planner" [label="else", style=dashed];
}
"##
        );
        assert_eq!(dot_overlay(&sample(), &Overlay::default()), dot(&sample()));
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
