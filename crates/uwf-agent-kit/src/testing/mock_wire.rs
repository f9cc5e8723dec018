//! The scripted replies of [`MockLlm`](super::MockLlm) in the two other
//! wire formats agent CLIs speak: the Anthropic Messages API (Claude Code:
//! `POST /v1/messages`) and the OpenAI Responses API (Codex: `POST
//! /v1/responses`). A script is written once, as chat completions
//! ([`MockReply`](super::MockReply)); each reply is translated here into
//! the format of the request that consumes it, so the same script drives
//! hermes, Claude Code and Codex.

use std::io::{self, Write};

use serde_json::{Value, json};

use super::mock_llm::{MOCK_MODEL, MockRequest, pieces};

/// One assistant turn, read from a `chat.completion` body.
struct Turn {
    model: Value,
    text: String,
    /// `(id, name, arguments as JSON text)`.
    calls: Vec<(String, String, String)>,
    finish: String,
    input_tokens: u64,
    output_tokens: u64,
}

impl Turn {
    fn of(completion: &Value, request: &MockRequest) -> Self {
        let message = completion
            .pointer("/choices/0/message")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let text = message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let calls = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, tc)| {
                let id = tc
                    .get("id")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("call_{i}"), str::to_owned);
                let name = tc
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let args = tc
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}")
                    .to_owned();
                (id, name, args)
            })
            .collect();
        let finish = completion
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
            .unwrap_or("stop")
            .to_owned();
        let model = request
            .body
            .get("model")
            .filter(|m| m.is_string())
            .cloned()
            .unwrap_or_else(|| json!(MOCK_MODEL));
        // A rough token count: 4 characters a token.
        let input_tokens = (request.raw_body.len() as u64 / 4).max(1);
        let output_tokens = (message.to_string().len() as u64 / 4).max(1);
        Self {
            model,
            text,
            calls,
            finish,
            input_tokens,
            output_tokens,
        }
    }
}

fn sse_head(out: &mut impl Write, headers: &[(String, String)]) -> io::Result<()> {
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n",
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())
}

fn json_response(
    out: &mut impl Write,
    body: &Value,
    headers: &[(String, String)],
) -> io::Result<()> {
    let text = body.to_string();
    let mut head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        text.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(text.as_bytes())
}

/// `event: <type>\ndata: <json>\n\n`.
fn event(out: &mut impl Write, data: &Value) -> io::Result<()> {
    let name = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    out.write_all(format!("event: {name}\ndata: {data}\n\n").as_bytes())?;
    out.flush()
}

/// Answers an Anthropic Messages request with the scripted `completion`:
/// server-sent events (`message_start`, per block `content_block_start` /
/// `content_block_delta` / `content_block_stop`, `message_delta`,
/// `message_stop`) when the request streams, else one `message` object. A
/// text block carries the content, one `tool_use` block each tool call;
/// the stop reason is `tool_use` for tool calls, `max_tokens` for
/// `length`, else `end_turn`.
pub(super) fn anthropic(
    out: &mut impl Write,
    request: &MockRequest,
    completion: &Value,
    headers: &[(String, String)],
) -> io::Result<()> {
    let turn = Turn::of(completion, request);
    let stop_reason = match (turn.calls.is_empty(), turn.finish.as_str()) {
        (false, _) => "tool_use",
        (true, "length") => "max_tokens",
        _ => "end_turn",
    };
    let mut blocks = Vec::new();
    if !turn.text.is_empty() || turn.calls.is_empty() {
        blocks.push(json!({ "type": "text", "text": turn.text }));
    }
    for (id, name, args) in &turn.calls {
        let input: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
        blocks.push(json!({ "type": "tool_use", "id": id, "name": name, "input": input }));
    }
    let message = |content: Value, stop: Value, output_tokens: u64| {
        json!({
            "id": "msg_mock", "type": "message", "role": "assistant", "model": turn.model,
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": { "input_tokens": turn.input_tokens, "output_tokens": output_tokens }
        })
    };
    if !request.is_stream() {
        return json_response(
            out,
            &message(Value::Array(blocks), json!(stop_reason), turn.output_tokens),
            headers,
        );
    }
    sse_head(out, headers)?;
    event(
        out,
        &json!({ "type": "message_start", "message": message(json!([]), Value::Null, 1) }),
    )?;
    for (index, block) in blocks.iter().enumerate() {
        let (start, deltas) = if block["type"] == "text" {
            let text = block["text"].as_str().unwrap_or_default();
            let deltas: Vec<Value> = pieces(text)
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(|p| json!({ "type": "text_delta", "text": p }))
                .collect();
            (json!({ "type": "text", "text": "" }), deltas)
        } else {
            let args = block["input"].to_string();
            let deltas = pieces(&args)
                .into_iter()
                .map(|p| json!({ "type": "input_json_delta", "partial_json": p }))
                .collect();
            (
                json!({ "type": "tool_use", "id": block["id"], "name": block["name"], "input": {} }),
                deltas,
            )
        };
        event(
            out,
            &json!({ "type": "content_block_start", "index": index, "content_block": start }),
        )?;
        for delta in deltas {
            event(
                out,
                &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
            )?;
        }
        event(
            out,
            &json!({ "type": "content_block_stop", "index": index }),
        )?;
    }
    event(
        out,
        &json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason, "stop_sequence": null },
            "usage": { "output_tokens": turn.output_tokens }
        }),
    )?;
    event(out, &json!({ "type": "message_stop" }))
}

/// Answers an OpenAI Responses request with the scripted `completion`, as
/// server-sent events: `response.created`, per output item
/// `response.output_item.added`, its deltas (`response.output_text.delta`
/// or `response.function_call_arguments.delta`) and
/// `response.output_item.done`, then `response.completed` with every item
/// and the usage. A message item carries the content, one `function_call`
/// item each tool call. A request without `"stream": true` gets the
/// `response` object as JSON.
pub(super) fn responses(
    out: &mut impl Write,
    request: &MockRequest,
    completion: &Value,
    headers: &[(String, String)],
) -> io::Result<()> {
    let turn = Turn::of(completion, request);
    let mut items = Vec::new();
    if !turn.text.is_empty() || turn.calls.is_empty() {
        items.push(json!({
            "id": "msg_mock", "type": "message", "status": "completed", "role": "assistant",
            "content": [{ "type": "output_text", "text": turn.text, "annotations": [] }]
        }));
    }
    for (i, (id, name, args)) in turn.calls.iter().enumerate() {
        items.push(json!({
            "id": format!("fc_mock_{i}"), "type": "function_call", "status": "completed",
            "call_id": id, "name": name, "arguments": args
        }));
    }
    let response = |status: &str, output: Value| {
        json!({
            "id": "resp_mock", "object": "response", "created_at": 0, "status": status,
            "model": turn.model, "output": output,
            "usage": {
                "input_tokens": turn.input_tokens,
                "input_tokens_details": { "cached_tokens": 0 },
                "output_tokens": turn.output_tokens,
                "output_tokens_details": { "reasoning_tokens": 0 },
                "total_tokens": turn.input_tokens + turn.output_tokens
            }
        })
    };
    if !request.is_stream() {
        return json_response(out, &response("completed", Value::Array(items)), headers);
    }
    sse_head(out, headers)?;
    let mut seq = 0u64;
    let mut send = |out: &mut dyn Write, mut data: Value| -> io::Result<()> {
        data["sequence_number"] = json!(seq);
        seq += 1;
        let name = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message")
            .to_owned();
        out.write_all(format!("event: {name}\ndata: {data}\n\n").as_bytes())?;
        out.flush()
    };
    send(
        out,
        json!({ "type": "response.created", "response": response("in_progress", json!([])) }),
    )?;
    for (index, item) in items.iter().enumerate() {
        let item_id = item["id"].clone();
        let mut started = item.clone();
        started["status"] = json!("in_progress");
        if item["type"] == "message" {
            started["content"] = json!([]);
            send(
                out,
                json!({ "type": "response.output_item.added", "output_index": index, "item": started }),
            )?;
            let text = turn.text.as_str();
            send(
                out,
                json!({ "type": "response.content_part.added", "item_id": item_id,
                        "output_index": index, "content_index": 0,
                        "part": { "type": "output_text", "text": "", "annotations": [] } }),
            )?;
            for p in pieces(text).into_iter().filter(|p| !p.is_empty()) {
                send(
                    out,
                    json!({ "type": "response.output_text.delta", "item_id": item_id,
                            "output_index": index, "content_index": 0, "delta": p }),
                )?;
            }
            send(
                out,
                json!({ "type": "response.output_text.done", "item_id": item_id,
                        "output_index": index, "content_index": 0, "text": text }),
            )?;
            send(
                out,
                json!({ "type": "response.content_part.done", "item_id": item_id,
                        "output_index": index, "content_index": 0,
                        "part": { "type": "output_text", "text": text, "annotations": [] } }),
            )?;
        } else {
            started["arguments"] = json!("");
            send(
                out,
                json!({ "type": "response.output_item.added", "output_index": index, "item": started }),
            )?;
            let args = item["arguments"].as_str().unwrap_or("{}");
            for p in pieces(args) {
                send(
                    out,
                    json!({ "type": "response.function_call_arguments.delta", "item_id": item_id,
                            "output_index": index, "delta": p }),
                )?;
            }
            send(
                out,
                json!({ "type": "response.function_call_arguments.done", "item_id": item_id,
                        "output_index": index, "arguments": args }),
            )?;
        }
        send(
            out,
            json!({ "type": "response.output_item.done", "output_index": index, "item": item }),
        )?;
    }
    send(
        out,
        json!({ "type": "response.completed", "response": response("completed", Value::Array(items)) }),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Read;
    use std::net::TcpStream;

    use super::super::{MockLlm, MockReply};
    use super::*;

    fn post(mock: &MockLlm, path: &str, body: &Value) -> (String, String) {
        let body = body.to_string();
        let mut s = TcpStream::connect(mock.addr()).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.to_owned(), body.to_owned())
    }

    /// `(event name, data)` of each server-sent event.
    fn events(sse: &str) -> Vec<(String, Value)> {
        sse.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let name = name.strip_prefix("event: ").unwrap().to_owned();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(data["type"], name.as_str(), "event name = data.type");
                (name, data)
            })
            .collect()
    }

    #[test]
    fn anthropic_stream_of_a_tool_call_then_text() {
        let mock = MockLlm::start().unwrap();
        mock.reply_tool_call("Bash", json!({ "command": "echo hi > out.txt" }))
            .reply_text("---\nstatus: done\n---\n\nDone.");
        let req = json!({ "model": "claude-x", "stream": true, "messages": [] });
        let (head, sse) = post(&mock, "/v1/messages?beta=true", &req);
        assert!(head.contains("text/event-stream"), "{head}");
        let ev = events(&sse);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"message_start"));
        assert_eq!(names.last(), Some(&"message_stop"));
        assert_eq!(ev[0].1["message"]["model"], "claude-x");
        let start = &ev[1].1["content_block"];
        assert_eq!(start["type"], "tool_use");
        assert_eq!(start["name"], "Bash");
        let json_text: String = ev
            .iter()
            .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&json_text).unwrap(),
            json!({ "command": "echo hi > out.txt" })
        );
        let delta = ev.iter().find(|(n, _)| n == "message_delta").unwrap();
        assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");

        let (_, sse) = post(&mock, "/v1/messages", &req);
        let ev = events(&sse);
        let text: String = ev
            .iter()
            .filter_map(|(_, d)| d["delta"]["text"].as_str())
            .collect();
        assert_eq!(text, "---\nstatus: done\n---\n\nDone.");
        let delta = ev.iter().find(|(n, _)| n == "message_delta").unwrap();
        assert_eq!(delta.1["delta"]["stop_reason"], "end_turn");
        assert_eq!(mock.model_requests().len(), 2);
        assert!(mock.chat_requests().is_empty());
        assert!(mock.model_requests().iter().all(MockRequest::is_messages));
    }

    #[test]
    fn anthropic_without_stream_is_one_message() {
        let mock = MockLlm::start().unwrap();
        mock.reply_text("hi");
        let (_, body) = post(
            &mock,
            "/v1/messages",
            &json!({ "model": "m", "messages": [] }),
        );
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["type"], "message");
        assert_eq!(v["content"], json!([{ "type": "text", "text": "hi" }]));
        assert_eq!(v["stop_reason"], "end_turn");
    }

    #[test]
    fn responses_stream_of_a_function_call_then_text() {
        let mock = MockLlm::start().unwrap();
        mock.push(MockReply::tool_call(
            "shell",
            json!({ "command": ["bash", "-lc", "echo hi"] }),
        ))
        .reply_text("All done here.");
        let req = json!({ "model": "gpt-x", "stream": true, "input": [] });
        let (_, sse) = post(&mock, "/v1/responses", &req);
        let ev = events(&sse);
        assert_eq!(ev[0].0, "response.created");
        let done = ev.iter().find(|(n, _)| n == "response.completed").unwrap();
        let item = &done.1["response"]["output"][0];
        assert_eq!(item["type"], "function_call");
        assert_eq!(item["name"], "shell");
        assert_eq!(item["call_id"], "call_0");
        let args: String = ev
            .iter()
            .filter(|(n, _)| n == "response.function_call_arguments.delta")
            .filter_map(|(_, d)| d["delta"].as_str())
            .collect();
        assert_eq!(args, item["arguments"].as_str().unwrap());
        let seqs: Vec<u64> = ev
            .iter()
            .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, (0..ev.len() as u64).collect::<Vec<_>>());

        let (_, sse) = post(&mock, "/v1/responses", &req);
        let ev = events(&sse);
        let text: String = ev
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .filter_map(|(_, d)| d["delta"].as_str())
            .collect();
        assert_eq!(text, "All done here.");
        let done = &ev.last().unwrap().1;
        assert_eq!(done["type"], "response.completed");
        assert_eq!(
            done["response"]["output"][0]["content"][0]["text"],
            "All done here."
        );
        assert_eq!(done["response"]["model"], "gpt-x");
        assert!(mock.model_requests().iter().all(MockRequest::is_responses));
    }
}
