//! Error messages about a file a person named: quoting what the file holds
//! without showing all of it.
//!
//! Parsers quote a value they did not expect whole: `serde_yaml` reads a
//! file that is no YAML mapping at all (say `/etc/passwd`) as one plain
//! scalar, folding its lines into one string, and says `invalid type:
//! string "…"` with the whole file inside. An error shows at most the line
//! at fault, so [`shorten_quoted`] cuts every quoted value down.

use miette::{MietteError, MietteSpanContents, SourceCode, SourceSpan, SpanContents};

/// The text of a file a person named, as a diagnostic's source code: a
/// report shows the lines its label covers (normally the one line at
/// fault) and no other, however many lines of context the report handler
/// asks for. A [`miette::NamedSource`] would show the lines around it too.
#[derive(Debug, Clone)]
pub struct LineAtFault {
    name: String,
    text: String,
}

impl LineAtFault {
    /// The text of the file (or input) called `name` in reports.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        LineAtFault {
            name: name.into(),
            text: text.into(),
        }
    }

    /// The name reports give the text.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl SourceCode for LineAtFault {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let bytes = self.text.as_bytes();
        let start = span.offset();
        let end = start.saturating_add(span.len());
        if end > bytes.len() {
            return Err(MietteError::OutOfBounds);
        }
        if context_lines_before == 0 && context_lines_after == 0 {
            // Exactly the span (where a report takes the line and column
            // of its header from), as miette's own sources answer.
            return self.text.read_span(span, 0, 0).map(|c| {
                Box::new(MietteSpanContents::new_named(
                    self.name.clone(),
                    c.data(),
                    *c.span(),
                    c.line(),
                    c.column(),
                    c.line_count(),
                )) as Box<dyn SpanContents<'a> + 'a>
            });
        }
        // The last byte the span covers (its start when it is empty): the
        // lines from the one `start` is on to the one `last` is on.
        let last = if span.is_empty() { start } else { end - 1 };
        let from = bytes[..start]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let to = bytes[last.min(bytes.len())..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| last + i);
        // A CRLF line ends before its `\r` (unless the label covers it).
        let to = if to > from.max(end) && bytes[to - 1] == b'\r' {
            to - 1
        } else {
            to
        };
        let data = &bytes[from..to];
        let line = bytes[..from].iter().filter(|&&b| b == b'\n').count();
        let lines = 1 + data.iter().filter(|&&b| b == b'\n').count();
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            data,
            (from, data.len()).into(),
            line,
            0,
            lines,
        )))
    }
}

/// The most characters of a quoted value [`shorten_quoted`] keeps.
pub const QUOTE_MAX: usize = 40;

/// `message` with every double-quoted value (as serde writes them: `"…"`,
/// with `\"` and `\\` escapes) longer than [`QUOTE_MAX`] characters, or
/// spanning lines (`\n`), cut to its first line and at most `QUOTE_MAX`
/// characters, marked with `…`. With `line` (the line of the file the
/// message is about), a value is also cut where it stops being part of that
/// line: a scalar folded from several lines shows only what the line holds.
pub fn shorten_quoted(message: &str, line: Option<&str>) -> String {
    let mut out = String::with_capacity(message.len().min(1024));
    let mut rest = message;
    while let Some(open) = rest.find('"') {
        out.push_str(&rest[..=open]);
        let after = &rest[open + 1..];
        let Some(close) = closing_quote(after) else {
            // Unterminated: not a quoted value; keep the text as it is.
            out.push_str(after);
            return out;
        };
        out.push_str(&shorten(&after[..close], line));
        out.push('"');
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// A JSON value as text (`value.to_string()`), cut as a message about a
/// person's file may show it: a string as [`shorten_quoted`] cuts it, any
/// other value to its first [`QUOTE_MAX`] characters, marked with `…`.
pub fn shorten_value(json: &str) -> String {
    if json.starts_with('"') {
        return shorten_quoted(json, None);
    }
    if json.chars().count() <= QUOTE_MAX {
        return json.to_string();
    }
    let first: String = json.chars().take(QUOTE_MAX).collect();
    format!("{first}…")
}

/// The byte index of the `"` that ends a quoted value starting at `s`.
fn closing_quote(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(i),
            _ => {}
        }
    }
    None
}

/// The quoted value `value` (escaped, without its quotes), cut as
/// [`shorten_quoted`] says.
fn shorten(value: &str, line: Option<&str>) -> String {
    let first = value.split("\\n").next().unwrap_or_default();
    let mut keep: String = first.chars().take(QUOTE_MAX).collect();
    if let Some(line) = line {
        while !keep.is_empty() && !line.contains(keep.as_str()) {
            keep.pop();
        }
    }
    if keep.len() == value.len() {
        keep
    } else {
        format!("{keep}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text `LineAtFault` hands a report for `span`, and its line.
    fn shown(text: &str, offset: usize, len: usize) -> (String, usize) {
        let src = LineAtFault::new("f", text);
        let c = src
            .read_span(&(offset, len).into(), 3, 3)
            .unwrap_or_else(|e| panic!("{e}"));
        (String::from_utf8_lossy(c.data()).into_owned(), c.line())
    }

    #[test]
    fn a_report_sees_the_line_at_fault_and_no_other() {
        let text = "one\ntwo: x\r\nthree\n";
        assert_eq!(shown(text, 0, 1), ("one".into(), 0));
        assert_eq!(shown(text, 4, 3), ("two: x".into(), 1));
        // An empty span, at the end of a line or of the text.
        assert_eq!(shown(text, 3, 0), ("one".into(), 0));
        assert_eq!(shown(text, text.len(), 0), (String::new(), 3));
        // A span over two lines shows both, nothing around them.
        assert_eq!(shown(text, 5, 8), ("two: x\r\nthree".into(), 1));
        let src = LineAtFault::new("f", text);
        assert!(src.read_span(&(30, 1).into(), 0, 0).is_err());
        // Without context (a report's header): the span itself, located.
        let c = src
            .read_span(&(9, 1).into(), 0, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((c.data(), c.line(), c.column()), (&b"x"[..], 1, 5));
        assert_eq!(c.name(), Some("f"));
    }

    #[test]
    fn short_values_and_other_text_stay() {
        let m = r#"invalid type: string "abc", expected a map"#;
        assert_eq!(shorten_quoted(m, None), m);
        assert_eq!(shorten_quoted(m, Some("key: abc")), m);
        assert_eq!(shorten_quoted("no quotes at all", None), "no quotes at all");
        assert_eq!(
            shorten_quoted(r#"an "open quote"#, None),
            r#"an "open quote"#
        );
        assert_eq!(
            shorten_quoted(r#"escaped "a\"b" end"#, None),
            r#"escaped "a\"b" end"#
        );
    }

    #[test]
    fn a_whole_file_folded_into_a_string_shows_only_its_first_line() {
        let file =
            "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n";
        let folded = file.trim_end().replace('\n', " ");
        let m = format!(r#"invalid type: string "{folded}", expected a workflow"#);
        let first = file.lines().next().unwrap_or_default();
        assert_eq!(
            shorten_quoted(&m, Some(first)),
            r#"invalid type: string "root:x:0:0:root:/root:/bin/bash…", expected a workflow"#
        );
        // Without the line: at most QUOTE_MAX characters.
        let cut = shorten_quoted(&m, None);
        assert!(!cut.contains("nologin"), "{cut}");
        assert!(
            cut.contains(&format!("\"{}…\"", &folded[..QUOTE_MAX])),
            "{cut}"
        );
    }

    #[test]
    fn json_values_show_their_start() {
        assert_eq!(shorten_value("true"), "true");
        assert_eq!(shorten_value(r#""a\nb""#), r#""a…""#);
        let object = format!(r#"{{"k":"{}"}}"#, "v".repeat(60));
        let cut = shorten_value(&object);
        assert_eq!(cut.chars().count(), QUOTE_MAX + 1, "{cut}");
        assert!(
            cut.starts_with(r#"{"k":"vvv"#) && cut.ends_with('…'),
            "{cut}"
        );
    }

    #[test]
    fn values_spanning_lines_keep_their_first_line() {
        let m = r#"invalid value: string "first\nsecond\nthird""#;
        assert_eq!(shorten_quoted(m, None), r#"invalid value: string "first…""#);
        // Every quoted value is cut, and multi-byte text is cut on a char.
        let long = "é".repeat(60);
        let m = format!(r#""{long}" and "{long}""#);
        let want = format!(r#""{}…" and "{}…""#, "é".repeat(40), "é".repeat(40));
        assert_eq!(shorten_quoted(&m, None), want);
    }
}
