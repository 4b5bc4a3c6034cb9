//! Shared helpers for the mrc example binaries.
//!
//! - [`sim`]: the pieces of `mrc-sim`: scenario files, built-in experiments, tables and plots.

pub mod sim;
