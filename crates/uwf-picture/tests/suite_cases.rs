//! Runs the official JSONata test-suite cases that are a single call of one
//! of this crate's functions with literal arguments.
//!
//! The suite ships in the `jsonata-rs` package (a dev-dependency only so that
//! cargo fetches it); its directory is found through `cargo metadata`.
//! Cases that are not such a call (nested expressions, paths, `$now()`,
//! undefined arguments) are counted as skipped and listed: the evaluator's
//! full-suite runner covers them.

#![allow(clippy::expect_used)] // a test: a broken suite layout should stop it loudly

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use uwf_picture::{
    DecimalFormat, PictureError, format_base, format_datetime, format_integer, format_number,
    jsonata_number_string, parse_datetime, parse_integer, parse_number_text,
};

const GROUPS: &[&str] = &[
    "function-formatNumber",
    "function-formatInteger",
    "function-parseInteger",
    "function-formatBase",
    "function-fromMillis",
    "function-tomillis",
    "function-string",
    "function-number",
];

fn suite_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed");
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let manifest = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "jsonata-rs")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("jsonata-rs package in cargo metadata");
    Path::new(manifest)
        .parent()
        .expect("package dir")
        .join("tests/testsuite")
}

/// A literal argument.
#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Num(f64),
    Str(String),
    Obj(Vec<(String, String)>),
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
}

impl P<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn string(&mut self) -> Option<String> {
        self.ws();
        let q = *self.s.get(self.i)?;
        if q != b'"' && q != b'\'' {
            return None;
        }
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let c = *self.s.get(self.i)?;
            self.i += 1;
            if c == q {
                break;
            }
            if c == b'\\' {
                let e = *self.s.get(self.i)?;
                self.i += 1;
                match e {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'u' => {
                        let hex = std::str::from_utf8(self.s.get(self.i..self.i + 4)?).ok()?;
                        self.i += 4;
                        let ch = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
                        out.extend_from_slice(ch.to_string().as_bytes());
                    }
                    other => out.push(other),
                }
            } else {
                out.push(c);
            }
        }
        String::from_utf8(out).ok()
    }
    fn number(&mut self) -> Option<f64> {
        self.ws();
        let start = self.i;
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_digit()
                || matches!(self.s[self.i], b'.' | b'e' | b'E')
                || (matches!(self.s[self.i], b'+' | b'-')
                    && matches!(self.s[self.i - 1], b'e' | b'E')))
        {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()?
            .parse()
            .ok()
    }
    fn lit(&mut self) -> Option<Lit> {
        self.ws();
        match *self.s.get(self.i)? {
            b'"' | b'\'' => self.string().map(Lit::Str),
            b'{' => {
                self.i += 1;
                let mut pairs = Vec::new();
                if !self.eat(b'}') {
                    loop {
                        let k = self.string()?;
                        if !self.eat(b':') {
                            return None;
                        }
                        let v = self.string()?;
                        pairs.push((k, v));
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
                Some(Lit::Obj(pairs))
            }
            _ => self.number().map(Lit::Num),
        }
    }
}

/// `$name(lit, lit, …)` and nothing else.
fn parse_call(expr: &str) -> Option<(String, Vec<Lit>)> {
    let expr = expr.trim();
    let rest = expr.strip_prefix('$')?;
    let open = rest.find('(')?;
    let name = rest[..open].to_string();
    if !name.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    let mut p = P {
        s: &rest.as_bytes()[open + 1..],
        i: 0,
    };
    let mut args = Vec::new();
    if !p.eat(b')') {
        loop {
            args.push(p.lit()?);
            if p.eat(b')') {
                break;
            }
            if !p.eat(b',') {
                return None;
            }
        }
    }
    p.ws();
    (p.i == p.s.len()).then_some((name, args))
}

/// What a function call produced: a JSON value, undefined, or an error code.
#[derive(Debug, PartialEq)]
enum Outcome {
    Value(Value),
    Undefined,
    Error(&'static str),
}

fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

fn from_result<T>(r: Result<T, PictureError>, f: impl FnOnce(T) -> Outcome) -> Outcome {
    match r {
        Ok(v) => f(v),
        Err(e) => Outcome::Error(e.code()),
    }
}

fn string_or_none(r: Result<Option<f64>, PictureError>) -> Outcome {
    from_result(r, |v| {
        v.map_or(Outcome::Undefined, |v| Outcome::Value(num(v)))
    })
}

/// Runs a call if it is one of ours with arguments of the right kinds.
fn run(name: &str, args: &[Lit]) -> Option<Outcome> {
    use Lit::*;
    let s = |r: Result<String, PictureError>| from_result(r, |v| Outcome::Value(Value::String(v)));
    Some(match (name, args) {
        ("formatNumber", [Num(v), Str(p)]) => s(format_number(*v, p, &DecimalFormat::default())),
        ("formatNumber", [Num(v), Str(p), Obj(o)]) => {
            let f = DecimalFormat::from_options(o.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            match f {
                Ok(f) => s(format_number(*v, p, &f)),
                Err(e) => Outcome::Error(e.code()),
            }
        }
        ("formatInteger", [Num(v), Str(p)]) => s(format_integer(*v, p)),
        ("parseInteger", [Str(t), Str(p)]) => string_or_none(parse_integer(t, p)),
        ("formatBase", [Num(v)]) => s(format_base(*v, None)),
        ("formatBase", [Num(v), Num(r)]) => s(format_base(*v, Some(*r))),
        ("fromMillis", [Num(v)]) => s(format_datetime(*v, None, None)),
        ("fromMillis", [Num(v), Str(p)]) => s(format_datetime(*v, Some(p), None)),
        ("fromMillis", [Num(v), Str(p), Str(tz)]) => s(format_datetime(*v, Some(p), Some(tz))),
        ("toMillis", [Str(t)]) => string_or_none(parse_datetime(t, None)),
        ("toMillis", [Str(t), Str(p)]) => string_or_none(parse_datetime(t, Some(p))),
        ("string", [Num(v)]) => Outcome::Value(Value::String(jsonata_number_string(*v))),
        ("number", [Str(t)]) => match parse_number_text(t) {
            Some(v) => Outcome::Value(num(v)),
            None => Outcome::Error("D3030"),
        },
        _ => return None,
    })
}

fn expected(case: &Value) -> Option<Outcome> {
    if let Some(code) = case.get("code").and_then(Value::as_str) {
        return Some(Outcome::Error(Box::leak(code.to_string().into_boxed_str())));
    }
    if case.get("undefinedResult").and_then(Value::as_bool) == Some(true) {
        return Some(Outcome::Undefined);
    }
    case.get("result").cloned().map(Outcome::Value)
}

fn same(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Outcome::Value(Value::Number(x)), Outcome::Value(Value::Number(y))) => {
            x.as_f64() == y.as_f64()
        }
        _ => a == b,
    }
}

#[derive(Default)]
struct Tally {
    covered: usize,
    passed: usize,
    skipped: Vec<String>,
    failed: Vec<String>,
}

#[test]
fn official_suite_literal_calls() {
    let dir = suite_dir();
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    for group in GROUPS {
        let tally = tallies.entry(group).or_default();
        for kind in ["groups", "skip"] {
            let gdir = dir.join(kind).join(group);
            let Ok(entries) = std::fs::read_dir(&gdir) else {
                continue;
            };
            let mut files: Vec<PathBuf> =
                entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            files.sort();
            for file in files {
                let text = std::fs::read_to_string(&file).expect("read case");
                let json: Value = serde_json::from_str(&text).expect("case is JSON");
                let cases = match json {
                    Value::Array(a) => a,
                    other => vec![other],
                };
                let fname = file
                    .file_name()
                    .map(|f| f.to_string_lossy().to_string())
                    .unwrap_or_default();
                for (i, case) in cases.iter().enumerate() {
                    let label = format!("{kind}/{group}/{fname}#{i}");
                    let expr = case.get("expr").and_then(Value::as_str).unwrap_or("");
                    let call = parse_call(expr);
                    let outcome = call.as_ref().and_then(|(n, a)| run(n, a));
                    let (Some(outcome), Some(want)) = (outcome, expected(case)) else {
                        tally.skipped.push(format!("{label}: {expr}"));
                        continue;
                    };
                    tally.covered += 1;
                    if same(&outcome, &want) {
                        tally.passed += 1;
                    } else {
                        tally.failed.push(format!(
                            "{label}: {expr}\n    want {want:?}\n    got  {outcome:?}"
                        ));
                    }
                }
            }
        }
    }
    let mut total = (0, 0, 0);
    for (group, t) in &tallies {
        println!(
            "{group}: covered {}, passed {}, skipped {}",
            t.covered,
            t.passed,
            t.skipped.len()
        );
        for s in &t.skipped {
            println!("  skipped {s}");
        }
        for f in &t.failed {
            println!("  FAILED {f}");
        }
        total.0 += t.covered;
        total.1 += t.passed;
        total.2 += t.skipped.len();
    }
    println!(
        "total: covered {}, passed {}, skipped {}",
        total.0, total.1, total.2
    );
    assert!(total.0 > 300, "too few cases were recognised: {}", total.0);
    assert_eq!(
        total.0, total.1,
        "some covered cases failed (see FAILED above)"
    );
}
