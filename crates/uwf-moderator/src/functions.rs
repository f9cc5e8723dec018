//! Functions the moderator offers to workflow expressions beyond JSONata's
//! builtins, written in JSONata and bound before every evaluation
//! ([`uwf_jsonata::EvalOptions::definitions`]).
//!
//! * `$last(role)` / `$first(role)`: the output of the latest / earliest
//!   step of `role`, or `undefined` when the role has not run (the helpers
//!   upstream uwf bound for its conditions). In a condition they search
//!   `steps` of the context; in an edge prompt, the thread's steps.
//! * `$__uwf…`: the run-time support of edge prompts written as mustache or
//!   Liquid templates, which [`crate::definition`] compiles into ordinary
//!   JSONata templates calling them (see [`crate::upstream_template`]). Their
//!   names start with `__uwf` so that no author picks them by accident.

use std::sync::OnceLock;

use uwf_jsonata::Expression;

/// Name of the binding that holds the thread's steps while an edge prompt
/// is rendered (its input is the last output, not the context).
pub(crate) const STEPS_BINDING: &str = "__uwfSteps";

/// The functions of the moderator: name (without `$`), signature, and the
/// JSONata source of their definition in a condition and in an edge prompt.
pub(crate) const MODERATOR_FUNCTIONS: &[(&str, &str)] = &[
    ("last", "<s:x>"),
    ("first", "<s:x>"),
    ("__uwfText", "<x-:s>"),
    ("__uwfTruthy", "<x-:b>"),
    ("__uwfVar", "<s:x>"),
    ("__uwfGet", "<s:x>"),
    ("__uwfLookup", "<xs:x>"),
    ("__uwfSection", "<xf:s>"),
    ("__uwfInverted", "<xs:s>"),
    ("__uwfJoin", "<xs?:s>"),
    ("__uwfDefault", "<xx:x>"),
    ("__uwfSize", "<x:n>"),
    ("__uwfNonEmpty", "<s:s>"),
];

/// The signature of a moderator function, by name without `$`.
pub(crate) fn signature(name: &str) -> Option<&'static str> {
    MODERATOR_FUNCTIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// Definitions shared by conditions and prompts (the template support).
const TEMPLATE_SUPPORT: &[(&str, &str)] = &[
    // JavaScript's String(v), which mustache and LiquidJS print: arrays
    // joined with commas (nested ones flattened, null as nothing), objects
    // as `[object Object]`, null and undefined as nothing.
    (
        "__uwfText",
        "function($v){ $exists($v) ? ($t := $type($v); \
         $t = 'string' ? $v : \
         $t = 'array' ? $join($map($v, function($x){ $__uwfText($x) }), ',') : \
         $t = 'object' ? '[object Object]' : \
         $t = 'null' ? '' : $t = 'function' ? '' : $string($v)) : '' }",
    ),
    // JavaScript truthiness, where an empty list is false too (mustache).
    (
        "__uwfTruthy",
        "function($v){ $exists($v) ? ($t := $type($v); \
         $t = 'array' ? $count($v) > 0 : $t = 'string' ? $v != '' : \
         $t = 'number' ? $v != 0 : $t = 'boolean' ? $v : $t = 'null' ? false : true) : false }",
    ),
    // A top-level template variable: a member of the last output (`Var`
    // for Liquid, whose variables the static checks require the schema to
    // declare; `Get` for mustache, where they are only warned about).
    ("__uwfVar", "function($name){ $lookup($$, $name) }"),
    ("__uwfGet", "function($name){ $lookup($$, $name) }"),
    // A variable inside a section: the innermost context object that has it.
    (
        "__uwfLookup",
        "function($stack, $name){ ($hit := $filter($stack, function($c){ \
         $type($c) = 'object' and $exists($lookup($c, $name)) }); \
         $exists($hit) ? $lookup($hit[0], $name)) }",
    ),
    // `{{#v}}…{{/v}}`: once per item of a list, once for another truthy
    // value, not at all for a falsy one; `$f` renders the body for a context.
    (
        "__uwfSection",
        "function($v, $f){ $type($v) = 'array' ? \
         $join($map($v, function($x){ $f($x) }), '') : \
         $__uwfTruthy($v) ? $f($v) : '' }",
    ),
    // `{{^v}}…{{/v}}`: the body when `v` is falsy.
    (
        "__uwfInverted",
        "function($v, $body){ $__uwfTruthy($v) ? '' : $body }",
    ),
    // Liquid's `join` filter (separator: a space by default).
    (
        "__uwfJoin",
        "function($v, $sep){ ($s := $exists($sep) ? $sep : ' '; \
         $type($v) = 'array' ? $join($map($v, function($x){ $__uwfText($x) }), $s) : $__uwfText($v)) }",
    ),
    // Liquid's `default` filter: the fallback for nil, false and empty values.
    (
        "__uwfDefault",
        "function($v, $d){ $__uwfTruthy($v) or ($type($v) = 'number' and $v = 0) ? $v : $d }",
    ),
    // Liquid's `size` filter.
    (
        "__uwfSize",
        "function($v){ $type($v) = 'array' ? $count($v) : \
         $type($v) = 'string' ? $length($v) : $type($v) = 'object' ? $count($keys($v)) : 0 }",
    ),
    // Upstream refuses a prompt that renders to nothing but white space.
    (
        "__uwfNonEmpty",
        "function($s){ $trim($s) = '' ? \
         $error('the edge prompt rendered to an empty text: the previous output lacks the fields it uses') : $s }",
    ),
];

/// Where an expression runs, which decides how `$last`/`$first` find steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Host {
    /// A condition (or `uwf eval`): the input is `{start, steps}`.
    Context,
    /// An edge prompt: the input is the last output; the steps are bound
    /// as [`STEPS_BINDING`].
    Prompt,
}

fn parse_all(extra: &[(&str, &str)]) -> Vec<(String, Expression)> {
    extra
        .iter()
        .chain(TEMPLATE_SUPPORT)
        .filter_map(|(name, src)| {
            // The sources are constants, checked by the tests below.
            Expression::parse(src)
                .ok()
                .map(|e| ((*name).to_string(), e))
        })
        .collect()
}

/// The definitions to bind for `host`, parsed once per process.
pub(crate) fn definitions(host: Host) -> Vec<(String, Expression)> {
    static CONTEXT: OnceLock<Vec<(String, Expression)>> = OnceLock::new();
    static PROMPT: OnceLock<Vec<(String, Expression)>> = OnceLock::new();
    match host {
        Host::Context => CONTEXT
            .get_or_init(|| {
                parse_all(&[
                    (
                        "last",
                        "function($role)<s:x>{ $$.steps[role = $role][-1].output }",
                    ),
                    (
                        "first",
                        "function($role)<s:x>{ $$.steps[role = $role][0].output }",
                    ),
                ])
            })
            .clone(),
        Host::Prompt => PROMPT
            .get_or_init(|| {
                parse_all(&[
                    (
                        "last",
                        "function($role)<s:x>{ $__uwfSteps[role = $role][-1].output }",
                    ),
                    (
                        "first",
                        "function($role)<s:x>{ $__uwfSteps[role = $role][0].output }",
                    ),
                ])
            })
            .clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_definition_parses_and_has_a_signature() {
        for (name, src) in TEMPLATE_SUPPORT {
            assert!(Expression::parse(src).is_ok(), "{name}: {src}");
            assert!(signature(name).is_some(), "{name} has no signature");
        }
        for host in [Host::Context, Host::Prompt] {
            let defs = definitions(host);
            assert_eq!(defs.len(), TEMPLATE_SUPPORT.len() + 2);
            for (name, _) in &defs {
                assert!(signature(name).is_some(), "{name} has no signature");
            }
        }
        for (name, sig) in MODERATOR_FUNCTIONS {
            assert!(
                crate::definition::expr_checks::arity(sig).is_some(),
                "{name}: {sig}"
            );
            assert!(
                uwf_jsonata::builtin_signature(name).is_none(),
                "{name} shadows a builtin"
            );
        }
    }
}
