//! Phase 1 of a step: choosing the next role.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uwf_protocol::{END, Hash, ModeratorContext, START, WorkflowPayload};

use crate::jsonata::{self, Failure, Input};
use crate::template::{self, Segment};

/// What the moderator decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The current role (the last step's role), or [`START`].
    pub from: String,
    /// The next role, or [`END`].
    pub next: String,
    /// Index of the chosen transition in `graph[from]`.
    pub index: usize,
    /// The condition that held; `None` when the unconditional fallback was taken.
    pub condition: Option<String>,
    /// The chosen transition's edge prompt, rendered against the last step's
    /// output (`{}` at [`START`]); `None` when the edge has no prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

impl Decision {
    /// True when the thread is over (`next` is [`END`]).
    pub fn is_end(&self) -> bool {
        self.next == END
    }
}

/// Which expression of a workflow an error is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Subject {
    /// A named condition.
    Condition {
        /// Its name.
        name: String,
    },
    /// The prompt template of the edge `graph[role][index]`.
    EdgePrompt {
        /// The edge's target.
        target: String,
        /// Its index in `graph[role]`.
        index: usize,
    },
    /// A template rendered on its own ([`render_prompt`]).
    Template,
    /// An expression evaluated on its own ([`evaluate_expression`]).
    Expression,
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Condition { name } => write!(f, "condition `{name}`"),
            Self::EdgePrompt { target, index } => {
                // Counted from #1, as docs/workflow.md does.
                write!(f, "the prompt of transition #{} (to `{target}`)", index + 1)
            }
            Self::Template => f.write_str("the prompt template"),
            Self::Expression => f.write_str("the expression"),
        }
    }
}

/// `workflow `w`, role `r`: ` — or nothing for a template rendered alone.
fn site(workflow: &str, role: &str) -> String {
    match (workflow.is_empty(), role.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!("workflow `{workflow}`: "),
        (true, false) => format!("role `{role}`: "),
        (false, false) => format!("workflow `{workflow}`, role `{role}`: "),
    }
}

fn tried_list(tried: &[String]) -> String {
    if tried.is_empty() {
        "none".into()
    } else {
        tried
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Details of [`ModeratorError::Syntax`] and [`ModeratorError::Evaluation`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpressionError {
    /// The workflow's name (empty for [`render_prompt`]).
    pub workflow: String,
    /// The role whose transitions were evaluated (empty for [`render_prompt`]).
    pub role: String,
    /// The expression's place in the workflow.
    pub subject: Subject,
    /// The expression (or, for an unbalanced placeholder, the template).
    pub expression: String,
    /// The parser's or evaluator's message.
    pub message: String,
    /// Byte offset of a syntax error in `expression`, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
}

/// A line with a caret under byte `offset` of `expression`, to follow the
/// line `  expression: <expression>`; empty when there is no offset or the
/// expression spans several lines.
fn caret(expression: &str, offset: Option<usize>) -> String {
    match offset {
        Some(at) if !expression.contains('\n') && at <= expression.len() => {
            let width = expression
                .char_indices()
                .take_while(|(i, _)| *i < at)
                .count();
            format!("\n  {}^", " ".repeat("expression: ".len() + width))
        }
        _ => String::new(),
    }
}

/// Why the moderator could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum ModeratorError {
    /// The current role has no outgoing transitions.
    #[error("workflow `{workflow}`: role `{role}` has no outgoing transitions")]
    #[diagnostic(
        code(uwf::moderator::no_transitions),
        help(
            "add `graph.{role}` with at least one transition (end with `{{role: $END, condition: null}}`)"
        )
    )]
    NoTransitions {
        /// The workflow's name.
        workflow: String,
        /// The role (or `$START`).
        role: String,
    },

    /// A transition names a condition the workflow does not define.
    #[error(
        "workflow `{workflow}`, role `{role}`: transition #{} uses condition `{condition}`, which is not defined", .index + 1
    )]
    #[diagnostic(
        code(uwf::moderator::unknown_condition),
        help("define `conditions.{condition}` or fix the name in `graph.{role}`")
    )]
    UnknownCondition {
        /// The workflow's name.
        workflow: String,
        /// The role whose transition it is.
        role: String,
        /// The missing condition.
        condition: String,
        /// Index of the transition in `graph[role]`.
        index: usize,
    },

    /// An expression does not parse.
    #[error("{}{} is not valid JSONata: {}\n  expression: {}{}", site(&.0.workflow, &.0.role), .0.subject, .0.message, .0.expression, caret(&.0.expression, .0.offset))]
    #[diagnostic(
        code(uwf::moderator::syntax),
        help("fix the expression (see https://docs.jsonata.org)")
    )]
    Syntax(Box<ExpressionError>),

    /// An expression failed at run time.
    #[error("{}evaluating {} failed: {}\n  expression: {}", site(&.0.workflow, &.0.role), .0.subject, .0.message, .0.expression)]
    #[diagnostic(
        code(uwf::moderator::evaluation),
        help(
            "the expression runs against {{start, steps}} (a condition) or the last output (an edge prompt); \
             check the types it assumes against the recorded steps"
        )
    )]
    Evaluation(Box<ExpressionError>),

    /// No condition held and there is no unconditional fallback.
    #[error(
        "workflow `{workflow}`, role `{role}`: no transition matched (conditions tried: {})",
        tried_list(.tried)
    )]
    #[diagnostic(
        code(uwf::moderator::no_match),
        help(
            "end `graph.{role}` with an unconditional transition (`condition: null`, or `_` in a status map) \
             so that some transition always applies"
        )
    )]
    NoMatch {
        /// The workflow's name.
        workflow: String,
        /// The role.
        role: String,
        /// The conditions evaluated, in order; all were false.
        tried: Vec<String>,
    },

    /// A decision was asked of a view of a thread's last steps
    /// ([`crate::thread::load_recent`]) whose workflow reads further back.
    #[error(
        "workflow `{workflow}`: a decision needs more of the thread than the {loaded} of its {len} steps loaded"
    )]
    #[diagnostic(
        code(uwf::moderator::history_not_loaded),
        help("this is a bug in uwf: the thread should have been loaded whole; please report it")
    )]
    HistoryNotLoaded {
        /// The workflow's name.
        workflow: String,
        /// Steps loaded.
        loaded: usize,
        /// Steps in the thread.
        len: usize,
    },
}

impl ModeratorError {
    /// The condition the error is about, if any.
    pub fn condition(&self) -> Option<&str> {
        match self {
            Self::UnknownCondition { condition, .. } => Some(condition),
            Self::Syntax(e) | Self::Evaluation(e) => match &e.subject {
                Subject::Condition { name } => Some(name),
                _ => None,
            },
            _ => None,
        }
    }

    /// The role whose transitions were being evaluated (empty for a template
    /// rendered alone).
    pub fn role(&self) -> &str {
        match self {
            Self::NoTransitions { role, .. }
            | Self::UnknownCondition { role, .. }
            | Self::NoMatch { role, .. } => role,
            Self::Syntax(e) | Self::Evaluation(e) => &e.role,
            Self::HistoryNotLoaded { .. } => "",
        }
    }

    fn from_failure(
        failure: Failure,
        workflow: &str,
        role: &str,
        subject: Subject,
        expression: &str,
    ) -> Self {
        let detail = |message, offset| {
            Box::new(ExpressionError {
                workflow: workflow.into(),
                role: role.into(),
                subject,
                expression: expression.into(),
                message,
                offset,
            })
        };
        match failure {
            Failure::Syntax(m, at) => Self::Syntax(detail(m, at)),
            Failure::Runtime(m) => Self::Evaluation(detail(m, None)),
        }
    }

    /// Re-labels an error of a template rendered inside a workflow.
    fn placed(mut self, workflow: &str, role: &str, subject: Subject) -> Self {
        if let Self::Syntax(e) | Self::Evaluation(e) = &mut self {
            e.workflow = workflow.into();
            e.role = role.into();
            e.subject = subject;
        }
        self
    }
}

/// Chooses the next role of a thread.
///
/// The current role is the last step's role, or [`START`] before the first
/// step. Its transitions (`workflow.graph[current]`) are tried in order: the
/// first whose condition is truthy under JSONata boolean casting wins, and a
/// transition without a condition always matches. Each condition is evaluated
/// against `ctx` (`{start, steps}`); the winning edge's prompt is rendered
/// against the last step's output ([`render_prompt`]).
///
/// ```
/// use uwf_moderator::evaluate;
/// use uwf_protocol::{ModeratorContext, StartNodePayload, StepContext, WorkflowPayload};
/// use serde_json::json;
///
/// let workflow: WorkflowPayload = serde_json::from_value(json!({
///     "name": "review", "description": "",
///     "roles": { "dev": { "description": "", "systemPrompt": "", "outputSchema": "0000000000000" } },
///     "conditions": { "again": "steps[-1].output.retry = true and $count(steps) < 3" },
///     "graph": {
///         "$START": [{ "role": "dev", "condition": null }],
///         "dev": [
///             { "role": "dev", "condition": "again", "prompt": "Try again: {{reason}}" },
///             { "role": "$END", "condition": null }
///         ]
///     }
/// }))?;
/// let start = StartNodePayload { workflow: uwf_protocol::Hash::from_u64(0), prompt: "go".into(), parent_state: None };
/// let step = StepContext {
///     role: "dev".into(),
///     output: json!({ "retry": true, "reason": "tests fail" }),
///     detail: uwf_protocol::Hash::from_u64(1),
///     agent: "a".into(),
/// };
/// let d = evaluate(&workflow, &ModeratorContext { start, steps: vec![step] })?;
/// assert_eq!((d.next.as_str(), d.condition.as_deref()), ("dev", Some("again")));
/// assert_eq!(d.prompt.as_deref(), Some("Try again: tests fail"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn evaluate(
    workflow: &WorkflowPayload,
    ctx: &ModeratorContext,
) -> Result<Decision, ModeratorError> {
    let from = ctx.steps.last().map_or(START, |s| s.role.as_str());
    jsonata::on_big_stack(|| evaluate_here(workflow, &Source::Built(ctx), from))
}

/// [`evaluate`] over a thread's loaded steps, without first copying them
/// into a [`ModeratorContext`] (one is built only if an edge prompt needs
/// rendering): what `ThreadView::decide` uses. The steps must be as loaded
/// from the store: their conversion is kept for the next decision on this
/// thread ([`KeptSteps`]).
///
/// `earlier` steps came before `steps` and were not loaded: the caller
/// checked that the workflow reads no further back than `steps`
/// ([`crate::needs`]), and the document holds a placeholder for each.
pub(crate) fn evaluate_steps(
    workflow: &WorkflowPayload,
    start: &uwf_protocol::StartNodePayload,
    steps: &[crate::thread::LoadedStep],
    earlier: usize,
    from_start: bool,
) -> Result<Decision, ModeratorError> {
    jsonata::on_big_stack(|| {
        let from = from_of(steps, from_start);
        let source = Source::Steps {
            start,
            steps,
            earlier,
            built: std::cell::OnceCell::new(),
            prepared: None,
            kept: true,
        };
        evaluate_here(workflow, &source, from)
    })
}

/// The role whose transitions are tried: the last step's, or [`START`].
fn from_of(steps: &[crate::thread::LoadedStep], from_start: bool) -> &str {
    match (from_start, steps.last()) {
        (false, Some(s)) => s.payload.record.role.as_str(),
        _ => START,
    }
}

/// [`evaluate_steps`] on the current thread, for callers that already run
/// on the big stack and decide many times (`crate::replay`), with the
/// thread's steps converted once for all its prefixes (`prepared` covers
/// at least `steps`, from the same thread) or, without, each time.
pub(crate) fn evaluate_prepared(
    workflow: &WorkflowPayload,
    start: &uwf_protocol::StartNodePayload,
    steps: &[crate::thread::LoadedStep],
    from_start: bool,
    prepared: Option<&Prepared>,
) -> Result<Decision, ModeratorError> {
    let from = from_of(steps, from_start);
    let source = Source::Steps {
        start,
        steps,
        earlier: 0,
        built: std::cell::OnceCell::new(),
        prepared,
        kept: false,
    };
    evaluate_here(workflow, &source, from)
}

/// Where a decision's context comes from.
enum Source<'a> {
    /// A context already built.
    Built(&'a ModeratorContext),
    /// A thread's loaded steps; the context is built only when needed.
    Steps {
        start: &'a uwf_protocol::StartNodePayload,
        steps: &'a [crate::thread::LoadedStep],
        /// Steps before `steps` that were not loaded ([`tail_input`]).
        earlier: usize,
        built: std::cell::OnceCell<ModeratorContext>,
        /// The steps already converted for JSONata (at least `steps`, in
        /// the same order): the document is their prefix.
        prepared: Option<&'a Prepared>,
        /// Whether the steps are as loaded from the store, so that this
        /// thread's [`KeptSteps`] may serve and keep them.
        kept: bool,
    },
}

impl Source<'_> {
    /// The last step's output, without building the context.
    fn last_output(&self) -> Option<&Value> {
        match self {
            Source::Built(c) => c.steps.last().map(|s| &s.output),
            Source::Steps { steps, .. } => steps.last().map(|s| &s.output),
        }
    }

    fn context(&self) -> &ModeratorContext {
        match self {
            Source::Built(c) => c,
            Source::Steps {
                start,
                steps,
                built,
                ..
            } => built.get_or_init(|| crate::thread::context_of(start, steps)),
        }
    }

    fn input(&self) -> Result<Input, Failure> {
        match self {
            Source::Built(c) => context_input(c),
            Source::Steps {
                start,
                steps,
                earlier,
                ..
            } if *earlier > 0 => tail_input(start, steps, *earlier),
            Source::Steps {
                prepared: Some(p),
                steps,
                ..
            } => p.input(steps.len()),
            Source::Steps {
                start,
                steps,
                kept: true,
                ..
            } => kept_input(start, steps),
            Source::Steps { start, steps, .. } => loaded_input(start, steps),
        }
    }
}

/// The document conditions see for a thread's loaded steps.
pub(crate) fn loaded_input(
    start: &uwf_protocol::StartNodePayload,
    steps: &[crate::thread::LoadedStep],
) -> Result<Input, Failure> {
    steps_input(start, loaded_parts(steps))
}

/// The document conditions see for a thread of `earlier` unloaded steps
/// followed by `steps`: each unloaded step is an empty object. Sound only
/// for a workflow that reads the number of steps and no step before
/// `steps` ([`crate::needs`]): such a decision cannot tell the
/// placeholders from the steps, and converts only the steps loaded.
pub(crate) fn tail_input(
    start: &uwf_protocol::StartNodePayload,
    steps: &[crate::thread::LoadedStep],
    earlier: usize,
) -> Result<Input, Failure> {
    let start = start_value(start)?;
    let placeholder = uwf_jsonata::Value::object(uwf_jsonata::object_with_capacity(0));
    let mut values = Vec::with_capacity(earlier + steps.len());
    values.resize(earlier, placeholder);
    let mut convert = Converter::default();
    for part in loaded_parts(steps) {
        values.push(convert.step(&part)?);
    }
    let mut top = uwf_jsonata::object_with_capacity(2);
    top.insert("start".to_owned(), start);
    top.insert("steps".to_owned(), uwf_jsonata::Value::array(values));
    Input::from_sorted(uwf_jsonata::Value::object(top))
}

/// What [`steps_input`] reads of each loaded step.
fn loaded_parts(
    steps: &[crate::thread::LoadedStep],
) -> impl ExactSizeIterator<Item = StepParts<'_>> {
    steps.iter().map(|s| StepParts {
        agent: s.payload.record.agent.as_str(),
        detail: s.payload.record.detail,
        output: &s.output,
        output_hash: Some(s.payload.record.output),
        role: s.payload.record.role.as_str(),
    })
}

/// A thread's start and steps converted once for JSONata, so that the
/// document of any prefix of it is built without converting a step again
/// (values are reference counted): what `crate::replay` decides at every
/// head of a thread from.
pub(crate) struct Prepared {
    start: uwf_jsonata::Value,
    steps: Vec<uwf_jsonata::Value>,
}

impl Prepared {
    /// Converts `start` and `steps` as [`steps_input`] does.
    pub(crate) fn new(
        start: &uwf_protocol::StartNodePayload,
        steps: &[crate::thread::LoadedStep],
    ) -> Result<Self, Failure> {
        prepare(start, loaded_parts(steps))
    }

    /// The document of the first `k` steps: the same as [`steps_input`]
    /// over them.
    pub(crate) fn input(&self, k: usize) -> Result<Input, Failure> {
        let mut top = uwf_jsonata::object_with_capacity(2);
        top.insert("start".to_owned(), self.start.clone());
        top.insert(
            "steps".to_owned(),
            uwf_jsonata::Value::array(self.steps[..k.min(self.steps.len())].to_vec()),
        );
        Input::from_sorted(uwf_jsonata::Value::object(top))
    }
}

/// The decision of a thread that is resumed after it reached `$SUSPEND`:
/// the transitions of [`START`] are tried against the whole thread (so a
/// `$START` status map's `resume` route, compiled to a condition that holds
/// once there are steps, wins over `new`), and the edge prompt is rendered
/// against the last step's output.
pub fn evaluate_resume(
    workflow: &WorkflowPayload,
    ctx: &ModeratorContext,
) -> Result<Decision, ModeratorError> {
    jsonata::on_big_stack(|| evaluate_here(workflow, &Source::Built(ctx), START))
}

fn evaluate_here(
    workflow: &WorkflowPayload,
    source: &Source<'_>,
    from: &str,
) -> Result<Decision, ModeratorError> {
    let name = workflow.name.as_str();
    let transitions = workflow
        .graph
        .get(from)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ModeratorError::NoTransitions {
            workflow: name.into(),
            role: from.into(),
        })?;

    // Serialized once, lazily: a workflow whose first transition is
    // unconditional never needs it.
    let mut input: Option<Input> = None;
    let mut tried = Vec::new();
    for (index, t) in transitions.iter().enumerate() {
        if let Some(cname) = &t.condition {
            let cond =
                workflow
                    .conditions
                    .get(cname)
                    .ok_or_else(|| ModeratorError::UnknownCondition {
                        workflow: name.into(),
                        role: from.into(),
                        condition: cname.clone(),
                        index,
                    })?;
            let expr = cond.expression();
            let subject = || Subject::Condition {
                name: cname.clone(),
            };
            let fail = |f| ModeratorError::from_failure(f, name, from, subject(), expr);
            let inp = match &input {
                Some(i) => i,
                None => input.insert(source.input().map_err(fail)?),
            };
            let compiled = jsonata::compile_pure(expr).map_err(fail)?;
            if !jsonata::truthy_compiled(&compiled, inp).map_err(fail)? {
                tried.push(cname.clone());
                continue;
            }
        }
        let prompt = match &t.prompt {
            None => None,
            Some(p) => {
                let empty = Value::Object(serde_json::Map::new());
                let last = source.last_output().unwrap_or(&empty);
                let subject = || Subject::EdgePrompt {
                    target: t.role.clone(),
                    index,
                };
                let text = render_here(p, last, || serde_json::to_value(&source.context().steps))
                    .map_err(|e| e.placed(name, from, subject()))?;
                // Upstream's moderator refused an edge prompt that rendered
                // to nothing (all its variables missing): the next agent
                // would get no instruction.
                if text.trim().is_empty() {
                    return Err(ModeratorError::Evaluation(Box::new(ExpressionError {
                        workflow: name.into(),
                        role: from.into(),
                        subject: subject(),
                        expression: p.clone(),
                        message: "the edge prompt rendered to an empty text: the previous output lacks the fields it uses".into(),
                        offset: None,
                    })));
                }
                Some(text)
            }
        };
        return Ok(Decision {
            from: from.into(),
            next: t.role.clone(),
            index,
            condition: t.condition.clone(),
            prompt,
        });
    }
    Err(ModeratorError::NoMatch {
        workflow: name.into(),
        role: from.into(),
        tried,
    })
}

/// The context conditions see, prepared for evaluation: the same document
/// as `ModeratorContext` serialises to, with every object's members in
/// code point order, converted in one pass (the steps directly, without an
/// intermediate JSON copy: this is most of a decision's cost on a long
/// thread).
fn context_input(ctx: &ModeratorContext) -> Result<Input, Failure> {
    steps_input(
        &ctx.start,
        ctx.steps.iter().map(|s| StepParts {
            agent: s.agent.as_str(),
            detail: s.detail,
            output: &s.output,
            output_hash: None,
            role: s.role.as_str(),
        }),
    )
}

/// What [`steps_input`] reads of a step.
struct StepParts<'a> {
    agent: &'a str,
    detail: Hash,
    output: &'a Value,
    /// The output node, when known: steps with the same output node share
    /// one converted output.
    output_hash: Option<Hash>,
    role: &'a str,
}

/// [`context_input`] from the parts of each step.
///
/// This conversion is most of a decision's cost on a long thread
/// (docs/performance.md), so what repeats is converted once and shared
/// (values are immutable and reference counted): the few distinct roles
/// and agents, and outputs that are the same node.
fn steps_input<'a>(
    start: &uwf_protocol::StartNodePayload,
    steps: impl ExactSizeIterator<Item = StepParts<'a>>,
) -> Result<Input, Failure> {
    let n = steps.len();
    prepare(start, steps)?.input(n)
}

/// The start and each step converted for [`steps_input`].
fn prepare<'a>(
    start: &uwf_protocol::StartNodePayload,
    steps: impl ExactSizeIterator<Item = StepParts<'a>>,
) -> Result<Prepared, Failure> {
    let start = start_value(start)?;
    let mut convert = Converter::default();
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        out.push(convert.step(&step)?);
    }
    Ok(Prepared { start, steps: out })
}

/// The StartNode as conditions see it.
fn start_value(start: &uwf_protocol::StartNodePayload) -> Result<uwf_jsonata::Value, Failure> {
    let start = serde_json::to_value(start)
        .map_err(|e| Failure::Runtime(format!("cannot serialize the context: {e}")))?;
    crate::jsonata::sorted_value(&start, 1)
}

/// Converts steps one by one, sharing what repeats between them: the few
/// distinct roles and agents, and outputs that are the same node (values
/// are immutable and reference counted).
#[derive(Default)]
struct Converter {
    // The hasher of JSONata's objects: std's SipHash costs more than the
    // look-ups save on a long thread.
    texts: std::collections::HashMap<Box<str>, uwf_jsonata::Value, uwf_jsonata::Hasher>,
    outputs: std::collections::HashMap<Hash, uwf_jsonata::Value, uwf_jsonata::Hasher>,
}

impl Converter {
    fn text(&mut self, s: &str) -> uwf_jsonata::Value {
        if let Some(v) = self.texts.get(s) {
            return v.clone();
        }
        let v = uwf_jsonata::Value::str(s);
        self.texts.insert(s.into(), v.clone());
        v
    }

    /// One step as conditions see it: `{agent, detail, output, role}`.
    fn step(&mut self, step: &StepParts<'_>) -> Result<uwf_jsonata::Value, Failure> {
        use crate::jsonata::sorted_value;
        use uwf_jsonata::Value as JValue;
        let output = match step.output_hash {
            Some(h) => match self.outputs.get(&h) {
                Some(v) => v.clone(),
                None => {
                    let v = sorted_value(step.output, 3)?;
                    self.outputs.insert(h, v.clone());
                    v
                }
            },
            None => sorted_value(step.output, 3)?,
        };
        let detail = step.detail.to_array();
        // Base32 is ASCII: this never fails.
        let detail = std::str::from_utf8(&detail).map_or(JValue::Undefined, JValue::str);
        // StepContext's members in code point order: agent, detail, output, role.
        let mut o = uwf_jsonata::object_with_capacity(4);
        o.insert("agent".to_owned(), self.text(step.agent));
        o.insert("detail".to_owned(), detail);
        o.insert("output".to_owned(), output);
        o.insert("role".to_owned(), self.text(step.role));
        Ok(JValue::object(o))
    }
}

/// The steps of the thread this OS thread last decided on, converted for
/// JSONata and kept for its next decision: `uwf thread run` and a worker
/// decide at every new head of a thread, which is the last head and one
/// step more, so a decision converts the steps added since the last one
/// instead of the whole thread (docs/performance.md, "History"). Values are
/// reference counted, not shareable across threads, hence one per thread;
/// evaluations run on the calling thread ([`jsonata::on_big_stack`]).
#[derive(Default)]
struct KeptSteps {
    /// The StepNodes converted, in order: a thread's steps up to a StepNode
    /// are named by its hash, so `steps` is the start of any chain whose
    /// step at the same place has the same hash.
    hashes: Vec<Hash>,
    /// The converted steps, shared with the documents built from them.
    values: std::rc::Rc<Vec<uwf_jsonata::Value>>,
    /// The deepest of `values`.
    depth: u32,
    convert: Converter,
}

std::thread_local! {
    static KEPT: std::cell::RefCell<Option<KeptSteps>> = const { std::cell::RefCell::new(None) };
}

/// The document conditions see for a thread's loaded steps, as
/// [`loaded_input`] builds it, converting only the steps this thread has
/// not converted for an earlier decision on the same chain ([`KeptSteps`]).
/// The steps must be as loaded from the store: what a StepNode's hash
/// names ([`crate::thread::load`] checks it).
fn kept_input(
    start: &uwf_protocol::StartNodePayload,
    steps: &[crate::thread::LoadedStep],
) -> Result<Input, Failure> {
    use uwf_jsonata::Value as JValue;
    let start = start_value(start)?;
    let steps_value = KEPT.with(|cell| -> Result<JValue, Failure> {
        let mut slot = cell.borrow_mut();
        let kept = slot.get_or_insert_with(KeptSteps::default);
        let n = steps.len();
        let shared = kept.hashes.len().min(n);
        let same_chain = shared == 0 || kept.hashes[shared - 1] == steps[shared - 1].hash;
        if !same_chain || kept.hashes.is_empty() {
            *kept = KeptSteps::default();
        }
        if n < kept.hashes.len() {
            // An earlier head of the kept chain: its document without
            // forgetting the longer one.
            return Ok(JValue::array(kept.values[..n].to_vec()));
        }
        let fresh = &steps[kept.hashes.len()..];
        if !fresh.is_empty() {
            // Unique unless a document built from it is still alive, which
            // the evaluator does not allow (it drops its scopes); copied then.
            let values = std::rc::Rc::make_mut(&mut kept.values);
            values.reserve(fresh.len());
            for (part, s) in loaded_parts(fresh).zip(fresh) {
                let v = kept.convert.step(&part)?;
                kept.depth = kept.depth.max(v.depth());
                values.push(v);
                kept.hashes.push(s.hash);
            }
        }
        Ok(JValue::Array(
            std::rc::Rc::clone(&kept.values),
            0,
            1 + kept.depth,
        ))
    })?;
    let mut top = uwf_jsonata::object_with_capacity(2);
    top.insert("start".to_owned(), start);
    top.insert("steps".to_owned(), steps_value);
    Input::from_sorted(uwf_jsonata::Value::object(top))
}

/// One transition of the current role, as [`explain`] evaluated it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransitionReport {
    /// Index in `graph[from]`, counted from 0 (the position in the list).
    pub index: usize,
    /// The transition's number, counted from 1: the `#N` that `why`
    /// (`Why::transition`), validation messages and the graph's JSON use.
    pub transition: usize,
    /// The transition's target (a role or `$END`).
    pub role: String,
    /// The condition's name; `None` for an unconditional transition.
    pub condition: Option<String>,
    /// The condition's expression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// What the expression evaluated to; absent when it was `undefined`,
    /// failed, or there is no condition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Whether the transition applies: the value's boolean cast, or `true`
    /// for an unconditional transition; `false` when evaluation failed.
    pub holds: bool,
    /// Why evaluating the condition failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether this is the transition [`evaluate`] takes.
    pub taken: bool,
}

/// Every transition of the current role with its condition's value, and the
/// moderator's decision: what `uwf thread next --explain` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The current role (the last step's role), or [`START`].
    pub from: String,
    /// The transitions of `from`, in order, each evaluated (also those after
    /// the one taken, so that authors see every condition's value).
    pub transitions: Vec<TransitionReport>,
}

/// Evaluates every condition of the current role against `ctx` without
/// stopping at the first that holds. [`evaluate`] remains the authority on
/// the decision (with its prompt and errors); the transition it takes is the
/// first one whose `holds` is true, and is marked `taken`.
pub fn explain(workflow: &WorkflowPayload, ctx: &ModeratorContext) -> Explanation {
    jsonata::on_big_stack(|| explain_here(workflow, ctx))
}

/// [`explain`] on the current thread (see [`evaluate_prepared`]).
pub(crate) fn explain_here(workflow: &WorkflowPayload, ctx: &ModeratorContext) -> Explanation {
    let from = ctx.steps.last().map_or(START, |s| s.role.as_str());
    let input = context_input(ctx);
    let mut transitions = Vec::new();
    let mut taken = false;
    for (index, t) in workflow.graph.get(from).into_iter().flatten().enumerate() {
        let mut report = TransitionReport {
            index,
            transition: index + 1,
            role: t.role.clone(),
            condition: t.condition.clone(),
            expression: None,
            value: None,
            holds: true,
            error: None,
            taken: false,
        };
        if let Some(cname) = &t.condition {
            report.holds = false;
            match workflow.conditions.get(cname) {
                None => report.error = Some(format!("condition `{cname}` is not defined")),
                Some(cond) => {
                    let expr = cond.expression();
                    report.expression = Some(expr.to_string());
                    let outcome = input.as_ref().map_err(Clone::clone).and_then(|inp| {
                        // Evaluated once: the value shown and its boolean cast.
                        let v = jsonata::evaluated(&jsonata::compile_pure(expr)?, inp)?;
                        Ok((v.to_json(), v.is_truthy()))
                    });
                    match outcome {
                        Ok((value, holds)) => {
                            report.value = value;
                            report.holds = holds;
                        }
                        Err(f) => report.error = Some(f.message().to_string()),
                    }
                }
            }
        }
        if report.holds && !taken {
            report.taken = true;
            taken = true;
        }
        let failed = report.error.is_some();
        transitions.push(report);
        // Past a failure `evaluate` stops with an error: nothing later is taken.
        if failed && !taken {
            taken = true;
        }
    }
    Explanation {
        from: from.into(),
        transitions,
    }
}

/// Evaluates a free-standing expression against `input` (`None`:
/// JSONata's `undefined`) with the moderator's limits and key order, for
/// `uwf eval`. Unlike a workflow's conditions, any builtin may be used.
pub fn evaluate_expression(
    expression: &str,
    input: Option<&Value>,
) -> Result<Option<Value>, ModeratorError> {
    evaluate_free(expression, input, Input::new)
}

/// Like [`evaluate_expression`], but the members of `input`'s objects keep
/// the order they have in `input`, as the reference JSONata sees a
/// document (`$keys({"b":1,"a":2})` of such an input is `["b","a"]`): for
/// `uwf eval --input`, whose JSON is not a thread. A thread's context is
/// sorted by key so that every process sees the same order; objects an
/// expression builds keep the order it builds them in, either way.
pub fn evaluate_document(
    expression: &str,
    input: Option<&Value>,
) -> Result<Option<Value>, ModeratorError> {
    evaluate_free(expression, input, Input::as_given)
}

/// A free-standing expression against `input`, prepared by `prepare`.
fn evaluate_free(
    expression: &str,
    input: Option<&Value>,
    prepare: fn(&Value) -> Result<Input, Failure>,
) -> Result<Option<Value>, ModeratorError> {
    jsonata::on_big_stack(|| {
        let fail = |f| ModeratorError::from_failure(f, "", "", Subject::Expression, expression);
        let compiled = jsonata::compile(expression).map_err(fail)?;
        let input = input.map(prepare).transpose().map_err(fail)?;
        jsonata::value_compiled(&compiled, input.as_ref()).map_err(fail)
    })
}

/// Renders an edge prompt template against the last step's output.
///
/// `{{ expr }}` placeholders are JSONata expressions evaluated with
/// `last_output` as input, so `{{comments}}` or `{{ $count(files) }}` work.
/// A string result is inserted as is, `undefined` and `null` as nothing, and
/// anything else as compact JSON (object keys sorted). Text outside
/// placeholders is literal. A `{{` without its `}}` is a
/// [`ModeratorError::Syntax`] error.
///
/// ```
/// use serde_json::json;
/// let out = uwf_moderator::render_prompt(
///     "{{summary}} — {{ $count(files) }} files: {{files}}{{missing}}",
///     &json!({ "summary": "Fixed it", "files": ["a.rs", "b.rs"] }),
/// )?;
/// assert_eq!(out, r#"Fixed it — 2 files: ["a.rs","b.rs"]"#);
/// # Ok::<(), uwf_moderator::ModeratorError>(())
/// ```
pub fn render_prompt(template: &str, last_output: &Value) -> Result<String, ModeratorError> {
    jsonata::on_big_stack(|| render_here(template, last_output, || Ok(Value::Array(Vec::new()))))
}

/// Renders `template` against `last_output`; `steps` gives the thread's
/// steps as JSON, asked for only when the template may use them (`$last`,
/// `$first`): on a long thread that copy costs more than the rendering.
fn render_here(
    template: &str,
    last_output: &Value,
    steps: impl FnOnce() -> Result<Value, serde_json::Error>,
) -> Result<String, ModeratorError> {
    let fail = |f, expression: &str| {
        ModeratorError::from_failure(f, "", "", Subject::Template, expression)
    };
    let segments =
        template::parse(template).map_err(|m| fail(Failure::Syntax(m, None), template))?;
    // The steps are converted only for a template that may look at them.
    let steps = if template.contains("$last") || template.contains("$first") {
        steps().map_err(|e| {
            fail(
                Failure::Runtime(format!("cannot serialize the steps: {e}")),
                template,
            )
        })?
    } else {
        Value::Array(Vec::new())
    };
    let options = jsonata::prompt_options(steps);
    let mut input = None;
    let mut out = String::with_capacity(template.len());
    for seg in segments {
        match seg {
            Segment::Text(t) => out.push_str(t),
            Segment::Expr(expr, _) => {
                let inp = match &input {
                    Some(i) => i,
                    None => input.insert(Input::new(last_output).map_err(|f| fail(f, expr))?),
                };
                let compiled = jsonata::compile_pure(expr).map_err(|f| fail(f, expr))?;
                match jsonata::value_with(&compiled, Some(inp), &options)
                    .map_err(|f| fail(f, expr))?
                {
                    None | Some(Value::Null) => {}
                    Some(Value::String(s)) => out.push_str(&s),
                    Some(other) => out.push_str(&other.to_string()),
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "eval_tests.rs"]
mod tests;
