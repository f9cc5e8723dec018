//! Frontmatter markdown: a YAML block between `---` lines, then a body.
//!
//! ```text
//! ---
//! status: done
//! ---
//!
//! ## Body
//! ```
//!
//! Agents (often LLMs) produce this, so [`parse`] never fails and never
//! panics: every input yields a [`Document`] whose [`Frontmatter`] says what
//! was found, and problems are reported as data for the caller to act on.
//!
//! Rules:
//! - a UTF-8 BOM, blank lines, and spaces or tabs before the opening `---`
//!   are ignored;
//! - the opening line is `---`, the closing line `---` or `...`; both may
//!   carry trailing spaces or tabs and end in `\n` or `\r\n`;
//! - the body starts after the closing line, minus one blank line if it
//!   starts with one (the separator [`render`] writes);
//! - without frontmatter, or without a closing line, the body is the whole
//!   input (minus the BOM).

use serde_yaml::{Mapping, Value};

/// A parsed frontmatter-markdown document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document<'a> {
    /// What was found before the body.
    pub frontmatter: Frontmatter,
    /// The markdown body, borrowed from the input.
    pub body: &'a str,
}

/// The outcome of looking for a YAML block at the top of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frontmatter {
    /// The input does not open with a `---` line.
    Absent,
    /// The delimiters enclose nothing but blank and comment lines.
    Empty,
    /// Parsed YAML: usually a mapping, but any YAML value is kept.
    Yaml(Value),
    /// The block is not valid YAML.
    Malformed {
        /// The raw text between the delimiters.
        yaml: String,
        /// The YAML parser's message; positions in it refer to the input.
        error: String,
        /// 1-based line of the error within the whole input, if known.
        line: Option<usize>,
    },
    /// An opening `---` without a closing line; the body is the whole input.
    Unterminated {
        /// Everything after the opening line.
        yaml: String,
    },
}

impl Frontmatter {
    /// The YAML mapping, if the frontmatter parsed to one.
    pub fn mapping(&self) -> Option<&Mapping> {
        match self {
            Frontmatter::Yaml(Value::Mapping(m)) => Some(m),
            _ => None,
        }
    }
}

/// Splits `input` into frontmatter and body. Never fails, never panics.
pub fn parse(input: &str) -> Document<'_> {
    let text = input.strip_prefix('\u{feff}').unwrap_or(input);
    let whole = |frontmatter| Document {
        frontmatter,
        body: text,
    };

    let mut lines = Lines { text, pos: 0 };
    let mut line_no = 0;
    let opening = loop {
        let Some(line) = lines.next() else {
            return whole(Frontmatter::Absent);
        };
        line_no += 1;
        if !line.content.trim_matches([' ', '\t', '\r']).is_empty() {
            break line;
        }
    };
    // Spaces or tabs before the opening `---` are tolerated, as upstream uwf
    // tolerates any leading white space (agents often indent the first line).
    if !is_delimiter(opening.content.trim_start_matches([' ', '\t']), "---") {
        return whole(Frontmatter::Absent);
    }

    let yaml_start = opening.next;
    let yaml_first_line = line_no + 1;
    let closing = loop {
        let Some(line) = lines.next() else {
            return whole(Frontmatter::Unterminated {
                yaml: text[yaml_start..].to_owned(),
            });
        };
        if is_delimiter(line.content, "---") || is_delimiter(line.content, "...") {
            break line;
        }
    };

    let yaml = &text[yaml_start..closing.start];
    let rest = &text[closing.next..];
    let body = rest
        .strip_prefix('\n')
        .or_else(|| rest.strip_prefix("\r\n"))
        .unwrap_or(rest);
    Document {
        frontmatter: parse_yaml(yaml, yaml_first_line),
        body,
    }
}

/// Writes `frontmatter` and `body` as `---\n{yaml}---\n\n{body}`, the form
/// [`parse`] reads back.
///
/// Falls back to an empty block holding a YAML comment with the error if
/// the value cannot be emitted, which only happens for values built in code
/// that YAML cannot express (such as a tag inside a tag); use
/// [`try_render`] to handle that case instead.
pub fn render(frontmatter: &Value, body: &str) -> String {
    try_render(frontmatter, body).unwrap_or_else(|e| {
        let error = e.to_string().replace(['\r', '\n'], " ");
        format!("---\n# frontmatter could not be rendered: {error}\n---\n\n{body}")
    })
}

/// Like [`render`], but returns the YAML emitter's error instead of falling
/// back.
pub fn try_render(frontmatter: &Value, body: &str) -> Result<String, serde_yaml::Error> {
    let yaml = serde_yaml::to_string(frontmatter)?;
    let newline = if yaml.ends_with('\n') { "" } else { "\n" };
    Ok(format!("---\n{yaml}{newline}---\n\n{body}"))
}

fn parse_yaml(yaml: &str, first_line: usize) -> Frontmatter {
    let only_comments = yaml.lines().all(|l| {
        let l = l.trim_matches([' ', '\t', '\r']);
        l.is_empty() || l.starts_with('#')
    });
    if only_comments {
        return Frontmatter::Empty;
    }
    // Padding with blank lines makes the parser's line numbers, both in
    // `location()` and in its message, count from the top of the input.
    let padded = format!("{}{yaml}", "\n".repeat(first_line - 1));
    match serde_yaml::from_str::<Value>(&padded) {
        Ok(value) => Frontmatter::Yaml(value),
        Err(e) => Frontmatter::Malformed {
            yaml: yaml.to_owned(),
            error: e.to_string(),
            line: e.location().map(|l| l.line()),
        },
    }
}

/// True if `line` (without its `\n`) is `delim` plus optional trailing
/// spaces, tabs or a `\r`.
fn is_delimiter(line: &str, delim: &str) -> bool {
    line.strip_prefix(delim)
        .is_some_and(|rest| rest.bytes().all(|b| matches!(b, b' ' | b'\t' | b'\r')))
}

/// One line of the input, as byte offsets.
struct Line<'a> {
    /// Offset of the first byte.
    start: usize,
    /// The line without its `\n`.
    content: &'a str,
    /// Offset just past the `\n`, or the end of the input.
    next: usize,
}

struct Lines<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = Line<'a>;

    fn next(&mut self) -> Option<Line<'a>> {
        let rest = self.text.get(self.pos..).filter(|r| !r.is_empty())?;
        let start = self.pos;
        let (content, len) = match rest.find('\n') {
            Some(i) => (&rest[..i], i + 1),
            None => (rest, rest.len()),
        };
        self.pos += len;
        Some(Line {
            start,
            content,
            next: self.pos,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn yaml(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap()
    }

    #[test]
    fn typical_answer() {
        let doc = parse("---\nstatus: done\n---\n\n## Body\n");
        assert_eq!(doc.frontmatter, Frontmatter::Yaml(yaml("status: done")));
        assert_eq!(doc.body, "## Body\n");
        let m = doc.frontmatter.mapping().unwrap();
        assert_eq!(m.get("status"), Some(&Value::from("done")));
    }

    #[test]
    fn absent() {
        for input in [
            "",
            "\n\n",
            "# Title\n---\na: 1\n---\n",
            "----\na: 1\n----\n",
            "--- a\nb: 1\n---\n",
        ] {
            let doc = parse(input);
            assert_eq!(doc.frontmatter, Frontmatter::Absent, "{input:?}");
            assert_eq!(doc.body, input);
            assert_eq!(doc.frontmatter.mapping(), None);
        }
    }

    #[test]
    fn empty() {
        for input in [
            "---\n---\nbody",
            "---\n\n  \n---\nbody",
            "---\n# just a comment\n  # another\n...\nbody",
        ] {
            let doc = parse(input);
            assert_eq!(doc.frontmatter, Frontmatter::Empty, "{input:?}");
            assert_eq!(doc.body, "body");
        }
        assert_eq!(parse("---\n---").body, "");
    }

    #[test]
    fn malformed_reports_line_in_input() {
        let input = "\n\n---\nok: 1\nbad: [unclosed\nmore: 2\n---\nbody";
        let doc = parse(input);
        let Frontmatter::Malformed { yaml, error, line } = &doc.frontmatter else {
            panic!("expected Malformed, got {:?}", doc.frontmatter);
        };
        assert_eq!(yaml, "ok: 1\nbad: [unclosed\nmore: 2\n");
        assert_eq!(doc.body, "body");
        let line = line.unwrap();
        // The error is detected somewhere in lines 5-7 of the input (the
        // flow sequence opened on line 5 is never closed).
        assert!((5..=7).contains(&line), "line {line}, error {error}");
        assert!(error.contains(&format!("line {line}")), "{error}");

        let doc = parse("---\na: 1\n  b: 2\n---\n");
        let Frontmatter::Malformed { line, .. } = doc.frontmatter else {
            panic!("expected Malformed, got {:?}", doc.frontmatter);
        };
        assert_eq!(line, Some(3));
    }

    #[test]
    fn unterminated() {
        let input = "---\nstatus: done\n\n## Body";
        let doc = parse(input);
        assert_eq!(
            doc.frontmatter,
            Frontmatter::Unterminated {
                yaml: "status: done\n\n## Body".into()
            }
        );
        assert_eq!(doc.body, input);

        let doc = parse("---");
        assert_eq!(
            doc.frontmatter,
            Frontmatter::Unterminated {
                yaml: String::new()
            }
        );
        assert_eq!(doc.body, "---");
    }

    #[test]
    fn crlf() {
        let doc = parse("---\r\nstatus: done\r\n---\r\n\r\n## Body\r\n");
        assert_eq!(doc.frontmatter, Frontmatter::Yaml(yaml("status: done")));
        assert_eq!(doc.body, "## Body\r\n");
    }

    #[test]
    fn bom_leading_blank_lines_and_trailing_whitespace() {
        let doc = parse("\u{feff}\n \t\n--- \t\na: b\n---  \nbody");
        assert_eq!(doc.frontmatter, Frontmatter::Yaml(yaml("a: b")));
        assert_eq!(doc.body, "body");

        let doc = parse("\u{feff}plain");
        assert_eq!(doc.frontmatter, Frontmatter::Absent);
        assert_eq!(doc.body, "plain");
    }

    #[test]
    fn dots_terminator() {
        let doc = parse("---\na: 1\n...\n\nbody");
        assert_eq!(doc.frontmatter, Frontmatter::Yaml(yaml("a: 1")));
        assert_eq!(doc.body, "body");
    }

    #[test]
    fn only_one_blank_line_is_stripped() {
        assert_eq!(parse("---\na: 1\n---\n\n\nbody").body, "\nbody");
        assert_eq!(parse("---\na: 1\n---\nbody").body, "body");
        assert_eq!(parse("---\na: 1\n---\n  \nbody").body, "  \nbody");
    }

    #[test]
    fn horizontal_rule_in_body_is_body() {
        let input = "---\na: 1\n---\n\nintro\n\n---\n\nmore\n---\n";
        let doc = parse(input);
        assert_eq!(doc.frontmatter, Frontmatter::Yaml(yaml("a: 1")));
        assert_eq!(doc.body, "intro\n\n---\n\nmore\n---\n");
    }

    #[test]
    fn non_mapping_yaml_is_kept() {
        let doc = parse("---\n- a\n- b\n---\nbody");
        assert_eq!(doc.frontmatter, Frontmatter::Yaml(yaml("[a, b]")));
        assert_eq!(doc.frontmatter.mapping(), None);

        let doc = parse("---\n~\n---\n");
        assert_eq!(doc.frontmatter, Frontmatter::Yaml(Value::Null));
    }

    #[test]
    fn spaces_before_the_opening_line_are_tolerated() {
        for input in [
            "   ---\na: 1\n---\nbody",
            "\t---\na: 1\n---\nbody",
            "\n  ---  \r\na: 1\n---\nbody",
        ] {
            let doc = parse(input);
            assert_eq!(
                doc.frontmatter.mapping().and_then(|m| m.get("a")),
                Some(&Value::from(1)),
                "{input:?}"
            );
            assert_eq!(doc.body, "body", "{input:?}");
        }
        // Prose before the fence is still no frontmatter.
        assert_eq!(parse("x ---\na: 1\n---\n").frontmatter, Frontmatter::Absent);
    }

    #[test]
    fn indented_dashes_inside_yaml_do_not_close() {
        let doc = parse("---\ntext: |\n  ---\n  still text\n---\nbody");
        let m = doc.frontmatter.mapping().unwrap();
        assert_eq!(m.get("text"), Some(&Value::from("---\nstill text\n")));
        assert_eq!(doc.body, "body");
    }

    #[test]
    fn render_round_trips() {
        let fm = yaml("status: done\nnotes: \"a\\nb\"\n");
        let text = render(&fm, "## Body\n");
        assert!(text.starts_with("---\nstatus: done\n"), "{text}");
        assert!(text.ends_with("---\n\n## Body\n"), "{text}");
        let doc = parse(&text);
        assert_eq!(doc.frontmatter, Frontmatter::Yaml(fm));
        assert_eq!(doc.body, "## Body\n");
    }

    #[test]
    fn render_falls_back_for_unemittable_values() {
        use serde_yaml::value::{Tag, TaggedValue};
        let inner = Value::Tagged(Box::new(TaggedValue {
            tag: Tag::new("a"),
            value: Value::Null,
        }));
        let nested = Value::Tagged(Box::new(TaggedValue {
            tag: Tag::new("b"),
            value: inner,
        }));
        assert!(try_render(&nested, "body").is_err());
        let doc_text = render(&nested, "body");
        let doc = parse(&doc_text);
        assert_eq!(doc.frontmatter, Frontmatter::Empty);
        assert_eq!(doc.body, "body");
    }

    fn simple_string() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_ .:#'\"-]{0,20}",
            Just("---".to_owned()),
            Just("...".to_owned()),
            Just("yes".to_owned()),
            Just("null".to_owned()),
            Just("1.5".to_owned()),
            "[a-z]{1,8}\n---\n[a-z]{0,8}",
        ]
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in any::<String>()) {
            let _ = parse(&s);
        }

        #[test]
        fn parse_never_panics_on_frontmatter_like_input(
            s in "(\u{feff})?(\r?\n)*(---|\\.\\.\\.)?[ \t]*\r?\n([-.a-z:#\\[\\]{}'\" \t\r\n]|---|\\.\\.\\.){0,60}"
        ) {
            let doc = parse(&s);
            prop_assert!(s.ends_with(doc.body));
        }

        #[test]
        fn render_then_parse_round_trips(
            pairs in proptest::collection::vec((simple_string(), simple_string()), 0..6),
            body in "(\\PC|\r|\n){0,40}(\n---\n)?(\\PC|\r|\n){0,40}",
        ) {
            let mut mapping = Mapping::new();
            for (k, v) in pairs {
                mapping.insert(Value::String(k), Value::String(v));
            }
            let text = render(&Value::Mapping(mapping.clone()), &body);
            let doc = parse(&text);
            prop_assert_eq!(doc.frontmatter.mapping(), Some(&mapping), "{}", text);
            prop_assert_eq!(doc.body, body.as_str());
        }
    }
}
