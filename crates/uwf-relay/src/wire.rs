//! What goes over the relay's socket: frames of a JSON header and a byte
//! blob (docs/postgres.md, "The store relay").
//!
//! A frame is the header's length (4 bytes, big-endian), the header (JSON),
//! the blob's length (4 bytes, big-endian) and the blob (cache entries,
//! which are bytes; empty otherwise). The client sends a [`Request`] and
//! reads one [`Response`]; requests on one connection are answered in
//! order.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use uwf_cas::Node;
use uwf_protocol::{Hash, ThreadId};

/// The largest header or blob either side accepts: a bound on what a
/// damaged or foreign peer can make the other allocate.
pub(crate) const MAX_PART: usize = 1 << 30;

/// A request of the client (the agent).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// What the store is (its description and the name of its
    /// configuration), asked once per connection.
    Hello,
    /// [`uwf_cas::Store::get_many`].
    GetMany { hashes: Vec<Hash> },
    /// [`uwf_cas::Store::has`] of each.
    HasMany { hashes: Vec<Hash> },
    /// [`uwf_cas::Store::insert`].
    Insert { hash: Hash, node: Node },
    /// [`uwf_cas::Store::insert_many`].
    InsertMany { nodes: Vec<(Hash, Node)> },
    /// [`uwf_cas::Store::cache_get`].
    CacheGet { key: String },
    /// [`uwf_cas::Store::cache_put`]; the blob holds the bytes.
    CachePut { key: String },
    /// [`uwf_cas::Store::cache_remove`].
    CacheRemove { key: String },
    /// [`uwf_state::Heads::thread_head`].
    ThreadHead { thread: ThreadId },
    /// [`uwf_state::Settings::config_text`].
    ConfigText,
    /// [`uwf_state::Settings::secrets`].
    Secrets,
}

/// The server's answer to one [`Request`].
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub(crate) enum Response {
    Hello {
        describe: String,
        config_name: String,
        /// Whether every node inserted through this relay is checked
        /// against its type by the engine ([`uwf_cas::Store::checks_types`]).
        #[serde(default)]
        checks: bool,
        /// Whether the relay answers [`Request::InsertMany`] (an engine
        /// of an earlier version does not: its agent then stores one node
        /// at a time).
        #[serde(default)]
        batches: bool,
    },
    Nodes {
        nodes: Vec<Option<Node>>,
    },
    Bools {
        values: Vec<bool>,
    },
    Inserted {
        node: Node,
        created: bool,
    },
    InsertedMany {
        nodes: Vec<(Node, bool)>,
    },
    /// A cache entry: present or not; its bytes are the blob.
    Entry {
        present: bool,
    },
    Done,
    Bool {
        value: bool,
    },
    Head {
        head: Option<Hash>,
    },
    Text {
        text: Option<String>,
    },
    Secrets {
        pairs: Vec<(String, String)>,
    },
    /// The engine refused a node that does not satisfy its type's schema
    /// ([`uwf_cas::CasError::Invalid`], sent whole so the agent can say
    /// what is wrong with its output).
    Invalid {
        type_hash: Hash,
        title: String,
        violations: Vec<uwf_cas::Violation>,
    },
    /// The store refused or failed: what kind of failure (for retries and
    /// exit codes) and what went wrong.
    Error {
        kind: Kind,
        message: String,
    },
}

/// [`uwf_cas::StoreErrorKind`] and [`uwf_state::ErrorKind`] on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    NotFound,
    Invalid,
    Conflict,
    Unavailable,
    Corrupt,
    Io,
}

/// The conversions between [`Kind`] and a store's own kind of error, both
/// ways (every kind has the same name on both sides).
macro_rules! kinds {
    ($($other:ty),*) => {$(
        impl From<Kind> for $other {
            fn from(k: Kind) -> Self {
                match k {
                    Kind::NotFound => Self::NotFound,
                    Kind::Invalid => Self::Invalid,
                    Kind::Conflict => Self::Conflict,
                    Kind::Unavailable => Self::Unavailable,
                    Kind::Corrupt => Self::Corrupt,
                    Kind::Io => Self::Io,
                }
            }
        }
    )*};
}

kinds!(uwf_cas::StoreErrorKind, uwf_state::ErrorKind);

impl From<uwf_cas::StoreErrorKind> for Kind {
    fn from(k: uwf_cas::StoreErrorKind) -> Self {
        use uwf_cas::StoreErrorKind as K;
        match k {
            K::NotFound => Kind::NotFound,
            K::Invalid => Kind::Invalid,
            K::Conflict => Kind::Conflict,
            K::Unavailable => Kind::Unavailable,
            K::Corrupt => Kind::Corrupt,
            K::Io => Kind::Io,
            // A kind added later: nothing to retry on that we know of.
            _ => Kind::Io,
        }
    }
}

impl From<uwf_state::ErrorKind> for Kind {
    fn from(k: uwf_state::ErrorKind) -> Self {
        use uwf_state::ErrorKind as K;
        match k {
            K::NotFound => Kind::NotFound,
            K::Invalid => Kind::Invalid,
            K::Conflict => Kind::Conflict,
            K::Unavailable => Kind::Unavailable,
            K::Corrupt => Kind::Corrupt,
            K::Io => Kind::Io,
        }
    }
}

fn part_len(len: usize) -> io::Result<[u8; 4]> {
    u32::try_from(len)
        .ok()
        .filter(|&n| n as usize <= MAX_PART)
        .map(u32::to_be_bytes)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "relay frame too large"))
}

/// Writes one frame (and flushes).
pub(crate) fn write_frame<T: Serialize>(
    w: &mut impl Write,
    header: &T,
    blob: &[u8],
) -> io::Result<()> {
    let header = serde_json::to_vec(header).map_err(io::Error::other)?;
    w.write_all(&part_len(header.len())?)?;
    w.write_all(&header)?;
    w.write_all(&part_len(blob.len())?)?;
    w.write_all(blob)?;
    w.flush()
}

fn read_part(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    read_part_of(r, u32::from_be_bytes(len) as usize)
}

fn read_part_of(r: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    if len > MAX_PART {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("relay frame part of {len} bytes"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Reads one frame; `Ok(None)` at a clean end of the stream (before a
/// frame begins).
pub(crate) fn read_frame<T: for<'de> Deserialize<'de>>(
    r: &mut impl Read,
) -> io::Result<Option<(T, Vec<u8>)>> {
    let mut len = [0u8; 4];
    if r.read(&mut len[..1])? == 0 {
        return Ok(None);
    }
    r.read_exact(&mut len[1..])?;
    let header = read_part_of(r, u32::from_be_bytes(len) as usize)?;
    let header: T = serde_json::from_slice(&header)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let blob = read_part(r)?;
    Ok(Some((header, blob)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn frames_round_trip_and_a_clean_end_is_none() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &Request::CacheGet { key: "k".into() }, b"").unwrap();
        write_frame(&mut buf, &Request::CachePut { key: "k".into() }, b"bytes\n").unwrap();
        let mut r = buf.as_slice();
        let (a, blob): (Request, _) = read_frame(&mut r).unwrap().unwrap();
        assert!(matches!(a, Request::CacheGet { key } if key == "k"));
        assert!(blob.is_empty());
        let (b, blob): (Request, _) = read_frame(&mut r).unwrap().unwrap();
        assert!(matches!(b, Request::CachePut { .. }));
        assert_eq!(blob, b"bytes\n");
        assert!(read_frame::<Request>(&mut r).unwrap().is_none());
    }

    #[test]
    fn an_earlier_engines_hello_means_no_checks_and_no_batches() {
        // What a relay of an engine before `checks` and `batches` answered.
        let earlier = serde_json::json!({"answer": "hello", "describe": "d", "config_name": "c"});
        let mut buf = Vec::new();
        write_frame(&mut buf, &earlier, b"").unwrap();
        let (hello, _): (Response, _) = read_frame(&mut buf.as_slice()).unwrap().unwrap();
        assert!(matches!(
            hello,
            Response::Hello {
                checks: false,
                batches: false,
                ..
            }
        ));
    }

    #[test]
    fn damaged_frames_are_errors_not_allocations() {
        // A length past the bound.
        let mut r: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(read_frame::<Request>(&mut r).is_err());
        // A cut frame.
        let mut buf = Vec::new();
        write_frame(&mut buf, &Request::Hello, b"abc").unwrap();
        let cut = &buf[..buf.len() - 1];
        assert!(read_frame::<Request>(&mut &cut[..]).is_err());
        // A header that is not a request.
        let mut buf = Vec::new();
        write_frame(&mut buf, &serde_json::json!({"op": "drop_table"}), b"").unwrap();
        assert!(read_frame::<Request>(&mut buf.as_slice()).is_err());
    }
}
