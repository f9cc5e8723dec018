//! Command implementations.

pub mod agent;
pub mod cas;
pub mod config;
pub mod eval;
pub mod prompt;
pub mod serve;
pub mod setup;
pub mod store;
pub mod story;
pub mod suite;
pub mod thread;
pub mod view;
pub mod worker;
pub mod workflow;
