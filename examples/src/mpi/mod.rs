//! `mrc-perf mpi`: the many-host benchmark, one rank per host (or several per host),
//! launched by `mpirun`, `mpiexec` or Slurm's `srun`.
//!
//! MPI is the commander: it launches the ranks, maps ranks to hosts, checks that every
//! rank got the same parameters, moves the connection handles (one `Alltoall`), aligns the
//! start (barrier, clock offsets, one common instant) and gathers the results at rank 0.
//! mrc carries the data: one engine per rank, one QP per pair of ranks that exchange data.
//!
//! - [`opts`]: the options and the [`opts::Plan`] every rank derives from them;
//! - [`patterns`]: who sends to whom;
//! - [`bursts`]: when (the burst schedules) and the per-burst completion times;
//! - [`handles`]: the fixed-size connection handles;
//! - [`conn`]: the engine and its QPs (the one module that uses `mrc_fabric::engine`);
//! - [`data`], [`allreduce`]: the data phases;
//! - [`clock`]: the clock offsets between ranks;
//! - [`results`]: the report at rank 0;
//! - [`addr`]: the bind address and network namespace;
//! - [`steer`]: `--srv6` steering of each QP towards its peer;
//! - `launch` (feature `mpi`): the MPI calls and the failure handling.

pub mod addr;
pub mod allreduce;
pub mod bursts;
pub mod clock;
pub mod conn;
pub mod data;
pub mod handles;
#[cfg(feature = "mpi")]
pub mod launch;
pub mod opts;
pub mod patterns;
pub mod results;
pub mod steer;

/// The error of `mrc-perf mpi` reached through [`crate::perf::run_cli`] (it runs from
/// [`crate::perf::main`], as an MPI program).
pub const NOT_HERE: &str = "mrc-perf mpi runs as an MPI program from mrc-perf's main \
                            (mpirun -np N mrc-perf mpi ...)";

/// Message of a build without the `mpi` feature.
pub const NO_FEATURE: &str = "this mrc-perf was built without the `mpi` feature: build one \
                              with it in its own target directory, `cargo build --release -p \
                              mrc-examples --bin mrc-perf --features mpi --target-dir \
                              target/mpi` (needs libopenmpi-dev), and run \
                              target/mpi/release/mrc-perf under mpirun (the README's MPI \
                              section)";

/// Runs this process as one rank of an MPI job; returns the exit code.
#[cfg(feature = "mpi")]
pub fn main(test: &crate::perf::opts::TestOpts, o: &opts::MpiOpts) -> i32 {
    launch::main(test, o)
}

/// Without the `mpi` feature: prints [`NO_FEATURE`] and returns 2.
#[cfg(not(feature = "mpi"))]
pub fn main(_test: &crate::perf::opts::TestOpts, _o: &opts::MpiOpts) -> i32 {
    eprintln!("mrc-perf: error: {NO_FEATURE}");
    2
}
