//! How much of a thread's history a workflow's decisions can read.
//!
//! A decision evaluates the workflow's conditions against `{start, steps}`
//! and renders an edge prompt against the last output. Most conditions
//! look at the last step (`steps[-1].output.approved = false`) or count
//! the steps (`$count(steps) >= 40`); for those, a step need not read and
//! convert a whole long thread, only its last steps and its length
//! ([`crate::thread::load_recent`], docs/performance.md, "History").
//!
//! The answer must never be too small: a decision made from part of the
//! history has to be the one made from all of it. So the analysis is
//! conservative. The document's `steps` may be reached only as
//! `$count(steps)` or `steps[-k]` (a negative integer literal, `k` at most
//! [`MAX_TAIL`]) evaluated against the document itself; any other mention
//! of a field named `steps`, the document as a value (`$` at the top,
//! `$$`, `*`, `**`, `%`), a builtin that may be handed the document as its
//! omitted argument, a lambda that may be, a partial application, a
//! transform, `$last`/`$first` (they search every step), and an edge
//! prompt that uses them, all make it [`StepsNeeded::All`].

use uwf_jsonata::ast::{Kind, Node, Stage};
use uwf_protocol::WorkflowPayload;

/// The most trailing steps worth loading on their own; a workflow that
/// reads further back loads the whole thread.
pub const MAX_TAIL: usize = 64;

/// What a workflow's decisions read of a thread's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepsNeeded {
    /// The number of steps and the last `n` of them (`0`: the count only).
    Last(usize),
    /// Any of them.
    All,
}

impl StepsNeeded {
    fn join(self, other: StepsNeeded) -> StepsNeeded {
        match (self, other) {
            (StepsNeeded::Last(a), StepsNeeded::Last(b)) => StepsNeeded::Last(a.max(b)),
            _ => StepsNeeded::All,
        }
    }
}

/// What the decisions of `workflow` read of a thread's steps: every
/// condition it defines (used or not) and every edge prompt of its graph.
/// A condition that does not parse counts as reading everything (its
/// decision fails either way, with the error of a whole load).
pub fn steps_needed(workflow: &WorkflowPayload) -> StepsNeeded {
    let prompts_search = workflow.graph.values().flatten().any(|t| {
        t.prompt
            .as_deref()
            .is_some_and(|p| p.contains("$last") || p.contains("$first"))
    });
    if prompts_search {
        return StepsNeeded::All;
    }
    let mut need = StepsNeeded::Last(0);
    for condition in workflow.conditions.values() {
        let Ok(compiled) = crate::jsonata::compile(condition.expression()) else {
            return StepsNeeded::All;
        };
        need = need.join(expression_needs(compiled.ast()));
        if need == StepsNeeded::All {
            return need;
        }
    }
    need
}

/// [`steps_needed`] of the Workflow node `hash` (`workflow`), remembered
/// for the process: a step asks several times, and a node never changes.
pub(crate) fn steps_needed_of(hash: uwf_cas::Hash, workflow: &WorkflowPayload) -> StepsNeeded {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};
    /// Workflows remembered; a process sees few.
    const REMEMBERED: usize = 64;
    static KNOWN: OnceLock<Mutex<HashMap<uwf_cas::Hash, StepsNeeded>>> = OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    if let Some(n) = known
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&hash)
    {
        return *n;
    }
    let need = steps_needed(workflow);
    let mut known = known.lock().unwrap_or_else(PoisonError::into_inner);
    if known.len() >= REMEMBERED {
        known.clear();
    }
    known.insert(hash, need);
    need
}

/// What one parsed condition reads of the document's steps.
pub(crate) fn expression_needs(ast: &Node) -> StepsNeeded {
    let mut scan = Scan {
        need: StepsNeeded::Last(0),
    };
    scan.node(ast, true);
    match scan.need {
        StepsNeeded::Last(k) if k > MAX_TAIL => StepsNeeded::All,
        n => n,
    }
}

struct Scan {
    need: StepsNeeded,
}

impl Scan {
    fn all(&mut self) {
        self.need = StepsNeeded::All;
    }

    /// Visits `n`; `root`: it is evaluated with the document as its
    /// context (the top of the expression, and what is evaluated in the
    /// same context as it: operands, arguments, blocks, constructors).
    fn node(&mut self, n: &Node, root: bool) {
        if self.need == StepsNeeded::All {
            return;
        }
        // Filters, group-by and sort terms see each item, not the document.
        for s in &n.stages {
            if let Stage::Filter(f) = s {
                self.node(f, false);
            }
        }
        for p in &n.predicates {
            self.node(p, false);
        }
        if let Some(g) = &n.group {
            for (k, v) in &g.pairs {
                self.node(k, false);
                self.node(v, false);
            }
        }
        match &n.kind {
            Kind::Path { steps, .. } => self.path(steps, root),
            // A `steps` in no form recognised above.
            Kind::Name(name) if name == "steps" => self.all(),
            Kind::Variable(v) => match v.as_str() {
                // `$` at the top is the document.
                "" if root => self.all(),
                // `$$` is the document anywhere; `$last`/`$first` search
                // its steps; the template helpers read `$$`.
                "$" | "last" | "first" | "__uwfVar" | "__uwfGet" => self.all(),
                // A function taken as a value (`$s := $string`) may be
                // called with its argument left out, anywhere.
                name if takes_the_document(name, 0) => self.all(),
                _ => {}
            },
            Kind::Wildcard | Kind::Descendant if root => self.all(),
            Kind::Parent { .. } | Kind::Transform(_) => self.all(),
            Kind::Binary { lhs, rhs, .. } => {
                self.node(lhs, root);
                self.node(rhs, root);
            }
            Kind::Apply { lhs, rhs } => {
                self.node(lhs, root);
                // `x ~> $f(a)` calls `$f(x, a)`.
                match &rhs.kind {
                    Kind::Call { .. } => self.call(rhs, root, 1),
                    _ => self.node(rhs, root),
                }
            }
            Kind::Negate(e) => self.node(e, root),
            Kind::Array(items) | Kind::Block(items) => {
                items.iter().for_each(|i| self.node(i, root));
            }
            Kind::Object(pairs) => pairs.iter().for_each(|(k, v)| {
                self.node(k, root);
                self.node(v, root);
            }),
            Kind::Condition {
                condition,
                then,
                otherwise,
            } => {
                self.node(condition, root);
                self.node(then, root);
                if let Some(o) = otherwise {
                    self.node(o, root);
                }
            }
            // A function of the language rebound (`$count := …`) is no
            // longer what the forms above assume.
            Kind::Bind { name, .. } if is_function(name) => self.all(),
            Kind::Bind { value, .. } => self.node(value, root),
            Kind::Call { .. } => self.call(n, root, 0),
            Kind::Lambda(l) => {
                // Called with an argument left out, a `-` parameter takes
                // the context; the body may run with the document as its
                // context wherever the lambda is called from.
                if l.signature
                    .as_ref()
                    .is_some_and(|s| s.params.iter().any(|p| p.context))
                    || l.params.iter().any(|p| is_function(p))
                {
                    self.all();
                }
                self.node(&l.body, true);
            }
            Kind::Sort(terms) => terms.iter().for_each(|t| self.node(&t.expr, false)),
            _ => {}
        }
    }

    /// A path: only its first step sees the path's context.
    fn path(&mut self, steps: &[Node], root: bool) {
        let Some((first, rest)) = steps.split_first() else {
            return;
        };
        match tail_index(first) {
            Some(k) if root => self.need = self.need.join(StepsNeeded::Last(k)),
            _ => self.node(first, root),
        }
        for s in rest {
            self.node(s, false);
        }
    }

    /// A call `n` (`extra` arguments given by `~>`).
    fn call(&mut self, n: &Node, root: bool, extra: usize) {
        let Kind::Call {
            procedure,
            args,
            partial,
            ..
        } = &n.kind
        else {
            return self.node(n, root);
        };
        if *partial {
            return self.all();
        }
        if root && extra == 0 && is_count_of_steps(procedure, args) {
            return;
        }
        match &procedure.kind {
            // Called by name: what matters is the arguments given.
            Kind::Variable(name) if procedure.is_bare() => {
                if matches!(
                    name.as_str(),
                    "$" | "" | "last" | "first" | "__uwfVar" | "__uwfGet"
                ) || (root && takes_the_document(name, args.len() + extra))
                {
                    return self.all();
                }
            }
            _ => self.node(procedure, root),
        }
        args.iter().for_each(|a| self.node(a, root));
    }
}

/// Whether `name` is a builtin or one of the moderator's functions.
fn is_function(name: &str) -> bool {
    crate::functions::signature(name).is_some() || uwf_jsonata::builtin_signature(name).is_some()
}

/// `$count(steps)`.
fn is_count_of_steps(procedure: &Node, args: &[Node]) -> bool {
    let [arg] = args else {
        return false;
    };
    let steps = match &arg.kind {
        Kind::Path { steps, .. } if arg.is_bare() => match steps.as_slice() {
            [only] => only,
            _ => return false,
        },
        _ => arg,
    };
    matches!(&procedure.kind, Kind::Variable(f) if f == "count")
        && procedure.is_bare()
        && matches!(&steps.kind, Kind::Name(s) if s == "steps")
        && steps.is_bare()
}

/// `k` for a path step `steps[-k]`.
fn tail_index(step: &Node) -> Option<usize> {
    if !matches!(&step.kind, Kind::Name(s) if s == "steps") {
        return None;
    }
    let [Stage::Filter(index)] = step.stages.as_slice() else {
        return None;
    };
    let only_the_filter = step.predicates.is_empty()
        && step.group.is_none()
        && step.focus.is_none()
        && step.index.is_none()
        && !step.tuple
        && !step.keep_array
        && !step.cons_array
        && step.ancestor.is_none();
    match index.kind {
        Kind::Number(x) if only_the_filter && index.is_bare() && x <= -1.0 && x.fract() == 0.0 => {
            // Negative, integral, and small: at most MAX_TAIL is kept anyway.
            Some((-x).min((MAX_TAIL + 1) as f64) as usize)
        }
        _ => None,
    }
}

/// Whether calling function `name` (a builtin or one of the moderator's)
/// with `given` arguments may hand it the context, the document, in place
/// of one left out (`uwf_jsonata::signature::Signature::validate`): its
/// signature has a `-` parameter that accepts an object, and `given` leaves
/// a parameter out. A function given the document where it accepts no
/// object fails the same way whatever the steps hold (T0411).
///
/// One case is known not to: a first `-` parameter that accepts anything,
/// followed only by optional ones (`$string(x)`, `<x-b?:s>`). Validation
/// gives it the first argument when the rest then fit, and they fit
/// whenever they would with the context inserted (an optional parameter
/// can be skipped), so at least one argument means no insertion.
fn takes_the_document(name: &str, given: usize) -> bool {
    let Some(text) =
        crate::functions::signature(name).or_else(|| uwf_jsonata::builtin_signature(name))
    else {
        // A variable bound in the expression: a lambda, checked where
        // it is defined.
        return false;
    };
    let Ok(sig) = uwf_jsonata::signature::Signature::parse(text, 0) else {
        return true;
    };
    let Some(at) = sig
        .params
        .iter()
        .position(|p| p.context && p.types.contains('o'))
    else {
        return false;
    };
    if given >= sig.params.len() {
        return false;
    }
    let accepts_anything = sig.params[at].array_of.is_none()
        && "bnsloaf".chars().all(|t| sig.params[at].types.contains(t));
    let first_then_optional = at == 0 && sig.params[1..].iter().all(|p| p.optional || p.context);
    !(given >= 1 && accepts_anything && first_then_optional)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn needs(expr: &str) -> StepsNeeded {
        let compiled = crate::jsonata::compile(expr).expect("parses");
        expression_needs(compiled.ast())
    }

    #[test]
    fn the_count_and_the_last_steps_are_recognised() {
        use StepsNeeded::Last;
        for (expr, want) in [
            ("$count(steps) >= 40", Last(0)),
            ("start.prompt = 'x'", Last(0)),
            ("true", Last(0)),
            ("steps[-1].output.approved = false", Last(1)),
            ("steps[-3].role = 'dev' and steps[-1].output.ok", Last(3)),
            (
                "$count(steps) > 2 ? steps[-2].output.score : steps[-1].output.score",
                Last(2),
            ),
            ("($s := steps[-1]; $s.output.x > 1)", Last(1)),
            ("steps[-1].output.items[$ > 3]", Last(1)),
            ("$string(steps[-1].output.n) = '1'", Last(1)),
            ("$keys(steps[-1].output) = ['a']", Last(1)),
            ("$lookup(steps[-1].output, 'a') = 1", Last(1)),
            ("$lookup(steps[-1].output, 'a') ~> $lookup('b')", Last(1)),
            ("$substring(steps[-1].output.t, 1) = 'a'", Last(1)),
            ("$exists(steps[-1].output.reason)", Last(1)),
            ("steps[-1].output.(a + b) > 1", Last(1)),
            ("$count(steps[-1].output.files) > 0", Last(1)),
            ("steps[-1].output.x ~> $string() = '1'", Last(1)),
            (
                "$map(steps[-1].output.xs, function($v){ $v + 1 })[0] = 2",
                Last(1),
            ),
        ] {
            assert_eq!(needs(expr), want, "{expr}");
        }
    }

    #[test]
    fn anything_else_reads_every_step() {
        for expr in [
            "$count(steps[role = 'writer']) >= 3",
            "steps[0].output.ok",
            "steps[1].output.ok",
            "steps[-1.5].output.ok",
            "steps[$count(steps) - 1].output.ok",
            "$last('builder').spent > 1",
            "$first('estimator').days > 1",
            "($f := $last; $f('x'))",
            "$$.steps[-1].output.ok",
            "$.steps[-1].output.ok",
            "$lookup($, 'steps')",
            "$keys($)",
            "$string() != ''",
            "$boolean()",
            "*[-1]",
            "**.approved",
            "steps.output.approved",
            "steps#$i[-1].output.ok",
            "steps@$s.output.ok",
            "(steps)[-1].output.ok",
            "steps ~> $count()",
            "$count(steps[])",
            "steps[-1].output.steps",
            "start.$count(steps)",
            "($f := function($x)<x-:n>{ 1 }; $f() = 1)",
            "($f := function(){ $ }; $count($f()))",
            "($c := $count(?); $c(steps))",
            "($s := steps; $s[-1].output.ok)",
            "steps[-100].output.ok",
            "$sift($, function($v){ true })",
            "$each($, function($v){ $v })",
            "$spread($)",
            "$spread()",
            "($s := $string; $s())",
            "($count := function($a){ $a[0].output.ok }; $count(steps))",
            "(function($count){ $count(steps) })(function($a){ $a[0] })",
            "$map(steps[-1].output.xs, $string)",
            "$lookup('steps')",
            "$sift(function($v){ true })",
            "$each(function($v){ $v })",
            "$__uwfVar('x')",
            "steps[-1].output ~> |$|{}|",
            "{'n': $count(steps), 'all': steps}.n > 1",
            "steps^(role)[-1].output.ok",
        ] {
            assert_eq!(needs(expr), StepsNeeded::All, "{expr}");
        }
    }

    /// A thread of `n` steps with varied roles and outputs.
    fn steps(n: usize) -> Vec<crate::thread::LoadedStep> {
        use uwf_cas::Hash;
        use uwf_protocol::{StepNodePayload, StepRecord};
        (0..n)
            .map(|i| {
                let role = ["a", "b", "c"][i % 3];
                let output = serde_json::json!({
                    "n": (i * 7) % 5,
                    "ok": i % 4 == 1,
                    "items": (0..i % 3).collect::<Vec<_>>(),
                    "text": format!("step {i}"),
                });
                crate::thread::LoadedStep {
                    hash: Hash::from_u64(100 + i as u64),
                    payload: StepNodePayload {
                        start: Hash::from_u64(1),
                        prev: i.checked_sub(1).map(|p| Hash::from_u64(100 + p as u64)),
                        record: StepRecord {
                            role: role.into(),
                            output: Hash::from_u64(1000 + i as u64),
                            detail: Hash::from_u64(2),
                            agent: format!("agent-{}", i % 2),
                        },
                        child_thread: None,
                    },
                    output,
                    timestamp: i as u64,
                }
            })
            .collect()
    }

    /// Every expression the analysis lets read only the last `k` steps
    /// evaluates to the same value, or fails the same way, against the
    /// whole thread and against its last steps behind placeholders.
    #[test]
    fn a_tail_with_placeholders_evaluates_as_the_whole_thread() {
        let start = uwf_protocol::StartNodePayload {
            workflow: uwf_cas::Hash::from_u64(3),
            prompt: "go".into(),
            parent_state: None,
        };
        let expressions = [
            "$count(steps) >= 4",
            "$count(steps) = 0 ? 'none' : steps[-1].role",
            "steps[-1].output.ok",
            "steps[-1].output.n = steps[-2].output.n",
            "steps[-3].role & steps[-1].role",
            "steps[-2]",
            "steps[-1].output.items[$ > 0]",
            "$string(steps[-1].output)",
            "$keys(steps[-1].output)",
            "$lookup(steps[-1].output, 'text')",
            "$sum(steps[-1].output.items) + $count(steps)",
            "steps[-1].output.n + 'a'",
            "steps[-1].output ~> $string()",
            "$map(steps[-1].output.items, function($v){ $v * $count(steps) })",
            "{'last': steps[-1].role, 'n': $count(steps)}",
            "[steps[-1], steps[-2]].role",
            "($s := steps[-1]; $s.agent = 'agent-1' and $s.output.ok)",
            "steps[-1].(output.n > 2 ? role : agent)",
            "start.prompt & $string($count(steps))",
            "steps[-5].output.text",
        ];
        for expr in expressions {
            let compiled = crate::jsonata::compile(expr).expect("parses");
            let StepsNeeded::Last(k) = expression_needs(compiled.ast()) else {
                panic!("{expr} should read the last steps only");
            };
            for len in 0..14 {
                let all = steps(len);
                let show = |r: Result<uwf_jsonata::Value, crate::jsonata::Failure>| match r {
                    Ok(v) => format!("{:?}", v.to_json()),
                    Err(f) => format!("error {}", f.message()),
                };
                let whole = crate::jsonata::on_big_stack(|| {
                    let input = crate::eval::loaded_input(&start, &all).expect("input");
                    show(crate::jsonata::evaluated(&compiled, &input))
                });
                for kept in k.max(1).min(len)..=len {
                    let earlier = len - kept;
                    let tail = crate::jsonata::on_big_stack(|| {
                        let input = crate::eval::tail_input(&start, &all[earlier..], earlier)
                            .expect("input");
                        show(crate::jsonata::evaluated(&compiled, &input))
                    });
                    assert_eq!(tail, whole, "{expr}: {len} steps, the last {kept} loaded");
                }
            }
        }
    }

    #[test]
    fn a_workflow_reads_what_its_conditions_and_prompts_read() {
        let workflow = |conditions: &str, prompt: &str| -> WorkflowPayload {
            let yaml = format!(
                "name: w\nroles:\n  a: {{ goal: g, meta: {{ type: object }} }}\n\
                 conditions:\n{conditions}\
                 graph:\n  $START: [ {{ role: a, condition: null }} ]\n  a: [ {{ role: $END, condition: done }}, {{ role: a, condition: null, prompt: \"{prompt}\" }} ]\n"
            );
            let def = crate::definition::parse_yaml(&yaml, "w.yaml").expect("valid workflow");
            let cas = uwf_cas::Cas::new(uwf_cas::MemStore::new()).expect("a store");
            crate::definition::register(&cas, &def)
                .expect("registers")
                .payload
        };
        let done = "  done: { description: d, expression: \"steps[-1].output.ok\" }\n";
        let count = "  more: { description: m, expression: \"$count(steps) > 3\" }\n";
        let search = "  old: { description: o, expression: \"$count(steps[role = 'a']) > 3\" }\n";
        assert_eq!(steps_needed(&workflow(done, "again")), StepsNeeded::Last(1));
        assert_eq!(
            steps_needed(&workflow(&format!("{done}{count}"), "{{ note }}")),
            StepsNeeded::Last(1)
        );
        assert_eq!(
            steps_needed(&workflow(&format!("{done}{search}"), "again")),
            StepsNeeded::All
        );
        assert_eq!(
            steps_needed(&workflow(done, "{{ $last('a').note }}")),
            StepsNeeded::All
        );
    }
}
