//! The loop of a step: call the model with the conversation and the
//! tools, run the tools it calls, feed their results back, until it
//! submits the role's output (the `submit` tool) or answers in text —
//! within the step's limits — and record every turn.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use uwf_agent_kit::cli_agent::{self, progress};
use uwf_agent_kit::llm::LlmClient;
use uwf_agent_kit::{AgentContext, AgentRun};
use uwf_cas::CasError;
use uwf_state::policy::AgentPolicy;

use crate::error::AgentError;
use crate::tools::{Outcome, SUBMIT, Tools};
use crate::transcript::Recorder;
use crate::wire::{self, Item, ToolResult, ToolSpec};

/// The tag of progress lines on stderr.
const TAG: &str = "uwf-agent";

/// What the system prompt adds to the kit's: how to work and hand in.
const WORKING: &str = "\n\n## Working\n\nYou work in a directory through the tools you are given; every path is relative to it, and nothing outside it can be reached. Look before you change: read files, search them, run the project's commands. When the work is done, call the `submit` tool once with the deliverable's fields as its arguments: that is your answer. (Answering in text in the format above is accepted too.)";

/// `max_tokens` of an Anthropic request unless `UWF_AGENT_MAX_OUTPUT_TOKENS` says otherwise.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8192;

/// A model's price, dollars per million tokens (input, output).
pub type Price = (f64, f64);

/// What the loop needs besides the context.
pub struct Setup<'a> {
    /// The model.
    pub client: &'a LlmClient,
    /// The role's policy.
    pub policy: &'a AgentPolicy,
    /// The tools.
    pub tools: &'a Tools,
    /// The model's price, if known.
    pub price: Option<Price>,
    /// `max_tokens` for the Anthropic API.
    pub max_output_tokens: u32,
}

/// Totals of a step.
#[derive(Debug, Default)]
struct Totals {
    model_calls: u64,
    tool_calls: u64,
    prompt: Option<u64>,
    completion: Option<u64>,
    cost: Option<f64>,
}

fn add(total: &mut Option<u64>, n: Option<u64>) {
    if let Some(n) = n {
        *total = Some(total.unwrap_or(0) + n);
    }
}

impl Totals {
    fn tokens(&self) -> Option<u64> {
        match (self.prompt, self.completion) {
            (None, None) => None,
            (p, c) => Some(p.unwrap_or(0) + c.unwrap_or(0)),
        }
    }
}

/// How a step ended.
enum Ending {
    Submitted(Value),
    Answered(String),
}

/// The submit tool: its parameters are the role's output schema, so the
/// model hands in the output directly. `None` when the schema does not
/// describe an object (tool parameters must).
fn submit_spec(ctx: &AgentContext) -> Option<ToolSpec> {
    let schema = ctx.output_schema();
    let is_object = schema.get("type").and_then(Value::as_str) == Some("object")
        || (schema.get("type").is_none() && schema.get("properties").is_some());
    if !is_object {
        return None;
    }
    let mut parameters = schema.clone();
    if let Some(m) = parameters.as_object_mut() {
        // Bookkeeping keywords of a stored schema, not for the model.
        m.remove("$schema");
        m.remove("$id");
        m.insert("type".into(), json!("object"));
    }
    Some(ToolSpec {
        name: SUBMIT,
        description: format!(
            "Hand in your deliverable as role {:?}: its fields are the arguments. Call it once, when the work is done; the step ends when it is accepted.",
            ctx.role()
        ),
        parameters,
    })
}

/// One line for a tool call on stderr.
fn call_line(name: &str, input: &Result<Value, String>) -> String {
    let main = input.as_ref().ok().and_then(|v| {
        ["path", "pattern", "command"]
            .iter()
            .find_map(|k| v.get(k).and_then(Value::as_str).map(str::to_owned))
            .or_else(|| {
                v.get("argv").and_then(Value::as_array).map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
            })
    });
    match main {
        Some(m) => format!("{name}: {m}"),
        None => name.to_owned(),
    }
}

/// Whether `output` is one the role's outputSchema accepts: `accepted`,
/// or an error listing the violations for the model to fix.
fn check_submission(ctx: &AgentContext, output: &Value) -> Result<Outcome, AgentError> {
    match ctx.store().validate(ctx.output_schema_hash(), output) {
        Ok(()) => Ok(Outcome {
            content: "accepted".into(),
            is_error: false,
        }),
        Err(CasError::Invalid { violations, .. }) => Ok(Outcome::error(format!(
            "the submission does not match the role's output schema:\n- {}\nfix it and call submit again",
            violations
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n- ")
        ))),
        Err(e) => Err(AgentError::Cas(e)),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs the step; returns what the kit makes the StepNode of.
pub fn run(ctx: &AgentContext, setup: &Setup<'_>) -> Result<AgentRun, AgentError> {
    let started = Instant::now();
    let client = setup.client;
    let api = client.api();
    let mut recorder = Recorder::default();
    let mut totals = Totals::default();
    let system = format!("{}{WORKING}", ctx.system_prompt());
    let user = ctx.user_prompt()?;
    recorder.message("system", &system);
    recorder.message("user", &user);
    let mut items = vec![Item::User(user)];
    let mut specs = setup.tools.specs();
    let submit = submit_spec(ctx);
    if let Some(s) = submit.clone() {
        specs.push(s);
    }
    let deadline = setup.policy.max_wall_time.map(|t| started + t);
    let redactor = ctx.store().redactor();

    // Stores the transcript with how the step ended.
    let store = |recorder: &Recorder, totals: &Totals, ended: &str, error: Option<String>| {
        let mut f = Map::new();
        f.insert("model".into(), client.model().into());
        f.insert("alias".into(), client.alias().into());
        f.insert("api".into(), api.as_str().into());
        f.insert("ended".into(), ended.into());
        if let Some(e) = error {
            f.insert("error".into(), e.into());
        }
        f.insert("modelCalls".into(), totals.model_calls.into());
        f.insert("toolCalls".into(), totals.tool_calls.into());
        f.insert("promptTokens".into(), totals.prompt.into());
        f.insert("completionTokens".into(), totals.completion.into());
        f.insert("totalTokens".into(), totals.tokens().into());
        f.insert("costUsd".into(), totals.cost.into());
        f.insert("durationMs".into(), ms(started.elapsed()).into());
        recorder.store(ctx.store(), f)
    };
    // A failure: the transcript so far is stored, named on stderr and in
    // the error; its hash as text.
    let fail = |recorder: &Recorder, totals: &Totals, why: &str| -> Result<String, AgentError> {
        let h = store(recorder, totals, "failed", Some(why.to_owned()))?;
        progress(TAG, &format!("failed; the transcript so far is node {h}"));
        Ok(h.to_string())
    };
    // A limit reached: the failure, with the transcript.
    let limit = |recorder: &Recorder, totals: &Totals, what: String, key: &'static str| match fail(
        recorder, totals, &what,
    ) {
        Ok(transcript) => AgentError::Limit {
            what,
            key,
            transcript,
        },
        Err(e) => e,
    };

    let ending = loop {
        if cli_agent::interrupted() {
            fail(&recorder, &totals, "interrupted")?;
            return Err(AgentError::Interrupted);
        }
        if totals.model_calls >= u64::from(setup.policy.max_turns) {
            let max = setup.policy.max_turns;
            let what = format!(
                "the turn limit was reached: {max} model calls without a submission or an answer"
            );
            return Err(limit(&recorder, &totals, what, "maxTurns"));
        }
        if let (Some(d), Some(max)) = (deadline, setup.policy.max_wall_time)
            && Instant::now() >= d
        {
            let what = format!(
                "the time limit was reached: the step ran for {}",
                humantime::format_duration(max)
            );
            return Err(limit(&recorder, &totals, what, "maxWallTime"));
        }
        let body = wire::body(
            api,
            client.model(),
            setup.max_output_tokens,
            &system,
            &items,
            &specs,
        );
        let reply = match client.post_json(wire::path(api), &body) {
            Ok(r) => r,
            Err(e) => {
                fail(&recorder, &totals, &e.to_string())?;
                return Err(e.into());
            }
        };
        totals.model_calls += 1;
        let turn = match wire::parse(api, &reply.body) {
            Ok(t) => t,
            Err(reason) => {
                let transcript = fail(&recorder, &totals, &reason)?;
                return Err(AgentError::BadReply {
                    model: client.model().to_owned(),
                    reason,
                    transcript,
                });
            }
        };
        add(&mut totals.prompt, turn.input_tokens);
        add(&mut totals.completion, turn.output_tokens);
        let cost = setup.price.map(|(input, output)| {
            (turn.input_tokens.unwrap_or(0) as f64 * input
                + turn.output_tokens.unwrap_or(0) as f64 * output)
                / 1_000_000.0
        });
        if let Some(c) = cost {
            totals.cost = Some(totals.cost.unwrap_or(0.0) + c);
        }
        recorder.model_call(&turn, client.model(), cost, reply.duration_ms);
        progress(
            TAG,
            &format!(
                "turn {} · {}",
                totals.model_calls,
                if turn.calls.is_empty() {
                    format!("says: {}", turn.text)
                } else {
                    turn.calls
                        .iter()
                        .map(|c| call_line(&c.name, &c.input))
                        .collect::<Vec<_>>()
                        .join(" · ")
                }
            ),
        );
        if let (Some(max), Some(used)) = (setup.policy.max_tokens, totals.tokens())
            && used > max
        {
            let what = format!("the token limit was reached: {used} tokens used, {max} allowed");
            return Err(limit(&recorder, &totals, what, "maxTokens"));
        }
        if let (Some(max), Some(spent)) = (setup.policy.max_cost_usd, totals.cost)
            && spent > max
        {
            let what = format!("the cost limit was reached: ${spent:.4} spent, ${max} allowed");
            return Err(limit(&recorder, &totals, what, "maxCostUsd"));
        }

        if turn.calls.is_empty() {
            if turn.text.trim().is_empty() {
                let transcript = fail(&recorder, &totals, "the model answered with nothing")?;
                return Err(AgentError::EmptyAnswer {
                    model: client.model().to_owned(),
                    transcript,
                });
            }
            break Ending::Answered(turn.text);
        }

        // The calls of one turn run one after another, in their order.
        let mut results = Vec::new();
        let mut submitted = None;
        for call in &turn.calls {
            totals.tool_calls += 1;
            let t0 = Instant::now();
            let outcome = match (&call.input, call.name.as_str()) {
                (Err(text), _) => {
                    Outcome::error(format!("the arguments are not a JSON object: {text}"))
                }
                (Ok(_), SUBMIT) if submit.is_none() => Outcome::error(
                    "there is no submit tool for this role; answer in text in the format asked for",
                ),
                (Ok(_), SUBMIT) if submitted.is_some() => {
                    Outcome::error("the output was already submitted in this turn")
                }
                (Ok(args), SUBMIT) => {
                    let outcome = check_submission(ctx, args)?;
                    if !outcome.is_error {
                        submitted = Some(args.clone());
                    }
                    outcome
                }
                (Ok(args), name) => match setup.tools.call(name, args, deadline) {
                    Ok(o) => o,
                    Err(e) => {
                        fail(&recorder, &totals, &e.to_string())?;
                        return Err(e.into());
                    }
                },
            };
            // What goes to the model has the store's secrets cut out, like
            // what is recorded.
            let content = match redactor {
                Some(r) => r.redact(&outcome.content).into_owned(),
                None => outcome.content,
            };
            let first = content.lines().next().unwrap_or_default().to_owned();
            progress(
                TAG,
                &format!(
                    "  ↳ {}{first}",
                    if outcome.is_error { "error: " } else { "" }
                ),
            );
            let result = ToolResult {
                id: call.id.clone(),
                name: call.name.clone(),
                content,
                is_error: outcome.is_error,
            };
            recorder.tool_result(&result, ms(t0.elapsed()));
            results.push(result);
        }
        items.push(Item::Assistant {
            text: turn.text.clone(),
            calls: turn.calls.clone(),
        });
        items.push(Item::Results(results));
        if let Some(output) = submitted {
            break Ending::Submitted(output);
        }
    };

    let (ended, run) = match ending {
        Ending::Submitted(output) => ("submit", AgentRun::output(output)),
        Ending::Answered(text) => ("answer", AgentRun::text(text)),
    };
    let detail = store(&recorder, &totals, ended, None)?;
    progress(
        TAG,
        &format!(
            "finished ({ended}): {} model call(s), {} tool call(s), {} tokens{}, {} ms",
            totals.model_calls,
            totals.tool_calls,
            totals
                .tokens()
                .map_or_else(|| "?".to_owned(), |t| t.to_string()),
            totals
                .cost
                .map(|c| format!(", ${c:.4}"))
                .unwrap_or_default(),
            ms(started.elapsed())
        ),
    );
    tracing::debug!(%detail, api = api.as_str(), "transcript stored");
    Ok(run.with_detail(detail))
}
