//! Escaping untrusted text (outputs, transcripts, prompts, names) for HTML
//! and SVG.

/// `s` as HTML/XML text content: `&`, `<`, `>`, quotes escaped, control
/// characters (other than tab, newline and carriage return) replaced by
/// U+FFFD.
pub fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// `s` inside a double-quoted attribute value (the same escaping as [`text`]).
pub fn attr(s: &str) -> String {
    text(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn markup_is_neutralised() {
        assert_eq!(
            text("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
        assert_eq!(text("a\u{0}b\u{1b}[0m\n"), "a\u{FFFD}b\u{FFFD}[0m\n");
    }

    proptest! {
        #[test]
        fn escaped_text_has_no_markup(s in ".*") {
            let e = text(&s);
            prop_assert!(!e.contains('<') && !e.contains('>') && !e.contains('"') && !e.contains('\''));
            // Every & starts an entity we wrote.
            for (i, _) in e.match_indices('&') {
                let rest = &e[i..];
                prop_assert!(["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"].iter().any(|p| rest.starts_with(p)));
            }
        }
    }
}
