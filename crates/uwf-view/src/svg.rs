//! The workflow graph as inline SVG, with a thread's path on it.
//!
//! `$START` and `$END` are dark pills, roles are boxes. Roles the thread
//! visited are filled and carry their visit count (`×2`); transitions it
//! took are thick and amber with how often; back edges (loops) are drawn
//! upwards in a dashed style, self-loops beside their node; transitions
//! that can never be taken are faint. The role waiting for a person, the
//! next role of a running thread and roles with failed attempts are marked.
//! Styling comes from the page's CSS classes (see [`crate::html`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use uwf_moderator::diagram;
use uwf_protocol::{END, START, WorkflowPayload};

use crate::escape::{attr, text};
use crate::layout::{self, EdgeSpec, LABEL_H, NodeSize, Point, Route, layout, text_width};
use crate::trace::Trace;

/// Font size of node labels, in px.
const NODE_FONT: f64 = 13.0;
/// Font size of edge labels, in px.
const EDGE_FONT: f64 = 11.0;

/// What to mark on the graph besides the path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    /// Failed attempts per role.
    pub failed: BTreeMap<String, usize>,
    /// The role waiting for a person.
    pub waiting: Option<String>,
    /// The role the moderator would run next (a thread neither done nor waiting).
    pub next: Option<String>,
    /// The transition to the waiting or next role: (source, target).
    pub pending: Option<(String, String)>,
}

/// One drawn edge: every transition from one node to another (parallel
/// transitions share a line, their labels joined by ` | `).
#[derive(Debug, Clone, PartialEq)]
pub struct DrawnEdge {
    /// Source node name.
    pub from: String,
    /// Target node name.
    pub to: String,
    /// The label.
    pub label: String,
    /// How often the thread took these transitions.
    pub taken: usize,
    /// Whether none of them can ever be taken (each follows an unconditional one).
    pub dead: bool,
}

/// The nodes (`$START`, the roles and other targets by name, `$END`) and
/// the edges of a workflow, with the path's counts.
pub fn graph(w: &WorkflowPayload, trace: &Trace) -> (Vec<String>, Vec<DrawnEdge>) {
    let mut nodes = vec![START.to_string()];
    nodes.extend(diagram::names(w).into_iter().map(str::to_string));
    nodes.push(END.to_string());

    let overlay = trace.overlay();
    let mut edges: Vec<DrawnEdge> = Vec::new();
    for e in diagram::edges(w) {
        let taken = overlay
            .taken
            .get(&(e.from.to_string(), e.index))
            .copied()
            .unwrap_or(0);
        match edges.iter_mut().find(|d| d.from == e.from && d.to == e.to) {
            Some(d) => {
                if !e.label.is_empty() {
                    if !d.label.is_empty() {
                        d.label.push_str(" | ");
                    }
                    d.label.push_str(&e.label);
                }
                d.taken += taken;
                d.dead &= e.dead;
            }
            None => edges.push(DrawnEdge {
                from: e.from.to_string(),
                to: e.to.to_string(),
                label: e.label,
                taken,
                dead: e.dead,
            }),
        }
    }
    (nodes, edges)
}

fn edge_text(e: &DrawnEdge) -> String {
    match (e.taken, e.label.is_empty()) {
        (0, _) => e.label.clone(),
        (n, true) => format!("×{n}"),
        (n, false) => format!("{} ×{n}", e.label),
    }
}

/// The SVG of workflow `w` with `trace` and `marks` on it. `id` prefixes
/// the element ids (arrowhead markers), so several graphs can share a page.
pub fn render(w: &WorkflowPayload, trace: &Trace, marks: &Marks, id: &str) -> String {
    let (names, edges, l) = geometry(w, trace);
    let overlay = trace.overlay();

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="graph" id="{id}" viewBox="0 0 {w:.0} {h:.0}" width="{w:.0}" height="{h:.0}" role="img" aria-label="{label}">"#,
        id = attr(id),
        w = l.width,
        h = l.height,
        label = attr(&format!("workflow {}", w.name)),
    );
    s.push_str("<defs>");
    for (kind, class) in [
        ("arrow", "ah"),
        ("arrow-taken", "ah taken"),
        ("arrow-dead", "ah dead"),
    ] {
        let _ = write!(
            s,
            r#"<marker id="{id}-{kind}" class="{class}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker>"#,
            id = attr(id),
        );
    }
    s.push_str("</defs>\n");

    // Edges first (under the nodes), untaken before taken.
    let mut order: Vec<usize> = (0..edges.len()).collect();
    order.sort_by_key(|&i| edges[i].taken > 0);
    for &i in &order {
        let (e, r) = (&edges[i], &l.routes[i]);
        if r.points.is_empty() {
            continue;
        }
        let mut class = String::from("edge");
        if e.taken > 0 {
            class.push_str(" taken");
        }
        if r.back {
            class.push_str(" back");
        }
        if e.dead {
            class.push_str(" dead");
        }
        if marks
            .pending
            .as_ref()
            .is_some_and(|(f, t)| *f == e.from && *t == e.to)
        {
            class.push_str(" pending");
        }
        let marker = if e.taken > 0 {
            "arrow-taken"
        } else if e.dead {
            "arrow-dead"
        } else {
            "arrow"
        };
        let title = format!(
            "{} → {}{}{}",
            e.from,
            e.to,
            if e.label.is_empty() {
                String::new()
            } else {
                format!(": {}", e.label)
            },
            match e.taken {
                0 => String::new(),
                1 => " (taken once)".into(),
                n => format!(" (taken {n} times)"),
            }
        );
        let _ = write!(
            s,
            r#"<g class="{class}" data-from="{from}" data-to="{to}"><title>{title}</title><path d="{d}" marker-end="url(#{id}-{marker})"/>"#,
            from = attr(&e.from),
            to = attr(&e.to),
            title = text(&title),
            d = path_data(r),
            id = attr(id),
        );
        if let Some(lb) = r.label {
            let _ = write!(
                s,
                r#"<rect class="elabel" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="4"/><text class="elabel" x="{:.1}" y="{:.1}">{}</text>"#,
                lb.x,
                lb.y,
                lb.w,
                lb.h,
                lb.x + lb.w / 2.0,
                lb.y + LABEL_H / 2.0 + EDGE_FONT * 0.35,
                text(&edge_text(e)),
            );
        }
        s.push_str("</g>\n");
    }

    for (i, name) in names.iter().enumerate() {
        let b = l.nodes[i];
        let visits = overlay.visits.get(name).copied().unwrap_or(0);
        let terminal = name == START || name == END;
        let on_path = visits > 0
            || (name == START && !trace.hops.is_empty())
            || (name == END && trace.ended());
        let mut class = String::from(if terminal { "node terminal" } else { "node" });
        if on_path {
            class.push_str(" visited");
        }
        let failed = marks.failed.get(name).copied().unwrap_or(0);
        if failed > 0 {
            class.push_str(" failed");
        }
        if marks.waiting.as_deref() == Some(name.as_str()) {
            class.push_str(" waiting");
        }
        if marks.next.as_deref() == Some(name.as_str()) {
            class.push_str(" next");
        }
        let description = w
            .roles
            .get(name)
            .map(|r| r.description.as_str())
            .filter(|d| !d.is_empty());
        let mut title = name.clone();
        if let Some(d) = description {
            let _ = write!(title, ": {d}");
        }
        match visits {
            0 => {}
            1 => title.push_str(" (ran once)"),
            n => {
                let _ = write!(title, " (ran {n} times)");
            }
        }
        if failed > 0 {
            let _ = write!(title, ", {failed} failed attempt(s)");
        }
        let _ = write!(
            s,
            r#"<g class="{class}" data-role="{role}" tabindex="0"><title>{title}</title><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="{rx}"/>"#,
            b.x,
            b.y,
            b.w,
            b.h,
            role = attr(name),
            title = text(&title),
            rx = if terminal { b.h / 2.0 } else { 7.0 },
        );
        if name == END {
            let _ = write!(
                s,
                r#"<rect class="inner" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" rx="{:.1}"/>"#,
                b.x + 3.0,
                b.y + 3.0,
                b.w - 6.0,
                b.h - 6.0,
                (b.h - 6.0) / 2.0
            );
        }
        let c = b.center();
        let _ = write!(
            s,
            r#"<text class="nlabel" x="{:.1}" y="{:.1}">{}</text>"#,
            c.x,
            c.y + NODE_FONT * 0.35,
            text(name)
        );
        let mut badge_x = b.x + b.w;
        if visits > 0 {
            badge_x = badge(&mut s, "visits", &format!("×{visits}"), badge_x, b.y);
        }
        if failed > 0 {
            badge_x = badge(&mut s, "fails", &format!("✗{failed}"), badge_x, b.y);
        }
        if marks.waiting.as_deref() == Some(name.as_str()) {
            badge(&mut s, "waits", "waiting", badge_x, b.y);
        } else if marks.next.as_deref() == Some(name.as_str()) {
            badge(&mut s, "nexts", "next", badge_x, b.y);
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

/// A pill on a node's top border, right-aligned at `right`; returns where
/// the next pill ends.
fn badge(s: &mut String, class: &str, label: &str, right: f64, top: f64) -> f64 {
    let w = text_width(label, 10.5) + 10.0;
    let (x, y) = (right - w + 4.0, top - 8.0);
    let _ = write!(
        s,
        r#"<g class="badge {class}"><rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="15" rx="7.5"/><text x="{:.1}" y="{:.1}">{}</text></g>"#,
        x + w / 2.0,
        y + 11.0,
        text(label)
    );
    x - 3.0
}

/// The `d` of an edge's path: curves with vertical tangents between rows,
/// straight lines where it passes a row, a loop for a self-loop.
fn path_data(r: &Route) -> String {
    let p = &r.points;
    let mut d = format!("M{:.1},{:.1}", p[0].x, p[0].y);
    if r.self_loop && p.len() == 3 {
        let bulge = (p[1].x - p[0].x) * 1.35;
        let _ = write!(
            d,
            " C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
            p[0].x + bulge,
            p[0].y - 16.0,
            p[2].x + bulge,
            p[2].y + 16.0,
            p[2].x,
            p[2].y
        );
        return d;
    }
    if r.bulge > 0.0 && p.len() == 2 {
        let _ = write!(
            d,
            " C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
            p[0].x + r.bulge,
            p[0].y,
            p[1].x + r.bulge,
            p[1].y,
            p[1].x,
            p[1].y
        );
        return d;
    }
    for w in p.windows(2) {
        let (a, b): (Point, Point) = (w[0], w[1]);
        if (a.x - b.x).abs() < 0.05 {
            let _ = write!(d, " L{:.1},{:.1}", b.x, b.y);
        } else {
            let dy = (b.y - a.y) / 2.0;
            let _ = write!(
                d,
                " C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
                a.x,
                a.y + dy,
                b.x,
                b.y - dy,
                b.x,
                b.y
            );
        }
    }
    d
}

/// The layout of `w`'s graph as [`render`] draws it (for tests and callers
/// that want the geometry).
pub fn geometry(
    w: &WorkflowPayload,
    trace: &Trace,
) -> (Vec<String>, Vec<DrawnEdge>, layout::Layout) {
    let (names, edges) = graph(w, trace);
    let index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let sizes: Vec<NodeSize> = names
        .iter()
        .map(|n| {
            if n == START || n == END {
                NodeSize {
                    w: text_width(n, 12.0) + 24.0,
                    h: 28.0,
                }
            } else {
                NodeSize {
                    w: (text_width(n, NODE_FONT) + 34.0).max(84.0),
                    h: 38.0,
                }
            }
        })
        .collect();
    let specs: Vec<EdgeSpec> = edges
        .iter()
        .map(|e| EdgeSpec {
            from: index[e.from.as_str()],
            to: index[e.to.as_str()],
            label_w: text_width(&edge_text(e), EDGE_FONT),
        })
        .collect();
    let l = layout(&sizes, &specs, 0, Some(names.len() - 1));
    (names, edges, l)
}
