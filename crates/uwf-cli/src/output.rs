//! Writing the one answer a command has, all at once.

use std::io::Write;

use serde::Serialize;

use crate::cli::Format;
use crate::error::CliError;

/// Renders `value` completely, then writes it to stdout in one go, so a
/// failure never leaves half an answer behind.
pub fn print<T: Serialize + ?Sized>(format: Format, value: &T) -> Result<(), CliError> {
    let mut text = match format {
        Format::Json => {
            serde_json::to_string_pretty(value).map_err(|e| CliError::Output(e.to_string()))?
        }
        Format::Yaml => {
            serde_yaml::to_string(value).map_err(|e| CliError::Output(e.to_string()))?
        }
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // The reader went away (`uwf … | head`): not our failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Output(e.to_string())),
    }
}
