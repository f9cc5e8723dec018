//! Nodes and how they are hashed.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use xxhash_rust::xxh64::Xxh64;

use crate::{Hash, cbor};

/// A stored node: a payload typed by a schema node.
///
/// The timestamp records when the node was first stored; it is not part of
/// the hash, so storing the same content again yields the same node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Hash of the schema node this payload conforms to. For the self-typed
    /// meta-schema this is the node's own hash.
    #[serde(rename = "type")]
    pub type_hash: Hash,
    /// The content.
    pub payload: Value,
    /// Milliseconds since the Unix epoch at the first store.
    pub timestamp: u64,
}

impl Node {
    /// The hash this node is stored under.
    pub fn hash(&self) -> Hash {
        hash_node(self.type_hash, &self.payload)
    }

    /// Whether the node is self-typed (only the meta-schema is).
    pub fn is_self_typed(&self) -> bool {
        self_hash(&self.payload) == self.type_hash
    }
}

/// Hash of a typed node: XXH64 (seed 0) over the 13 ASCII characters of the
/// type hash followed by the deterministic CBOR of the payload.
pub fn hash_typed(type_hash: Hash, payload: &Value) -> Hash {
    let mut h = Xxh64::new(0);
    h.update(&type_hash.to_array());
    h.update(&cbor::encode(payload));
    Hash::from_u64(h.digest())
}

/// Hash of a self-typed node: XXH64 (seed 0) over the CBOR of the payload alone.
pub fn self_hash(payload: &Value) -> Hash {
    Hash::from_u64(xxhash_rust::xxh64::xxh64(&cbor::encode(payload), 0))
}

/// Hash of a node whichever kind it is: a node whose type is the hash of its
/// own payload is self-typed, every other node is typed.
pub fn hash_node(type_hash: Hash, payload: &Value) -> Hash {
    // Both candidate hashes come from one encoding: reading a node (every
    // get, every node `verify` and `gc` look at) pays for the encoding once.
    let cbor = cbor::encode(payload);
    let own = Hash::from_u64(xxhash_rust::xxh64::xxh64(&cbor, 0));
    if own == type_hash {
        own
    } else {
        let mut h = Xxh64::new(0);
        h.update(&type_hash.to_array());
        h.update(&cbor);
        Hash::from_u64(h.digest())
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// One encoding serves both rules of `hash_node`: it agrees with each.
    #[test]
    fn hash_node_picks_the_rule_the_node_follows() {
        let meta = crate::schema::meta_schema();
        let own = self_hash(&meta);
        assert_eq!(hash_node(own, &meta), own);
        let payload = json!({ "b": [1, 2.5, "x"], "a": null });
        let ty = Hash::from_u64(42);
        assert_eq!(hash_node(ty, &payload), hash_typed(ty, &payload));
        assert_ne!(hash_node(ty, &payload), self_hash(&payload));
    }
}
