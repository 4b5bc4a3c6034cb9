//! Snapshot tests: the three controllers (and the fixed window) on the canonical trace.
//!
//! The snapshots (`tests/snapshots/*.snap`) hold the rows of the trajectory where the
//! window or the rate changed. Besides the snapshot, each test asserts a few exact facts of
//! the trajectory so a wrongly accepted snapshot would still be caught.

use mrc_congestion::trace::{
    CANONICAL_START_NS, Cause, TraceEvent, Trajectory, canonical_trace, replay,
};
use mrc_congestion::{Controller, DcqcnConfig, FixedWindowConfig, NsccConfig, SwiftConfig};

const LINE_RATE_BPS: u64 = 100_000_000_000;
const BASE_RTT_NS: u64 = 12_000;
const MTU_BYTES: u64 = 4096;

fn run<C: Controller>(cc: &mut C) -> Trajectory {
    replay(cc, &canonical_trace()).expect("canonical trace replays")
}

#[test]
fn dcqcn_paper_on_canonical_trace() {
    let mut cc = DcqcnConfig::paper(LINE_RATE_BPS).build().unwrap();
    let t = run(&mut cc);
    insta::assert_snapshot!("dcqcn_paper", t.render_changes());
    // Seven CNPs, 50 us apart (inside K = 55 us): alpha stays 1 and each halves the rate.
    let after_cnps: Vec<u64> = t
        .points
        .iter()
        .filter(|p| p.cause == Cause::Event(TraceEvent::Cnp))
        .map(|p| p.pacing_rate_bps)
        .collect();
    assert_eq!(
        after_cnps,
        (1..=7).map(|k| LINE_RATE_BPS >> k).collect::<Vec<_>>()
    );
    // Without bytes to drive the byte counter only the 55 us timer raises the rate: after
    // the last CNP (550 us, R_T := 1.5625 Gb/s) the 44 timer events up to 3 ms are 5 fast
    // recoveries and 39 additive increases of 40 Mb/s. Recovery is still under way.
    assert_eq!(cc.target_rate_bps(), 1_562_500_000 + 39 * 40_000_000);
    assert!(cc.pacing_rate_bps() < cc.target_rate_bps());
    assert_eq!(
        cc.next_timer_ns(),
        Some(CANONICAL_START_NS + 550_000 + 45 * 55_000)
    );
    assert!(t.points.iter().all(|p| p.cwnd_bytes == u64::MAX));
}

#[test]
fn dcqcn_connectx_on_canonical_trace() {
    let mut cc = DcqcnConfig::nvidia_connectx(LINE_RATE_BPS).build().unwrap();
    let t = run(&mut cc);
    insta::assert_snapshot!("dcqcn_connectx", t.render_changes());
    let m = cc.metrics();
    assert_eq!(m.cnps_received, 7);
    assert_eq!(m.decreases, 7);
}

#[test]
fn swift_on_canonical_trace() {
    let mut cc = SwiftConfig::for_link(LINE_RATE_BPS, BASE_RTT_NS, MTU_BYTES)
        .build()
        .unwrap();
    let t = run(&mut cc);
    insta::assert_snapshot!("swift", t.render_changes());
    let m = cc.metrics();
    // One SACK (the burst sent at 1 ms) has no echo.
    assert_eq!(m.rejected_rtt_samples, 1);
    assert_eq!(m.trims_received, 2);
    assert_eq!(m.lost_bytes, 4096);
    assert_eq!(m.bytes_in_flight, 0);
    // Starts at one BDP (150 000 bytes at 100 Gb/s x 12 us).
    assert_eq!(t.points[0].cwnd_bytes, 150_000);
}

#[test]
fn nscc_on_canonical_trace() {
    let mut cc = NsccConfig::for_link(LINE_RATE_BPS, BASE_RTT_NS, MTU_BYTES, true)
        .build()
        .unwrap();
    let t = run(&mut cc);
    insta::assert_snapshot!("nscc", t.render_changes());
    let m = cc.metrics();
    assert_eq!(m.rejected_rtt_samples, 1);
    assert_eq!(m.cnps_received, 7);
    assert_eq!(m.bytes_in_flight, 0);
    // Starts at the BDP at base RTT + target (12 + 9 us with trimming: 1.75 BDP); never
    // leaves [one MTU, 1.75 BDP].
    assert_eq!(t.points[0].cwnd_bytes, 262_500);
    assert!(
        t.points
            .iter()
            .all(|p| (4096..=262_500).contains(&p.cwnd_bytes))
    );
}

#[test]
fn fixed_window_on_canonical_trace_never_moves() {
    let mut cc = FixedWindowConfig {
        cwnd_bytes: 300_000,
    }
    .build();
    let t = run(&mut cc);
    assert_eq!(
        t.render_changes(),
        "time_ns cwnd_bytes pacing_rate_bps bytes_in_flight cause\n1000000 300000 - 16384 sent\n"
    );
}
