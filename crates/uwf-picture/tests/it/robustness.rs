//! No input makes the picture functions panic or run away: arbitrary
//! pictures, texts and numbers give a result or a typed error.

use proptest::prelude::*;
use uwf_picture::{
    DecimalFormat, format_base, format_datetime, format_integer, format_number,
    jsonata_number_string, parse_datetime_at, parse_integer, parse_number_text, to_precision,
};

/// Characters that mean something in some picture, plus a few non-ASCII
/// ones whose case mapping changes their length.
const PICTURE_CHARS: &str =
    "[\\[\\]#0-9,.;:eEaAiIwWnNoctYMDdFXxHhPmsfZzCE%‰\\- +٠-٩０-９İK*]{0,24}";

fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        -1e16f64..1e16,
        (-5000i64..5000).prop_map(|n| n as f64),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-0.0),
        Just(1e308),
        Just(5e-324),
    ]
}

proptest! {
    #[test]
    fn format_number_never_panics(v in number(), pic in PICTURE_CHARS) {
        let _ = format_number(v, &pic, &DecimalFormat::default());
    }

    #[test]
    fn format_number_arbitrary_text(v in number(), pic in any::<String>()) {
        let _ = format_number(v, &pic, &DecimalFormat::default());
    }

    #[test]
    fn integers_never_panic(v in number(), pic in PICTURE_CHARS, text in PICTURE_CHARS) {
        let _ = format_integer(v, &pic);
        let _ = parse_integer(&text, &pic);
    }

    #[test]
    fn datetime_never_panics(
        ms in prop_oneof![any::<f64>(), -8.64e15f64..8.64e15],
        pic in PICTURE_CHARS,
        text in PICTURE_CHARS,
        tz in "[+-]?[0-9]{0,5}",
    ) {
        let _ = format_datetime(ms, Some(&pic), Some(&tz));
        let _ = format_datetime(ms, None, Some(&tz));
        let _ = parse_datetime_at(&text, Some(&pic), 0.0);
        let _ = parse_datetime_at(&text, None, 0.0);
    }

    #[test]
    fn datetime_formats_parse_back(
        // years 0001..=9998, so that the four-digit year pattern holds them
        ms in -62_135_596_800_000f64..253_370_764_800_000.0,
        tz in (-14i64 * 60..=14 * 60).prop_map(|m| {
            format!("{}{:02}{:02}", if m < 0 { '-' } else { '+' }, m.abs() / 60, m.abs() % 60)
        }),
    ) {
        let ms = ms.floor();
        let pic = "[Y0001]-[M01]-[D01]T[H01]:[m01]:[s01].[f001][Z01:01]";
        let text = format_datetime(ms, Some(pic), Some(&tz)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(parse_datetime_at(&text, Some(pic), 0.0), Ok(Some(ms)), "{}", text);
    }

    #[test]
    fn numbers_never_panic(v in number(), radix in number(), p in 0u32..120, text in any::<String>()) {
        let _ = format_base(v, Some(radix));
        let _ = to_precision(v, p);
        let _ = jsonata_number_string(v);
        let _ = parse_number_text(&text);
    }
}

#[test]
fn big_widths_are_refused() {
    let r = format_datetime(0.0, Some("[Y,99999999999]"), None);
    assert_eq!(r.map_err(|e| e.code()), Err("D3134"));
}

#[test]
fn huge_parsed_years_give_no_instant() {
    let r = parse_datetime_at("99999999999999999999", Some("[Y]"), 0.0);
    assert_eq!(r, Ok(None));
}

#[test]
fn huge_roman_numerals_fall_back_to_digits() {
    assert_eq!(format_integer(1e300, "I").map(|s| s.len()), Ok(301));
}
