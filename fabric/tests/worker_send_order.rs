//! Issue 18 item 2: what a caller-progressed [`Worker`] puts first on the wire in a
//! request-response exchange, where each datagram is its own system call. Over the
//! in-memory [`FakeNet`], whose filter records every datagram as it is sent:
//! - a pass after a post sends before it looks for arrivals, so a request posted while a
//!   datagram waits unread leaves ahead of that datagram's SACK;
//! - with [`Worker::set_defer_sends_after_receive`], the reply the application posts
//!   leaves ahead of the deferred SACK, in one burst.

use mrc_fabric::engine::{EngineConfig, QpConfig, Worker};
use mrc_fabric::udp::{FakeDatapath, FakeNet, FakeVerdict};
use mrc_transport::completion::WcOpcode;
use mrc_transport::region::MrKey;
use mrc_transport::wire::{Opcode, PacketRepr};
use mrc_transport::{Access, Sge, SharedMem};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Datagrams as sent: (source: the sender's EV socket, opcode).
type Log = Arc<Mutex<Vec<(SocketAddr, Opcode)>>>;

struct Pair {
    a: Worker<FakeDatapath>,
    b: Worker<FakeDatapath>,
    qa: u32,
    qb: u32,
    ka: MrKey,
    kb: MrKey,
    b_addr: SocketAddr,
    log: Log,
    _mem: (SharedMem, SharedMem),
}

/// Workers a (10.0.0.1) and b (10.0.0.2) on one [`FakeNet`] whose filter logs every
/// datagram; b defers its sends after a receive when `defer_b`. Returns the log, a, b and
/// their addresses.
fn logged_workers(
    defer_b: bool,
) -> (
    Log,
    Worker<FakeDatapath>,
    Worker<FakeDatapath>,
    SocketAddr,
    SocketAddr,
) {
    let net = FakeNet::new();
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    net.set_filter(move |from, _, bytes| {
        let op = PacketRepr::parse(bytes)
            .expect("a well-formed datagram")
            .bth
            .opcode;
        l.lock().unwrap().push((from, op));
        FakeVerdict::Deliver
    });
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let a = Worker::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let mut b = Worker::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    b.set_defer_sends_after_receive(defer_b);
    (log, a, b, a_addr, b_addr)
}

fn pair(defer_b: bool) -> Pair {
    let (log, mut a, mut b, a_addr, b_addr) = logged_workers(defer_b);
    let qa = a.create_qp(QpConfig::default()).unwrap();
    let qb = b.create_qp(QpConfig::default()).unwrap();
    let (ma, mb) = (SharedMem::new(64), SharedMem::new(64));
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let ka = a.reg_mr_shared(qa, &ma, rw).unwrap();
    let kb = b.reg_mr_shared(qb, &mb, rw).unwrap();
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    a.connect(qa, &ib, b_addr).unwrap();
    b.connect(qb, &ia, a_addr).unwrap();
    let zero = |k: MrKey| Sge {
        lkey: k.lkey,
        addr: k.addr,
        len: 0,
    };
    a.post_recv(qa, 10, zero(ka)).unwrap();
    b.post_recv(qb, 20, zero(kb)).unwrap();
    Pair {
        a,
        b,
        qa,
        qb,
        ka,
        kb,
        b_addr,
        log,
        _mem: (ma, mb),
    }
}

fn eight(k: MrKey) -> Sge {
    Sge {
        lkey: k.lkey,
        addr: k.addr,
        len: 8,
    }
}

/// b's datagrams so far, in send order.
fn sent_by_b(p: &Pair) -> Vec<Opcode> {
    let log = p.log.lock().unwrap();
    log.iter()
        .filter(|(from, _)| from.ip() == p.b_addr.ip())
        .map(|&(_, op)| op)
        .collect()
}

/// Progresses both until each side has its one send and one receive completion (b's
/// receive already taken when `b_received`), then checks them.
fn finish(p: &mut Pair, b_received: bool) {
    let until = Instant::now() + Duration::from_secs(10);
    let (mut sa, mut ra, mut sb, mut rb) = (None, None, None, None);
    while sa.is_none() || ra.is_none() || sb.is_none() || (rb.is_none() && !b_received) {
        assert!(Instant::now() < until, "no completions within 10 s");
        p.a.progress();
        p.b.progress();
        sa = sa.or_else(|| p.a.poll_send_cq(p.qa));
        ra = ra.or_else(|| p.a.poll_recv_cq(p.qa));
        sb = sb.or_else(|| p.b.poll_send_cq(p.qb));
        if !b_received {
            rb = rb.or_else(|| p.b.poll_recv_cq(p.qb));
        }
    }
    assert_eq!(
        sa.map(|c| (c.wr_id, c.opcode)),
        Some((1, WcOpcode::WriteWithImm))
    );
    assert_eq!(ra.map(|c| (c.wr_id, c.imm)), Some((10, Some(8))));
    assert_eq!(
        sb.map(|c| (c.wr_id, c.opcode)),
        Some((2, WcOpcode::WriteWithImm))
    );
    if !b_received {
        assert_eq!(rb.map(|c| (c.wr_id, c.imm)), Some((20, Some(7))));
    }
}

/// b posts its request while a's WRITE waits unread in b's queue: b's pass sends the
/// request first, then reads a's WRITE and SACKs it.
#[test]
fn a_pass_after_a_post_sends_before_it_reads() {
    let mut p = pair(false);
    let (ka, kb) = (p.ka, p.kb);
    p.a.post_write_with_imm(p.qa, 1, eight(ka), kb.addr, kb.rkey, 7)
        .unwrap();
    assert!(p.a.progress());
    p.b.post_write_with_imm(p.qb, 2, eight(kb), ka.addr, ka.rkey, 8)
        .unwrap();
    assert!(p.b.progress());
    assert_eq!(
        sent_by_b(&p),
        vec![Opcode::RdmaWriteOnlyWithImmediate, Opcode::Sack]
    );
    finish(&mut p, false);
}

/// With deferral, the pass that delivers a's WRITE sends nothing; the reply posted then
/// leaves first and the SACK right after it.
#[test]
fn a_deferred_sack_follows_the_reply() {
    let mut p = pair(true);
    let (ka, kb) = (p.ka, p.kb);
    p.a.post_write_with_imm(p.qa, 1, eight(ka), kb.addr, kb.rkey, 7)
        .unwrap();
    assert!(p.a.progress());
    let until = Instant::now() + Duration::from_secs(10);
    let got = loop {
        assert!(
            Instant::now() < until,
            "a's WRITE not delivered within 10 s"
        );
        p.b.progress();
        if let Some(c) = p.b.poll_recv_cq(p.qb) {
            break c;
        }
    };
    assert_eq!((got.wr_id, got.imm), (20, Some(7)));
    assert_eq!(sent_by_b(&p), vec![], "the delivering pass defers its SACK");
    p.b.post_write_with_imm(p.qb, 2, eight(kb), ka.addr, ka.rkey, 8)
        .unwrap();
    assert!(p.b.progress());
    assert_eq!(
        sent_by_b(&p),
        vec![Opcode::RdmaWriteOnlyWithImmediate, Opcode::Sack]
    );
    finish(&mut p, true);
}

/// One QP per direction, as the libfabric provider has them: b's QP `qb_in` takes a's
/// requests (from `qa_out`), b's QP `qb_out` carries its replies (to `qa_in`). With
/// deferral, the reply b posts on `qb_out` leaves ahead of the SACK `qb_in` owes for
/// the request, whatever order the worker keeps its QPs in: the QP posted on sends
/// first. Run for 8 pairs (each with new random QPNs, so new map orders).
#[test]
fn a_reply_on_another_qp_leaves_before_the_deferred_sack() {
    for _ in 0..8 {
        let (log, mut a, mut b, a_addr, b_addr) = logged_workers(true);
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let mems: Vec<SharedMem> = (0..4).map(|_| SharedMem::new(64)).collect();
        let qp = |w: &mut Worker<FakeDatapath>, m: &SharedMem| {
            let q = w.create_qp(QpConfig::default()).unwrap();
            let k = w.reg_mr_shared(q, m, rw).unwrap();
            (q, k)
        };
        let (qa_out, ka_out) = qp(&mut a, &mems[0]);
        let (qa_in, ka_in) = qp(&mut a, &mems[1]);
        let (qb_in, kb_in) = qp(&mut b, &mems[2]);
        let (qb_out, kb_out) = qp(&mut b, &mems[3]);
        for (q, pq) in [(qa_out, qb_in), (qa_in, qb_out)] {
            a.connect(q, &b.local_info(pq).unwrap(), b_addr).unwrap();
        }
        for (q, pq) in [(qb_in, qa_out), (qb_out, qa_in)] {
            b.connect(q, &a.local_info(pq).unwrap(), a_addr).unwrap();
        }
        let zero = |k: MrKey| Sge {
            lkey: k.lkey,
            addr: k.addr,
            len: 0,
        };
        a.post_recv(qa_in, 10, zero(ka_in)).unwrap();
        b.post_recv(qb_in, 20, zero(kb_in)).unwrap();

        a.post_write_with_imm(qa_out, 1, eight(ka_out), kb_in.addr, kb_in.rkey, 7)
            .unwrap();
        assert!(a.progress());
        let until = Instant::now() + Duration::from_secs(10);
        let got = loop {
            assert!(Instant::now() < until, "a's request not delivered");
            b.progress();
            if let Some(c) = b.poll_recv_cq(qb_in) {
                break c;
            }
        };
        assert_eq!((got.wr_id, got.imm), (20, Some(7)));
        let by_b = |log: &Log| -> Vec<Opcode> {
            let log = log.lock().unwrap();
            log.iter()
                .filter(|(from, _)| from.ip() == b_addr.ip())
                .map(|&(_, op)| op)
                .collect()
        };
        assert_eq!(by_b(&log), vec![], "the delivering pass defers its SACK");
        b.post_write_with_imm(qb_out, 2, eight(kb_out), ka_in.addr, ka_in.rkey, 8)
            .unwrap();
        assert!(b.progress());
        assert_eq!(
            by_b(&log),
            vec![Opcode::RdmaWriteOnlyWithImmediate, Opcode::Sack]
        );
    }
}
