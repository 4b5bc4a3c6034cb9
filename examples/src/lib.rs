//! Shared helpers for the mrc example binaries.
#![warn(missing_docs)]

pub mod perf;
