//! Deserialization of the YAML format.
//!
//! Every check that can be made while reading happens inside a serde visitor,
//! so that serde_yaml attaches the line and column of the mapping being read
//! to the error. Untagged enums are avoided: their "did not match any
//! variant" errors say nothing useful.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use uwf_protocol::{ConditionDefinition, END, START, Transition};

use super::error::{placed, with_help};
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

/// The top-level keys, for "unknown field" errors; besides them, any key
/// starting with `x-` is an extension (upstream keeps YAML anchors there).
const WORKFLOW_FIELDS: &[&str] = &[
    "name",
    "description",
    "version",
    "roles",
    "conditions",
    "graph",
    "x-…",
];

/// The extension key that says how edge prompts are written.
pub(crate) const PROMPTS_KEY: &str = "x-uwf-prompts";

pub(crate) struct RawWorkflow {
    name: Option<String>,
    description: Option<String>,
    version: Option<serde_yaml::Value>,
    roles: Option<Entries<Checked<ParsedRole>>>,
    conditions: Option<Entries<Condition>>,
    graph: Option<Graph>,
    prompts: Option<String>,
}

impl<'de> Deserialize<'de> for RawWorkflow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawWorkflow;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a workflow mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawWorkflow, A::Error> {
                let mut w = RawWorkflow {
                    name: None,
                    description: None,
                    version: None,
                    roles: None,
                    conditions: None,
                    graph: None,
                    prompts: None,
                };
                let mut seen: Vec<String> = Vec::new();
                while let Some(WorkflowKey(key)) = map.next_key::<WorkflowKey>()? {
                    // Some upstream files repeat `version: 1`: the same
                    // value twice is taken once.
                    if key == "version" && w.version.is_some() {
                        let again: serde_yaml::Value = map.next_value()?;
                        if Some(&again) != w.version.as_ref() {
                            return Err(de::Error::custom(
                                "`version` is given twice with different values",
                            ));
                        }
                        continue;
                    }
                    if seen.contains(&key) {
                        return Err(de::Error::custom(format!("duplicate field `{key}`")));
                    }
                    seen.push(key.clone());
                    match key.as_str() {
                        "name" => w.name = map.next_value()?,
                        "description" => w.description = map.next_value()?,
                        "version" => w.version = Some(map.next_value()?),
                        "roles" => w.roles = map.next_value()?,
                        "conditions" => w.conditions = map.next_value()?,
                        "graph" => w.graph = map.next_value()?,
                        PROMPTS_KEY => w.prompts = Some(map.next_value()?),
                        k if k.starts_with("x-") => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(w)
            }
        }
        d.deserialize_map(V)
    }
}

/// A top-level key, refused while it is read (so that the error points at
/// it) unless it is known or an `x-` extension.
struct WorkflowKey(String);

impl<'de> Deserialize<'de> for WorkflowKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = WorkflowKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a top-level key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<WorkflowKey, E> {
                if key.starts_with("x-") || WORKFLOW_FIELDS.contains(&key) {
                    Ok(WorkflowKey(key.to_string()))
                } else {
                    Err(de::Error::unknown_field(key, WORKFLOW_FIELDS))
                }
            }
        }
        d.deserialize_str(V)
    }
}

/// How the edge prompts of a workflow are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// uwf's templates: `{{ JSONata }}` over the last output.
    Jsonata,
    /// Upstream's mustache templates (2026-05-25 to 2026-06-10).
    Mustache,
    /// Upstream's Liquid templates (since 2026-06-10).
    Liquid,
}

impl Dialect {
    fn name(self) -> &'static str {
        match self {
            Dialect::Jsonata => "jsonata",
            Dialect::Mustache => "mustache",
            Dialect::Liquid => "liquid",
        }
    }
}

/// Why a workflow's prompts are read in their [`Dialect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Choice {
    /// `x-uwf-prompts`.
    Pinned,
    /// `version` (Liquid).
    Version,
    /// Upstream's later syntax: `frontmatter`, `$START: {new, resume}`.
    LaterSyntax,
    /// A prompt written in a way only mustache reads (`{{{x}}}`, a section,
    /// `{{$status}}`).
    PlainlyMustache,
    /// Status maps, and prompts that read the same in both languages.
    StatusMaps,
    /// uwf's own form.
    #[default]
    Own,
}

impl Choice {
    /// Whether the choice says for sure that the file is in upstream's
    /// forms, so that upstream's validation rules apply to it.
    pub(crate) fn is_upstream(self) -> bool {
        matches!(
            self,
            Self::Pinned | Self::Version | Self::LaterSyntax | Self::PlainlyMustache
        )
    }
}

/// What a `{{ … }}` tag says about the language it is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TagKind {
    /// Only mustache reads it: `{{{x}}}`, `{{#x}}`, `{{^x}}`, `{{/x}}`,
    /// `{{! x}}`, `{{& x}}`, `{{.}}`, `{{$status}}` (a JSONata variable that is
    /// never bound, so it would always render as nothing).
    Mustache,
    /// A name or a dotted path: the same text in both languages (for a
    /// string value).
    Either,
    /// Anything else: an operator, a call, a literal — JSONata.
    Jsonata,
}

/// The kinds of the tags of `prompt`, in order.
fn tag_kinds(prompt: &str) -> Vec<TagKind> {
    let mut out = Vec::new();
    let mut rest = prompt;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            break;
        };
        let inner = &after[..close];
        let first = inner.chars().next();
        let name = inner.trim();
        let kind = if matches!(first, Some('{' | '#' | '^' | '/' | '!' | '&' | '>' | '='))
            || name == "."
            || name == "$status"
        {
            TagKind::Mustache
        } else if !name.is_empty()
            && name.split('.').all(|part| {
                let mut cs = part.chars();
                cs.next().is_some_and(|c| c.is_alphabetic() || c == '_')
                    && cs.all(|c| c.is_alphanumeric() || c == '_')
            })
        {
            TagKind::Either
        } else {
            TagKind::Jsonata
        };
        out.push(kind);
        // A triple tag ends with `}}}`.
        let end =
            close + 2 + usize::from(first == Some('{') && after[close + 2..].starts_with('}'));
        rest = &after[end.min(after.len())..];
    }
    out
}

/// The dialect of the edge prompts and why: `x-uwf-prompts` if given; else
/// Liquid for a workflow with `version` (upstream added it after moving to
/// Liquid); else mustache for a workflow in upstream's later syntax (a
/// role's schema under `frontmatter`, or `$START` routed on
/// `new`/`resume`), which uwf's own syntax never used. Else the prompts
/// decide: mustache when one is plainly mustache and none is plainly
/// JSONata; uwf's JSONata when one is plainly JSONata; when every tag reads
/// the same in both (`{{summary}}`), mustache for a workflow with status
/// maps (upstream's edge prompts were mustache when status maps came, seed
/// 003), else JSONata. `note` tells of a choice that may be wrong.
fn dialect(
    raw: &RawWorkflow,
    roles: &[(String, Checked<ParsedRole>)],
) -> Result<(Dialect, Choice, Option<String>), String> {
    if let Some(p) = &raw.prompts {
        return match p.as_str() {
            "jsonata" => Ok((Dialect::Jsonata, Choice::Pinned, None)),
            "mustache" => Ok((Dialect::Mustache, Choice::Pinned, None)),
            "liquid" => Ok((Dialect::Liquid, Choice::Pinned, None)),
            other => Err(with_help(
                format!("`{PROMPTS_KEY}: {other}` is not a template language uwf knows"),
                format!("write `{PROMPTS_KEY}: jsonata`, `mustache` or `liquid`"),
            )),
        };
    }
    if raw.version.is_some() {
        return Ok((Dialect::Liquid, Choice::Version, None));
    }
    let graph = raw.graph.as_ref().map_or(&[][..], |g| &g.0[..]);
    let start_statuses = graph.iter().any(|(k, e)| {
        k == START
            && matches!(e, Edges::Statuses(s) if s.iter().any(|(st, _)| st == START_NEW || st == START_RESUME))
    });
    if start_statuses || roles.iter().any(|(_, r)| r.0.frontmatter) {
        return Ok((Dialect::Mustache, Choice::LaterSyntax, None));
    }
    let prompts = graph.iter().flat_map(|(_, e)| -> Vec<&str> {
        match e {
            Edges::List(l) => l.iter().filter_map(|t| t.prompt.as_deref()).collect(),
            Edges::Statuses(s) => s.iter().filter_map(|(_, t)| t.prompt.as_deref()).collect(),
        }
    });
    let kinds: Vec<TagKind> = prompts.flat_map(tag_kinds).collect();
    let mustache = kinds.contains(&TagKind::Mustache);
    let jsonata = kinds.contains(&TagKind::Jsonata);
    let pin = format!(
        "pin the language with `{PROMPTS_KEY}: mustache` or `{PROMPTS_KEY}: jsonata` at the top level"
    );
    match (mustache, jsonata) {
        (true, false) => Ok((Dialect::Mustache, Choice::PlainlyMustache, None)),
        (true, true) => Ok((
            Dialect::Jsonata,
            Choice::Own,
            Some(format!(
                "some edge prompts are written in mustache (`{{{{{{x}}}}}}`, `{{{{#x}}}}`, `{{{{$status}}}}`) and others in JSONata: \
                 they are all read as uwf's JSONata templates; {pin}"
            )),
        )),
        (false, true) => Ok((Dialect::Jsonata, Choice::Own, None)),
        (false, false) => {
            let status_maps = graph
                .iter()
                .any(|(k, e)| k != START && matches!(e, Edges::Statuses(_)));
            if !status_maps {
                return Ok((Dialect::Jsonata, Choice::Own, None));
            }
            let note = (!kinds.is_empty()).then(|| {
                format!(
                    "the edge prompts read the same as mustache and as JSONata templates except for values that are not \
                     strings (a list is `a,b` in mustache, `[\"a\",\"b\"]` in JSONata); they are read as mustache because \
                     the workflow routes on status maps (docs/workflow.md, \"Status maps\"); {pin}"
                )
            });
            Ok((Dialect::Mustache, Choice::StatusMaps, note))
        }
    }
}

fn check_version(v: &serde_yaml::Value) -> Result<(), String> {
    let ok = match v {
        serde_yaml::Value::Number(n) => n.as_u64() == Some(1),
        serde_yaml::Value::String(s) => s.trim() == "1",
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(with_help(
            format!(
                "`version: {}` is not a workflow format version uwf knows",
                serde_yaml::to_string(v).unwrap_or_default().trim()
            ),
            "the only version is 1 (upstream uwf's format); leave `version` out for uwf's own format",
        ))
    }
}

impl FromRaw for WorkflowDefinition {
    type Raw = RawWorkflow;
    const EXPECTING: &'static str =
        "a workflow: a mapping with `name`, `description`, `roles`, `conditions` and `graph`";

    fn from_raw(mut raw: RawWorkflow) -> Result<Self, String> {
        let name = match raw.name.take() {
            None => {
                return Err(with_help(
                    "the workflow has no `name`",
                    "add `name: <registry name>` at the top level, e.g. `name: solve-issue`",
                ));
            }
            Some(n) if n.trim().is_empty() => {
                return Err(with_help(
                    "`name` is empty",
                    "the name is how the registry finds the workflow; give it one",
                ));
            }
            Some(n) => n,
        };
        if let Some(v) = &raw.version {
            check_version(v)?;
        }
        let roles = raw.roles.take().ok_or_else(|| {
            with_help(
                "the workflow has no `roles`",
                "add `roles:` with one entry per role: `{description, systemPrompt, outputSchema}`",
            )
        })?;
        let (dialect, choice, prompts_note) = dialect(&raw, &roles.0)?;
        let graph = raw.graph.take().ok_or_else(|| {
            with_help(
                "the workflow has no `graph`",
                "add `graph:` with `$START` and one entry per role listing its transitions",
            )
        })?;
        let mut conditions: BTreeMap<String, ConditionDefinition> = raw
            .conditions
            .take()
            .map(|c| c.0.into_iter().map(|(k, v)| (k, v.0)).collect())
            .unwrap_or_default();
        let legacy: BTreeSet<String> = if dialect == Dialect::Mustache {
            roles
                .0
                .iter()
                .filter(|(_, r)| routes_on_plain_status(&r.0.draft.output_schema))
                .map(|(name, _)| name.clone())
                .collect()
        } else {
            BTreeSet::new()
        };
        let status_maps: Vec<(String, Vec<String>)> = graph
            .0
            .iter()
            .filter_map(|(role, e)| match e {
                Edges::Statuses(s) if role != START => {
                    Some((role.clone(), s.iter().map(|(k, _)| k.clone()).collect()))
                }
                _ => None,
            })
            .collect();
        let mut graph = compile_graph(graph, &mut conditions, dialect, &legacy)?;
        let mut roles: BTreeMap<String, RoleDraft> = roles
            .into_map()
            .into_iter()
            .map(|(k, v)| (k, v.0.draft))
            .collect();
        // `$status: "$SUSPEND"` came with upstream's later syntax
        // (2026-06-08), after its status maps (docs/workflow.md).
        if dialect != Dialect::Jsonata
            && choice != Choice::StatusMaps
            && choice != Choice::PlainlyMustache
        {
            reserve_suspend_status(&mut roles, &mut graph, &mut conditions);
        }
        Ok(Self {
            name,
            description: raw.description.unwrap_or_default(),
            roles,
            conditions,
            graph,
            form: super::Form {
                upstream: choice.is_upstream() && dialect != Dialect::Jsonata,
                status_maps,
                prompts_note,
            },
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
    #[serde(default)]
    frontmatter: Option<serde_json::Value>,
    #[serde(default)]
    identity: Option<String>,
    #[serde(default)]
    prepare: Option<String>,
    #[serde(default)]
    execute: Option<String>,
    #[serde(default)]
    report: Option<String>,
}

/// A role as read, and whether its schema was written under `frontmatter`
/// (upstream's later syntax).
pub(crate) struct ParsedRole {
    draft: RoleDraft,
    frontmatter: bool,
}

impl FromRaw for ParsedRole {
    type Raw = RawRole;
    const EXPECTING: &'static str = "a role: a mapping with `description`, `systemPrompt` and `outputSchema` \
         (or `goal`, `capabilities`, `procedure`, `output` and `meta`)";

    fn from_raw(mut raw: RawRole) -> Result<Self, String> {
        let frontmatter = raw.frontmatter.is_some();
        let meta = match (raw.meta.take(), raw.frontmatter.take()) {
            (Some(_), Some(_)) => {
                return Err(with_help(
                    "the role has both `meta` and `frontmatter`",
                    "`frontmatter` is upstream's later name of `meta` (the output schema); keep one",
                ));
            }
            (m, f) => m.or(f),
        };
        raw.meta = meta;
        let draft = role_draft(raw)?;
        Ok(Self { draft, frontmatter })
    }
}

fn role_draft(raw: RawRole) -> Result<RoleDraft, String> {
    {
        let staged = raw.identity.is_some()
            || raw.prepare.is_some()
            || raw.execute.is_some()
            || raw.report.is_some();
        let structured = raw.goal.is_some()
            || raw.capabilities.is_some()
            || raw.procedure.is_some()
            || raw.output.is_some();
        if staged && (structured || raw.system_prompt.is_some()) {
            return Err(with_help(
                "the role mixes `identity`/`prepare`/`execute`/`report` with other instructions",
                "write the instructions one way: `systemPrompt`; or `goal`, `capabilities`, \
                 `procedure` and `output`; or `identity`, `prepare`, `execute` and `report`",
            ));
        }
        let system_prompt = match (raw.system_prompt, structured || staged) {
            (Some(_), true) => {
                return Err(with_help(
                    "the role has both `systemPrompt` and `goal`/`capabilities`/`procedure`/`output`",
                    "write the instructions either as one `systemPrompt` or as `goal`, `capabilities`, \
                     `procedure` and `output` (assembled into the system prompt), not both",
                ));
            }
            (Some(p), false) => p,
            (None, true) if staged => assemble_staged(
                raw.identity.as_deref(),
                raw.prepare.as_deref(),
                raw.execute.as_deref(),
                raw.report.as_deref(),
            ),
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
        Ok(RoleDraft {
            description: raw.description.unwrap_or_default(),
            system_prompt,
            output_schema,
        })
    }
}

/// The system prompt of a role written as identity/prepare/execute/report
/// (upstream's role syntax of 2026-05-21): a markdown section per field.
fn assemble_staged(
    identity: Option<&str>,
    prepare: Option<&str>,
    execute: Option<&str>,
    report: Option<&str>,
) -> String {
    [
        ("Identity", identity),
        ("Prepare", prepare),
        ("Execute", execute),
        ("Report", report),
    ]
    .into_iter()
    .filter_map(|(title, body)| {
        body.map(str::trim)
            .filter(|b| !b.is_empty())
            .map(|b| format!("## {title}\n{b}"))
    })
    .collect::<Vec<_>>()
    .join("\n\n")
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

/// Upstream's reserved status (since 2026-06-08): a role of a workflow in
/// upstream's syntax may always finish with `$status: "$SUSPEND"` (and a
/// `reason`) to make the thread wait. Compiled into the canonical form: the
/// role's schema also accepts such an output (`anyOf` with the original),
/// and a first transition `<role>.$status=$SUSPEND` leads to `$SUSPEND`.
fn reserve_suspend_status(
    roles: &mut BTreeMap<String, RoleDraft>,
    graph: &mut BTreeMap<String, Vec<Transition>>,
    conditions: &mut BTreeMap<String, ConditionDefinition>,
) {
    for (role, draft) in roles.iter_mut() {
        let Some(transitions) = graph.get_mut(role) else {
            continue;
        };
        let name = status_condition_name(role, crate::SUSPEND);
        if conditions.contains_key(&name) || !draft.output_schema.is_object() {
            continue;
        }
        conditions.insert(
            name.clone(),
            ConditionDefinition::Described {
                description: format!("`{role}` asked to wait ($status \"$SUSPEND\")"),
                expression: status_expression(crate::SUSPEND),
            },
        );
        transitions.insert(
            0,
            Transition {
                role: crate::SUSPEND.into(),
                condition: Some(name),
                prompt: None,
            },
        );
        let original = std::mem::take(&mut draft.output_schema);
        draft.output_schema = serde_json::json!({
            "anyOf": [
                original,
                {
                    "type": "object",
                    "properties": {
                        "$status": { "const": crate::SUSPEND },
                        "reason": { "type": "string" }
                    },
                    "required": ["$status"]
                }
            ]
        });
    }
}

/// The `$START` status of a new thread.
pub(crate) const START_NEW: &str = "new";
/// The `$START` status of a thread resumed after `$SUSPEND`.
pub(crate) const START_RESUME: &str = "resume";
/// Name of the condition generated for `$START`'s `resume` route.
pub(crate) const RESUME_CONDITION: &str = "$START.resume";
/// Its expression: a resumed thread has steps, a new one has none.
pub(crate) const RESUME_EXPRESSION: &str = "$count(steps) > 0";

/// Compiles an edge prompt written in `dialect` into a uwf template.
fn compile_prompt(
    prompt: Option<String>,
    dialect: Dialect,
    role: &str,
    edge: &str,
) -> Result<Option<String>, String> {
    match (prompt, dialect) {
        (None, _) => Ok(None),
        // Upstream's moderator refused a prompt that rendered to nothing;
        // one that is nothing as written is refused when the file is read.
        (Some(p), _) if p.trim().is_empty() => Err(with_help(
            placed(
                format!("the edge prompt of `graph.{role}` {edge} is empty"),
                "graph",
                role,
                "",
            ),
            "write the instruction for the next agent, or leave `prompt` out",
        )),
        (Some(p), Dialect::Jsonata) => Ok(Some(p)),
        (Some(p), d) => crate::upstream_template::compile(&p, d == Dialect::Liquid)
            .map(Some)
            .map_err(|e| {
            with_help(
                placed(
                    format!(
                        "the edge prompt of `graph.{role}` {edge} is not a valid {} template: {e}\n  prompt: {p}",
                        d.name()
                    ),
                    "graph",
                    role,
                    &p,
                ),
                format!(
                    "fix the template (`{{{{name}}}}`, `{{{{{{name}}}}}}`, `{{{{#list}}}}…{{{{/list}}}}`, \
                     `{{{{ name | join: \", \" }}}}`); the workflow's prompts are read as {} because of {}",
                    d.name(),
                    dialect_reason(d)
                ),
            )
        }),
    }
}

fn dialect_reason(d: Dialect) -> &'static str {
    match d {
        Dialect::Liquid => "`version` (or `x-uwf-prompts: liquid`)",
        Dialect::Mustache => {
            "upstream's later syntax (`frontmatter`, `$START: {new, resume}`), a prompt only mustache reads \
             (`{{{x}}}`, `{{#x}}`, `{{$status}}`), status maps, or `x-uwf-prompts: mustache`"
        }
        Dialect::Jsonata => "uwf's own syntax",
    }
}

/// Whether a schema declares `status` but nowhere `$status`: upstream's
/// first status maps (2026-05-25, before `$status` the same day) routed on
/// the output's `status`.
fn routes_on_plain_status(schema: &serde_json::Value) -> bool {
    let mut shapes = vec![schema];
    for key in ["oneOf", "anyOf"] {
        if let Some(vs) = schema.get(key).and_then(|v| v.as_array()) {
            shapes.extend(vs);
        }
    }
    let has = |name: &str| {
        shapes
            .iter()
            .any(|s| s.get("properties").and_then(|p| p.get(name)).is_some())
    };
    has("status") && !has("$status")
}

/// Name of the condition generated for `status` in `graph[role]` when the
/// role routes on upstream's early `status` field.
fn plain_status_condition_name(role: &str, status: &str) -> String {
    format!("{role}.status={status}")
}

fn compile_graph(
    graph: Graph,
    conditions: &mut BTreeMap<String, ConditionDefinition>,
    dialect: Dialect,
    legacy: &BTreeSet<String>,
) -> Result<BTreeMap<String, Vec<Transition>>, String> {
    let mut out = BTreeMap::new();
    for (role, edges) in graph.0 {
        let transitions = match edges {
            Edges::List(list) => list
                .into_iter()
                .enumerate()
                .map(|(i, mut t)| {
                    t.prompt = compile_prompt(
                        t.prompt,
                        dialect,
                        &role,
                        &format!("(transition #{})", i + 1),
                    )?;
                    Ok(t)
                })
                .collect::<Result<Vec<_>, String>>()?,
            Edges::Statuses(statuses) if role == START => {
                compile_start(statuses, conditions, dialect)?
            }
            Edges::Statuses(statuses) => {
                let mut compiled = Vec::new();
                for (status, mut target) in statuses {
                    target.prompt = compile_prompt(
                        target.prompt,
                        dialect,
                        &role,
                        &format!("(status `{status}`)"),
                    )?;
                    compiled.push((status, target));
                }
                compile_statuses(&role, compiled, conditions, legacy.contains(&role))?
            }
        };
        out.insert(role, transitions);
    }
    Ok(out)
}

/// `$START` as a status map: `_` (uwf), or `new` and `resume` (upstream):
/// `resume` becomes a first transition under the generated condition
/// [`RESUME_CONDITION`], which holds only for a thread that already has
/// steps (one resumed after `$SUSPEND`), `new` the unconditional one.
fn compile_start(
    statuses: Vec<(String, Target)>,
    conditions: &mut BTreeMap<String, ConditionDefinition>,
    dialect: Dialect,
) -> Result<Vec<Transition>, String> {
    let mut fallback = None;
    let mut new = None;
    let mut resume = None;
    for (status, mut target) in statuses {
        target.prompt = compile_prompt(
            target.prompt,
            dialect,
            START,
            &format!("(status `{status}`)"),
        )?;
        match status.as_str() {
            FALLBACK_STATUS => fallback = Some(target),
            START_NEW => new = Some(target),
            START_RESUME => resume = Some(target),
            other => {
                return Err(with_help(
                    format!(
                        "`graph.$START` routes on status `{other}`, but there is no output before the first step"
                    ),
                    "at `$START` only the fallback `_` (or upstream's `new` and `resume`) applies: \
                     write `$START: {_: <first role>}`",
                ));
            }
        }
    }
    let first = match (fallback, new) {
        (Some(_), Some(_)) => {
            return Err(with_help(
                "`graph.$START` has both `_` and `new`",
                "`new` is the route of a new thread, like `_`: keep one",
            ));
        }
        (Some(t), None) | (None, Some(t)) => t,
        (None, None) if resume.is_none() => {
            return Err(with_help(
                "the status map of `graph.$START` is empty",
                "add at least the fallback: `$START: {_: <first role>}`",
            ));
        }
        (None, None) => {
            return Err(with_help(
                "`graph.$START` does not say which role runs first",
                "add `_: <first role>` (or `new: {role: <first role>, prompt: …}`)",
            ));
        }
    };
    let mut transitions = Vec::new();
    if let Some(r) = resume {
        if conditions.contains_key(RESUME_CONDITION) {
            return Err(with_help(
                format!(
                    "`$START.resume` generates the condition `{RESUME_CONDITION}`, which is already defined"
                ),
                "rename the condition in `conditions`",
            ));
        }
        conditions.insert(
            RESUME_CONDITION.into(),
            ConditionDefinition::Described {
                description: "the thread is resumed after $SUSPEND".into(),
                expression: RESUME_EXPRESSION.into(),
            },
        );
        transitions.push(Transition {
            role: r.role,
            condition: Some(RESUME_CONDITION.into()),
            prompt: r.prompt,
        });
    }
    transitions.push(Transition {
        role: first.role,
        condition: None,
        prompt: first.prompt,
    });
    Ok(transitions)
}

fn compile_statuses(
    role: &str,
    statuses: Vec<(String, Target)>,
    conditions: &mut BTreeMap<String, ConditionDefinition>,
    plain_status: bool,
) -> Result<Vec<Transition>, String> {
    let mut transitions = Vec::new();
    let mut fallback = None;
    for (status, target) in statuses {
        if status == FALLBACK_STATUS {
            fallback = Some(target);
            continue;
        }
        let (name, expression, field) = if plain_status {
            let literal = serde_json::to_string(&status).unwrap_or_else(|_| format!("{status:?}"));
            (
                plain_status_condition_name(role, &status),
                format!("steps[-1].output.`status` = {literal}"),
                "status",
            )
        } else {
            (
                status_condition_name(role, &status),
                status_expression(&status),
                "$status",
            )
        };
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
                description: format!("`{role}` finished with {field} {status:?}"),
                expression,
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
