//! The verbs UD datapath over the in-memory fake NIC (no device needed): routing of EVs to
//! QPs and AHs, GRH handling on receive, selective signalling and buffer accounting,
//! receive replenishment, and the engine end to end (on its thread, and progressed by the
//! caller's thread through a `Worker`).

mod engine_common;

use engine_common::{PatternWrites, assert_planes_split_evenly};
use mrc_fabric::datapath::{ConnId, Datapath, DatapathError, PathMap, TxBatch};
use mrc_fabric::engine::{Context, EngineConfig, QpConfig, Worker, pattern};
use mrc_fabric::verbs::addr::EndpointAddr;
use mrc_fabric::verbs::grh::GrhRepr;
use mrc_fabric::verbs::nic::PortInfo;
use mrc_fabric::verbs::pool::PoolStats;
use mrc_fabric::verbs::{FakeFabric, FakeNic, VerbsConfig, VerbsDatapath, VerbsStats};
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::region::{Access, SharedMem};
use mrc_transport::{Ecn, Sge};
use std::net::{Ipv6Addr, SocketAddr};
use std::time::Duration;

const PORT: PortInfo = PortInfo {
    ethernet: true,
    active_mtu_bytes: 4096,
    lid: 0,
};

fn cfg(qps: u32, rq_depth: u32, sq_depth: u32, signal_every: u32, send_slots: u32) -> VerbsConfig {
    let mut c = VerbsConfig::new("fake0");
    c.qps = qps;
    c.rq_depth = rq_depth;
    c.sq_depth = sq_depth;
    c.signal_every = signal_every;
    c.send_slots = send_slots;
    c.max_datagram_bytes = 1024;
    c
}

fn dp(fab: &FakeFabric, gid: &str, c: VerbsConfig) -> VerbsDatapath<FakeNic> {
    let gid: Ipv6Addr = gid.parse().unwrap();
    VerbsDatapath::with_nic(fab.nic(gid), PORT, gid, c).unwrap()
}

/// Two datapaths on `fab` at `fd00::1` (a) and `fd00::2` (b), both configured `c`, not
/// introduced to each other.
fn pair(fab: &FakeFabric, c: VerbsConfig) -> (VerbsDatapath<FakeNic>, VerbsDatapath<FakeNic>) {
    (dp(fab, "fd00::1", c.clone()), dp(fab, "fd00::2", c))
}

/// [`pair`], each registered with the other ([`exchange`]), and a connection from a to b
/// on the one EV `ev`.
fn linked(
    fab: &FakeFabric,
    c: VerbsConfig,
    ev: u32,
) -> (VerbsDatapath<FakeNic>, VerbsDatapath<FakeNic>, ConnId) {
    let (mut a, mut b) = pair(fab, c);
    exchange(&mut a, &mut b);
    let conn = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![ev]))
        .unwrap();
    (a, b, conn)
}

/// Registers each side's address with the other through the wire encoding.
fn exchange(a: &mut VerbsDatapath<FakeNic>, b: &mut VerbsDatapath<FakeNic>) {
    let ea = a.local_endpoint().encode().unwrap();
    let eb = b.local_endpoint().encode().unwrap();
    a.add_peer(EndpointAddr::decode(&eb).unwrap());
    b.add_peer(EndpointAddr::decode(&ea).unwrap());
}

fn drain(b: &mut VerbsDatapath<FakeNic>) -> Vec<(SocketAddr, Ecn, Vec<u8>)> {
    let mut got = Vec::new();
    b.rx_burst(1024, &mut |d| got.push((d.from, d.ecn, d.bytes.to_vec())))
        .unwrap();
    got
}

#[test]
fn evs_route_to_qps_and_arrive_with_grh_source_and_ecn() {
    let fab = FakeFabric::new();
    let mut a = dp(&fab, "::ffff:10.0.0.1", cfg(4, 8, 64, 16, 256));
    let mut b = dp(&fab, "::ffff:10.0.0.2", cfg(4, 8, 64, 16, 256));
    assert_eq!(a.local_endpoint().qpns, vec![0x11, 0x12, 0x13, 0x14]);
    assert_eq!(b.local_endpoint().qpns, vec![0x15, 0x16, 0x17, 0x18]);
    assert_eq!(b.local_addr(), "10.0.0.2:4791".parse().unwrap());
    exchange(&mut a, &mut b);
    let conn = a
        .open_conn(b.local_addr(), &PathMap::per_ev((0..8).collect()))
        .unwrap();
    // Flow-label NICs send EV e from UDP port 0xC000 + e.
    assert_eq!(
        a.source_ports(conn).unwrap(),
        (0..8).map(|e| 0xC000 + e).collect::<Vec<u16>>()
    );
    let mut batch = TxBatch::new(8, 1024);
    for ev in 0..8u32 {
        assert!(batch.push(conn, ev, Ecn::Ect0, &vec![ev as u8; 100 + ev as usize]));
    }
    let r = a.tx_burst(&batch).unwrap();
    assert_eq!((r.datagrams, r.send_calls, r.errors), (8, 4, 0));
    let got = drain(&mut b);
    assert_eq!(got.len(), 8);
    // QP order: EVs 0 and 4 on QP 0, 1 and 5 on QP 1, ...
    let evs: Vec<u8> = got.iter().map(|g| g.2[0]).collect();
    assert_eq!(evs, vec![0, 4, 1, 5, 2, 6, 3, 7]);
    for (from, ecn, bytes) in &got {
        let ev = bytes[0];
        assert_eq!(*from, "10.0.0.1:4791".parse().unwrap());
        assert_eq!(*ecn, Ecn::Ect0); // traffic class 0x02 from the config
        assert_eq!(bytes.len(), 100 + ev as usize);
        assert!(bytes.iter().all(|&x| x == ev));
    }
    // Every buffer went back to its QP.
    for qp in 0..4 {
        assert_eq!(b.nic().posted_recvs(qp), Some(8));
    }
    assert_eq!(b.verbs_stats().rx_reposted, 8);
    assert_eq!(b.recv_pool().in_use(), 32);
    // 2 WRs per QP, signal every 16, 248 slots free: nothing signalled, tails hold slots.
    assert_eq!(a.verbs_stats().tx_signalled, 0);
    assert_eq!(a.send_pool().in_use(), 8);
    assert_eq!(b.nic().stats().delivered, 8);
}

#[test]
fn batch_of_64_on_one_qp_signals_4_wrs_and_frees_every_slot() {
    let fab = FakeFabric::new();
    let (mut a, mut b, conn) = linked(&fab, cfg(1, 64, 128, 16, 128), 7);
    let mut batch = TxBatch::new(64, 1024);
    for i in 0..64u32 {
        batch.push(conn, 7, Ecn::NotEct, &i.to_be_bytes());
    }
    let r = a.tx_burst(&batch).unwrap();
    assert_eq!((r.datagrams, r.send_calls, r.errors), (64, 1, 0));
    assert_eq!(a.verbs_stats().tx_signalled, 4);
    assert_eq!(a.send_pool().in_use(), 64);
    // The next burst reaps the 4 completions: all 64 slots come back.
    a.tx_burst(&TxBatch::new(1, 1024)).unwrap();
    assert_eq!(a.send_pool().in_use(), 0);
    assert_eq!(
        a.send_pool().stats(),
        PoolStats {
            allocs: 64,
            frees: 64,
            exhausted: 0,
            double_frees: 0
        }
    );
    let got = drain(&mut b);
    let seq: Vec<u32> = got
        .iter()
        .map(|g| u32::from_be_bytes([g.2[0], g.2[1], g.2[2], g.2[3]]))
        .collect();
    assert_eq!(seq, (0..64).collect::<Vec<_>>());
    assert!(got.iter().all(|g| g.0 == "[fd00::1]:4791".parse().unwrap()));
}

/// The verb calls a burst costs, counted by the fake NIC: one `post_send` chain per QP
/// that has datagrams (not one per datagram), one poll of each CQ per burst, and the
/// receive buffers reposted as one chain per QP.
#[test]
fn a_burst_costs_one_post_send_per_qp_one_poll_per_cq_and_one_repost_chain_per_qp() {
    let fab = FakeFabric::new();
    let mut a = dp(&fab, "fd00::1", cfg(2, 64, 128, 16, 128));
    let mut b = dp(&fab, "fd00::2", cfg(2, 64, 128, 16, 128));
    exchange(&mut a, &mut b);
    // Setup: every receive buffer posted, one chain of rq_depth per QP.
    let setup = b.nic().stats();
    assert_eq!((setup.post_recv_calls, setup.post_recv_wrs), (2, 128));
    assert_eq!((setup.post_send_calls, setup.poll_send_calls), (0, 0));
    // EVs 10 and 12 leave on QP 0, 11 and 13 on QP 1.
    let conn = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![10, 11, 12, 13]))
        .unwrap();
    let mut batch = TxBatch::new(40, 1024);
    for i in 0..40u32 {
        assert!(batch.push(conn, 10 + i % 4, Ecn::NotEct, &i.to_be_bytes()));
    }
    let r = a.tx_burst(&batch).unwrap();
    assert_eq!((r.datagrams, r.send_calls, r.errors), (40, 2, 0));
    let s = a.nic().stats();
    // 2 chains of 20 WRs; the send CQ polled once (the reap before the burst).
    assert_eq!((s.post_send_calls, s.post_send_wrs), (2, 40));
    assert_eq!((s.poll_send_calls, s.poll_recv_calls), (1, 0));
    // 20 WRs per QP, signal every 16: the 16th of each is signalled.
    assert_eq!(a.verbs_stats().tx_signalled, 2);
    // One receive burst: one poll of each CQ, then 20 buffers back to each QP in one chain.
    let got = drain(&mut b);
    assert_eq!(got.len(), 40);
    let s = b.nic().stats();
    assert_eq!((s.poll_send_calls, s.poll_recv_calls), (1, 1));
    assert_eq!((s.post_recv_calls, s.post_recv_wrs), (2 + 2, 128 + 40));
    assert_eq!(b.verbs_stats().rx_reposted, 40);
    assert_eq!(
        (b.nic().posted_recvs(0), b.nic().posted_recvs(1)),
        (Some(64), Some(64))
    );
    // The next burst of a reaps the 2 completions: 16 slots per QP back, the 4
    // unsignalled tail WRs of each QP still hold theirs.
    let r = a.tx_burst(&TxBatch::new(1, 1024)).unwrap();
    assert_eq!((r.datagrams, r.send_calls), (0, 0));
    assert_eq!(a.send_pool().in_use(), 8);
    let s = a.nic().stats();
    assert_eq!(
        (s.post_send_calls, s.post_send_wrs, s.poll_send_calls),
        (2, 40, 2)
    );
}

#[test]
fn send_pool_exhaustion_is_counted_and_a_forced_tail_signal_frees_the_slots() {
    let fab = FakeFabric::new();
    let (mut a, mut b, conn) = linked(&fab, cfg(1, 16, 8, 4, 4), 0);
    // Three datagrams leave 1 slot free (< signal_every 4): the tail is signalled.
    let mut batch = TxBatch::new(10, 64);
    for _ in 0..3 {
        batch.push(conn, 0, Ecn::NotEct, b"abc");
    }
    assert_eq!(a.tx_burst(&batch).unwrap().datagrams, 3);
    assert_eq!(a.verbs_stats().tx_signalled, 1);
    // Ten more: the reap frees 3, so 4 slots: 4 sent, 6 refused for want of a buffer.
    batch.clear();
    for _ in 0..10 {
        batch.push(conn, 0, Ecn::NotEct, b"defg");
    }
    let r = a.tx_burst(&batch).unwrap();
    assert_eq!((r.datagrams, r.errors), (4, 6));
    let v = a.verbs_stats();
    assert_eq!((v.tx_no_buffer, v.tx_signalled), (6, 2));
    assert_eq!(a.send_pool().stats().exhausted, 6);
    assert_eq!(a.stats().tx_errors, 6);
    assert_eq!(drain(&mut b).len(), 7);
}

#[test]
fn short_receive_and_unknown_grh_are_counted_drops_and_ce_reaches_the_transport() {
    let fab = FakeFabric::new();
    let (mut a, mut b, conn) = linked(&fab, cfg(1, 4, 16, 4, 16), 1);
    let mut n = 0;
    fab.set_filter(move |p| {
        n += 1;
        match n {
            1 => p.byte_len_override = Some(20),
            2 => p.grh = [0x50; 40],
            3 => {
                let mut g = GrhRepr::parse(&p.grh).unwrap();
                g.traffic_class |= 0b11;
                g.emit(p.payload.len() as u16, &mut p.grh);
            }
            _ => {}
        }
        true
    });
    let mut batch = TxBatch::new(4, 64);
    for i in 0..4u8 {
        batch.push(conn, 1, Ecn::Ect0, &[i; 10]);
    }
    a.tx_burst(&batch).unwrap();
    let got = drain(&mut b);
    assert_eq!(
        got.iter().map(|g| (g.1, g.2[0])).collect::<Vec<_>>(),
        vec![(Ecn::Ce, 2), (Ecn::Ect0, 3)]
    );
    let v = b.verbs_stats();
    assert_eq!((v.rx_short_grh, v.rx_bad_grh, v.rx_reposted), (1, 1, 4));
    assert_eq!(b.stats().rx_errors, 2);
    assert_eq!(b.stats().rx_datagrams, 2);
    assert_eq!(b.nic().posted_recvs(0), Some(4));
}

#[test]
fn wrong_qkey_is_dropped_by_the_receiver_and_oversize_refused_by_the_sender() {
    let fab = FakeFabric::new();
    let (mut a, b) = pair(&fab, cfg(1, 4, 16, 4, 16));
    let mut wrong = b.local_endpoint().clone();
    wrong.qkey ^= 1;
    a.add_peer(wrong);
    let conn = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![3]))
        .unwrap();
    let mut batch = TxBatch::new(2, 2048);
    batch.push(conn, 3, Ecn::NotEct, &[1; 1024]);
    batch.push(conn, 3, Ecn::NotEct, &[1; 1025]);
    let r = a.tx_burst(&batch).unwrap();
    assert_eq!((r.datagrams, r.errors), (1, 1));
    assert_eq!(a.verbs_stats().tx_oversize, 1);
    let mut b = b;
    assert_eq!(drain(&mut b).len(), 0);
    assert_eq!(b.nic().stats().dropped_qkey, 1);
    assert_eq!(b.verbs_stats(), VerbsStats::default());
}

#[test]
fn unknown_peer_srh_maps_and_unknown_evs_are_typed_errors() {
    let fab = FakeFabric::new();
    let (mut a, b) = pair(&fab, cfg(1, 4, 16, 4, 16));
    match a.open_conn(b.local_addr(), &PathMap::per_ev(vec![0])) {
        Err(DatapathError::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("{other:?}"),
    }
    a.add_peer(b.local_endpoint().clone());
    let mut srh_map = PathMap::per_ev(vec![0]);
    let (srh, _) = mrc_fabric::srv6::SrhRepr::for_path(
        pnet_packet::ip::IpNextHeaderProtocols::Udp,
        &["fd00::9".parse().unwrap()],
    )
    .unwrap();
    srh_map.srh.push(srh);
    assert!(matches!(
        a.open_conn(b.local_addr(), &srh_map),
        Err(DatapathError::BadPathMap(_))
    ));
    let conn = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![0]))
        .unwrap();
    let mut batch = TxBatch::new(1, 64);
    batch.push(conn, 9, Ecn::NotEct, b"x");
    assert!(matches!(
        a.tx_burst(&batch),
        Err(DatapathError::UnknownEv { ev: 9, .. })
    ));
    batch.clear();
    batch.push(ConnId(77), 0, Ecn::NotEct, b"x");
    assert!(matches!(
        a.tx_burst(&batch),
        Err(DatapathError::UnknownConn(ConnId(77)))
    ));
    assert_eq!(a.send_pool().in_use(), 0);
}

#[test]
fn engine_writes_over_the_verbs_datapath_exact_bytes() {
    const SIZE: usize = 64 * 1024;
    const SLOTS: usize = 4;
    const ITERS: u64 = 12;
    let t = Duration::from_secs(10);
    let fab = FakeFabric::new();
    let mut vc = cfg(16, 64, 256, 16, 4096);
    vc.max_datagram_bytes = 4096;
    let a = dp(&fab, "::ffff:10.0.0.1", vc.clone());
    let mut b = dp(&fab, "::ffff:10.0.0.2", vc);
    b.add_peer(a.local_endpoint().clone());
    let a_addr = a.local_addr();
    // a learns b's address after its datapath moved into the engine, under the IP of a
    // control connection rather than the GID.
    let (a_book, b_endpoint) = (a.peer_book(), b.local_endpoint().clone());
    let b_addr: SocketAddr = "192.0.2.2:4791".parse().unwrap();
    let ca = Context::with_datapath(a, EngineConfig::default());
    a_book.insert(b_addr.ip(), b_endpoint);
    let cb = Context::with_datapath(b, EngineConfig::default());
    let mut qc = QpConfig::default();
    // A UD datagram is at most the port MTU (4096): leave room for mrc's headers.
    qc.conn.send.mtu_payload_bytes = 4000;
    let qa = ca.create_qp(qc.clone()).unwrap();
    let qb = cb.create_qp(qc).unwrap();
    let (ia, ib) = (qa.local_info(), qb.local_info());
    assert_eq!(qa.connect(&ib, b_addr).unwrap().len(), 16);
    assert_eq!(qb.connect(&ia, a_addr).unwrap().len(), 16);
    let w = PatternWrites::new(&qa, &qb, SIZE, SLOTS, 5);
    w.set_verify(&qb);
    for i in 0..ITERS {
        qb.post_recv(i, w.recv_sge()).unwrap();
    }
    let (mut posted, mut done) = (0u64, 0u64);
    while done < ITERS {
        w.post(&qa, ITERS, &mut posted, done);
        let c = qa
            .wait_send_cq(t)
            .unwrap()
            .expect("send completion in 10 s");
        assert_eq!(
            (c.wr_id, c.opcode, c.status),
            (done, WcOpcode::WriteWithImm, WcStatus::Success)
        );
        done += 1;
    }
    for i in 0..ITERS {
        let c = qb
            .wait_recv_cq(t)
            .unwrap()
            .expect("recv completion in 10 s");
        assert_eq!((c.status, c.imm), (WcStatus::Success, Some(i as u32)));
    }
    let (sb, _) = qb.stats().unwrap();
    assert_eq!(sb.verify.checked_messages, ITERS);
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sb.conn.received_bytes, ITERS * SIZE as u64);
    // 64 KiB in 4000-byte packets: 17 packets per message.
    assert_eq!(sb.conn.received, ITERS * 17);
    w.assert_slots_hold_last(&qb, ITERS);
}

/// What `mrc-perf --fabric verbs` does on its control connection: swap UD endpoint
/// addresses, register the peer under the control connection's IP, then the engine's own
/// bootstrap on the same stream; then data flows.
#[test]
fn control_stream_exchange_then_engine_bootstrap() {
    use mrc_fabric::verbs::exchange::{read_endpoint, write_endpoint};
    use std::net::{TcpListener, TcpStream};
    let t = Duration::from_secs(10);
    let fab = FakeFabric::new();
    let mut vc = cfg(4, 64, 256, 16, 1024);
    vc.max_datagram_bytes = 4096;
    let a = dp(&fab, "fd00::a", vc.clone());
    let b = dp(&fab, "fd00::b", vc);
    let (book_a, addr_a) = (a.peer_book(), a.local_endpoint().clone());
    let (book_b, addr_b) = (b.peer_book(), b.local_endpoint().clone());
    let ca = Context::with_datapath(a, EngineConfig::default());
    let cb = Context::with_datapath(b, EngineConfig::default());
    let mut qc = QpConfig::default();
    qc.conn.send.mtu_payload_bytes = 4000;
    qc.conn.evs = (0..4).collect();
    let qa = ca.create_qp(qc.clone()).unwrap();
    let qb = cb.create_qp(qc).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let server_addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, peer) = l.accept().unwrap();
        write_endpoint(&mut s, &addr_b).unwrap();
        book_b.insert(peer.ip(), read_endpoint(&mut s).unwrap());
        let c = qb.connect_on(s, t).unwrap();
        (qb, c.source_ports)
    });
    let mut s = TcpStream::connect(server_addr).unwrap();
    write_endpoint(&mut s, &addr_a).unwrap();
    book_a.insert(server_addr.ip(), read_endpoint(&mut s).unwrap());
    let c = qa.connect_on(s, t).unwrap();
    let (qb, b_ports) = server.join().unwrap();
    // 4 EVs, one QP and one flow-labelled AH each: ports 0xC000..=0xC003 on both sides.
    assert_eq!(c.source_ports, vec![0xC000, 0xC001, 0xC002, 0xC003]);
    assert_eq!(b_ports, c.source_ports);
    let w = PatternWrites::new(&qa, &qb, 16384, 1, 3);
    let (src, dst) = (w.src, w.dst);
    qa.fill_pattern(src.lkey, 0, 16384, 3, 0).unwrap();
    qb.post_recv(0, w.recv_sge()).unwrap();
    let sge = Sge {
        lkey: src.lkey,
        addr: src.addr,
        len: 16384,
    };
    qa.post_write_with_imm(1, sge, dst.addr, dst.rkey, 77)
        .unwrap();
    let sc = qa
        .wait_send_cq(t)
        .unwrap()
        .expect("send completion in 10 s");
    assert_eq!((sc.wr_id, sc.status), (1, WcStatus::Success));
    let rc = qb
        .wait_recv_cq(t)
        .unwrap()
        .expect("recv completion in 10 s");
    assert_eq!((rc.status, rc.imm), (WcStatus::Success, Some(77)));
    let bytes = qb.read_mr(dst.lkey, 0, 16384).unwrap();
    assert_eq!(pattern::count_bad(&bytes, 3, 0), 0);
}

/// What `mrc-perf --fabric verbs --progress caller` runs: a [`Worker`] over the boxed
/// verbs datapath on each side (no engine thread, no channels), both progressed by this
/// one thread. 12 WRITE_WITH_IMMs of 64 KiB, 3 in flight, from 4 slots of a's memory into
/// 4 slots of b's: every completion arrives in order, and the slots hold the last 4 messages' bytes.
#[test]
fn worker_over_the_verbs_datapath_writes_exact_bytes_on_the_callers_thread() {
    const SIZE: usize = 64 * 1024;
    const SLOTS: u64 = 4;
    const ITERS: u64 = 12;
    const DEPTH: u64 = 3;
    const SEED: u64 = 9;
    type BoxedWorker = Worker<Box<dyn Datapath + Send>>;
    let fab = FakeFabric::new();
    let mut vc = cfg(16, 64, 256, 16, 4096);
    vc.max_datagram_bytes = 4096;
    let a = dp(&fab, "::ffff:10.0.0.1", vc.clone());
    let b = dp(&fab, "::ffff:10.0.0.2", vc);
    // As mrc-perf's control connection does: each peer registered under the IP the other
    // connects to (here its GID's IPv4).
    let (a_book, b_book) = (a.peer_book(), b.peer_book());
    let (a_end, b_end) = (a.local_endpoint().clone(), b.local_endpoint().clone());
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    a_book.insert(b_addr.ip(), b_end);
    b_book.insert(a_addr.ip(), a_end);
    let mut wa: BoxedWorker = Worker::with_datapath(Box::new(a), EngineConfig::default());
    let mut wb: BoxedWorker = Worker::with_datapath(Box::new(b), EngineConfig::default());
    let mut qc = QpConfig::default();
    qc.conn.send.mtu_payload_bytes = 4000;
    qc.conn.evs = (0..16).collect();
    let qa = wa.create_qp(qc.clone()).unwrap();
    let qb = wb.create_qp(qc).unwrap();
    let (src_mem, dst_mem) = (
        SharedMem::new(SIZE * SLOTS as usize),
        SharedMem::new(SIZE * SLOTS as usize),
    );
    let src = wa.reg_mr_shared(qa, &src_mem, Access::LOCAL_WRITE).unwrap();
    let dst = wb
        .reg_mr_shared(qb, &dst_mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (ia, ib) = (wa.local_info(qa).unwrap(), wb.local_info(qb).unwrap());
    // 16 EVs on 16 UD QPs: one RoCEv2 source port each, 0xC000 up.
    let ports: Vec<u16> = (0xC000..0xC010).collect();
    assert_eq!(wa.connect(qa, &ib, b_addr).unwrap(), ports);
    assert_eq!(wb.connect(qb, &ia, a_addr).unwrap(), ports);
    for i in 0..ITERS {
        let sge = Sge {
            lkey: dst.lkey,
            addr: dst.addr,
            len: 0,
        };
        wb.post_recv(qb, i, sge).unwrap();
    }
    let (mut posted, mut sent, mut received) = (0u64, 0u64, 0u64);
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while sent < ITERS || received < ITERS {
        assert!(
            std::time::Instant::now() < until,
            "10 s: {sent} sends and {received} receives completed"
        );
        // Message i leaves source slot i mod SLOTS for destination slot i mod SLOTS; with
        // DEPTH < SLOTS in flight, a slot's previous message has completed when it is
        // refilled.
        while posted < ITERS && posted - sent < DEPTH {
            let off = (posted % SLOTS) * SIZE as u64;
            src_mem
                .with_range_mut(off as usize, SIZE, |buf| pattern::fill(buf, SEED, posted))
                .unwrap();
            let sge = Sge {
                lkey: src.lkey,
                addr: src.addr + off,
                len: SIZE as u32,
            };
            wa.post_write_with_imm(qa, posted, sge, dst.addr + off, dst.rkey, posted as u32)
                .unwrap();
            posted += 1;
        }
        wa.progress();
        wb.progress();
        while let Some(c) = wa.poll_send_cq(qa) {
            assert_eq!(
                (c.wr_id, c.opcode, c.status),
                (sent, WcOpcode::WriteWithImm, WcStatus::Success)
            );
            sent += 1;
        }
        while let Some(c) = wb.poll_recv_cq(qb) {
            assert_eq!(
                (c.wr_id, c.opcode, c.status, c.imm),
                (
                    received,
                    WcOpcode::RecvRdmaWithImm,
                    WcStatus::Success,
                    Some(received as u32)
                )
            );
            // Checked before the sender may reuse the slot (SLOTS > in flight).
            let off = ((received % SLOTS) * SIZE as u64) as usize;
            let bad = dst_mem
                .with_range(off, SIZE, |buf| pattern::count_bad(buf, SEED, received))
                .unwrap();
            assert_eq!(bad, 0, "message {received}");
            received += 1;
        }
        assert!(posted >= sent && sent <= ITERS && received <= ITERS);
    }
    assert_eq!(wa.poll_send_cq(qa), None);
    assert_eq!(wb.poll_recv_cq(qb), None);
    let ((sa, _), (sb, _)) = (wa.stats(qa).unwrap(), wb.stats(qb).unwrap());
    // 64 KiB in 4000-byte packets: 17 per message, every one delivered once (the fake
    // NIC neither drops nor reorders).
    assert_eq!(sb.conn.received, ITERS * 17);
    assert_eq!(sb.conn.received_bytes, ITERS * SIZE as u64);
    assert_eq!(sa.conn.sent, ITERS * 17 + sa.conn.retransmitted);
    assert_eq!(sa.conn.retransmitted, 0);
    // The boxed datapaths' counters: a sent its 204 data datagrams and nothing else, b
    // received exactly those; b sent only SACKs, and what a received were those SACKs.
    let (da, db) = (wa.datapath().stats(), wb.datapath().stats());
    assert_eq!((da.tx_datagrams, db.rx_datagrams), (ITERS * 17, ITERS * 17));
    assert_eq!(db.tx_datagrams, sb.conn.sacks_sent);
    assert_eq!(da.rx_datagrams, sa.conn.sacks_received);
    assert_eq!((sb.conn.sent, sa.conn.received), (0, 0));
    assert_eq!(
        (da.tx_errors, da.rx_errors, db.tx_errors, db.rx_errors),
        (0, 0, 0, 0)
    );
    for slot in 0..SLOTS {
        let msg = ITERS - SLOTS + slot;
        let off = ((msg % SLOTS) * SIZE as u64) as usize;
        let bad = dst_mem
            .with_range(off, SIZE, |buf| pattern::count_bad(buf, SEED, msg))
            .unwrap();
        assert_eq!(bad, 0, "slot {slot} holds message {msg}");
    }
}

/// Sends `iters` verified 64 KiB WRITEs with immediate from `qa` to `qb` (`qb`'s receives
/// posted here) and waits for every completion at both ends.
fn write_all(
    qa: &mrc_fabric::engine::Qp,
    qb: &mrc_fabric::engine::Qp,
    w: &PatternWrites,
    from: u64,
    iters: u64,
) {
    let t = Duration::from_secs(10);
    for i in from..from + iters {
        qb.post_recv(i, w.recv_sge()).unwrap();
    }
    let (mut posted, mut done) = (from, from);
    while done < from + iters {
        w.post(qa, from + iters, &mut posted, done);
        let c = qa
            .wait_send_cq(t)
            .unwrap()
            .expect("send completion in 10 s");
        assert_eq!((c.wr_id, c.status), (done, WcStatus::Success));
        done += 1;
    }
    for i in from..from + iters {
        let c = qb
            .wait_recv_cq(t)
            .unwrap()
            .expect("recv completion in 10 s");
        assert_eq!((c.status, c.imm), (WcStatus::Success, Some(i as u32)));
    }
}

/// Packets sent on each of two planes by `q`'s EVs.
fn plane_sent(q: &mrc_fabric::engine::Qp) -> [u64; 2] {
    let (s, _) = q.stats().unwrap();
    let mut out = [0u64; 2];
    for ((_, _, e), p) in s.evs.iter().zip(&s.ev_planes) {
        out[usize::from(*p)] += e.sent;
    }
    out
}

/// Two devices per host, one per plane (`PlanesDatapath` over two `VerbsDatapath`s on the
/// fake fabric): the bootstrap swaps both planes' GIDs, EV i goes on plane i mod 2, round robin splits
/// the packets 50/50; then every packet to a plane-1 GID is dropped: the
/// transfer goes on over plane 0 with exact bytes, plane 1 down by loss at the sender.
#[test]
fn two_devices_one_per_plane_spray_and_survive_losing_one() {
    use mrc_fabric::planes::PlanesDatapath;
    use mrc_transport::path::{PlaneDownCause, PlaneState};
    const SIZE: usize = 64 * 1024;
    let fab = FakeFabric::new();
    let mut vc = cfg(8, 64, 256, 16, 4096);
    vc.max_datagram_bytes = 4096;
    let gids = [
        "::ffff:10.0.0.1",
        "::ffff:10.1.0.1",
        "::ffff:10.0.0.2",
        "::ffff:10.1.0.2",
    ];
    let [a0, a1, b0, b1] = gids.map(|g| dp(&fab, g, vc.clone()));
    // each plane's device knows the peer's device on the same plane
    a0.peer_book()
        .insert(b0.local_addr().ip(), b0.local_endpoint().clone());
    a1.peer_book()
        .insert(b1.local_addr().ip(), b1.local_endpoint().clone());
    b0.peer_book()
        .insert(a0.local_addr().ip(), a0.local_endpoint().clone());
    b1.peer_book()
        .insert(a1.local_addr().ip(), a1.local_endpoint().clone());
    let a = PlanesDatapath::new(vec![a0, a1], false).unwrap();
    let b = PlanesDatapath::new(vec![b0, b1], false).unwrap();
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    assert_eq!(
        a.plane_ips(),
        vec![
            "10.0.0.1".parse::<std::net::IpAddr>().unwrap(),
            "10.1.0.1".parse().unwrap()
        ]
    );
    let ca = Context::with_datapath(a, EngineConfig::default());
    let cb = Context::with_datapath(b, EngineConfig::default());
    let mut qc = QpConfig::default();
    qc.conn.send.mtu_payload_bytes = 4000;
    // Round robin over the EVs, not recycling: the split between planes is then the
    // datapath's mapping alone, not the engine threads' timing (recycling reuses the EVs
    // whose acknowledgements the engine saw first, 67/33 on a loaded CI host).
    qc.conn.selection = mrc_transport::path::Selection::RoundRobin;
    let qa = ca.create_qp(qc.clone()).unwrap();
    let qb = cb.create_qp(qc).unwrap();
    let (ia, ib) = (qa.local_info(), qb.local_info());
    assert_eq!(ib.plane_ips.len(), 2);
    qa.connect(&ib, b_addr).unwrap();
    qb.connect(&ia, a_addr).unwrap();
    let w = PatternWrites::new(&qa, &qb, SIZE, 4, 9);
    w.set_verify(&qb);
    write_all(&qa, &qb, &w, 0, 20);
    let sent = plane_sent(&qa);
    let total = sent[0] + sent[1];
    let (sa, _) = qa.stats().unwrap();
    // 20 messages of 17 packets; round robin over EVs that alternate planes.
    assert_eq!(total, sa.conn.sent);
    assert_eq!(total - sa.conn.retransmitted, 340, "{sent:?}");
    assert_planes_split_evenly(sent, &sa);
    assert_eq!(
        sa.ev_planes,
        (0..16).map(|i| (i % 2) as u8).collect::<Vec<u8>>()
    );
    // Plane 1 dies: nothing reaches a plane-1 GID any more.
    let dead: [Ipv6Addr; 2] = [gids[1].parse().unwrap(), gids[3].parse().unwrap()];
    fab.set_filter(move |p| !dead.contains(&p.dgid));
    write_all(&qa, &qb, &w, 20, 40);
    let (sa, _) = qa.stats().unwrap();
    assert_eq!(sa.planes[1].0, PlaneState::Down(PlaneDownCause::Loss));
    assert_eq!(sa.planes[0].0, PlaneState::Up);
    let (sb, _) = qb.stats().unwrap();
    assert_eq!(sb.verify.checked_messages, 60);
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sb.conn.received_bytes, 60 * SIZE as u64);
    w.assert_slots_hold_last(&qb, 60);
}

/// A QP in the error state is reset once everything it held came back, and carries again:
/// one QP (rq_depth 8), a's port down (`FakeFabric::set_port_up`, as rdma_rxe's port
/// follows its netdev): a's 4 sends fail (1 LOC_QP_OP_ERR + 3 flushed) and its 8 posted
/// receives come back flushed; the next pass resets the QP (RESET, INIT, RTR, RTS) and
/// posts 8 receives again. While the port stays down the next send fails the same way;
/// once it is up, 4 datagrams arrive byte-exact. Before, a UD QP in error stayed there for
/// good (the lab's two-planes run: plane 1 never came back after its NIC did).
#[test]
fn a_qp_in_error_is_reset_once_drained_and_carries_again() {
    let fab = FakeFabric::new();
    let (mut a, mut b, conn) = linked(&fab, cfg(1, 8, 64, 4, 64), 0);
    let a_gid: Ipv6Addr = "fd00::1".parse().unwrap();
    let send4 = |a: &mut VerbsDatapath<FakeNic>, tag: u8| {
        let mut batch = TxBatch::new(4, 1024);
        for i in 0..4u8 {
            assert!(batch.push(conn, 0, Ecn::Ect0, &[tag, i, 7, 7]));
        }
        a.tx_burst(&batch).unwrap()
    };
    let r = send4(&mut a, 1);
    assert_eq!((r.datagrams, r.errors), (4, 0));
    assert_eq!(drain(&mut b).len(), 4);
    fab.set_port_up(a_gid, false);
    let r = send4(&mut a, 2);
    assert_eq!((r.datagrams, r.errors), (4, 0)); // posted; they fail on the NIC
    assert_eq!(a.nic().stats().failed_sends, 4);
    // a's pass: the 4 error completions, the 8 flushed receives, then the reset
    assert_eq!(drain(&mut a).len(), 0);
    let v = a.verbs_stats();
    assert_eq!(
        (v.tx_error_completions, v.rx_error_completions, v.qp_resets),
        (4, 8, 1)
    );
    assert_eq!(a.nic().posted_recvs(0), Some(8));
    assert_eq!(a.send_pool().in_use(), 0);
    assert_eq!(drain(&mut b).len(), 0);
    // still down: the next send fails again, and the next pass resets again
    let r = send4(&mut a, 3);
    assert_eq!((r.datagrams, r.errors), (4, 0));
    assert_eq!(drain(&mut a).len(), 0);
    assert_eq!(a.verbs_stats().qp_resets, 2);
    // up again: the QP carries
    fab.set_port_up(a_gid, true);
    let r = send4(&mut a, 4);
    assert_eq!((r.datagrams, r.errors), (4, 0));
    let got = drain(&mut b);
    let payloads: Vec<Vec<u8>> = got.into_iter().map(|g| g.2).collect();
    assert_eq!(
        payloads,
        (0..4u8).map(|i| vec![4, i, 7, 7]).collect::<Vec<_>>()
    );
    assert_eq!(a.nic().stats().qp_resets, 2);
    assert_eq!(a.verbs_stats().tx_qp_error, 0);
}
