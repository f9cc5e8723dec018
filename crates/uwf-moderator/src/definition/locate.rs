//! Finding the place of an expression in the YAML text it was read from.
//!
//! serde_yaml gives no positions for values it deserialized successfully, so
//! the findings of [`validate`](super::validate) about expressions are placed
//! by looking for the expression's text, as written, in the source: after
//! the section key (`conditions:` or `graph:`) and after the line of the
//! entry's key. An expression written with escapes (`"a \"b\""`) is looked
//! for in that form too. When nothing matches, the finding simply has no
//! position.

/// A 1-based line and column (in characters) in a source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

/// Line and column of a byte offset (clamped to the text).
pub(crate) fn position_of(text: &str, offset: usize) -> Position {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Position {
        line,
        column: text[line_start..offset].chars().count() + 1,
    }
}

/// Byte offset of the first line, at or after `from`, that starts (after
/// indentation) with the mapping key `key` — bare, quoted, or as a flow-map
/// entry — within the top-level `section`. `None` when the section is absent.
fn key_offset(text: &str, section: &str, key: &str) -> Option<(usize, usize)> {
    let section_start = find_top_level_key(text, section)?;
    let forms = [
        format!("{key}:"),
        format!("\"{key}\":"),
        format!("'{key}':"),
        format!("{{ {key}:"),
        format!("{{{key}:"),
    ];
    let mut lines = text[section_start..].split_inclusive('\n');
    let mut at = section_start + lines.next().map_or(0, str::len);
    for line in lines {
        let line_start = at;
        at += line.len();
        // The section ends at the next top-level key.
        if !line.starts_with([' ', '\t', '#', '\n', '\r', '-']) && !line.trim().is_empty() {
            break;
        }
        let trimmed = line.trim_start();
        if forms.iter().any(|f| trimmed.starts_with(f.as_str()))
            || forms[..3]
                .iter()
                .any(|f| line.contains(&format!(", {f}")) || line.contains(&format!("{{{f}")))
        {
            return Some((section_start, line_start));
        }
    }
    Some((section_start, section_start))
}

fn find_top_level_key(text: &str, key: &str) -> Option<usize> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with(&format!("{key}:")) || line.starts_with(&format!("\"{key}\":")) {
            return Some(at);
        }
        at += line.len();
    }
    None
}

/// The forms an expression may take in YAML text, with a function mapping
/// an offset in the expression to an offset in that form (exact for the raw
/// form, the start of the text otherwise).
fn written_forms(expr: &str) -> Vec<(String, bool)> {
    let mut forms = vec![(expr.to_string(), true)];
    let json = serde_json::to_string(expr).unwrap_or_default();
    if json.len() >= 2 {
        let inner = json[1..json.len() - 1].to_string();
        if inner != expr {
            forms.push((inner, false));
        }
    }
    let single = expr.replace('\'', "''");
    if single != expr {
        forms.push((single, false));
    }
    forms
}

/// Where `expr` (and, within it, the byte `offset`) sits in `text`: under
/// the top-level `section`, at or after the line of the entry `key`.
pub(crate) fn locate(
    text: &str,
    section: &str,
    key: &str,
    expr: &str,
    offset: Option<usize>,
) -> Option<Position> {
    if key.is_empty() {
        return find_top_level_key(text, section).map(|at| position_of(text, at));
    }
    let (section_start, key_start) = key_offset(text, section, key)?;
    // A multi-line expression is looked for by its first line.
    let first_line = |s: &str| s.lines().next().unwrap_or("").to_string();
    for (form, exact) in written_forms(expr) {
        let needle = first_line(&form);
        if needle.trim().is_empty() {
            continue;
        }
        let found = text[key_start..]
            .find(&needle)
            .map(|i| key_start + i)
            .or_else(|| {
                text[section_start..]
                    .find(&needle)
                    .map(|i| section_start + i)
            });
        if let Some(start) = found {
            let within = match offset {
                Some(o) if exact && o <= needle.len() => o,
                _ => 0,
            };
            return Some(position_of(text, start + within));
        }
    }
    // The expression's text is not there as written (block scalars, escapes
    // we do not model): point at the entry's key.
    (key_start != section_start).then(|| {
        let line = &text[key_start..];
        let indent = line.len() - line.trim_start().len();
        position_of(text, key_start + indent)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "\
name: w
roles:
  a: { description: x }
conditions:
  first: \"steps[-1].output.x = 1\"
  second:
    description: y
    expression: \"$count(steps) > 2\"
  quoted: 'it''s = \"x\"'
graph:
  $START: [{ role: a, condition: null }]
  a:
    - { role: a, condition: second, prompt: \"Again: {{ $foo(x) }}\" }
    - { role: $END, condition: null }
";

    fn at(p: Option<Position>) -> (usize, usize) {
        p.map_or((0, 0), |p| (p.line, p.column))
    }

    #[test]
    fn conditions_are_found_by_their_text() {
        assert_eq!(
            at(locate(
                YAML,
                "conditions",
                "first",
                "steps[-1].output.x = 1",
                None
            )),
            (5, 11)
        );
        assert_eq!(
            at(locate(
                YAML,
                "conditions",
                "first",
                "steps[-1].output.x = 1",
                Some(6)
            )),
            (5, 17)
        );
        assert_eq!(
            at(locate(
                YAML,
                "conditions",
                "second",
                "$count(steps) > 2",
                None
            )),
            (8, 18)
        );
        // Written with escapes: found, at the start of the text.
        assert_eq!(
            at(locate(
                YAML,
                "conditions",
                "quoted",
                "it's = \"x\"",
                Some(4)
            )),
            (9, 12)
        );
    }

    #[test]
    fn prompts_are_found_under_their_role() {
        assert_eq!(
            at(locate(YAML, "graph", "a", "Again: {{ $foo(x) }}", Some(10))),
            (13, 56)
        );
    }

    #[test]
    fn unknown_text_points_at_the_key_or_nowhere() {
        assert_eq!(
            at(locate(YAML, "conditions", "second", "not there", None)),
            (6, 3)
        );
        assert_eq!(locate(YAML, "nosection", "a", "x", None), None);
    }

    #[test]
    fn positions_count_characters() {
        let t = "é: 1\nab";
        assert_eq!(at(Some(position_of(t, 2))), (1, 2));
        assert_eq!(at(Some(position_of(t, 3))), (1, 3));
        assert_eq!(at(Some(position_of(t, 6))), (2, 1));
        assert_eq!(at(Some(position_of(t, 999))), (2, 3));
    }
}
