//! Tokenizer and Pratt parser producing the processed [`crate::ast`] tree.

use std::sync::Arc;

use crate::ast::{BinOp, GroupBy, Kind, LambdaDef, Node, SortTerm, Span, Stage, TransformDef};
use crate::error::Error;
use crate::signature::Signature;

/// Deepest nesting of sub-expressions (parentheses, brackets, operands) the
/// parser accepts; beyond it parsing fails with `U1001`.
pub const MAX_PARSE_DEPTH: usize = 200;

/// Native stack (bytes) the parser may use; deeper input fails with `U1001`
/// instead of overflowing the stack, whatever the build's frame sizes.
pub const MAX_PARSE_STACK: usize = 1024 * 1024;

/// Deepest syntax tree the parser builds, counting chained operators such as
/// `1 + 1 + 1 ...` (each wraps the previous operand); beyond it `U1001`.
pub const MAX_TREE_DEPTH: usize = 2000;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Op(&'static str),
    Str(String),
    Num(f64),
    Name(String),
    Var(String),
    Regex(String, String),
    Bool(bool),
    Null,
    End,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    span: Span,
}

const OPS2: [&str; 9] = ["..", ":=", "!=", ">=", "<=", "**", "~>", "?:", "??"];
const OPS1: [&str; 24] = [
    ".", "[", "]", "{", "}", "(", ")", ",", "@", "#", ";", ":", "?", "+", "-", "*", "/", "%", "|",
    "=", "<", ">", "^", "&",
];
const OP_CHARS: &str = ".[]{}(),@#;:?+-*/%|=<>^&!~";

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl Lexer<'_> {
    fn peek_char(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn next(&mut self, prefix: bool) -> Result<Token, Error> {
        // skip whitespace and comments
        loop {
            let rest = &self.src[self.pos..];
            let trimmed = rest.trim_start_matches([' ', '\t', '\n', '\r', '\u{b}']);
            self.pos += rest.len() - trimmed.len();
            if trimmed.starts_with("/*") {
                match trimmed.strip_prefix("/*").and_then(|t| t.find("*/")) {
                    Some(end) => self.pos += end + 4,
                    None => {
                        return Err(Error::new("S0106", "Comment has no closing tag").at(self.pos));
                    }
                }
                continue;
            }
            break;
        }
        let start = self.pos;
        let Some(c) = self.peek_char() else {
            return Ok(Token {
                tok: Tok::End,
                span: Span { start, end: start },
            });
        };
        let tok = if c == '/' && prefix {
            self.regex()?
        } else if c == '"' || c == '\'' {
            self.string(c)?
        } else if c.is_ascii_digit() {
            self.number()?
        } else if c == '`' {
            let rest = &self.src[self.pos + 1..];
            match rest.find('`') {
                Some(end) => {
                    let name = rest[..end].to_string();
                    self.pos += end + 2;
                    Tok::Name(name)
                }
                None => {
                    return Err(Error::new(
                        "S0105",
                        "Quoted property name must be terminated with a backquote (`)",
                    )
                    .at(start));
                }
            }
        } else if let Some(op) = OPS2.iter().find(|o| self.src[self.pos..].starts_with(**o)) {
            self.pos += 2;
            Tok::Op(op)
        } else if let Some(op) = OPS1.iter().find(|o| self.src[self.pos..].starts_with(**o)) {
            self.pos += 1;
            Tok::Op(op)
        } else if c == '~' || c == '!' {
            return Err(Error::new("S0204", format!("Unknown operator: \"{c}\""))
                .at(start)
                .with_token(c.to_string()));
        } else {
            let rest = &self.src[self.pos..];
            let len = rest
                .char_indices()
                .find(|(_, ch)| ch.is_whitespace() || OP_CHARS.contains(*ch))
                .map(|(i, _)| i)
                .unwrap_or(rest.len());
            let word = &rest[..len];
            self.pos += len;
            if let Some(v) = word.strip_prefix('$') {
                Tok::Var(v.to_string())
            } else {
                match word {
                    "true" => Tok::Bool(true),
                    "false" => Tok::Bool(false),
                    "null" => Tok::Null,
                    _ => Tok::Name(word.to_string()),
                }
            }
        };
        Ok(Token {
            tok,
            span: Span {
                start,
                end: self.pos,
            },
        })
    }

    fn regex(&mut self) -> Result<Tok, Error> {
        let start = self.pos;
        self.pos += 1;
        let body_start = self.pos;
        let mut in_class = false;
        let mut escaped = false;
        loop {
            let Some(c) = self.peek_char() else {
                return Err(
                    Error::new("S0302", "No terminating / in regular expression").at(start),
                );
            };
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '[' {
                in_class = true;
            } else if c == ']' {
                in_class = false;
            } else if c == '/' && !in_class {
                break;
            }
            self.pos += c.len_utf8();
        }
        let pattern = self.src[body_start..self.pos].to_string();
        if pattern.is_empty() {
            return Err(Error::new("S0301", "Empty regular expressions are not allowed").at(start));
        }
        self.pos += 1;
        let rest = &self.src[self.pos..];
        let flen = rest
            .char_indices()
            .find(|(_, c)| !matches!(c, 'i' | 'm' | 'g' | 's' | 'u' | 'y'))
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let flags = rest[..flen].to_string();
        self.pos += flen;
        Ok(Tok::Regex(pattern, flags))
    }

    fn string(&mut self, quote: char) -> Result<Tok, Error> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        let mut pending_high: Option<u16> = None;
        loop {
            let Some(c) = self.peek_char() else {
                return Err(Error::new(
                    "S0101",
                    "String literal must be terminated by a matching quote",
                )
                .at(start));
            };
            self.pos += c.len_utf8();
            if c == quote {
                break;
            }
            if c != '\\' {
                if pending_high.take().is_some() {
                    out.push('\u{FFFD}');
                }
                out.push(c);
                continue;
            }
            let Some(e) = self.peek_char() else {
                return Err(Error::new(
                    "S0101",
                    "String literal must be terminated by a matching quote",
                )
                .at(start));
            };
            self.pos += e.len_utf8();
            if e != 'u' && pending_high.take().is_some() {
                out.push('\u{FFFD}');
            }
            match e {
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                '/' => out.push('/'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'u' => {
                    let hex = self.src.get(self.pos..self.pos + 4).unwrap_or("");
                    let code = if hex.len() == 4 && hex.chars().all(|h| h.is_ascii_hexdigit()) {
                        u16::from_str_radix(hex, 16).ok()
                    } else {
                        None
                    };
                    let Some(code) = code else {
                        return Err(Error::new(
                            "S0104",
                            "The escape sequence \\u must be followed by 4 hex digits",
                        )
                        .at(self.pos));
                    };
                    self.pos += 4;
                    if (0xD800..0xDC00).contains(&code) {
                        if pending_high.replace(code).is_some() {
                            out.push('\u{FFFD}');
                        }
                    } else if (0xDC00..0xE000).contains(&code) {
                        match pending_high.take() {
                            Some(h) => {
                                let cp = 0x10000
                                    + (((h as u32) - 0xD800) << 10)
                                    + ((code as u32) - 0xDC00);
                                out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                            }
                            None => out.push('\u{FFFD}'),
                        }
                    } else {
                        if pending_high.take().is_some() {
                            out.push('\u{FFFD}');
                        }
                        out.push(char::from_u32(code as u32).unwrap_or('\u{FFFD}'));
                    }
                }
                other => {
                    return Err(Error::new(
                        "S0103",
                        format!("Unsupported escape sequence: \\{other}"),
                    )
                    .at(self.pos - 1)
                    .with_token(other.to_string()));
                }
            }
        }
        if pending_high.is_some() {
            out.push('\u{FFFD}');
        }
        Ok(Tok::Str(out))
    }

    fn number(&mut self) -> Result<Tok, Error> {
        let start = self.pos;
        let b = self.src.as_bytes();
        let mut i = self.pos;
        let digits = |i: &mut usize| {
            let s = *i;
            while *i < b.len() && b[*i].is_ascii_digit() {
                *i += 1;
            }
            *i > s
        };
        if b[i] == b'0' {
            i += 1;
        } else {
            digits(&mut i);
        }
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            i += 1;
            digits(&mut i);
        }
        if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
            let mut j = i + 1;
            if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                j += 1;
            }
            if digits(&mut j) {
                i = j;
            }
        }
        let text = &self.src[start..i];
        self.pos = i;
        let n: f64 = text.parse().unwrap_or(f64::INFINITY);
        if !n.is_finite() {
            return Err(Error::new("S0102", format!("Number out of range: {text}"))
                .at(start)
                .with_token(text));
        }
        Ok(Tok::Num(n))
    }
}

fn tok_text(t: &Tok) -> String {
    match t {
        Tok::Op(o) => o.to_string(),
        Tok::Str(s) => s.clone(),
        Tok::Num(n) => uwf_picture::js_number_to_string(*n),
        Tok::Name(n) => n.clone(),
        Tok::Var(v) => format!("${v}"),
        Tok::Regex(p, _) => format!("/{p}/"),
        Tok::Bool(b) => b.to_string(),
        Tok::Null => "null".to_string(),
        Tok::End => "(end)".to_string(),
    }
}

fn lbp(t: &Tok) -> u32 {
    match t {
        Tok::Op(o) => match *o {
            "." => 75,
            "[" | "(" | "@" | "#" => 80,
            "{" => 70,
            "?" | ".." => 20,
            "+" | "-" | "&" => 50,
            "*" | "/" | "%" | "**" => 60,
            "=" | "<" | ">" | "^" | "!=" | "<=" | ">=" | "~>" | "?:" | "??" => 40,
            ":=" => 10,
            _ => 0,
        },
        Tok::Name(n) => match n.as_str() {
            "and" => 30,
            "or" => 25,
            "in" => 40,
            _ => 0,
        },
        _ => 0,
    }
}

struct Parser<'a> {
    lexer: Lexer<'a>,
    tok: Token,
    depth: usize,
    nesting: usize,
    deferred: Option<Error>,
    slots: Vec<Slot>,
    stack_base: usize,
}

/// A parent-operator slot during parsing.
struct Slot {
    label: String,
    level: i32,
}

/// Parses a JSONata expression into its processed syntax tree.
pub fn parse(src: &str) -> Result<Node, Error> {
    let mut lexer = Lexer { src, pos: 0 };
    let first = lexer.next(true)?;
    let mut p = Parser {
        lexer,
        tok: first,
        depth: 0,
        nesting: 0,
        stack_base: crate::eval::stack_position(),
        deferred: None,
        slots: Vec::new(),
    };
    let node = p.expression(0)?;
    if p.tok.tok != Tok::End {
        return Err(Error::new(
            "S0201",
            format!("Syntax error: \"{}\"", tok_text(&p.tok.tok)),
        )
        .at(p.tok.span.start)
        .with_token(tok_text(&p.tok.tok)));
    }
    if let Some(e) = p.deferred {
        return Err(e);
    }
    let mut node = node;
    let unresolved = node
        .seeking
        .iter()
        .any(|s| p.slots.get(*s).map(|x| x.level > 0).unwrap_or(false));
    if unresolved || matches!(node.kind, Kind::Parent { .. }) {
        return Err(Error::new(
            "S0217",
            "The parent operator % cannot be used here: there is no parent step",
        )
        .at(node.span.start));
    }
    let slots = p.slots;
    node.walk_mut(&mut |n| {
        if let Kind::Parent { slot, label } = &mut n.kind
            && let Some(s) = slots.get(*slot)
        {
            *label = s.label.clone();
        }
        if let Some(a) = n.ancestor_slot
            && let Some(s) = slots.get(a)
        {
            n.ancestor = Some(s.label.clone());
        }
    });
    Ok(node)
}

fn is_operand_end(t: &Tok) -> bool {
    match t {
        Tok::Op(o) => matches!(*o, ")" | "]" | "}" | "*" | "**" | "%"),
        Tok::Name(n) => !matches!(n.as_str(), "and" | "or" | "in"),
        Tok::End => false,
        _ => true,
    }
}

impl Parser<'_> {
    fn advance(&mut self) -> Result<Token, Error> {
        let prefix = !is_operand_end(&self.tok.tok);
        let next = self.lexer.next(prefix)?;
        Ok(std::mem::replace(&mut self.tok, next))
    }

    /// Advances treating the next token as being in prefix position.
    fn advance_prefix(&mut self) -> Result<Token, Error> {
        let next = self.lexer.next(true)?;
        Ok(std::mem::replace(&mut self.tok, next))
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(&self.tok.tok, Tok::Op(o) if *o == op)
    }

    fn expect(&mut self, op: &str) -> Result<Token, Error> {
        if self.is_op(op) {
            return self.advance();
        }
        if self.tok.tok == Tok::End {
            return Err(Error::new(
                "S0203",
                format!("Expected \"{op}\" before end of expression"),
            )
            .at(self.tok.span.start)
            .with_token(op));
        }
        Err(Error::new(
            "S0202",
            format!("Expected \"{op}\", got \"{}\"", tok_text(&self.tok.tok)),
        )
        .at(self.tok.span.start)
        .with_token(tok_text(&self.tok.tok))
        .with_value(op))
    }

    fn expression(&mut self, rbp: u32) -> Result<Node, Error> {
        self.depth += 1;
        self.nesting += 1;
        if self.depth > MAX_PARSE_DEPTH
            || self.nesting > MAX_TREE_DEPTH
            || crate::eval::stack_position().abs_diff(self.stack_base) > MAX_PARSE_STACK
        {
            return Err(
                Error::new("U1001", "Expression is nested too deeply to parse")
                    .at(self.tok.span.start),
            );
        }
        let entry_nesting = self.nesting;
        let t = self.advance()?;
        let mut left = self.nud(t)?;
        while rbp < lbp(&self.tok.tok) {
            // every operator applied here wraps `left` one level deeper
            self.nesting += 1;
            if self.nesting > MAX_TREE_DEPTH {
                return Err(Error::new(
                    "U1001",
                    "Expression is nested too deeply to parse (too many chained operators)",
                )
                .at(self.tok.span.start));
            }
            let t = self.advance_prefix()?;
            left = self.led(t, left)?;
        }
        self.nesting = entry_nesting - 1;
        self.depth -= 1;
        Ok(left)
    }

    fn nud(&mut self, t: Token) -> Result<Node, Error> {
        let n = self.nud_inner(t)?;
        Ok(with_ancestry(n))
    }

    fn nud_inner(&mut self, t: Token) -> Result<Node, Error> {
        let span = t.span;
        Ok(match t.tok {
            Tok::Num(n) => Node::new(Kind::Number(n), span),
            Tok::Str(s) => Node::new(Kind::String(s), span),
            Tok::Bool(b) => Node::new(Kind::Bool(b), span),
            Tok::Null => Node::new(Kind::Null, span),
            Tok::Regex(pattern, flags) => Node::new(Kind::Regex { pattern, flags }, span),
            Tok::Var(v) => Node::new(Kind::Variable(v), span),
            Tok::Name(n) => path_of(Node::new(Kind::Name(n), span)),
            Tok::End => {
                // Like the reference, a premature end is reported after the
                // parse, in tree order with the other deferred errors (so
                // `0.a +` is S0213), unless the parser fails first.
                if self.deferred.is_none() {
                    self.deferred =
                        Some(Error::new("S0207", "Unexpected end of expression").at(span.start));
                }
                Node::new(Kind::Null, span)
            }
            Tok::Op(op) => match op {
                "-" => {
                    let e = self.expression(70)?;
                    // `-<number>` is folded into the literal, keeping what
                    // is applied to it: `-1[$ < 0]` is `(-1)[$ < 0]`, as in
                    // the reference implementation.
                    if let Kind::Number(n) = e.kind {
                        let mut e = e;
                        e.kind = Kind::Number(-n);
                        e.span = span;
                        e
                    } else {
                        Node::new(Kind::Negate(Box::new(e)), span)
                    }
                }
                "*" => Node::new(Kind::Wildcard, span),
                "**" => Node::new(Kind::Descendant, span),
                "%" => {
                    let slot = self.slots.len();
                    self.slots.push(Slot {
                        label: format!("!{slot}"),
                        level: 1,
                    });
                    Node::new(
                        Kind::Parent {
                            slot,
                            label: String::new(),
                        },
                        span,
                    )
                }
                "?" => Node::new(Kind::Placeholder, span),
                "(" => {
                    let mut items = Vec::new();
                    while !self.is_op(")") {
                        items.push(self.expression(0)?);
                        if !self.is_op(";") {
                            break;
                        }
                        self.advance()?;
                    }
                    self.expect(")")?;
                    let mut n = Node::new(Kind::Block(Vec::new()), span);
                    n.cons_array = items.last().map(is_cons).unwrap_or(false);
                    n.kind = Kind::Block(items);
                    n
                }
                "[" => {
                    let mut items = Vec::new();
                    if !self.is_op("]") {
                        loop {
                            items.push(self.expression(0)?);
                            if !self.is_op(",") {
                                break;
                            }
                            self.advance()?;
                        }
                    }
                    self.expect("]")?;
                    Node::new(Kind::Array(items), span)
                }
                "{" => {
                    let pairs = self.object_pairs()?;
                    Node::new(Kind::Object(pairs), span)
                }
                "|" => {
                    let pattern = self.expression(0)?;
                    self.expect("|")?;
                    let update = self.expression(0)?;
                    let delete = if self.is_op(",") {
                        self.advance()?;
                        Some(self.expression(0)?)
                    } else {
                        None
                    };
                    self.expect("|")?;
                    Node::new(
                        Kind::Transform(Arc::new(TransformDef {
                            pattern,
                            update,
                            delete,
                        })),
                        span,
                    )
                }
                other => {
                    return Err(Error::new(
                        "S0211",
                        format!("The symbol \"{other}\" cannot be used as a unary operator"),
                    )
                    .at(span.start)
                    .with_token(other));
                }
            },
        })
    }

    fn object_pairs(&mut self) -> Result<Vec<(Node, Node)>, Error> {
        let mut pairs = Vec::new();
        if !self.is_op("}") {
            loop {
                let k = self.expression(0)?;
                self.expect(":")?;
                let v = self.expression(0)?;
                pairs.push((k, v));
                if !self.is_op(",") {
                    break;
                }
                self.advance()?;
            }
        }
        self.expect("}")?;
        Ok(pairs)
    }

    fn led(&mut self, t: Token, left: Node) -> Result<Node, Error> {
        let n = self.led_inner(t, left)?;
        Ok(match n.kind {
            Kind::Binary { .. }
            | Kind::Condition { .. }
            | Kind::Bind { .. }
            | Kind::Apply { .. }
            | Kind::Call { .. } => with_ancestry(n),
            _ => n,
        })
    }

    fn led_inner(&mut self, t: Token, left: Node) -> Result<Node, Error> {
        let span = t.span;
        let op = match &t.tok {
            Tok::Op(o) => *o,
            Tok::Name(n) if n == "and" => "and",
            Tok::Name(n) if n == "or" => "or",
            Tok::Name(n) if n == "in" => "in",
            _ => {
                return Err(
                    Error::new("S0201", format!("Syntax error: \"{}\"", tok_text(&t.tok)))
                        .at(span.start),
                );
            }
        };
        let binop = |op: BinOp, p: &mut Self, left: Node, bp: u32| -> Result<Node, Error> {
            let rhs = p.expression(bp)?;
            Ok(Node::new(
                Kind::Binary {
                    op,
                    lhs: Box::new(left),
                    rhs: Box::new(rhs),
                },
                span,
            ))
        };
        match op {
            "." => {
                let rhs = self.expression(75)?;
                match make_path(left, rhs, &mut self.slots) {
                    Err(e) => {
                        // reported only if the rest of the expression
                        // parses, and after an earlier one
                        if self.deferred.is_none() {
                            self.deferred = Some(e);
                        }
                        Ok(Node::new(Kind::Null, span))
                    }
                    r => r,
                }
            }
            "[" => {
                if self.is_op("]") {
                    self.advance()?;
                    let mut left = left;
                    if let Kind::Path {
                        steps,
                        keep_singleton,
                    } = &mut left.kind
                    {
                        if let Some(last) = steps.last_mut() {
                            last.keep_array = true;
                        }
                        *keep_singleton = true;
                    } else {
                        left.keep_array = true;
                    }
                    return Ok(left);
                }
                if grouped_step(&left) && self.deferred.is_none() {
                    // S0209 comes before errors inside the predicate
                    self.deferred = Some(predicate_after_group(span));
                }
                let pred = self.expression(0)?;
                self.expect("]")?;
                match make_predicate(left, pred, span, &mut self.slots) {
                    Err(e) => {
                        // reported after the parse, in tree order (the
                        // left side's errors first), as path errors are
                        if self.deferred.is_none() {
                            self.deferred = Some(e);
                        }
                        Ok(Node::new(Kind::Null, span))
                    }
                    r => r,
                }
            }
            "{" => {
                let mut left = left;
                let second = left.group.is_some();
                if second && self.deferred.is_none() {
                    // Like path errors, reported only if the rest of the
                    // expression parses, after an earlier one and before
                    // those inside this group's pairs.
                    self.deferred = Some(
                        Error::new("S0210", "Each step can only have one grouping expression")
                            .at(span.start),
                    );
                }
                let pairs = self.object_pairs()?;
                if second {
                    return Ok(left);
                }
                left.group = Some(Box::new(GroupBy { pairs, span }));
                Ok(left)
            }
            "(" => self.call(left, span),
            "?" => {
                let then = self.expression(0)?;
                let otherwise = if self.is_op(":") {
                    self.advance()?;
                    Some(Box::new(self.expression(0)?))
                } else {
                    None
                };
                Ok(Node::new(
                    Kind::Condition {
                        condition: Box::new(left),
                        then: Box::new(then),
                        otherwise,
                    },
                    span,
                ))
            }
            ":=" => {
                let Kind::Variable(name) = &left.kind else {
                    return Err(Error::new(
                        "S0212",
                        "The left side of := must be a variable name (start with $)",
                    )
                    .at(left.span.start));
                };
                if !left.predicates.is_empty() || left.group.is_some() || left.keep_array {
                    return Err(Error::new(
                        "S0212",
                        "The left side of := must be a variable name (start with $)",
                    )
                    .at(left.span.start));
                }
                let name = name.clone();
                let value = self.expression(9)?;
                Ok(Node::new(
                    Kind::Bind {
                        name,
                        value: Box::new(value),
                    },
                    span,
                ))
            }
            "~>" => {
                let rhs = self.expression(40)?;
                Ok(Node::new(
                    Kind::Apply {
                        lhs: Box::new(left),
                        rhs: Box::new(rhs),
                    },
                    span,
                ))
            }
            "^" => {
                self.expect("(")?;
                let mut terms = Vec::new();
                loop {
                    let mut descending = false;
                    if self.is_op("<") {
                        self.advance_prefix()?;
                    } else if self.is_op(">") {
                        descending = true;
                        self.advance_prefix()?;
                    }
                    let expr = self.expression(0)?;
                    terms.push(SortTerm { descending, expr });
                    if !self.is_op(",") {
                        break;
                    }
                    self.advance()?;
                }
                self.expect(")")?;
                let mut path = as_path(left);
                let mut sort = Node::new(Kind::Sort(Vec::new()), span);
                for t in &terms {
                    sort.seeking.extend(seeking_of(&t.expr));
                }
                sort.kind = Kind::Sort(terms);
                if let Kind::Path { steps, .. } = &mut path.kind {
                    steps.push(sort);
                }
                resolve_ancestry(&mut path, &mut self.slots)?;
                Ok(path)
            }
            "@" | "#" => {
                let rhs = self.expression(80)?;
                let Kind::Variable(var) = rhs.kind else {
                    return Err(Error::new(
                        "S0214",
                        format!("The right side of {op} must be a variable name (start with $)"),
                    )
                    .at(rhs.span.start)
                    .with_token(op));
                };
                if op == "@" {
                    make_focus(left, var, span)
                } else {
                    Ok(make_index(left, var))
                }
            }
            "+" => binop(BinOp::Add, self, left, 50),
            "-" => binop(BinOp::Sub, self, left, 50),
            "*" => binop(BinOp::Mul, self, left, 60),
            "/" => binop(BinOp::Div, self, left, 60),
            "%" => binop(BinOp::Mod, self, left, 60),
            "=" => binop(BinOp::Eq, self, left, 40),
            "!=" => binop(BinOp::Ne, self, left, 40),
            "<" => binop(BinOp::Lt, self, left, 40),
            "<=" => binop(BinOp::Le, self, left, 40),
            ">" => binop(BinOp::Gt, self, left, 40),
            ">=" => binop(BinOp::Ge, self, left, 40),
            "&" => binop(BinOp::Concat, self, left, 50),
            "and" => binop(BinOp::And, self, left, 30),
            "or" => binop(BinOp::Or, self, left, 25),
            "in" => binop(BinOp::In, self, left, 40),
            ".." => binop(BinOp::Range, self, left, 20),
            // the right side extends as far as it can, as in the reference:
            // `1 ?? 2 or true` is `1 ?? (2 or true)`
            "?:" => binop(BinOp::Elvis, self, left, 0),
            "??" => binop(BinOp::Coalesce, self, left, 0),
            other => Err(Error::new("S0201", format!("Syntax error: \"{other}\""))
                .at(span.start)
                .with_token(other)),
        }
    }

    fn call(&mut self, left: Node, span: Span) -> Result<Node, Error> {
        let is_lambda = match &left.kind {
            Kind::Path { steps, .. } if steps.len() == 1 => {
                matches!(&steps[0].kind, Kind::Name(n) if n == "function" || n == "λ")
            }
            _ => false,
        };
        let mut args = Vec::new();
        let mut partial = false;
        if !self.is_op(")") {
            loop {
                if self.is_op("?") && !is_lambda {
                    let t = self.advance()?;
                    args.push(Node::new(Kind::Placeholder, t.span));
                    partial = true;
                } else {
                    args.push(self.expression(0)?);
                }
                if !self.is_op(",") {
                    break;
                }
                self.advance()?;
            }
        }
        self.expect(")")?;
        if !is_lambda {
            return Ok(Node::new(
                Kind::Call {
                    procedure: Box::new(left),
                    args,
                    partial,
                    tail: false,
                },
                span,
            ));
        }
        let mut params = Vec::new();
        for a in &args {
            match &a.kind {
                Kind::Variable(v) => params.push(v.clone()),
                _ => {
                    return Err(Error::new(
                        "S0208",
                        "Parameter of function definition must be a variable name (start with $)",
                    )
                    .at(a.span.start));
                }
            }
        }
        let mut signature = None;
        if self.is_op("<") {
            let start = self.tok.span.start;
            let src = self.lexer.src;
            let mut depth = 0;
            let mut end = None;
            for (i, c) in src[start..].char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(start + i + 1);
                            break;
                        }
                    }
                    '{' => break,
                    _ => {}
                }
            }
            let Some(end) = end else {
                return Err(
                    Error::new("S0202", "Expected \">\" to close the function signature").at(start),
                );
            };
            signature = Some(Signature::parse(&src[start..end], start)?);
            self.lexer.pos = end;
            self.tok = self.lexer.next(false)?;
        }
        self.expect("{")?;
        let mut body = self.expression(0)?;
        self.expect("}")?;
        mark_tail(&mut body);
        Ok(Node::new(
            Kind::Lambda(Arc::new(LambdaDef {
                params,
                signature,
                body,
            })),
            span,
        ))
    }
}

fn mark_tail(node: &mut Node) {
    let plain = node.predicates.is_empty() && node.stages.is_empty() && node.group.is_none();
    match &mut node.kind {
        Kind::Call { partial, tail, .. } if plain && !*partial => *tail = true,
        Kind::Condition {
            then, otherwise, ..
        } if plain => {
            mark_tail(then);
            if let Some(o) = otherwise {
                mark_tail(o);
            }
        }
        Kind::Block(items) if plain => {
            if let Some(last) = items.last_mut() {
                mark_tail(last);
            }
        }
        _ => {}
    }
}

fn is_cons(n: &Node) -> bool {
    n.cons_array
        || matches!(&n.kind, Kind::Path { steps, .. } if steps.first().map(|s| s.cons_array).unwrap_or(false))
}

fn path_of(step: Node) -> Node {
    let span = step.span;
    let keep = step.keep_array;
    Node::new(
        Kind::Path {
            steps: vec![step],
            keep_singleton: keep,
        },
        span,
    )
}

fn as_path(n: Node) -> Node {
    if matches!(n.kind, Kind::Path { .. }) {
        n
    } else {
        path_of(n)
    }
}

fn seeking_of(value: &Node) -> Vec<usize> {
    let mut v = value.seeking.clone();
    if let Kind::Parent { slot, .. } = value.kind {
        v.push(slot);
    }
    v
}

/// Collects the unresolved parent slots of a new node's operands.
fn with_ancestry(mut n: Node) -> Node {
    let mut acc = Vec::new();
    match &n.kind {
        Kind::Negate(e) => acc.extend(seeking_of(e)),
        Kind::Array(items) | Kind::Block(items) => {
            items.iter().for_each(|i| acc.extend(seeking_of(i)))
        }
        Kind::Object(pairs) => pairs.iter().for_each(|(k, v)| {
            acc.extend(seeking_of(k));
            acc.extend(seeking_of(v));
        }),
        Kind::Binary { lhs, rhs, .. } | Kind::Apply { lhs, rhs } => {
            acc.extend(seeking_of(lhs));
            acc.extend(seeking_of(rhs));
        }
        Kind::Condition {
            condition,
            then,
            otherwise,
        } => {
            acc.extend(seeking_of(condition));
            acc.extend(seeking_of(then));
            if let Some(o) = otherwise {
                acc.extend(seeking_of(o));
            }
        }
        Kind::Bind { value, .. } => acc.extend(seeking_of(value)),
        Kind::Call { args, .. } => args.iter().for_each(|a| acc.extend(seeking_of(a))),
        _ => {}
    }
    n.seeking.extend(acc);
    n
}

fn seek_parent(node: &mut Node, slot: usize, slots: &mut [Slot]) -> Result<(), Error> {
    let err = |n: &Node| {
        Error::new(
            "S0217",
            "The parent operator % cannot be derived from this expression",
        )
        .at(n.span.start)
    };
    if slot >= slots.len() {
        return Ok(());
    }
    match &mut node.kind {
        Kind::Name(_) | Kind::Wildcard => {
            slots[slot].level -= 1;
            if slots[slot].level == 0 {
                if let Some(existing) = node.ancestor_slot {
                    slots[slot].label = slots[existing].label.clone();
                }
                node.ancestor_slot = Some(slot);
                node.tuple = true;
            }
        }
        Kind::Parent { .. } => slots[slot].level += 1,
        Kind::Block(items) => {
            if let Some(last) = items.last_mut() {
                seek_parent(last, slot, slots)?;
                node.tuple = true;
            }
        }
        Kind::Path { steps, .. } => {
            let mut i = steps.len();
            while i > 0 {
                i -= 1;
                seek_parent(&mut steps[i], slot, slots)?;
                if slots[slot].level <= 0 {
                    break;
                }
            }
            node.tuple = true;
        }
        _ => return Err(err(node)),
    }
    Ok(())
}

fn resolve_ancestry(path: &mut Node, slots: &mut [Slot]) -> Result<(), Error> {
    let Kind::Path { steps, .. } = &mut path.kind else {
        return Ok(());
    };
    let Some(last) = steps.last() else {
        return Ok(());
    };
    let pending = seeking_of(last);
    let mut unresolved = Vec::new();
    for slot in pending {
        let mut index = steps.len() as isize - 2;
        while slots.get(slot).map(|s| s.level > 0).unwrap_or(false) {
            if index < 0 {
                unresolved.push(slot);
                break;
            }
            let mut si = index as usize;
            index -= 1;
            while index >= 0 && steps[si].focus.is_some() && steps[index as usize].focus.is_some() {
                si = index as usize;
                index -= 1;
            }
            seek_parent(&mut steps[si], slot, slots)?;
        }
    }
    path.seeking.extend(unresolved);
    Ok(())
}

fn make_path(lhs: Node, rhs: Node, slots: &mut [Slot]) -> Result<Node, Error> {
    let lhs_parent = match lhs.kind {
        Kind::Parent { slot, .. } => Some(slot),
        _ => None,
    };
    let mut path = as_path(lhs);
    if let Some(s) = lhs_parent {
        path.seeking = vec![s];
    }
    let Kind::Path {
        steps,
        keep_singleton,
    } = &mut path.kind
    else {
        return Ok(path);
    };
    match rhs.kind {
        Kind::Path {
            steps: more,
            keep_singleton: k,
        } if rhs.group.is_none() && rhs.predicates.is_empty() => {
            steps.extend(more);
            *keep_singleton |= k;
        }
        _ => {
            let mut rhs = rhs;
            let preds = std::mem::take(&mut rhs.predicates);
            rhs.stages
                .extend(preds.into_iter().map(|p| Stage::Filter(Box::new(p))));
            steps.push(rhs);
        }
    }
    for step in steps.iter_mut() {
        match &step.kind {
            Kind::Number(_) | Kind::Bool(_) | Kind::Null => {
                return Err(Error::new(
                    "S0213",
                    "A literal value cannot be used as a step within a path expression",
                )
                .at(step.span.start));
            }
            Kind::String(s) => step.kind = Kind::Name(s.clone()),
            _ => {}
        }
    }
    if steps.iter().any(|s| s.keep_array) {
        *keep_singleton = true;
    }
    if let Some(first) = steps.first_mut()
        && matches!(first.kind, Kind::Array(_))
    {
        first.cons_array = true;
    }
    if let Some(last) = steps.last_mut()
        && matches!(last.kind, Kind::Array(_))
    {
        last.cons_array = true;
    }
    resolve_ancestry(&mut path, slots)?;
    Ok(path)
}

fn make_predicate(
    mut lhs: Node,
    pred: Node,
    span: Span,
    slots: &mut [Slot],
) -> Result<Node, Error> {
    {
        let step = match &mut lhs.kind {
            Kind::Path { steps, .. } if !steps.is_empty() => {
                let n = steps.len();
                &mut steps[n - 1]
            }
            _ => &mut lhs,
        };
        for slot in pred.seeking.clone() {
            let Some(level) = slots.get(slot).map(|s| s.level) else {
                continue;
            };
            if level == 1 {
                seek_parent(step, slot, slots)?;
            } else {
                slots[slot].level -= 1;
            }
        }
        step.seeking.extend(seeking_of(&pred));
    }
    let group_err = || predicate_after_group(span);
    if let Kind::Path { steps, .. } = &mut lhs.kind
        && let Some(last) = steps.last_mut()
    {
        if last.group.is_some() {
            return Err(group_err());
        }
        last.stages.push(Stage::Filter(Box::new(pred)));
        return Ok(lhs);
    }
    if lhs.group.is_some() {
        return Err(group_err());
    }
    lhs.predicates.push(pred);
    Ok(lhs)
}

/// Whether a predicate applied to `lhs` would follow a grouping expression.
fn grouped_step(lhs: &Node) -> bool {
    match &lhs.kind {
        Kind::Path { steps, .. } => steps.last().is_some_and(|l| l.group.is_some()),
        _ => lhs.group.is_some(),
    }
}

fn predicate_after_group(span: Span) -> Error {
    Error::new(
        "S0209",
        "A predicate cannot follow a grouping expression in a step",
    )
    .at(span.start)
}

fn make_focus(mut lhs: Node, var: String, span: Span) -> Result<Node, Error> {
    {
        let step = match &mut lhs.kind {
            Kind::Path { steps, .. } => match steps.last_mut() {
                Some(s) => s,
                None => return Ok(lhs),
            },
            _ => &mut lhs,
        };
        if !step.stages.is_empty() || !step.predicates.is_empty() {
            return Err(Error::new(
                "S0215",
                "A context variable binding must precede any predicates on a step",
            )
            .at(span.start));
        }
        if matches!(step.kind, Kind::Sort(_)) {
            return Err(Error::new(
                "S0216",
                "A context variable binding must precede the 'order-by' clause on a step",
            )
            .at(span.start));
        }
        step.focus = Some(var);
        step.tuple = true;
    }
    Ok(lhs)
}

fn make_index(lhs: Node, var: String) -> Node {
    let mut path = if matches!(lhs.kind, Kind::Path { .. }) {
        lhs
    } else {
        let mut l = lhs;
        let preds = std::mem::take(&mut l.predicates);
        l.stages
            .extend(preds.into_iter().map(|p| Stage::Filter(Box::new(p))));
        path_of(l)
    };
    if let Kind::Path { steps, .. } = &mut path.kind
        && let Some(step) = steps.last_mut()
    {
        if step.stages.is_empty() {
            step.index = Some(var);
        } else {
            step.stages.push(Stage::Index(var));
        }
        step.tuple = true;
    }
    path
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;

    fn code(src: &str) -> String {
        parse(src).err().map(|e| e.code).unwrap_or_default()
    }

    #[test]
    fn parses_basic_paths() {
        let n = parse("a.b[0].c").expect("parses");
        match n.kind {
            Kind::Path { steps, .. } => assert_eq!(steps.len(), 3),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn syntax_error_codes_and_positions() {
        assert_eq!(code("\"abc"), "S0101");
        assert_eq!(code("1e999"), "S0102");
        assert_eq!(code("\"\\q\""), "S0103");
        assert_eq!(code("\"\\u12\""), "S0104");
        assert_eq!(code("`abc"), "S0105");
        assert_eq!(code("/* abc"), "S0106");
        assert_eq!(code("(1"), "S0203");
        assert_eq!(code("(1 2"), "S0202");
        assert_eq!(code("1 +"), "S0207");
        assert_eq!(code("function(a){1}"), "S0208");
        assert_eq!(code("a := 1"), "S0212");
        assert_eq!(code("a.1"), "S0213");
        assert_eq!(code("a@b"), "S0214");
        assert_eq!(code("=1"), "S0211");
        assert_eq!(code("//"), "S0301");
        assert_eq!(code("/abc"), "S0302");
        let e = parse("1 + (2").expect_err("fails");
        assert_eq!(e.position, Some(6));
        let e = parse("a ~ b").expect_err("fails");
        assert_eq!((e.code.as_str(), e.position), ("S0204", Some(2)));
    }

    #[test]
    fn string_escapes_and_surrogates() {
        let n = parse(r#""a\u00e9\ud83d\ude00\n""#).expect("parses");
        match n.kind {
            Kind::String(s) => assert_eq!(s, "aé😀\n"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let src = "(".repeat(100_000);
        assert_eq!(code(&src), "U1001");
        let src = "-".repeat(100_000) + "1";
        assert_eq!(code(&src), "U1001");
        let src = "1".to_string() + &"+1".repeat(100_000);
        assert_eq!(code(&src), "U1001");
        let src = "$f".to_string() + &"(1)".repeat(100_000);
        assert_eq!(code(&src), "U1001");
        let src = "1".to_string() + &"+1".repeat(500);
        assert!(parse(&src).is_ok());
    }

    #[test]
    fn regex_versus_division() {
        assert!(matches!(
            parse("4/2").expect("parses").kind,
            Kind::Binary { op: BinOp::Div, .. }
        ));
        assert!(matches!(
            parse("/a/i").expect("parses").kind,
            Kind::Regex { .. }
        ));
    }
}
