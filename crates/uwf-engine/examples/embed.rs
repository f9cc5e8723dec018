//! A program that embeds the uwf engine: it registers a workflow, starts a
//! thread and steps it to `$END` with a closure as the agent, over the
//! embedded filesystem store in a temporary directory.
//!
//! ```sh
//! cargo run -p uwf-engine --example embed
//! ```
//!
//! The same engine runs agent commands when [`StepOptions::in_process`] is
//! `None` (then config.yaml or [`StepOptions::agent`] names them).

use std::sync::Arc;

use uwf_engine::{AgentCall, Engine, NoProgress, Progress, Ran, StepOptions};
use uwf_protocol::{StepNodePayload, StepRecord};

const WORKFLOW: &str = r#"
name: count
description: counts to three
roles:
  counter:
    description: adds one
    systemPrompt: add one to the last number
    outputSchema: { type: object, properties: { n: { type: integer } }, required: [n] }
conditions:
  three: { description: reached three, expression: "steps[-1].output.n >= 3" }
graph:
  $START: [ { role: counter, condition: null } ]
  counter: [ { role: $END, condition: three }, { role: counter, condition: null } ]
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let engine = Engine::open(dir.path())?;

    let definition = uwf_moderator::definition::parse_yaml(WORKFLOW, "count.yaml")?;
    let workflow = uwf_moderator::definition::register(engine.cas(), &definition)?;
    let started = uwf_engine::start(&engine, workflow.hash, "count to three", None)?;
    println!("started thread {}", started.thread);

    // The agent: reads the last number from the thread, stores the next one
    // as the role's output and writes the StepNode that links it.
    let agent = |call: &AgentCall<'_>| -> Result<uwf_cas::Hash, String> {
        let cas = engine.cas();
        let last = call
            .view
            .steps
            .last()
            .and_then(|s| s.output["n"].as_i64())
            .unwrap_or(0);
        let schema = call.view.workflow.roles[call.role].output_schema;
        let output = cas
            .put_value(schema, &serde_json::json!({ "n": last + 1 }))
            .map_err(|e| e.to_string())?
            .hash;
        let step = StepNodePayload {
            start: call.view.start_hash,
            prev: call.view.steps.last().map(|s| s.hash),
            record: StepRecord {
                role: call.role.to_string(),
                output,
                // Anything stored can be the detail; here, the output itself.
                detail: output,
                agent: "embed-example".to_string(),
            },
            child_thread: None,
        };
        let hash = cas
            .put_value(cas.types().step_node, &step)
            .map_err(|e| e.to_string())?
            .hash;
        println!("  {} wrote n = {}", call.role, last + 1);
        Ok(hash)
    };

    let opts = StepOptions {
        in_process: Some(&agent),
        ..StepOptions::default()
    };
    let progress: Arc<dyn Progress> = Arc::new(NoProgress);
    match uwf_engine::run(&engine, started.thread, &opts, &progress, 10)? {
        Ran::Done(out) => println!("done at {} (archived)", out.head),
        Ran::Waiting(_) => println!("waits for a person"),
        Ran::MaxSteps { steps, .. } => println!("not done after {steps} steps"),
    }
    Ok(())
}
