//! The `.env` file of a storage root: reading its entries (through
//! dotenvy), checking it line by line with errors that never show a value,
//! and editing one entry while keeping every other line as it is.

use std::cell::Cell;
use std::io;
use std::path::Path;

use crate::state::StateError;

/// An edit of `.env` text that could not be made safely (the message never
/// shows a value).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EditError(String);

/// The entries of `.env` text as name/value pairs, after checking every
/// line ([`StateError::Env`] names the first bad one, never its content).
pub fn pairs(path: &Path, text: &str) -> Result<Vec<(String, String)>, StateError> {
    validate(path, text)?;
    pairs_checked(path, text)
}

/// [`pairs`] of text [`validate`] already accepted.
pub(crate) fn pairs_checked(path: &Path, text: &str) -> Result<Vec<(String, String)>, StateError> {
    dotenvy::from_read_iter(text.as_bytes())
        .map(|item| item.map_err(|e| error(path, text, text.len(), e)))
        .collect()
}

/// The value of `var` in `.env` text (the first definition, as loading
/// keeps the first), or `None`.
pub fn lookup(text: Option<&str>, var: &str) -> Option<String> {
    let text = text?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    dotenvy::from_read_iter(text.as_bytes())
        .filter_map(Result::ok)
        .find(|(k, _)| k == var)
        .map(|(_, v)| v)
}

/// `.env` text with `var` set to `value`: its first definition replaced,
/// later ones removed, or a line appended; every other line kept as is.
/// Returns the text and whether it changed. The result is parsed back to
/// check that `var` has exactly `value` and nothing else moved; errors never
/// show the value.
pub fn set_var(text: Option<&str>, var: &str, value: &str) -> Result<(String, bool), EditError> {
    let err = |message: &str| EditError(message.to_owned());
    let old = text.unwrap_or("");
    if lookup(text, var).as_deref() == Some(value) {
        return Ok((old.to_owned(), false));
    }
    let line = format!("{var}={}\n", encode_value(value));
    let mut out = String::with_capacity(old.len() + line.len());
    let mut replaced = false;
    for (range, key) in entries(old) {
        if key.as_deref() == Some(var) {
            if !replaced {
                out.push_str(&line);
                replaced = true;
            }
        } else {
            out.push_str(&old[range]);
        }
    }
    if !replaced {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&line);
    }

    // Parse back: `var` has the value, the other entries are unchanged.
    let parse = |t: &str| -> Result<Vec<(String, String)>, EditError> {
        let t = t.strip_prefix('\u{feff}').unwrap_or(t);
        dotenvy::from_read_iter(t.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| err("the edited file would not parse (a multi-line or unusual entry?)"))
    };
    let before: Vec<String> = parse(old)?
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k != var)
        .collect();
    let after = parse(&out)?;
    let mut ours = after.iter().filter(|(k, _)| k == var);
    let ok = ours.next().is_some_and(|(_, v)| v == value)
        && ours.next().is_none()
        && after
            .iter()
            .map(|(k, _)| k)
            .filter(|k| *k != var)
            .eq(before.iter());
    if !ok {
        return Err(err(&format!(
            "could not replace the {var} entry safely (a multi-line or unusual entry?)"
        )));
    }
    Ok((out, true))
}

/// `value` as a `.env` value: bare when it only has safe characters,
/// otherwise single-quoted (literal), or double-quoted with `\` escapes if
/// it contains a single quote.
fn encode_value(value: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_.:/+=@,~%^".contains(c);
    if !value.is_empty() && value.chars().all(safe) {
        value.to_owned()
    } else if !value.contains('\'') {
        format!("'{value}'")
    } else {
        let mut out = String::with_capacity(value.len() + 2);
        out.push('"');
        for c in value.chars() {
            if matches!(c, '\\' | '"' | '$') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }
}

/// The logical entries of `.env` text, as dotenvy groups physical lines
/// (a quoted value may span several): each entry's byte range and the
/// variable it defines (`None` for blanks, comments and unparsable lines).
fn entries(text: &str) -> Vec<(std::ops::Range<usize>, Option<String>)> {
    let bom = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let mut out = Vec::new();
    if bom > 0 {
        out.push((0..bom, None));
    }
    let mut pos = bom;
    while pos < text.len() {
        let start = pos;
        let mut state = Quote::Complete;
        loop {
            let line_end = text[pos..].find('\n').map_or(text.len(), |i| pos + i + 1);
            let line = &text[pos..line_end];
            pos = line_end;
            if text[start..pos].trim_start().starts_with('#') {
                break;
            }
            state = quote_state(state, line);
            if matches!(state, Quote::Complete | Quote::Comment) || pos >= text.len() {
                break;
            }
        }
        out.push((start..pos, entry_key(&text[start..pos])));
    }
    out
}

/// dotenvy's line-grouping states.
#[derive(Clone, Copy)]
enum Quote {
    Complete,
    Escape,
    Strong,
    StrongEscape,
    Weak,
    WeakEscape,
    Comment,
    WhiteSpace,
}

/// dotenvy's state after `line`, starting in `state`.
fn quote_state(mut state: Quote, line: &str) -> Quote {
    for c in line.chars() {
        state = match state {
            Quote::WhiteSpace => match c {
                '#' => return Quote::Comment,
                '\\' => Quote::Escape,
                '"' => Quote::Weak,
                '\'' => Quote::Strong,
                _ => Quote::Complete,
            },
            Quote::Escape => Quote::Complete,
            Quote::Complete => match c {
                c if c.is_whitespace() && c != '\n' && c != '\r' => Quote::WhiteSpace,
                '\\' => Quote::Escape,
                '"' => Quote::Weak,
                '\'' => Quote::Strong,
                _ => Quote::Complete,
            },
            Quote::Weak => match c {
                '\\' => Quote::WeakEscape,
                '"' => Quote::Complete,
                _ => Quote::Weak,
            },
            Quote::WeakEscape => Quote::Weak,
            Quote::Strong => match c {
                '\\' => Quote::StrongEscape,
                '\'' => Quote::Complete,
                _ => Quote::Strong,
            },
            Quote::StrongEscape => Quote::Strong,
            Quote::Comment => return Quote::Comment,
        };
    }
    state
}

/// The variable a logical `.env` line defines: `[export] NAME =`.
fn entry_key(entry: &str) -> Option<String> {
    let key_len = |t: &str| {
        t.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(t.len())
    };
    let t = entry.trim_start();
    if !t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return None;
    }
    let n = key_len(t);
    let (mut key, mut rest) = (&t[..n], t[n..].trim_start());
    if key == "export" && !rest.starts_with('=') {
        let n = key_len(rest);
        (key, rest) = (&rest[..n], rest[n..].trim_start());
    }
    (!key.is_empty() && rest.starts_with('=')).then(|| key.to_owned())
}

/// Checks every entry of a `.env` text, naming the line of the first bad one.
pub(crate) fn validate(path: &Path, text: &str) -> Result<(), StateError> {
    let consumed = Cell::new(0);
    let mut reader = LineReader {
        text: text.as_bytes(),
        consumed: &consumed,
    };
    for item in dotenvy::from_read_iter(&mut reader) {
        if let Err(e) = item {
            return Err(error(path, text, consumed.get(), e));
        }
    }
    Ok(())
}

/// Hands out at most one physical line per `read`, so dotenvy's internal
/// buffer never runs ahead: when it reports an error, `consumed` is the end
/// of the logical line that failed.
struct LineReader<'a> {
    text: &'a [u8],
    consumed: &'a Cell<usize>,
}

impl io::Read for LineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let rest = &self.text[self.consumed.get()..];
        let line_len = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let n = line_len.min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.consumed.set(self.consumed.get() + n);
        Ok(n)
    }
}

/// Turns a dotenvy error into [`StateError::Env`] without quoting the line
/// (it may hold a secret). `end` is where the failing logical line ends.
pub(crate) fn error(path: &Path, text: &str, end: usize, e: dotenvy::Error) -> StateError {
    match e {
        dotenvy::Error::LineParse(fragment, index) => {
            // dotenvy reports a suffix of the failing logical line (the whole
            // line, or its value) and a byte index into it.
            let start = text[..end.min(text.len())].rfind(&fragment);
            let at_end = index >= fragment.len();
            let (line, column) = match start {
                // An unclosed quote runs to the end: point at the entry.
                Some(start) if at_end => crate::state::line_col(text.as_bytes(), start),
                Some(start) => crate::state::line_col(text.as_bytes(), start + index),
                None => crate::state::line_col(text.as_bytes(), end),
            };
            let message = if at_end {
                "the entry never ends (an unclosed quote or a trailing backslash)".to_owned()
            } else {
                format!("invalid syntax at column {column}")
            };
            StateError::Env {
                path: path.to_path_buf(),
                line,
                message,
            }
        }
        dotenvy::Error::Io(source) => StateError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => StateError::Env {
            path: path.to_path_buf(),
            line: crate::state::line_col(text.as_bytes(), end).0,
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn set(text: &str, var: &str, value: &str) -> String {
        set_var(Some(text), var, value).unwrap().0
    }

    #[test]
    fn env_edit_replaces_and_keeps_the_rest() {
        let text = "# keys\nA=1\nexport B='x y'\n\nC=\"multi\nline\"\nD=4 # note\n";
        assert_eq!(
            set(text, "B", "new"),
            "# keys\nA=1\nB=new\n\nC=\"multi\nline\"\nD=4 # note\n"
        );
        assert_eq!(
            set(text, "C", "v"),
            "# keys\nA=1\nexport B='x y'\n\nC=v\nD=4 # note\n"
        );
        assert_eq!(set(text, "E", "5"), format!("{text}E=5\n"));
        assert_eq!(set("A=1", "E", "5"), "A=1\nE=5\n");
        assert_eq!(set("", "E", "5"), "E=5\n");
        // Duplicates collapse into one line at the first place.
        assert_eq!(set("A=1\nB=2\nA=3\n", "A", "9"), "A=9\nB=2\n");
        // Unchanged when already set.
        let (same, changed) = set_var(Some("A=1\n"), "A", "1").unwrap();
        assert_eq!((same.as_str(), changed), ("A=1\n", false));
    }

    #[test]
    fn env_values_round_trip() {
        for value in [
            "sk-abc_123",
            "with space",
            "dollar$HOME",
            "quote'single",
            "both'\"$\\x",
            "hash#tag",
            "a=b",
        ] {
            let text = set("X=1\n", "K", value);
            assert_eq!(lookup(Some(&text), "K").as_deref(), Some(value), "{text}");
        }
    }
}
