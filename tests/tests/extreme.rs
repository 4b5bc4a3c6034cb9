//! Extreme network settings beyond the other scenario tests: half of every datagram lost
//! both ways, heavy reordering on a single EV, 50% duplication, MTU 256 with 1 MiB
//! messages, thousands of one-byte messages. Every work request completes exactly once,
//! in order, byte-exact, and the receiver accepts every data PSN exactly once.

use mrc_congestion::{CcKind, LinkParams};
use mrc_tests::ctl::{preset, test_link};
use mrc_tests::harness::{Faults, NetConfig, Pair, conn_config};
use mrc_transport::send::msg::packets_for;
use mrc_transport::{WcOpcode, WcStatus};

struct Case {
    faults: Faults,
    n_evs: u32,
    mtu: u32,
    /// Message lengths, bytes (WRITE_WITH_IMM each, packed back to back).
    msgs: Vec<u32>,
    cc: CcKind,
    seed: u64,
    go_back_n: bool,
}

/// Plays `c`; returns (virtual end time ns, packets the receiver accepted).
fn play(c: &Case) -> (u64, u64) {
    let link = LinkParams {
        mtu_bytes: u64::from(c.mtu),
        ..test_link()
    };
    let cc = || preset(c.cc, &link);
    let net = NetConfig {
        faults: c.faults.clone(),
        seed: c.seed,
        ..NetConfig::default()
    };
    let mut ca = conn_config(0xA, 0xFF_FFF0, 1, c.n_evs, c.seed);
    ca.send.mtu_payload_bytes = c.mtu;
    ca.send.retry_limit = 60;
    ca.go_back_n = c.go_back_n;
    let mut cb = conn_config(0xB, 9, 2, c.n_evs, c.seed + 1);
    cb.send.mtu_payload_bytes = c.mtu;
    cb.send.retry_limit = 60;
    cb.go_back_n = c.go_back_n;
    let total: u64 = c.msgs.iter().map(|&l| u64::from(l)).sum();
    let mut p = Pair::new(ca, cc(), cb, cc(), net);
    let r = p.regions(total as usize, c.seed);
    let mut off = 0u64;
    for (k, &len) in c.msgs.iter().enumerate() {
        p.b.post_recv(k as u64, r.recv_sge(0)).unwrap();
        p.a.post_write_with_imm(
            k as u64,
            r.src_sge(off, len),
            r.dst.addr + off,
            r.dst.rkey,
            k as u32,
        )
        .unwrap();
        off += u64::from(len);
    }
    let n = c.msgs.len();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let ok = p.run_until(600_000_000_000, |p| {
        a.extend(p.a_completions());
        b.extend(p.b_completions());
        a.len() == n && b.len() == n
    });
    assert!(
        ok,
        "no completion of all {n}: a {} b {} at {} ns",
        a.len(),
        b.len(),
        p.now_ns
    );
    for (i, w) in a.iter().enumerate() {
        assert_eq!((w.wr_id, w.status), (i as u64, WcStatus::Success), "{w:?}");
    }
    for (i, w) in b.iter().enumerate() {
        assert_eq!(w.wr_id, i as u64, "{w:?}");
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        assert_eq!(w.opcode, WcOpcode::RecvRdmaWithImm, "{w:?}");
        assert_eq!(w.imm, Some(i as u32), "{w:?}");
        assert_eq!(w.byte_len, c.msgs[i], "{w:?}");
    }
    assert!(p.dst_matches(&r));
    let end = p.now_ns;
    // Nothing more arrives later (no late completion, no second copy accepted).
    p.run_until(end + 10_000_000, |_| false);
    assert!(p.a_completions().is_empty() && p.b_completions().is_empty());
    let packets: u64 = c
        .msgs
        .iter()
        .map(|&l| u64::from(packets_for(l, c.mtu)))
        .sum();
    assert_eq!(p.b.stats().received, packets);
    assert_eq!(p.b.stats().received_bytes, total);
    (end, packets)
}

/// Every controller; the last in go-back-N mode.
#[test]
fn half_of_every_datagram_lost_both_ways() {
    for (seed, cc) in [
        (1, CcKind::None),
        (2, CcKind::Nscc),
        (3, CcKind::Dcqcn),
        (4, CcKind::Swift),
    ] {
        play(&Case {
            faults: Faults {
                drop: 0.5,
                ..Faults::default()
            },
            n_evs: 4,
            mtu: 4096,
            msgs: vec![65536, 1, 100_000, 4096],
            cc,
            seed,
            go_back_n: seed == 4,
        });
    }
}

#[test]
fn heavy_reordering_and_duplication_on_one_ev() {
    for seed in 0..4 {
        play(&Case {
            faults: Faults {
                duplicate: 0.5,
                reorder: 0.9,
                reorder_max_ns: 500_000,
                ..Faults::default()
            },
            n_evs: 1,
            mtu: 1024,
            msgs: vec![200_000, 3, 50_000],
            cc: CcKind::Nscc,
            seed,
            go_back_n: false,
        });
    }
}

#[test]
fn mtu_256_with_one_mib_messages_under_loss() {
    play(&Case {
        faults: Faults {
            drop: 0.02,
            reorder: 0.2,
            reorder_max_ns: 20_000,
            ..Faults::default()
        },
        n_evs: 8,
        mtu: 256,
        msgs: vec![1 << 20, 1 << 20],
        cc: CcKind::None,
        seed: 7,
        go_back_n: false,
    });
}

#[test]
fn thousands_of_one_byte_messages_with_trims_and_loss() {
    play(&Case {
        faults: Faults {
            drop: 0.1,
            trim: 0.1,
            duplicate: 0.1,
            reorder: 0.3,
            reorder_max_ns: 30_000,
            ..Faults::default()
        },
        n_evs: 16,
        mtu: 64,
        msgs: vec![1; 3000],
        cc: CcKind::Dcqcn,
        seed: 11,
        go_back_n: false,
    });
}

/// A network that trims every data packet (a switch whose trim threshold is below one
/// frame): each copy is answered by NACK(TRIMMED) and used to be resent at once, forever
/// (the RTO retry limit never runs out while NACKs answer). Now the first packet's 256th
/// NACK fails the work request with `RetryExceeded` and the rest `Flushed`.
#[test]
fn a_network_that_trims_everything_fails_instead_of_spinning() {
    let cc = || mrc_congestion::FixedWindowConfig::default().build();
    let net = NetConfig {
        faults: Faults {
            trim: 1.0,
            ..Faults::default()
        },
        seed: 3,
        ..NetConfig::default()
    };
    let mut p = Pair::new(
        conn_config(0xA, 0, 1, 4, 1),
        cc(),
        conn_config(0xB, 0, 2, 4, 2),
        cc(),
        net,
    );
    let r = p.regions(3 * 8192, 5);
    for k in 0..3u64 {
        p.b.post_recv(k, r.recv_sge(0)).unwrap();
        p.a.post_write_with_imm(
            k,
            r.src_sge(k * 8192, 8192),
            r.dst.addr + k * 8192,
            r.dst.rkey,
            k as u32,
        )
        .unwrap();
    }
    let mut a = Vec::new();
    let ok = p.run_until(10_000_000, |p| {
        a.extend(p.a_completions());
        a.len() == 3
    });
    assert!(ok, "still spinning at {} ns: {a:?}", p.now_ns);
    let st: Vec<(u64, WcStatus)> = a.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        st,
        [
            (0, WcStatus::RetryExceeded),
            (1, WcStatus::Flushed),
            (2, WcStatus::Flushed)
        ]
    );
    // Nothing was placed: every copy arrived trimmed.
    assert_eq!(p.b.stats().received, 0);
    assert_eq!(p.a.state(), mrc_transport::ConnState::Error);
    // The 6 packets go round in lockstep: each sent 256 times (255 retransmissions, each
    // answering a trim) before the 256th trim of the first ends it, 1.1 ms in.
    let s = p.a.stats();
    assert_eq!((s.sent, s.retransmitted, s.trimmed), (1536, 1530, 1530));
    assert_eq!(p.b.stats().trimmed_received, 1536);
    assert!(p.now_ns < 1_200_000, "{}", p.now_ns);
}
