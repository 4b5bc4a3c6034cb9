//! Soak: every controller, both EV selections, 3% drop/duplicate/trim/CE, 20% reordering
//! up to 50 us, one EV black-holed from the start and one from 200 us, several seeds:
//! every work request completes exactly once, in order, byte-exact, on both sides.

use mrc_congestion::CcKind;
use mrc_tests::ctl::{preset, test_link};
use mrc_tests::harness::{Faults, NetConfig, Pair, conn_config};
use mrc_transport::WcStatus;
#[test]
fn soak_every_controller_under_harsh_faults() {
    let link = test_link();
    for seed in 0..16u64 {
        let kind = CcKind::ALL[(seed % 4) as usize];
        let cc = || preset(kind, &link);
        let net = NetConfig {
            faults: Faults {
                drop: 0.03,
                duplicate: 0.03,
                trim: 0.03,
                ce: 0.03,
                reorder: 0.2,
                reorder_max_ns: 50_000,
                black_holes: vec![((seed % 8) as u32, 200_000), (((seed + 3) % 8) as u32, 0)],
            },
            seed,
            ..NetConfig::default()
        };
        let mut ca = conn_config(0xA, (seed * 0x3F_FFFF) as u32 & 0xFF_FFFF, 1, 8, seed);
        ca.send.retry_limit = 30;
        ca.selection = if seed % 2 == 0 {
            mrc_transport::path::Selection::PowerOfTwo
        } else {
            mrc_transport::path::Selection::RoundRobin
        };
        let mut p = Pair::new(ca, cc(), conn_config(0xB, 7, 1, 8, seed + 1), cc(), net);
        let r = p.regions(4 << 20, seed);
        let n = 1 + (seed % 7);
        let chunk = (4u64 << 20) / n;
        for k in 0..n {
            p.b.post_recv(k, r.recv_sge(0)).unwrap();
            let len = if k == n - 1 {
                (4u64 << 20) - k * chunk
            } else {
                chunk
            };
            p.a.post_write_with_imm(
                k,
                r.src_sge(k * chunk, len as u32),
                r.dst.addr + k * chunk,
                r.dst.rkey,
                k as u32,
            )
            .unwrap();
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let ok = p.run_until(60_000_000_000, |p| {
            a.extend(p.a_completions());
            b.extend(p.b_completions());
            a.len() as u64 == n && b.len() as u64 == n
        });
        assert!(
            ok,
            "seed {seed} kind {kind}: a {a:?} b {b:?} t {}",
            p.now_ns
        );
        assert!(
            a.iter()
                .enumerate()
                .all(|(i, c)| c.wr_id == i as u64 && c.status == WcStatus::Success),
            "seed {seed}: {a:?}"
        );
        assert!(
            b.iter()
                .enumerate()
                .all(|(i, c)| c.wr_id == i as u64 && c.imm == Some(i as u32)),
            "seed {seed}: {b:?}"
        );
        assert!(p.dst_matches(&r), "seed {seed}");
    }
}
