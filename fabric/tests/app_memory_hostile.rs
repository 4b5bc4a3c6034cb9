//! Hostile peers and careless applications against application-owned memory (issue 18
//! items 1-2): what a forger on the peer's IP can make the transport do to raw and shared
//! regions (zero-length WRITEs at the ends, replays and late WRITEs after deregistration),
//! what an application can make it do by dropping a `Qp` that has raw memory registered,
//! and sizes no buffer can have. Exact values: drop counters by reason, the bytes of the
//! region and of the guard bytes around it.

mod engine_common;

use engine_common::forged_write;
use mrc_fabric::datapath::{ConnId, Datapath, PathMap, TxBatch};
use mrc_fabric::engine::{Context, EngineConfig, EngineError, QpConfig, Worker};
use mrc_fabric::udp::{FakeDatapath, FakeNet};
use mrc_transport::stats::DropReason;
use mrc_transport::wire::{
    Body, BthFlags, BthRepr, BthSpare, DataRepr, MrcethRepr, MsgethRepr, Opcode, PacketRepr,
    RethRepr,
};
use mrc_transport::{Access, ConnConfig, Ecn, SharedMem};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A forger's datapath on `ip` (the genuine peer's IP, another port) aimed at `to`.
fn forger(net: &FakeNet, ip: &str, to: SocketAddr) -> (FakeDatapath, ConnId) {
    let mut h = FakeDatapath::new(net, format!("{ip}:5000").parse().unwrap());
    let id = h.open_conn(to, &PathMap::per_ev(vec![1])).unwrap();
    (h, id)
}

/// Sends `datagrams` in one burst (the receiver takes them in one `rx_burst`).
fn burst(h: &mut FakeDatapath, id: ConnId, datagrams: &[Vec<u8>]) {
    let mut batch = TxBatch::new(datagrams.len(), 9000);
    for d in datagrams {
        assert!(batch.push(id, 1, Ecn::NotEct, d));
    }
    assert_eq!(
        h.tx_burst(&batch).unwrap().datagrams,
        datagrams.len() as u64
    );
}

/// Caller-progress worker, raw region with guard bytes: zero-length WRITEs at the first
/// byte, at one past the last byte and past that; an in-bounds WRITE; then, after
/// deregistration, a replay of that WRITE (same PSN) and a fresh one (next PSN) with the
/// old rkey and address. Only the one in-bounds WRITE changes bytes; every other datagram
/// is a drop counted under its own reason.
#[test]
fn zero_length_writes_replays_and_late_writes_after_deregistration_touch_nothing() {
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let mut a = Worker::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let mut b = Worker::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = a.create_qp(QpConfig::default()).unwrap();
    let qb = b.create_qp(QpConfig::default()).unwrap();
    const LEN: usize = 256;
    const GUARD: usize = 64;
    let mut buf = vec![0x5Au8; GUARD + LEN + GUARD];
    // SAFETY: `buf` is neither moved nor touched during calls on `b`; the region is
    // deregistered and the worker dropped before `buf` is read.
    let mr = unsafe { b.reg_mr_raw(qb, buf.as_mut_ptr().add(GUARD), LEN, Access::REMOTE_WRITE) }
        .unwrap();
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    a.connect(qa, &ib, b_addr).unwrap();
    b.connect(qb, &ia, a_addr).unwrap();
    let cfg_a = a.config(qa).unwrap().clone();
    let (mut h, hid) = forger(&net, "10.0.0.1", b_addr);
    let end = mr.addr + LEN as u64;
    let mut send = |b: &mut Worker<FakeDatapath>, d: Vec<u8>| {
        burst(&mut h, hid, &[d]);
        for _ in 0..4 {
            b.progress();
        }
    };
    // Zero-length WRITEs out of bounds: one byte past the end (end + 1) and u64::MAX.
    send(&mut b, forged_write(qb, &cfg_a, 0, mr.rkey, end + 1, &[]));
    send(&mut b, forged_write(qb, &cfg_a, 0, mr.rkey, u64::MAX, &[]));
    send(
        &mut b,
        forged_write(qb, &cfg_a, 0, mr.rkey, mr.addr - 1, &[]),
    );
    let (s, _) = b.stats(qb).unwrap();
    assert_eq!(s.conn.drops.get(DropReason::OutOfBounds), 3);
    assert_eq!(s.conn.received, 0);
    // The genuine WRITE, 8 bytes ending at the region's last byte.
    let good = forged_write(qb, &cfg_a, 0, mr.rkey, end - 8, b"ENDBYTES");
    send(&mut b, good.clone());
    let (s, _) = b.stats(qb).unwrap();
    assert_eq!(s.conn.received, 1);
    // Deregistered (no work request names a remote-write target): accepted at once.
    b.dereg_mr(qb, mr.lkey).unwrap();
    // A replay of the placed WRITE: a duplicate, not placed again (and not a key lookup).
    send(&mut b, good);
    // A late WRITE with the next PSN, the old rkey, an in-bounds address of the old region.
    send(
        &mut b,
        forged_write(qb, &cfg_a, 1, mr.rkey, mr.addr, b"LATEWRITE"),
    );
    // A zero-length WRITE naming the dead rkey at the old region's first byte.
    send(&mut b, forged_write(qb, &cfg_a, 1, mr.rkey, mr.addr, &[]));
    let (s, _) = b.stats(qb).unwrap();
    assert_eq!(s.conn.received, 1);
    assert_eq!(s.conn.drops.get(DropReason::OutOfBounds), 3);
    assert_eq!(s.conn.drops.get(DropReason::Duplicate), 1);
    assert_eq!(s.conn.drops.get(DropReason::BadRkey), 2);
    drop(b);
    assert!(buf[..GUARD].iter().all(|&x| x == 0x5A));
    assert!(buf[GUARD + LEN..].iter().all(|&x| x == 0x5A));
    assert!(buf[GUARD..GUARD + LEN - 8].iter().all(|&x| x == 0x5A));
    assert_eq!(&buf[GUARD + LEN - 8..GUARD + LEN], b"ENDBYTES");
}

/// The engine thread, a QP with a `SharedMem` region S and a raw region R. The application
/// holds S's lock; a forger's burst carries a WRITE into S (the engine blocks on the lock
/// placing it) and then a WRITE into R. While the engine is blocked in that burst the
/// application drops the `Qp` on another thread.
///
/// `Qp::reg_mr_raw`'s contract ends "until `Qp::dereg_mr` succeeds (or the QP and its
/// engine are gone)", and `RawMem`'s at "the connection holding it is dropped": an
/// application that drops its `Qp` and frees the memory must be able to rely on
/// `drop(qp)` having returned meaning the transport is done with the bytes. So `drop`
/// must not return while the engine still holds the QP and can write R.
#[test]
fn dropping_a_qp_waits_until_the_engine_no_longer_touches_its_raw_memory() {
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let ca = Context::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = ca.create_qp(QpConfig::default()).unwrap();
    let qb = cb.create_qp(QpConfig::default()).unwrap();
    let s = SharedMem::new(64);
    let smr = qb.reg_mr_shared(&s, Access::REMOTE_WRITE).unwrap();
    const LEN: usize = 64;
    let mut raw = vec![0x11u8; LEN + 32];
    // SAFETY: `raw` is not moved and not touched until the engine is done with the QP
    // (the engine thread is joined, by dropping the context, before `raw` is read).
    let rmr =
        unsafe { qb.reg_mr_raw(raw.as_mut_ptr().add(16), LEN, Access::REMOTE_WRITE) }.unwrap();
    let ib = qb.local_info();
    let ia = qa.local_info();
    qb.connect(&ia, a_addr).unwrap();
    let _ = ib;
    let cfg_a = qa.config().clone();
    let (mut h, hid) = forger(&net, "10.0.0.1", b_addr);
    let qbn = qb.qpn();
    let returned = Arc::new(AtomicBool::new(false));
    let returned_while_engine_blocked = std::thread::scope(|sc| {
        s.with_mut(|_held| {
            burst(
                &mut h,
                hid,
                &[
                    forged_write(qbn, &cfg_a, 0, smr.rkey, smr.addr, b"S"),
                    forged_write(qbn, &cfg_a, 1, rmr.rkey, rmr.addr, b"RAW-AFTER-DROP"),
                ],
            );
            // The engine takes the burst and blocks on S's lock, which we hold.
            std::thread::sleep(Duration::from_millis(300));
            let r = returned.clone();
            sc.spawn(move || {
                drop(qb);
                r.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(300));
            returned.load(Ordering::SeqCst)
        })
    });
    // The lock is released and the dropping thread joined: the engine finished its burst.
    assert!(returned.load(Ordering::SeqCst));
    drop(qa);
    drop(ca);
    drop(cb);
    assert_eq!(s.with(|b| b[0]), b'S');
    assert!(raw[..16].iter().all(|&x| x == 0x11));
    assert!(raw[16 + 14..].iter().all(|&x| x == 0x11));
    // The burst was handled completely before the QP went: R holds the second WRITE.
    assert_eq!(&raw[16..16 + 14], b"RAW-AFTER-DROP");
    assert!(
        !returned_while_engine_blocked,
        "drop(qp) returned while the engine was still handling a burst that wrote the \
         QP's raw memory afterwards"
    );
}

/// Sizes no buffer can have are typed refusals, not a panic in the application's call
/// (`vec![0; usize::MAX]` panics with "capacity overflow"): `Qp::reg_mr` of more than
/// `isize::MAX` bytes, and `Qp::read_mr` of a length past the region (checked before
/// anything is allocated).
#[test]
fn impossible_sizes_are_refused_not_panics() {
    let net = FakeNet::new();
    let ctx = Context::with_datapath(
        FakeDatapath::new(&net, "10.0.0.3:4792".parse().unwrap()),
        EngineConfig::default(),
    );
    let qp = ctx.create_qp(QpConfig::default()).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        qp.reg_mr(usize::MAX, Access::LOCAL_WRITE)
    }));
    assert!(
        matches!(r, Ok(Err(EngineError::Refused(_)))),
        "reg_mr(usize::MAX): {r:?}"
    );
    let mr = qp.reg_mr(16, Access::LOCAL_WRITE).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        qp.read_mr(mr.lkey, 0, usize::MAX)
    }));
    assert!(
        matches!(r, Ok(Err(EngineError::Refused(_)))),
        "read_mr(.., usize::MAX): {r:?}"
    );
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| qp.read_mr(mr.lkey, 8, 9)));
    assert!(matches!(r, Ok(Err(EngineError::Refused(_)))), "{r:?}");
    assert_eq!(qp.read_mr(mr.lkey, 8, 8).unwrap(), vec![0u8; 8]);
    assert_eq!(qp.read_mr(mr.lkey, 16, 0).unwrap(), Vec::<u8>::new());
    // The same through a SharedMem region (copied on the caller's thread).
    let smr = qp
        .reg_mr_shared(&SharedMem::new(16), Access::LOCAL_WRITE)
        .unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        qp.read_mr(smr.lkey, 0, usize::MAX)
    }));
    assert!(matches!(r, Ok(Err(EngineError::Refused(_)))), "{r:?}");
    assert_eq!(qp.read_mr(smr.lkey, 15, 1).unwrap(), vec![0u8]);
}

/// Caller progress on both ends over a lossy fake network (every 5th datagram from a to b
/// lost, every 7th duplicated, every 11th held back behind the next: reordered), and b
/// "stopped" (not progressed at all, as if SIGSTOPped) for 300 ms in the middle: a
/// WRITE_WITH_IMM of 200 000 bytes from a's raw memory into b's raw memory completes once
/// on each side with exact entries and exact bytes. While it is in flight, deregistering
/// either region is the typed `InUse`. After both regions are deregistered (the memory
/// is the application's again and it has overwritten the destination), a copy of the
/// first data packet captured on the wire is injected late: a counted `Duplicate` drop
/// that changes no byte.
#[test]
fn lossy_reordered_paused_transfer_between_raw_regions_then_a_late_copy_after_deregistration() {
    use mrc_fabric::udp::FakeVerdict;
    use mrc_transport::DeregisterError;
    use mrc_transport::completion::{WcOpcode, WcStatus};
    use std::sync::Mutex;
    use std::time::Instant;
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let captured: Arc<Mutex<Option<Vec<u8>>>> = Arc::new(Mutex::new(None));
    let cap = captured.clone();
    let mut n = 0u64;
    net.set_filter(move |_from, to, bytes| {
        if to.ip() != b_addr.ip() {
            return FakeVerdict::Deliver;
        }
        n += 1;
        let mut c = cap.lock().unwrap();
        if c.is_none() && bytes.len() > 1000 {
            *c = Some(bytes.to_vec());
        }
        match n {
            n if n % 5 == 0 => FakeVerdict::Drop,
            n if n % 7 == 0 => FakeVerdict::Duplicate,
            n if n % 11 == 0 => FakeVerdict::Hold,
            _ => FakeVerdict::Deliver,
        }
    });
    let mut a = Worker::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let mut b = Worker::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = a.create_qp(QpConfig::default()).unwrap();
    let qb = b.create_qp(QpConfig::default()).unwrap();
    const LEN: usize = 200_000;
    const G: usize = 32;
    let src_bytes: Vec<u8> = (0..LEN).map(|i| (i * 31 % 253) as u8).collect();
    let mut src = vec![0xA1u8; G + LEN + G];
    src[G..G + LEN].copy_from_slice(&src_bytes);
    let mut dst = vec![0xB2u8; G + LEN + G];
    // SAFETY: neither buffer is moved or touched during calls on its worker; both are
    // deregistered before they are read.
    let (smr, dmr) = unsafe {
        (
            a.reg_mr_raw(qa, src.as_mut_ptr().add(G), LEN, Access::LOCAL_WRITE)
                .unwrap(),
            b.reg_mr_raw(
                qb,
                dst.as_mut_ptr().add(G),
                LEN,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .unwrap(),
        )
    };
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    let pa = a.connect(qa, &ib, b_addr).unwrap();
    let pb = b.connect(qb, &ia, a_addr).unwrap();
    // a checks b's source ports; b checks a's IP only, so the late copy injected below
    // from another port on a's IP reaches b's transport.
    a.set_peer_source_ports(qa, &pb).unwrap();
    let _ = pa;
    let sge = |k: &mrc_transport::MrKey, len: u32| mrc_transport::Sge {
        lkey: k.lkey,
        addr: k.addr,
        len,
    };
    b.post_recv(qb, 70, sge(&dmr, 0)).unwrap();
    a.post_write_with_imm(qa, 71, sge(&smr, LEN as u32), dmr.addr, dmr.rkey, 0xABCD)
        .unwrap();
    assert!(matches!(
        a.dereg_mr(qa, smr.lkey),
        Err(EngineError::Deregister(DeregisterError::InUse {
            sends: 1,
            recvs: 0,
            ..
        }))
    ));
    assert!(matches!(
        b.dereg_mr(qb, dmr.lkey),
        Err(EngineError::Deregister(DeregisterError::InUse {
            sends: 0,
            recvs: 1,
            ..
        }))
    ));
    // A few rounds, then b stops for 300 ms while a keeps running (RTOs fire).
    for _ in 0..3 {
        a.progress();
        b.progress();
    }
    let pause = Instant::now() + Duration::from_millis(300);
    while Instant::now() < pause {
        a.progress();
    }
    let (mut sc, mut rc) = (Vec::new(), Vec::new());
    let until = Instant::now() + Duration::from_secs(20);
    while sc.is_empty() || rc.is_empty() {
        assert!(Instant::now() < until, "no completion within 20 s");
        a.progress();
        b.progress();
        sc.extend(a.poll_send_cq(qa));
        rc.extend(b.poll_recv_cq(qb));
    }
    // A little longer: no second completion on either side.
    for _ in 0..200 {
        a.progress();
        b.progress();
        sc.extend(a.poll_send_cq(qa));
        rc.extend(b.poll_recv_cq(qb));
    }
    assert_eq!(sc.len(), 1);
    assert_eq!(
        (sc[0].wr_id, sc[0].opcode, sc[0].status, sc[0].byte_len),
        (71, WcOpcode::WriteWithImm, WcStatus::Success, LEN as u32)
    );
    assert_eq!(rc.len(), 1);
    assert_eq!(
        (
            rc[0].wr_id,
            rc[0].opcode,
            rc[0].status,
            rc[0].byte_len,
            rc[0].imm
        ),
        (
            70,
            WcOpcode::RecvRdmaWithImm,
            WcStatus::Success,
            LEN as u32,
            Some(0xABCD)
        )
    );
    assert!(net.dropped() > 0);
    a.dereg_mr(qa, smr.lkey).unwrap();
    b.dereg_mr(qb, dmr.lkey).unwrap();
    // The memory is the application's again: it overwrites the destination...
    dst[G..G + LEN].fill(0x77);
    // ...and a copy of the first data packet arrives late, from a's genuine source port.
    let late = captured
        .lock()
        .unwrap()
        .clone()
        .expect("a data packet was captured");
    net.set_filter(|_, _, _| FakeVerdict::Deliver);
    let (s0, _) = b.stats(qb).unwrap();
    let (mut f, fid) = forger(&net, "10.0.0.1", b_addr);
    burst(&mut f, fid, &[late]);
    for _ in 0..4 {
        b.progress();
    }
    let (s1, e1) = b.stats(qb).unwrap();
    assert_eq!(s1.conn.received, s0.conn.received);
    assert_eq!(
        s1.conn.drops.get(DropReason::Duplicate),
        s0.conn.drops.get(DropReason::Duplicate) + 1
    );
    assert_eq!(e1.rx_bad_source, 0);
    drop(b);
    assert!(dst[..G].iter().all(|&x| x == 0xB2));
    assert!(dst[G + LEN..].iter().all(|&x| x == 0xB2));
    assert!(dst[G..G + LEN].iter().all(|&x| x == 0x77));
    drop(a);
    assert_eq!(&src[G..G + LEN], &src_bytes[..]);
    assert!(src[..G].iter().chain(&src[G + LEN..]).all(|&x| x == 0xA1));
}

/// A peer that never answers (its address has nobody behind it): the WRITE from raw
/// memory and the posted receive fail with exact error completions once the 50 ms budget
/// is spent, and then both regions can be deregistered (the work requests that named
/// them are gone), so the application gets its memory back without destroying the QP.
#[test]
fn after_the_peer_is_given_up_the_regions_of_failed_work_requests_can_be_deregistered() {
    use mrc_transport::completion::{WcOpcode, WcStatus};
    use std::time::Instant;
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let nobody: SocketAddr = "10.0.0.9:4792".parse().unwrap();
    let mut a = Worker::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let mut b = Worker::with_datapath(FakeDatapath::new(&net, nobody), EngineConfig::default());
    let mut cfg = QpConfig::default();
    cfg.conn.send.initial_rto_ns = 2_000_000;
    cfg.conn.send.min_rto_ns = 1_000_000;
    cfg.conn.send.max_rto_ns = 4_000_000;
    cfg.conn.send.unresponsive_budget_ns = Some(50_000_000);
    let qa = a.create_qp(cfg).unwrap();
    let qb = b.create_qp(QpConfig::default()).unwrap();
    let ib = b.local_info(qb).unwrap();
    // b's worker is dropped: its address has no receiver, every datagram to it is lost.
    drop(b);
    let mut src = vec![0x3Cu8; 4096];
    let mut rcv = vec![0x4Du8; 64];
    // SAFETY: neither buffer is moved or touched during calls on `a`; both are
    // deregistered before they are read.
    let (smr, rmr) = unsafe {
        (
            a.reg_mr_raw(qa, src.as_mut_ptr(), 4096, Access::LOCAL_WRITE)
                .unwrap(),
            a.reg_mr_raw(qa, rcv.as_mut_ptr(), 64, Access::LOCAL_WRITE)
                .unwrap(),
        )
    };
    a.connect(qa, &ib, nobody).unwrap();
    let sge = |k: &mrc_transport::MrKey, len: u32| mrc_transport::Sge {
        lkey: k.lkey,
        addr: k.addr,
        len,
    };
    a.post_recv(qa, 1, sge(&rmr, 64)).unwrap();
    a.post_write(
        qa,
        2,
        sge(&smr, 4096),
        ib.regions.first().map_or(0x1_0000, |r| r.addr),
        0x1234,
    )
    .unwrap();
    let (mut sc, mut rc) = (Vec::new(), Vec::new());
    let until = Instant::now() + Duration::from_secs(10);
    while sc.is_empty() || rc.is_empty() {
        assert!(Instant::now() < until, "not given up within 10 s");
        a.progress();
        sc.extend(a.poll_send_cq(qa));
        rc.extend(a.poll_recv_cq(qa));
    }
    assert_eq!(
        sc.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(2, WcOpcode::Write, WcStatus::RetryExceeded, 0)]
    );
    assert_eq!(
        rc.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(1, WcOpcode::Recv, WcStatus::Flushed, 0)]
    );
    a.dereg_mr(qa, smr.lkey).unwrap();
    a.dereg_mr(qa, rmr.lkey).unwrap();
    drop(a);
    assert!(src.iter().all(|&x| x == 0x3C));
    assert!(rcv.iter().all(|&x| x == 0x4D));
}

/// A data packet of `opcode` (SEND_* here) to `qpn` as if from the QP configured `from`:
/// PSN its initial one plus `ahead`, MSN `msn`, MSGETH `message_len` and `offset`.
#[allow(clippy::too_many_arguments)]
fn forged_send(
    qpn: u32,
    from: &ConnConfig,
    opcode: Opcode,
    ahead: u32,
    msn: u32,
    message_len: u32,
    offset: u32,
    payload: &[u8],
) -> Vec<u8> {
    let psn = from.initial_psn.value().wrapping_add(ahead) & 0xFF_FFFF;
    let p = PacketRepr {
        bth: BthRepr {
            opcode,
            pkey: from.pkey,
            dest_qpn: qpn,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 0,
            msn,
            send_ts_ns: 0,
            generation: from.generation,
            reserved: 0,
        },
        body: Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len,
                offset,
            },
            reth: None,
            imm: None,
            payload,
        }),
    };
    let mut b = vec![0u8; p.buffer_len()];
    p.emit(&mut b).unwrap();
    b
}

/// A two-packet SEND of 16 bytes whose two packets (distinct PSNs) both carry offset 0:
/// bytes 8..16 of the message never arrive. The receiver counts received bytes without
/// looking at offsets, so 8 + 8 = 16 makes the message "whole" and the posted receive
/// completes `Success` with `byte_len` 16 while half of the buffer holds what it held
/// before. Now the receiver keeps the ranges that arrived (`recv::coverage`): the repeat
/// is an `InconsistentMessage` drop and nothing completes.
#[test]
fn a_send_whose_packets_repeat_an_offset_does_not_complete_as_success() {
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let mut a = Worker::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let mut b = Worker::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = a.create_qp(QpConfig::default()).unwrap();
    let qb = b.create_qp(QpConfig::default()).unwrap();
    let mut buf = vec![0x5Au8; 16];
    // SAFETY: `buf` is neither moved nor touched during calls on `b`; the worker is
    // dropped before `buf` is read.
    let mr = unsafe { b.reg_mr_raw(qb, buf.as_mut_ptr(), 16, Access::LOCAL_WRITE) }.unwrap();
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    a.connect(qa, &ib, b_addr).unwrap();
    b.connect(qb, &ia, a_addr).unwrap();
    b.post_recv(
        qb,
        9,
        mrc_transport::Sge {
            lkey: mr.lkey,
            addr: mr.addr,
            len: 16,
        },
    )
    .unwrap();
    let cfg_a = a.config(qa).unwrap().clone();
    let (mut h, hid) = forger(&net, "10.0.0.1", b_addr);
    burst(
        &mut h,
        hid,
        &[
            forged_send(qb, &cfg_a, Opcode::SendFirst, 0, 0, 16, 0, b"AAAAAAAA"),
            forged_send(qb, &cfg_a, Opcode::SendLast, 1, 0, 16, 0, b"BBBBBBBB"),
        ],
    );
    for _ in 0..4 {
        b.progress();
    }
    let got: Vec<_> = std::iter::from_fn(|| b.poll_recv_cq(qb))
        .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
        .collect();
    drop(b);
    // the second packet repeats bytes 0..8 at a fresh PSN: dropped as an inconsistent
    // message, so the message never completes and its receive stays posted
    assert!(got.is_empty(), "completions {got:?}, buffer {buf:02x?}");
}

/// The WRITE_WITH_IMM form of the same gap: two packets of a 16-byte message, both at
/// offset 0 and the region's first byte (distinct PSNs, the last with an immediate):
/// the receive completes `RecvRdmaWithImm` `Success` for 16 bytes of which 8 were never
/// written. Now the repeat is dropped and nothing completes.
#[test]
fn a_write_with_imm_whose_packets_repeat_an_offset_does_not_complete_as_success() {
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let mut a = Worker::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let mut b = Worker::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = a.create_qp(QpConfig::default()).unwrap();
    let qb = b.create_qp(QpConfig::default()).unwrap();
    let mut buf = vec![0x5Au8; 16];
    // SAFETY: `buf` is neither moved nor touched during calls on `b`; the worker is
    // dropped before `buf` is read.
    let mr = unsafe {
        b.reg_mr_raw(
            qb,
            buf.as_mut_ptr(),
            16,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    a.connect(qa, &ib, b_addr).unwrap();
    b.connect(qb, &ia, a_addr).unwrap();
    b.post_recv(
        qb,
        4,
        mrc_transport::Sge {
            lkey: mr.lkey,
            addr: mr.addr,
            len: 0,
        },
    )
    .unwrap();
    let cfg_a = a.config(qa).unwrap().clone();
    let (rkey, addr) = (mr.rkey, mr.addr);
    let first = forged_write_op(
        qb,
        &cfg_a,
        Opcode::RdmaWriteFirst,
        0,
        (rkey, addr),
        16,
        None,
        b"AAAAAAAA",
    );
    let last = forged_write_op(
        qb,
        &cfg_a,
        Opcode::RdmaWriteLastWithImmediate,
        1,
        (rkey, addr),
        16,
        Some(0x77),
        b"BBBBBBBB",
    );
    let (mut h, hid) = forger(&net, "10.0.0.1", b_addr);
    burst(&mut h, hid, &[first, last]);
    for _ in 0..4 {
        b.progress();
    }
    let got: Vec<_> = std::iter::from_fn(|| b.poll_recv_cq(qb))
        .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
        .collect();
    drop(b);
    // the last packet repeats bytes 0..8 at a fresh PSN: dropped as an inconsistent
    // message, so the message never completes and its receive stays posted
    assert!(got.is_empty(), "completions {got:?}, buffer {buf:02x?}");
}

/// A WRITE packet of `opcode` at MSGETH offset 0 of a `message_len`-byte message, RETH
/// (`rkey`, `addr`), MSN 0, PSN the initial one of `from` plus `ahead`.
#[allow(clippy::too_many_arguments)]
fn forged_write_op(
    qpn: u32,
    from: &ConnConfig,
    opcode: Opcode,
    ahead: u32,
    (rkey, addr): (u32, u64),
    message_len: u32,
    imm: Option<u32>,
    payload: &[u8],
) -> Vec<u8> {
    let psn = from.initial_psn.value().wrapping_add(ahead) & 0xFF_FFFF;
    let p = PacketRepr {
        bth: BthRepr {
            opcode,
            pkey: from.pkey,
            dest_qpn: qpn,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 0,
            msn: 0,
            send_ts_ns: 0,
            generation: from.generation,
            reserved: 0,
        },
        body: Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len,
                offset: 0,
            },
            reth: Some(RethRepr {
                virtual_addr: addr,
                rkey,
                dma_len: payload.len() as u32,
            }),
            imm,
            payload,
        }),
    };
    let mut b = vec![0u8; p.buffer_len()];
    p.emit(&mut b).unwrap();
    b
}
