//! Golden tests: the test vectors and tables of `docs/cas.md` are parsed out
//! of the document and checked against the implementation, so the
//! specification and the code cannot drift apart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use uwf_cas::{Cas, CasError, Hash, MemStore, Node, cbor, node, schema};

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cas.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The rows of the table whose header row has exactly these cells.
fn table(doc: &str, header: &[&str]) -> Vec<Vec<String>> {
    let mut lines = doc.lines();
    let found = lines.by_ref().any(|l| cells(l) == header);
    assert!(found, "docs/cas.md has no table with header {header:?}");
    let sep = lines.next().unwrap_or_default();
    assert!(
        sep.trim_start().starts_with('|') && sep.contains("---"),
        "table {header:?}: no separator row"
    );
    let rows: Vec<Vec<String>> = lines
        .take_while(|l| l.trim_start().starts_with('|'))
        .map(cells)
        .collect();
    for r in &rows {
        assert_eq!(
            r.len(),
            header.len(),
            "table {header:?}: row {r:?} has the wrong number of cells (a `|` inside a cell?)"
        );
    }
    rows
}

fn cells(line: &str) -> Vec<String> {
    let t = line.trim();
    let Some(inner) = t.strip_prefix('|').and_then(|s| s.strip_suffix('|')) else {
        return Vec::new();
    };
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The text of the first code span in a cell.
fn code(cell: &str) -> Option<&str> {
    let start = cell.find('`')? + 1;
    let len = cell[start..].find('`')?;
    Some(&cell[start..start + len])
}

/// Every code span in a cell.
fn codes(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// JSON documents introduced by `<!-- payload: NAME -->` and a ```json fence.
fn named_payloads(doc: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- payload:")
            .and_then(|s| s.strip_suffix("-->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert_eq!(
            fence.trim(),
            "```json",
            "payload {name}: expected a json fence"
        );
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let value: Value = serde_json::from_str(&body.join("\n"))
            .unwrap_or_else(|e| panic!("payload {name} is not JSON: {e}"));
        out.insert(name.trim().to_string(), value);
    }
    out
}

fn parse_hash(cell: &str) -> Hash {
    let text = code(cell).unwrap_or_else(|| panic!("hash cell {cell:?} has no code span"));
    let h: Hash = text
        .parse()
        .unwrap_or_else(|e| panic!("hash cell {cell:?}: {e}"));
    assert_eq!(h.to_string(), text, "hash {text} is not in canonical form");
    h
}

fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("payload {text} is not JSON: {e}"))
}

#[derive(Debug)]
enum Type {
    SelfTyped,
    Typed(Hash),
}

#[derive(Debug)]
struct Vector {
    ty: Type,
    /// The payload's name in Appendix A, or `None` for inline JSON.
    name: Option<String>,
    /// The payload text (inline JSON) or the name.
    text: String,
    payload: Value,
    hash: Hash,
    same_as_previous: bool,
}

fn vectors(doc: &str) -> Vec<Vector> {
    let named = named_payloads(doc);
    table(doc, &["type", "payload (JSON)", "hash"])
        .into_iter()
        .map(|row| {
            let ty = if row[0] == "self" {
                Type::SelfTyped
            } else {
                Type::Typed(parse_hash(&row[0]))
            };
            let (name, text, payload) = match code(&row[1]) {
                Some(json) => (None, json.to_string(), parse_json(json)),
                None => {
                    // A link to a named payload: [name](#anchor).
                    let name = row[1]
                        .strip_prefix('[')
                        .and_then(|s| s.split_once(']'))
                        .map(|(n, _)| n.to_string())
                        .unwrap_or_else(|| {
                            panic!(
                                "payload cell {:?} is neither `json` nor [name](#anchor)",
                                row[1]
                            )
                        });
                    let payload = named
                        .get(&name)
                        .unwrap_or_else(|| panic!("no `<!-- payload: {name} -->` block"))
                        .clone();
                    (Some(name.clone()), name, payload)
                }
            };
            Vector {
                ty,
                name,
                text,
                payload,
                hash: parse_hash(&row[2]),
                same_as_previous: row[2].contains('≡'),
            }
        })
        .collect()
}

#[test]
fn vectors_match_the_hash_function() {
    let vs = vectors(&doc());
    assert!(vs.len() >= 10, "only {} vectors", vs.len());
    let mut self_typed = 0;
    for (i, v) in vs.iter().enumerate() {
        let type_hash = match v.ty {
            Type::SelfTyped => {
                self_typed += 1;
                assert_eq!(node::self_hash(&v.payload), v.hash, "self-typed {}", v.text);
                v.hash
            }
            Type::Typed(t) => {
                assert_eq!(
                    node::hash_typed(t, &v.payload),
                    v.hash,
                    "{} typed {t}",
                    v.text
                );
                t
            }
        };
        // Reading a node picks the same rule.
        let n = Node {
            type_hash,
            payload: v.payload.clone(),
            timestamp: 0,
        };
        assert_eq!(n.hash(), v.hash, "Node::hash of {}", v.text);
        assert_eq!(n.is_self_typed(), matches!(v.ty, Type::SelfTyped));
        // Canonicalizing the stored JSON never changes the hash.
        let mut c = v.payload.clone();
        cbor::canonicalize(&mut c);
        assert_eq!(
            node::hash_node(type_hash, &c),
            v.hash,
            "canonical {}",
            v.text
        );
        if v.same_as_previous {
            let prev = &vs[i - 1];
            assert_eq!(prev.hash, v.hash, "≡ row {}", v.text);
            assert_ne!(prev.text, v.text, "≡ row {} repeats the JSON text", v.text);
        }
    }
    assert_eq!(
        self_typed, 1,
        "exactly one self-typed row (the meta-schema)"
    );
    assert!(vs.iter().filter(|v| v.same_as_previous).count() >= 2);
}

#[test]
fn named_payloads_are_the_built_in_schemas() {
    let doc = doc();
    let named = named_payloads(&doc);
    let builtin: BTreeMap<&str, Value> = BTreeMap::from([
        ("meta-schema", schema::meta_schema()),
        ("Workflow schema", uwf_protocol::schemas::workflow()),
        ("StartNode schema", uwf_protocol::schemas::start_node()),
        ("StepNode schema", uwf_protocol::schemas::step_node()),
    ]);
    assert_eq!(
        named.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        builtin.keys().copied().collect::<BTreeSet<_>>()
    );
    for (name, value) in &builtin {
        assert_eq!(cbor::encode(&named[*name]), cbor::encode(value), "{name}");
    }

    let types = Cas::new(MemStore::new()).unwrap().types();
    let want: BTreeMap<&str, Hash> = BTreeMap::from([
        ("meta-schema", types.meta),
        ("Workflow schema", types.workflow),
        ("StartNode schema", types.start_node),
        ("StepNode schema", types.step_node),
    ]);
    assert_eq!(types.meta, schema::meta_schema_hash());
    let vs = vectors(&doc);
    for (name, hash) in want {
        let row = vs
            .iter()
            .find(|v| v.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no vector for {name}"));
        assert_eq!(row.hash, hash, "{name}");
        match row.ty {
            Type::SelfTyped => assert_eq!(name, "meta-schema"),
            Type::Typed(t) => assert_eq!(t, types.meta, "{name} is typed by the meta-schema"),
        }
    }
    // The prose states the meta-schema's CBOR size.
    let size = cbor::encode(&schema::meta_schema()).len();
    assert!(
        doc.contains(&format!("CBOR encoding {size} bytes")),
        "docs/cas.md should say the meta-schema's CBOR is {size} bytes"
    );
}

#[test]
fn storing_the_vectors_yields_their_hashes() {
    // Every row whose type is a schema in a fresh store can be put through
    // the real store, in table order, and lands on the documented hash.
    let cas = Cas::new(MemStore::new()).unwrap();
    let mut stored = 0;
    for v in vectors(&doc()) {
        let type_hash = match v.ty {
            Type::SelfTyped => cas.types().meta,
            Type::Typed(t) => t,
        };
        match cas.put(type_hash, v.payload.clone()) {
            Ok(s) => {
                assert_eq!(s.hash, v.hash, "put of {}", v.text);
                stored += 1;
            }
            Err(CasError::UnknownType(t)) => assert_eq!(t, type_hash),
            Err(e) => panic!("put of {}: {e}", v.text),
        }
    }
    assert!(stored >= 6, "only {stored} vectors went through the store");
}

#[test]
fn cbor_table_matches_the_encoder() {
    let rows = table(&doc(), &["payload (JSON)", "CBOR (hex)"]);
    assert!(rows.len() >= 10);
    for row in rows {
        let json = code(&row[0]).unwrap();
        let hex: String = cbor::encode(&parse_json(json))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, code(&row[1]).unwrap(), "CBOR of {json}");
    }
}

#[test]
fn base32_table_matches_the_encoder() {
    let rows = table(&doc(), &["u64 (hex)", "base32"]);
    assert!(rows.len() >= 5);
    for row in rows {
        let hex = code(&row[0]).unwrap();
        let v = u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap();
        let text = code(&row[1]).unwrap();
        assert_eq!(Hash::from_u64(v).to_string(), text);
        assert_eq!(text.parse::<Hash>().unwrap().as_u64(), v);
        assert_eq!(text.to_lowercase().parse::<Hash>().unwrap().as_u64(), v);
        assert!(Hash::is_cas_ref(text));
    }
}

#[test]
fn documented_keywords_are_the_meta_schema_properties() {
    let rows = table(&doc(), &["keyword", "allowed value"]);
    let mut documented = BTreeSet::new();
    for row in &rows {
        for kw in codes(&row[0]) {
            assert!(documented.insert(kw.to_string()), "{kw} listed twice");
        }
    }
    let meta = schema::meta_schema();
    let actual: BTreeSet<String> = meta["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(documented, actual);
    // `x-` extensions are the only other members allowed.
    assert_eq!(meta["patternProperties"], json!({ "^x-": true }));
    assert_eq!(meta["additionalProperties"], json!(false));
}

#[test]
fn documented_rejections_are_enforced_with_their_reasons() {
    let rows = table(&doc(), &["keyword", "why it is rejected"]);
    assert!(rows.len() >= 10);
    let cas = Cas::new(MemStore::new()).unwrap();
    for row in rows {
        let kw = code(&row[0]).unwrap();
        let why = &row[1];
        match cas.put_schema(json!({ "type": "object", kw: {} })) {
            Err(CasError::UnsupportedSchema { reason }) => assert_eq!(
                reason,
                format!("`{kw}` at the root is not supported: {why}"),
                "{kw}"
            ),
            other => panic!("{kw}: expected a rejection, got {other:?}"),
        }
        // Also below the root, with a JSON Pointer.
        match cas.put_schema(json!({ "properties": { "a": { kw: {} } } })) {
            Err(CasError::UnsupportedSchema { reason }) => {
                assert!(
                    reason.starts_with(&format!("`{kw}` at /properties/a ")),
                    "{reason}"
                );
            }
            other => panic!("{kw}: expected a rejection, got {other:?}"),
        }
    }
}

#[test]
fn documented_formats_are_the_supported_ones() {
    let rows = table(&doc(), &["format", "meaning"]);
    assert!(rows.len() >= 10);
    let cas = Cas::new(MemStore::new()).unwrap();
    for row in &rows {
        let f = code(&row[0]).unwrap();
        cas.put_schema(json!({ "type": "string", "format": f }))
            .unwrap_or_else(|e| panic!("format {f}: {e}"));
    }
    assert!(rows.iter().any(|r| code(&r[0]) == Some("cas_ref")));
    for unknown in ["casref", "cas-ref", "int32", "binary"] {
        assert!(
            matches!(
                cas.put_schema(json!({ "type": "string", "format": unknown })),
                Err(CasError::UnsupportedSchema { .. })
            ),
            "format {unknown} accepted"
        );
    }
}
