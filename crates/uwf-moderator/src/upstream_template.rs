//! Edge prompts written for upstream uwf: mustache templates (upstream
//! 2026-05-25 to 2026-06-10) and the Liquid output tags that replaced them,
//! compiled into uwf's canonical JSONata templates.
//!
//! The compiled template calls the moderator's template functions
//! ([`crate::functions`]), so the stored Workflow node keeps its format and
//! a thread renders the prompt like any other. Semantics, as upstream's:
//!
//! * `{{name}}`, `{{{name}}}` and `{{& name}}` insert the value of `name` in
//!   the last output **as is**: upstream turned mustache's HTML escaping off
//!   (prompts are plain text, not HTML), and LiquidJS does not escape either.
//!   Values print as JavaScript prints them: a list as its items joined with
//!   commas, an object as `[object Object]`, `null` or a missing value as
//!   nothing. `{{$status}}` is the output's `$status`; `{{a.b}}` descends.
//! * `{{#name}}…{{/name}}` repeats its body for each item of a list (the item
//!   is looked up first), renders it once for another truthy value and not
//!   at all for a falsy one (`false`, `null`, `""`, `0`, an empty list, a
//!   missing value); `{{^name}}…{{/name}}` renders when `name` is falsy;
//!   `{{.}}` is the current item; `{{! comment }}` is dropped. A section,
//!   inverted-section or comment tag alone on its line removes that line.
//! * Liquid filters in an output tag: `{{ files | join: ", " }}`, `default`,
//!   `upcase`, `downcase`, `size`, `append`, `prepend`.
//! * A prompt that renders to nothing but white space is an error at run
//!   time, as upstream's moderator refused it.
//!
//! Not supported (an error naming the place): partials `{{> name}}`,
//! delimiter changes `{{= =}}`, and Liquid tags `{% … %}`.

use std::fmt;

/// Why a template cannot be compiled; `offset` is a byte offset in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError {
    /// What is wrong.
    pub message: String,
    /// Where, in bytes from the start of the template.
    pub offset: usize,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

fn err<T>(message: impl Into<String>, offset: usize) -> Result<T, TemplateError> {
    Err(TemplateError {
        message: message.into(),
        offset,
    })
}

/// A Liquid filter applied in an output tag.
#[derive(Debug, Clone, PartialEq)]
enum Filter {
    Join(Option<Arg>),
    Default(Arg),
    Upcase,
    Downcase,
    Size,
    Append(Arg),
    Prepend(Arg),
}

/// A filter argument.
#[derive(Debug, Clone, PartialEq)]
enum Arg {
    Text(String),
    Number(String),
    Var(Vec<String>),
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    /// A variable (`[]` is `.`), with its filters.
    Var(Vec<String>, Vec<Filter>),
    /// A section (`inverted`: `{{^…}}`) and its body.
    Section(Vec<String>, bool, Vec<Piece>),
}

const SUPPORTED_FILTERS: &str = "join, default, upcase, downcase, size, append, prepend";

/// Compiles an upstream template into a uwf JSONata template. `strict`
/// (Liquid, which upstream rendered with `strictVariables`) makes top-level
/// variables `$__uwfVar` calls, which the static checks hold against the
/// role's schema as errors; mustache (which rendered a missing variable as
/// nothing) reads them with `$__uwfGet`, checked as warnings.
pub(crate) fn compile(template: &str, strict: bool) -> Result<String, TemplateError> {
    let pieces = parse(template)?;
    let g = if strict { "$__uwfVar" } else { "$__uwfGet" };
    Ok(compile_pieces(&pieces, g))
}

fn compile_pieces(pieces: &[Piece], g: &str) -> String {
    let blank_text = pieces.iter().all(|p| match p {
        Piece::Text(t) => t.trim().is_empty(),
        _ => true,
    });
    if blank_text {
        // Only values can make the prompt non-empty: check it at run time.
        return format!(
            "{{{{ $__uwfNonEmpty({}) }}}}",
            concat(pieces, &mut Vec::new(), g)
        );
    }
    let mut out = String::new();
    let mut scope = Vec::new();
    for p in pieces {
        match p {
            Piece::Text(t) => out.push_str(&t.replace("{{", "{{ \"{{\" }}")),
            other => {
                out.push_str("{{ ");
                out.push_str(&piece_expr(other, &mut scope, g));
                out.push_str(" }}");
            }
        }
    }
    out
}

/// A JSON string literal, which is a valid JSONata string literal.
fn literal(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "''".into())
}

/// JSONata for the value at `path`, seen from the section contexts `scope`
/// (innermost last).
fn lookup(path: &[String], scope: &[String], g: &str) -> String {
    let Some((first, rest)) = path.split_first() else {
        return scope.last().cloned().unwrap_or_else(|| "$$".into());
    };
    let mut e = if scope.is_empty() {
        format!("{g}({})", literal(first))
    } else {
        let stack: Vec<&str> = scope
            .iter()
            .rev()
            .map(String::as_str)
            .chain(["$$"])
            .collect();
        format!("$__uwfLookup([{}], {})", stack.join(", "), literal(first))
    };
    for name in rest {
        e = format!("$lookup({e}, {})", literal(name));
    }
    e
}

fn arg_expr(a: &Arg, scope: &[String], g: &str) -> String {
    match a {
        Arg::Text(t) => literal(t),
        Arg::Number(n) => n.clone(),
        Arg::Var(p) => lookup(p, scope, g),
    }
}

/// JSONata text of one piece.
fn piece_expr(p: &Piece, scope: &mut Vec<String>, g: &str) -> String {
    match p {
        Piece::Text(t) => literal(t),
        Piece::Var(path, filters) => {
            let mut v = lookup(path, scope, g);
            for f in filters {
                v = match f {
                    Filter::Join(None) => format!("$__uwfJoin({v})"),
                    Filter::Join(Some(a)) => format!("$__uwfJoin({v}, {})", arg_expr(a, scope, g)),
                    Filter::Default(a) => format!("$__uwfDefault({v}, {})", arg_expr(a, scope, g)),
                    Filter::Upcase => format!("$uppercase($__uwfText({v}))"),
                    Filter::Downcase => format!("$lowercase($__uwfText({v}))"),
                    Filter::Size => format!("$__uwfSize({v})"),
                    Filter::Append(a) => {
                        format!("$__uwfText({v}) & $__uwfText({})", arg_expr(a, scope, g))
                    }
                    Filter::Prepend(a) => {
                        format!("$__uwfText({}) & $__uwfText({v})", arg_expr(a, scope, g))
                    }
                };
            }
            format!("$__uwfText({v})")
        }
        Piece::Section(path, inverted, body) => {
            let value = lookup(path, scope, g);
            if *inverted {
                format!("$__uwfInverted({value}, {})", concat(body, scope, g))
            } else {
                let param = format!("$c{}", scope.len() + 1);
                scope.push(param.clone());
                let inner = concat(body, scope, g);
                scope.pop();
                format!("$__uwfSection({value}, function({param}){{ {inner} }})")
            }
        }
    }
}

/// JSONata text of pieces concatenated.
fn concat(pieces: &[Piece], scope: &mut Vec<String>, g: &str) -> String {
    if pieces.is_empty() {
        return "''".into();
    }
    pieces
        .iter()
        .map(|p| piece_expr(p, scope, g))
        .collect::<Vec<_>>()
        .join(" & ")
}

/// A section still open while parsing.
struct Open {
    path: Vec<String>,
    name: String,
    inverted: bool,
    at: usize,
    outer: Vec<Piece>,
}

fn parse(src: &str) -> Result<Vec<Piece>, TemplateError> {
    let mut stack: Vec<Open> = Vec::new();
    let mut current: Vec<Piece> = Vec::new();
    let mut text = String::new();
    let mut rest = 0;
    while rest < src.len() {
        let Some(found) = src[rest..].find(['{']).map(|i| rest + i) else {
            break;
        };
        if src[found..].starts_with("{%") {
            return err(
                "Liquid tags `{% … %}` are not supported in edge prompts; use output tags `{{ … }}`",
                found,
            );
        }
        if !src[found..].starts_with("{{") {
            text.push_str(&src[rest..=found]);
            rest = found + 1;
            continue;
        }
        let open = found;
        let (content, close_end, triple) = if src[open..].starts_with("{{{") {
            let Some(c) = src[open + 3..].find("}}}") else {
                return err("the tag `{{{` has no closing `}}}`", open);
            };
            (&src[open + 3..open + 3 + c], open + 3 + c + 3, true)
        } else {
            let Some(c) = src[open + 2..].find("}}") else {
                return err("the tag `{{` has no closing `}}`", open);
            };
            (&src[open + 2..open + 2 + c], open + 2 + c + 2, false)
        };
        let trimmed = content.trim();
        let sigil = if triple { None } else { trimmed.chars().next() };
        // Section, inverted-section, closing and comment tags alone on their
        // line take the line with them (the mustache "standalone" rule).
        let standalone_kind = matches!(sigil, Some('#' | '^' | '/' | '!'));
        let line_start = src[..open].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[close_end..]
            .find('\n')
            .map_or(src.len(), |i| close_end + i);
        let standalone = standalone_kind
            && line_start >= rest
            && src[line_start..open].trim().is_empty()
            && src[close_end..line_end].trim().is_empty();
        if standalone {
            text.push_str(&src[rest..line_start]);
        } else {
            text.push_str(&src[rest..open]);
        }
        if !text.is_empty() {
            current.push(Piece::Text(std::mem::take(&mut text)));
        }
        rest = if standalone {
            (line_end + 1).min(src.len())
        } else {
            close_end
        };
        let body_at = open + if triple { 3 } else { 2 };
        match sigil {
            Some('!') => {}
            Some('#') | Some('^') => {
                let name = trimmed[1..].trim();
                let path = name_path(name, body_at)?;
                stack.push(Open {
                    path,
                    name: name.to_string(),
                    inverted: sigil == Some('^'),
                    at: open,
                    outer: std::mem::take(&mut current),
                });
            }
            Some('/') => {
                let name = trimmed[1..].trim();
                let Some(o) = stack.pop() else {
                    return err(
                        format!("`{{{{/{name}}}}}` closes a section that was never opened"),
                        open,
                    );
                };
                if o.name != name {
                    return err(
                        format!(
                            "`{{{{/{name}}}}}` closes the section `{}` opened at byte {}",
                            o.name, o.at
                        ),
                        open,
                    );
                }
                let body = std::mem::replace(&mut current, o.outer);
                current.push(Piece::Section(o.path, o.inverted, body));
            }
            Some('>') => return err("mustache partials `{{> …}}` are not supported", open),
            Some('=') => {
                return err(
                    "mustache delimiter changes `{{= … =}}` are not supported",
                    open,
                );
            }
            Some('&') => {
                let path = name_path(trimmed[1..].trim(), body_at)?;
                current.push(Piece::Var(path, Vec::new()));
            }
            _ => current.push(output_tag(trimmed, body_at)?),
        }
    }
    if rest < src.len() {
        text.push_str(&src[rest..]);
    }
    if !text.is_empty() {
        current.push(Piece::Text(text));
    }
    if let Some(o) = stack.pop() {
        return err(
            format!(
                "the section `{}` is never closed: add `{{{{/{}}}}}`",
                o.name, o.name
            ),
            o.at,
        );
    }
    Ok(merge_text(current))
}

/// Joins neighbouring text pieces (a dropped comment leaves two).
fn merge_text(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for p in pieces {
        match (out.last_mut(), p) {
            (Some(Piece::Text(a)), Piece::Text(b)) => a.push_str(&b),
            (_, Piece::Section(path, inv, body)) => {
                out.push(Piece::Section(path, inv, merge_text(body)));
            }
            (_, p) => out.push(p),
        }
    }
    out
}

/// A variable name: `.`, or names separated by dots (`a.b`, `$status`).
fn name_path(name: &str, at: usize) -> Result<Vec<String>, TemplateError> {
    if name.is_empty() {
        return err(
            "the tag is empty: write a variable name, e.g. `{{summary}}`",
            at,
        );
    }
    if name == "." {
        return Ok(Vec::new());
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || "{}|\"'".contains(c))
    {
        return err(format!("`{name}` is not a variable name"), at);
    }
    let parts: Vec<String> = name.split('.').map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        return err(format!("`{name}` has an empty part between dots"), at);
    }
    Ok(parts)
}

/// Splits `s` at `sep` outside quotes.
fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut quote = None;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == sep => {
                out.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            None => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_arg(a: &str, at: usize) -> Result<Arg, TemplateError> {
    let a = a.trim();
    let quoted = |q: char| a.len() >= 2 && a.starts_with(q) && a.ends_with(q);
    if quoted('"') || quoted('\'') {
        return Ok(Arg::Text(a[1..a.len() - 1].to_string()));
    }
    if !a.is_empty() && a.parse::<f64>().is_ok_and(f64::is_finite) {
        return Ok(Arg::Number(a.to_string()));
    }
    name_path(a, at).map(Arg::Var)
}

/// `{{ name }}` or `{{ name | filter: arg, … | … }}`.
fn output_tag(content: &str, at: usize) -> Result<Piece, TemplateError> {
    let mut parts = split_outside_quotes(content, '|').into_iter();
    let path = name_path(parts.next().unwrap_or_default().trim(), at)?;
    let mut filters = Vec::new();
    for part in parts {
        let (name, args) = match part.split_once(':') {
            Some((n, a)) => (n.trim(), Some(a)),
            None => (part.trim(), None),
        };
        let args: Vec<Arg> = match args {
            None => Vec::new(),
            Some(a) => split_outside_quotes(a, ',')
                .into_iter()
                .map(|a| parse_arg(a, at))
                .collect::<Result<_, _>>()?,
        };
        let one = |args: Vec<Arg>| -> Result<Arg, TemplateError> {
            match <[Arg; 1]>::try_from(args) {
                Ok([a]) => Ok(a),
                Err(_) => err(format!("the filter `{name}` takes one argument"), at),
            }
        };
        let none = |args: &[Arg]| -> Result<(), TemplateError> {
            if args.is_empty() {
                Ok(())
            } else {
                err(format!("the filter `{name}` takes no argument"), at)
            }
        };
        filters.push(match name {
            "join" => match args.len() {
                0 => Filter::Join(None),
                _ => Filter::Join(Some(one(args)?)),
            },
            "default" => Filter::Default(one(args)?),
            "upcase" => {
                none(&args)?;
                Filter::Upcase
            }
            "downcase" => {
                none(&args)?;
                Filter::Downcase
            }
            "size" => {
                none(&args)?;
                Filter::Size
            }
            "append" => Filter::Append(one(args)?),
            "prepend" => Filter::Prepend(one(args)?),
            "" => return err("an empty filter after `|`", at),
            other => {
                return err(
                    format!("the Liquid filter `{other}` is not supported (supported: {SUPPORTED_FILTERS})"),
                    at,
                );
            }
        });
    }
    Ok(Piece::Var(path, filters))
}

#[cfg(test)]
#[path = "upstream_template_tests.rs"]
mod tests;
