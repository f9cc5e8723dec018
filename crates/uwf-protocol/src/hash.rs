//! The node identifier.

use std::fmt;
use std::str::FromStr;

use crate::base32::{self, Base32Error};

/// A CAS hash: the XXH64 of a node, shown as 13 Crockford Base32 characters.
///
/// Parsing is the only way to get a `Hash` from text, and it accepts exactly
/// the 13-character form (any case), so a value of this type is always safe
/// to turn into a file name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hash(u64);

impl Hash {
    /// Wraps a raw 64-bit digest.
    pub const fn from_u64(v: u64) -> Self {
        Self(v)
    }

    /// The raw 64-bit digest.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The canonical 13-character upper-case form, without allocating.
    pub fn to_array(self) -> [u8; base32::U64_LEN] {
        let mut out = [0u8; base32::U64_LEN];
        base32::encode_u64_into(self.0, &mut out);
        out
    }

    /// True if `s` is a well-formed reference as stored inside payloads: the
    /// canonical upper-case form. This is the `cas_ref` JSON Schema format.
    pub fn is_cas_ref(s: &str) -> bool {
        base32::is_canonical_u64(s)
    }
}

/// Why a string is not a hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, miette::Diagnostic)]
#[error("{input:?} is not a CAS hash: {reason}")]
#[diagnostic(
    code(uwf::cas::bad_hash),
    help(
        "a CAS hash is 13 Crockford Base32 characters (0-9, A-Z without I, L, O, U), e.g. 4KNM2PXR3B1QW"
    )
)]
pub struct ParseHashError {
    /// The rejected input (truncated to a sane length for display).
    pub input: String,
    /// What is wrong with it.
    pub reason: Base32Error,
}

impl FromStr for Hash {
    type Err = ParseHashError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        base32::decode_u64(s)
            .map(Hash)
            .map_err(|reason| ParseHashError {
                input: s.chars().take(64).collect(),
                reason,
            })
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.to_array();
        // The alphabet is ASCII, so this cannot fail.
        f.write_str(std::str::from_utf8(&a).map_err(|_| fmt::Error)?)
    }
}

crate::text_id!(Hash, "a CAS hash (13 Crockford Base32 characters)");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_any_case_and_displays_canonically() {
        let h: Hash = "4knm2pxr3b1qw".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.to_string(), "4KNM2PXR3B1QW");
        assert!(Hash::is_cas_ref("4KNM2PXR3B1QW"));
        assert!(!Hash::is_cas_ref("4knm2pxr3b1qw"));
    }

    #[test]
    fn rejects_path_like_input() {
        for bad in [
            "../x",
            "/etc/passwd",
            "..",
            "AAAA/AAAAAAAA",
            "AAAAAAAAAAAA.",
            "",
            "ZZZZZZZZZZZZZ",
        ] {
            assert!(bad.parse::<Hash>().is_err(), "{bad} accepted");
        }
    }
}
