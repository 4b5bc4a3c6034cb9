//! Flows of real transport endpoints through the simulated fabric.

mod common;

use common::*;
use mrc_fabric_sim::{Fault, FaultKind, FlowSpec, Forwarding, LinkSelector, SimConfig, SimReport};

fn flow(src: u32, dst: u32, bytes: u64) -> FlowSpec {
    FlowSpec {
        src,
        dst,
        bytes,
        start_ns: 0,
        evs: None,
    }
}

fn run(cfg: SimConfig, flows: &[FlowSpec]) -> SimReport {
    let mut sim = sim16(cfg);
    for f in flows {
        sim.add_flow(*f).unwrap();
    }
    sim.run()
}

fn lossy(seed: u64) -> SimConfig {
    SimConfig {
        faults: vec![Fault {
            at_ns: 0,
            links: LinkSelector::All,
            kind: FaultKind::Loss { p: 0.01 },
        }],
        ..cfg(seed)
    }
}

#[test]
fn one_cross_leaf_flow_completes_without_loss() {
    let r = run(cfg(7), &[flow(0, 5, 1 << 20)]);
    let f = &r.flows[0];
    assert!(f.done_ns.is_some());
    // 1 MiB in 4096-byte packets, none lost, none retransmitted.
    assert_eq!(
        (f.packets_sent, f.retransmitted, f.lost, f.timeouts),
        (256, 0, 0, 0)
    );
    // Every data packet crossed 4 links, plus the SACKs back.
    assert!(r.counters.hops >= 4 * 256);
    assert_eq!(r.host_bad_frames, 0);
}

#[test]
fn same_seed_same_run_other_seed_other_run() {
    let flows = [
        flow(0, 5, 1 << 20),
        flow(1, 9, 1 << 20),
        flow(6, 2, 1 << 20),
    ];
    let a = serde_json::to_string(&run(lossy(11), &flows)).unwrap();
    let b = serde_json::to_string(&run(lossy(11), &flows)).unwrap();
    let c = serde_json::to_string(&run(lossy(12), &flows)).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn random_loss_is_recovered_and_counted() {
    let r = run(lossy(3), &[flow(0, 5, 1 << 20)]);
    let f = &r.flows[0];
    assert!(f.done_ns.is_some());
    // Seed 3: 12 frames (data and SACKs) lost on the way, 8 data packets resent, 264
    // data packets sent in all (256 + 8), every PSN eventually arrived. (10 resent, 266
    // sent, before every EV a SACK acknowledges took its own RTT sample.)
    assert_eq!(r.counters.loss_drops, 12);
    assert_eq!((f.packets_sent, f.retransmitted), (264, 8));
    assert_eq!(f.packets_sent, 256 + f.retransmitted);
    assert_eq!(f.lost, 0, "every PSN eventually arrived");
}

#[test]
fn corruption_is_caught_by_the_udp_checksum() {
    let cfg = SimConfig {
        faults: vec![Fault {
            at_ns: 0,
            links: LinkSelector::Fabric,
            kind: FaultKind::Corrupt { p: 0.02 },
        }],
        ..cfg(5)
    };
    let r = run(cfg, &[flow(0, 5, 1 << 20)]);
    assert!(r.flows[0].done_ns.is_some());
    assert_eq!(r.counters.corrupted, 9); // seed 5
    // Each corrupted frame (one flipped bit in UDP header or payload) fails the checksum.
    assert_eq!(r.host_bad_frames, r.counters.corrupted);
}

#[test]
fn reordering_by_jitter_is_not_loss() {
    let cfg = SimConfig {
        faults: vec![Fault {
            at_ns: 0,
            links: LinkSelector::Fabric,
            kind: FaultKind::Jitter { max_ns: 5_000 },
        }],
        ..cfg(9)
    };
    let r = run(cfg, &[flow(0, 5, 1 << 20)]);
    let f = &r.flows[0];
    assert!(f.done_ns.is_some());
    // Seed 9: 169 of the 256 data packets arrive below the highest PSN seen; none is lost,
    // and the sender never resends one (reordering is not loss at either end).
    assert_eq!(f.out_of_order, 169);
    assert_eq!(f.lost, 0);
    assert_eq!(f.retransmitted, 0);
    assert_eq!(r.counters.loss_drops + r.counters.black_hole_drops, 0);
}

#[test]
fn duplicates_are_counted_not_harmful() {
    let cfg = SimConfig {
        faults: vec![Fault {
            at_ns: 0,
            links: LinkSelector::Fabric,
            kind: FaultKind::Duplicate { p: 0.05 },
        }],
        ..cfg(9)
    };
    let r = run(cfg, &[flow(0, 5, 1 << 20)]);
    let f = &r.flows[0];
    assert!(f.done_ns.is_some());
    // Seed 9: 33 frames duplicated on the fabric, 26 of them data packets the receiver saw
    // twice (the rest SACKs); nothing resent, nothing lost.
    assert_eq!(r.counters.duplicated, 33);
    assert_eq!(f.duplicates, 26);
    assert_eq!((f.retransmitted, f.lost), (0, 0));
}

#[test]
fn link_down_reroutes() {
    let cfg = SimConfig {
        faults: vec![Fault {
            at_ns: 20_000,
            links: LinkSelector::Between("leaf0".into(), "spine2".into()),
            kind: FaultKind::LinkDown,
        }],
        ..cfg(4)
    };
    let r = run(cfg, &[flow(0, 5, 1 << 20)]);
    assert!(r.flows[0].done_ns.is_some());
    let leaf0_spine2 = r
        .ports
        .iter()
        .find(|p| p.node == "leaf0" && p.peer == "spine2")
        .unwrap();
    // 21 packets used leaf0 -> spine2 in the first 20 us; routing converged at the failure,
    // nothing was queued on it then, so nothing was lost or resent.
    assert_eq!(leaf0_spine2.stats.tx_packets, 21);
    assert_eq!(r.counters.link_down_drops, 0);
    assert_eq!(
        (r.flows[0].packets_sent, r.flows[0].retransmitted),
        (256, 0)
    );
}

#[test]
fn srv6_and_usid_flows_complete() {
    for fwd in [Forwarding::Srv6, Forwarding::Usid] {
        let cfg = SimConfig {
            forwarding: fwd,
            ..cfg(2)
        };
        let r = run(cfg, &[flow(0, 5, 1 << 20)]);
        for f in &r.flows {
            assert!(f.done_ns.is_some(), "{fwd:?}");
            assert_eq!(f.retransmitted, 0, "{fwd:?}");
        }
        assert_eq!(r.host_bad_frames, 0);
        // 16 EVs over 4 spines by the segment list; the first window explores them
        // round-robin, later packets reuse the EVs in the order their SACKs came back
        // (REPS), so the 256 data packets of flow 0 (leaf0 -> leaf1) split 68/67/67/54.
        for (s, n) in [68, 67, 67, 54].into_iter().enumerate() {
            let spine = format!("spine{s}");
            let down = r
                .ports
                .iter()
                .find(|p| p.node == spine && p.peer == "leaf1")
                .unwrap();
            assert_eq!(down.stats.tx_packets, n, "{fwd:?} {spine}");
        }
    }
}
