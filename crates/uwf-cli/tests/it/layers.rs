//! The layer rule of the workspace, enforced.
//!
//! ```text
//! uwf-protocol ← uwf-util ← (uwf-cas, uwf-state) ← uwf-moderator ← uwf-engine ← uwf-cli (and the agents' tests)
//! (uwf-cas, uwf-state) ← uwf-relay ← uwf-backend ← (uwf-engine, uwf-agent-kit)
//! uwf-backend ← uwf-store-pg ← uwf-cli (and uwf-engine's tests)
//! uwf-moderator ← uwf-agent-kit ← (agents/*, uwf-cli)
//! uwf-picture ← uwf-jsonata ← uwf-moderator
//! uwf-moderator ← uwf-view ← uwf-cli
//! ```
//!
//! Every workspace package has a layer ([`LAYERS`], or 8 for any package whose
//! manifest lives under `agents/`). Normal, build and dev dependencies on
//! other workspace packages must point to a strictly lower layer: agents
//! cannot use the CLI (nor the CLI an agent), the CAS cannot use the
//! moderator, and so on. See `docs/architecture.md`.
//!
//! The check reads `cargo metadata --no-deps`, so it needs no network.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The layer table. A new workspace crate must be added here (crates under
/// `agents/` are placed in [`AGENT_LAYER`] automatically).
const LAYERS: &[(&str, u8)] = &[
    // Leaves that know nothing of uwf: JSONata and its picture strings.
    ("uwf-picture", 0),
    // Test support: a throw-away PostgreSQL server (knows nothing of uwf).
    ("uwf-pg-testing", 0),
    ("uwf-jsonata", 1),
    ("uwf-protocol", 0),
    ("uwf-util", 1),
    ("uwf-cas", 2),
    ("uwf-state", 2),
    ("uwf-moderator", 3),
    // The store relay: an engine serves its store to the agent it runs.
    ("uwf-relay", 3),
    // Opening a store from where it lives: the registry of backends.
    ("uwf-backend", 4),
    ("uwf-view", 4),
    // The PostgreSQL backend of both storage traits, registered by the
    // programs that link it.
    ("uwf-store-pg", 5),
    // Above uwf-store-pg only for its own tests on a real server.
    ("uwf-engine", 6),
    // Knows no engine (its `testing` feature runs threads with one).
    ("uwf-agent-kit", 7),
    ("uwf-cli", 8),
];

/// The layer of every package whose manifest lives under `agents/`.
const AGENT_LAYER: u8 = 8;

/// The directory (relative to the workspace root) whose packages are agents.
const AGENTS_DIR: &str = "agents";

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Violation {
    /// A workspace package that is neither in [`LAYERS`] nor under `agents/`.
    Unplaced { package: String, manifest: String },
    /// A dependency edge that does not point to a strictly lower layer.
    Edge {
        from: String,
        from_layer: u8,
        to: String,
        to_layer: u8,
        kind: String,
    },
    /// The metadata is not shaped as expected.
    Malformed(String),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Unplaced { package, manifest } => write!(
                f,
                "workspace package `{package}` ({manifest}) has no layer: place it in the \
                 layer table `LAYERS` in crates/uwf-cli/tests/it/layers.rs (and in \
                 docs/architecture.md), or move it under {AGENTS_DIR}/ if it is an agent"
            ),
            Violation::Edge {
                from,
                from_layer,
                to,
                to_layer,
                kind,
            } => {
                let why = if from == to {
                    "a crate may not depend on itself"
                } else if from_layer == to_layer {
                    "crates of the same layer may not depend on each other"
                } else {
                    "a crate may not depend on a higher layer"
                };
                write!(
                    f,
                    "forbidden {kind} dependency {from} (layer {from_layer}) -> {to} \
                     (layer {to_layer}): {why}; dependencies must point to a strictly lower \
                     layer (protocol=0 <- util=1 <- cas=2 <- moderator=3 <- agent-kit=4 <- \
                     agents, cli=5)"
                )
            }
            Violation::Malformed(what) => write!(f, "unexpected cargo metadata: {what}"),
        }
    }
}

/// A workspace package as far as the rule is concerned.
struct Package<'a> {
    name: &'a str,
    dir: PathBuf,
    layer: Option<u8>,
    deps: &'a [Value],
}

fn str_field<'a>(v: &'a Value, key: &str) -> Result<&'a str, Violation> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Violation::Malformed(format!("missing string field `{key}` in {v}")))
}

/// Whether `manifest` lies under `<root>/agents/`.
fn is_agent(root: &Path, manifest: &Path) -> bool {
    manifest
        .strip_prefix(root)
        .ok()
        .and_then(|rel| rel.components().next())
        == Some(Component::Normal(AGENTS_DIR.as_ref()))
}

/// Checks `cargo metadata --format-version 1` output against the layer rule
/// and returns every violation found (empty if the workspace is clean).
fn check(metadata: &Value) -> Vec<Violation> {
    match check_inner(metadata) {
        Ok(v) => v,
        Err(e) => vec![e],
    }
}

fn check_inner(metadata: &Value) -> Result<Vec<Violation>, Violation> {
    let root = PathBuf::from(str_field(metadata, "workspace_root")?);
    let members: Vec<&str> = metadata
        .get("workspace_members")
        .and_then(Value::as_array)
        .ok_or_else(|| Violation::Malformed("missing `workspace_members`".into()))?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let all = metadata
        .get("packages")
        .and_then(Value::as_array)
        .ok_or_else(|| Violation::Malformed("missing `packages`".into()))?;

    let table: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut violations = Vec::new();
    let mut packages = Vec::new();
    for p in all {
        if !members.contains(&str_field(p, "id")?) {
            continue;
        }
        let name = str_field(p, "name")?;
        let manifest = PathBuf::from(str_field(p, "manifest_path")?);
        let layer = table
            .get(name)
            .copied()
            .or_else(|| is_agent(&root, &manifest).then_some(AGENT_LAYER));
        if layer.is_none() {
            violations.push(Violation::Unplaced {
                package: name.to_owned(),
                manifest: manifest.display().to_string(),
            });
        }
        let dir = manifest
            .parent()
            .ok_or_else(|| Violation::Malformed(format!("manifest {}", manifest.display())))?
            .to_path_buf();
        let deps = p
            .get("dependencies")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        packages.push(Package {
            name,
            dir,
            layer,
            deps,
        });
    }

    for from in &packages {
        for dep in from.deps {
            // A workspace dependency is a path dependency on a member's
            // directory; registry and git dependencies have no `path`.
            let Some(path) = dep.get("path").and_then(Value::as_str) else {
                continue;
            };
            let Some(to) = packages.iter().find(|p| p.dir == Path::new(path)) else {
                continue;
            };
            let kind = match dep.get("kind").and_then(Value::as_str) {
                None => "normal",
                Some("build") => "build",
                Some("dev") => "dev",
                Some(other) => {
                    return Err(Violation::Malformed(format!(
                        "dependency kind `{other}` of {} -> {}",
                        from.name, to.name
                    )));
                }
            };
            // Unplaced packages are already reported; their edges can't be judged.
            let (Some(from_layer), Some(to_layer)) = (from.layer, to.layer) else {
                continue;
            };
            // Normal, build and dev dependencies alike: strictly lower.
            if to_layer >= from_layer {
                violations.push(Violation::Edge {
                    from: from.name.to_owned(),
                    from_layer,
                    to: to.name.to_owned(),
                    to_layer,
                    kind: kind.to_owned(),
                });
            }
        }
    }
    Ok(violations)
}

fn report(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  - {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The workspace root, cargo, and `cargo metadata --no-deps` of the workspace.
fn workspace_metadata() -> (PathBuf, std::ffi::OsString, Value) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} metadata: {e}", Path::new(&cargo).display()));
    assert!(
        out.status.success(),
        "cargo metadata failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("cargo metadata printed invalid JSON: {e}"));
    (root, cargo, metadata)
}

#[test]
fn workspace_respects_the_layer_rule() {
    let (_, _, metadata) = workspace_metadata();

    let violations = check(&metadata);
    assert!(
        violations.is_empty(),
        "the workspace breaks the layer rule:\n{}",
        report(&violations)
    );

    // Guard against the check passing vacuously.
    let members = metadata["workspace_members"].as_array().map_or(0, Vec::len);
    assert!(
        members >= 4,
        "expected the workspace crates, found {members}"
    );
}

/// What no agent may link (issue 21, docs/architecture.md "The storage
/// seam"): the engine (and with it the worker), a store backend's database
/// client, an async runtime. An agent reaches a networked store through
/// the relay of the engine that runs it; `uwf-workflow` runs its child
/// thread with the `uwf` binary.
const NOT_IN_AN_AGENT: &[&str] = &[
    "uwf-engine",
    "uwf-store-pg",
    "postgres",
    "tokio-postgres",
    "tokio",
];

#[test]
#[allow(clippy::unwrap_used)]
fn no_agent_links_the_engine_a_database_client_or_an_async_runtime() {
    let (root, cargo, metadata) = workspace_metadata();
    let ws = PathBuf::from(metadata["workspace_root"].as_str().unwrap());
    let agents: Vec<&str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| is_agent(&ws, Path::new(p["manifest_path"].as_str().unwrap())))
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(agents.len() >= 7, "expected the agents, found {agents:?}");
    let mut linked = Vec::new();
    for agent in &agents {
        // The host's graph of what the binary links (no dev or build
        // dependencies), from Cargo.lock and the sources already fetched.
        let out = Command::new(&cargo)
            .args([
                "tree",
                "--locked",
                "--offline",
                "-e",
                "normal",
                "--prefix",
                "none",
                "-p",
                agent,
            ])
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo tree -p {agent}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tree = String::from_utf8_lossy(&out.stdout);
        assert!(
            tree.lines().count() > 20,
            "cargo tree -p {agent} printed:\n{tree}"
        );
        for line in tree.lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            if NOT_IN_AN_AGENT.contains(&name) {
                linked.push(format!("{agent} links {}", line.trim_end_matches(" (*)")));
            }
        }
    }
    linked.sort();
    linked.dedup();
    assert!(
        linked.is_empty(),
        "agents link what they must not:\n{}",
        linked.join("\n")
    );
}

// ---------------------------------------------------------------------------
// The checker itself, on synthetic metadata.

/// A dependency of a synthetic package: (name, kind, relative dir or None for registry).
type Dep<'a> = (&'a str, Option<&'a str>, Option<&'a str>);

/// Synthetic metadata: packages as (name, dir relative to `/ws`, deps).
fn metadata(packages: &[(&str, &str, &[Dep<'_>])]) -> Value {
    let packages: Vec<Value> = packages
        .iter()
        .map(|(name, dir, deps)| {
            let deps: Vec<Value> = deps
                .iter()
                .map(|(dep, kind, path)| {
                    let mut d = serde_json::json!({ "name": dep, "kind": kind, "rename": null });
                    match path {
                        Some(p) => d["path"] = format!("/ws/{p}").into(),
                        None => {
                            d["source"] =
                                "registry+https://github.com/rust-lang/crates.io-index".into()
                        }
                    }
                    d
                })
                .collect();
            serde_json::json!({
                "name": name,
                "id": format!("path+file:///ws/{dir}#0.1.0"),
                "manifest_path": format!("/ws/{dir}/Cargo.toml"),
                "dependencies": deps,
            })
        })
        .collect();
    let ids: Vec<Value> = packages.iter().map(|p| p["id"].clone()).collect();
    serde_json::json!({ "workspace_root": "/ws", "workspace_members": ids, "packages": packages })
}

fn edges(violations: &[Violation]) -> Vec<(String, String, String)> {
    violations
        .iter()
        .filter_map(|v| match v {
            Violation::Edge { from, to, kind, .. } => {
                Some((from.clone(), to.clone(), kind.clone()))
            }
            _ => None,
        })
        .collect()
}

fn edge(from: &str, to: &str, kind: &str) -> (String, String, String) {
    (from.into(), to.into(), kind.into())
}

#[test]
fn checker_accepts_a_layered_graph() {
    let m = metadata(&[
        (
            "uwf-protocol",
            "crates/uwf-protocol",
            &[("serde", None, None)],
        ),
        ("uwf-util", "crates/uwf-util", &[]),
        (
            "uwf-cas",
            "crates/uwf-cas",
            &[
                ("uwf-protocol", None, Some("crates/uwf-protocol")),
                ("uwf-util", Some("build"), Some("crates/uwf-util")),
            ],
        ),
        (
            "uwf-cli",
            "crates/uwf-cli",
            &[
                ("uwf-cas", None, Some("crates/uwf-cas")),
                ("uwf-util", Some("dev"), Some("crates/uwf-util")),
            ],
        ),
        (
            "hermes",
            "agents/hermes",
            &[("uwf-cas", None, Some("crates/uwf-cas"))],
        ),
    ]);
    assert_eq!(check(&m), vec![]);
}

#[test]
fn checker_rejects_upward_sideways_and_self_edges() {
    let m = metadata(&[
        ("uwf-protocol", "crates/uwf-protocol", &[]),
        (
            "uwf-cas",
            "crates/uwf-cas",
            &[
                ("uwf-moderator", None, Some("crates/uwf-moderator")),
                ("uwf-protocol", None, Some("crates/uwf-protocol")),
            ],
        ),
        ("uwf-moderator", "crates/uwf-moderator", &[]),
        (
            "uwf-util",
            "crates/uwf-util",
            &[
                ("uwf-cas", Some("build"), Some("crates/uwf-cas")),
                ("uwf-util", Some("dev"), Some("crates/uwf-util")),
            ],
        ),
        (
            "uwf-cli",
            "crates/uwf-cli",
            &[("hermes", Some("dev"), Some("agents/hermes"))],
        ),
        (
            "hermes",
            "agents/hermes",
            &[("uwf-cli", None, Some("crates/uwf-cli"))],
        ),
    ]);
    let violations = check(&m);
    assert_eq!(
        edges(&violations),
        vec![
            edge("uwf-cas", "uwf-moderator", "normal"),
            edge("uwf-util", "uwf-cas", "build"),
            edge("uwf-util", "uwf-util", "dev"),
            edge("uwf-cli", "hermes", "dev"),
            edge("hermes", "uwf-cli", "normal"),
        ]
    );
    let msg = violations[0].to_string();
    assert!(
        msg.contains("uwf-cas (layer 2) -> uwf-moderator (layer 3)"),
        "message must name the edge: {msg}"
    );
}

#[test]
fn checker_rejects_an_unplaced_crate() {
    let m = metadata(&[
        ("uwf-protocol", "crates/uwf-protocol", &[]),
        (
            "uwf-newthing",
            "crates/uwf-newthing",
            &[("uwf-protocol", None, Some("crates/uwf-protocol"))],
        ),
        // Not under agents/ just because the name looks like one.
        ("agents-helper", "tools/agents", &[]),
    ]);
    let violations = check(&m);
    let unplaced: Vec<&str> = violations
        .iter()
        .filter_map(|v| match v {
            Violation::Unplaced { package, .. } => Some(package.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(unplaced, ["uwf-newthing", "agents-helper"]);
    assert!(
        violations[0]
            .to_string()
            .contains("place it in the layer table")
    );
}

#[test]
fn checker_ignores_registry_dependencies_named_like_workspace_crates() {
    let m = metadata(&[
        (
            "uwf-protocol",
            "crates/uwf-protocol",
            &[("uwf-cli", None, None)],
        ),
        ("uwf-cli", "crates/uwf-cli", &[]),
    ]);
    assert_eq!(check(&m), vec![]);
}

#[test]
fn checker_reports_malformed_metadata() {
    let v = check(&serde_json::json!({ "packages": [] }));
    assert!(matches!(v.as_slice(), [Violation::Malformed(_)]), "{v:?}");
}
