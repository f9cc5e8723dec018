//! Runs the official JSONata test suite (shipped inside the jsonata-rs crate
//! package, a dev-dependency) against uwf-jsonata.
//!
//! Every case under `groups/` and `skip/` runs. The test fails if a case that is
//! not listed in `tests/exclusions.txt` fails, or if a listed case passes.
//! Set `UWF_SUITE_FILTER=<substring>` to run only matching case ids and
//! `UWF_SUITE_VERBOSE=1` to print every failure.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value as J;
use uwf_jsonata::{EvalOptions, Expression, Limits};

fn suite_dir() -> PathBuf {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata failed");
    let meta: J = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let pkg = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "jsonata-rs")
        .expect("jsonata-rs is a dev-dependency");
    let manifest = PathBuf::from(pkg["manifest_path"].as_str().expect("manifest_path"));
    manifest
        .parent()
        .expect("package dir")
        .join("tests")
        .join("testsuite")
}

struct Case {
    id: String,
    group: String,
    body: J,
    dir: PathBuf,
}

fn load_cases(root: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for top in ["groups", "skip"] {
        let mut groups: Vec<_> = std::fs::read_dir(root.join(top))
            .expect("suite dir")
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        groups.sort();
        for g in groups {
            let gname = g.file_name().expect("name").to_string_lossy().to_string();
            let mut files: Vec<_> = std::fs::read_dir(&g)
                .expect("group dir")
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().map(|x| x == "json").unwrap_or(false))
                .collect();
            files.sort();
            for f in files {
                let text = std::fs::read_to_string(&f).expect("case file");
                // Lone UTF-16 surrogates (valid in JavaScript strings, not in Rust ones)
                // are passed through to the expression as JSONata escapes.
                let body: J = serde_json::from_str(&text)
                    .or_else(|_| {
                        let fixed = text.replace("\\uD", "\\\\uD").replace("\\ud", "\\\\ud");
                        serde_json::from_str(&fixed)
                    })
                    .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                let fname = f.file_name().expect("name").to_string_lossy().to_string();
                let list = match body {
                    J::Array(items) => items,
                    other => vec![other],
                };
                let many = list.len() > 1;
                for (i, c) in list.into_iter().enumerate() {
                    let id = if many {
                        format!("{gname}/{fname}#{i}")
                    } else {
                        format!("{gname}/{fname}")
                    };
                    cases.push(Case {
                        id,
                        group: gname.clone(),
                        body: c,
                        dir: g.clone(),
                    });
                }
            }
        }
    }
    cases
}

fn num_eq(a: &J, b: &J, unordered: bool) -> bool {
    match (a, b) {
        (J::Number(x), J::Number(y)) => x.as_f64() == y.as_f64(),
        (J::Array(x), J::Array(y)) => {
            if x.len() != y.len() {
                return false;
            }
            if unordered {
                let mut used = vec![false; y.len()];
                x.iter().all(|xi| {
                    if let Some(j) = (0..y.len()).find(|&j| !used[j] && num_eq(xi, &y[j], false)) {
                        used[j] = true;
                        true
                    } else {
                        false
                    }
                })
            } else {
                x.iter().zip(y).all(|(p, q)| num_eq(p, q, false))
            }
        }
        (J::Object(x), J::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).map(|w| num_eq(v, w, false)).unwrap_or(false))
        }
        _ => a == b,
    }
}

/// Runs one case; Ok(()) on pass, Err(description) on failure.
fn run_case(root: &Path, case: &Case) -> Result<(), String> {
    let c = &case.body;
    let expr_text = match (&c["expr"], &c["expr-file"]) {
        (J::String(s), _) => s.clone(),
        (_, J::String(f)) => {
            std::fs::read_to_string(case.dir.join(f)).map_err(|e| e.to_string())?
        }
        _ => return Err("case has no expression".into()),
    };
    let input: Option<J> = if let Some(d) = c.get("data") {
        Some(d.clone())
    } else {
        match &c["dataset"] {
            J::String(name) => {
                let p = root.join("datasets").join(format!("{name}.json"));
                let t = std::fs::read_to_string(p).map_err(|e| e.to_string())?;
                Some(serde_json::from_str(&t).map_err(|e| e.to_string())?)
            }
            _ => None,
        }
    };
    let mut opts = EvalOptions::default();
    if let J::Object(b) = &c["bindings"] {
        for (k, v) in b {
            opts.bindings.insert(k.clone(), v.clone());
        }
    }
    let mut limits = Limits {
        time_limit: Some(Duration::from_secs(10)),
        ..Limits::default()
    };
    if let Some(t) = c["timelimit"].as_u64() {
        limits.time_limit = Some(Duration::from_millis(t));
    }
    if let Some(d) = c["depth"].as_u64() {
        limits.max_depth = d as usize;
    }
    opts.limits = limits;
    let expected_code = c["code"]
        .as_str()
        .or_else(|| c["error"]["code"].as_str())
        .map(str::to_string);
    let result = Expression::parse(&expr_text).and_then(|e| e.evaluate(input.as_ref(), &opts));
    match (result, expected_code) {
        (Err(e), Some(code)) => {
            if e.code == code {
                Ok(())
            } else {
                Err(format!(
                    "expected error {code}, got {}: {}",
                    e.code, e.message
                ))
            }
        }
        (Ok(v), Some(code)) => Err(format!("expected error {code}, got result {v:?}")),
        (Err(e), None) => Err(format!("unexpected error {}: {}", e.code, e.message)),
        (Ok(v), None) => {
            if c["undefinedResult"] == J::Bool(true) {
                return match v {
                    None => Ok(()),
                    Some(v) => Err(format!("expected undefined, got {v}")),
                };
            }
            if let Some(re) = c["result_re"].as_str() {
                let ok = match &v {
                    Some(J::String(s)) => fancy_regex::Regex::new(re)
                        .map(|r| r.is_match(s).unwrap_or(false))
                        .unwrap_or(false),
                    _ => false,
                };
                return if ok {
                    Ok(())
                } else {
                    Err(format!("result {v:?} does not match /{re}/"))
                };
            }
            let Some(expected) = c.get("result") else {
                return Err("case has no expectation".into());
            };
            let unordered = c["unordered"] == J::Bool(true);
            match v {
                Some(v) if num_eq(&v, expected, unordered) => Ok(()),
                other => Err(format!("expected {expected}, got {other:?}")),
            }
        }
    }
}

fn load_exclusions() -> BTreeMap<String, String> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/exclusions.txt");
    let text = std::fs::read_to_string(p).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(char::is_whitespace) {
            Some((id, reason)) => (id.to_string(), reason.trim().to_string()),
            None => (l.to_string(), String::new()),
        })
        .collect()
}

fn run_suite() {
    let root = suite_dir();
    let cases = load_cases(&root);
    let filter = std::env::var("UWF_SUITE_FILTER").ok();
    let verbose = std::env::var("UWF_SUITE_VERBOSE").is_ok();
    let exclusions = load_exclusions();
    for (id, reason) in &exclusions {
        assert!(!reason.is_empty(), "exclusion {id} has no reason");
    }
    let mut per_group: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut unexpected_fail = Vec::new();
    let mut unexpected_pass = Vec::new();
    let (mut total, mut passed) = (0, 0);
    for case in &cases {
        if let Some(f) = &filter
            && !case.id.contains(f.as_str())
        {
            continue;
        }
        total += 1;
        let r = run_case(&root, case);
        let entry = per_group.entry(case.group.clone()).or_default();
        entry.1 += 1;
        let excluded = exclusions.contains_key(&case.id);
        match r {
            Ok(()) => {
                passed += 1;
                entry.0 += 1;
                if excluded {
                    unexpected_pass.push(case.id.clone());
                }
            }
            Err(msg) => {
                if verbose {
                    println!(
                        "FAIL {}: {}\n    expr: {}",
                        case.id,
                        msg,
                        case.body["expr"].as_str().unwrap_or("(file)")
                    );
                }
                if !excluded {
                    unexpected_fail.push(format!("{}: {msg}", case.id));
                }
            }
        }
    }
    for (g, (p, t)) in &per_group {
        println!("{g:40} {p:4}/{t:4}");
    }
    println!(
        "TOTAL {passed}/{total} passed, {} excluded",
        exclusions.len()
    );
    if filter.is_some() {
        return;
    }
    assert!(
        unexpected_fail.is_empty(),
        "{} cases failed that are not excluded:\n{}",
        unexpected_fail.len(),
        unexpected_fail.join("\n")
    );
    assert!(
        unexpected_pass.is_empty(),
        "excluded cases now pass; remove them from tests/exclusions.txt:\n{}",
        unexpected_pass.join("\n")
    );
}

#[test]
fn official_suite() {
    std::thread::Builder::new()
        .stack_size(256 * 1024 * 1024)
        .spawn(run_suite)
        .expect("spawn suite thread")
        .join()
        .expect("suite passes");
}
