//! `mrc-perf` run as a binary on loopback (127.0.0.1 / ::1 only), with exact checks.

use serde_json::Value;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Upper bound on one mrc-perf run in these tests: a hang fails the test instead of CI.
const RUN_LIMIT_S: &str = "180";

fn perf(args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    // coreutils `timeout` kills a hung run (exit 124), so a test can never wait forever.
    let o = Command::new("timeout")
        .args([
            "--kill-after=5",
            RUN_LIMIT_S,
            env!("CARGO_BIN_EXE_mrc-perf"),
        ])
        .args(args)
        .output()
        .expect("run mrc-perf under timeout(1)");
    assert_ne!(
        o.status.code(),
        Some(124),
        "mrc-perf {args:?} still running after {RUN_LIMIT_S} s: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (o, t.elapsed())
}

fn json(args: &[&str]) -> Value {
    let (o, _) = perf(args);
    assert!(
        o.status.success(),
        "mrc-perf {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

#[test]
fn loopback_verify_exact_completions_and_no_bad_bytes() {
    let v = json(&["loopback", "-n", "50", "-s", "65536", "--verify", "--json"]);
    assert_eq!(v["iterations"], 50);
    assert_eq!(v["bytes_moved"], 50 * 65536);
    assert_eq!(v["receiver"]["completions"], 50);
    assert_eq!(v["receiver"]["bytes"], 50 * 65536);
    assert_eq!(v["receiver"]["verified_messages"], 50);
    assert_eq!(v["receiver"]["verified_bytes"], 50 * 65536);
    assert_eq!(v["receiver"]["bad_bytes"], 0);
    assert_eq!(v["evs"].as_array().unwrap().len(), 16);
    assert!(v["bw_avg_gbps"].as_f64().unwrap() > 0.0);
}

#[test]
fn loopback_with_only_the_subcommand_works_and_prints_perftest_columns() {
    // The README's main job: no arguments beyond `loopback` (5000 x 64 KiB).
    let (o, _) = perf(&["loopback"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.contains(
        "#bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    ));
    assert!(out.contains(" 65536      5000 "), "{out}");
    assert!(
        out.contains(" receiver: 5000 completions, 327680000 bytes"),
        "{out}"
    );
}

#[test]
fn loopback_ipv6_verify_text() {
    let (o, _) = perf(&[
        "loopback",
        "--ipv6",
        "-n",
        "20",
        "--verify",
        "--report-gbits",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.contains("loopback ::1"), "{out}");
    assert!(out.contains("BW average[Gb/sec]"), "{out}");
    assert!(
        out.contains(" verify: 20 messages, 1310720 bytes checked, 0 bad bytes"),
        "{out}"
    );
}

#[test]
fn loopback_latency_exact_iterations() {
    let v = json(&[
        "loopback", "--test", "lat", "-n", "200", "--verify", "--json",
    ]);
    assert_eq!(v["iterations"], 200);
    assert_eq!(v["bytes"], 8);
    assert_eq!(v["receiver"]["completions"], 200);
    assert_eq!(v["receiver"]["verified_messages"], 400); // pings at the server, echoes here
    assert_eq!(v["receiver"]["bad_bytes"], 0);
    let l = &v["lat_us"];
    assert!(l["min"].as_f64().unwrap() <= l["typical"].as_f64().unwrap());
    assert!(l["typical"].as_f64().unwrap() <= l["p99"].as_f64().unwrap());
}

#[test]
fn loopback_bidirectional_verify() {
    let v = json(&[
        "loopback",
        "--bidirectional",
        "-n",
        "30",
        "-s",
        "32768",
        "--verify",
        "--json",
    ]);
    assert_eq!(v["iterations"], 30);
    assert_eq!(v["receiver"]["completions"], 30);
    assert_eq!(v["receiver"]["verified_messages"], 60);
    assert_eq!(v["receiver"]["verified_bytes"], 60 * 32768);
    assert_eq!(v["receiver"]["bad_bytes"], 0);
    assert_eq!(v["bytes_moved"], 60 * 32768);
}

#[test]
fn loopback_duration_mode_counts_match() {
    let v = json(&["loopback", "-D", "0.5", "-s", "16384", "--json"]);
    let n = v["iterations"].as_u64().unwrap();
    assert!(n > 0);
    assert_eq!(v["receiver"]["completions"].as_u64().unwrap(), n);
    assert_eq!(v["receiver"]["bytes"].as_u64().unwrap(), n * 16384);
}

#[test]
fn paths_burst_and_mtu_options() {
    let v = json(&[
        "loopback",
        "--paths",
        "4",
        "--burst-size",
        "2",
        "--mtu",
        "1024",
        "-n",
        "20",
        "-s",
        "8192",
        "--verify",
        "--json",
        "--cc",
        "dcqcn",
    ]);
    assert_eq!(v["receiver"]["verified_messages"], 20);
    assert_eq!(v["receiver"]["bad_bytes"], 0);
    let evs = v["evs"].as_array().unwrap();
    assert_eq!(evs.len(), 4);
    let mut ports: Vec<u64> = evs
        .iter()
        .map(|e| e["src_port"].as_u64().unwrap())
        .collect();
    // EVs 0,1 share a socket and 2,3 the next: two source ports.
    assert_eq!(ports[0], ports[1]);
    assert_eq!(ports[2], ports[3]);
    ports.dedup();
    assert_eq!(ports.len(), 2);
    // 20 messages of 8 packets of 1024 bytes, at least once each.
    let sent: u64 = evs.iter().map(|e| e["packets"].as_u64().unwrap()).sum();
    assert_eq!(sent, 160 + v["retransmitted"].as_u64().unwrap());
}

fn fails_with(args: &[&str], msg: &str) {
    let (o, t) = perf(args);
    assert!(!o.status.success(), "mrc-perf {args:?} should fail");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(msg), "stderr of {args:?}: {err}");
    assert!(t < Duration::from_secs(8), "took {t:?}");
}

#[test]
fn bad_arguments_exit_non_zero_with_a_message() {
    fails_with(
        &["loopback", "-D", "0"],
        "--duration must be a positive number of seconds, got 0",
    );
    fails_with(&["loopback", "-n", "0"], "--iters must be at least 1");
    fails_with(
        &["loopback", "-s", "2000000", "--region-size", "1000000"],
        "--size 2000000 is larger than the region (1000000 bytes, --region-size)",
    );
    fails_with(&["loopback", "--cc", "bogus"], "bogus");
    fails_with(
        &["loopback", "--burst-size", "17"],
        "--burst-size must be in 1..=--paths (16), got 17",
    );
}

#[test]
fn unreachable_server_fails_within_seconds() {
    // A port nobody listens on: take one from the kernel and close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = port.to_string();
    fails_with(
        &["client", "127.0.0.1", "-p", &p, "--timeout", "2"],
        "cannot reach server 127.0.0.1:",
    );
}

#[test]
fn baseline_udp_blast_and_tcp_exact_counts() {
    let v = json(&["baseline", "-n", "100", "-s", "65536", "--json"]);
    let b = v["baselines"].as_array().unwrap();
    assert_eq!(b.len(), 2);
    // 100 x 64 KiB = 1600 datagrams of 4096 payload bytes, sent in bursts of 64.
    assert_eq!(b[0]["sent"], 1600);
    assert!(b[0]["received"].as_u64().unwrap() <= 1600);
    assert!(b[0]["gbps"].as_f64().unwrap() > 0.0);
    let tcp_name = b[1]["name"].as_str().unwrap();
    assert!(tcp_name.starts_with("kernel TCP"));
    if tcp_name.contains("built-in") {
        assert_eq!(b[1]["bytes"], 100 * 65536);
    }
}

#[test]
fn baseline_udp_pingpong() {
    let v = json(&["baseline", "--test", "lat", "-n", "100", "--json"]);
    let b = &v["baselines"][0];
    assert_eq!(b["sent"], 100);
    assert!(b["lat_us"]["typical"].as_f64().unwrap() > 0.0);
}
