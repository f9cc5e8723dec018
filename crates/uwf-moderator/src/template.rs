//! Edge prompt templates: literal text with `{{ expr }}` placeholders.
//!
//! A placeholder ends at the first `}}` that is not inside a string literal
//! and not closing a `{` opened inside the placeholder, so object
//! constructors work: `{{ {"n": $count(files)} }}`.

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment<'t> {
    /// Text copied as is.
    Text(&'t str),
    /// A JSONata expression (trimmed) and the byte offset of its `{{`.
    Expr(&'t str, usize),
}

/// Splits a template into segments; the error says what is wrong and where.
pub(crate) fn parse(template: &str) -> Result<Vec<Segment<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = 0;
    while let Some(found) = template[rest..].find("{{") {
        let open = rest + found;
        if open > rest {
            out.push(Segment::Text(&template[rest..open]));
        }
        let body = open + 2;
        let close = closing(template, body).ok_or_else(|| {
            format!("the placeholder `{{{{` at byte {open} has no closing `}}}}`")
        })?;
        let expr = template[body..close].trim();
        if expr.is_empty() {
            return Err(format!("the placeholder at byte {open} is empty"));
        }
        out.push(Segment::Expr(expr, open));
        rest = close + 2;
    }
    if rest < template.len() {
        out.push(Segment::Text(&template[rest..]));
    }
    Ok(out)
}

/// Byte offset of the `}}` that closes a placeholder whose body starts at `from`.
fn closing(t: &str, from: usize) -> Option<usize> {
    let bytes = t.as_bytes();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut i = from;
    while i < bytes.len() {
        let b = bytes[i];
        if let Some(q) = quote {
            if b == b'\\' && q != b'`' {
                i += 2;
                continue;
            }
            if b == q {
                quote = None;
            }
        } else {
            match b {
                b'"' | b'\'' | b'`' => quote = Some(b),
                b'{' => depth += 1,
                b'}' if depth > 0 => depth -= 1,
                b'}' if bytes.get(i + 1) == Some(&b'}') => return Some(i),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn splits_text_and_placeholders() {
        assert_eq!(
            parse("Fix: {{comments}} ({{ $count(files) }})"),
            Ok(vec![
                Segment::Text("Fix: "),
                Segment::Expr("comments", 5),
                Segment::Text(" ("),
                Segment::Expr("$count(files)", 19),
                Segment::Text(")"),
            ])
        );
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse("}} alone"), Ok(vec![Segment::Text("}} alone")]));
    }

    #[test]
    fn braces_and_strings_inside_placeholders() {
        assert_eq!(
            parse(r#"{{ {"a": {"b": "}}"}} }}!"#),
            Ok(vec![
                Segment::Expr(r#"{"a": {"b": "}}"}}"#, 0),
                Segment::Text("!")
            ])
        );
        assert_eq!(
            parse(r#"{{ "\"}}" }}"#),
            Ok(vec![Segment::Expr(r#""\"}}""#, 0)])
        );
        assert_eq!(parse("{{ `a}}b` }}"), Ok(vec![Segment::Expr("`a}}b`", 0)]));
    }

    #[test]
    fn unclosed_and_empty_placeholders_are_errors() {
        assert!(parse("a {{ b").is_err_and(|e| e.contains("byte 2")));
        assert!(parse("{{ {a} ").is_err());
        assert!(parse("x {{ }} y").is_err_and(|e| e.contains("empty")));
    }

    proptest! {
        #[test]
        fn text_without_placeholders_is_kept(s in "[^{]*") {
            let segs = parse(&s).unwrap_or_else(|e| panic!("{e}"));
            let joined: String = segs.iter().map(|s| match s {
                Segment::Text(t) => *t,
                Segment::Expr(..) => panic!("unexpected placeholder"),
            }).collect();
            prop_assert_eq!(joined, s);
        }

        #[test]
        fn never_panics_and_offsets_point_at_braces(s in "(\\{\\{|\\}\\}|[a-z\"'`{} \\\\])*") {
            if let Ok(segs) = parse(&s) {
                for seg in segs {
                    if let Segment::Expr(e, at) = seg {
                        prop_assert!(s[at..].starts_with("{{"));
                        prop_assert!(!e.is_empty());
                    }
                }
            }
        }
    }
}
