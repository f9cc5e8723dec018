//! The uwf moderator: what runs next.
//!
//! A workflow is data: roles, named [JSONata](https://jsonata.org) conditions
//! and a graph of ordered transitions. This crate covers its life cycle:
//!
//! * [`definition`]: the YAML authoring format ([`parse_yaml`](definition::parse_yaml),
//!   including the status-map syntax), static checks
//!   ([`validate`](definition::validate)) and registration in the CAS
//!   ([`register`](definition::register));
//! * [`evaluate`]: phase 1 of a step — given the workflow and the thread so
//!   far ([`ModeratorContext`](uwf_protocol::ModeratorContext)), the next role
//!   or `$END`, with the edge prompt rendered ([`render_prompt`]);
//! * [`thread`]: loading a thread (StartNode, StepNodes, outputs, Workflow)
//!   from the CAS;
//! * [`diagram`]: Mermaid and Graphviz renderings of a workflow;
//! * [`replay`]: a recorded thread re-decided under another workflow, and
//!   [`diff`]: the structural change between two workflows.
//!
//! JSONata runs through [`uwf_jsonata`], this workspace's implementation of
//! the complete language: every expression is bounded in size, time,
//! recursion depth and result size, sees object keys in a fixed order, and
//! may not use builtins whose result is not a function of the thread
//! ([`definition::IMPURE_FUNCTIONS`]).
//!
//! ```
//! use uwf_cas::{Cas, MemStore};
//! use uwf_moderator::{definition, evaluate};
//! use uwf_protocol::{ModeratorContext, StartNodePayload};
//!
//! let yaml = r#"
//! name: solve-issue
//! description: Plan, implement, review
//! roles:
//!   planner:
//!     description: Plans
//!     systemPrompt: You are a planning agent.
//!     outputSchema: { type: object, properties: { plan: { type: string } }, required: [plan] }
//!   developer:
//!     description: Implements
//!     goal: Implement the plan.
//!     capabilities: [file-edit, shell]
//!     meta: { type: object, properties: { summary: { type: string } } }
//! conditions:
//!   tooManyRounds: "$count(steps[role='developer']) >= 3"
//! graph:
//!   $START: [{ role: planner, condition: null }]
//!   planner: [{ role: developer, condition: null, prompt: "Plan: {{plan}}" }]
//!   developer:
//!     - { role: $END, condition: tooManyRounds }
//!     - { role: developer, condition: null }
//! "#;
//! let def = definition::parse_yaml(yaml, "solve-issue.yaml")?;
//! assert!(definition::validate(&def).is_ok());
//!
//! let cas = Cas::new(MemStore::new())?;
//! let registered = definition::register(&cas, &def)?;
//!
//! let ctx = ModeratorContext {
//!     start: StartNodePayload {
//!         workflow: registered.hash,
//!         prompt: "Fix the login bug".into(),
//!         parent_state: None,
//!     },
//!     steps: vec![],
//! };
//! let decision = evaluate(&registered.payload, &ctx)?;
//! assert_eq!(decision.next, "planner");
//! assert!(!decision.is_end());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// The pseudo-target of upstream's workflows that makes a thread wait: a
/// thread whose next role is `$SUSPEND` stops until `uwf thread resume`
/// continues it from `$START` ([`evaluate_resume`]).
pub const SUSPEND: &str = "$SUSPEND";

pub mod child;
pub mod definition;
pub mod diagram;
pub mod diff;
mod eval;
mod functions;
mod jsonata;
pub mod needs;
pub mod replay;
mod template;
pub mod thread;
mod upstream_template;
mod view_cache;
mod why;

pub use eval::{
    Decision, Explanation, ExpressionError, ModeratorError, Subject, TransitionReport, evaluate,
    evaluate_document, evaluate_expression, evaluate_resume, explain, render_prompt,
};
pub use jsonata::{
    MAX_EVAL_DEPTH, MAX_EXPRESSION_BYTES, MAX_INPUT_DEPTH, MAX_RESULT_ITEMS, TIME_LIMIT_MS,
};
pub use needs::{StepsNeeded, steps_needed};
pub use why::{Why, why_each, why_from};
