//! The plain-syscall UDP datapath ([`DirectDatapath`]) on loopback (127.0.0.1 and ::1
//! only): exact datagram and system-call counts, the batch's order kept, GSO runs, ECN
//! read back, shared EV sockets, the waker; and a caller-progressed ping-pong of two
//! workers over it with its exact completion and datagram accounting. No timed assertion.

mod udp_common;
use mrc_fabric::datapath::{ConnId, Datapath, DatapathError, PathMap, TxBatch};
use mrc_fabric::engine::{EngineConfig, QpConfig, Worker};
use mrc_fabric::udp::{DirectCounters, DirectDatapath, PortAllocator, UdpConfig};
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::region::SharedMem;
use mrc_transport::{Access, Ecn, Sge};
use std::time::Duration;
use udp_common::recv_n;

fn dp(bind: &str, ports: &PortAllocator, gso: bool) -> DirectDatapath {
    let mut cfg = UdpConfig::bind(bind.parse().unwrap());
    cfg.ports = ports.clone();
    cfg.gso = gso;
    DirectDatapath::new(cfg).unwrap()
}

fn index(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// 64 datagrams over 16 EVs (EV i % 16): 64 `sendmsg`s (no two neighbours share a
/// socket), received in the batch's order, each from its EV's source port.
fn sixteen_evs(bind: &str, range: std::ops::RangeInclusive<u16>) {
    let ports = PortAllocator::new(range).unwrap();
    let mut a = dp(bind, &ports, true);
    let mut b = dp(bind, &ports, true);
    assert!(!a.reorders_bursts());
    let c = a
        .open_conn(b.local_addr(), &PathMap::per_ev((0..16).collect()))
        .unwrap();
    let src = a.source_ports(c).unwrap();
    assert_eq!(src.len(), 16);
    assert_eq!(a.ev_sockets(), 16);
    let mut batch = TxBatch::new(64, 2048);
    for i in 0..64u32 {
        let mut payload = vec![0u8; 1000];
        payload[..4].copy_from_slice(&i.to_be_bytes());
        assert!(batch.push(c, i % 16, Ecn::Ect0, &payload));
    }
    let rep = a.tx_burst(&batch).unwrap();
    assert_eq!((rep.datagrams, rep.send_calls, rep.errors), (64, 64, 0));
    assert_eq!(a.counters().sendmsg_calls, 64);
    let got = recv_n(&mut b, 64);
    assert_eq!(got.len(), 64);
    for (i, (from, ecn, bytes)) in got.iter().enumerate() {
        assert_eq!(index(bytes), i as u32, "order kept");
        assert_eq!(bytes.len(), 1000);
        assert_eq!(*ecn, Ecn::Ect0);
        assert_eq!(from.port(), src[i % 16]);
    }
    let s = b.stats();
    assert_eq!((s.rx_datagrams, s.rx_calls, s.rx_errors), (64, 64, 0));
    let s = a.stats();
    assert_eq!((s.tx_datagrams, s.tx_calls, s.tx_errors), (64, 64, 0));
}

#[test]
fn ipv4_sixteen_evs_exact_counts_in_batch_order() {
    sixteen_evs("127.0.0.1:0", 24100..=24149);
}

#[test]
fn ipv6_sixteen_evs_exact_counts_in_batch_order() {
    sixteen_evs("[::1]:0", 24150..=24199);
}

/// Runs of one socket, ECN and length are one `UDP_SEGMENT` send; a shorter datagram
/// closes its run, an ECN change or another socket starts a new one; without GSO every
/// datagram is its own send. The receiver counts every datagram, GRO or not.
#[test]
fn gso_runs_are_consecutive_only_and_split_on_ecn_length_and_socket() {
    let ports = PortAllocator::new(24200..=24249).unwrap();
    for gso in [true, false] {
        let mut a = dp("127.0.0.1:0", &ports, gso);
        let mut b = dp("127.0.0.1:0", &ports, true);
        let c = a
            .open_conn(b.local_addr(), &PathMap::per_ev(vec![0, 1]))
            .unwrap();
        let mut batch = TxBatch::new(16, 2048);
        // EV 0: 3 x 1000 ECT0 | 1000 CE, 500 CE | 1000 CE | EV 1: 1000 CE | EV 0: 1000 CE
        let plan: [(u32, Ecn, usize); 8] = [
            (0, Ecn::Ect0, 1000),
            (0, Ecn::Ect0, 1000),
            (0, Ecn::Ect0, 1000),
            (0, Ecn::Ce, 1000),
            (0, Ecn::Ce, 500),
            (0, Ecn::Ce, 1000),
            (1, Ecn::Ce, 1000),
            (0, Ecn::Ce, 1000),
        ];
        for (i, &(ev, ecn, len)) in plan.iter().enumerate() {
            let mut payload = vec![0u8; len];
            payload[..4].copy_from_slice(&(i as u32).to_be_bytes());
            assert!(batch.push(c, ev, ecn, &payload));
        }
        let rep = a.tx_burst(&batch).unwrap();
        let calls = if gso { 5 } else { 8 };
        assert_eq!((rep.datagrams, rep.send_calls, rep.errors), (8, calls, 0));
        assert_eq!(a.counters().sendmsg_calls, calls);
        let got = recv_n(&mut b, 8);
        let mut seen: Vec<(u32, Ecn, usize)> = got
            .iter()
            .map(|(_, e, bytes)| (index(bytes), *e, bytes.len()))
            .collect();
        seen.sort_unstable_by_key(|s| s.0);
        let want: Vec<(u32, Ecn, usize)> = plan
            .iter()
            .enumerate()
            .map(|(i, &(_, e, l))| (i as u32, e, l))
            .collect();
        assert_eq!(seen, want, "gso {gso}");
        assert_eq!(b.stats().rx_datagrams, 8);
    }
}

/// CE sent is CE received, on both families (the `IP_TOS` / `IPV6_TCLASS` cmsgs).
#[test]
fn ecn_codepoints_round_trip_on_both_families() {
    for (bind, range) in [("127.0.0.1:0", 24250..=24259), ("[::1]:0", 24260..=24269)] {
        let ports = PortAllocator::new(range).unwrap();
        let mut a = dp(bind, &ports, true);
        let mut b = dp(bind, &ports, true);
        let c = a
            .open_conn(b.local_addr(), &PathMap::per_ev(vec![7]))
            .unwrap();
        let codes = [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce];
        let mut batch = TxBatch::new(4, 64);
        for (i, e) in codes.iter().enumerate() {
            assert!(batch.push(c, 7, *e, &[i as u8; 8]));
        }
        assert_eq!(a.tx_burst(&batch).unwrap().datagrams, 4);
        let got = recv_n(&mut b, 4);
        let ecns: Vec<Ecn> = got.iter().map(|g| g.1).collect();
        assert_eq!(ecns, codes.to_vec(), "{bind}");
    }
}

/// Every system call is counted: an empty receive pass is one `recvmmsg` that finds
/// nothing; a wait ended by the waker is one `ppoll`; a batch naming an unknown
/// connection or EV sends nothing.
#[test]
fn empty_polls_waits_and_refused_batches_are_counted_exactly() {
    let ports = PortAllocator::new(24270..=24279).unwrap();
    let mut a = dp("127.0.0.1:0", &ports, true);
    let mut b = dp("127.0.0.1:0", &ports, true);
    assert_eq!(b.rx_burst(64, &mut |_| {}).unwrap(), 0);
    assert_eq!(b.rx_burst(64, &mut |_| {}).unwrap(), 0);
    assert_eq!(
        b.counters(),
        DirectCounters {
            empty_polls: 2,
            ..DirectCounters::default()
        }
    );
    b.waker().wake();
    // Returns at once (the eventfd is readable); the bound only keeps a broken waker
    // from hanging the test for long.
    b.wait(30_000_000_000).unwrap();
    assert_eq!(b.counters().ppoll_calls, 1);
    let c = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![0, 1]))
        .unwrap();
    let mut batch = TxBatch::new(4, 64);
    assert!(batch.push(c, 0, Ecn::NotEct, b"ok"));
    assert!(batch.push(c, 5, Ecn::NotEct, b"no such EV"));
    assert!(matches!(
        a.tx_burst(&batch),
        Err(DatapathError::UnknownEv { ev: 5, .. })
    ));
    let mut batch = TxBatch::new(4, 64);
    assert!(batch.push(ConnId(c.0 + 9), 0, Ecn::NotEct, b"no such conn"));
    assert!(matches!(
        a.tx_burst(&batch),
        Err(DatapathError::UnknownConn(_))
    ));
    assert_eq!(a.counters().sendmsg_calls, 0);
    assert_eq!(a.stats().tx_datagrams, 0);
    // A datagram arrives: one recvmmsg returns it (fewer than the vector's length, so
    // no second call looks for more).
    let mut batch = TxBatch::new(1, 64);
    assert!(batch.push(c, 1, Ecn::NotEct, b"one"));
    assert_eq!(a.tx_burst(&batch).unwrap().datagrams, 1);
    let got = recv_n(&mut b, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, b"one");
    assert_eq!(b.counters().recvmmsg_calls, 1);
}

/// EV sockets are shared: two connections to two peers over 4 EVs hold 4 sockets (the
/// same source ports), each connection's datagrams reach its own peer; closing one keeps
/// them, closing both returns every port.
#[test]
fn ev_sockets_are_shared_across_connections() {
    let ports = PortAllocator::new(24280..=24299).unwrap();
    let mut a = dp("127.0.0.1:0", &ports, true);
    let mut b = dp("127.0.0.1:0", &ports, true);
    let mut c = dp("127.0.0.1:0", &ports, true);
    let to_b = a
        .open_conn(b.local_addr(), &PathMap::per_ev((0..4).collect()))
        .unwrap();
    let to_c = a
        .open_conn(c.local_addr(), &PathMap::per_ev((0..4).collect()))
        .unwrap();
    assert_eq!(a.ev_sockets(), 4);
    assert_eq!(a.source_ports(to_b), a.source_ports(to_c));
    assert_eq!(ports.leased(), 4);
    let mut batch = TxBatch::new(8, 64);
    for ev in 0..4 {
        assert!(batch.push(to_b, ev, Ecn::NotEct, b"b"));
        assert!(batch.push(to_c, ev, Ecn::NotEct, b"c"));
    }
    assert_eq!(a.tx_burst(&batch).unwrap().datagrams, 8);
    let (gb, gc) = (recv_n(&mut b, 4), recv_n(&mut c, 4));
    assert_eq!(gb.len(), 4);
    assert_eq!(gc.len(), 4);
    assert!(gb.iter().all(|g| g.2 == b"b"));
    assert!(gc.iter().all(|g| g.2 == b"c"));
    a.close_conn(to_b);
    assert_eq!((a.ev_sockets(), ports.leased()), (4, 4));
    a.close_conn(to_c);
    assert_eq!((a.ev_sockets(), ports.leased()), (0, 0));
}

/// Two caller-progressed workers on direct datapaths play 200 rounds of ping-pong
/// (WRITE_WITH_IMM of 8 bytes each way, the `mrc-perf --test lat` exchange): every echo
/// carries its round's immediate, and each datapath received exactly what the other
/// sent (no drop on loopback), every datagram through one of its counted system calls.
#[test]
fn caller_progressed_ping_pong_over_direct_datapaths() {
    const ROUNDS: u32 = 200;
    let ports = PortAllocator::new(24300..=24349).unwrap();
    let udp = |ports: &PortAllocator| UdpConfig {
        ports: ports.clone(),
        rx_slots: 2,
        ..UdpConfig::bind("127.0.0.1:0".parse().unwrap())
    };
    let mut a = Worker::direct(udp(&ports), EngineConfig::default()).unwrap();
    let mut b = Worker::direct(udp(&ports), EngineConfig::default()).unwrap();
    let cfg = QpConfig {
        conn: mrc_transport::ConnConfig {
            evs: (0..4).collect(),
            ..mrc_fabric::engine::software_conn_config(
                mrc_fabric::engine::SOFTWARE_MIN_RTO_NS,
                mrc_fabric::engine::SOFTWARE_REORDER_WINDOW_NS,
            )
        },
        ..QpConfig::default()
    };
    let (qa, qb) = (a.create_qp(cfg.clone()).unwrap(), b.create_qp(cfg).unwrap());
    let (ma, mb) = (SharedMem::new(64), SharedMem::new(64));
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let (ka, kb) = (
        a.reg_mr_shared(qa, &ma, rw).unwrap(),
        b.reg_mr_shared(qb, &mb, rw).unwrap(),
    );
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    let pa = a.connect(qa, &ib, b.udp_addr()).unwrap();
    let pb = b.connect(qb, &ia, a.udp_addr()).unwrap();
    a.set_peer_source_ports(qa, &pb).unwrap();
    b.set_peer_source_ports(qb, &pa).unwrap();
    let recv = |w: &mut Worker<DirectDatapath>, q: u32, k: mrc_transport::region::MrKey| {
        w.post_recv(
            q,
            0,
            Sge {
                lkey: k.lkey,
                addr: k.addr,
                len: 0,
            },
        )
        .unwrap();
    };
    let write = |w: &mut Worker<DirectDatapath>,
                 q: u32,
                 k: mrc_transport::region::MrKey,
                 to: mrc_transport::region::MrKey,
                 imm: u32| {
        w.post_write_with_imm(
            q,
            u64::from(imm),
            Sge {
                lkey: k.lkey,
                addr: k.addr,
                len: 8,
            },
            to.addr,
            to.rkey,
            imm,
        )
        .unwrap();
    };
    // Waits (progressing both: one thread plays both ends) for `w`'s next receive
    // completion; bounded by 20000 passes of up to 1 ms each.
    fn next_recv(
        w: &mut Worker<DirectDatapath>,
        q: u32,
        other: &mut Worker<DirectDatapath>,
    ) -> mrc_transport::completion::Completion {
        for _ in 0..20_000 {
            other.progress();
            if let Some(c) = w.poll_recv_cq(q) {
                return c;
            }
            w.wait(Duration::from_millis(1)).unwrap();
            if let Some(c) = w.poll_recv_cq(q) {
                return c;
            }
        }
        panic!("no receive completion");
    }
    for _ in 0..4 {
        recv(&mut a, qa, ka);
        recv(&mut b, qb, kb);
    }
    let mut sends = (0, 0);
    for i in 0..ROUNDS {
        write(&mut a, qa, ka, kb, i);
        let c = next_recv(&mut b, qb, &mut a);
        assert_eq!(
            (c.opcode, c.status, c.imm),
            (WcOpcode::RecvRdmaWithImm, WcStatus::Success, Some(i))
        );
        recv(&mut b, qb, kb);
        write(&mut b, qb, kb, ka, i);
        let c = next_recv(&mut a, qa, &mut b);
        assert_eq!(
            (c.opcode, c.status, c.imm),
            (WcOpcode::RecvRdmaWithImm, WcStatus::Success, Some(i))
        );
        recv(&mut a, qa, ka);
        while let Some(c) = a.poll_send_cq(qa) {
            assert_eq!(c.status, WcStatus::Success);
            sends.0 += 1;
        }
        while let Some(c) = b.poll_send_cq(qb) {
            assert_eq!(c.status, WcStatus::Success);
            sends.1 += 1;
        }
    }
    // Let the last SACKs land, then every send has completed.
    for _ in 0..2000 {
        if sends == (ROUNDS, ROUNDS) {
            break;
        }
        a.wait(Duration::from_millis(1)).unwrap();
        b.wait(Duration::from_millis(1)).unwrap();
        sends.0 += std::iter::from_fn(|| a.poll_send_cq(qa)).count() as u32;
        sends.1 += std::iter::from_fn(|| b.poll_send_cq(qb)).count() as u32;
    }
    assert_eq!(sends, (ROUNDS, ROUNDS));
    for _ in 0..20 {
        a.progress();
        b.progress();
    }
    let (da, db) = (a.datapath(), b.datapath());
    let (sa, sb) = (da.stats(), db.stats());
    // Every datagram sent was received, and vice versa (loopback does not drop).
    assert_eq!(sa.tx_datagrams, sb.rx_datagrams);
    assert_eq!(sb.tx_datagrams, sa.rx_datagrams);
    assert_eq!(
        (sa.tx_errors, sb.tx_errors, sa.rx_errors, sb.rx_errors),
        (0, 0, 0, 0)
    );
    // At least the 200 WRITEs and their 200 SACKs each way (a retransmission under load
    // adds to both ends alike).
    assert!(sa.tx_datagrams >= 2 * u64::from(ROUNDS));
    assert!(sb.tx_datagrams >= 2 * u64::from(ROUNDS));
    // One sendmsg per datagram (8-byte messages: no GSO run of equal lengths on one
    // socket in a ping-pong) and every receive through a counted recvmmsg.
    assert_eq!(da.counters().sendmsg_calls, sa.tx_calls);
    assert_eq!(db.counters().sendmsg_calls, sb.tx_calls);
    assert!(da.counters().recvmmsg_calls <= sa.rx_calls);
    let (qs, _) = b.stats(qb).unwrap();
    assert_eq!(qs.conn.received, u64::from(ROUNDS));
}

/// With [`Worker::set_defer_sends_after_receive`], the pass that delivers a receive
/// sends nothing (its SACK waits); the next call sends the SACK and the reply the
/// application posted meanwhile in one burst; a further pass has nothing left to send.
/// Off, the receiving pass sends the SACK at once.
#[test]
fn deferred_sends_leave_with_the_reply_in_one_burst() {
    let ports = PortAllocator::new(24350..=24379).unwrap();
    for defer in [false, true] {
        let udp = |ports: &PortAllocator| UdpConfig {
            ports: ports.clone(),
            rx_slots: 2,
            ..UdpConfig::bind("127.0.0.1:0".parse().unwrap())
        };
        let mut a = Worker::direct(udp(&ports), EngineConfig::default()).unwrap();
        let mut b = Worker::direct(udp(&ports), EngineConfig::default()).unwrap();
        b.set_defer_sends_after_receive(defer);
        let cfg = QpConfig {
            conn: mrc_transport::ConnConfig {
                evs: vec![0],
                ..mrc_fabric::engine::software_conn_config(
                    mrc_fabric::engine::SOFTWARE_MIN_RTO_NS,
                    mrc_fabric::engine::SOFTWARE_REORDER_WINDOW_NS,
                )
            },
            ..QpConfig::default()
        };
        let (qa, qb) = (a.create_qp(cfg.clone()).unwrap(), b.create_qp(cfg).unwrap());
        let (ma, mb) = (SharedMem::new(64), SharedMem::new(64));
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let (ka, kb) = (
            a.reg_mr_shared(qa, &ma, rw).unwrap(),
            b.reg_mr_shared(qb, &mb, rw).unwrap(),
        );
        let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
        a.connect(qa, &ib, b.udp_addr()).unwrap();
        b.connect(qb, &ia, a.udp_addr()).unwrap();
        let zero = |k: mrc_transport::region::MrKey| Sge {
            lkey: k.lkey,
            addr: k.addr,
            len: 0,
        };
        let eight = |k: mrc_transport::region::MrKey| Sge {
            lkey: k.lkey,
            addr: k.addr,
            len: 8,
        };
        a.post_recv(qa, 0, zero(ka)).unwrap();
        b.post_recv(qb, 0, zero(kb)).unwrap();
        a.post_write_with_imm(qa, 1, eight(ka), kb.addr, kb.rkey, 7)
            .unwrap();
        assert!(a.progress());
        assert_eq!(a.datapath().stats().tx_datagrams, 1);
        // b's pass that receives the WRITE (bounded: the datagram is queued already, on
        // loopback the send returned once it was).
        let mut got = None;
        for _ in 0..1000 {
            b.progress();
            got = b.poll_recv_cq(qb);
            if got.is_some() {
                break;
            }
            b.wait(Duration::from_millis(1)).unwrap();
            got = b.poll_recv_cq(qb);
            if got.is_some() {
                break;
            }
        }
        assert_eq!(got.map(|c| c.imm), Some(Some(7)));
        let sent = b.datapath().stats().tx_datagrams;
        assert_eq!(sent, if defer { 0 } else { 1 }, "defer {defer}");
        b.post_write_with_imm(qb, 2, eight(kb), ka.addr, ka.rkey, 8)
            .unwrap();
        assert!(b.progress());
        let s = b.datapath().stats();
        // SACK and reply: in one burst when deferred, else the SACK went before.
        assert_eq!(
            (s.tx_datagrams, b.stats(qb).unwrap().1.tx_bursts),
            (2, if defer { 1 } else { 2 }),
            "defer {defer}"
        );
        b.progress();
        assert_eq!(b.datapath().stats().tx_datagrams, 2);
    }
}
