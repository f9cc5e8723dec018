//! Reading `history.jsonl`: the archive of finished threads, one JSON line
//! each, whose last line may be cut short by a crash (docs/state.md,
//! "history.jsonl").

use std::fs;
use std::io;
use std::path::Path;

use uwf_protocol::HistoryEntry;

use crate::config::without_position;
use crate::error::StateError;
use crate::state::read_bytes;

/// How `history.jsonl` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Empty, or the last byte is a newline (or only blanks follow it).
    Clean,
    /// The last line is a valid record without its newline.
    Unterminated,
    /// The last line has no newline and does not parse: a torn append that
    /// starts at byte `offset`.
    Torn {
        /// Where the fragment starts (the length to truncate to).
        offset: usize,
    },
}

/// The parsed history.
#[derive(Debug)]
pub(crate) struct History {
    pub(crate) entries: Vec<HistoryEntry>,
    pub(crate) tail: Tail,
}

/// How `history.jsonl` ends, reading only its last lines: archiving costs
/// the same however long the history is. A last complete line that does
/// not parse is reported like `FsState::history` reports it (then the
/// whole file is read, to name its line).
pub(crate) fn history_tail(path: &Path) -> Result<Tail, StateError> {
    use std::io::{Read, Seek, SeekFrom};
    let err = |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Tail::Clean),
        Err(e) => return Err(err(e)),
    };
    let len = file.metadata().map_err(err)?.len();
    // Read backwards until the chunk holds the last two line ends (or the
    // whole file).
    let mut chunk = 4096u64;
    let (start, bytes) = loop {
        let start = len.saturating_sub(chunk);
        file.seek(SeekFrom::Start(start)).map_err(err)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(err)?;
        if start == 0 || bytes.iter().filter(|&&b| b == b'\n').count() >= 2 {
            break (start, bytes);
        }
        chunk *= 4;
    };
    let cut = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let fragment = &bytes[cut..];
    let fragment = fragment.strip_suffix(b"\r").unwrap_or(fragment);
    if !fragment.iter().all(u8::is_ascii_whitespace) {
        return Ok(match serde_json::from_slice::<HistoryEntry>(fragment) {
            Ok(_) => Tail::Unterminated,
            Err(_) => Tail::Torn {
                offset: usize::try_from(start).unwrap_or(usize::MAX) + cut,
            },
        });
    }
    // The last complete line must be a record (or blank).
    let body = &bytes[..cut.saturating_sub(1)];
    let from = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let last = &body[from..];
    let last = last.strip_suffix(b"\r").unwrap_or(last);
    if !last.iter().all(u8::is_ascii_whitespace)
        && serde_json::from_slice::<HistoryEntry>(last).is_err()
    {
        load_history(path)?;
    }
    Ok(Tail::Clean)
}

pub(crate) fn load_history(path: &Path) -> Result<History, StateError> {
    match read_bytes(path)? {
        Some(bytes) => parse_history(path, &bytes),
        None => Ok(History {
            entries: Vec::new(),
            tail: Tail::Clean,
        }),
    }
}

/// Parses JSON lines, working on bytes so a torn multi-byte character in
/// the last line does not make the whole file invalid.
pub(crate) fn parse_history(path: &Path, bytes: &[u8]) -> Result<History, StateError> {
    let mut entries = Vec::new();
    let mut tail = Tail::Clean;
    let mut offset = 0;
    for (index, segment) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        let start = offset;
        offset += segment.len();
        let terminated = segment.last() == Some(&b'\n');
        let line = segment.strip_suffix(b"\n").unwrap_or(segment);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<HistoryEntry>(line) {
            Ok(entry) => {
                entries.push(entry);
                if !terminated {
                    tail = Tail::Unterminated;
                }
            }
            Err(_) if !terminated => tail = Tail::Torn { offset: start },
            Err(e) => {
                return Err(StateError::Parse {
                    path: path.to_path_buf(),
                    line: index + 1,
                    column: e.column(),
                    message: without_position(e.to_string(), e.line(), e.column()),
                });
            }
        }
    }
    Ok(History { entries, tail })
}
