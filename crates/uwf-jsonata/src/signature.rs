//! Function signatures (`<s-n?:s>`) and argument validation.

use crate::error::Error;
use crate::value::Value;

/// A parsed function signature.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    /// The parameters in order.
    pub params: Vec<Param>,
    /// The signature text as written.
    pub text: String,
}

/// One parameter of a signature.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Accepted type symbols (`b n s l a o f j x u`), already expanded for `u`, `j`, `x`.
    pub types: String,
    /// Element type of an array parameter (`a<n>`), as its type symbols.
    pub array_of: Option<String>,
    /// `?`: may be omitted.
    pub optional: bool,
    /// `+`: one or more.
    pub variadic: bool,
    /// `-`: the context value is used when the argument is omitted.
    pub context: bool,
}

fn expand(c: char) -> Option<&'static str> {
    Some(match c {
        'b' => "b",
        'n' => "n",
        's' => "s",
        'l' => "l",
        'a' => "a",
        'o' => "o",
        'f' => "f",
        'u' => "bnsl",
        'j' => "bnslao",
        'x' => "bnslaof",
        _ => return None,
    })
}

impl Signature {
    /// Parses a signature; `offset` is the byte position of the `<` for error reporting.
    pub fn parse(text: &str, offset: usize) -> Result<Signature, Error> {
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let err = |code: &str, msg: &str, i: usize| {
            let pos = chars.get(i).map(|c| c.0).unwrap_or(text.len());
            Error::new(code, msg).at(offset + pos)
        };
        let mut params: Vec<Param> = Vec::new();
        let mut i = 1; // skip '<'
        while i < chars.len() {
            let c = chars[i].1;
            match c {
                ':' => {
                    // return type: ignored beyond syntax
                    break;
                }
                '>' => break,
                '(' => {
                    let mut types = String::new();
                    i += 1;
                    while i < chars.len() && chars[i].1 != ')' {
                        let t = chars[i].1;
                        if t == '<' {
                            return Err(err(
                                "S0402",
                                "Choice groups containing parameterized types are not supported",
                                i,
                            ));
                        }
                        match expand(t) {
                            Some(e) => types.push_str(e),
                            None => return Err(err("S0401", "Invalid type in signature", i)),
                        }
                        i += 1;
                    }
                    params.push(Param {
                        types,
                        array_of: None,
                        optional: false,
                        variadic: false,
                        context: false,
                    });
                }
                '?' | '+' | '-' => {
                    let Some(p) = params.last_mut() else {
                        return Err(err("S0401", "Modifier without a type in signature", i));
                    };
                    match c {
                        '?' => p.optional = true,
                        '+' => p.variadic = true,
                        _ => p.context = true,
                    }
                }
                '<' => {
                    // type parameter of the previous a or f
                    let Some(p) = params.last_mut() else {
                        return Err(err("S0401", "Type parameter without a type", i));
                    };
                    if p.types != "a" && p.types != "f" {
                        return Err(err(
                            "S0401",
                            "Type parameters can only be applied to functions and arrays",
                            i,
                        ));
                    }
                    let start = i;
                    let mut depth = 0;
                    while i < chars.len() {
                        match chars[i].1 {
                            '<' => depth += 1,
                            '>' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                    if p.types == "a" {
                        let inner: String = chars[start + 1..i.min(chars.len())]
                            .iter()
                            .map(|c| c.1)
                            .collect();
                        let mut t = String::new();
                        for ch in inner.chars() {
                            if let Some(e) = expand(ch) {
                                t.push_str(e);
                            }
                        }
                        p.array_of = Some(t);
                    }
                }
                c => match expand(c) {
                    Some(e) => params.push(Param {
                        types: e.to_string(),
                        array_of: None,
                        optional: false,
                        variadic: false,
                        context: false,
                    }),
                    None => return Err(err("S0401", "Invalid type in signature", i)),
                },
            }
            i += 1;
        }
        Ok(Signature {
            params,
            text: text.to_string(),
        })
    }

    /// Validates `args` against the signature, inserting the context value for `-`
    /// parameters and wrapping single values for array parameters. Returns the
    /// arguments laid out one per parameter (variadic parameters take the rest).
    pub fn validate(
        &self,
        args: &[Value],
        context: &Value,
        position: Option<usize>,
    ) -> Result<Vec<Value>, Error> {
        let mut counts = vec![0usize; self.params.len()];
        if !self.assign(0, 0, args, &mut counts) {
            // find the first offending argument for the message
            let idx = self.first_bad(args);
            let mut e = Error::new(
                "T0410",
                format!(
                    "Argument {} of function does not match function signature {}",
                    idx + 1,
                    self.text
                ),
            );
            e.position = position;
            return Err(e);
        }
        let mut out = Vec::with_capacity(self.params.len());
        let mut ai = 0;
        for (p, &n) in self.params.iter().zip(counts.iter()) {
            if n == 0 {
                if p.context {
                    if !context.is_undefined() && !type_ok(&p.types, context) {
                        let mut e = Error::new(
                            "T0411",
                            format!(
                                "Context value is not a compatible type with argument {} of function signature {}",
                                out.len() + 1,
                                self.text
                            ),
                        );
                        e.position = position;
                        return Err(e);
                    }
                    out.push(self.wrap(p, context.clone(), out.len(), position)?);
                } else {
                    out.push(Value::Undefined);
                }
                continue;
            }
            for k in 0..n {
                let idx = ai + k;
                out.push(self.wrap(p, args[idx].clone(), idx, position)?);
            }
            ai += n;
        }
        Ok(out)
    }

    fn wrap(
        &self,
        p: &Param,
        v: Value,
        idx: usize,
        position: Option<usize>,
    ) -> Result<Value, Error> {
        if p.types == "a" {
            let arr = match v {
                Value::Undefined => return Ok(v),
                Value::Array(..) => v,
                other => Value::array(vec![other]),
            };
            if let (Some(sub), Value::Array(items, _, _)) = (&p.array_of, &arr)
                && !sub.is_empty()
            {
                for it in items.iter() {
                    // a missing member (a sequence can hold one) matches no type
                    if (it.is_undefined() && !sub.contains('x')) || !type_ok(sub, it) {
                        let mut e = Error::new(
                            "T0412",
                            format!(
                                "Argument {} of function must be an array of {}",
                                idx + 1,
                                type_name(sub)
                            ),
                        );
                        e.position = position;
                        return Err(e);
                    }
                }
            }
            return Ok(arr);
        }
        Ok(v)
    }

    fn assign(&self, pi: usize, ai: usize, args: &[Value], counts: &mut [usize]) -> bool {
        if pi == self.params.len() {
            return ai == args.len();
        }
        let p = &self.params[pi];
        let remaining = args.len() - ai;
        let max = if p.variadic {
            remaining
        } else {
            remaining.min(1)
        };
        let min = if p.optional || p.context { 0 } else { 1 };
        let mut n = max;
        loop {
            if n < min {
                return false;
            }
            if args[ai..ai + n].iter().all(|a| arg_ok(p, a)) {
                counts[pi] = n;
                if self.assign(pi + 1, ai + n, args, counts) {
                    return true;
                }
            }
            if n == 0 {
                return false;
            }
            n -= 1;
        }
    }

    fn first_bad(&self, args: &[Value]) -> usize {
        let mut pi = 0;
        for (ai, a) in args.iter().enumerate() {
            loop {
                let Some(p) = self.params.get(pi) else {
                    return ai;
                };
                if arg_ok(p, a) {
                    if !p.variadic {
                        pi += 1;
                    }
                    break;
                }
                if p.optional || p.context || (p.variadic && ai > 0) {
                    pi += 1;
                    continue;
                }
                return ai;
            }
        }
        args.len().saturating_sub(1)
    }
}

fn arg_ok(p: &Param, a: &Value) -> bool {
    if a.is_undefined() {
        return true;
    }
    if p.types == "a" {
        return true;
    }
    type_ok(&p.types, a)
}

fn type_ok(types: &str, v: &Value) -> bool {
    let c = match v {
        Value::Undefined => return true,
        Value::Null => 'l',
        Value::Bool(_) => 'b',
        Value::Number(_) => 'n',
        Value::String(_) => 's',
        Value::Array(..) => 'a',
        Value::Object(_, _) => 'o',
        Value::Function(_) => 'f',
    };
    types.contains(c)
}

fn type_name(t: &str) -> &'static str {
    match t {
        "n" => "numbers",
        "s" => "strings",
        "b" => "booleans",
        "o" => "objects",
        "a" => "arrays",
        "f" => "functions",
        _ => "values of the required type",
    }
}
