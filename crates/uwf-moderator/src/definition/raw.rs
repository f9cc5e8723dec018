//! Deserialization of the YAML format.
//!
//! Every check that can be made while reading happens inside a serde visitor,
//! so that serde_yaml attaches the line and column of the mapping being read
//! to the error. Untagged enums are avoided: their "did not match any
//! variant" errors say nothing useful.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use uwf_protocol::{ConditionDefinition, END, START, Transition};

use super::error::with_help;
use super::{RoleDraft, WorkflowDefinition};

/// The status key that means "any other status, or none".
pub(crate) const FALLBACK_STATUS: &str = "_";

/// A value read as a mapping of `Raw` and then checked and converted.
pub(crate) struct Checked<T>(pub T);

/// Conversion of a raw mapping, with an error message (see [`with_help`]).
pub(crate) trait FromRaw: Sized {
    type Raw: DeserializeOwned;
    const EXPECTING: &'static str;
    fn from_raw(raw: Self::Raw) -> Result<Self, String>;
}

impl<'de, T: FromRaw> Deserialize<'de> for Checked<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: FromRaw> Visitor<'de> for V<T> {
            type Value = Checked<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::EXPECTING)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let raw = T::Raw::deserialize(MapAccessDeserializer::new(map))?;
                T::from_raw(raw).map(Checked).map_err(de::Error::custom)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// A mapping kept in document order, refusing duplicate keys.
pub(crate) struct Entries<V>(pub Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Vis<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Vis<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(String, V)> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(with_help(
                            format!("duplicate key `{key}`"),
                            "each key may appear once in a mapping; merge the two entries",
                        )));
                    }
                    let value = map.next_value()?;
                    out.push((key, value));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Vis(PhantomData))
    }
}

impl<V> Entries<V> {
    fn into_map(self) -> BTreeMap<String, V> {
        self.0.into_iter().collect()
    }
}

// ---------------------------------------------------------------- workflow

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkflow {
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    roles: Option<Entries<Checked<RoleDraft>>>,
    #[serde(default)]
    conditions: Option<Entries<Condition>>,
    graph: Option<Graph>,
}

impl FromRaw for WorkflowDefinition {
    type Raw = RawWorkflow;
    const EXPECTING: &'static str =
        "a workflow: a mapping with `name`, `description`, `roles`, `conditions` and `graph`";

    fn from_raw(raw: RawWorkflow) -> Result<Self, String> {
        let name = match raw.name {
            None => {
                return Err(with_help(
                    "the workflow has no `name`",
                    "add `name: <registry name>` at the top level, e.g. `name: solve-issue`",
                ));
            }
            Some(n) if n.trim().is_empty() => {
                return Err(with_help(
                    "`name` is empty",
                    "the name is how `uwf thread start <name>` finds the workflow; give it one",
                ));
            }
            Some(n) => n,
        };
        let roles = raw.roles.ok_or_else(|| {
            with_help(
                "the workflow has no `roles`",
                "add `roles:` with one entry per role: `{description, systemPrompt, outputSchema}`",
            )
        })?;
        let graph = raw.graph.ok_or_else(|| {
            with_help(
                "the workflow has no `graph`",
                "add `graph:` with `$START` and one entry per role listing its transitions",
            )
        })?;
        let mut conditions: BTreeMap<String, ConditionDefinition> = raw
            .conditions
            .map(|c| c.0.into_iter().map(|(k, v)| (k, v.0)).collect())
            .unwrap_or_default();
        let graph = compile_graph(graph, &mut conditions)?;
        Ok(Self {
            name,
            description: raw.description.unwrap_or_default(),
            roles: roles
                .into_map()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
            conditions,
            graph,
        })
    }
}

// ---------------------------------------------------------------- roles

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RawRole {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    output_schema: Option<serde_json::Value>,
    #[serde(default)]
    goal: Option<String>,
    #[serde(default)]
    capabilities: Option<Vec<String>>,
    #[serde(default)]
    procedure: Option<String>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    meta: Option<serde_json::Value>,
}

impl FromRaw for RoleDraft {
    type Raw = RawRole;
    const EXPECTING: &'static str = "a role: a mapping with `description`, `systemPrompt` and `outputSchema` \
         (or `goal`, `capabilities`, `procedure`, `output` and `meta`)";

    fn from_raw(raw: RawRole) -> Result<Self, String> {
        let structured = raw.goal.is_some()
            || raw.capabilities.is_some()
            || raw.procedure.is_some()
            || raw.output.is_some();
        let system_prompt = match (raw.system_prompt, structured) {
            (Some(_), true) => {
                return Err(with_help(
                    "the role has both `systemPrompt` and `goal`/`capabilities`/`procedure`/`output`",
                    "write the instructions either as one `systemPrompt` or as `goal`, `capabilities`, \
                     `procedure` and `output` (assembled into the system prompt), not both",
                ));
            }
            (Some(p), false) => p,
            (None, true) => assemble_prompt(
                raw.goal.as_deref(),
                raw.capabilities.as_deref(),
                raw.procedure.as_deref(),
                raw.output.as_deref(),
            ),
            (None, false) => {
                return Err(with_help(
                    "the role has no instructions",
                    "add `systemPrompt: …` (or `goal: …`, with optional `capabilities`, `procedure` \
                     and `output`)",
                ));
            }
        };
        let output_schema = match (raw.output_schema, raw.meta) {
            (Some(_), Some(_)) => {
                return Err(with_help(
                    "the role has both `outputSchema` and `meta`",
                    "`meta` is the alternative name of `outputSchema`; keep one",
                ));
            }
            (Some(s), None) | (None, Some(s)) => s,
            (None, None) => {
                return Err(with_help(
                    "the role has no output schema",
                    "add `outputSchema:` (or `meta:` with goal/capabilities) with the JSON Schema of \
                     the role's output, e.g. `{type: object, properties: {summary: {type: string}}}`",
                ));
            }
        };
        Ok(Self {
            description: raw.description.unwrap_or_default(),
            system_prompt,
            output_schema,
        })
    }
}

/// The system prompt of a role written as goal/capabilities/procedure/output.
pub(crate) fn assemble_prompt(
    goal: Option<&str>,
    capabilities: Option<&[String]>,
    procedure: Option<&str>,
    output: Option<&str>,
) -> String {
    let mut sections: Vec<String> = Vec::new();
    let mut text = |title: &str, body: Option<&str>| {
        if let Some(b) = body.map(str::trim).filter(|b| !b.is_empty()) {
            sections.push(format!("## {title}\n{b}"));
        }
    };
    text("Goal", goal);
    if let Some(caps) = capabilities.filter(|c| !c.is_empty()) {
        let list: Vec<String> = caps.iter().map(|c| format!("- {}", c.trim())).collect();
        text("Capabilities", Some(&list.join("\n")));
    }
    text("Procedure", procedure);
    text("Output", output);
    sections.join("\n\n")
}

// ---------------------------------------------------------------- conditions

/// A condition: a bare expression or `{description, expression}`.
pub(crate) struct Condition(ConditionDefinition);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCondition {
    #[serde(default)]
    description: Option<String>,
    expression: String,
}

impl<'de> Deserialize<'de> for Condition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Condition;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a condition: a JSONata expression, or `{description, expression}`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Condition, E> {
                Ok(Condition(ConditionDefinition::Expression(v.to_string())))
            }
            // Unquoted YAML scalars such as `true` or `1` are JSONata too.
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Condition, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Condition, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Condition, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Condition, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Condition, A::Error> {
                let raw = RawCondition::deserialize(MapAccessDeserializer::new(map))?;
                Ok(Condition(match raw.description {
                    Some(description) => ConditionDefinition::Described {
                        description,
                        expression: raw.expression,
                    },
                    None => ConditionDefinition::Expression(raw.expression),
                }))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------- graph

/// `graph`: role → edges, in document order; must contain `$START`.
pub(crate) struct Graph(Vec<(String, Edges)>);

impl<'de> Deserialize<'de> for Graph {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Graph;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a graph: a mapping from `$START` and role names to their transitions")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Graph, A::Error> {
                let entries = Entries::<Edges>::deserialize(MapAccessDeserializer::new(map))?;
                if !entries.0.iter().any(|(k, _)| k == START) {
                    return Err(de::Error::custom(with_help(
                        "the graph has no `$START` entry",
                        "add `$START: [{role: <first role>, condition: null}]` (or `$START: {_: <first role>}`) \
                         to say which role runs first",
                    )));
                }
                Ok(Graph(entries.0))
            }
        }
        d.deserialize_map(V)
    }
}

/// The outgoing edges of one role: a list, or a status map.
pub(crate) enum Edges {
    List(Vec<Transition>),
    Statuses(Vec<(String, Target)>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTransition {
    role: String,
    #[serde(default)]
    condition: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
}

impl FromRaw for Transition {
    type Raw = RawTransition;
    const EXPECTING: &'static str =
        "a transition: `{role: <role or $END>, condition: <name or null>, prompt: <template>}`";

    fn from_raw(raw: RawTransition) -> Result<Self, String> {
        Ok(Self {
            role: raw.role,
            condition: raw.condition,
            prompt: raw.prompt,
        })
    }
}

impl<'de> Deserialize<'de> for Edges {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Edges;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "transitions: a list of `{role, condition, prompt}`, or a status map `{<status>: <target>, _: <target>}`",
                )
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Edges, A::Error> {
                let mut out = Vec::new();
                while let Some(t) = seq.next_element::<Checked<Transition>>()? {
                    out.push(t.0);
                }
                Ok(Edges::List(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Edges, A::Error> {
                let entries = Entries::<Target>::deserialize(MapAccessDeserializer::new(map))?;
                Ok(Edges::Statuses(entries.0))
            }
        }
        d.deserialize_any(V)
    }
}

/// A status map target: a role name, or `{role, prompt}`.
pub(crate) struct Target {
    role: String,
    prompt: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    role: String,
    #[serde(default)]
    prompt: Option<String>,
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Target;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a target: a role name (or `$END`), or `{role, prompt}`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Target, E> {
                Ok(Target {
                    role: v.to_string(),
                    prompt: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Target, A::Error> {
                let raw = RawTarget::deserialize(MapAccessDeserializer::new(map))?;
                Ok(Target {
                    role: raw.role,
                    prompt: raw.prompt,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Name of the condition generated for `status` in `graph[role]`.
pub(crate) fn status_condition_name(role: &str, status: &str) -> String {
    format!("{role}.$status={status}")
}

/// JSONata expression that holds when the last output's `$status` is `status`.
pub(crate) fn status_expression(status: &str) -> String {
    // A JSON string literal is a valid JSONata string literal: serde_json only
    // emits the escapes \" \\ \n \r \t \b \f and \u00XX, all of which
    // JSONata accepts (it rejects \/ and \', which serde_json never writes).
    let literal = serde_json::to_string(status).unwrap_or_else(|_| format!("{status:?}"));
    format!("steps[-1].output.`$status` = {literal}")
}

fn compile_graph(
    graph: Graph,
    conditions: &mut BTreeMap<String, ConditionDefinition>,
) -> Result<BTreeMap<String, Vec<Transition>>, String> {
    let mut out = BTreeMap::new();
    for (role, edges) in graph.0 {
        let transitions = match edges {
            Edges::List(list) => list,
            Edges::Statuses(statuses) => compile_statuses(&role, statuses, conditions)?,
        };
        out.insert(role, transitions);
    }
    Ok(out)
}

fn compile_statuses(
    role: &str,
    statuses: Vec<(String, Target)>,
    conditions: &mut BTreeMap<String, ConditionDefinition>,
) -> Result<Vec<Transition>, String> {
    let mut transitions = Vec::new();
    let mut fallback = None;
    for (status, target) in statuses {
        if status == FALLBACK_STATUS {
            fallback = Some(target);
            continue;
        }
        if role == START {
            return Err(with_help(
                format!(
                    "`graph.$START` routes on status `{status}`, but there is no output before the first step"
                ),
                "at `$START` only the fallback `_` applies: write `$START: {_: <first role>}`",
            ));
        }
        let name = status_condition_name(role, &status);
        if conditions.contains_key(&name) {
            return Err(with_help(
                format!(
                    "the status map of `graph.{role}` generates the condition `{name}`, which is already defined"
                ),
                "rename the condition in `conditions`: names of the form `<role>.$status=<status>` are \
                 reserved for status maps",
            ));
        }
        conditions.insert(
            name.clone(),
            ConditionDefinition::Described {
                description: format!("`{role}` finished with $status {status:?}"),
                expression: status_expression(&status),
            },
        );
        transitions.push(Transition {
            role: target.role,
            condition: Some(name),
            prompt: target.prompt,
        });
    }
    if let Some(target) = fallback {
        transitions.push(Transition {
            role: target.role,
            condition: None,
            prompt: target.prompt,
        });
    }
    if transitions.is_empty() {
        return Err(with_help(
            format!("the status map of `graph.{role}` is empty"),
            format!("add at least the fallback: `{role}: {{_: {END}}}`"),
        ));
    }
    Ok(transitions)
}
