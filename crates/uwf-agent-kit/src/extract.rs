//! The two-layer extract: from an agent's answer text to an output of the
//! role's outputSchema.
//!
//! **Layer 1, the frontmatter fast path** ([`candidate`]): the answer's
//! YAML frontmatter is parsed, every field the schema declares is taken
//! (all fields when it declares none, or allows extra ones through
//! `patternProperties` or an `additionalProperties` schema), and the result
//! is validated against the schema. Success costs no LLM call. A missing,
//! unterminated, malformed or schema-violating frontmatter never fails the
//! step by itself: it falls through to layer 2.
//!
//! **Layer 2, the LLM fallback** ([`llm_extract`]): an OpenAI-compatible
//! chat completion in JSON mode, the system prompt *"Extract structured data
//! matching this JSON Schema: …"*, the raw answer as the user message. The
//! reply is parsed as JSON (code fences stripped) and validated; if it is
//! not JSON or violates the schema, **one** repair round sends the problems
//! back, then the failure is a clear error ([`KitError::ExtractNotJson`],
//! [`KitError::ExtractInvalid`]). The model is `modelOverrides.extract`,
//! else a model alias named `extract`, else `defaultModel`
//! ([`llm::resolve_model`](crate::llm::resolve_model)); provider and key as
//! for any [`LlmClient`].
//!
//! **A schema without properties** (`{}` or `{"type": "object"}`): layer 1
//! takes every frontmatter field, layer 2 takes the whole JSON object the
//! model returns; either way the schema has the last word.
//!
//! [`extract`] runs both layers for an [`AgentContext`]; the kit calls it
//! for every [`AgentRun::text`](crate::AgentRun::text) answer. An agent
//! that wants to know which layer was used (to record it in its own detail
//! node, say) calls [`extract`] itself and returns
//! [`AgentRun::output`](crate::AgentRun::output):
//!
//! ```no_run
//! use uwf_agent_kit::{AgentRun, extract};
//! # fn demo(ctx: &uwf_agent_kit::AgentContext, answer: String) -> Result<AgentRun, uwf_agent_kit::BoxError> {
//! let extracted = extract::extract(ctx, &answer)?;
//! eprintln!("layer {:?}, {} LLM call(s)", extracted.layer, extracted.llm_calls);
//! Ok(AgentRun::output(extracted.output).with_answer(answer))
//! # }
//! ```

use serde_json::{Map, Value};
use uwf_cas::CasError;
use uwf_util::frontmatter::{self, Frontmatter};

use crate::llm::{EXTRACT, LlmClient, Message, excerpt};
use crate::{AgentContext, KitError};

/// Which layer produced an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The frontmatter fast path: no LLM call.
    Frontmatter,
    /// The LLM fallback.
    Llm,
}

impl Layer {
    /// `frontmatter` or `llm`.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Frontmatter => "frontmatter",
            Layer::Llm => "llm",
        }
    }
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An output extracted from an answer, valid against the role's schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    /// The output, valid against the role's outputSchema.
    pub output: Value,
    /// The layer that produced it.
    pub layer: Layer,
    /// Chat completions made (0 for the fast path; 1, or 2 with the repair
    /// round). HTTP retries of one call are not counted.
    pub llm_calls: u32,
}

/// The longest answer (in characters) sent to the extraction model; longer
/// answers keep their first two thirds and last third of this, with a
/// marker in between.
pub const MAX_EXTRACT_INPUT: usize = 60_000;

/// Why the fast path found no output candidate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoCandidate(pub String);

/// Runs the two-layer extract on `answer` for the context's role (see the
/// [module docs](self)): the frontmatter fast path, then, if that yields
/// no valid output, the LLM fallback with the extraction model of the
/// context's configuration.
///
/// Errors: [`KitError::Extraction`] when both layers fail — its
/// [`llm_cause`](KitError::llm_cause) says why layer 2 failed
/// ([`KitError::NoConfig`], [`KitError::NoModel`],
/// [`KitError::UnknownModel`], [`KitError::MissingApiKey`],
/// [`KitError::LlmUnreachable`], [`KitError::LlmStatus`],
/// [`KitError::ExtractNotJson`], [`KitError::ExtractInvalid`], …); store
/// errors as they are.
pub fn extract(ctx: &AgentContext, answer: &str) -> Result<Extracted, KitError> {
    let validate = |v: &Value| validate_in_store(ctx, v);
    let layer1 = match frontmatter_output(answer, ctx.output_schema(), &validate)? {
        Ok(output) => {
            tracing::info!(
                role = ctx.role(),
                layer = "frontmatter",
                llm_calls = 0,
                "output extracted"
            );
            return Ok(Extracted {
                output,
                layer: Layer::Frontmatter,
                llm_calls: 0,
            });
        }
        Err(reason) => reason,
    };
    tracing::info!(
        role = ctx.role(),
        reason = %layer1,
        "frontmatter fast path failed; falling back to the LLM extract"
    );
    let result = ctx
        .llm(Some(EXTRACT))
        .and_then(|client| llm_extract(&client, ctx.output_schema(), answer, &validate));
    match result {
        Ok(extracted) => {
            tracing::info!(
                role = ctx.role(),
                layer = "llm",
                llm_calls = extracted.llm_calls,
                "output extracted"
            );
            Ok(extracted)
        }
        Err(e @ KitError::Cas(_)) => Err(e),
        Err(cause) => {
            let help = extraction_help(cause.help_text());
            Err(KitError::Extraction {
                role: ctx.role().to_owned(),
                layer1,
                cause: Box::new(cause),
                help,
            })
        }
    }
}

/// The help of [`KitError::Extraction`], given the help of its cause (the
/// binary's report recomputes it with the cause's `uwf` hint).
pub(crate) fn extraction_help(cause_help: Option<String>) -> String {
    format!(
        "either answer in frontmatter markdown (a `---` line, YAML with the fields of the role's outputSchema, a `---` line, then the body; `ctx.prompt()` tells the agent so), or fix the LLM fallback: {}",
        cause_help.unwrap_or_else(|| "see the error above".to_owned())
    )
}

/// Validates `value` against the context's outputSchema in its store;
/// returns the violations (empty when valid).
pub fn validate_in_store(ctx: &AgentContext, value: &Value) -> Result<Vec<String>, KitError> {
    match ctx.store().validate(ctx.output_schema_hash(), value) {
        Ok(()) => Ok(Vec::new()),
        Err(CasError::Invalid { violations, .. }) => {
            Ok(violations.iter().map(ToString::to_string).collect())
        }
        Err(e) => Err(e.into()),
    }
}

/// Layer 1: the [`candidate`] of `answer`, validated with `validate`
/// (which returns the violations, empty when valid).
///
/// `Ok(Ok(output))` on success, `Ok(Err(reason))` when the fast path does
/// not apply (no, broken or invalid frontmatter — the reason says which),
/// `Err` when `validate` itself fails.
pub fn frontmatter_output<V>(
    answer: &str,
    schema: &Value,
    validate: &V,
) -> Result<Result<Value, String>, KitError>
where
    V: Fn(&Value) -> Result<Vec<String>, KitError>,
{
    let candidate = match candidate(answer, schema) {
        Ok(c) => c,
        Err(NoCandidate(reason)) => return Ok(Err(reason)),
    };
    let violations = validate(&candidate)?;
    if violations.is_empty() {
        Ok(Ok(candidate))
    } else {
        Ok(Err(format!(
            "the frontmatter does not satisfy the role's outputSchema:{}",
            bullet_list(&violations)
        )))
    }
}

/// Layer 2: asks `client` to extract an output of `schema` from `answer`
/// (JSON mode), validates it with `validate`, and gives the model one
/// repair round with the problems if the reply is not JSON or not valid.
///
/// Errors: [`KitError::ExtractNotJson`] or [`KitError::ExtractInvalid`]
/// after the repair round, the client's errors as they are.
pub fn llm_extract<V>(
    client: &LlmClient,
    schema: &Value,
    answer: &str,
    validate: &V,
) -> Result<Extracted, KitError>
where
    V: Fn(&Value) -> Result<Vec<String>, KitError>,
{
    let mut messages = extraction_messages(schema, answer);
    let mut calls = 0u32;
    loop {
        calls += 1;
        let reply = client.chat(&messages, true)?;
        let problem = match parse_json_answer(&reply.content) {
            Err(reason) => Problem::NotJson(reason),
            Ok(value) => {
                let violations = validate(&value)?;
                if violations.is_empty() {
                    return Ok(Extracted {
                        output: value,
                        layer: Layer::Llm,
                        llm_calls: calls,
                    });
                }
                Problem::Invalid(violations)
            }
        };
        if calls >= 2 {
            return Err(match problem {
                Problem::NotJson(reason) => KitError::ExtractNotJson {
                    model: client.model().to_owned(),
                    attempts: calls,
                    reason,
                },
                Problem::Invalid(v) => KitError::ExtractInvalid {
                    model: client.model().to_owned(),
                    attempts: calls,
                    violations: bullet_list(&v),
                },
            });
        }
        tracing::info!(model = client.model(), problem = %problem.feedback(), "extraction reply rejected; one repair round");
        messages.push(Message::assistant(reply.content));
        messages.push(Message::user(problem.feedback()));
    }
}

enum Problem {
    NotJson(String),
    Invalid(Vec<String>),
}

impl Problem {
    fn feedback(&self) -> String {
        match self {
            Problem::NotJson(reason) => format!(
                "Your reply is not a JSON object: {reason}. Reply again with only the JSON object, no prose and no code fences."
            ),
            Problem::Invalid(v) => format!(
                "Your JSON does not satisfy the schema:{}\nReply again with only the corrected JSON object.",
                bullet_list(v)
            ),
        }
    }
}

/// The messages of the first extraction call: the system prompt with the
/// schema, and `answer` (shortened to [`MAX_EXTRACT_INPUT`] characters) as
/// the user message.
pub fn extraction_messages(schema: &Value, answer: &str) -> Vec<Message> {
    let schema_text = serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string());
    vec![
        Message::system(format!(
            "Extract structured data matching this JSON Schema:\n\n```json\n{schema_text}\n```\n\n\
             The user message is the answer of an agent. Reply with one JSON object that holds \
             the data the answer states, valid against the schema, and nothing else: no prose, \
             no code fences. Use only information from the answer."
        )),
        Message::user(shorten(answer, MAX_EXTRACT_INPUT)),
    ]
}

fn shorten(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    let head = max * 2 / 3;
    let tail = max - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(n - tail).collect();
    format!(
        "{start}\n\n[… {} characters left out …]\n\n{end}",
        n - head - tail
    )
}

/// Parses a model's reply as JSON: the whole text, else the content of a
/// ```` ```json ```` fence, else the outermost `{…}`.
pub fn parse_json_answer(text: &str) -> Result<Value, String> {
    let t = text.trim();
    let first = match serde_json::from_str::<Value>(t) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    if let Some(inner) = fenced(t)
        && let Ok(v) = serde_json::from_str::<Value>(inner)
    {
        return Ok(v);
    }
    if let (Some(a), Some(b)) = (t.find('{'), t.rfind('}'))
        && a < b
        && let Ok(v) = serde_json::from_str::<Value>(&t[a..=b])
    {
        return Ok(v);
    }
    if t.is_empty() {
        return Err("the reply is empty".to_owned());
    }
    Err(format!("{first} in {:?}", excerpt(t, 120)))
}

/// The body of the first ```` ``` ```` fence in `t`.
fn fenced(t: &str) -> Option<&str> {
    let start = t.find("```")?;
    let rest = &t[start + 3..];
    let body_start = rest.find('\n')? + 1;
    let body = &rest[body_start..];
    let end = body.find("```")?;
    Some(body[..end].trim())
}

fn bullet_list(items: &[String]) -> String {
    items.iter().map(|v| format!("\n  - {v}")).collect()
}

/// The output candidate of an answer (layer 1, before validation): the
/// fields of its YAML frontmatter that `schema` declares, converted from
/// YAML to JSON. Every field is taken when the schema declares no
/// properties, or allows more through `patternProperties` or an
/// `additionalProperties` schema.
///
/// The candidate is not validated; store it with
/// [`Cas::put`](uwf_cas::Cas::put) or check it with
/// [`Cas::validate`](uwf_cas::Cas::validate).
///
/// ```
/// use serde_json::json;
/// let schema = json!({ "type": "object", "properties": { "approved": { "type": "boolean" } } });
/// let answer = "---\napproved: true\nmood: good\n---\nLGTM";
/// let out = uwf_agent_kit::extract::candidate(answer, &schema)?;
/// assert_eq!(out, json!({ "approved": true }));
/// # Ok::<(), uwf_agent_kit::extract::NoCandidate>(())
/// ```
pub fn candidate(answer: &str, schema: &Value) -> Result<Value, NoCandidate> {
    let doc = frontmatter::parse(answer);
    let mapping = match &doc.frontmatter {
        Frontmatter::Absent => {
            return Err(NoCandidate(
                "the answer has no frontmatter (it does not start with a `---` line)".into(),
            ));
        }
        Frontmatter::Empty => return Err(NoCandidate("the frontmatter is empty".into())),
        Frontmatter::Unterminated { .. } => {
            return Err(NoCandidate(
                "the frontmatter has no closing `---` line".into(),
            ));
        }
        Frontmatter::Malformed { error, .. } => {
            return Err(NoCandidate(format!(
                "the frontmatter is not valid YAML: {error}"
            )));
        }
        Frontmatter::Yaml(serde_yaml::Value::Mapping(m)) => m,
        Frontmatter::Yaml(other) => {
            return Err(NoCandidate(format!(
                "the frontmatter is {}, not a mapping of fields",
                yaml_kind(other)
            )));
        }
    };

    let wanted = wanted_fields(schema);
    let mut out = Map::new();
    for (key, value) in mapping {
        let Some(key) = scalar_key(key) else {
            continue;
        };
        if wanted.as_ref().is_some_and(|w| !w.contains(&key)) {
            continue;
        }
        let json = serde_json::to_value(value).map_err(|e| {
            NoCandidate(format!(
                "frontmatter field {key:?} cannot be represented as JSON: {e}"
            ))
        })?;
        out.insert(key, json);
    }
    Ok(Value::Object(out))
}

/// The fields layer 1 takes: `None` for all of them.
fn wanted_fields(schema: &Value) -> Option<Vec<String>> {
    let root = crate::prompt::root_view(schema);
    let extra_allowed = root.get("patternProperties").is_some()
        || root
            .get("additionalProperties")
            .is_some_and(Value::is_object);
    if extra_allowed {
        return None;
    }
    declared_properties(schema)
}

/// The names a schema declares in `properties`, following local `$ref`s
/// and merging `allOf` branches at the root; `None` when it declares none.
pub fn declared_properties(schema: &Value) -> Option<Vec<String>> {
    let root = crate::prompt::root_view(schema);
    let props = root.get("properties").and_then(Value::as_object)?;
    if props.is_empty() {
        return None;
    }
    Some(props.keys().cloned().collect())
}

fn scalar_key(key: &serde_yaml::Value) -> Option<String> {
    match key {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Bool(b) => Some(b.to_string()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn yaml_kind(v: &serde_yaml::Value) -> &'static str {
    match v {
        serde_yaml::Value::Null => "null",
        serde_yaml::Value::Bool(_) => "a boolean",
        serde_yaml::Value::Number(_) => "a number",
        serde_yaml::Value::String(_) => "a string",
        serde_yaml::Value::Sequence(_) => "a list",
        serde_yaml::Value::Mapping(_) => "a mapping",
        serde_yaml::Value::Tagged(_) => "a tagged value",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "approved": { "type": "boolean" },
                "comments": { "type": "string" },
                "files": { "type": "array" }
            }
        })
    }

    fn reason(answer: &str) -> String {
        match candidate(answer, &schema()) {
            Err(NoCandidate(r)) => r,
            Ok(v) => panic!("expected no candidate, got {v}"),
        }
    }

    #[test]
    fn takes_declared_fields_only() {
        let answer = "---\napproved: false\ncomments: fix X\nfiles: [a, b]\nextra: 1\n---\nbody";
        assert_eq!(
            candidate(answer, &schema()).ok(),
            Some(json!({ "approved": false, "comments": "fix X", "files": ["a", "b"] }))
        );
    }

    #[test]
    fn any_schema_fields_not_a_fixed_list() {
        let s = json!({ "properties": { "verdict": {}, "$score": {}, "next": {} } });
        let answer = "---\nverdict: ok\n$score: 3\nstatus: done\nconfidence: 0.9\n---\n";
        assert_eq!(
            candidate(answer, &s).ok(),
            Some(json!({ "verdict": "ok", "$score": 3 }))
        );
    }

    #[test]
    fn schema_without_properties_takes_everything() {
        let answer = "---\na: 1\n2: two\n---\n";
        for s in [
            json!({ "type": "object" }),
            json!({}),
            json!({ "properties": {} }),
        ] {
            assert_eq!(
                candidate(answer, &s).ok(),
                Some(json!({ "a": 1, "2": "two" })),
                "{s}"
            );
        }
        let open =
            json!({ "properties": { "a": {} }, "additionalProperties": { "type": "string" } });
        assert_eq!(
            candidate("---\na: 1\nb: x\n---\n", &open).ok(),
            Some(json!({ "a": 1, "b": "x" }))
        );
    }

    #[test]
    fn follows_refs_and_all_of() {
        let s = json!({
            "$ref": "#/$defs/out",
            "$defs": { "out": { "properties": { "x": {} } } }
        });
        assert_eq!(declared_properties(&s), Some(vec!["x".to_string()]));
        let s = json!({
            "allOf": [{ "properties": { "a": {} } }, { "$ref": "#/$defs/b" }],
            "$defs": { "b": { "properties": { "b": {} } } }
        });
        assert_eq!(
            declared_properties(&s),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(declared_properties(&json!({ "$ref": "#" })), None);
        assert_eq!(declared_properties(&json!(true)), None);
    }

    #[test]
    fn missing_fields_are_left_to_validation() {
        assert_eq!(
            candidate("---\nother: 1\n---\n", &schema()).ok(),
            Some(json!({}))
        );
    }

    #[test]
    fn reasons() {
        assert!(reason("just text").contains("no frontmatter"));
        assert!(reason("---\n---\nbody").contains("empty"));
        assert!(reason("---\na: 1\nbody").contains("closing"));
        assert!(reason("---\na: [1\n---\n").contains("not valid YAML"));
        assert!(reason("---\n- a\n---\n").contains("a list"));
        assert!(reason("---\n: : :\n\t- x\n---\n").contains("not valid YAML"));
    }

    #[test]
    fn json_answers() {
        assert_eq!(parse_json_answer(" {\"a\": 1} "), Ok(json!({ "a": 1 })));
        assert_eq!(
            parse_json_answer("```json\n{\"a\": 1}\n```"),
            Ok(json!({ "a": 1 }))
        );
        assert_eq!(
            parse_json_answer("```\n{\"a\": 1}\n```\n"),
            Ok(json!({ "a": 1 }))
        );
        assert_eq!(
            parse_json_answer("Sure! Here it is: {\"a\": {\"b\": 2}} Hope it helps."),
            Ok(json!({ "a": { "b": 2 } }))
        );
        assert!(parse_json_answer("").is_err_and(|e| e.contains("empty")));
        let e = parse_json_answer("I cannot do that.").unwrap_err();
        assert!(e.contains("I cannot do that."), "{e}");
    }

    #[test]
    fn long_answers_are_shortened() {
        let long = format!("{}{}", "a".repeat(100_000), "z".repeat(100_000));
        let msgs = extraction_messages(&schema(), &long);
        assert_eq!(msgs.len(), 2);
        assert!(
            msgs[0]
                .content
                .starts_with("Extract structured data matching this JSON Schema:")
        );
        assert!(msgs[0].content.contains("\"approved\""));
        let user = &msgs[1].content;
        assert!(user.chars().count() < MAX_EXTRACT_INPUT + 100);
        assert!(user.starts_with('a') && user.ends_with('z'));
        assert!(user.contains("characters left out"));
        assert_eq!(extraction_messages(&schema(), "short")[1].content, "short");
    }
}
