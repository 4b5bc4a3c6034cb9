//! `mrc-sim` end to end: exact designer numbers, typed errors with non-zero exits, pcap
//! readable by tshark.

use std::process::Command;

fn mrc_sim(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mrc-sim"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("mrc-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn design_json_gives_the_issue_table() {
    // 16 GPUs fit one leaf: no uplinks, no spine.
    for (gpus, servers, leaves, down, up, spines) in [
        (16, 2, 1, 16, 0, 0),
        (64, 8, 2, 32, 32, 1),
        (128, 16, 4, 32, 32, 2),
        (1024, 128, 32, 32, 32, 16),
    ] {
        let (code, out, _) = mrc_sim(&["design", "--gpus", &gpus.to_string(), "--json", "-"]);
        assert_eq!(code, 0);
        let json = &out[out.find('{').unwrap()..];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["servers"], servers);
        assert_eq!(v["leaves"], leaves);
        assert_eq!(v["plane"]["downlinks_per_leaf"], down);
        assert_eq!(v["plane"]["uplinks_per_leaf"], up);
        assert_eq!(v["spines"], spines);
        assert_eq!(v["optics"], 2 * (gpus + leaves * up));
    }
}

/// The design text says what it counts: 200G lanes and the 400G ports carrying them.
#[test]
fn design_text_counts_lanes_and_physical_ports() {
    let (code, out, err) = mrc_sim(&["design", "--gpus", "64"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "\
design: 64 GPUs, 8 per server, 200G NICs, 32x400G leaves, 32x400G spines, 1:1, 1 plane
        servers  nics  leaves  spines  lane_gbps  cables  optics  oversubscription
fabric        8    64       2       1        200     128     256                 1
per switch, one plane: links in 200G lanes and in physical ports (leaf 400G = 2 x 200G, spine 400G = 2 x 200G)
                   down  up  per_leaf_spine_pair  in_use  of
leaf, 200G lanes     32  32                   32      64  64
leaf, 400G ports     16  16                    -      32  32
spine, 200G lanes    64   -                   32      64  64
spine, 400G ports    32   -                    -      32  32
cables: 128 = (64 NIC links + 64 leaf-spine links), one per 200G lane; optics: 256 = 2 x cables (one per link end)
"
    );
    // `--layout spine-leaf` is the default, byte for byte.
    let (code, explicit, _) = mrc_sim(&["design", "--gpus", "64", "--layout", "spine-leaf"]);
    assert_eq!((code, explicit), (0, out));
    // 16 GPUs put a spine over their one leaf (32 cables); one leaf needs none.
    let (code, out, err) = mrc_sim(&["design", "--gpus", "16"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "\
design: 16 GPUs, 8 per server, 200G NICs, 32x400G leaves, 32x400G spines, 1:1, 1 plane
        servers  nics  leaves  spines  lane_gbps  cables  optics  oversubscription
fabric        2    16       1       0        200      16      32                 1
per switch, one plane: links in 200G lanes and in physical ports (leaf 400G = 2 x 200G)
                  down  up  in_use  of
leaf, 200G lanes    16   0      16  64
leaf, 400G ports     8   0       8  32
cables: 16 = 16 NIC links (one leaf: no spines, no leaf-spine links), one per 200G lane; optics: 32 = 2 x cables (one per link end)
"
    );
    let (code, out, _) = mrc_sim(&["design", "--gpus", "1024", "--json", "-"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
    assert_eq!(
        (&v["plane"]["leaf_breakout"], &v["plane"]["spine_breakout"]),
        (&2.into(), &2.into())
    );
    assert_eq!(v["plane"]["downlinks_per_spine"], 64);
    assert_eq!(v["plane"]["leaf_logical_ports"], 64);
    // 2:1: 20 uplinks per leaf rotate over 9 spines, the fullest takes 58 of its 64 lanes.
    let (code, out, err) = mrc_sim(&[
        "design",
        "--gpus",
        "1024",
        "--oversubscription",
        "2:1",
        "--json",
        "-",
    ]);
    assert_eq!(code, 0, "{err}");
    // With `--json -` the text goes to stderr and stdout is the JSON alone.
    assert!(err.contains("spines 0-6 carry 58 lanes, spines 7-8 carry 57, of 64 each\n"));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["plane"]["downlinks_per_spine"], 58);
    assert_eq!(v["plane"]["links_per_leaf_spine"], 3);
}

/// Trace ports above the radix (leaf0:55 on a 32-port switch) are lanes: each switch hop
/// names its front-panel port and lane too, in the text and the JSON.
#[test]
fn trace_names_physical_port_and_lane() {
    let (code, out, err) = mrc_sim(&[
        "trace", "--gpus", "64", "--src", "0", "--dst", "40", "--evs", "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "\
trace host0 -> host40 (ecmp, cross leaf)
  switch egress ports: NODE:PORT (pP/L), PORT = simulator port (0..63) = 200G lane, P = 400G front-panel port (1..32), L = its lane (1..2); PORT = (P - 1) x 2 + L - 1
EV   0 (UDP src port 49152): host0:0 (server 0 NIC 0) -> leaf0:55 (p28/2) -> spine0:50 (p26/1) -> leaf1:8 (p5/1) -> host40 (server 5 NIC 0)
EV   1 (UDP src port 49153): host0:0 (server 0 NIC 0) -> leaf0:32 (p17/1) -> spine0:47 (p24/2) -> leaf1:8 (p5/1) -> host40 (server 5 NIC 0)
links crossed per EV
      hops
EV 0     4
EV 1     4
"
    );
    let (code, out, _) = mrc_sim(&[
        "trace", "--gpus", "64", "--src", "0", "--dst", "40", "--evs", "1", "--json", "-",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out[out.find("[\n").unwrap()..]).unwrap();
    let hops = &v[0][1];
    assert_eq!(
        (&hops[1]["node"], &hops[1]["port"]),
        (&"leaf0".into(), &55.into())
    );
    assert_eq!(
        hops[1]["switch_port"],
        serde_json::json!({"port": 28, "lane": 2, "breakout": 2})
    );
    assert!(hops[0]["switch_port"].is_null());
    assert!(hops[4]["switch_port"].is_null());
}

/// The rail layout of 128 GPUs in 2 planes, as text: 100G lanes, 128 per switch; 16
/// servers in one rail group (a rail leaf holds 64); 8 rail leaves of 16 down and 16 up
/// per plane; 8 x 16 = 128 uplink lanes on one 128-lane spine; 128 NIC links + 128
/// uplinks = 256 cables per plane, 512 in 2 planes, 1024 optics.
#[test]
fn design_rail_layout_text_counts_planes_and_rails() {
    let (code, out, err) = mrc_sim(&[
        "design", "--gpus", "128", "--layout", "rail", "--planes", "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "\
design: 128 GPUs, 8 per server, 200G NICs, 32x400G leaves, 32x400G spines, 1:1, 2 planes, rail layout
        servers  nics  leaves  spines  lane_gbps  cables  optics  oversubscription
fabric       16   128      16       2        100     512    1024                 1
per switch, one plane: links in 100G lanes and in physical ports (leaf 400G = 4 x 100G, spine 400G = 4 x 100G)
                   down  up  per_leaf_spine_pair  in_use   of
leaf, 100G lanes     16  16                   16      32  128
leaf, 400G ports      4   4                    -       8   32
spine, 100G lanes   128   -                   16     128  128
spine, 400G ports    32   -                    -      32   32
cables: 512 = (128 NIC links + 128 leaf-spine links) per plane, x 2 planes, one per 100G lane; optics: 1024 = 2 x cables (one per link end)
per plane and in all 2 planes: port p of every NIC on plane p, each plane the same fabric
            servers  nics  nic_ports  leaves  spines  links  cables  optics
per plane        16   128        128       8       1    256     256     512
all planes       16   128        256      16       2    512     512    1024
rails, one plane: NIC k of every server on rail k, one leaf per rail in each rail group; NICs of one rail and group share a leaf, other pairs cross a spine
             rails  rail_groups  servers_per_group  group_capacity  leaves_per_group  leaves_per_rail  nic_ports_per_rail
rail layout      8            1                 16              64                 8                1                  16
"
    );
}

/// `--json` keeps every key it had and adds `per_plane`, `total` and `rail` (`null` in
/// the spine-leaf layout), `input.layout`. Rail rows: (GPUs, planes) -> per plane
/// leaves, spines, cables; all planes leaves, spines, NIC ports, optics; rail groups,
/// servers per group, leaves per rail.
#[test]
fn design_json_gives_per_plane_and_per_rail_counts() {
    for ((gpus, planes), per_plane, all, rail) in [
        ((16, 1), (8, 1, 32), (8, 1, 16, 64), (1, 2, 1)),
        ((64, 8), (8, 1, 128), (64, 8, 512, 2048), (1, 8, 1)),
        ((1024, 1), (32, 16, 2048), (32, 16, 1024, 4096), (4, 32, 4)),
        ((1024, 2), (16, 8, 2048), (32, 16, 2048, 8192), (2, 64, 2)),
        ((1024, 8), (8, 2, 2048), (64, 16, 8192, 32768), (1, 128, 1)),
    ] {
        let (code, out, err) = mrc_sim(&[
            "design",
            "--gpus",
            &gpus.to_string(),
            "--planes",
            &planes.to_string(),
            "--layout",
            "rail",
            "--json",
            "-",
        ]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let at = format!("{gpus} GPUs, {planes} planes");
        assert_eq!(v["input"]["layout"], "rail", "{at}");
        let pp = &v["per_plane"];
        assert_eq!(
            (&pp["leaves"], &pp["spines"], &pp["cables"], &pp["links"]),
            (
                &per_plane.0.into(),
                &per_plane.1.into(),
                &per_plane.2.into(),
                &per_plane.2.into()
            ),
            "{at}"
        );
        assert_eq!(
            (&pp["nics"], &pp["nic_ports"]),
            (&gpus.into(), &gpus.into())
        );
        let t = &v["total"];
        assert_eq!(
            (&t["leaves"], &t["spines"], &t["nic_ports"], &t["optics"]),
            (&all.0.into(), &all.1.into(), &all.2.into(), &all.3.into()),
            "{at}"
        );
        // The keys from before: the totals at the top.
        assert_eq!(
            (&v["leaves"], &v["spines"], &v["optics"]),
            (&all.0.into(), &all.1.into(), &all.3.into()),
            "{at}"
        );
        let r = &v["rail"];
        assert_eq!(
            (
                &r["rails"],
                &r["groups"],
                &r["servers_per_group"],
                &r["leaves_per_rail"]
            ),
            (&8.into(), &rail.0.into(), &rail.1.into(), &rail.2.into()),
            "{at}"
        );
    }
    // Spine-leaf, 2 planes of 1024 GPUs: 16 leaves and 8 spines per plane; no rails.
    let (code, out, _) = mrc_sim(&["design", "--gpus", "1024", "--planes", "2", "--json", "-"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["input"]["layout"], "spine-leaf");
    assert!(v["rail"].is_null());
    assert_eq!(
        (&v["per_plane"]["leaves"], &v["per_plane"]["spines"]),
        (&16.into(), &8.into())
    );
    assert_eq!(
        (&v["total"]["nic_ports"], &v["total"]["cables"]),
        (&2048.into(), &4096.into())
    );
}

/// A rail-layout trace names server, NIC, plane, rail and group of each hop: NIC 0 of
/// servers 0 and 5 share rail 0's leaf of group 0 (2 links); server 32 is in group 1
/// (leaf 8), NIC 1 of server 5 on rail 1 (leaf 1): both cross a spine (4 links).
#[test]
fn trace_rail_layout_names_nic_plane_rail_and_group() {
    let (code, out, err) = mrc_sim(&[
        "trace", "--gpus", "1024", "--layout", "rail", "--src", "0", "--dst", "40", "--evs", "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "\
trace host0 -> host40 (ecmp, rail layout, same rail and group)
  switch egress ports: NODE:PORT (pP/L), PORT = simulator port (0..63) = 200G lane, P = 400G front-panel port (1..32), L = its lane (1..2); PORT = (P - 1) x 2 + L - 1
EV   0 (UDP src port 49152): host0:0 (server 0 NIC 0, rail 0, group 0) -> leaf0:5 (p3/2; rail 0, group 0) -> host40 (server 5 NIC 0, rail 0, group 0)
links crossed per EV
      hops
EV 0     2
"
    );
    let (code, out, err) = mrc_sim(&[
        "trace", "--gpus", "1024", "--layout", "rail", "--src", "0", "--dst", "256", "--evs", "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("trace host0 -> host256 (ecmp, rail layout, same rail, cross group)\n"),
        "{out}"
    );
    assert!(
        out.contains("(p1/1; rail 0, group 1) -> host256 (server 32 NIC 0, rail 0, group 1)\n"),
        "{out}"
    );
    // 8 planes, plane 3: every hop says plane 3; JSON gives each hop's tier and place.
    let args = [
        "trace", "--gpus", "1024", "--layout", "rail", "--planes", "8", "--plane", "3", "--src",
        "0", "--dst", "41", "--evs", "1",
    ];
    let (code, out, err) = mrc_sim(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("trace host0 -> host41 (ecmp, rail layout, cross rail, plane 3 of 8)\n"),
        "{out}"
    );
    let ev0 = out.lines().find(|l| l.starts_with("EV   0")).unwrap();
    assert_eq!(ev0.matches("plane 3").count(), 5, "{ev0}");
    assert!(ev0.contains(": host0:0 (server 0 NIC 0, plane 3, rail 0, group 0) -> leaf0:"));
    assert!(ev0.ends_with(
        "; plane 3, rail 1, group 0) -> host41 (server 5 NIC 1, plane 3, rail 1, group 0)"
    ));
    let (code, out, _) = mrc_sim(&[&args[..], &["--json", "-"]].concat());
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let hops = v[0][1].as_array().unwrap();
    let tiers: Vec<&str> = hops.iter().map(|h| h["tier"].as_str().unwrap()).collect();
    assert_eq!(tiers, ["host", "leaf", "spine", "leaf", "host"]);
    assert!(hops.iter().all(|h| h["plane"] == 3));
    let rails: Vec<&serde_json::Value> = hops.iter().map(|h| &h["rail"]).collect();
    assert_eq!(
        rails,
        [
            &0.into(),
            &0.into(),
            &serde_json::Value::Null,
            &1.into(),
            &1.into()
        ]
    );
    assert_eq!(
        (&hops[4]["server"], &hops[4]["nic"]),
        (&5.into(), &1.into())
    );
    assert_eq!(
        (&hops[3]["leaf"], &hops[3]["rail_group"]),
        (&1.into(), &0.into())
    );
}

/// Layout and plane mistakes are typed errors with exit 2, before anything is printed.
#[test]
fn layout_and_plane_errors_are_clear() {
    for (args, want) in [
        (
            vec!["design", "--layout", "fat-tree"],
            "mrc-sim: error: layout \"fat-tree\" is not spine-leaf or rail\n",
        ),
        (
            vec!["design", "--gpus", "4096", "--layout", "rail"],
            "mrc-sim: error: 8 rails x 16 rail groups = 128 leaves exceed the 64 logical ports of a spine (needs a third tier)\n",
        ),
        (
            vec![
                "trace", "--planes", "8", "--plane", "8", "--src", "0", "--dst", "1",
            ],
            "mrc-sim: error: --plane 8: no such plane (this design has planes 0..7)\n",
        ),
        (
            vec!["trace", "--plane", "1", "--src", "0", "--dst", "1"],
            "mrc-sim: error: --plane 1: no such plane (this design has plane 0 only)\n",
        ),
        (
            vec![
                "design",
                "--layout",
                "rail",
                "--plot",
                "/tmp/mrc-sim-rail.svg",
            ],
            "mrc-sim: error: --plot draws the spine-leaf layout only; the rail layout is in the tables and `trace --layout rail --plot`\n",
        ),
    ] {
        let (code, out, err) = mrc_sim(&args);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (2, "", want),
            "{args:?}"
        );
    }
}

#[test]
fn bad_speed_ratio_is_a_clear_error() {
    let (code, _, err) = mrc_sim(&["design", "--gpus", "64", "--leaf-port-gbps", "300"]);
    assert_eq!(code, 2);
    assert!(err.contains("not an integer multiple"), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn unknown_experiment_is_a_clear_error() {
    let (code, _, err) = mrc_sim(&["experiment", "warp-drive"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown experiment \"warp-drive\""), "{err}");
    assert!(err.contains("spray-vs-ecmp"));
}

#[test]
fn bad_toml_is_a_clear_error() {
    let p = tmp("bad.toml");
    std::fs::write(&p, "seed = [\n").unwrap();
    let (code, _, err) = mrc_sim(&["run", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("bad.toml"), "{err}");
    assert!(!err.contains("panicked"));
    let (code, _, err) = mrc_sim(&["run", "/nonexistent/x.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("x.toml"), "{err}");
}

/// One 64 KiB flow from host 0 to host 5 of the 16-GPU test fabric.
const SCENARIO: &str = concat!(
    "seed = 1\n",
    include_str!("fixtures/topology16.toml"),
    "[[flows]]\nsrc = 0\ndst = 5\nbytes = 65536\n"
);

#[test]
fn run_writes_json_and_a_pcap_tshark_reads() {
    let sc = tmp("one.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    let pcap = tmp("leaf0.pcap");
    let json = tmp("one.json");
    let (code, out, err) = mrc_sim(&[
        "run",
        sc.to_str().unwrap(),
        "--pcap-port",
        "host0:0",
        "--pcap",
        pcap.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["flows"][0]["bytes"], 65536);
    assert_eq!(v["flows"][0]["packets_sent"], 16);
    // host0's NIC sent the 16 data packets of the flow (64 KiB / 4096) and nothing else.
    let t = Command::new("tshark")
        .args([
            "-r",
            pcap.to_str().unwrap(),
            "-d",
            "udp.port==4792,infiniband",
            "-T",
            "fields",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "udp.length",
        ])
        .output();
    let Ok(t) = t else {
        panic!("tshark is needed for this test");
    };
    let lines: Vec<String> = String::from_utf8_lossy(&t.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 16, "{lines:?}");
    // UDP length: 8 + 12 BTH + 16 MRCETH + 8 MSGETH + 16 RETH + 4096.
    assert!(lines.iter().all(|l| l.ends_with("\t4156")), "{lines:?}");
}

/// A scenario whose flow cannot finish (every fabric link loses every packet) exits 1 and
/// says why on stderr; it used to exit 1 silently. The work request fails at the eighth
/// RTO expiry (retry limit 7), 1 + 2 + 4 + ... + 64 + 100 ms = 227 ms after the first
/// packet left: each expiry resends every packet in flight (RFC 8985 section 6.3), so the
/// next backed-off RTO runs from that resend. (When an expiry resent only the packets one
/// RTO old, the 16 packets the NIC serialised went one per expiry, the timer kept running
/// from the oldest packet not yet resent, and the limit came at 100 ms.)
#[test]
fn unfinished_flows_exit_1_with_a_message() {
    let sc = tmp("lossy.toml");
    std::fs::write(
        &sc,
        format!("{SCENARIO}[[faults]]\nat_ns = 0\nkind = \"loss\"\nlinks = \"all\"\np = 1.0\n"),
    )
    .unwrap();
    let (code, out, err) = mrc_sim(&["run", sc.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        err,
        "mrc-sim: 1 of 1 flows did not finish (fct_us NaN) by virtual time 227000.1 us\n"
    );
}

/// Hostile numbers: a propagation delay near 2^64 ns wrapped event times (the flow
/// "finished" in 7.5 us), 2^32 - 1 GPUs panicked the designer on a division by zero.
#[test]
fn absurd_numbers_are_clear_errors() {
    let sc = tmp("prop.toml");
    std::fs::write(
        &sc,
        SCENARIO.replace(
            "spine_port_gbps = 100\n",
            "spine_port_gbps = 100\npropagation_ns = 18446744073709551615\n",
        ),
    )
    .unwrap();
    let (code, _, err) = mrc_sim(&["run", sc.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "topology.propagation_ns = 18446744073709551615 is more than 1000000000 (1 s)"
        ),
        "{err}"
    );
    let sc = tmp("jitter.toml");
    std::fs::write(
        &sc,
        format!(
            "{SCENARIO}[[faults]]\nat_ns = 0\nkind = \"jitter\"\nlinks = \"all\"\nmax_ns = 18446744073709551615\n"
        ),
    )
    .unwrap();
    let (code, _, err) = mrc_sim(&["run", sc.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("fault jitter: max_ns = 18446744073709551615 is more than 1000000000 (1 s)"),
        "{err}"
    );
    let (code, _, err) = mrc_sim(&["design", "--gpus", "4294967295"]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "mrc-sim: error: 134217728 leaves exceed the 64 logical ports of a spine (needs a third tier)\n"
    );
    let (code, _, err) = mrc_sim(&["design", "--gpus", "64", "--leaf-radix", "4294967295"]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "mrc-sim: error: leaf logical ports of this design do not fit in 32 bits: the inputs are out of range\n"
    );
}

/// A trim threshold below one data frame trims every packet: the run used to spin
/// forever (the transport retransmits each trimmed packet at once, without limit); a buffer
/// below one data frame drops every packet (every flow failed after its retry limit); a flow
/// start or fault time near 2^64 ns wrapped (the flow "finished" in 5.4 us).
#[test]
fn scenarios_that_cannot_run_are_refused() {
    for (name, extra, why) in [
        (
            "trim0.toml",
            "[queue]\ntrim_threshold_bytes = 100\n",
            "queue.trim_threshold_bytes = 100 is less than one data frame (4352 bytes: \
             mtu_payload_bytes 4096 + 256): every data packet would be trimmed",
        ),
        (
            "buffer0.toml",
            "[queue]\nbuffer_bytes = 0\n",
            "queue.buffer_bytes = 0 is less than one data frame (4352 bytes: \
             mtu_payload_bytes 4096 + 256): every data packet would be dropped",
        ),
        (
            "bytes0.toml",
            "[[flows]]\nsrc = 1\ndst = 6\nbytes = 0\n",
            "bytes0.toml: flow 1 -> 6: flow size 0 bytes is not in 1..4 GiB",
        ),
        (
            "late-fault.toml",
            "[[faults]]\nat_ns = 18446744073709551615\nkind = \"link-down\"\nlinks = \"all\"\n",
            "fault link-down: at_ns = 18446744073709551615 is later than 3600000000000 (1 hour)",
        ),
        (
            "late-flow.toml",
            "[[flows]]\nsrc = 1\ndst = 6\nbytes = 100\nstart_ns = 18446744073709551615\n",
            "flow 1 -> 6: start_ns = 18446744073709551615 is later than 3600000000000 (1 hour)",
        ),
    ] {
        let sc = tmp(name);
        std::fs::write(&sc, format!("{SCENARIO}{extra}")).unwrap();
        let (code, out, err) = mrc_sim(&["run", sc.to_str().unwrap()]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains(why), "{err}");
    }
}

/// `trace` from a host to itself printed a host0 -> leaf0 -> host0 -> ... loop of 16
/// hops per EV; `--evs 0` printed a header and no path.
#[test]
fn trace_refuses_a_self_path_and_zero_evs() {
    let (code, out, err) = mrc_sim(&["trace", "--gpus", "64", "--src", "0", "--dst", "0"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(
        err,
        "mrc-sim: error: --src and --dst are both host0: a trace needs two different hosts\n"
    );
    let (code, out, err) = mrc_sim(&[
        "trace", "--gpus", "64", "--src", "0", "--dst", "40", "--evs", "0",
    ]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(err, "mrc-sim: error: --evs must be at least 1\n");
}

/// `trace` takes hosts as the output names them (`hostN`) or by index, and names the
/// expected form when given something else.
#[test]
fn trace_takes_host_names_or_indices() {
    let by_index = mrc_sim(&["trace", "--gpus", "64", "--src", "0", "--dst", "40"]);
    let by_name = mrc_sim(&["trace", "--gpus", "64", "--src", "host0", "--dst", "host40"]);
    assert_eq!(by_index.0, 0, "{}", by_index.2);
    assert_eq!(by_index, by_name);
    assert!(
        by_name.1.contains("host0:0 (server 0 NIC 0) -> leaf0:"),
        "{}",
        by_name.1
    );
    let (code, _, err) = mrc_sim(&["trace", "--gpus", "64", "--src", "leaf0", "--dst", "40"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid value 'leaf0' for '--src <SRC>': expected a host index (N or hostN)"),
        "{err}"
    );
}

/// `--json -` makes stdout one JSON document (`| jq .` works): the human table goes to
/// stderr. Checked for design, trace and run.
#[test]
fn json_to_stdout_is_pure_json() {
    let sc = tmp("pure.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    let sc = sc.to_str().unwrap().to_owned();
    for args in [
        vec!["design", "--gpus", "16", "--json", "-"],
        vec![
            "trace", "--gpus", "16", "--src", "0", "--dst", "9", "--json", "-",
        ],
        vec!["run", &sc, "--json", "-"],
    ] {
        let (code, out, err) = mrc_sim(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: Result<serde_json::Value, _> = serde_json::from_str(&out);
        assert!(v.is_ok(), "{args:?}: stdout is not JSON: {out}");
        assert!(!err.is_empty(), "{args:?}: the table goes to stderr");
    }
    let (_, out, err) = mrc_sim(&["design", "--gpus", "16", "--json", "-"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["servers"], 2);
    assert!(err.starts_with("design: 16 GPUs, 8 per server"), "{err}");
}

/// `--plot` and `--json` paths are checked before anything runs: exit 2 with a message
/// naming the allowed extensions or the missing directory, never a Debug dump.
#[test]
fn bad_output_paths_are_refused_up_front() {
    for (args, msg) in [
        (
            vec!["design", "--gpus", "16", "--plot", "x.pdf"],
            "mrc-sim: error: --plot x.pdf: unsupported file type (allowed: .svg, .png)\n",
        ),
        (
            vec![
                "trace", "--gpus", "16", "--src", "0", "--dst", "9", "--plot", "t.jpg",
            ],
            "mrc-sim: error: --plot t.jpg: unsupported file type (allowed: .svg, .png)\n",
        ),
        (
            vec!["design", "--gpus", "16", "--plot", "noext"],
            "mrc-sim: error: --plot noext: unsupported file type (allowed: .svg, .png)\n",
        ),
        (
            vec![
                "trace",
                "--gpus",
                "16",
                "--src",
                "0",
                "--dst",
                "1",
                "--plot",
                "/no/such/dir/t.svg",
            ],
            "mrc-sim: error: --plot /no/such/dir/t.svg: directory /no/such/dir does not exist\n",
        ),
        (
            vec!["experiment", "incast", "--plot", "/no/such/dir/i.png"],
            "mrc-sim: error: --plot /no/such/dir/i.png: directory /no/such/dir does not exist\n",
        ),
        (
            vec!["design", "--gpus", "16", "--json", "/no/such/dir/d.json"],
            "mrc-sim: error: --json /no/such/dir/d.json: directory /no/such/dir does not exist\n",
        ),
    ] {
        let (code, out, err) = mrc_sim(&args);
        assert_eq!((code, out.as_str(), err.as_str()), (2, "", msg), "{args:?}");
    }
    // An unwritable PNG reads as an I/O error, not `ImageError(IoError(..))`.
    let (code, _, err) = mrc_sim(&["design", "--gpus", "16", "--plot", "/proc/x.png"]);
    assert_eq!(
        (code, err.as_str()),
        (
            2,
            "mrc-sim: error: plot /proc/x.png: No such file or directory (os error 2)\n"
        )
    );
    let png = tmp("d.png");
    let (code, _, err) = mrc_sim(&["design", "--gpus", "16", "--plot", png.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
}

/// A host beyond the design and an unknown forwarding mode are refused before the trace
/// header is printed (stdout stays empty), naming the host range and the flag.
#[test]
fn trace_checks_hosts_and_forwarding_before_printing() {
    let (code, out, err) = mrc_sim(&["trace", "--src", "0", "--dst", "1024"]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (
            2,
            "",
            "mrc-sim: error: --dst 1024: no such host (this design has hosts 0..1023 = host0..host1023)\n"
        )
    );
    let (code, out, err) = mrc_sim(&["trace", "--gpus", "16", "--src", "16", "--dst", "1"]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (
            2,
            "",
            "mrc-sim: error: --src 16: no such host (this design has hosts 0..15 = host0..host15)\n"
        )
    );
    let (code, out, err) = mrc_sim(&["trace", "--src", "0", "--dst", "1", "--forwarding", "foo"]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (
            2,
            "",
            "mrc-sim: error: --forwarding \"foo\": expected ecmp, srv6 or usid\n"
        )
    );
}

/// A `--pcap-port` beyond the node's ports names the node as given and its port range
/// (it said `no port 999 on node 16`), before the run and before the pcap file exists.
#[test]
fn pcap_port_out_of_range_names_node_and_ports() {
    let sc = tmp("pcap-range.toml");
    std::fs::write(&sc, SCENARIO).unwrap();
    let pcap = tmp("never.pcap");
    for (np, msg) in [
        (
            "leaf0:999",
            "mrc-sim: error: --pcap-port leaf0:999: leaf0 has no port \"999\" (leaf0 has ports 0..7)\n",
        ),
        (
            "host3:1",
            "mrc-sim: error: --pcap-port host3:1: host3 has no port \"1\" (host3 has only port 0)\n",
        ),
    ] {
        let (code, out, err) = mrc_sim(&[
            "run",
            sc.to_str().unwrap(),
            "--pcap-port",
            np,
            "--pcap",
            pcap.to_str().unwrap(),
        ]);
        assert_eq!((code, out.as_str(), err.as_str()), (2, "", msg));
        assert!(!pcap.exists());
    }
}

/// `experiment --help` lists exactly the names `experiment list` prints (it missed
/// `speed-raw`), then `list`.
#[test]
fn experiment_help_lists_every_experiment() {
    let (code, list, _) = mrc_sim(&["experiment", "list"]);
    assert_eq!(code, 0);
    let names: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains(&"speed-raw"), "{list}");
    let (code, help, _) = mrc_sim(&["experiment", "--help"]);
    assert_eq!(code, 0);
    let want = format!("  <NAME>  {} | list\n", names.join(" | "));
    assert!(help.contains(&want), "{help}");
}

/// Runs mrc-sim and returns (exit code, stderr, peak resident memory in MiB) from the
/// child's own rusage (`wait4`, which reaps it: no `Child::wait`).
#[allow(clippy::zombie_processes)]
fn mrc_sim_rss(args: &[&str]) -> (i32, String, u64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = Command::new(env!("CARGO_BIN_EXE_mrc-sim"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let mut status = 0;
    // SAFETY: plain wait4 on our own child's pid with valid out pointers.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(r, child.id() as i32);
    let code = std::process::ExitStatus::from_raw(status)
        .code()
        .unwrap_or(-1);
    (code, err, ru.ru_maxrss as u64 / 1024)
}

/// Hostile scenarios and arguments (issue 17): every count is checked before anything is
/// allocated, with a message naming the limit and the flag that raises it, exit 2, and
/// the process never grows past 200 MB resident (before: 3 GB within seconds).
#[test]
fn hostile_counts_are_refused_before_allocation() {
    let cases: Vec<(String, &str)> = vec![
        (
            format!("seed = 1\n{}[transport]\nevs = 4000000000\n[[flows]]\nsrc = 0\ndst = 5\nbytes = 65536\n",
                include_str!("fixtures/topology16.toml")),
            "scenario: transport.evs = 4000000000 is more than the limit of 4096 EVs (--max-evs raises it; the transport takes at most 65535)",
        ),
        (
            format!("{SCENARIO}[[flows]]\nsrc = 1\ndst = 5\nbytes = 65536\nevs = 4294967295\n"),
            "scenario: flow 1 -> 5: evs = 4294967295 is more than the limit of 4096 EVs (--max-evs raises it",
        ),
        (
            "seed = 1\n[topology]\ngpus = 1024\ngpus_per_server = 8\nnic_gbps = 200\nleaf_radix = 32\nleaf_port_gbps = 400\nspine_radix = 32\nspine_port_gbps = 400\n[traffic]\npattern = \"all-to-all\"\nbytes = 8388608\n".to_string(),
            "scenario: traffic and [[flows]]: 1047552 flows are more than the limit of 65536 (--max-flows raises it)",
        ),
        (
            "seed = 1\n[topology]\ngpus = 1024\ngpus_per_server = 8\nnic_gbps = 200\nleaf_radix = 32\nleaf_port_gbps = 400\nspine_radix = 32\nspine_port_gbps = 400\n[traffic]\npattern = \"permutation\"\nbytes = 4294967295\n".to_string(),
            "scenario: the run would need about 8393063 MiB (1024 flows moving 4194303 MiB, each \
             with a source and a destination region; 1024 hosts), more than the limit of 2048 \
             MiB (--max-memory-mb raises it)",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let sc = tmp(&format!("hostile{i}.toml"));
        std::fs::write(&sc, text).unwrap();
        let (code, err, rss_mb) = mrc_sim_rss(&["run", sc.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(want), "case {i}: {err}");
        assert!(rss_mb < 200, "case {i}: {rss_mb} MiB resident");
    }
    // The memory case names its flag too, and raising the limit is what the flag does.
    let sc = tmp("hostile3.toml");
    let (_, err, _) = mrc_sim_rss(&["run", sc.to_str().unwrap()]);
    assert!(
        err.ends_with("more than the limit of 2048 MiB (--max-memory-mb raises it)\n"),
        "{err}"
    );
    let (code, err, rss_mb) = mrc_sim_rss(&[
        "trace",
        "--gpus",
        "64",
        "--src",
        "0",
        "--dst",
        "40",
        "--evs",
        "4294967295",
    ]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "mrc-sim: error: --evs = 4294967295 is more than the limit of 4096 EVs (--max-evs raises it; the transport takes at most 65535)\n"
    );
    assert!(rss_mb < 200, "{rss_mb} MiB resident");
    let (code, err, _) = mrc_sim_rss(&[
        "trace",
        "--gpus",
        "64",
        "--src",
        "0",
        "--dst",
        "40",
        "--evs",
        "8",
        "--max-hosts",
        "32",
    ]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "mrc-sim: error: the design has 64 hosts, more than the limit of 32 (--max-hosts raises it)\n"
    );
}

/// `cc` checks goodput and p99 queue per controller against stated bounds and
/// `allreduce` checks completion per oversubscription against a stated factor of theory,
/// printed as PASS/MISS lines (exact at seed 1). DCQCN's incast collapse (issue 21 item 1)
/// is a MISS, so `cc` exits 1 until it is fixed; then this test's DCQCN line changes.
/// Both plots carry their axis titles with units and the labelled PASS thresholds.
#[test]
fn cc_and_allreduce_check_stated_bounds_and_plot_them() {
    let svg = tmp("allreduce.svg");
    let (code, out, err) = mrc_sim(&[
        "experiment",
        "allreduce",
        "--seed",
        "1",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    // (1.227 and 1.428 x at 1:1 and 2:1, the 1:1 bar 1.440 ms, before RACK gave each packet
    // its own EV's round trip and a packet acknowledged after RACK's connection-wide
    // deadline stopped recycling its EV; 1.221 x and 1.434 ms at 1:1 before every EV a SACK
    // acknowledges took its own RTT sample.)
    let checks: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        checks,
        [
            "[PASS] allreduce 1:1: completion within 1.35 x theory at 1:1: 1.220 x theory",
            "[PASS] allreduce 2:1: completion within 1.60 x theory at 2:1: 1.436 x theory",
            "[PASS] allreduce 4:1: completion within 1.40 x theory at 4:1: 1.280 x theory",
        ]
    );
    let s = std::fs::read_to_string(&svg).unwrap();
    for want in [
        "ring allreduce completion",
        "completion time (ms)",
        "oversubscription (uplinks per leaf)",
        "1:1 (4 uplinks/leaf)",
        "theory at the oversubscription: 2(N-1)/N x size / uplink share of 100 Gb/s",
        "PASS: &lt;= 1.35 / 1.60 / 1.40 x theory at 1:1 / 2:1 / 4:1",
        "1.433",
    ] {
        assert!(s.contains(want), "allreduce.svg lacks {want:?}");
    }

    let svg = tmp("cc.svg");
    let (code, out, err) = mrc_sim(&[
        "experiment",
        "cc",
        "--seed",
        "1",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    // Issue 21: DCQCN's incast used to MISS at 39.2 Gb/s (paper preset, no window, pacing
    // release fixed at the old rate); exit 1. (Issue 42: an EV back by probe takes its
    // share of the recycle FIFO at once: DCQCN incast 84.0 -> 86.5 Gb/s, p99 90.5 -> 70.0
    // KiB; NSCC permutation 1496.1 -> 1479.7 Gb/s. Topped up to its share, its entries
    // still waiting counted: DCQCN incast 86.5 -> 86.3 Gb/s, NSCC incast 87.6 -> 88.5.
    // RACK giving each packet its own EV's round trip, and a packet acknowledged after
    // RACK's connection-wide deadline not recycling its EV: permutation 1499.0 -> 1513.2
    // (DCQCN), 1462.2 -> 1482.1 (Swift), 1479.7 -> 1484.5 Gb/s (NSCC); incast 86.3 -> 85.5
    // (DCQCN), 88.5 -> 87.9 Gb/s (NSCC); p99 queue 95.0 -> 103.0 (Swift), 70.0 -> 74.5 KiB
    // (NSCC). RACK's scan past an acknowledged resend, `Rack::scan_end`: incast 85.5 ->
    // 95.9 (DCQCN), 87.9 -> 88.6 Gb/s (NSCC). Every EV a SACK acknowledges taking its own
    // RTT sample: permutation 1513.2 -> 1511.3 (DCQCN), 1482.1 -> 1485.5 (Swift), 1484.5
    // -> 1509.1 Gb/s (NSCC); incast 88.6 -> 88.3 Gb/s (NSCC); p99 queue 103.0 -> 90.5
    // (Swift), 74.5 -> 61.7 KiB (NSCC).)
    assert_eq!(code, 0, "{out}{err}");
    let checks: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        checks,
        [
            "[PASS] dcqcn: incast aggregate goodput >= 80 Gb/s: 95.9 Gb/s",
            "[PASS] dcqcn: permutation aggregate goodput >= 75% of ideal (1168 Gb/s): 1511.3 Gb/s (97.1%)",
            "[PASS] dcqcn: permutation p99 queue <= 256 KiB: 70.0 KiB",
            "[PASS] swift: incast aggregate goodput >= 80 Gb/s: 96.2 Gb/s",
            "[PASS] swift: permutation aggregate goodput >= 75% of ideal (1168 Gb/s): 1485.5 Gb/s (95.4%)",
            "[PASS] swift: permutation p99 queue <= 256 KiB: 90.5 KiB",
            "[PASS] nscc: incast aggregate goodput >= 80 Gb/s: 88.3 Gb/s",
            "[PASS] nscc: permutation aggregate goodput >= 75% of ideal (1168 Gb/s): 1509.1 Gb/s (96.9%)",
            "[PASS] nscc: permutation p99 queue <= 256 KiB: 61.7 KiB",
        ]
    );
    let s = std::fs::read_to_string(&svg).unwrap();
    // Incast (Gb/s) and permutation (Tb/s) on panels of their own scale.
    for want in [
        "incast 16 x 1 MiB -&gt; host0: aggregate goodput",
        "permutation 16 x 8 MiB: aggregate goodput",
        "aggregate goodput (Gb/s)",
        "aggregate goodput (Tb/s)",
        "p99 queue depth (MiB)",
        "p99 queue depth (KiB)",
        "controller",
        "ideal (receiver link): 97.3 Gb/s",
        "ideal (16 NIC-limited flows): 1.56 Tb/s",
        "PASS &gt;= 80 Gb/s",
        "PASS &gt;= 1.17 Tb/s",
        "PASS &lt;= 256 KiB",
        "ECN marking starts (kmin): 100 KiB",
    ] {
        assert!(s.contains(want), "cc.svg lacks {want:?}");
    }
}

/// The `cc` checks fail on a broken controller (a crippled controller's rows) and on an
/// absurd bound.
#[test]
fn cc_checks_miss_on_a_crippled_controller_and_an_absurd_bound() {
    use mrc_examples::sim::experiments::{CC_BOUNDS, CcBounds, cc_checks};
    use mrc_examples::sim::output::ResultTable;
    let mut t = ResultTable::new("cc");
    for kind in ["dcqcn", "swift", "nscc"] {
        // Swift crippled: a tenth of the goodput and a queue at the buffer.
        let (g, q) = if kind == "swift" {
            (9.0, 1_048_290.0)
        } else {
            (95.0, 80_000.0)
        };
        t.row(
            format!("incast / {kind}"),
            &[("aggregate_goodput_gbps", g), ("p99_queue_bytes", q)],
        );
        t.row(
            format!("permutation / {kind}"),
            &[("aggregate_goodput_gbps", g * 15.0), ("p99_queue_bytes", q)],
        );
    }
    let fails: Vec<String> = cc_checks(&t.rows, &CC_BOUNDS)
        .into_iter()
        .filter(|c| !c.pass)
        .map(|c| c.requirement)
        .collect();
    assert_eq!(
        fails,
        [
            "swift: incast aggregate goodput >= 80 Gb/s",
            "swift: permutation aggregate goodput >= 75% of ideal (1168 Gb/s)",
            "swift: permutation p99 queue <= 256 KiB",
        ]
    );
    let absurd = CcBounds {
        incast_min_gbps: 1000.0,
        ..CC_BOUNDS
    };
    let misses = cc_checks(&t.rows, &absurd)
        .iter()
        .filter(|c| !c.pass && c.requirement.contains("incast"))
        .count();
    assert_eq!(misses, 3);
}

/// Plot helpers: units scale with the values (Gb/s to Tb/s, us to ms, bytes to KiB/MiB,
/// counts to k/M), ticks print without `14000000.0`, and a panel whose bars differ by more
/// than 10x is split into one panel per scale.
#[test]
fn plot_units_ticks_and_split_by_scale() {
    use mrc_examples::sim::output::{Panel, ResultTable, Unit, fmt_num};
    assert_eq!(Unit::Gbps.scale(1500.0), (1e3, "Tb/s"));
    assert_eq!(Unit::Gbps.scale(96.0), (1.0, "Gb/s"));
    assert_eq!(Unit::Us.scale(6011.0), (1e3, "ms"));
    assert_eq!(Unit::Bytes.scale(90_000.0), (1024.0, "KiB"));
    assert_eq!(Unit::PerS.scale(14e6), (1e6, "M/s"));
    assert_eq!(Unit::Count.scale(14e6), (1e6, "M"));
    assert_eq!(
        Unit::of_column("aggregate_goodput_gbps"),
        ("aggregate goodput".to_owned(), Unit::Gbps)
    );
    assert_eq!(
        [14.0, 1.5, 0.25, 1497.6, 0.0].map(fmt_num),
        ["14", "1.5", "0.25", "1498", "0"]
    );
    let mut t = ResultTable::new("t");
    t.row("a", &[("x_ratio", 1.03)]);
    t.row("b", &[("x_ratio", 294.0)]);
    t.row("c", &[("x_ratio", 1.01)]);
    t.panel(Panel::new("x_ratio", "variant").ideal(1.0, "ideal"));
    let p = t.plot_panels();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].only.as_deref(), Some(&["b".to_owned()][..]));
    assert_eq!(
        p[1].only.as_deref(),
        Some(&["a".to_owned(), "c".to_owned()][..])
    );
    assert_eq!(p[0].axis_title(294.0), "ratio (x)");
}

/// The texts of an SVG, unescaped, in document order.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..t.find("</text>")?];
            Some(
                body.trim()
                    .replace("&gt;", ">")
                    .replace("&lt;", "<")
                    .replace("&amp;", "&"),
            )
        })
        .collect()
}

/// `design --plot` draws the fabric, not a bar chart: 64 GPUs are 8 server boxes named
/// 0-7 with 64 NIC squares, 2 leaves, 1 spine, 8 server-leaf and 2 leaf-spine lines
/// labelled with their 32 lanes (plus the legend's 2 line samples).
#[test]
fn design_plot_draws_servers_leaves_spines_and_links() {
    let svg = tmp("design64.svg");
    let (code, _, err) = mrc_sim(&["design", "--gpus", "64", "--plot", svg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let s = std::fs::read_to_string(&svg).unwrap();
    let texts = svg_texts(&s);
    let count = |f: &dyn Fn(&str) -> bool| texts.iter().filter(|t| f(t)).count();
    let servers: Vec<&String> = texts.iter().filter(|t| t.starts_with("server ")).collect();
    assert_eq!(
        servers,
        (0..8)
            .map(|n| format!("server {n}"))
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    assert_eq!(count(&|t| t == "leaf0" || t == "leaf1"), 2);
    assert_eq!(count(&|t| t.starts_with("spine") && !t.contains(' ')), 1);
    assert_eq!(count(&|t| t == "32 x 200G"), 2);
    assert_eq!(s.matches("<polyline").count(), 8 + 2 + 2);
    assert!(texts.contains(&"fabric design: 64 GPUs = 8 servers x 8, 200G NICs, 1:1 oversubscription (actual 1.00), 1 plane".to_owned()), "{texts:?}");
    // 1024 GPUs: 10 of 32 leaves with 4 servers each, all 16 spines; 160 leaf-spine and
    // 40 server-leaf lines.
    let svg = tmp("design1024.svg");
    let (code, _, err) = mrc_sim(&["design", "--gpus", "1024", "--plot", svg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let s = std::fs::read_to_string(&svg).unwrap();
    let texts = svg_texts(&s);
    assert_eq!(
        texts.iter().filter(|t| t.starts_with("server ")).count(),
        40
    );
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.starts_with("leaf") && !t.contains(' '))
            .count(),
        10
    );
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.starts_with("spine") && !t.contains(' '))
            .count(),
        16
    );
    assert_eq!(s.matches("<polyline").count(), 160 + 40 + 2);
    assert!(
        texts.contains(&"drawn: 10 of 32 leaves, all 4 servers per leaf, all 16 spines".to_owned())
    );
}

/// `trace --plot` names, for each EV, the spine the text trace crosses; with 64 EVs it
/// counts the EVs per spine as the text trace does.
#[test]
fn trace_plot_names_the_spine_of_each_ev() {
    let args = |evs: &'static str, svg: &std::path::Path| {
        let svg = svg.to_str().unwrap().to_owned();
        let (code, out, err) = mrc_sim(&[
            "trace", "--gpus", "1024", "--src", "0", "--dst", "900", "--evs", evs, "--plot", &svg,
        ]);
        assert_eq!(code, 0, "{err}");
        // `EV   3 (UDP src port 49155): host0:0 -> leaf0:35 (p18/2) -> spine3:57 ...`
        let spines: Vec<(u32, String, String)> = out
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("EV ")?;
                let (ev, rest) = rest.trim_start().split_once(' ')?;
                let port = rest.strip_prefix("(UDP src port ")?.split(')').next()?;
                let spine = rest.split(" -> ").nth(2)?.split(':').next()?;
                Some((ev.parse().ok()?, port.to_owned(), spine.to_owned()))
            })
            .collect();
        (spines, std::fs::read_to_string(&svg).unwrap())
    };
    let svg = tmp("trace8.svg");
    let (spines, s) = args("8", &svg);
    assert_eq!(spines.len(), 8);
    let texts = svg_texts(&s);
    for (ev, port, spine) in &spines {
        let want = format!("EV {ev} (UDP {port}) -> {spine}: leaf0:");
        assert!(
            texts.iter().any(|t| t.starts_with(&want)),
            "{want:?} in {texts:?}"
        );
    }
    assert_eq!(s.matches("<polyline").count(), 8 + 8);
    let svg = tmp("trace64.svg");
    let (spines, s) = args("64", &svg);
    assert_eq!(spines.len(), 64);
    let texts = svg_texts(&s);
    let mut per = std::collections::BTreeMap::new();
    for (_, _, spine) in &spines {
        *per.entry(spine.clone()).or_insert(0) += 1;
    }
    for (spine, n) in &per {
        let want = format!("{spine}: {n} EV");
        assert!(
            texts.iter().any(|t| t.starts_with(&want)),
            "{want:?} in {texts:?}"
        );
    }
    // One line per spine taken, the two host-leaf lines, and the legend's samples.
    assert_eq!(
        s.matches("<polyline").count(),
        per.len() + 2 + per.len() + 1
    );
}

/// Every bar keeps its category label: four bars of two-line labels in a half-width panel
/// (spray-vs-ecmp's) are all labelled, none dropped for room they have once wrapped, and
/// a run's 16 flows are labelled `#id src->dst`, each one.
#[test]
fn bar_labels_wrap_instead_of_vanishing() {
    use mrc_examples::sim::output::{Panel, ResultTable};
    let mut t = ResultTable::new("labels");
    for l in [
        "spray 16 EVs, ECMP hash",
        "spray 32 EVs, ECMP hash",
        "spray 16 EVs, SRv6 spine list",
        "single path: ECMP 1 EV",
    ] {
        t.row(l, &[("goodput_gbps", 90.0), ("x_balance", 1.0)]);
    }
    t.panel(Panel::new("goodput_gbps", "forwarding").ideal(97.0, "ideal"));
    t.panel(Panel::new("x_balance", "forwarding").ideal(1.0, "ideal"));
    let svg = tmp("labels.svg");
    t.plot(&svg).unwrap();
    let texts = svg_texts(&std::fs::read_to_string(&svg).unwrap());
    for want in ["spray 32 EVs,", "single path:", "ECMP 1 EV"] {
        assert_eq!(
            texts.iter().filter(|t| *t == want).count(),
            2,
            "{want:?} once per panel in {texts:?}"
        );
    }
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/permutation-srv6.toml"
    );
    let svg = tmp("run.svg");
    let (code, _, err) = mrc_sim(&["run", scenario, "--plot", svg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let texts = svg_texts(&std::fs::read_to_string(&svg).unwrap());
    for id in 0..16 {
        let want = format!("#{id}");
        assert!(
            texts
                .iter()
                .any(|t| t.split(' ').next() == Some(want.as_str())),
            "{want} in {texts:?}"
        );
    }
}

/// `plane-loss-quick` (4 hosts, 2 planes of 50 Gb/s, the ring; plane 1 down at 300 us,
/// back at 1.1 ms): the checks exact at seed 1, all PASS, exit 0. The goodput settles at
/// 50.5% of the no-failure run's within the dip's 35 us, nothing is lost, and 125 us after
/// the plane is back the goodput is at 95% again (101.5% over 1.9-2.3 ms; 50.6%, 100.0%
/// and 110 us before a plane's loss streak waited for a smoothed RTT of silence). The no-failure
/// run is 379.1 Gb/s since each flow keeps its packets in flight balanced across its
/// planes (`PathTable::select_balanced`): it was 321.6, its flows' packets crowding onto
/// one plane after congestion losses, so the plane's loss cost less and its return gave
/// more (59.6% settled, 95% after 65 us; back 111.2%, 70 us; 100.3% and 85 us
/// before the EVs of a plane back from a failure counted the flow's packets in flight in
/// the plane's share; 51.5% and 500 us
/// before an EV back in rotation was topped up, its plane kept within its share of the
/// recycle FIFO and its entries spread apart: the no-failure run is 321.6 Gb/s, not 371.3). It used to stay
/// at 59.2%, a MISS: the senders' recycled-entropy selection (REPS) never explored the
/// plane's EVs again (a NIC-limited sender's FIFO of recycled EVs never runs dry, and the
/// EVs back from their probes were not put in it); now an EV back in rotation takes its
/// share of the FIFO at once, and a plane's probes back off to 200 us, not 6.4 ms (the
/// plane back at 1.1 ms was found at 1.75 ms). The JSON carries the goodput over time
/// (5 us samples to 2.8 ms), the figure its panels and the line chart. (RACK's scan past
/// an acknowledged resend, `Rack::scan_end`: settled 50.4 -> 50.5%, back 99.1 -> 99.8% and
/// 95% again after 125 -> 115 us. Every EV a SACK acknowledges taking its own RTT sample:
/// settled 50.5 -> 50.3% of a no-failure run of 380.3 -> 381.1 Gb/s, back 99.8 -> 101.0%
/// and 95% again after 115 -> 95 us.)
#[test]
fn plane_loss_quick_checks_its_targets_and_draws_goodput_over_time() {
    let (json, svg) = (tmp("plane-loss.json"), tmp("plane-loss.svg"));
    let (code, out, err) = mrc_sim(&[
        "experiment",
        "plane-loss-quick",
        "--seed",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let checks: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        checks,
        [
            "[PASS] ring P=2: goodput settles at >= (P-1)/P x 0.95 = 47.5% of no failure within 3 RTOs (600 us): 50.3% (191.5 of 381.1 Gb/s) over 900-1100 us; 75% of it 0 us after the failure, 95% 0 us (Spectrum-X 3 ms, software load balancing 1.08 s)",
            "[PASS] ring P=2: 0 bytes lost: 125829120 of 125829120 bytes placed, 4 of 4 flows done",
            "[PASS] ring P=2: back to >= 95% of no failure once the plane is back: 101.0% over 1900-2300 us; 95% again 95 us after the plane came back",
        ]
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let tl = &v["timelines"][0];
    assert_eq!(tl["times_us"].as_array().unwrap().len(), 560);
    assert_eq!(tl["lines"][0][0], "ring P=2");
    assert_eq!(tl["lines"][0][1].as_array().unwrap().len(), 560);
    assert_eq!(
        tl["events"],
        serde_json::json!([
            [300.0, "plane down"],
            [900.0, "+3 RTO"],
            [1100.0, "plane back"]
        ])
    );
    assert_eq!(tl["levels"], serde_json::json!([[47.5, "P=2 target"]]));
    let s = std::fs::read_to_string(&svg).unwrap();
    for want in [
        "goodput with one plane down, % of no failure",
        "goodput once the plane is back, % of no failure",
        "ring: goodput over time, one plane of P down at 300 us, back at 1100 us",
        "virtual time, us",
        "goodput, % of no failure (25 us windows)",
        "plane down",
        "plane back",
        "P=2 target: 47.5",
    ] {
        assert!(s.contains(want), "plane-loss.svg lacks {want:?}");
    }
}

/// `flaps-quick` (4 hosts, one per leaf, 2 planes of 50 Gb/s, the ring; leaf0-spine0 of
/// both planes down 100 us, up 100 us, for the whole run): the checks exact at seed 1.
/// The completion is within the issue's 1.05 x (0.997 x, the flows that cross the flapping
/// link and the others alike; 1.005, 0.994 and 1.005 x before every EV a SACK acknowledges
/// took its own RTT sample; 0.994, 0.984 and 1.000 x earlier; 1.025, 0.999 and 1.025 x
/// before a flow kept its packets in flight balanced across its planes and a plane's loss
/// streak counted only packets sent after the latest one it delivered: while the link is
/// down, spine0 reaches leaf0 only by bouncing down another leaf and up spine1, and the
/// late packets took planes down). No flow of either class has an RTO expire; exit 0. (It missed at 1.071 x before an
/// EV back in rotation was topped up, its plane kept within its share of the recycle FIFO
/// and its entries spread apart.)
#[test]
fn flaps_quick_checks_completion_and_rtos_per_flow_class() {
    let (code, out, err) = mrc_sim(&["experiment", "flaps-quick", "--seed", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    let checks: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(
        checks,
        [
            "[PASS] ring P=2: completion within 1.05 x no flaps: 0.997x (717701 vs 719892 ns); flows crossing a flapping link 0.997x, the others 0.997x",
            "[PASS] ring P=2: 0 RTO expiries on flows not crossing a flapping link: 0 on 2 flows (crossing ones: 0 on 2 flows)",
        ]
    );
}

/// `rail-vs-spine-leaf-quick` (8 GPUs, 4 per server, 8-port leaves and spines): the rows
/// exact at seed 1, no check (the issue states no target). The server-order ring keeps
/// 75% of its hops on a leaf in the spine-leaf layout and none in the rail layout; the
/// rail-order ring the reverse (50% on a rail leaf: 2 servers per rail); at 2:1 the ring
/// whose hops all cross the spines takes 1.69 x (server order on rails) and 2.0 x (rail
/// order on spine-leaf) the other layout's time, which does not change from 1:1.
#[test]
fn rail_vs_spine_leaf_quick_prints_both_layouts_side_by_side() {
    let (code, out, err) = mrc_sim(&["experiment", "rail-vs-spine-leaf-quick", "--seed", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("[PASS]") && !out.contains("[MISS]"), "{out}");
    let rows: Vec<String> = out
        .lines()
        .filter(|l| l.contains(" / "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        rows,
        [
            "ring, server order / spine-leaf 1:1 222.6 1 65.941 75 1120 0",
            "ring, server order / rail 1:1 260.6 1.171 56.328 0 5070 0",
            "ring, rail order / spine-leaf 1:1 285.8 1 51.367 0 5209 0",
            "ring, rail order / rail 1:1 222.6 0.779 65.937 50 2240 0",
            "all-to-all / spine-leaf 1:1 93.875 1 89.359 42.857 1689 0",
            "all-to-all / rail 1:1 94.795 1.010 88.492 14.286 2599 0",
            "ring, server order / spine-leaf 2:1 222.6 1 65.938 75 1120 0",
            "ring, server order / rail 2:1 375.3 1.686 39.119 0 5208 0",
            "ring, rail order / spine-leaf 2:1 445.3 1 32.966 0 5596 0",
            "ring, rail order / rail 2:1 222.6 0.500 65.941 50 2240 0",
            "all-to-all / spine-leaf 2:1 114.4 1 73.313 42.857 2038 0",
            "all-to-all / rail 2:1 175.0 1.530 47.931 14.286 3405 0",
        ]
    );
}

#[test]
fn testbed_plan_planes() {
    // One plane: the plan as before planes (no plane fields).
    let (code, out, _) = mrc_sim(&["testbed-plan"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "testbed: 2 hosts (1 per leaf), 2 leaves, 4 spines, 8 leaf-spine links, 16 steering routes\n  \
         h0 fd00:6d72:63:10::2 behind l0\n  h1 fd00:6d72:63:11::2 behind l1\n"
    );
    let (code, out, _) = mrc_sim(&["testbed-plan", "--json", "-"]);
    assert_eq!(code, 0);
    assert!(!out.contains("plane"), "{out}");
    // Two planes: every host a port in each.
    let (code, out, _) = mrc_sim(&["testbed-plan", "--planes", "2"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "testbed: 2 planes, each 2 leaves, 4 spines, 8 leaf-spine links; 2 hosts (1 per leaf), \
         one interface in each plane; 32 steering routes\n  \
         h0 eth0 fd00:6d72:63:10::2 behind p0-l0\n  h0 eth1 fd00:6d72:63:1010::2 behind p1-l0\n  \
         h1 eth0 fd00:6d72:63:11::2 behind p0-l1\n  h1 eth1 fd00:6d72:63:1011::2 behind p1-l1\n"
    );
    let (code, out, _) = mrc_sim(&["testbed-plan", "--planes", "2", "--json", "-"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["design"]["planes"], 2);
    assert_eq!(v["links"].as_array().unwrap().len(), 16);
    assert_eq!(v["hosts"][1]["ports"][1]["addr"], "fd00:6d72:63:1011::2");
    assert_eq!(v["spines"][7]["name"], "p1-s3");
    // Out of range: clap's error, exit 2.
    for bad in ["0", "9", "two"] {
        let (code, out, err) = mrc_sim(&["testbed-plan", "--planes", bad]);
        assert_eq!((code, out.as_str()), (2, ""), "{bad}");
        let want = if bad == "two" {
            "error: invalid value 'two' for '--planes <PLANES>': invalid digit found in string\n"
        } else {
            &format!(
                "error: invalid value '{bad}' for '--planes <PLANES>': {bad} is not in 1..=8\n"
            )
        };
        assert!(err.starts_with(want), "{err}");
    }
}
