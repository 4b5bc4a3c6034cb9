//! The C face of the extension (`include/mrcx.h`): `c/mrcx_example.c`, compiled with the
//! system C compiler (gcc) against the header and linked with the built `lib_mrc.so`, run
//! over UDP loopback without any verbs device, as two contexts in one process and as two
//! processes; and the Rust layouts of the header's structs against the C compiler's.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The cdylib cargo built next to this test binary (`target/<profile>/deps/..`).
fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("lib_mrc.so");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "lib_mrc.so not found next to {} (cargo builds it with the tests)",
        exe.display()
    );
}

/// A folder holding a copy of `lib_mrc.so` and the example compiled against it.
fn build(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    // A copy: a rebuilt cdylib must not change under a running program.
    std::fs::copy(cdylib(), dir.join("lib_mrc.so")).expect("copy lib_mrc.so");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = dir.join("mrcx_example");
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
    let out = Command::new(&cc)
        .args([
            "-O1",
            "-g",
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
        ])
        .arg(root.join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(root.join("c/mrcx_example.c"))
        .arg("-L")
        .arg(&dir)
        .arg("-l_mrc")
        // DT_RPATH, not DT_RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets (which
        // names target/<profile>, where an older lib_mrc.so of another build may lie)
        .arg("-Wl,--disable-new-dtags,-rpath,$ORIGIN")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc}: {e}"));
    assert!(
        out.status.success(),
        "compiling mrcx_example.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn the_c_example_connects_two_contexts_through_a_handle_and_checks_every_byte() {
    let exe = build("pair");
    let out = Command::new(&exe)
        .args(["pair", "37100"])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "mrcx_example pair: {:?}", out.status);
    assert_eq!(
        stdout,
        "pair: 5 writes, 3 immediates, 1048576 bytes checked\n"
    );
}

/// The pair with each context on two planes (`attr.ip` = `"127.0.0.1,127.0.1.1"`): the
/// same bytes checked; a bad list is `EINVAL`.
#[test]
fn the_c_example_pair_runs_over_two_planes_and_a_bad_plane_list_is_einval() {
    let exe = build("pair_planes");
    let out = Command::new(&exe)
        .args(["pair", "37300"])
        .env("MRCX_IP", "127.0.0.1,127.0.1.1")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "mrcx_example pair: {:?}", out.status);
    assert_eq!(
        stdout,
        "pair: 5 writes, 3 immediates, 1048576 bytes checked\n"
    );
    for bad in [
        "127.0.0.1,::1",
        "127.0.0.1,127.0.0.1",
        "127.0.0.1,",
        "127.0.0.1,x",
    ] {
        let out = Command::new(&exe)
            .args(["pair", "37350"])
            .env("MRCX_IP", bad)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} accepted");
        assert!(
            err.contains(&format!("mrc_x_open: {}", libc::EINVAL)),
            "{bad}: {err}"
        );
    }
}

#[test]
fn the_c_example_runs_as_two_processes_over_loopback() {
    use std::io::{BufRead, BufReader, Read};
    let exe = build("procs");
    let mut server = Command::new(&exe)
        .args(["server", "37200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let mut lines = BufReader::new(server.stdout.take().expect("server stdout"));
    let mut first = String::new();
    lines
        .read_line(&mut first)
        .expect("the server's handle line");
    let hex = first.trim().strip_prefix("handle ").unwrap_or_else(|| {
        let _ = server.kill();
        panic!("server printed {first:?}")
    });
    assert_eq!(hex.len(), 120, "{hex}");
    let client = Command::new(&exe)
        .args(["client", "37250", hex])
        .output()
        .expect("run the client");
    let mut rest = String::new();
    lines.read_to_string(&mut rest).expect("server output");
    let status = server.wait().expect("wait for the server");
    let mut serr = String::new();
    server
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut serr)
        .expect("stderr");
    let cout = String::from_utf8_lossy(&client.stdout);
    eprintln!(
        "server: {rest}{serr}\nclient: {cout}{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(
        client.status.success() && status.success(),
        "client {:?}, server {status:?}",
        client.status
    );
    assert_eq!(cout, "client: 5 writes completed\n");
    assert_eq!(
        rest,
        "server: 5 writes, 3 immediates, 1048576 bytes checked\n"
    );
}

#[test]
fn the_rust_layouts_match_the_c_compilers() {
    use _mrc::ext::*;
    use std::mem::{offset_of, size_of};
    let exe = build("sizes");
    let out = Command::new(&exe).arg("sizes").output().expect("run");
    assert!(out.status.success());
    let c: Vec<(String, usize)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    let rust = [
        ("context_attr", size_of::<MrcXContextAttr>()),
        (
            "context_attr.setup_timeout_ms",
            offset_of!(MrcXContextAttr, setup_timeout_ms),
        ),
        ("mr", size_of::<MrcXMr>()),
        ("mr.rkey", offset_of!(MrcXMr, rkey)),
        ("sge", size_of::<MrcXSge>()),
        ("sge.lkey", offset_of!(MrcXSge, lkey)),
        ("send_wr", size_of::<MrcXSendWr>()),
        ("send_wr.sg", offset_of!(MrcXSendWr, sg)),
        ("send_wr.remote_addr", offset_of!(MrcXSendWr, remote_addr)),
        ("send_wr.rkey", offset_of!(MrcXSendWr, rkey)),
        ("recv_wr", size_of::<MrcXRecvWr>()),
        ("wc", size_of::<MrcXWc>()),
        ("wc.imm_data", offset_of!(MrcXWc, imm_data)),
        ("wc.qp_num", offset_of!(MrcXWc, qp_num)),
    ];
    let rust: Vec<(String, usize)> = rust.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    assert_eq!(c, rust);
    // Worked out by hand (LP64): no implicit padding anywhere; the SGE is ibv_sge's 16.
    assert_eq!(
        (
            size_of::<MrcXContextAttr>(),
            size_of::<MrcXMr>(),
            size_of::<MrcXSge>()
        ),
        (24, 24, 16)
    );
    assert_eq!(
        (
            size_of::<MrcXSendWr>(),
            size_of::<MrcXRecvWr>(),
            size_of::<MrcXWc>()
        ),
        (56, 32, 32)
    );
}
