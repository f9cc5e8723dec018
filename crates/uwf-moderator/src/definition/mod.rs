//! The YAML authoring format of workflows.
//!
//! [`parse_yaml`] reads a workflow file into a [`WorkflowDefinition`], the
//! canonical form: roles with inline output schemas, named JSONata
//! conditions, and a graph of ordered transitions. [`validate`] checks it,
//! and [`register`] stores it in the CAS as a Workflow node.
//!
//! # Canonical syntax (seeds 000/002)
//!
//! ```yaml
//! name: solve-issue
//! description: End-to-end issue resolution
//! roles:
//!   developer:
//!     description: Implements code changes
//!     systemPrompt: You are a developer agent. Implement the plan.
//!     outputSchema:              # an inline JSON Schema
//!       type: object
//!       properties: { summary: { type: string } }
//!       required: [summary]
//!   reviewer: { description: …, systemPrompt: …, outputSchema: { … } }
//! conditions:
//!   notApproved: "steps[-1].output.approved = false"      # a bare expression, or
//!   tooLong: { description: Three rounds, expression: "$count(steps[role='developer']) >= 3" }
//! graph:
//!   $START: [{ role: developer, condition: null }]
//!   developer: [{ role: reviewer, condition: null }]
//!   reviewer:
//!     - { role: $END, condition: tooLong }
//!     - { role: developer, condition: notApproved, prompt: "Address: {{comments}}" }
//!     - { role: $END, condition: null }
//! ```
//!
//! Transitions are tried in order; `condition: null` (or no `condition`)
//! always matches. `prompt` is an edge prompt template handed to the next
//! agent (see [`render_prompt`](crate::render_prompt)).
//!
//! # Alternative syntax (status maps; docs/workflow.md), compiled at parse time
//!
//! A role may be written as `{description, goal, capabilities, procedure,
//! output, meta}`: the system prompt is assembled from `goal`,
//! `capabilities`, `procedure` and `output` as markdown sections
//! (`## Goal`, `## Capabilities`, …) and `meta` is the output schema. A role
//! uses either `systemPrompt` or these fields, not both.
//!
//! `graph[role]` may be a **status map** instead of a list:
//!
//! ```yaml
//! graph:
//!   $START: { _: developer }
//!   reviewer:
//!     approved: $END
//!     changes_requested: { role: developer, prompt: "Fix: {{comments}}" }
//!     _: developer
//! ```
//!
//! The status is the `$status` field of the last step's output (a literal key
//! named `$status`). Each status other than `_` becomes a generated condition
//! named `<role>.$status=<status>` with the expression
//! ``steps[-1].output.`$status` = "<status>"`` (statuses compare as strings)
//! and a transition to its target; `_`, the fallback, becomes the final
//! unconditional transition. At `$START` there is no output yet, so only `_`
//! may be used there.

//!
//! # Upstream uwf's later syntax, compiled at parse time
//!
//! `frontmatter` is another name of the schema; `identity`/`prepare`/
//! `execute`/`report` another way to write instructions; top-level
//! `version: 1` and `x-…` keys are accepted; `$START: {new, resume}` becomes
//! a `resume` transition under the generated condition `$START.resume`
//! (`$count(steps) > 0`) before the `new` one; `$SUSPEND` is a target that
//! makes a thread wait ([`crate::SUSPEND`]). Edge prompts of such a workflow
//! are mustache or Liquid templates, compiled into uwf templates; which
//! language a workflow's prompts are in is decided by `x-uwf-prompts`, else
//! `version` (Liquid), else the later syntax (mustache), else the prompts
//! themselves (a tag only mustache reads, or status maps with tags that read
//! the same in both: mustache), else uwf's JSONata. A workflow surely in
//! upstream's forms also gets upstream's validation rules (every status of
//! a role with several routed, no `_` there, no undeclared prompt
//! variable). See docs/workflow.md, "Upstream workflows".

mod error;
pub(crate) mod expr_checks;
mod locate;
mod raw;
mod register;
mod schema_checks;
mod suggest;
mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uwf_protocol::{ConditionDefinition, Transition};

pub use error::{DefinitionError, DefinitionErrorDetails};
pub use expr_checks::IMPURE_FUNCTIONS;
pub use locate::Position;
pub use register::{RegisterError, Registered, register};
pub use suggest::did_you_mean;
pub use validate::{Finding, Report, validate, validate_payload};

/// The JSON Schema (draft-07) of the workflow YAML, both syntaxes, for
/// editors (yaml-language-server) and `uwf workflow schema`. It checks the
/// shape only; [`parse_yaml`] and [`validate`] check the rest.
pub const WORKFLOW_SCHEMA: &str = include_str!("../../schema/workflow.schema.json");

/// A workflow as written, in canonical form (alternative syntax compiled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowDefinition {
    /// Registry name, e.g. `solve-issue`.
    pub name: String,
    /// What the workflow is for.
    #[serde(default)]
    pub description: String,
    /// The roles, by name.
    pub roles: BTreeMap<String, RoleDraft>,
    /// Named JSONata conditions, including those generated from status maps.
    #[serde(default)]
    pub conditions: BTreeMap<String, ConditionDefinition>,
    /// Transitions of each role and of `$START`, in evaluation order.
    pub graph: BTreeMap<String, Vec<Transition>>,
    /// How the file was written, as far as [`validate`] needs to know (not
    /// stored).
    #[serde(skip)]
    pub(crate) form: Form,
}

/// What the parser saw of upstream uwf's forms (docs/workflow.md,
/// "Upstream workflows").
#[derive(Debug, Clone, Default)]
pub(crate) struct Form {
    /// The file is in upstream's forms for sure (its prompts are mustache or
    /// Liquid by `x-uwf-prompts`, `version`, the later syntax or a prompt
    /// only mustache reads): upstream's validation rules apply.
    pub upstream: bool,
    /// The keys of each role's status map, as written (`_` included).
    pub status_maps: Vec<(String, Vec<String>)>,
    /// Why the template language chosen for the prompts may be the wrong
    /// one (the `prompt-language` warning).
    pub prompts_note: Option<String>,
}

/// Definitions are equal when they compile to the same workflow: how the
/// file was written does not count (a definition written back as YAML, in
/// canonical form, equals the one it came from).
impl PartialEq for Form {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A role before registration: its output schema is still inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleDraft {
    /// One line for humans and diagrams.
    #[serde(default)]
    pub description: String,
    /// The role's instructions (assembled from `goal`, `capabilities`,
    /// `procedure` and `output` in the alternative syntax).
    pub system_prompt: String,
    /// The JSON Schema every output of the role must satisfy.
    pub output_schema: serde_json::Value,
}

/// Parses a workflow YAML file into its canonical form.
///
/// `source_name` (usually the file name) is used in error messages. Errors
/// point at a line and column of `text`: YAML syntax errors, wrong types,
/// missing or unknown keys, roles without an output schema, a graph without
/// `$START`, … Semantic checks that need the whole workflow (unknown targets,
/// unreachable roles, JSONata syntax) are [`validate`]'s job.
///
/// ```
/// let def = uwf_moderator::definition::parse_yaml(
///     "name: hello\nroles:\n  greeter:\n    goal: Say hello.\n    meta: { type: object }\n\
///      graph:\n  $START: { _: greeter }\n  greeter: { _: $END }\n",
///     "hello.yaml",
/// )?;
/// assert_eq!(def.roles["greeter"].system_prompt, "## Goal\nSay hello.");
/// assert_eq!(def.graph["greeter"][0].role, "$END");
/// # Ok::<(), uwf_moderator::definition::DefinitionError>(())
/// ```
pub fn parse_yaml(text: &str, source_name: &str) -> Result<WorkflowDefinition, DefinitionError> {
    serde_yaml::from_str::<raw::Checked<WorkflowDefinition>>(text)
        .map(|c| c.0)
        .map_err(|e| DefinitionError::from_yaml(&e, text, source_name))
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
