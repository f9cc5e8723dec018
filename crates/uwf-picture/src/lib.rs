//! JSONata's picture-string and number-text functions, as a pure library.
//!
//! This crate implements the parts of the JSONata function library that are
//! driven by *picture strings* (XPath and XQuery Functions and Operators 3.1:
//! `fn:format-number`, `fn:format-integer`, `fn:format-dateTime` and their
//! inverses as JSONata defines them) and the JavaScript number-to-text rules
//! JSONata inherits:
//!
//! | JSONata            | here                                   |
//! |--------------------|----------------------------------------|
//! | `$formatNumber`    | [`format_number`] with [`DecimalFormat`] |
//! | `$formatInteger`   | [`format_integer`]                     |
//! | `$parseInteger`    | [`parse_integer`]                      |
//! | `$formatBase`      | [`format_base`]                        |
//! | `$fromMillis`      | [`format_datetime`]                    |
//! | `$toMillis`        | [`parse_datetime`], [`parse_datetime_at`] |
//! | `$string(number)`  | [`jsonata_number_string`]              |
//! | `$number(string)`  | [`parse_number_text`]                  |
//!
//! plus [`js_number_to_string`] (`Number.prototype.toString()`) and
//! [`to_precision`] (`Number.prototype.toPrecision`).
//!
//! Errors carry the JSONata error code the official test suite expects
//! (`D3080`..`D3093` for decimal-format pictures, `D3100` for radixes,
//! `D3110` for unparseable ISO timestamps, `D3130`..`D3137` for integer and
//! date/time pictures); see [`PictureError`]. "Undefined" results (JSONata's
//! `undefined`) are `Ok(None)` where a function can produce them.
//!
//! Time zones are fixed offsets written `±HHMM` (for example `+0100`,
//! `-0500`); no time-zone database is involved. Dates use the proleptic
//! Gregorian calendar and ISO 8601 week numbering.
//!
//! # Deliberate differences from JavaScript JSONata
//!
//! - ISO text without an offset (`2018-02-03T11:15:33`) is read as UTC, not
//!   as the machine's local time, so results do not depend on the host.
//! - A picture that leaves out leading date parts (`[H]:[m]`) takes them
//!   from "now"; [`parse_datetime_at`] lets the caller fix "now" (JSONata
//!   evaluates `$now()` once per evaluation).
//! - [`format_base`] writes integers of 2^53 and more with their exact
//!   digits; JavaScript's `toString(radix)` prints an approximation there.
//! - `$formatNumber` rounds half to even on the shortest decimal form of the
//!   number (what `$string` shows), not on its binary value.
//! - Fractional seconds are a fraction, as in XPath: `[f0001]` writes
//!   0.644 s as `6440` (JavaScript JSONata writes `0644`).
//! - Negative offsets with minutes (`-1130`) are eleven and a half hours
//!   west of UTC.
//! - `$toMillis` accepts a day-of-year date followed by a time
//!   (`[Y0001]-[d001] [H]:[m]`).
//! - Widths in date/time pictures are capped at 1000 (`D3134` beyond), and
//!   parsed years beyond ±1,000,000 give no instant.
//!
//! All functions are total: any picture, text or number gives a value or a
//! [`PictureError`], never a panic (see `tests/it/robustness.rs`).

mod datetime;
mod decimal;
mod integer;
mod jsnum;

pub use datetime::{format_datetime, parse_datetime, parse_datetime_at};
pub use decimal::{DecimalFormat, format_base, format_number};
pub use integer::{format_integer, parse_integer};
pub use jsnum::{js_number_to_string, jsonata_number_string, parse_number_text, to_precision};

/// A failure of one of the picture functions, with its JSONata error code.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[error("{code}: {message}")]
pub struct PictureError {
    code: &'static str,
    message: String,
}

impl PictureError {
    /// Creates an error with a JSONata error code (such as `"D3080"`) and a
    /// human-readable message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        PictureError {
            code,
            message: message.into(),
        }
    }

    /// The JSONata error code, for example `"D3130"`.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The human-readable message (without the code).
    pub fn message(&self) -> &str {
        &self.message
    }
}
