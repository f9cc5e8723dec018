//! `uwf thread view` and `uwf workflow graph --thread` with the real
//! binaries: a thread of examples/solve-issue.yaml run by uwf-mock, one of
//! whose outputs is a script payload.
//!
//! Every test runs on both stores (`per_backend!`): the filesystem root,
//! and PostgreSQL, where the threads the page and the graph are drawn
//! from (their nodes, heads, history, waits and attempts) are the
//! database's rows — checked: the threads are in the store and nothing of
//! them in the root. Headless Chromium looks at the page once, on the
//! filesystem: see [`view_in_headless_chromium`].
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
/// `uwf serve`: its API and pages show what `thread view` and `thread show` do.
mod view_serve;

use common::{Backend, Env, example, mock_agent};
use serde_json::Value;

per_backend!(
    view_writes_one_self_contained_page,
    view_to_stdout_and_to_the_temp_dir,
    view_failures_say_why_and_print_nothing,
    graph_overlays_the_threads_path,
    view_marks_the_wait_and_the_failed_attempts,
    view_nests_child_threads,
    view_in_headless_chromium,
);

/// What a malicious agent might answer.
pub const PAYLOAD: &str = r#"<script>window.__pwned = 1; document.title = "PWNED"</script><img src=x onerror="window.__pwned = 2">"#;

/// examples/solve-issue.mock.yaml with the first developer summary
/// replaced by [`PAYLOAD`]; runs the thread to its end and returns its id.
pub fn payload_thread(env: &Env) -> String {
    let scenario = std::fs::read_to_string(example("solve-issue.mock.yaml")).unwrap();
    let original =
        "summary: \"Treat an expired session as logged out instead of redirecting again.\"";
    assert!(scenario.contains(original), "the example scenario changed");
    let quoted = serde_json::to_string(PAYLOAD).unwrap();
    let scenario = scenario.replace(original, &format!("summary: {quoted}"));
    let path = env.file("payload.mock.yaml", &scenario);
    let out = env.json(&[
        "thread",
        "run",
        &example("solve-issue.yaml"),
        "-p",
        "Fix the login redirect loop",
        "--agent",
        &mock_agent(&path),
    ]);
    assert_eq!(out["done"], true);
    let id = out["thread"].as_str().unwrap().to_string();
    assert_archived(env, &[&id]);
    id
}

/// Asserts that the store has archived each of `threads` (done):
/// `history.jsonl`, or the rows of `uwf_history` on PostgreSQL, where
/// nothing of a thread is in the root.
fn assert_archived(env: &Env, threads: &[&str]) {
    let history = env.history();
    for id in threads {
        assert!(
            history.iter().any(|h| h["thread"] == *id),
            "{id} not archived: {history:?}"
        );
    }
    assert_nothing_in_the_root(env);
}

/// On PostgreSQL, the root holds no thread state: the database is the
/// store (the root keeps only local things such as `.env`).
fn assert_nothing_in_the_root(env: &Env) {
    if env.db.is_some() {
        for name in ["cas", "threads", "history.jsonl", "registry.yaml"] {
            assert!(!env.root().join(name).exists(), "{name} in the root");
        }
    }
}

fn view_writes_one_self_contained_page(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = payload_thread(&env);
    let file = env.dir.path().join("out.html");
    let out = env.json(&["thread", "view", &id, "--html", file.to_str().unwrap()]);
    assert_eq!(out["thread"], id.as_str());
    assert_eq!(out["html"], file.to_str().unwrap());
    let page = std::fs::read_to_string(&file).unwrap();
    assert_eq!(out["bytes"], page.len());
    assert!(page.starts_with("<!DOCTYPE html>"));
    // The payload is text.
    assert!(!page.contains("<script>window.__pwned"));
    assert!(!page.contains("<img"));
    assert!(page.contains("&lt;script&gt;window.__pwned = 1;"));
    assert_eq!(
        page.matches("<script").count(),
        1,
        "only the page's own script"
    );
    for bad in [" href=", "@import", "url(http"] {
        assert!(!page.contains(bad), "refers to something outside: {bad}");
    }
    // Every step, with why it ran.
    assert_eq!(page.matches(r#"class="card step""#).count(), 5);
    assert!(page.contains("From reviewer: condition notApproved held (#1)"));
    assert!(page.contains(&format!("<dd>{id}</dd>")));
}

fn view_to_stdout_and_to_the_temp_dir(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = payload_thread(&env);
    let page = env.text(&["thread", "view", &id, "--html", "-"]);
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));

    // Without --html: uwf-thread-<id>.html in the temp directory.
    let tmp = env.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = env
        .uwf()
        .env("TMPDIR", &tmp)
        .args(["thread", "view", &id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = tmp.join(format!("uwf-thread-{id}.html"));
    assert_eq!(v["html"], want.to_str().unwrap());
    assert_eq!(std::fs::read_to_string(&want).unwrap(), page);
}

fn view_failures_say_why_and_print_nothing(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = payload_thread(&env);
    let err = env.fails(&["thread", "view", "01J7K9M2XNPQR5VWBCDF8G3H4T"]);
    assert!(
        err.contains("no thread 01J7K9M2XNPQR5VWBCDF8G3H4T"),
        "{err}"
    );
    let missing = env.dir.path().join("no/such/dir/out.html");
    let err = env.fails(&["thread", "view", &id, "--html", missing.to_str().unwrap()]);
    assert!(
        err.contains("uwf::view::write") && err.contains("cannot write"),
        "{err}"
    );
    assert!(!missing.exists());
    let err = env.fails(&["thread", "view", "not-an-id"]);
    assert!(!err.is_empty());
}

fn graph_overlays_the_threads_path(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let id = payload_thread(&env);
    let mermaid = env.text(&["workflow", "graph", "--thread", &id]);
    assert!(mermaid.starts_with("flowchart TD\n"), "{mermaid}");
    assert!(mermaid.contains(r#"["developer ×2"]"#), "{mermaid}");
    assert!(mermaid.contains(r#"|"notApproved ×1"|"#), "{mermaid}");
    assert!(mermaid.contains("classDef visited"), "{mermaid}");
    assert!(mermaid.contains("linkStyle "), "{mermaid}");

    let dot = env.text(&["workflow", "graph", "--thread", &id, "--format", "dot"]);
    assert!(
        dot.contains("\"reviewer\" [label=\"reviewer\\n×2\""),
        "{dot}"
    );
    assert!(dot.contains("penwidth=3"), "{dot}");

    let v = env.json(&["workflow", "graph", "--thread", &id, "--format", "json"]);
    let path: Vec<(String, String)> = v["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["from"].as_str().unwrap().into(),
                h["to"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("$START", "planner"),
        ("planner", "developer"),
        ("developer", "reviewer"),
        ("reviewer", "developer"),
        ("developer", "reviewer"),
        ("reviewer", "$END"),
    ];
    assert_eq!(
        path,
        want.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    );
    assert_eq!(v["visits"]["developer"], 2);
    // Each hop's transition is numbered as `why` numbers it (from 1), and
    // as `thread next --explain` numbers the one that ends the thread.
    let steps = env.json(&["thread", "steps", &id]);
    let whys: Vec<Value> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|s| s["why"]["transition"].clone())
        .collect();
    let hops: Vec<Value> = v["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["transition"].clone())
        .collect();
    assert_eq!(hops[..whys.len()], whys[..], "{v:#}");
    assert_eq!(hops[0], 1, "{v:#}");
    let explained = env.json(&["thread", "next", &id, "--explain"]);
    assert_eq!(explained["archived"], "done", "{explained:#}");
    let taken: Vec<&Value> = explained["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["taken"] == true)
        .collect();
    assert_eq!(taken.len(), 1, "{explained:#}");
    assert_eq!(
        taken[0]["transition"],
        hops[hops.len() - 1],
        "{explained:#}"
    );
    assert_eq!(taken[0]["role"], "$END", "{explained:#}");

    // The plain diagram is unchanged, and the two ways to name a workflow conflict.
    let plain = env.text(&["workflow", "graph", &example("solve-issue.yaml")]);
    assert!(!plain.contains("×"));
    let out = env.output(&[
        "workflow",
        "graph",
        &example("solve-issue.yaml"),
        "--thread",
        &id,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    env.fails(&[
        "workflow",
        "graph",
        "--thread",
        "01J7K9M2XNPQR5VWBCDF8G3H4T",
    ]);
}

fn view_marks_the_wait_and_the_failed_attempts(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let config = format!(
        "agents:\n  mock: {{ command: {mock:?}, args: [{scenario:?}] }}\n  me: {{ human: true }}\n\
         defaultAgent: mock\nagentOverrides:\n  approve-release: {{ approver: me }}\n\
         retries:\n  approve-release:\n    drafter: {{ max: 2, backoff: 10ms }}\n",
        mock = common::mock_bin().display().to_string(),
        scenario = example("approve-release.human.mock.yaml"),
    );
    env.set_config(&config);
    let out = env.output(&[
        "thread",
        "run",
        &example("approve-release.yaml"),
        "-p",
        "Release v1.2",
    ]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["thread"]
        .as_str()
        .unwrap()
        .to_string();
    // Waiting: still active in the store.
    assert!(env.heads().contains_key(&id), "{:?}", env.heads());
    assert_nothing_in_the_root(&env);
    let page = env.text(&["thread", "view", &id, "--html", "-"]);
    assert!(page.contains(r#"<span class="state waiting">waiting for a person</span>"#));
    assert_eq!(
        page.matches(r#"<article class="card attempt" data-role="drafter">"#)
            .count(),
        2
    );
    assert!(page.contains("failed attempt 2</span>"));
    assert!(
        page.contains(r#"<g class="node visited failed" data-role="drafter""#),
        "drafter: visited, with failed attempts"
    );
    assert!(page.contains(r#"<g class="node waiting" data-role="approver""#));
    assert!(page.contains(r#"class="edge pending" data-from="drafter" data-to="approver""#));
    assert!(page.contains(r#"<article class="card waiting" data-role="approver">"#));
    assert!(page.contains(&format!("uwf thread answer {id} --output")));
    // Attempts come before the step that finally landed.
    let attempt = page.find("failed attempt 1").unwrap();
    let step = page.find(r#"class="card step""#).unwrap();
    assert!(attempt < step);
}

fn view_nests_child_threads(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let config = format!(
        "agents:\n  mock: {{ command: {mock:?}, args: [{scenario:?}] }}\n  develop: {{ command: {wf:?}, args: [develop] }}\n\
         defaultAgent: mock\nagentOverrides:\n  solve-issue-nested: {{ developer: develop }}\n",
        mock = common::mock_bin().display().to_string(),
        wf = common::workflow_bin().display().to_string(),
        scenario = example("solve-issue-nested.mock.yaml"),
    );
    env.set_config(&config);
    env.json(&["workflow", "put", &example("develop.yaml")]);
    let out = env.json(&[
        "thread",
        "run",
        &example("solve-issue-nested.yaml"),
        "-p",
        "Fix it",
    ]);
    let id = out["thread"].as_str().unwrap().to_string();
    let children = env.json(&["thread", "show", &id])["childThreads"].clone();
    let children = children.as_array().unwrap();
    assert_eq!(
        children.len(),
        2,
        "the developer ran twice as a child thread"
    );
    // The children are the store's too (on PostgreSQL: the same database).
    let child_ids: Vec<&str> = children
        .iter()
        .map(|c| c["thread"].as_str().unwrap())
        .collect();
    assert_archived(&env, &[&[id.as_str()][..], &child_ids].concat());
    let page = env.text(&["thread", "view", &id, "--html", "-"]);
    // Each child thread is a section of its own inside its parent's step,
    // with its own graph and steps, and its id.
    assert_eq!(page.matches(r#"<section class="thread depth1""#).count(), 2);
    assert_eq!(page.matches("Done by a child thread").count(), 2);
    assert_eq!(
        page.matches(r#"<svg xmlns="http://www.w3.org/2000/svg" class="graph""#)
            .count(),
        3
    );
    for c in children {
        let child = c["thread"].as_str().unwrap();
        assert!(
            page.contains(&format!("<dd>{child}</dd>")),
            "child {child} not named"
        );
    }
    assert!(page.contains(r#"<span class="wf">develop</span>"#));
    // Element ids stay unique with graphs nested.
    let ids: Vec<&str> = page
        .match_indices(r#" id=""#)
        .map(|(i, m)| {
            let rest = &page[i + m.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    let unique: std::collections::BTreeSet<&&str> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "duplicate element ids: {ids:?}");
}

/// The page in a real browser: headless Chromium (Debian's `chromium`,
/// or `$CHROMIUM_BIN`) driven through the DevTools protocol over a pipe.
/// Checks what a person sees — the graph's roles, the path, a step's
/// output, the payload shown as text and never run — then takes a
/// screenshot into the test's temporary directory (copied to
/// `$UWF_VIEW_SCREENSHOT_DIR` when set). Without Chromium the test says
/// loudly that it was skipped; with `CI=true` or `UWF_CHROMIUM_REQUIRED`
/// set it fails instead.
///
/// The browser runs on the filesystem only. The page is drawn from the
/// thread's nodes, which are the same whichever store holds them, so a
/// second browser would look at the same page: instead, on PostgreSQL,
/// the page the database gives is checked to be the filesystem's page of
/// the same run, up to what differs between any two runs (ids, hashes of
/// timed nodes, times, temporary paths: [`comparable`]). The store-reading
/// part — the run and `thread view` — runs on both.
fn view_in_headless_chromium(backend: Backend) {
    if backend == Backend::Pg {
        let Some(env) = Env::on(backend) else {
            return;
        };
        let id = payload_thread(&env);
        let file = env.dir.path().join("view.html");
        env.json(&["thread", "view", &id, "--html", file.to_str().unwrap()]);
        let page = std::fs::read_to_string(&file).unwrap();
        let fs = Env::new();
        let fs_id = payload_thread(&fs);
        let fs_page = fs.text(&["thread", "view", &fs_id, "--html", "-"]);
        assert_eq!(
            comparable(&page, &env, &id),
            comparable(&fs_page, &fs, &fs_id),
            "the page of a PostgreSQL thread is not the filesystem's"
        );
        assert!(page.contains(&format!("<dd>{id}</dd>")), "{page}");
        return;
    }
    let Some(chromium) = browser::find() else {
        let msg = "chromium not found (install Debian's `chromium`, or set CHROMIUM_BIN)";
        if std::env::var("CI").is_ok_and(|v| v == "true")
            || std::env::var_os("UWF_CHROMIUM_REQUIRED").is_some()
        {
            panic!("{msg}; CI=true (or UWF_CHROMIUM_REQUIRED, as .ci/run sets) requires it");
        }
        eprintln!("\n*** SKIPPED view_in_headless_chromium: {msg} ***\n");
        return;
    };
    let env = Env::new();
    let id = payload_thread(&env);
    let file = env.dir.path().join("view.html");
    env.json(&["thread", "view", &id, "--html", file.to_str().unwrap()]);

    let mut b = browser::Browser::launch(&chromium, env.dir.path());
    let session = b.open(&format!("file://{}", file.display()));
    let seen: Value = b.eval(
        &session,
        r#"(() => {
            const visible = (el) => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
                return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; };
            const taken = document.querySelector("svg .edge.taken path");
            const out = Array.from(document.querySelectorAll(".step .output dd")).find(d => d.innerText.includes("window.__pwned"));
            return {
              title: document.title,
              pwned: window.__pwned === undefined ? null : window.__pwned,
              scripts: document.scripts.length,
              images: document.images.length,
              roles: Array.from(document.querySelectorAll("svg .node text.nlabel")).filter(visible).map(t => t.textContent),
              visited: Array.from(document.querySelectorAll("svg .node.visited")).map(n => n.dataset.role),
              takenColor: taken ? getComputedStyle(taken).stroke : null,
              takenWidth: taken ? getComputedStyle(taken).strokeWidth : null,
              text: document.body.innerText,
              payloadShown: out ? visible(out) && out.innerText : null,
              svgWidth: document.querySelector("svg.graph").getBoundingClientRect().width,
            };
        })()"#,
    );
    assert_eq!(seen["pwned"], Value::Null, "the payload ran: {seen}");
    assert_eq!(seen["images"], 0, "the payload made an <img>: {seen}");
    assert_eq!(seen["scripts"], 1, "{seen}");
    assert!(!seen["title"].as_str().unwrap().contains("PWNED"), "{seen}");
    assert_eq!(
        seen["payloadShown"].as_str(),
        Some(PAYLOAD),
        "the payload is shown as text in its step: {seen}"
    );
    let roles: Vec<&str> = seen["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    for r in ["$START", "planner", "developer", "reviewer", "$END"] {
        assert!(roles.contains(&r), "role {r} not drawn: {roles:?}");
    }
    let visited: Vec<&str> = seen["visited"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(
        visited.len(),
        5,
        "START, three roles and END are on the path: {visited:?}"
    );
    // The path is highlighted: amber (#d97706) and thick.
    assert_eq!(seen["takenColor"], "rgb(217, 119, 6)", "{seen}");
    assert_eq!(seen["takenWidth"], "3px", "{seen}");
    assert!(seen["svgWidth"].as_f64().unwrap() > 100.0, "{seen}");
    let text = seen["text"].as_str().unwrap();
    for want in [
        "solve-issue",
        "Fix the login redirect loop",
        "Reproduce the redirect loop, fix the session check in the auth middleware",
        "From reviewer: condition notApproved held (#1)",
        "LGTM: fix plus regression test.",
    ] {
        assert!(
            text.contains(want),
            "a person does not see {want:?}:\n{text}"
        );
    }

    // The page's own script runs (the policy allows it by hash): a click
    // on a role highlights its steps.
    let hl = b.eval(
        &session,
        r#"(() => { document.querySelector('svg .node[data-role="reviewer"]').dispatchEvent(new MouseEvent("click", {bubbles: true}));
                   return document.querySelectorAll(".step.hl").length; })()"#,
    );
    assert_eq!(hl, 2, "clicking reviewer highlights its two steps");

    let png = b.screenshot(&session);
    let shot = env.dir.path().join("view.png");
    std::fs::write(&shot, &png).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!("screenshot: {} ({} bytes)", shot.display(), png.len());
    if let Some(dir) = std::env::var_os("UWF_VIEW_SCREENSHOT_DIR") {
        std::fs::copy(&shot, std::path::Path::new(&dir).join("view.png")).unwrap();
    }
}

/// `page` (the view of thread `id` of `env`) with what differs between
/// two runs of the same thread blanked out: the thread's id, the paths
/// under the test's temporary directory, the hashes of the step nodes
/// (which hold times) wherever they appear, the times, and the durations
/// between steps. Outputs and their hashes stay: they are the content.
fn comparable(page: &str, env: &Env, id: &str) -> String {
    let mut page = page
        .replace(id, "THREAD")
        .replace(env.dir.path().to_str().unwrap(), "TMP");
    for (start, end, what) in [
        ("step <code>", "</code>", "STEP"),
        (
            r#"title="time since the previous node">"#,
            "</span>",
            "DURATION",
        ),
    ] {
        let mut out = String::new();
        let mut blanked = Vec::new();
        let mut rest = page.as_str();
        while let Some(i) = rest.find(start) {
            let after = &rest[i + start.len()..];
            let j = after.find(end).unwrap();
            blanked.push(after[..j].to_string());
            out.push_str(&rest[..i + start.len()]);
            out.push_str(what);
            rest = &after[j..];
        }
        out.push_str(rest);
        assert!(!blanked.is_empty(), "no {start:?} in the page");
        page = out;
        if what == "STEP" {
            // The head is the last step: named again in the header.
            for hash in blanked {
                page = page.replace(&hash, what);
            }
        }
    }
    // Times: `YYYY-MM-DD HH:MM:SSZ`.
    let mask = "dddd-dd-dd dd:dd:ddZ".as_bytes();
    let bytes = page.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let mut times = 0;
    while i < bytes.len() {
        let is_time = bytes.len() - i >= mask.len()
            && mask.iter().zip(&bytes[i..]).all(|(m, b)| match m {
                b'd' => b.is_ascii_digit(),
                m => m == b,
            });
        if is_time {
            out.extend_from_slice(b"TIME");
            i += mask.len();
            times += 1;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    assert!(times > 0, "no time in the page");
    String::from_utf8(out).unwrap()
}

/// A minimal DevTools-protocol client over `--remote-debugging-pipe`
/// (requests on fd 3, answers on fd 4, each a JSON text ended by NUL).
mod browser {
    use std::io::{BufRead, BufReader, Write};
    use std::path::{Path, PathBuf};
    use std::process::{Child, ChildStdin, Command, Stdio};
    use std::sync::mpsc::{Receiver, channel};
    use std::time::Duration;

    use base64::Engine as _;
    use serde_json::{Value, json};

    /// A guard against a browser that hangs (not a timing assertion).
    const STUCK: Duration = Duration::from_secs(120);

    /// `$CHROMIUM_BIN`, else the first of chromium, chromium-browser,
    /// google-chrome on the PATH.
    pub fn find() -> Option<PathBuf> {
        if let Some(b) = std::env::var_os("CHROMIUM_BIN") {
            return Some(b.into());
        }
        let path = std::env::var_os("PATH")?;
        ["chromium", "chromium-browser", "google-chrome"]
            .iter()
            .flat_map(|n| std::env::split_paths(&path).map(move |d| d.join(n)))
            .find(|p| p.is_file())
    }

    pub struct Browser {
        child: Child,
        input: ChildStdin,
        output: Receiver<Value>,
        next: u64,
        /// Events received while waiting for answers.
        events: Vec<Value>,
    }

    impl Browser {
        /// Starts headless Chromium with a profile under `dir`. The shell
        /// hands our stdin/stdout to Chromium as fds 3 and 4.
        pub fn launch(bin: &Path, dir: &Path) -> Self {
            let profile = dir.join("chromium-profile");
            let mut child = Command::new("sh")
                .arg("-c")
                .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
                .arg(bin)
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--hide-scrollbars",
                    "--remote-debugging-pipe",
                    "--window-size=1400,1000",
                ])
                .arg(format!("--user-data-dir={}", profile.display()))
                .arg("about:blank")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let input = child.stdin.take().unwrap();
            let stdout = child.stdout.take().unwrap();
            let (tx, rx) = channel();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stdout);
                loop {
                    let mut buf = Vec::new();
                    match r.read_until(0, &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            buf.pop();
                            if let Ok(v) = serde_json::from_slice::<Value>(&buf)
                                && tx.send(v).is_err()
                            {
                                break;
                            }
                        }
                    }
                }
            });
            Self {
                child,
                input,
                output: rx,
                next: 0,
                events: Vec::new(),
            }
        }

        /// Sends a command (to a page when `session` is given) and waits for its answer.
        pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
            self.next += 1;
            let id = self.next;
            let mut msg = json!({ "id": id, "method": method, "params": params });
            if let Some(s) = session {
                msg["sessionId"] = json!(s);
            }
            let mut bytes = serde_json::to_vec(&msg).unwrap();
            bytes.push(0);
            self.input.write_all(&bytes).unwrap();
            self.input.flush().unwrap();
            loop {
                let v = self
                    .output
                    .recv_timeout(STUCK)
                    .unwrap_or_else(|e| panic!("no answer from chromium to {method}: {e}"));
                if v["id"] == id {
                    if let Some(err) = v.get("error") {
                        panic!("{method} failed: {err}");
                    }
                    return v["result"].clone();
                }
                if v.get("method").is_some() {
                    self.events.push(v);
                }
            }
        }

        /// Waits for the event `method` of `session` (also one already received).
        fn event(&mut self, session: &str, method: &str) -> Value {
            let matches = |v: &Value| v["method"] == method && v["sessionId"] == session;
            if let Some(i) = self.events.iter().position(matches) {
                return self.events.remove(i);
            }
            loop {
                let v = self
                    .output
                    .recv_timeout(STUCK)
                    .unwrap_or_else(|e| panic!("no {method} from chromium: {e}"));
                if matches(&v) {
                    return v;
                }
            }
        }

        /// Opens `url` in a new page, waits until it has loaded, returns the session.
        pub fn open(&mut self, url: &str) -> String {
            let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
            let attached = self.call(
                None,
                "Target.attachToTarget",
                json!({ "targetId": target["targetId"], "flatten": true }),
            );
            let session = attached["sessionId"].as_str().unwrap().to_string();
            self.call(Some(&session), "Page.enable", json!({}));
            let nav = self.call(Some(&session), "Page.navigate", json!({ "url": url }));
            assert!(nav.get("errorText").is_none(), "cannot open {url}: {nav}");
            self.event(&session, "Page.loadEventFired");
            session
        }

        /// Evaluates `expression` in the page; its value (promises awaited).
        pub fn eval(&mut self, session: &str, expression: &str) -> Value {
            let r = self.call(
                Some(session),
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            );
            if let Some(e) = r.get("exceptionDetails") {
                panic!("the page threw: {e}");
            }
            r["result"]["value"].clone()
        }

        /// A PNG of the whole page.
        pub fn screenshot(&mut self, session: &str) -> Vec<u8> {
            let r = self.call(
                Some(session),
                "Page.captureScreenshot",
                json!({ "format": "png", "captureBeyondViewport": true }),
            );
            base64::engine::general_purpose::STANDARD
                .decode(r["data"].as_str().unwrap())
                .unwrap()
        }
    }

    impl Drop for Browser {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
