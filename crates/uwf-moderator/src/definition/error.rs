//! Errors of [`parse_yaml`](super::parse_yaml), located in the source text.

use miette::SourceSpan;
use uwf_util::text::LineAtFault;

/// Separates a message from its help inside a serde custom error (the only
/// channel from a visitor to [`DefinitionError`]).
pub(crate) const HELP_SEPARATOR: char = '\u{1f}';

/// Formats a custom error raised while deserializing: a message and a help.
pub(crate) fn with_help(message: impl std::fmt::Display, help: impl std::fmt::Display) -> String {
    format!("{message}{HELP_SEPARATOR}{help}")
}

/// Separates a message from the place it is about (see [`placed`]) inside
/// a serde custom error.
const PLACE_SEPARATOR: char = '\u{1e}';

/// A custom error's message about the entry `key` of the top-level
/// `section`, whose value is written `needle` (may be empty): serde_yaml
/// places a custom error at the start of the mapping being read (the whole
/// document, for the checks made once it is read), so [`DefinitionError`]
/// places it by the entry's text instead ([`locate`](super::locate)).
pub(crate) fn placed(
    message: impl std::fmt::Display,
    section: &str,
    key: &str,
    needle: &str,
) -> String {
    format!("{message}{PLACE_SEPARATOR}{section}{PLACE_SEPARATOR}{key}{PLACE_SEPARATOR}{needle}")
}

const DEFAULT_HELP: &str = "a workflow has `name`, `description`, `roles` (each with `description`, \
     `systemPrompt` and `outputSchema`, or `goal`/`capabilities`/`procedure`/`output`/`meta`), \
     `conditions` and `graph`; see the uwf-moderator `definition` docs";

/// A workflow file that cannot be read, with the place of the problem.
///
/// Displays as `<source>:<line>:<column>: <message>`; as a
/// [`miette::Diagnostic`] it also shows the offending line. The details are
/// boxed (errors stay small) and reachable as fields through `Deref`:
/// `err.line`, `err.message`, …
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct DefinitionError(Box<DefinitionErrorDetails>);

/// The content of a [`DefinitionError`].
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("{}{message}", self.prefix())]
#[diagnostic(code(uwf::workflow::definition))]
pub struct DefinitionErrorDetails {
    /// What is wrong (including the YAML path, e.g. `roles.planner: …`).
    pub message: String,
    /// 1-based line of the problem, when known.
    pub line: Option<usize>,
    /// 1-based column (in characters) of the problem, when known.
    pub column: Option<usize>,
    /// The file name given to [`parse_yaml`](super::parse_yaml).
    pub source_name: String,
    /// How to fix it.
    #[help]
    pub help: Option<String>,
    /// The source text (a report shows the line at fault, no other).
    #[source_code]
    pub src: LineAtFault,
    /// Where in `src`.
    #[label("here")]
    pub span: Option<SourceSpan>,
}

impl std::ops::Deref for DefinitionError {
    type Target = DefinitionErrorDetails;
    fn deref(&self) -> &DefinitionErrorDetails {
        &self.0
    }
}

impl miette::Diagnostic for DefinitionError {
    fn code<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.0.code()
    }
    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.0.help()
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.0.source_code()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        self.0.labels()
    }
}

impl DefinitionErrorDetails {
    fn prefix(&self) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{}:{l}:{c}: ", self.source_name),
            _ => format!("{}: ", self.source_name),
        }
    }
}

impl DefinitionError {
    pub(crate) fn from_yaml(err: &serde_yaml::Error, text: &str, source_name: &str) -> Self {
        let mut full = err.to_string();
        let loc = err.location();
        if let Some(l) = &loc {
            let suffix = format!(" at line {} column {}", l.line(), l.column());
            if let Some(at) = full.find(&suffix) {
                full.replace_range(at..at + suffix.len(), "");
            }
        }
        let (message, mut help) = match full.split_once(HELP_SEPARATOR) {
            Some((m, h)) => (m.to_string(), h.to_string()),
            None => (full, DEFAULT_HELP.to_string()),
        };
        // A check that says which entry it is about is placed there.
        let (message, place) = match message.split_once(PLACE_SEPARATOR) {
            Some((m, place)) => {
                let mut parts = place.splitn(3, PLACE_SEPARATOR);
                let (section, key, needle) = (
                    parts.next().unwrap_or_default(),
                    parts.next().unwrap_or_default(),
                    parts.next().unwrap_or_default(),
                );
                let at = super::locate::locate(text, section, key, needle, None);
                (m.to_string(), at)
            }
            None => (message, None),
        };
        // A value serde quotes (for a file that is no workflow at all, the
        // whole file) shows at most the line at fault.
        let at_fault = loc
            .as_ref()
            .and_then(|l| text.lines().nth(l.line().saturating_sub(1)));
        let message = uwf_util::text::shorten_quoted(&message, at_fault);
        if let Some(guess) = misspelt_key(&message) {
            help = format!("did you mean `{guess}`? {help}");
        }
        let (line, column, span) = match (place, &loc) {
            (Some(p), _) => (
                Some(p.line),
                Some(p.column),
                Some(span_at(text, p.line, p.column, text.len())),
            ),
            (None, Some(l)) => (
                Some(l.line()),
                Some(l.column()),
                Some(span_at(text, l.line(), l.column(), l.index())),
            ),
            (None, None) => (None, None, None),
        };
        Self(Box::new(DefinitionErrorDetails {
            message,
            line,
            column,
            source_name: source_name.to_string(),
            help: Some(help),
            src: LineAtFault::new(source_name, text),
            span,
        }))
    }
}

/// For serde's "unknown field `x`, expected one of `a`, `b`" (or
/// "expected `a` or `b`"), the expected key closest to `x`.
fn misspelt_key(message: &str) -> Option<String> {
    let rest = message.split_once("unknown field `")?.1;
    let (key, expected) = rest.split_once('`')?;
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    super::suggest::did_you_mean(key, candidates).map(str::to_string)
}

/// The span of the token at a 1-based line and (character) column; falls
/// back to the byte index when the line does not exist.
fn span_at(text: &str, line: usize, column: usize, index: usize) -> SourceSpan {
    let mut line_start = 0;
    let mut start = None;
    for (n, l) in text.split_inclusive('\n').enumerate() {
        if n + 1 == line {
            let content = l.trim_end_matches(['\n', '\r']);
            let within = content
                .char_indices()
                .nth(column.saturating_sub(1))
                .map_or(content.len(), |(i, _)| i);
            start = Some(line_start + within);
            break;
        }
        line_start += l.len();
    }
    let start = start.unwrap_or_else(|| index.min(text.len()));
    let len = text[start..]
        .find(|c: char| c.is_whitespace() || matches!(c, ':' | ',' | '[' | ']' | '{' | '}'))
        .unwrap_or(text.len() - start);
    SourceSpan::new(start.into(), len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_keys_are_matched_to_the_expected_ones() {
        let m = "roles.a: unknown field `systemPromt`, expected one of `description`, `systemPrompt`, `outputSchema`";
        assert_eq!(misspelt_key(m).as_deref(), Some("systemPrompt"));
        let m = "unknown field `grpah`, expected `graph` or `roles`";
        assert_eq!(misspelt_key(m).as_deref(), Some("graph"));
        assert_eq!(misspelt_key("unknown field `zzz`, expected `graph`"), None);
        assert_eq!(misspelt_key("missing field `graph`"), None);
    }

    #[test]
    fn span_points_at_the_token() {
        let text = "a: 1\nbé: [x, yy]\n";
        let s = span_at(text, 2, 6, 0);
        assert_eq!(&text[s.offset()..s.offset() + s.len()], "x");
        let s = span_at(text, 2, 1, 0);
        assert_eq!(&text[s.offset()..s.offset() + s.len()], "bé");
        // Past the end of a line: at its end, empty.
        let s = span_at(text, 1, 40, 0);
        assert_eq!((s.offset(), s.len()), (4, 0));
        // Past the last line: the byte index, clamped.
        let s = span_at(text, 9, 1, 999);
        assert_eq!(s.offset(), text.len());
    }
}
