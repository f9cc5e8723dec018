//! Storing a workflow in the CAS.

use std::collections::BTreeMap;

use uwf_cas::{Cas, CasError, Hash, Store};
use uwf_protocol::{RoleDefinition, WorkflowPayload};

use super::{Finding, Report, WorkflowDefinition, validate};

/// A workflow stored by [`register`].
#[derive(Debug, Clone, PartialEq)]
pub struct Registered {
    /// The Workflow node.
    pub hash: Hash,
    /// Its payload (output schemas replaced by their hashes).
    pub payload: WorkflowPayload,
    /// Warnings of [`validate`]; they do not prevent registration.
    pub warnings: Vec<Finding>,
}

/// Why [`register`] stored nothing (or only some schemas).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum RegisterError {
    /// [`validate`] found errors.
    #[error("the workflow is invalid:\n{0}")]
    #[diagnostic(
        code(uwf::workflow::invalid),
        help("fix the errors listed; warnings alone do not prevent registration")
    )]
    Invalid(Report),

    /// The CAS refused a role's output schema.
    #[error("the output schema of role `{role}` was rejected: {source}")]
    #[diagnostic(
        code(uwf::workflow::schema),
        help(
            "uwf supports a subset of JSON Schema; see docs/cas.md (\"Schemas: the supported subset\")"
        )
    )]
    Schema {
        /// The role.
        role: String,
        /// The CAS's reason.
        #[source]
        source: CasError,
    },

    /// Storing failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] CasError),
}

/// Validates a workflow, stores each role's output schema as a schema node
/// and the workflow as a Workflow node.
///
/// A schema without a `title` gets `<workflow>.<role>`, so that
/// `uwf cas schema list` says what it is. Registering the same definition
/// again yields the same hash and writes nothing new. Updating `registry.yaml`
/// is up to the caller.
pub fn register<S: Store>(
    cas: &Cas<S>,
    def: &WorkflowDefinition,
) -> Result<Registered, RegisterError> {
    let report = validate(def);
    if !report.is_ok() {
        return Err(RegisterError::Invalid(report));
    }
    let mut roles = BTreeMap::new();
    for (name, draft) in &def.roles {
        let mut schema = draft.output_schema.clone();
        if let Some(obj) = schema.as_object_mut()
            && !obj.contains_key("title")
        {
            obj.insert("title".into(), format!("{}.{name}", def.name).into());
        }
        let stored = cas
            .put_schema(schema)
            .map_err(|source| RegisterError::Schema {
                role: name.clone(),
                source,
            })?;
        roles.insert(
            name.clone(),
            RoleDefinition {
                description: draft.description.clone(),
                system_prompt: draft.system_prompt.clone(),
                output_schema: stored.hash,
            },
        );
    }
    let payload = WorkflowPayload {
        name: def.name.clone(),
        description: def.description.clone(),
        roles,
        conditions: def.conditions.clone(),
        graph: def.graph.clone(),
    };
    let stored = cas.put_value(cas.types().workflow, &payload)?;
    Ok(Registered {
        hash: stored.hash,
        payload,
        warnings: report.warnings,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uwf_cas::MemStore;

    use super::*;
    use crate::definition::parse_yaml;

    const YAML: &str = r#"
name: review
description: Write and review
roles:
  writer:
    description: Writes
    systemPrompt: Write it.
    outputSchema: { type: object, properties: { text: { type: string } }, required: [text] }
  reviewer:
    description: Reviews
    goal: Review it.
    meta: { title: Verdict, type: object, properties: { "$status": { type: string } } }
conditions:
  unused: "true"
graph:
  $START: { _: writer }
  writer: [{ role: reviewer, condition: null }]
  reviewer:
    rejected: { role: writer, prompt: "Again: {{comments}}" }
    _: $END
"#;

    fn cas() -> Cas<MemStore> {
        Cas::new(MemStore::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn registers_schemas_and_workflow() {
        let cas = cas();
        let def = parse_yaml(YAML, "review.yaml").unwrap_or_else(|e| panic!("{e}"));
        let reg = register(&cas, &def).unwrap_or_else(|e| panic!("{e}"));

        let node = cas.get(reg.hash).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node.type_hash, cas.types().workflow);
        let back: WorkflowPayload =
            serde_json::from_value(node.payload).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, reg.payload);

        let writer: Hash = reg.payload.roles["writer"].output_schema;
        let schema = cas.schema(writer).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(schema["title"], "review.writer");
        let reviewer: Hash = reg.payload.roles["reviewer"].output_schema;
        let schema = cas.schema(reviewer).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(schema["title"], "Verdict", "an existing title is kept");

        assert_eq!(
            reg.warnings.iter().map(|w| w.code).collect::<Vec<_>>(),
            // The status map makes the prompt mustache, with a note; it
            // reads `comments`, which the reviewer's schema does not declare.
            ["unused-condition", "prompt-language", "unknown-variable"]
        );
        // The stored output of a role validates against its schema.
        assert!(cas.put(writer, json!({"text": "hi"})).is_ok());
        assert!(cas.put(writer, json!({"txt": "hi"})).is_err());

        // Idempotent.
        let again = register(&cas, &def).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.hash, reg.hash);
    }

    #[test]
    fn invalid_workflow_is_refused() {
        let cas = cas();
        let mut def = parse_yaml(YAML, "review.yaml").unwrap_or_else(|e| panic!("{e}"));
        def.graph
            .get_mut("writer")
            .into_iter()
            .for_each(|t| t[0].role = "ghost".into());
        match register(&cas, &def) {
            Err(RegisterError::Invalid(r)) => {
                assert!(r.errors.iter().any(|e| e.code == "unknown-target"), "{r}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unsupported_schema_names_the_role() {
        let cas = cas();
        let mut def = parse_yaml(YAML, "review.yaml").unwrap_or_else(|e| panic!("{e}"));
        if let Some(r) = def.roles.get_mut("writer") {
            r.output_schema = json!({"type": "object", "$ref": "http://example.com/x.json"});
        }
        // Validation applies the CAS's subset check first, so nothing is stored.
        match register(&cas, &def) {
            Err(RegisterError::Invalid(report)) => {
                let f = report.errors.iter().find(|f| f.code == "invalid-schema");
                assert!(
                    f.is_some_and(|f| f.role.as_deref() == Some("writer")),
                    "{report}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            cas.schemas().map(|s| s.len()).unwrap_or(0),
            4,
            "no schema was stored"
        );
    }
}
