//! Queue depths on every QP (issue: 200,000 work requests posted on one QP were all
//! taken): `max_send_wr` send and `max_recv_wr` receive work requests, each counted from
//! its post until the application takes its completion (verbs frees a slot at
//! `ibv_poll_cq`); a post beyond is refused at once with the typed error, and taking a
//! completion frees one slot. Both progress modes, over the in-memory fake network.

use mrc_fabric::engine::{Context, EngineConfig, QpConfig, Worker};
use mrc_fabric::udp::{FakeDatapath, FakeNet};
use mrc_transport::completion::WcStatus;
use mrc_transport::{Access, PostError, Sge, SharedMem};
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn cfg() -> QpConfig {
    let mut c = QpConfig::default();
    c.conn.max_send_wr = 4;
    c.conn.max_recv_wr = 3;
    c
}

fn addrs() -> (SocketAddr, SocketAddr) {
    (
        "10.0.0.1:4792".parse().unwrap(),
        "10.0.0.2:4792".parse().unwrap(),
    )
}

#[test]
fn an_engine_thread_qp_refuses_posts_beyond_its_depths() {
    let net = FakeNet::new();
    let (a_addr, b_addr) = addrs();
    let ca = Context::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = ca.create_qp(cfg()).unwrap();
    let qb = cb.create_qp(cfg()).unwrap();
    let (ia, ib) = (qa.local_info(), qb.local_info());
    qa.connect(&ib, b_addr).unwrap();
    qb.connect(&ia, a_addr).unwrap();
    let src = qa.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let dst = qb
        .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let zero = Sge {
        lkey: dst.lkey,
        addr: dst.addr,
        len: 0,
    };
    for i in 0..3 {
        qb.post_recv(i, zero).unwrap();
    }
    assert_eq!(
        qb.post_recv(3, zero),
        Err(PostError::RecvQueueFull { max_recv_wr: 3 })
    );
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 64,
    };
    for i in 0..4 {
        qa.post_write(i, sge, dst.addr, dst.rkey).unwrap();
    }
    assert_eq!(
        qa.post_write(4, sge, dst.addr, dst.rkey),
        Err(PostError::SendQueueFull { max_send_wr: 4 })
    );
    // the four complete, but their slots stay taken until the completions are
    let mut all = Vec::new();
    while all.len() < 4 {
        let c = qa.wait_send_cq(T).unwrap().expect("a completion");
        assert_eq!(c.status, WcStatus::Success);
        all.push(c);
        // each taken completion frees one slot: one post fits, the next not
        qa.post_write(10 + all.len() as u64, sge, dst.addr, dst.rkey)
            .unwrap();
        assert_eq!(
            qa.post_write(99, sge, dst.addr, dst.rkey),
            Err(PostError::SendQueueFull { max_send_wr: 4 })
        );
    }
    // take the four posted meanwhile
    for _ in 0..4 {
        let c = qa.wait_send_cq(T).unwrap().expect("a completion");
        assert_eq!(c.status, WcStatus::Success);
    }
    // receives: a WRITE with immediate takes one; its completion frees the slot
    let empty = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 0,
    };
    qa.post_write_with_imm(51, empty, dst.addr, dst.rkey, 7)
        .unwrap();
    let c = qb.wait_recv_cq(T).unwrap().expect("a receive completion");
    assert_eq!((c.wr_id, c.status, c.imm), (0, WcStatus::Success, Some(7)));
    qb.post_recv(3, zero).unwrap();
    assert_eq!(
        qb.post_recv(4, zero),
        Err(PostError::RecvQueueFull { max_recv_wr: 3 })
    );
}

#[test]
fn a_worker_qp_refuses_posts_beyond_its_depths() {
    let net = FakeNet::new();
    let (a_addr, b_addr) = addrs();
    let mut a = Worker::with_datapath(FakeDatapath::new(&net, a_addr), EngineConfig::default());
    let mut b = Worker::with_datapath(FakeDatapath::new(&net, b_addr), EngineConfig::default());
    let qa = a.create_qp(cfg()).unwrap();
    let qb = b.create_qp(cfg()).unwrap();
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    a.connect(qa, &ib, b_addr).unwrap();
    b.connect(qb, &ia, a_addr).unwrap();
    let (ma, mb) = (SharedMem::new(64), SharedMem::new(64));
    let ka = a.reg_mr_shared(qa, &ma, Access::LOCAL_WRITE).unwrap();
    let kb = b
        .reg_mr_shared(qb, &mb, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let zero = Sge {
        lkey: kb.lkey,
        addr: kb.addr,
        len: 0,
    };
    for i in 0..3 {
        b.post_recv(qb, i, zero).unwrap();
    }
    assert_eq!(
        b.post_recv(qb, 3, zero),
        Err(PostError::RecvQueueFull { max_recv_wr: 3 })
    );
    let sge = Sge {
        lkey: ka.lkey,
        addr: ka.addr,
        len: 64,
    };
    for i in 0..4 {
        a.post_write(qa, i, sge, kb.addr, kb.rkey).unwrap();
    }
    assert_eq!(
        a.post_write(qa, 4, sge, kb.addr, kb.rkey),
        Err(PostError::SendQueueFull { max_send_wr: 4 })
    );
    // progress until all four completed: still full while their completions wait in
    // the worker's queue
    let until = std::time::Instant::now() + T;
    while a
        .with_conn(qa, |c| c.send_state().outstanding_messages())
        .unwrap()
        > 0
    {
        assert!(std::time::Instant::now() < until, "no completions");
        a.progress();
        b.progress();
    }
    assert_eq!(
        a.post_write(qa, 4, sge, kb.addr, kb.rkey),
        Err(PostError::SendQueueFull { max_send_wr: 4 })
    );
    assert_eq!(a.poll_send_cq(qa).map(|c| c.wr_id), Some(0));
    a.post_write(qa, 4, sge, kb.addr, kb.rkey).unwrap();
    assert_eq!(
        a.post_write(qa, 5, sge, kb.addr, kb.rkey),
        Err(PostError::SendQueueFull { max_send_wr: 4 })
    );
}
