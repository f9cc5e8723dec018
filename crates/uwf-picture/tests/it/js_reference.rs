//! Compares number and date text with JavaScript's own output, recorded in
//! `tests/data/js_reference.tsv` by `tests/data/js_reference.js` (node): for
//! random doubles `toString()` and `toPrecision(p)`, for random instants
//! `toISOString()` (which `$toMillis` must also read back).

#![allow(clippy::expect_used)] // a test: malformed reference data should stop it loudly

use uwf_picture::{format_datetime, js_number_to_string, parse_datetime, to_precision};

#[test]
fn matches_javascript() {
    let data = include_str!("../data/js_reference.tsv");
    let mut checked = 0;
    for line in data.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f[0] {
            "number" => {
                let x = f64::from_bits(f[1].parse().expect("bits"));
                assert_eq!(js_number_to_string(x), f[2], "toString of {x:e}");
                let p: u32 = f[3].parse().expect("precision");
                assert_eq!(to_precision(x, p), f[4], "toPrecision({p}) of {x:e}");
            }
            "date" => {
                let ms: f64 = f[1].parse().expect("millis");
                assert_eq!(format_datetime(ms, None, None).as_deref(), Ok(f[2]));
                if !f[2].starts_with(['-', '+']) {
                    assert_eq!(parse_datetime(f[2], None), Ok(Some(ms)), "{}", f[2]);
                }
            }
            other => panic!("unknown reference kind {other}"),
        }
        checked += 1;
    }
    assert!(checked >= 2000, "only {checked} reference lines");
}
