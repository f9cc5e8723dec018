//! Wiring of the picture-string functions (`$formatNumber`, `$formatInteger`,
//! `$parseInteger`, `$formatBase`, `$fromMillis`, `$toMillis`, `$now`).

use crate::error::Error;
use crate::value::Value;

/// Calls picture function `name` with validated arguments.
pub(crate) fn call(name: &str, _args: &[Value]) -> Result<Value, Error> {
    Err(Error::new(
        "T1006",
        format!("The function ${name} is not available in this build"),
    ))
}
