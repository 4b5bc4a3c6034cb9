//! Schedules the `transfer` fuzz target found failing, replayed verbatim through
//! `mrc_tests::transfer::run` (which checks exactly-once, in-order, byte-exact completion,
//! or RetryExceeded/Flushed when every EV is dark for good, and never a hang).

use mrc_congestion::CcKind;
use mrc_tests::transfer::{MsgKind, NetAct, Outage, OutageKind, Schedule, run};
use mrc_transport::path::PathState;
use mrc_transport::stats::DropReason;

/// Found by `transfer`: the only EV black-holed for good from 0 and denied from
/// 31.097 ms to 32.498 ms; DCQCN paces. While the EV was denied, `poll_timeout` kept
/// returning the pacing release time (in the past) because a retransmission was queued,
/// but `poll_transmit` had no EV to send it on: time stopped (a busy loop in a real event
/// loop).
#[test]
fn denied_only_ev_with_pacing_does_not_spin() {
    let s = Schedule {
        planes: 1,
        n_evs: 1,
        mtu_payload_bytes: 256,
        cc: CcKind::Dcqcn,
        go_back_n: false,
        initial_psns: (134_217_728, 84_250_623),
        msgs: vec![(MsgKind::Write, 28_922)],
        a_acts: vec![],
        b_acts: vec![],
        outages: vec![
            Outage {
                ev: 0,
                start_ns: 31_097_000,
                len_ns: 1_401_000,
                kind: OutageKind::Denied,
            },
            Outage {
                ev: 0,
                start_ns: 224_000,
                len_ns: 3_167_000,
                kind: OutageKind::BlackHole,
            },
        ],
        permanent: vec![(0, 0)],
    };
    let r = run(&s).unwrap();
    assert_eq!(r.succeeded, 0);
    assert_eq!(r.dark_from_ns, Some(0));
}

/// Found by `transfer` (a bug of the runner, not of the transport): a zero-length denial
/// at 0 ns sorted its "up" before its "down", so the only EV stayed denied for good and
/// the runner reported a hang. Replayed here with go-back-N, a 60 KiB WRITE, a double
/// delay and the first SACK dropped: it must complete.
#[test]
fn zero_length_denial_is_no_denial() {
    let s = Schedule {
        planes: 1,
        n_evs: 1,
        mtu_payload_bytes: 4096,
        cc: CcKind::Dcqcn,
        go_back_n: true,
        initial_psns: (4_294_901_760, 4_294_967_295),
        msgs: vec![(MsgKind::Write, 61_937)],
        a_acts: vec![
            NetAct::Deliver,
            NetAct::DelayTwice(98, 158),
            NetAct::Deliver,
        ],
        b_acts: vec![NetAct::Drop],
        outages: vec![Outage {
            ev: 0,
            start_ns: 0,
            len_ns: 0,
            kind: OutageKind::Denied,
        }],
        permanent: vec![],
    };
    let r = run(&s).unwrap();
    assert_eq!((r.succeeded, r.dark_from_ns), (1, None));
}

/// Found by `transfer` (5-minute run, two inputs): go-back-N over 4 EVs, EVs 0 and 2
/// black-holed for good from the start, EVs 1 and 3 fine. A NACK(NO_BITMAP) did not mark
/// the EV that lost the packet at the hole, so round-robin put the hole packet of every
/// go-back round on a dead EV again; the RTO then marked the live EVs (whose packets the
/// go-back-N receiver had discarded) bad too, and the work requests failed with
/// RetryExceeded although half the paths worked.
#[test]
fn go_back_n_routes_around_dead_evs() {
    let one = Schedule {
        planes: 1,
        n_evs: 4,
        mtu_payload_bytes: 256,
        cc: CcKind::None,
        go_back_n: true,
        initial_psns: (4_294_967_295, 4_294_967_295),
        msgs: vec![(MsgKind::Send, 3872)],
        a_acts: vec![],
        b_acts: vec![NetAct::DelayTwice(0, 46)],
        outages: vec![],
        permanent: vec![(2, 0), (0, 0)],
    };
    let r = run(&one).unwrap();
    assert_eq!((r.succeeded, r.dark_from_ns), (1, None));
    let two = Schedule {
        planes: 1,
        initial_psns: (2_099_744, 32),
        msgs: vec![
            (MsgKind::WriteImm, 3584),
            (MsgKind::WriteImm, 2817),
            (MsgKind::Write, 0),
        ],
        b_acts: vec![],
        ..one
    };
    let r = run(&two).unwrap();
    assert_eq!((r.succeeded, r.dark_from_ns), (3, None));
}

/// Found by `transfer` (go-back-N with permanent black holes, the fuzz restriction
/// lifted): 4 EVs, EV 0 dark for good from 0 and EV 2 from 4 us, B's first datagram (its
/// only NACK(NO_BITMAP)) lost, 64 KiB WRITE_IMM + 1-byte SEND + empty WRITE_IMM; every
/// controller failed it with RetryExceeded, for two reasons:
/// * the go-back-N receiver discards everything behind the hole, so the first RTO found
///   all 258 packets unacknowledged and marked every EV that carried one `AssumedBad`,
///   live EVs 1 and 3 included; with no `Good` EV left, the hole packet of every round
///   went on a dead EV (avoiding the previous one: 2, 0, 2, ...) until the retry limit;
/// * with pacing (DCQCN) the first round left over 6 us, and an RTO only resent packets
///   sent an RTO ago: one packet per expiry, the RTO doubling each time.
///
/// Now an RTO in go-back-N mode resends everything in flight and blames only the lowest
/// packet's EV: round 2 puts the hole on EV 2 (dark since 4 us), the second RTO blames
/// EV 2, round 3 goes on EV 1 and everything is delivered.
#[test]
fn go_back_n_rto_goes_back_and_blames_only_the_hole_ev() {
    let one = Schedule {
        planes: 1,
        n_evs: 4,
        mtu_payload_bytes: 256,
        cc: CcKind::None,
        go_back_n: true,
        initial_psns: (4_261_367_328, 4_291_904_039),
        msgs: vec![
            (MsgKind::WriteImm, 65_535),
            (MsgKind::Send, 1),
            (MsgKind::WriteImm, 0),
        ],
        a_acts: vec![],
        b_acts: vec![NetAct::Drop, NetAct::Deliver],
        outages: vec![],
        permanent: vec![(2, 4_000), (0, 0)],
    };
    for cc in CcKind::ALL {
        let r = run(&Schedule { cc, ..one.clone() }).unwrap();
        assert_eq!((r.succeeded, r.dark_from_ns), (3, None), "{cc:?}");
        // RTO at 1 ms (initial), again 2 ms later (back-off), then the last round's SACKs
        assert_eq!(r.end_ns, 3_010_158, "{cc:?}");
        // 258 packets (256 + 1 + 1), three go-back rounds of all of them
        assert_eq!(
            (r.a_stats.sent, r.a_stats.retransmitted, r.a_stats.acked),
            (774, 516, 258),
            "{cc:?}"
        );
        assert_eq!(r.a_stats.sent_bytes, 65_536);
        assert_eq!(r.a_stats.timeouts, 2, "{cc:?}");
        assert_eq!(
            (r.b_stats.received, r.b_stats.received_bytes),
            (258, 65_536)
        );
        assert_eq!(r.b_stats.nacks_sent, 1, "{cc:?}");
        assert_eq!(
            r.b_stats.drops.get(DropReason::OutOfOrderGoBackN),
            r.b_stats.drops.total()
        );
        // Behind the hole: round 1's 193 packets on EVs 1-3 and round 2's 161 not on EV 2;
        // DCQCN paces round 1 over 6 us, so EV 2's packets after 4 us (22) never arrive.
        let behind_hole = if cc == CcKind::Dcqcn { 332 } else { 354 };
        assert_eq!(r.b_stats.drops.total(), behind_hole, "{cc:?}");
        // one timeout blamed per RTO: EV 0, then EV 2
        let timeouts: Vec<u64> = r.a_ev_stats.iter().map(|e| e.timeouts).collect();
        assert_eq!(timeouts, vec![1, 0, 1, 0], "{cc:?}");
        let acked: Vec<u64> = r.a_ev_stats.iter().map(|e| e.acked).collect();
        assert_eq!(acked, vec![0, 162, 0, 96], "{cc:?}");
        use PathState::{AssumedBad, Good};
        assert_eq!(r.a_ev_states, vec![AssumedBad, Good, AssumedBad, Good]);
    }
}

/// Found by `transfer` (a bug of the runner's limits, not of the transport): go-back-N,
/// 2 EVs, one zero-length WRITE whose first copy is dropped; B's first 20 datagrams are
/// to be dropped. Each RTO makes the EV of the lost copy `AssumedBad`, so every round B
/// answers a probe, then SACKs the resend, then answers the next probe. With "at most 2
/// control datagrams dropped in a row" the delivered turn always fell on a probe reply and
/// every SACK was lost for 7 rounds: `RetryExceeded` on a schedule the runner promised
/// deliverable. The cap now counts acknowledgements only: the third SACK is delivered.
#[test]
fn probe_replies_do_not_take_the_delivered_turn_of_dropped_sacks() {
    use NetAct::{Deliver, Drop, MarkCe};
    let s = Schedule {
        planes: 1,
        n_evs: 2,
        mtu_payload_bytes: 256,
        cc: CcKind::Swift,
        go_back_n: true,
        initial_psns: (1_162_167_621, 3_204_465_989),
        msgs: vec![(MsgKind::Write, 0)],
        a_acts: vec![Drop, Drop, Drop, Drop, MarkCe],
        b_acts: [vec![Drop; 20], vec![MarkCe, Deliver, Deliver]].concat(),
        outages: vec![],
        permanent: vec![],
    };
    let r = run(&s).unwrap();
    assert_eq!(r.succeeded, 1);
    // two SACKs lost, the third (the third RTO round's) delivered: done at 7.004 ms
    assert_eq!(r.end_ns, 7_004_008);
    assert_eq!(
        (
            r.a_stats.timeouts,
            r.a_stats.retransmitted,
            r.a_stats.sacks_received
        ),
        (3, 3, 1)
    );
    assert_eq!((r.b_stats.received, r.b_stats.sacks_sent), (1, 3));
}

/// Found by `transfer` (CI, stop 28): two zero-length messages (a WRITE, then a
/// WRITE_WITH_IMM), A's first datagram dropped, B's first datagram duplicated 103 us
/// later, EV 1 denied twice and black-holed once: nothing completed within the bound.
/// The receiver refused the WRITE_WITH_IMM with RNR NACKs (its only receive is kept for
/// the unknown earlier message, which may need one), and each RNR NACK counted as
/// progress for the RTO: answered every 640 us (the RNR timer), the 1 ms RTO of the lost
/// WRITE never fired, so it was never resent. An RNR NACK no longer restarts the RTO.
#[test]
fn zero_length_write_then_write_imm_with_first_packet_lost_completes() {
    let s = Schedule {
        planes: 1,
        n_evs: 4,
        mtu_payload_bytes: 256,
        cc: CcKind::None,
        go_back_n: false,
        initial_psns: (2_661_220_174, 1_645_543_574),
        msgs: vec![(MsgKind::Write, 0), (MsgKind::WriteImm, 0)],
        a_acts: vec![NetAct::Drop],
        b_acts: vec![NetAct::Duplicate(103)],
        outages: vec![
            Outage {
                ev: 1,
                start_ns: 24_673_000,
                len_ns: 3_743_000,
                kind: OutageKind::Denied,
            },
            Outage {
                ev: 1,
                start_ns: 57_825_000,
                len_ns: 1_825_000,
                kind: OutageKind::Denied,
            },
            Outage {
                ev: 1,
                start_ns: 57_825_000,
                len_ns: 430_000,
                kind: OutageKind::BlackHole,
            },
            Outage {
                ev: 0,
                start_ns: 0,
                len_ns: 0,
                kind: OutageKind::BlackHole,
            },
        ],
        permanent: vec![],
    };
    let r = run(&s).unwrap();
    assert_eq!(r.succeeded, 2);
    // the RTO at 1 ms resends the lost WRITE; the WRITE_WITH_IMM follows on the RNR timer
    assert_eq!(r.a_stats.timeouts, 1);
    assert_eq!(r.b_stats.rnr_nacks_sent, 2);
    assert_eq!(
        r.a_stats.rnr_nacks_received, 3,
        "two and the duplicate of the first"
    );
    assert_eq!(r.end_ns, 1_292_026);
}

/// Planes: 4 EVs on 2 planes (EVs 0 and 2 on plane 0, 1 and 3 on plane 1), a 64 KiB WRITE
/// then a 4 KiB SEND under DCQCN's pacing, and A's NIC port on plane 1 down from 1 us to
/// 5 us (EVs 1 and 3 black-holed both ways meanwhile). A reports the port down and up again
/// (two Port Status Updates; B's acknowledgement of the first arrives after A sent the
/// second, a counted stale drop, and the second is acknowledged), both messages complete
/// byte for byte with no loss and no RTO: A's own EVs of the plane are denied while the
/// port is down, so the plane carries 3 packets per EV against 30 and 29 on plane 0.
#[test]
fn a_nic_port_down_mid_transfer_costs_no_loss_and_no_rto() {
    let s = Schedule {
        planes: 2,
        n_evs: 4,
        mtu_payload_bytes: 1024,
        cc: CcKind::Dcqcn,
        go_back_n: false,
        initial_psns: (10, 20),
        msgs: vec![(MsgKind::Write, 64 << 10), (MsgKind::Send, 4096)],
        a_acts: vec![],
        b_acts: vec![],
        outages: vec![Outage {
            ev: 1,
            start_ns: 1_000,
            len_ns: 4_000,
            kind: OutageKind::LocalPort,
        }],
        permanent: vec![],
    };
    let r = run(&s).unwrap();
    assert_eq!(r.succeeded, 2);
    assert_eq!(r.end_ns, 9_522);
    assert_eq!((r.a_stats.timeouts, r.a_stats.rack_losses), (0, 0));
    let per_ev: Vec<(u64, u64, u64)> = r
        .a_ev_stats
        .iter()
        .map(|e| (e.sent, e.acked, e.lost))
        .collect();
    assert_eq!(per_ev, vec![(30, 30, 0), (3, 3, 0), (29, 29, 0), (3, 3, 0)]);
    assert_eq!((r.a_stats.psu_sent, r.a_stats.psu_acked), (2, 1));
    assert_eq!(r.a_stats.drops.get(DropReason::StalePortStatus), 1);
    assert_eq!(r.b_stats.psu_received, 2);
    assert_eq!(r.a_ev_states, vec![PathState::Good; 4]);
}

/// Found by the `transfer` fuzz target in CI ("livelock at 0 ns"): one EV on one plane,
/// A's only port down from 0 to 100 us and again later. The Port Status Update had no EV
/// to leave on and its timer stayed due at 0 ns for ever; now it waits a probe interval
/// at a time, and the run ends: the EV is also dead for good from 0 ns (`permanent`), so
/// the one message fails (RetryExceeded), as it must, instead of spinning.
#[test]
fn the_only_planes_port_down_at_start_is_no_livelock() {
    let s = Schedule {
        n_evs: 1,
        planes: 1,
        mtu_payload_bytes: 256,
        cc: CcKind::Dcqcn,
        go_back_n: false,
        initial_psns: (4278714368, 84215183),
        msgs: vec![(MsgKind::WriteImm, 3329)],
        a_acts: vec![NetAct::Delay(34)],
        b_acts: vec![],
        outages: vec![
            Outage {
                ev: 0,
                start_ns: 0,
                len_ns: 100_000,
                kind: OutageKind::LocalPort,
            },
            Outage {
                ev: 0,
                start_ns: 65_535_000,
                len_ns: 1_535_000,
                kind: OutageKind::LocalPort,
            },
        ],
        permanent: vec![(0, 40_591_000), (0, 0)],
    };
    let r = run(&s).unwrap();
    assert_eq!(r.succeeded, 0);
}
