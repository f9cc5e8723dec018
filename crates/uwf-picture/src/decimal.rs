//! `$formatNumber` (XPath F&O 3.1 `fn:format-number`) and `$formatBase`.

use crate::PictureError;
use crate::integer::Grouping;
use crate::jsnum::increment;

/// The properties of an XPath decimal format (JSONata's `$formatNumber`
/// options object). [`Default`] gives the XPath defaults.
///
/// `percent` and `per_mille` are strings because JSONata accepts a
/// multi-character marker (for example `{"per-mille": "pm"}` with the
/// picture `###pm`).
#[derive(Debug, Clone, PartialEq)]
pub struct DecimalFormat {
    /// Separates the integer and fractional parts (default `.`).
    pub decimal_separator: char,
    /// Separates digit groups (default `,`).
    pub grouping_separator: char,
    /// Introduces the exponent (default `e`).
    pub exponent_separator: char,
    /// Marks negative numbers (default `-`).
    pub minus_sign: char,
    /// Text for infinite values (default `Infinity`).
    pub infinity: String,
    /// Text for NaN (default `NaN`).
    pub nan: String,
    /// Percent marker; multiplies by 100 (default `%`).
    pub percent: String,
    /// Per-mille marker; multiplies by 1000 (default `‰`).
    pub per_mille: String,
    /// The zero of the digit family used for output (default `0`).
    pub zero_digit: char,
    /// The optional-digit sign (default `#`).
    pub digit: char,
    /// Separates the positive and negative sub-pictures (default `;`).
    pub pattern_separator: char,
}

impl Default for DecimalFormat {
    fn default() -> Self {
        DecimalFormat {
            decimal_separator: '.',
            grouping_separator: ',',
            exponent_separator: 'e',
            minus_sign: '-',
            infinity: "Infinity".to_string(),
            nan: "NaN".to_string(),
            percent: "%".to_string(),
            per_mille: "\u{2030}".to_string(),
            zero_digit: '0',
            digit: '#',
            pattern_separator: ';',
        }
    }
}

impl DecimalFormat {
    /// Builds a decimal format from the XPath defaults overridden by the
    /// keys of a JSONata options object: `decimal-separator`,
    /// `grouping-separator`, `exponent-separator`, `minus-sign`, `infinity`,
    /// `NaN`, `percent`, `per-mille`, `zero-digit`, `digit`,
    /// `pattern-separator`. Single-character properties take the first
    /// character of the value.
    ///
    /// Unknown keys are ignored, as JSONata does. Errors with `D3080` naming
    /// the key when a value is empty.
    pub fn from_options<'a>(
        options: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, PictureError> {
        let mut f = DecimalFormat::default();
        for (key, value) in options {
            let first = value.chars().next();
            let bad = || {
                PictureError::new(
                    "D3080",
                    format!("the $formatNumber option '{key}' needs a non-empty value"),
                )
            };
            let ch = || first.ok_or_else(bad);
            match key {
                "decimal-separator" => f.decimal_separator = ch()?,
                "grouping-separator" => f.grouping_separator = ch()?,
                "exponent-separator" => f.exponent_separator = ch()?,
                "minus-sign" => f.minus_sign = ch()?,
                "zero-digit" => f.zero_digit = ch()?,
                "digit" => f.digit = ch()?,
                "pattern-separator" => f.pattern_separator = ch()?,
                "infinity" => f.infinity = value.to_string(),
                "NaN" => f.nan = value.to_string(),
                "percent" | "per-mille" => {
                    ch()?;
                    if key == "percent" {
                        f.percent = value.to_string();
                    } else {
                        f.per_mille = value.to_string();
                    }
                }
                // JSONata ignores keys it does not know.
                _ => {}
            }
        }
        Ok(f)
    }

    fn zero_value(&self, c: char) -> Option<u32> {
        let d = (c as u32).checked_sub(self.zero_digit as u32)?;
        (d < 10).then_some(d)
    }

    fn digit_char(&self, d: u8) -> char {
        char::from_u32(self.zero_digit as u32 + u32::from(d - b'0')).unwrap_or('?')
    }
}

/// One unit of a picture after recognising the (possibly multi-character)
/// percent and per-mille markers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    Mandatory,
    Optional,
    Decimal,
    Group,
    Exponent,
    Percent,
    PerMille,
    Passive(char),
}

fn tokenize(picture: &str, f: &DecimalFormat) -> Vec<Vec<Tok>> {
    let mut parts = vec![Vec::new()];
    let mut rest = picture;
    while let Some(c) = rest.chars().next() {
        let (tok, len) = if !f.percent.is_empty() && rest.starts_with(f.percent.as_str()) {
            (Tok::Percent, f.percent.len())
        } else if !f.per_mille.is_empty() && rest.starts_with(f.per_mille.as_str()) {
            (Tok::PerMille, f.per_mille.len())
        } else {
            let t = if c == f.pattern_separator {
                parts.push(Vec::new());
                rest = &rest[c.len_utf8()..];
                continue;
            } else if f.zero_value(c).is_some() {
                Tok::Mandatory
            } else if c == f.digit {
                Tok::Optional
            } else if c == f.decimal_separator {
                Tok::Decimal
            } else if c == f.grouping_separator {
                Tok::Group
            } else if c == f.exponent_separator {
                Tok::Exponent
            } else {
                Tok::Passive(c)
            };
            (t, c.len_utf8())
        };
        if let Some(last) = parts.last_mut() {
            last.push(tok);
        }
        rest = &rest[len..];
    }
    parts
}

fn is_active(t: Tok) -> bool {
    matches!(
        t,
        Tok::Mandatory | Tok::Optional | Tok::Decimal | Tok::Group
    )
}

fn is_digit(t: Tok) -> bool {
    matches!(t, Tok::Mandatory | Tok::Optional)
}

/// An analysed sub-picture.
#[derive(Debug, Clone)]
struct SubPicture {
    prefix: String,
    suffix: String,
    int_grouping: Grouping,
    frac_grouping: Vec<usize>,
    min_int: usize,
    scaling: i32,
    min_frac: usize,
    max_frac: usize,
    exponent: Option<usize>,
    percent: bool,
    per_mille: bool,
}

fn err(code: &'static str, what: &str, picture: &str) -> PictureError {
    PictureError::new(
        code,
        format!("the $formatNumber picture '{picture}' {what}"),
    )
}

fn render(toks: &[Tok], f: &DecimalFormat) -> String {
    toks.iter()
        .map(|t| match t {
            Tok::Percent => f.percent.clone(),
            Tok::PerMille => f.per_mille.clone(),
            Tok::Passive(c) => c.to_string(),
            Tok::Exponent => f.exponent_separator.to_string(),
            _ => String::new(),
        })
        .collect()
}

fn analyse(
    mut toks: Vec<Tok>,
    f: &DecimalFormat,
    picture: &str,
) -> Result<SubPicture, PictureError> {
    let count = |t: Tok| toks.iter().filter(|&&x| x == t).count();
    if count(Tok::Decimal) > 1 {
        return Err(err("D3081", "has more than one decimal separator", picture));
    }
    if count(Tok::Percent) > 1 {
        return Err(err("D3082", "has more than one percent sign", picture));
    }
    if count(Tok::PerMille) > 1 {
        return Err(err("D3083", "has more than one per-mille sign", picture));
    }
    let percent = count(Tok::Percent) == 1;
    let per_mille = count(Tok::PerMille) == 1;
    if percent && per_mille {
        return Err(err(
            "D3084",
            "has both a percent and a per-mille sign",
            picture,
        ));
    }
    // An exponent separator is active only between two active characters.
    let mut exp_at = None;
    for i in 0..toks.len() {
        if toks[i] == Tok::Exponent {
            let before = i > 0 && is_active(toks[i - 1]);
            let after = toks.get(i + 1).is_some_and(|&t| is_active(t));
            if before && after && exp_at.is_none() {
                exp_at = Some(i);
            } else {
                toks[i] = Tok::Passive(f.exponent_separator);
            }
        }
    }
    let active = |i: usize, t: Tok| is_active(t) || exp_at == Some(i);
    let first = toks.iter().enumerate().position(|(i, &t)| active(i, t));
    let last = toks.iter().enumerate().rposition(|(i, &t)| active(i, t));
    let (first, last) = match (first, last) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(err("D3085", "has no digit sign", picture)),
    };
    if (first..=last).any(|i| !active(i, toks[i])) {
        return Err(err(
            "D3086",
            "has a passive character between active characters",
            picture,
        ));
    }
    let mantissa_end = exp_at.unwrap_or(last + 1);
    let mantissa = &toks[first..mantissa_end];
    let exponent_part = exp_at.map(|e| &toks[e + 1..=last]);
    if !mantissa.iter().any(|&t| is_digit(t)) {
        return Err(err("D3085", "has no digit sign in its mantissa", picture));
    }
    let dec = mantissa.iter().position(|&t| t == Tok::Decimal);
    for w in mantissa.windows(2) {
        if (w[0] == Tok::Group && w[1] == Tok::Decimal)
            || (w[0] == Tok::Decimal && w[1] == Tok::Group)
        {
            return Err(err(
                "D3087",
                "has a grouping separator next to the decimal separator",
                picture,
            ));
        }
    }
    let (int_part, frac_part) = match dec {
        Some(d) => (&mantissa[..d], &mantissa[d + 1..]),
        None => (mantissa, &[][..]),
    };
    if int_part.last() == Some(&Tok::Group) {
        return Err(err(
            "D3088",
            "ends its integer part with a grouping separator",
            picture,
        ));
    }
    if mantissa
        .windows(2)
        .any(|w| w[0] == Tok::Group && w[1] == Tok::Group)
    {
        return Err(err(
            "D3089",
            "has two adjacent grouping separators",
            picture,
        ));
    }
    let mut seen_mandatory = false;
    for &t in int_part {
        if t == Tok::Mandatory {
            seen_mandatory = true;
        } else if t == Tok::Optional && seen_mandatory {
            return Err(err(
                "D3090",
                "has an optional digit after a mandatory digit in its integer part",
                picture,
            ));
        }
    }
    let mut seen_optional = false;
    for &t in frac_part {
        if t == Tok::Optional {
            seen_optional = true;
        } else if t == Tok::Mandatory && seen_optional {
            return Err(err(
                "D3091",
                "has a mandatory digit after an optional digit in its fractional part",
                picture,
            ));
        }
    }
    if exp_at.is_some() && (percent || per_mille) {
        return Err(err(
            "D3092",
            "combines an exponent with a percent or per-mille sign",
            picture,
        ));
    }
    if let Some(ep) = exponent_part
        && ep.iter().any(|&t| t != Tok::Mandatory)
    {
        return Err(err(
            "D3093",
            "has something other than digits in its exponent",
            picture,
        ));
    }

    let mut positions = Vec::new();
    let mut digits = 0;
    for &t in int_part.iter().rev() {
        if is_digit(t) {
            digits += 1;
        } else if t == Tok::Group {
            positions.push((digits, f.grouping_separator));
        }
    }
    let mut frac_grouping = Vec::new();
    let mut fdigits = 0;
    for &t in frac_part {
        if is_digit(t) {
            fdigits += 1;
        } else if t == Tok::Group {
            frac_grouping.push(fdigits);
        }
    }
    let mandatory_int = int_part.iter().filter(|&&t| t == Tok::Mandatory).count();
    let mut min_int = mandatory_int;
    let mut min_frac = frac_part.iter().filter(|&&t| t == Tok::Mandatory).count();
    let mut max_frac = frac_part.iter().filter(|&&t| is_digit(t)).count();
    // "No decimal-digit-family character" looks at the whole sub-picture,
    // exponent included: `#e0` keeps a minimum integer size of zero.
    let any_zero_family = toks.contains(&Tok::Mandatory);
    if !any_zero_family && dec.is_none() {
        min_int = 1;
    }
    if min_int == 0 && max_frac == 0 {
        if exp_at.is_some() {
            min_frac = min_frac.max(1);
            max_frac = max_frac.max(1);
        } else {
            min_int = 1;
        }
    }
    if exp_at.is_some() && min_int == 0 && int_part.contains(&Tok::Optional) {
        min_int = 1;
    }
    if min_int == 0 && min_frac == 0 {
        // Never write zero as an empty string: `#.#` formats 0 as `.0`.
        min_frac = 1;
        max_frac = max_frac.max(1);
    }
    Ok(SubPicture {
        prefix: render(&toks[..first], f),
        suffix: render(&toks[last + 1..], f),
        int_grouping: Grouping::new(positions),
        frac_grouping,
        min_int,
        scaling: mandatory_int as i32,
        min_frac,
        max_frac,
        exponent: exponent_part.map(<[Tok]>::len),
        percent,
        per_mille,
    })
}

/// Decimal digits `d` with exponent `n`: value = 0.d1d2… × 10^n. Empty
/// digits mean zero.
#[derive(Debug, Clone, PartialEq)]
struct Decimal {
    digits: Vec<u8>,
    n: i32,
}

impl Decimal {
    fn from_f64(x: f64) -> Self {
        if x == 0.0 {
            return Decimal {
                digits: Vec::new(),
                n: 0,
            };
        }
        let text = format!("{:e}", x.abs());
        let (mant, exp) = text.split_once('e').unwrap_or((&text, "0"));
        Decimal {
            digits: mant.bytes().filter(u8::is_ascii_digit).collect(),
            n: exp.parse::<i32>().unwrap_or(0) + 1,
        }
        .trimmed()
    }

    fn trimmed(mut self) -> Self {
        while self.digits.last() == Some(&b'0') {
            self.digits.pop();
        }
        if self.digits.is_empty() {
            self.n = 0;
        }
        self
    }

    /// Rounds half to even, keeping `frac` digits after the point.
    fn round(mut self, frac: usize) -> Self {
        let keep = self.n + frac as i32;
        if keep < 0 {
            return Decimal {
                digits: Vec::new(),
                n: 0,
            };
        }
        let keep = keep as usize;
        if keep >= self.digits.len() {
            return self;
        }
        let first = self.digits[keep];
        let rest_nonzero = self.digits[keep + 1..].iter().any(|&d| d != b'0');
        let prev_odd = keep > 0 && (self.digits[keep - 1] - b'0') % 2 == 1;
        let up = first > b'5' || (first == b'5' && (rest_nonzero || prev_odd));
        self.digits.truncate(keep);
        if up {
            if self.digits.is_empty() {
                self.digits.push(b'1');
                self.n += 1;
            } else if increment(&mut self.digits) {
                self.n += 1;
            }
        }
        self.trimmed()
    }

    /// Integer and fraction digit strings.
    fn split(&self) -> (Vec<u8>, Vec<u8>) {
        let len = self.digits.len() as i32;
        if self.n <= 0 {
            let mut frac = vec![b'0'; (-self.n) as usize];
            frac.extend_from_slice(&self.digits);
            (Vec::new(), frac)
        } else if self.n >= len {
            let mut int = self.digits.clone();
            int.resize(self.n as usize, b'0');
            (int, Vec::new())
        } else {
            let (a, b) = self.digits.split_at(self.n as usize);
            (a.to_vec(), b.to_vec())
        }
    }
}

/// Formats `value` with an XPath `fn:format-number` picture and decimal
/// format (JSONata's `$formatNumber`).
///
/// Errors: `D3080`..`D3093` for invalid pictures, as the XPath rules number
/// them (for example `D3081` for two decimal separators).
pub fn format_number(
    value: f64,
    picture: &str,
    format: &DecimalFormat,
) -> Result<String, PictureError> {
    let mut parts = tokenize(picture, format);
    if parts.len() > 2 {
        return Err(err("D3080", "has more than two sub-pictures", picture));
    }
    let negative_part = if parts.len() == 2 { parts.pop() } else { None };
    let positive = analyse(parts.pop().unwrap_or_default(), format, picture)?;
    let negative = negative_part
        .map(|toks| analyse(toks, format, picture))
        .transpose()?;
    if value.is_nan() {
        return Ok(format.nan.clone());
    }
    let mut pic = positive;
    if value < 0.0 {
        match negative {
            Some(neg) => pic = neg,
            None => pic.prefix = format!("{}{}", format.minus_sign, pic.prefix),
        }
    }
    if value.is_infinite() {
        return Ok(format!("{}{}{}", pic.prefix, format.infinity, pic.suffix));
    }
    // Percent and per-mille scale by a double multiplication, as XPath
    // (and JSONata) do: 9.995 × 100 is 999.4999…, which rounds to 999.
    let scaled = if pic.percent {
        value * 100.0
    } else if pic.per_mille {
        value * 1000.0
    } else {
        value
    };
    let mut dec = Decimal::from_f64(scaled);
    let mut exponent = 0i32;
    if pic.exponent.is_some() && !dec.digits.is_empty() {
        exponent = dec.n - pic.scaling;
        dec.n = pic.scaling;
        dec = dec.round(pic.max_frac);
        if dec.n > pic.scaling {
            exponent += dec.n - pic.scaling;
            dec.n = pic.scaling;
        }
    } else {
        dec = dec.round(pic.max_frac);
    }
    let (int, mut frac) = dec.split();
    let int_digits: Vec<char> = std::iter::repeat_n(b'0', pic.min_int.saturating_sub(int.len()))
        .chain(int.iter().copied())
        .map(|d| format.digit_char(d))
        .collect();
    if frac.len() < pic.min_frac {
        frac.resize(pic.min_frac, b'0');
    }
    let mut out = pic.prefix.clone();
    out.push_str(&pic.int_grouping.apply(&int_digits));
    if !frac.is_empty() {
        out.push(format.decimal_separator);
        for (i, &d) in frac.iter().enumerate() {
            if i > 0 && pic.frac_grouping.contains(&i) {
                out.push(format.grouping_separator);
            }
            out.push(format.digit_char(d));
        }
    }
    if let Some(min_exp) = pic.exponent {
        out.push(format.exponent_separator);
        if exponent < 0 {
            out.push(format.minus_sign);
        }
        let e = exponent.unsigned_abs().to_string();
        for _ in e.len()..min_exp {
            out.push(format.zero_digit);
        }
        out.extend(e.bytes().map(|d| format.digit_char(d)));
    }
    out.push_str(&pic.suffix);
    Ok(out)
}

/// Rounds half to even (JSONata's `$round` without a precision).
pub(crate) fn round_half_even(x: f64) -> f64 {
    let f = x.floor();
    let diff = x - f;
    if diff > 0.5 {
        f + 1.0
    } else if diff < 0.5 || f % 2.0 == 0.0 {
        f
    } else {
        f + 1.0
    }
}

/// Writes `value` in base `radix` (2..=36, default 10), as JSONata's
/// `$formatBase`: both are rounded half to even first; digits above 9 are
/// lower-case letters.
///
/// Errors: `D3100` when the radix is outside 2..=36.
pub fn format_base(value: f64, radix: Option<f64>) -> Result<String, PictureError> {
    let radix = round_half_even(radix.unwrap_or(10.0));
    if !(2.0..=36.0).contains(&radix) {
        return Err(PictureError::new(
            "D3100",
            format!(
                "the radix of $formatBase must be between 2 and 36, it is {}",
                crate::js_number_to_string(radix)
            ),
        ));
    }
    let v = round_half_even(value);
    if !v.is_finite() || radix == 10.0 {
        // JavaScript's `toString(10)` is the ordinary number text (with an
        // exponent from 1e21 on).
        return Ok(crate::js_number_to_string(v));
    }
    let sign = if v < 0.0 { "-" } else { "" };
    let mut n = v.abs();
    let r = radix as u32;
    let mut digits = Vec::new();
    if n < 2f64.powi(127) {
        let mut m = n as u128;
        loop {
            digits.push(char::from_digit((m % u128::from(r)) as u32, r).unwrap_or('?'));
            m /= u128::from(r);
            if m == 0 {
                break;
            }
        }
    } else {
        while n >= 1.0 {
            let d = n % radix;
            digits.push(char::from_digit(d as u32, r).unwrap_or('?'));
            n = ((n - d) / radix).floor();
        }
    }
    Ok(format!("{sign}{}", digits.iter().rev().collect::<String>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(v: f64, p: &str) -> String {
        format_number(v, p, &DecimalFormat::default()).unwrap_or_else(|e| e.code().to_string())
    }

    #[test]
    fn basic_pictures() {
        assert_eq!(fmt(12345.6, "#,###.00"), "12,345.60");
        assert_eq!(fmt(0.5, "#"), "0");
        assert_eq!(fmt(1.5, "#"), "2");
        assert_eq!(fmt(0.0, "0.00"), "0.00");
        assert_eq!(fmt(9.99, "0.0e0"), "1.0e1");
        assert_eq!(fmt(-0.001, "0.0"), "-0.0");
        assert_eq!(fmt(f64::INFINITY, "#"), "Infinity");
        assert_eq!(fmt(f64::NEG_INFINITY, "#"), "-Infinity");
        assert_eq!(fmt(f64::NAN, "#"), "NaN");
        assert_eq!(fmt(0.25, "0%"), "25%");
        // zero is never an empty string
        assert_eq!(fmt(0.0, "#.#"), ".0");
        assert_eq!(fmt(8476.0, "#,###.##"), "8,476.0");
        // percent scales by a double multiplication: 9.995 × 100 = 999.4999…
        assert_eq!(fmt(9.995, "01%"), "999%");
        // irregular grouping inserts only the separators the picture has
        assert_eq!(fmt(82073.6, "#,##,##0.0"), "82,073.6");
        assert_eq!(fmt(1234567.0, "#,##,##0"), "12,34,567");
        assert_eq!(fmt(1.0, "#e0"), "0.1e1");
    }

    #[test]
    fn options() {
        let f =
            DecimalFormat::from_options([("decimal-separator", ","), ("grouping-separator", ".")]);
        let f = f.unwrap_or_default();
        assert_eq!(
            format_number(1234.5, "#.##0,00", &f).ok().as_deref(),
            Some("1.234,50")
        );
        assert_eq!(
            DecimalFormat::from_options([("bogus", "x")]),
            Ok(DecimalFormat::default())
        );
        assert!(DecimalFormat::from_options([("digit", "")]).is_err());
    }

    #[test]
    fn bases() {
        assert_eq!(format_base(255.0, Some(16.0)).ok().as_deref(), Some("ff"));
        assert_eq!(format_base(0.0, None).ok().as_deref(), Some("0"));
        assert_eq!(format_base(2.5, None).ok().as_deref(), Some("2"));
        assert_eq!(format_base(1e40, Some(10.0)).ok().as_deref(), Some("1e+40"));
        assert_eq!(
            format_base(2f64.powi(130), Some(2.0)).map(|s| s.len()).ok(),
            Some(131)
        );
        assert_eq!(format_base(-100.0, Some(36.0)).ok().as_deref(), Some("-2s"));
        assert_eq!(
            format_base(1.0, Some(0.0)).map_err(|e| e.code()),
            Err("D3100")
        );
    }
}
