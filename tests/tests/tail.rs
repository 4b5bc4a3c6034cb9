//! Tail losses: a tail loss probe (RFC 8985 section 7) finds them instead of the RTO.

use mrc_congestion::FixedWindowConfig;
use mrc_tests::harness::{Action, NetConfig, Pair, Side, conn_config};
use mrc_transport::WcStatus;
use mrc_transport::stats::ConnStats;

/// A 16-packet WRITE (PSNs 1..=16) whose last two packets (15, 16) are lost the first time.
fn tail_loss(tlp: bool) -> (ConnStats, u64) {
    let cc = || FixedWindowConfig::default().build();
    let mut ca = conn_config(0xA, 0, 1, 4, 1);
    ca.send.tlp = tlp;
    let mut p = Pair::new(
        ca,
        cc(),
        conn_config(0xB, 0, 1, 4, 2),
        cc(),
        NetConfig::default(),
    );
    let r = p.regions(16 * 4096, 1);
    // a first message gives the sender an RTT sample
    p.a.post_write(0, r.src_sge(0, 4096), r.dst.addr, r.dst.rkey)
        .unwrap();
    p.run_to_quiet(1_000_000);
    p.script(|i| {
        if i.from == Side::A && i.is_data && (i.psn == 15 || i.psn == 16) && i.copy == 0 {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    let start = p.now_ns;
    p.a.post_write(1, r.src_sge(0, 16 * 4096), r.dst.addr, r.dst.rkey)
        .unwrap();
    let mut done = Vec::new();
    assert!(p.run_until(1_000_000_000, |p| {
        done.extend(p.a_completions());
        done.len() == 2
    }));
    assert_eq!(done[1].status, WcStatus::Success);
    assert!(p.dst_matches(&r));
    (*p.a.stats(), p.now_ns - start)
}

#[test]
fn tail_loss_probe_recovers_without_an_rto() {
    let (s, took_ns) = tail_loss(true);
    assert_eq!(s.tail_loss_probes, 1);
    assert_eq!(s.timeouts, 0);
    // the probe resends PSN 16; its SACK (echoing the probe) lets RACK declare 15 lost
    assert_eq!(s.rack_losses, 1);
    assert_eq!(s.retransmitted, 2);
    let (s0, took0_ns) = tail_loss(false);
    assert_eq!(s0.tail_loss_probes, 0);
    assert_eq!(s0.timeouts, 1);
    assert_eq!(s0.retransmitted, 2);
    // done 48.2 us after posting with the probe (the reorder window follows the measured
    // RTTs instead of a 50 us floor, so the probe and RACK come sooner; 75.5 us before);
    // 223 us (the 200 us minimum RTO) without
    assert_eq!((took_ns, took0_ns), (48_195, 223_308));
}
