//! Hosts with one NIC port per plane (two planes here), and faults on a host's port, on a
//! whole plane's switches and on one switch, at exact virtual times.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use mrc_fabric_sim::{
    Fault, FaultKind, FlowSpec, LinkSelector, LinkSpec, SimConfig, SimError, Simulator,
    SpineLeafSpec, Topology,
};
use mrc_transport::path::{PlaneDownCause, PlaneState};
use mrc_transport::wire::Bth;

/// Two planes of 4 hosts on 2 leaves and 2 spines each, 100 Gb/s ports, 500 ns links:
/// hosts 0-3, plane 0's switches 4-7 (leaves 4, 5), plane 1's 8-11 (leaves 8, 9).
fn two_planes() -> Topology {
    let lane = LinkSpec::gbps(100, 500);
    let one = Topology::spine_leaf(&SpineLeafSpec {
        hosts: 4,
        leaves: 2,
        spines: 2,
        hosts_per_leaf: 2,
        uplinks_per_leaf: 2,
        host_link: lane,
        fabric_link: lane,
    })
    .unwrap();
    Topology::with_planes(&one, 2).unwrap()
}

fn cfg(seed: u64, faults: Vec<Fault>) -> SimConfig {
    SimConfig {
        seed,
        ecmp_seed: seed,
        faults,
        ..SimConfig::default()
    }
}

/// Flow 0 -> 2 (cross leaf) of `bytes`, 16 EVs (8 per plane).
fn flow(bytes: u64) -> FlowSpec {
    FlowSpec {
        src: 0,
        dst: 2,
        bytes,
        start_ns: 0,
        evs: None,
    }
}

/// A `Write` into a buffer the test keeps a handle on.
#[derive(Clone, Default)]
struct SharedBuf(Rc<RefCell<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The send times, ns, of the mrc data frames in a pcap of plain (no SRH) frames.
fn data_frame_times(pcap: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= pcap.len() {
        let word = |i: usize| u32::from_le_bytes(pcap[off + i..off + i + 4].try_into().unwrap());
        let (sec, ns, len) = (word(0), word(4), word(8) as usize);
        let frame = &pcap[off + 16..off + 16 + len];
        // Ethernet 14 + IPv6 40 + UDP 8: the BTH.
        if Bth::new_checked(&frame[62..]).is_ok_and(|b| b.opcode().is_data()) {
            out.push(u64::from(sec) * 1_000_000_000 + u64::from(ns));
        }
        off += 16 + len;
    }
    out
}

/// The sender's EVs alternate planes (EV i on plane i mod 2), so a 1 MiB WRITE's 256
/// packets leave host 0 as 128 on each port; its SACKs (one per 4 packets, echoing the EV
/// of the fourth) all leave host 2 on port 1. Each plane's switches carry only their
/// plane's frames: 128 data frames x 3 switch hops on plane 0, 128 data frames and 64
/// SACKs x 3 on plane 1.
#[test]
fn a_transfer_splits_exactly_across_the_ports() {
    let mut sim = Simulator::new(two_planes(), cfg(1, vec![])).unwrap();
    sim.add_flow(flow(1 << 20)).unwrap();
    let r = sim.run();
    let tx = |n: u32, p: u16| sim.port_stats(n, p).unwrap().tx_packets;
    assert_eq!((tx(0, 0), tx(0, 1)), (128, 128));
    assert_eq!((tx(2, 0), tx(2, 1)), (0, 64));
    let (s, rcv) = sim.flow_conns(0).unwrap();
    let (q0, q1) = (s.paths().plane_ev_stats(0), s.paths().plane_ev_stats(1));
    assert_eq!((q0.sent, q1.sent, q0.acked, q1.acked), (128, 128, 128, 128));
    assert_eq!(rcv.stats().sacks_sent, 64);
    let switch_tx = |nodes: std::ops::Range<u32>| -> u64 {
        nodes
            .flat_map(|n| (0..4).map(move |p| (n, p)))
            .filter_map(|(n, p)| sim.port_stats(n, p))
            .map(|s| s.tx_packets)
            .sum()
    };
    assert_eq!(
        (switch_tx(4..8), switch_tx(8..12)),
        (128 * 3, (128 + 64) * 3)
    );
    let f = &r.flows[0];
    assert_eq!((f.packets_sent, f.retransmitted, f.lost), (256, 0, 0));
    assert_eq!(f.done_ns, Some(48_161));
}

/// Host 2's port 1 goes down at 100 us: host 2's datapath tells its connection, which
/// denies plane 1 at once and sends a Port Status Update on plane 0. It reaches the
/// sender 2,032 ns later; the sender's last data frame on port 1 left at 101,713 ns (303
/// data frames on that port in all, 6 of them after the fault), none after the update,
/// only one probe of the plane (304 frames). The update is acknowledged, the 13 packets
/// lost on plane 1 are resent on plane 0, and the 4 MiB arrive whole.
#[test]
fn a_port_down_stops_data_on_the_plane_after_the_port_status_update() {
    let port_down = Fault {
        at_ns: 100_000,
        links: LinkSelector::Port { host: 2, port: 1 },
        kind: FaultKind::PortDown,
    };
    let mut sim = Simulator::new(two_planes(), cfg(1, vec![port_down])).unwrap();
    sim.add_flow(flow(4 << 20)).unwrap();
    let tap = SharedBuf::default();
    sim.set_pcap(0, 1, Box::new(tap.clone())).unwrap();
    // Step through the update's flight: the sender has it from 102,032 ns on.
    sim.run_until(102_031, &mut |_| {});
    assert_eq!(sim.flow_conns(0).unwrap().0.stats().psu_received, 0);
    sim.run_until(102_032, &mut |_| {});
    let (s, rcv) = sim.flow_conns(0).unwrap();
    assert_eq!(s.stats().psu_received, 1);
    assert_eq!(
        s.paths().planes()[1].state,
        PlaneState::Down(PlaneDownCause::PeerReport)
    );
    assert_eq!(
        rcv.paths().planes()[1].state,
        PlaneState::Down(PlaneDownCause::Local)
    );
    let r = sim.run();
    sim.finish_pcap().unwrap();
    let times = data_frame_times(&tap.0.borrow());
    assert_eq!(times.len(), 303);
    assert_eq!(times.iter().filter(|&&t| t >= 100_000).count(), 6);
    assert_eq!(times.last(), Some(&101_713));
    assert_eq!(times.iter().filter(|&&t| t >= 102_032).count(), 0);
    assert_eq!(sim.port_stats(0, 1).unwrap().tx_packets, 304);
    let (s, rcv) = sim.flow_conns(0).unwrap();
    let plane = &s.paths().planes()[1];
    assert_eq!(
        (
            plane.down_since_ns,
            plane.stats.downs_by_peer,
            plane.stats.probes_sent
        ),
        (Some(102_032), 1, 1)
    );
    assert_eq!(
        (
            rcv.stats().psu_sent,
            s.stats().psu_received,
            rcv.stats().psu_acked
        ),
        (1, 1, 1)
    );
    assert_eq!(rcv.paths().planes()[1].down_since_ns, Some(100_000));
    let f = &r.flows[0];
    assert_eq!(
        (f.retransmitted, f.rack_losses, f.timeouts, f.lost),
        (13, 13, 0, 0)
    );
    assert_eq!(f.done_ns, Some(252_268));
    assert_eq!(rcv.stats().received_bytes, 4 << 20);
    // The frames that reached plane 1 after the fault found no route to host 2; two
    // SACKs host 2 had queued on the port went down with its link.
    assert_eq!(
        (r.counters.no_route_drops, r.counters.link_down_drops),
        (14, 2)
    );
}

/// Every switch of plane 1 goes down at 100 us; the hosts are not told. The sender finds
/// out by loss: at 110,133 ns losses on two of plane 1's EVs with no delivery on the plane
/// between, and none for a smoothed RTT, take the plane down (its one probe is not
/// answered); the 31 packets lost there are resent on plane 0 and the flow completes with
/// nothing lost. (With half the EVs as the threshold it was 105,413 ns and 23 packets;
/// 104,737 ns and 21 packets before the plane had to be silent for an RTT, 20 packets
/// once the flow kept its packets in flight balanced across its planes; done at 252,261
/// and 252,263 ns. 109,458 ns, 32 packets, done at 252,277 ns, before every EV a SACK
/// acknowledges took its own RTT sample: the plane's smoothed RTT, the largest of its
/// EVs', is the silence it waits for.)
#[test]
fn a_dead_plane_is_found_by_loss() {
    let plane_down = Fault {
        at_ns: 100_000,
        links: LinkSelector::Plane(1),
        kind: FaultKind::SwitchDown,
    };
    let mut sim = Simulator::new(two_planes(), cfg(1, vec![plane_down])).unwrap();
    sim.add_flow(flow(4 << 20)).unwrap();
    sim.run_until(110_132, &mut |_| {});
    assert!(sim.flow_conns(0).unwrap().0.paths().planes()[1].is_up());
    sim.run_until(110_133, &mut |_| {});
    assert_eq!(
        sim.flow_conns(0).unwrap().0.paths().planes()[1].state,
        PlaneState::Down(PlaneDownCause::Loss)
    );
    let r = sim.run();
    let (s, rcv) = sim.flow_conns(0).unwrap();
    let plane = &s.paths().planes()[1];
    assert_eq!(plane.down_since_ns, Some(110_133));
    assert_eq!(
        (
            plane.stats.downs_by_loss,
            plane.stats.ups,
            plane.stats.probes_sent
        ),
        (1, 0, 1)
    );
    let q1 = s.paths().plane_ev_stats(1);
    assert_eq!((q1.sent, q1.acked, q1.lost), (321, 290, 31));
    // The receiver sends no data: nothing tells it, and its plane 1 stays up.
    assert!(rcv.paths().planes()[1].is_up());
    let f = &r.flows[0];
    assert_eq!((f.retransmitted, f.timeouts, f.lost), (31, 0, 0));
    assert_eq!(f.done_ns, Some(252_261));
    assert_eq!(rcv.stats().received_bytes, 4 << 20);
    assert_eq!(
        (r.counters.link_down_drops, r.counters.switch_down_drops),
        (33, 9)
    );
    // The sender's port 1 carried 321 data frames and 7 probes (the plane's, and 6 of EVs
    // out on their own before the plane went down), nothing more.
    assert_eq!(q1.probes_sent, 7);
    assert_eq!(sim.port_stats(0, 1).unwrap().tx_packets, 328);
}

/// A spine of plane 1 reboots (down 50-80 us) and host 0's port 1 flaps (down at 150 and
/// 190 us, up 20 us later each time). Host 0's connection is told of each change: plane 1
/// down (locally) twice for 20 us each, four Port Status Updates. Both flows hash some of
/// their plane-1 EVs onto the rebooting spine: two of them losing with no delivery on the
/// plane between takes plane 1 down by loss (twice for each flow), and a probe on a live
/// EV brings it back (8,971 ns in all for host 0 besides its 40,000 ns down locally,
/// 9,877 ns for 1 -> 3). Losses of packets sent before the port came back do not count
/// against the plane. Both flows complete whole, 230,989 and 201,852 ns; they have
/// packets in flight on the spine when it goes down and send into the port while it is
/// down (2 frames lost in the switch, 6 with no route while it is down). (240,594 and
/// 213,592 ns, host 0's plane 1 down by loss for 896 ns, 1 -> 3's three times for 13,182
/// ns, 3 frames lost in the switch, 3 on its links and 8 with no route, before every EV
/// a SACK acknowledges took its own RTT sample.) (243,703 and 212,307 ns, host 0's plane 1 down by loss three times for 5,413 ns,
/// 1 -> 3's twice for 8,452 ns, 18 frames with no route, before RACK's scan went past an
/// acknowledged resend, `Rack::scan_end`.) (237,383 and 217,037 ns, host 0's plane 1
/// down by loss twice, 2, 3 and 16 frames lost, before RACK gave each packet its own EV's
/// round trip and a packet acknowledged after RACK's connection-wide deadline stopped
/// recycling its EV; 232,216 and 202,130 ns before a plane's loss streak waited for a
/// smoothed RTT of silence on it, and before each flow kept its packets in flight balanced
/// across its planes, `PathTable::select_balanced`, none lost before the spine went down.)
#[test]
fn a_switch_reboot_and_a_flapping_port() {
    let mut faults = Fault::reboot("p1.spine0", 50_000, 30_000).to_vec();
    faults.extend(Fault::flapping(
        LinkSelector::Port { host: 0, port: 1 },
        150_000,
        20_000,
        2,
    ));
    assert_eq!(
        faults.iter().map(|f| (f.at_ns, f.kind)).collect::<Vec<_>>(),
        [
            (50_000, FaultKind::SwitchDown),
            (80_000, FaultKind::SwitchUp),
            (150_000, FaultKind::PortDown),
            (170_000, FaultKind::PortUp),
            (190_000, FaultKind::PortDown),
            (210_000, FaultKind::PortUp),
        ]
    );
    let mut sim = Simulator::new(two_planes(), cfg(3, faults)).unwrap();
    sim.add_flow(flow(4 << 20)).unwrap();
    sim.add_flow(FlowSpec {
        src: 1,
        dst: 3,
        ..flow(4 << 20)
    })
    .unwrap();
    let r = sim.run();
    let (s0, r0) = sim.flow_conns(0).unwrap();
    let (s1, r1) = sim.flow_conns(1).unwrap();
    let p0 = s0.paths().planes()[1].stats;
    assert_eq!(
        (p0.downs_local, p0.ups, p0.down_ns, p0.downs_by_loss),
        (2, 4, 48_971, 2)
    );
    assert_eq!(s0.stats().psu_sent, 4);
    let p1 = s1.paths().planes()[1].stats;
    assert_eq!(
        (p1.downs_by_loss, p1.ups, p1.down_ns, p1.probes_sent),
        (2, 2, 9_877, 2)
    );
    // (271,153 and 263,373 ns before the flows kept their packets in flight balanced
    // across their planes.) (258,657 and 278,226 ns before an EV back by probe took its share of the recycle
    // FIFO at once, two EVs' losses took a plane down and plane probes backed off to
    // 200 us.) (270,452 and 235,085 ns before an EV back in rotation was topped up to its
    // share of the recycle FIFO, its plane's entries kept within the plane's share and
    // spread apart: host 0's plane 1 goes down by loss once, not twice, and 1 -> 3 takes
    // 12% longer: its plane 1, back after 4.45 us, gets fewer entries than it had. Without
    // the plane's bound, 244,235 and 236,430 ns, but the all-to-all of `plane-loss` back to
    // 95% in 3 runs of 24 instead of 9.)
    assert_eq!(
        (r.flows[0].done_ns, r.flows[1].done_ns),
        (Some(230_989), Some(201_852))
    );
    assert_eq!(
        (r0.stats().received_bytes, r1.stats().received_bytes),
        (4 << 20, 4 << 20)
    );
    assert_eq!(
        (
            r.counters.switch_down_drops,
            r.counters.link_down_drops,
            r.counters.no_route_drops
        ),
        (2, 0, 6)
    );
}

/// Two flows over two planes with a plane down and back, a port flap and a spine reboot:
/// one seed gives the same report and the same pcap of host 0's port 1 byte for byte, and
/// the same pcap run in 1 us steps ([`Simulator::run_until`]); another seed gives another
/// run.
#[test]
fn a_seed_reproduces_a_run_byte_for_byte() {
    let run = |seed: u64, step_ns: Option<u64>| -> (String, Vec<u8>) {
        let mut faults = vec![
            Fault {
                at_ns: 60_000,
                links: LinkSelector::Plane(1),
                kind: FaultKind::SwitchDown,
            },
            Fault {
                at_ns: 90_000,
                links: LinkSelector::Plane(1),
                kind: FaultKind::SwitchUp,
            },
        ];
        faults.extend(Fault::flapping(
            LinkSelector::Port { host: 2, port: 0 },
            120_000,
            10_000,
            1,
        ));
        faults.extend(Fault::reboot("p0.spine1", 30_000, 15_000));
        let mut sim = Simulator::new(two_planes(), cfg(seed, faults)).unwrap();
        sim.add_flow(flow(2 << 20)).unwrap();
        sim.add_flow(FlowSpec {
            src: 3,
            dst: 0,
            ..flow(2 << 20)
        })
        .unwrap();
        let tap = SharedBuf::default();
        sim.set_pcap(0, 1, Box::new(tap.clone())).unwrap();
        if let Some(step) = step_ns {
            let mut t = 0;
            while sim.report().flows.iter().any(|f| f.done_ns.is_none()) {
                t += step;
                sim.run_until(t, &mut |_| {});
            }
        }
        let report = serde_json::to_string(&sim.run()).unwrap();
        sim.finish_pcap().unwrap();
        let pcap = tap.0.borrow().clone();
        (report, pcap)
    };
    let a = run(11, None);
    let b = run(11, None);
    let stepped = run(11, Some(1_000));
    let c = run(12, None);
    assert_eq!(a, b);
    assert_eq!(a.1, stepped.1);
    assert_ne!(a.0, c.0);
    assert_ne!(a.1, c.1);
    // Both flows finished and the tap saw frames (the report's JSON names each flow's
    // completion).
    assert!(a.1.len() > 24);
    assert!(!a.0.contains("\"done_ns\":null"));
}

/// Faults that cannot apply are refused before the run: a port fault on fabric links, a
/// switch fault on a host port, a host port, switch or plane the fabric lacks.
#[test]
fn faults_that_cannot_apply_are_refused() {
    let bad = |links: LinkSelector, kind: FaultKind| {
        let f = Fault {
            at_ns: 0,
            links,
            kind,
        };
        match Simulator::new(two_planes(), cfg(1, vec![f])) {
            Err(SimError::BadFault { index: 0, why }) => why,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        bad(LinkSelector::Fabric, FaultKind::PortDown),
        "PortDown needs a host port"
    );
    assert_eq!(
        bad(
            LinkSelector::Port { host: 0, port: 0 },
            FaultKind::SwitchDown
        ),
        "SwitchDown needs a switch or a plane"
    );
    assert_eq!(
        bad(LinkSelector::Port { host: 0, port: 2 }, FaultKind::PortDown),
        "host 0 has no port 2"
    );
    assert_eq!(
        bad(
            LinkSelector::Switch("p2.spine0".into()),
            FaultKind::SwitchUp
        ),
        "no switch named \"p2.spine0\""
    );
    assert_eq!(
        bad(LinkSelector::Switch("host1".into()), FaultKind::SwitchDown),
        "no switch named \"host1\""
    );
    assert_eq!(
        bad(LinkSelector::Plane(2), FaultKind::SwitchDown),
        "no plane 2 (the fabric has 2)"
    );
}
