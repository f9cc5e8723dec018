//! The derived cache of loaded chains: for a StepNode, the thread's steps
//! up to it (each with its payload, output and timestamp), so that loading
//! a long thread reads the steps added since the last load instead of the
//! whole chain.
//!
//! Derived data, never the truth: entries live in the store's cache
//! ([`uwf_cas::Store::cache_get`]), keyed `chain-<step hash>`. Because a
//! StepNode's chain never changes, an entry cannot go stale; it can only be
//! damaged or missing. So every entry is checked before use (its format
//! version, a checksum of its body, the thread's StartNode, the number of
//! steps, and that the last step is the key; the links between steps are
//! not stored but implied: only chains whose every `prev` is the step
//! before are cached) and ignored if anything is off, and the chain is then
//! read from the nodes as if the entry were not there. Deleting any or all
//! entries is always safe.
//!
//! A load that had to read [`REWRITE_AFTER`] or more steps from the nodes
//! caches the chain it loaded; the entry it was built from is then removed,
//! so the cache holds about one entry per thread rather than one per step.
//!
//! A step whose workflow reads only the last steps and their number
//! ([`crate::thread::load_recent`]) needs the chain's length, not the
//! chain: `len-<step hash>` entries hold just that (one line: format, the
//! StartNode, the step, the number of steps, and a checksum of the rest),
//! written after a walk of [`REWRITE_AFTER`] steps and replaced the same
//! way (a write every step would cost a file created and one deleted, or
//! two commits on PostgreSQL, where the walk costs a few reads); a chain
//! entry, checked whole but not parsed, answers too.

use serde::{Deserialize, Serialize};
use uwf_cas::{Cas, Hash, Store};
use uwf_protocol::{StepNodePayload, StepRecord};

use crate::thread::{LoadedStep, ThreadView};

/// Format version of an entry; entries of another version are ignored.
const VERSION: u32 = 2;

/// Chains shorter than this are cheap to read and not cached.
const MIN_STEPS: usize = 16;

/// A load writes a new entry once it had to read this many steps from the
/// nodes (past the entry it started from): so a thread's entry is rewritten
/// every few steps, not on every one, and a load reads at most this many
/// steps besides its entry.
pub(crate) const REWRITE_AFTER: usize = 8;

fn key(step: Hash) -> String {
    format!("chain-{step}")
}

/// The first line of an entry.
#[derive(Serialize, Deserialize)]
struct Header {
    v: u32,
    start: String,
    last: String,
    len: usize,
    /// xxh64 of the body (the second line), in hex.
    check: String,
}

/// One step, as a JSON array (no member names to parse, and none of the
/// StepNode's flattened record, which serde reads slowly): the StepNode's
/// hash, role, output reference, detail, agent, child thread, timestamp,
/// then the output itself. `start` is the header's; `prev` is the step
/// before (null for the first).
#[derive(Serialize, Deserialize)]
struct Step(
    Hash,
    String,
    Hash,
    Hash,
    String,
    Option<Hash>,
    u64,
    serde_json::Value,
);

fn checksum(body: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh64::xxh64(body, 0))
}

/// The cached chain ending at StepNode `last` of the thread started at
/// `start`, if there is a sound entry for it.
pub(crate) fn read<S: Store>(cas: &Cas<S>, last: Hash, start: Hash) -> Option<Vec<LoadedStep>> {
    let bytes = match cas.store().cache_get(&key(last)) {
        Ok(Some(b)) => b,
        Ok(None) => return None,
        Err(e) => {
            tracing::debug!(%last, "chain cache unreadable, reading the nodes: {e}");
            return None;
        }
    };
    let parsed = parse(&bytes, last, start);
    if parsed.is_none() {
        tracing::debug!(%last, "chain cache entry failed its checks; reading the nodes");
    }
    parsed
}

fn parse(bytes: &[u8], last: Hash, start: Hash) -> Option<Vec<LoadedStep>> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..newline]).ok()?;
    let body = &bytes[newline + 1..];
    if header.v != VERSION
        || header.check != checksum(body)
        || header.last != last.to_string()
        || header.start != start.to_string()
    {
        return None;
    }
    let cached: Vec<Step> = serde_json::from_slice(body).ok()?;
    if cached.len() != header.len || cached.is_empty() {
        return None;
    }
    let mut steps = Vec::with_capacity(cached.len());
    let mut prev: Option<Hash> = None;
    for Step(hash, role, output_ref, detail, agent, child_thread, timestamp, output) in cached {
        let payload = StepNodePayload {
            start,
            prev: prev.replace(hash),
            record: StepRecord {
                role,
                output: output_ref,
                detail,
                agent,
            },
            child_thread,
        };
        steps.push(LoadedStep {
            hash,
            payload,
            output,
            timestamp,
        });
    }
    (steps.last().map(|s| s.hash) == Some(last)).then_some(steps)
}

fn len_key(step: Hash) -> String {
    format!("len-{step}")
}

/// Format of a length entry's line.
const LEN_FORMAT: &str = "uwf-len-1";

/// The number of steps of the chain ending at StepNode `last` of the thread
/// started at `start`, if a sound entry gives it: a length entry, else a
/// chain entry (its header and checksum checked, its steps not parsed).
pub(crate) fn read_len<S: Store>(cas: &Cas<S>, last: Hash, start: Hash) -> Option<usize> {
    if let Ok(Some(bytes)) = cas.store().cache_get(&len_key(last))
        && let Some(len) = parse_len(&bytes, last, start)
    {
        return Some(len);
    }
    let bytes = cas.store().cache_get(&key(last)).ok()??;
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..newline]).ok()?;
    let sound = header.v == VERSION
        && header.check == checksum(&bytes[newline + 1..])
        && header.last == last.to_string()
        && header.start == start.to_string()
        && header.len > 0;
    sound.then_some(header.len)
}

fn len_line(start: Hash, last: Hash, len: usize) -> String {
    format!("{LEN_FORMAT} {start} {last} {len}")
}

fn parse_len(bytes: &[u8], last: Hash, start: Hash) -> Option<usize> {
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let (line, check) = text.rsplit_once(' ')?;
    if check != checksum(line.as_bytes()) {
        return None;
    }
    let len: usize = line.rsplit_once(' ')?.1.parse().ok()?;
    (len > 0 && line == len_line(start, last, len)).then_some(len)
}

/// Records that the chain ending at `last` (of the thread started at
/// `start`) has `len` steps (best effort), and drops the length entries
/// this one replaces: that of `older`, the step the count was made from,
/// and the first one found among `walked` (the steps walked before it,
/// newest first; an entry there was damaged, since the walk went past it).
pub(crate) fn write_len<S: Store>(
    cas: &Cas<S>,
    last: Hash,
    start: Hash,
    len: usize,
    older: Option<Hash>,
    walked: &[Hash],
) {
    let line = len_line(start, last, len);
    let entry = format!("{line} {}\n", checksum(line.as_bytes()));
    if let Err(e) = cas.store().cache_put(&len_key(last), entry.as_bytes()) {
        tracing::debug!(%last, "cannot cache the chain's length: {e}");
        return;
    }
    if let Some(older) = older
        && older != last
    {
        let _ = cas.store().cache_remove(&len_key(older));
    }
    for step in walked.iter().filter(|s| **s != last).take(64) {
        match cas.store().cache_remove(&len_key(*step)) {
            Ok(false) => {}
            Ok(true) | Err(_) => break,
        }
    }
}

/// Caches the chain of `view` under its last step (best effort), and drops
/// the entry of the longest shorter chain it may have been built from.
pub(crate) fn write<S: Store>(cas: &Cas<S>, view: &ThreadView) {
    let Some(last) = view.steps.last() else {
        return;
    };
    if view.steps.len() < MIN_STEPS || !view.is_whole() {
        return;
    }
    // Only a chain whose links are what the entry's format implies is
    // cached (a StepNode's `prev` is the step before it, `start` the
    // thread's): `load` checked them.
    let mut prev: Option<Hash> = None;
    let mut steps = Vec::with_capacity(view.steps.len());
    for s in &view.steps {
        if s.payload.prev != prev || s.payload.start != view.start_hash {
            return;
        }
        prev = Some(s.hash);
        steps.push(Step(
            s.hash,
            s.payload.record.role.clone(),
            s.payload.record.output,
            s.payload.record.detail,
            s.payload.record.agent.clone(),
            s.payload.child_thread,
            s.timestamp,
            s.output.clone(),
        ));
    }
    let Ok(body) = serde_json::to_vec(&steps) else {
        return;
    };
    let header = Header {
        v: VERSION,
        start: view.start_hash.to_string(),
        last: last.hash.to_string(),
        len: steps.len(),
        check: checksum(&body),
    };
    let Ok(mut bytes) = serde_json::to_vec(&header) else {
        return;
    };
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    if let Err(e) = cas.store().cache_put(&key(last.hash), &bytes) {
        tracing::debug!(last = %last.hash, "cannot cache the chain: {e}");
        return;
    }
    // The entries of the shorter chains this one extends are no longer
    // needed by this thread (another thread forked there rebuilds its own).
    for older in view.steps.iter().rev().skip(1).take(64) {
        match cas.store().cache_remove(&key(older.hash)) {
            Ok(true) => break,
            Ok(false) => {}
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use uwf_cas::MemStore;
    use uwf_protocol::{StartNodePayload, StepRecord, WorkflowPayload};

    /// A thread of `n` steps in a memory store; returns the store and head.
    fn chain(n: usize) -> (Cas<MemStore>, Hash) {
        let cas = Cas::new(MemStore::new()).unwrap();
        let schema = cas
            .put_schema(serde_json::json!({"type": "object"}))
            .unwrap()
            .hash;
        let mut roles = std::collections::BTreeMap::new();
        roles.insert(
            "work".to_string(),
            uwf_protocol::RoleDefinition {
                description: "w".into(),
                system_prompt: "w".into(),
                output_schema: schema,
            },
        );
        let edge = |role: &str| uwf_protocol::Transition {
            role: role.into(),
            condition: None,
            prompt: None,
        };
        let mut graph = std::collections::BTreeMap::new();
        graph.insert("$START".to_string(), vec![edge("work")]);
        graph.insert("work".to_string(), vec![edge("work")]);
        let wf = WorkflowPayload {
            name: "loop".into(),
            description: "d".into(),
            roles,
            conditions: std::collections::BTreeMap::new(),
            graph,
        };
        let wf = cas.put_value(cas.types().workflow, &wf).unwrap().hash;
        let start = StartNodePayload {
            workflow: wf,
            prompt: "p".into(),
            parent_state: None,
        };
        let start = cas.put_value(cas.types().start_node, &start).unwrap().hash;
        let mut prev: Option<Hash> = None;
        for i in 0..n {
            let out = cas
                .put_value(schema, &serde_json::json!({ "n": i }))
                .unwrap()
                .hash;
            let step = StepNodePayload {
                start,
                prev,
                record: StepRecord {
                    role: "work".into(),
                    output: out,
                    detail: out,
                    agent: "a".into(),
                },
                child_thread: None,
            };
            prev = Some(cas.put_value(cas.types().step_node, &step).unwrap().hash);
        }
        (cas, prev.unwrap())
    }

    #[test]
    fn a_cached_load_equals_an_uncached_one_and_damage_is_ignored() {
        let (cas, head) = chain(40);
        let fresh = crate::thread::load_uncached(&cas, head).unwrap();
        // First load writes the entry, the second uses it.
        let first = crate::thread::load(&cas, head).unwrap();
        assert!(cas.store().cache_get(&key(head)).unwrap().is_some());
        let second = crate::thread::load(&cas, head).unwrap();
        assert_eq!(first.steps, fresh.steps);
        assert_eq!(second.steps, fresh.steps);

        // Every way of damaging the entry is detected and ignored.
        let good = cas.store().cache_get(&key(head)).unwrap().unwrap();
        let newline = good.iter().position(|&b| b == b'\n').unwrap();
        let mut damaged = Vec::new();
        let mut flipped = good.clone();
        let at = newline + 20;
        flipped[at] ^= 0x01;
        damaged.push(flipped);
        damaged.push(good[..good.len() / 2].to_vec());
        damaged.push(Vec::new());
        damaged.push(b"garbage".to_vec());
        // A well-formed entry for another thread's chain under this key.
        let (other, other_head) = chain(20);
        crate::thread::load(&other, other_head).unwrap();
        damaged.push(other.store().cache_get(&key(other_head)).unwrap().unwrap());
        for bad in damaged {
            cas.store().cache_put(&key(head), &bad).unwrap();
            let view = crate::thread::load(&cas, head).unwrap();
            assert_eq!(view.steps, fresh.steps);
        }
    }

    #[test]
    fn a_longer_chain_extends_the_cached_prefix_and_replaces_it() {
        let (cas, head) = chain(30);
        crate::thread::load(&cas, head).unwrap();
        let prefix = crate::thread::load_uncached(&cas, head).unwrap();
        let middle = prefix.steps[19].hash;
        // Loading from an earlier step caches that chain too.
        let earlier = crate::thread::load(&cas, middle).unwrap();
        assert_eq!(earlier.steps.len(), 20);
        assert_eq!(earlier.steps[..], prefix.steps[..20]);
        assert!(cas.store().cache_get(&key(middle)).unwrap().is_some());
    }
}
