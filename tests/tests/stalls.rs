//! Issue 16 on the virtual clock: the mechanisms behind what real sockets showed.
//!
//! * A receiver whose application stalls (it stops posting receives) while the sender
//!   reuses its slots at TX depth, with an RTO during the stall: every WRITE_WITH_IMM
//!   completion names data that is still in its slot (the `--verify` corruption: the
//!   receiver used to acknowledge messages it could not complete, the sender reused their
//!   slots, and the completions raised later named overwritten bytes).
//! * A peer paused for 2 s is survived under a 5 s unresponsive budget whatever the RTO
//!   floor, ceiling and retry count; a dead one fails exactly when the budget ends, with
//!   the cause named.
//! * A NACK that answers an earlier copy of a PSN neither resends the copy in flight nor
//!   charges its EV or the controller.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{Action, NetConfig, PacketInfo, Pair, Side, conn_config, craft};
use mrc_transport::path::PathState;
use mrc_transport::send::{GiveUp, SendConfig};
use mrc_transport::stats::DropReason;
use mrc_transport::wire::{Body, NackReason, NackRepr, Opcode};
use mrc_transport::{Access, ConnState, Ecn, Sge, WcOpcode, WcStatus};

const MSG_BYTES: u32 = 64 << 10;
const SLOTS: u64 = 8;
const TX_DEPTH: u64 = 8;
const MESSAGES: u64 = 200;
/// Receives B posts at the start (mrc-perf: 2 x TX depth + 16).
const INITIAL_RECVS: u64 = 2 * TX_DEPTH + 16;

/// The byte at `off` of message `msg`'s pattern.
fn pattern_byte(msg: u64, off: u64) -> u8 {
    (msg.wrapping_mul(0x9E37_79B9)
        .wrapping_add(off.wrapping_mul(131))
        >> 3) as u8
}

/// Send config of a software datapath: RTO floor 20 ms, ceiling 100 ms, retry limit 7
/// (what mrc-perf ran with), optionally with an unresponsive budget.
fn send_cfg(budget_ns: Option<u64>) -> SendConfig {
    SendConfig {
        min_rto_ns: 20_000_000,
        initial_rto_ns: 80_000_000,
        max_rto_ns: 100_000_000,
        unresponsive_budget_ns: budget_ns,
        ..SendConfig::default()
    }
}

fn pair(budget_ns: Option<u64>, net: NetConfig) -> Pair<FixedWindow> {
    pair_with(send_cfg(budget_ns), net)
}

fn pair_with(send: SendConfig, net: NetConfig) -> Pair<FixedWindow> {
    let cc = || FixedWindowConfig::default().build();
    let mut ca = conn_config(0xA, 0xFF_FF00, 1, 16, 5);
    ca.send = send;
    let mut cb = conn_config(0xB, 0x12_3456, 3, 16, 6);
    cb.send = send;
    Pair::new(ca, cc(), cb, cc(), net)
}

/// What the stalled-receiver run saw.
#[derive(Debug, PartialEq, Eq)]
struct StallOutcome {
    /// Receiver completions checked, in immediate order.
    checked: u64,
    /// Bytes of checked slots that differed from their message's pattern.
    bad_bytes: u64,
    /// Sender completions, all `Success`.
    sent_ok: u64,
    /// NACK(RECEIVER_NOT_READY)s B sent and A acted on.
    rnr_nacks: (u64, u64),
    /// RTO expiries at A.
    timeouts: u64,
    /// Retransmissions at A.
    retransmitted: u64,
    /// Virtual time at the end, ns.
    end_ns: u64,
}

/// The bw test of mrc-perf on the virtual clock: A writes message `i` (pattern `i`) with
/// immediate `i` into slot `i % SLOTS` of B's region, TX depth 8; B checks the slot when
/// the completion is raised (as the engine's `--verify` does) and reposts one receive per
/// completion, except that its application stalls from 200 us to 1.5 s (no reposts). The
/// network drops every datagram from 300 us to 40 ms, so A's RTO fires during the stall.
fn stalled_receiver_run() -> StallOutcome {
    let mut p = pair(
        None,
        NetConfig {
            seed: 3,
            ..NetConfig::default()
        },
    );
    p.script(|i: &PacketInfo| {
        if (300_000..40_000_000).contains(&i.now_ns) {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    let region = (SLOTS * u64::from(MSG_BYTES)) as usize;
    let src =
        p.a.regions_mut()
            .register(region, Access::LOCAL_WRITE)
            .unwrap();
    let dst =
        p.b.regions_mut()
            .register(region, Access::REMOTE_WRITE)
            .unwrap();
    let rbuf = p.b.regions_mut().register(1, Access::LOCAL_WRITE).unwrap();
    let recv = |p: &mut Pair<FixedWindow>, wr_id: u64| {
        p.b.post_recv(
            wr_id,
            Sge {
                lkey: rbuf.lkey,
                addr: rbuf.addr,
                len: 0,
            },
        )
        .unwrap();
    };
    for k in 0..INITIAL_RECVS {
        recv(&mut p, k);
    }
    let (mut posted, mut sent_ok) = (0u64, 0u64);
    let (mut checked, mut bad_bytes) = (0u64, 0u64);
    let mut owed_recvs = 0u64;
    let stall = 200_000..1_500_000_000u64;
    let mut steps = 0u64;
    let mut idle = 0u32;
    while sent_ok < MESSAGES || checked < MESSAGES {
        while posted < MESSAGES && posted - sent_ok < TX_DEPTH {
            let off = (posted % SLOTS) * u64::from(MSG_BYTES);
            let bytes = p.a.regions_mut().bytes_mut(src.lkey).unwrap();
            for (j, b) in bytes[off as usize..][..MSG_BYTES as usize]
                .iter_mut()
                .enumerate()
            {
                *b = pattern_byte(posted, j as u64);
            }
            p.a.post_write_with_imm(
                posted,
                Sge {
                    lkey: src.lkey,
                    addr: src.addr + off,
                    len: MSG_BYTES,
                },
                dst.addr + off,
                dst.rkey,
                posted as u32,
            )
            .unwrap();
            posted += 1;
        }
        if p.step() {
            idle = 0;
        } else if p.now_ns < stall.end {
            // nothing happens until the application wakes up
            p.now_ns = stall.end;
        } else {
            // a receive just posted may complete a message without any event
            idle += 1;
            assert!(idle < 1000, "nothing left to happen at {} ns", p.now_ns);
        }
        steps += 1;
        assert!(steps < 50_000_000, "no end at {} ns", p.now_ns);
        for c in p.a_completions() {
            assert_eq!((c.wr_id, c.status), (sent_ok, WcStatus::Success));
            sent_ok += 1;
        }
        // the receiver's completions are checked when raised, stall or not
        for c in p.b_completions() {
            assert_eq!(c.opcode, WcOpcode::RecvRdmaWithImm);
            let imm = u64::from(c.imm.unwrap());
            assert_eq!(imm, checked);
            let off = (imm % SLOTS) * u64::from(MSG_BYTES);
            let slot = &p.b.regions().bytes(dst.lkey).unwrap()[off as usize..];
            bad_bytes += slot[..MSG_BYTES as usize]
                .iter()
                .enumerate()
                .filter(|&(j, &b)| b != pattern_byte(imm, j as u64))
                .count() as u64;
            checked += 1;
            owed_recvs += 1;
        }
        if !stall.contains(&p.now_ns) {
            for _ in 0..owed_recvs {
                recv(&mut p, INITIAL_RECVS + checked);
            }
            owed_recvs = 0;
        }
    }
    let (a, b) = (p.a.stats(), p.b.stats());
    StallOutcome {
        checked,
        bad_bytes,
        sent_ok,
        rnr_nacks: (b.rnr_nacks_sent, a.rnr_nacks_received),
        timeouts: a.timeouts,
        retransmitted: a.retransmitted,
        end_ns: p.now_ns,
    }
}

#[test]
fn a_stalled_receiver_never_completes_a_slot_the_sender_reused() {
    let o = stalled_receiver_run();
    // Every message checked once, in order, with its own bytes. During the stall the 32
    // posted receives run out: the last packet of each later message is refused with an
    // RNR NACK (resent every 640 us: 17,880 times) until the application posts again at
    // 1.5 s; the blackout's two RTO expiries resend 249 packets. Before the RNR rule the
    // same run ended with every message acknowledged by 61 ms and 8,060,928 bad bytes
    // (the receiver acknowledged messages it had no receive for, the sender reused their
    // slots, and the completions raised after the stall named later messages' bytes).
    assert_eq!(
        o,
        StallOutcome {
            checked: 200,
            bad_bytes: 0,
            sent_ok: 200,
            rnr_nacks: (17_880, 17_880),
            timeouts: 2,
            retransmitted: 17_880 + 249,
            end_ns: 1_501_123_090,
        }
    );
}

/// What a 4 MiB WRITE did through an outage.
#[derive(Debug, PartialEq, Eq)]
struct OutageOutcome {
    /// The sender's completion.
    done: Vec<(u64, WcStatus)>,
    /// Why the sender gave up, if it did.
    give_up: Option<GiveUp>,
    /// RTO expiries at A.
    timeouts: u64,
    /// Virtual time of the completion, ns.
    end_ns: u64,
    /// The destination holds the source.
    exact: bool,
}

/// A 4 MiB WRITE from A to B; every datagram either way sent in `dark` is lost (a paused
/// or dead peer: it neither receives nor answers).
fn outage(budget_ns: Option<u64>, dark: std::ops::Range<u64>) -> OutageOutcome {
    outage_with(send_cfg(budget_ns), dark).0
}

/// [`outage`] with `send` at both ends; also A's retransmissions.
fn outage_with(send: SendConfig, dark: std::ops::Range<u64>) -> (OutageOutcome, u64) {
    let mut p = pair_with(send, NetConfig::default());
    p.script(move |i: &PacketInfo| {
        if dark.contains(&i.now_ns) {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    let r = p.regions(4 << 20, 9);
    p.a.post_write(1, r.src_sge(0, 4 << 20), r.dst.addr, r.dst.rkey)
        .unwrap();
    let mut done = Vec::new();
    p.run_until(60_000_000_000, |p| {
        done.extend(p.a_completions().iter().map(|c| (c.wr_id, c.status)));
        !done.is_empty()
    });
    let o = OutageOutcome {
        done,
        give_up: p.a.give_up(),
        timeouts: p.a.stats().timeouts,
        end_ns: p.now_ns,
        exact: p.dst_matches(&r),
    };
    (o, p.a.stats().retransmitted)
}

#[test]
fn an_rto_probe_restarts_the_timer_and_resends_one_packet_per_expiry() {
    // The engine's RTO (rto_probe_oldest): through a 750 ms outage that begins when the
    // whole 4 MiB has been handed to the network (at 0 ns; its SACKs are lost), each expiry
    // resends only the oldest packet and restarts the timer. Regression: the restart was missing, so
    // after the probe the next-oldest packet's old send time made the timer fire at once,
    // again and again (8,542 expiries in one 751 ms pause on real sockets).
    let send = SendConfig {
        rto_probe_oldest: true,
        ..send_cfg(Some(5_000_000_000))
    };
    let (o, retransmitted) = outage_with(send, 100_000..750_000_000);
    assert_eq!(
        o,
        OutageOutcome {
            done: vec![(1, WcStatus::Success)],
            give_up: None,
            // at 20, 60, 140 ms, then 100 ms apart; the tenth (840 ms) is answered
            // (without the restart: 5,099 expiries)
            timeouts: 10,
            end_ns: 840_106_317,
            exact: true,
        }
    );
    // one probe per expiry, and the tail loss probe before the first expiry
    assert_eq!(retransmitted, 11);
}

#[test]
fn a_peer_paused_for_2_s_is_survived_under_the_budget_and_not_under_a_retry_count() {
    // 2 s dark from 100 us on, RTO floor 20 ms and ceiling 100 ms: the retry limit of 7
    // gives up after 8 expiries (20 + 40 + 80 + 5 x 100 ms, so about 0.7 s), whatever
    // the application's timeout says; a 5 s budget resends at the ceiling until the
    // peer is back and completes.
    assert_eq!(
        outage(None, 100_000..2_100_000_000),
        OutageOutcome {
            done: vec![(1, WcStatus::RetryExceeded)],
            give_up: Some(GiveUp::RetryLimit { expiries: 8 }),
            timeouts: 8,
            end_ns: 640_101_980,
            // the data was all sent (and placed) before the outage; its SACKs were lost
            exact: true,
        }
    );
    assert_eq!(
        outage(Some(5_000_000_000), 100_000..2_100_000_000),
        OutageOutcome {
            done: vec![(1, WcStatus::Success)],
            give_up: None,
            // 20, 40, 80 ms, then every 100 ms: the 23rd expiry (at 2.14 s) is the first
            // after the peer is back at 2.1 s
            timeouts: 23,
            end_ns: 2_140_106_347,
            exact: true,
        }
    );
}

#[test]
fn a_dead_peer_fails_when_the_budget_ends_with_the_cause_named() {
    let o = outage(Some(5_000_000_000), 100_000..u64::MAX);
    assert_eq!(
        o,
        OutageOutcome {
            done: vec![(1, WcStatus::RetryExceeded)],
            give_up: Some(GiveUp::PeerUnresponsive {
                silent_ns: 5_000_000_000
            }),
            // at the 100 ms ceiling after 20, 40 and 80 ms
            timeouts: 51,
            // 5 s after the last SACK that got through (at 101,980 ns)
            end_ns: 5_000_101_980,
            exact: true,
        }
    );
    assert_eq!(
        o.give_up.unwrap().to_string(),
        "peer unresponsive for 5.0 s"
    );
}

/// (EV, send timestamp low 32 bits) of the first and the latest copy of `seq` at A.
fn copies(p: &Pair<FixedWindow>, seq: u64) -> ((u32, u32), (u32, u32)) {
    let pkt = *p.a.send_state().packet(seq).expect("tracked");
    let ev = |i: u16| p.a.paths().get(usize::from(i)).unwrap().ev;
    (
        (ev(pkt.orig_ev), pkt.orig_ts32),
        (ev(pkt.last_ev), pkt.last_ts32),
    )
}

/// A NACK from B (generation 3) to A (QPN 0xA) naming `psn` for `reason`, echoing `echo`.
fn nack_from_b(psn: u32, reason: NackReason, echo: (u32, u32)) -> Vec<u8> {
    craft(
        Opcode::Nack,
        0xA,
        psn,
        echo.0,
        0,
        3,
        7,
        Body::Nack(NackRepr {
            psn,
            reason,
            reserved: 0,
            echo_ev: echo.0,
            echo_ts_ns: echo.1,
        }),
    )
}

#[test]
fn a_nack_for_an_earlier_copy_neither_resends_nor_charges_the_copy_in_flight() {
    // One 4 KiB WRITE whose first copy is lost; its tail loss probe (the second copy) is
    // in flight when NACKs arrive.
    let mut p = pair(None, NetConfig::default());
    p.script(|i: &PacketInfo| {
        if i.from == Side::A && i.is_data {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    let r = p.regions(4096, 1);
    p.a.post_write(1, r.src_sge(0, 4096), r.dst.addr, r.dst.rkey)
        .unwrap();
    let seq = 0xFF_FF00;
    assert!(p.run_until(1_000_000_000, |p| p.a.stats().retransmitted == 1));
    let (first, latest) = copies(&p, seq);
    assert_ne!(first, latest);
    // An earlier copy: for each reason that resends, nothing changes but the count.
    for (k, reason) in [
        NackReason::Trimmed,
        NackReason::TrimmedLasthop,
        NackReason::NoPktBuffer,
        NackReason::ReceiverNotReady,
        NackReason::AccessError,
    ]
    .into_iter()
    .enumerate()
    {
        p.inject(
            Side::A,
            first.0,
            Ecn::NotEct,
            &nack_from_b(0xFF_FF00, reason, first),
        );
        let s = p.a.stats();
        assert_eq!(s.stale_nacks, k as u64 + 1, "{reason:?}");
        assert_eq!((s.trimmed, s.rnr_nacks_received), (0, 0), "{reason:?}");
        assert_eq!(p.a.state(), ConnState::Ready, "{reason:?}");
        assert_eq!(p.a.send_state().retransmit_queue().count(), 0, "{reason:?}");
        assert_eq!(p.a.send_state().in_flight_packets(), 1, "{reason:?}");
    }
    // Every EV unharmed: none trimmed, none out of rotation.
    assert!(p.a.paths().paths().iter().all(|e| e.stats.trimmed == 0));
    assert_eq!(p.a.paths().state_of(latest.0), Some(PathState::Good));
    // The same timestamp on another EV, or the EV with another timestamp, is not the copy.
    let other_ev = ((latest.0 + 1) % 16, latest.1);
    let other_ts = (latest.0, latest.1.wrapping_add(1));
    for echo in [other_ev, other_ts] {
        p.inject(
            Side::A,
            echo.0,
            Ecn::NotEct,
            &nack_from_b(0xFF_FF00, NackReason::Trimmed, echo),
        );
    }
    assert_eq!(p.a.stats().stale_nacks, 7);
    assert_eq!(p.a.send_state().retransmit_queue().count(), 0);
    // The latest copy's NACK acts: queued once, its EV charged with the trim.
    p.inject(
        Side::A,
        latest.0,
        Ecn::NotEct,
        &nack_from_b(0xFF_FF00, NackReason::Trimmed, latest),
    );
    assert_eq!(p.a.stats().trimmed, 1);
    assert_eq!(
        p.a.send_state().retransmit_queue().collect::<Vec<_>>(),
        vec![seq]
    );
    let idx = p.a.paths().index_of(latest.0).unwrap();
    assert_eq!(p.a.paths().get(idx).unwrap().stats.trimmed, 1);
    assert!(matches!(
        p.a.paths().state_of(latest.0),
        Some(PathState::Skip { .. })
    ));
    assert_eq!(p.b.stats().drops.get(DropReason::Duplicate), 0);
}

/// (spurious losses, retransmissions, reorder-window multiplier at the end, completion
/// time ns) of 16 x 1 MiB WRITEs when one data packet in 256 is held `hold_ns` on its way,
/// as a descheduled engine holds a socket's packets: the packets sprayed after it
/// overtake it by more than RACK's window.
fn slow_ev_run(adaptive: bool, hold_ns: u64) -> (u64, u64, u32, u64) {
    let send = SendConfig {
        adaptive_reorder_window: adaptive,
        ..send_cfg(None)
    };
    let mut p = pair_with(send, NetConfig::default());
    p.script(move |i: &PacketInfo| {
        if i.from == Side::A && i.is_data && i.copy == 0 && i.nth_data % 256 == 7 {
            Action::Delay(hold_ns)
        } else {
            Action::Deliver
        }
    });
    let r = p.regions(16 << 20, 4);
    for k in 0..16u64 {
        p.a.post_write(
            k,
            r.src_sge(k << 20, 1 << 20),
            r.dst.addr + (k << 20),
            r.dst.rkey,
        )
        .unwrap();
    }
    let mut done = 0;
    assert!(p.run_until(10_000_000_000, |p| {
        done += p.a_completions().len();
        done == 16
    }));
    let end_ns = p.now_ns;
    // the late originals still in the network arrive
    p.run_to_quiet(end_ns + 10_000_000);
    assert!(p.dst_matches(&r));
    let s = p.a.stats();
    (
        s.spurious,
        s.retransmitted,
        p.a.send_state().reorder_window_mult(),
        end_ns,
    )
}

#[test]
fn the_reorder_window_widens_on_spurious_losses() {
    // RFC 8985 6.2: each round trip with a spurious loss widens the window one step; once
    // wide enough, the slow EV's packets are late, not lost.
    // The holds are 300 us: RACK gives each packet at least its own EV's smoothed RTT,
    // and the flow's standing queue has those at 170-227 us, so holds of 200 us (this
    // test's before that rule) were never declared lost and the window never widened.
    // Without adaptation 13 copies are declared lost and resent for nothing (15
    // retransmissions); with it 5 (8 retransmissions) and the window widens to 4 x; the
    // run ends 24 us later all the same (it ended 38 us sooner when this test was
    // written). (Without adaptation 10 spurious and 1,616,004 ns before RACK's scan past
    // an acknowledged resend, `Rack::scan_end`; 11 spurious, 13 retransmissions and
    // 1,559,432 ns, with it 7 retransmissions, before every EV a SACK acknowledges took
    // its own RTT sample.)
    assert_eq!(
        (slow_ev_run(false, 300_000), slow_ev_run(true, 300_000)),
        ((13, 15, 1, 1_553_999), (5, 8, 4, 1_577_694))
    );
}

#[test]
fn a_receiver_that_never_posts_a_receive_fails_the_sender_when_the_budget_ends() {
    // A WRITE_WITH_IMM to a peer with no receive posted: every copy of its last packet is
    // answered NACK(RECEIVER_NOT_READY), every 640 us, for 5 s; then the sender gives up
    // with the cause named. Without the bound a forged RNR NACK stream, or a receiver that
    // never posts, held the work request forever.
    let mut p = pair(Some(5_000_000_000), NetConfig::default());
    let r = p.regions(4096, 2);
    p.a.post_write_with_imm(1, r.src_sge(0, 4096), r.dst.addr, r.dst.rkey, 7)
        .unwrap();
    let mut done = Vec::new();
    assert!(p.run_until(60_000_000_000, |p| {
        done.extend(p.a_completions().iter().map(|c| (c.wr_id, c.status)));
        !done.is_empty()
    }));
    assert_eq!(done, vec![(1, WcStatus::RetryExceeded)]);
    let give_up = p.a.give_up().unwrap();
    assert_eq!(
        give_up,
        GiveUp::ReceiverNotReady {
            waited_ns: 5_000_000_000
        }
    );
    assert_eq!(
        give_up.to_string(),
        "peer not ready to receive (no receive posted) for 5.0 s"
    );
    assert_eq!(p.now_ns, 5_000_000_000);
    // one RNR round per 640 us timer plus the round trip; no RTO expiry in between
    assert_eq!(
        (p.a.stats().rnr_nacks_received, p.a.stats().timeouts),
        (7_760, 0)
    );
    assert_eq!(p.b_completions(), vec![]);
}

/// Data packets a DCQCN sender (100 Gb/s, no congestion: it paces at line rate, one 4 KiB
/// packet per 331 ns) hands out when its caller polls only every 50 us, as a software
/// engine that sleeps between paced packets wakes up late: 300 us of polls. The sender's
/// DCQCN has no window (the paper's rate-only DCQCN), so pacing alone limits it: nothing
/// is acknowledged here, and `CcKind::Dcqcn`'s 4 x BDP window would stop it at 97 packets.
fn paced_packets_per_late_poll(pacing_burst_ns: u64) -> Vec<u64> {
    use mrc_congestion::{AnyController, CcKind, DcqcnConfig};
    use mrc_tests::ctl::{preset, test_link};
    let link = test_link();
    let mut ca = conn_config(0xA, 0, 1, 16, 5);
    ca.pacing_burst_ns = pacing_burst_ns;
    let cb = conn_config(0xB, 0, 3, 16, 6);
    let rate_only = DcqcnConfig {
        window_bytes: u64::MAX,
        ..DcqcnConfig::for_link(link.line_rate_bps, link.base_rtt_ns, link.mtu_bytes)
    };
    let mut p = Pair::new(
        ca,
        AnyController::Dcqcn(rate_only.build().unwrap()),
        cb,
        preset(CcKind::Dcqcn, &link),
        NetConfig::default(),
    );
    let r = p.regions(16 << 20, 1);
    p.a.post_write(1, r.src_sge(0, 16 << 20), r.dst.addr, r.dst.rkey)
        .unwrap();
    let mut buf = vec![0u8; 9000];
    let mut per_poll = Vec::new();
    for k in 1..=6u64 {
        let now = k * 50_000;
        let mut n = 0;
        while let Some(t) = p.a.poll_transmit(now, &mut buf) {
            if t.len > 4096 {
                n += 1;
            }
        }
        per_poll.push(n);
    }
    per_poll
}

#[test]
fn pacing_credit_lets_a_late_caller_catch_up_to_the_rate() {
    // Without credit: one packet per late poll (4 KiB per 50 us: 0.66 Gb/s of a 100 Gb/s
    // rate; on real loopback DCQCN ran at 2.4-2.7 Gb/s against 7-16 unpaced). With 50 us
    // of credit each poll sends the 50 us the rate allows: 151 packets of 331 ns (4148
    // bytes at 100 Gb/s), and the first poll one more, the packet due at once.
    assert_eq!(paced_packets_per_late_poll(0), vec![1; 6]);
    assert_eq!(
        paced_packets_per_late_poll(50_000),
        vec![152, 151, 151, 151, 151, 151]
    );
}

/// The chaos soak's stall after receive loss at the sender, on the virtual clock: a
/// 1.2 MiB WRITE (300 packets of 4 KiB); the network loses the first two copies of its
/// first packet and every datagram B sends from 25 us (when B has acknowledged packets
/// 1-63, the first SACK's bitmap) to 500 ms. A's RTO resends one packet per expiry, the
/// oldest first (`rto_probe_oldest`): packet 0 at 20 ms (lost again), then packets 64,
/// 65, ... whose first copies B has. Each such resend is a duplicate at B, and B answered
/// it with a SACK at rcv_nxt (the hole at packet 0) whose 64-bit bitmap cannot name a
/// packet 64 or more beyond: nothing was acknowledged after the loss ended, the expiries
/// walked through the packets in flight at one per 100 ms, and the unresponsive budget
/// ran out (RetryExceeded at 5.000027 s) before packet 0 came round again. Now the SACK answering
/// a far duplicate carries that packet's own bitmap block: the first resend after 500 ms
/// acknowledges its block, RACK declares packet 0 (sent before it) lost, and the WRITE
/// completes.
#[test]
fn a_resend_beyond_the_first_sack_bitmap_is_acknowledged() {
    let mut send = mrc_fabric::engine::software_send_config(20_000_000, 500_000);
    send.mtu_payload_bytes = 4096;
    let mut p = pair_with(send, NetConfig::default());
    let first_psn = 0xFF_FF00;
    p.script(move |i: &PacketInfo| {
        let lost_data = i.from == Side::A && i.is_data && i.psn == first_psn && i.copy < 2;
        let lost_answer = i.from == Side::B && (25_000..500_000_000).contains(&i.now_ns);
        if lost_data || lost_answer {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    let len = 300 * 4096;
    let r = p.regions(len, 11);
    p.a.post_write(1, r.src_sge(0, len as u32), r.dst.addr, r.dst.rkey)
        .unwrap();
    let mut done = Vec::new();
    p.run_until(60_000_000_000, |p| {
        done.extend(p.a_completions().iter().map(|c| (c.wr_id, c.status)));
        !done.is_empty()
    });
    let a = p.a.stats();
    assert_eq!(done, vec![(1, WcStatus::Success)]);
    assert!(p.dst_matches(&r));
    // expiries at 20, 60, 140, 240, 340, 440 and 540 ms (before: 51, and RetryExceeded
    // at 5,000,026,847 ns); the seventh's resend is acknowledged with its block and RACK
    // resends packet 0 at once
    // (540,035,523 ns before RACK's scan past an acknowledged resend)
    assert_eq!(p.now_ns, 540_035_555);
    // The acknowledged resend of the seventh expiry left after every packet still in
    // flight, so RACK declares them all lost (RFC 8985 orders by send time): 174, among
    // them packet 0 and the copies B had whose SACKs were lost (2 before RACK's scan went
    // past an acknowledged resend, `Rack::scan_end`, which stopped at the resend's PSN).
    assert_eq!((a.timeouts, a.rto_lost, a.rack_losses), (7, 7, 174));
    assert_eq!(a.retransmitted, 182);
}
