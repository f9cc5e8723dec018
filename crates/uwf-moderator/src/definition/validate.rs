//! Static checks of a workflow.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use serde::Serialize;
use uwf_protocol::{ConditionDefinition, END, START, Transition, WorkflowPayload};

use super::WorkflowDefinition;
use super::expr_checks::{self, Problem, ProblemKind};
use super::locate::{self, Position};
use super::schema_checks;
use crate::SUSPEND;
use crate::jsonata::{self, Failure};
use crate::template::{self, Segment};

/// One problem found by [`validate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable identifier of the check, e.g. `unknown-condition`.
    pub code: &'static str,
    /// What is wrong, for humans.
    pub message: String,
    /// The role (or `$START`) concerned, if any.
    pub role: Option<String>,
    /// The condition concerned, if any.
    pub condition: Option<String>,
    /// 1-based line in the workflow file, when the finding is about an
    /// expression and [`Report::locate`] found it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// 1-based column (in characters), with [`line`](Self::line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// What to look for in the source text to place the finding.
    #[serde(skip)]
    anchor: Option<Anchor>,
    /// The file name given to [`Report::locate`], for display.
    #[serde(skip)]
    source: Option<String>,
    /// The located source line, shown with a caret under the column.
    #[serde(skip)]
    excerpt: Option<String>,
}

/// The expression a finding is about, for [`Report::locate`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct Anchor {
    /// `conditions` or `graph`.
    section: &'static str,
    /// The condition's name, or the role whose transition it is.
    key: String,
    /// The text to find: the expression, or the whole edge prompt.
    text: String,
    /// Byte offset of the problem in `text`.
    offset: Option<usize>,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(l), Some(c)) = (self.line, self.column) {
            if let Some(s) = &self.source {
                write!(f, "{s}:")?;
            }
            write!(f, "{l}:{c}: ")?;
        }
        write!(f, "[{}] {}", self.code, self.message)?;
        if let (Some(l), Some(c), Some(text)) = (self.line, self.column, &self.excerpt) {
            let number = l.to_string();
            write!(
                f,
                "\n    {number} | {text}\n    {} | {}^",
                " ".repeat(number.len()),
                " ".repeat(c.saturating_sub(1))
            )?;
        }
        Ok(())
    }
}

/// Everything [`validate`] found. Errors refuse a registration; warnings do not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Problems that make the workflow unusable.
    pub errors: Vec<Finding>,
    /// Suspicious but workable constructs.
    pub warnings: Vec<Finding>,
}

impl Report {
    /// True when there are no errors (warnings allowed).
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// Places the findings about expressions in `text`, the YAML the
    /// workflow was parsed from (`source_name`, e.g. its path, prefixes them
    /// when displayed): sets their [`line`](Finding::line) and
    /// [`column`](Finding::column) where the expression is found as written.
    pub fn locate(&mut self, text: &str, source_name: &str) {
        for f in self.errors.iter_mut().chain(self.warnings.iter_mut()) {
            f.source = Some(source_name.to_string());
            if let Some(a) = &f.anchor
                && let Some(Position { line, column }) =
                    locate::locate(text, a.section, &a.key, &a.text, a.offset)
            {
                f.line = Some(line);
                f.column = Some(column);
                f.excerpt = text
                    .lines()
                    .nth(line - 1)
                    .map(|l| l.trim_end().replace('\t', " "));
            }
        }
    }

    fn push_anchored(&mut self, finding: Finding, anchor: Anchor) {
        self.errors.push(Finding {
            anchor: Some(anchor),
            ..finding
        });
    }

    fn error(
        &mut self,
        code: &'static str,
        message: String,
        role: Option<&str>,
        cond: Option<&str>,
        at: Anchor,
    ) {
        self.push_anchored(finding(code, message, role, cond), at);
    }

    fn warning(
        &mut self,
        code: &'static str,
        message: String,
        role: Option<&str>,
        cond: Option<&str>,
        at: Anchor,
    ) {
        self.warnings.push(Finding {
            anchor: Some(at),
            ..finding(code, message, role, cond)
        });
    }
}

/// A finding's place: the entry `key` of the top-level `section` (the
/// section's own line when `key` is empty), and within it `text` when given.
fn at(section: &'static str, key: &str, text: &str) -> Anchor {
    Anchor {
        section,
        key: key.to_string(),
        text: text.to_string(),
        offset: None,
    }
}

fn finding(code: &'static str, message: String, role: Option<&str>, cond: Option<&str>) -> Finding {
    Finding {
        code,
        message,
        role: role.map(str::to_string),
        condition: cond.map(str::to_string),
        line: None,
        column: None,
        anchor: None,
        source: None,
        excerpt: None,
    }
}

/// The finding code of an expression problem.
fn problem_code(kind: ProblemKind, in_prompt: bool) -> &'static str {
    match kind {
        ProblemKind::Syntax if in_prompt => "prompt-syntax",
        ProblemKind::Syntax => "condition-syntax",
        ProblemKind::UnknownFunction => "unknown-function",
        ProblemKind::Arity => "wrong-arity",
        ProblemKind::Impure => "impure-function",
        ProblemKind::UnknownRole => "unknown-role",
    }
}

/// Every problem of one expression: syntax first; if it parses, the static
/// checks of [`expr_checks`].
fn expression_problems(expr: &str, roles: Option<&BTreeSet<&str>>) -> Vec<Problem> {
    match jsonata::compile(expr) {
        Ok(parsed) => expr_checks::check(parsed.ast(), roles),
        Err(f) => vec![Problem {
            kind: ProblemKind::Syntax,
            offset: match &f {
                Failure::Syntax(_, at) => *at,
                Failure::Runtime(_) => None,
            },
            message: f.message().to_string(),
        }],
    }
}

/// The problems of an edge prompt's placeholders, with offsets in the whole
/// template.
fn template_problems(prompt: &str) -> Vec<Problem> {
    let segments = match template::parse(prompt) {
        Ok(s) => s,
        Err(m) => {
            return vec![Problem {
                kind: ProblemKind::Syntax,
                message: m,
                offset: None,
            }];
        }
    };
    let mut out = Vec::new();
    for seg in segments {
        if let Segment::Expr(expr, at) = seg {
            // `at` is the offset of the `{{`; the expression follows it.
            let start = prompt[at..].find(expr).map_or(at, |i| at + i);
            for mut p in expression_problems(expr, None) {
                p.message = format!("placeholder `{{{{ {expr} }}}}`: {}", p.message);
                p.offset = Some(start + p.offset.unwrap_or(0));
                out.push(p);
            }
        }
    }
    out
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.errors {
            writeln!(f, "error {e}")?;
        }
        for w in &self.warnings {
            writeln!(f, "warning {w}")?;
        }
        Ok(())
    }
}

/// Checks a parsed workflow.
///
/// Errors: a JSONata expression (condition, or placeholder of an edge prompt)
/// that does not parse; a transition naming an undefined condition; a target
/// that is neither a role nor `$END`; no `$START`; a role without outgoing
/// transitions; a role unreachable from `$START`; no path from `$START` to
/// `$END`; a graph entry for something that is not a role; a role name
/// starting with `$`; an output schema that is not a JSON object; no roles.
///
/// Warnings: an unused condition; a transition after an unconditional one
/// (it can never be taken); a role without an unconditional fallback (the
/// thread fails when no condition holds); a role from which `$END` cannot be
/// reached.
pub fn validate(def: &WorkflowDefinition) -> Report {
    jsonata::on_big_stack(|| {
        let mut report = Report::default();
        // The same subset check the CAS applies on registration, so that
        // `validate` accepts exactly what `put` accepts.
        let meta = uwf_cas::schema::compile(&uwf_cas::schema::meta_schema()).ok();
        for (role, draft) in &def.roles {
            if !draft.output_schema.is_object() {
                report.error(
                    "schema-not-object",
                    format!(
                        "the output schema of role `{role}` is not a JSON object (found {})",
                        kind_of(&draft.output_schema)
                    ),
                    Some(role),
                    None,
                    at("roles", role, ""),
                );
            } else if let Some(meta) = &meta
                && let Err(e) = uwf_cas::schema::check_subset(meta, &draft.output_schema)
            {
                report.error(
                    "invalid-schema",
                    format!("the output schema of role `{role}`: {e}"),
                    Some(role),
                    None,
                    at("roles", role, ""),
                );
            }
        }
        check_graph(
            def.roles.keys().map(String::as_str).collect(),
            &def.conditions,
            &def.graph,
            &mut report,
        );
        let schemas = def
            .roles
            .iter()
            .map(|(name, r)| (name.as_str(), &r.output_schema))
            .collect();
        let mut found =
            schema_checks::check(&schemas, &def.conditions, &def.graph, def.form.upstream);
        if def.form.upstream {
            found.extend(schema_checks::check_upstream_statuses(
                &schemas,
                &def.form.status_maps,
            ));
        }
        if let Some(note) = &def.form.prompts_note {
            report
                .warnings
                .push(finding("prompt-language", note.clone(), None, None));
        }
        for f in found {
            let found = finding(f.code, f.message, Some(&f.role), f.condition.as_deref());
            match (f.prompt, f.error) {
                (Some(text), error) => {
                    let anchor = Anchor {
                        section: "graph",
                        key: f.role.clone(),
                        text,
                        offset: None,
                    };
                    if error {
                        report.push_anchored(found, anchor);
                    } else {
                        report.warnings.push(Finding {
                            anchor: Some(anchor),
                            ..found
                        });
                    }
                }
                (None, true) if matches!(f.code, "missing-status" | "fallback-status") => {
                    report.push_anchored(found, at("graph", &f.role, ""));
                }
                (None, true) => report.errors.push(found),
                (None, false) => report.warnings.push(found),
            }
        }
        report
    })
}

/// Checks a stored workflow: the same checks as [`validate`] except those of
/// output schemas (they are CAS references by then).
pub fn validate_payload(w: &WorkflowPayload) -> Report {
    jsonata::on_big_stack(|| {
        let mut report = Report::default();
        check_graph(
            w.roles.keys().map(String::as_str).collect(),
            &w.conditions,
            &w.graph,
            &mut report,
        );
        report
    })
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// "; did you mean `x`?" when one of `candidates` is close to `word`.
fn suggestion<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    super::suggest::did_you_mean(word, candidates)
        .map(|g| format!("; did you mean `{g}`?"))
        .unwrap_or_default()
}

/// Index of the first unconditional transition, after which nothing is live.
fn live(transitions: &[Transition]) -> &[Transition] {
    match transitions.iter().position(|t| t.condition.is_none()) {
        Some(i) => &transitions[..=i],
        None => transitions,
    }
}

fn check_graph(
    roles: BTreeSet<&str>,
    conditions: &BTreeMap<String, ConditionDefinition>,
    graph: &BTreeMap<String, Vec<Transition>>,
    report: &mut Report,
) {
    if roles.is_empty() {
        report.error(
            "no-roles",
            "the workflow has no roles".into(),
            None,
            None,
            at("roles", "", ""),
        );
    }
    for role in &roles {
        if role.is_empty() || role.starts_with('$') || role.starts_with('-') {
            report.error(
                "invalid-role-name",
                format!(
                    "role name `{role}` is not allowed: names starting with `$` are reserved for `$START` and `$END`, and names starting with `-` would read as options on an agent's command line"
                ),
                Some(role),
                None,
                at("roles", role, ""),
            );
        }
    }
    if !graph.contains_key(START) {
        report.error(
            "no-start",
            "the graph has no `$START` entry, so no role can run first".into(),
            Some(START),
            None,
            at("graph", "", ""),
        );
    }
    for source in graph.keys() {
        if source == END {
            report.error(
                "unknown-source",
                "`$END` has transitions, but a thread stops at `$END`".into(),
                Some(END),
                None,
                at("graph", END, ""),
            );
        } else if source != START && !roles.contains(source.as_str()) {
            report.error(
                "unknown-source",
                format!(
                    "the graph has transitions for `{source}`, which is not a role{}",
                    suggestion(source, roles.iter().copied())
                ),
                Some(source),
                None,
                at("graph", source, ""),
            );
        }
    }
    for role in roles.iter().copied().chain([START]) {
        let has = graph.get(role).is_some_and(|t| !t.is_empty());
        if !has && (role != START || graph.contains_key(START)) {
            report.error(
                "no-transitions",
                format!("`{role}` has no outgoing transitions; end it with `{{role: $END, condition: null}}`"),
                Some(role),
                None,
                if role == START {
                    at("graph", START, "")
                } else {
                    at("roles", role, "")
                },
            );
        }
    }

    let mut used = BTreeSet::new();
    let mut unknown = Vec::new();
    for (source, transitions) in graph {
        let mut unconditional: Option<usize> = None;
        for (i, t) in transitions.iter().enumerate() {
            // Counted from #1, as docs/workflow.md does.
            let here = format!("`{source}` → `{}` (transition #{})", t.role, i + 1);
            if t.role == START {
                report.error(
                    "unknown-target",
                    format!("{here}: `$START` cannot be a target"),
                    Some(source),
                    t.condition.as_deref(),
                    at("graph", source, START),
                );
            } else if t.role != END && t.role != SUSPEND && !roles.contains(t.role.as_str()) {
                report.error(
                    "unknown-target",
                    format!(
                        "{here}: `{}` is neither a role nor `$END` (nor `$SUSPEND`){}",
                        t.role,
                        suggestion(&t.role, roles.iter().copied().chain([END, crate::SUSPEND]))
                    ),
                    Some(source),
                    t.condition.as_deref(),
                    at("graph", source, &t.role),
                );
            }
            if let Some(c) = &t.condition {
                if conditions.contains_key(c) {
                    used.insert(c.as_str());
                } else {
                    unknown.push((here.clone(), source.as_str(), c.as_str()));
                }
            }
            if let Some(first) = unconditional {
                report.warning(
                    "dead-transition",
                    format!(
                        "{here} can never be taken: transition #{} before it is unconditional",
                        first + 1
                    ),
                    Some(source),
                    t.condition.as_deref(),
                    at("graph", source, t.condition.as_deref().unwrap_or(&t.role)),
                );
            } else if t.condition.is_none() {
                unconditional = Some(i);
            }
            if let Some(p) = &t.prompt {
                for problem in template_problems(p) {
                    report.push_anchored(
                        finding(
                            problem_code(problem.kind, true),
                            format!("{here}: the edge prompt is invalid: {}", problem.message),
                            Some(source),
                            t.condition.as_deref(),
                        ),
                        Anchor {
                            section: "graph",
                            key: source.clone(),
                            text: p.clone(),
                            offset: problem.offset,
                        },
                    );
                }
            }
        }
        if !transitions.is_empty() && unconditional.is_none() {
            report.warning(
                "no-fallback",
                format!(
                    "`{source}` has no unconditional transition: when none of its conditions holds, the thread stops with an error"
                ),
                Some(source),
                None,
                at("graph", source, ""),
            );
        }
    }

    // An unknown condition is most likely a typo of a defined one that no
    // transition uses: say so on both findings.
    let unused: Vec<&str> = conditions
        .keys()
        .map(String::as_str)
        .filter(|c| !used.contains(c))
        .collect();
    let mut meant: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (here, source, c) in unknown {
        let guess = super::suggest::did_you_mean(c, unused.iter().copied())
            .or_else(|| super::suggest::did_you_mean(c, conditions.keys().map(String::as_str)));
        let hint = match guess {
            Some(g) => {
                meant
                    .entry(g)
                    .or_default()
                    .push(format!("{here} uses `{c}`"));
                format!("; did you mean `{g}`?")
            }
            None => String::new(),
        };
        report.error(
            "unknown-condition",
            format!("{here} uses condition `{c}`, which is not defined in `conditions`{hint}"),
            Some(source),
            Some(c),
            at("graph", source, c),
        );
    }

    for (name, cond) in conditions {
        for problem in expression_problems(cond.expression(), Some(&roles)) {
            let what = match problem.kind {
                ProblemKind::Syntax => "is not valid JSONata",
                _ => "can never work",
            };
            report.push_anchored(
                finding(
                    problem_code(problem.kind, false),
                    format!(
                        "condition `{name}` {what}: {} (expression: {})",
                        problem.message,
                        cond.expression()
                    ),
                    None,
                    Some(name),
                ),
                Anchor {
                    section: "conditions",
                    key: name.clone(),
                    text: cond.expression().to_string(),
                    offset: problem.offset,
                },
            );
        }
        if !used.contains(name.as_str()) {
            let typo = match meant.get(name.as_str()) {
                Some(uses) => format!(" ({}: probably meant to be this one)", uses.join("; ")),
                None => String::new(),
            };
            report.warning(
                "unused-condition",
                format!("condition `{name}` is not used by any transition{typo}"),
                None,
                Some(name),
                at("conditions", name, ""),
            );
        }
    }

    check_paths(&roles, graph, report);
}

/// Reachability over live edges: every role from `$START`, `$END` from `$START`.
fn check_paths(
    roles: &BTreeSet<&str>,
    graph: &BTreeMap<String, Vec<Transition>>,
    report: &mut Report,
) {
    if !graph.contains_key(START) {
        return;
    }
    // A thread that reaches `$SUSPEND` goes on from `$START` when resumed.
    let edges = |n: &str| -> Vec<&str> {
        graph
            .get(n)
            .map(|t| {
                live(t)
                    .iter()
                    .map(|t| match t.role.as_str() {
                        SUSPEND => START,
                        r => r,
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // Forward from $START.
    let mut reached = BTreeSet::from([START]);
    let mut queue = VecDeque::from([START]);
    while let Some(n) = queue.pop_front() {
        if n == END {
            continue;
        }
        for m in edges(n) {
            if reached.insert(m) {
                queue.push_back(m);
            }
        }
    }
    for role in roles {
        if !reached.contains(role) {
            report.error(
                "unreachable",
                format!("role `{role}` can never run: no path leads to it from `$START`"),
                Some(role),
                None,
                at("roles", role, ""),
            );
        }
    }
    // Backward from $END.
    let mut reverse: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for source in graph.keys() {
        for target in edges(source) {
            reverse.entry(target).or_default().push(source);
        }
    }
    let mut ends = BTreeSet::from([END]);
    let mut queue = VecDeque::from([END]);
    while let Some(n) = queue.pop_front() {
        for &m in reverse.get(n).into_iter().flatten() {
            if ends.insert(m) {
                queue.push_back(m);
            }
        }
    }
    if !ends.contains(START) {
        report.error(
            "no-end",
            "no path leads from `$START` to `$END`: every thread would run forever or fail".into(),
            Some(START),
            None,
            at("graph", START, ""),
        );
        return;
    }
    for role in roles {
        if reached.contains(role) && !ends.contains(role) {
            report.warning(
                "no-way-out",
                format!("once `{role}` runs, `$END` can never be reached"),
                Some(role),
                None,
                at("roles", role, ""),
            );
        }
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
