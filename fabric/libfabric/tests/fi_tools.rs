//! Runs Debian's libfabric tools (`libfabric-bin`) against the built provider, loaded the
//! way any libfabric application loads it: `FI_PROVIDER_PATH` naming a directory that
//! holds `libmrc-fi.so`. Without `fi_info` / `fi_pingpong` each test prints a
//! `SKIPPED: <test>: <reason>` line and passes.

mod common;

use common::{have, provider_dir, skip};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tool(dir: &Path, prog: &str) -> Command {
    let mut c = Command::new(prog);
    c.env("FI_PROVIDER_PATH", dir)
        .env_remove("FI_PROVIDER")
        .env_remove("FI_MRC_ADDR")
        .env_remove("FI_MRC_NETNS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for `c` at most `limit`; kills it past that (and fails).
fn wait(mut c: Child, what: &str, limit: Duration) -> Output {
    let t = Instant::now();
    loop {
        if c.try_wait().expect("wait").is_some() {
            return c.wait_with_output().expect("output");
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            let o = c.wait_with_output().expect("output");
            panic!(
                "{what} still running after {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fi_info_lists_the_mrc_provider() {
    if !have("fi_info") {
        return skip(
            "fi_info_lists_the_mrc_provider",
            "fi_info not installed (apt-get install libfabric-bin)",
        );
    }
    let dir = provider_dir("fi_info");
    let o = tool(&dir, "fi_info")
        .args(["-p", "mrc"])
        .output()
        .expect("run fi_info");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "fi_info -p mrc: {o:?}");
    let listing = "provider: mrc\n    fabric: mrc\n    domain: udp\n    version: 0.1\n    \
                   type: FI_EP_RDM\n    protocol: FI_PROTO_UNSPEC\n";
    assert_eq!(out, listing);

    // Tagged messages and RMA writes are offered: asking for them lists the same
    // provider.
    for caps in [
        "FI_TAGGED",
        "FI_MSG",
        "FI_RMA",
        "FI_RMA|FI_WRITE|FI_REMOTE_WRITE",
    ] {
        let o = tool(&dir, "fi_info")
            .args(["-p", "mrc", "-c", caps])
            .output()
            .expect("run fi_info -c");
        assert!(o.status.success(), "fi_info -p mrc -c {caps}: {o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), listing, "-c {caps}");
    }

    // The attributes, verbose.
    let o = tool(&dir, "fi_info")
        .args(["-p", "mrc", "-v"])
        .output()
        .expect("run fi_info -v");
    assert!(o.status.success());
    let v = String::from_utf8_lossy(&o.stdout);
    for line in [
        "    caps: [ FI_MSG, FI_RMA, FI_TAGGED, FI_WRITE, FI_RECV, FI_SEND, FI_REMOTE_WRITE, \
         FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SOURCE, FI_DIRECTED_RECV ]",
        "        caps: [ FI_MSG, FI_RMA, FI_TAGGED, FI_WRITE, FI_SEND ]",
        "        caps: [ FI_MSG, FI_RMA, FI_TAGGED, FI_RECV, FI_REMOTE_WRITE, FI_SOURCE, \
         FI_DIRECTED_RECV ]",
        "        rma_iov_limit: 1",
        "        mr_key_size: 4",
        "        mem_tag_format: 0xaaaaaaaaaaaaaaaa",
        "        cq_data_size: 4",
        "        max_msg_size: 1073741824",
        "        inject_size: 4096",
        "        threading: FI_THREAD_SAFE",
        "        data_progress: FI_PROGRESS_MANUAL",
        // fi_info offers every mr_mode bit but the two API 1.0 modes: the provider
        // keeps these two.
        "        mr_mode: [ FI_MR_VIRT_ADDR, FI_MR_PROV_KEY ]",
    ] {
        assert!(v.lines().any(|l| l == line), "no line {line:?} in:\n{v}");
    }

    // FI_RMA_EVENT only when asked, with the RMA modifiers and no message caps.
    let o = tool(&dir, "fi_info")
        .args(["-p", "mrc", "-v", "-c", "FI_RMA|FI_RMA_EVENT"])
        .output()
        .expect("run fi_info -c FI_RMA|FI_RMA_EVENT");
    assert!(o.status.success(), "{o:?}");
    let v = String::from_utf8_lossy(&o.stdout);
    let caps: Vec<&str> = v
        .lines()
        .filter(|l| l.trim_start().starts_with("caps:"))
        .collect();
    assert_eq!(
        caps,
        [
            "    caps: [ FI_RMA, FI_WRITE, FI_REMOTE_WRITE, FI_LOCAL_COMM, FI_REMOTE_COMM, \
             FI_RMA_EVENT, FI_SOURCE ]",
            "        caps: [ FI_RMA, FI_WRITE ]",
            "        caps: [ FI_RMA, FI_REMOTE_WRITE, FI_RMA_EVENT, FI_SOURCE ]",
            "        caps: [ FI_LOCAL_COMM, FI_REMOTE_COMM ]",
        ]
    );

    // What the provider does not offer is not listed: RMA reads (the transport has no
    // READ), atomics, a MSG endpoint.
    for args in [
        ["-c", "FI_RMA|FI_READ"],
        ["-c", "FI_ATOMIC"],
        ["-t", "FI_EP_MSG"],
    ] {
        let o = tool(&dir, "fi_info")
            .args(["-p", "mrc"])
            .args(args)
            .output()
            .expect("run fi_info");
        assert_eq!(o.status.code(), Some(61), "fi_info -p mrc {args:?}: {o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stderr), "fi_getinfo: -61\n");
    }
}

/// `FI_MRC_NETNS` naming a namespace that does not exist, a file that is not a network
/// namespace, or (as root) this process's own namespace with an `FI_MRC_ADDR` it lacks:
/// `fi_info -p mrc` finds no provider (libfabric answers `-FI_ENODATA` whatever the
/// provider's code: `-FI_EINVAL`, `-FI_EADDRNOTAVAIL`) and the provider's line on stderr
/// says why; with an address the namespace has, the provider is listed.
#[test]
fn fi_info_says_why_a_namespace_or_address_cannot_be_used() {
    let test = "fi_info_says_why_a_namespace_or_address_cannot_be_used";
    if !have("fi_info") {
        return skip(
            test,
            "fi_info not installed (apt-get install libfabric-bin)",
        );
    }
    let dir = provider_dir("fi_info_netns");
    let run = |ns: &str, addr: Option<&str>| {
        fi_info_mrc(&dir, &[("FI_MRC_NETNS", Some(ns)), ("FI_MRC_ADDR", addr)])
    };
    let no_provider = |ns: &str, addr: Option<&str>, line: &str| {
        no_provider_says(&format!("FI_MRC_NETNS={ns}"), run(ns, addr), line);
    };
    no_provider(
        "mrc-no-such-namespace",
        None,
        "libfabric:mrc: FI_MRC_NETNS=mrc-no-such-namespace: /run/netns/mrc-no-such-namespace: \
         No such file or directory (os error 2)",
    );
    no_provider(
        "/proc/self/status",
        None,
        "libfabric:mrc: FI_MRC_NETNS=/proc/self/status: /proc/self/status: setns: \
         Invalid argument (os error 22) (not a network namespace)",
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        no_provider(
            "/proc/self/ns/net",
            None,
            "libfabric:mrc: FI_MRC_NETNS=/proc/self/ns/net: /proc/self/ns/net: setns: \
             Operation not permitted (os error 1) (needs root)",
        );
        return skip(test, "the namespace's addresses need root (setns)");
    }
    // 192.0.2.1 (TEST-NET-1) is no address of this host.
    no_provider(
        "/proc/self/ns/net",
        Some("192.0.2.1"),
        "libfabric:mrc: FI_MRC_NETNS=/proc/self/ns/net: cannot bind 192.0.2.1 there \
         (Cannot assign requested address (os error 99)): set FI_MRC_ADDR to an address of \
         that namespace",
    );
    for addr in ["127.0.0.1", "::1"] {
        let (code, out, err) = run("/proc/self/ns/net", Some(addr));
        assert_eq!(code, Some(0), "{addr}: {out}{err}");
        assert!(out.starts_with("provider: mrc\n"), "{addr}: {out}");
        assert_eq!(err, "", "{addr}");
    }
}

#[test]
fn fi_info_says_why_a_plane_list_cannot_be_used() {
    let test = "fi_info_says_why_a_plane_list_cannot_be_used";
    if !have("fi_info") {
        return skip(
            test,
            "fi_info not installed (apt-get install libfabric-bin)",
        );
    }
    let dir = provider_dir("fi_info_planes");
    let run = |planes: &str, addr: Option<&str>| {
        fi_info_mrc(
            &dir,
            &[
                ("FI_MRC_PLANES", Some(planes)),
                ("FI_MRC_NETNS", None),
                ("FI_MRC_ADDR", addr),
            ],
        )
    };
    for (planes, addr, line) in [
        (
            "127.0.0.1",
            None,
            "FI_MRC_PLANES=127.0.0.1: 1 addresses; give 2 to 8",
        ),
        (
            "127.0.0.1,::1",
            None,
            "FI_MRC_PLANES=127.0.0.1,::1: ::1: every plane's address is a unicast one of one family",
        ),
        (
            "127.0.0.1,127.0.0.2",
            Some("127.0.0.2"),
            "FI_MRC_PLANES=127.0.0.1,127.0.0.2: FI_MRC_ADDR=127.0.0.2 is not plane 0's address \
             127.0.0.1: leave FI_MRC_ADDR out or give plane 0's",
        ),
        // 192.0.2.1 (TEST-NET-1) is no address of this host.
        (
            "127.0.0.1,192.0.2.1",
            None,
            "FI_MRC_PLANES=127.0.0.1,192.0.2.1: cannot bind plane 1's address 192.0.2.1 in \
             this process's network namespace (Cannot assign requested address (os error 99)): \
             give addresses of that namespace",
        ),
    ] {
        no_provider_says(
            &format!("FI_MRC_PLANES={planes}"),
            run(planes, addr),
            &format!("libfabric:mrc: {line}"),
        );
    }
    // Two loopback addresses, FI_MRC_ADDR left out or plane 0's: the provider is listed.
    for addr in [None, Some("127.0.0.1")] {
        let (code, out, err) = run("127.0.0.1, 127.0.0.2", addr);
        assert_eq!(code, Some(0), "{addr:?}: {out}{err}");
        assert!(out.starts_with("provider: mrc\n"), "{addr:?}: {out}");
        assert_eq!(err, "", "{addr:?}");
    }
}

/// `fi_info -p mrc` with the provider in `dir` and each of `vars` set (`Some`) or removed
/// (`None`): its exit code, stdout and stderr.
fn fi_info_mrc(dir: &Path, vars: &[(&str, Option<&str>)]) -> (Option<i32>, String, String) {
    let mut c = tool(dir, "fi_info");
    c.args(["-p", "mrc"]);
    for (k, v) in vars {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let o = c.output().expect("run fi_info");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `fi_info` (run with `what` set) found no provider: exit 61, nothing on stdout, and
/// stderr exactly `line` and libfabric's `fi_getinfo: -61`.
fn no_provider_says(what: &str, (code, out, err): (Option<i32>, String, String), line: &str) {
    assert_eq!(code, Some(61), "{what}: {out}{err}");
    assert_eq!(out, "", "{what}");
    assert_eq!(err, format!("{line}\nfi_getinfo: -61\n"), "{what}");
}

/// A TCP port nobody listens on now (fi_pingpong's control channel).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn fi_pingpong_runs_over_mrc_on_loopback() {
    let test = "fi_pingpong_runs_over_mrc_on_loopback";
    if !have("fi_pingpong") {
        return skip(
            test,
            "fi_pingpong not installed (apt-get install libfabric-bin)",
        );
    }
    let dir = provider_dir("fi_pingpong");
    let port = free_port().to_string();
    // -e rdm: the provider's only endpoint type (fi_pingpong's default is dgram); -c:
    // fi_pingpong checks every byte it receives; -I 10: iterations per size. The default
    // sizes run: 64 B .. 1 MiB (max_msg_size).
    let common = ["-p", "mrc", "-e", "rdm", "-I", "10", "-c"];
    let server = tool(&dir, "fi_pingpong")
        .args(common)
        .args(["-B", &port])
        .spawn()
        .expect("start the server");
    // The client retries while the server's control socket is not up yet.
    let t = Instant::now();
    let client = loop {
        let c = tool(&dir, "fi_pingpong")
            .args(common)
            .args(["-P", &port, "127.0.0.1"])
            .spawn()
            .expect("start the client");
        let o = wait(c, "fi_pingpong client", Duration::from_secs(120));
        let err = String::from_utf8_lossy(&o.stderr);
        if !o.status.success() && err.contains("failed to connect") && t.elapsed().as_secs() < 10 {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        break o;
    };
    let server = wait(server, "fi_pingpong server", Duration::from_secs(60));
    for (who, o) in [("client", &client), ("server", &server)] {
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{who}: stdout:\n{out}\nstderr:\n{err}"
        );
        assert_eq!(err, "", "{who} printed on stderr");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 7, "{who}: {out}");
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            [
                "bytes",
                "#sent",
                "#ack",
                "total",
                "time",
                "MB/sec",
                "usec/xfer",
                "Mxfers/sec"
            ]
        );
        for (l, size) in lines[1..]
            .iter()
            .zip(["64", "256", "1k", "4k", "64k", "1m"])
        {
            let f: Vec<&str> = l.split_whitespace().collect();
            // size, sent, =acked (every message acknowledged): no "Error at iteration".
            assert_eq!(f[..3], [size, "10", "=10"], "{who}: {l}");
        }
    }
}
