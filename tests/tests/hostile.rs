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

/// Blind forging of the MRCETH generation (RFC 5961 style), end to end over the 2 us
/// network: after a 1 MiB WRITE both ends are idle, and an off-path attacker who knows
/// both QPNs and generations but sees no traffic sends each end, every 200 us (A's base
/// RTO; B, which never sent data, has no RTT sample and the 1 ms initial RTO) for 1000
/// rounds, five packets in its peer's name with random PSNs: a WRITE, a SACK and a
/// NACK(TRIMMED) of random other generations, and NACK(GENERATION_MISMATCH)s of the
/// peer's generation and of another one. Nothing is in flight, so none is evidence of a
/// restart: each end drops and counts its 5000, and answers the 3000 that are neither
/// NACK(GENERATION_MISMATCH) nor of its peer's generation with a NACK(GENERATION_MISMATCH)
/// of its own, which the other end rejects too: 8000 rejected on each side, both stay up
/// and a second WRITE completes byte-exact.
#[test]
fn blind_generation_forging_on_idle_ends_is_counted_and_never_tears_down() {
    use mrc_transport::wire::{NackReason, NackRepr, SackRepr};
    use rand::{Rng, SeedableRng};
    let mut p = pair();
    let r = p.regions(2 << 20, 4);
    p.a.post_write(1, r.src_sge(0, 1 << 20), r.dst.addr, r.dst.rkey)
        .unwrap();
    p.run_to_quiet(1_000_000_000);
    let done: Vec<(u64, WcStatus)> = p
        .a_completions()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(done, vec![(1, WcStatus::Success)]);
    let rto = p.a.send_state().base_rto_ns();
    assert_eq!((rto, p.b.send_state().base_rto_ns()), (200_000, 1_000_000));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5961);
    // (target, its QPN, the generation the target expects from its peer)
    let ends = [(Side::A, 0xA, 2u16), (Side::B, 0xB, 1u16)];
    for _ in 0..1000 {
        let t = p.now_ns + rto;
        p.run_until(t, |_| false);
        p.now_ns = p.now_ns.max(t);
        for (side, qpn, peer_gen) in ends {
            let mut other_gen = || loop {
                let g: u16 = rng.random();
                if g != peer_gen {
                    break g;
                }
            };
            let (g1, g2, g3, g4) = (other_gen(), other_gen(), other_gen(), other_gen());
            let psn = |rng: &mut rand_chacha::ChaCha8Rng| rng.random_range(0..1u32 << 24);
            let (p1, p2, p3, p4) = (psn(&mut rng), psn(&mut rng), psn(&mut rng), psn(&mut rng));
            let nack = |psn, reason| {
                Body::Nack(NackRepr {
                    psn,
                    reason,
                    reserved: 0,
                    echo_ev: 0,
                    echo_ts_ns: 0,
                })
            };
            let sack = Body::Sack(SackRepr {
                cumulative_psn: p2,
                bitmap_base_psn: p2,
                bitmap: rng.random(),
                echo_ev: 0,
                echo_ts_ns: 0,
                ecn_ce_count: 0,
                credit: 0,
            });
            let data = Body::Data(DataRepr {
                msgeth: MsgethRepr {
                    message_len: 8,
                    offset: 0,
                },
                reth: Some(RethRepr {
                    virtual_addr: r.dst.addr,
                    rkey: r.dst.rkey,
                    dma_len: 8,
                }),
                imm: None,
                payload: &[0xEE; 8],
            });
            let gen_nack = NackReason::GenerationMismatch;
            let forged = [
                craft(Opcode::RdmaWriteOnly, qpn, p1, 0, 0, g1, 0, data),
                craft(Opcode::Sack, qpn, p2, 0, 0, g2, 0, sack),
                craft(
                    Opcode::Nack,
                    qpn,
                    p3,
                    0,
                    0,
                    g3,
                    0,
                    nack(p3, NackReason::Trimmed),
                ),
                craft(Opcode::Nack, qpn, p4, 0, 0, peer_gen, 0, nack(p4, gen_nack)),
                craft(Opcode::Nack, qpn, p1, 0, 0, g4, 0, nack(p1, gen_nack)),
            ];
            for f in &forged {
                p.inject(side, 0, Ecn::Ect0, f);
            }
        }
    }
    p.run_to_quiet(p.now_ns + 1_000_000);
    for c in [&p.a, &p.b] {
        let s = c.stats();
        assert_eq!(c.state(), ConnState::Ready);
        assert_eq!(s.restart_evidence_rejected, 8000);
        assert_eq!(s.drops.get(DropReason::GenerationMismatch), 4000);
        assert_eq!(s.drops.get(DropReason::InvalidAck), 4000);
    }
    // B placed nothing of the forged WRITEs (1 MiB from the first WRITE only)
    assert_eq!(p.b.stats().received_bytes, 1 << 20);
    p.a.post_write(
        2,
        r.src_sge(1 << 20, 1 << 20),
        r.dst.addr + (1 << 20),
        r.dst.rkey,
    )
    .unwrap();
    p.run_to_quiet(p.now_ns + 1_000_000_000);
    let done: Vec<(u64, WcStatus)> = p
        .a_completions()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(done, vec![(2, WcStatus::Success)]);
    assert!(p.dst_matches(&r));
}
