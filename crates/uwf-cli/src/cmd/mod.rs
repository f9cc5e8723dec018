//! Command implementations.

pub mod cas;
pub mod thread;
pub mod workflow;
