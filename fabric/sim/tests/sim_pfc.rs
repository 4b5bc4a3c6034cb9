//! PFC (IEEE 802.1Qbb) in the simulator: lossless incasts, pauses hop by hop, hosts that
//! honour them, and the same scenarios dropping frames without PFC.

mod common;

use common::*;
use mrc_congestion::CcKind;
use mrc_fabric_sim::host::{Datagram, Forwarding, build_frame};
use mrc_fabric_sim::pfc::{PfcError, PfcPortStats};
use mrc_fabric_sim::{
    FlowSpec, PfcConfig, QueueConfig, SimConfig, SimError, Simulator, Topology, TransportSpec,
};

/// 320 KiB port buffers, no ECN marking: with XOFF 16 KiB and a headroom of 21,072 bytes
/// (500 ns at 100 Gb/s each way: 12,500 bytes, two 4254-byte frames and a PAUSE) a leaf's
/// 7 other ports can queue 7 x 37,456 = 262,192 bytes in one egress buffer.
fn queue() -> QueueConfig {
    QueueConfig {
        buffer_bytes: 320 << 10,
        ecn: mrc_fabric_sim::EcnConfig::Off,
        ..QueueConfig::default()
    }
}

fn pfc() -> PfcConfig {
    PfcConfig {
        xoff_bytes: 16 << 10,
        xon_bytes: 8 << 10,
        ..PfcConfig::default()
    }
}

fn pfc_cfg(on: bool) -> SimConfig {
    SimConfig {
        queue: queue(),
        pfc: on.then(pfc),
        ..cfg(1)
    }
}

/// A 4210-byte data frame from `src` to `dst` on EV `ev` (captured at `dst`).
fn frame(sim: &Simulator, src: u32, dst: u32, ev: u32, psn: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let d = Datagram {
        src,
        dst,
        ev,
        ecn: 0,
        port: 0,
    };
    build_frame(
        sim.topology(),
        Forwarding::Ecmp,
        d,
        &write_datagram_of(psn, &[0x5A; 4096]),
        &mut out,
    )
    .unwrap();
    out
}

/// Every host in `srcs` queues `n` frames to `dst` at time 0; runs to the end.
fn blast(on: bool, srcs: &[u32], dst: u32, n: u32) -> Simulator {
    let mut sim = sim16(pfc_cfg(on));
    sim.set_capture(dst, true);
    for &s in srcs {
        for k in 0..n {
            let f = frame(&sim, s, dst, k % 4, k);
            sim.inject(s, f).unwrap();
        }
    }
    sim.run();
    sim
}

fn node(sim: &Simulator, name: &str) -> u32 {
    sim.topology().node_by_name(name).unwrap()
}

fn all_drops(sim: &Simulator) -> u64 {
    sim.report().sum_ports(|p| p.drops)
}

#[test]
fn pfc_makes_a_two_to_one_incast_lossless() {
    // Without PFC: 2 x 200 frames at line rate into one 100 Gb/s port with a 256 KiB
    // buffer: the queue grows by half a frame per frame time and overflows.
    let lossy = blast(false, &[0, 1], 3, 200);
    let leaf0 = node(&lossy, "leaf0");
    let st = lossy.port_stats(leaf0, 3).unwrap().clone();
    assert_eq!(st.drops, 123);
    assert_eq!(lossy.host(3).unwrap().captured.len(), 400 - 123);

    assert_eq!(lossy.pfc_stats(leaf0, 0), None);
    assert!(lossy.report().pfc.is_empty());

    let sim = blast(true, &[0, 1], 3, 200);
    assert_eq!(all_drops(&sim), 0);
    assert_eq!(sim.host(3).unwrap().captured.len(), 400);
    let st = sim.port_stats(leaf0, 3).unwrap();
    assert_eq!((st.drops, st.tx_packets), (0, 400));
    // The receiver's port never starved: its 400 frames took 400 x 336.8 ns.
    assert_eq!(st.busy_ns, 134_720);
    for h in [0u32, 1] {
        let leaf_side = sim.pfc_stats(leaf0, h as u16).unwrap();
        let host_side = sim.pfc_stats(h, 0).unwrap();
        // Each sender was paused and resumed the same number of times: XOFF above 16 KiB
        // held, XON at 8 KiB.
        assert_eq!(
            (leaf_side.pauses_sent, leaf_side.xons_sent),
            (PAUSES_2_TO_1, PAUSES_2_TO_1)
        );
        assert_eq!(
            (host_side.pauses_received, host_side.xons_received),
            (PAUSES_2_TO_1, PAUSES_2_TO_1)
        );
        assert_eq!(host_side.pauses_sent, 0);
        // Paused about half the time: each sender gets half the receiver's link.
        assert!(host_side.paused_ns > 60_000 && host_side.paused_ns < 75_000);
        // The headroom held what came after XOFF: never above xoff + headroom.
        assert!(leaf_side.max_ingress_bytes > pfc().xoff_bytes);
        assert!(leaf_side.max_ingress_bytes <= pfc().xoff_bytes + 21_072);
        assert_eq!(sim.pfc_ingress_bytes(leaf0, h as u16), Some(0));
    }
    let r = sim.report();
    // Two leaf ports sent, two host ports received.
    assert_eq!(r.pfc.len(), 4);
    assert!(
        r.pfc
            .iter()
            .all(|p| p.priority == 3 && p.headroom_bytes == 21_072)
    );
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"pfc\":[{\"node\":"));
}

/// PAUSE / XON cycles per sender in the 2:1 incast above (200 frames each): XOFF when
/// the 4th queued frame (16,840 bytes) passes 16 KiB, at most 6 queued (25,260 bytes)
/// before the PAUSE takes hold, XON when one frame is left (4,210 <= 8 KiB): about 10
/// frames of each sender per cycle.
const PAUSES_2_TO_1: u64 = 20;

#[test]
fn pauses_propagate_hop_by_hop_to_the_senders() {
    // Four hosts of leaf1 into host0 (leaf0): leaf0 pauses the spines, the spines pause
    // leaf1's uplinks, leaf1 pauses the hosts; no buffer drops a frame.
    let lossy = blast(false, &[4, 5, 6, 7], 0, 100);
    assert!(all_drops(&lossy) > 0);
    let sim = blast(true, &[4, 5, 6, 7], 0, 100);
    assert_eq!(all_drops(&sim), 0);
    assert_eq!(sim.host(0).unwrap().captured.len(), 400);
    let sum = |n: &str, ports: std::ops::Range<u16>, f: fn(&PfcPortStats) -> u64| -> u64 {
        let id = node(&sim, n);
        ports.map(|p| f(&sim.pfc_stats(id, p).unwrap())).sum()
    };
    // leaf0's uplinks (ports 4-7) sent pauses, the spines' ports toward leaf0 received.
    let leaf0_sent = sum("leaf0", 4..8, |s| s.pauses_sent);
    let spines_rx: u64 = (0..4)
        .map(|s| sum(&format!("spine{s}"), 0..1, |s| s.pauses_received))
        .sum();
    assert!(leaf0_sent > 0);
    assert_eq!(spines_rx, leaf0_sent);
    // The spines passed it on to leaf1's uplinks, and leaf1 to its hosts.
    let spines_sent: u64 = (0..4)
        .map(|s| sum(&format!("spine{s}"), 1..2, |s| s.pauses_sent))
        .sum();
    assert!(spines_sent > 0);
    assert_eq!(sum("leaf1", 4..8, |s| s.pauses_received), spines_sent);
    let hosts_rx: u64 = (4..8)
        .map(|h| sim.pfc_stats(h, 0).unwrap().pauses_received)
        .sum();
    assert!(hosts_rx > 0);
    assert_eq!(sum("leaf1", 0..4, |s| s.pauses_sent), hosts_rx);
}

#[test]
fn transport_flows_under_pfc_lose_nothing() {
    // 7:1 incast of real connections (go-back-N, no congestion control): PFC holds the
    // senders, nothing is dropped, nothing retransmitted.
    let run = |on: bool| {
        let cfg = SimConfig {
            transport: TransportSpec {
                cc: CcKind::None,
                evs: 1,
                go_back_n: true,
                ..TransportSpec::default()
            },
            ..pfc_cfg(on)
        };
        let mut sim = sim16(cfg);
        for src in [0, 1, 2, 4, 5, 6, 7] {
            sim.add_flow(FlowSpec {
                src,
                dst: 3,
                bytes: 1 << 20,
                start_ns: 0,
                evs: None,
            })
            .unwrap();
        }
        sim.run()
    };
    let lossy = run(false);
    // Without PFC the 320 KiB buffer overflows and go-back-N resends whole windows.
    assert_eq!(lossy.sum_ports(|p| p.drops), 777);
    assert_eq!(lossy.completion_ns(), Some(1_028_309));
    let r = run(true);
    assert_eq!(r.sum_ports(|p| p.drops), 0);
    assert!(r.flows.iter().all(|f| f.done_ns.is_some()));
    assert_eq!(r.flows.iter().map(|f| f.retransmitted).sum::<u64>(), 0);
    let received: u64 = r
        .pfc
        .iter()
        .filter(|p| p.node.starts_with("host"))
        .map(|p| p.stats.pauses_received)
        .sum();
    assert_eq!(received, 251);
    // Every flow sent its 256 packets once; the incast ended within 1% of 7 MiB at the
    // receiver's 97.29 Gb/s of payload (603 us).
    assert!(r.flows.iter().all(|f| f.packets_sent == 256));
    assert_eq!(r.completion_ns(), Some(608_257));
}

#[test]
fn a_buffer_pfc_cannot_keep_lossless_is_refused() {
    let cfg = SimConfig {
        queue: QueueConfig {
            buffer_bytes: 262_191,
            ..queue()
        },
        pfc: Some(pfc()),
        ..cfg(1)
    };
    let e = Simulator::new(Topology::spine_leaf(&spec16()).unwrap(), cfg).unwrap_err();
    assert!(matches!(
        e,
        SimError::Pfc(PfcError::Buffer {
            need_bytes: 262_192,
            have_bytes: 262_191
        })
    ));
    let bad = SimConfig {
        pfc: Some(PfcConfig {
            xon_bytes: 16 << 10,
            ..pfc()
        }),
        ..pfc_cfg(true)
    };
    assert!(matches!(
        Simulator::new(Topology::spine_leaf(&spec16()).unwrap(), bad),
        Err(SimError::Pfc(PfcError::Thresholds { .. }))
    ));
}

/// A PFC storm: host3's receiver is stuck from time 0, its NIC PAUSEs leaf0 for good.
/// The frames for host3 stay queued in leaf0 (lossless: none dropped), leaf0 pauses the
/// senders' NICs above XOFF, and the pause never ends; a storm needs PFC.
#[test]
fn a_stuck_receiver_pauses_its_leaf_for_good_and_the_senders_behind_it() {
    let mut sim = sim16(SimConfig {
        stop_ns: 1_000_000,
        ..pfc_cfg(true)
    });
    sim.set_capture(3, true);
    sim.pfc_storm(3, 0).unwrap();
    for s in [0u32, 1] {
        for k in 0..50 {
            let f = frame(&sim, s, 3, k % 4, k);
            sim.inject(s, f).unwrap();
        }
    }
    sim.run();
    let r = sim.report();
    assert_eq!(r.end_ns, 1_000_000);
    assert_eq!(all_drops(&sim), 0);
    let leaf0 = node(&sim, "leaf0");
    let host = sim.pfc_stats(3, 0).unwrap();
    let to_host = sim.pfc_stats(leaf0, 3).unwrap();
    // Six PAUSEs in 1 ms, one per half pause time (65535 quanta at 100 Gb/s: 335.5 us),
    // from 0; leaf0's port to host3 paused from 506 ns (the PAUSE's 500 ns of propagation
    // and its bytes) to the end; not one data frame reached host3.
    assert_eq!((host.pauses_sent, host.xons_sent), (6, 0));
    assert_eq!((to_host.pauses_received, to_host.paused_ns), (6, 999_494));
    assert!(sim.host(3).unwrap().captured.is_empty());
    let stuck: Vec<(&str, &str, Option<u64>)> = r
        .pfc
        .iter()
        .filter(|p| p.paused_since_ns.is_some())
        .map(|p| (p.node.as_str(), p.peer.as_str(), p.paused_since_ns))
        .collect();
    assert_eq!(
        stuck,
        [
            ("host0", "leaf0", Some(2_353)),
            ("host1", "leaf0", Some(2_353)),
            ("leaf0", "host3", Some(506)),
        ]
    );
    // Leaf0 paused both senders above XOFF (16 KiB), within the headroom (37,456 bytes).
    for port in [0u16, 1] {
        let st = sim.pfc_stats(leaf0, port).unwrap();
        assert_eq!((st.pauses_sent, st.xons_sent), (6, 0));
        assert_eq!(st.max_ingress_bytes, 29_470);
    }
    // A storm needs PFC, and a host.
    let mut off = sim16(SimConfig {
        stop_ns: 1_000_000,
        ..pfc_cfg(false)
    });
    assert!(matches!(
        off.pfc_storm(3, 0),
        Err(SimError::Pfc(PfcError::Off))
    ));
    assert!(matches!(
        sim.pfc_storm(99, 0),
        Err(SimError::NoSuchHost(99))
    ));
}
