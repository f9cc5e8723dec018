//! The store relay: while an engine runs an agent, it serves the store it
//! has open to that agent over a private Unix socket, so the agent opens
//! no database connection of its own and its reads and writes go through
//! the engine's pooled connections.
//!
//! On a networked store (PostgreSQL) an agent used to open its own
//! authenticated connection for every step, which cost as much as the
//! rest of the step's database work (docs/performance.md). The engine now
//! starts a [`Relay`] beside each agent it runs and names its socket in
//! [`RELAY_ENV`]; a program that opens the store through
//! `uwf_backend::Backends` (every agent built on the kit, `uwf agent
//! context` and `submit`) finds it there and uses [`RelayStore`] and
//! [`RelayState`]. Only the calls a step makes go over the relay (nodes,
//! the derived cache, a head, the configuration, the secrets); every
//! other call opens the store itself, once, as before
//! ([`client::Fallback`]). docs/postgres.md, "The store relay", says what
//! it changes and why it is safe.
//!
//! Unix only: the socket is a Unix domain socket in a directory only its
//! owner may enter.

#![cfg(unix)]

pub mod client;
mod server;
mod wire;

use std::path::PathBuf;

pub use client::{Fallback, Opener, RelayClient, RelayState, RelayStore, RelayedInserts, Stores};
pub use server::Relay;

/// The environment variable naming the relay's socket in an agent's
/// environment. Unset (or empty): open the store as usual.
pub const RELAY_ENV: &str = uwf_protocol::agent_env::RELAY;

/// Why a relay could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The socket could not be reached.
    #[error("cannot connect to the store relay at {}: {source}", path.display())]
    Connect {
        /// The socket.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// Something answered that does not speak the relay's protocol.
    #[error("the store relay at {} does not answer as one: {message}", path.display())]
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
}

/// The relay named in this process's environment, if any.
pub fn from_env() -> Option<PathBuf> {
    std::env::var_os(RELAY_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}
