//! Acceptance 7 and 8 of issue 3: trims, and a long transfer under seeded random faults
//! with a black-holed EV.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{Action, Faults, NetConfig, Pair, Side, conn_config};
use mrc_transport::path::PathState;
use mrc_transport::{WcOpcode, WcStatus};

fn pair(n_evs: u32, net: NetConfig) -> Pair<FixedWindow> {
    let cc = || FixedWindowConfig::default().build();
    Pair::new(
        conn_config(0xA, 0xFF_FF00, 1, n_evs, 11),
        cc(),
        conn_config(0xB, 0x12_3456, 3, n_evs, 12),
        cc(),
        net,
    )
}

#[test]
fn acceptance_7_every_tenth_packet_trimmed() {
    let mut p = pair(8, NetConfig::default());
    let r = p.regions(1 << 20, 7);
    p.a.post_write(1, r.src_sge(0, 1 << 20), r.dst.addr, r.dst.rkey)
        .unwrap();
    p.script(|i| {
        if i.from == Side::A && i.is_data && i.nth_data % 10 == 9 {
            Action::Trim
        } else {
            Action::Deliver
        }
    });
    p.run_to_quiet(100_000_000);
    // 256 packets; with t trims 256 + t are sent and t = (256 + t) / 10, so t = 28
    assert_eq!(p.net.trimmed, 28);
    assert_eq!(p.b.stats().trimmed_received, 28);
    assert_eq!(p.a.stats().trimmed, 28);
    assert_eq!(p.a.stats().retransmitted, 28);
    assert_eq!(p.a.stats().sent, 256 + 28);
    assert_eq!(p.a.stats().timeouts, 0);
    assert_eq!(p.a.stats().rack_losses, 0);
    assert_eq!(p.b.stats().received, 256);
    assert!(p.dst_matches(&r));
    let a: Vec<(u64, WcStatus, u32)> = p
        .a_completions()
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len))
        .collect();
    assert_eq!(a, vec![(1, WcStatus::Success, 1 << 20)]);
    // each retransmission went on another EV than the trimmed copy
    let per_ev_trims: u64 = p.a.paths().paths().iter().map(|e| e.stats.trimmed).sum();
    assert_eq!(per_ev_trims, 28);
}

/// Size of the acceptance-8 transfer. The issue asks for 64 MiB; that is what runs.
const TOTAL_BYTES: usize = 64 << 20;
const WR_BYTES: usize = 1 << 20;

#[test]
fn acceptance_8_seeded_faults_16_evs_and_a_black_hole() {
    let net = NetConfig {
        faults: Faults {
            drop: 0.01,
            duplicate: 0.01,
            trim: 0.01,
            ce: 0.0,
            // reordering up to 64 packets: 64 x 4148 bytes at 100 Gb/s = 21.2 us
            reorder: 0.05,
            reorder_max_ns: 21_238,
            black_holes: Vec::new(),
        },
        seed: 0x5EED,
        ..NetConfig::default()
    };
    let mut p = pair(16, net);
    let r = p.regions(TOTAL_BYTES, 8);
    let n_wr = (TOTAL_BYTES / WR_BYTES) as u64;
    for k in 0..n_wr {
        p.b.post_recv(1000 + k, r.recv_sge(0)).unwrap();
        let off = k * WR_BYTES as u64;
        p.a.post_write_with_imm(
            k,
            r.src_sge(off, WR_BYTES as u32),
            r.dst.addr + off,
            r.dst.rkey,
            k as u32,
        )
        .unwrap();
    }
    let mut a_done = Vec::new();
    let mut b_done = Vec::new();
    let mut holed: Option<u32> = None;
    let finished = p.run_until(10_000_000_000, |p| {
        a_done.extend(p.a_completions());
        b_done.extend(p.b_completions());
        if holed.is_none() && a_done.len() as u64 >= n_wr / 2 {
            // the busiest EV in rotation becomes a black hole from mid-transfer on (a
            // fixed EV may be out of use by then: after a trim it is left out of the
            // recycled EVs, and recycled entropy explores no other EV while some wait;
            // EV 7 was, once every EV a SACK acknowledges took its own RTT sample)
            let ev =
                p.a.paths()
                    .paths()
                    .iter()
                    .filter(|e| e.state == PathState::Good)
                    .max_by_key(|e| (e.stats.sent, e.ev))
                    .map(|e| e.ev)
                    .expect("an EV in rotation");
            holed = Some(ev);
            let now = p.now_ns;
            p.faults_mut().black_holes.push((ev, now));
        }
        a_done.len() as u64 == n_wr && b_done.len() as u64 == n_wr
    });
    assert!(finished, "transfer did not finish by {} ns", p.now_ns);
    let finish_ns = p.now_ns;
    let stats_at_finish = *p.a.stats();
    let holed = holed.expect("an EV black-holed mid-transfer");
    assert!(p.dst_matches(&r));
    let a: Vec<(u64, WcStatus)> = a_done.iter().map(|c| (c.wr_id, c.status)).collect();
    let want: Vec<(u64, WcStatus)> = (0..n_wr).map(|k| (k, WcStatus::Success)).collect();
    assert_eq!(a, want);
    let b: Vec<(u64, WcOpcode, u32, Option<u32>)> = b_done
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.byte_len, c.imm))
        .collect();
    let want: Vec<(u64, WcOpcode, u32, Option<u32>)> = (0..n_wr)
        .map(|k| {
            (
                1000 + k,
                WcOpcode::RecvRdmaWithImm,
                WR_BYTES as u32,
                Some(k as u32),
            )
        })
        .collect();
    assert_eq!(b, want);
    assert_eq!(p.b.stats().received_bytes, TOTAL_BYTES as u64);
    // the seed's run: EV 6 was the busiest at mid-transfer, and caught 103 frames
    assert_eq!(holed, 6);
    assert_eq!(p.a.paths().state_of(holed), Some(PathState::AssumedBad));
    assert_eq!(p.net.black_holed, 103);
    // nothing is completed twice afterwards
    p.run_to_quiet(p.now_ns + 1_000_000_000);
    assert_eq!(p.a_completions().len(), 0);
    assert_eq!(p.b_completions().len(), 0);
    eprintln!(
        "acceptance 8: EV {holed} black-holed, finished at {finish_ns} ns, net {:?}, a {stats_at_finish:?}",
        p.net
    );
    for e in p.a.paths().paths() {
        eprintln!("ev {} {:?} {:?}", e.ev, e.state, e.stats);
    }
}
