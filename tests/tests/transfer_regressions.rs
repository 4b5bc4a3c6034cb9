//! Schedules the `transfer` fuzz target found failing, replayed verbatim through
//! `mrc_tests::transfer::run` (which checks exactly-once, in-order, byte-exact completion,
//! or RetryExceeded/Flushed when every EV is dark for good, and never a hang).

use mrc_congestion::CcKind;
use mrc_tests::transfer::{MsgKind, NetAct, Outage, OutageKind, Schedule, run};

/// Found by `transfer`: the only EV black-holed for good from 0 and denied from
/// 31.097 ms to 32.498 ms; DCQCN paces. While the EV was denied, `poll_timeout` kept
/// returning the pacing release time (in the past) because a retransmission was queued,
/// but `poll_transmit` had no EV to send it on: time stopped (a busy loop in a real event
/// loop).
#[test]
fn denied_only_ev_with_pacing_does_not_spin() {
    let s = Schedule {
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
