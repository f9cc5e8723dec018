//! Reading a configuration (`config.yaml`, or the text a shared store
//! keeps): YAML into [`WorkflowConfig`], with errors that name the file,
//! line and column but never quote the line (it may hold a secret).

use std::path::Path;

use serde::de::DeserializeOwned;
use uwf_protocol::WorkflowConfig;

use crate::error::StateError;

/// Parses the text of a configuration exactly as [`FsState::config`](crate::state::FsState::config) parses
/// `config.yaml` (an empty document is the default configuration), naming
/// `origin` in errors. For backends that keep the configuration elsewhere
/// (e.g. a database row).
pub fn parse_config(origin: &Path, text: &str) -> Result<WorkflowConfig, StateError> {
    Ok(parse_yaml(origin, text)?.unwrap_or_default())
}

/// Parses the configuration a shared store keeps at `origin` (a row, not a
/// file): like [`parse_config`], but a failure is
/// [`StateError::StoredConfig`], whose help does not say to edit a file.
pub fn parse_stored_config(origin: &str, text: &str) -> Result<WorkflowConfig, StateError> {
    parse_config(Path::new(origin), text).map_err(|e| match e {
        StateError::Parse {
            line,
            column,
            message,
            ..
        } => StateError::StoredConfig {
            origin: origin.to_owned(),
            line,
            column,
            message,
        },
        other => other,
    })
}

/// Parses YAML `text` read from `path`; `Ok(None)` for an empty document
/// (nothing but blanks and comments, or `~`).
pub(crate) fn parse_yaml<T: DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<Option<T>, StateError> {
    // Typed maps silently keep the last of duplicate keys; the untyped pass
    // rejects them (and reports syntax errors) first.
    serde_yaml::from_str::<serde_yaml::Value>(text).map_err(|e| yaml_error(path, text, &e))?;
    serde_yaml::from_str::<Option<T>>(text).map_err(|e| yaml_error(path, text, &e))
}

pub(crate) fn yaml_error(path: &Path, text: &str, e: &serde_yaml::Error) -> StateError {
    let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
    // A value serde quotes (for a file that is no YAML mapping, the whole
    // file) shows at most the line at fault: the file may be one a person
    // named (`uwf store init --config FILE`) and hold anything.
    let at_fault = text
        .lines()
        .nth(line.saturating_sub(1))
        .filter(|_| line > 0);
    let message = without_position(e.to_string(), line, column);
    StateError::Parse {
        path: path.to_path_buf(),
        line,
        column,
        message: uwf_util::text::shorten_quoted(&message, at_fault),
    }
}

/// Drops the " at line L column C" serde appends to its messages: the
/// position is part of [`StateError::Parse`] already.
pub(crate) fn without_position(mut message: String, line: usize, column: usize) -> String {
    let suffix = format!(" at line {line} column {column}");
    if let Some(i) = message.find(&suffix) {
        message.replace_range(i..i + suffix.len(), "");
    }
    message
}
