//! The builtin function library.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::OnceLock;

use indexmap::IndexMap;

use crate::error::Error;
use crate::eval::{Evaluator, append, merge_sort};
use crate::signature::Signature;
use crate::value::{Func, Object, Value, flags};

type R<T> = Result<T, Error>;

/// Builtin names and signatures.
pub(crate) const BUILTINS: &[(&str, &str)] = &[
    ("sum", "<a<n>:n>"),
    ("count", "<a:n>"),
    ("max", "<a<n>:n>"),
    ("min", "<a<n>:n>"),
    ("average", "<a<n>:n>"),
    ("string", "<x-b?:s>"),
    ("substring", "<s-nn?:s>"),
    ("substringBefore", "<s-s:s>"),
    ("substringAfter", "<s-s:s>"),
    ("lowercase", "<s-:s>"),
    ("uppercase", "<s-:s>"),
    ("length", "<s-:n>"),
    ("trim", "<s-:s>"),
    ("pad", "<s-ns?:s>"),
    ("match", "<s-f<s:o>n?:a<o>>"),
    ("contains", "<s-(sf):b>"),
    ("replace", "<s-(sf)(sf)n?:s>"),
    ("split", "<s-(sf)n?:a<s>>"),
    ("join", "<a<s>s?:s>"),
    ("formatNumber", "<n-so?:s>"),
    ("formatBase", "<n-n?:s>"),
    ("formatInteger", "<n-s:s>"),
    ("parseInteger", "<s-s:n>"),
    ("number", "<(nsb)-:n>"),
    ("floor", "<n-:n>"),
    ("ceil", "<n-:n>"),
    ("round", "<n-n?:n>"),
    ("abs", "<n-:n>"),
    ("sqrt", "<n-:n>"),
    ("power", "<n-n:n>"),
    ("random", "<:n>"),
    ("boolean", "<x-:b>"),
    ("not", "<x-:b>"),
    ("map", "<af>"),
    ("zip", "<a+>"),
    ("filter", "<af>"),
    ("single", "<af?>"),
    ("reduce", "<afj?:j>"),
    ("sift", "<o-f?:o>"),
    ("keys", "<x-:a<s>>"),
    ("lookup", "<x-s:x>"),
    ("append", "<xx:a>"),
    ("exists", "<x:b>"),
    ("spread", "<x-:a<o>>"),
    ("merge", "<a<o>:o>"),
    ("reverse", "<a:a>"),
    ("each", "<o-f:a>"),
    ("error", "<s?:x>"),
    ("assert", "<bs?:x>"),
    ("type", "<x:s>"),
    ("sort", "<af?:a>"),
    ("shuffle", "<a:a>"),
    ("distinct", "<x:x>"),
    ("base64encode", "<s-:s>"),
    ("base64decode", "<s-:s>"),
    ("encodeUrlComponent", "<s-:s>"),
    ("encodeUrl", "<s-:s>"),
    ("decodeUrlComponent", "<s-:s>"),
    ("decodeUrl", "<s-:s>"),
    ("eval", "<sx?:x>"),
    ("toMillis", "<s-s?:n>"),
    ("fromMillis", "<n-s?s?:s>"),
    ("now", "<s?s?:s>"),
    ("millis", "<:n>"),
    ("uuid", "<:s>"),
];

fn sig_table() -> &'static HashMap<&'static str, Signature> {
    static T: OnceLock<HashMap<&'static str, Signature>> = OnceLock::new();
    T.get_or_init(|| {
        BUILTINS
            .iter()
            .filter_map(|(n, s)| Signature::parse(s, 0).ok().map(|sig| (*n, sig)))
            .collect()
    })
}

/// The builtin's static name, if `name` is one.
pub(crate) fn builtin_static_name(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(n, _)| *n)
}

/// The parsed signature of a builtin.
pub(crate) fn builtin_sig(name: &str) -> Option<&'static Signature> {
    sig_table().get(name)
}

// ------------------------------------------------------------------ helpers

/// Compares strings by UTF-16 code units, as JavaScript does.
pub(crate) fn cmp_utf16(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

use uwf_picture::{
    js_number_to_string as number_to_string, jsonata_number_string as jsonata_number,
};

fn json_escape(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// JSON text of a value as `$string` renders it (`None` for undefined).
pub(crate) fn stringify(v: &Value, pretty: bool) -> Option<String> {
    fn go(v: &Value, pretty: bool, indent: usize, out: &mut String) {
        let nl = |out: &mut String, ind: usize| {
            if pretty {
                out.push('\n');
                out.push_str(&"  ".repeat(ind));
            }
        };
        match v {
            Value::Undefined | Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&jsonata_number(*n)),
            Value::String(s) => json_escape(s, out),
            Value::Function(_) => out.push_str("\"\""),
            Value::Array(items, _, _) => {
                out.push('[');
                if items.is_empty() {
                    out.push(']');
                    return;
                }
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    nl(out, indent + 1);
                    go(it, pretty, indent + 1, out);
                }
                nl(out, indent);
                out.push(']');
            }
            Value::Object(o, _) => {
                out.push('{');
                let fields: Vec<_> = o.iter().filter(|(_, v)| !v.is_undefined()).collect();
                if fields.is_empty() {
                    out.push('}');
                    return;
                }
                for (i, (k, x)) in fields.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    nl(out, indent + 1);
                    json_escape(k, out);
                    out.push(':');
                    if pretty {
                        out.push(' ');
                    }
                    go(x, pretty, indent + 1, out);
                }
                nl(out, indent);
                out.push('}');
            }
        }
    }
    if v.is_undefined() {
        return None;
    }
    let mut out = String::new();
    go(v, pretty, 0, &mut out);
    Some(out)
}

fn has_non_finite(v: &Value) -> bool {
    match v {
        Value::Number(n) => !n.is_finite(),
        Value::Array(items, _, _) => items.iter().any(has_non_finite),
        Value::Object(o, _) => o.values().any(has_non_finite),
        _ => false,
    }
}

/// `$string` casting.
pub(crate) fn to_string_value(v: &Value) -> R<String> {
    Ok(match v {
        Value::String(s) => s.to_string(),
        Value::Function(_) => String::new(),
        Value::Number(n) if !n.is_finite() => {
            return Err(Error::new(
                "D3001",
                "Attempting to invoke string function on Infinity or NaN",
            ));
        }
        v if has_non_finite(v) => {
            return Err(Error::new(
                "D1001",
                "Number out of range: cannot render Infinity or NaN as JSON",
            ));
        }
        v => stringify(v, false).unwrap_or_default(),
    })
}

fn chars(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn num(n: f64) -> R<Value> {
    if n.is_finite() {
        Ok(Value::Number(n))
    } else {
        Err(Error::new("D1001", format!("Number out of range: {n}")))
    }
}

fn arg(args: &[Value], i: usize) -> Value {
    args.get(i).cloned().unwrap_or_default()
}

fn numbers(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(items, _, _) => items.iter().filter_map(|x| x.as_f64()).collect(),
        Value::Number(n) => vec![*n],
        _ => Vec::new(),
    }
}

fn round_half_even(n: f64, precision: i64) -> f64 {
    let shifted = shift_decimal(n, precision);
    let f = shifted.floor();
    let diff = shifted - f;
    let round_up = diff > 0.5 || (diff == 0.5 && f % 2.0 != 0.0);
    let mut r = if round_up { f + 1.0 } else { f };
    if r == 0.0 {
        r = 0.0;
    }
    shift_decimal(r, -precision)
}

/// `n * 10^by` computed on the decimal text, avoiding binary rounding errors.
fn shift_decimal(n: f64, by: i64) -> f64 {
    let t = number_to_string(n);
    let (mant, exp) = match t.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i64>().unwrap_or(0)),
        None => (t.clone(), 0),
    };
    format!("{mant}e{}", exp.saturating_add(by))
        .parse()
        .unwrap_or(n)
}

// ------------------------------------------------------------------ regex

/// A compiled JavaScript-style regular expression.
pub struct JsRegex {
    /// The pattern as written.
    pub source: String,
    re: fancy_regex::Regex,
}

impl JsRegex {
    /// Compiles a JS regex pattern with flags.
    pub fn new(pattern: &str, flags: &str) -> R<JsRegex> {
        let mut prefix = String::new();
        for (f, p) in [('i', "i"), ('m', "m"), ('s', "s")] {
            if flags.contains(f) {
                prefix.push_str(p);
            }
        }
        let translated = translate_js_regex(pattern);
        let full = if prefix.is_empty() {
            translated
        } else {
            format!("(?{prefix}){translated}")
        };
        let re = fancy_regex::RegexBuilder::new(&full)
            .backtrack_limit(1_000_000)
            .build()
            .map_err(|e| {
                Error::new(
                    "D1004",
                    format!("Invalid regular expression /{pattern}/: {e}"),
                )
            })?;
        Ok(JsRegex {
            source: pattern.to_string(),
            re,
        })
    }

    /// Finds the next match at or after byte `start`: (start, end, groups).
    fn find_at(&self, text: &str, start: usize) -> R<Option<(usize, usize, Vec<Value>)>> {
        if start > text.len() {
            return Ok(None);
        }
        let caps = self
            .re
            .captures_from_pos(text, start)
            .map_err(|e| Error::new("D1004", format!("Regular expression failed: {e}")))?;
        Ok(caps.and_then(|c| {
            let m = c.get(0)?;
            let groups = (1..c.len())
                .map(|i| match c.get(i) {
                    Some(g) => Value::str(g.as_str()),
                    None => Value::str(""),
                })
                .collect();
            Some((m.start(), m.end(), groups))
        }))
    }
}

fn translate_js_regex(p: &str) -> String {
    // JS allows `]` first in a class and `{` literal where Rust wants escapes;
    // translate the common differences.
    let mut out = String::with_capacity(p.len());
    let cs: Vec<char> = p.chars().collect();
    let mut i = 0;
    let mut in_class = false;
    while i < cs.len() {
        let c = cs[i];
        if c == '\\' && i + 1 < cs.len() {
            let n = cs[i + 1];
            if n == 'd' && !in_class {
                out.push_str("[0-9]");
            } else if n == 'd' {
                out.push_str("0-9");
            } else if n == '/' {
                out.push('/');
            } else {
                out.push(c);
                out.push(n);
            }
            i += 2;
            continue;
        }
        if in_class {
            if c == ']' {
                in_class = false;
            } else if c == '[' {
                out.push('\\');
            }
            out.push(c);
        } else if c == '[' {
            in_class = true;
            out.push(c);
            if cs.get(i + 1) == Some(&'^') {
                out.push('^');
                i += 1;
            }
            if cs.get(i + 1) == Some(&']') {
                out.push_str("\\]");
                i += 1;
            }
        } else if c == '{' {
            // literal brace unless a valid quantifier
            let rest: String = cs[i..].iter().collect();
            let is_quant = rest
                .find('}')
                .map(|e| {
                    let inner = &rest[1..e];
                    !inner.is_empty()
                        && inner.chars().all(|x| x.is_ascii_digit() || x == ',')
                        && inner
                            .chars()
                            .next()
                            .map(|x| x.is_ascii_digit())
                            .unwrap_or(false)
                })
                .unwrap_or(false);
            if is_quant {
                out.push('{');
            } else {
                out.push_str("\\{");
            }
        } else if c == '}' {
            // closing brace of a quantifier stays; a stray one is escaped
            let opened = out
                .rfind('{')
                .map(|o| !out[..o].ends_with('\\') && !out[o..].contains('}'))
                .unwrap_or(false);
            if opened {
                out.push('}');
            } else {
                out.push_str("\\}");
            }
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

fn utf16_index(text: &str, byte: usize) -> usize {
    text[..byte].encode_utf16().count()
}

/// The object a regex returns when called: `{match, start, end, groups, next}`.
pub(crate) fn regex_match_object(re: &Rc<JsRegex>, text: &Rc<str>, offset: usize) -> R<Value> {
    let Some((s, e, groups)) = re.find_at(text, offset)? else {
        return Ok(Value::Undefined);
    };
    let mut o: Object = Object::default();
    o.insert("match".into(), Value::str(&text[s..e]));
    o.insert("start".into(), Value::Number(utf16_index(text, s) as f64));
    o.insert("end".into(), Value::Number(utf16_index(text, e) as f64));
    o.insert("groups".into(), Value::array(groups));
    let next = if e == s { next_char(text, e) } else { e };
    o.insert(
        "next".into(),
        Value::Function(Rc::new(Func::MatchNext(re.clone(), text.clone(), next))),
    );
    Ok(Value::object(o))
}

fn next_char(text: &str, i: usize) -> usize {
    text[i..]
        .chars()
        .next()
        .map(|c| i + c.len_utf8())
        .unwrap_or(i + 1)
}

/// Matches produced by a user matcher function: it returns objects with
/// `match`, `start`, `end`, `groups` and `next()` (positions in characters).
fn custom_matches(
    ev: &mut Evaluator,
    f: &Value,
    s: &str,
    limit: Option<usize>,
    input: &Value,
) -> R<Vec<(usize, usize, Vec<Value>)>> {
    let bad = || {
        Error::new(
            "T1010",
            "The matcher function argument passed to a string function does not return the correct object structure",
        )
    };
    let byte_at = |k: f64| -> usize {
        if k <= 0.0 {
            return 0;
        }
        s.char_indices()
            .nth(k as usize)
            .map(|(b, _)| b)
            .unwrap_or(s.len())
    };
    let mut out = Vec::new();
    let mut r = ev.apply(f, vec![Value::str(s)], input, 0)?;
    while limit.map(|l| out.len() < l).unwrap_or(true) {
        ev.check_time()?;
        let o = match &r {
            Value::Undefined => break,
            Value::Object(o, _) => o.clone(),
            _ => return Err(bad()),
        };
        let (Some(st), Some(e)) = (
            o.get("start").and_then(|v| v.as_f64()),
            o.get("end").and_then(|v| v.as_f64()),
        ) else {
            return Err(bad());
        };
        let groups = o.get("groups").map(|g| g.members()).unwrap_or_default();
        out.push((byte_at(st), byte_at(e).max(byte_at(st)), groups));
        match o.get("next") {
            Some(next @ Value::Function(_)) => r = ev.apply(next, Vec::new(), input, 0)?,
            _ => break,
        }
    }
    Ok(out)
}

fn all_matches(
    re: &JsRegex,
    text: &str,
    limit: Option<usize>,
) -> R<Vec<(usize, usize, Vec<Value>)>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while limit.map(|l| out.len() < l).unwrap_or(true) {
        let Some((s, e, g)) = re.find_at(text, pos)? else {
            break;
        };
        if e == s {
            return Err(Error::new(
                "D1004",
                format!(
                    "Regular expression matches zero length string: /{}/",
                    re.source
                ),
            ));
        }
        out.push((s, e, g));
        pos = e;
    }
    Ok(out)
}

fn limit_arg(v: &Value) -> R<Option<usize>> {
    match v {
        Value::Number(n) if *n < 0.0 => Err(Error::new(
            "D3011",
            "Fourth argument of function must be a positive number",
        )),
        Value::Number(n) => Ok(Some(*n as usize)),
        _ => Ok(None),
    }
}

// ------------------------------------------------------------------ base64 / url

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        if c == b'=' || c.is_ascii_whitespace() {
            continue;
        }
        let v = B64.iter().position(|&x| x == c)? as u32;
        buf = (buf << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn url_encode(s: &str, keep: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || "-_.!~*'()".contains(c) || keep.contains(c) {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

fn url_decode(s: &str, reserved: &str) -> R<String> {
    let bad = || {
        Error::new(
            "D3140",
            format!("Malformed URL passed to $decodeUrl(): \"{s}\""),
        )
    };
    let b = s.as_bytes();
    let mut out: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s.get(i + 1..i + 3).ok_or_else(bad)?;
            let v = u8::from_str_radix(h, 16).map_err(|_| bad())?;
            if v < 0x80 && reserved.contains(v as char) {
                out.extend_from_slice(&b[i..i + 3]);
            } else {
                out.push(v);
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

// ------------------------------------------------------------------ dispatch

fn seq(items: Vec<Value>) -> Value {
    Value::seq(items)
}

fn key_cmp_values(ev: &mut Evaluator, f: Option<&Value>, items: Vec<Value>) -> R<Vec<Value>> {
    match f {
        Some(f) => merge_sort(items, &mut |a, b| {
            let r = ev.apply(f, vec![a.clone(), b.clone()], &Value::Null, 0)?;
            // The reference reads the comparator's answer with JavaScript
            // truthiness: any object, array or function swaps.
            Ok(match r {
                Value::Undefined | Value::Null => false,
                Value::Bool(b) => b,
                Value::Number(n) => n != 0.0 && !n.is_nan(),
                Value::String(s) => !s.is_empty(),
                Value::Array(..) | Value::Object(..) | Value::Function(_) => true,
            })
        }),
        None => {
            let all_num = items.iter().all(|x| matches!(x, Value::Number(_)));
            let all_str = items.iter().all(|x| matches!(x, Value::String(_)));
            if !all_num && !all_str {
                return Err(Error::new(
                    "D3070",
                    "The single argument form of the sort function can only be applied to an array of strings or an array of numbers; use the second argument to specify a comparison function",
                ));
            }
            merge_sort(items, &mut |a, b| {
                Ok(match (a, b) {
                    (Value::Number(x), Value::Number(y)) => x > y,
                    (Value::String(x), Value::String(y)) => {
                        cmp_utf16(x, y) == std::cmp::Ordering::Greater
                    }
                    _ => false,
                })
            })
        }
    }
}

fn pseudo_random() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

fn now_millis() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as f64)
        .unwrap_or(0.0)
}

/// Calls builtin `name` with validated arguments.
pub(crate) fn call(ev: &mut Evaluator, name: &str, args: Vec<Value>, input: &Value) -> R<Value> {
    let a0 = arg(&args, 0);
    let a1 = arg(&args, 1);
    let a2 = arg(&args, 2);
    match name {
        "sum" => {
            if a0.is_undefined() {
                return Ok(Value::Undefined);
            }
            num(numbers(&a0).iter().sum())
        }
        "count" => Ok(Value::Number(match &a0 {
            Value::Undefined => 0.0,
            Value::Array(items, _, _) => items.len() as f64,
            _ => 1.0,
        })),
        "max" | "min" | "average" => {
            let ns = numbers(&a0);
            if ns.is_empty() {
                return Ok(Value::Undefined);
            }
            Ok(Value::Number(match name {
                "max" => ns.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                "min" => ns.iter().cloned().fold(f64::INFINITY, f64::min),
                _ => ns.iter().sum::<f64>() / ns.len() as f64,
            }))
        }
        "string" => {
            if a0.is_undefined() {
                return Ok(Value::Undefined);
            }
            let pretty = a1.is_truthy();
            match &a0 {
                Value::String(_) => Ok(a0.clone()),
                Value::Function(_) => Ok(Value::str("")),
                Value::Number(n) if !n.is_finite() => Err(Error::new(
                    "D3001",
                    "Attempting to invoke string function on Infinity or NaN",
                )),
                v if has_non_finite(v) => Err(Error::new(
                    "D1001",
                    "Number out of range: cannot render Infinity or NaN as JSON",
                )),
                v => Ok(Value::str(&stringify(v, pretty).unwrap_or_default())),
            }
        }
        "substring" => {
            let Some(s) = a0.as_str() else {
                return Ok(Value::Undefined);
            };
            let cs = chars(s);
            let len = cs.len() as f64;
            // JavaScript `Array.prototype.slice` bounds: truncated toward
            // zero, negative ones counted from the end, clamped.
            let bound = |x: f64| {
                let x = x.trunc();
                (if x < 0.0 {
                    (len + x).max(0.0)
                } else {
                    x.min(len)
                }) as usize
            };
            let mut start = a1.as_f64().unwrap_or(0.0);
            if len + start < 0.0 {
                start = 0.0;
            }
            let end = match a2.as_f64() {
                Some(l) if l <= 0.0 => return Ok(Value::str("")),
                // a negative start keeps counting from the end, as in the
                // reference: `$substring("hello", -2.5, 2)` is "l"
                Some(l) if start < 0.0 => bound(len + start + l),
                Some(l) => bound(start + l),
                None => cs.len(),
            };
            let start = bound(start);
            Ok(Value::str(
                &cs[start..end.max(start)].iter().collect::<String>(),
            ))
        }
        "substringBefore" | "substringAfter" => {
            let Some(s) = a0.as_str() else {
                return Ok(Value::Undefined);
            };
            let Some(chars) = a1.as_str() else {
                return Ok(a0.clone());
            };
            match s.find(chars) {
                Some(i) if name == "substringBefore" => Ok(Value::str(&s[..i])),
                Some(i) => Ok(Value::str(&s[i + chars.len()..])),
                None => Ok(a0.clone()),
            }
        }
        "lowercase" => Ok(a0
            .as_str()
            .map(|s| Value::str(&s.to_lowercase()))
            .unwrap_or_default()),
        "uppercase" => Ok(a0
            .as_str()
            .map(|s| Value::str(&s.to_uppercase()))
            .unwrap_or_default()),
        "length" => Ok(a0
            .as_str()
            .map(|s| Value::Number(s.chars().count() as f64))
            .unwrap_or_default()),
        "trim" => Ok(a0
            .as_str()
            .map(|s| {
                let collapsed: Vec<&str> = s
                    .split([' ', '\t', '\n', '\r'])
                    .filter(|p| !p.is_empty())
                    .collect();
                Value::str(&collapsed.join(" "))
            })
            .unwrap_or_default()),
        "pad" => {
            let Some(s) = a0.as_str() else {
                return Ok(Value::Undefined);
            };
            let width = a1.as_f64().unwrap_or(0.0);
            let pad_s = match a2.as_str() {
                Some(p) if !p.is_empty() => p.to_string(),
                _ => " ".to_string(),
            };
            let len = s.chars().count();
            let target = width.abs() as usize;
            if target <= len {
                return Ok(a0.clone());
            }
            if target > ev.max_items {
                return Err(Error::new(
                    "D3012",
                    "Padding width exceeds the result size limit",
                ));
            }
            let padding: String = pad_s.chars().cycle().take(target - len).collect();
            Ok(Value::str(&if width > 0.0 {
                format!("{s}{padding}")
            } else {
                format!("{padding}{s}")
            }))
        }
        "contains" => {
            let Some(s) = a0.as_str() else {
                return Ok(Value::Undefined);
            };
            match &a1 {
                Value::String(p) => Ok(Value::Bool(s.contains(p.as_ref()))),
                Value::Function(f) => match f.as_ref() {
                    Func::Regex(re) => Ok(Value::Bool(re.find_at(s, 0)?.is_some())),
                    _ => Ok(Value::Bool(
                        !custom_matches(ev, &a1, s, Some(1), input)?.is_empty(),
                    )),
                },
                _ => Ok(Value::Undefined),
            }
        }
        "match" => {
            let Some(s) = a0.as_str() else {
                return Ok(Value::Undefined);
            };
            let limit = limit_arg(&a2).map_err(|_| {
                Error::new(
                    "D3040",
                    "Third argument of match function must evaluate to a positive number",
                )
            })?;
            let Value::Function(f) = &a1 else {
                return Ok(Value::Undefined);
            };
            let ms = match f.as_ref() {
                Func::Regex(re) => all_matches(re, s, limit)?,
                _ => custom_matches(ev, &a1, s, limit, input)?,
            };
            Ok(seq(ms
                .into_iter()
                .map(|(st, e, g)| {
                    let mut o: Object = Object::default();
                    o.insert("match".into(), Value::str(&s[st..e]));
                    o.insert("index".into(), Value::Number(utf16_index(s, st) as f64));
                    o.insert("groups".into(), Value::array(g));
                    Value::object(o)
                })
                .collect()))
        }
        "replace" => replace(ev, &a0, &a1, &a2, &arg(&args, 3), input),
        "split" => {
            let Some(s) = a0.as_str() else {
                return Ok(Value::Undefined);
            };
            let limit = match &a2 {
                Value::Number(n) if *n < 0.0 => {
                    return Err(Error::new(
                        "D3020",
                        "Third argument of split function must evaluate to a positive number",
                    ));
                }
                Value::Number(n) => Some(*n as usize),
                _ => None,
            };
            let mut parts: Vec<Value> = Vec::new();
            match &a1 {
                Value::String(sep) => {
                    if sep.is_empty() {
                        parts = s.chars().map(|c| Value::str(&c.to_string())).collect();
                    } else {
                        parts = s.split(sep.as_ref()).map(Value::str).collect();
                    }
                }
                Value::Function(f) => {
                    if let Func::Regex(re) = f.as_ref() {
                        let mut pos = 0;
                        let mut last = 0;
                        while let Some((st, e, _)) = re.find_at(s, pos)? {
                            if e == st {
                                if st >= s.len() {
                                    break;
                                }
                                if st > last || st > 0 {
                                    parts.push(Value::str(&s[last..st]));
                                    last = st;
                                }
                                pos = next_char(s, st);
                                continue;
                            }
                            parts.push(Value::str(&s[last..st]));
                            last = e;
                            pos = e;
                        }
                        parts.push(Value::str(&s[last..]));
                    } else {
                        let mut last = 0;
                        for (st, e, _) in custom_matches(ev, &a1, s, None, input)? {
                            parts.push(Value::str(&s[last..st.max(last)]));
                            last = e.max(last);
                        }
                        parts.push(Value::str(&s[last..]));
                    }
                }
                _ => {}
            }
            if let Some(l) = limit {
                parts.truncate(l);
            }
            Ok(Value::array(parts))
        }
        "join" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(Value::Undefined);
            };
            let sep = a1.as_str().unwrap_or("");
            let strs: Vec<&str> = items.iter().filter_map(|x| x.as_str()).collect();
            Ok(Value::str(&strs.join(sep)))
        }
        "number" => match &a0 {
            Value::Undefined => Ok(Value::Undefined),
            Value::Number(_) => Ok(a0.clone()),
            Value::Bool(b) => Ok(Value::Number(if *b { 1.0 } else { 0.0 })),
            Value::String(s) => uwf_picture::parse_number_text(s)
                .map(Value::Number)
                .ok_or_else(|| {
                    Error::new(
                        "D3030",
                        format!("Unable to cast value to a number: \"{s}\""),
                    )
                    .with_value(s.to_string())
                }),
            _ => Err(Error::new("D3030", "Unable to cast value to a number")),
        },
        "floor" => Ok(a0
            .as_f64()
            .map(|n| Value::Number(n.floor()))
            .unwrap_or_default()),
        "ceil" => Ok(a0
            .as_f64()
            .map(|n| Value::Number(n.ceil()))
            .unwrap_or_default()),
        "abs" => Ok(a0
            .as_f64()
            .map(|n| Value::Number(n.abs()))
            .unwrap_or_default()),
        "round" => {
            let Some(n) = a0.as_f64() else {
                return Ok(Value::Undefined);
            };
            let p = a1.as_f64().unwrap_or(0.0) as i64;
            num(round_half_even(n, p))
        }
        "sqrt" => {
            let Some(n) = a0.as_f64() else {
                return Ok(Value::Undefined);
            };
            if n < 0.0 {
                return Err(Error::new(
                    "D3060",
                    format!(
                        "The sqrt function cannot be applied to a negative number: {}",
                        number_to_string(n)
                    ),
                ));
            }
            num(n.sqrt())
        }
        "power" => {
            let Some(b) = a0.as_f64() else {
                return Ok(Value::Undefined);
            };
            // A missing exponent makes the power NaN, as in JavaScript
            // (where even `1 ** NaN` is NaN, unlike C's `pow`).
            let e = a1.as_f64().unwrap_or(f64::NAN);
            let r = if e.is_nan() { f64::NAN } else { b.powf(e) };
            if !r.is_finite() {
                return Err(Error::new(
                    "D3061",
                    format!(
                        "The power function has resulted in a value that cannot be represented as a JSON number: base={}, exponent={}",
                        number_to_string(b),
                        number_to_string(e)
                    ),
                ));
            }
            Ok(Value::Number(r))
        }
        "random" => Ok(Value::Number(pseudo_random())),
        "millis" => Ok(Value::Number(now_millis())),
        "uuid" => {
            let mut hex = String::new();
            while hex.len() < 32 {
                hex.push_str(&format!(
                    "{:013x}",
                    (pseudo_random() * (1u64 << 52) as f64) as u64
                ));
            }
            let b: Vec<char> = hex.chars().take(32).collect();
            let variant = ['8', '9', 'a', 'b'][(b[16].to_digit(16).unwrap_or(0) & 3) as usize];
            let s: String = b.iter().collect();
            Ok(Value::str(&format!(
                "{}-{}-4{}-{}{}-{}",
                &s[0..8],
                &s[8..12],
                &s[13..16],
                variant,
                &s[17..20],
                &s[20..32]
            )))
        }
        "boolean" => {
            if a0.is_undefined() {
                return Ok(Value::Undefined);
            }
            Ok(Value::Bool(a0.is_truthy()))
        }
        "not" => {
            if a0.is_undefined() {
                return Ok(Value::Undefined);
            }
            Ok(Value::Bool(!a0.is_truthy()))
        }
        "exists" => Ok(Value::Bool(!a0.is_undefined())),
        "type" => Ok(a0.type_name().map(Value::str).unwrap_or_default()),
        "map" | "filter" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(Value::Undefined);
            };
            let mut out = Vec::new();
            for (i, it) in items.iter().enumerate() {
                ev.check_time()?;
                let r = ev.call_hof(&a1, vec![it.clone(), Value::Number(i as f64), a0.clone()])?;
                if name == "map" {
                    if !r.is_undefined() {
                        out.push(r);
                    }
                } else if r.is_truthy() {
                    out.push(it.clone());
                }
            }
            Ok(seq(out))
        }
        "single" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(Value::Undefined);
            };
            let mut found: Option<Value> = None;
            for (i, it) in items.iter().enumerate() {
                let keep = if a1.is_undefined() {
                    true
                } else {
                    ev.call_hof(&a1, vec![it.clone(), Value::Number(i as f64), a0.clone()])?
                        .is_truthy()
                };
                if keep {
                    if found.is_some() {
                        return Err(Error::new(
                            "D3138",
                            "The $single() function expected exactly 1 matching result.  Instead it matched more.",
                        ));
                    }
                    found = Some(it.clone());
                }
            }
            found.ok_or_else(|| Error::new("D3139", "The $single() function expected exactly 1 matching result.  Instead it matched 0."))
        }
        "reduce" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(Value::Undefined);
            };
            if Evaluator::arity(&a1) < 2 {
                return Err(Error::new(
                    "D3050",
                    "The second argument of reduce function must be a function with at least two arguments",
                ));
            }
            let mut iter = items.iter().enumerate();
            let mut acc = if a2.is_undefined() {
                match iter.next() {
                    Some((_, v)) => v.clone(),
                    None => return Ok(Value::Undefined),
                }
            } else {
                a2.clone()
            };
            for (i, it) in iter {
                ev.check_time()?;
                acc = ev.call_hof(
                    &a1,
                    vec![acc, it.clone(), Value::Number(i as f64), a0.clone()],
                )?;
            }
            Ok(acc)
        }
        "zip" => {
            let arrays: Vec<Vec<Value>> = args.iter().map(|a| a.members()).collect();
            let n = arrays.iter().map(|a| a.len()).min().unwrap_or(0);
            Ok(Value::array(
                (0..n)
                    .map(|i| Value::array(arrays.iter().map(|a| a[i].clone()).collect()))
                    .collect(),
            ))
        }
        "sift" | "each" => {
            let Value::Object(o, _) = &a0 else {
                if name == "each" {
                    return Ok(seq(Vec::new()));
                }
                return Ok(Value::Undefined);
            };
            let mut out: Object = Object::default();
            let mut list = Vec::new();
            for (k, v) in o.iter() {
                let r = ev.call_hof(&a1, vec![v.clone(), Value::str(k), a0.clone()])?;
                if name == "sift" {
                    if r.is_truthy() {
                        out.insert(k.clone(), v.clone());
                    }
                } else if !r.is_undefined() {
                    list.push(r);
                }
            }
            if name == "each" {
                return Ok(seq(list));
            }
            if out.is_empty() {
                return Ok(Value::Undefined);
            }
            Ok(Value::object(out))
        }
        "keys" => {
            let mut keys: IndexMap<String, ()> = IndexMap::new();
            match &a0 {
                Value::Object(o, _) => o.keys().for_each(|k| {
                    keys.insert(k.clone(), ());
                }),
                Value::Array(items, _, _) => {
                    // the keys of the objects in the array, nested arrays
                    // included (as in the reference), in document order
                    let mut stack: Vec<&Value> = items.iter().rev().collect();
                    while let Some(it) = stack.pop() {
                        match it {
                            Value::Object(o, _) => o.keys().for_each(|k| {
                                keys.insert(k.clone(), ());
                            }),
                            Value::Array(inner, _, _) => stack.extend(inner.iter().rev()),
                            _ => {}
                        }
                    }
                }
                // an empty sequence: a value for a higher-order caller
                _ => return Ok(seq(Vec::new())),
            }
            Ok(seq(keys.into_keys().map(|k| Value::str(&k)).collect()))
        }
        "lookup" => {
            let key = a1.as_str().unwrap_or("");
            Ok(crate::eval::lookup(&a0, key))
        }
        "append" => Ok(append(a0, a1)),
        "spread" => match &a0 {
            Value::Array(items, _, _) => {
                let mut out = Vec::new();
                for it in items.iter() {
                    match call(ev, "spread", vec![it.clone()], input)? {
                        Value::Array(inner, _, _) => out.extend(inner.iter().cloned()),
                        Value::Undefined => {}
                        v => out.push(v),
                    }
                }
                // The reference appends each item's spread to an empty
                // sequence, which makes any non-empty input a plain array.
                if items.is_empty() {
                    return Ok(seq(out));
                }
                Ok(Value::array(out))
            }
            Value::Object(o, _) => Ok(seq(o
                .iter()
                .map(|(k, v)| {
                    let mut m: Object = Object::default();
                    m.insert(k.clone(), v.clone());
                    Value::object(m)
                })
                .collect())),
            v => Ok(v.clone()),
        },
        "merge" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(Value::Undefined);
            };
            let mut out: Object = Object::default();
            for it in items.iter() {
                if let Value::Object(o, _) = it {
                    for (k, v) in o.iter() {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Ok(Value::object(out))
        }
        "reverse" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(Value::Undefined);
            };
            let mut v = items.as_ref().clone();
            v.reverse();
            Ok(Value::array(v))
        }
        "shuffle" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(Value::Undefined);
            };
            let mut v = items.as_ref().clone();
            for i in (1..v.len()).rev() {
                let j = (pseudo_random() * (i + 1) as f64) as usize;
                v.swap(i, j.min(i));
            }
            Ok(Value::array(v))
        }
        "sort" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(Value::Undefined);
            };
            if items.len() <= 1 {
                return Ok(a0.clone());
            }
            let f = if a1.is_undefined() { None } else { Some(&a1) };
            Ok(Value::array(key_cmp_values(ev, f, items.as_ref().clone())?))
        }
        "distinct" => {
            let Value::Array(items, _, _) = &a0 else {
                return Ok(a0.clone());
            };
            let mut out: Vec<Value> = Vec::new();
            for it in items.iter() {
                ev.check_time()?;
                if !out.iter().any(|x| x.deep_eq(it)) {
                    out.push(it.clone());
                }
            }
            Ok(Value::arr(Rc::new(out), a0.flags() & flags::SEQUENCE))
        }
        "error" => {
            let msg = a0
                .as_str()
                .unwrap_or("$error() function evaluated")
                .to_string();
            Err(Error::new("D3137", msg))
        }
        "assert" => {
            let Value::Bool(b) = a0 else {
                return Err(Error::new(
                    "T0410",
                    "Argument 1 of function $assert does not match function signature",
                ));
            };
            if !b {
                let msg = a1
                    .as_str()
                    .unwrap_or("$assert() statement failed")
                    .to_string();
                return Err(Error::new("D3141", msg));
            }
            Ok(Value::Undefined)
        }
        "base64encode" => Ok(a0
            .as_str()
            .map(|s| Value::str(&base64_encode(s.as_bytes())))
            .unwrap_or_default()),
        "base64decode" => {
            let Some(s) = a0.as_str() else {
                return Ok(Value::Undefined);
            };
            let bytes =
                base64_decode(s).ok_or_else(|| Error::new("D3001", "Invalid base64 text"))?;
            Ok(Value::str(&String::from_utf8_lossy(&bytes)))
        }
        "encodeUrlComponent" => Ok(a0
            .as_str()
            .map(|s| Value::str(&url_encode(s, "")))
            .unwrap_or_default()),
        "encodeUrl" => Ok(a0
            .as_str()
            .map(|s| Value::str(&url_encode(s, ";,/?:@&=+$#")))
            .unwrap_or_default()),
        "decodeUrlComponent" => match a0.as_str() {
            Some(s) => Ok(Value::str(&url_decode(s, "")?)),
            None => Ok(Value::Undefined),
        },
        "decodeUrl" => match a0.as_str() {
            Some(s) => Ok(Value::str(&url_decode(s, ";,/?:@&=+$#")?)),
            None => Ok(Value::Undefined),
        },
        "eval" => {
            let Some(src) = a0.as_str() else {
                return Ok(Value::Undefined);
            };
            let expr = crate::Expression::parse(src).map_err(|e| {
                Error::new(
                    "D3120",
                    format!(
                        "Syntax error in expression passed to function eval: {}",
                        e.message
                    ),
                )
            })?;
            let ctx = if a1.is_undefined() {
                input.clone()
            } else {
                a1.clone()
            };
            // the evaluated text sees the caller's top-level bindings, not its locals
            let env = crate::eval::Env::child(&ev.root_env());
            ev.eval(expr.ast(), &ctx, &env).map_err(|e| {
                if e.code.starts_with('U') {
                    e
                } else {
                    Error::new("D3121", e.message)
                }
            })
        }
        "formatNumber" | "formatBase" | "formatInteger" | "parseInteger" | "toMillis"
        | "fromMillis" | "now" => crate::picture::call(name, &args),
        other => Err(Error::new("T1006", format!("Unknown function ${other}"))),
    }
}

fn replace(
    ev: &mut Evaluator,
    a0: &Value,
    a1: &Value,
    a2: &Value,
    a3: &Value,
    input: &Value,
) -> R<Value> {
    let Some(s) = a0.as_str() else {
        return Ok(Value::Undefined);
    };
    let limit = limit_arg(a3)?;
    let matches: Vec<(usize, usize, Vec<Value>)> = match a1 {
        Value::String(p) => {
            if p.is_empty() {
                return Err(Error::new(
                    "D3010",
                    "Second argument of replace function cannot be an empty string",
                ));
            }
            let mut v = Vec::new();
            let mut pos = 0;
            while limit.map(|l| v.len() < l).unwrap_or(true) {
                match s[pos..].find(p.as_ref()) {
                    Some(i) => {
                        v.push((pos + i, pos + i + p.len(), Vec::new()));
                        pos += i + p.len();
                    }
                    None => break,
                }
            }
            v
        }
        Value::Function(f) => match f.as_ref() {
            Func::Regex(re) => all_matches(re, s, limit)?,
            _ => custom_matches(ev, a1, s, limit, input)?,
        },
        _ => return Ok(Value::Undefined),
    };
    let mut out = String::new();
    let mut last = 0;
    for (st, e, groups) in matches {
        if st < last {
            // a user matcher went backwards or overlapped: ignore that match
            continue;
        }
        out.push_str(&s[last..st]);
        let m = &s[st..e];
        match a2 {
            Value::String(r) => out.push_str(&substitute(r, m, &groups)),
            Value::Function(_) => {
                let mut o: Object = Object::default();
                o.insert("match".into(), Value::str(m));
                o.insert("index".into(), Value::Number(utf16_index(s, st) as f64));
                o.insert("groups".into(), Value::array(groups.clone()));
                let r = ev.call_hof(a2, vec![Value::object(o)])?;
                match r {
                    Value::String(x) => out.push_str(&x),
                    _ => {
                        return Err(Error::new(
                            "D3012",
                            "Attempted to replace a matched string with a non-string value",
                        ));
                    }
                }
            }
            _ => {}
        }
        last = e;
    }
    out.push_str(&s[last..]);
    Ok(Value::str(&out))
}

fn substitute(r: &str, m: &str, groups: &[Value]) -> String {
    let cs: Vec<char> = r.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < cs.len() {
        if cs[i] == '$' && i + 1 < cs.len() {
            if cs[i + 1] == '$' {
                out.push('$');
                i += 2;
                continue;
            }
            if cs[i + 1].is_ascii_digit() {
                // greedy: use as many digits as form a valid group number
                let mut j = i + 1;
                let mut best: Option<(usize, usize)> = None;
                let mut n = 0usize;
                while j < cs.len() && cs[j].is_ascii_digit() {
                    n = n * 10 + cs[j].to_digit(10).unwrap_or(0) as usize;
                    if n <= groups.len() {
                        best = Some((n, j + 1));
                    } else {
                        break;
                    }
                    j += 1;
                }
                match best {
                    Some((0, end)) => {
                        out.push_str(m);
                        i = end;
                    }
                    Some((g, end)) => {
                        out.push_str(groups[g - 1].as_str().unwrap_or(""));
                        i = end;
                    }
                    None => {
                        // group number out of range: drop "$n"
                        i += 2;
                    }
                }
                continue;
            }
        }
        out.push(cs[i]);
        i += 1;
    }
    out
}
