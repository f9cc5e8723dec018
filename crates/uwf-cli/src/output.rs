//! Writing the one answer a command has, all at once.

use std::io::Write;

use serde::Serialize;

use crate::cli::Format;
use crate::error::CliError;

/// Renders `value` completely (JSON unless `--format yaml`), then writes it
/// to stdout in one go, so a failure never leaves half an answer behind.
pub fn print<T: Serialize + ?Sized>(format: Option<Format>, value: &T) -> Result<(), CliError> {
    let text = match format.unwrap_or(Format::Json) {
        Format::Json => {
            serde_json::to_string_pretty(value).map_err(|e| CliError::Output(e.to_string()))?
        }
        Format::Yaml => {
            serde_yaml::to_string(value).map_err(|e| CliError::Output(e.to_string()))?
        }
        other => {
            return Err(CliError::Format {
                format: format!("{other:?}").to_lowercase(),
            });
        }
    };
    print_text(&text)
}

static READER_GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a write found stdout's reader gone: a command that keeps
/// printing (`thread watch`, `thread log -f`) stops then.
pub fn reader_gone() -> bool {
    READER_GONE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Writes text to stdout in one go, ending it with a newline.
pub fn print_text(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let nl: &[u8] = if text.ends_with('\n') { b"" } else { b"\n" };
    match out
        .write_all(text.as_bytes())
        .and_then(|()| out.write_all(nl))
        .and_then(|()| out.flush())
    {
        Ok(()) => Ok(()),
        // The reader went away (`uwf … | head`): not our failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            READER_GONE.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(CliError::Output(e.to_string())),
    }
}
