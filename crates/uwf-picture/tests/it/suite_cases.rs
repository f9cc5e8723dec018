//! Runs the official JSONata test-suite cases of the picture and number-text
//! groups whose expression is made only of calls of this crate's functions:
//! literal arguments (numbers, strings, objects of strings, `()`), number
//! arithmetic, `~>` chains, array constructors and `($v := …; …)` blocks.
//!
//! The suite ships in the `jsonata-rs` package (a dev-dependency only so that
//! cargo fetches it); its directory is found through `cargo metadata`.
//! Other cases (paths into input data, `undefined`, `$now()`, functions of
//! other crates) are counted as skipped and listed (`--nocapture`): the
//! evaluator's full-suite runner covers them.

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

/// A value while evaluating the small expression subset.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Num(f64),
    Str(String),
    Obj(Vec<(String, String)>),
    Arr(Vec<V>),
    Undef,
}

/// Why evaluation stopped early.
#[derive(Debug, Clone, PartialEq)]
enum Stop {
    /// Not in the subset this test understands: the case is skipped.
    Unsupported,
    /// One of our functions raised this error code.
    Code(&'static str),
}

/// A tiny evaluator for expressions made only of calls of this crate's
/// functions: literals (numbers, strings, objects of strings, `()`),
/// arithmetic on numbers, `~>` chains, array constructors and a block
/// `($v := …; …)` with variables.
struct P<'a> {
    s: &'a [u8],
    i: usize,
    vars: Vec<(String, V)>,
}

type R = Result<V, Stop>;

impl P<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(tok.as_bytes()) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }
    fn need(&mut self, tok: &str) -> Result<(), Stop> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(Stop::Unsupported)
        }
    }
    fn string(&mut self) -> Result<String, Stop> {
        self.ws();
        let q = *self.s.get(self.i).ok_or(Stop::Unsupported)?;
        if q != b'"' && q != b'\'' {
            return Err(Stop::Unsupported);
        }
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let c = *self.s.get(self.i).ok_or(Stop::Unsupported)?;
            self.i += 1;
            if c == q {
                break;
            }
            if c == b'\\' {
                let e = *self.s.get(self.i).ok_or(Stop::Unsupported)?;
                self.i += 1;
                match e {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'u' => {
                        let hex = self
                            .s
                            .get(self.i..self.i + 4)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u32::from_str_radix(h, 16).ok())
                            .and_then(char::from_u32)
                            .ok_or(Stop::Unsupported)?;
                        self.i += 4;
                        out.extend_from_slice(hex.to_string().as_bytes());
                    }
                    other => out.push(other),
                }
            } else {
                out.push(c);
            }
        }
        String::from_utf8(out).map_err(|_| Stop::Unsupported)
    }
    fn ident(&mut self) -> String {
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_alphanumeric() {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).to_string()
    }
    fn number(&mut self) -> R {
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_digit()
                || matches!(self.s[self.i], b'.' | b'e' | b'E')
                || (matches!(self.s[self.i], b'+' | b'-')
                    && matches!(self.s[self.i - 1], b'e' | b'E')))
        {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()
            .and_then(|t| t.parse().ok())
            .map(V::Num)
            .ok_or(Stop::Unsupported)
    }

    /// program := block | chain
    fn program(&mut self) -> R {
        let v = self.chain()?;
        self.ws();
        if self.i == self.s.len() {
            Ok(v)
        } else {
            Err(Stop::Unsupported)
        }
    }
    /// chain := sum ('~>' call)*
    fn chain(&mut self) -> R {
        let mut v = self.sum()?;
        while self.eat("~>") {
            self.need("$")?;
            let name = self.ident();
            v = self.call(&name, Some(v))?;
        }
        Ok(v)
    }
    fn sum(&mut self) -> R {
        let mut v = self.product()?;
        loop {
            let op = match self.peek() {
                Some(b'+') => 1.0,
                Some(b'-') => -1.0,
                _ => return Ok(v),
            };
            self.i += 1;
            let r = self.product()?;
            v = match (v, r) {
                (V::Num(a), V::Num(b)) => V::Num(a + op * b),
                _ => return Err(Stop::Unsupported),
            };
        }
    }
    fn product(&mut self) -> R {
        let mut v = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(b'*') => b'*',
                Some(b'/') => b'/',
                _ => return Ok(v),
            };
            self.i += 1;
            let r = self.unary()?;
            v = match (v, r) {
                (V::Num(a), V::Num(b)) if op == b'*' => V::Num(a * b),
                (V::Num(a), V::Num(b)) => V::Num(a / b),
                _ => return Err(Stop::Unsupported),
            };
        }
    }
    fn unary(&mut self) -> R {
        if self.peek() == Some(b'-') {
            self.i += 1;
            return match self.unary()? {
                V::Num(n) => Ok(V::Num(-n)),
                _ => Err(Stop::Unsupported),
            };
        }
        self.primary()
    }
    fn primary(&mut self) -> R {
        match self.peek().ok_or(Stop::Unsupported)? {
            b'"' | b'\'' => self.string().map(V::Str),
            b'0'..=b'9' | b'.' => self.number(),
            b'{' => {
                self.i += 1;
                let mut pairs = Vec::new();
                if !self.eat("}") {
                    loop {
                        let k = self.string()?;
                        self.need(":")?;
                        let v = self.string()?;
                        pairs.push((k, v));
                        if self.eat("}") {
                            break;
                        }
                        self.need(",")?;
                    }
                }
                Ok(V::Obj(pairs))
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.chain()?);
                        if self.eat("]") {
                            break;
                        }
                        self.need(",")?;
                    }
                }
                Ok(V::Arr(items))
            }
            b'(' => {
                self.i += 1;
                if self.eat(")") {
                    return Ok(V::Undef);
                }
                let mut v = self.statement()?;
                while self.eat(";") {
                    if self.peek() == Some(b')') {
                        break;
                    }
                    v = self.statement()?;
                }
                self.need(")")?;
                Ok(v)
            }
            b'$' => {
                self.i += 1;
                let name = self.ident();
                if self.peek() == Some(b'(') {
                    self.call(&name, None)
                } else {
                    self.vars
                        .iter()
                        .rev()
                        .find(|(n, _)| *n == name)
                        .map(|(_, v)| v.clone())
                        .ok_or(Stop::Unsupported)
                }
            }
            _ => Err(Stop::Unsupported),
        }
    }
    /// statement := '$name' ':=' chain | chain
    fn statement(&mut self) -> R {
        let save = self.i;
        if self.eat("$") {
            let name = self.ident();
            if self.eat(":=") {
                let v = self.chain()?;
                self.vars.push((name, v.clone()));
                return Ok(v);
            }
        }
        self.i = save;
        self.chain()
    }
    fn call(&mut self, name: &str, piped: Option<V>) -> R {
        self.need("(")?;
        let mut args: Vec<V> = piped.into_iter().collect();
        if !self.eat(")") {
            loop {
                args.push(self.chain()?);
                if self.eat(")") {
                    break;
                }
                self.need(",")?;
            }
        }
        run(name, &args)
    }
}

fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

fn to_json(v: &V) -> Option<Value> {
    match v {
        V::Num(n) => Some(num(*n)),
        V::Str(s) => Some(Value::String(s.clone())),
        V::Arr(items) => items
            .iter()
            .map(to_json)
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        V::Obj(_) | V::Undef => None,
    }
}

fn code(e: PictureError) -> Stop {
    Stop::Code(e.code())
}

fn opt_num(r: Result<Option<f64>, PictureError>) -> R {
    Ok(r.map_err(code)?.map_or(V::Undef, V::Num))
}

/// Runs a call if it is one of ours with arguments of the right kinds.
fn run(name: &str, args: &[V]) -> R {
    use V::*;
    let s = |r: Result<String, PictureError>| r.map(Str).map_err(code);
    match (name, args) {
        ("formatNumber", [Num(v), Str(p)]) => s(format_number(*v, p, &DecimalFormat::default())),
        ("formatNumber", [Num(v), Str(p), Obj(o)]) => {
            let f = DecimalFormat::from_options(o.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(code)?;
            s(format_number(*v, p, &f))
        }
        ("formatInteger", [Num(v), Str(p)]) => s(format_integer(*v, p)),
        ("parseInteger", [Str(t), Str(p)]) => opt_num(parse_integer(t, p)),
        ("formatBase", [Num(v)]) => s(format_base(*v, None)),
        ("formatBase", [Num(v), Num(r)]) => s(format_base(*v, Some(*r))),
        ("fromMillis", [Num(v)]) => s(format_datetime(*v, None, None)),
        ("fromMillis", [Num(v), Str(p)]) => s(format_datetime(*v, Some(p), None)),
        ("fromMillis", [Num(v), Str(p), Str(tz)]) => s(format_datetime(*v, Some(p), Some(tz))),
        ("fromMillis", [Num(v), Undef, Str(tz)]) => s(format_datetime(*v, None, Some(tz))),
        ("toMillis", [Str(t)]) => opt_num(parse_datetime(t, None)),
        ("toMillis", [Str(t), Str(p)]) => opt_num(parse_datetime(t, Some(p))),
        ("string", [Num(v)]) if v.is_finite() => Ok(Str(jsonata_number_string(*v))),
        ("number", [Str(t)]) => parse_number_text(t).map(Num).ok_or(Stop::Code("D3030")),
        _ => Err(Stop::Unsupported),
    }
}

/// What an expression produced: a JSON value, undefined, or an error code.
#[derive(Debug, PartialEq)]
enum Outcome {
    Value(Value),
    Undefined,
    Error(String),
}

fn evaluate(expr: &str) -> Option<Outcome> {
    let mut p = P {
        s: expr.as_bytes(),
        i: 0,
        vars: Vec::new(),
    };
    match p.program() {
        Ok(V::Undef) => Some(Outcome::Undefined),
        Ok(v) => to_json(&v).map(Outcome::Value),
        Err(Stop::Code(c)) => Some(Outcome::Error(c.to_string())),
        Err(Stop::Unsupported) => None,
    }
}

fn expected(case: &Value) -> Option<Outcome> {
    if let Some(code) = case.get("code").and_then(Value::as_str) {
        return Some(Outcome::Error(code.to_string()));
    }
    if case.get("undefinedResult").and_then(Value::as_bool) == Some(true) {
        return Some(Outcome::Undefined);
    }
    case.get("result").cloned().map(Outcome::Value)
}

fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_json(a, b))
        }
        _ => a == b,
    }
}

fn same(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Outcome::Value(x), Outcome::Value(y)) => same_json(x, y),
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
fn official_suite_cases_of_our_functions() {
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
                    let outcome = evaluate(expr);
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
    assert!(total.0 > 320, "too few cases were recognised: {}", total.0);
    assert_eq!(
        total.0, total.1,
        "some covered cases failed (see FAILED above)"
    );
}
