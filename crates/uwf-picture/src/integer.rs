//! `$formatInteger` / `$parseInteger`: XPath F&O 3.1 `fn:format-integer`
//! pictures (decimal digit patterns, `a`/`A`, `i`/`I`, `w`/`W`/`Ww`, and the
//! `;o` ordinal / `;c` cardinal modifiers) and their inverse.

use crate::PictureError;
use crate::jsnum::js_number_to_string;

/// The zero digits of the Unicode decimal digit (`Nd`) ranges: each range is
/// ten consecutive code points starting at one of these.
const ZEROS: &[u32] = &[
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650,
    0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50,
    0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
];

/// If `c` is a Unicode decimal digit, its family's zero and its value.
pub(crate) fn decimal_digit(c: char) -> Option<(char, u32)> {
    let cp = c as u32;
    ZEROS
        .iter()
        .find(|&&z| cp >= z && cp < z + 10)
        .and_then(|&z| char::from_u32(z).map(|zero| (zero, cp - z)))
}

/// The digit with value `d` (0..=9) in the family starting at `zero`.
pub(crate) fn family_digit(zero: char, d: u32) -> char {
    char::from_u32(zero as u32 + d).unwrap_or('?')
}

/// The decimal digits of a non-negative integral value, as JavaScript would
/// write the number without an exponent (shortest digits, zero padded).
pub(crate) fn integer_digits(v: f64) -> String {
    if v.is_nan() || v < 1.0 {
        return "0".to_string();
    }
    let text = js_number_to_string(v);
    match text.split_once("e+") {
        Some((mant, exp)) => {
            let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
            let exp: usize = exp.parse().unwrap_or(0);
            let zeros = (exp + 1).saturating_sub(digits.len());
            format!("{digits}{}", "0".repeat(zeros))
        }
        None => text,
    }
}

/// Grouping separators of a digit pattern, as (position from the right,
/// separator) pairs; `regular` when the same separator repeats every
/// `regular` digits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Grouping {
    pub(crate) positions: Vec<(usize, char)>,
    pub(crate) regular: Option<(usize, char)>,
}

impl Grouping {
    /// Builds the grouping from separator positions (counted in digits from
    /// the right), applying the XPath regularity rule.
    pub(crate) fn new(mut positions: Vec<(usize, char)>) -> Self {
        positions.sort_by_key(|p| p.0);
        let regular = positions.first().and_then(|&(g, sep)| {
            let max = positions.last().map_or(0, |p| p.0);
            let same = positions
                .iter()
                .all(|&(p, c)| c == sep && p.is_multiple_of(g));
            (g > 0 && same && positions.len() == max / g).then_some((g, sep))
        });
        Grouping { positions, regular }
    }

    /// Inserts the separators into a string of digits (already mapped to
    /// the output family).
    pub(crate) fn apply(&self, digits: &[char]) -> String {
        let n = digits.len();
        let mut out = String::new();
        for (i, c) in digits.iter().enumerate() {
            let from_right = n - i;
            if i > 0 {
                let sep = match self.regular {
                    Some((g, sep)) => from_right.is_multiple_of(g).then_some(sep),
                    None => self
                        .positions
                        .iter()
                        .find(|p| p.0 == from_right)
                        .map(|p| p.1),
                };
                if let Some(sep) = sep {
                    out.push(sep);
                }
            }
            out.push(*c);
        }
        out
    }
}

/// The primary format token of an integer picture.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Primary {
    /// A decimal digit pattern.
    Decimal {
        /// Zero of the digit family.
        zero: char,
        /// Number of mandatory digits.
        mandatory: usize,
        /// Total number of digit positions (mandatory and optional).
        width: usize,
        /// Grouping separators.
        grouping: Grouping,
    },
    /// `a` or `A`: a, b, …, z, aa, ab, …
    Alpha { upper: bool },
    /// `i` or `I`: roman numerals.
    Roman { upper: bool },
    /// `w`, `W` or `Ww`: numbers in English words.
    Words(WordCase),
}

/// Letter case for numbers in words.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum WordCase {
    Lower,
    Upper,
    Title,
}

/// A parsed `fn:format-integer` picture.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IntegerPicture {
    pub(crate) primary: Primary,
    pub(crate) ordinal: bool,
}

fn unsupported(picture: &str) -> PictureError {
    PictureError::new(
        "D3130",
        format!(
            "the picture '{picture}' is not a supported integer format: use a decimal digit \
             pattern such as '#,##0', or one of a, A, i, I, w, W, Ww"
        ),
    )
}

impl IntegerPicture {
    /// Parses a whole picture (`primary[;modifier]`).
    pub(crate) fn parse(picture: &str) -> Result<Self, PictureError> {
        let (primary, modifier) = match picture.rfind(';') {
            Some(i) => (&picture[..i], &picture[i + 1..]),
            None => (picture, ""),
        };
        let ordinal = modifier.starts_with('o');
        Ok(IntegerPicture {
            primary: Self::parse_primary(primary, picture)?,
            ordinal,
        })
    }

    /// Parses a primary format token.
    pub(crate) fn parse_primary(primary: &str, picture: &str) -> Result<Primary, PictureError> {
        match primary {
            "a" => return Ok(Primary::Alpha { upper: false }),
            "A" => return Ok(Primary::Alpha { upper: true }),
            "i" => return Ok(Primary::Roman { upper: false }),
            "I" => return Ok(Primary::Roman { upper: true }),
            "w" => return Ok(Primary::Words(WordCase::Lower)),
            "W" => return Ok(Primary::Words(WordCase::Upper)),
            "Ww" => return Ok(Primary::Words(WordCase::Title)),
            _ => {}
        }
        let mut zero = None;
        let mut mandatory = 0;
        let mut width = 0;
        let mut seps: Vec<(usize, char)> = Vec::new();
        for c in primary.chars().rev() {
            if let Some((z, _)) = decimal_digit(c) {
                if zero.is_some_and(|old| old != z) {
                    return Err(PictureError::new(
                        "D3131",
                        format!(
                            "the picture '{picture}' mixes digits from different digit families"
                        ),
                    ));
                }
                zero = Some(z);
                mandatory += 1;
                width += 1;
            } else if c == '#' {
                width += 1;
            } else if c.is_alphanumeric() {
                return Err(unsupported(picture));
            } else {
                seps.push((width, c));
            }
        }
        let Some(zero) = zero else {
            return Err(unsupported(picture));
        };
        seps.retain(|&(p, _)| p > 0 && p < width);
        Ok(Primary::Decimal {
            zero,
            mandatory,
            width,
            grouping: Grouping::new(seps),
        })
    }

    /// Formats an integer value (already rounded down).
    pub(crate) fn format(&self, value: f64) -> String {
        let sign = if value < 0.0 { "-" } else { "" };
        let v = value.abs();
        let body = match &self.primary {
            Primary::Decimal {
                zero,
                mandatory,
                grouping,
                ..
            } => {
                let digits = integer_digits(v);
                let pad = mandatory.saturating_sub(digits.len());
                let chars: Vec<char> = "0"
                    .repeat(pad)
                    .chars()
                    .chain(digits.chars())
                    .map(|c| family_digit(*zero, c.to_digit(10).unwrap_or(0)))
                    .collect();
                let mut s = grouping.apply(&chars);
                if self.ordinal {
                    s.push_str(ordinal_suffix(&digits));
                }
                s
            }
            Primary::Alpha { upper } => alpha(v, *upper),
            Primary::Roman { upper } => roman(v, *upper),
            Primary::Words(case) => {
                let mut w = words(&integer_digits(v));
                if self.ordinal {
                    w = ordinal_words(&w);
                }
                apply_case(&w, *case)
            }
        };
        format!("{sign}{body}")
    }

    /// Matches the longest prefix of `text` that this picture could have
    /// produced; returns the value and the number of bytes consumed.
    /// `exact_digits` makes a decimal pattern take exactly that many digits
    /// (for date/time fields with no separator between them).
    pub(crate) fn match_prefix(
        &self,
        text: &str,
        exact_digits: Option<usize>,
    ) -> Option<(f64, usize)> {
        match &self.primary {
            Primary::Decimal { zero, grouping, .. } => {
                let mut value = 0f64;
                let mut end = 0;
                let mut count = 0;
                let mut chars = text.char_indices().peekable();
                while let Some((i, c)) = chars.next() {
                    if exact_digits == Some(count) {
                        break;
                    }
                    if let Some(d) = family_value(*zero, c) {
                        value = value * 10.0 + f64::from(d);
                        count += 1;
                        end = i + c.len_utf8();
                    } else if count > 0
                        && grouping.positions.iter().any(|p| p.1 == c)
                        && chars
                            .peek()
                            .is_some_and(|&(_, n)| family_value(*zero, n).is_some())
                    {
                        continue;
                    } else {
                        break;
                    }
                }
                if count == 0 || exact_digits.is_some_and(|n| n != count) {
                    return None;
                }
                if self.ordinal {
                    let rest = &text.as_bytes()[end..];
                    if rest.len() >= 2
                        && ["st", "nd", "rd", "th"]
                            .iter()
                            .any(|s| rest[..2].eq_ignore_ascii_case(s.as_bytes()))
                    {
                        end += 2;
                    }
                }
                Some((value, end))
            }
            Primary::Alpha { upper } => {
                let end = text
                    .find(|c: char| {
                        !(if *upper {
                            c.is_ascii_uppercase()
                        } else {
                            c.is_ascii_lowercase()
                        })
                    })
                    .unwrap_or(text.len());
                if end == 0 {
                    return None;
                }
                let v = text[..end].bytes().fold(0f64, |acc, b| {
                    acc * 26.0 + f64::from(b.to_ascii_lowercase() - b'a' + 1)
                });
                Some((v, end))
            }
            Primary::Roman { .. } => {
                let end = text
                    .find(|c: char| !"ivxlcdmIVXLCDM".contains(c))
                    .unwrap_or(text.len());
                Some((parse_roman(&text[..end]), end))
            }
            Primary::Words(_) => match_words(text),
        }
    }
}

fn family_value(zero: char, c: char) -> Option<u32> {
    let d = (c as u32).checked_sub(zero as u32)?;
    (d < 10).then_some(d)
}

fn ordinal_suffix(digits: &str) -> &'static str {
    let b = digits.as_bytes();
    let last = b.last().copied().unwrap_or(b'0');
    let tens = if b.len() >= 2 { b[b.len() - 2] } else { b'0' };
    if tens == b'1' {
        return "th";
    }
    match last {
        b'1' => "st",
        b'2' => "nd",
        b'3' => "rd",
        _ => "th",
    }
}

fn alpha(v: f64, upper: bool) -> String {
    let base = if upper { b'A' } else { b'a' };
    let mut n = v;
    let mut out = Vec::new();
    while n >= 1.0 {
        let rem = (n - 1.0) % 26.0;
        out.push(base + rem as u8);
        n = ((n - 1.0 - rem) / 26.0).floor();
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

const ROMAN: &[(u32, &str)] = &[
    (1000, "m"),
    (900, "cm"),
    (500, "d"),
    (400, "cd"),
    (100, "c"),
    (90, "xc"),
    (50, "l"),
    (40, "xl"),
    (10, "x"),
    (9, "ix"),
    (5, "v"),
    (4, "iv"),
    (1, "i"),
];

/// Roman numerals; values of ten million or more (which would need more than
/// ten thousand `M`s) are written in decimal digits instead.
fn roman(v: f64, upper: bool) -> String {
    if v >= 1e7 {
        return integer_digits(v);
    }
    let mut n = v;
    let mut out = String::new();
    for &(val, sym) in ROMAN {
        while n >= f64::from(val) {
            out.push_str(sym);
            n -= f64::from(val);
        }
    }
    if upper { out.to_uppercase() } else { out }
}

fn roman_value(c: char) -> f64 {
    match c.to_ascii_lowercase() {
        'i' => 1.0,
        'v' => 5.0,
        'x' => 10.0,
        'l' => 50.0,
        'c' => 100.0,
        'd' => 500.0,
        'm' => 1000.0,
        _ => 0.0,
    }
}

fn parse_roman(text: &str) -> f64 {
    let vals: Vec<f64> = text.chars().map(roman_value).collect();
    let mut total = 0.0;
    for (i, &v) in vals.iter().enumerate() {
        if vals.get(i + 1).is_some_and(|&next| next > v) {
            total -= v;
        } else {
            total += v;
        }
    }
    total
}

const SMALL: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 10] = [
    "", "ten", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];
const SCALES: [(&str, usize); 4] = [
    ("trillion", 12),
    ("billion", 9),
    ("million", 6),
    ("thousand", 3),
];

fn below_thousand(n: usize) -> String {
    if n < 20 {
        SMALL[n].to_string()
    } else if n < 100 {
        if n.is_multiple_of(10) {
            TENS[n / 10].to_string()
        } else {
            format!("{}-{}", TENS[n / 10], SMALL[n % 10])
        }
    } else if n.is_multiple_of(100) {
        format!("{} hundred", SMALL[n / 100])
    } else {
        format!("{} hundred and {}", SMALL[n / 100], below_thousand(n % 100))
    }
}

/// English words for a non-negative integer given as decimal digits.
pub(crate) fn words(digits: &str) -> String {
    let digits = digits.trim_start_matches('0');
    if digits.len() <= 3 {
        return below_thousand(digits.parse().unwrap_or(0));
    }
    let (scale, k) = SCALES
        .iter()
        .copied()
        .find(|&(_, k)| digits.len() > k)
        .unwrap_or(("thousand", 3));
    let (high, low) = digits.split_at(digits.len() - k);
    let mut out = format!("{} {scale}", words(high));
    let low = low.trim_start_matches('0');
    if !low.is_empty() {
        out.push_str(if low.len() <= 2 { " and " } else { ", " });
        out.push_str(&words(low));
    }
    out
}

fn ordinal_word(word: &str) -> String {
    match word {
        "one" => "first".to_string(),
        "two" => "second".to_string(),
        "three" => "third".to_string(),
        "five" => "fifth".to_string(),
        "eight" => "eighth".to_string(),
        "nine" => "ninth".to_string(),
        "twelve" => "twelfth".to_string(),
        w if w.ends_with('y') => format!("{}ieth", &w[..w.len() - 1]),
        w => format!("{w}th"),
    }
}

/// Turns cardinal words into ordinal words (`thirty-one` → `thirty-first`).
pub(crate) fn ordinal_words(cardinal: &str) -> String {
    let cut = cardinal.rfind([' ', '-']).map_or(0, |i| i + 1);
    format!("{}{}", &cardinal[..cut], ordinal_word(&cardinal[cut..]))
}

fn apply_case(w: &str, case: WordCase) -> String {
    match case {
        WordCase::Lower => w.to_string(),
        WordCase::Upper => w.to_uppercase(),
        WordCase::Title => {
            let mut out = String::new();
            let mut word = String::new();
            let flush = |word: &mut String, out: &mut String| {
                if word == "and" {
                    out.push_str(word);
                } else {
                    let mut cs = word.chars();
                    if let Some(f) = cs.next() {
                        out.extend(f.to_uppercase());
                        out.push_str(cs.as_str());
                    }
                }
                word.clear();
            };
            for c in w.chars() {
                if c == ' ' || c == '-' {
                    flush(&mut word, &mut out);
                    out.push(c);
                } else {
                    word.push(c);
                }
            }
            flush(&mut word, &mut out);
            out
        }
    }
}

/// What one English number word means when reading words back.
#[derive(Debug, Clone, Copy, PartialEq)]
enum WordValue {
    Unit(f64),
    Hundred,
    Scale(f64),
    And,
}

fn word_value(word: &str) -> Option<WordValue> {
    let w = word.to_lowercase();
    if w == "and" {
        return Some(WordValue::And);
    }
    for (i, s) in SMALL.iter().enumerate() {
        if w == *s || w == ordinal_word(s) {
            return Some(WordValue::Unit(i as f64));
        }
    }
    for (i, s) in TENS.iter().enumerate().skip(2) {
        if w == *s || w == ordinal_word(s) {
            return Some(WordValue::Unit(i as f64 * 10.0));
        }
    }
    if w == "hundred" || w == "hundredth" {
        return Some(WordValue::Hundred);
    }
    SCALES.iter().find_map(|&(s, k)| {
        (w == s || w == ordinal_word(s)).then(|| WordValue::Scale(10f64.powi(k as i32)))
    })
}

/// Reads English number words (cardinal or ordinal, any case) from the
/// start of `text`; returns the value and the bytes consumed.
pub(crate) fn match_words(text: &str) -> Option<(f64, usize)> {
    let mut total = 0f64;
    let mut current = 0f64;
    let mut end = 0;
    let mut seen = false;
    let mut pos = 0;
    let bytes = text.as_bytes();
    loop {
        let mut start = pos;
        while start < bytes.len() && matches!(bytes[start], b' ' | b',' | b'-') {
            start += 1;
        }
        if start > pos && !seen {
            break;
        }
        let mut stop = start;
        while stop < bytes.len() && bytes[stop].is_ascii_alphabetic() {
            stop += 1;
        }
        if stop == start {
            break;
        }
        let Some(value) = word_value(&text[start..stop]) else {
            break;
        };
        match value {
            WordValue::Unit(v) => current += v,
            WordValue::Hundred => current = current.max(1.0) * 100.0,
            WordValue::Scale(s) => {
                if current == 0.0 && total > 0.0 {
                    total *= s;
                } else if total + current < s {
                    total = (total + current).max(1.0) * s;
                } else {
                    total += current.max(1.0) * s;
                }
                current = 0.0;
            }
            WordValue::And => {
                pos = stop;
                continue;
            }
        }
        seen = true;
        end = stop;
        pos = stop;
    }
    seen.then_some((total + current, end))
}

/// Formats `value` with an XPath `fn:format-integer` picture, as JSONata's
/// `$formatInteger` does: the value is rounded down to an integer first.
///
/// Non-finite values are written as JavaScript would (`Infinity`, `NaN`).
///
/// Errors: `D3130` for an unsupported picture, `D3131` for a decimal digit
/// pattern that mixes digit families.
pub fn format_integer(value: f64, picture: &str) -> Result<String, PictureError> {
    let pic = IntegerPicture::parse(picture)?;
    if !value.is_finite() {
        return Ok(crate::js_number_to_string(value));
    }
    Ok(pic.format(value.floor()))
}

/// Parses `text` with an XPath `fn:format-integer` picture, the inverse of
/// [`format_integer`] (JSONata's `$parseInteger`). `Ok(None)` when the text
/// does not match the picture.
pub fn parse_integer(text: &str, picture: &str) -> Result<Option<f64>, PictureError> {
    let pic = IntegerPicture::parse(picture)?;
    if let Primary::Roman { .. } = pic.primary
        && text.is_empty()
    {
        return Ok(Some(0.0));
    }
    Ok(match pic.match_prefix(text, None) {
        Some((v, end)) if end == text.len() => Some(v),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_cardinal_and_ordinal() {
        assert_eq!(format_integer(0.0, "w").ok().as_deref(), Some("zero"));
        assert_eq!(
            format_integer(1e46, "w").ok().as_deref(),
            Some("ten billion trillion trillion trillion")
        );
        assert_eq!(
            format_integer(733.0, "Ww;o").ok().as_deref(),
            Some("Seven Hundred and Thirty-Third")
        );
        assert_eq!(
            parse_integer("ten billion trillion trillion trillion", "w"),
            Ok(Some(1e46))
        );
        assert_eq!(parse_integer("eleventh", "w;o"), Ok(Some(11.0)));
    }

    #[test]
    fn round_trips_small_integers() {
        for pic in [
            "0", "#,##0", "a", "A", "i", "I", "w", "W", "Ww", "0;o", "w;o", "٠",
        ] {
            for n in 1..=2500u32 {
                let text = format_integer(f64::from(n), pic).unwrap_or_default();
                assert_eq!(
                    parse_integer(&text, pic),
                    Ok(Some(f64::from(n))),
                    "{pic} {n} {text}"
                );
            }
        }
    }

    #[test]
    fn bad_pictures() {
        assert_eq!(format_integer(1.0, "#").map_err(|e| e.code()), Err("D3130"));
        assert_eq!(format_integer(1.0, "x").map_err(|e| e.code()), Err("D3130"));
        assert_eq!(
            format_integer(1.0, "0٠").map_err(|e| e.code()),
            Err("D3131")
        );
        assert_eq!(parse_integer("abc", "0"), Ok(None));
    }

    #[test]
    fn negative_and_fractional_values() {
        assert_eq!(format_integer(-3.0, "0000").ok().as_deref(), Some("-0003"));
        assert_eq!(format_integer(12.6, "###0").ok().as_deref(), Some("12"));
    }
}
