//! Command implementations. Each returns the value to print.

pub mod cas;
