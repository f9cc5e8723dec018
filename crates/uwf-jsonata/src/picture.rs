//! Wiring of the picture-string functions (`$formatNumber`, `$formatInteger`,
//! `$parseInteger`, `$formatBase`, `$fromMillis`, `$toMillis`, `$now`) to the
//! `uwf-picture` crate.

use uwf_picture::{DecimalFormat, PictureError};

use crate::error::Error;
use crate::value::Value;

fn err(e: PictureError) -> Error {
    Error::new(e.code(), e.message())
}

fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(|v| v.as_str())
}

fn decimal_format(v: Option<&Value>) -> Result<DecimalFormat, Error> {
    let Some(Value::Object(o, _)) = v else {
        return Ok(DecimalFormat::default());
    };
    DecimalFormat::from_options(
        o.iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.as_str(), s))),
    )
    .map_err(err)
}

fn now_millis() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as f64)
        .unwrap_or(0.0)
}

/// Calls picture function `name` with validated arguments.
pub(crate) fn call(name: &str, args: &[Value]) -> Result<Value, Error> {
    let a0 = args.first();
    let n0 = a0.and_then(|v| v.as_f64());
    let s = |r: Result<String, PictureError>| r.map(|t| Value::str(&t)).map_err(err);
    match name {
        "formatNumber" => {
            let Some(n) = n0 else {
                return Ok(Value::Undefined);
            };
            let pic = text(args.get(1)).unwrap_or("");
            s(uwf_picture::format_number(
                n,
                pic,
                &decimal_format(args.get(2))?,
            ))
        }
        "formatBase" => {
            let Some(n) = n0 else {
                return Ok(Value::Undefined);
            };
            s(uwf_picture::format_base(
                n,
                args.get(1).and_then(|v| v.as_f64()),
            ))
        }
        "formatInteger" => {
            let Some(n) = n0 else {
                return Ok(Value::Undefined);
            };
            s(uwf_picture::format_integer(
                n,
                text(args.get(1)).unwrap_or(""),
            ))
        }
        "parseInteger" => {
            let Some(t) = text(a0) else {
                return Ok(Value::Undefined);
            };
            uwf_picture::parse_integer(t, text(args.get(1)).unwrap_or(""))
                .map(|r| r.map(Value::Number).unwrap_or_default())
                .map_err(err)
        }
        "fromMillis" => {
            let Some(n) = n0 else {
                return Ok(Value::Undefined);
            };
            s(uwf_picture::format_datetime(
                n,
                text(args.get(1)),
                text(args.get(2)),
            ))
        }
        "toMillis" => {
            let Some(t) = text(a0) else {
                return Ok(Value::Undefined);
            };
            uwf_picture::parse_datetime(t, text(args.get(1)))
                .map(|r| r.map(Value::Number).unwrap_or_default())
                .map_err(err)
        }
        "now" => s(uwf_picture::format_datetime(
            now_millis(),
            text(args.first()),
            text(args.get(1)),
        )),
        other => Err(Error::new("T1006", format!("Unknown function ${other}"))),
    }
}
