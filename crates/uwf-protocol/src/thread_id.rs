//! Thread ids: ULIDs written as 26 Crockford Base32 characters.
//!
//! Thread ids become directory names under the storage root, so parsing is
//! strict about shape (exactly 26 alphabet characters, nothing path-like) and
//! [`Display`](fmt::Display) always produces the canonical upper-case form.
//! Like [`crate::base32`], decoding is case-insensitive and accepts
//! Crockford's aliases (`O` → `0`, `I`/`L` → `1`) for hand-copied ids.

use std::fmt;
use std::str::FromStr;

use miette::Diagnostic;
use thiserror::Error;
use ulid::Ulid;

use crate::base32::decode_char;

/// Number of characters in an encoded thread id.
pub const THREAD_ID_LEN: usize = 26;

/// Identifier of a workflow thread (a ULID).
///
/// Ordering follows creation time (millisecond resolution), then randomness.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId(Ulid);

impl ThreadId {
    /// A fresh id from the current time and OS randomness.
    #[allow(clippy::new_without_default)] // a "default" id would be misleading
    pub fn new() -> ThreadId {
        ThreadId(Ulid::new())
    }

    /// The id whose ULID is the 128-bit value `v` (tests and fixtures).
    pub const fn from_u128(v: u128) -> ThreadId {
        ThreadId(Ulid(v))
    }

    /// The underlying ULID.
    pub fn as_ulid(&self) -> &Ulid {
        &self.0
    }
}

impl From<Ulid> for ThreadId {
    fn from(ulid: Ulid) -> Self {
        ThreadId(ulid)
    }
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `Ulid`'s Display is the canonical 26-character upper-case form.
        fmt::Display::fmt(&self.0, f)
    }
}

crate::text_id!(ThreadId, "a thread id (a 26-character ULID)");

/// Why a string is not a thread id.
#[derive(Debug, Clone, PartialEq, Eq, Error, Diagnostic)]
pub enum ThreadIdError {
    /// The input does not have exactly 26 characters.
    #[error("invalid thread id {input:?}: expected {THREAD_ID_LEN} characters, found {len}")]
    #[diagnostic(help("thread ids are 26-character ULIDs such as 01JQ3R5Z8X4N6M2K7P9T0V1W2Y"))]
    Length {
        /// The rejected input.
        input: String,
        /// Its length in characters.
        len: usize,
    },
    /// A character outside the Crockford Base32 alphabet.
    #[error(
        "invalid thread id {input:?}: {ch:?} at position {pos} is not a Crockford Base32 character"
    )]
    #[diagnostic(help("thread ids use only 0-9 and A-Z without U"))]
    Character {
        /// The rejected input.
        input: String,
        /// The offending character.
        ch: char,
        /// Its zero-based character position.
        pos: usize,
    },
    /// The first character is above `7`, so the value would not fit in 128 bits.
    #[error(
        "invalid thread id {input:?}: the first character must be 0-7, {ch:?} would overflow 128 bits"
    )]
    Overflow {
        /// The rejected input.
        input: String,
        /// The offending first character.
        ch: char,
    },
}

impl FromStr for ThreadId {
    type Err = ThreadIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let len = s.chars().count();
        if len != THREAD_ID_LEN {
            return Err(ThreadIdError::Length {
                input: s.to_owned(),
                len,
            });
        }
        let mut acc: u128 = 0;
        for (pos, ch) in s.chars().enumerate() {
            let digit = u8::try_from(ch).ok().and_then(decode_char).ok_or_else(|| {
                ThreadIdError::Character {
                    input: s.to_owned(),
                    ch,
                    pos,
                }
            })?;
            // 26 × 5 = 130 bits: the first character may only carry 3.
            if pos == 0 && digit > 7 {
                return Err(ThreadIdError::Overflow {
                    input: s.to_owned(),
                    ch,
                });
            }
            acc = (acc << 5) | u128::from(digit);
        }
        Ok(ThreadId(Ulid(acc)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn new_ids_round_trip_and_are_canonical() {
        let id = ThreadId::new();
        let s = id.to_string();
        assert_eq!(s.len(), THREAD_ID_LEN);
        assert!(
            s.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        );
        assert_eq!(s.parse::<ThreadId>().unwrap(), id);
        assert_eq!(id.as_ulid().to_string(), s);
    }

    #[test]
    fn parsing_is_case_insensitive_and_accepts_aliases() {
        let canonical: ThreadId = "01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().unwrap();
        assert_eq!(
            "01arz3ndektsv4rrffq69g5fav".parse::<ThreadId>().unwrap(),
            canonical
        );
        assert_eq!(
            "O1ARZ3NDEKTSV4RRFFQ69G5FAV".parse::<ThreadId>().unwrap(),
            canonical
        );
        assert_eq!(canonical.to_string(), "01ARZ3NDEKTSV4RRFFQ69G5FAV");
    }

    #[test]
    fn extremes() {
        let max: ThreadId = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ".parse().unwrap();
        assert_eq!(max.as_ulid().0, u128::MAX);
        let min: ThreadId = "00000000000000000000000000".parse().unwrap();
        assert_eq!(min.as_ulid().0, 0);
    }

    #[test]
    fn rejects_wrong_length() {
        for (input, len) in [
            ("", 0),
            ("../x", 4),
            ("/etc", 4),
            ("01ARZ3NDEKTSV4RRFFQ69G5FAVX", 27),
        ] {
            assert_eq!(
                input.parse::<ThreadId>(),
                Err(ThreadIdError::Length {
                    input: input.into(),
                    len
                })
            );
        }
    }

    #[test]
    fn rejects_path_like_and_non_ascii_input_of_the_right_length() {
        let err = "../ARZ3NDEKTSV4RRFFQ69G5FA"
            .parse::<ThreadId>()
            .unwrap_err();
        assert!(matches!(
            err,
            ThreadIdError::Character {
                ch: '.',
                pos: 0,
                ..
            }
        ));
        let err = "01ARZ3NDEK/SV4RRFFQ69G5FAV"
            .parse::<ThreadId>()
            .unwrap_err();
        assert!(matches!(
            err,
            ThreadIdError::Character {
                ch: '/',
                pos: 10,
                ..
            }
        ));
        // Counted in characters, so a multi-byte string is never sliced.
        let err = "01ARZ3NDEKTSV4RRFFQ69G5FAé"
            .parse::<ThreadId>()
            .unwrap_err();
        assert!(matches!(
            err,
            ThreadIdError::Character {
                ch: 'é',
                pos: 25,
                ..
            }
        ));
        let err = "01ARZ3NDEKTSV4RRFFQ69G5FAU"
            .parse::<ThreadId>()
            .unwrap_err();
        assert!(matches!(
            err,
            ThreadIdError::Character {
                ch: 'U',
                pos: 25,
                ..
            }
        ));
    }

    #[test]
    fn rejects_overflow() {
        let err = "8ZZZZZZZZZZZZZZZZZZZZZZZZZ"
            .parse::<ThreadId>()
            .unwrap_err();
        assert!(matches!(err, ThreadIdError::Overflow { ch: '8', .. }));
    }

    #[test]
    fn error_messages_name_the_input_and_reason() {
        let msg = "../etc".parse::<ThreadId>().unwrap_err().to_string();
        assert!(msg.contains("\"../etc\""), "{msg}");
        assert!(msg.contains("26 characters, found 6"), "{msg}");
        let msg = "01ARZ3NDEK/SV4RRFFQ69G5FAV"
            .parse::<ThreadId>()
            .unwrap_err()
            .to_string();
        assert!(msg.contains("'/' at position 10"), "{msg}");
    }

    proptest! {
        #[test]
        fn round_trip(v: u128) {
            let id = ThreadId::from(Ulid(v));
            let s = id.to_string();
            prop_assert_eq!(s.parse::<ThreadId>(), Ok(id));
            prop_assert_eq!(s.to_lowercase().parse::<ThreadId>(), Ok(id));
        }

        #[test]
        fn display_preserves_order(a: u128, b: u128) {
            let (x, y) = (ThreadId::from(Ulid(a)), ThreadId::from(Ulid(b)));
            prop_assert_eq!(x.cmp(&y), x.to_string().cmp(&y.to_string()));
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,40}") {
            let _ = s.parse::<ThreadId>();
        }
    }
}
