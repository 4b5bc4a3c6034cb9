//! Issue 18, items 1 and 2: application-owned memory (raw pointer and length, and
//! `SharedMem`) registered with a QP, and progress on the caller's thread (`Worker`).
//! Exact values: the bytes that land, the CQ entries, the typed refusal of a
//! deregistration while posted, and forged WRITEs (wrong rkey, out-of-range address) that
//! are counted drops leaving every byte of the application's buffer as it was.

mod engine_common;

use engine_common::forged_write;
use mrc_fabric::datapath::{ConnId, Datapath, PathMap, TxBatch};
use mrc_fabric::engine::{Context, EngineConfig, EngineError, QpConfig, Worker};
use mrc_fabric::udp::{FakeDatapath, FakeNet, PortAllocator, UdpConfig, UringDatapath};
use mrc_transport::completion::{Completion, WcOpcode, WcStatus};
use mrc_transport::stats::DropReason;
use mrc_transport::{Access, DeregisterError, Ecn, Sge, SharedMem};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

/// Progresses both workers until `done` holds or `T` passes.
fn drive<A: Datapath, B: Datapath>(
    a: &mut Worker<A>,
    b: &mut Worker<B>,
    mut done: impl FnMut(&mut Worker<A>, &mut Worker<B>) -> bool,
) {
    let until = Instant::now() + T;
    while !done(a, b) {
        assert!(Instant::now() < until, "no progress within {T:?}");
        a.progress();
        b.progress();
    }
}

/// Two caller-progress workers on UDP loopback, connected without TCP (QpInfo swapped
/// in memory), both driven from this one thread: a WRITE from raw memory into a
/// `SharedMem`, then a WRITE_WITH_IMM the other way from a `SharedMem` into raw memory.
#[test]
fn caller_progress_write_and_write_with_imm_on_loopback_udp() {
    let udp = |range| {
        let mut u = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
        u.ports = PortAllocator::new(range).unwrap();
        Worker::<UringDatapath>::new(u, EngineConfig::default()).unwrap()
    };
    let mut a = udp(32000..=32099);
    let mut b = udp(32100..=32199);
    let qa = a.create_qp(QpConfig::default()).unwrap();
    let qb = b.create_qp(QpConfig::default()).unwrap();
    const LEN: usize = 100_000;
    // a's raw buffer with 64 guard bytes each side; b's SharedMem.
    let mut a_buf: Vec<u8> = (0..LEN + 128).map(|i| (i * 7 % 251) as u8).collect();
    let a_sent: Vec<u8> = a_buf[64..64 + LEN].to_vec();
    // SAFETY: `a_buf` is neither moved nor touched during calls on `a`, and is
    // deregistered (below) before it is read.
    let a_mr = unsafe {
        a.reg_mr_raw(
            qa,
            a_buf.as_mut_ptr().add(64),
            LEN,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    let b_mem = SharedMem::from_vec((0..LEN).map(|i| (i % 13) as u8 + 100).collect());
    let b_sent = b_mem.with(|b| b.to_vec());
    let b_mr = b
        .reg_mr_shared(qb, &b_mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    assert_eq!(ia.regions.len(), 1);
    let pa = a.connect(qa, &ib, b.udp_addr()).unwrap();
    let pb = b.connect(qb, &ia, a.udp_addr()).unwrap();
    a.set_peer_source_ports(qa, &pb).unwrap();
    b.set_peer_source_ports(qb, &pa).unwrap();
    // a -> b: plain WRITE of all LEN bytes (b gets no completion).
    let sge = |k: &mrc_transport::MrKey| Sge {
        lkey: k.lkey,
        addr: k.addr,
        len: LEN as u32,
    };
    a.post_write(qa, 11, sge(&a_mr), b_mr.addr, b_mr.rkey)
        .unwrap();
    let mut ca: Vec<Completion> = Vec::new();
    drive(&mut a, &mut b, |a, _| {
        ca.extend(a.poll_send_cq(qa));
        !ca.is_empty()
    });
    assert_eq!(ca.len(), 1);
    assert_eq!(
        (ca[0].wr_id, ca[0].opcode, ca[0].status, ca[0].byte_len),
        (11, WcOpcode::Write, WcStatus::Success, LEN as u32)
    );
    assert!(b_mem.with(|m| m == &a_sent[..]));
    assert_eq!(b.poll_recv_cq(qb), None);
    // b -> a: WRITE_WITH_IMM of b's original bytes (kept aside) into a's raw memory.
    b_mem.write_at(0, &b_sent).unwrap();
    a.post_recv(
        qa,
        5,
        Sge {
            lkey: a_mr.lkey,
            addr: a_mr.addr,
            len: 0,
        },
    )
    .unwrap();
    b.post_write_with_imm(qb, 12, sge(&b_mr), a_mr.addr, a_mr.rkey, 0xFEED)
        .unwrap();
    let (mut sb, mut ra) = (Vec::new(), Vec::new());
    drive(&mut a, &mut b, |a, b| {
        sb.extend(b.poll_send_cq(qb));
        ra.extend(a.poll_recv_cq(qa));
        !sb.is_empty() && !ra.is_empty()
    });
    assert_eq!(sb.len(), 1);
    assert_eq!(
        (sb[0].wr_id, sb[0].opcode, sb[0].status, sb[0].byte_len),
        (12, WcOpcode::WriteWithImm, WcStatus::Success, LEN as u32)
    );
    assert_eq!(ra.len(), 1);
    assert_eq!(
        (
            ra[0].wr_id,
            ra[0].opcode,
            ra[0].status,
            ra[0].byte_len,
            ra[0].imm
        ),
        (
            5,
            WcOpcode::RecvRdmaWithImm,
            WcStatus::Success,
            LEN as u32,
            Some(0xFEED)
        )
    );
    let (sa, ea) = a.stats(qa).unwrap();
    assert_eq!(sa.conn.received_bytes, LEN as u64);
    assert_eq!(sa.conn.sent_bytes, LEN as u64);
    assert_eq!(ea.rx_unknown_qpn + ea.rx_bad_source, 0);
    a.dereg_mr(qa, a_mr.lkey).unwrap();
    drop(a);
    assert_eq!(&a_buf[64..64 + LEN], &b_sent[..]);
    assert!(
        a_buf[..64]
            .iter()
            .chain(&a_buf[64 + LEN..])
            .enumerate()
            .all(|(j, &x)| {
                let i = if j < 64 { j } else { j + LEN };
                x == (i * 7 % 251) as u8
            })
    );
}

/// Raw application memory on a caller-progress worker over the fake network: WRITEs with
/// every right field but a wrong rkey, or an address outside the region (one byte past
/// the end, straddling the end, below the start), are counted drops (`BadRkey`,
/// `OutOfBounds`), and the guard bytes around the region, and the region itself, keep
/// every byte; a well-formed WRITE lands exactly. Deregistration is refused while a
/// receive is posted in the region, with the counts.
#[test]
fn forged_writes_against_raw_memory_are_counted_drops_that_touch_nothing() {
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let mut a = Worker::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let mut b = Worker::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = a.create_qp(QpConfig::default()).unwrap();
    let qb = b.create_qp(QpConfig::default()).unwrap();
    const LEN: usize = 4096;
    const GUARD: usize = 4096;
    let mut buf = vec![0x5Au8; GUARD + LEN + GUARD];
    // SAFETY: `buf` is neither moved nor touched during calls on `b`; the worker is
    // dropped before `buf` is read.
    let mr = unsafe {
        b.reg_mr_raw(
            qb,
            buf.as_mut_ptr().add(GUARD),
            LEN,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
    }
    .unwrap();
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    a.connect(qa, &ib, b_addr).unwrap();
    // IP-only source check on b (no peer ports), so the forger on a's IP gets through
    // to the transport: what stops it there is the region check.
    b.connect(qb, &ia, a_addr).unwrap();
    b.post_recv(
        qb,
        1,
        Sge {
            lkey: mr.lkey,
            addr: mr.addr,
            len: 16,
        },
    )
    .unwrap();
    assert!(matches!(
        b.dereg_mr(qb, mr.lkey),
        Err(EngineError::Deregister(DeregisterError::InUse {
            lkey,
            sends: 0,
            recvs: 1
        })) if lkey == mr.lkey
    ));
    let mut hostile = FakeDatapath::new(&net, "10.0.0.1:5000".parse().unwrap());
    let hid: ConnId = hostile
        .open_conn(b_addr, &PathMap::per_ev(vec![1]))
        .unwrap();
    let cfg_a = a.config(qa).unwrap().clone();
    let mut send =
        |b: &mut Worker<FakeDatapath>, ahead: u32, rkey: u32, addr: u64, payload: &[u8]| {
            let bytes = forged_write(qb, &cfg_a, ahead, rkey, addr, payload);
            let mut batch = TxBatch::new(1, 9000);
            assert!(batch.push(hid, 1, Ecn::NotEct, &bytes));
            assert_eq!(hostile.tx_burst(&batch).unwrap().datagrams, 1);
            for _ in 0..4 {
                b.progress();
            }
        };
    let end = mr.addr + LEN as u64;
    send(&mut b, 0, mr.rkey ^ 0x40, mr.addr, &[0xEE; 64]);
    send(&mut b, 0, mr.rkey, end, &[0xEE; 1]);
    send(&mut b, 0, mr.rkey, end - 8, &[0xEE; 16]);
    send(&mut b, 0, mr.rkey, mr.addr - 16, &[0xEE; 32]);
    send(
        &mut b,
        0,
        mr.rkey,
        mr.addr.wrapping_sub(GUARD as u64),
        &[0xEE; 64],
    );
    let (s, _) = b.stats(qb).unwrap();
    assert_eq!(s.conn.drops.get(DropReason::BadRkey), 1);
    assert_eq!(s.conn.drops.get(DropReason::OutOfBounds), 4);
    assert_eq!(s.conn.received, 0);
    // The genuine rkey and an in-bounds address: placed, exactly there.
    send(&mut b, 0, mr.rkey, end - 4, b"LAST");
    let (s, _) = b.stats(qb).unwrap();
    assert_eq!(s.conn.received, 1);
    assert_eq!(s.conn.drops.get(DropReason::OutOfBounds), 4);
    drop(b);
    assert!(buf[..GUARD].iter().all(|&x| x == 0x5A));
    assert!(buf[GUARD + LEN..].iter().all(|&x| x == 0x5A));
    assert!(buf[GUARD..GUARD + LEN - 4].iter().all(|&x| x == 0x5A));
    assert_eq!(&buf[GUARD + LEN - 4..GUARD + LEN], b"LAST");
}

/// On the engine thread: a `SharedMem` registered with a `Qp` is read and written by the
/// application while the engine sends from it and places into it; deregistration while a
/// send names the source is refused with the counts, and works once it completed.
#[test]
fn shared_memory_on_the_engine_thread_and_deregistration_while_posted() {
    let net = FakeNet::new();
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let ca = Context::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = ca.create_qp(QpConfig::default()).unwrap();
    let qb = cb.create_qp(QpConfig::default()).unwrap();
    const LEN: usize = 1 << 20;
    let src = SharedMem::from_vec((0..LEN).map(|i| (i % 241) as u8).collect());
    let dst = SharedMem::new(LEN);
    let smr = qa.reg_mr_shared(&src, Access::LOCAL_WRITE).unwrap();
    let dmr = qb
        .reg_mr_shared(&dst, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    assert!(SharedMem::ptr_eq(&qa.mem(smr.lkey).unwrap(), &src));
    // A receive posted in dst: deregistration refused with its count.
    qb.post_recv(
        3,
        Sge {
            lkey: dmr.lkey,
            addr: dmr.addr,
            len: 0,
        },
    )
    .unwrap();
    // The post reaches the engine before the dereg command (one channel, in order).
    assert!(matches!(
        qb.dereg_mr(dmr.lkey),
        Err(EngineError::Deregister(DeregisterError::InUse { lkey, sends: 0, recvs: 1 }))
            if lkey == dmr.lkey
    ));
    // Only a connects for now: b drops what a sends (not connected), so the send stays
    // outstanding however fast the engines run, until b connects.
    let (ia, ib) = (qa.local_info(), qb.local_info());
    qa.connect(&ib, b_addr).unwrap();
    let sge = Sge {
        lkey: smr.lkey,
        addr: smr.addr,
        len: LEN as u32,
    };
    qa.post_write_with_imm(8, sge, dmr.addr, dmr.rkey, 77)
        .unwrap();
    match qa.dereg_mr(smr.lkey) {
        Err(EngineError::Deregister(DeregisterError::InUse {
            lkey,
            sends: 1,
            recvs: 0,
        })) => assert_eq!(lkey, smr.lkey),
        other => panic!("deregistration while posted: {other:?}"),
    }
    // Now b connects; a's retransmissions (RTO) deliver the message.
    qb.connect(&ia, a_addr).unwrap();
    let c = qa.wait_send_cq(T).unwrap().unwrap();
    assert_eq!(
        (c.wr_id, c.opcode, c.status, c.byte_len),
        (8, WcOpcode::WriteWithImm, WcStatus::Success, LEN as u32)
    );
    let r = qb.wait_recv_cq(T).unwrap().unwrap();
    assert_eq!(
        (r.wr_id, r.opcode, r.status, r.byte_len, r.imm),
        (
            3,
            WcOpcode::RecvRdmaWithImm,
            WcStatus::Success,
            LEN as u32,
            Some(77)
        )
    );
    assert!(dst.with(|d| src.with(|s| d == s)));
    assert_eq!(
        qb.read_mr(dmr.lkey, 1000, 3).unwrap(),
        src.with(|s| s[1000..1003].to_vec())
    );
    qa.dereg_mr(smr.lkey).unwrap();
    qb.dereg_mr(dmr.lkey).unwrap();
    assert!(matches!(
        qa.dereg_mr(smr.lkey),
        Err(EngineError::Deregister(DeregisterError::UnknownKey(k))) if k == smr.lkey
    ));
    // A post naming the deregistered region is refused at once.
    assert!(qa.post_write(9, sge, dmr.addr, dmr.rkey).is_err());
}
