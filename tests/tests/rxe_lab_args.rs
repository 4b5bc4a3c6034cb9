//! `testbed/rxe-lab.sh`'s command line, bad arguments only: it runs with a PATH that holds
//! nothing but `bash` and `dirname`, so a command line it accepts stops at its host-tool
//! check ("missing host tools") and nothing is downloaded, built or booted. A bad one must
//! be refused before that check, with its own message and exit 2: `script`,
//! `two-hosts-script` and `two-planes-script` come alone with exactly their readable files
//! (as the second part of a list they were accepted and would have booted VMs that found
//! no script; words after their files were dropped without a word).

use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testbed/rxe-lab.sh");

/// `name` on this process's PATH.
fn which(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not on PATH"))
}

/// A fresh directory with `bash` and `dirname` linked in (the PATH of the runs), and two
/// script files.
fn sandbox(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mrc-rxe-lab-args-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("bin")).unwrap();
    for t in ["bash", "dirname"] {
        std::os::unix::fs::symlink(which(t), d.join("bin").join(t)).unwrap();
    }
    std::fs::write(d.join("a.sh"), "echo a\n").unwrap();
    std::fs::write(d.join("b.sh"), "echo b\n").unwrap();
    d
}

/// Runs the lab with `args` under the sandbox's PATH: exit code and stderr.
fn run(d: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(d.join("bin/bash"))
        .arg(SCRIPT)
        .args(args)
        .env_clear()
        .env("PATH", d.join("bin"))
        .env("MRC_LAB_CACHE", d.join("cache"))
        .current_dir(d)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const MISSING: &str = "rxe-lab: error: missing host tools: qemu-system-x86_64 mmdebstrap cpio depmod modprobe xz tshark jq strip apt-get dpkg gcc make (Debian: apt-get install -y qemu-system-x86 mmdebstrap cpio kmod xz-utils tshark jq binutils gcc make)\n";

#[test]
fn bad_command_lines_are_refused_before_anything_runs() {
    let d = sandbox("bad");
    let a = d.join("a.sh");
    let a = a.to_str().unwrap();
    let b = d.join("b.sh");
    let b = b.to_str().unwrap();
    let alone = "takes its file(s) and comes alone: testbed/rxe-lab.sh script FILE, two-hosts-script FILE_A FILE_B or two-planes-script FILE_A FILE_B\n";
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["two-hosts-script"],
            "two-hosts-script FILE_A FILE_B: exactly two files and no other part (got 0 words after two-hosts-script)\n".into(),
        ),
        (
            vec!["two-hosts-script", a],
            "two-hosts-script FILE_A FILE_B: exactly two files and no other part (got 1 words after two-hosts-script)\n".into(),
        ),
        (
            vec!["two-hosts-script", a, b, "single"],
            "two-hosts-script FILE_A FILE_B: exactly two files and no other part (got 3 words after two-hosts-script)\n".into(),
        ),
        (
            vec!["two-hosts-script", a, "/nonexistent/b.sh"],
            "two-hosts-script FILE_A FILE_B: no readable file /nonexistent/b.sh\n".into(),
        ),
        (
            vec!["two-hosts-script", "/tmp", b],
            "two-hosts-script FILE_A FILE_B: no readable file /tmp\n".into(),
        ),
        (
            vec!["two-hosts-script", "", b],
            "two-hosts-script FILE_A FILE_B: no readable file \n".into(),
        ),
        (vec!["single", "two-hosts-script"], format!("two-hosts-script {alone}")),
        (vec!["single", "two-hosts-script", a, b], format!("two-hosts-script {alone}")),
        (vec!["netem", "script"], format!("script {alone}")),
        (
            vec!["script", a, "single"],
            "script FILE: exactly one FILE and no other part (got 2 words after script)\n".into(),
        ),
        (
            vec!["script", "/nonexistent"],
            "script FILE: no readable file /nonexistent\n".into(),
        ),
        (
            vec!["single", "bogus"],
            "unknown part bogus (single, netem, two-hosts, two-planes, perftest, soak, srv6, prepare, script FILE, two-hosts-script FILE_A FILE_B, two-planes-script FILE_A FILE_B)\n".into(),
        ),
        (
            vec!["two-planes-script", a],
            "two-planes-script FILE_A FILE_B: exactly two files and no other part (got 1 words after two-planes-script)\n".into(),
        ),
        (
            vec!["two-planes-script", a, "/nonexistent/b.sh"],
            "two-planes-script FILE_A FILE_B: no readable file /nonexistent/b.sh\n".into(),
        ),
        (vec!["two-planes", "two-planes-script", a, b], format!("two-planes-script {alone}")),
    ];
    for (args, msg) in cases {
        assert_eq!(
            run(&d, &args),
            (Some(2), format!("rxe-lab: error: {msg}")),
            "{args:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Good command lines pass the argument check and stop at the host tools (this PATH
/// has none): the check itself refuses nothing valid.
#[test]
fn good_command_lines_reach_the_host_tool_check() {
    let d = sandbox("good");
    let a = d.join("a.sh");
    let a = a.to_str().unwrap();
    let b = d.join("b.sh");
    let b = b.to_str().unwrap();
    for args in [
        vec!["two-hosts-script", a, b],
        vec!["two-hosts-script", a, a],
        vec!["two-planes-script", a, b],
        vec!["script", a],
        vec!["single", "two-hosts", "soak"],
        vec![],
    ] {
        assert_eq!(run(&d, &args), (Some(2), MISSING.to_string()), "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
