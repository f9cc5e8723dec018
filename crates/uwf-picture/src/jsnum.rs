//! JavaScript number text: `Number.prototype.toString()`, `toPrecision`,
//! JSONata's `$string(number)` and `$number(string)`.

/// Shortest round-trip decimal digits of a finite, positive `x`, with the
/// exponent `n` such that `x = 0.d1d2… × 10^n` (ECMAScript's `n`).
fn shortest_digits(x: f64) -> (Vec<u8>, i32) {
    split_exp(&format!("{x:e}"))
}

/// Splits Rust's `{:e}` output (`"1.2345e-7"`) into digits and the
/// ECMAScript exponent `n` (one more than the scientific exponent).
fn split_exp(text: &str) -> (Vec<u8>, i32) {
    let (mantissa, exp) = text.split_once('e').unwrap_or((text, "0"));
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    (digits, exp + 1)
}

fn digits_str(d: &[u8]) -> &str {
    std::str::from_utf8(d).unwrap_or("")
}

/// Formats `value` exactly as JavaScript's `Number.prototype.toString()`:
/// the shortest digits that round-trip, in positional notation when the
/// decimal exponent is in `-7 < e < 21`, otherwise as `1e+21` / `1.5e-7`.
pub fn js_number_to_string(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_string();
    }
    if value == 0.0 {
        return "0".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let sign = if value < 0.0 { "-" } else { "" };
    let (digits, n) = shortest_digits(value.abs());
    format!("{sign}{}", layout_shortest(&digits, n))
}

/// ECMAScript Number::toString layout of digits `d` (k of them) with
/// exponent `n`.
fn layout_shortest(d: &[u8], n: i32) -> String {
    let k = d.len() as i32;
    let s = digits_str(d);
    if k <= n && n <= 21 {
        format!("{s}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &s[..n as usize], &s[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{s}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let esign = if e < 0 { '-' } else { '+' };
        if k == 1 {
            format!("{s}e{esign}{}", e.abs())
        } else {
            format!("{}.{}e{esign}{}", &s[..1], &s[1..], e.abs())
        }
    }
}

/// Rounds finite positive `x` to `p` significant digits, ties away from
/// zero on the exact binary value (as ECMAScript's `toPrecision` and
/// `toFixed` require). Returns the digits and the scientific exponent `e`
/// (`x ≈ d1.d2… × 10^e`).
pub(crate) fn round_significant(x: f64, p: usize) -> (Vec<u8>, i32) {
    let p = p.max(1);
    let (mut digits, n) = split_exp(&format!("{:.*e}", p + 24, x));
    let tail = &digits[p..];
    if tail.first() == Some(&b'5') && tail[1..].iter().all(|&c| c == b'0') {
        // Possibly an exact tie: look at the exact expansion (a double has
        // at most 767 significant decimal digits).
        let (exact, _) = split_exp(&format!("{x:.1100e}"));
        digits = exact;
    }
    let round_up = digits.get(p).is_some_and(|&c| c >= b'5');
    digits.truncate(p);
    let mut e = n - 1;
    if round_up && increment(&mut digits) {
        e += 1;
    }
    (digits, e)
}

/// Adds one unit in the last place of a digit string; returns `true` when it
/// overflowed (the digits become `100…0` with the same length).
pub(crate) fn increment(digits: &mut [u8]) -> bool {
    for d in digits.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return false;
        }
    }
    if let Some(first) = digits.first_mut() {
        *first = b'1';
    }
    true
}

/// Formats `value` as JavaScript's `Number.prototype.toPrecision(precision)`
/// (`precision` is clamped to 1..=100).
pub fn to_precision(value: f64, precision: u32) -> String {
    if !value.is_finite() {
        return js_number_to_string(value);
    }
    let p = precision.clamp(1, 100) as usize;
    if value == 0.0 {
        return if p == 1 {
            "0".to_string()
        } else {
            format!("0.{}", "0".repeat(p - 1))
        };
    }
    let sign = if value < 0.0 { "-" } else { "" };
    let (d, e) = round_significant(value.abs(), p);
    let s = digits_str(&d);
    let body = if e < -6 || e >= p as i32 {
        let esign = if e < 0 { '-' } else { '+' };
        if p == 1 {
            format!("{s}e{esign}{}", e.abs())
        } else {
            format!("{}.{}e{esign}{}", &s[..1], &s[1..], e.abs())
        }
    } else if e == p as i32 - 1 {
        s.to_string()
    } else if e >= 0 {
        let i = (e + 1) as usize;
        format!("{}.{}", &s[..i], &s[i..])
    } else {
        format!("0.{}{s}", "0".repeat((-(e + 1)) as usize))
    };
    format!("{sign}{body}")
}

/// The text JSONata's `$string()` gives a number: the value rounded to 15
/// significant digits (`toPrecision(15)`, read back as a number) and then
/// printed as JavaScript would, except that exponents carry no `+`
/// (`1e21`, `1e100`, `1e-7`).
pub fn jsonata_number_string(value: f64) -> String {
    if !value.is_finite() {
        return js_number_to_string(value);
    }
    let rounded: f64 = to_precision(value, 15).parse().unwrap_or(value);
    js_number_to_string(rounded).replacen("e+", "e", 1)
}

/// Reads a string the way JSONata's `$number()` does: a JSON-style decimal
/// number that may have leading zeros (`-007`, `000.00123`), or an unsigned
/// `0x`/`0o`/`0b` integer (any letter case). Returns `None` when the text is
/// not such a number or its value is not finite (the caller raises `D3030`).
pub fn parse_number_text(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    if b.len() > 2 && b[0] == b'0' {
        let radix = match b[1] {
            b'x' | b'X' => 16,
            b'o' | b'O' => 8,
            b'b' | b'B' => 2,
            _ => 0,
        };
        if radix != 0 {
            let mut v = 0f64;
            for c in text[2..].chars() {
                v = v * f64::from(radix) + f64::from(c.to_digit(radix)?);
            }
            return v.is_finite().then_some(v);
        }
    }
    let mut i = 0;
    if b.first() == Some(&b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i == int_start {
        return None;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == frac_start {
            return None;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let exp_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp_start {
            return None;
        }
    }
    if i != b.len() {
        return None;
    }
    let v: f64 = text.parse().ok()?;
    v.is_finite().then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn js_to_string_matches_javascript() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (1e-6, "0.000001"),
            (1.5e-7, "1.5e-7"),
            (0.1 + 0.2, "0.30000000000000004"),
            (123456789012345680000.0, "123456789012345680000"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (123.456, "123.456"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (1.2345e25, "1.2345e+25"),
        ];
        for &(x, want) in cases {
            assert_eq!(js_number_to_string(x), want, "{x:?}");
        }
    }

    #[test]
    fn to_precision_matches_javascript() {
        let cases: &[(f64, u32, &str)] = &[
            (2.5, 1, "3"),
            (0.15, 1, "0.1"),
            (123.456, 2, "1.2e+2"),
            (123.456, 4, "123.5"),
            (0.000123, 2, "0.00012"),
            (1e-7, 3, "1.00e-7"),
            (0.0, 3, "0.00"),
            (-1.25, 2, "-1.3"),
            (99.99, 3, "100"),
            (999.9, 3, "1.00e+3"),
            (22.0 / 7.0, 15, "3.14285714285714"),
            (1234567890123455.0, 15, "1.23456789012346e+15"),
        ];
        for &(x, p, want) in cases {
            assert_eq!(to_precision(x, p), want, "{x:?} {p}");
        }
    }

    #[test]
    fn jsonata_string_rounds_to_15_digits() {
        assert_eq!(jsonata_number_string(22.0 / 7.0), "3.14285714285714");
        assert_eq!(jsonata_number_string(1e100), "1e100");
        assert_eq!(jsonata_number_string(1e-100), "1e-100");
        assert_eq!(jsonata_number_string(1e21), "1e21");
        assert_eq!(jsonata_number_string(1e-7), "1e-7");
        assert_eq!(jsonata_number_string(0.1 + 0.2), "0.3");
        assert_eq!(jsonata_number_string(5.0), "5");
    }

    #[test]
    fn number_text() {
        assert_eq!(parse_number_text("-007"), Some(-7.0));
        assert_eq!(parse_number_text("000.00123000"), Some(0.00123));
        assert_eq!(parse_number_text("0x12"), Some(18.0));
        assert_eq!(parse_number_text("0B101"), Some(5.0));
        assert_eq!(parse_number_text("0O12"), Some(10.0));
        assert_eq!(parse_number_text("1.0e-2"), Some(0.01));
        for bad in [
            "",
            "10e500",
            "1/2",
            "1234 hello",
            "[1]",
            "1.",
            ".5",
            "-0x1",
            "0x",
            "+1",
        ] {
            assert_eq!(parse_number_text(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn js_text_round_trips(bits in any::<u64>()) {
            let x = f64::from_bits(bits);
            prop_assume!(x.is_finite());
            let text = js_number_to_string(x);
            let back: f64 = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
            prop_assert_eq!(back, x);
        }

        #[test]
        fn to_precision_round_trips_at_17(bits in any::<u64>()) {
            let x = f64::from_bits(bits);
            prop_assume!(x.is_finite());
            let back: f64 = to_precision(x, 17).parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
            prop_assert_eq!(back, x);
        }
    }
}
