//! Deterministic ids for tests, examples and documentation.
//!
//! Real ids come from [`ThreadId::new`] and from hashing nodes; tests often
//! need a few distinct, readable ones instead. These functions turn a short
//! name into an id: equal names give equal ids and different names of up to
//! 8 (hashes) or 16 (thread ids) bytes give different ones. Never use them
//! for data that is stored for real.

use crate::{Hash, ThreadId};

/// The thread id named `name` (its first 16 bytes, big-endian).
pub fn thread(name: &str) -> ThreadId {
    ThreadId::from_u128(
        name.bytes()
            .take(16)
            .fold(0u128, |acc, b| (acc << 8) | u128::from(b)),
    )
}

/// The hash named `name` (its first 8 bytes, big-endian).
pub fn hash(name: &str) -> Hash {
    Hash::from_u64(
        name.bytes()
            .take(8)
            .fold(0u64, |acc, b| (acc << 8) | u64::from(b)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_distinct_stable_ids() {
        assert_eq!(thread("T"), thread("T"));
        assert_ne!(thread("T"), thread("U"));
        assert_ne!(hash("A"), hash("B"));
        assert_ne!(hash("A"), hash("A\0"));
        assert_eq!(hash("A").as_u64(), 0x41);
        // Thread ids parse back from their text like any other.
        let t = thread("worker-7");
        assert_eq!(t.to_string().parse::<ThreadId>().ok(), Some(t));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod serde_tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use crate::{Hash, ThreadId, ThreadsIndex};

    proptest! {
        /// The typed ids are written exactly as the strings they replaced:
        /// their canonical text, as JSON strings, YAML scalars and map keys.
        #[test]
        fn ids_serialise_as_their_text(h: u64, t: u128) {
            let (hash, thread) = (Hash::from_u64(h), ThreadId::from_u128(t >> 2));
            let json = serde_json::to_string(&(hash, thread)).unwrap_or_default();
            prop_assert_eq!(&json, &format!("[\"{hash}\",\"{thread}\"]"));
            let back: (Hash, ThreadId) = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, (hash, thread));

            let index: ThreadsIndex = BTreeMap::from([(thread, hash)]);
            let yaml = serde_yaml::to_string(&index).unwrap_or_default();
            prop_assert_eq!(&yaml, &format!("{thread}: {hash}\n"));
            let back: ThreadsIndex = serde_yaml::from_str(&yaml).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, index);
        }

        /// Text that is not an id is refused, never read as some other id.
        #[test]
        fn malformed_ids_are_refused(s in "[^\"\\\\]{0,30}") {
            let as_hash = serde_json::from_str::<Hash>(&format!("\"{s}\""));
            prop_assert_eq!(as_hash.is_ok(), s.parse::<Hash>().is_ok());
            let as_thread = serde_json::from_str::<ThreadId>(&format!("\"{s}\""));
            prop_assert_eq!(as_thread.is_ok(), s.parse::<ThreadId>().is_ok());
        }
    }

    #[test]
    fn a_bad_id_in_yaml_is_reported_at_its_line() {
        let text = format!(
            "{}: {}\n{}: nope\n",
            crate::fixtures::thread("A"),
            Hash::from_u64(1),
            crate::fixtures::thread("B")
        );
        let err = serde_yaml::from_str::<ThreadsIndex>(&text)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.location().map(|l| l.line()), Some(2), "{err}");
        assert!(err.to_string().contains("is not a CAS hash"), "{err}");
    }
}
