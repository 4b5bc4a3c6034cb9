//! Open MPI over the provider: `tests/mpi_check.c` (ring `MPI_Sendrecv` from 0 B to 16 MiB,
//! 4 MiB and 16 MiB among them, with every byte checked, `MPI_Probe` from `MPI_ANY_SOURCE`, `MPI_Mprobe` / `MPI_Mrecv`
//! with `MPI_ANY_TAG`, receives for one source each posted in reverse rank order,
//! `MPI_Allreduce`, `MPI_Bcast`, `MPI_Alltoall`, `MPI_Barrier`) built with `mpicc` and
//! run by `mpirun` with 4 ranks on loopback through Open MPI's OFI MTL
//! (`--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include mrc`), the provider loaded
//! from `FI_PROVIDER_PATH`. Without `mpicc` / `mpirun` (Debian: libopenmpi-dev,
//! openmpi-bin) the test prints `SKIPPED: <test>: <reason>` and passes.

mod common;

use common::{have, provider_dir, skip};
use std::path::Path;
use std::process::Command;

#[test]
fn open_mpi_runs_point_to_point_probe_and_collectives_over_mrc() {
    let test = "open_mpi_runs_point_to_point_probe_and_collectives_over_mrc";
    if !have("mpicc") || !have("mpirun") {
        return skip(
            test,
            "mpicc or mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)",
        );
    }
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("tmp dir");
    let prov = provider_dir("mpi-prov");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi_check.c");
    let exe = tmp.join("mpi_check");
    let cc = Command::new("mpicc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(cc.status.success(), "mpicc: {cc:?}");

    let o = Command::new("timeout")
        .args([
            "-k",
            "5",
            "120",
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
        ])
        .args(["-np", "4", "--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", "mrc"])
        .args(["-x", "FI_PROVIDER_PATH"])
        .arg(&exe)
        .env("FI_PROVIDER_PATH", &prov)
        .env_remove("FI_PROVIDER")
        .env_remove("FI_MRC_ADDR")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("run mpirun");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(0),
        "mpirun: stdout:\n{out}\nstderr:\n{err}"
    );
    assert_eq!(
        out, "ring 0\nprobe 0\nmprobe 0\ndirected 0\ncollectives 0\nranks 4 errors 0\n",
        "stderr:\n{err}"
    );
}
