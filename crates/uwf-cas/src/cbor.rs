//! Deterministic CBOR (RFC 8949 §4.2.1) for JSON values — the bytes a hash is
//! computed over. See `docs/cas.md` for the specification.
//!
//! Rules, all of them load-bearing for hash stability:
//! * shortest-form heads for lengths and integers;
//! * map keys sorted by the bytewise order of their encodings (so shorter
//!   keys first, then lexicographic UTF-8);
//! * a number that is integral and fits in `[-2^64, 2^64)` is an integer
//!   (major type 0 or 1), so `1`, `1.0` and `1e0` encode identically;
//! * every other number is an IEEE-754 float64 (`0xfb`), never shortened to
//!   float16/32 — simpler to reproduce in any language.

use serde_json::{Number, Value};

/// Encodes a JSON value deterministically.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    encode_into(value, &mut out);
    out
}

/// Appends the deterministic encoding of `value` to `out`.
pub fn encode_into(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(0xf6),
        Value::Bool(false) => out.push(0xf4),
        Value::Bool(true) => out.push(0xf5),
        Value::Number(n) => encode_number(n, out),
        Value::String(s) => encode_text(s, out),
        Value::Array(items) => {
            head(4, items.len() as u64, out);
            for item in items {
                encode_into(item, out);
            }
        }
        Value::Object(map) => encode_map(map.iter(), out),
    }
}

/// Encodes map entries given in any order; the output does not depend on it.
pub(crate) fn encode_map<'a>(
    entries: impl Iterator<Item = (&'a String, &'a Value)>,
    out: &mut Vec<u8>,
) {
    let mut keyed: Vec<(Vec<u8>, &Value)> = entries
        .map(|(k, v)| {
            let mut kb = Vec::with_capacity(k.len() + 3);
            encode_text(k, &mut kb);
            (kb, v)
        })
        .collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    head(5, keyed.len() as u64, out);
    for (k, v) in keyed {
        out.extend_from_slice(&k);
        encode_into(v, out);
    }
}

fn encode_text(s: &str, out: &mut Vec<u8>) {
    head(3, s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

/// The integer a JSON number denotes, if it is integral and CBOR can hold it
/// as major type 0/1 (i.e. it lies in `[-2^64, 2^64)`).
pub fn as_cbor_integer(n: &Number) -> Option<i128> {
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    let f = n.as_f64()?;
    const TWO_64: f64 = 18_446_744_073_709_551_616.0;
    if f.is_finite() && f.fract() == 0.0 && (-TWO_64..TWO_64).contains(&f) {
        // Exact: integral and within range, and i128 holds ±2^64.
        Some(f as i128)
    } else {
        None
    }
}

fn encode_number(n: &Number, out: &mut Vec<u8>) {
    match as_cbor_integer(n) {
        Some(i) if i >= 0 => head(0, i as u64, out),
        // -1 - i is in [0, 2^64) because i >= -2^64.
        Some(i) => head(1, (-1 - i) as u64, out),
        None => {
            // Only finite floats reach here: JSON has no NaN or infinity.
            let f = n.as_f64().unwrap_or(0.0);
            out.push(0xfb);
            out.extend_from_slice(&f.to_be_bytes());
        }
    }
}

fn head(major: u8, v: u64, out: &mut Vec<u8>) {
    let m = major << 5;
    if v < 24 {
        out.push(m | v as u8);
    } else if v <= u64::from(u8::MAX) {
        out.extend_from_slice(&[m | 24, v as u8]);
    } else if v <= u64::from(u16::MAX) {
        out.push(m | 25);
        out.extend_from_slice(&(v as u16).to_be_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(m | 26);
        out.extend_from_slice(&(v as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Rewrites integral floats as integers in place, so the stored JSON text
/// agrees with what was hashed (`1.0` is stored as `1`).
pub fn canonicalize(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if n.is_f64()
                && let Some(i) = as_cbor_integer(n)
            {
                if let Ok(u) = u64::try_from(i) {
                    *n = Number::from(u);
                } else if let Ok(s) = i64::try_from(i) {
                    *n = Number::from(s);
                }
                // Below i64::MIN JSON has no integer form here: the float stays.
            }
        }
        Value::Array(items) => items.iter_mut().for_each(canonicalize),
        Value::Object(map) => map.values_mut().for_each(canonicalize),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn rfc8949_appendix_a_vectors() {
        // The integer, text, array and map examples of RFC 8949 Appendix A
        // that JSON can express.
        let cases: &[(Value, &str)] = &[
            (json!(0), "00"),
            (json!(1), "01"),
            (json!(10), "0a"),
            (json!(23), "17"),
            (json!(24), "1818"),
            (json!(25), "1819"),
            (json!(100), "1864"),
            (json!(1000), "1903e8"),
            (json!(1000000), "1a000f4240"),
            (json!(1000000000000u64), "1b000000e8d4a51000"),
            (json!(18446744073709551615u64), "1bffffffffffffffff"),
            (json!(-1), "20"),
            (json!(-10), "29"),
            (json!(-100), "3863"),
            (json!(-1000), "3903e7"),
            (json!(false), "f4"),
            (json!(true), "f5"),
            (json!(null), "f6"),
            (json!(""), "60"),
            (json!("a"), "6161"),
            (json!("IETF"), "6449455446"),
            (json!("\"\\"), "62225c"),
            (json!("\u{00fc}"), "62c3bc"),
            (json!("\u{6c34}"), "63e6b0b4"),
            (json!([]), "80"),
            (json!([1, 2, 3]), "83010203"),
            (json!([1, [2, 3], [4, 5]]), "8301820203820405"),
            (json!({}), "a0"),
            (json!({"a": 1, "b": [2, 3]}), "a26161016162820203"),
            (json!(["a", {"b": "c"}]), "826161a161626163"),
            (
                json!({"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"}),
                "a56161614161626142616361436164614461656145",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(hex(&encode(v)), *want, "{v}");
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(encode(&json!(1.0)), encode(&json!(1)));
        assert_eq!(encode(&json!(-0.0)), encode(&json!(0)));
        assert_eq!(hex(&encode(&json!(1.5))), "fb3ff8000000000000");
        assert_eq!(hex(&encode(&json!(-4.1))), "fbc010666666666666");
        assert_eq!(hex(&encode(&json!(1.0e300))), "fb7e37e43c8800759c");
        // 2^64 is integral but out of range: float64.
        assert_eq!(
            hex(&encode(&json!(18446744073709551616.0))),
            "fb43f0000000000000"
        );
        // -2^64 is the most negative CBOR integer.
        assert_eq!(
            hex(&encode(&json!(-18446744073709551616.0))),
            "3bffffffffffffffff"
        );
    }

    #[test]
    fn keys_sort_by_encoded_bytes_shorter_first() {
        let v = json!({"bb": 1, "a": 2, "c": 3, "aaa": 4});
        // a, c, bb, aaa
        assert_eq!(hex(&encode(&v)), "a4616102616303626262016361616104");
    }

    #[test]
    fn canonicalize_rewrites_integral_floats() {
        let mut v = json!({"a": 1.0, "b": [2.0, 2.5], "c": -3.0});
        canonicalize(&mut v);
        assert_eq!(v.to_string(), r#"{"a":1,"b":[2,2.5],"c":-3}"#);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            any::<u64>().prop_map(|i| json!(i)),
            (-1e12f64..1e12).prop_map(|f| json!(f)),
            "\\PC{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Serializes with object keys in reversed order, to check that the
    /// encoding does not depend on the order keys arrive in.
    fn to_text_reversed(v: &Value) -> String {
        match v {
            Value::Object(m) => {
                let parts: Vec<String> = m
                    .iter()
                    .rev()
                    .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), to_text_reversed(v)))
                    .collect();
                format!("{{{}}}", parts.join(","))
            }
            Value::Array(a) => {
                let parts: Vec<String> = a.iter().map(to_text_reversed).collect();
                format!("[{}]", parts.join(","))
            }
            other => other.to_string(),
        }
    }

    proptest! {
        #[test]
        fn encoding_ignores_key_order(v in arb_json()) {
            let reparsed: Value = serde_json::from_str(&to_text_reversed(&v)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(encode(&v), encode(&reparsed));
        }

        #[test]
        fn map_encoding_ignores_entry_order(m in prop::collection::btree_map("\\PC{0,8}", any::<i32>(), 0..12), seed in any::<u64>()) {
            let entries: Vec<(String, Value)> = m.into_iter().map(|(k, v)| (k, json!(v))).collect();
            let mut shuffled = entries.clone();
            // Deterministic shuffle from the seed.
            let n = shuffled.len();
            let mut s = seed;
            for i in (1..n).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut a = Vec::new();
            encode_map(entries.iter().map(|(k, v)| (k, v)), &mut a);
            let mut b = Vec::new();
            encode_map(shuffled.iter().map(|(k, v)| (k, v)), &mut b);
            prop_assert_eq!(a, b);
        }

        #[test]
        fn canonicalize_does_not_change_the_encoding(v in arb_json()) {
            let mut c = v.clone();
            canonicalize(&mut c);
            prop_assert_eq!(encode(&v), encode(&c));
        }

        #[test]
        fn integral_floats_encode_as_integers(i in any::<i32>()) {
            prop_assert_eq!(encode(&json!(f64::from(i))), encode(&json!(i)));
        }
    }
}
