//! Reading JSON arguments: literal text, a file, or stdin.

use std::io::Read;
use std::path::Path;

use miette::SourceSpan;
use serde_json::Value;
use uwf_util::text::LineAtFault;

use crate::error::{CliError, JsonInputError};

/// Reads `arg` as JSON text, a file path, or `-` (stdin).
///
/// Text starting with `{` or `[` is JSON; otherwise an existing file wins,
/// then the text itself is tried as JSON (so scalars like `"x"` or `42` work).
pub fn read_json(what: &str, arg: &str) -> Result<Value, CliError> {
    let trimmed = arg.trim_start();
    if arg == "-" {
        return parse(what, "<stdin>", read_text("-")?);
    }
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return parse(what, "<argument>", arg.to_string());
    }
    let path = Path::new(arg);
    if path.is_file() {
        let text = std::fs::read_to_string(path).map_err(|source| CliError::Read {
            path: path.into(),
            source,
        })?;
        return parse(what, &path.display().to_string(), text);
    }
    serde_json::from_str(arg).map_err(|_| CliError::NotFileNorJson {
        what: what.to_string(),
        arg: arg.chars().take(80).collect(),
    })
}

/// The text of a file, or of stdin for `-`.
pub fn read_text(arg: &str) -> Result<String, CliError> {
    if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|source| CliError::Read {
                path: "<stdin>".into(),
                source,
            })?;
        return Ok(text);
    }
    std::fs::read_to_string(arg).map_err(|source| CliError::Read {
        path: arg.into(),
        source,
    })
}

fn parse(what: &str, name: &str, text: String) -> Result<Value, CliError> {
    serde_json::from_str(&text).map_err(|e| {
        let offset = offset_of(&text, e.line(), e.column());
        CliError::Json(Box::new(JsonInputError {
            what: what.to_string(),
            message: e.to_string(),
            span: SourceSpan::from((offset, 0)),
            src: LineAtFault::new(name, text),
        }))
    })
}

/// Byte offset of a 1-based line and column (serde_json's convention).
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return (offset + column.saturating_sub(1)).min(text.len());
        }
        offset += l.len();
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets() {
        assert_eq!(offset_of("ab\ncd", 2, 2), 4);
        assert_eq!(offset_of("ab", 1, 1), 0);
        assert_eq!(offset_of("ab", 9, 9), 2);
    }

    #[test]
    fn literal_json_and_scalars() {
        assert!(read_json("x", "{\"a\":1}").is_ok());
        assert!(read_json("x", "42").is_ok());
        assert!(matches!(read_json("x", "{oops"), Err(CliError::Json(_))));
        assert!(matches!(
            read_json("x", "no/such/file.json"),
            Err(CliError::NotFileNorJson { .. })
        ));
    }
}
