//! Go-back-N (RoCE RC behaviour) next to selective repeat, same faults.

use mrc_congestion::FixedWindowConfig;
use mrc_tests::harness::{Action, Faults, NetConfig, Pair, Side, conn_config};
use mrc_transport::WcStatus;
use mrc_transport::stats::{ConnStats, DropReason};

fn transfer(
    go_back_n: bool,
    net: NetConfig,
    script_drop_psn: Option<u32>,
) -> (ConnStats, ConnStats, u64) {
    let cc = || FixedWindowConfig::default().build();
    let mut ca = conn_config(0xA, 0, 1, 4, 1);
    let mut cb = conn_config(0xB, 0, 1, 4, 2);
    ca.go_back_n = go_back_n;
    cb.go_back_n = go_back_n;
    let mut p = Pair::new(ca, cc(), cb, cc(), net);
    let r = p.regions(1 << 20, 1);
    p.a.post_write(1, r.src_sge(0, 1 << 20), r.dst.addr, r.dst.rkey)
        .unwrap();
    if let Some(psn) = script_drop_psn {
        p.script(move |i| {
            if i.from == Side::A && i.is_data && i.psn == psn && i.copy == 0 {
                Action::Drop
            } else {
                Action::Deliver
            }
        });
    }
    let mut done = Vec::new();
    assert!(p.run_until(10_000_000_000, |p| {
        done.extend(p.a_completions());
        !done.is_empty()
    }));
    assert_eq!(done[0].status, WcStatus::Success);
    assert!(p.dst_matches(&r));
    (*p.a.stats(), *p.b.stats(), p.now_ns)
}

#[test]
fn one_loss_costs_one_packet_selectively_and_the_rest_of_the_window_with_go_back_n() {
    let (sr_a, sr_b, _) = transfer(false, NetConfig::default(), Some(100));
    assert_eq!(sr_a.retransmitted, 1);
    assert_eq!(sr_b.drops.total(), 0);
    let (gbn_a, gbn_b, _) = transfer(true, NetConfig::default(), Some(100));
    // the receiver drops every packet after the hole until the resend (101..=255 were
    // already in flight: the whole 1 MiB fits the window) and NACKs once
    assert_eq!(gbn_b.drops.get(DropReason::OutOfOrderGoBackN), 155);
    assert_eq!(gbn_b.nacks_sent, 1);
    assert_eq!(gbn_a.nacks_received, 1);
    assert_eq!(gbn_a.retransmitted, 156);
    assert_eq!(gbn_b.received, 256);
}

#[test]
fn random_loss_side_by_side() {
    let net = || NetConfig {
        faults: Faults {
            drop: 0.01,
            ..Faults::default()
        },
        seed: 77,
        ..NetConfig::default()
    };
    let (sr, _, sr_ns) = transfer(false, net(), None);
    let (gbn, _, gbn_ns) = transfer(true, net(), None);
    // seed 77, 1% loss each way: 2 resends and 209 us selectively; 117 resends and
    // 127 us with go-back-N (a NACK(NO_BITMAP) takes the EV that lost the hole out of
    // rotation until a probe answers; before that, 215 resends and 332 us). The fixed
    // 1 MiB window (no congestion control) queues the whole transfer at the sender's
    // link, so the RTT samples spread over tens of us and the RACK reorder window, which
    // follows the measured delay variation, waits that out before declaring the two
    // losses (143 us with the former fixed 50 us window).
    assert_eq!(
        (sr.retransmitted, gbn.retransmitted, sr_ns, gbn_ns),
        (2, 117, 208_883, 127_469)
    );
}
