//! Acceptance 4, 5, 6 of issue 3: late packets, reordering across EVs, spurious losses,
//! a NACK overtaken by the SACK of the original.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::ctl::HalvingWindow;
use mrc_tests::harness::{Action, NetConfig, Pair, Side, conn_config, craft};
use mrc_transport::path::PathState;
use mrc_transport::stats::DropReason;
use mrc_transport::wire::{Body, NackReason, NackRepr, Opcode, SackRepr};
use mrc_transport::{Ecn, WcOpcode, WcStatus};

const MTU: u32 = 4096;

fn fixed_pair(n_evs: u32) -> Pair<FixedWindow> {
    let cc = || FixedWindowConfig::default().build();
    Pair::new(
        conn_config(0xA, 0, 1, n_evs, 1),
        cc(),
        conn_config(0xB, 0, 1, n_evs, 2),
        cc(),
        NetConfig::default(),
    )
}

#[test]
fn acceptance_4_late_psn_10_accepted_once_duplicate_dropped_message_completes_once() {
    let mut p = fixed_pair(2);
    let r = p.regions(200 * MTU as usize, 4);
    p.b.post_recv(70, r.recv_sge(0)).unwrap();
    p.b.post_recv(71, r.recv_sge(0)).unwrap();
    p.a.post_write_with_imm(1, r.src_sge(0, 200 * MTU), r.dst.addr, r.dst.rkey, 42)
        .unwrap();
    // PSN 10 arrives after all the others (80 us late, inside the RACK reorder window of
    // rtt + 50 us), and a second copy of it 20 us after that.
    p.script(|i| {
        if i.from == Side::A && i.is_data && i.psn == 10 {
            Action::DelayTwice(80_000, 100_000)
        } else {
            Action::Deliver
        }
    });
    p.run_to_quiet(10_000_000);
    assert_eq!(p.b.stats().received, 200);
    assert_eq!(p.b.stats().drops.get(DropReason::Duplicate), 1);
    assert_eq!(p.b.stats().drops.total(), 1);
    assert_eq!(p.b.recv_window().rcv_nxt(), 200);
    assert_eq!(p.a.stats().sent, 200);
    assert_eq!(p.a.stats().retransmitted, 0);
    assert_eq!(p.a.stats().acked, 200);
    assert_eq!(p.a.send_state().bytes_in_flight(), 0);
    assert!(p.dst_matches(&r));
    let a: Vec<(u64, WcStatus, u32)> = p
        .a_completions()
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len))
        .collect();
    assert_eq!(a, vec![(1, WcStatus::Success, 200 * MTU)]);
    let b: Vec<(u64, WcOpcode, u32, Option<u32>)> = p
        .b_completions()
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.byte_len, c.imm))
        .collect();
    assert_eq!(
        b,
        vec![(70, WcOpcode::RecvRdmaWithImm, 200 * MTU, Some(42))]
    );
}

fn halving_pair() -> Pair<HalvingWindow> {
    let cc = || HalvingWindow::new(1 << 20, 8192);
    Pair::new(
        conn_config(0xA, 0, 1, 2, 1),
        cc(),
        conn_config(0xB, 0, 1, 2, 2),
        cc(),
        NetConfig::default(),
    )
}

#[test]
fn acceptance_5_reordering_across_evs_within_the_window_is_not_loss() {
    let mut p = halving_pair();
    let r = p.regions(5 * MTU as usize, 5);
    p.a.post_write(1, r.src_sge(0, 5 * MTU), r.dst.addr, r.dst.rkey)
        .unwrap();
    // PSN 0 goes on EV 0, which is 10 us slower than EV 1: arrival order 1, 2, 3, 4, 0
    let mut order = Vec::new();
    p.script(|i| {
        if i.from == Side::A && i.is_data && i.psn == 0 {
            assert_eq!(i.ev, 0);
            Action::Delay(10_000)
        } else {
            Action::Deliver
        }
    });
    p.run_until(10_000_000, |p| {
        order.push(p.b.recv_window().rcv_nxt());
        false
    });
    assert_eq!(p.b.stats().received, 5);
    assert_eq!(p.a.stats().retransmitted, 0);
    assert_eq!(p.a.stats().rack_losses, 0);
    assert_eq!(p.a.stats().timeouts, 0);
    assert_eq!(p.a.stats().spurious, 0);
    let cc = p.a.controller();
    assert_eq!(cc.hooks.losses, 0);
    assert_eq!(cc.hooks.spurious, 0);
    assert_eq!(cc.cwnd_bytes, 1 << 20);
    assert_eq!(p.a.paths().state_of(0), Some(PathState::Good));
    // rcv_nxt stayed 0 until PSN 0 arrived, then jumped to 5
    assert!(order.contains(&0) && order.last() == Some(&5));
    assert!(!order.iter().any(|&n| (1..5).contains(&n)));
    assert!(p.dst_matches(&r));
    assert_eq!(p.a_completions().len(), 1);
}

#[test]
fn acceptance_5_early_loss_then_late_original_marks_spurious_and_restores_window() {
    let mut p = halving_pair();
    let r = p.regions(5 * MTU as usize, 6);
    p.a.post_write(1, r.src_sge(0, 5 * MTU), r.dst.addr, r.dst.rkey)
        .unwrap();
    // the original of PSN 0 is 100 us late (beyond rtt + 50 us: RACK declares it lost);
    // the retransmission is slower still, so the original arrives first
    p.script(|i| {
        if i.from == Side::A && i.is_data && i.psn == 0 {
            Action::Delay(if i.copy == 0 { 100_000 } else { 300_000 })
        } else {
            Action::Deliver
        }
    });
    p.run_to_quiet(10_000_000);
    let s = p.a.stats();
    assert_eq!(s.rack_losses, 1);
    // PSN 0 once (RACK), and one tail loss probe: the reorder window follows the measured
    // RTTs (no 50 us floor), so the probe timeout (2 SRTT + ack delay) comes before the
    // late original
    assert_eq!((s.retransmitted, s.tail_loss_probes), (2, 1));
    assert_eq!(s.spurious, 1);
    assert_eq!(s.timeouts, 0);
    let cc = p.a.controller();
    assert_eq!(cc.hooks.losses, 1);
    assert_eq!(cc.hooks.lost_bytes, 4096);
    assert_eq!(cc.hooks.spurious, 1);
    assert_eq!(cc.cwnd_bytes, 1 << 20);
    // one loss does not make EV 0 AssumedBad; it is Good
    assert_eq!(p.a.paths().state_of(0), Some(PathState::Good));
    assert_eq!(p.a.paths().paths()[0].stats.spurious, 1);
    // the retransmission of PSN 0 and the tail loss probe arrived as duplicates
    assert_eq!(p.b.stats().received, 5);
    assert_eq!(p.b.stats().drops.get(DropReason::Duplicate), 2);
    assert!(p.dst_matches(&r));
    assert_eq!(p.a_completions().len(), 1);
}

#[test]
fn acceptance_6_sack_of_the_original_overtakes_the_nack() {
    let mut p = fixed_pair(2);
    let r = p.regions(10 * MTU as usize, 7);
    p.a.post_write(1, r.src_sge(0, 10 * MTU), r.dst.addr, r.dst.rkey)
        .unwrap();
    // hold B's answers: A's first ten packets are in the network
    p.script(|i| {
        if i.from == Side::B {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    assert!(p.step());
    assert_eq!(p.a.stats().sent, 10);
    assert_eq!(p.a.send_state().bytes_in_flight(), 40_960);
    // B's NACK for PSN 5 (sent on EV 1) arrives: 5 is queued
    let nack = |psn| {
        craft(
            Opcode::Nack,
            0xA,
            psn,
            1,
            0,
            1,
            0,
            Body::Nack(NackRepr {
                psn,
                reason: NackReason::Trimmed,
                reserved: 0,
                echo_ev: 1,
                echo_ts_ns: 0,
            }),
        )
    };
    p.inject(Side::A, 1, Ecn::NotEct, &nack(5));
    assert_eq!(
        p.a.send_state().retransmit_queue().collect::<Vec<_>>(),
        vec![5]
    );
    assert_eq!(p.a.send_state().bytes_in_flight(), 40_960);
    // then the SACK that the original of 5 triggered (bitmap bit 5, echoing EV 1, ts 0)
    let sack = craft(
        Opcode::Sack,
        0xA,
        0,
        1,
        0,
        1,
        0,
        Body::Sack(SackRepr {
            cumulative_psn: 0,
            bitmap_base_psn: 0,
            bitmap: 1 << 5,
            echo_ev: 1,
            echo_ts_ns: 0,
            ecn_ce_count: 0,
            credit: 0,
        }),
    );
    p.inject(Side::A, 1, Ecn::NotEct, &sack);
    assert_eq!(p.a.send_state().retransmit_queue().count(), 0);
    assert_eq!(p.a.send_state().bytes_in_flight(), 40_960 - 4096);
    // a NACK for the acknowledged PSN 5 changes nothing
    let before = *p.a.stats();
    p.inject(Side::A, 1, Ecn::NotEct, &nack(5));
    assert_eq!(p.a.send_state().retransmit_queue().count(), 0);
    assert_eq!(p.a.send_state().bytes_in_flight(), 40_960 - 4096);
    assert_eq!(p.a.stats().retransmitted, before.retransmitted);
    // let B answer again; 5 is never resent
    let mut psn5_copies = 0;
    p.script(move |i| {
        if i.from == Side::A && i.is_data && i.psn == 5 {
            psn5_copies += 1;
            assert_eq!(psn5_copies, 0, "PSN 5 resent");
        }
        Action::Deliver
    });
    p.run_to_quiet(50_000_000);
    assert_eq!(p.a.stats().trimmed, 1);
    assert!(p.dst_matches(&r));
    let a: Vec<(u64, WcStatus)> = p
        .a_completions()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(a, vec![(1, WcStatus::Success)]);
}
