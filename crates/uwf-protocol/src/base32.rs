//! Crockford Base32 for 64-bit values.
//!
//! A `u64` is written as exactly 13 characters, most significant first. 13
//! characters hold 65 bits, so the first character only ever carries the top
//! four bits and is always one of `0`–`F`. Encoding produces upper case;
//! decoding is case-insensitive and also accepts Crockford's aliases
//! (`O` → `0`, `I`/`L` → `1`), so a hash copied by hand still resolves.

use thiserror::Error;

/// The 32 symbols of Crockford's alphabet, in value order.
pub const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Number of characters in an encoded `u64`.
pub const U64_LEN: usize = 13;

/// Why a string is not an encoded `u64`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Base32Error {
    /// The string does not have exactly [`U64_LEN`] characters.
    #[error("expected {U64_LEN} characters, found {0}")]
    Length(usize),
    /// A character outside the Crockford alphabet.
    #[error("{ch:?} at position {pos} is not a Crockford Base32 character")]
    Character {
        /// The offending character.
        ch: char,
        /// Its zero-based character position.
        pos: usize,
    },
    /// The first character is above `F`, so the value would not fit in 64 bits.
    #[error("the first character must be 0-F; {0:?} would overflow 64 bits")]
    Overflow(char),
}

/// Value of one character, or `None` if it is not in the alphabet.
/// Accepts lower case and the aliases `O`, `I`, `L`.
pub const fn decode_char(c: u8) -> Option<u8> {
    let c = c.to_ascii_uppercase();
    Some(match c {
        b'0'..=b'9' => c - b'0',
        b'O' => 0,
        b'I' | b'L' => 1,
        b'A'..=b'H' => c - b'A' + 10,
        b'J' | b'K' => c - b'J' + 18,
        b'M' | b'N' => c - b'M' + 20,
        b'P'..=b'T' => c - b'P' + 22,
        b'V'..=b'Z' => c - b'V' + 27,
        _ => return None,
    })
}

/// [`decode_char`] of every byte, [`NOT_A_DIGIT`] where it gives `None`:
/// one load per character where the `match` is a chain of range tests
/// (loading a long thread decodes three hashes a step; docs/performance.md).
const DECODE: [u8; 256] = {
    let mut table = [NOT_A_DIGIT; 256];
    let mut byte = 0;
    while byte < 256 {
        if let Some(digit) = decode_char(byte as u8) {
            table[byte] = digit;
        }
        byte += 1;
    }
    table
};

/// What [`DECODE`] holds for a byte outside the alphabet.
const NOT_A_DIGIT: u8 = 0xff;

/// Encodes `value` as 13 upper-case Crockford Base32 characters.
pub fn encode_u64(value: u64) -> String {
    let mut out = [0u8; U64_LEN];
    encode_u64_into(value, &mut out);
    // Only ASCII from ALPHABET was written.
    out.iter().map(|&b| b as char).collect()
}

/// Encodes `value` into a caller-provided buffer (no allocation).
pub fn encode_u64_into(value: u64, out: &mut [u8; U64_LEN]) {
    let v = u128::from(value);
    for (i, slot) in out.iter_mut().enumerate() {
        let shift = 5 * (U64_LEN - 1 - i);
        *slot = ALPHABET[((v >> shift) & 0x1f) as usize];
    }
}

/// Decodes 13 Crockford Base32 characters (case-insensitive) into a `u64`.
pub fn decode_u64(s: &str) -> Result<u64, Base32Error> {
    // Counting characters only for the error: loading a long thread decodes
    // three hashes a step (docs/performance.md).
    if s.len() != U64_LEN || !s.is_ascii() {
        return Err(Base32Error::Length(s.chars().count()));
    }
    let mut acc: u64 = 0;
    for (pos, b) in s.bytes().enumerate() {
        let d = DECODE[usize::from(b)];
        if d == NOT_A_DIGIT {
            return Err(Base32Error::Character { ch: b as char, pos });
        }
        if pos == 0 && d > 0x0f {
            return Err(Base32Error::Overflow(b as char));
        }
        acc = (acc << 5) | u64::from(d);
    }
    Ok(acc)
}

/// True if `s` is exactly what [`encode_u64`] would produce for some value:
/// 13 upper-case alphabet characters, the first one `0`–`F`.
pub fn is_canonical_u64(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == U64_LEN
        && b.iter().all(|c| ALPHABET.contains(c))
        && decode_char(b[0]).is_some_and(|d| d <= 0x0f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert_eq!(encode_u64(0), "0000000000000");
        assert_eq!(encode_u64(1), "0000000000001");
        assert_eq!(encode_u64(31), "000000000000Z");
        assert_eq!(encode_u64(32), "0000000000010");
        assert_eq!(encode_u64(u64::MAX), "FZZZZZZZZZZZZ");
    }

    #[test]
    fn decoding_is_case_insensitive_and_accepts_aliases() {
        assert_eq!(decode_u64("fzzzzzzzzzzzz"), Ok(u64::MAX));
        assert_eq!(decode_u64("000000000000o"), Ok(0));
        assert_eq!(decode_u64("000000000000i"), Ok(1));
        assert_eq!(decode_u64("000000000000L"), Ok(1));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(decode_u64(""), Err(Base32Error::Length(0)));
        assert_eq!(decode_u64("0000000000000A"), Err(Base32Error::Length(14)));
        assert_eq!(
            decode_u64("000000000000U"),
            Err(Base32Error::Character { ch: 'U', pos: 12 })
        );
        assert_eq!(decode_u64("G000000000000"), Err(Base32Error::Overflow('G')));
        assert!(matches!(
            decode_u64("../etc/passw"),
            Err(Base32Error::Length(12))
        ));
        assert!(matches!(
            decode_u64("../etc/passwd"),
            Err(Base32Error::Character { ch: '.', pos: 0 })
        ));
        // Multi-byte characters are counted as characters, never sliced.
        assert!(matches!(
            decode_u64("ééééééééééééé"),
            Err(Base32Error::Length(13))
        ));
    }

    #[test]
    fn alphabet_round_trips_through_decode_char() {
        for (i, &c) in ALPHABET.iter().enumerate() {
            assert_eq!(decode_char(c), Some(i as u8));
        }
        assert_eq!(decode_char(b'U'), None);
        assert_eq!(decode_char(b'/'), None);
    }

    #[test]
    fn the_decode_table_is_decode_char() {
        for byte in 0..=u8::MAX {
            let from_table = Some(DECODE[usize::from(byte)]).filter(|&d| d != NOT_A_DIGIT);
            assert_eq!(from_table, decode_char(byte), "byte {byte}");
        }
    }

    proptest! {
        #[test]
        fn round_trip(v: u64) {
            let s = encode_u64(v);
            prop_assert!(is_canonical_u64(&s));
            prop_assert_eq!(decode_u64(&s), Ok(v));
            prop_assert_eq!(decode_u64(&s.to_lowercase()), Ok(v));
        }

        #[test]
        fn encoding_preserves_order(a: u64, b: u64) {
            prop_assert_eq!(a.cmp(&b), encode_u64(a).cmp(&encode_u64(b)));
        }

        #[test]
        fn decode_never_panics(s in "\\PC{0,20}") {
            let _ = decode_u64(&s);
        }
    }
}
