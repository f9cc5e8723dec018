//! `uwf suite`: run a workflow on a set of cases, several times each, score
//! every finished thread with judges, store the result as a CAS node, and
//! compare two stored runs with an honest uncertainty.
//!
//! Each case × repetition runs as an ordinary thread, by a child `uwf`
//! process (`thread start`, then `thread run`) whose working directory is a
//! fresh temporary directory holding a copy of the case's fixture: agents
//! inherit uwf's working directory, and a child process is the one way to
//! give each run its own without a new engine option. The threads are then
//! read through the engine exactly as every reader does.
//!
//! See docs/eval.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uwf_cas::{Cas, Hash, MemStore};
use uwf_moderator::ModeratorError;
use uwf_moderator::thread::{self, ThreadView};
use uwf_protocol::ThreadId;

use crate::error::EngineError;
use crate::step::{Status, status};
use crate::{CancelToken, Engine};

/// The title of the JSON Schema of a stored suite run (its CAS type).
pub const RUN_TITLE: &str = "SuiteRun";

/// How long a command judge may take unless the suite says otherwise.
pub const DEFAULT_JUDGE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a case run may take unless the suite says otherwise.
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// How many bootstrap resamples [`diff`] draws per case and judge.
pub const RESAMPLES: usize = 2000;

/// The seed of [`diff`]'s bootstrap: fixed, so that a diff of the same two
/// runs prints the same intervals every time.
pub const SEED: u64 = 0x5EED_0022;

/// What a stored text of a child's stderr or a judge's output keeps (its end).
const TAIL: usize = 2000;

/// A suite file, as written (YAML).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuiteFile {
    /// A name for the suite (default: the file name without `.suite.yaml`).
    #[serde(default)]
    pub name: Option<String>,
    /// What the suite is for.
    #[serde(default)]
    pub description: Option<String>,
    /// The workflow: a YAML file (relative to the suite file), a registered
    /// name or a Workflow hash.
    pub workflow: String,
    /// The cases.
    pub cases: Vec<CaseSpec>,
    /// How many times each case runs.
    #[serde(default = "one")]
    pub repetitions: u32,
    /// Bounds of each run.
    #[serde(default)]
    pub limits: Limits,
    /// The agent command line of every run (`--agent`); `{suite}` is
    /// replaced by the suite file's directory.
    #[serde(default)]
    pub agent: Option<String>,
    /// The judges.
    #[serde(default)]
    pub judges: Vec<JudgeSpec>,
}

fn one() -> u32 {
    1
}

/// One case of a suite.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CaseSpec {
    /// Its name, unique in the suite.
    pub name: String,
    /// The task of its threads.
    pub prompt: String,
    /// A directory (relative to the suite file) copied into each run's
    /// fresh working directory.
    #[serde(default)]
    pub fixture: Option<PathBuf>,
    /// Variables for the judges (`vars` in a JSONata judge's input).
    #[serde(default)]
    pub vars: BTreeMap<String, Value>,
    /// The agent of this case's runs, instead of the suite's.
    #[serde(default)]
    pub agent: Option<String>,
}

/// Bounds of each run.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Limits {
    /// `thread run --max-steps`.
    #[serde(default = "hundred")]
    pub max_steps: usize,
    /// The wall-clock bound of one run (`90s`, `10m`).
    #[serde(default)]
    pub timeout: Option<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: hundred(),
            timeout: None,
        }
    }
}

fn hundred() -> usize {
    100
}

fn unit() -> f64 {
    1.0
}

/// A judge, by kind.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum JudgeSpec {
    /// `<command> <workdir> <thread-id>` (through `sh -c`, in the suite
    /// file's directory) prints `{"score": 0..1, "data": …}`.
    Command {
        /// Its name, unique in the suite.
        name: String,
        /// Its weight in the total.
        #[serde(default = "unit")]
        weight: f64,
        /// The command line.
        command: String,
        /// How long it may take (default 60s).
        #[serde(default)]
        timeout: Option<String>,
    },
    /// A JSONata expression over `{start, steps, vars, case, metrics}`:
    /// a boolean scores 1 or 0, a number is clamped to 0..1.
    Jsonata {
        /// Its name, unique in the suite.
        name: String,
        /// Its weight in the total.
        #[serde(default = "unit")]
        weight: f64,
        /// The expression.
        expression: String,
    },
    /// A model asked to score the thread against a rubric: it answers
    /// `{"score": 0..1, "reason": "…"}`.
    Llm {
        /// Its name, unique in the suite.
        name: String,
        /// Its weight in the total.
        #[serde(default = "unit")]
        weight: f64,
        /// What a good thread is, in words.
        rubric: String,
        /// A model alias of config.yaml (default: `modelOverrides.judge`,
        /// a model named `judge`, then `defaultModel`).
        #[serde(default)]
        model: Option<String>,
    },
    /// The fraction of steps whose output satisfies its role's output
    /// schema (or the stricter schema given here for the role).
    Schema {
        /// Its name, unique in the suite.
        name: String,
        /// Its weight in the total.
        #[serde(default = "unit")]
        weight: f64,
        /// Per role, a JSON Schema used instead of the workflow's.
        #[serde(default)]
        schemas: BTreeMap<String, Value>,
    },
}

impl JudgeSpec {
    /// Its name.
    pub fn name(&self) -> &str {
        match self {
            Self::Command { name, .. }
            | Self::Jsonata { name, .. }
            | Self::Schema { name, .. }
            | Self::Llm { name, .. } => name,
        }
    }

    /// Its weight.
    pub fn weight(&self) -> f64 {
        match self {
            Self::Command { weight, .. }
            | Self::Jsonata { weight, .. }
            | Self::Schema { weight, .. }
            | Self::Llm { weight, .. } => *weight,
        }
    }

    /// `command`, `jsonata` or `schema`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Command { .. } => "command",
            Self::Jsonata { .. } => "jsonata",
            Self::Schema { .. } => "schema",
            Self::Llm { .. } => "llm",
        }
    }
}

/// What is wrong with a suite or a stored run.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The suite file cannot be read.
    #[error("cannot read the suite {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The suite file is not a valid suite.
    #[error("the suite {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// A node is not a stored suite run.
    #[error("{hash} is not a suite run (its type is not {RUN_TITLE})")]
    NotARun {
        /// The node.
        hash: Hash,
    },
    /// A stored suite run cannot be read back.
    #[error("the suite run {hash} cannot be read: {message}")]
    BadRun {
        /// The node.
        hash: Hash,
        /// Why.
        message: String,
    },
    /// `uwf` was asked to stop (the cancel token was set): the running
    /// child was stopped and no result was stored.
    #[error("the suite was interrupted; no result was stored")]
    Interrupted,
    /// Queuing a suite, or judging a queued one, is not possible.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Preparing a run's working directory failed.
    #[error("cannot prepare a working directory: {0}")]
    Workdir(std::io::Error),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl From<uwf_cas::CasError> for SuiteError {
    fn from(e: uwf_cas::CasError) -> Self {
        Self::Engine(EngineError::Cas(e))
    }
}

/// A suite file read and checked.
#[derive(Debug, Clone)]
pub struct Suite {
    /// The file as written.
    pub file: SuiteFile,
    /// Its name.
    pub name: String,
    /// The directory it is in (fixtures, judges and `{suite}` are relative to it).
    pub dir: PathBuf,
    /// The run timeout.
    pub timeout: Duration,
    /// Each judge's timeout (command judges).
    judge_timeouts: BTreeMap<String, Duration>,
}

impl Suite {
    /// Reads and checks the suite at `path`: every key known, names unique,
    /// weights finite and not negative, durations readable, fixtures
    /// present, JSONata expressions that parse and judge schemas that are
    /// JSON Schemas uwf supports. Nothing is written.
    pub fn load(path: &Path) -> Result<Self, SuiteError> {
        let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let invalid = |message: String| SuiteError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let file: SuiteFile = serde_yaml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let dir = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let dir = dir.canonicalize().unwrap_or(dir);
        let name = file.name.clone().unwrap_or_else(|| {
            let f = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            f.trim_end_matches(".yaml")
                .trim_end_matches(".yml")
                .trim_end_matches(".suite")
                .to_string()
        });
        Self::checked(file, name, dir, path)
    }

    /// Checks `file` (whose directory is `dir`, read from `path`, named
    /// `name`) as [`Suite::load`] does.
    fn checked(
        file: SuiteFile,
        name: String,
        dir: PathBuf,
        path: &Path,
    ) -> Result<Self, SuiteError> {
        let invalid = |message: String| SuiteError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        if file.cases.is_empty() {
            return Err(invalid(
                "`cases` is empty: a suite needs at least one case".into(),
            ));
        }
        if file.repetitions == 0 {
            return Err(invalid("`repetitions` must be at least 1".into()));
        }
        if file.limits.max_steps == 0 {
            return Err(invalid("`limits.maxSteps` must be at least 1".into()));
        }
        let duration = |what: &str, text: &Option<String>, default: Duration| {
            text.as_deref().map_or(Ok(default), |t| {
                humantime::parse_duration(t)
                    .map_err(|e| invalid(format!("{what} {t:?} is not a duration (90s, 10m): {e}")))
            })
        };
        let timeout = duration(
            "`limits.timeout`",
            &file.limits.timeout,
            DEFAULT_RUN_TIMEOUT,
        )?;
        let mut names = BTreeSet::new();
        for (i, case) in file.cases.iter().enumerate() {
            if case.name.is_empty() || !names.insert(case.name.as_str()) {
                return Err(invalid(format!(
                    "cases[{i}]: the name {:?} is empty or used twice",
                    case.name
                )));
            }
            if let Some(f) = &case.fixture
                && !dir.join(f).is_dir()
            {
                return Err(invalid(format!(
                    "cases[{i}] ({}): the fixture {} is not a directory (fixtures are relative to the suite file)",
                    case.name,
                    f.display()
                )));
            }
        }
        let mut names = BTreeSet::new();
        let mut judge_timeouts = BTreeMap::new();
        for (i, judge) in file.judges.iter().enumerate() {
            let name = judge.name();
            if name.is_empty() || name.starts_with('$') || !names.insert(name) {
                return Err(invalid(format!(
                    "judges[{i}]: the name {name:?} is empty, starts with $ or is used twice"
                )));
            }
            let w = judge.weight();
            if !w.is_finite() || w < 0.0 {
                return Err(invalid(format!(
                    "judges[{i}] ({name}): the weight {w} must be a number of at least 0"
                )));
            }
            match judge {
                JudgeSpec::Command {
                    command, timeout, ..
                } => {
                    if command.trim().is_empty() {
                        return Err(invalid(format!("judges[{i}] ({name}): `command` is empty")));
                    }
                    let t = duration(
                        &format!("judges[{i}] ({name}): `timeout`"),
                        timeout,
                        DEFAULT_JUDGE_TIMEOUT,
                    )?;
                    judge_timeouts.insert(name.to_string(), t);
                }
                JudgeSpec::Jsonata { expression, .. } => {
                    // Against `undefined`: only a syntax error can come of it
                    // that does not depend on the thread.
                    if let Err(ModeratorError::Syntax(e)) =
                        uwf_moderator::evaluate_expression(expression, None)
                    {
                        let at = e
                            .offset
                            .map(|o| format!(" at byte {o}"))
                            .unwrap_or_default();
                        return Err(invalid(format!(
                            "judges[{i}] ({name}): the expression does not parse{at}: {}",
                            e.message
                        )));
                    }
                }
                JudgeSpec::Llm { rubric, .. } => {
                    if rubric.trim().is_empty() {
                        return Err(invalid(format!("judges[{i}] ({name}): `rubric` is empty")));
                    }
                }
                JudgeSpec::Schema { schemas, .. } => {
                    let mem = Cas::new(MemStore::new())?;
                    for (role, schema) in schemas {
                        mem.put_schema(schema.clone()).map_err(|e| {
                            invalid(format!(
                                "judges[{i}] ({name}): the schema of {role} is refused: {e}"
                            ))
                        })?;
                    }
                }
            }
        }
        Ok(Self {
            file,
            name,
            dir,
            timeout,
            judge_timeouts,
        })
    }

    /// The agent of `case`'s runs (`{suite}` replaced), if any.
    pub fn agent_of(&self, case: &CaseSpec) -> Option<String> {
        case.agent
            .as_ref()
            .or(self.file.agent.as_ref())
            .map(|a| a.replace("{suite}", &self.dir.to_string_lossy()))
    }

    /// Where the workflow is: a file relative to the suite when the text
    /// names one (it exists, has a `/`, or ends in `.yaml`/`.yml`), else
    /// the text as written (a registered name or a hash).
    pub fn workflow_arg(&self) -> String {
        let w = &self.file.workflow;
        let p = self.dir.join(w);
        if p.is_file() || w.contains('/') || w.ends_with(".yaml") || w.ends_with(".yml") {
            p.to_string_lossy().into_owned()
        } else {
            self.file.workflow.clone()
        }
    }
}

/// The JSON Schema of a suite file (`uwf suite schema`), for editors.
pub fn file_schema() -> Value {
    let name = json!({ "type": "string", "minLength": 1 });
    // One judge kind: `kind`, `name` and `weight`, and its own keys.
    let judge = |kind: &str, required: &[&str], own: Value| {
        let mut properties = json!({
            "kind": { "const": kind },
            "name": { "type": "string", "minLength": 1 },
            "weight": { "type": "number", "minimum": 0, "default": 1 }
        });
        if let (Some(p), Value::Object(own)) = (properties.as_object_mut(), own) {
            p.extend(own);
        }
        let required: Vec<&str> = ["kind", "name"].iter().chain(required).copied().collect();
        json!({
            "type": "object", "additionalProperties": false,
            "required": required,
            "properties": properties
        })
    };
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "uwf suite",
        "description": "A suite for `uwf suite run`: a workflow, cases, repetitions, limits, an agent and judges (docs/eval.md).",
        "type": "object",
        "additionalProperties": false,
        "required": ["workflow", "cases"],
        "properties": {
            "name": { "type": "string" },
            "description": { "type": "string" },
            "workflow": { "type": "string", "description": "A YAML file (relative to the suite file), a registered name or a Workflow hash." },
            "cases": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object", "additionalProperties": false,
                    "required": ["name", "prompt"],
                    "properties": {
                        "name": name,
                        "prompt": { "type": "string" },
                        "fixture": { "type": "string", "description": "A directory relative to the suite file, copied into each run's working directory." },
                        "vars": { "type": "object" },
                        "agent": { "type": "string" }
                    }
                }
            },
            "repetitions": { "type": "integer", "minimum": 1, "default": 1 },
            "limits": {
                "type": "object", "additionalProperties": false,
                "properties": {
                    "maxSteps": { "type": "integer", "minimum": 1, "default": 100 },
                    "timeout": { "type": "string", "description": "A duration: 90s, 10m (default 10m)." }
                }
            },
            "agent": { "type": "string", "description": "The agent command line of every run; {suite} is the suite file's directory." },
            "judges": {
                "type": "array",
                "items": { "oneOf": [
                    judge("command", &["command"], json!({
                        "command": { "type": "string" },
                        "timeout": { "type": "string", "default": "60s" }
                    })),
                    judge("jsonata", &["expression"], json!({ "expression": { "type": "string" } })),
                    judge("llm", &["rubric"], json!({
                        "rubric": { "type": "string" },
                        "model": { "type": "string", "description": "A model alias of config.yaml (default: modelOverrides.judge, a model named judge, defaultModel)." }
                    })),
                    judge("schema", &[], json!({
                        "schemas": { "type": "object", "additionalProperties": { "type": "object" } }
                    }))
                ] }
            }
        }
    })
}

/// The CAS type of a stored suite run: loose about judges' `data` (any
/// JSON), typed where it references other nodes (the workflow, each
/// thread's head) so that `uwf cas walk` follows them.
pub fn run_schema() -> Value {
    json!({
        "title": RUN_TITLE,
        "type": "object",
        "required": ["suite", "workflow", "judges", "runs"],
        "properties": {
            "suite": { "type": "string" },
            "workflow": { "type": "string", "format": "cas_ref" },
            "repetitions": { "type": "integer" },
            "judges": { "type": "array" },
            "runs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["case", "repetition", "judges"],
                    "properties": {
                        "head": { "type": "string", "format": "cas_ref" }
                    }
                }
            }
        }
    })
}

/// The hash of the [`RUN_TITLE`] schema node in `cas` (whether or not it
/// is stored yet): computed, so that reading runs writes nothing.
pub fn run_type<S: uwf_cas::Store>(cas: &Cas<S>) -> Hash {
    type_of(cas, run_schema())
}

/// The hash `schema` has as a schema node of `cas`.
fn type_of<S: uwf_cas::Store>(cas: &Cas<S>, mut schema: Value) -> Hash {
    uwf_cas::cbor::canonicalize(&mut schema);
    uwf_cas::node::hash_typed(cas.types().meta, &schema)
}

/// Every stored suite run: `uwf cas gc` keeps them as roots, so a result
/// stays comparable for as long as the store lives (docs/eval.md,
/// "Results and garbage collection").
pub fn stored_runs(cas: &Cas) -> Result<Vec<Hash>, SuiteError> {
    Ok(cas.list_by_type(run_type(cas))?)
}

/// A judge as a run records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JudgeInfo {
    /// Its name.
    pub name: String,
    /// `command`, `jsonata` or `schema`.
    pub kind: String,
    /// Its weight.
    pub weight: f64,
}

/// A judge's verdict on one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Score {
    /// The judge.
    pub judge: String,
    /// 0..1; `None` when the judge failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// What the judge said besides the score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Why the judge gave no score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One case × repetition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The case.
    pub case: String,
    /// 1-based.
    pub repetition: u32,
    /// The thread, when it could be started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<ThreadId>,
    /// Its head when judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<Hash>,
    /// Whether it reached `$END`.
    pub done: bool,
    /// Its StepNodes.
    pub steps: usize,
    /// Attempts of its agents that failed (and were retried or not), as
    /// the thread's attempt records list them.
    #[serde(default)]
    pub failed_attempts: usize,
    /// Wall-clock time of the run (not the judges), ms. For a run queued
    /// with `--detach`: from the thread's start to its last step.
    pub duration_ms: u64,
    /// Tokens its agents reported, summed over the steps that report any
    /// ([`usage_of`]); `None` when no step does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Dollars its agents reported, summed likewise; `None` when no step
    /// reports a cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Why the run did not finish cleanly (the child's exit, a timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every judge's verdict, in the suite's order.
    pub judges: Vec<Score>,
    /// The weighted mean of the scores, a failed judge counting 0;
    /// `None` when no judge has weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
}

impl RunRecord {
    /// Repetition `repetition` of `case`, before it ran: nothing known yet.
    fn new(case: &str, repetition: u32) -> Self {
        Self {
            case: case.to_string(),
            repetition,
            thread: None,
            head: None,
            done: false,
            steps: 0,
            failed_attempts: 0,
            duration_ms: 0,
            tokens: None,
            cost_usd: None,
            error: None,
            judges: Vec::new(),
            total: None,
        }
    }
}

/// A stored suite run (the payload of a [`RUN_TITLE`] node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SuiteRun {
    /// The suite's name.
    pub suite: String,
    /// The Workflow node the threads ran.
    pub workflow: Hash,
    /// Repetitions per case.
    pub repetitions: u32,
    /// When the run started (ms since the Unix epoch).
    pub started_at: u64,
    /// The judges.
    pub judges: Vec<JudgeInfo>,
    /// Every case × repetition, in order.
    pub runs: Vec<RunRecord>,
    /// For a run queued with `--detach`: the [`QUEUED_TITLE`] node whose
    /// threads this judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<Hash>,
}

/// A question for a model, from an `llm` judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmQuestion<'a> {
    /// The judge's model alias, if it names one.
    pub model: Option<&'a str>,
    /// The name of the workflow judged (for model resolution).
    pub workflow: &'a str,
    /// The system message: the answer's form.
    pub system: String,
    /// The user message: the rubric and the thread.
    pub user: String,
}

/// Asks a model and returns its answer's text (`Err`: why it could not).
/// The engine knows no LLM client: the front end gives one.
pub type Ask<'a> = dyn Fn(&LlmQuestion<'_>) -> Result<String, String> + 'a;

/// How much of a thread's context an `llm` judge's question quotes.
pub const LLM_CONTEXT_CHARS: usize = 60_000;

/// How a suite run is done.
pub struct RunOptions<'a> {
    /// Answers `llm` judges; `None`: they fail with "no model client".
    pub llm: Option<&'a Ask<'a>>,
    /// The `uwf` binary started for each run (the front end's own).
    pub uwf: PathBuf,
    /// Overrides the suite's `repetitions`.
    pub repetitions: Option<u32>,
    /// Told each run as it ends (or, for a queued run, is judged).
    pub progress: &'a dyn Fn(&RunRecord),
    /// Told each case and repetition as its run begins.
    pub started: &'a dyn Fn(&CaseSpec, u32),
    /// Once set, the running child and judge are stopped and the suite
    /// ends with [`SuiteError::Interrupted`], storing nothing (the threads
    /// run so far stay in the store).
    pub cancel: CancelToken,
}

/// Runs every case × repetition of `suite` on `workflow` (a registered
/// Workflow node), judges the threads and stores the result; returns the
/// stored node's hash and the run.
///
/// A run that fails (the child exits non-zero, times out) is kept and
/// judged as it stands; a judge that fails is recorded with its error.
pub fn run(
    engine: &Engine,
    suite: &Suite,
    workflow: Hash,
    opts: &RunOptions<'_>,
) -> Result<(Hash, SuiteRun), SuiteError> {
    let repetitions = opts.repetitions.unwrap_or(suite.file.repetitions).max(1);
    let started_at = now_ms();
    let mut runs = Vec::new();
    for case in &suite.file.cases {
        for repetition in 1..=repetitions {
            (opts.started)(case, repetition);
            let record = run_case(engine, suite, workflow, case, repetition, opts)?;
            if opts.cancel.is_cancelled() {
                return Err(SuiteError::Interrupted);
            }
            (opts.progress)(&record);
            runs.push(record);
        }
    }
    let result = SuiteRun {
        suite: suite.name.clone(),
        workflow,
        repetitions,
        started_at,
        judges: judge_infos(suite),
        runs,
        queued: None,
    };
    let ty = engine.cas.put_schema(run_schema())?.hash;
    let stored = engine.cas.put_value(ty, &result)?;
    Ok((stored.hash, result))
}

fn judge_infos(suite: &Suite) -> Vec<JudgeInfo> {
    suite
        .file
        .judges
        .iter()
        .map(|j| JudgeInfo {
            name: j.name().to_string(),
            kind: j.kind().to_string(),
            weight: j.weight(),
        })
        .collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One case × repetition: a fresh working directory, the thread started
/// and run by child `uwf` processes, then judged.
fn run_case(
    engine: &Engine,
    suite: &Suite,
    workflow: Hash,
    case: &CaseSpec,
    repetition: u32,
    opts: &RunOptions<'_>,
) -> Result<RunRecord, SuiteError> {
    let workdir = tempfile::Builder::new()
        .prefix("uwf-suite-")
        .tempdir()
        .map_err(SuiteError::Workdir)?;
    if let Some(f) = &case.fixture {
        copy_dir(&suite.dir.join(f), workdir.path()).map_err(SuiteError::Workdir)?;
    }
    let mut record = RunRecord::new(&case.name, repetition);
    let begun = Instant::now();
    let child = |args: &[&str], timeout: Duration| {
        let mut cmd = Command::new(&opts.uwf);
        cmd.arg("-q").args(args).current_dir(workdir.path());
        child_env(engine, &mut cmd);
        bounded(cmd, timeout, &opts.cancel)
    };
    let started = child(
        &["thread", "start", &workflow.to_string(), "-p", &case.prompt],
        suite.timeout,
    );
    let thread = match started {
        Ok(f) if f.success() => serde_json::from_str::<Value>(&f.stdout).ok().and_then(|v| {
            v["thread"]
                .as_str()
                .and_then(|t| t.parse::<ThreadId>().ok())
        }),
        Ok(f) => {
            record.error = Some(format!("`uwf thread start` failed: {}", f.describe()));
            None
        }
        Err(e) => {
            record.error = Some(format!("`uwf thread start` could not run: {e}"));
            None
        }
    };
    let Some(thread) = thread else {
        record
            .error
            .get_or_insert_with(|| "`uwf thread start` printed no thread".into());
        record.duration_ms = ms(begun.elapsed());
        no_thread_to_judge(suite, &mut record);
        return Ok(record);
    };
    record.thread = Some(thread);
    let id = thread.to_string();
    let max = suite.file.limits.max_steps.to_string();
    let mut args = vec!["thread", "run", "--thread", &id, "--max-steps", &max];
    let agent = suite.agent_of(case);
    if let Some(a) = &agent {
        args.extend(["--agent", a]);
    }
    let remaining = suite.timeout.saturating_sub(begun.elapsed());
    match child(&args, remaining) {
        Ok(f) if f.success() => {}
        Ok(f) => record.error = Some(format!("`uwf thread run` {}", f.describe())),
        Err(e) => record.error = Some(format!("`uwf thread run` could not run: {e}")),
    }
    record.duration_ms = ms(begun.elapsed());
    if opts.cancel.is_cancelled() {
        return Err(SuiteError::Interrupted);
    }
    let view = measure(engine, thread, &mut record)?;
    judge_record(
        engine,
        suite,
        case,
        &mut record,
        &view,
        workdir.path(),
        opts,
    );
    Ok(record)
}

/// A run without a thread: every judge fails with "no thread to judge".
fn no_thread_to_judge(suite: &Suite, record: &mut RunRecord) {
    record.judges = suite
        .file
        .judges
        .iter()
        .map(|j| Score {
            judge: j.name().to_string(),
            score: None,
            data: None,
            error: Some("no thread to judge".into()),
        })
        .collect();
    record.total = total(suite, &record.judges);
}

/// Fills in the built-in figures of `record` from thread `thread` as it
/// stands (head, done, steps, failed attempts, tokens and cost); returns
/// the thread for the judges.
fn measure(
    engine: &Engine,
    thread: ThreadId,
    record: &mut RunRecord,
) -> Result<ThreadView, SuiteError> {
    let (head, done) = match status(engine, thread)? {
        Status::Active { head } => (head, false),
        Status::Archived(e) => (e.head, e.reason.as_deref().is_none_or(|r| r == "done")),
    };
    record.thread = Some(thread);
    record.head = Some(head);
    record.done = done;
    let view = thread::load(&engine.cas, head).map_err(EngineError::from)?;
    record.steps = view.steps.len();
    record.failed_attempts = crate::retry::attempts(engine, thread, usize::MAX)?.len();
    let usage = thread_usage(&engine.cas, &view)?;
    record.tokens = usage.tokens;
    record.cost_usd = usage.cost_usd;
    Ok(view)
}

/// Every judge of `suite` scores `record` (its thread is `view`, its
/// working directory `workdir`); then its total.
fn judge_record(
    engine: &Engine,
    suite: &Suite,
    case: &CaseSpec,
    record: &mut RunRecord,
    view: &ThreadView,
    workdir: &Path,
    opts: &RunOptions<'_>,
) {
    let judging = Judging {
        engine,
        suite,
        case,
        record,
        view,
        workdir,
        cancel: &opts.cancel,
        llm: opts.llm,
    };
    let judges: Vec<Score> = suite
        .file
        .judges
        .iter()
        .map(|j| judge(&judging, j))
        .collect();
    record.judges = judges;
    record.total = total(suite, &record.judges);
}

/// Tokens and dollars a thread's agents reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Tokens, summed over the steps that report them.
    pub tokens: Option<u64>,
    /// Dollars, summed over the steps that report them.
    pub cost_usd: Option<f64>,
}

/// What one step's detail node says it cost, as the agents of this
/// workspace record it (docs/agents.md, "Detail nodes"): `totalTokens`
/// (else `promptTokens + completionTokens`) of `uwf-agent-detail` and
/// `llm-call`; `usage.input_tokens + usage.output_tokens` of
/// `codex-detail`; `costUsd` of `uwf-agent-detail` and `claude-detail`.
/// A detail without these (a mock's text, a child thread's StepNode)
/// reports nothing.
pub fn usage_of(detail: &Value) -> Usage {
    let int = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
    let tokens = int(detail, "totalTokens")
        .or_else(|| {
            let p = int(detail, "promptTokens");
            let c = int(detail, "completionTokens");
            (p.is_some() || c.is_some()).then(|| p.unwrap_or(0) + c.unwrap_or(0))
        })
        .or_else(|| {
            let u = detail.get("usage").filter(|u| u.is_object())?;
            let i = int(u, "input_tokens");
            let o = int(u, "output_tokens");
            (i.is_some() || o.is_some()).then(|| i.unwrap_or(0) + o.unwrap_or(0))
        });
    let cost_usd = detail
        .get("costUsd")
        .and_then(Value::as_f64)
        .filter(|c| c.is_finite() && *c >= 0.0);
    Usage { tokens, cost_usd }
}

/// The sum of [`usage_of`] over the details of `view`'s steps (one read
/// of all of them: a PostgreSQL store answers it in one query).
pub fn thread_usage(cas: &Cas, view: &ThreadView) -> Result<Usage, SuiteError> {
    let hashes: Vec<Hash> = view.steps.iter().map(|s| s.payload.record.detail).collect();
    let mut sum = Usage::default();
    for node in cas.store().get_many(&hashes)?.into_iter().flatten() {
        let u = usage_of(&node.payload);
        if let Some(t) = u.tokens {
            sum.tokens = Some(sum.tokens.unwrap_or(0).saturating_add(t));
        }
        if let Some(c) = u.cost_usd {
            sum.cost_usd = Some(sum.cost_usd.unwrap_or(0.0) + c);
        }
    }
    Ok(sum)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The weighted mean of `scores` (a failed judge counts 0).
fn total(suite: &Suite, scores: &[Score]) -> Option<f64> {
    let mut sum = 0.0;
    let mut weights = 0.0;
    for (j, s) in suite.file.judges.iter().zip(scores) {
        weights += j.weight();
        sum += j.weight() * s.score.unwrap_or(0.0);
    }
    (weights > 0.0).then(|| sum / weights)
}

/// A child `uwf` (or judge) opens the same store as `engine`: its
/// environment, with a `UWF_STORE` of the caller's removed unless the
/// engine sets one.
fn child_env(engine: &Engine, cmd: &mut Command) {
    cmd.env_remove(uwf_backend::STORE_ENV);
    for (k, v) in &engine.store_env {
        cmd.env(k, v);
    }
}

/// What a judge looks at: one finished run.
struct Judging<'a> {
    engine: &'a Engine,
    suite: &'a Suite,
    case: &'a CaseSpec,
    record: &'a RunRecord,
    view: &'a ThreadView,
    workdir: &'a Path,
    cancel: &'a CancelToken,
    llm: Option<&'a Ask<'a>>,
}

/// Judges one run.
fn judge(run: &Judging<'_>, spec: &JudgeSpec) -> Score {
    let Judging {
        engine,
        suite,
        case,
        record,
        view,
        ..
    } = *run;
    let verdict = match spec {
        JudgeSpec::Command { command, .. } => {
            let timeout = suite
                .judge_timeouts
                .get(spec.name())
                .copied()
                .unwrap_or(DEFAULT_JUDGE_TIMEOUT);
            command_judge(run, command, timeout)
        }
        JudgeSpec::Jsonata { expression, .. } => jsonata_judge(expression, case, record, view),
        JudgeSpec::Schema { schemas, .. } => schema_judge(&engine.cas, schemas, view),
        JudgeSpec::Llm { rubric, model, .. } => match run.llm {
            Some(ask) => llm_judge(ask, rubric, model.as_deref(), view),
            None => Err("no model client to ask (llm judges need one)".into()),
        },
    };
    match verdict {
        Ok((score, data)) => Score {
            judge: spec.name().to_string(),
            score: Some(score),
            data,
            error: None,
        },
        Err(error) => Score {
            judge: spec.name().to_string(),
            score: None,
            data: None,
            error: Some(error),
        },
    }
}

type Judged = Result<(f64, Option<Value>), String>;

/// The environment variable giving a command judge its case's name.
pub const CASE_ENV: &str = "UWF_SUITE_CASE";
/// The environment variable giving a command judge its case's `vars` (JSON).
pub const VARS_ENV: &str = "UWF_SUITE_VARS";

fn command_judge(run: &Judging<'_>, command: &str, timeout: Duration) -> Judged {
    let Judging {
        engine,
        suite,
        case,
        record,
        workdir,
        cancel,
        ..
    } = *run;
    let thread = record.thread.map(|t| t.to_string()).unwrap_or_default();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("{command} \"$@\""))
        .arg("judge")
        .arg(workdir)
        .arg(&thread)
        .current_dir(&suite.dir);
    child_env(engine, &mut cmd);
    cmd.env(CASE_ENV, &case.name).env(
        VARS_ENV,
        Value::from(serde_json::Map::from_iter(case.vars.clone())).to_string(),
    );
    let f = bounded(cmd, timeout, cancel).map_err(|e| format!("cannot run: {e}"))?;
    if !f.success() {
        return Err(f.describe());
    }
    let v: Value = serde_json::from_str(f.stdout.trim()).map_err(|e| {
        format!(
            "printed no JSON object ({e}): {:?}",
            tail(f.stdout.trim(), 200)
        )
    })?;
    let score = v
        .get("score")
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("printed no number `score`: {}", tail(&v.to_string(), 200)))?;
    if !(0.0..=1.0).contains(&score) {
        return Err(format!("printed score {score}, outside 0..1"));
    }
    Ok((score, v.get("data").cloned()))
}

fn jsonata_judge(
    expression: &str,
    case: &CaseSpec,
    record: &RunRecord,
    view: &ThreadView,
) -> Judged {
    let mut input = serde_json::to_value(view.context()).map_err(|e| e.to_string())?;
    if let Value::Object(m) = &mut input {
        m.insert("vars".into(), json!(case.vars));
        m.insert("case".into(), json!(case.name));
        m.insert(
            "metrics".into(),
            json!({
                "steps": record.steps,
                "failedAttempts": record.failed_attempts,
                "done": record.done,
                "durationMs": record.duration_ms,
                "tokens": record.tokens,
                "costUsd": record.cost_usd,
            }),
        );
    }
    let value =
        uwf_moderator::evaluate_expression(expression, Some(&input)).map_err(|e| e.to_string())?;
    match value {
        Some(Value::Bool(b)) => Ok((if b { 1.0 } else { 0.0 }, None)),
        Some(Value::Number(n)) => {
            let x = n.as_f64().unwrap_or(0.0);
            Ok((x.clamp(0.0, 1.0), Some(json!({ "value": n }))))
        }
        Some(other) => Err(format!(
            "the expression gave {}, not a boolean or a number",
            tail(&other.to_string(), 200)
        )),
        None => Err("the expression gave undefined, not a boolean or a number".into()),
    }
}

/// The answer form an `llm` judge asks for.
const LLM_SYSTEM: &str = "You judge one run of a multi-agent workflow against a rubric. \
Read the rubric and the run (the task and every step's role and output, oldest first). \
Answer with one JSON object and nothing else: \
{\"score\": <a number from 0 (fails the rubric) to 1 (fully meets it)>, \"reason\": \"<one or two sentences>\"}";

fn llm_judge(ask: &Ask<'_>, rubric: &str, model: Option<&str>, view: &ThreadView) -> Judged {
    let context = serde_json::to_string_pretty(&view.context()).map_err(|e| e.to_string())?;
    let context = if context.len() > LLM_CONTEXT_CHARS {
        format!(
            "{} (the beginning is cut)",
            tail(&context, LLM_CONTEXT_CHARS)
        )
    } else {
        context
    };
    let question = LlmQuestion {
        model,
        workflow: &view.workflow.name,
        system: LLM_SYSTEM.to_string(),
        user: format!(
            "Rubric:\n{rubric}\n\nThe run (JSON: start.task is the task, steps the work):\n{context}\n"
        ),
    };
    let answer = ask(&question).map_err(|e| format!("the model could not be asked: {e}"))?;
    // Models like to fence JSON even when asked not to.
    let text = answer.trim();
    let text = text
        .strip_prefix("```json")
        .or_else(|| text.strip_prefix("```"))
        .and_then(|t| t.strip_suffix("```"))
        .unwrap_or(text)
        .trim();
    let v: Value = serde_json::from_str(text)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| format!("the model answered no JSON object: {:?}", tail(text, 200)))?;
    let score = v.get("score").and_then(Value::as_f64).ok_or_else(|| {
        format!(
            "the model's answer has no number `score`: {}",
            tail(&v.to_string(), 200)
        )
    })?;
    if !(0.0..=1.0).contains(&score) {
        return Err(format!("the model answered score {score}, outside 0..1"));
    }
    Ok((
        score,
        Some(json!({ "reason": v.get("reason").cloned().unwrap_or(Value::Null) })),
    ))
}

fn schema_judge(cas: &Cas, schemas: &BTreeMap<String, Value>, view: &ThreadView) -> Judged {
    if view.steps.is_empty() {
        return Err("the thread has no steps".into());
    }
    let mem = Cas::new(MemStore::new()).map_err(|e| e.to_string())?;
    let mut own: BTreeMap<&str, Hash> = BTreeMap::new();
    for (role, schema) in schemas {
        let h = mem
            .put_schema(schema.clone())
            .map_err(|e| e.to_string())?
            .hash;
        own.insert(role, h);
    }
    let mut valid = 0usize;
    let mut failures = Vec::new();
    for (i, step) in view.steps.iter().enumerate() {
        let role = &step.payload.record.role;
        let checked = match own.get(role.as_str()) {
            Some(h) => mem.validate(*h, &step.output),
            None => match view.workflow.roles.get(role) {
                Some(r) => cas.validate(r.output_schema, &step.output),
                // A role of a child workflow or gone from the workflow: no
                // schema to hold it to, so it counts as compliant.
                None => Ok(()),
            },
        };
        match checked {
            Ok(()) => valid += 1,
            Err(e) => failures
                .push(json!({ "step": i + 1, "role": role, "error": tail(&e.to_string(), 300) })),
        }
    }
    let n = view.steps.len();
    #[allow(clippy::cast_precision_loss)]
    let score = valid as f64 / n as f64;
    Ok((
        score,
        Some(json!({ "steps": n, "valid": valid, "failures": failures })),
    ))
}

/// The end of `s`, at most `n` bytes (on a character boundary).
fn tail(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut start = s.len() - n;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

/// A child that ended (or was stopped).
struct Finished {
    status: Option<std::process::ExitStatus>,
    timed_out: Option<Duration>,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn success(&self) -> bool {
        self.timed_out.is_none() && self.status.is_some_and(|s| s.success())
    }

    fn describe(&self) -> String {
        let what = match (self.timed_out, self.status) {
            (Some(t), _) => format!(
                "did not finish within {} and was stopped",
                humantime::format_duration(t)
            ),
            (None, Some(s)) => match s.code() {
                Some(c) => format!("exited with status {c}"),
                None => format!("was ended by a signal ({s})"),
            },
            (None, None) => "ended without a status".into(),
        };
        let err = self.stderr.trim();
        if err.is_empty() {
            what
        } else {
            format!("{what}: {}", tail(err, TAIL))
        }
    }
}

/// Runs `cmd` under the supervisor every child of uwf runs under
/// ([`uwf_util::supervise`]): a process group of its own, stdout and stderr
/// captured; past `timeout`, or once `cancel` is set, the whole group is
/// stopped (SIGTERM, then SIGKILL), so that what it started ends with it.
/// (Its own group keeps a terminal's Ctrl-C from reaching it directly:
/// `uwf` gets it and sets `cancel`.) Whatever it leaves running in its
/// group cannot hold its output open.
fn bounded(cmd: Command, timeout: Duration, cancel: &CancelToken) -> std::io::Result<Finished> {
    use uwf_util::supervise::{self, Ending, Supervise, SuperviseError};
    let done = supervise::run(
        cmd,
        Supervise::new()
            .timeout(Some(timeout))
            .cancel(cancel.clone()),
    )
    .map_err(SuperviseError::into_io)?;
    let (status, timed_out) = match done.ending {
        Ending::Exited(status) => (Some(status), None),
        Ending::TimedOut(after) => (None, Some(after)),
        Ending::Stopped | Ending::Interrupted => (None, None),
    };
    Ok(Finished {
        status,
        timed_out,
        stdout: done.stdout,
        stderr: done.stderr,
    })
}

/// Copies the directory `from` into `to` (files and directories; a
/// symbolic link is copied as what it points to).
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Reads the stored suite run `hash`.
pub fn load_run(cas: &Cas, hash: Hash) -> Result<SuiteRun, SuiteError> {
    match load_any(cas, hash)? {
        Stored::Judged(run) => Ok(run),
        Stored::Queued(_) => Err(SuiteError::NotARun { hash }),
    }
}

// ---------------------------------------------------------------------------
// `uwf suite run --detach`: the runs go to the run queue, judged later.

/// The title of the JSON Schema of a suite run queued with `--detach`.
pub const QUEUED_TITLE: &str = "SuiteQueued";

/// One case × repetition of a queued suite run: its thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedThread {
    /// The case.
    pub case: String,
    /// 1-based.
    pub repetition: u32,
    /// The thread queued for it.
    pub thread: ThreadId,
}

/// A suite run queued with `--detach` (the payload of a [`QUEUED_TITLE`]
/// node): what judging its threads later needs, the judges included, so
/// that the suite file may change meanwhile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedRun {
    /// The suite's name.
    pub suite: String,
    /// The suite file as it was when queued.
    pub file: SuiteFile,
    /// The suite file's directory when queued: command judges run there.
    pub dir: PathBuf,
    /// The Workflow node the threads run.
    pub workflow: Hash,
    /// Repetitions per case.
    pub repetitions: u32,
    /// When the threads were queued (ms since the Unix epoch).
    pub queued_at: u64,
    /// Every case × repetition, in order.
    pub threads: Vec<QueuedThread>,
}

/// The CAS type of a queued suite run; `workflow` is a `cas_ref`.
pub fn queued_schema() -> Value {
    json!({
        "title": QUEUED_TITLE,
        "type": "object",
        "required": ["suite", "file", "dir", "workflow", "threads"],
        "properties": {
            "suite": { "type": "string" },
            "file": { "type": "object" },
            "dir": { "type": "string" },
            "workflow": { "type": "string", "format": "cas_ref" },
            "threads": { "type": "array" }
        }
    })
}

/// The hash of the [`QUEUED_TITLE`] schema node (stored or not).
pub fn queued_type<S: uwf_cas::Store>(cas: &Cas<S>) -> Hash {
    type_of(cas, queued_schema())
}

/// Every stored queued run: gc roots like [`stored_runs`], so that a run
/// can be judged however long its threads take.
pub fn queued_runs(cas: &Cas) -> Result<Vec<Hash>, SuiteError> {
    Ok(cas.list_by_type(queued_type(cas))?)
}

/// Why a suite cannot be queued, or a queued run not judged.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// A case has a fixture: a worker runs agents in its own working
    /// directory, which the suite cannot fill.
    #[error(
        "the case {case} has a fixture, and a run queued for a worker has no working directory of its own to copy it into"
    )]
    Fixture {
        /// The case.
        case: String,
    },
    /// The store has no run queue.
    #[error("the store {store} has no run queue")]
    NoQueue {
        /// The store.
        store: String,
    },
    /// Queuing stopped part-way: the threads queued so far run on workers,
    /// but no suite run records them.
    #[error("queuing the suite failed after {} thread(s) were queued ({}): {message}", queued.len(), list(queued))]
    Partly {
        /// The threads queued.
        queued: Vec<ThreadId>,
        /// Why.
        message: String,
    },
    /// A queued run is judged only once every thread is finished.
    #[error("{unfinished} of the {total} threads of the suite run {hash} are not finished")]
    Unfinished {
        /// The queued run.
        hash: Hash,
        /// Threads not finished.
        unfinished: usize,
        /// Threads in all.
        total: usize,
    },
    /// The threads did not all finish in time.
    #[error(
        "{unfinished} of the {total} threads of the suite run {hash} did not finish within {}",
        humantime::format_duration(*timeout)
    )]
    TimedOut {
        /// The queued run.
        hash: Hash,
        /// Threads not finished.
        unfinished: usize,
        /// Threads in all.
        total: usize,
        /// How long it waited.
        timeout: Duration,
    },
}

fn list(ids: &[ThreadId]) -> String {
    let shown: Vec<String> = ids.iter().take(5).map(ToString::to_string).collect();
    let more = ids.len().saturating_sub(5);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else if shown.is_empty() {
        "none".into()
    } else {
        shown.join(", ")
    }
}

/// Starts every case × repetition of `suite` as a thread of `workflow` (a
/// registered Workflow node named `workflow_name`) and queues it for `uwf
/// worker`s, as `uwf thread run --detach` does (the request: the case's
/// agent, `limits.maxSteps`, and `limits.timeout` as each agent's
/// timeout); then stores the [`QueuedRun`] and returns its hash. A suite
/// whose cases have fixtures is refused before anything is written.
pub fn detach(
    engine: &Engine,
    suite: &Suite,
    workflow: Hash,
    workflow_name: &str,
    repetitions: Option<u32>,
) -> Result<(Hash, QueuedRun), SuiteError> {
    if let Some(c) = suite.file.cases.iter().find(|c| c.fixture.is_some()) {
        return Err(QueueError::Fixture {
            case: c.name.clone(),
        }
        .into());
    }
    let queue = engine.run_queue().ok_or_else(|| QueueError::NoQueue {
        store: engine.state.describe(),
    })?;
    let repetitions = repetitions.unwrap_or(suite.file.repetitions).max(1);
    let queued_at = now_ms();
    let mut threads = Vec::new();
    let partly = |threads: &[QueuedThread], message: String| -> SuiteError {
        QueueError::Partly {
            queued: threads.iter().map(|t| t.thread).collect(),
            message,
        }
        .into()
    };
    for case in &suite.file.cases {
        for repetition in 1..=repetitions {
            let started = crate::ops::start(engine, workflow, &case.prompt, None)
                .map_err(|e| partly(&threads, e.to_string()))?;
            let request = uwf_state::runs::RunRequest {
                agent: suite.agent_of(case),
                max_steps: u64::try_from(suite.file.limits.max_steps).ok(),
                timeout_ms: Some(ms(suite.timeout)),
            };
            queue
                .enqueue(started.thread, workflow_name, request)
                .map_err(|e| partly(&threads, e.to_string()))?;
            threads.push(QueuedThread {
                case: case.name.clone(),
                repetition,
                thread: started.thread,
            });
        }
    }
    let queued = QueuedRun {
        suite: suite.name.clone(),
        file: suite.file.clone(),
        dir: suite.dir.clone(),
        workflow,
        repetitions,
        queued_at,
        threads,
    };
    let stored = engine
        .cas
        .put_schema(queued_schema())
        .and_then(|ty| engine.cas.put_value(ty.hash, &queued))
        .map_err(|e| partly(&queued.threads, e.to_string()))?;
    Ok((stored.hash, queued))
}

/// Where one thread of a queued run stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum ThreadState {
    /// In the queue, no worker has it yet.
    Queued,
    /// A worker runs it (or its lease ran out and another will take it).
    Running {
        /// The worker holding it.
        worker: String,
    },
    /// It reached `$END`.
    Done,
    /// It was archived without reaching `$END` (killed, pruned).
    Ended {
        /// The reason its history entry gives.
        reason: String,
    },
    /// A worker gave up on it (it stays in the queue as failed).
    Failed {
        /// Why, as the worker said.
        error: String,
    },
    /// Active and out of the queue: it waits for a person (`uwf thread
    /// answer`), or was taken out of the queue; no worker moves it on.
    Stopped,
    /// The store does not know the thread (any more).
    Missing,
}

impl ThreadState {
    /// Whether no worker will move the thread on by itself: the run can
    /// be judged as the thread stands.
    pub fn finished(&self) -> bool {
        !matches!(self, Self::Queued | Self::Running { .. })
    }

    /// Why the thread did not end cleanly, for its [`RunRecord::error`].
    fn error(&self) -> Option<String> {
        match self {
            Self::Done | Self::Queued | Self::Running { .. } => None,
            Self::Ended { reason } => Some(format!("the thread ended as {reason}")),
            Self::Failed { error } => Some(format!("the worker gave up: {error}")),
            Self::Stopped => Some(
                "the thread stopped before $END (it waits for a person, or left the queue)".into(),
            ),
            Self::Missing => Some("the store does not know the thread".into()),
        }
    }
}

/// The state of every thread of `queued`, in its order.
pub fn thread_states(engine: &Engine, queued: &QueuedRun) -> Result<Vec<ThreadState>, SuiteError> {
    let queue = engine.run_queue();
    let now = uwf_state::state::now_ms();
    queued
        .threads
        .iter()
        .map(|t| {
            let state = match status(engine, t.thread) {
                Err(EngineError::UnknownThread { .. }) => ThreadState::Missing,
                Err(e) => return Err(e.into()),
                Ok(Status::Archived(e)) => match e.reason.as_deref() {
                    None | Some("done") => ThreadState::Done,
                    Some(r) => ThreadState::Ended {
                        reason: r.to_string(),
                    },
                },
                Ok(Status::Active { .. }) => {
                    let run = match queue {
                        Some(q) => q.run_of(t.thread).map_err(EngineError::from)?,
                        None => None,
                    };
                    match run.map(|r| r.state) {
                        None => ThreadState::Stopped,
                        Some(uwf_state::runs::RunState::Queued) => ThreadState::Queued,
                        Some(uwf_state::runs::RunState::Claimed {
                            worker,
                            lease_until,
                            ..
                        }) => ThreadState::Running {
                            worker: if lease_until < now {
                                format!("{worker} (lease expired)")
                            } else {
                                worker
                            },
                        },
                        Some(uwf_state::runs::RunState::Failed { error, .. }) => {
                            ThreadState::Failed { error }
                        }
                    }
                }
            };
            Ok(state)
        })
        .collect()
}

/// A stored run: judged, or queued and not judged yet.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// A [`SuiteRun`].
    Judged(SuiteRun),
    /// A [`QueuedRun`].
    Queued(QueuedRun),
}

/// Reads the stored run `hash`, judged or queued.
pub fn load_any(cas: &Cas, hash: Hash) -> Result<Stored, SuiteError> {
    let node = cas.get(hash)?;
    let payload = if node.type_hash == run_type(cas) {
        serde_json::from_value(node.payload).map(Stored::Judged)
    } else if node.type_hash == queued_type(cas) {
        serde_json::from_value(node.payload).map(Stored::Queued)
    } else {
        return Err(SuiteError::NotARun { hash });
    };
    payload.map_err(|e| SuiteError::BadRun {
        hash,
        message: e.to_string(),
    })
}

/// The judged result of the queued run `queued`, if one is stored (the
/// newest when two `suite wait`s judged it at once).
pub fn judged(cas: &Cas, queued: Hash) -> Result<Option<(Hash, SuiteRun)>, SuiteError> {
    let mut best: Option<(Hash, SuiteRun)> = None;
    for h in stored_runs(cas)? {
        let run = load_run(cas, h)?;
        if run.queued == Some(queued)
            && best
                .as_ref()
                .is_none_or(|(_, b)| b.started_at < run.started_at)
        {
            best = Some((h, run));
        }
    }
    Ok(best)
}

/// A stored run as a judged one: itself, or the judged result of a queued
/// run; a queued run not judged yet is [`QueueError::Unfinished`] (with
/// how far its threads are) — [`wait`] judges it.
pub fn load_judged(engine: &Engine, hash: Hash) -> Result<(Hash, SuiteRun), SuiteError> {
    match load_any(&engine.cas, hash)? {
        Stored::Judged(run) => Ok((hash, run)),
        Stored::Queued(q) => {
            if let Some(found) = judged(&engine.cas, hash)? {
                return Ok(found);
            }
            let states = thread_states(engine, &q)?;
            Err(QueueError::Unfinished {
                hash,
                unfinished: states.iter().filter(|s| !s.finished()).count(),
                total: states.len(),
            }
            .into())
        }
    }
}

/// Waits (polling every `poll`, at most `timeout` when given) until every
/// thread of the queued run `hash` is finished, telling `progress` the
/// states each time they change; then judges them as they stand (once:
/// a result already stored is returned as it is) and stores the
/// [`SuiteRun`], which names `hash` as `queued`. Returns its hash, the run
/// and whether it was judged now.
///
/// The judges are those of the suite file as queued; command judges run
/// in its directory as it was then, with an empty temporary directory as
/// their working directory (the run's was the worker's).
pub fn wait(
    engine: &Engine,
    hash: Hash,
    timeout: Option<Duration>,
    poll: Duration,
    progress: &dyn Fn(&[ThreadState]),
    opts: &RunOptions<'_>,
) -> Result<(Hash, SuiteRun, bool), SuiteError> {
    let queued = match load_any(&engine.cas, hash)? {
        Stored::Judged(run) => return Ok((hash, run, false)),
        Stored::Queued(q) => q,
    };
    if let Some((h, run)) = judged(&engine.cas, hash)? {
        return Ok((h, run, false));
    }
    let begun = Instant::now();
    let mut last: Option<Vec<ThreadState>> = None;
    loop {
        let states = thread_states(engine, &queued)?;
        if last.as_ref() != Some(&states) {
            progress(&states);
        }
        let unfinished = states.iter().filter(|s| !s.finished()).count();
        if unfinished == 0 {
            break;
        }
        if opts.cancel.is_cancelled() {
            return Err(SuiteError::Interrupted);
        }
        if let Some(t) = timeout
            && begun.elapsed() >= t
        {
            return Err(QueueError::TimedOut {
                hash,
                unfinished,
                total: states.len(),
                timeout: t,
            }
            .into());
        }
        last = Some(states);
        std::thread::sleep(poll);
    }
    let (h, run) = judge_queued(engine, hash, &queued, opts)?;
    Ok((h, run, true))
}

/// Judges the threads of `queued` (stored as `hash`; all finished) and
/// stores the result.
fn judge_queued(
    engine: &Engine,
    hash: Hash,
    queued: &QueuedRun,
    opts: &RunOptions<'_>,
) -> Result<(Hash, SuiteRun), SuiteError> {
    let suite = Suite::checked(
        queued.file.clone(),
        queued.suite.clone(),
        queued.dir.clone(),
        &queued.dir,
    )?;
    let states = thread_states(engine, queued)?;
    let mut runs = Vec::new();
    for (t, state) in queued.threads.iter().zip(&states) {
        if opts.cancel.is_cancelled() {
            return Err(SuiteError::Interrupted);
        }
        let case = suite
            .file
            .cases
            .iter()
            .find(|c| c.name == t.case)
            .ok_or_else(|| SuiteError::BadRun {
                hash,
                message: format!(
                    "the thread {} is of no case of the suite ({})",
                    t.thread, t.case
                ),
            })?;
        let mut record = RunRecord::new(&t.case, t.repetition);
        record.thread = Some(t.thread);
        record.error = state.error();
        if *state == ThreadState::Missing {
            no_thread_to_judge(&suite, &mut record);
        } else {
            let view = measure(engine, t.thread, &mut record)?;
            record.duration_ms = view
                .steps
                .last()
                .map_or(0, |s| s.timestamp.saturating_sub(view.start_timestamp));
            let workdir = tempfile::Builder::new()
                .prefix("uwf-suite-")
                .tempdir()
                .map_err(SuiteError::Workdir)?;
            judge_record(
                engine,
                &suite,
                case,
                &mut record,
                &view,
                workdir.path(),
                opts,
            );
        }
        (opts.progress)(&record);
        runs.push(record);
    }
    let result = SuiteRun {
        suite: queued.suite.clone(),
        workflow: queued.workflow,
        repetitions: queued.repetitions,
        started_at: queued.queued_at,
        judges: judge_infos(&suite),
        runs,
        queued: Some(hash),
    };
    let ty = engine.cas.put_schema(run_schema())?.hash;
    let stored = engine.cas.put_value(ty, &result)?;
    Ok((stored.hash, result))
}

/// The pseudo-judge of a run's weighted total in reports and diffs.
pub const TOTAL: &str = "$total";
/// The pseudo-judge of whether a run reached `$END` (1 or 0).
pub const DONE: &str = "$done";
/// The pseudo-judge of a run's step count (not a score: no verdict in a diff).
pub const STEPS: &str = "$steps";
/// The pseudo-judge of a run's failed attempts (not a score either).
pub const FAILED_ATTEMPTS: &str = "$failedAttempts";
/// The pseudo-judge of the tokens a run's agents reported (runs whose
/// agents report none are left out, not counted as failures).
pub const TOKENS: &str = "$tokens";
/// The pseudo-judge of the dollars a run's agents reported (likewise).
pub const COST: &str = "$costUsd";

/// Pseudo-judges that are figures, not scores: a diff shows their change
/// and gives no verdict (fewer steps or tokens is not always better).
const FIGURES: [&str; 4] = [STEPS, FAILED_ATTEMPTS, TOKENS, COST];

/// Mean, extremes and spread of one judge over one case's repetitions.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stat {
    /// The judge (or `$total`, `$done`, `$steps`, `$failedAttempts`,
    /// `$tokens`, `$costUsd`).
    pub judge: String,
    /// Repetitions that have a score.
    pub n: usize,
    /// Repetitions whose judge failed.
    pub errors: usize,
    /// Mean of the scores (`None`: none).
    pub mean: Option<f64>,
    /// Smallest score.
    pub min: Option<f64>,
    /// Largest score.
    pub max: Option<f64>,
    /// Sample standard deviation (`None` under two scores).
    pub spread: Option<f64>,
}

/// One case of a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaseReport {
    /// The case.
    pub case: String,
    /// Its repetitions.
    pub runs: usize,
    /// Per judge, then `$total`, `$done`, `$steps`, `$failedAttempts`,
    /// `$tokens`, `$costUsd`.
    pub judges: Vec<Stat>,
}

/// `uwf suite report`: a stored run summarised per case and judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The suite.
    pub suite: String,
    /// The workflow its threads ran.
    pub workflow: Hash,
    /// Per case, in the suite's order.
    pub cases: Vec<CaseReport>,
}

/// The scores of `judge` in `runs` (`None`: the judge failed there).
fn samples(judge: &str, runs: &[&RunRecord]) -> Vec<Option<f64>> {
    #[allow(clippy::cast_precision_loss)]
    match judge {
        // Not reported is no failure: such runs are not samples.
        TOKENS => runs
            .iter()
            .filter_map(|r| r.tokens.map(|t| Some(t as f64)))
            .collect(),
        COST => runs.iter().filter_map(|r| r.cost_usd.map(Some)).collect(),
        _ => runs
            .iter()
            .map(|r| match judge {
                TOTAL => r.total,
                DONE => Some(if r.done { 1.0 } else { 0.0 }),
                STEPS => Some(r.steps as f64),
                FAILED_ATTEMPTS => Some(r.failed_attempts as f64),
                j => r.judges.iter().find(|s| s.judge == j).and_then(|s| s.score),
            })
            .collect(),
    }
}

/// The cases of `run` in order, each with its runs.
fn by_case(run: &SuiteRun) -> Vec<(&str, Vec<&RunRecord>)> {
    let mut out: Vec<(&str, Vec<&RunRecord>)> = Vec::new();
    for r in &run.runs {
        match out.iter_mut().find(|(c, _)| *c == r.case) {
            Some((_, v)) => v.push(r),
            None => out.push((&r.case, vec![r])),
        }
    }
    out
}

fn judge_names(run: &SuiteRun) -> Vec<String> {
    run.judges
        .iter()
        .map(|j| j.name.clone())
        .chain([TOTAL, DONE, STEPS, FAILED_ATTEMPTS, TOKENS, COST].map(String::from))
        .collect()
}

/// Summarises a stored run.
pub fn report(run: &SuiteRun) -> Report {
    let names = judge_names(run);
    let cases = by_case(run)
        .into_iter()
        .map(|(case, runs)| CaseReport {
            case: case.to_string(),
            runs: runs.len(),
            judges: names
                .iter()
                .map(|j| {
                    let s = samples(j, &runs);
                    stat(j, &s)
                })
                .collect(),
        })
        .collect();
    Report {
        suite: run.suite.clone(),
        workflow: run.workflow,
        cases,
    }
}

fn mean(xs: &[f64]) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)]
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

fn stat(judge: &str, s: &[Option<f64>]) -> Stat {
    let xs: Vec<f64> = s.iter().flatten().copied().collect();
    let m = mean(&xs);
    #[allow(clippy::cast_precision_loss)]
    let spread = m.filter(|_| xs.len() >= 2).map(|m| {
        (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
    });
    Stat {
        judge: judge.to_string(),
        n: xs.len(),
        errors: s.len() - xs.len(),
        mean: m,
        min: xs.iter().copied().reduce(f64::min),
        max: xs.iter().copied().reduce(f64::max),
        spread,
    }
}

/// What a diff concludes for one case and judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The whole 90 % interval of the change is above 0.
    Better,
    /// The whole 90 % interval of the change is below 0.
    Worse,
    /// The interval contains 0, or there are fewer than two scores on a side.
    Unclear,
    /// Not a score (`$steps`, `$failedAttempts`, `$tokens`, `$costUsd`):
    /// the change is shown, no verdict.
    None,
}

/// The change of one judge's mean in one case.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The judge.
    pub judge: String,
    /// Mean in the first run.
    pub mean_a: Option<f64>,
    /// Mean in the second run.
    pub mean_b: Option<f64>,
    /// `mean_b - mean_a`.
    pub change: Option<f64>,
    /// The bootstrap 90 % interval of the change (5th percentile).
    pub low: Option<f64>,
    /// The bootstrap 90 % interval of the change (95th percentile).
    pub high: Option<f64>,
    /// What it says.
    pub verdict: Verdict,
}

/// One case of a diff.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaseChange {
    /// The case.
    pub case: String,
    /// Per judge both runs have.
    pub judges: Vec<Change>,
}

/// `uwf suite diff`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diff {
    /// Cases in both runs, per judge in both.
    pub cases: Vec<CaseChange>,
    /// Cases in only one of them.
    pub only_a: Vec<String>,
    /// Cases in only the second.
    pub only_b: Vec<String>,
}

/// Compares two stored runs case by case and judge by judge.
pub fn diff(a: &SuiteRun, b: &SuiteRun) -> Diff {
    let ca = by_case(a);
    let cb = by_case(b);
    let names_b = judge_names(b);
    let names: Vec<String> = judge_names(a)
        .into_iter()
        .filter(|j| names_b.contains(j))
        .collect();
    let mut cases = Vec::new();
    for (case, ra) in &ca {
        let Some((_, rb)) = cb.iter().find(|(c, _)| c == case) else {
            continue;
        };
        let judges = names
            .iter()
            .map(|j| {
                let xa: Vec<f64> = samples(j, ra).into_iter().flatten().collect();
                let xb: Vec<f64> = samples(j, rb).into_iter().flatten().collect();
                let (mean_a, mean_b) = (mean(&xa), mean(&xb));
                let interval = bootstrap(&xa, &xb, RESAMPLES, seed_for(case, j));
                let verdict = if FIGURES.contains(&j.as_str()) {
                    Verdict::None
                } else {
                    verdict(xa.len(), xb.len(), interval)
                };
                Change {
                    judge: j.clone(),
                    mean_a,
                    mean_b,
                    change: mean_a.zip(mean_b).map(|(x, y)| y - x),
                    low: interval.map(|i| i.0),
                    high: interval.map(|i| i.1),
                    verdict,
                }
            })
            .collect();
        cases.push(CaseChange {
            case: (*case).to_string(),
            judges,
        });
    }
    let only = |x: &[(&str, Vec<&RunRecord>)], y: &[(&str, Vec<&RunRecord>)]| {
        x.iter()
            .filter(|(c, _)| !y.iter().any(|(d, _)| d == c))
            .map(|(c, _)| (*c).to_string())
            .collect()
    };
    Diff {
        only_a: only(&ca, &cb),
        only_b: only(&cb, &ca),
        cases,
    }
}

/// A verdict only where both sides have two scores or more and the
/// interval excludes 0.
fn verdict(na: usize, nb: usize, interval: Option<(f64, f64)>) -> Verdict {
    match interval {
        Some((lo, _)) if na >= 2 && nb >= 2 && lo > 0.0 => Verdict::Better,
        Some((_, hi)) if na >= 2 && nb >= 2 && hi < 0.0 => Verdict::Worse,
        _ => Verdict::Unclear,
    }
}

/// A seed per case and judge, so that adding a case changes no other
/// case's interval.
fn seed_for(case: &str, judge: &str) -> u64 {
    let mut h = SEED;
    for b in case.bytes().chain([0]).chain(judge.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// SplitMix64: a small, well-known generator; enough for resampling
/// indices, and reproducible from its seed on every platform.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is below 2^-50 for the
    /// sample sizes of a suite.
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap_or(0)
    }
}

/// The percentile bootstrap 90 % interval of `mean(b) - mean(a)`: each of
/// `resamples` rounds draws both samples again with replacement. `None`
/// when a side is empty.
pub fn bootstrap(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix(seed);
    let mut draw = |xs: &[f64]| {
        let sum: f64 = (0..xs.len()).map(|_| xs[rng.below(xs.len())]).sum();
        #[allow(clippy::cast_precision_loss)]
        let m = sum / xs.len() as f64;
        m
    };
    let mut diffs: Vec<f64> = (0..resamples).map(|_| -draw(a) + draw(b)).collect();
    diffs.sort_by(f64::total_cmp);
    let at = |p: f64| {
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let i = ((resamples - 1) as f64 * p).round() as usize;
        diffs[i.min(resamples - 1)]
    };
    Some((at(0.05), at(0.95)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_is_deterministic() {
        let a = [0.1, 0.4, 0.3, 0.2, 0.5];
        let b = [0.6, 0.4, 0.9, 0.7, 0.8];
        assert_eq!(bootstrap(&a, &b, 500, 7), bootstrap(&a, &b, 500, 7));
        assert_ne!(bootstrap(&a, &b, 500, 7), bootstrap(&a, &b, 500, 8));
    }

    #[test]
    fn interval_contains_the_true_difference_and_excludes_zero() {
        // b is a shifted by exactly 0.4: the difference of the means is 0.4.
        let a = [0.1, 0.3, 0.2, 0.25, 0.15, 0.35, 0.2, 0.3];
        let b: Vec<f64> = a.iter().map(|x| x + 0.4).collect();
        let (lo, hi) = bootstrap(&a, &b, RESAMPLES, SEED).unwrap_or((f64::NAN, f64::NAN));
        assert!(lo <= 0.4 && 0.4 <= hi, "[{lo}, {hi}]");
        assert!(lo > 0.0, "[{lo}, {hi}]");
        assert_eq!(verdict(a.len(), b.len(), Some((lo, hi))), Verdict::Better);
        let (lo, hi) = bootstrap(&b, &a, RESAMPLES, SEED).unwrap_or((f64::NAN, f64::NAN));
        assert_eq!(verdict(a.len(), b.len(), Some((lo, hi))), Verdict::Worse);
    }

    #[test]
    fn overlapping_samples_are_unclear() {
        let a = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0];
        let b = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0];
        let i = bootstrap(&a, &b, RESAMPLES, SEED);
        assert!(i.is_some_and(|(lo, hi)| lo < 0.0 && hi > 0.0), "{i:?}");
        assert_eq!(verdict(6, 6, i), Verdict::Unclear);
    }

    #[test]
    fn one_repetition_gives_no_verdict() {
        let i = bootstrap(&[0.0], &[1.0], RESAMPLES, SEED);
        assert_eq!(i, Some((1.0, 1.0)));
        assert_eq!(verdict(1, 1, i), Verdict::Unclear);
        assert_eq!(bootstrap(&[], &[1.0], RESAMPLES, SEED), None);
    }

    #[test]
    fn stat_of_scores_and_failures() {
        let s = stat("j", &[Some(0.0), None, Some(1.0), Some(0.5)]);
        assert_eq!((s.n, s.errors), (3, 1));
        assert_eq!((s.mean, s.min, s.max), (Some(0.5), Some(0.0), Some(1.0)));
        assert_eq!(s.spread, Some(0.5));
    }

    #[test]
    fn the_run_type_is_the_stored_schema() {
        let cas = Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"));
        let stored = cas
            .put_schema(run_schema())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run_type(&cas), stored.hash);
    }

    /// Every key a suite file can have is in `uwf suite schema`, and the
    /// schema knows no key the file refuses.
    #[test]
    fn the_file_schema_matches_the_types() {
        let yaml = r#"
name: n
description: d
workflow: w
repetitions: 2
limits: { maxSteps: 3, timeout: 1m }
agent: a
cases: [{ name: c, prompt: p, fixture: f, vars: { x: 1 }, agent: a }]
judges:
  - { kind: command, name: a, weight: 1, command: c, timeout: 1s }
  - { kind: jsonata, name: b, weight: 1, expression: "true" }
  - { kind: schema, name: c, weight: 1, schemas: { r: { type: object } } }
  - { kind: llm, name: d, weight: 1, rubric: r, model: m }
"#;
        let file: SuiteFile = serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        let written = serde_json::to_value(&file).unwrap_or_else(|e| panic!("{e}"));
        let schema = file_schema();
        let keys = |v: &Value| -> BTreeSet<String> {
            v.as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(keys(&written), keys(&schema["properties"]));
        assert_eq!(
            keys(&written["cases"][0]),
            keys(&schema["properties"]["cases"]["items"]["properties"])
        );
        assert_eq!(
            keys(&written["limits"]),
            keys(&schema["properties"]["limits"]["properties"])
        );
        let variants = &schema["properties"]["judges"]["items"]["oneOf"];
        for judge in written["judges"].as_array().into_iter().flatten() {
            let variant = variants
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["properties"]["kind"]["const"] == judge["kind"]);
            let variant = variant.unwrap_or_else(|| panic!("no schema for {judge}"));
            assert_eq!(keys(judge), keys(&variant["properties"]), "{judge}");
        }
    }

    /// The detail nodes as the workspace's agents record them
    /// (docs/agents.md, "Detail nodes").
    #[test]
    fn usage_of_each_agents_detail() {
        let u = |v: Value| usage_of(&v);
        // uwf-agent-detail: totalTokens and costUsd.
        assert_eq!(
            u(
                json!({ "promptTokens": 4210, "completionTokens": 501, "totalTokens": 4711, "costUsd": 0.0201 })
            ),
            Usage {
                tokens: Some(4711),
                cost_usd: Some(0.0201)
            }
        );
        // llm-call without a total; a provider that reported nothing.
        assert_eq!(
            u(json!({ "promptTokens": 10, "completionTokens": 5, "totalTokens": null })),
            Usage {
                tokens: Some(15),
                cost_usd: None
            }
        );
        assert_eq!(
            u(json!({ "promptTokens": null, "completionTokens": null, "totalTokens": null })),
            Usage::default()
        );
        // codex-detail's usage; claude-detail's cost.
        assert_eq!(
            u(
                json!({ "usage": { "input_tokens": 20150, "cached_input_tokens": 0, "output_tokens": 56 } })
            ),
            Usage {
                tokens: Some(20206),
                cost_usd: None
            }
        );
        assert_eq!(
            u(json!({ "sessionId": "s", "costUsd": 0.1096 })),
            Usage {
                tokens: None,
                cost_usd: Some(0.1096)
            }
        );
        // A mock's text, a negative cost: nothing.
        assert_eq!(u(json!({ "text": "raw" })), Usage::default());
        assert_eq!(u(json!({ "costUsd": -1.0 })), Usage::default());
    }

    fn record(case: &str, tokens: Option<u64>, cost_usd: Option<f64>) -> RunRecord {
        RunRecord {
            tokens,
            cost_usd,
            ..RunRecord::new(case, 1)
        }
    }

    fn suite_run(runs: Vec<RunRecord>) -> SuiteRun {
        SuiteRun {
            suite: "s".into(),
            workflow: Hash::from_u64(7),
            repetitions: 2,
            started_at: 0,
            judges: Vec::new(),
            runs,
            queued: None,
        }
    }

    #[test]
    fn tokens_and_cost_are_figures_of_the_runs_that_report_them() {
        let a = suite_run(vec![
            record("c", Some(100), Some(0.5)),
            record("c", Some(300), None),
            record("c", None, None),
        ]);
        let r = report(&a);
        let get = |j: &str| r.cases[0].judges.iter().find(|s| s.judge == j).cloned();
        let tokens = get(TOKENS).unwrap_or_else(|| panic!("no {TOKENS}"));
        assert_eq!((tokens.n, tokens.errors, tokens.mean), (2, 0, Some(200.0)));
        let cost = get(COST).unwrap_or_else(|| panic!("no {COST}"));
        assert_eq!((cost.n, cost.errors, cost.mean), (1, 0, Some(0.5)));
        let b = suite_run(vec![
            record("c", Some(50), Some(0.1)),
            record("c", Some(70), Some(0.1)),
        ]);
        let d = diff(&a, &b);
        let change = |j: &str| {
            d.cases[0]
                .judges
                .iter()
                .find(|c| c.judge == j)
                .cloned()
                .unwrap_or_else(|| panic!("no {j}"))
        };
        let t = change(TOKENS);
        assert_eq!((t.change, t.verdict), (Some(-140.0), Verdict::None));
        let c = change(COST);
        assert_eq!(c.verdict, Verdict::None);
        assert!(c.change.is_some_and(|x| (x + 0.4).abs() < 1e-9), "{c:?}");
    }

    #[test]
    fn a_finished_thread_is_one_no_worker_moves_on() {
        assert!(!ThreadState::Queued.finished());
        assert!(!ThreadState::Running { worker: "w".into() }.finished());
        for s in [
            ThreadState::Done,
            ThreadState::Stopped,
            ThreadState::Missing,
            ThreadState::Failed { error: "e".into() },
            ThreadState::Ended {
                reason: "killed".into(),
            },
        ] {
            assert!(s.finished(), "{s:?}");
            assert_eq!(s.error().is_none(), s == ThreadState::Done, "{s:?}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let bad = "workflow: w\ncases: [{name: a, prompt: p, promt: q}]\n";
        let e = serde_yaml::from_str::<SuiteFile>(bad)
            .err()
            .map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|e| e.contains("promt")), "{e:?}");
        let bad = "workflow: w\ncases: [{name: a, prompt: p}]\njudges: [{kind: jsonata, name: j, expression: x, extra: 1}]\n";
        let e = serde_yaml::from_str::<SuiteFile>(bad)
            .err()
            .map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|e| e.contains("extra")), "{e:?}");
    }
}
