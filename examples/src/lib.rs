//! Shared helpers for the mrc example binaries.
//!
//! - [`sim`]: the pieces of `mrc-sim`: scenario files, built-in experiments, tables and plots;
//! - [`perf`]: the pieces of `mrc-perf`: options, test loops, reports, baselines;
//! - [`mpi`]: `mrc-perf mpi`, ranks launched by MPI (the MPI calls need the `mpi` feature);
//! - [`testbed`]: the plan of the real-kernel SRv6 testbed, from the fabric designer;
//! - [`logs`]: the binaries' `tracing` subscriber (`RUST_LOG`, `-v`).
#![warn(missing_docs)]

pub mod logs;
pub mod mpi;
pub mod perf;
pub mod sim;
pub mod testbed;
