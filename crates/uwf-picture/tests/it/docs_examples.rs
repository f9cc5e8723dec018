//! Examples from the JSONata documentation (docs.jsonata.org, "Numeric
//! functions" and "Date/Time functions") that the test suite does not have.

use uwf_picture::{
    DecimalFormat, format_base, format_datetime, format_integer, format_number, parse_datetime,
    parse_integer,
};

#[test]
fn numeric_functions() {
    let d = DecimalFormat::default();
    assert_eq!(
        format_number(34.555, "#,##0.00", &d).as_deref(),
        Ok("34.56")
    );
    let eu = DecimalFormat::from_options([("decimal-separator", ","), ("grouping-separator", ".")])
        .unwrap_or_default();
    assert_eq!(
        format_number(1234.5678, "#.##0,00", &eu).as_deref(),
        Ok("1.234,57")
    );
    assert_eq!(format_base(2555.0, Some(16.0)).as_deref(), Ok("9fb"));
    assert_eq!(
        format_integer(2789.0, "w").as_deref(),
        Ok("two thousand, seven hundred and eighty-nine")
    );
    assert_eq!(format_integer(1999.0, "I").as_deref(), Ok("MCMXCIX"));
    assert_eq!(
        parse_integer("twelve thousand, four hundred and seventy-six", "w"),
        Ok(Some(12476.0))
    );
    assert_eq!(parse_integer("12,345,678", "#,##0"), Ok(Some(12_345_678.0)));
}

#[test]
fn date_time_functions() {
    let ms = 1_510_067_557_121.0;
    assert_eq!(
        format_datetime(ms, Some("[M01]/[D01]/[Y0001] [h#1]:[m01][P]"), None).as_deref(),
        Ok("11/07/2017 3:12pm")
    );
    assert_eq!(
        format_datetime(ms, Some("[H01]:[m01]:[s01] [z]"), Some("-0500")).as_deref(),
        Ok("10:12:37 GMT-05:00")
    );
    assert_eq!(
        format_datetime(ms, None, None).as_deref(),
        Ok("2017-11-07T15:12:37.121Z")
    );
    assert_eq!(
        parse_datetime("2017-11-07T15:07:54.972Z", None),
        Ok(Some(1_510_067_274_972.0))
    );
    assert_eq!(
        parse_datetime(
            "11/07/2017 3:12pm",
            Some("[M01]/[D01]/[Y0001] [h#1]:[m01][P]")
        ),
        Ok(Some(1_510_067_520_000.0))
    );
}
