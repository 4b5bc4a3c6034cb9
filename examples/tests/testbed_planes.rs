//! The testbed in two planes (issue 43): `testbed/mrc-testbed.sh up --planes 2` builds two
//! disjoint copies of the 2-leaf/4-spine fabric of network namespaces, every host with an
//! interface in each (its own namespace prefix, so concurrent runs never meet), and this
//! test checks, with exact addresses and counts: every host reaches every other host's
//! plane-0 and plane-1 address from its own address of the same plane; a host interface
//! routes only its own plane's prefixes; traffic between plane-1 addresses crosses plane-1
//! spines only (the spines' interface counters); `plane 1 down` cuts plane 1 and leaves
//! plane 0, `plane 1 up` restores it; `plane-loss 1 100` drops all of plane 1 while its
//! links stay up, `off` restores it; `down` leaves no namespace of its prefix.
//!
//! It needs no SRv6: on a kernel without SRv6 lightweight tunnels (this CI host's) `up`
//! builds the plain-routing fabric and `status` says `srv6: off (...)`; on one with them
//! it builds the SRv6 parts too and says `srv6: on`. It needs root, `ping` (iputils-ping)
//! and `nft`: without one of them it skips with a `SKIPPED: <test>: <reason>` line on
//! stderr that `.ci/run` counts. Every command runs under `timeout`, every ping waits at
//! most 1 s, and a `Drop` guard takes the fabric down, also when an assertion fails.

mod planes_common;

use planes_common::{Fabric, H0, H1, have, skip, text};

/// Echo requests of the plane-confinement check.
const PINGS: u64 = 100;
/// Packets the spines of a plane may receive besides the test's own: each new interface
/// sends a few unsolicited MLD reports in its first seconds (measured: 8 to 12 per plane).
const BACKGROUND: u64 = 16;

/// The fabric test's own commands (an inherent impl: the module is part of this crate).
impl Fabric {
    fn ping(&self, host: &str, src: &str, dst: &str) -> bool {
        self.tb(&["exec", host, "ping", "-6", "-c1", "-W1", "-I", src, dst])
            .status
            .success()
    }

    /// (sent, received) of `n` echo requests 10 ms apart.
    fn pings(&self, host: &str, src: &str, dst: &str, n: u64) -> (u64, u64) {
        let o = self.tb(&[
            "exec",
            host,
            "ping",
            "-6",
            "-q",
            "-c",
            &n.to_string(),
            "-i",
            "0.01",
            "-W1",
            "-I",
            src,
            dst,
        ]);
        let out = text(&o);
        let line = out
            .lines()
            .find(|l| l.contains("packets transmitted"))
            .unwrap_or_else(|| panic!("no ping summary in:\n{out}"));
        let w: Vec<&str> = line.split_whitespace().collect();
        (w[0].parse().expect("sent"), w[3].parse().expect("received"))
    }

    /// Packets all spines of each plane received (`counters`' `plane P spines` lines).
    fn spine_rx_packets(&self) -> [u64; 2] {
        let out = self.ok(&["counters"]);
        let mut v = [None, None];
        for l in out.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() == 11 && w[0] == "plane" && w[2] == "spines" && w[7] == "rx_packets" {
                let p: usize = w[1].parse().expect("plane");
                v[p] = Some(w[8].parse::<u64>().expect("rx_packets"));
            }
        }
        v.map(|x| x.unwrap_or_else(|| panic!("no plane line in counters:\n{out}")))
    }

    /// Prefixes `host` routes through a gateway on `dev`.
    fn via_routes(&self, host: &str, dev: &str) -> Vec<String> {
        let out = self.ok(&["exec", host, "ip", "-6", "route", "show", "dev", dev]);
        let mut v: Vec<String> = out
            .lines()
            .filter(|l| l.contains(" via "))
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect();
        v.sort();
        v
    }

    fn namespaces_left(&self) -> Vec<String> {
        std::fs::read_dir("/run/netns")
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&self.prefix))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[test]
fn two_planes_reach_stay_apart_fail_and_recover() {
    let test = "two_planes_reach_stay_apart_fail_and_recover";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(
            test,
            "needs root (network namespaces, veth); run `sudo -E cargo test -p mrc-examples --test testbed_planes`",
        );
        return;
    }
    for (tool, pkg) in [
        ("ip", "iproute2"),
        ("jq", "jq"),
        ("nft", "nftables"),
        ("ping", "iputils-ping"),
    ] {
        if !have(tool) {
            skip(test, &format!("{tool} not found (apt-get install {pkg})"));
            return;
        }
    }
    // The guard exists before `up`, so a failed or panicking run is taken down too.
    let f = Fabric::new('P');
    let srv6 = f.tb(&["kernel"]).status.code();
    let up = f.ok(&["up", "--planes", "2"]);
    assert!(
        up.ends_with(&format!(
            "mrc-testbed: up (2 planes, 2 hosts, 4 leaves, 8 spines: 14 namespaces {}*)\n",
            f.prefix
        )),
        "{up}"
    );
    // Idempotent: the same plan again is left as it is.
    assert!(
        f.ok(&["up", "--planes", "2"])
            .ends_with("mrc-testbed: already up\n")
    );
    let status = f.ok(&["status"]);
    let lines: Vec<&str> = status.lines().collect();
    let n = lines.len();
    assert!(n >= 17, "{status}");
    assert_eq!(lines[n - 3], "planes: 2");
    match srv6 {
        Some(0) => assert_eq!(lines[n - 2], "srv6: on"),
        Some(3) => {
            let off = "srv6: off (this kernel, ";
            assert!(lines[n - 2].starts_with(off), "{status}");
            assert!(up.starts_with(&format!("mrc-testbed: {off}")), "{up}");
        }
        other => panic!("mrc-testbed.sh kernel exited {other:?}"),
    }
    assert_eq!(lines[n - 1], "mrc-testbed: complete");
    let ns: Vec<String> = [
        "h0", "h1", "p0-l0", "p0-l1", "p1-l0", "p1-l1", "p0-s0", "p0-s1", "p0-s2", "p0-s3",
        "p1-s0", "p1-s1", "p1-s2", "p1-s3",
    ]
    .iter()
    .map(|n| format!("{}{n}", f.prefix))
    .collect();
    let mut left = f.namespaces_left();
    left.sort();
    let mut want = ns.clone();
    want.sort();
    assert_eq!(left, want);

    // The plan it was built from: each host's two ports.
    let plan: serde_json::Value = serde_json::from_str(&f.ok(&["plan"])).expect("plan JSON");
    assert_eq!(plan["design"]["planes"], 2);
    for (h, addrs) in [H0, H1].iter().enumerate() {
        for (p, a) in addrs.iter().enumerate() {
            let port = &plan["hosts"][h]["ports"][p];
            assert_eq!(port["addr"], *a);
            assert_eq!(port["ifname"], format!("eth{p}"));
            assert_eq!(port["leaf_name"], format!("p{p}-l{h}"));
        }
    }

    // Every host reaches every other host's address in each plane, from its own address
    // of that plane.
    for p in 0..2 {
        assert!(f.ping("h0", H0[p], H1[p]), "h0 -> h1 in plane {p}");
        assert!(f.ping("h1", H1[p], H0[p]), "h1 -> h0 in plane {p}");
    }
    // A host interface routes its own plane's prefixes only: the other host's, and with
    // SRv6 the plane's SIDs (leaves e1<i>, spines e0<j>) and uSID blocks.
    for (host, p, net) in [
        ("h0", 0, "fd00:6d72:63:11::/64"),
        ("h0", 1, "fd00:6d72:63:1011::/64"),
        ("h1", 0, "fd00:6d72:63:10::/64"),
        ("h1", 1, "fd00:6d72:63:1010::/64"),
    ] {
        let mut want = vec![net.to_string()];
        if srv6 == Some(0) {
            let px = if p == 0 { String::new() } else { p.to_string() };
            for (tier, n) in [(1, 2), (0, 4)] {
                for i in 0..n {
                    want.push(format!("fd00:6d72:63:{px}e{tier}{i}::/64"));
                    want.push(format!("fd00:75:e{tier}{p}{i}::/48"));
                }
            }
        }
        want.sort();
        assert_eq!(
            f.via_routes(host, &format!("eth{p}")),
            want,
            "{host} eth{p}"
        );
    }

    // Plane 1's traffic crosses plane 1's spines only: 100 echo requests and their
    // replies, each through one plane-1 spine (rx on its leaf0 side, then on its leaf1
    // side); plane 0's spines see none of them.
    let before = f.spine_rx_packets();
    assert_eq!(f.pings("h0", H0[1], H1[1], PINGS), (PINGS, PINGS));
    let after = f.spine_rx_packets();
    let moved = [after[0] - before[0], after[1] - before[1]];
    assert!(
        moved[1] >= 2 * PINGS && moved[1] <= 2 * PINGS + BACKGROUND,
        "plane-1 spines received {} packets for {PINGS} echo requests and replies",
        moved[1]
    );
    assert!(
        moved[0] <= BACKGROUND,
        "plane-0 spines received {} packets while only plane 1 carried traffic",
        moved[0]
    );

    // Plane 1 down: its addresses are unreachable, plane 0 still works.
    assert_eq!(
        f.ok(&["plane", "1", "down"]),
        "mrc-testbed: plane 1 down (10 links)\n"
    );
    assert!(!f.ping("h0", H0[1], H1[1]), "plane 1 is down");
    assert!(!f.ping("h1", H1[1], H0[1]), "plane 1 is down");
    assert!(f.ping("h0", H0[0], H1[0]), "plane 0 with plane 1 down");
    assert!(f.ping("h1", H1[0], H0[0]), "plane 0 with plane 1 down");
    assert_eq!(f.via_routes("h0", "eth1"), Vec::<String>::new());
    // Up again: plane 1 is back, with its routes.
    assert_eq!(
        f.ok(&["plane", "1", "up"]),
        "mrc-testbed: plane 1 up (10 links)\n"
    );
    assert!(f.ping("h0", H0[1], H1[1]), "plane 1 up again");
    assert!(f.ping("h1", H1[1], H0[1]), "plane 1 up again");
    assert!(
        f.ping("h0", H0[0], H1[0]),
        "plane 0 after plane 1 came back"
    );
    assert!(f.ok(&["status"]).ends_with("mrc-testbed: complete\n"));

    // A dead plane whose links stay up: every packet of plane 1 is dropped at the host
    // interface it arrives on, after it crossed the plane's spines.
    assert_eq!(
        f.ok(&["plane-loss", "1", "100"]),
        "mrc-testbed: plane 1 loss 100\n"
    );
    let before = f.spine_rx_packets();
    assert_eq!(f.pings("h0", H0[1], H1[1], 10), (10, 0));
    let after = f.spine_rx_packets();
    assert!(
        after[1] - before[1] >= 10 && after[1] - before[1] <= 10 + BACKGROUND,
        "the 10 dropped echo requests crossed plane 1: {before:?} -> {after:?}"
    );
    assert!(f.ping("h0", H0[0], H1[0]), "plane 0 beside a dead plane 1");
    assert_eq!(
        f.ok(&["plane-loss", "1", "off"]),
        "mrc-testbed: plane 1 loss off\n"
    );
    assert_eq!(f.pings("h0", H0[1], H1[1], 10), (10, 10));

    // Bad arguments are refused, naming the usage.
    let o = f.tb(&["plane", "2", "down"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "mrc-testbed: plane P up|down (P 0..1)\n"
    );

    // Down removes every namespace of this fabric and its saved plan.
    assert_eq!(f.ok(&["down"]), "mrc-testbed: down\n");
    assert_eq!(f.namespaces_left(), Vec::<String>::new());
    assert!(!std::path::Path::new(&format!("/run/mrctb/{}plan.json", f.prefix)).exists());
}
