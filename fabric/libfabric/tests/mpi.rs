//! Open MPI over the provider: `tests/mpi_check.c` (ring `MPI_Sendrecv` from 0 B to 16 MiB,
//! 4 MiB and 16 MiB among them, with every byte checked, `MPI_Probe` from `MPI_ANY_SOURCE`, `MPI_Mprobe` / `MPI_Mrecv`
//! with `MPI_ANY_TAG`, receives for one source each posted in reverse rank order,
//! `MPI_Allreduce`, `MPI_Bcast`, `MPI_Alltoall`, `MPI_Barrier`) built with `mpicc` and
//! run by `mpirun` with 4 ranks on loopback through Open MPI's OFI MTL
//! (`--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include mrc`), the provider loaded
//! from `FI_PROVIDER_PATH`; and the same program with one rank per host of the namespace
//! testbed (`testbed/mrc-testbed.sh`), each rank's endpoint in its host's namespace
//! (`FI_MRC_NETNS`, `FI_MRC_ADDR`), the spines' counters showing the ring's bytes crossed
//! them; and a 2-rank job whose rank 1 is in a network namespace of its own, which the
//! ranks cannot reach each other across, ending with an error within seconds. Without
//! `mpicc` / `mpirun` (Debian: libopenmpi-dev, openmpi-bin) each test prints
//! `SKIPPED: <test>: <reason>` and passes (the testbed test fails instead under `CI`,
//! where the tools must be there).

mod common;

use common::{have, provider_dir, skip};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// `tests/mpi_check.c` built with `mpicc` into a fresh directory `name` of the test's
/// temporary directory.
fn build_mpi_check(name: &str) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("tmp dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi_check.c");
    let exe = tmp.join("mpi_check");
    let cc = Command::new("mpicc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(cc.status.success(), "mpicc: {cc:?}");
    exe
}

/// `timeout -k 5 LIMIT_S mpirun -np NP` of `exe` over the `mrc` provider in `prov`
/// (Open MPI's cm PML and OFI MTL, no other provider), as root. With `rank_sh` each rank
/// runs `sh -c RANK_SH exe` (the script picks the rank's namespace and address); `env`
/// goes to every rank (`-x`). The caller's `FI_PROVIDER`, `FI_MRC_ADDR` and
/// `FI_MRC_NETNS` are not passed on.
fn mpirun_over_mrc(
    np: u32,
    limit_s: u32,
    prov: &Path,
    exe: &Path,
    rank_sh: Option<&str>,
    env: &[(&str, &str)],
) -> Output {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", &limit_s.to_string(), "mpirun"])
        .args(["--allow-run-as-root", "--oversubscribe"])
        .args([
            "-np",
            &np.to_string(),
            "--mca",
            "pml",
            "cm",
            "--mca",
            "mtl",
            "ofi",
        ])
        .args(["--mca", "mtl_ofi_provider_include", "mrc"])
        .args(["-x", "FI_PROVIDER_PATH"]);
    for (k, v) in env {
        c.args(["-x", k]).env(k, v);
    }
    if let Some(sh) = rank_sh {
        c.args(["sh", "-c", sh]);
    }
    c.arg(exe)
        .env("FI_PROVIDER_PATH", prov)
        .env_remove("FI_PROVIDER")
        .env_remove("FI_MRC_ADDR")
        .env_remove("FI_MRC_NETNS")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("run mpirun")
}

/// What `mpi_check` prints on rank 0 when every check passed on 4 ranks.
const ALL_PASSED: &str = "ring 0\nprobe 0\nmprobe 0\ndirected 0\ncollectives 0\nranks 4 errors 0\n";

#[test]
fn open_mpi_runs_point_to_point_probe_and_collectives_over_mrc() {
    let test = "open_mpi_runs_point_to_point_probe_and_collectives_over_mrc";
    if !have("mpicc") || !have("mpirun") {
        return skip(
            test,
            "mpicc or mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)",
        );
    }
    let prov = provider_dir("mpi-prov");
    let exe = build_mpi_check("mpi");

    let o = mpirun_over_mrc(4, 120, &prov, &exe, None, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(0),
        "mpirun: stdout:\n{out}\nstderr:\n{err}"
    );
    assert_eq!(out, ALL_PASSED, "stderr:\n{err}");
}

/// Bytes each rank sends around `mpi_check`'s ring (its `sizes`: 0 B to 16 MiB).
const RING_BYTES_PER_RANK: u64 = 1 + 100 + 4096 + 65536 + (1 << 20) + (4 << 20) + (16 << 20);

/// The namespace testbed of `testbed/mrc-testbed.sh` under a prefix of this test's own,
/// taken down when dropped (also after a failed assertion).
struct Testbed {
    prefix: String,
    script: PathBuf,
    sim: PathBuf,
}

impl Testbed {
    /// `mrc-testbed.sh ARGS` under `timeout 60`.
    fn run(&self, args: &[&str]) -> Output {
        Command::new("timeout")
            .arg("60")
            .arg(&self.script)
            .args(args)
            .env("MRCTB_PREFIX", &self.prefix)
            .env("MRCTB_SIM", &self.sim)
            .env_remove("MRCTB_SRV6")
            .env_remove("MRCTB_PLAN")
            .output()
            .expect("run mrc-testbed.sh")
    }

    /// `mrc-testbed.sh ARGS`' stdout, asserting exit 0.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "mrc-testbed.sh {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The bytes every spine interface has received, summed (`counters`' lines
    /// `SPINE LEAF rx_bytes N tx_bytes M`).
    fn spine_rx_bytes(&self) -> u64 {
        let mut sum = 0;
        for l in self.ok(&["counters"]).lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() >= 4 && w[0].starts_with('s') && w[2] == "rx_bytes" {
                sum += w[3].parse::<u64>().expect("a byte count");
            }
        }
        sum
    }

    /// The hosts' addresses, host 0 first (the plan's `hosts[].addr`).
    fn host_addrs(&self) -> Vec<String> {
        let plan = self.ok(&["plan"]);
        let mut jq = Command::new("jq")
            .args(["-r", ".hosts[].addr"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run jq");
        std::io::Write::write_all(&mut jq.stdin.take().unwrap(), plan.as_bytes())
            .expect("write the plan to jq");
        let o = jq.wait_with_output().expect("wait for jq");
        assert!(o.status.success(), "jq: {o:?}");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.run(&["down"]);
    }
}

/// A tool the testbed test needs is missing: a `SKIPPED:` line, or under `CI` (which
/// installs them and runs as root) a failure.
fn skip_unless_ci(test: &str, why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {why} (CI must provide it: .ci/run)"
    );
    skip(test, why);
}

/// `mpi_check` with one rank per host of a 4-host testbed (`mrc-testbed.sh up --no-srv6
/// --gpus 16 --gpus-per-server 4 --spine-radix 4`: 4 hosts on 4 leaves, 4 spines, plain
/// ECMP routing over IPv6): Open MPI's own traffic stays on the root namespace's loopback,
/// and each rank's endpoint opens its sockets in its host's namespace (`FI_MRC_NETNS`)
/// at the host's address (`FI_MRC_ADDR`), so every hop of the ring crosses a leaf, a spine
/// and a leaf. The exact output, exit 0, no line of the provider's on stderr, and the
/// spines received at least the bytes the ring moved. Needs root, mpicc / mpirun, ip, jq
/// and a built `mrc-sim` (the testbed's planner: `MRCTB_SIM`, or the one next to this
/// test's build, which `cargo test --workspace` builds).
#[test]
fn open_mpi_with_one_rank_per_testbed_host_over_mrc() {
    let test = "open_mpi_with_one_rank_per_testbed_host_over_mrc";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip_unless_ci(test, "needs root (the testbed's network namespaces)");
    }
    for (tool, pkg) in [
        ("mpicc", "libopenmpi-dev"),
        ("mpirun", "openmpi-bin"),
        ("jq", "jq"),
        ("ip", "iproute2"),
    ] {
        if !have(tool) {
            return skip_unless_ci(
                test,
                &format!("{tool} not installed (apt-get install {pkg})"),
            );
        }
    }
    let sim = std::env::var_os("MRCTB_SIM")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().expect("test executable path");
            exe.parent()
                .and_then(Path::parent)
                .map(|d| d.join("mrc-sim"))
                .filter(|p| p.exists())
        });
    let Some(sim) = sim else {
        return skip_unless_ci(
            test,
            "no mrc-sim next to this test's build (cargo build -p mrc-examples --bin mrc-sim, or MRCTB_SIM=PATH)",
        );
    };
    let prov = provider_dir("mpi-tb-prov");
    let exe = build_mpi_check("mpi-tb");
    let tb = Testbed {
        prefix: format!("mrctbF{}-", std::process::id() % 1000),
        script: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbed/mrc-testbed.sh"),
        sim,
    };
    tb.ok(&[
        "up",
        "--no-srv6",
        "--gpus",
        "16",
        "--gpus-per-server",
        "4",
        "--spine-radix",
        "4",
    ]);
    let addrs = tb.host_addrs();
    assert_eq!(addrs.len(), 4, "{addrs:?}");
    let before = tb.spine_rx_bytes();
    // Each rank picks its host by its rank: h<rank> and the plan's address of that host.
    let rank = r#"r=$OMPI_COMM_WORLD_RANK; i=0; a=
for x in $MRC_TB_ADDRS; do [ "$i" = "$r" ] && a=$x; i=$((i + 1)); done
FI_MRC_NETNS="${MRC_TB_PREFIX}h$r" FI_MRC_ADDR="$a" exec "$0""#;
    let t = Instant::now();
    let o = mpirun_over_mrc(
        4,
        180,
        &prov,
        &exe,
        Some(rank),
        &[
            ("MRC_TB_ADDRS", &addrs.join(" ")),
            ("MRC_TB_PREFIX", &tb.prefix),
        ],
    );
    let took = t.elapsed();
    let through_spines = tb.spine_rx_bytes() - before;
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(0),
        "mpirun: stdout:\n{out}\nstderr:\n{err}"
    );
    assert_eq!(out, ALL_PASSED, "stderr:\n{err}");
    assert!(
        !err.contains("libfabric:mrc:"),
        "the provider logged:\n{err}"
    );
    let ring = 4 * RING_BYTES_PER_RANK;
    assert!(
        through_spines >= ring,
        "the spines received {through_spines} bytes, the ring moved {ring}"
    );
    println!(
        "mpi_check, 4 ranks on 4 testbed hosts: {took:.2?}, {through_spines} bytes through the spines (the ring {ring})"
    );
}

/// A network namespace of this test's own with only its loopback, up, holding
/// [`UNREACHABLE`]; deleted when dropped (also after a failed assertion).
struct LoneNetns(String);

/// The address of [`LoneNetns`]: no route leads to it from the root namespace, and none
/// leads from it to the root namespace's loopback.
const UNREACHABLE: &str = "fd00:6d72:67::2";

impl LoneNetns {
    fn new() -> LoneNetns {
        let ns = LoneNetns(format!("mrcU{}", std::process::id()));
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("run ip");
            assert!(o.status.success(), "ip {args:?}: {o:?}");
        };
        ip(&["netns", "add", &ns.0]);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
        let cidr = format!("{UNREACHABLE}/128");
        ip(&["-n", &ns.0, "addr", "add", &cidr, "dev", "lo", "nodad"]);
        ns
    }
}

impl Drop for LoneNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Issue 44: `mpi_check` with 2 ranks, rank 0 in the root namespace (its endpoint on
/// 127.0.0.1) and rank 1 in a [`LoneNetns`] (`FI_MRC_NETNS`, its endpoint on
/// [`UNREACHABLE`]), so neither rank's connection to the other can be set up. Both
/// ranks' first sends are `fi_tinjectdata` (0 bytes, the ring's first size); the provider
/// refuses an inject with `-FI_EAGAIN` while its connection is set up and then with the
/// set-up's error, so the MTL's send fails and MPI's default error handler ends the job:
/// a non-zero exit within 20 s (it waited for `timeout`'s 60 s when the injects were
/// queued and only counted), the provider's line on stderr, no segmentation fault (an
/// error entry with a NULL `op_context` crashed the MTL before that).
#[test]
fn open_mpi_with_an_unreachable_rank_fails_within_seconds() {
    let test = "open_mpi_with_an_unreachable_rank_fails_within_seconds";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip_unless_ci(test, "needs root (a network namespace)");
    }
    for (tool, pkg) in [
        ("mpicc", "libopenmpi-dev"),
        ("mpirun", "openmpi-bin"),
        ("ip", "iproute2"),
    ] {
        if !have(tool) {
            return skip_unless_ci(
                test,
                &format!("{tool} not installed (apt-get install {pkg})"),
            );
        }
    }
    let prov = provider_dir("mpi-unreach-prov");
    let exe = build_mpi_check("mpi-unreach");
    let ns = LoneNetns::new();
    let rank = r#"if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then
export FI_MRC_NETNS="$MRC_U_NETNS" FI_MRC_ADDR="$MRC_U_ADDR"; fi
exec "$0""#;
    let t = Instant::now();
    let o = mpirun_over_mrc(
        2,
        60,
        &prov,
        &exe,
        Some(rank),
        &[("MRC_U_NETNS", &ns.0), ("MRC_U_ADDR", UNREACHABLE)],
    );
    let took = t.elapsed();
    drop(ns);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let all = format!("stdout:\n{out}\nstderr:\n{err}");
    let code = o.status.code();
    assert!(
        !matches!(code, Some(0) | Some(124) | Some(137) | None),
        "mpirun took {took:.2?} and exited with {:?} (124: timeout's 60 s)\n{all}",
        o.status
    );
    assert!(
        took < std::time::Duration::from_secs(20),
        "mpirun took {took:.2?}\n{all}"
    );
    assert!(
        err.contains("libfabric:mrc: the connection to ")
            && err.contains("(FI_ECONNREFUSED: the peer could not be reached)"),
        "no line of the provider's on the set-up's failure\n{all}"
    );
    for crash in ["Segmentation fault", "signal 11", "SIGSEGV"] {
        assert!(!all.contains(crash), "{crash}\n{all}");
    }
    assert!(!out.contains("errors 0"), "{all}");
    println!("mpi_check, 2 ranks, rank 1 unreachable: exit {code:?} after {took:.2?}");
}
