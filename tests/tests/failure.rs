//! Failure paths: every path dead ends in error completions (never a hang); a denied EV
//! carries nothing; ECN-marked EVs are skipped for a rotation.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{Action, Faults, NetConfig, Pair, Regions, Side, conn_config};
use mrc_transport::path::PathState;
use mrc_transport::send::SendConfig;
use mrc_transport::{ConnState, WcStatus};

fn pair(net: NetConfig, n_evs: u32) -> Pair<FixedWindow> {
    let cc = || FixedWindowConfig::default().build();
    let mut ca = conn_config(0xA, 0, 1, n_evs, 1);
    ca.send = SendConfig {
        retry_limit: 3,
        ..SendConfig::default()
    };
    Pair::new(ca, cc(), conn_config(0xB, 0, 1, n_evs, 2), cc(), net)
}

/// Posts two 4096-byte WRITEs (wr_id 1, 2) that cannot get through, runs until both
/// complete: the first with RetryExceeded, the second Flushed, the connection in Error.
fn two_writes_fail(p: &mut Pair<FixedWindow>, r: &Regions) {
    p.a.post_write(1, r.src_sge(0, 4096), r.dst.addr, r.dst.rkey)
        .unwrap();
    p.a.post_write(2, r.src_sge(4096, 4096), r.dst.addr + 4096, r.dst.rkey)
        .unwrap();
    let mut done = Vec::new();
    assert!(p.run_until(10_000_000_000, |p| {
        done.extend(p.a_completions());
        done.len() == 2
    }));
    let got: Vec<(u64, WcStatus)> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RetryExceeded), (2, WcStatus::Flushed)]
    );
    assert_eq!(p.a.state(), ConnState::Error);
}

#[test]
fn all_paths_black_holed_fails_with_retry_exceeded_then_flushed() {
    let net = NetConfig {
        faults: Faults {
            black_holes: (0..4).map(|ev| (ev, 0)).collect(),
            ..Faults::default()
        },
        ..NetConfig::default()
    };
    let mut p = pair(net, 4);
    let r = p.regions(3 * 4096, 1);
    two_writes_fail(&mut p, &r);
    // initial RTO 1 ms, back-off 2, 4, 8 ms, the 4th expiry fails: 1 + 2 + 4 + 8 = 15 ms
    assert_eq!(p.now_ns, 15_000_000);
    assert_eq!(p.a.stats().timeouts, 4);
    assert_eq!(p.a.stats().sent, 2 + 3 * 2);
    // nothing more happens: no timers, no packets
    assert_eq!(p.a.poll_timeout(), None);
    assert!(
        p.a.post_write(3, r.src_sge(0, 1), r.dst.addr, r.dst.rkey)
            .is_err()
    );
}

/// Every EV denied by the datapath (at both ends) before anything is posted: nothing is
/// sent, yet the RTO runs from the first attempt to send and the retry limit fails the
/// work requests at exactly the time a black hole would (never a hang).
#[test]
fn all_evs_denied_fails_with_retry_exceeded_like_a_black_hole() {
    let mut p = pair(NetConfig::default(), 4);
    for ev in 0..4 {
        p.a.set_ev_denied(ev, true);
        p.b.set_ev_denied(ev, true);
    }
    let r = p.regions(2 * 4096, 1);
    two_writes_fail(&mut p, &r);
    // 1 + 2 + 4 + 8 ms: the 4th expiry exceeds retry limit 3
    assert_eq!(p.now_ns, 15_000_000);
    assert_eq!(p.a.stats().timeouts, 4);
    assert_eq!((p.a.stats().sent, p.net.sent), (0, 0));
    assert_eq!(p.a.poll_timeout(), None);
    assert_eq!(p.b.stats().received, 0);
}

#[test]
fn a_denied_ev_carries_nothing() {
    let mut p = pair(NetConfig::default(), 4);
    p.a.set_ev_denied(2, true);
    let r = p.regions(64 << 10, 2);
    p.a.post_write(1, r.src_sge(0, 64 << 10), r.dst.addr, r.dst.rkey)
        .unwrap();
    p.run_to_quiet(10_000_000);
    assert!(p.dst_matches(&r));
    let sent: Vec<u64> = p.a.paths().paths().iter().map(|e| e.stats.sent).collect();
    assert_eq!(sent, vec![6, 5, 0, 5]);
    assert_eq!(p.a.paths().state_of(2), Some(PathState::Denied));
}

#[test]
fn ecn_marked_ev_is_skipped_for_one_rotation() {
    let mut p = pair(NetConfig::default(), 4);
    let r = p.regions(8 * 4096, 3);
    // every data packet on EV 1 is CE-marked
    p.script(|i| {
        if i.from == Side::A && i.is_data && i.ev == 1 {
            Action::MarkCe
        } else {
            Action::Deliver
        }
    });
    p.a.post_write(1, r.src_sge(0, 4 * 4096), r.dst.addr, r.dst.rkey)
        .unwrap();
    p.run_to_quiet(10_000_000);
    assert_eq!(p.b.stats().ecn_ce_received, 1);
    assert_eq!(p.a.stats().ecn_marked, 1);
    assert_eq!(p.a.paths().paths()[1].stats.ecn_marked, 1);
    assert!(matches!(
        p.a.paths().state_of(1),
        Some(PathState::Skip { .. })
    ));
    // the next 4 packets: EV 1 sits out this rotation
    p.a.post_write(
        2,
        r.src_sge(4 * 4096, 4 * 4096),
        r.dst.addr + 4 * 4096,
        r.dst.rkey,
    )
    .unwrap();
    p.run_to_quiet(20_000_000);
    let sent: Vec<u64> = p.a.paths().paths().iter().map(|e| e.stats.sent).collect();
    assert_eq!(sent, vec![3, 1, 2, 2]);
    assert!(p.dst_matches(&r));
    assert_eq!(p.a_completions().len(), 2);
}

#[test]
fn sender_window_larger_than_the_receivers_converges() {
    let cc = || FixedWindowConfig::default().build();
    let mut ca = conn_config(0xA, 0, 1, 4, 1);
    ca.send.max_outstanding_packets = 2048;
    let mut cb = conn_config(0xB, 0, 1, 4, 2);
    cb.recv_window_packets = 256;
    let mut p = Pair::new(ca, cc(), cb, cc(), NetConfig::default());
    let r = p.regions(4 << 20, 4);
    // PSN 0 is lost once, so rcv_nxt stays 0 while the sender's burst runs past 256
    p.script(|i| {
        if i.from == Side::A && i.is_data && i.psn == 0 && i.copy == 0 {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    p.a.post_write(1, r.src_sge(0, 4 << 20), r.dst.addr, r.dst.rkey)
        .unwrap();
    let mut done = Vec::new();
    assert!(p.run_until(1_000_000_000, |p| {
        done.extend(p.a_completions());
        !done.is_empty()
    }));
    assert_eq!(done[0].status, WcStatus::Success);
    assert!(p.dst_matches(&r));
    // the burst's PSNs 256..=1023 were refused once each (768), the sender learnt the
    // window of 256 and resent them as the window moved, with no further refusals
    let oow =
        p.b.stats()
            .drops
            .get(mrc_transport::stats::DropReason::PsnOutOfWindow);
    assert_eq!(oow, 768);
    assert_eq!(p.a.send_state().config().max_outstanding_packets, 256);
    assert_eq!(p.a.stats().retransmitted, 1 + 768);
    // the 1024-packet burst needs 340 us on the 100 Gb/s link, more than the 200 us RTO:
    // one RTO expiry while the burst's tail is still queued in the link (those packets are
    // refused as out of window when they arrive and resent once, within the 768)
    assert_eq!(p.a.stats().timeouts, 1);
    assert_eq!(p.a.stats().rack_losses, 1);
}
