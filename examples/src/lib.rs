//! Shared helpers for the mrc example binaries.
//!
//! - [`sim`]: the pieces of `mrc-sim`: scenario files, built-in experiments, tables and plots;
//! - [`perf`]: the pieces of `mrc-perf`: options, test loops, reports, baselines.
#![warn(missing_docs)]

pub mod perf;
pub mod sim;
