//! `uwf-mock-llm`: the kit's scripted OpenAI-compatible server as a
//! process, for shell scripts and CI steps (build it with
//! `cargo build -p uwf-agent-kit --features testing --bin uwf-mock-llm`).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;
use uwf_agent_kit::testing::{MockLlm, MockReply};

const HELP: &str = "\
uwf-mock-llm: a scripted OpenAI-compatible server on 127.0.0.1, for tests.

Usage: uwf-mock-llm [--port N] [--script FILE] [--log FILE] [--port-file FILE]

  --port N          port on 127.0.0.1 (default 0: any free port)
  --script FILE     YAML or JSON: a list of turns consumed in order, one per
                    POST …/chat/completions, or {turns: [...], exhausted: {...}}
                    (the reply once the list is used up)
  --log FILE        append one JSON line per request (authorization cut short)
  --port-file FILE  write the bound port to FILE (atomically) once listening

Turns (the format of mock_openai.py):
  {content: \"text\"}                      an answer
  {json: {approved: true}}               an answer whose content is that JSON
  {tool_calls: [{name: terminal, arguments: {command: \"echo hi\"}, id: c1}]}
  {reasoning: \"…\", content: \"…\"}         adds reasoning_content
  {status: 500, error: \"boom\"}           an HTTP error; {retry_after: 1} adds the header
  {delay: 1.5, …}                        sleep first (seconds)
  {finish_reason: length, …}             override the finish reason

A request with \"stream\": true gets server-sent events. POST …/messages
(Anthropic Messages API, Claude Code) and POST …/responses (OpenAI Responses
API, Codex) consume the same turns, answered in their own formats. Any other
request gets a 404. Prints `uwf-mock-llm listening on http://127.0.0.1:<port>/v1`,
then serves until killed.";

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uwf-mock-llm: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<(), String> {
    let mut port = 0u16;
    let mut script = None;
    let mut log = None;
    let mut port_file = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                return Ok(());
            }
            "--port" => {
                let v = value("--port")?;
                port = v.parse().map_err(|_| format!("--port: not a port: {v}"))?;
            }
            "--script" => script = Some(PathBuf::from(value("--script")?)),
            "--log" => log = Some(PathBuf::from(value("--log")?)),
            "--port-file" => port_file = Some(PathBuf::from(value("--port-file")?)),
            other => return Err(format!("unknown argument {other}; see --help")),
        }
    }
    let (turns, exhausted) = match &script {
        Some(path) => load_script(path)?,
        None => (Vec::new(), None),
    };
    let mock = MockLlm::bind(port, log.as_deref()).map_err(|e| format!("cannot listen: {e}"))?;
    for t in turns {
        mock.push(t);
    }
    if let Some(e) = exhausted {
        mock.set_default(e);
    }
    if let Some(pf) = &port_file {
        let tmp = pf.with_extension("tmp");
        std::fs::write(&tmp, mock.addr().port().to_string())
            .and_then(|()| std::fs::rename(&tmp, pf))
            .map_err(|e| format!("cannot write {}: {e}", pf.display()))?;
    }
    println!("uwf-mock-llm listening on {}", mock.base_url());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    loop {
        std::thread::park();
    }
}

fn load_script(path: &std::path::Path) -> Result<(Vec<MockReply>, Option<MockReply>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let doc: Value = serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let (turns, exhausted) = match &doc {
        Value::Array(t) => (t.clone(), None),
        Value::Object(o) => (
            o.get("turns")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            o.get("exhausted").filter(|v| !v.is_null()).cloned(),
        ),
        Value::Null => (Vec::new(), None),
        other => {
            return Err(format!(
                "{}: a script is a list of turns, not {other}",
                path.display()
            ));
        }
    };
    let turns = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            MockReply::from_turn(t).map_err(|e| format!("{} turn {i}: {e}", path.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let exhausted = exhausted
        .map(|e| MockReply::from_turn(&e).map_err(|e| format!("{} exhausted: {e}", path.display())))
        .transpose()?;
    Ok((turns, exhausted))
}
