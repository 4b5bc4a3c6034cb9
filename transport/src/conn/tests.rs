use super::*;
use crate::completion::WcOpcode;
use crate::psn::Psn;
use crate::region::{Access, MrKey};
use crate::stats::DropReason;
use crate::wire::{Body, Opcode, PacketRepr};
use mrc_congestion::{FixedWindow, FixedWindowConfig};

type Conn = Connection<FixedWindow>;
/// Drops (None) or rewrites a datagram, with the ECN codepoint it arrives with.
type Filter<'a> = dyn FnMut(&[u8]) -> Option<(Vec<u8>, Ecn)> + 'a;

fn cfg(qpn: u32, psn: u32, generation: u16) -> ConnConfig {
    ConnConfig {
        local_qpn: qpn,
        initial_psn: Psn::new(psn),
        generation,
        evs: vec![100, 101, 102, 103],
        seed: u64::from(qpn),
        ..ConnConfig::default()
    }
}

fn pair() -> (Conn, Conn) {
    pair_with(cfg(0x22, 100, 7))
}

/// `pair()` with `b`'s configuration given (QPN 0x22, PSN 100, generation 7 as `a` expects).
fn pair_with(b_cfg: ConnConfig) -> (Conn, Conn) {
    pair_of(cfg(0x11, 0xFF_FFF0, 1), b_cfg)
}

/// Two connected ends of these configurations (`a`: QPN 0x11, PSN 0xFFFFF0, generation
/// 1; `b`: QPN 0x22, PSN 100, generation 7, as each expects of the other).
fn pair_of(a_cfg: ConnConfig, b_cfg: ConnConfig) -> (Conn, Conn) {
    let cc = || FixedWindowConfig::default().build();
    let mut a = Connection::new(a_cfg, cc()).unwrap();
    let mut b = Connection::new(b_cfg, cc()).unwrap();
    a.connect(PeerParams {
        qpn: 0x22,
        initial_psn: Psn::new(100),
        generation: 7,
    })
    .unwrap();
    b.connect(PeerParams {
        qpn: 0x11,
        initial_psn: Psn::new(0xFF_FFF0),
        generation: 1,
    })
    .unwrap();
    (a, b)
}

/// Moves every datagram both ways (zero delay) until both are quiet; `filter` may drop
/// (return None) or rewrite a datagram from a to b. Returns the opcodes a sent.
fn exchange(now: u64, a: &mut Conn, b: &mut Conn, filter: &mut Filter<'_>) -> Vec<Opcode> {
    // room for the largest datagram: 65000 bytes of payload, headers, trailer
    let mut buf = vec![0u8; 65_536];
    let mut sent = Vec::new();
    loop {
        let mut moved = false;
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            moved = true;
            let bytes = &buf[..t.len];
            sent.push(PacketRepr::parse(bytes).unwrap().bth.opcode);
            if let Some((out, ecn)) = filter(bytes) {
                b.handle_datagram(now, t.ev, ecn, &out);
            }
        }
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            moved = true;
            a.handle_datagram(now, t.ev, t.ecn, &buf[..t.len]);
        }
        if !moved {
            return sent;
        }
    }
}

fn pass(b: &[u8]) -> Option<(Vec<u8>, Ecn)> {
    Some((b.to_vec(), Ecn::Ect0))
}

/// What a trimming switch delivers of datagram `b`: the trim flag set, the payload cut.
fn trimmed(b: &[u8]) -> Option<(Vec<u8>, Ecn)> {
    let mut p = PacketRepr::parse(b).unwrap();
    p.bth.flags.trimmed = true;
    if let Body::Data(ref mut d) = p.body {
        d.payload = &[];
    }
    let mut out = vec![0u8; p.buffer_len()];
    p.emit(&mut out).unwrap();
    Some((out, Ecn::Ect0))
}

fn fill<C: Controller>(c: &mut Connection<C>, len: usize, seed: u8) -> MrKey {
    let k = c.regions_mut().register(len, Access::LOCAL_WRITE).unwrap();
    for (i, b) in c
        .regions_mut()
        .bytes_mut(k.lkey)
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
    k
}

/// Posts an RDMA WRITE of `len` bytes from the start of `src` to the start of `dst`.
/// A `len`-byte source region on `a` filled with pattern `seed` ([`fill`]), and a
/// `len`-byte destination region on `b` open to remote writes.
fn write_regions(a: &mut Conn, b: &mut Conn, len: usize, seed: u8) -> (MrKey, MrKey) {
    let src = fill(a, len, seed);
    let dst = b.regions_mut().register(len, Access::REMOTE_WRITE).unwrap();
    (src, dst)
}

fn write_whole(c: &mut Conn, wr_id: u64, src: &MrKey, dst: &MrKey, len: u32) {
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len,
    };
    c.post_write(wr_id, sge, dst.addr, dst.rkey).unwrap();
}

fn completions(c: &mut Conn) -> Vec<Completion> {
    std::iter::from_fn(|| c.poll_completion()).collect()
}

#[test]
fn write_with_imm_end_to_end_across_the_psn_wrap() {
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 40_000, 3);
    let rbuf = b.regions_mut().register(16, Access::LOCAL_WRITE).unwrap();
    b.post_recv(
        9,
        Sge {
            lkey: rbuf.lkey,
            addr: rbuf.addr,
            len: 16,
        },
    )
    .unwrap();
    a.post_write_with_imm(
        1,
        Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: 40_000,
        },
        dst.addr,
        dst.rkey,
        0xABCD,
    )
    .unwrap();
    let ops = exchange(0, &mut a, &mut b, &mut pass);
    // 40000 bytes = 9 full packets + 3136
    assert_eq!(ops.len(), 10);
    assert_eq!(ops[0], Opcode::RdmaWriteFirst);
    assert_eq!(ops[9], Opcode::RdmaWriteLastWithImmediate);
    assert_eq!(
        b.regions().bytes(dst.lkey).unwrap(),
        a.regions().bytes(src.lkey).unwrap()
    );
    assert_eq!(
        completions(&mut a),
        vec![Completion {
            wr_id: 1,
            opcode: WcOpcode::WriteWithImm,
            status: WcStatus::Success,
            byte_len: 40_000,
            imm: None
        }]
    );
    assert_eq!(
        completions(&mut b),
        vec![Completion {
            wr_id: 9,
            opcode: WcOpcode::RecvRdmaWithImm,
            status: WcStatus::Success,
            byte_len: 40_000,
            imm: Some(0xABCD)
        }]
    );
    // PSNs 0xFFFFF0..=0xFFFFF9: rcv_nxt at 0xFFFFFA
    assert_eq!(b.recv_window().rcv_nxt_psn(), Psn::new(0xFF_FFFA));
    assert_eq!(a.send_state().bytes_in_flight(), 0);
    assert_eq!(a.stats().sent, 10);
    assert_eq!(a.stats().acked, 10);
    assert_eq!(b.stats().received_bytes, 40_000);
    // 4 EVs round-robin: 3, 3, 2, 2 packets
    let per_ev: Vec<u64> = a.paths().paths().iter().map(|p| p.stats.sent).collect();
    assert_eq!(per_ev, vec![3, 3, 2, 2]);
    assert_eq!(b.stats().drops.total(), 0);
    assert_eq!(a.stats().drops.total(), 0);
}

#[test]
fn send_lands_in_the_posted_receive_and_zero_length_works() {
    let (mut a, mut b) = pair();
    let src = fill(&mut a, 5000, 1);
    let rbuf = b.regions_mut().register(8192, Access::LOCAL_WRITE).unwrap();
    a.post_send(
        1,
        Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: 5000,
        },
    )
    .unwrap();
    a.post_send_with_imm(
        2,
        Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: 0,
        },
        77,
    )
    .unwrap();
    exchange(0, &mut a, &mut b, &mut pass);
    // No receive posted yet: the first packet of the SEND is accepted, the two last packets
    // (the SEND's second, the zero-length SEND's only one) are answered with
    // NACK(RECEIVER_NOT_READY) and not acknowledged, so nothing completes on either side.
    assert_eq!(completions(&mut a), vec![]);
    assert_eq!(completions(&mut b), vec![]);
    assert_eq!(a.stats().sent, 3);
    assert_eq!(b.stats().received, 1);
    assert_eq!(b.stats().rnr_nacks_sent, 2);
    assert_eq!(b.stats().drops.get(DropReason::ReceiverNotReady), 2);
    assert_eq!(a.stats().rnr_nacks_received, 2);
    // the first packet's SACK is delayed (not urgent); the held two are not in flight
    assert_eq!(a.send_state().in_flight_packets(), 1);
    assert_eq!(a.send_state().rnr_deadline_ns(), Some(640_000));
    assert_eq!(a.poll_timeout(), Some(640_000));
    b.post_recv(
        10,
        Sge {
            lkey: rbuf.lkey,
            addr: rbuf.addr,
            len: 8192,
        },
    )
    .unwrap();
    b.post_recv(
        11,
        Sge {
            lkey: rbuf.lkey,
            addr: rbuf.addr + 6000,
            len: 100,
        },
    )
    .unwrap();
    // nothing leaves before the RNR timer; at it both held packets go again and land
    exchange(639_999, &mut a, &mut b, &mut pass);
    assert_eq!(a.stats().sent, 3);
    a.handle_timeout(640_000);
    exchange(640_000, &mut a, &mut b, &mut pass);
    assert_eq!(a.stats().sent, 5);
    assert_eq!(a.stats().retransmitted, 2);
    assert_eq!(a.stats().rack_losses + a.stats().timeouts, 0);
    let sent: Vec<(u64, WcStatus)> = completions(&mut a)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(sent, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    let got: Vec<(u64, WcOpcode, u32, Option<u32>)> = completions(&mut b)
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.byte_len, c.imm))
        .collect();
    assert_eq!(
        got,
        vec![
            (10, WcOpcode::Recv, 5000, None),
            (11, WcOpcode::Recv, 0, Some(77))
        ]
    );
    assert_eq!(
        &b.regions().bytes(rbuf.lkey).unwrap()[..5000],
        a.regions().bytes(src.lkey).unwrap()
    );
}

#[test]
fn a_send_beyond_the_staging_bound_waits_for_its_receive_and_then_lands_whole() {
    // b may stage two 4 KiB packets of SEND payload for a receive not posted
    let (mut a, mut b) = pair_with(ConnConfig {
        max_staged_bytes: 2 * crate::recv::staged_charge(4096),
        ..cfg(0x22, 100, 7)
    });
    let src = fill(&mut a, 40_000, 3);
    let rbuf = b
        .regions_mut()
        .register(40_000, Access::LOCAL_WRITE)
        .unwrap();
    a.post_send(
        1,
        Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: 40_000,
        },
    )
    .unwrap();
    exchange(0, &mut a, &mut b, &mut pass);
    // 10 packets: two staged, seven refused for staging, the last for no receive; each
    // refusal is a NACK(RECEIVER_NOT_READY), so the sender holds the eight
    assert_eq!(a.stats().sent, 10);
    assert_eq!(b.stats().received, 2);
    assert_eq!(b.stats().drops.get(DropReason::StagingFull), 7);
    assert_eq!(b.stats().drops.get(DropReason::ReceiverNotReady), 1);
    assert_eq!(b.stats().rnr_nacks_sent, 8);
    assert_eq!(a.stats().rnr_nacks_received, 8);
    assert_eq!(a.send_state().rnr_deadline_ns(), Some(640_000));
    assert_eq!(completions(&mut b), vec![]);
    b.post_recv(
        10,
        Sge {
            lkey: rbuf.lkey,
            addr: rbuf.addr,
            len: 40_000,
        },
    )
    .unwrap();
    a.handle_timeout(640_000);
    exchange(640_000, &mut a, &mut b, &mut pass);
    assert_eq!(a.stats().sent, 18);
    assert_eq!(a.stats().retransmitted, 8);
    assert_eq!(a.stats().rack_losses + a.stats().timeouts, 0);
    assert_eq!(
        completions(&mut a)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(
        completions(&mut b)
            .iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(10, WcOpcode::Recv, WcStatus::Success, 40_000)]
    );
    assert_eq!(
        b.regions().bytes(rbuf.lkey).unwrap(),
        a.regions().bytes(src.lkey).unwrap()
    );
}

#[test]
fn state_machine_and_post_checks() {
    let cc = FixedWindowConfig::default().build();
    let mut a = Connection::new(cfg(1, 0, 1), cc).unwrap();
    let k = fill(&mut a, 100, 0);
    let sge = Sge {
        lkey: k.lkey,
        addr: k.addr,
        len: 100,
    };
    assert_eq!(a.state(), ConnState::Init);
    assert_eq!(
        a.post_write(1, sge, 0, 0),
        Err(PostError::BadState(ConnState::Init))
    );
    assert_eq!(a.post_recv(1, sge), Ok(()));
    assert_eq!(a.close(), Err(StateError(ConnState::Init)));
    a.connect(PeerParams {
        qpn: 2,
        initial_psn: Psn::new(0),
        generation: 1,
    })
    .unwrap();
    assert_eq!(
        a.connect(PeerParams {
            qpn: 2,
            initial_psn: Psn::new(0),
            generation: 1
        }),
        Err(StateError(ConnState::Ready))
    );
    assert!(matches!(
        a.post_write(1, Sge { len: 101, ..sge }, 0, 0),
        Err(PostError::LocalAccess(_))
    ));
    a.close().unwrap();
    // nothing outstanding: closed at once, the posted receive flushed
    assert_eq!(a.state(), ConnState::Closed);
    assert_eq!(
        completions(&mut a),
        vec![Completion {
            wr_id: 1,
            opcode: WcOpcode::Recv,
            status: WcStatus::Flushed,
            byte_len: 0,
            imm: None
        }]
    );
    assert_eq!(
        a.post_send(2, sge),
        Err(PostError::BadState(ConnState::Closed))
    );
}

#[test]
fn draining_finishes_outstanding_work_then_closes() {
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 4096, 0);
    write_whole(&mut a, 5, &src, &dst, 4096);
    a.close().unwrap();
    assert_eq!(a.state(), ConnState::Draining);
    exchange(0, &mut a, &mut b, &mut pass);
    assert_eq!(a.state(), ConnState::Closed);
    assert_eq!(
        completions(&mut a)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect::<Vec<_>>(),
        vec![(5, WcStatus::Success)]
    );
}

#[test]
fn restarted_peer_gives_error_completions() {
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 8192, 0);
    write_whole(&mut a, 1, &src, &dst, 8192);
    write_whole(&mut a, 2, &src, &dst, 8192);
    // b restarts as generation 8 (same QPN, fresh state) before anything arrives
    let mut b2 = Connection::new(cfg(0x22, 100, 8), FixedWindowConfig::default().build()).unwrap();
    b2.connect(PeerParams {
        qpn: 0x11,
        initial_psn: Psn::new(0xFF_FFF0),
        generation: 1,
    })
    .unwrap();
    let dst2 = b2
        .regions_mut()
        .register(8192, Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(dst2.rkey, dst.rkey);
    // a's packets reach b2, whose generation a does not know: b2 accepts them (a is
    // generation 1 as expected), but its SACKs carry generation 8. One mismatched packet
    // is not proof (it could be forged), so a drops and counts it and keeps going.
    exchange(0, &mut a, &mut b2, &mut pass);
    assert_eq!(a.state(), ConnState::Ready);
    let early_drops = a.stats().drops.get(DropReason::GenerationMismatch);
    assert_eq!(early_drops, 1);
    assert_eq!(completions(&mut a), vec![]);
    // b2 keeps answering a's resends with generation 8: once the evidence is one base RTO
    // (the initial 1 ms: a has no RTT sample) old, a fails with GenerationMismatch.
    let mut failed_at = None;
    for _ in 0..10 {
        let Some(t) = a.poll_timeout() else { break };
        a.handle_timeout(t);
        exchange(t, &mut a, &mut b2, &mut pass);
        if a.state() == ConnState::Error {
            failed_at = Some(t);
            break;
        }
    }
    assert_eq!(failed_at, Some(1_000_000));
    let got: Vec<(u64, WcStatus)> = completions(&mut a)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::GenerationMismatch), (2, WcStatus::Flushed)]
    );
    // at 1 ms a probes its four EVs (the RTO made them AssumedBad) before resending; b2's
    // four probe replies of generation 8 echo no PSN (probe sequence numbers are easy to
    // guess), so they are dropped without counting as evidence; the SACK of the resent
    // packets that follows echoes a's PSNs in flight and fails a. (Before probe replies
    // stopped counting: the first probe reply failed a, 2 drops in all.)
    assert_eq!(a.stats().drops.get(DropReason::GenerationMismatch), 6);
    assert_eq!(a.stats().restart_evidence_rejected, 4);
    // b2 got a's NACK(GENERATION_MISMATCH)s, but it has nothing in flight for them to
    // echo: no evidence of a restart of a (and no work to fail).
    assert_eq!(b2.state(), ConnState::Ready);
    assert_eq!(a.stats().nacks_sent, 6);
    assert_eq!(b2.stats().restart_evidence_rejected, 6);
    assert_eq!(b2.stats().drops.get(DropReason::InvalidAck), 6);
    drop(b);
}

#[test]
fn one_forged_generation_does_not_kill_the_connection() {
    // An attacker who guesses the QPN sends a copy of a real packet with another
    // generation in the middle of a transfer: it is dropped and counted, and the transfer
    // completes; the real peer's packets keep the evidence from ever growing old.
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 64 * 1024, 3);
    write_whole(&mut a, 9, &src, &dst, 64 * 1024);
    let mut forged = 0;
    let mut forge = |bytes: &[u8]| {
        if forged < 3 {
            forged += 1;
            let mut f = bytes.to_vec();
            let off = crate::wire::Bth::<&[u8]>::LEN;
            if let Ok(mut m) = crate::wire::Mrceth::new_checked(&mut f[off..]) {
                m.set_generation(0xBAD);
            }
            Some((f, Ecn::Ect0))
        } else {
            Some((bytes.to_vec(), Ecn::Ect0))
        }
    };
    // The forged copies replace a's first three packets at b (b drops them); a's RTO and
    // b's SACKs of generation 1 recover them.
    exchange(0, &mut a, &mut b, &mut forge);
    let mut got: Vec<(u64, WcStatus)> = Vec::new();
    for _ in 0..20 {
        got.extend(completions(&mut a).iter().map(|c| (c.wr_id, c.status)));
        if !got.is_empty() {
            break;
        }
        let t = match (a.poll_timeout(), b.poll_timeout()) {
            (Some(x), Some(y)) => x.min(y),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => break,
        };
        a.handle_timeout(t);
        b.handle_timeout(t);
        exchange(t, &mut a, &mut b, &mut pass);
    }
    assert_eq!(a.state(), ConnState::Ready);
    assert_eq!(b.state(), ConnState::Ready);
    assert_eq!(b.stats().drops.get(DropReason::GenerationMismatch), 3);
    assert_eq!(got, vec![(9, WcStatus::Success)]);
}

/// A WRITE of three packets of `packet_bytes` from `a` to `b`, the second trimmed by a
/// switch: the receiver counts the trim, the sender resends that packet once (on another
/// EV than EV 101, its first) with no timeout, and the bytes and the completion arrive.
fn trim_the_second_of_three(a: &mut Conn, b: &mut Conn, packet_bytes: usize) {
    let (src, dst) = write_regions(a, b, 3 * packet_bytes, 0);
    write_whole(a, 1, &src, &dst, (3 * packet_bytes) as u32);
    let mut n = 0;
    let mut trim_second = |bytes: &[u8]| {
        n += 1;
        if n == 2 {
            return trimmed(bytes);
        }
        pass(bytes)
    };
    exchange(0, a, b, &mut trim_second);
    assert_eq!(b.stats().trimmed_received, 1);
    assert_eq!(a.stats().trimmed, 1);
    assert_eq!(a.stats().retransmitted, 1);
    assert_eq!(a.stats().timeouts, 0);
    let evs = a.paths().paths();
    assert_eq!(evs[1].stats.trimmed, 1);
    assert_eq!(evs.iter().map(|p| p.stats.retransmitted).sum::<u64>(), 1);
    assert_eq!(
        b.regions().bytes(dst.lkey).unwrap(),
        a.regions().bytes(src.lkey).unwrap()
    );
    assert_eq!(completions(a).len(), 1);
}

#[test]
fn trimmed_packet_is_nacked_and_resent_on_another_ev() {
    let (mut a, mut b) = pair();
    trim_the_second_of_three(&mut a, &mut b, 4096);
    // PSN 0xFFFFF1 went on EV 101 first, then on another EV; EV 101 was put in SKIP
    assert_eq!(a.paths().paths()[1].stats.retransmitted, 0);
}

/// Three 4 KiB packets, a switch trims the second; returns both ends and the virtual time
/// at which the WRITE completed. `trim_nacks` is the receiver's [`ConnConfig::trim_nacks`].
fn trim_second_of_three(trim_nacks: bool) -> (Conn, Conn, u64) {
    let (mut a, mut b) = pair_with(ConnConfig {
        trim_nacks,
        ..cfg(0x22, 100, 7)
    });
    let (src, dst) = write_regions(&mut a, &mut b, 3 * 4096, 0);
    write_whole(&mut a, 1, &src, &dst, 3 * 4096);
    let mut n = 0;
    let mut trim_second = |bytes: &[u8]| {
        n += 1;
        if n == 2 {
            return trimmed(bytes);
        }
        pass(bytes)
    };
    exchange(0, &mut a, &mut b, &mut trim_second);
    let mut done = Vec::new();
    let mut now = 0;
    loop {
        done.extend(completions(&mut a).iter().map(|c| (c.wr_id, c.status)));
        if !done.is_empty() {
            break;
        }
        let t = match (a.poll_timeout(), b.poll_timeout()) {
            (Some(x), Some(y)) => x.min(y),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => break,
        };
        now = t;
        a.handle_timeout(t);
        b.handle_timeout(t);
        exchange(t, &mut a, &mut b, &mut pass);
    }
    assert_eq!(done, [(1, WcStatus::Success)]);
    assert_eq!(
        b.regions().bytes(dst.lkey).unwrap(),
        a.regions().bytes(src.lkey).unwrap()
    );
    (a, b, now)
}

/// `trim_nacks` on (the default): the trimmed packet is NACKed and resent on the NACK;
/// off (a responder without trim NACK support): nothing answers it, and the sender's
/// loss detection (the gap the third packet's SACK shows) resends it. Both send exactly
/// 4 data packets.
#[test]
fn a_receiver_without_trim_nacks_leaves_the_trimmed_packet_to_loss_detection() {
    let (a, b, t_on) = trim_second_of_three(true);
    assert_eq!(b.stats().trimmed_received, 1);
    assert_eq!(b.stats().nacks_sent, 1);
    assert_eq!(a.stats().nacks_received, 1);
    assert_eq!(a.stats().trimmed, 1);
    assert_eq!(a.stats().sent, 4);
    assert_eq!(a.stats().retransmitted, 1);
    assert_eq!(a.stats().timeouts, 0);
    assert_eq!(a.stats().rack_losses, 0);
    assert_eq!(t_on, 0);

    let (a, b, t_off) = trim_second_of_three(false);
    assert_eq!(b.stats().trimmed_received, 1);
    assert_eq!(b.stats().nacks_sent, 0);
    assert_eq!(a.stats().nacks_received, 0);
    assert_eq!(a.stats().trimmed, 0);
    assert_eq!(a.stats().sent, 4);
    assert_eq!(a.stats().retransmitted, 1);
    // recovered by the SACK of the third packet (time-based detection: with zero delay
    // its reorder window has passed at once), not by the RTO
    assert_eq!(a.stats().rack_losses, 1);
    assert_eq!(a.stats().timeouts, 0);
    assert_eq!(t_off, 0);
    // the path that carried the trimmed copy was not put in SKIP for a trim
    assert_eq!(a.paths().paths()[1].stats.trimmed, 0);
}

/// A path that trims every copy: the packet is resent `nack_retry_limit - 1` times, and
/// the NACK of its `nack_retry_limit`-th copy fails the work request (it used to be resent
/// forever, never reaching the RTO retry limit).
#[test]
fn packet_trimmed_every_time_fails_after_the_nack_retry_limit() {
    let cc = || FixedWindowConfig::default().build();
    let mut ca = cfg(0x11, 0xFF_FFF0, 1);
    ca.send.nack_retry_limit = 5;
    let mut a = Connection::new(ca, cc()).unwrap();
    let mut b = Connection::new(cfg(0x22, 100, 7), cc()).unwrap();
    a.connect(PeerParams {
        qpn: 0x22,
        initial_psn: Psn::new(100),
        generation: 7,
    })
    .unwrap();
    b.connect(PeerParams {
        qpn: 0x11,
        initial_psn: Psn::new(0xFF_FFF0),
        generation: 1,
    })
    .unwrap();
    let (src, dst) = write_regions(&mut a, &mut b, 4096, 0);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 4096,
    };
    a.post_write(1, sge, dst.addr, dst.rkey).unwrap();
    a.post_write(2, sge, dst.addr, dst.rkey).unwrap();
    exchange(0, &mut a, &mut b, &mut trimmed);
    // Two packets, each sent 5 times (4 retransmissions); the 5th trim of the first ends it.
    assert_eq!(b.stats().trimmed_received, 10);
    assert_eq!(a.stats().sent, 10);
    assert_eq!(a.stats().retransmitted, 8);
    assert_eq!(a.stats().trimmed, 8);
    assert_eq!(a.state(), ConnState::Error);
    let c: Vec<(u64, WcStatus)> = completions(&mut a)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(c, [(1, WcStatus::RetryExceeded), (2, WcStatus::Flushed)]);
}

#[test]
fn ecn_ce_is_echoed_and_cnps_are_rate_limited() {
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 4 * 4096, 0);
    write_whole(&mut a, 1, &src, &dst, 4 * 4096);
    let mut ce = |bytes: &[u8]| Some((bytes.to_vec(), Ecn::Ce));
    exchange(0, &mut a, &mut b, &mut ce);
    assert_eq!(b.stats().ecn_ce_received, 4);
    assert_eq!(b.stats().cnps_sent, 1);
    assert_eq!(a.stats().cnps_received, 1);
    assert_eq!(a.stats().ecn_marked, 4);
    // 50 us later a CE mark gives the next CNP
    write_whole(&mut a, 2, &src, &dst, 4096);
    exchange(50_000, &mut a, &mut b, &mut ce);
    assert_eq!(b.stats().cnps_sent, 2);
}

#[test]
fn invalid_configs_are_typed_errors() {
    let new = |c: ConnConfig| Connection::new(c, FixedWindowConfig::default().build()).map(|_| ());
    let ok = cfg(1, 0, 1);
    assert_eq!(new(ok.clone()), Ok(()));
    assert_eq!(
        new(ConnConfig {
            evs: vec![],
            ..ok.clone()
        }),
        Err(ConfigError::EvCount(0))
    );
    assert_eq!(
        new(ConnConfig {
            local_qpn: 1 << 24,
            ..ok.clone()
        }),
        Err(ConfigError::Qpn(1 << 24))
    );
    let mut c = ok.clone();
    c.send.mtu_payload_bytes = 0;
    assert_eq!(new(c), Err(ConfigError::Mtu(0)));
    assert_eq!(
        new(ConnConfig {
            recv_window_packets: 0,
            ..ok.clone()
        }),
        Err(ConfigError::RecvWindow(0))
    );
    let mut c = ok.clone();
    c.send.max_outstanding_packets = (1 << 22) + 1;
    assert_eq!(new(c), Err(ConfigError::Outstanding((1 << 22) + 1)));
    let mut c = ok.clone();
    c.ack.sack_every_packets = 0;
    assert_eq!(new(c), Err(ConfigError::Zero("ack.sack_every_packets")));
    let mut c = ok;
    c.send.min_rto_ns = 2;
    c.send.max_rto_ns = 1;
    assert_eq!(
        new(c),
        Err(ConfigError::RtoBounds {
            min_ns: 2,
            max_ns: 1
        })
    );
}

/// Found by the `transfer` fuzz target: with pacing on and every EV denied, a queued
/// packet kept the pacing release time (by then in the past) in `poll_timeout` although
/// `poll_transmit` could not send it, so a caller driving timers spun at one instant.
#[test]
fn pacing_release_is_no_timer_while_every_ev_is_denied() {
    use mrc_congestion::DcqcnConfig;
    let cc = DcqcnConfig::paper(10_000_000_000).build().unwrap();
    let mut a = Connection::new(cfg(0x11, 5, 1), cc).unwrap();
    a.connect(PeerParams {
        qpn: 0x22,
        initial_psn: Psn::new(100),
        generation: 7,
    })
    .unwrap();
    let src = fill(&mut a, 3 * 4096, 9);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 3 * 4096,
    };
    a.post_write(1, sge, 0x1000, 0x77).unwrap();
    let mut buf = vec![0u8; 8192];
    let t = a.poll_transmit(1_000, &mut buf).unwrap();
    assert_eq!(t.len, 4096 + 52); // BTH 12 + MRCETH 16 + MSGETH 8 + RETH 16
    // paced at 10 Gb/s: the second packet may leave 4148 * 8 / 10 ns later
    assert!(a.poll_transmit(1_000, &mut buf).is_none());
    assert_eq!(a.poll_timeout(), Some(1_000 + 4148 * 8 / 10));
    for ev in 100..104 {
        a.set_ev_denied(ev, true);
    }
    let now = 500_000;
    assert!(a.poll_transmit(now, &mut buf).is_none());
    // only the RTO of the packet in flight (initial RTO 1 ms) is left
    assert_eq!(a.poll_timeout(), Some(1_000 + 1_000_000));
    a.set_ev_denied(101, false);
    assert_eq!(a.poll_timeout(), Some(1_000 + 4148 * 8 / 10));
    let t = a.poll_transmit(now, &mut buf).unwrap();
    assert_eq!(t.ev, 101);
}

/// A control packet from the peer (generation 7) to `a` (QPN 0x11).
fn from_peer(opcode: Opcode, psn: u32, body: Body<'_>) -> Vec<u8> {
    from_peer_gen(opcode, psn, 7, body)
}

/// A packet from the peer's QPN to `a` (QPN 0x11) with MRCETH generation `generation`.
fn from_peer_gen(opcode: Opcode, psn: u32, generation: u16, body: Body<'_>) -> Vec<u8> {
    use crate::wire::{BthFlags, BthRepr, BthSpare, MrcethRepr};
    let p = PacketRepr {
        bth: BthRepr {
            opcode,
            pkey: 0xFFFF,
            dest_qpn: 0x11,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 100,
            msn: 0,
            send_ts_ns: 0,
            generation,
            reserved: 0,
        },
        body,
    };
    let mut out = vec![0u8; p.buffer_len()];
    p.emit(&mut out).unwrap();
    out
}

/// What an off-path attacker who knows the QPNs (they are easy to guess) but sees no
/// traffic can send to kill `a`, one of each kind; PSNs as a sent them (0xFF_FFF0..=
/// 0xFF_FFF2, all acknowledged) or the next (0xFF_FFF3, never sent): a 1-byte RDMA WRITE
/// at `a`'s `rcv_nxt` (PSN 100, inside its receive window), a SACK acknowledging all a
/// sent, a NACK(TRIMMED) of the last PSN sent, and a CNP and a probe reply, all of
/// generation 0xBAD; and NACK(GENERATION_MISMATCH)s of the peer's generation 7 (naming
/// the last PSN sent) and of 0xBAD (naming the next one).
fn forgeries() -> Vec<Vec<u8>> {
    use crate::wire::{
        CnpRepr, DataRepr, MsgethRepr, NackReason, NackRepr, ProbeReplyRepr, RethRepr, SackRepr,
    };
    let bad = 0xBAD;
    let nack = |psn, reason| {
        Body::Nack(NackRepr {
            psn,
            reason,
            reserved: 0,
            echo_ev: 100,
            echo_ts_ns: 0,
        })
    };
    let data = DataRepr {
        msgeth: MsgethRepr {
            message_len: 1,
            offset: 0,
        },
        reth: Some(RethRepr {
            virtual_addr: 0,
            rkey: 1,
            dma_len: 1,
        }),
        imm: None,
        payload: &[0xEE],
    };
    let sack = SackRepr {
        cumulative_psn: 0xFF_FFF3,
        bitmap_base_psn: 0xFF_FFF3,
        bitmap: 0,
        echo_ev: 100,
        echo_ts_ns: 0,
        ecn_ce_count: 0,
        credit: 0,
    };
    let cnp = CnpRepr {
        echo_ev: 100,
        reserved: [0; 12],
    };
    let reply = ProbeReplyRepr {
        probe_seq: 1,
        echo_ev: 100,
        echo_ts_ns: 0,
    };
    vec![
        from_peer_gen(Opcode::RdmaWriteOnly, 100, bad, Body::Data(data)),
        from_peer_gen(Opcode::Sack, 0xFF_FFF3, bad, Body::Sack(sack)),
        from_peer_gen(
            Opcode::Nack,
            0xFF_FFF2,
            bad,
            nack(0xFF_FFF2, NackReason::Trimmed),
        ),
        from_peer_gen(Opcode::Cnp, 0, bad, Body::Cnp(cnp)),
        from_peer_gen(Opcode::EvProbeReply, 0, bad, Body::ProbeReply(reply)),
        from_peer_gen(
            Opcode::Nack,
            0xFF_FFF2,
            7,
            nack(0xFF_FFF2, NackReason::GenerationMismatch),
        ),
        from_peer_gen(
            Opcode::Nack,
            0xFF_FFF3,
            bad,
            nack(0xFF_FFF3, NackReason::GenerationMismatch),
        ),
    ]
}

/// Blind generation forging (RFC 5961 style): on an idle connection nothing is in flight,
/// so no forged packet echoes a PSN in flight and none is evidence of a peer restart.
/// Seven forgeries one base RTO apart for 100 RTOs: `a` stays up, every one is dropped and
/// counted, and a new WRITE completes. (Before, the second batch, one RTO after the
/// first, failed `a` with GenerationMismatch.) `a`'s NACK(GENERATION_MISMATCH) answers
/// reach `b`, which has nothing in flight either: rejected there too, `b` stays up.
#[test]
fn forged_generations_on_an_idle_connection_for_100_rtos_are_counted_drops() {
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 3 * 4096, 5);
    write_whole(&mut a, 1, &src, &dst, 3 * 4096);
    exchange(1_000, &mut a, &mut b, &mut pass);
    assert_eq!(
        completions(&mut a)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(
        (a.send_state().snd_una(), a.send_state().snd_nxt()),
        (0xFF_FFF3, 0xFF_FFF3)
    );
    // zero-delay RTT samples: the RTO is its 200 us floor
    let rto = a.send_state().base_rto_ns();
    assert_eq!(rto, 200_000);
    let forged = forgeries();
    let mut now = 0;
    for k in 0..100u64 {
        now = 10_000 + k * rto;
        for f in &forged {
            a.handle_datagram(now, 100, Ecn::Ect0, f);
        }
        a.handle_timeout(now);
        exchange(now, &mut a, &mut b, &mut pass);
        assert_eq!(a.state(), ConnState::Ready, "after batch {k}");
    }
    let s = a.stats();
    assert_eq!(s.restart_evidence_rejected, 700);
    assert_eq!(s.drops.get(DropReason::GenerationMismatch), 600);
    assert_eq!(s.drops.get(DropReason::InvalidAck), 100);
    assert_eq!(s.drops.total(), 700);
    // every forgery but the two NACK(GENERATION_MISMATCH)s is answered with one
    assert_eq!(s.nacks_sent, 500);
    assert_eq!(b.state(), ConnState::Ready);
    assert_eq!(b.stats().restart_evidence_rejected, 500);
    assert_eq!(b.stats().drops.get(DropReason::InvalidAck), 500);
    // nothing was written, nothing delivered, and the connection still carries data
    assert_eq!(s.received, 0);
    write_whole(&mut a, 2, &src, &dst, 3 * 4096);
    exchange(now + 1_000, &mut a, &mut b, &mut pass);
    assert_eq!(
        completions(&mut a)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect::<Vec<_>>(),
        vec![(2, WcStatus::Success)]
    );
}

/// What a forger has to guess: with PSNs 0xFF_FFF0..=0xFF_FFF2 in flight, a packet that
/// echoes one of them is evidence, and the same packet again one base RTO later (1 ms,
/// the initial RTO) fails `a`; one that echoes none is a counted drop however often it
/// comes. Each case on a fresh connection.
#[test]
fn only_packets_echoing_a_psn_in_flight_are_restart_evidence() {
    use crate::wire::{NackReason, NackRepr, SackRepr};
    let nack = |psn, reason| {
        Body::Nack(NackRepr {
            psn,
            reason,
            reserved: 0,
            echo_ev: 100,
            echo_ts_ns: 0,
        })
    };
    let sack = |cum, bitmap| {
        Body::Sack(SackRepr {
            cumulative_psn: cum,
            bitmap_base_psn: 0xFF_FFF0,
            bitmap,
            echo_ev: 100,
            echo_ts_ns: 0,
            ecn_ce_count: 0,
            credit: 0,
        })
    };
    let gen_nack = NackReason::GenerationMismatch;
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "NACK(GEN) of PSN in flight",
            from_peer_gen(Opcode::Nack, 0xFF_FFF1, 7, nack(0xFF_FFF1, gen_nack)),
            true,
        ),
        (
            "NACK(GEN) of PSN never sent",
            from_peer_gen(Opcode::Nack, 0xFF_FFF3, 7, nack(0xFF_FFF3, gen_nack)),
            false,
        ),
        (
            "NACK(GEN) of PSN below snd_una",
            from_peer_gen(Opcode::Nack, 0xFF_FFEF, 7, nack(0xFF_FFEF, gen_nack)),
            false,
        ),
        (
            "0xBAD NACK(TRIMMED) of PSN in flight",
            from_peer_gen(
                Opcode::Nack,
                0xFF_FFF2,
                0xBAD,
                nack(0xFF_FFF2, NackReason::Trimmed),
            ),
            true,
        ),
        (
            "0xBAD SACK cumulative",
            from_peer_gen(Opcode::Sack, 0xFF_FFF2, 0xBAD, sack(0xFF_FFF2, 0)),
            true,
        ),
        (
            "0xBAD SACK bitmap",
            from_peer_gen(Opcode::Sack, 0xFF_FFF0, 0xBAD, sack(0xFF_FFF0, 0b100)),
            true,
        ),
        (
            "0xBAD SACK of nothing",
            from_peer_gen(Opcode::Sack, 0xFF_FFF0, 0xBAD, sack(0xFF_FFF0, 0)),
            false,
        ),
        (
            "0xBAD SACK beyond snd_nxt",
            from_peer_gen(Opcode::Sack, 0xFF_FFF4, 0xBAD, sack(0xFF_FFF4, 0)),
            false,
        ),
        (
            "0xBAD SACK bitmap beyond snd_nxt",
            from_peer_gen(Opcode::Sack, 0xFF_FFF2, 0xBAD, sack(0xFF_FFF2, 0b1000)),
            false,
        ),
    ];
    let mut got = Vec::new();
    for (name, pkt, _) in &cases {
        let (mut a, _b) = pair();
        let src = fill(&mut a, 3 * 4096, 1);
        let sge = Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: 3 * 4096,
        };
        a.post_write(1, sge, 0x1000, 0x77).unwrap();
        let mut buf = vec![0u8; 8192];
        for _ in 0..3 {
            a.poll_transmit(1_000, &mut buf).unwrap();
        }
        a.handle_datagram(2_000, 100, Ecn::Ect0, pkt);
        a.handle_datagram(1_001_999, 100, Ecn::Ect0, pkt);
        assert_eq!(a.state(), ConnState::Ready, "{name}: not yet one RTO");
        a.handle_datagram(1_002_000, 100, Ecn::Ect0, pkt);
        let failed = a.state() == ConnState::Error;
        let rejected = a.stats().restart_evidence_rejected;
        assert_eq!(rejected, if failed { 0 } else { 3 }, "{name}");
        got.push((*name, failed));
    }
    let want: Vec<(&str, bool)> = cases.iter().map(|(n, _, f)| (*n, *f)).collect();
    assert_eq!(got, want);
}

/// A NACK naming a PSN the SACK bitmap already acknowledged is stale (a receiver never
/// NACKs what it accepted): whatever its reason, it changes nothing, as one naming a PSN
/// below `snd_una` does. Before, NACK(ACCESS_ERROR) for such a PSN failed the connection.
#[test]
fn nack_for_a_sacked_psn_changes_nothing() {
    use crate::wire::{NackReason, NackRepr, SackRepr};
    let (mut a, _b) = pair();
    let src = fill(&mut a, 3 * 4096, 1);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 3 * 4096,
    };
    a.post_write(1, sge, 0x1000, 0x77).unwrap();
    let mut buf = vec![0u8; 8192];
    for _ in 0..3 {
        a.poll_transmit(1_000, &mut buf).unwrap();
    }
    // initial PSN 0xFF_FFF0: PSNs 0xFF_FFF0..=0xFF_FFF2 are in flight; SACK the middle one
    let sack = SackRepr {
        cumulative_psn: 0xFF_FFF0,
        bitmap_base_psn: 0xFF_FFF0,
        bitmap: 0b010,
        echo_ev: 100,
        echo_ts_ns: 0,
        ecn_ce_count: 0,
        credit: 0,
    };
    a.handle_datagram(
        2_000,
        100,
        Ecn::Ect0,
        &from_peer(Opcode::Sack, 0xFF_FFF0, Body::Sack(sack)),
    );
    assert_eq!(a.send_state().bytes_in_flight(), 2 * 4096);
    for reason in [
        NackReason::AccessError,
        NackReason::Trimmed,
        NackReason::NoBitmap,
        NackReason::PsnOutOfWindow,
    ] {
        let nack = NackRepr {
            psn: 0xFF_FFF1,
            reason,
            reserved: 0,
            echo_ev: 100,
            echo_ts_ns: 0,
        };
        a.handle_datagram(
            2_000,
            100,
            Ecn::Ect0,
            &from_peer(Opcode::Nack, 0xFF_FFF1, Body::Nack(nack)),
        );
        assert_eq!(a.state(), ConnState::Ready, "{reason:?}");
        assert_eq!(a.send_state().retransmit_queue().count(), 0, "{reason:?}");
        assert_eq!(a.send_state().bytes_in_flight(), 2 * 4096);
    }
    assert_eq!(a.stats().nacks_received, 4);
    assert!(a.poll_completion().is_none());
}

/// Go-back-N: a NACK(NO_BITMAP) names the hole, so the EV its packet last went on lost
/// it and leaves the rotation (regression of the `transfer` fuzz finding replayed in
/// `tests/tests/transfer_regressions.rs::go_back_n_routes_around_dead_evs`).
#[test]
fn go_back_n_nack_takes_the_losing_ev_out_of_rotation() {
    use crate::path::PathState;
    use crate::wire::{NackReason, NackRepr};
    let cc = || FixedWindowConfig::default().build();
    let mut c = cfg(0x11, 0xFF_FFF0, 1);
    c.go_back_n = true;
    let mut a = Connection::new(c, cc()).unwrap();
    a.connect(PeerParams {
        qpn: 0x22,
        initial_psn: Psn::new(100),
        generation: 7,
    })
    .unwrap();
    let src = fill(&mut a, 3 * 4096, 2);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 3 * 4096,
    };
    a.post_write(1, sge, 0x1000, 0x77).unwrap();
    let mut buf = vec![0u8; 8192];
    let evs: Vec<u32> = (0..3)
        .map(|_| a.poll_transmit(1_000, &mut buf).unwrap().ev)
        .collect();
    assert_eq!(evs, vec![100, 101, 102]);
    // the receiver got 0xFF_FFF1 but not 0xFF_FFF0 (sent on EV 100)
    let nack = NackRepr {
        psn: 0xFF_FFF0,
        reason: NackReason::NoBitmap,
        reserved: 0,
        echo_ev: 101,
        echo_ts_ns: 0,
    };
    a.handle_datagram(
        3_000,
        101,
        Ecn::Ect0,
        &from_peer(Opcode::Nack, 0xFF_FFF0, Body::Nack(nack)),
    );
    assert_eq!(a.paths().state_of(100), Some(PathState::AssumedBad));
    assert_eq!(a.paths().state_of(101), Some(PathState::Good));
    assert_eq!(a.paths().get(0).unwrap().stats.lost, 1);
    assert_eq!(
        a.send_state().retransmit_queue().collect::<Vec<_>>(),
        vec![0xFF_FFF0, 0xFF_FFF1, 0xFF_FFF2]
    );
    // EV 100 is probed, and the go-back round leaves it out (each retransmission also
    // avoids the EV of its previous copy)
    let mut sent = Vec::new();
    while let Some(t) = a.poll_transmit(3_000, &mut buf) {
        sent.push((PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode, t.ev));
    }
    assert_eq!(
        sent,
        vec![
            (Opcode::EvProbe, 100),
            (Opcode::RdmaWriteFirst, 103),
            (Opcode::RdmaWriteMiddle, 102),
            (Opcode::RdmaWriteLast, 103),
        ]
    );
}

/// Drives `a` alone by its timers (every datagram it sends is lost) until `poll_timeout`
/// is `None`; returns the times `handle_timeout` ran and the data packets sent.
fn run_timers_alone(a: &mut Conn, mut now: u64) -> (Vec<u64>, u64) {
    let mut buf = vec![0u8; 8192];
    let mut fired = Vec::new();
    let mut data = 0;
    loop {
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            if PacketRepr::parse(&buf[..t.len])
                .unwrap()
                .bth
                .opcode
                .is_data()
            {
                data += 1;
            }
        }
        let Some(t) = a.poll_timeout() else {
            return (fired, data);
        };
        assert!(t >= now, "timer in the past: {t} < {now}");
        now = t;
        a.handle_timeout(now);
        fired.push(now);
        assert!(fired.len() < 100, "timers keep firing: {fired:?}");
    }
}

#[test]
fn every_ev_denied_before_posting_fails_after_the_retry_limit() {
    let (mut a, _b) = pair();
    for ev in 100..104 {
        a.set_ev_denied(ev, true);
    }
    let src = fill(&mut a, 2 * 4096, 3);
    for (wr_id, off) in [(1, 0), (2, 4096)] {
        let sge = Sge {
            lkey: src.lkey,
            addr: src.addr + off,
            len: 4096,
        };
        a.post_write(wr_id, sge, 0x1000, 0x77).unwrap();
    }
    // nothing waits before the first poll notes it
    assert_eq!(a.poll_timeout(), None);
    let t0 = 250_000;
    let (fired, data) = run_timers_alone(&mut a, t0);
    // initial RTO 1 ms from t0, back-off 2, 4, ... 64 ms; the 8th expiry (retry limit 7)
    // fails: t0 + (1 + 2 + 4 + 8 + 16 + 32 + 64 + 100) ms, the last clamped to max_rto
    let want: Vec<u64> = [1, 3, 7, 15, 31, 63, 127, 227]
        .iter()
        .map(|ms| t0 + ms * 1_000_000)
        .collect();
    assert_eq!(fired, want);
    assert_eq!(data, 0);
    assert_eq!(a.stats().timeouts, 8);
    assert_eq!(a.stats().sent, 0);
    assert_eq!(a.state(), ConnState::Error);
    let got: Vec<(u64, WcStatus)> = std::iter::from_fn(|| a.poll_completion())
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RetryExceeded), (2, WcStatus::Flushed)]
    );
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn denial_after_sending_keeps_the_rto_running_into_the_retry_limit() {
    let mut cfg_a = cfg(0x11, 0xFF_FFF0, 1);
    cfg_a.send.retry_limit = 2;
    let mut a = Connection::new(cfg_a, FixedWindowConfig::default().build()).unwrap();
    a.connect(PeerParams {
        qpn: 0x22,
        initial_psn: Psn::new(100),
        generation: 7,
    })
    .unwrap();
    let src = fill(&mut a, 4096, 4);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 4096,
    };
    a.post_write(9, sge, 0x1000, 0x77).unwrap();
    let mut buf = vec![0u8; 8192];
    assert!(a.poll_transmit(10_000, &mut buf).is_some());
    assert!(a.poll_transmit(10_000, &mut buf).is_none());
    for ev in 100..104 {
        a.set_ev_denied(ev, true);
    }
    // the packet in flight (lost) expires at 10 us + 1 ms; the retransmission cannot
    // leave, so the next expiries are 2 ms and 4 ms later; the third fails (limit 2)
    let (fired, data) = run_timers_alone(&mut a, 10_000);
    assert_eq!(fired, vec![1_010_000, 3_010_000, 7_010_000]);
    assert_eq!(data, 0);
    assert_eq!(a.stats().timeouts, 3);
    assert_eq!((a.stats().sent, a.stats().retransmitted), (1, 0));
    let c = a.poll_completion().unwrap();
    assert_eq!((c.wr_id, c.status), (9, WcStatus::RetryExceeded));
    assert_eq!(a.state(), ConnState::Error);
}

#[test]
fn an_ev_back_up_before_the_limit_resumes_and_completes() {
    let (mut a, mut b) = pair();
    for ev in 100..104 {
        a.set_ev_denied(ev, true);
    }
    let (src, dst) = write_regions(&mut a, &mut b, 4096, 5);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 4096,
    };
    a.post_write(3, sge, dst.addr, dst.rkey).unwrap();
    let mut buf = vec![0u8; 8192];
    assert!(a.poll_transmit(0, &mut buf).is_none());
    assert_eq!(a.send_state().blocked_since_ns(), Some(0));
    assert_eq!(a.poll_timeout(), Some(1_000_000));
    a.handle_timeout(1_000_000);
    assert_eq!(a.stats().timeouts, 1);
    // backed off: the next expiry 2 ms after the first
    assert_eq!(a.poll_timeout(), Some(3_000_000));
    a.set_ev_denied(102, false);
    assert_eq!(a.send_state().blocked_since_ns(), None);
    assert_eq!(a.poll_timeout(), None);
    let sent = exchange(2_000_000, &mut a, &mut b, &mut pass);
    assert_eq!(sent, vec![Opcode::RdmaWriteOnly]);
    let c = a.poll_completion().unwrap();
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (3, WcStatus::Success, 4096)
    );
    assert_eq!(a.paths().get(2).unwrap().stats.sent, 1);
    assert_eq!(a.state(), ConnState::Ready);
    assert_eq!(a.poll_timeout(), None);
}

/// The tail of a WRITE is lost; the tail loss probe goes on the EV whose SACK came back
/// last (its answer returns on the EV it goes on), not on the next recycled EV.
#[test]
fn the_tail_loss_probe_goes_on_the_ev_whose_round_trip_worked_last() {
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 4 * 4096, 0);
    write_whole(&mut a, 1, &src, &dst, 4 * 4096);
    let mut n = 0;
    let mut drop_fourth = |bytes: &[u8]| {
        n += 1;
        if n == 4 { None } else { pass(bytes) }
    };
    // packets on EVs 100..103 at 0; the fourth is lost; b's delayed SACK (for the
    // first three, echoing EV 102) leaves at 10 us
    exchange(0, &mut a, &mut b, &mut drop_fourth);
    exchange(10_000, &mut a, &mut b, &mut pass);
    let evs = a.paths().paths();
    assert_eq!(
        evs.iter().map(|p| p.echo_ns).collect::<Vec<_>>(),
        vec![None, None, Some(10_000), None]
    );
    // the recycle FIFO holds EVs 100, 101, 102 (in that order), so an ordinary pick
    // avoiding EV 103 would take EV 100
    assert_eq!(a.paths().recycled().collect::<Vec<_>>(), vec![0, 1, 2]);
    // PTO = max(2 x 10 us, 10 us + 20 us reorder window) + 10 us ack delay, after the
    // transmission at 0
    assert_eq!(a.send_state().tlp_deadline_ns(), Some(40_000));
    a.handle_timeout(40_000);
    assert_eq!(a.stats().tail_loss_probes, 1);
    let mut buf = vec![0u8; 8192];
    let t = a.poll_transmit(40_000, &mut buf).unwrap();
    assert_eq!(t.ev, 102);
    let probe = PacketRepr::parse(&buf[..t.len]).unwrap();
    assert_eq!(probe.bth.psn, 0xFF_FFF3);
    assert!(probe.bth.flags.rtx);
    b.handle_datagram(40_000, t.ev, t.ecn, &buf[..t.len]);
    exchange(40_000, &mut a, &mut b, &mut pass);
    assert_eq!(a.stats().timeouts, 0);
    assert_eq!(completions(&mut a).len(), 1);
}

/// A controller whose pacing rate the test sets from outside.
#[derive(Debug)]
struct SharedRate(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Controller for SharedRate {
    fn on_packet_sent(&mut self, _: u64, _: u64, _: u64) {}
    fn on_ack(&mut self, _: u64, _: &mrc_congestion::AckSample) {}
    fn on_trim(&mut self, _: u64, _: u64) {}
    fn on_loss(&mut self, _: u64, _: u64) {}
    fn on_spurious_loss(&mut self, _: u64) {}
    fn on_cnp(&mut self, _: u64) {}
    fn cwnd_bytes(&self) -> u64 {
        u64::MAX
    }
    fn pacing_rate_bps(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn metrics(&self) -> mrc_congestion::Metrics {
        mrc_congestion::Metrics::default()
    }
}

/// Issue 21: the release time of the next paced packet follows the controller's rate *now*.
/// It used to be fixed when the previous packet left, at that moment's rate: a DCQCN sender
/// cut to 1 Mb/s waited out the 33 ms gap of a 4 KiB packet at 1 Mb/s even after its rate
/// had climbed back, which idled the simulator's incast link.
#[test]
fn pacing_release_follows_a_rate_change() {
    let rate = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1_000_000));
    let mut a = Connection::new(cfg(0x11, 5, 1), SharedRate(rate.clone())).unwrap();
    a.connect(PeerParams {
        qpn: 0x22,
        initial_psn: Psn::new(100),
        generation: 7,
    })
    .unwrap();
    let src = fill(&mut a, 3 * 4096, 9);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 3 * 4096,
    };
    a.post_write(1, sge, 0x1000, 0x77).unwrap();
    let mut buf = vec![0u8; 8192];
    assert_eq!(a.poll_transmit(1_000, &mut buf).unwrap().len, 4148);
    // At 1 Mb/s the next 4148-byte packet may leave 33.184 ms later: the 1 ms RTO is the
    // earliest timer.
    assert_eq!(a.poll_timeout(), Some(1_000 + 1_000_000));
    assert!(a.poll_transmit(4_000, &mut buf).is_none());
    // The rate comes back to 10 Gb/s: the release is 3.318 us after the first send.
    rate.store(10_000_000_000, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(a.poll_timeout(), Some(1_000 + 4148 * 8 / 10));
    assert!(a.poll_transmit(4_000, &mut buf).is_none());
    assert!(a.poll_transmit(10_000, &mut buf).is_some());
    // The third packet is paced from the second's slot (released at 4 318 ns, sent at 10 us
    // with no pacing credit): 10 000 + 3 318 ns.
    assert_eq!(a.poll_timeout(), Some(10_000 + 4148 * 8 / 10));
}

/// Application-owned memory on both ends (raw on the sender, a `SharedMem` on the
/// receiver): the payload goes straight from one to the other, deregistration is refused
/// while a work request names the region, and bytes next to the raw region stay untouched.
#[test]
#[allow(unsafe_code)]
fn application_memory_end_to_end_and_deregistration_while_posted() {
    use crate::region::{RawMem, SharedMem};
    let (mut a, mut b) = pair();
    // The sender's buffer: 64 guard bytes, 10_000 registered bytes, 64 guard bytes.
    let mut backing: Vec<u8> = (0..10_128u32).map(|i| (i % 251) as u8).collect();
    let want: Vec<u8> = backing[64..10_064].to_vec();
    // SAFETY: `backing` is neither moved nor touched until `a` is dropped below, and `a`
    // runs on this thread only.
    let raw = unsafe { RawMem::new(backing.as_mut_ptr().add(64), 10_000) }.unwrap();
    let src = a
        .regions_mut()
        .register_raw(raw, Access::LOCAL_WRITE)
        .unwrap();
    let dst_mem = SharedMem::new(10_000);
    let dst = b
        .regions_mut()
        .register_shared(&dst_mem, Access::REMOTE_WRITE | Access::LOCAL_WRITE)
        .unwrap();
    assert_eq!(
        b.regions().bytes(dst.lkey),
        Err(crate::region::AccessError::Shared(dst.lkey))
    );
    b.post_recv(
        9,
        Sge {
            lkey: dst.lkey,
            addr: dst.addr,
            len: 0,
        },
    )
    .unwrap();
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 10_000,
    };
    a.post_write_with_imm(42, sge, dst.addr, dst.rkey, 0xABCD)
        .unwrap();
    assert_eq!(
        a.deregister_mr(src.lkey),
        Err(DeregisterError::InUse {
            lkey: src.lkey,
            sends: 1,
            recvs: 0
        })
    );
    assert_eq!(
        b.deregister_mr(dst.lkey),
        Err(DeregisterError::InUse {
            lkey: dst.lkey,
            sends: 0,
            recvs: 1
        })
    );
    exchange(1_000, &mut a, &mut b, &mut pass);
    let ca = completions(&mut a);
    assert_eq!(ca.len(), 1);
    assert_eq!(
        (ca[0].wr_id, ca[0].opcode, ca[0].status, ca[0].byte_len),
        (42, WcOpcode::WriteWithImm, WcStatus::Success, 10_000)
    );
    let cb = completions(&mut b);
    assert_eq!(cb.len(), 1);
    assert_eq!(
        (
            cb[0].wr_id,
            cb[0].opcode,
            cb[0].status,
            cb[0].byte_len,
            cb[0].imm
        ),
        (
            9,
            WcOpcode::RecvRdmaWithImm,
            WcStatus::Success,
            10_000,
            Some(0xABCD)
        )
    );
    assert!(dst_mem.with(|d| d == &want[..]));
    assert_eq!(a.deregister_mr(src.lkey), Ok(()));
    assert_eq!(
        a.deregister_mr(src.lkey),
        Err(DeregisterError::UnknownKey(src.lkey))
    );
    assert_eq!(b.deregister_mr(dst.lkey), Ok(()));
    drop(a);
    assert!(
        backing[..64]
            .iter()
            .enumerate()
            .all(|(i, &x)| x == (i % 251) as u8)
    );
    assert_eq!(&backing[64..10_064], &want[..]);
}

/// [`Connection::set_data_before_sack`]: `b` has the SACK of `a`'s 1-packet WRITE due and
/// a 3-packet WRITE of its own to send. Off: the SACK first. On: one data packet, the SACK,
/// the other two; every byte lands and both ends complete either way.
#[test]
fn one_data_packet_may_leave_ahead_of_a_due_sack() {
    for on in [false, true] {
        let (mut a, mut b) = pair();
        b.set_data_before_sack(on);
        let (src_a, dst_b) = write_regions(&mut a, &mut b, 100, 5);
        let (src_b, dst_a) = write_regions(&mut b, &mut a, 10_000, 9);
        write_whole(&mut a, 1, &src_a, &dst_b, 100);
        let mut buf = vec![0u8; 8192];
        let t = a.poll_transmit(0, &mut buf).unwrap();
        assert!(a.poll_transmit(0, &mut buf).is_none());
        b.handle_datagram(0, t.ev, t.ecn, &buf[..t.len]);
        write_whole(&mut b, 2, &src_b, &dst_a, 10_000);
        let mut ops = Vec::new();
        while let Some(t) = b.poll_transmit(0, &mut buf) {
            ops.push(PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode);
            a.handle_datagram(0, t.ev, t.ecn, &buf[..t.len]);
        }
        let want = if on {
            vec![
                Opcode::RdmaWriteFirst,
                Opcode::Sack,
                Opcode::RdmaWriteMiddle,
                Opcode::RdmaWriteLast,
            ]
        } else {
            vec![
                Opcode::Sack,
                Opcode::RdmaWriteFirst,
                Opcode::RdmaWriteMiddle,
                Opcode::RdmaWriteLast,
            ]
        };
        assert_eq!(ops, want, "data_before_sack {on}");
        exchange(0, &mut a, &mut b, &mut pass);
        assert_eq!(completions(&mut a).len(), 1);
        assert_eq!(completions(&mut b).len(), 1);
        assert_eq!(
            b.regions().bytes(dst_b.lkey).unwrap(),
            a.regions().bytes(src_a.lkey).unwrap()
        );
        assert_eq!(
            a.regions().bytes(dst_a.lkey).unwrap(),
            b.regions().bytes(src_b.lkey).unwrap()
        );
        assert_eq!(b.stats().sacks_sent, 1);
        assert_eq!(a.send_state().bytes_in_flight(), 0);
        assert_eq!(b.send_state().bytes_in_flight(), 0);
    }
}

/// [`Connection::set_data_before_sack`] with a data packet that cannot be read (its
/// source region deregistered under the posted WRITE, through
/// [`Connection::regions_mut`]): the data path fails `b`'s connection, and the SACK that
/// was due for `a`'s WRITE, already placed at `b`, still leaves, as it does with the SACK
/// first (it was withheld: `a` never learnt that its WRITE landed and retried it into
/// the retry limit).
#[test]
fn a_due_sack_still_leaves_when_the_data_packet_ahead_of_it_fails() {
    for on in [false, true] {
        let (mut a, mut b) = pair();
        b.set_data_before_sack(on);
        let (src_a, dst_b) = write_regions(&mut a, &mut b, 100, 5);
        let (src_b, dst_a) = write_regions(&mut b, &mut a, 4096, 9);
        write_whole(&mut a, 1, &src_a, &dst_b, 100);
        let mut buf = vec![0u8; 8192];
        let t = a.poll_transmit(0, &mut buf).unwrap();
        b.handle_datagram(0, t.ev, t.ecn, &buf[..t.len]);
        write_whole(&mut b, 2, &src_b, &dst_a, 4096);
        b.regions_mut().deregister(src_b.lkey).unwrap();
        let mut ops = Vec::new();
        while let Some(t) = b.poll_transmit(0, &mut buf) {
            ops.push(PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode);
            a.handle_datagram(0, t.ev, t.ecn, &buf[..t.len]);
        }
        assert_eq!(ops, [Opcode::Sack], "data_before_sack {on}");
        assert_eq!(b.state(), ConnState::Error);
        assert_eq!(b.stats().sacks_sent, 1);
        let c: Vec<(u64, WcStatus)> = completions(&mut b)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
        assert_eq!(c, [(2, WcStatus::LocalProtectionError)]);
        let c: Vec<(u64, WcStatus)> = completions(&mut a)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
        assert_eq!(c, [(1, WcStatus::Success)], "data_before_sack {on}");
        assert_eq!(a.send_state().bytes_in_flight(), 0);
        assert_eq!(
            b.regions().bytes(dst_b.lkey).unwrap(),
            a.regions().bytes(src_a.lkey).unwrap()
        );
    }
}

/// Every datagram `a` sends in a 3-packet WRITE with immediate and a 2-packet SEND (the
/// receive posted on `b`), the second datagram trimmed and the fifth dropped (so a NACK
/// resend and an RTO resend), read with [`Connection::poll_transmit_gather`] when
/// `gather` (headers from the buffer, then the lent payload) or
/// [`Connection::poll_transmit`]; with each datagram's header length when gathered.
fn datagrams_of_a(gather: bool) -> Vec<(Vec<u8>, usize)> {
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 3 * 4096, 9);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 3 * 4096,
    };
    a.post_write_with_imm(1, sge, dst.addr, dst.rkey, 0xABCD)
        .unwrap();
    // one receive for the WRITE's immediate, one for the SEND
    let rbuf = b.regions_mut().register(8192, Access::LOCAL_WRITE).unwrap();
    for wr_id in [6, 7] {
        let rsge = Sge {
            lkey: rbuf.lkey,
            addr: rbuf.addr,
            len: 8192,
        };
        b.post_recv(wr_id, rsge).unwrap();
    }
    let send = Sge {
        lkey: src.lkey,
        addr: src.addr + 100,
        len: 5000,
    };
    a.post_send(2, send).unwrap();
    let mut buf = vec![0u8; 8192];
    let mut out = Vec::new();
    let mut now = 0;
    let mut n = 0;
    let mut done = 0;
    while now < 1_000_000_000 && done < 2 {
        loop {
            let got = if gather {
                a.poll_transmit_gather(now, &mut buf).map(|(t, p)| {
                    let mut d = buf[..t.len].to_vec();
                    // SAFETY: `a` is not used between the poll and this read.
                    #[allow(unsafe_code)]
                    d.extend_from_slice(p.map_or(&[][..], |p| unsafe { p.bytes() }));
                    (t, d, t.len)
                })
            } else {
                a.poll_transmit(now, &mut buf)
                    .map(|t| (t, buf[..t.len].to_vec(), 0))
            };
            let Some((t, d, head)) = got else { break };
            n += 1;
            let deliver = match n {
                2 => trimmed(&d),
                5 => None,
                _ => pass(&d),
            };
            if let Some((bytes, ecn)) = deliver {
                b.handle_datagram(now, t.ev, ecn, &bytes);
            }
            out.push((d, head));
        }
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            a.handle_datagram(now, t.ev, t.ecn, &buf[..t.len]);
        }
        done += completions(&mut a).len();
        for c in [&mut a, &mut b] {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
        now = [a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + 1_000)
            .max(now + 1);
    }
    assert_eq!(a.stats().trimmed, 1);
    assert_eq!(a.stats().retransmitted, 2);
    assert_eq!(done, 2);
    assert_eq!(
        b.regions().bytes(dst.lkey).unwrap(),
        a.regions().bytes(src.lkey).unwrap()
    );
    assert_eq!(
        &b.regions().bytes(rbuf.lkey).unwrap()[..5000],
        &a.regions().bytes(src.lkey).unwrap()[100..5100]
    );
    out
}

#[test]
fn gathered_datagrams_are_the_copied_ones_byte_for_byte() {
    let copied = datagrams_of_a(false);
    let gathered = datagrams_of_a(true);
    assert_eq!(copied.len(), gathered.len());
    for (i, ((c, _), (g, _))) in copied.iter().zip(&gathered).enumerate() {
        assert_eq!(c, g, "datagram {i}");
    }
    // 3 WRITE packets + 2 SEND packets + the trimmed one's and the dropped one's resends
    let data: Vec<_> = gathered
        .iter()
        .filter(|(d, _)| PacketRepr::parse(d).unwrap().bth.opcode.is_data())
        .collect();
    assert_eq!(data.len(), 7);
    // Headers: WRITE FIRST and MIDDLE carry a RETH (12 + 16 + 8 + 16 = 52 bytes), WRITE
    // LAST WITH IMMEDIATE an ImmDt too (56), SEND FIRST 36, SEND LAST 36.
    let head_of = |op: Opcode| {
        data.iter()
            .find(|(d, _)| PacketRepr::parse(d).unwrap().bth.opcode == op)
            .map(|(_, h)| *h)
    };
    assert_eq!(head_of(Opcode::RdmaWriteFirst), Some(52));
    assert_eq!(head_of(Opcode::RdmaWriteMiddle), Some(52));
    assert_eq!(head_of(Opcode::RdmaWriteLastWithImmediate), Some(56));
    assert_eq!(head_of(Opcode::SendFirst), Some(36));
    assert_eq!(head_of(Opcode::SendLast), Some(36));
    // the payload is what follows the headers: 3 x 4096 (WRITE), 4096 + 904 (SEND), and
    // the resends of the trimmed WRITE MIDDLE (4096) and the dropped SEND LAST (904)
    let payload: usize = data.iter().map(|(d, h)| d.len() - h).sum();
    assert_eq!(payload, 3 * 4096 + 5000 + 4096 + 904);
    // control packets (none from `a` here but what it answers with) are written whole
    assert!(
        gathered
            .iter()
            .filter(|(d, _)| !PacketRepr::parse(d).unwrap().bth.opcode.is_data())
            .all(|(d, h)| *h == d.len())
    );
}

#[test]
fn gather_with_authentication_writes_the_sealed_datagram_whole() {
    use crate::auth::{AUTH_NONCE_BYTES, AUTH_TRAILER_BYTES, AuthKeys, Authenticator};
    let psk = [7u8; 32];
    let (ni, nr) = ([1u8; AUTH_NONCE_BYTES], [2u8; AUTH_NONCE_BYTES]);
    let cc = || FixedWindowConfig::default().build();
    let mut a = Connection::new(cfg(0x11, 0, 1), cc()).unwrap();
    a.set_auth(Authenticator::new(
        AuthKeys::derive(&psk, &ni, &nr, true).unwrap(),
    ))
    .unwrap();
    a.connect(PeerParams {
        qpn: 0x22,
        initial_psn: Psn::new(0),
        generation: 7,
    })
    .unwrap();
    let src = fill(&mut a, 4096, 1);
    a.post_write(
        1,
        Sge {
            lkey: src.lkey,
            addr: src.addr,
            len: 4096,
        },
        0x1000,
        0x99,
    )
    .unwrap();
    let mut buf = vec![0u8; 8192];
    let (t, lent) = a.poll_transmit_gather(0, &mut buf).unwrap();
    assert_eq!(lent, None);
    // BTH + MRCETH + MSGETH + RETH, the payload, the trailer
    assert_eq!(t.len, 52 + 4096 + AUTH_TRAILER_BYTES);
}

/// Planes and Port Status Updates between two connections.
mod planes {
    use super::*;
    use crate::path::{PathState, PlaneDownCause, PlaneState};
    use crate::wire::PortStatusRepr;

    /// The fuzz target `transfer` found it (CI, schedule: one EV on one plane, its local
    /// port down from 0 ns): the update to the peer had no EV to leave on, so
    /// `poll_transmit` sent nothing while `poll_timeout` stayed due at the same instant,
    /// and a caller spun there. Now the update waits a probe interval (100 us) at a time.
    #[test]
    fn a_port_status_update_with_no_ev_to_leave_on_waits_a_probe_interval() {
        let cc = || FixedWindowConfig::default().build();
        let one = |qpn, psn, g| ConnConfig {
            evs: vec![100],
            ..cfg(qpn, psn, g)
        };
        let mut a = Connection::new(one(0x11, 5, 1), cc()).unwrap();
        let mut b = Connection::new(one(0x22, 9, 2), cc()).unwrap();
        a.connect(b.local_params()).unwrap();
        b.connect(a.local_params()).unwrap();
        assert!(a.set_local_plane(0, false, 0));
        let mut buf = vec![0u8; 8192];
        assert!(a.poll_transmit(0, &mut buf).is_none());
        let probe = a.cfg.probe_interval_ns;
        assert_eq!(probe, 100_000);
        assert_eq!(a.poll_timeout(), Some(probe));
        // due again at 100 us, still no EV: the next try at 200 us
        a.handle_timeout(probe);
        assert!(a.poll_transmit(probe, &mut buf).is_none());
        assert_eq!(a.poll_timeout(), Some(2 * probe));
        // the port back: the EV is probed and the update leaves on it
        assert!(a.set_local_plane(0, true, 2 * probe));
        let mut ops = Vec::new();
        while let Some(t) = a.poll_transmit(2 * probe, &mut buf) {
            ops.push(PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode);
        }
        assert!(ops.contains(&Opcode::PortStatus), "{ops:?}");
    }

    /// EVs 100..104 on planes 0, 1, 0, 1 at both ends.
    fn plane_cfg(qpn: u32, psn: u32, generation: u16) -> ConnConfig {
        ConnConfig {
            ev_planes: vec![0, 1, 0, 1],
            ..cfg(qpn, psn, generation)
        }
    }

    fn plane_pair() -> (Conn, Conn) {
        let cc = || FixedWindowConfig::default().build();
        let mut a = Connection::new(plane_cfg(0x11, 0xFF_FFF0, 1), cc()).unwrap();
        let b_cfg = plane_cfg(0x22, 100, 7);
        let mut b = Connection::new(b_cfg, cc()).unwrap();
        a.connect(b.local_params()).unwrap();
        b.connect(a.local_params()).unwrap();
        (a, b)
    }

    /// Moves datagrams both ways at `now` until both are quiet, dropping those from `a`
    /// for which `drop_a` says so; returns `(opcode, EV)` of everything each side sent.
    #[allow(clippy::type_complexity)]
    fn run(
        now: u64,
        a: &mut Conn,
        b: &mut Conn,
        drop_a: &mut dyn FnMut(Opcode) -> bool,
    ) -> (Vec<(Opcode, u32)>, Vec<(Opcode, u32)>) {
        let mut buf = vec![0u8; 8192];
        let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
        loop {
            let mut moved = false;
            while let Some(t) = a.poll_transmit(now, &mut buf) {
                moved = true;
                let op = PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode;
                from_a.push((op, t.ev));
                if !drop_a(op) {
                    b.handle_datagram(now, t.ev, t.ecn, &buf[..t.len]);
                }
            }
            while let Some(t) = b.poll_transmit(now, &mut buf) {
                moved = true;
                let op = PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode;
                from_b.push((op, t.ev));
                a.handle_datagram(now, t.ev, t.ecn, &buf[..t.len]);
            }
            if !moved {
                return (from_a, from_b);
            }
        }
    }

    #[test]
    fn a_local_port_down_is_reported_and_the_peer_stops_using_the_plane() {
        let (mut a, mut b) = plane_pair();
        assert!(a.set_local_plane(1, false, 1_000));
        assert!(!a.set_local_plane(1, false, 1_000));
        assert_eq!(a.local_up_planes(), 0b01);
        let (from_a, from_b) = run(1_000, &mut a, &mut b, &mut |_| false);
        // one update, on plane 0's first EV, and its acknowledgement back on it
        assert_eq!(from_a, vec![(Opcode::PortStatus, 100)]);
        assert_eq!(from_b, vec![(Opcode::PortStatus, 100)]);
        assert_eq!(
            b.paths().planes()[1].state,
            PlaneState::Down(PlaneDownCause::PeerReport)
        );
        assert_eq!((a.stats().psu_sent, a.stats().psu_acked), (1, 1));
        assert_eq!(b.stats().psu_received, 1);
        assert_eq!(a.poll_timeout(), None, "acknowledged: no resend timer");

        // b's data now goes on plane 0 only (EVs 100 and 102), a's SACKs echo them
        let (src, dst) = {
            let src = fill(&mut b, 8 * 4096, 3);
            let dst = a
                .regions_mut()
                .register(8 * 4096, Access::REMOTE_WRITE)
                .unwrap();
            (src, dst)
        };
        write_whole(&mut b, 1, &src, &dst, 8 * 4096);
        let (_, from_b) = run(2_000, &mut a, &mut b, &mut |_| false);
        let data_evs: Vec<u32> = from_b
            .iter()
            .filter(|(op, _)| op.is_data())
            .map(|&(_, ev)| ev)
            .collect();
        assert_eq!(data_evs.len(), 8);
        assert!(
            data_evs.iter().all(|&ev| ev == 100 || ev == 102),
            "{data_evs:?}"
        );
        assert_eq!(completions(&mut b)[0].status, WcStatus::Success);
        assert_eq!(
            a.regions().bytes(dst.lkey).unwrap(),
            b.regions().bytes(src.lkey).unwrap()
        );

        // the port is back: a's update makes b probe plane 1 at once, and its answer
        // brings the plane back; a's own EVs of plane 1 are probed back one by one
        assert!(a.set_local_plane(1, true, 3_000));
        let (from_a, from_b) = run(3_000, &mut a, &mut b, &mut |_| false);
        assert_eq!(from_a[0], (Opcode::PortStatus, 100));
        assert!(from_b.contains(&(Opcode::EvProbe, 101)), "{from_b:?}");
        assert!(from_a.contains(&(Opcode::EvProbe, 101)), "{from_a:?}");
        assert!(from_a.contains(&(Opcode::EvProbe, 103)), "{from_a:?}");
        assert_eq!(b.paths().planes()[1].state, PlaneState::Up);
        assert_eq!(b.paths().planes()[1].stats.ups, 1);
        assert_eq!(b.paths().planes()[1].stats.down_ns, 2_000);
        assert_eq!(a.paths().planes()[1].state, PlaneState::Up);
        assert_eq!(b.paths().state_of(101), Some(PathState::Good));
        assert_eq!(a.paths().state_of(101), Some(PathState::Good));
        assert_eq!(a.paths().state_of(103), Some(PathState::Good));
        assert_eq!((a.stats().psu_sent, a.stats().psu_acked), (2, 2));
    }

    #[test]
    fn a_lost_update_is_resent_every_probe_interval_until_acknowledged() {
        let (mut a, mut b) = plane_pair();
        a.set_local_plane(0, false, 1_000);
        let mut first = true;
        let (from_a, from_b) = run(1_000, &mut a, &mut b, &mut |op| {
            std::mem::take(&mut first) && op == Opcode::PortStatus
        });
        assert_eq!(from_a, vec![(Opcode::PortStatus, 101)]);
        assert!(from_b.is_empty());
        assert_eq!(b.paths().planes()[0].state, PlaneState::Up);
        assert_eq!(a.poll_timeout(), Some(101_000));
        let (from_a, from_b) = run(100_999, &mut a, &mut b, &mut |_| false);
        assert!(from_a.is_empty() && from_b.is_empty());
        let (from_a, from_b) = run(101_000, &mut a, &mut b, &mut |_| false);
        assert_eq!(from_a, vec![(Opcode::PortStatus, 101)]);
        assert_eq!(from_b, vec![(Opcode::PortStatus, 101)]);
        assert_eq!(
            b.paths().planes()[0].state,
            PlaneState::Down(PlaneDownCause::PeerReport)
        );
        assert_eq!((a.stats().psu_sent, a.stats().psu_acked), (2, 1));
    }

    #[test]
    fn stale_and_forged_updates_change_nothing() {
        let (mut a, mut b) = plane_pair();
        // an acknowledgement of nothing: a counted drop
        let ack = PortStatusRepr {
            psu_seq: 5,
            up_planes: 0b11,
            planes: 2,
            ack: true,
            other_flags: 0,
            reserved: 0,
        };
        let bytes = from_peer(Opcode::PortStatus, 0, Body::PortStatus(ack));
        a.handle_datagram(10, 100, Ecn::NotEct, &bytes);
        assert_eq!(a.stats().drops.get(DropReason::StalePortStatus), 1);
        // an update whose bitmap names a plane beyond its count does not parse
        let mut bad = from_peer(
            Opcode::PortStatus,
            0,
            Body::PortStatus(PortStatusRepr { ack: false, ..ack }),
        );
        let n = bad.len();
        bad[n - 4] = 1; // planes = 1, bitmap 0b11
        a.handle_datagram(10, 100, Ecn::NotEct, &bad);
        assert_eq!(a.stats().drops.get(DropReason::Malformed), 1);
        assert_eq!(a.stats().psu_received, 0);
        // an older update after a newer one is acknowledged but not applied
        let update = |seq: u32, up: u32| {
            from_peer(
                Opcode::PortStatus,
                0,
                Body::PortStatus(PortStatusRepr {
                    psu_seq: seq,
                    up_planes: up,
                    ack: false,
                    ..ack
                }),
            )
        };
        a.handle_datagram(20, 100, Ecn::NotEct, &update(7, 0b01));
        assert_eq!(
            a.paths().planes()[1].state,
            PlaneState::Down(PlaneDownCause::PeerReport)
        );
        a.handle_datagram(21, 100, Ecn::NotEct, &update(6, 0b11));
        assert_eq!(
            a.paths().planes()[1].state,
            PlaneState::Down(PlaneDownCause::PeerReport)
        );
        assert_eq!(a.stats().psu_received, 2);
        let _ = &mut b;
    }

    #[test]
    fn unbalanced_or_bad_plane_lists_are_refused() {
        let cc = || FixedWindowConfig::default().build();
        let with = |planes: Vec<u8>| {
            Connection::new(
                ConnConfig {
                    ev_planes: planes,
                    ..cfg(1, 0, 1)
                },
                cc(),
            )
            .err()
        };
        assert_eq!(
            with(vec![0, 1, 0]),
            Some(ConfigError::EvPlanes("need one plane per EV"))
        );
        assert_eq!(
            with(vec![0, 0, 0, 1]),
            Some(ConfigError::EvPlanes(
                "EVs must be split equally across the planes"
            ))
        );
        assert_eq!(
            with(vec![0, 2, 0, 2]),
            Some(ConfigError::EvPlanes(
                "every plane below the highest needs an EV"
            ))
        );
        assert_eq!(
            with(vec![0, 32, 0, 1]),
            Some(ConfigError::EvPlanes("plane numbers must be below 32"))
        );
        assert_eq!(with(vec![0, 1, 2, 0]), None, "3 planes of 2, 1, 1 EVs");
        let spares = |evs: Vec<u32>, planes: Vec<u8>| {
            Connection::new(
                ConnConfig {
                    ev_planes: vec![0, 1, 0, 1],
                    spare_evs: evs,
                    spare_ev_planes: planes,
                    ..cfg(1, 0, 1)
                },
                cc(),
            )
            .err()
        };
        assert_eq!(
            spares(vec![7, 8], vec![0]),
            Some(ConfigError::SpareEvs("need one plane per spare EV"))
        );
        assert_eq!(
            spares(vec![7], vec![2]),
            Some(ConfigError::SpareEvs("a spare EV's plane has no EVs"))
        );
        assert_eq!(
            spares(vec![7, 101], vec![0, 1]),
            Some(ConfigError::SpareEvs("a spare EV repeats an EV"))
        );
        assert_eq!(spares(vec![7, 8], vec![0, 1]), None);
        assert_eq!(ConnConfig::interleaved_planes(6, 3), vec![0, 1, 2, 0, 1, 2]);
        assert!(ConnConfig::interleaved_planes(6, 1).is_empty());
    }
}

/// Liveness on every connection ([`super::live`]): keepalives while work is posted and
/// nothing is in flight, the budget whatever this side does.
mod liveness {
    use super::*;
    use crate::send::GiveUp;

    const BUDGET_NS: u64 = 1_000_000_000;
    /// The default keepalive interval at that budget: budget / 20.
    const KA_NS: u64 = 50_000_000;

    fn live_cfg(qpn: u32, psn: u32, generation: u16) -> ConnConfig {
        let mut c = cfg(qpn, psn, generation);
        c.send.unresponsive_budget_ns = Some(BUDGET_NS);
        c
    }

    fn live_pair() -> (Conn, Conn) {
        let cc = || FixedWindowConfig::default().build();
        let mut a = Connection::new(live_cfg(0x11, 0xFF_FFF0, 1), cc()).unwrap();
        let mut b = Connection::new(live_cfg(0x22, 100, 7), cc()).unwrap();
        a.connect(b.local_params()).unwrap();
        b.connect(a.local_params()).unwrap();
        (a, b)
    }

    fn recv(c: &mut Conn, wr_id: u64, k: &MrKey) {
        let sge = Sge {
            lkey: k.lkey,
            addr: k.addr,
            len: 64,
        };
        c.post_recv(wr_id, sge).unwrap();
    }

    /// Steps both ends on a shared virtual clock from `now` to `end` (zero-delay network;
    /// with `a_alive` false, `a` is dead: it is never called and what goes to it is
    /// lost). Returns the time reached and every (time, opcode) `b` sent.
    fn run(
        a: &mut Conn,
        b: &mut Conn,
        mut now: u64,
        end: u64,
        a_alive: bool,
    ) -> (u64, Vec<(u64, Opcode)>) {
        let mut buf = vec![0u8; 8192];
        let mut sent_b = Vec::new();
        loop {
            loop {
                let mut moved = false;
                while a_alive && let Some(t) = a.poll_transmit(now, &mut buf) {
                    moved = true;
                    b.handle_datagram(now, t.ev, t.ecn, &buf[..t.len]);
                }
                while let Some(t) = b.poll_transmit(now, &mut buf) {
                    moved = true;
                    sent_b.push((now, PacketRepr::parse(&buf[..t.len]).unwrap().bth.opcode));
                    if a_alive {
                        a.handle_datagram(now, t.ev, t.ecn, &buf[..t.len]);
                    }
                }
                if !moved {
                    break;
                }
            }
            let ta = if a_alive { a.poll_timeout() } else { None };
            let next = match (ta, b.poll_timeout()) {
                (Some(x), Some(y)) => x.min(y),
                (x, y) => match x.or(y) {
                    Some(t) => t,
                    None => return (now, sent_b),
                },
            };
            if next > end {
                return (now, sent_b);
            }
            now = next.max(now);
            if a_alive {
                a.handle_timeout(now);
            }
            b.handle_timeout(now);
        }
    }

    fn statuses(c: &mut Conn) -> Vec<(u64, WcStatus)> {
        completions(c).iter().map(|x| (x.wr_id, x.status)).collect()
    }

    /// The hang: the sender took the receiver's credit (a SEND, acknowledged)
    /// and died; the receiver has a receive posted and nothing in flight. It sends a
    /// keepalive every 50 ms of silence and fails at exactly the budget after the last
    /// packet it heard, the oldest receive with `RetryExceeded`, the cause named.
    #[test]
    fn a_receiver_whose_sender_died_fails_at_the_budget() {
        let (mut a, mut b) = live_pair();
        let src = fill(&mut a, 64, 1);
        let rbuf = b.regions_mut().register(256, Access::LOCAL_WRITE).unwrap();
        let credit = b.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
        let cbuf = a.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
        recv(&mut a, 1, &cbuf);
        recv(&mut b, 10, &rbuf);
        recv(&mut b, 11, &rbuf);
        // b gives a credit at t = 1 ms; a receives it and acknowledges it
        b.post_send(
            5,
            Sge {
                lkey: credit.lkey,
                addr: credit.addr,
                len: 8,
            },
        )
        .unwrap();
        let (now, _) = run(&mut a, &mut b, 1_000_000, 1_000_000, true);
        assert_eq!(statuses(&mut b), vec![(5, WcStatus::Success)]);
        assert_eq!(statuses(&mut a), vec![(1, WcStatus::Success)]);
        let _ = src;
        // a is SIGKILLed now: nothing of it is ever heard again
        let (end, sent) = run(&mut a, &mut b, now, 10 * BUDGET_NS, false);
        let probes: Vec<u64> = sent
            .iter()
            .filter(|(_, op)| *op == Opcode::EvProbe)
            .map(|(t, _)| *t)
            .collect();
        let expect: Vec<u64> = (1..20).map(|k| 1_000_000 + k * KA_NS).collect();
        assert_eq!(probes, expect);
        assert_eq!(sent.len(), 19, "{sent:?}");
        assert_eq!(b.stats().keepalives_sent, 19);
        assert_eq!(b.state(), ConnState::Error);
        assert_eq!(end, 1_000_000 + BUDGET_NS);
        assert_eq!(
            statuses(&mut b),
            vec![(10, WcStatus::RetryExceeded), (11, WcStatus::Flushed)]
        );
        assert_eq!(
            b.give_up(),
            Some(GiveUp::PeerUnresponsive {
                silent_ns: BUDGET_NS
            })
        );
        assert_eq!(
            b.give_up().unwrap().to_string(),
            "peer unresponsive for 1.0 s"
        );
        assert_eq!(b.poll_timeout(), None);
    }

    /// Both ends idle with receives posted and alive: the keepalives are answered by the
    /// peer's transport and nothing fails, for 30 budgets. Each end probes when it heard
    /// nothing for an interval; here both ends' timers fire at the same ns, so each sends
    /// one keepalive per interval (600 in 30 s).
    #[test]
    fn idle_ends_with_receives_posted_stay_up_on_keepalives() {
        let (mut a, mut b) = live_pair();
        let ka = a.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
        let kb = b.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
        recv(&mut a, 1, &ka);
        recv(&mut b, 2, &kb);
        let (end, _) = run(&mut a, &mut b, 0, 30 * BUDGET_NS, true);
        assert_eq!(a.state(), ConnState::Ready);
        assert_eq!(b.state(), ConnState::Ready);
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!((sa.keepalives_sent, sb.keepalives_sent), (600, 600));
        assert_eq!(sa.keepalive_replies, sa.keepalives_sent);
        assert_eq!(sb.keepalive_replies, sb.keepalives_sent);
        assert_eq!(sa.probes_received, sb.keepalives_sent);
        assert_eq!(sa.drops.total() + sb.drops.total(), 0);
        assert_eq!(end, 30 * BUDGET_NS);
        assert_eq!(completions(&mut a), vec![]);
        assert_eq!(completions(&mut b), vec![]);
    }

    /// A busy connection sends no keepalive: 200 WRITEs of 64 KiB, one every 10 ms,
    /// with receives posted on both sides the whole time.
    #[test]
    fn a_busy_connection_sends_no_keepalive() {
        let (mut a, mut b) = live_pair();
        let (src, dst) = write_regions(&mut a, &mut b, 65_536, 4);
        let ka = a.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
        let kb = b.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
        recv(&mut a, 1, &ka);
        recv(&mut b, 2, &kb);
        let mut now = 0;
        for i in 0..200 {
            write_whole(&mut a, 100 + i, &src, &dst, 65_536);
            now = run(&mut a, &mut b, now, now + 10_000_000, true).0;
            now += 10_000_000 - now % 10_000_000;
        }
        assert_eq!(completions(&mut a).len(), 200);
        assert_eq!(a.stats().keepalives_sent + b.stats().keepalives_sent, 0);
        assert_eq!(a.stats().sent, 200 * 16);
    }

    /// Work posted long after the peer was last heard starts the budget at the post,
    /// not at the last packet: a receive posted 100 s into silence fails one budget
    /// after the first look at it, with a keepalive every interval before.
    #[test]
    fn the_budget_starts_when_work_is_posted() {
        let (mut a, mut b) = live_pair();
        let kb = b.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
        // idle, nothing posted: no timer, nothing sent
        assert_eq!(b.poll_timeout(), None);
        recv(&mut b, 7, &kb);
        // the post asks for a look at once
        assert_eq!(b.poll_timeout(), Some(0));
        let start = 100 * BUDGET_NS;
        let mut buf = vec![0u8; 8192];
        assert!(b.poll_transmit(start, &mut buf).is_none());
        assert_eq!(b.poll_timeout(), Some(start + KA_NS));
        let (end, sent) = run(&mut a, &mut b, start, start + 10 * BUDGET_NS, false);
        assert_eq!(sent.len(), 19);
        assert_eq!(end, start + BUDGET_NS);
        assert_eq!(statuses(&mut b), vec![(7, WcStatus::RetryExceeded)]);
    }

    /// Without an unresponsive budget (the transport's default) nothing changes: no
    /// keepalive, no timer for a posted receive.
    #[test]
    fn without_a_budget_there_is_no_keepalive() {
        let (mut a, mut b) = pair();
        let kb = b.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
        recv(&mut b, 7, &kb);
        assert_eq!(b.poll_timeout(), None);
        let mut buf = vec![0u8; 8192];
        assert!(b.poll_transmit(1_000_000_000, &mut buf).is_none());
        assert_eq!(b.poll_timeout(), None);
        let _ = &mut a;
    }
}

/// `max_send_wr` / `max_recv_wr`: a post beyond the queue is refused with the typed
/// error and changes nothing; a completion frees its slot.
#[test]
fn posts_beyond_the_queue_depths_are_refused() {
    let mut b_cfg = cfg(0x22, 100, 7);
    b_cfg.max_recv_wr = 2;
    let (mut a, mut b) = pair_with(b_cfg);
    a.cfg.max_send_wr = 3;
    let (src, dst) = write_regions(&mut a, &mut b, 64, 1);
    let rbuf = b.regions_mut().register(64, Access::LOCAL_WRITE).unwrap();
    let r = Sge {
        lkey: rbuf.lkey,
        addr: rbuf.addr,
        len: 64,
    };
    b.post_recv(1, r).unwrap();
    b.post_recv(2, r).unwrap();
    assert_eq!(
        b.post_recv(3, r),
        Err(PostError::RecvQueueFull { max_recv_wr: 2 })
    );
    for i in 0..3 {
        write_whole(&mut a, i, &src, &dst, 64);
    }
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 64,
    };
    assert_eq!(
        a.post_write(3, sge, dst.addr, dst.rkey),
        Err(PostError::SendQueueFull { max_send_wr: 3 })
    );
    assert_eq!(a.send_state().outstanding_messages(), 3);
    exchange(0, &mut a, &mut b, &mut pass);
    assert_eq!(completions(&mut a).len(), 3);
    a.post_write(3, sge, dst.addr, dst.rkey).unwrap();
    assert_eq!(
        PostError::SendQueueFull { max_send_wr: 3 }.to_string(),
        "send queue full: 3 work requests outstanding (max_send_wr)"
    );
}

/// Issue (item 8): a WRITE to an address that wraps past 2^64 completed with
/// `LocalLengthError`, the status verbs gives a SEND too long for its receive. It is a
/// remote range no region can hold: `RemoteAccessError`, as the peer's NACK gives for a
/// range outside its regions, and nothing of it leaves.
#[test]
fn a_write_whose_remote_range_wraps_fails_with_a_remote_access_error() {
    let (mut a, _b) = pair();
    let src = fill(&mut a, 100, 1);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 100,
    };
    a.post_write(7, sge, u64::MAX - 10, 0x1234).unwrap();
    let mut buf = vec![0u8; 8192];
    assert!(a.poll_transmit(0, &mut buf).is_none());
    assert_eq!(a.stats().sent, 0);
    let c = a.poll_completion().unwrap();
    assert_eq!((c.wr_id, c.status), (7, WcStatus::RemoteAccessError));
    assert_eq!(a.state(), ConnState::Error);
    // the last byte at 2^64 - 1 does not wrap: it leaves (the peer refuses the range)
    let (mut a, _b) = pair();
    let src = fill(&mut a, 100, 1);
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 100,
    };
    a.post_write(8, sge, u64::MAX - 100, 0x1234).unwrap();
    assert!(a.poll_transmit(0, &mut buf).is_some());
}

/// `messages_received` counts every message completed in order, plain WRITEs (which
/// raise no completion) included: two WRITEs and a SEND give 3, one receive completion.
#[test]
fn messages_received_counts_plain_writes_too() {
    let (mut a, mut b) = pair();
    let (src, dst) = write_regions(&mut a, &mut b, 100, 5);
    let rbuf = b.regions_mut().register(100, Access::LOCAL_WRITE).unwrap();
    let sge = Sge {
        lkey: rbuf.lkey,
        addr: rbuf.addr,
        len: 100,
    };
    b.post_recv(7, sge).unwrap();
    assert_eq!(b.messages_received(), 0);
    write_whole(&mut a, 1, &src, &dst, 100);
    write_whole(&mut a, 2, &src, &dst, 50);
    let send = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 10,
    };
    a.post_send(3, send).unwrap();
    exchange(0, &mut a, &mut b, &mut pass);
    assert_eq!(b.messages_received(), 3);
    let got: Vec<(u64, WcOpcode)> = completions(&mut b)
        .iter()
        .map(|c| (c.wr_id, c.opcode))
        .collect();
    assert_eq!(got, vec![(7, WcOpcode::Recv)]);
    assert_eq!(a.messages_received(), 0);
}

/// `a` (QPN 0x11) and `b` (QPN 0x22) as [`pair`], sending `a_mtu` and `b_mtu` bytes of
/// payload per packet.
fn pair_mtus(a_mtu: u32, b_mtu: u32) -> (Conn, Conn) {
    let with = |mut c: ConnConfig, mtu| {
        c.send.mtu_payload_bytes = mtu;
        c
    };
    pair_of(
        with(cfg(0x11, 0xFF_FFF0, 1), a_mtu),
        with(cfg(0x22, 100, 7), b_mtu),
    )
}

/// Moves every datagram both ways (zero delay) until both are quiet: the lengths of the
/// data packets `a` sent and of those `b` sent, in order.
fn exchange_data_lens(a: &mut Conn, b: &mut Conn) -> (Vec<usize>, Vec<usize>) {
    let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
    while move_data(a, b, &mut from_a) | move_data(b, a, &mut from_b) {}
    (from_a, from_b)
}

/// Hands every datagram `x` has to send to `y`, the data packets' lengths to `lens`:
/// whether there was one.
fn move_data(x: &mut Conn, y: &mut Conn, lens: &mut Vec<usize>) -> bool {
    let mut buf = vec![0u8; 65_536];
    let mut moved = false;
    while let Some(t) = x.poll_transmit(0, &mut buf) {
        moved = true;
        if matches!(
            PacketRepr::parse(&buf[..t.len]).unwrap().body,
            Body::Data(_)
        ) {
            lens.push(t.len);
        }
        y.handle_datagram(0, t.ev, t.ecn, &buf[..t.len]);
    }
    moved
}

#[test]
fn ends_with_different_mtus_each_send_their_own_and_take_the_other_s() {
    // a at the largest payload (65000, loopback's), b at 1024: a WRITE each way and a
    // SEND each way of 2 x 65000 + 7 bytes, every byte checked.
    let (mut a, mut b) = pair_mtus(65_000, 1024);
    let len = 2 * 65_000 + 7;
    let (a_src, b_dst) = write_regions(&mut a, &mut b, len, 3);
    let (b_src, a_dst) = write_regions(&mut b, &mut a, len, 5);
    write_whole(&mut a, 1, &a_src, &b_dst, len as u32);
    write_whole(&mut b, 2, &b_src, &a_dst, len as u32);
    let (from_a, from_b) = exchange_data_lens(&mut a, &mut b);
    // 52 bytes of headers on every WRITE packet (BTH, MRCETH, RETH). a: two full
    // packets and 7 bytes; b: 126 of 1024 and 983 bytes (130007 = 126 x 1024 + 983)
    let h = 52;
    assert_eq!(from_a, vec![65_000 + h, 65_000 + h, 7 + h]);
    let mut want_b = vec![1024 + h; 126];
    want_b.push(983 + h);
    assert_eq!(from_b, want_b);
    assert_eq!(b.regions().bytes(b_dst.lkey), a.regions().bytes(a_src.lkey));
    assert_eq!(a.regions().bytes(a_dst.lkey), b.regions().bytes(b_src.lkey));
    assert_eq!(completions(&mut a).len(), 1);
    assert_eq!(completions(&mut b).len(), 1);
    for c in [&a, &b] {
        assert_eq!(c.stats().retransmitted, 0);
        assert_eq!(c.stats().drops.total(), 0);
    }
}

#[test]
fn a_trimmed_packet_at_the_largest_mtu_is_nacked_and_resent() {
    let (mut a, mut b) = pair_mtus(65_000, 65_000);
    trim_the_second_of_three(&mut a, &mut b, 65_000);
}
