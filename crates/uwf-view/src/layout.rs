//! A layered (Sugiyama-style) layout of a directed graph, top to bottom.
//!
//! 1. **Cycles**: a depth-first search from the first node marks the edges
//!    that close a cycle ("back edges", self-loops included); for layering
//!    they count reversed, so the rest is acyclic.
//! 2. **Layers**: longest path from the sources; the `last` node (`$END`)
//!    goes below everything else.
//! 3. **Dummies**: an edge spanning several layers gets one invisible
//!    vertex per layer it crosses, so it is routed around the nodes.
//! 4. **Order**: barycenter sweeps, down and up, keeping the order with the
//!    fewest crossings.
//! 5. **Coordinates**: nodes pulled towards the mean of their neighbours,
//!    then pushed apart to keep their order and a minimum gap.
//! 6. **Routes**: each edge is a chain of points (ports spread along the
//!    bottom of its source and the top of its target); back edges run
//!    bottom-up; self-loops bulge out on the right of their node. Labels
//!    are put along the edge where they overlap no node and no other label.
//!
//! Everything is deterministic: the same graph gives the same layout.

use std::collections::BTreeMap;

/// Height of one layer's row (node heights are at most this).
pub const ROW: f64 = 40.0;
/// Vertical space between two rows, where edges and their labels run.
pub const ROW_GAP: f64 = 62.0;
/// Horizontal space between two neighbours in a row.
pub const GAP: f64 = 34.0;
/// Margin around the drawing.
pub const MARGIN: f64 = 16.0;
/// Width of a dummy vertex (a long edge passing a row).
const DUMMY: f64 = 16.0;
/// How far a self-loop bulges out of its node.
const LOOP: f64 = 30.0;
/// How far the first back edge between neighbouring rows bulges out.
const SIDE_BULGE: f64 = 34.0;
/// Height of an edge label's box.
pub const LABEL_H: f64 = 18.0;

/// The width of `text` in the drawing's font (an estimate: the page uses
/// the system's sans-serif font at 13px; wide characters count double).
pub fn text_width(text: &str, px: f64) -> f64 {
    text.chars()
        .map(|c| {
            if c.is_ascii_uppercase() || c == 'm' || c == 'w' {
                0.72
            } else if c.is_ascii() {
                0.56
            } else if (c as u32) >= 0x2E80 {
                1.0
            } else {
                0.62
            }
        })
        .sum::<f64>()
        * px
}

/// A node to place: its size.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSize {
    /// Width.
    pub w: f64,
    /// Height (at most [`ROW`]).
    pub h: f64,
}

/// An edge to route.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeSpec {
    /// Source node index.
    pub from: usize,
    /// Target node index.
    pub to: usize,
    /// Width of its label (0 for none).
    pub label_w: f64,
}

/// A point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// x, to the right.
    pub x: f64,
    /// y, downwards.
    pub y: f64,
}

/// An axis-aligned rectangle (top-left corner and size).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    /// Left.
    pub x: f64,
    /// Top.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
}

impl Rect {
    /// Whether the two rectangles share any area (touching edges do not count).
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }

    /// The centre.
    pub fn center(&self) -> Point {
        Point {
            x: self.x + self.w / 2.0,
            y: self.y + self.h / 2.0,
        }
    }
}

/// How an edge is drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// From the source to the target: the first point on the source's
    /// border, the last on the target's. Consecutive points are joined by
    /// curves with vertical tangents, except for self-loops.
    pub points: Vec<Point>,
    /// The edge closes a cycle: it runs upwards (or is a self-loop).
    pub back: bool,
    /// The edge leaves and enters the same node.
    pub self_loop: bool,
    /// For a back edge between neighbouring rows: how far the curve from
    /// the source's right side to the target's right side bulges out (it
    /// then has two points); 0 for every other edge.
    pub bulge: f64,
    /// Where its label goes, if it has one.
    pub label: Option<Rect>,
}

/// The result: a box per node, a route per edge, and the drawing's size.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// The nodes' boxes, in the input's order.
    pub nodes: Vec<Rect>,
    /// The edges' routes, in the input's order.
    pub routes: Vec<Route>,
    /// The layer of each node.
    pub layers: Vec<usize>,
    /// Width of the drawing.
    pub width: f64,
    /// Height of the drawing.
    pub height: f64,
}

/// A vertex of the layered graph: a node or a dummy.
struct Vertex {
    layer: usize,
    w: f64,
    x: f64,
}

/// Lays out `nodes` and `edges`, depth-first from `first` (`$START`),
/// with `last` (`$END`) at the bottom. An edge naming a node that does not
/// exist gets a route without points.
pub fn layout(
    nodes: &[NodeSize],
    all_edges: &[EdgeSpec],
    first: usize,
    last: Option<usize>,
) -> Layout {
    let n = nodes.len();
    let valid = |e: &&EdgeSpec| e.from < n && e.to < n;
    let edges: Vec<&EdgeSpec> = all_edges.iter().filter(valid).collect();
    let back = back_edges(n, &edges, first);
    let layer = layers(n, &edges, &back, last);

    // Self-loops, and back edges between neighbouring rows, are drawn on
    // the right of their nodes and need room there.
    let mut extra = vec![0.0_f64; n];
    let mut bulges = vec![0.0_f64; edges.len()];
    let mut sides_at = vec![0usize; n];
    for (i, e) in edges.iter().enumerate() {
        if e.from == e.to {
            extra[e.from] = extra[e.from].max(LOOP + 4.0 + e.label_w);
        } else if back[i] && layer[e.from] == layer[e.to] + 1 {
            let k = sides_at[e.from].max(sides_at[e.to]);
            sides_at[e.from] = k + 1;
            sides_at[e.to] = k + 1;
            bulges[i] = SIDE_BULGE + 22.0 * k as f64;
            let room = bulges[i] * 0.75 + 12.0 + e.label_w;
            extra[e.from] = extra[e.from].max(room);
            extra[e.to] = extra[e.to].max(room);
        }
    }
    let mut verts: Vec<Vertex> = (0..n)
        .map(|i| Vertex {
            layer: layer[i],
            w: nodes[i].w + extra[i],
            x: 0.0,
        })
        .collect();
    // Each edge's chain of vertices, top to bottom.
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(edges.len());
    for (i, e) in edges.iter().enumerate() {
        if e.from == e.to || bulges[i] > 0.0 {
            chains.push(vec![e.from]);
            continue;
        }
        let (top, bottom) = if back[i] {
            (e.to, e.from)
        } else {
            (e.from, e.to)
        };
        let mut chain = vec![top];
        for l in layer[top] + 1..layer[bottom] {
            verts.push(Vertex {
                layer: l,
                w: DUMMY,
                x: 0.0,
            });
            chain.push(verts.len() - 1);
        }
        chain.push(bottom);
        chains.push(chain);
    }
    let depth = verts.iter().map(|v| v.layer).max().unwrap_or(0) + 1;
    // Neighbours in the layer above and below.
    let mut up: Vec<Vec<usize>> = vec![Vec::new(); verts.len()];
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); verts.len()];
    for c in &chains {
        for w in c.windows(2) {
            down[w[0]].push(w[1]);
            up[w[1]].push(w[0]);
        }
    }

    let rows = order(&verts, depth, first, &up, &down, &chains);
    place(&mut verts, &rows, &up, &down);
    let row_y = row_tops(depth, &edges, &back, &chains, &layer);
    let row_y = |l: usize| row_y[l];

    // Real node boxes; x is the centre of the vertex (without its loop room).
    let mut boxes: Vec<Rect> = Vec::with_capacity(n);
    for (i, node) in nodes.iter().enumerate() {
        let v = &verts[i];
        let left = v.x - v.w / 2.0;
        let y = row_y(v.layer) + (ROW - node.h.min(ROW)) / 2.0;
        boxes.push(Rect {
            x: left,
            y,
            w: node.w,
            h: node.h.min(ROW),
        });
    }
    let ports = ports(&verts, &boxes, &chains, n);
    let mut routes = Vec::with_capacity(edges.len());
    for (i, e) in edges.iter().enumerate() {
        if e.from == e.to {
            let b = boxes[e.from];
            let c = b.center();
            let x = b.x + b.w;
            routes.push(Route {
                points: vec![
                    Point { x, y: c.y - 8.0 },
                    Point {
                        x: x + LOOP,
                        y: c.y,
                    },
                    Point { x, y: c.y + 8.0 },
                ],
                back: true,
                self_loop: true,
                bulge: 0.0,
                label: None,
            });
            continue;
        }
        if bulges[i] > 0.0 {
            let (a, b) = (boxes[e.from], boxes[e.to]);
            routes.push(Route {
                points: vec![
                    Point {
                        x: a.x + a.w,
                        y: a.center().y,
                    },
                    Point {
                        x: b.x + b.w,
                        y: b.center().y,
                    },
                ],
                back: true,
                self_loop: false,
                bulge: bulges[i],
                label: None,
            });
            continue;
        }
        let chain = &chains[i];
        let mut points: Vec<Point> = Vec::with_capacity(chain.len());
        for (k, &v) in chain.iter().enumerate() {
            if v < n {
                let (x, y) = if k == 0 {
                    (ports.bottom[&(i, v)], boxes[v].y + boxes[v].h)
                } else {
                    (ports.top[&(i, v)], boxes[v].y)
                };
                points.push(Point { x, y });
            } else {
                // A dummy: the edge passes its row straight down.
                let y0 = row_y(verts[v].layer);
                points.push(Point {
                    x: verts[v].x,
                    y: y0,
                });
                points.push(Point {
                    x: verts[v].x,
                    y: y0 + ROW,
                });
            }
        }
        if back[i] {
            points.reverse();
        }
        routes.push(Route {
            points,
            back: back[i],
            self_loop: false,
            bulge: 0.0,
            label: None,
        });
    }
    place_labels(&edges, &boxes, &mut routes);
    // Labels may stick out on the left: move everything right of the margin.
    let left = routes
        .iter()
        .filter_map(|r| r.label.map(|l| l.x))
        .chain(boxes.iter().map(|b| b.x))
        .fold(MARGIN, f64::min);
    if left < MARGIN {
        let dx = MARGIN - left;
        for b in &mut boxes {
            b.x += dx;
        }
        for v in &mut verts {
            v.x += dx;
        }
        for r in &mut routes {
            for p in &mut r.points {
                p.x += dx;
            }
            if let Some(l) = &mut r.label {
                l.x += dx;
            }
        }
    }

    let mut width: f64 = 0.0;
    let mut height: f64 = 0.0;
    for v in &verts {
        width = width.max(v.x + v.w / 2.0);
    }
    for r in &boxes {
        height = height.max(r.y + r.h);
    }
    for r in &routes {
        if let Some(l) = r.label {
            width = width.max(l.x + l.w);
        }
        for p in &r.points {
            width = width.max(p.x + r.bulge * 0.75);
        }
    }
    let mut placed = routes.into_iter();
    let routes = all_edges
        .iter()
        .map(|e| {
            if valid(&e) { placed.next() } else { None }.unwrap_or(Route {
                points: Vec::new(),
                back: false,
                self_loop: false,
                bulge: 0.0,
                label: None,
            })
        })
        .collect();
    Layout {
        nodes: boxes,
        routes,
        layers: layer,
        width: width + MARGIN,
        height: height + MARGIN,
    }
}

/// The top of each row. The gap below a row grows with the most labels
/// that leave one vertex into it, so that they can be stacked.
fn row_tops(
    depth: usize,
    edges: &[&EdgeSpec],
    back: &[bool],
    chains: &[Vec<usize>],
    layer: &[usize],
) -> Vec<f64> {
    // (gap, vertex) → labels placed there.
    let mut labels: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (i, e) in edges.iter().enumerate() {
        let c = &chains[i];
        if e.label_w <= 0.0 || c.len() < 2 {
            continue;
        }
        // The label sits on the segment that leaves the source.
        let (gap, at) = if back[i] {
            (layer[e.from] - 1, e.from)
        } else {
            (layer[e.from], e.from)
        };
        *labels.entry((gap, at)).or_default() += 1;
    }
    let mut gaps = vec![ROW_GAP; depth];
    for ((gap, _), k) in labels {
        if gap < depth {
            gaps[gap] = gaps[gap].max(ROW_GAP + (k.saturating_sub(1)) as f64 * LABEL_H * 1.1);
        }
    }
    let mut tops = Vec::with_capacity(depth);
    let mut y = MARGIN;
    for g in gaps {
        tops.push(y);
        y += ROW + g;
    }
    tops
}

/// Marks the edges that close a cycle in a depth-first search from
/// `first`, then from every node not yet reached (in index order).
fn back_edges(n: usize, edges: &[&EdgeSpec], first: usize) -> Vec<bool> {
    let mut out_edges: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, e) in edges.iter().enumerate() {
        out_edges[e.from].push(i);
    }
    let mut back = vec![false; edges.len()];
    // 0 unseen, 1 on the stack, 2 done.
    let mut state = vec![0u8; n];
    let roots = std::iter::once(first).chain(0..n).filter(|&r| r < n);
    for root in roots {
        if state[root] != 0 {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        state[root] = 1;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&ei) = out_edges[v].get(*next) {
                *next += 1;
                let w = edges[ei].to;
                match state[w] {
                    0 => {
                        state[w] = 1;
                        stack.push((w, 0));
                    }
                    1 => back[ei] = true,
                    _ => {}
                }
            } else {
                state[v] = 2;
                stack.pop();
            }
        }
    }
    back
}

/// Longest-path layers over the edges with back edges reversed; `last`
/// below every other node when nothing leaves it.
fn layers(n: usize, edges: &[&EdgeSpec], back: &[bool], last: Option<usize>) -> Vec<usize> {
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut indeg = vec![0usize; n];
    for (i, e) in edges.iter().enumerate() {
        if e.from == e.to {
            continue;
        }
        let (a, b) = if back[i] {
            (e.to, e.from)
        } else {
            (e.from, e.to)
        };
        succ[a].push(b);
        indeg[b] += 1;
    }
    let mut layer = vec![0usize; n];
    let mut ready: Vec<usize> = (0..n).filter(|&v| indeg[v] == 0).rev().collect();
    while let Some(v) = ready.pop() {
        for &w in &succ[v] {
            layer[w] = layer[w].max(layer[v] + 1);
            indeg[w] -= 1;
            if indeg[w] == 0 {
                ready.push(w);
            }
        }
    }
    if let Some(end) = last.filter(|&e| e < n && succ[e].is_empty()) {
        let below = (0..n)
            .filter(|&v| v != end)
            .map(|v| layer[v] + 1)
            .max()
            .unwrap_or(0);
        layer[end] = layer[end].max(below);
    }
    layer
}

/// The vertices of each row, left to right: barycenter sweeps from a
/// depth-first initial order, keeping the order with the fewest crossings.
fn order(
    verts: &[Vertex],
    depth: usize,
    first: usize,
    up: &[Vec<usize>],
    down: &[Vec<usize>],
    chains: &[Vec<usize>],
) -> Vec<Vec<usize>> {
    // Initial order: depth-first over the layered graph, so that related
    // vertices start close together.
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); depth];
    let mut seen = vec![false; verts.len()];
    let roots = std::iter::once(first).chain(0..verts.len());
    for root in roots {
        if root >= verts.len() || seen[root] {
            continue;
        }
        let mut stack = vec![root];
        while let Some(v) = stack.pop() {
            if seen[v] {
                continue;
            }
            seen[v] = true;
            rows[verts[v].layer].push(v);
            for &w in down[v].iter().rev() {
                if !seen[w] {
                    stack.push(w);
                }
            }
        }
    }
    let _ = chains;
    let mut best = rows.clone();
    let mut best_crossings = crossings(&rows, down);
    for iter in 0..16 {
        let downward = iter % 2 == 0;
        let range: Vec<usize> = if downward {
            (1..depth).collect()
        } else {
            (0..depth.saturating_sub(1)).rev().collect()
        };
        for r in range {
            let (adj, other) = if downward { (up, r - 1) } else { (down, r + 1) };
            let pos: BTreeMap<usize, usize> = rows[other]
                .iter()
                .enumerate()
                .map(|(i, &v)| (v, i))
                .collect();
            let mut keyed: Vec<(f64, usize, usize)> = rows[r]
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let ps: Vec<f64> = adj[v]
                        .iter()
                        .filter_map(|w| pos.get(w).map(|&p| p as f64))
                        .collect();
                    let key = if ps.is_empty() {
                        i as f64
                    } else {
                        ps.iter().sum::<f64>() / ps.len() as f64
                    };
                    (key, i, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            rows[r] = keyed.into_iter().map(|(_, _, v)| v).collect();
        }
        let c = crossings(&rows, down);
        if c < best_crossings {
            best_crossings = c;
            best = rows.clone();
        }
    }
    best
}

/// Edge crossings between consecutive rows.
pub(crate) fn crossings(rows: &[Vec<usize>], down: &[Vec<usize>]) -> usize {
    let mut total = 0;
    for r in 0..rows.len().saturating_sub(1) {
        let pos: BTreeMap<usize, usize> = rows[r + 1]
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i))
            .collect();
        let mut segs = Vec::new();
        for (i, &v) in rows[r].iter().enumerate() {
            for w in &down[v] {
                if let Some(&j) = pos.get(w) {
                    segs.push((i, j));
                }
            }
        }
        for a in 0..segs.len() {
            for b in a + 1..segs.len() {
                let (s, t) = (segs[a], segs[b]);
                if (s.0 < t.0 && s.1 > t.1) || (s.0 > t.0 && s.1 < t.1) {
                    total += 1;
                }
            }
        }
    }
    total
}

/// Horizontal centres: packed left to right, then repeatedly pulled
/// towards the mean of their neighbours and pushed apart again.
fn place(verts: &mut [Vertex], rows: &[Vec<usize>], up: &[Vec<usize>], down: &[Vec<usize>]) {
    for row in rows {
        let mut x = MARGIN;
        for &v in row {
            verts[v].x = x + verts[v].w / 2.0;
            x += verts[v].w + GAP;
        }
    }
    for iter in 0..24 {
        let seq: Vec<&Vec<usize>> = if iter % 2 == 0 {
            rows.iter().collect()
        } else {
            rows.iter().rev().collect()
        };
        for row in seq {
            let desired: Vec<f64> = row
                .iter()
                .map(|&v| {
                    let ns: Vec<f64> = up[v].iter().chain(&down[v]).map(|&w| verts[w].x).collect();
                    if ns.is_empty() {
                        verts[v].x
                    } else {
                        ns.iter().sum::<f64>() / ns.len() as f64
                    }
                })
                .collect();
            let widths: Vec<f64> = row.iter().map(|&v| verts[v].w).collect();
            let xs = separate(&desired, &widths);
            for (k, &v) in row.iter().enumerate() {
                verts[v].x = xs[k];
            }
        }
    }
    // Shift everything right of the margin.
    let left = verts
        .iter()
        .map(|v| v.x - v.w / 2.0)
        .fold(f64::INFINITY, f64::min);
    if left.is_finite() {
        for v in verts.iter_mut() {
            v.x += MARGIN - left;
        }
    }
}

/// Centres as close to `desired` as the order and the gaps allow: the mean
/// of a left-to-right and a right-to-left pass (each keeps the gaps, so
/// their mean does too).
fn separate(desired: &[f64], widths: &[f64]) -> Vec<f64> {
    let n = desired.len();
    let sep = |i: usize| (widths[i - 1] + widths[i]) / 2.0 + GAP;
    let mut l = desired.to_vec();
    for i in 1..n {
        l[i] = l[i].max(l[i - 1] + sep(i));
    }
    let mut r = desired.to_vec();
    for i in (1..n).rev() {
        r[i - 1] = r[i - 1].min(r[i] - sep(i));
    }
    (0..n).map(|i| (l[i] + r[i]) / 2.0).collect()
}

/// Where each edge leaves the bottom and enters the top of a real node:
/// spread along the side, ordered by the x of the other end.
struct Ports {
    bottom: BTreeMap<(usize, usize), f64>,
    top: BTreeMap<(usize, usize), f64>,
}

fn ports(verts: &[Vertex], boxes: &[Rect], chains: &[Vec<usize>], n: usize) -> Ports {
    let mut bottom_uses: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
    let mut top_uses: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
    for (i, c) in chains.iter().enumerate() {
        if c.len() < 2 {
            continue;
        }
        let (a, a_next) = (c[0], c[1]);
        let (b, b_prev) = (c[c.len() - 1], c[c.len() - 2]);
        bottom_uses[a].push((verts[a_next].x, i));
        top_uses[b].push((verts[b_prev].x, i));
    }
    let spread =
        |uses: &mut Vec<(f64, usize)>, node: usize, out: &mut BTreeMap<(usize, usize), f64>| {
            uses.sort_by(|p, q| p.0.total_cmp(&q.0).then(p.1.cmp(&q.1)));
            let b = boxes[node];
            let k = uses.len() as f64;
            let usable = (b.w * 0.7).min(22.0 * (k - 1.0).max(0.0));
            for (j, &(_, e)) in uses.iter().enumerate() {
                let x = if k <= 1.0 {
                    b.x + b.w / 2.0
                } else {
                    b.x + b.w / 2.0 - usable / 2.0 + usable * j as f64 / (k - 1.0)
                };
                out.insert((e, node), x);
            }
        };
    let mut p = Ports {
        bottom: BTreeMap::new(),
        top: BTreeMap::new(),
    };
    for v in 0..n {
        spread(&mut bottom_uses[v], v, &mut p.bottom);
        spread(&mut top_uses[v], v, &mut p.top);
    }
    p
}

/// A point of the curve from `a` to `b` with vertical tangents, at `t`.
pub fn curve_point(a: Point, b: Point, t: f64) -> Point {
    let dy = (b.y - a.y) / 2.0;
    let (c1, c2) = (
        Point {
            x: a.x,
            y: a.y + dy,
        },
        Point {
            x: b.x,
            y: b.y - dy,
        },
    );
    let u = 1.0 - t;
    Point {
        x: u * u * u * a.x + 3.0 * u * u * t * c1.x + 3.0 * u * t * t * c2.x + t * t * t * b.x,
        y: u * u * u * a.y + 3.0 * u * u * t * c1.y + 3.0 * u * t * t * c2.y + t * t * t * b.y,
    }
}

/// Puts each label on its edge's first segment (the one leaving the
/// source), at the first of several positions along it that overlaps no
/// node and no label placed before; self-loop labels go right of the loop.
fn place_labels(edges: &[&EdgeSpec], boxes: &[Rect], routes: &mut [Route]) {
    let mut taken: Vec<Rect> = Vec::new();
    for (e, r) in edges.iter().zip(routes.iter_mut()) {
        if e.label_w <= 0.0 {
            continue;
        }
        let w = e.label_w + 8.0;
        if r.bulge > 0.0 {
            let (a, b) = (r.points[0], r.points[1]);
            let rect = Rect {
                x: a.x.max(b.x) + r.bulge * 0.75 + 4.0,
                y: (a.y + b.y) / 2.0 - LABEL_H / 2.0,
                w,
                h: LABEL_H,
            };
            taken.push(rect);
            r.label = Some(rect);
            continue;
        }
        if r.self_loop {
            let p = r.points[1];
            let rect = Rect {
                x: p.x + 4.0,
                y: p.y - LABEL_H / 2.0,
                w,
                h: LABEL_H,
            };
            taken.push(rect);
            r.label = Some(rect);
            continue;
        }
        // The segment between two rows that leaves the source.
        let (a, b) = if r.back {
            // Drawn bottom-up: source's top port, then the next point up.
            (r.points[1], r.points[0])
        } else {
            (r.points[0], r.points[1])
        };
        let at = |t: f64| {
            let p = curve_point(a, b, t);
            Rect {
                x: p.x - w / 2.0,
                y: p.y - LABEL_H / 2.0,
                w,
                h: LABEL_H,
            }
        };
        let ts: &[f64] = if r.back {
            &[0.6, 0.45, 0.75, 0.3, 0.85]
        } else {
            &[0.45, 0.6, 0.3, 0.75, 0.2, 0.85, 0.15]
        };
        let free = |rect: &Rect| {
            !boxes.iter().any(|b| b.overlaps(rect)) && !taken.iter().any(|l| l.overlaps(rect))
        };
        let mut chosen = None;
        for &t in ts {
            let rect = at(t);
            if free(&rect) {
                chosen = Some(rect);
                break;
            }
        }
        // Nowhere free on the curve: beside it, to the right, then left.
        let rect = chosen.unwrap_or_else(|| {
            let base = at(ts[0]);
            let right = Rect {
                x: base.x + w / 2.0 + 6.0,
                ..base
            };
            let left = Rect {
                x: base.x - w / 2.0 - 6.0,
                ..base
            };
            if free(&right) {
                right
            } else if free(&left) {
                left
            } else {
                base
            }
        });
        taken.push(rect);
        r.label = Some(rect);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<NodeSize> {
        (0..n)
            .map(|i| NodeSize {
                w: 60.0 + 10.0 * i as f64,
                h: 36.0,
            })
            .collect()
    }

    fn e(from: usize, to: usize) -> EdgeSpec {
        EdgeSpec {
            from,
            to,
            label_w: 40.0,
        }
    }

    /// start(0) → planner(1) → developer(2) → reviewer(3) → end(4), with
    /// reviewer → developer, reviewer → planner and developer → developer.
    fn loop_graph() -> (Vec<NodeSize>, Vec<EdgeSpec>) {
        (
            nodes(5),
            vec![
                e(0, 1),
                e(1, 2),
                e(2, 3),
                e(3, 2),
                e(3, 4),
                e(3, 1),
                e(2, 2),
                e(0, 4),
            ],
        )
    }

    fn check(l: &Layout, edges: &[EdgeSpec]) {
        for (i, a) in l.nodes.iter().enumerate() {
            for b in &l.nodes[i + 1..] {
                assert!(!a.overlaps(b), "nodes overlap: {a:?} {b:?}");
            }
            assert!(a.x >= 0.0 && a.y >= 0.0 && a.x + a.w <= l.width && a.y + a.h <= l.height);
        }
        assert_eq!(l.routes.len(), edges.len(), "every edge is routed");
        for (e, r) in edges.iter().zip(&l.routes) {
            assert!(r.points.len() >= 2, "{e:?} has a route");
            let (s, t) = (l.nodes[e.from], l.nodes[e.to]);
            let (p0, p1) = (r.points[0], r.points[r.points.len() - 1]);
            let touches = |b: Rect, p: Point| {
                p.x >= b.x - 0.01
                    && p.x <= b.x + b.w + 0.01
                    && p.y >= b.y - 0.01
                    && p.y <= b.y + b.h + 0.01
            };
            assert!(touches(s, p0), "{e:?} starts on its source: {p0:?} {s:?}");
            assert!(touches(t, p1), "{e:?} ends on its target: {p1:?} {t:?}");
            if e.label_w > 0.0 {
                let label = r.label.unwrap_or_else(|| panic!("{e:?} has no label box"));
                assert!(
                    !l.nodes.iter().any(|b| b.overlaps(&label)),
                    "label of {e:?} covers a node"
                );
            }
        }
    }

    #[test]
    fn a_loop_graph_is_layered_without_overlaps() {
        let (n, es) = loop_graph();
        let l = layout(&n, &es, 0, Some(4));
        check(&l, &es);
        assert_eq!(l.layers, vec![0, 1, 2, 3, 4]);
        // reviewer → developer, reviewer → planner and the self-loop are back edges.
        let back: Vec<bool> = l.routes.iter().map(|r| r.back).collect();
        assert_eq!(
            back,
            vec![false, false, false, true, false, true, true, false]
        );
        assert!(l.routes[6].self_loop);
        // Back edges run upwards.
        let r = &l.routes[3];
        assert!(r.points[0].y > r.points[r.points.len() - 1].y);
        // The long edge start → end passes three rows through dummies.
        assert_eq!(l.routes[7].points.len(), 2 + 2 * 3);
    }

    #[test]
    fn layout_is_deterministic() {
        let (n, es) = loop_graph();
        assert_eq!(layout(&n, &es, 0, Some(4)), layout(&n, &es, 0, Some(4)));
    }

    #[test]
    fn wide_fan_out_keeps_nodes_apart() {
        // start → 8 roles → end, plus some cross edges.
        let n = nodes(10);
        let mut es: Vec<EdgeSpec> = (1..9).map(|i| e(0, i)).collect();
        es.extend((1..9).map(|i| e(i, 9)));
        es.push(e(3, 5));
        es.push(e(7, 2));
        let l = layout(&n, &es, 0, Some(9));
        check(&l, &es);
        assert_eq!(l.layers[9], *l.layers.iter().max().unwrap_or(&0));
    }

    #[test]
    fn unreachable_and_isolated_nodes_are_placed() {
        let n = nodes(4);
        let es = vec![e(0, 3), e(1, 2), e(2, 1)];
        let l = layout(&n, &es, 0, Some(3));
        check(&l, &es);
    }

    #[test]
    fn crossings_are_counted() {
        let down = vec![vec![3], vec![2], vec![], vec![]];
        assert_eq!(crossings(&[vec![0, 1], vec![2, 3]], &down), 1);
        assert_eq!(crossings(&[vec![0, 1], vec![3, 2]], &down), 0);
    }

    #[test]
    fn separation_keeps_order_and_gaps() {
        let xs = separate(&[50.0, 50.0, 50.0], &[20.0, 20.0, 20.0]);
        for w in xs.windows(2) {
            assert!(w[1] - w[0] >= 20.0 + GAP - 1e-9);
        }
        // Symmetric around the common wish.
        assert!((xs[1] - 50.0).abs() < 1e-9);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn any_graph_lays_out_without_overlaps(
                n in 2usize..9,
                raw in proptest::collection::vec((0usize..9, 0usize..9, 0u8..3), 0..20),
            ) {
                let ns = nodes(n);
                let es: Vec<EdgeSpec> = raw
                    .into_iter()
                    .map(|(a, b, l)| EdgeSpec { from: a % n, to: b % n, label_w: f64::from(l) * 25.0 })
                    .filter(|e| e.from != n - 1)
                    .collect();
                let l = layout(&ns, &es, 0, Some(n - 1));
                check(&l, &es);
            }
        }
    }
}
