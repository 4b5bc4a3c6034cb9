//! mrc steered by SRv6 over two planes of the testbed (issue 43): `testbed/mrc-testbed.sh
//! up --planes 2 --srv6`, `mrc-perf server --bind A0,A1` in host 1 and `mrc-perf client A0
//! --bind B0,B1 --srv6 srh` in host 0, one address per plane at each end, so that each EV
//! socket carries an SRH through one spine of its own plane (EV `i` on plane `i % 2`,
//! through that plane's spine `(i / 2) % 4`; `examples/src/perf/srv6.rs`). It checks, on
//! a real kernel with SRv6 lightweight tunnels:
//!
//! - `--verify` transfers with `--srv6 srh` and `--srv6 usid` by socket header and `usid`
//!   by the hosts' steering routes (`--srv6-via route`): exact bytes; every EV on its
//!   plane; each plane 45-55% of the packets (the client's report); by socket header,
//!   every spine of both planes received at least the packets its EVs sent and at most
//!   those plus the client's other datagrams and the TCP bootstrap (the spine counters:
//!   each EV crossed exactly its spine); by route, each plane's spines' bytes within 10% of
//!   their mean; the plane-0 and plane-1 spines 45-55% each of what all spines received;
//! - plane 1 pulled mid-run (`plane 1 down`, once plane 1's spine 0 carried 100 packets,
//!   and left down): exact bytes, plane 1 reported down at the end (`DOWN_LOCAL`: the
//!   client's own port; or by loss or the peer's Port Status Update, whichever came
//!   first), plane 0 `UP`, and every plane-0 spine carried traffic after the pull.
//!
//! Needs root, `ip` and `jq`; without one a counted `SKIPPED: <test>: <reason>` line (a
//! failure under `MRC_SRV6_REQUIRE=1`). On a kernel without SRv6 lightweight tunnels
//! (this host's 6.18) it skips the same way, unless `MRC_SRV6_REQUIRE=1` (the Soft-RoCE
//! lab's `srv6` part runs it on Debian's kernel, which has them). Every command runs under
//! `timeout`; a `Drop` guard takes the fabric down, also when an assertion fails.

mod planes_common;
mod srv6_kernel;

use planes_common::{Fabric, H0, H1, have, skip, text};
use serde_json::Value;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A line of the test's figures on stderr, past libtest's capture (one write, as the
/// `SKIPPED:` lines): the lab runs the test without `--nocapture`, and its console is
/// where the measured figures are read.
macro_rules! say {
    ($($t:tt)*) => {{
        let line = format!("testbed_planes_srv6: {}\n", format!($($t)*));
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }};
}

/// Most packets of the TCP bootstrap (parameters, QP exchange, results) host 0 -> host 1;
/// plainly routed on plane 0, over whichever spine ECMP picks.
const BOOTSTRAP_PACKETS: u64 = 64;
const MSG_BYTES: u64 = 65536;
const SPINES: usize = 4;

/// This test's own commands (an inherent impl: the module is part of this crate).
impl Fabric {
    /// `cmd` in namespace `node` of this fabric, under `timeout 120`.
    fn ns(&self, node: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &format!("{}{node}", self.prefix)])
            .args(["timeout", "120"]);
        c
    }

    /// Packets spine `j` of plane `q` received from leaf 0 (host 0's data direction).
    fn spine_rx(&self, q: usize, j: usize) -> u64 {
        self.spine_counter(q, j, "rx_packets")
    }

    /// Counter `name` of spine `j` of plane `q`'s interface towards leaf 0.
    fn spine_counter(&self, q: usize, j: usize, name: &str) -> u64 {
        let o = self
            .ns(&format!("p{q}-s{j}"))
            .arg("cat")
            .arg(format!("/sys/class/net/l0/statistics/{name}"))
            .output()
            .expect("read a spine counter");
        assert!(o.status.success(), "read p{q}-s{j}'s counter: {}", text(&o));
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .expect("a counter")
    }

    /// [`Fabric::spine_rx`] of every spine, by plane.
    fn spines_rx(&self) -> [[u64; SPINES]; 2] {
        self.spines("rx_packets")
    }

    /// [`Fabric::spine_counter`] `name` of every spine, by plane.
    fn spines(&self, name: &str) -> [[u64; SPINES]; 2] {
        [0, 1].map(|q| [0, 1, 2, 3].map(|j| self.spine_counter(q, j, name)))
    }
}

/// A server in host 1 on both planes (its first stderr line read: it listens).
fn server(f: &Fabric, port: u16) -> Child {
    let perf = env!("CARGO_BIN_EXE_mrc-perf");
    let mut s = f
        .ns("h1")
        .arg(perf)
        .args(["server", "--bind", &H1.join(","), "-p", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let mut err = std::io::BufReader::new(s.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("the server's first line");
    assert!(line.contains("waiting for a client"), "server: {line}");
    // keep draining its stderr so that it never blocks on a full pipe
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    s
}

/// A `--srv6 srh` client in host 0 on both planes towards host 1's plane-0 address,
/// with `args`; JSON report.
fn client(f: &Fabric, port: u16, args: &[&str]) -> Child {
    client_in(f, port, "srh", "socket", args)
}

/// [`client`] with `--srv6 MODE --srv6-via VIA`.
fn client_in(f: &Fabric, port: u16, mode: &str, via: &str, args: &[&str]) -> Child {
    let perf = env!("CARGO_BIN_EXE_mrc-perf");
    f.ns("h0")
        .arg(perf)
        .args(["client", H1[0], "--bind", &H0.join(","), "-p"])
        .arg(port.to_string())
        .args([
            "--json",
            "--timeout",
            "30",
            "--paths",
            "16",
            "--srv6",
            mode,
            "--srv6-via",
            via,
        ])
        // the fabric loses nothing: no loss may be declared for a descheduled debug
        // engine (a TCG VM, a loaded host), as examples/tests/testbed.rs
        .args(["--min-rto-us", "200000", "--reorder-window-us", "50000"])
        .args(["--rate-limit", "0.3", "--path-selection", "round-robin"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client")
}

/// Waits for both; the client's JSON report and the server's stdout.
fn finish(cli: Child, srv: Child) -> (Value, String) {
    let out = cli.wait_with_output().expect("wait for the client");
    let s = srv.wait_with_output().expect("wait for the server");
    let server_text = String::from_utf8_lossy(&s.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {}\nserver: {server_text}",
        text(&out)
    );
    assert!(s.status.success(), "server failed: {server_text}");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("client's JSON: {e}: {}", text(&out)));
    (v, server_text)
}

/// Exact bytes: every message verified at the server, none bad; the message count.
fn check_exact(v: &Value, server: &str, messages: Option<u64>) -> u64 {
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["receiver"]["bad_bytes"], 0, "{v}");
    let n = v["iterations"].as_u64().expect("iterations");
    if let Some(m) = messages {
        assert_eq!(n, m, "{v}");
    }
    assert!(n > 0, "{v}");
    assert_eq!(v["receiver"]["verified_messages"], n, "{v}");
    assert_eq!(v["receiver"]["verified_bytes"], n * MSG_BYTES, "{v}");
    let want = format!("{n} messages, {} bytes checked, 0 bad bytes", n * MSG_BYTES);
    assert!(
        server.contains(&want),
        "{want} missing in the server's:\n{server}"
    );
    n
}

/// Spine of EV `ev` within its plane (`ev % 2`): the plane's `ev / 2`-th socket.
fn spine_of(ev: u64) -> usize {
    (ev as usize / 2) % SPINES
}

/// Whether `x` is 45-55% of `total`.
fn half(x: u64, total: u64) -> bool {
    let pct = x as f64 * 100.0 / total.max(1) as f64;
    (45.0..=55.0).contains(&pct)
}

/// One steered `--verify` transfer of `n` x 64 KiB over both planes (`--srv6 MODE
/// --srv6-via VIA`): exact bytes, every EV on plane `i % 2` and `GOOD` (or `ASSUMED_BAD`
/// after a loss declared on it), each plane 45-55% of
/// the packets, and the spine counters: by socket header, each spine of both planes
/// received at least its EVs' data packets (EV `i` through spine `(i / 2) % 4` of plane
/// `i % 2`) and at most those plus the client's other datagrams and the bootstrap; by
/// route, each spine's share of its plane's bytes within 10% of its EVs' share of the
/// plane's packets. Both planes' spines 45-55% each of what all received.
fn steered(f: &Fabric, port: u16, mode: &str, via: &str, n: u64) {
    let counter = if via == "route" {
        "rx_bytes"
    } else {
        "rx_packets"
    };
    let before = f.spines(counter);
    let srv = server(f, port);
    let cli = client_in(f, port, mode, via, &["--verify", "-n", &n.to_string()]);
    let (v, server_text) = finish(cli, srv);
    let after = f.spines(counter);
    check_exact(&v, &server_text, Some(n));
    let evs = v["evs"].as_array().expect("evs");
    assert_eq!(evs.len(), 16, "{v}");
    let mut sent = [[0u64; SPINES]; 2];
    for (i, e) in evs.iter().enumerate() {
        let ev = e["ev"].as_u64().expect("ev");
        assert_eq!(ev, i as u64, "{v}");
        assert_eq!(e["plane"], ev % 2, "EV {ev}: {v}");
        // GOOD, or ASSUMED_BAD for a moment after a loss declared on it: the lab's TCG VM
        // stalls the debug engines past the 200 ms RTO (twice in 2026-12-07's runs, one
        // EV each, its rto_lost_packets 1), as examples/tests/testbed.rs allows. Its
        // packets crossed its spine all the same (the spine counters below).
        let lost = e["rto_lost_packets"].as_u64().unwrap_or(0)
            + e["retransmitted_packets"].as_u64().unwrap_or(0);
        assert!(
            e["state"] == "GOOD" || (e["state"] == "ASSUMED_BAD" && lost > 0),
            "EV {ev} is {} with no loss declared on it: {v}",
            e["state"]
        );
        let pk = e["sent_packets"].as_u64().expect("sent_packets");
        sent[(ev % 2) as usize][spine_of(ev)] += pk;
    }
    let planes = v["planes"].as_array().expect("planes");
    assert_eq!(planes.len(), 2, "{v}");
    for p in planes {
        let share = p["share_pct"].as_f64().expect("share_pct");
        assert!((45.0..=55.0).contains(&share), "plane share {share}: {v}");
        assert_eq!(p["state"], "UP", "{v}");
    }
    let got: Vec<Vec<u64>> = (0..2)
        .map(|q| (0..SPINES).map(|j| after[q][j] - before[q][j]).collect())
        .collect();
    say!(
        "{mode} via {via} over two planes: spine {counter} plane 0 {:?}, plane 1 {:?}; EV packets \
         by spine {:?}; plane shares {}% / {}%",
        got[0],
        got[1],
        sent,
        planes[0]["share_pct"],
        planes[1]["share_pct"]
    );
    let total: u64 = got.iter().flatten().sum();
    let plane0: u64 = got[0].iter().sum();
    assert!(
        half(plane0, total),
        "{mode} via {via}: plane 0's spines received {plane0} of {total} ({counter}): {got:?}"
    );
    if via == "route" {
        // Bytes: at least the payload, and each spine's share of its plane's bytes within
        // 10% of its EVs' share of the plane's data packets (a quarter each with no loss;
        // an EV out of the rotation for a while after an RTO of the slow TCG VM sends
        // fewer, and its spine carries fewer: 14.5% below the plane's mean once).
        assert!(total >= n * MSG_BYTES, "{mode} via {via}: {got:?}");
        for (q, g) in got.iter().enumerate() {
            let plane_bytes = g.iter().sum::<u64>() as f64;
            let plane_packets = sent[q].iter().sum::<u64>() as f64;
            for (j, &b) in g.iter().enumerate() {
                let share = b as f64 / plane_bytes;
                let want = sent[q][j] as f64 / plane_packets;
                assert!(
                    (share - want).abs() <= 0.1 * want,
                    "{mode} via {via}: spine {j} of plane {q} received {b} bytes, {:.1}% of the \
                     plane's, its EVs sent {:.1}% of the plane's packets: {got:?}, EV packets \
                     {sent:?}",
                    share * 100.0,
                    want * 100.0
                );
            }
        }
        return;
    }
    // The spine counters: each EV's packets crossed exactly its spine.
    let datagrams = v["datapath"]["tx_datagrams"]
        .as_u64()
        .expect("tx_datagrams");
    let data: u64 = sent.iter().flatten().sum();
    let extra = datagrams - data;
    for q in 0..2 {
        for j in 0..SPINES {
            let (pk, s) = (got[q][j], sent[q][j]);
            assert!(
                s > 0 && pk >= s && pk - s <= extra + BOOTSTRAP_PACKETS,
                "{mode} via {via}: spine {j} of plane {q} received {pk} packets, its EVs sent \
                 {s} (+{extra} other datagrams): {got:?} against {sent:?}\n{v}"
            );
        }
    }
    assert!(
        total >= datagrams && total - datagrams <= BOOTSTRAP_PACKETS,
        "{mode} via {via}: spines received {total} packets, the client sent {datagrams}: {got:?}"
    );
}

#[test]
fn srv6_over_two_planes_steers_each_ev_through_a_spine_of_its_plane_and_survives_a_pulled_plane() {
    let test = "srv6_over_two_planes_steers_each_ev_through_a_spine_of_its_plane_and_survives_a_pulled_plane";
    let required = std::env::var("MRC_SRV6_REQUIRE").as_deref() == Ok("1");
    let missing = |why: String| {
        assert!(!required, "MRC_SRV6_REQUIRE=1 but {why}");
        skip(test, &why);
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing("needs root (network namespaces, veth, seg6local)".into());
        return;
    }
    for (tool, pkg) in [("ip", "iproute2"), ("jq", "jq")] {
        if !have(tool) {
            missing(format!("{tool} not found (apt-get install {pkg})"));
            return;
        }
    }
    let f = Fabric::new('S');
    if !srv6_kernel::testbed_possible(&f.script, test) {
        return;
    }
    // Building 14 namespaces with their SIDs and steering tables takes over a minute
    // in the lab's TCG VM.
    let t = Instant::now();
    let o = f.tb_within(300, &["up", "--planes", "2", "--srv6"]);
    assert!(o.status.success(), "up --planes 2 --srv6: {}", text(&o));
    let up_s = t.elapsed().as_secs();
    say!(
        "up --planes 2 --srv6 took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let o = f.tb_within(120, &["status"]);
    assert!(o.status.success(), "status: {}", text(&o));
    let status = String::from_utf8_lossy(&o.stdout);
    assert!(
        status.contains("planes: 2") && status.contains("srv6: on"),
        "{status}"
    );

    // 1. Steered over every spine of both planes, exact bytes, half the packets each:
    //    `srh` and `usid` by socket header (every packet counted on its spine), and
    //    `usid` by the hosts' steering routes (their tables of spine j hold, for a plane-q
    //    destination, the route through plane q's spine j; GSO sends cross whole, so the
    //    spines count bytes, not datagrams).
    steered(&f, 29301, "srh", "socket", 400);
    steered(&f, 29303, "usid", "socket", 200);
    steered(&f, 29304, "usid", "route", 200);

    // 2. Plane 1 pulled mid-run, once its spine 0 carried 100 packets, and left down.
    //    One counter a poll: in the lab's TCG VM each `ip netns exec` takes a good part of
    //    a second, and reading all eight spines made a first version of this test pull
    //    the plane after the run had ended. The run lasts 12 s plus what `up` took: the
    //    pull command itself, a bash script touching ten namespaces, took 19 s there
    //    (`up` 38 s), which outlasted a run of 12 s; on a host, `up` takes seconds.
    let secs = (12 + up_s).min(90).to_string();
    let base = f.spine_rx(1, 0);
    let srv = server(&f, 29302);
    let mut cli = client(&f, 29302, &["--verify", "-D", &secs]);
    let start = Instant::now();
    loop {
        let now = f.spine_rx(1, 0);
        if now - base >= 100 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "plane 1's spine 0 never carried 100 packets: {now} from {base}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = start.elapsed();
    assert_eq!(
        f.ok(&["plane", "1", "down"]),
        "mrc-testbed: plane 1 down (10 links)\n"
    );
    let pulled_at = (t0, start.elapsed());
    assert!(
        cli.try_wait().expect("the client's status").is_none(),
        "the client ended before plane 1 was pulled ({pulled_at:?} after its start)"
    );
    let pulled = f.spines_rx();
    let (v, server_text) = finish(cli, srv);
    let end = f.spines_rx();
    say!(
        "pull: a run of {secs} s, plane 1 down {:.1}..{:.1} s after the client started; planes {}",
        pulled_at.0.as_secs_f64(),
        pulled_at.1.as_secs_f64(),
        v["planes"]
    );
    let n = check_exact(&v, &server_text, None);
    let planes = v["planes"].as_array().expect("planes");
    assert_eq!(planes.len(), 2, "{v}");
    // Down at the end: by this end's own port (its eth1 went down), or first by the
    // losses or the peer's Port Status Update, whichever the engine saw first. (Under TCG
    // a stalled engine may also have taken it out by loss, and back, before the pull.)
    let p1 = &planes[1];
    assert!(
        ["DOWN_LOCAL", "DOWN_LOSS", "DOWN_PEER"].contains(&p1["state"].as_str().unwrap_or(""))
            && ["downs_local", "downs_by_loss", "downs_by_peer"]
                .iter()
                .map(|k| p1[*k].as_u64().unwrap_or(0))
                .sum::<u64>()
                >= 1,
        "plane 1 after the pull: {}",
        v["planes"]
    );
    assert_eq!(
        (&planes[0]["state"], &planes[0]["downs_local"]),
        (&"UP".into(), &0.into()),
        "{}",
        v["planes"]
    );
    let after_pull: Vec<u64> = (0..SPINES).map(|j| end[0][j] - pulled[0][j]).collect();
    say!("pull: {n} x 64 KiB verified; plane-0 spines' rx_packets after the pull {after_pull:?}");
    assert!(
        after_pull.iter().all(|&p| p > 0),
        "a plane-0 spine carried nothing after the pull: {after_pull:?}"
    );

    // Down removes every namespace of this fabric (the guard's `down` finds none left).
    let o = f.tb_within(300, &["down"]);
    assert!(o.status.success(), "down: {}", text(&o));
    let prefix = f.prefix.clone();
    drop(f);
    let left: Vec<_> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}
