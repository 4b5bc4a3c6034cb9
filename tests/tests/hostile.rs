//! Acceptance 9 of issue 3: hostile and broken datagrams are dropped and counted by
//! reason, nothing is written, and the connection goes on.

use mrc_congestion::{FixedWindow, FixedWindowConfig};
use mrc_tests::harness::{NetConfig, Pair, Side, conn_config, craft};
use mrc_transport::stats::DropReason;
use mrc_transport::wire::{Body, DataRepr, MsgethRepr, Opcode, RethRepr};
use mrc_transport::{Access, ConnState, Ecn, WcStatus};

fn pair() -> Pair<FixedWindow> {
    let cc = || FixedWindowConfig::default().build();
    Pair::new(
        conn_config(0xA, 0, 1, 4, 1),
        cc(),
        conn_config(0xB, 0x70_0000, 2, 4, 2),
        cc(),
        NetConfig::default(),
    )
}

/// A one-packet RDMA WRITE from A's identity to B (QPN 0xB, generation 1).
fn write(psn: u32, addr: u64, rkey: u32, payload: &[u8]) -> Vec<u8> {
    craft(
        Opcode::RdmaWriteOnly,
        0xB,
        psn,
        0,
        0,
        1,
        0,
        Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len: payload.len() as u32,
                offset: 0,
            },
            reth: Some(RethRepr {
                virtual_addr: addr,
                rkey,
                dma_len: payload.len() as u32,
            }),
            imm: None,
            payload,
        }),
    )
}

#[test]
fn acceptance_9_hostile_datagrams_are_counted_and_nothing_is_written() {
    let mut p = pair();
    let r = p.regions(64 << 10, 9);
    let ro =
        p.b.regions_mut()
            .register(4096, Access::LOCAL_WRITE)
            .unwrap();
    let junk = [0xEEu8; 100];
    // B expects PSN 0 from A (A's initial PSN)
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        (
            "past the end",
            write(0, r.dst.addr + (64 << 10) - 10, r.dst.rkey, &junk),
        ),
        (
            "before the start",
            write(0, r.dst.addr - 1, r.dst.rkey, &junk),
        ),
        (
            "wrong rkey",
            write(0, r.dst.addr, r.dst.rkey ^ 0x0100, &junk),
        ),
        ("no remote write", write(0, ro.addr, ro.rkey, &junk)),
        (
            "far outside the window",
            write(0x40_0000, r.dst.addr, r.dst.rkey, &junk),
        ),
        ("wrong QPN", {
            let mut v = write(0, r.dst.addr, r.dst.rkey, &junk);
            v[7] ^= 0x01;
            v
        }),
        (
            "truncated in the BTH",
            write(0, r.dst.addr, r.dst.rkey, &junk)[..11].to_vec(),
        ),
        (
            "truncated in the RETH",
            write(0, r.dst.addr, r.dst.rkey, &junk)[..40].to_vec(),
        ),
        (
            "truncated payload",
            write(0, r.dst.addr, r.dst.rkey, &junk)[..150].to_vec(),
        ),
        ("unknown opcode", {
            let mut v = write(0, r.dst.addr, r.dst.rkey, &junk);
            v[0] = 0x77;
            v
        }),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in &hostile {
        let before = p.b.stats().drops.total();
        p.inject(Side::B, 0, Ecn::Ect0, bytes);
        assert_eq!(p.b.stats().drops.total(), before + 1, "{what} not counted");
    }
    let d = p.b.stats().drops;
    assert_eq!(d.get(DropReason::OutOfBounds), 2);
    assert_eq!(d.get(DropReason::BadRkey), 1);
    assert_eq!(d.get(DropReason::AccessDenied), 1);
    assert_eq!(d.get(DropReason::PsnOutOfWindow), 1);
    assert_eq!(d.get(DropReason::WrongQpn), 1);
    assert_eq!(d.get(DropReason::Malformed), 4);
    assert_eq!(d.get(DropReason::UnknownOpcode), 1);
    assert_eq!(d.total(), 11);
    // per EV: the crafted packets name EV 0; the 4 that do not parse name no EV
    assert_eq!(p.b.paths().paths()[0].stats.drops.total(), 7);
    assert_eq!(
        p.b.paths().paths()[0]
            .stats
            .drops
            .get(DropReason::OutOfBounds),
        2
    );
    assert_eq!(p.b.paths().paths()[1].stats.drops.total(), 0);
    // nothing was written anywhere, nothing was accepted
    assert!(
        p.b.regions()
            .bytes(r.dst.lkey)
            .unwrap()
            .iter()
            .all(|&b| b == 0)
    );
    assert!(
        p.b.regions()
            .bytes(ro.lkey)
            .unwrap()
            .iter()
            .all(|&b| b == 0)
    );
    assert_eq!(p.b.stats().received, 0);
    assert_eq!(p.b.recv_window().rcv_nxt(), 0);
    assert_eq!(p.b.state(), ConnState::Ready);
    // B answered the access errors and the out-of-window PSN with NACKs; they name PSNs
    // A never sent, so A drops them as invalid and goes on
    p.run_to_quiet(1_000_000);
    assert_eq!(p.b.stats().nacks_sent, 5);
    assert_eq!(p.a.stats().drops.get(DropReason::InvalidAck), 5);
    assert_eq!(p.a.state(), ConnState::Ready);
    // the connection goes on: a real 64 KiB WRITE lands exactly
    p.a.post_write(7, r.src_sge(0, 64 << 10), r.dst.addr, r.dst.rkey)
        .unwrap();
    p.run_to_quiet(10_000_000);
    assert!(p.dst_matches(&r));
    let a: Vec<(u64, WcStatus)> = p
        .a_completions()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(a, vec![(7, WcStatus::Success)]);
    assert_eq!(p.b.stats().received, 16);
    assert_eq!(p.b.stats().drops.total(), 11);
}

#[test]
fn acceptance_9_random_bytes_and_bit_flips_never_panic_and_are_counted() {
    use rand::{Rng, SeedableRng};
    let mut p = pair();
    let r = p.regions(16 << 10, 3);
    let good = write(0, r.dst.addr, r.dst.rkey, &[1u8; 64]);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(99);
    let mut injected = 0u64;
    for _ in 0..2000 {
        let mut v = good.clone();
        let flips = rng.random_range(1..4);
        for _ in 0..flips {
            let i = rng.random_range(0..v.len());
            v[i] ^= 1 << rng.random_range(0..8);
        }
        // never flip the generation (that is a peer restart, tested elsewhere)
        v[24..26].copy_from_slice(&good[24..26]);
        let cut = rng.random_range(0..=v.len());
        p.inject(Side::B, 0, Ecn::Ect0, &v[..cut]);
        injected += 1;
    }
    let s = p.b.stats();
    // every datagram was accepted as data, trim, SACK, NACK, CNP or probe, or dropped
    // (and counted) by reason
    let accounted = s.received
        + s.drops.total()
        + s.trimmed_received
        + s.sacks_received
        + s.nacks_received
        + s.cnps_received
        + s.probes_received;
    assert_eq!(accounted, injected);
    // seed 99: most cuts and flips break a length check
    assert_eq!(s.drops.get(DropReason::Malformed), 1964);
    assert_eq!(p.b.state(), ConnState::Ready);
    // whatever was written lies inside the registered destination region
    assert_eq!(p.b.regions().bytes(r.dst.lkey).unwrap().len(), 16 << 10);
}
