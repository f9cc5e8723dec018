//! The scenario file: what the mock answers, per role, run after run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use miette::{Diagnostic, NamedSource, SourceSpan};
use serde::Deserialize;
use serde_json::Value;
use uwf_agent_kit::AgentRun;

/// A parsed scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    path: PathBuf,
    roles: BTreeMap<String, Vec<Entry>>,
}

/// One scripted run of a role.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawEntry")]
pub struct Entry {
    /// Sleep this long first.
    pub delay: Option<Duration>,
    /// Write this to stderr (after the delay).
    pub stderr: Option<String>,
    /// What to do.
    pub effect: Effect,
    /// Fail the first attempts of this run before doing it (`failFirst`).
    pub fail_first: Option<FailFirst>,
}

/// `failFirst: N` (with `failExit`, `failDelay`): the first N attempts of
/// the run fail, then the entry's effect happens. Attempts are counted in a
/// file under the storage root (`.uwf-mock/`), per thread, role and run,
/// so the retries `uwf` makes of one step see the count grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailFirst {
    /// How many attempts fail.
    pub times: u32,
    /// Their exit status (default 1).
    pub exit: u8,
    /// How long each failing attempt sleeps first (e.g. to trip a timeout).
    pub delay: Option<Duration>,
}

/// What an entry does after its delay and stderr.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Write a proper step.
    Step(Answer),
    /// Exit with this status, writing nothing.
    Exit(u8),
    /// Misbehave. The answer, when given, provides the valid output the
    /// `wrong-*` faults put in their step, and the detail text.
    Fault(Fault, Option<Answer>),
}

/// The content of a step.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A structured output, and optionally the raw text stored as the detail.
    Output(Value, Option<String>),
    /// A frontmatter answer, extracted by the kit.
    Text(String),
    /// Only a detail text (for `invalid-output`, which makes its own output).
    Detail(String),
}

impl Answer {
    /// The run the kit turns into a step; `None` for [`Answer::Detail`].
    pub fn to_run(&self) -> Option<AgentRun> {
        match self {
            Answer::Output(v, None) => Some(AgentRun::output(v.clone())),
            Answer::Output(v, Some(a)) => Some(AgentRun::output(v.clone()).with_answer(a.clone())),
            Answer::Text(t) => Some(AgentRun::text(t.clone())),
            Answer::Detail(_) => None,
        }
    }

    /// The text stored as the detail.
    pub fn detail_text(&self) -> &str {
        match self {
            Answer::Output(_, a) => a.as_deref().unwrap_or_default(),
            Answer::Text(t) | Answer::Detail(t) => t,
        }
    }
}

/// The ways the mock can misbehave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// Print nothing, exit 0.
    NoOutput,
    /// Print a line that is not a hash, exit 0.
    Garbage,
    /// Print a well-formed hash that is not in the store.
    UnknownHash,
    /// Print the StartNode's hash.
    NotAStep,
    /// Write a step whose `prev` is the StartNode.
    WrongPrev,
    /// Write a step whose `start` is another StartNode of the workflow.
    WrongStart,
    /// Write a step of another role.
    WrongRole,
    /// Write a step whose output does not satisfy the role's schema.
    InvalidOutput,
}

impl Fault {
    /// Whether the fault writes a step with a valid output of the role, so
    /// the entry must say what that output is.
    fn needs_output(self) -> bool {
        matches!(
            self,
            Fault::WrongPrev | Fault::WrongStart | Fault::WrongRole
        )
    }

    fn name(self) -> &'static str {
        match self {
            Fault::NoOutput => "no-output",
            Fault::Garbage => "garbage",
            Fault::UnknownHash => "unknown-hash",
            Fault::NotAStep => "not-a-step",
            Fault::WrongPrev => "wrong-prev",
            Fault::WrongStart => "wrong-start",
            Fault::WrongRole => "wrong-role",
            Fault::InvalidOutput => "invalid-output",
        }
    }
}

/// An entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    output: Option<Value>,
    text: Option<String>,
    answer: Option<String>,
    delay: Option<String>,
    stderr: Option<String>,
    exit: Option<u8>,
    fault: Option<Fault>,
    #[serde(rename = "failFirst")]
    fail_first: Option<u32>,
    #[serde(rename = "failExit")]
    fail_exit: Option<u8>,
    #[serde(rename = "failDelay")]
    fail_delay: Option<String>,
}

impl TryFrom<RawEntry> for Entry {
    type Error = String;

    fn try_from(raw: RawEntry) -> Result<Self, String> {
        let delay = raw
            .delay
            .as_deref()
            .map(|d| {
                humantime::parse_duration(d)
                    .map_err(|e| format!("delay {d:?} is not a duration like 300ms or 2s: {e}"))
            })
            .transpose()?;
        let answer = match (raw.output, raw.text, raw.answer) {
            (Some(_), Some(_), _) => {
                return Err("an entry has either `output` or `text`, not both".into());
            }
            (None, Some(_), Some(_)) => {
                return Err(
                    "`text` is the answer itself; `answer` goes with `output` (the raw text stored as the detail)"
                        .into(),
                );
            }
            (Some(v), None, a) => Some(Answer::Output(v, a)),
            (None, Some(t), None) => Some(Answer::Text(t)),
            (None, None, Some(a)) => Some(Answer::Detail(a)),
            (None, None, None) => None,
        };
        let effect = match (raw.exit, raw.fault, answer) {
            (Some(_), Some(_), _) => {
                return Err("an entry has either `exit` or `fault`, not both".into());
            }
            (Some(_), None, Some(_)) => {
                return Err(
                    "an `exit` entry writes nothing: drop `output`, `text` and `answer`".into(),
                );
            }
            (Some(code), None, None) => Effect::Exit(code),
            (None, Some(f), a) => {
                check_fault(f, a.as_ref())?;
                Effect::Fault(f, a)
            }
            (None, None, Some(Answer::Detail(_))) => {
                return Err(
                    "`answer` needs an `output` (or use `text` for a frontmatter answer)".into(),
                );
            }
            (None, None, Some(a)) => Effect::Step(a),
            (None, None, None) => {
                return Err(
                    "an entry needs `output`, `text`, `exit` or `fault` (see `uwf-mock --help`)"
                        .into(),
                );
            }
        };
        let fail_delay = raw
            .fail_delay
            .as_deref()
            .map(|d| {
                humantime::parse_duration(d)
                    .map_err(|e| format!("failDelay {d:?} is not a duration like 300ms or 2s: {e}"))
            })
            .transpose()?;
        let fail_first = match (raw.fail_first, raw.fail_exit, fail_delay) {
            (None, None, None) => None,
            (None, _, _) => {
                return Err("`failExit` and `failDelay` go with `failFirst: N`".into());
            }
            (Some(_), Some(0), _) => {
                return Err("`failExit` must be a failure status (1-255), not 0".into());
            }
            (Some(times), exit, delay) => Some(FailFirst {
                times,
                exit: exit.unwrap_or(1),
                delay,
            }),
        };
        Ok(Entry {
            delay,
            stderr: raw.stderr,
            effect,
            fail_first,
        })
    }
}

fn check_fault(f: Fault, answer: Option<&Answer>) -> Result<(), String> {
    let name = f.name();
    match (f, answer) {
        (f, Some(_)) if !f.needs_output() && f != Fault::InvalidOutput => Err(format!(
            "fault {name} writes no step: drop `output`, `text` and `answer`"
        )),
        (Fault::InvalidOutput, Some(Answer::Output(..) | Answer::Text(_))) => Err(format!(
            "fault {name} makes its own invalid output: drop `output`/`text` (`answer` sets the detail)"
        )),
        (f, None | Some(Answer::Detail(_))) if f.needs_output() => Err(format!(
            "fault {name} writes a step that is wrong only in its links, so it needs a valid `output` or `text` for the role"
        )),
        _ => Ok(()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    #[serde(default)]
    roles: Option<BTreeMap<String, Vec<Entry>>>,
    /// Upstream uwf's mock format: the thread's steps in order, each a role
    /// and its frontmatter answer.
    #[serde(default)]
    steps: Option<Vec<UpstreamStep>>,
}

/// One step of upstream's mock format.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamStep {
    role: String,
    output: String,
}

impl RawScenario {
    /// The entries per role: `roles` as written, or upstream's `steps`
    /// grouped by role in order (each a frontmatter `text` answer), so that
    /// the n-th run of a role gets its n-th step.
    fn into_roles(self) -> Result<BTreeMap<String, Vec<Entry>>, String> {
        match (self.roles, self.steps) {
            (Some(_), Some(_)) => Err(
                "a scenario has either `roles` (uwf) or `steps` (upstream uwf), not both".into(),
            ),
            (Some(roles), None) => Ok(roles),
            (None, Some(steps)) => {
                let mut roles: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
                for step in steps {
                    roles.entry(step.role).or_default().push(Entry {
                        delay: None,
                        stderr: None,
                        effect: Effect::Step(Answer::Text(step.output)),
                        fail_first: None,
                    });
                }
                if roles.is_empty() {
                    return Err("`steps` is empty".into());
                }
                Ok(roles)
            }
            (None, None) => Err("a scenario needs `roles:` (or upstream's `steps:`)".into()),
        }
    }
}

/// Why a scenario cannot be used.
#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum ScenarioError {
    /// The file cannot be read.
    #[error("cannot read scenario {}: {source}", path.display())]
    #[diagnostic(
        code(uwf_mock::scenario::read),
        help(
            "the first argument of uwf-mock is the scenario file; relative paths are resolved from the directory uwf runs the agent in, so prefer an absolute path"
        )
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The file is not a valid scenario.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Invalid(Box<InvalidScenario>),

    /// The scenario has no entries for the role.
    #[error("scenario {} has no entries for role {role:?}", path.display())]
    #[diagnostic(
        code(uwf_mock::scenario::missing_role),
        help("it scripts: {scripted}; add `{role}: [...]` under `roles:`")
    )]
    MissingRole {
        /// The file.
        path: PathBuf,
        /// The role asked for.
        role: String,
        /// The roles it has, comma-separated.
        scripted: String,
    },
}

/// A scenario file that does not parse or breaks a rule, with the place.
#[derive(Debug, thiserror::Error, Diagnostic)]
#[error("scenario {} is not valid: {message}", path.display())]
#[diagnostic(
    code(uwf_mock::scenario::invalid),
    help(
        "a scenario is `roles: {{<role>: [<entry>, …]}}`; an entry has `output` (+ `answer`), `text`, `exit` or `fault`, and optionally `delay` and `stderr` (see `uwf-mock --help`)"
    )
)]
pub struct InvalidScenario {
    /// The file.
    pub path: PathBuf,
    /// What is wrong (with its line and column when known).
    pub message: String,
    /// The file's text.
    #[source_code]
    pub src: NamedSource<String>,
    /// Where.
    #[label("here")]
    pub span: Option<SourceSpan>,
}

impl Scenario {
    /// Reads and validates the scenario at `path`.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, text)
    }

    /// Parses a scenario; `path` names it in errors.
    pub fn parse(path: &Path, text: String) -> Result<Self, ScenarioError> {
        let invalid = |message: String, span: Option<SourceSpan>, text: String| {
            ScenarioError::Invalid(Box::new(InvalidScenario {
                path: path.to_path_buf(),
                message,
                src: NamedSource::new(path.display().to_string(), text),
                span,
            }))
        };
        let raw: RawScenario = match serde_yaml::from_str(&text) {
            Ok(raw) => raw,
            Err(e) => {
                let span = e.location().map(|l| SourceSpan::from((l.index(), 0)));
                return Err(invalid(e.to_string(), span, text));
            }
        };
        let roles = match raw.into_roles() {
            Ok(r) => r,
            Err(m) => return Err(invalid(m, None, text)),
        };
        if let Some((role, _)) = roles.iter().find(|(_, entries)| entries.is_empty()) {
            return Err(invalid(format!("role {role:?} has no entries"), None, text));
        }
        Ok(Self {
            path: path.to_path_buf(),
            roles,
        })
    }

    /// The entries of `role`, or [`ScenarioError::MissingRole`].
    pub fn entries(&self, role: &str) -> Result<&[Entry], ScenarioError> {
        self.roles
            .get(role)
            .map(Vec::as_slice)
            .ok_or_else(|| ScenarioError::MissingRole {
                path: self.path.clone(),
                role: role.to_owned(),
                scripted: self
                    .roles
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The entry for the `n`-th run (0-based) of `role`: the last entry
    /// repeats past the end.
    pub fn entry(&self, role: &str, n: usize) -> Result<&Entry, ScenarioError> {
        let entries = self.entries(role)?;
        // `parse` rejects empty lists, so there is a last entry.
        Ok(&entries[n.min(entries.len() - 1)])
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(yaml: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse(Path::new("s.yaml"), yaml.to_owned())
    }

    fn error(yaml: &str) -> String {
        match parse(yaml) {
            Ok(s) => panic!("expected an error, got {s:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn upstream_steps_format() {
        let s = parse(
            "steps:\n  - role: planner\n    output: |\n      ---\n      $status: ready\n      ---\n      Planned.\n  - role: worker\n    output: \"---\\n$status: done\\n---\\n\"\n  - role: planner\n    output: again\n",
        )
        .unwrap();
        let text = |role: &str, n: usize| match &s.entry(role, n).unwrap().effect {
            Effect::Step(Answer::Text(t)) => t.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(text("planner", 0), "---\n$status: ready\n---\nPlanned.\n");
        assert_eq!(text("worker", 0), "---\n$status: done\n---\n");
        assert_eq!(text("planner", 1), "again");
        assert!(error("steps: []\n").contains("`steps` is empty"));
        assert!(
            error("steps: [{role: a, output: x}]\nroles: {a: [{exit: 1}]}\n").contains("not both")
        );
        assert!(error("steps: [{role: a, output: {x: 1}}]\n").contains("invalid type"));
        assert!(error("{}\n").contains("needs `roles:`"));
    }

    #[test]
    fn full_example() {
        let s = parse(
            r#"
roles:
  planner:
    - output: { plan: "p", steps: ["a"] }
      answer: "raw"
  reviewer:
    - text: "---\napproved: false\ncomments: fix X\n---\nbody"
      delay: 300ms
      stderr: "reviewing…"
    - output: { approved: true, comments: "LGTM" }
  tester:
    - exit: 3
      stderr: boom
    - fault: wrong-prev
      output: {}
    - fault: invalid-output
      answer: detail
    - fault: no-output
"#,
        )
        .unwrap();
        let p = s.entry("planner", 0).unwrap();
        assert_eq!(
            p.effect,
            Effect::Step(Answer::Output(
                json!({"plan": "p", "steps": ["a"]}),
                Some("raw".into())
            ))
        );
        let r0 = s.entry("reviewer", 0).unwrap();
        assert_eq!(r0.delay, Some(Duration::from_millis(300)));
        assert_eq!(r0.stderr.as_deref(), Some("reviewing…"));
        assert!(matches!(r0.effect, Effect::Step(Answer::Text(_))));
        assert!(matches!(
            s.entry("reviewer", 1).unwrap().effect,
            Effect::Step(Answer::Output(..))
        ));
        assert_eq!(
            s.entry("reviewer", 7).unwrap(),
            s.entry("reviewer", 1).unwrap(),
            "the last repeats"
        );
        assert_eq!(s.entry("tester", 0).unwrap().effect, Effect::Exit(3));
        assert!(matches!(
            s.entry("tester", 1).unwrap().effect,
            Effect::Fault(Fault::WrongPrev, Some(_))
        ));
        assert!(matches!(
            s.entry("tester", 2).unwrap().effect,
            Effect::Fault(Fault::InvalidOutput, Some(Answer::Detail(_)))
        ));
        assert_eq!(
            s.entry("tester", 3).unwrap().effect,
            Effect::Fault(Fault::NoOutput, None)
        );
    }

    #[test]
    fn missing_role_names_the_file_and_the_roles() {
        let s = parse("roles:\n  a: [{ exit: 1 }]\n  b: [{ exit: 2 }]\n").unwrap();
        let e = s.entry("c", 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "scenario s.yaml has no entries for role \"c\""
        );
        let ScenarioError::MissingRole { scripted, .. } = e else {
            panic!()
        };
        assert_eq!(scripted, "a, b");
    }

    #[test]
    fn yaml_errors_have_a_line() {
        let e = parse("roles:\n  a:\n    - output: [unclosed\n").unwrap_err();
        let ScenarioError::Invalid(inv) = &e else {
            panic!("{e:?}")
        };
        let InvalidScenario { message, span, .. } = inv.as_ref();
        assert!(message.contains("line"), "{message}");
        assert!(span.is_some());
        assert!(e.to_string().starts_with("scenario s.yaml is not valid"));
    }

    /// The scenarios shipped in `examples/` stay in step with the format.
    #[test]
    fn example_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".mock.yaml")
                && let Err(e) = Scenario::load(&path)
            {
                panic!("{}: {e}", path.display());
            }
        }
    }

    #[test]
    fn entry_rules() {
        for (yaml, expect) in [
            ("roles: { a: [] }", "has no entries"),
            ("roles: { a: [{}] }", "needs `output`"),
            ("roles: { a: [{ output: {}, text: t }] }", "not both"),
            (
                "roles: { a: [{ text: t, answer: x }] }",
                "`text` is the answer",
            ),
            (
                "roles: { a: [{ answer: x }] }",
                "`answer` needs an `output`",
            ),
            ("roles: { a: [{ exit: 1, fault: garbage }] }", "not both"),
            ("roles: { a: [{ exit: 1, text: t }] }", "writes nothing"),
            ("roles: { a: [{ exit: 300 }] }", "300"),
            (
                "roles: { a: [{ fault: garbage, text: t }] }",
                "writes no step",
            ),
            ("roles: { a: [{ fault: wrong-role }] }", "needs a valid"),
            (
                "roles: { a: [{ fault: invalid-output, output: {} }] }",
                "its own invalid output",
            ),
            ("roles: { a: [{ fault: explode }] }", "unknown variant"),
            (
                "roles: { a: [{ output: {}, delay: soon }] }",
                "not a duration",
            ),
            (
                "roles: { a: [{ output: {}, colour: red }] }",
                "unknown field",
            ),
            ("rolez: {}", "unknown field"),
        ] {
            let e = error(yaml);
            assert!(e.contains(expect), "{yaml}: {e}");
        }
    }
}
