//! The connection driven by each production controller (DCQCN paces, Swift and NSCC
//! window): transfers complete byte-exact under trims, CE marks and loss, and the
//! controller receives every trim and CNP exactly once.

use mrc_congestion::{CcKind, Controller};
use mrc_tests::ctl::{preset, test_link};
use mrc_tests::harness::{Faults, NetConfig, Pair, conn_config};
use mrc_transport::WcStatus;

fn run(kind: CcKind) {
    let link = test_link();
    let cc = || preset(kind, &link);
    let net = NetConfig {
        faults: Faults {
            drop: 0.002,
            trim: 0.01,
            ce: 0.05,
            ..Faults::default()
        },
        seed: 31,
        ..NetConfig::default()
    };
    let mut p = Pair::new(
        conn_config(0xA, 0, 1, 8, 1),
        cc(),
        conn_config(0xB, 0, 1, 8, 2),
        cc(),
        net,
    );
    let r = p.regions(8 << 20, 3);
    for k in 0..8u64 {
        let off = k << 20;
        p.a.post_write(k, r.src_sge(off, 1 << 20), r.dst.addr + off, r.dst.rkey)
            .unwrap();
    }
    let mut done = Vec::new();
    let ok = p.run_until(10_000_000_000, |p| {
        done.extend(p.a_completions());
        done.len() == 8
    });
    assert!(ok, "{kind}: not done at {} ns", p.now_ns);
    let got: Vec<(u64, WcStatus)> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        (0..8).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>(),
        "{kind}"
    );
    assert!(p.dst_matches(&r), "{kind}");
    let m = p.a.controller().metrics();
    let s = p.a.stats();
    assert_eq!(m.trims_received, s.trimmed, "{kind}");
    assert_eq!(m.cnps_received, s.cnps_received, "{kind}");
}

#[test]
fn dcqcn_paces_and_completes() {
    run(CcKind::Dcqcn);
}

#[test]
fn swift_completes() {
    run(CcKind::Swift);
}

#[test]
fn nscc_completes() {
    run(CcKind::Nscc);
}

#[test]
fn fixed_window_completes() {
    run(CcKind::None);
}
