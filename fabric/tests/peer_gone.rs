//! A peer that vanishes (its context dropped: its engine stops, its sockets close) is
//! found on real loopback sockets within the unresponsive budget by a side that only
//! waits: a receive posted, nothing in flight. Both progress modes (the engine thread's
//! `Qp`, the caller's `Worker`), with the budget set to 300 ms for the test (keepalives
//! every 15 ms): the oldest receive fails with `RetryExceeded` and the QP names
//! `peer unresponsive for 0.3 s`. Before, the receive stayed posted for ever.

use mrc_fabric::engine::{Context, EngineConfig, QpConfig, Worker};
use mrc_fabric::udp::{PortAllocator, UdpConfig};
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::send::GiveUp;
use mrc_transport::{Access, Sge, SharedMem};
use std::net::TcpListener;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
const BUDGET: Duration = Duration::from_millis(300);

fn qp_cfg() -> QpConfig {
    let mut c = QpConfig::default();
    c.conn.send.unresponsive_budget_ns = Some(BUDGET.as_nanos() as u64);
    c
}

fn udp(range: std::ops::RangeInclusive<u16>) -> UdpConfig {
    let mut u = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
    u.ports = PortAllocator::new(range).unwrap();
    u
}

/// The detection time is the budget less at most one keepalive interval (15 ms; the last
/// packet heard may be that old) plus the scheduling of two real processes' threads.
fn assert_within_budget(took: Duration) {
    assert!(
        took >= BUDGET - Duration::from_millis(40) && took <= BUDGET + Duration::from_millis(250),
        "{took:?}"
    );
}

#[test]
fn an_engine_thread_qp_waiting_on_a_receive_finds_its_vanished_peer() {
    let ca = Context::new(udp(18500..=18549), EngineConfig::default()).unwrap();
    let cb = Context::new(udp(18550..=18599), EngineConfig::default()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = listener.local_addr().unwrap();
    let qa = ca.create_qp(qp_cfg()).unwrap();
    let qb = cb.create_qp(qp_cfg()).unwrap();
    let mr = qb.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let t = std::thread::spawn(move || {
        qb.accept(&listener, T).unwrap();
        qb
    });
    qa.connect_tcp(server, T).unwrap();
    let qb = t.join().unwrap();
    let sge = Sge {
        lkey: mr.lkey,
        addr: mr.addr,
        len: 64,
    };
    qb.post_recv(1, sge).unwrap();
    qb.post_recv(2, sge).unwrap();
    // both alive and idle for three budgets: the keepalives are answered
    assert_eq!(qb.wait_recv_cq(3 * BUDGET).unwrap(), None);
    let (sb, _) = qb.stats().unwrap();
    assert!(sb.conn.keepalives_sent > 0 && sb.conn.keepalive_replies > 0);
    // a vanishes
    drop(qa);
    drop(ca);
    let gone = Instant::now();
    let c = qb.wait_recv_cq(T).unwrap().expect("a completion");
    assert_within_budget(gone.elapsed());
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RetryExceeded));
    let c = qb.wait_recv_cq(T).unwrap().expect("a completion");
    assert_eq!((c.wr_id, c.status), (2, WcStatus::Flushed));
    let (sb, _) = qb.stats().unwrap();
    let cause = sb.give_up.expect("a cause");
    assert!(matches!(cause, GiveUp::PeerUnresponsive { .. }));
    assert_eq!(cause.to_string(), "peer unresponsive for 0.3 s");
}

#[test]
fn a_caller_progressed_worker_waiting_on_a_receive_finds_its_vanished_peer() {
    let mut a = Worker::new(udp(18600..=18649), EngineConfig::default()).unwrap();
    let mut b = Worker::new(udp(18650..=18699), EngineConfig::default()).unwrap();
    let (lid, handle) = b.listen(qp_cfg()).unwrap();
    let cid = a.connect_start(&handle, qp_cfg()).unwrap();
    let until = Instant::now() + T;
    let (mut qa, mut qb) = (None, None);
    while qa.is_none() || qb.is_none() {
        assert!(Instant::now() < until, "setup");
        a.progress();
        b.progress();
        if qa.is_none() {
            qa = a.poll_connect(cid).unwrap();
        }
        if qb.is_none() {
            qb = b.poll_accept(lid).transpose().unwrap();
        }
    }
    let (qa, qb) = (qa.unwrap(), qb.unwrap());
    let mem = SharedMem::new(64);
    let k = b.reg_mr_shared(qb, &mem, Access::LOCAL_WRITE).unwrap();
    let sge = Sge {
        lkey: k.lkey,
        addr: k.addr,
        len: 64,
    };
    b.post_recv(qb, 7, sge).unwrap();
    let alive_until = Instant::now() + 3 * BUDGET;
    while Instant::now() < alive_until {
        a.progress();
        b.progress();
        assert!(
            b.poll_recv_cq(qb).is_none(),
            "failed while the peer was alive"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let _ = qa;
    drop(a);
    let gone = Instant::now();
    let c = loop {
        b.progress();
        if let Some(c) = b.poll_recv_cq(qb) {
            break c;
        }
        assert!(gone.elapsed() < T, "the receive never failed");
        std::thread::sleep(Duration::from_micros(200));
    };
    assert_within_budget(gone.elapsed());
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (7, WcStatus::RetryExceeded, WcOpcode::Recv)
    );
    let (s, _) = b.stats(qb).unwrap();
    assert_eq!(
        s.give_up.map(|g| g.to_string()).as_deref(),
        Some("peer unresponsive for 0.3 s")
    );
}
