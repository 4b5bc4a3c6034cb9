//! The verbs UD datapath on a real RDMA device: what `verbs_fake.rs` checks on the fake
//! NIC (routing of EVs to QPs, GRH source and ECN, selective signalling and slot
//! accounting, Q_Key and size checks, the engine end to end, the control-stream
//! exchange), here with libibverbs and the kernel's driver doing the work, and the typed
//! errors of a device that exists (wrong name, GID index past the table, datagram above
//! the port's active MTU, no such port).
//!
//! `testbed/rxe-lab.sh` runs this binary in a VM against Soft-RoCE (`rxe0` on `lo`, GID 1
//! = `::ffff:127.0.0.1`). Without an RDMA device (the CI host) every test prints why it
//! did nothing and passes, unless `MRC_VERBS_REQUIRE=1` (the lab sets it): then a missing
//! device fails. `MRC_VERBS_DEVICE` picks the device (default: the only one listed),
//! `MRC_VERBS_GID` the GID index (default 1). The two datapaths of a test share the one
//! device, as `mrc-perf loopback --fabric verbs` does.
#![cfg(feature = "verbs")]

mod engine_common;

use engine_common::PatternWrites;
use mrc_fabric::engine::{Context, EngineConfig, QpConfig, pattern};
use mrc_fabric::udp::{ConnId, Datapath, PathMap, TxBatch};
use mrc_fabric::verbs::nic::Nic;
use mrc_fabric::verbs::pool::PoolStats;
use mrc_fabric::verbs::{
    DEFAULT_QKEY, Device, VerbsConfig, VerbsDatapath, VerbsError, VerbsStats, device_names,
    gid_to_ip,
};
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::{Ecn, Sge};
use std::net::{Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The device and GID index to test, or `None` (after saying why) when there is none.
fn device() -> Option<(String, u8)> {
    let require = std::env::var("MRC_VERBS_REQUIRE").is_ok_and(|v| v == "1");
    let gid: u8 = std::env::var("MRC_VERBS_GID")
        .ok()
        .map(|v| v.parse().expect("MRC_VERBS_GID: a GID index 0..=255"))
        .unwrap_or(1);
    let why = match (std::env::var("MRC_VERBS_DEVICE"), device_names()) {
        (Ok(d), Ok(names)) if names.contains(&d) => return Some((d, gid)),
        (Ok(d), Ok(names)) => format!("MRC_VERBS_DEVICE={d} is not among {names:?}"),
        (Err(_), Ok(names)) if names.len() == 1 => return Some((names[0].clone(), gid)),
        (Err(_), Ok(names)) if names.is_empty() => "libibverbs lists no RDMA device".into(),
        (Err(_), Ok(names)) => format!("several RDMA devices {names:?}: set MRC_VERBS_DEVICE"),
        (_, Err(e)) => e.to_string(),
    };
    assert!(!require, "MRC_VERBS_REQUIRE=1 but no device to test: {why}");
    // Not eprintln!: libtest captures that and shows it only for a failed test; `.ci/run`
    // counts this line as a skip (libtest names the test's thread after the test). One
    // write of the whole line, so that it does not interleave with libtest's own.
    let test = std::thread::current()
        .name()
        .unwrap_or("verbs_rxe")
        .to_string();
    let line = format!(
        "SKIPPED: {test}: {why}; testbed/rxe-lab.sh runs these tests against Soft-RoCE in a \
         VM (MRC_VERBS_REQUIRE=1 makes this a failure)\n"
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    None
}

/// sysfs of port 1 of `dev`.
fn sysfs(dev: &str, rel: &str) -> String {
    let p = format!("/sys/class/infiniband/{dev}/ports/1/{rel}");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .to_string()
}

fn cfg(dev: &str, gid: u8, qps: u32, rq: u32, sq: u32, signal: u32, slots: u32) -> VerbsConfig {
    let mut c = VerbsConfig::new(dev);
    c.gid_index = gid;
    c.qps = qps;
    c.rq_depth = rq;
    c.sq_depth = sq;
    c.signal_every = signal;
    c.send_slots = slots;
    c.max_datagram_bytes = 1024;
    c
}

type Dp = VerbsDatapath<Device>;

fn open(c: VerbsConfig) -> Dp {
    VerbsDatapath::open(c).unwrap()
}

/// Two datapaths on the device, each registered with the other, and a connection from a
/// to b on the EVs `evs`.
fn linked(c: VerbsConfig, evs: Vec<u32>) -> (Dp, Dp, ConnId) {
    let mut a = open(c.clone());
    let mut b = open(c);
    // Both have the device's GID: each one's book holds the other under it.
    a.add_peer(b.local_endpoint().clone());
    b.add_peer(a.local_endpoint().clone());
    let conn = a.open_conn(b.local_addr(), &PathMap::per_ev(evs)).unwrap();
    (a, b, conn)
}

/// Receives until `want` datagrams arrived or 5 s passed, then 50 ms more to catch extras.
fn recv(b: &mut Dp, want: usize) -> Vec<(SocketAddr, Ecn, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut extra_until = None;
    loop {
        b.rx_burst(1024, &mut |d| got.push((d.from, d.ecn, d.bytes.to_vec())))
            .unwrap();
        let now = Instant::now();
        if got.len() >= want && extra_until.is_none() {
            extra_until = Some(now + Duration::from_millis(50));
        }
        if extra_until.is_some_and(|t| now >= t) || now >= deadline {
            return got;
        }
        b.wait(1_000_000).unwrap();
    }
}

/// Reaps send completions (an empty burst does) until `in_use` slots are left or 5 s.
fn reap_until(a: &mut Dp, in_use: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.send_pool().in_use() != in_use && Instant::now() < deadline {
        a.tx_burst(&TxBatch::new(1, 64)).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn open_reports_the_port_gid_and_endpoint_sysfs_shows() {
    let Some((dev, gid)) = device() else { return };
    let a = open(cfg(&dev, gid, 4, 8, 64, 16, 256));
    let want: Ipv6Addr = sysfs(&dev, &format!("gids/{gid}")).parse().unwrap();
    let e = a.local_endpoint();
    assert_eq!(e.gid, want);
    assert_eq!(e.qkey, DEFAULT_QKEY);
    assert_eq!(e.qpns.len(), 4);
    let mut q = e.qpns.clone();
    q.dedup();
    assert_eq!(q.len(), 4, "QPNs {:?}", e.qpns);
    assert!(e.qpns.iter().all(|&n| n > 1 && n < 1 << 24), "{:?}", e.qpns);
    let roce = sysfs(&dev, "link_layer") == "Ethernet";
    assert_eq!(a.is_roce(), roce);
    assert_eq!(a.port().ethernet, roce);
    if roce {
        assert_eq!(e.lid, 0);
        assert_eq!(sysfs(&dev, &format!("gid_attrs/types/{gid}")), "RoCE v2");
    }
    assert_eq!(a.local_addr(), SocketAddr::new(gid_to_ip(want), 4791));
    assert!(
        [256, 512, 1024, 2048, 4096].contains(&a.port().active_mtu_bytes),
        "{:?}",
        a.port()
    );
    // Everything posted: qps * rq_depth receive buffers.
    assert_eq!(a.recv_pool().in_use(), 32);
    assert_eq!(a.verbs_stats(), VerbsStats::default());
}

#[test]
fn evs_route_to_qps_and_arrive_with_grh_source_and_ecn() {
    let Some((dev, gid)) = device() else { return };
    let (mut a, mut b, conn) = linked(cfg(&dev, gid, 4, 8, 64, 16, 256), (0..8).collect());
    // The predicted source ports (flow-label NICs); Soft-RoCE derives its own from the QPN.
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
    let got = recv(&mut b, 8);
    assert_eq!(got.len(), 8);
    let evs: Vec<u8> = got.iter().map(|g| g.2[0]).collect();
    let mut sorted = evs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..8).collect::<Vec<u8>>());
    // One QP is one ordered queue: EV e (QP e % 4) arrives before EV e + 4 (same QP).
    for e in 0..4u8 {
        let pos = |x: u8| evs.iter().position(|&v| v == x).unwrap();
        assert!(pos(e) < pos(e + 4), "arrival order {evs:?}");
    }
    for (from, ecn, bytes) in &got {
        let ev = bytes[0];
        assert_eq!(*from, a.local_addr());
        // Traffic class 0x02 from the config: ECT(0) through the device and back out of
        // the receive GRH (or the IPv4 header in it).
        assert_eq!(*ecn, Ecn::Ect0);
        assert_eq!(bytes.len(), 100 + ev as usize);
        assert!(bytes.iter().all(|&x| x == ev));
    }
    let v = b.verbs_stats();
    assert_eq!(v.rx_reposted, 8);
    assert_eq!(
        (v.rx_short_grh, v.rx_bad_grh, v.rx_error_completions),
        (0, 0, 0)
    );
    assert_eq!(b.recv_pool().in_use(), 32);
    assert_eq!(b.stats().rx_datagrams, 8);
    assert_eq!(a.verbs_stats().tx_signalled, 0);
    assert_eq!(a.send_pool().in_use(), 8);
}

#[test]
fn batch_of_64_on_one_qp_signals_4_wrs_and_frees_every_slot() {
    let Some((dev, gid)) = device() else { return };
    let (mut a, mut b, conn) = linked(cfg(&dev, gid, 1, 64, 128, 16, 128), vec![7]);
    let mut batch = TxBatch::new(64, 1024);
    for i in 0..64u32 {
        batch.push(conn, 7, Ecn::NotEct, &i.to_be_bytes());
    }
    let r = a.tx_burst(&batch).unwrap();
    assert_eq!((r.datagrams, r.send_calls, r.errors), (64, 1, 0));
    assert_eq!(a.verbs_stats().tx_signalled, 4);
    // The device completes the 4 signalled WRs; reaping them frees all 64 slots.
    reap_until(&mut a, 0);
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
    assert_eq!(a.verbs_stats().tx_error_completions, 0);
    let got = recv(&mut b, 64);
    let seq: Vec<u32> = got
        .iter()
        .map(|g| u32::from_be_bytes([g.2[0], g.2[1], g.2[2], g.2[3]]))
        .collect();
    assert_eq!(seq, (0..64).collect::<Vec<_>>());
    assert!(got.iter().all(|g| g.0 == a.local_addr() && g.2.len() == 4));
    assert_eq!(b.verbs_stats().rx_reposted, 64);
}

#[test]
fn wrong_qkey_is_dropped_by_the_device_and_oversize_refused_by_the_sender() {
    let Some((dev, gid)) = device() else { return };
    let c = cfg(&dev, gid, 1, 4, 16, 4, 16);
    let mut a = open(c.clone());
    let mut b = open(c);
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
    // One WR left 15 slots (>= signal_every 4): unsignalled, its slot held until a later
    // signalled WR of the QP retires it. The receiver's device drops the datagram: a UD
    // Q_Key mismatch is silent, nothing reaches the receive queue.
    assert_eq!(recv(&mut b, 1).len(), 0);
    assert_eq!(b.verbs_stats(), VerbsStats::default());
    assert_eq!(b.stats().rx_datagrams, 0);
    assert_eq!(a.verbs_stats().tx_error_completions, 0);
}

#[test]
fn device_errors_name_the_device_the_gid_table_and_the_mtu() {
    let Some((dev, gid)) = device() else { return };
    let names = device_names().unwrap();
    let err = |c: VerbsConfig| VerbsDatapath::open(c).unwrap_err();
    let e = err(VerbsConfig::new("mrc_no_such_dev9"));
    assert!(
        matches!(&e, VerbsError::DeviceNotFound { name, available }
            if name == "mrc_no_such_dev9" && *available == names),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!("RDMA device \"mrc_no_such_dev9\" not found among {names:?}")
    );
    // The GID table: as long as sysfs lists it; index 255 is past it.
    let table_len = std::fs::read_dir(format!("/sys/class/infiniband/{dev}/ports/1/gids"))
        .unwrap()
        .count();
    let mut c = cfg(&dev, 255, 1, 4, 16, 4, 16);
    if table_len > 255 {
        // A long table: its last entries are empty.
        assert_eq!(
            sysfs(&dev, "gids/255"),
            "0000:0000:0000:0000:0000:0000:0000:0000"
        );
    }
    assert_eq!(
        err(c.clone()).to_string(),
        format!("GID index 255 of {dev} port 1 is empty or past the table of {table_len}")
    );
    // An empty entry inside the table is refused the same way.
    if let Some(empty) = (0..table_len.min(255) as u8)
        .find(|i| sysfs(&dev, &format!("gids/{i}")) == "0000:0000:0000:0000:0000:0000:0000:0000")
    {
        c.gid_index = empty;
        assert_eq!(
            err(c.clone()).to_string(),
            format!("GID index {empty} of {dev} port 1 is empty or past the table of {table_len}")
        );
    }
    // The datagram size against the port's active MTU: equal opens, one byte more fails.
    c.gid_index = gid;
    c.max_datagram_bytes = 256;
    let mtu = open(c.clone()).port().active_mtu_bytes;
    c.max_datagram_bytes = mtu;
    assert_eq!(open(c.clone()).port().active_mtu_bytes, mtu);
    c.max_datagram_bytes = mtu + 1;
    let e = err(c.clone());
    assert!(
        matches!(e, VerbsError::MtuTooSmall { asked, mtu_bytes } if asked == mtu + 1 && mtu_bytes == mtu),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "max_datagram_bytes {} exceeds the port's active MTU of {mtu} bytes",
            mtu + 1
        )
    );
    // A port the device does not have: the port query fails (rxe has one port).
    c.max_datagram_bytes = 256;
    c.port = 2;
    let e = err(c);
    assert!(
        matches!(&e, VerbsError::Call { call: "ibv_query_port", source }
            if source.raw_os_error() == Some(22)),
        "{e:?}"
    );
}

#[test]
fn engine_writes_over_the_device_exact_bytes() {
    const SIZE: usize = 64 * 1024;
    const SLOTS: usize = 4;
    const ITERS: u64 = 12;
    let Some((dev, gid)) = device() else { return };
    let t = Duration::from_secs(20);
    let mut vc = cfg(&dev, gid, 16, 64, 256, 16, 4096);
    vc.max_datagram_bytes = 4096;
    let a = open(vc.clone());
    let b = open(vc);
    let (a_book, a_endpoint, a_addr) = (a.peer_book(), a.local_endpoint().clone(), a.local_addr());
    let (b_book, b_endpoint) = (b.peer_book(), b.local_endpoint().clone());
    // a knows b under the IP of a control connection, not the GID.
    let b_addr: SocketAddr = "192.0.2.2:4791".parse().unwrap();
    let ca = Context::with_datapath(a, EngineConfig::default());
    let cb = Context::with_datapath(b, EngineConfig::default());
    a_book.insert(b_addr.ip(), b_endpoint);
    b_book.insert(a_addr.ip(), a_endpoint);
    let mut qc = QpConfig::default();
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
            .expect("send completion in 20 s");
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
            .expect("recv completion in 20 s");
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

/// What `mrc-perf --fabric verbs` does on its control connection, on the device: swap UD
/// endpoint addresses over TCP, register the peer under the control connection's IP, the
/// engine's bootstrap on the same stream, then a WRITE with immediate.
#[test]
fn control_stream_exchange_then_engine_bootstrap() {
    use mrc_fabric::verbs::exchange::{read_endpoint, write_endpoint};
    use std::net::{TcpListener, TcpStream};
    let Some((dev, gid)) = device() else { return };
    let t = Duration::from_secs(20);
    let mut vc = cfg(&dev, gid, 4, 64, 256, 16, 1024);
    vc.max_datagram_bytes = 4096;
    let a = open(vc.clone());
    let b = open(vc);
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
        .expect("send completion in 20 s");
    assert_eq!((sc.wr_id, sc.status), (1, WcStatus::Success));
    let rc = qb
        .wait_recv_cq(t)
        .unwrap()
        .expect("recv completion in 20 s");
    assert_eq!((rc.status, rc.imm), (WcStatus::Success, Some(77)));
    let bytes = qb.read_mr(dst.lkey, 0, 16384).unwrap();
    assert_eq!(pattern::count_bad(&bytes, 3, 0), 0);
}

/// The NIC trait straight on the device: region bytes are handed out only inside the
/// registered regions (the send pool, then the receive pool with GRH space per slot).
#[test]
fn device_regions_hand_out_only_checked_ranges() {
    let Some((dev, gid)) = device() else { return };
    let a = open(cfg(&dev, gid, 1, 4, 16, 4, 16));
    let nic: &Device = a.nic();
    // Region 0: 16 send slots of 1024 bytes; region 1: 4 receive slots of 40 + 1024.
    assert_eq!(nic.bytes(0, 0, 16 * 1024).map(<[u8]>::len), Some(16 * 1024));
    assert!(nic.bytes(0, 16 * 1024 - 1, 2).is_none());
    assert!(nic.bytes(0, usize::MAX, 2).is_none());
    assert_eq!(nic.bytes(1, 0, 4 * 1064).map(<[u8]>::len), Some(4 * 1064));
    assert!(nic.bytes(1, 4 * 1064, 1).is_none());
    assert!(nic.bytes(2, 0, 1).is_none());
}
