//! Editing `config.yaml` and `.env` together (`uwf setup`): read both,
//! check both, write both, `.env` always private.

use std::fmt;
use std::fs;
use std::path::Path;

use uwf_protocol::WorkflowConfig;

use crate::config::parse_yaml;
use crate::error::StateError;
use crate::state::{FsState, line_col, read_bytes, read_text};
use uwf_util::atomic::{write_atomic, write_atomic_with_mode};

/// The text of `config.yaml` and `.env`, as read by
/// [`FsState::config_files`] and rewritten by
/// [`FsState::edit_config_files`].
///
/// `Debug` never shows the `.env` text: it holds secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConfigFiles {
    /// `config.yaml`; `None` if it does not exist.
    pub config: Option<String>,
    /// `.env`; `None` if it does not exist. Holds API keys: never log it.
    pub env: Option<String>,
}

impl fmt::Debug for ConfigFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigFiles")
            .field("config", &self.config)
            .field("env", &self.env.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// What [`FsState::edit_config_files`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConfigFilesWritten {
    /// `config.yaml` was created or replaced.
    pub config: bool,
    /// `.env` was created or replaced (always with mode `0600`).
    pub env: bool,
    /// The permission bits `.env` had before, when they let users other
    /// than its owner in (it has been rewritten with `0600`).
    pub env_loose_mode: Option<u32>,
}

/// Permission bits of the `.env` file uwf writes: owner read/write only.
pub const ENV_FILE_MODE: u32 = 0o600;

impl FsState {
    /// The current `config.yaml` and `.env`, read without the lock.
    ///
    /// Both are checked: a `config.yaml` that is not a valid
    /// [`WorkflowConfig`] is [`StateError::Parse`] (file, line, column), a
    /// malformed `.env` is [`StateError::Env`] (file and line, never the
    /// line's content).
    pub fn config_files(&self) -> Result<ConfigFiles, StateError> {
        let config = self.config_path();
        let config = match read_text(&config)? {
            Some(text) => {
                parse_yaml::<WorkflowConfig>(&config, &text)?;
                Some(text)
            }
            None => None,
        };
        let env = self.env_path();
        let env = match read_bytes(&env)? {
            Some(bytes) => Some(checked_env_text(&env, bytes)?),
            None => None,
        };
        Ok(ConfigFiles { config, env })
    }

    /// Read-modify-write of `config.yaml` and `.env` together, under the
    /// state lock.
    ///
    /// Under the lock the files are read and checked as in
    /// [`config_files`](Self::config_files) (a file that does not parse is
    /// an error and nothing is written), then `edit` gets them and returns
    /// the new texts (`None`: leave that file alone) plus a value passed
    /// back to the caller. The new texts are checked the same way; then
    /// `.env` is written (if it changed, or if its permission bits let
    /// other users in) with mode [`ENV_FILE_MODE`], then `config.yaml` (if
    /// it changed), each atomically ([`write_atomic`]). Unchanged files are
    /// not touched.
    pub fn edit_config_files<T, E: From<StateError>>(
        &self,
        edit: impl FnOnce(&ConfigFiles) -> Result<(ConfigFiles, T), E>,
    ) -> Result<(ConfigFilesWritten, T), E> {
        self.while_locked(|| self.edit_config_files_locked(edit))
    }

    /// [`edit_config_files`](Self::edit_config_files) once the lock is held.
    fn edit_config_files_locked<T, E: From<StateError>>(
        &self,
        edit: impl FnOnce(&ConfigFiles) -> Result<(ConfigFiles, T), E>,
    ) -> Result<(ConfigFilesWritten, T), E> {
        let current = self.config_files()?;
        let (new, value) = edit(&current)?;
        let mut written = ConfigFilesWritten::default();

        let env_path = self.env_path();
        let env_loose_mode = loose_mode(&env_path);
        let new_env = match new.env {
            Some(text) if current.env.as_ref() != Some(&text) => {
                checked_env_text(&env_path, text.clone().into_bytes())
                    .map_err(|e| invalid_new(e, &env_path))?;
                Some(text)
            }
            _ if env_loose_mode.is_some() => current.env.clone(),
            _ => None,
        };
        let config_path = self.config_path();
        let new_config = match new.config {
            Some(text) if current.config.as_ref() != Some(&text) => {
                parse_yaml::<WorkflowConfig>(&config_path, &text)
                    .map_err(|e| invalid_new(e, &config_path))?;
                Some(text)
            }
            _ => None,
        };
        if let Some(text) = new_env {
            write_atomic_with_mode(&env_path, text.as_bytes(), ENV_FILE_MODE)
                .map_err(StateError::from)?;
            written.env = true;
            written.env_loose_mode = env_loose_mode;
        }
        if let Some(text) = new_config {
            write_atomic(&config_path, text.as_bytes()).map_err(StateError::from)?;
            written.config = true;
        }
        Ok((written, value))
    }
}

/// `.env` bytes as text, checked like [`FsState::load_env`] checks them.
pub(crate) fn checked_env_text(path: &Path, bytes: Vec<u8>) -> Result<String, StateError> {
    let text = String::from_utf8(bytes).map_err(|e| StateError::Env {
        path: path.to_path_buf(),
        line: line_col(e.as_bytes(), e.utf8_error().valid_up_to()).0,
        message: "not valid UTF-8".to_owned(),
    })?;
    crate::env::validate(path, text.strip_prefix('\u{feff}').unwrap_or(&text))?;
    Ok(text)
}

/// Marks an error found in text about to be written (not in the file on
/// disk, which is left alone).
pub(crate) fn invalid_new(e: StateError, path: &Path) -> StateError {
    let prefix = "the new content would be invalid (nothing was written)";
    match e {
        StateError::Parse {
            line,
            column,
            message,
            ..
        } => StateError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: format!("{prefix}: {message}"),
        },
        StateError::Env { line, message, .. } => StateError::Env {
            path: path.to_path_buf(),
            line,
            message: format!("{prefix}: {message}"),
        },
        other => other,
    }
}

/// The permission bits of `path` if group or others have any access
/// (`None` if it is private, missing, or off Unix).
pub(crate) fn loose_mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
            .filter(|mode| mode & 0o077 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}
