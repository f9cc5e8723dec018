//! Tests of the LLM client, the two-layer extract and `execute` against
//! the scripted [`MockLlm`](crate::testing::MockLlm).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uwf_cas::Hash;
use uwf_protocol::{StepNodePayload, WorkflowConfig};

use crate::extract::{self, Layer};
use crate::llm::{LlmClient, Message};
use crate::testing::{Fixture, MockLlm, MockReply};
use crate::{AgentContext, AgentRun, KitError, execute};

const CHAT: &str = "/v1/chat/completions";
const KEY: &str = "sk-uwf-test-0123456789-SECRET";

fn client(mock: &MockLlm) -> LlmClient {
    LlmClient::new(&mock.base_url(), Some(KEY.to_owned()), "mock-model")
        .with_backoff(Duration::from_millis(1))
}

// ----- the client ---------------------------------------------------------

#[test]
fn chat_sends_model_messages_key_and_json_mode() {
    let mock = MockLlm::start().unwrap();
    mock.reply_text("hello");
    let reply = client(&mock)
        .chat(&[Message::system("sys"), Message::user("hi")], true)
        .unwrap();
    assert_eq!(reply.content, "hello");
    let usage = reply.usage.unwrap();
    assert!(usage.total_tokens >= usage.prompt_tokens + usage.completion_tokens - 1);
    let req = &mock.requests()[0];
    assert_eq!(req.path, CHAT);
    assert_eq!(req.body["model"], "mock-model");
    assert_eq!(req.body["stream"], false);
    assert_eq!(
        req.body["response_format"],
        json!({ "type": "json_object" })
    );
    assert_eq!(
        req.body["messages"],
        json!([{ "role": "system", "content": "sys" }, { "role": "user", "content": "hi" }])
    );
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );

    mock.reply_text("plain");
    client(&mock).chat(&[Message::user("x")], false).unwrap();
    assert!(mock.requests()[1].body.get("response_format").is_none());
}

#[test]
fn anthropic_providers_get_the_messages_api() {
    let mock = MockLlm::start().unwrap();
    mock.reply_status(529).reply_text("hello");
    let c = client(&mock).with_api(uwf_protocol::ProviderApi::Anthropic);
    let reply = c
        .chat(&[Message::system("sys"), Message::user("hi")], true)
        .unwrap();
    assert_eq!(reply.content, "hello");
    assert!(reply.usage.unwrap().prompt_tokens > 0);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2, "the 529 was retried");
    let req = &reqs[1];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.body["system"], "sys");
    assert_eq!(req.body["max_tokens"], 8192);
    assert_eq!(
        req.body["messages"],
        json!([{ "role": "user", "content": "hi" }])
    );
    assert!(req.body.get("response_format").is_none());
}

#[test]
fn post_json_sends_any_body_with_retries() {
    let mock = MockLlm::start().unwrap();
    mock.reply_status(503).reply_tool_call("t", json!({"a": 1}));
    let reply = client(&mock)
        .post_json("chat/completions", &json!({"model": "m", "messages": []}))
        .unwrap();
    assert_eq!(
        reply
            .body
            .pointer("/choices/0/message/tool_calls/0/function/name"),
        Some(&json!("t"))
    );
    assert_eq!(mock.count(CHAT), 2);
    let e = client(&mock)
        .with_attempts(1)
        .post_json("nowhere", &json!({}))
        .unwrap_err();
    assert!(
        matches!(e, KitError::LlmStatus { status: 404, .. }),
        "{e:?}"
    );
    assert!(!format!("{e:?}").contains(KEY));
}

#[test]
fn no_key_no_authorization_header() {
    let mock = MockLlm::start().unwrap();
    mock.reply_text("ok");
    LlmClient::new(&mock.base_url(), None, "m")
        .chat(&[Message::user("x")], false)
        .unwrap();
    assert_eq!(mock.requests()[0].header("authorization"), None);
}

#[test]
fn retries_429_then_succeeds() {
    let mock = MockLlm::start().unwrap();
    mock.reply_status(429).reply_text("after the rate limit");
    let reply = client(&mock).chat(&[Message::user("x")], false).unwrap();
    assert_eq!(reply.content, "after the rate limit");
    assert_eq!(mock.count(CHAT), 2);
}

#[test]
fn honours_retry_after() {
    let mock = MockLlm::start().unwrap();
    mock.push(MockReply::status(503).with_header("Retry-After", "1"))
        .reply_text("ok");
    let started = Instant::now();
    let c = client(&mock).with_backoff(Duration::from_secs(30));
    c.chat(&[Message::user("x")], false).unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

#[test]
fn backoff_grows_exponentially() {
    let mock = MockLlm::start().unwrap();
    mock.reply_status(500).reply_status(502).reply_text("ok");
    let started = Instant::now();
    client(&mock)
        .with_backoff(Duration::from_millis(100))
        .chat(&[Message::user("x")], false)
        .unwrap();
    // 100 ms, then 200 ms.
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[test]
fn three_500s_are_an_error() {
    let mock = MockLlm::start().unwrap();
    mock.reply_status(500)
        .reply_status(500)
        .reply_status(500)
        .reply_text("too late");
    let err = client(&mock)
        .chat(&[Message::user("x")], false)
        .unwrap_err();
    let KitError::LlmStatus {
        status, attempts, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((*status, *attempts), (500, 3));
    assert_eq!(mock.count(CHAT), 3);
    assert_eq!(mock.pending(), 1);
    assert!(err.to_string().contains("HTTP 500"), "{err}");
}

#[test]
fn a_401_is_not_retried_and_never_shows_the_key() {
    let mock = MockLlm::start().unwrap();
    mock.push(MockReply::error(
        401,
        &format!("Incorrect API key provided: {KEY}. You can find your key at …"),
    ));
    let c = client(&mock);
    let err = c.chat(&[Message::user("x")], false).unwrap_err();
    assert!(
        matches!(
            err,
            KitError::LlmStatus {
                status: 401,
                attempts: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(mock.count(CHAT), 1);
    let plain = format!("{err}\n{err:?}\n{c:?}");
    let shown = format!("{plain}\n{:?}", miette::Report::new(err));
    assert!(!shown.contains(KEY), "{shown}");
    assert!(!shown.contains("0123456789-SECRET"), "{shown}");
    assert!(
        shown.contains("Incorrect API key provided: <redacted>"),
        "{shown}"
    );
    assert!(
        shown.contains("apiKeyEnv"),
        "the help points at the key: {shown}"
    );
}

#[test]
fn unreachable_endpoint() {
    // A port nobody listens on: bind one, then free it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = LlmClient::new(
        &format!("http://127.0.0.1:{port}/v1"),
        Some(KEY.into()),
        "m",
    )
    .with_backoff(Duration::from_millis(1));
    let err = c.chat(&[Message::user("x")], false).unwrap_err();
    let KitError::LlmUnreachable { url, attempts, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(url, &format!("http://127.0.0.1:{port}/v1/chat/completions"));
    assert_eq!(*attempts, 3, "connection failures are retried");
    let report = format!("{:?}", miette::Report::new(err));
    assert!(report.contains("baseUrl"), "{report}");
    assert!(!report.contains(KEY));
}

#[test]
fn timeouts_are_reported_and_not_retried() {
    let mock = MockLlm::start().unwrap();
    mock.push(MockReply::text("late").with_delay(Duration::from_secs(3)));
    let err = client(&mock)
        .with_timeout(Duration::from_millis(500))
        .chat(&[Message::user("x")], false)
        .unwrap_err();
    let KitError::LlmUnreachable {
        reason, attempts, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert!(
        reason.contains("timeout") || reason.contains("Timeout"),
        "{reason}"
    );
    assert_eq!(*attempts, 1);
}

#[test]
fn unusable_2xx_answers() {
    let mock = MockLlm::start().unwrap();
    mock.push(MockReply::raw(200, "text/html", "<html>proxy login</html>"))
        .reply_tool_call("terminal", json!({ "command": "ls" }))
        .push(MockReply::completion(json!({ "choices": [] })));
    let c = client(&mock);
    for expected in ["not JSON", "tool calls", "no choices[0].message"] {
        let err = c.chat(&[Message::user("x")], false).unwrap_err();
        assert!(
            matches!(&err, KitError::LlmResponse { reason, .. } if reason.contains(expected)),
            "{expected}: {err:?}"
        );
    }
}

// ----- extraction ---------------------------------------------------------

const PLANNER_SCHEMA: &str = r#"{"type":"object","required":["plan","steps"],"properties":{"plan":{"type":"string"},"steps":{"type":"array","items":{"type":"string"}}}}"#;

fn planner_schema() -> Value {
    serde_json::from_str(PLANNER_SCHEMA).unwrap()
}

/// Validation against the planner schema, as the store does it.
fn validator() -> impl Fn(&Value) -> Result<Vec<String>, KitError> {
    let cas = uwf_cas::Cas::new(uwf_cas::MemStore::new()).unwrap();
    let hash = cas.put_schema(planner_schema()).unwrap().hash;
    move |v: &Value| match cas.validate(hash, v) {
        Ok(()) => Ok(Vec::new()),
        Err(uwf_cas::CasError::Invalid { violations, .. }) => {
            Ok(violations.iter().map(ToString::to_string).collect())
        }
        Err(e) => Err(e.into()),
    }
}

#[test]
fn llm_extract_first_try() {
    let mock = MockLlm::start().unwrap();
    mock.push(MockReply::text(
        "```json\n{\"plan\": \"p\", \"steps\": [\"a\"]}\n```",
    ));
    let got =
        extract::llm_extract(&client(&mock), &planner_schema(), "prose", &validator()).unwrap();
    assert_eq!(got.output, json!({ "plan": "p", "steps": ["a"] }));
    assert_eq!((got.layer, got.llm_calls), (Layer::Llm, 1));
    let req = &mock.chat_requests()[0];
    let system = req.body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("Extract structured data matching this JSON Schema:"),
        "{system}"
    );
    assert!(system.contains("\"steps\""), "{system}");
    assert_eq!(req.last_user_message(), Some("prose"));
    assert_eq!(req.body["response_format"]["type"], "json_object");
}

#[test]
fn llm_extract_repairs_once() {
    let mock = MockLlm::start().unwrap();
    mock.reply_json(json!({ "plan": "p" }))
        .reply_json(json!({ "plan": "p", "steps": ["fixed"] }));
    let got =
        extract::llm_extract(&client(&mock), &planner_schema(), "prose", &validator()).unwrap();
    assert_eq!(got.output["steps"], json!(["fixed"]));
    assert_eq!(got.llm_calls, 2);
    let repair = &mock.chat_requests()[1];
    let msgs = repair.body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4, "system, answer, bad reply, feedback");
    assert_eq!(msgs[2]["role"], "assistant");
    assert_eq!(msgs[2]["content"], r#"{"plan":"p"}"#);
    let feedback = repair.last_user_message().unwrap();
    assert!(
        feedback.contains("does not satisfy the schema"),
        "{feedback}"
    );
    assert!(feedback.contains("steps"), "{feedback}");
}

#[test]
fn llm_extract_gives_up_after_the_repair_round() {
    let mock = MockLlm::start().unwrap();
    mock.reply_json(json!({ "plan": 1 }))
        .reply_json(json!({ "plan": 2 }))
        .reply_json(json!({ "plan": "never asked", "steps": [] }));
    let err =
        extract::llm_extract(&client(&mock), &planner_schema(), "prose", &validator()).unwrap_err();
    let KitError::ExtractInvalid {
        attempts,
        violations,
        model,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((*attempts, model.as_str()), (2, "mock-model"));
    assert!(violations.contains("/plan"), "{violations}");
    assert_eq!(mock.count(CHAT), 2, "exactly one repair round");

    let mock = MockLlm::start().unwrap();
    mock.reply_text("I am not JSON").reply_text("still not");
    let err =
        extract::llm_extract(&client(&mock), &planner_schema(), "prose", &validator()).unwrap_err();
    assert!(
        matches!(&err, KitError::ExtractNotJson { attempts: 2, reason, .. } if reason.contains("still not")),
        "{err:?}"
    );
    let feedback = mock.chat_requests()[1]
        .last_user_message()
        .unwrap()
        .to_owned();
    assert!(feedback.contains("not a JSON object"), "{feedback}");
}

// ----- through execute ----------------------------------------------------

fn plan_answer(plan: &str) -> String {
    format!("---\nplan: {plan}\nsteps:\n  - read\n  - write\n---\n\n## Plan\n\nDetails.")
}

fn review_answer(approved: bool) -> String {
    format!("---\napproved: {approved}\ncomments: round done\n---\n\nReview body.")
}

fn step_payload(fx: &Fixture, hash: Hash) -> StepNodePayload {
    serde_json::from_value(fx.cas().get(hash).unwrap().payload).unwrap()
}

fn output_of(fx: &Fixture, hash: Hash) -> Value {
    let step = step_payload(fx, hash);
    fx.cas().get(step.record.output).unwrap().payload
}

#[test]
fn frontmatter_answers_run_a_whole_workflow_with_zero_llm_calls() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    fx.write_config(&mock.config()).unwrap();
    let (thread, _) = fx.start_thread("Fix the login bug").unwrap();
    let mut reviews = 0;
    let roles = fx
        .drive(thread, 10, |role| {
            execute("fm-agent", fx.root(), &thread.to_string(), role, |ctx| {
                Ok(AgentRun::text(match ctx.role() {
                    "planner" => plan_answer("refactor auth"),
                    _ => {
                        reviews += 1;
                        review_answer(reviews >= 2)
                    }
                }))
            })
        })
        .unwrap();
    assert_eq!(roles, ["planner", "reviewer", "planner", "reviewer"]);
    assert_eq!(mock.requests().len(), 0, "no LLM call at all");
    assert_eq!(fx.head(thread).unwrap(), None, "the thread ended");
}

#[test]
fn prose_answers_cost_exactly_one_extract_call_per_step() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    fx.write_config(&mock.config()).unwrap();
    let (thread, _) = fx.start_thread("Fix the login bug").unwrap();
    mock.reply_json(json!({ "plan": "p1", "steps": ["a"] }))
        .reply_json(json!({ "approved": false, "comments": "more tests" }))
        .reply_json(json!({ "plan": "p2", "steps": ["a", "b"] }))
        .reply_json(json!({ "approved": true, "comments": "fine" }));
    let mut answers = Vec::new();
    let mut steps = Vec::new();
    let roles = fx
        .drive(thread, 10, |role| {
            let answer = format!(
                "Prose answer {} of the {role}, no frontmatter.",
                answers.len()
            );
            answers.push(answer.clone());
            let h = execute("prose-agent", fx.root(), &thread.to_string(), role, |_| {
                Ok(AgentRun::text(answer))
            })?;
            steps.push(h);
            Ok(h)
        })
        .unwrap();
    assert_eq!(roles.len(), 4);
    assert_eq!(mock.count(CHAT), 4, "one extract call per step");
    for (req, answer) in mock.chat_requests().iter().zip(&answers) {
        assert_eq!(req.last_user_message(), Some(answer.as_str()));
        assert_eq!(req.body["model"], "mock-model");
    }
    assert_eq!(
        output_of(&fx, steps[1]),
        json!({ "approved": false, "comments": "more tests" })
    );
    // The detail is the raw answer.
    let step = step_payload(&fx, steps[0]);
    assert_eq!(
        fx.cas().get(step.record.detail).unwrap().payload,
        json!({ "text": answers[0] })
    );
}

#[test]
fn broken_frontmatter_falls_back_to_the_llm() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    fx.write_config(&mock.config()).unwrap();
    for broken in [
        "---\nplan: [unclosed\n---\nbody",
        "---\nplan: no closing line\nbody",
        "---\n- a list\n---\n",
        "---\nplan: 3\n---\nwrong type",
    ] {
        let (thread, _) = fx.start_thread("t").unwrap();
        mock.reply_json(json!({ "plan": "from the LLM", "steps": [] }));
        let before = mock.count(CHAT);
        let ctx = AgentContext::load(fx.root(), &thread.to_string(), "planner").unwrap();
        let got = extract::extract(&ctx, broken).unwrap();
        assert_eq!((got.layer, got.llm_calls), (Layer::Llm, 1), "{broken}");
        assert_eq!(got.output["plan"], "from the LLM");
        assert_eq!(mock.count(CHAT), before + 1);
    }
}

#[test]
fn extract_reports_which_layer_and_agents_can_record_it() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    fx.write_config(&mock.config()).unwrap();
    let (thread, _) = fx.start_thread("t").unwrap();
    mock.reply_json(json!({ "plan": "x", "steps": [] }));
    let hash = execute(
        "self-extracting",
        fx.root(),
        &thread.to_string(),
        "planner",
        |ctx| {
            let answer = "Just prose.".to_owned();
            let ex = extract::extract(ctx, &answer)?;
            assert_eq!((ex.layer, ex.llm_calls), (Layer::Llm, 1));
            let fast = extract::extract(ctx, &plan_answer("y"))?;
            assert_eq!((fast.layer, fast.llm_calls), (Layer::Frontmatter, 0));
            let detail = crate::put_answer(
                ctx.store(),
                &format!("{answer}\n[layer {}, {} call(s)]", ex.layer, ex.llm_calls),
            )?;
            Ok(AgentRun::output(ex.output)
                .with_answer(answer)
                .with_detail(detail))
        },
    )
    .unwrap();
    assert_eq!(mock.count(CHAT), 1, "the kit does not extract again");
    assert_eq!(output_of(&fx, hash), json!({ "plan": "x", "steps": [] }));
}

#[test]
fn a_bad_extract_answer_gets_one_repair_round_then_a_clear_error_and_no_step() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    fx.write_config(&mock.config()).unwrap();
    let (thread, start) = fx.start_thread("t").unwrap();
    mock.reply_json(json!({ "plan": "p" }))
        .reply_json(json!({ "steps": "x" }));
    let err = execute("a", fx.root(), &thread.to_string(), "planner", |_| {
        Ok(AgentRun::text("prose"))
    })
    .unwrap_err();
    assert_eq!(mock.count(CHAT), 2);
    let cause = err.llm_cause().unwrap();
    assert!(
        matches!(cause, KitError::ExtractInvalid { attempts: 2, .. }),
        "{cause:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("no frontmatter") && text.contains("does not match the outputSchema"),
        "{text}"
    );
    assert_eq!(
        fx.cas().list_by_type(fx.cas().types().step_node).unwrap(),
        []
    );
    assert_eq!(fx.head(thread).unwrap(), Some(start));
}

fn config_yaml(fx: &Fixture, yaml: &str) {
    std::fs::write(fx.root().join("config.yaml"), yaml).unwrap();
}

fn layer2_error(fx: &Fixture) -> KitError {
    let (thread, _) = fx.start_thread("t").unwrap();
    let err = execute("a", fx.root(), &thread.to_string(), "planner", |_| {
        Ok(AgentRun::text("prose"))
    })
    .unwrap_err();
    assert!(matches!(err, KitError::Extraction { .. }), "{err:?}");
    *match err {
        KitError::Extraction { cause, .. } => cause,
        other => Box::new(other),
    }
}

#[test]
fn configuration_problems_are_distinct_errors() {
    let fx = Fixture::new().unwrap();
    config_yaml(&fx, "defaultAgent: x\n");
    assert!(matches!(layer2_error(&fx), KitError::NoModel { .. }));

    config_yaml(
        &fx,
        "providers:\n  p: { baseUrl: 'http://127.0.0.1:9/v1', apiKeyEnv: '' }\nmodels:\n  big: { provider: p, name: b }\ndefaultModel: big\nmodelOverrides: { extract: nope }\n",
    );
    let e = layer2_error(&fx);
    assert!(
        matches!(&e, KitError::UnknownModel { alias, known } if alias == "nope" && known == "big"),
        "{e:?}"
    );

    config_yaml(
        &fx,
        "models:\n  big: { provider: gone, name: b }\ndefaultModel: big\n",
    );
    assert!(matches!(
        layer2_error(&fx),
        KitError::UnknownProvider { .. }
    ));

    let var = "UWF_KIT_TEST_KEY_THAT_IS_NEVER_SET_4F2A";
    config_yaml(
        &fx,
        &format!(
            "providers:\n  p: {{ baseUrl: 'http://127.0.0.1:9/v1', apiKeyEnv: {var} }}\nmodels:\n  big: {{ provider: p, name: b }}\ndefaultModel: big\n"
        ),
    );
    let e = layer2_error(&fx);
    assert!(
        matches!(&e, KitError::MissingApiKey { var: v, .. } if v == var),
        "{e:?}"
    );
    assert!(e.to_string().contains(var));
    assert!(e.help_text().unwrap().contains(".env"));

    config_yaml(&fx, "defaultModel: [unclosed\n");
    let e = layer2_error(&fx);
    assert!(matches!(e, KitError::State(_)), "the parse error: {e:?}");
}

#[test]
fn unreachable_endpoint_through_execute() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fx = Fixture::new().unwrap();
    config_yaml(
        &fx,
        &format!(
            "providers:\n  p: {{ baseUrl: 'http://127.0.0.1:{port}/v1', apiKeyEnv: '' }}\nmodels:\n  m: {{ provider: p, name: m }}\ndefaultModel: m\n"
        ),
    );
    let (thread, _) = fx.start_thread("t").unwrap();
    let ctx = AgentContext::load(fx.root(), &thread.to_string(), "planner").unwrap();
    let client = ctx
        .llm(Some("extract"))
        .unwrap()
        .with_backoff(Duration::from_millis(1));
    let err = extract::llm_extract(&client, ctx.output_schema(), "prose", &|v: &Value| {
        extract::validate_in_store(&ctx, v)
    })
    .unwrap_err();
    assert!(
        matches!(err, KitError::LlmUnreachable { attempts: 3, .. }),
        "{err:?}"
    );
}

#[test]
fn role_model_and_config_access() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    let mut config = mock.config();
    config.models.insert(
        "cheap".into(),
        uwf_protocol::ModelConfig {
            provider: "mock".into(),
            name: "cheap-1".into(),
            price: None,
        },
    );
    config.role_models = Some(
        [(
            crate::testing::WORKFLOW_NAME.to_owned(),
            [("reviewer".to_owned(), "cheap".to_owned())].into(),
        )]
        .into(),
    );
    fx.write_config(&config).unwrap();
    let (thread, _) = fx.start_thread("t").unwrap();
    let ctx = AgentContext::load(fx.root(), &thread.to_string(), "reviewer").unwrap();
    assert_eq!(ctx.config(), Some(&config));
    assert_eq!(ctx.model_alias(None).unwrap(), "cheap");
    assert_eq!(ctx.llm(None).unwrap().model(), "cheap-1");
    assert_eq!(ctx.model_alias(Some("extract")).unwrap(), "mock");
    let planner = AgentContext::load(fx.root(), &thread.to_string(), "planner").unwrap();
    assert_eq!(planner.llm(None).unwrap().model(), "mock-model");
    // with_config replaces the file.
    let other = planner.with_config(WorkflowConfig::default());
    assert!(matches!(
        other.llm(None).unwrap_err(),
        KitError::NoModel { .. }
    ));
}

#[test]
fn schema_without_properties_takes_everything() {
    let mock = MockLlm::start().unwrap();
    let fx = Fixture::new().unwrap();
    fx.write_config(&mock.config()).unwrap();
    let wf = fx
        .register_workflow(
            "name: free\ndescription: d\nroles:\n  note:\n    description: d\n    systemPrompt: Write notes.\n    outputSchema: { title: free-note, type: object }\ngraph:\n  $START: [{ role: note, condition: null }]\n  note: [{ role: $END, condition: null }]\n",
        )
        .unwrap();
    let (thread, _) = fx.start_thread_in(wf, "t").unwrap();
    let ctx = AgentContext::load(fx.root(), &thread.to_string(), "note").unwrap();
    assert!(
        ctx.format_instruction().contains("no fixed fields"),
        "{}",
        ctx.format_instruction()
    );
    let fm = extract::extract(&ctx, "---\nmood: good\nscore: 3\n---\nbody").unwrap();
    assert_eq!(
        (fm.layer, fm.output),
        (Layer::Frontmatter, json!({ "mood": "good", "score": 3 }))
    );
    mock.reply_json(json!({ "summary": "all of it", "n": [1, 2] }));
    let llm = extract::extract(&ctx, "prose only").unwrap();
    assert_eq!(
        (llm.layer, llm.output),
        (Layer::Llm, json!({ "summary": "all of it", "n": [1, 2] }))
    );
}
