//! Integration test on the real-kernel SRv6 testbed (issue 8): builds the 2-host/2-leaf/
//! 4-spine fabric of network namespaces with `testbed/mrc-testbed.sh` (its own namespace
//! prefix, so concurrent runs never meet), runs short `--verify` transfers of `mrc-perf`
//! steered over every spine (`--srv6 srh` and `--srv6 usid`), checks the spine interface
//! counters, takes a spine link down during a run, and tears the fabric down (also on
//! failure, from `Drop`). Needs root: without it the test fails with a message saying so.
//! On a kernel without SRv6 lightweight tunnels it skips with a `SKIPPED: <test>: <reason>`
//! line on stderr that `.ci/run` counts, unless `MRC_SRV6_REQUIRE=1` ([`srv6_kernel`]).
//! Every child process runs under `timeout`; polling the kernel's counters is bounded.

mod srv6_kernel;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const H1: &str = "fd00:6d72:63:11::2";
const MSG_BYTES: u64 = 65536;
/// Most packets of the TCP bootstrap (parameters, QP exchange, results) host0 -> host1.
const BOOTSTRAP_PACKETS: u64 = 64;

struct Fabric {
    prefix: String,
    script: PathBuf,
}

impl Fabric {
    /// The fabric, built; `None` on a kernel that cannot build it ([`srv6_kernel`]).
    fn up(test: &str) -> Option<Fabric> {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "the testbed test builds network namespaces and must run as root (CI does); \
             run `sudo -E cargo test -p mrc-examples --test testbed`"
        );
        let script = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testbed/mrc-testbed.sh"
        ));
        if !srv6_kernel::testbed_possible(&script, test) {
            return None;
        }
        let f = Fabric {
            prefix: format!("mrctb{}-", std::process::id() % 10_000),
            script,
        };
        // --srv6: the steering needs the SRv6 parts; without them `up` fails (exit 3) rather
        // than build the plain-routing fabric.
        let o = f.tb(&["up", "--srv6"]);
        assert!(o.status.success(), "testbed up failed: {}", text(&o));
        Some(f)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("timeout");
        c.arg("120").arg(&self.script).args(args);
        c.env("MRCTB_PREFIX", &self.prefix);
        // The plan comes from this build's designer.
        c.env("MRCTB_SIM", env!("CARGO_BIN_EXE_mrc-sim"));
        c
    }

    fn tb(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run mrc-testbed.sh")
    }

    /// Bytes spine `j` received from leaf0: the data direction host0 -> host1.
    fn spine_rx(&self, j: usize) -> u64 {
        self.counter(j, "rx_bytes")
    }

    /// Counter `name` of spine `j`'s interface towards leaf0.
    fn counter(&self, j: usize, name: &str) -> u64 {
        let p = format!("/sys/class/net/l0/statistics/{name}");
        let o = self.tb(&["exec", &format!("s{j}"), "cat", &p]);
        assert!(o.status.success(), "read counter: {}", text(&o));
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .expect("counter")
    }

    /// (bytes, packets) each spine received from leaf0.
    fn spines_rx(&self) -> [(u64, u64); 4] {
        [0, 1, 2, 3].map(|j| (self.counter(j, "rx_bytes"), self.counter(j, "rx_packets")))
    }

    fn server(&self, port: u16) -> Child {
        let bin = env!("CARGO_BIN_EXE_mrc-perf");
        let child = self
            .cmd(&["exec", "h1", bin, "server", "--bind", H1])
            .args(["--port", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn server");
        // Bounded wait (5 s) until host1 listens on the bootstrap port.
        let start = Instant::now();
        loop {
            let o = self.tb(&["exec", "h1", "ss", "-Hltn"]);
            if String::from_utf8_lossy(&o.stdout).contains(&format!(":{port} ")) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "server never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn client(&self, port: u16, args: &[&str]) -> Child {
        let bin = env!("CARGO_BIN_EXE_mrc-perf");
        // -v: the engine's warnings (a send the kernel refused, an EV out of rotation)
        // land in the client's output, which a failed assertion prints
        self.cmd(&["exec", "h0", bin, "client", H1, "-v"])
            .args(["--port", &port.to_string(), "--timeout", "10"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn client")
    }

    /// One verified transfer; returns the client's report and the (bytes, packets) each
    /// spine received from leaf0 meanwhile.
    fn transfer(&self, port: u16, args: &[&str]) -> (String, [(u64, u64); 4]) {
        let before = self.spines_rx();
        let srv = self.server(port);
        let cli = self.client(port, args).wait_with_output().expect("client");
        let srv = srv.wait_with_output().expect("server");
        let after = self.spines_rx();
        assert!(cli.status.success(), "client failed: {}", text(&cli));
        assert!(srv.status.success(), "server failed: {}", text(&srv));
        (
            text(&cli),
            [0, 1, 2, 3].map(|j| (after[j].0 - before[j].0, after[j].1 - before[j].1)),
        )
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = self.tb(&["down"]);
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The words of EV `ev`'s line in the per-EV summary (EV, src_port, sent_packets,
/// retransmitted_packets, trimmed_packets, ecn_marked_packets, rto_lost_packets,
/// probes_sent, state).
fn ev_line(report: &str, ev: u32) -> Vec<String> {
    report
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .find(|w| w.len() == 9 && w[0] == ev.to_string())
        .unwrap_or_else(|| panic!("no EV {ev} line in:\n{report}"))
}

/// Datagrams the client's datapath sent ("datapath: N datagrams in ..." of the report).
fn datapath_datagrams(report: &str) -> u64 {
    report
        .lines()
        .find_map(|l| l.trim().strip_prefix("datapath: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no datapath line in:\n{report}"))
}

/// The state column of EV `ev`.
fn ev_state(report: &str, ev: u32) -> String {
    ev_line(report, ev)[8].clone()
}

/// Data packets the sender put on EV `ev` (first transmissions and retransmissions).
fn ev_packets(report: &str, ev: u32) -> u64 {
    ev_line(report, ev)[2].parse().expect("packets column")
}

#[test]
fn testbed_steers_each_ev_through_its_spine_and_survives_a_dead_spine() {
    let Some(f) = Fabric::up("testbed_steers_each_ev_through_its_spine_and_survives_a_dead_spine")
    else {
        return;
    };
    let port = 18600 + (std::process::id() % 1000) as u16;

    // Steered over each spine: 16 EVs, EV i through spine i % 4; every byte verified.
    // Every packet the sender put on EV i must be counted by spine i % 4: its rx_packets
    // equal the sum over its four EVs, give or take the few packets of the TCP bootstrap
    // (plainly routed, on whichever spine ECMP picks) and the probes and control packets
    // (steered too, but not counted per EV). And the bytes follow the EVs: each spine's
    // share within 10% of its four EVs' share of the data packets. A loss declared by the
    // sender would move its EV out of the rotation and its retransmission to another
    // spine; the fabric loses nothing, so the only losses are spurious ones of a
    // descheduled engine (2 shared cores, a debug build): an RTO floor of 200 ms and a
    // reorder window of 50 ms make them rare (the lab's TCG VM still had 3 RTO expiries
    // in one run, EV 0 out of the rotation for about a second).
    // `--srv6-via socket` (sticky IPV6_RTHDR) and `route` (the host's steering table adds
    // the same header): the spread and the data are the same; the packet accounting holds
    // for the socket form only, whose packets leave one by one (route keeps GSO sends
    // whole, so a spine counts one skb for several datagrams).
    for (mode, via) in [
        ("srh", "socket"),
        ("usid", "socket"),
        ("srh", "route"),
        ("usid", "route"),
    ] {
        let n = 200u64;
        let (out, per_spine) = f.transfer(
            port,
            &[
                "--verify",
                "-n",
                &n.to_string(),
                "--paths",
                "16",
                "--srv6",
                mode,
                "--srv6-via",
                via,
                "--rate-limit",
                "0.3",
                "--min-rto-us",
                "200000",
                "--reorder-window-us",
                "50000",
                // the spread checks the steering, EV by EV: round robin gives each EV
                // the same packets, whatever the host's timing (recycling follows the
                // acknowledgements, and in the lab's TCG VM EV 0 took 322 of 3200)
                "--path-selection",
                "round-robin",
            ],
        );
        let want = format!(
            "verify: {n} messages, {} bytes checked, 0 bad bytes",
            n * MSG_BYTES
        );
        assert!(
            out.contains(&want),
            "{mode} via {via}: {want} missing in:\n{out}"
        );
        // At least the payload crossed the spines (200 x 64 KiB), spread as the EVs were.
        let bytes: Vec<u64> = per_spine.iter().map(|(b, _)| *b).collect();
        let sum: u64 = bytes.iter().sum();
        assert!(sum >= n * MSG_BYTES, "{mode} via {via}: {per_spine:?}");
        // Each spine's share of the bytes is its four EVs' share of the data packets
        // (a quarter each with round robin and no loss; an EV out of the rotation for a
        // while after an RTO of the slow TCG VM sends fewer, and its spine carries fewer:
        // EV 0 63 packets of 3226 once, spine 0 21.7% of the bytes for 21.5% predicted).
        let data: u64 = (0..16u32).map(|ev| ev_packets(&out, ev)).sum();
        let worst = bytes
            .iter()
            .enumerate()
            .map(|(j, &b)| {
                let evs: u64 = (0..16u32)
                    .filter(|ev| *ev as usize % 4 == j)
                    .map(|ev| ev_packets(&out, ev))
                    .sum();
                let want = evs as f64 / data as f64;
                (b as f64 / sum as f64 - want).abs() / want
            })
            .fold(0.0, f64::max);
        eprintln!(
            "{mode} via {via}: bytes per spine {bytes:?}, worst deviation from the EVs' shares {:.2}%",
            worst * 100.0
        );
        assert!(
            worst <= 0.10,
            "{mode} via {via}: bytes per spine {bytes:?} deviate {:.1}% from their EVs' shares of the packets:\n{out}",
            worst * 100.0
        );
        if via == "route" {
            continue;
        }
        // Datagrams beyond the per-EV data packets: probes and control packets, also
        // steered, but not counted per EV.
        let datagrams = datapath_datagrams(&out);
        let extra = datagrams - data;
        for (j, &(_, pk)) in per_spine.iter().enumerate() {
            let sent: u64 = (0..16u32)
                .filter(|ev| *ev as usize % 4 == j)
                .map(|ev| ev_packets(&out, ev))
                .sum();
            assert!(
                sent > 0 && pk >= sent && pk - sent <= extra + BOOTSTRAP_PACKETS,
                "{mode} via {via}: spine {j} received {pk} packets, its EVs sent {sent} \
                 (+{extra} other datagrams):\n{out}"
            );
        }
        // Every datagram crossed a spine; nothing else did but the bootstrap.
        let total: u64 = per_spine.iter().map(|(_, p)| p).sum();
        assert!(
            total >= datagrams && total - datagrams <= BOOTSTRAP_PACKETS,
            "{mode} via {via}: spines received {total} packets, the client sent {datagrams}:\n{out}"
        );
    }

    // A spine link dies mid-run: leaf0-spine1 goes down once spine1 carried 4 MB.
    let base = f.spine_rx(1);
    let srv = f.server(port);
    let cli = f.client(port, &["--verify", "-n", "3000", "--srv6", "srh"]);
    let start = Instant::now();
    loop {
        if f.spine_rx(1) - base > 4_000_000 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "spine1 never carried 4 MB"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = f.tb(&["link", "s1", "l0", "down"]);
    assert!(o.status.success(), "link down: {}", text(&o));
    let cli = cli.wait_with_output().expect("client");
    let srv = srv.wait_with_output().expect("server");
    let out = text(&cli);
    assert!(cli.status.success(), "client failed: {out}");
    assert!(srv.status.success(), "server failed: {}", text(&srv));
    let want = format!(
        "verify: 3000 messages, {} bytes checked, 0 bad bytes",
        3000 * MSG_BYTES
    );
    assert!(out.contains(&want), "{want} missing in:\n{out}");
    for ev in 0..16u32 {
        let state = ev_state(&out, ev);
        // The EVs of the dead spine end ASSUMED_BAD (their probes are never answered).
        // Others may be ASSUMED_BAD for a moment after a spurious RACK loss of the slow
        // debug build, so their state is not asserted.
        if ev % 4 == 1 {
            assert_eq!(
                state, "ASSUMED_BAD",
                "EV {ev} crossed the dead spine:\n{out}"
            );
        }
    }

    // Down removes every namespace of this fabric.
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
