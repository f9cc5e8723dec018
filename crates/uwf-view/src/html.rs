//! The page: a header, the graph, and the thread's story step by step.
//!
//! Self-contained: inline CSS and one small inline script (click a role in
//! the graph to find its steps; expand or collapse everything), no external
//! resource of any kind. The Content-Security-Policy says so to the browser:
//! `default-src 'none'`, styles inline, and only the page's own script, by
//! its SHA-256.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uwf_moderator::thread::LoadedStep;
use uwf_protocol::{AttemptRecord, END, Hash, START};

use crate::detail::{Detail, DetailView, Turn};
use crate::escape::{attr, text};
use crate::report::{StepReport, ThreadReport};
use crate::svg::{self, Marks};
use crate::trace::Hop;

/// Most characters of one text block; the rest is cut with a note.
pub const MAX_TEXT: usize = 40_000;

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// The whole page for `report`.
pub fn page(report: &ThreadReport) -> String {
    let name = &report.view.workflow.name;
    let title = match &report.id {
        Some(id) => format!("{name} · {id} · uwf"),
        None => format!("{name} · uwf"),
    };
    let script_hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT));
    let mut s = String::with_capacity(64 * 1024);
    s.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(
        s,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; img-src data:\">"
    );
    s.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(s, "<meta name=\"generator\" content=\"uwf thread view\">");
    let _ = writeln!(s, "<title>{}</title>", text(&title));
    let _ = writeln!(s, "<style>\n{STYLE}</style>\n</head>\n<body>");
    thread(&mut s, report, "g");
    s.push_str("<footer>Made by <code>uwf thread view</code>. Click a role in the graph to find its steps.</footer>\n");
    let _ = writeln!(s, "<script>{SCRIPT}</script>\n</body>\n</html>");
    s
}

/// The state of a thread in one word, and its CSS class.
fn status(r: &ThreadReport) -> (&'static str, String) {
    let failed_now = r
        .attempts
        .first()
        .is_some_and(|(_, a)| a.head == r.view.head);
    if r.waiting.is_some() {
        ("waiting", "waiting for a person".into())
    } else if r.trace.ended() {
        ("done", "done".into())
    } else if r.archived {
        ("killed", "archived before its end".into())
    } else if r.trace.error.is_some() {
        ("failed", "stuck: the moderator cannot decide".into())
    } else if failed_now {
        ("failed", "failed at its last step".into())
    } else {
        (
            "idle",
            match &r.trace.next {
                Some(h) => format!("next: {}", h.to),
                None => "idle".into(),
            },
        )
    }
}

/// One thread: header, graph and timeline; `gid` makes its SVG ids unique.
fn thread(s: &mut String, r: &ThreadReport, gid: &str) {
    let v = &r.view;
    let (state, state_text) = status(r);
    let _ = writeln!(
        s,
        r#"<section class="thread depth{}" data-state="{state}">"#,
        r.depth.min(3)
    );
    let heading = if r.depth == 0 { "h1" } else { "h3" };
    let _ = writeln!(
        s,
        r#"<header><{heading}><span class="wf">{}</span> <span class="state {state}">{}</span></{heading}>"#,
        text(&v.workflow.name),
        text(&state_text),
    );
    if !v.workflow.description.is_empty() {
        let _ = writeln!(
            s,
            r#"<p class="desc">{}</p>"#,
            text(&v.workflow.description)
        );
    }
    s.push_str(r#"<dl class="meta">"#);
    meta(
        s,
        "thread",
        &r.id.map_or_else(
            || "(no id in the state files)".to_owned(),
            |id| id.to_string(),
        ),
    );
    meta(s, "started", &when(v.start_timestamp));
    meta(s, "steps", &v.steps.len().to_string());
    meta(s, "head", &v.head.to_string());
    meta(s, "workflow", &v.workflow_hash.to_string());
    if let Some(p) = v.start.parent_state {
        meta(s, "called from", &p.to_string());
    }
    s.push_str("</dl>\n");
    if r.depth == 0 {
        let _ = writeln!(
            s,
            r#"<div class="task"><span class="k">Task</span>{}</div></header>"#,
            block(&v.start.prompt)
        );
    } else {
        // A child's task is its caller's whole prompt: folded.
        let first = v.start.prompt.lines().next().unwrap_or_default();
        let _ = writeln!(
            s,
            r#"<details class="task"><summary><span class="k">Task</span> {}</summary>{}</details></header>"#,
            text(first),
            block(&v.start.prompt)
        );
    }

    let mut marks = Marks::default();
    for (_, a) in &r.attempts {
        *marks.failed.entry(a.role.clone()).or_default() += 1;
    }
    let from = v
        .steps
        .last()
        .map_or(START, |st| st.payload.record.role.as_str());
    if let Some(w) = &r.waiting {
        marks.waiting = Some(w.role.clone());
        marks.pending = Some((from.to_string(), w.role.clone()));
    } else if !r.archived
        && let Some(h) = r.trace.next.as_ref().filter(|h| h.to != END)
    {
        marks.next = Some(h.to.clone());
        marks.pending = Some((from.to_string(), h.to.clone()));
    }
    s.push_str(r#"<div class="layout"><div class="graph-panel"><div class="graph-box">"#);
    s.push_str(&svg::render(&v.workflow, &r.trace, &marks, gid));
    s.push_str("</div>");
    s.push_str(concat!(
        r#"<p class="legend"><span class="lg visited">visited ×n</span>"#,
        r#"<span class="lg taken">path taken</span><span class="lg back">loop (back edge)</span>"#,
        r#"<span class="lg failed">failed attempts</span><span class="lg waiting">waiting</span>"#,
        r#"<span class="lg next">next</span></p>"#
    ));
    s.push_str("</div>\n<div class=\"timeline\">\n");
    if r.depth == 0 {
        s.push_str(r#"<p class="tools"><button type="button" data-act="open">expand all</button> <button type="button" data-act="close">collapse all</button></p>"#);
    }

    attempts_at(s, r, v.start_hash);
    let mut prev_ts = v.start_timestamp;
    for (i, (st, rep)) in v.steps.iter().zip(&r.steps).enumerate() {
        let hop = r.trace.hops.get(i);
        step(s, r, i, st, rep, hop, prev_ts, &format!("{gid}-{i}"));
        prev_ts = st.timestamp;
        attempts_at(s, r, st.hash);
    }
    // Attempts from a head that is no longer in the chain (a fork, a gc).
    let known: Vec<Hash> = std::iter::once(v.start_hash)
        .chain(v.steps.iter().map(|st| st.hash))
        .collect();
    for (hash, a) in r.attempts.iter().rev() {
        if !known.contains(&a.head) {
            attempt(s, hash, a);
        }
    }
    end(s, r, gid);
    s.push_str("</div></div>\n</section>\n");
}

fn meta(s: &mut String, k: &str, v: &str) {
    let _ = write!(s, "<dt>{}</dt><dd>{}</dd>", text(k), text(v));
}

/// The failed attempts that started from `head`, oldest first.
fn attempts_at(s: &mut String, r: &ThreadReport, head: Hash) {
    for (hash, a) in r.attempts.iter().rev().filter(|(_, a)| a.head == head) {
        attempt(s, hash, a);
    }
}

fn attempt(s: &mut String, hash: &Hash, a: &AttemptRecord) {
    let _ = write!(
        s,
        r#"<article class="card attempt" data-role="{}"><div class="head"><span class="badge-fail">failed attempt {}</span> <b>{}</b> <span class="agent">{}</span> <span class="dur">{}</span></div><p class="why">{} ({}), started {}. Record <code>{}</code>.</p>"#,
        attr(&a.role),
        a.attempt,
        text(&a.role),
        text(&a.agent),
        text(&secs(a.duration_ms)),
        text(&a.reason),
        text(&a.kind),
        text(&when(a.started_at)),
        text(&hash.to_string()),
    );
    if !a.stderr_tail.trim().is_empty() {
        let _ = write!(
            s,
            r#"<details class="sub"><summary>stderr (last lines)</summary><pre class="text">{}</pre></details>"#,
            text(&cut(&a.stderr_tail))
        );
    }
    s.push_str("</article>\n");
}

/// Why the moderator chose this hop, in words.
fn why(h: &Hop) -> String {
    let n = h
        .index
        .map(|i| format!(" (#{})", i + 1))
        .unwrap_or_default();
    let mut out = match (&h.condition, h.index) {
        (Some(c), _) => format!("From {}: condition {c} held{n}", h.from),
        (None, Some(0)) => format!("From {}: the unconditional transition{n}", h.from),
        (None, Some(_)) => format!(
            "From {}: no condition before it held, so the fallback{n}",
            h.from
        ),
        (None, None) => format!("From {}: no transition of the graph leads here", h.from),
    };
    if !h.decided {
        out.push_str(" (matched from the graph: the moderator, evaluated here, chose otherwise or could not decide)");
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn step(
    s: &mut String,
    r: &ThreadReport,
    i: usize,
    st: &LoadedStep,
    rep: &StepReport,
    hop: Option<&Hop>,
    prev_ts: u64,
    gid: &str,
) {
    let role = &st.payload.record.role;
    let visit = r.view.steps[..=i]
        .iter()
        .filter(|x| &x.payload.record.role == role)
        .count();
    let _ = write!(
        s,
        r#"<details class="card step" open data-role="{}" id="{}"><summary><span class="n">{}</span> <b class="role">{}</b>{} <span class="agent">{}</span> <span class="dur" title="time since the previous node">+{}</span>"#,
        attr(role),
        attr(&format!("{gid}-step")),
        i + 1,
        text(role),
        if visit > 1 {
            format!(r#" <span class="visit">visit {visit}</span>"#)
        } else {
            String::new()
        },
        text(&st.payload.record.agent),
        text(&secs(st.timestamp.saturating_sub(prev_ts))),
    );
    if let Some(h) = hop {
        let label = match (&h.condition, h.index) {
            (Some(c), _) => Some(c.as_str()),
            (None, Some(i)) if i > 0 => Some("else"),
            _ => None,
        };
        if let Some(label) = label {
            let _ = write!(s, r#" <span class="via">via {}</span>"#, text(label));
        }
    }
    s.push_str("</summary>\n<div class=\"body\">");
    if let Some(h) = hop {
        let _ = write!(s, r#"<p class="why">{}.</p>"#, text(&why(h)));
        if let Some(p) = h.prompt.as_deref().filter(|p| !p.trim().is_empty()) {
            let _ = write!(
                s,
                r#"<div class="edge-prompt"><span class="k">Edge prompt</span>{}</div>"#,
                block(p)
            );
        }
    }
    s.push_str(r#"<div class="output"><span class="k">Output</span>"#);
    value(s, &st.output);
    s.push_str("</div>");
    detail(s, &rep.detail, rep.child.is_some());
    if let Some(c) = &rep.child {
        s.push_str(r#"<div class="child"><p class="k">Done by a child thread</p>"#);
        thread(s, c, &format!("{gid}-c"));
        s.push_str("</div>");
    } else if let Some(e) = &rep.child_error {
        let _ = write!(
            s,
            r#"<p class="warn">The child thread cannot be shown: {}</p>"#,
            text(e)
        );
    }
    let _ = write!(
        s,
        r#"<p class="hashes">step <code>{}</code> · output <code>{}</code> · stored {}</p>"#,
        text(&st.hash.to_string()),
        text(&st.payload.record.output.to_string()),
        text(&when(st.timestamp))
    );
    s.push_str("</div></details>\n");
}

/// The end of the story: the wait, the end, or what comes next.
fn end(s: &mut String, r: &ThreadReport, gid: &str) {
    if let Some(w) = &r.waiting {
        let _ = write!(
            s,
            r#"<article class="card waiting" data-role="{}"><div class="head"><span class="badge-wait">waiting</span> <b>{}</b> for <span class="agent">{}</span> since {}</div><div class="prompt"><span class="k">Asked</span>{}</div>"#,
            attr(&w.role),
            text(&w.role),
            text(&w.agent),
            text(&when(w.since)),
            block(&w.prompt),
        );
        if let Some(id) = &r.id {
            let target = w.child.unwrap_or(*id);
            let _ = write!(
                s,
                r#"<p class="why">Answer with <code>uwf thread answer {} --output '{{…}}'</code>.</p>"#,
                text(&target.to_string())
            );
        }
        if let Some(c) = &r.waiting_child {
            s.push_str(r#"<div class="child"><p class="k">The child thread that waits</p>"#);
            thread(s, c, &format!("{gid}-w"));
            s.push_str("</div>");
        }
        s.push_str("</article>\n");
        return;
    }
    match (&r.trace.next, &r.trace.error) {
        (Some(h), _) if h.to == END => {
            let _ = write!(
                s,
                r#"<article class="card end"><div class="head"><b>$END</b></div><p class="why">{}.</p></article>"#,
                text(&why(h))
            );
        }
        (Some(h), _) if !r.archived && r.running.as_ref().is_some_and(|run| run.role == h.to) => {
            let run = r
                .running
                .as_ref()
                .map_or((String::new(), String::new(), 0), |run| {
                    (run.agent.clone(), run.host.clone(), run.since)
                });
            let _ = write!(
                s,
                r#"<article class="card next running" data-role="{}"><div class="head"><span class="badge-next">running</span> <b>{}</b></div><p class="why">{}. Running since {} ({} on {}).</p></article>"#,
                attr(&h.to),
                text(&h.to),
                text(&why(h)),
                text(&when(run.2)),
                text(&run.0),
                text(&run.1)
            );
        }
        (Some(h), _) if !r.archived => {
            let _ = write!(
                s,
                r#"<article class="card next" data-role="{}"><div class="head"><span class="badge-next">next</span> <b>{}</b></div><p class="why">{}. <code>uwf thread step</code> runs it.</p></article>"#,
                attr(&h.to),
                text(&h.to),
                text(&why(h))
            );
        }
        (_, Some(e)) => {
            let _ = write!(
                s,
                r#"<article class="card attempt"><div class="head"><b>The moderator cannot decide</b></div><pre class="text">{}</pre></article>"#,
                text(e)
            );
        }
        _ => {}
    }
}

/// An output: an object as a list of fields (strings as text, the rest as
/// JSON), anything else as JSON.
fn value(s: &mut String, v: &Value) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            s.push_str(r#"<dl class="kv">"#);
            for (k, v) in map {
                let _ = write!(s, "<dt>{}</dt><dd>", text(k));
                match v {
                    Value::String(t) => s.push_str(&block(t)),
                    Value::Bool(_) | Value::Number(_) | Value::Null => {
                        let _ = write!(s, "<code>{}</code>", text(&v.to_string()));
                    }
                    other => json(s, other),
                }
                s.push_str("</dd>");
            }
            s.push_str("</dl>");
        }
        other => json(s, other),
    }
}

fn json(s: &mut String, v: &Value) {
    let pretty = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    let _ = write!(s, r#"<pre class="json">{}</pre>"#, text(&cut(&pretty)));
}

/// A text block, whitespace kept.
fn block(t: &str) -> String {
    format!(r#"<div class="text">{}</div>"#, text(&cut(t)))
}

fn cut(t: &str) -> String {
    match t.char_indices().nth(MAX_TEXT) {
        Some((at, _)) => format!(
            "{}\n… ({} more characters not shown)",
            &t[..at],
            t[at..].chars().count()
        ),
        None => t.to_string(),
    }
}

fn detail(s: &mut String, d: &DetailView, has_child: bool) {
    let title = d.title.as_deref().unwrap_or("detail");
    match &d.detail {
        Detail::ChildThread if has_child => {}
        Detail::ChildThread => {
            let _ = write!(
                s,
                r#"<p class="why">Detail <code>{}</code>: the terminal step of a child thread.</p>"#,
                text(&d.hash.to_string())
            );
        }
        Detail::Missing => {
            let _ = write!(
                s,
                r#"<p class="warn">Detail <code>{}</code> is not in the store.</p>"#,
                text(&d.hash.to_string())
            );
        }
        Detail::Text { meta, text: t } => {
            let _ = write!(
                s,
                r#"<details class="sub"><summary>{} <code>{}</code></summary>"#,
                text(title),
                text(&d.hash.to_string())
            );
            meta_line(s, meta);
            s.push_str(&block(t));
            s.push_str("</details>");
        }
        Detail::Json(v) => {
            let _ = write!(
                s,
                r#"<details class="sub"><summary>{} <code>{}</code></summary>"#,
                text(title),
                text(&d.hash.to_string())
            );
            json(s, v);
            s.push_str("</details>");
        }
        Detail::Transcript {
            meta,
            turns,
            missing,
        } => {
            let calls: usize = turns.iter().map(|t| t.calls.len()).sum();
            let _ = write!(
                s,
                r#"<details class="sub convo"><summary>conversation: {} turn{}, {} tool call{} <span class="muted">({} <code>{}</code>)</span></summary>"#,
                turns.len(),
                if turns.len() == 1 { "" } else { "s" },
                calls,
                if calls == 1 { "" } else { "s" },
                text(title),
                text(&d.hash.to_string())
            );
            meta_line(s, meta);
            for t in turns {
                turn(s, t);
            }
            if *missing > 0 {
                let _ = write!(
                    s,
                    r#"<p class="warn">{missing} turn(s) not shown (missing from the store, or too many).</p>"#
                );
            }
            s.push_str("</details>");
        }
    }
}

fn meta_line(s: &mut String, meta: &[(String, String)]) {
    if meta.is_empty() {
        return;
    }
    s.push_str(r#"<p class="dmeta">"#);
    for (k, v) in meta {
        let _ = write!(s, "<span><b>{}</b> {}</span> ", text(k), text(v));
    }
    s.push_str("</p>");
}

fn turn(s: &mut String, t: &Turn) {
    let class = match t.role.as_str() {
        "assistant" => "assistant",
        "user" => "user",
        "tool" => "tool",
        "system" => "system",
        _ => "other",
    };
    let _ = write!(
        s,
        r#"<div class="msg {class}"><div class="who">{}</div>"#,
        text(&t.role)
    );
    if let Some(th) = &t.thinking {
        let _ = write!(
            s,
            r#"<details class="thinking"><summary>thinking</summary>{}</details>"#,
            block(th)
        );
    }
    if !t.text.trim().is_empty() {
        s.push_str(&block(&t.text));
    }
    for c in &t.calls {
        let _ = write!(
            s,
            r#"<div class="call"><span class="tool">{}</span><pre>{}</pre></div>"#,
            text(&c.name),
            text(&cut(&c.input))
        );
    }
    for r in &t.results {
        let _ = write!(
            s,
            r#"<details class="result{}"><summary>{}{}</summary><pre>{}</pre></details>"#,
            if r.is_error { " error" } else { "" },
            if r.is_error {
                "tool error"
            } else {
                "tool result"
            },
            r.name
                .as_deref()
                .map(|n| format!(" · {}", text(n)))
                .unwrap_or_default(),
            text(&cut(&r.content))
        );
    }
    s.push_str("</div>");
}

/// A time as UTC, to the second.
fn when(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms))
        .to_string()
        .replace('T', " ")
}

/// A duration in ms as seconds (`0.4s`, `12.3s`, `4m 02s`).
fn secs(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        let s = ms / 1000;
        format!("{}m {:02}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_times() {
        assert_eq!(secs(420), "0.4s");
        assert_eq!(secs(12_345), "12.3s");
        assert_eq!(secs(242_000), "4m 02s");
        assert_eq!(when(0), "1970-01-01 00:00:00Z");
    }

    #[test]
    fn long_text_is_cut() {
        let long = "é".repeat(MAX_TEXT + 5);
        let c = cut(&long);
        assert!(c.ends_with("… (5 more characters not shown)"));
    }

    #[test]
    fn the_script_has_no_untrusted_input_and_its_hash_is_in_the_policy() {
        let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT));
        assert_eq!(hash.len(), 44);
        assert!(!SCRIPT.contains("</script"));
    }
}
