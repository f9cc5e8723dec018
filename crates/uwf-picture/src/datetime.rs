//! `$fromMillis` / `$toMillis`: XPath F&O 3.1 `fn:format-dateTime` pictures
//! and JSONata's inverse parse, on the proleptic Gregorian calendar with
//! fixed-offset time zones.

use crate::PictureError;
use crate::integer::{IntegerPicture, Primary, decimal_digit, family_digit, integer_digits};

const MS_PER_DAY: i64 = 86_400_000;

/// The largest width a picture may ask for.
const MAX_WIDTH: usize = 1000;

/// Parsed years beyond this many years from year 0 give no instant (keeps
/// the arithmetic far from overflow; JavaScript dates end at ±275760).
const MAX_PARSED_YEAR: i64 = 1_000_000;

/// Parsed components other than the year beyond this give no instant.
const MAX_PARSED_FIELD: i64 = 10_000_000;

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Days since 1970-01-01 of a proleptic Gregorian date; months outside
/// 1..=12 and days outside the month roll over as in JavaScript's
/// `Date.UTC`.
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = year + (month - 1).div_euclid(12);
    let m = (month - 1).rem_euclid(12) + 1;
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468 + (day - 1)
}

/// The proleptic Gregorian (year, month, day) of a day number.
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// ISO day of the week, 1 = Monday … 7 = Sunday.
fn iso_weekday(days: i64) -> i64 {
    (days + 3).rem_euclid(7) + 1
}

/// The broken-down local time of an instant.
#[derive(Debug, Clone, Copy)]
struct Fields {
    days: i64,
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    milli: i64,
    offset: i64,
}

impl Fields {
    fn new(millis: i64, offset: i64) -> Self {
        let local = millis + offset * 60_000;
        let days = local.div_euclid(MS_PER_DAY);
        let ms = local.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        Fields {
            days,
            year,
            month,
            day,
            hour: ms / 3_600_000,
            minute: ms / 60_000 % 60,
            second: ms / 1000 % 60,
            milli: ms % 1000,
            offset,
        }
    }

    /// The Thursday of this date's ISO week, as a day number.
    fn thursday(&self) -> i64 {
        self.days - iso_weekday(self.days) + 4
    }

    fn value(&self, component: char) -> i64 {
        match component {
            'Y' => self.year,
            'M' => self.month,
            'D' => self.day,
            'd' => self.days - days_from_civil(self.year, 1, 1) + 1,
            'F' => iso_weekday(self.days),
            'W' => {
                let t = self.thursday();
                let (y, _, _) = civil_from_days(t);
                (t - days_from_civil(y, 1, 1)) / 7 + 1
            }
            'X' => civil_from_days(self.thursday()).0,
            'w' => (civil_from_days(self.thursday()).2 - 1) / 7 + 1,
            'x' => civil_from_days(self.thursday()).1,
            'H' => self.hour,
            'h' => match self.hour % 12 {
                0 => 12,
                h => h,
            },
            'm' => self.minute,
            's' => self.second,
            'f' => self.milli,
            _ => 0,
        }
    }
}

/// One variable marker of a date/time picture, such as `[D1o]`.
#[derive(Debug, Clone, PartialEq)]
struct Marker {
    component: char,
    presentation: String,
    defaulted: bool,
    modifier: Option<char>,
    min: Option<usize>,
    max: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Marker(Marker),
}

fn is_name_presentation(p: &str) -> bool {
    matches!(p, "N" | "n" | "Nn")
}

fn parse_width(text: &str, picture: &str) -> Result<(Option<usize>, Option<usize>), PictureError> {
    let one = |s: &str| -> Result<Option<usize>, PictureError> {
        if s == "*" {
            return Ok(None);
        }
        match s.parse::<usize>() {
            Ok(n) if n <= MAX_WIDTH => Ok(Some(n)),
            _ => Err(PictureError::new(
                "D3134",
                format!(
                    "the width modifier '{text}' in the picture '{picture}' is not valid: \
                     use a number up to {MAX_WIDTH} or *"
                ),
            )),
        }
    };
    match text.split_once('-') {
        Some((a, b)) => Ok((one(a)?, one(b)?)),
        None => Ok((one(text)?, None)),
    }
}

fn parse_marker(body: &str, picture: &str) -> Result<Marker, PictureError> {
    let mut chars = body.chars();
    let component = chars.next().unwrap_or(' ');
    if !"YMDdFWwXxHhPmsfZzCE".contains(component) || component == ' ' {
        return Err(PictureError::new(
            "D3132",
            format!(
                "'{component}' in the picture '{picture}' is not a date/time component \
                 (use one of Y M D d F W w X x H h P m s f Z z C E)"
            ),
        ));
    }
    let rest = chars.as_str();
    let (mut pres, width) = match rest.rfind(',') {
        Some(i) => (rest[..i].to_string(), Some(&rest[i + 1..])),
        None => (rest.to_string(), None),
    };
    let (min, mut max) = match width {
        Some(w) => parse_width(w, picture)?,
        None => (None, None),
    };
    let mut modifier = None;
    if pres.chars().count() >= 2
        && let Some(last) = pres.chars().last()
        && "acot".contains(last)
    {
        modifier = Some(last);
        pres.pop();
    }
    let defaulted = pres.is_empty();
    if defaulted {
        pres = match component {
            'F' | 'P' | 'C' | 'E' => "n",
            'm' | 's' => "01",
            'Z' | 'z' => "01:01",
            _ => "1",
        }
        .to_string();
        if width.is_some() && max.is_none() && component == 'Y' {
            // `[Y,2]`: a width on a defaulted year asks for that many digits.
            max = min;
        }
    }
    if is_name_presentation(&pres) && !"MFxPCE".contains(component) {
        return Err(PictureError::new(
            "D3133",
            format!(
                "the component '{component}' in the picture '{picture}' cannot be written as a name"
            ),
        ));
    }
    Ok(Marker {
        component,
        presentation: pres,
        defaulted,
        modifier,
        min,
        max,
    })
}

fn parse_picture(picture: &str) -> Result<Vec<Part>, PictureError> {
    // An unclosed marker is reported before problems inside the markers,
    // except an unknown component letter in an earlier marker.
    let mut open = None;
    let mut scan = picture.char_indices().peekable();
    while let Some((i, c)) = scan.next() {
        match c {
            '[' if open.is_none() && scan.peek().map(|p| p.1) == Some('[') => {
                scan.next();
            }
            '[' => open = Some(i),
            ']' => open = None,
            _ => {}
        }
    }
    if let Some(at) = open {
        if let Err(e) = parse_picture(&picture[..at])
            && e.code() == "D3132"
        {
            return Err(e);
        }
        return Err(PictureError::new(
            "D3135",
            format!("the picture '{picture}' has a '[' without a closing ']'"),
        ));
    }
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut chars = picture.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '[' if chars.peek().map(|p| p.1) == Some('[') => {
                chars.next();
                lit.push('[');
            }
            ']' if chars.peek().map(|p| p.1) == Some(']') => {
                chars.next();
                lit.push(']');
            }
            '[' => {
                let Some(close) = picture[i..].find(']') else {
                    return Err(PictureError::new(
                        "D3135",
                        format!("the picture '{picture}' has a '[' without a closing ']'"),
                    ));
                };
                let body: String = picture[i + 1..i + close]
                    .chars()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                while chars.peek().is_some_and(|&(j, _)| j <= i + close) {
                    chars.next();
                }
                if !lit.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut lit)));
                }
                parts.push(Part::Marker(parse_marker(&body, picture)?));
            }
            _ => lit.push(c),
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Literal(lit));
    }
    Ok(parts)
}

/// Parses a time-zone argument such as `+0100`, `-05:00` or `0000` into
/// minutes east of UTC.
fn parse_timezone(tz: &str) -> Result<i64, PictureError> {
    let bad = || {
        PictureError::new(
            "D3134",
            format!("the time zone '{tz}' is not valid: write it as ±HHMM, for example +0100"),
        )
    };
    let (sign, rest) = match tz.as_bytes().first() {
        Some(b'+') => (1, &tz[1..]),
        Some(b'-') => (-1, &tz[1..]),
        _ => (1, tz),
    };
    let digits: String = rest.chars().filter(|&c| c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let h: i64 = digits[..2].parse().map_err(|_| bad())?;
    let m: i64 = digits[2..].parse().map_err(|_| bad())?;
    Ok(sign * (h * 60 + m))
}

fn pad(n: i64, width: usize) -> String {
    format!("{n:0width$}")
}

fn format_timezone(offset: i64, marker: &Marker, picture: &str) -> Result<String, PictureError> {
    if marker.modifier == Some('t') && offset == 0 {
        return Ok("Z".to_string());
    }
    let sign = if offset < 0 { '-' } else { '+' };
    let (h, m) = (offset.abs() / 60, offset.abs() % 60);
    let pres = &marker.presentation;
    let sep = pres.char_indices().find(|&(_, c)| !c.is_ascii_digit());
    let body = match sep {
        Some((i, c)) => format!("{sign}{}{c}{}", pad(h, i), pad(m, 2)),
        None => match pres.len() {
            0..=2 if m == 0 => format!("{sign}{}", pad(h, pres.len())),
            0..=2 => format!("{sign}{}:{}", pad(h, pres.len()), pad(m, 2)),
            3 | 4 => format!("{sign}{}{}", pad(h, pres.len() - 2), pad(m, 2)),
            _ => {
                return Err(PictureError::new(
                    "D3134",
                    format!(
                        "the time-zone presentation '{pres}' in the picture '{picture}' has \
                         too many digits (at most four)"
                    ),
                ));
            }
        },
    };
    Ok(if marker.component == 'z' {
        format!("GMT{body}")
    } else {
        body
    })
}

fn apply_name_case(name: &str, pres: &str, max: Option<usize>) -> String {
    let name: String = match max {
        Some(m) => name.chars().take(m).collect(),
        None => name.to_string(),
    };
    match pres {
        "N" => name.to_uppercase(),
        "n" => name.to_lowercase(),
        _ => name,
    }
}

fn format_marker(f: &Fields, m: &Marker, picture: &str) -> Result<String, PictureError> {
    let c = m.component;
    match c {
        'Z' | 'z' => return format_timezone(f.offset, m, picture),
        // The calendar and era are always the ISO ones, written as `ISO`.
        'C' | 'E' => return Ok("ISO".to_string()),
        'P' => {
            let name = if f.hour < 12 { "am" } else { "pm" };
            let pres = if m.presentation == "Nn" {
                "n"
            } else {
                &m.presentation
            };
            return Ok(apply_name_case(name, pres, m.max));
        }
        _ => {}
    }
    if is_name_presentation(&m.presentation) {
        let name = match c {
            'M' | 'x' => MONTHS[(f.value(c) - 1).clamp(0, 11) as usize],
            _ => DAYS[(f.value(c) - 1).clamp(0, 6) as usize],
        };
        return Ok(apply_name_case(name, &m.presentation, m.max));
    }
    let primary = IntegerPicture::parse_primary(&m.presentation, picture)?;
    if c == 'f' {
        return Ok(format_fraction(f.milli, &primary, m));
    }
    let value = f.value(c);
    let ordinal = m.modifier == Some('o');
    match primary {
        Primary::Decimal {
            zero,
            mandatory,
            grouping,
            width,
        } => {
            let mut digits = integer_digits(value.abs() as f64);
            let mut mandatory = if m.defaulted {
                m.min.unwrap_or(mandatory)
            } else {
                mandatory.max(m.min.unwrap_or(0))
            };
            if let Some(max) = m.max {
                mandatory = mandatory.min(max);
                if c == 'Y' && digits.len() > max {
                    digits = digits[digits.len() - max..].to_string();
                }
            }
            let pic = IntegerPicture {
                primary: Primary::Decimal {
                    zero,
                    mandatory,
                    width,
                    grouping,
                },
                ordinal,
            };
            let v: f64 = digits.parse().unwrap_or(0.0);
            let text = pic.format(v);
            Ok(if value < 0 { format!("-{text}") } else { text })
        }
        other => Ok(IntegerPicture {
            primary: other,
            ordinal,
        }
        .format(value as f64)),
    }
}

/// Fractional seconds: the milliseconds as a decimal fraction with at least
/// the picture's mandatory digits and at most its maximum width.
fn format_fraction(milli: i64, primary: &Primary, m: &Marker) -> String {
    let (zero, mandatory) = match primary {
        Primary::Decimal {
            zero, mandatory, ..
        } => (*zero, *mandatory),
        _ => ('0', 1),
    };
    let min = m.min.unwrap_or(mandatory).max(1);
    let mut digits = format!("{milli:03}");
    while digits.len() < min {
        digits.push('0');
    }
    while digits.len() > min && digits.ends_with('0') {
        digits.pop();
    }
    if let Some(max) = m.max {
        digits.truncate(max.max(1));
    }
    digits
        .chars()
        .map(|d| family_digit(zero, d.to_digit(10).unwrap_or(0)))
        .collect()
}

fn invalid_time(millis: f64) -> PictureError {
    PictureError::new(
        "D3110",
        format!(
            "{} is not a valid timestamp in milliseconds",
            crate::js_number_to_string(millis)
        ),
    )
}

/// Formats an instant (milliseconds since the epoch) with an XPath
/// `fn:format-dateTime` picture, as JSONata's `$fromMillis`.
///
/// With no picture the result is ISO 8601 like JavaScript's
/// `toISOString()` (`2018-10-21T13:05:00.000Z`), with the offset written as
/// `-05:00` when a non-zero `timezone` is given. `timezone` is a fixed
/// offset `±HHMM`. Milliseconds are rounded down to whole milliseconds.
///
/// Errors: `D3132` unknown component, `D3133` a name presentation for a
/// numeric-only component, `D3134` a bad time zone or width, `D3135` an
/// unclosed `[`, `D3130`/`D3131` bad integer presentations, `D3110` a
/// non-finite or out-of-range instant.
pub fn format_datetime(
    millis: f64,
    picture: Option<&str>,
    timezone: Option<&str>,
) -> Result<String, PictureError> {
    if !millis.is_finite() || millis.abs() > 8.64e15 {
        return Err(invalid_time(millis));
    }
    let offset = timezone.map(parse_timezone).transpose()?.unwrap_or(0);
    let f = Fields::new(millis.floor() as i64, offset);
    let Some(picture) = picture else {
        let year = if (0..=9999).contains(&f.year) {
            pad(f.year, 4)
        } else if f.year < 0 {
            format!("-{}", pad(-f.year, 6))
        } else {
            format!("+{}", pad(f.year, 6))
        };
        let zone = Marker {
            component: 'Z',
            presentation: "01:01".to_string(),
            defaulted: false,
            modifier: Some('t'),
            min: None,
            max: None,
        };
        return Ok(format!(
            "{year}-{}-{}T{}:{}:{}.{}{}",
            pad(f.month, 2),
            pad(f.day, 2),
            pad(f.hour, 2),
            pad(f.minute, 2),
            pad(f.second, 2),
            pad(f.milli, 3),
            format_timezone(offset, &zone, "")?
        ));
    };
    let mut out = String::new();
    for part in parse_picture(picture)? {
        match part {
            Part::Literal(s) => out.push_str(&s),
            Part::Marker(m) => out.push_str(&format_marker(&f, &m, picture)?),
        }
    }
    Ok(out)
}

/// Matches a name from `names` (case-insensitively, truncated to `max`
/// characters when given) at the start of `text`; returns its index and
/// length in bytes.
fn match_name(text: &str, names: &[&str], max: Option<usize>) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for (i, name) in names.iter().enumerate() {
        let n: String = match max {
            Some(m) => name.chars().take(m).collect(),
            None => name.to_string(),
        };
        let prefix = text.as_bytes().get(..n.len());
        if !n.is_empty()
            && prefix.is_some_and(|p| p.eq_ignore_ascii_case(n.as_bytes()))
            && best.is_none_or(|b| n.len() > b.1)
        {
            best = Some((i, n.len()));
        }
    }
    best
}

/// Matches a time-zone offset (`Z`, `+01:00`, `-0500`, `+5`) at the start
/// of `text`; returns minutes east of UTC and bytes consumed.
fn match_timezone(text: &str) -> Option<(i64, usize)> {
    let b = text.as_bytes();
    if b.first() == Some(&b'Z') {
        return Some((0, 1));
    }
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let mut i = 1;
    let digits = |i: &mut usize, max: usize| {
        let start = *i;
        while *i < b.len() && *i - start < max && b[*i].is_ascii_digit() {
            *i += 1;
        }
        text[start..*i].parse::<i64>().ok().map(|v| (v, *i - start))
    };
    let (first, n) = digits(&mut i, 4)?;
    let (h, mut m) = if n > 2 {
        (first / 100, first % 100)
    } else {
        (first, 0)
    };
    if n <= 2 && b.get(i) == Some(&b':') {
        let mut j = i + 1;
        if let Some((mm, 2)) = digits(&mut j, 2) {
            m = mm;
            i = j;
        }
    }
    Some((sign * (h * 60 + m), i))
}

fn no_parse(text: &str) -> PictureError {
    PictureError::new(
        "D3110",
        format!(
            "the timestamp '{text}' cannot be parsed: use ISO 8601, for example \
             2018-02-01T09:42:13.123Z, or give a picture"
        ),
    )
}

/// Parses ISO 8601 text as JSONata's `$toMillis` does without a picture:
/// `YYYY`, `YYYY-MM`, `YYYY-MM-DD`, optionally followed by `THH:MM`,
/// `:SS`, `.fff…` and `Z` / `±HH:MM` / `±HHMM`. Text without an offset is
/// read as UTC.
fn parse_iso(text: &str) -> Result<f64, PictureError> {
    let b = text.as_bytes();
    let mut i = 0;
    let num = |i: &mut usize, n: usize| -> Option<i64> {
        let s = text.get(*i..*i + n)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *i += n;
        s.parse().ok()
    };
    let fail = || no_parse(text);
    let year = num(&mut i, 4).ok_or_else(fail)?;
    let (mut month, mut day) = (1, 1);
    let (mut hour, mut minute, mut second, mut milli, mut offset) = (0, 0, 0, 0, 0);
    if b.get(i) == Some(&b'-') {
        i += 1;
        month = num(&mut i, 2).ok_or_else(fail)?;
        if b.get(i) == Some(&b'-') {
            i += 1;
            day = num(&mut i, 2).ok_or_else(fail)?;
            if b.get(i) == Some(&b'T') {
                i += 1;
                hour = num(&mut i, 2).ok_or_else(fail)?;
                if b.get(i) != Some(&b':') {
                    return Err(fail());
                }
                i += 1;
                minute = num(&mut i, 2).ok_or_else(fail)?;
                if b.get(i) == Some(&b':') {
                    i += 1;
                    second = num(&mut i, 2).ok_or_else(fail)?;
                    if b.get(i) == Some(&b'.') {
                        i += 1;
                        let start = i;
                        while i < b.len() && b[i].is_ascii_digit() {
                            i += 1;
                        }
                        if i == start {
                            return Err(fail());
                        }
                        let frac = format!("{:0<3}", &text[start..i.min(start + 3)]);
                        milli = frac.parse().map_err(|_| fail())?;
                    }
                }
                if i < b.len() {
                    let (off, n) = match_timezone(&text[i..]).ok_or_else(fail)?;
                    offset = off;
                    i += n;
                }
            }
        }
    }
    let days_in_month = days_from_civil(year, month + 1, 1) - days_from_civil(year, month, 1);
    if i != b.len()
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month
        || hour > 24
        || minute > 59
        || second > 59
    {
        return Err(fail());
    }
    let days = days_from_civil(year, month, day);
    Ok(
        (days * MS_PER_DAY + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli
            - offset * 60_000) as f64,
    )
}

/// Parses `text` with an XPath date/time picture (JSONata's `$toMillis`
/// with a picture) or, without one, as ISO 8601. Returns milliseconds
/// since the epoch, or `Ok(None)` when the text does not match the picture
/// (or the picture has no date/time components).
///
/// Components the picture leaves out before the first one it has are taken
/// from the current UTC date and time; those after the last one default to
/// their lowest values. Use [`parse_datetime_at`] to supply "now".
///
/// Errors: `D3110` unparseable ISO text; `D3132`/`D3133`/`D3135` bad
/// pictures; `D3136` a picture with gaps (`[Y]-[D]`) or week-based
/// components, which cannot identify an instant.
pub fn parse_datetime(text: &str, picture: Option<&str>) -> Result<Option<f64>, PictureError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_millis() as f64);
    parse_datetime_at(text, picture, now)
}

/// [`parse_datetime`] with an explicit current time (milliseconds since the
/// epoch) for the components the picture leaves out at the front.
pub fn parse_datetime_at(
    text: &str,
    picture: Option<&str>,
    now_millis: f64,
) -> Result<Option<f64>, PictureError> {
    let Some(picture) = picture else {
        return parse_iso(text).map(Some);
    };
    let parts = parse_picture(picture)?;
    let markers: Vec<&Marker> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Marker(m) => Some(m),
            Part::Literal(_) => None,
        })
        .collect();
    let has = |c: char| markers.iter().any(|m| m.component == c);
    let underspecified = || {
        PictureError::new(
            "D3136",
            format!(
                "the picture '{picture}' does not identify an instant: its date and time \
                 components must run without gaps (for example [Y]-[M]-[D] [H]:[m]) and \
                 week-based components (W, w, X, x) are not supported"
            ),
        )
    };
    if "WwXx".chars().any(has) {
        return Err(underspecified());
    }
    let use_doy = has('d');
    let order: Vec<bool> = if use_doy {
        vec![
            has('Y'),
            true,
            has('H') || has('h'),
            has('m'),
            has('s'),
            has('f'),
        ]
    } else {
        vec![
            has('Y'),
            has('M'),
            has('D'),
            has('H') || has('h'),
            has('m'),
            has('s'),
            has('f'),
        ]
    };
    let Some(first) = order.iter().position(|&p| p) else {
        return Ok(None);
    };
    let last = order.iter().rposition(|&p| p).unwrap_or(first);
    if order[first..=last].iter().any(|&p| !p) {
        return Err(underspecified());
    }

    // Match the text against the picture.
    let mut values: Vec<(char, i64)> = Vec::new();
    let mut pm: Option<bool> = None;
    let mut offset = 0i64;
    let mut pos = 0usize;
    for (idx, part) in parts.iter().enumerate() {
        let rest = &text[pos..];
        match part {
            Part::Literal(l) => {
                if !rest.starts_with(l.as_str()) {
                    return Ok(None);
                }
                pos += l.len();
            }
            Part::Marker(m) => {
                let exact = exact_digits(rest, m, &parts[idx + 1..]);
                let Some((value, used)) = match_marker(rest, m, exact, picture)? else {
                    return Ok(None);
                };
                pos += used;
                match m.component {
                    'P' => pm = Some(value == 1),
                    'Z' | 'z' => offset = value,
                    'C' | 'E' | 'F' => {}
                    c => values.push((c, value)),
                }
            }
        }
    }
    if pos != text.len()
        || values.iter().any(|&(c, v)| {
            v.abs()
                > if c == 'Y' {
                    MAX_PARSED_YEAR
                } else {
                    MAX_PARSED_FIELD
                }
        })
    {
        return Ok(None);
    }
    let get = |c: char| values.iter().find(|v| v.0 == c).map(|v| v.1);
    let now = Fields::new(now_millis.floor() as i64, 0);
    // Leading missing parts come from now, trailing ones default to their
    // lowest value.
    let pick = |present: Option<i64>, index: usize, now_value: i64, low: i64| {
        present.unwrap_or(if index < first { now_value } else { low })
    };
    let hour = match (get('H'), get('h')) {
        (Some(h), _) => Some(h),
        (None, Some(h)) => Some(h % 12 + if pm == Some(true) { 12 } else { 0 }),
        _ => None,
    };
    let year = pick(get('Y'), 0, now.year, 1970);
    let days = if use_doy {
        days_from_civil(year, 1, 1) + pick(get('d'), 1, now.value('d'), 1) - 1
    } else {
        let month = pick(get('M'), 1, now.month, 1);
        let day = pick(get('D'), 2, now.day, 1);
        days_from_civil(year, month, day)
    };
    let base = if use_doy { 2 } else { 3 };
    let hour = pick(hour, base, now.hour, 0);
    let minute = pick(get('m'), base + 1, now.minute, 0);
    let second = pick(get('s'), base + 2, now.second, 0);
    let milli = pick(get('f'), base + 3, now.milli, 0);
    Ok(Some(
        (days * MS_PER_DAY + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli
            - offset * 60_000) as f64,
    ))
}

/// A numeric marker's digit pattern: its mandatory digits, and whether its
/// width is fixed (two or more mandatory digits and no optional ones).
fn digit_width(m: &Marker) -> Option<(usize, bool)> {
    if is_name_presentation(&m.presentation) || "PZzCE".contains(m.component) {
        return None;
    }
    let mut mandatory = 0;
    let mut optional = false;
    for c in m.presentation.chars() {
        if decimal_digit(c).is_some() {
            mandatory += 1;
        } else if c == '#' {
            optional = true;
        } else if c.is_alphabetic() {
            return None;
        }
    }
    (mandatory > 0).then_some((mandatory, !optional && mandatory >= 2))
}

/// How many digits a numeric marker takes when other numeric markers follow
/// it with no literal between (`[Y][M01][D01]`): a fixed-width pattern takes
/// its width; a variable one leaves the following markers their widths.
/// `None` when a literal (or nothing) follows, so the digits run decides.
fn exact_digits(text: &str, m: &Marker, following: &[Part]) -> Option<usize> {
    let (mandatory, fixed) = digit_width(m)?;
    let mut reserved = 0;
    for part in following {
        match part {
            Part::Marker(next) => match digit_width(next) {
                Some((n, _)) => reserved += n,
                None => break,
            },
            Part::Literal(_) => break,
        }
    }
    if reserved == 0 {
        return None;
    }
    if fixed {
        return Some(mandatory);
    }
    let run = text
        .chars()
        .take_while(|&c| decimal_digit(c).is_some())
        .count();
    Some(run.saturating_sub(reserved).max(mandatory))
}

/// Matches one marker at the start of `text`; returns its value (for `P`:
/// 0 = am, 1 = pm; for `Z`/`z`: minutes east of UTC; for `f`:
/// milliseconds) and the bytes consumed.
fn match_marker(
    text: &str,
    m: &Marker,
    exact: Option<usize>,
    picture: &str,
) -> Result<Option<(i64, usize)>, PictureError> {
    let c = m.component;
    Ok(match c {
        'Z' | 'z' => {
            let (skip, rest) = if c == 'z' && text.starts_with("GMT") {
                (3, &text[3..])
            } else {
                (0, text)
            };
            match_timezone(rest).map(|(v, n)| (v, n + skip))
        }
        'P' => match_name(text, &["am", "pm"], m.max).map(|(i, n)| (i as i64, n)),
        'C' | 'E' => {
            let n = text
                .find(|ch: char| !ch.is_alphabetic())
                .unwrap_or(text.len());
            (n > 0).then_some((0, n))
        }
        _ if is_name_presentation(&m.presentation) => {
            if c == 'F' {
                match_name(text, &DAYS, m.max).map(|(i, n)| (i as i64 + 1, n))
            } else {
                match_name(text, &MONTHS, m.max).map(|(i, n)| (i as i64 + 1, n))
            }
        }
        'f' => {
            let n = text
                .find(|ch: char| !ch.is_ascii_digit())
                .unwrap_or(text.len());
            if n == 0 {
                None
            } else {
                let frac = format!("{:0<3}", &text[..n.min(3)]);
                frac.parse().ok().map(|v| (v, n))
            }
        }
        _ => {
            let primary = IntegerPicture::parse_primary(&m.presentation, picture)?;
            let pic = IntegerPicture {
                primary,
                ordinal: m.modifier == Some('o'),
            };
            pic.match_prefix(text, exact).map(|(v, n)| (v as i64, n))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_round_trip() {
        for days in -800_000..800_000 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(days_from_civil(2000, 13, 1), days_from_civil(2001, 1, 1));
    }

    #[test]
    fn iso_round_trip() {
        for ms in [0.0, 1.0, -1.0, 1_509_380_732_935.0, -62_135_596_800_000.0] {
            let text = format_datetime(ms, None, None).unwrap_or_default();
            assert_eq!(parse_datetime(&text, None), Ok(Some(ms)), "{text}");
        }
    }

    #[test]
    fn iso_rejects() {
        for bad in [
            "",
            "foo",
            "2018-13-01",
            "2018-02-30",
            "2018-02-03 11:15:33",
            "2018-1-1",
        ] {
            assert_eq!(
                parse_datetime(bad, None).map_err(|e| e.code()),
                Err("D3110"),
                "{bad}"
            );
        }
    }

    #[test]
    fn picture_round_trip() {
        let pic = "[FNn], [D1o] [MNn] [Y0001] [h]:[m01]:[s01].[f001] [P] [Z01:01]";
        for ms in [
            0.0,
            1_521_801_216_617.0,
            951_782_400_000.0,
            -2_777_932_800_000.0,
        ] {
            let text = format_datetime(ms, Some(pic), Some("+0530")).unwrap_or_default();
            assert_eq!(parse_datetime(&text, Some(pic)), Ok(Some(ms)), "{text}");
        }
    }

    #[test]
    fn leading_parts_come_from_now() {
        let now = 1_521_801_216_617.0; // 2018-03-23T10:33:36.617Z
        assert_eq!(
            parse_datetime_at("13:45", Some("[H]:[m]"), now),
            Ok(Some(1_521_812_700_000.0))
        );
    }

    #[test]
    fn adjacent_numeric_fields() {
        let want = Ok(Some(1_522_108_800_000.0));
        assert_eq!(parse_datetime("20180327", Some("[Y][M01][D01]")), want);
        assert_eq!(parse_datetime("20180327", Some("[Y0001][M01][D01]")), want);
        assert_eq!(parse_datetime("2018327", Some("[Y0001][M1][D01]")), want);
    }

    #[test]
    fn bad_timezone() {
        assert_eq!(
            format_datetime(0.0, None, Some("bogus")).map_err(|e| e.code()),
            Err("D3134")
        );
    }
}
