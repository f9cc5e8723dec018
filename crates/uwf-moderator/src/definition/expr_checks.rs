//! Static checks of one JSONata expression of a workflow.
//!
//! What can be known without running the expression: it parses; every
//! function it calls exists (a builtin, or a variable the expression binds
//! itself); a builtin gets a number of arguments its signature allows; it
//! uses no function whose result is not a pure function of the thread
//! (conditions must choose the same role in every process, forever); and a
//! role name it compares `role` with (or gives `$last`/`$first`) is a role
//! of the workflow. Besides JSONata's builtins, the moderator's own
//! functions are known ([`crate::functions`]: `$last`, `$first`, …).

use std::collections::BTreeSet;

use uwf_jsonata::ast::{BinOp, Kind, Node};

/// Builtins refused in workflow expressions, with the reason given to authors.
pub const IMPURE_FUNCTIONS: &[(&str, &str)] = &[
    (
        "now",
        "the current time differs between runs, so the same thread could route differently",
    ),
    (
        "millis",
        "the current time differs between runs, so the same thread could route differently",
    ),
    (
        "random",
        "a random number differs between runs, so the same thread could route differently",
    ),
    (
        "shuffle",
        "a random order differs between runs, so the same thread could route differently",
    ),
    (
        "uuid",
        "a fresh identifier differs between runs, so the same thread could route differently",
    ),
    (
        "eval",
        "it runs text as an expression, which no static check can see into",
    ),
];

/// One problem in an expression, with the byte offset it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The finding code (`condition-syntax`, `unknown-function`, …) suffix.
    pub kind: ProblemKind,
    /// What is wrong.
    pub message: String,
    /// Byte offset in the expression, when known.
    pub offset: Option<usize>,
}

/// The kinds of [`Problem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProblemKind {
    /// It does not parse (or is empty or too long).
    Syntax,
    /// A function that is neither a builtin nor bound by the expression.
    UnknownFunction,
    /// A builtin called with a number of arguments its signature refuses.
    Arity,
    /// A builtin whose result is not a function of the thread.
    Impure,
    /// `role` compared with a name that is not a role of the workflow.
    UnknownRole,
}

/// The least and most arguments a signature such as `<s-n?:s>` takes
/// (`None`: no upper bound). A `-` parameter may be left out (the context
/// is used), as may a `?` one.
pub(crate) fn arity(signature: &str) -> Option<(usize, Option<usize>)> {
    let sig = uwf_jsonata::signature::Signature::parse(signature, 0).ok()?;
    let min = sig
        .params
        .iter()
        .filter(|p| !p.optional && !p.context)
        .count();
    let unbounded = sig.params.iter().any(|p| p.variadic);
    Some((min, (!unbounded).then_some(sig.params.len())))
}

/// Names the expression binds itself: `$x := …`, lambda parameters, and
/// focus/index variables. A call of one of these is not checked.
fn bound_names(root: &Node) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    root.walk(&mut |n| {
        match &n.kind {
            Kind::Bind { name, .. } => {
                names.insert(name.clone());
            }
            Kind::Lambda(l) => names.extend(l.params.iter().cloned()),
            _ => {}
        }
        names.extend(n.focus.iter().cloned());
        names.extend(n.index.iter().cloned());
    });
    names
}

/// Whether a node reads a step's `role`: a bare `role` (inside a predicate
/// of `steps`) or a path ending in `steps….role`. Other fields named `role`
/// (`steps[-1].output.role`) are data, not role names.
fn is_role_field(n: &Node) -> bool {
    let is_name = |n: &Node, want: &str| matches!(&n.kind, Kind::Name(s) if s == want);
    match &n.kind {
        Kind::Name(s) => s == "role",
        Kind::Path { steps, .. } => match steps.as_slice() {
            [only] => is_name(only, "role"),
            [.., before, last] => is_name(last, "role") && is_name(before, "steps"),
            [] => false,
        },
        _ => false,
    }
}

fn string_literals(n: &Node) -> Vec<(&str, usize)> {
    match &n.kind {
        Kind::String(s) => vec![(s.as_str(), n.span.start)],
        Kind::Array(items) => items.iter().flat_map(string_literals).collect(),
        _ => Vec::new(),
    }
}

/// Checks a parsed expression. `roles` are the workflow's roles, or `None`
/// when `role` comparisons are not meaningful (edge prompts run against an
/// output, not the thread).
pub(crate) fn check(root: &Node, roles: Option<&BTreeSet<&str>>) -> Vec<Problem> {
    let bound = bound_names(root);
    let mut problems = Vec::new();
    // Calls reached through `~>` get the left side as an extra first argument.
    let mut piped = BTreeSet::new();
    root.walk(&mut |n| {
        if let Kind::Apply { rhs, .. } = &n.kind
            && let Kind::Call { .. } = rhs.kind
        {
            piped.insert(rhs.span.start);
        }
    });
    root.walk(&mut |n| match &n.kind {
        Kind::Variable(name) if !bound.contains(name) => {
            if let Some((_, why)) = IMPURE_FUNCTIONS.iter().find(|(f, _)| f == name) {
                problems.push(Problem {
                    kind: ProblemKind::Impure,
                    message: impure_message(name, why),
                    offset: Some(n.span.start),
                });
            }
        }
        Kind::Call {
            procedure,
            args,
            partial,
            ..
        } => {
            let Kind::Variable(name) = &procedure.kind else {
                return;
            };
            if bound.contains(name) || name.is_empty() {
                return;
            }
            if matches!(name.as_str(), "last" | "first")
                && let (Some(roles), Some(Kind::String(role))) =
                    (roles, args.first().map(|a| &a.kind))
                && !roles.contains(role.as_str())
            {
                let known = roles.iter().copied().collect::<Vec<_>>().join(", ");
                problems.push(Problem {
                    kind: ProblemKind::UnknownRole,
                    message: format!(
                        "`${name}` is given \"{role}\", which is not a role of this workflow (roles: {known})"
                    ),
                    offset: args.first().map(|a| a.span.start),
                });
            }
            let Some(sig) = uwf_jsonata::builtin_signature(name)
                .or_else(|| crate::functions::signature(name))
            else {
                problems.push(Problem {
                    kind: ProblemKind::UnknownFunction,
                    message: format!(
                        "`${name}` is not a JSONata function{}",
                        suggestion(name).map_or(String::new(), |s| format!(
                            " (did you mean `${s}`?)"
                        ))
                    ),
                    offset: Some(procedure.span.start),
                });
                return;
            };
            if *partial {
                return;
            }
            let given = args.len() + usize::from(piped.contains(&n.span.start));
            if let Some((min, max)) = arity(sig)
                && (given < min || max.is_some_and(|m| given > m))
            {
                let wanted = match max {
                    Some(m) if m == min => format!("{min}"),
                    Some(m) => format!("{min} to {m}"),
                    None => format!("at least {min}"),
                };
                problems.push(Problem {
                    kind: ProblemKind::Arity,
                    message: format!(
                        "`${name}` takes {wanted} argument{} (signature {sig}), but is given {given}",
                        if max == Some(1) && min == 1 { "" } else { "s" }
                    ),
                    offset: Some(procedure.span.start),
                });
            }
        }
        Kind::Binary {
            op: BinOp::Eq | BinOp::Ne | BinOp::In,
            lhs,
            rhs,
        } => {
            let Some(roles) = roles else { return };
            for (field, other) in [(lhs, rhs), (rhs, lhs)] {
                if !is_role_field(field) {
                    continue;
                }
                for (lit, at) in string_literals(other) {
                    if !roles.contains(lit) {
                        let known = roles.iter().copied().collect::<Vec<_>>().join(", ");
                        problems.push(Problem {
                            kind: ProblemKind::UnknownRole,
                            message: format!(
                                "`role` is compared with \"{lit}\", which is not a role of this workflow (roles: {known})"
                            ),
                            offset: Some(at),
                        });
                    }
                }
            }
        }
        _ => {}
    });
    problems.sort_by_key(|p| p.offset);
    problems
}

/// The first use of an [impure](IMPURE_FUNCTIONS) builtin, if any: such
/// an expression is refused at run time too, for workflows stored before
/// the check existed. Runs before every evaluation, so it looks at
/// variables only (none of [`check`]'s other work).
pub(crate) fn impure(root: &Node) -> Option<Problem> {
    // A name the expression binds itself is not the builtin.
    let bound = bound_names(root);
    let mut found: Option<(&'static str, &'static str, usize)> = None;
    root.walk(&mut |n| {
        if found.is_none()
            && let Kind::Variable(name) = &n.kind
            && !bound.contains(name)
            && let Some((f, why)) = IMPURE_FUNCTIONS.iter().find(|(f, _)| f == name)
        {
            found = Some((f, why, n.span.start));
        }
    });
    let (name, why, at) = found?;
    Some(Problem {
        kind: ProblemKind::Impure,
        message: impure_message(name, why),
        offset: Some(at),
    })
}

fn impure_message(name: &str, why: &str) -> String {
    format!("`${name}` is not allowed in a workflow: {why}")
}

/// The builtin closest to a misspelt name, if one is close.
fn suggestion(name: &str) -> Option<&'static str> {
    let lower = name.to_lowercase();
    uwf_jsonata::builtin_names()
        .map(|b| (distance(&lower, &b.to_lowercase()), b))
        .filter(|(d, b)| *d <= 2.max(b.len() / 4))
        .min()
        .map(|(_, b)| b)
}

/// Levenshtein distance (names are short).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arity_of_signatures() {
        assert_eq!(arity("<s-nn?:s>"), Some((1, Some(3))));
        assert_eq!(arity("<a<n>:n>"), Some((1, Some(1))));
        assert_eq!(arity("<af:a>"), Some((2, Some(2))));
        assert_eq!(arity("<x-:s>"), Some((0, Some(1))));
        assert_eq!(arity("<af?:a>"), Some((1, Some(2))));
        assert_eq!(arity("<a+>"), Some((1, None)));
        assert_eq!(arity("<s-(sf)(sf)n?:s>"), Some((2, Some(4))));
        assert_eq!(arity("<f<n:n>a:a>"), Some((2, Some(2))));
        assert_eq!(arity("nonsense"), None);
    }

    #[test]
    fn every_builtin_signature_has_an_arity() {
        for name in uwf_jsonata::builtin_names() {
            let sig = uwf_jsonata::builtin_signature(name).unwrap_or_default();
            assert!(arity(sig).is_some(), "${name}: {sig}");
        }
    }

    #[test]
    fn distance_is_levenshtein() {
        assert_eq!(distance("count", "count"), 0);
        assert_eq!(distance("cont", "count"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    fn problems(expr: &str, roles: &[&str]) -> Vec<(ProblemKind, Option<usize>)> {
        let roles: BTreeSet<&str> = roles.iter().copied().collect();
        let parsed = uwf_jsonata::Expression::parse(expr).unwrap_or_else(|e| panic!("{e}"));
        check(parsed.ast(), Some(&roles))
            .into_iter()
            .map(|p| (p.kind, p.offset))
            .collect()
    }

    #[test]
    fn unknown_functions_and_arity() {
        use ProblemKind::*;
        assert_eq!(problems("$count(steps) > 1", &[]), vec![]);
        assert_eq!(
            problems("$cont(steps) > 1", &[]),
            vec![(UnknownFunction, Some(0))]
        );
        assert_eq!(problems("1 + $count()", &[]), vec![(Arity, Some(4))]);
        assert_eq!(
            problems("$substring('abc', 1, 2, 3)", &[]),
            vec![(Arity, Some(0))]
        );
        // Bound by the expression itself: not a builtin, still fine.
        assert_eq!(problems("($f := function($x){$x}; $f(1))", &[]), vec![]);
        // `~>` supplies the first argument.
        assert_eq!(problems("steps ~> $count()", &[]), vec![]);
        // Partial application is not an arity error.
        assert_eq!(problems("$substring(?, 1)('abc')", &[]), vec![]);
    }

    #[test]
    fn impure_functions_are_refused_even_when_not_called() {
        use ProblemKind::*;
        assert_eq!(problems("$now() > '2020'", &[]), vec![(Impure, Some(0))]);
        assert_eq!(
            problems("$map([1], $random)", &[]),
            vec![(Impure, Some(10))]
        );
        assert_eq!(problems("($now := 1; $now)", &[]), vec![]);
        // The run-time check agrees, also when a bound name comes first.
        let at = |e: &str| {
            let parsed = uwf_jsonata::Expression::parse(e).unwrap_or_else(|e| panic!("{e}"));
            impure(parsed.ast()).and_then(|p| p.offset)
        };
        assert_eq!(at("($now := 1; $now)"), None);
        assert_eq!(at("($now := 1; $now + $random())"), Some(19));
        assert_eq!(at("$map([1], $random)"), Some(10));
    }

    #[test]
    fn role_names_must_exist() {
        use ProblemKind::*;
        let roles = ["developer", "reviewer"];
        assert_eq!(
            problems("$count(steps[role='developer']) > 2", &roles),
            vec![]
        );
        assert_eq!(
            problems("$count(steps[role='developr']) > 2", &roles),
            vec![(UnknownRole, Some(18))]
        );
        assert_eq!(
            problems("steps[-1].role = \"tester\"", &roles),
            vec![(UnknownRole, Some(17))]
        );
        assert_eq!(
            problems("steps[-1].role in ['reviewer', 'qa']", &roles),
            vec![(UnknownRole, Some(31))]
        );
        // Other fields are not role names.
        assert_eq!(problems("steps[-1].output.role = 'x'", &roles), vec![]);
    }

    #[test]
    fn last_and_first_are_known_and_their_role_is_checked() {
        use ProblemKind::*;
        let roles = ["developer", "reviewer"];
        assert_eq!(
            problems("$last('reviewer').approved = false", &roles),
            vec![]
        );
        assert_eq!(problems("$exists($first('developer'))", &roles), vec![]);
        assert_eq!(
            problems("$last('revewer').approved", &roles),
            vec![(UnknownRole, Some(6))]
        );
        assert_eq!(problems("$last()", &roles), vec![(Arity, Some(0))]);
        assert_eq!(
            problems("$first('developer', 2)", &roles),
            vec![(Arity, Some(0))]
        );
    }
}
