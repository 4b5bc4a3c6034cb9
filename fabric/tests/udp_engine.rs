//! The engine and the embedding API: over the fake in-memory datapath (no sockets) and over
//! io_uring UDP on loopback (127.0.0.1 and ::1) with the TCP bootstrap on loopback.

mod engine_common;

use engine_common::{PatternWrites, assert_planes_split_evenly};
use mrc_fabric::engine::{Context, EngineConfig, Qp, QpConfig};
use mrc_fabric::udp::{FakeDatapath, FakeNet, FakeVerdict, PortAllocator, UdpConfig};
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::{Access, Sge};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn qp_cfg() -> QpConfig {
    QpConfig::default()
}

/// Connects two QPs directly (no TCP) over the fake net.
fn fake_pair(net: &FakeNet) -> (Context, Context, Qp, Qp) {
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let ca = Context::with_datapath(FakeDatapath::new(net, a_addr), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(net, b_addr), EngineConfig::default());
    let qa = ca.create_qp(qp_cfg()).unwrap();
    let qb = cb.create_qp(qp_cfg()).unwrap();
    (ca, cb, qa, qb)
}

fn connect_direct(qa: &Qp, qb: &Qp, a_addr: SocketAddr, b_addr: SocketAddr) {
    let ia = qa.local_info();
    let ib = qb.local_info();
    assert_eq!(qa.connect(&ib, b_addr).unwrap().len(), 16);
    assert_eq!(qb.connect(&ia, a_addr).unwrap().len(), 16);
}

/// Writes `iters` messages of `size` bytes from `qa` into slots of `qb` with immediates
/// 0..iters, pattern-filled; returns (send completions, recv completions).
fn write_iters(qa: &Qp, qb: &Qp, size: usize, slots: usize, iters: u64) -> (u64, u64) {
    write_iters_in(qa, qb, &PatternWrites::new(qa, qb, size, slots, 99), iters)
}

/// As [`write_iters`], in regions registered already.
fn write_iters_in(qa: &Qp, qb: &Qp, w: &PatternWrites, iters: u64) -> (u64, u64) {
    w.set_verify(qb);
    for i in 0..(2 * w.slots as u64) {
        qb.post_recv(i, w.recv_sge()).unwrap();
    }
    let (mut posted, mut done, mut recvd) = (0u64, 0u64, 0u64);
    while done < iters || recvd < iters {
        w.post(qa, iters, &mut posted, done);
        if done < iters {
            let c = qa
                .wait_send_cq(T)
                .unwrap()
                .expect("send completion within 10 s");
            assert_eq!(
                (c.wr_id, c.opcode, c.status, c.byte_len),
                (
                    done,
                    WcOpcode::WriteWithImm,
                    WcStatus::Success,
                    w.size as u32
                )
            );
            done += 1;
        }
        let mut got = Vec::new();
        qb.poll_recv_cq(&mut got, usize::MAX);
        for c in got {
            assert_eq!(
                (c.opcode, c.status, c.imm),
                (
                    WcOpcode::RecvRdmaWithImm,
                    WcStatus::Success,
                    Some(recvd as u32)
                )
            );
            qb.post_recv(1000 + recvd, w.recv_sge()).unwrap();
            recvd += 1;
        }
        if done == iters && recvd < iters {
            let c = qb
                .wait_recv_cq(T)
                .unwrap()
                .expect("recv completion within 10 s");
            assert_eq!(c.imm, Some(recvd as u32));
            qb.post_recv(1000 + recvd, w.recv_sge()).unwrap();
            recvd += 1;
        }
    }
    // The destination region holds the last message of every slot.
    w.assert_slots_hold_last(qb, iters);
    (done, recvd)
}

#[test]
fn fake_net_write_with_imm_exact_completions_and_bytes() {
    let net = FakeNet::new();
    let (_ca, _cb, qa, qb) = fake_pair(&net);
    connect_direct(
        &qa,
        &qb,
        "10.0.0.1:4792".parse().unwrap(),
        "10.0.0.2:4792".parse().unwrap(),
    );
    assert_eq!(write_iters(&qa, &qb, 64 * 1024, 4, 12), (12, 12));
    let (sb, _) = qb.stats().unwrap();
    assert_eq!(sb.verify.checked_messages, 12);
    assert_eq!(sb.verify.checked_bytes, 12 * 64 * 1024);
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sb.conn.received_bytes, 12 * 64 * 1024);
    assert_eq!(sb.conn.received, 12 * 16);
}

#[test]
fn fake_net_losses_are_recovered_exactly() {
    let net = FakeNet::new();
    let (_ca, _cb, qa, qb) = fake_pair(&net);
    let a: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let dropped = Arc::new(AtomicU64::new(0));
    let d2 = Arc::clone(&dropped);
    let mut n = 0u64;
    // Every 7th data datagram from a to b (first transmissions and retransmissions) is
    // lost; data opcodes are the RC ones, below 0x20.
    net.set_filter(move |from, _to, b| {
        if from.ip() == a.ip() && b.first().is_some_and(|&op| op < 0x20) {
            n += 1;
            if n % 7 == 0 {
                d2.fetch_add(1, Ordering::Relaxed);
                return FakeVerdict::Drop;
            }
        }
        FakeVerdict::Deliver
    });
    connect_direct(&qa, &qb, a, "10.0.0.2:4792".parse().unwrap());
    assert_eq!(write_iters(&qa, &qb, 32 * 1024, 4, 10), (10, 10));
    let (sa, _) = qa.stats().unwrap();
    let (sb, _) = qb.stats().unwrap();
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sb.verify.checked_messages, 10);
    assert_eq!(sb.conn.received, 10 * 8);
    let lost = dropped.load(Ordering::Relaxed);
    assert!(lost >= 11, "every 7th of >= 80 datagrams: {lost}");
    // Each lost data packet was sent again at least once.
    assert!(
        sa.conn.retransmitted >= lost,
        "retransmitted {} lost {lost}",
        sa.conn.retransmitted
    );
    // a sent every packet once plus its retransmissions; b saw all but the lost ones.
    assert_eq!(sa.conn.sent, 80 + sa.conn.retransmitted);
}

#[test]
fn fake_net_ce_marks_reach_the_receiver_and_come_back_in_sacks() {
    let net = FakeNet::new();
    let (_ca, _cb, qa, qb) = fake_pair(&net);
    let a: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    net.set_filter(move |from, _, _| {
        if from.ip() == a.ip() {
            FakeVerdict::MarkCe
        } else {
            FakeVerdict::Deliver
        }
    });
    connect_direct(&qa, &qb, a, "10.0.0.2:4792".parse().unwrap());
    assert_eq!(write_iters(&qa, &qb, 16 * 1024, 2, 4), (4, 4));
    let (sb, _) = qb.stats().unwrap();
    assert_eq!(sb.conn.received, 16);
    assert_eq!(sb.conn.ecn_ce_received, 16);
    let (sa, _) = qa.stats().unwrap();
    // Every first copy was marked; a spurious retransmission (scheduling delay beyond the
    // RTO) arrives marked too and is echoed as well, so at least 16.
    assert!(sa.conn.ecn_marked >= 16, "{}", sa.conn.ecn_marked);
    assert_eq!(
        sa.evs.iter().map(|(_, _, s)| s.ecn_marked).sum::<u64>(),
        sa.conn.ecn_marked
    );
}

#[test]
fn bad_posts_fail_at_once_or_as_error_completions() {
    let net = FakeNet::new();
    let (_ca, _cb, qa, _qb) = fake_pair(&net);
    let mr = qa.reg_mr(4096, Access::NONE).unwrap();
    // Outside the region: refused synchronously.
    let e = qa.post_send(
        1,
        Sge {
            lkey: mr.lkey,
            addr: mr.addr + 1,
            len: 4096,
        },
        None,
    );
    assert!(matches!(e, Err(mrc_transport::PostError::LocalAccess(_))));
    assert!(
        qa.post_send(
            1,
            Sge {
                lkey: 0xBAD,
                addr: 0,
                len: 1
            },
            None
        )
        .is_err()
    );
    // A receive into a region without LOCAL_WRITE: refused synchronously.
    assert!(
        qa.post_recv(
            2,
            Sge {
                lkey: mr.lkey,
                addr: mr.addr,
                len: 16
            }
        )
        .is_err()
    );
    // Valid buffer but the QP is not connected: a Flushed completion.
    qa.post_send(
        7,
        Sge {
            lkey: mr.lkey,
            addr: mr.addr,
            len: 16,
        },
        None,
    )
    .unwrap();
    let c = qa.wait_send_cq(T).unwrap().unwrap();
    assert_eq!((c.wr_id, c.status), (7, WcStatus::Flushed));
}

fn udp_ctx(bind: &str, range: std::ops::RangeInclusive<u16>) -> Context {
    let mut u = UdpConfig::bind(bind.parse().unwrap());
    u.ports = PortAllocator::new(range).unwrap();
    Context::new(u, EngineConfig::default()).unwrap()
}

fn loopback_verify(
    ip: &str,
    range_a: std::ops::RangeInclusive<u16>,
    range_b: std::ops::RangeInclusive<u16>,
) {
    let ca = udp_ctx(&format!("{ip}:0"), range_a.clone());
    let cb = udp_ctx(&format!("{ip}:0"), range_b);
    let listener = TcpListener::bind(format!("{ip}:0")).unwrap();
    let server_addr = listener.local_addr().unwrap();
    let qa = ca.create_qp(qp_cfg()).unwrap();
    let qb = cb.create_qp(qp_cfg()).unwrap();
    // Regions first (advertised in the bootstrap), then connect.
    let size = 256 * 1024;
    let slots = 4;
    let w = PatternWrites::new(&qa, &qb, size, slots, 99);
    let server = std::thread::spawn(move || {
        let c = qb.accept(&listener, T).unwrap();
        (qb, c)
    });
    let ca_conn = qa.connect_tcp(server_addr, T).unwrap();
    let (qb, cb_conn) = server.join().unwrap();
    assert_eq!(ca_conn.remote.regions.len(), 1);
    assert_eq!(ca_conn.remote.regions[0].rkey, w.dst.rkey);
    assert_eq!(ca_conn.remote.qpn, qb.qpn());
    assert_eq!(cb_conn.remote.qpn, qa.qpn());
    assert_eq!(ca_conn.udp, cb.udp_addr());
    // 16 EV sockets, source ports from the range in order.
    let first = *range_a.start();
    assert_eq!(
        ca_conn.source_ports,
        (first..first + 16).collect::<Vec<u16>>()
    );
    assert_eq!(write_iters_in(&qa, &qb, &w, 20), (20, 20));
    let (sb, eb) = qb.stats().unwrap();
    assert_eq!(sb.verify.checked_messages, 20);
    assert_eq!(sb.verify.checked_bytes, 20 * size as u64);
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sb.conn.received_bytes, 20 * size as u64);
    assert!(eb.datapath.rx_datagrams >= 20 * 64);
    let (sa, _) = qa.stats().unwrap();
    // Every EV carried data; per-EV sent counts add up to the connection's.
    assert_eq!(sa.evs.len(), 16);
    assert!(
        sa.evs
            .iter()
            .all(|(_, port, s)| *port >= first && s.sent > 0)
    );
    assert_eq!(
        sa.evs.iter().map(|(_, _, s)| s.sent).sum::<u64>(),
        sa.conn.sent
    );
}

#[test]
fn loopback_ipv4_bootstrap_and_verified_writes() {
    loopback_verify("127.0.0.1", 22000..=22099, 22100..=22199);
}

#[test]
fn loopback_ipv6_bootstrap_and_verified_writes() {
    loopback_verify("[::1]", 22200..=22299, 22300..=22399);
}

#[test]
fn idle_engine_sleeps() {
    let ctx = udp_ctx("127.0.0.1:0", 22400..=22499);
    let qp = ctx.create_qp(qp_cfg()).unwrap();
    let (_, e0) = qp.stats().unwrap();
    // 300 ms with nothing to do (a receive-CQ wait that must time out).
    assert!(
        qp.wait_recv_cq(Duration::from_millis(300))
            .unwrap()
            .is_none()
    );
    let (_, e1) = qp.stats().unwrap();
    let cpu_ms = (e1.cpu_ns - e0.cpu_ns) / 1_000_000;
    assert!(cpu_ms < 30, "idle engine used {cpu_ms} ms of CPU in 300 ms");
    assert!(e1.sleeps > e0.sleeps);
    // At most one wake-up per max_sleep (50 ms) plus the spin after the first query.
    assert!(
        e1.sleeps - e0.sleeps <= 10,
        "{} sleeps",
        e1.sleeps - e0.sleeps
    );
}

/// A QP whose retry budget runs out 7 ms after the first unanswered packet (RTO 1 ms,
/// doubling, capped at 2 ms; the third expiry fails the work request).
fn short_retry_cfg() -> QpConfig {
    let mut c = qp_cfg();
    c.conn.send.initial_rto_ns = 1_000_000;
    c.conn.send.min_rto_ns = 1_000_000;
    c.conn.send.max_rto_ns = 2_000_000;
    c.conn.send.retry_limit = 2;
    c
}

#[test]
fn the_bootstrap_returns_only_once_the_peer_qp_is_connected() {
    use mrc_fabric::engine::bootstrap;
    // The peer answers the QpInfo exchange at once but connects its QP only when told:
    // the window in which a lost TCP segment (its copy of our QpInfo) kept the server of
    // a lossy `mrc-perf --srv6 srh` run unconnected while the client's RTOs ran out.
    let ca = udp_ctx("127.0.0.1:0", 22500..=22599);
    let cb = udp_ctx("127.0.0.1:0", 22600..=22699);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server_addr = listener.local_addr().unwrap();
    let qa = ca.create_qp(short_retry_cfg()).unwrap();
    let qb = cb.create_qp(short_retry_cfg()).unwrap();
    let w = PatternWrites::new(&qa, &qb, 4096, 1, 99);
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let (remote, udp, mut s) = bootstrap::exchange(s, &qb.local_info(), T).unwrap();
        go_rx.recv().unwrap();
        let ports = qb.connect(&remote, udp).unwrap();
        let peer_ports =
            bootstrap::exchange_ports(&s, &ports, std::time::Instant::now() + T).unwrap();
        qb.set_peer_source_ports(&peer_ports).unwrap();
        bootstrap::ready(&mut s).unwrap();
        qb
    });
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let client = std::thread::spawn(move || {
        let c = qa.connect_tcp(server_addr, T).unwrap();
        done_tx.send(()).unwrap();
        (qa, c)
    });
    // 20 retry budgets later the client is still waiting for the peer's ready.
    assert_eq!(
        done_rx.recv_timeout(Duration::from_millis(140)),
        Err(crossbeam_channel::RecvTimeoutError::Timeout)
    );
    go_tx.send(()).unwrap();
    done_rx.recv_timeout(T).unwrap();
    let (qa, _conn) = client.join().unwrap();
    let _qb = server.join().unwrap();
    // The first write after the bootstrap completes.
    w.post_first(&qa, 1, 4096);
    let c = qa.wait_send_cq(T).unwrap().unwrap();
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
}

#[test]
fn qp_defaults_use_the_software_datapath_timers() {
    // An engine thread can be descheduled for milliseconds: the transport's 1 ms initial
    // RTO fired on the first 1 MiB burst on loopback (examples/embed.rs resent 64 of 257).
    let c = QpConfig::default();
    assert_eq!(c.conn.send.min_rto_ns, 20_000_000);
    assert_eq!(c.conn.send.initial_rto_ns, 80_000_000);
    assert_eq!(c.conn.send.max_rto_ns, 100_000_000);
    assert_eq!(c.conn.send.min_reorder_window_ns, 500_000);
    assert_eq!(c.conn.send.peer_max_ack_delay_ns, 500_000);
    // EVs are revalidated after half the RTO floor, not the fabric's 100 us.
    assert_eq!(c.conn.revalidate_ev_after_ns, 10_000_000);
    assert_eq!(c.conn.evs.len(), 16);
}

/// Two QPs over the fake net whose EV lists differ (nothing in [`QpInfo`] makes them
/// agree): `qa` sprays on EVs 0..16, `qb` has EVs 100 and 101 only.
fn fake_pair_with_evs(net: &FakeNet, b_evs: Vec<u32>) -> (Context, Context, Qp, Qp) {
    let a_addr: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b_addr: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let ca = Context::with_datapath(FakeDatapath::new(net, a_addr), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(net, b_addr), EngineConfig::default());
    let qa = ca.create_qp(qp_cfg()).unwrap();
    let mut cfg_b = qp_cfg();
    cfg_b.conn.evs = b_evs;
    let qb = cb.create_qp(cfg_b).unwrap();
    let (ia, ib) = (qa.local_info(), qb.local_info());
    assert_eq!(qa.connect(&ib, b_addr).unwrap().len(), 16);
    assert_eq!(qb.connect(&ia, a_addr).unwrap().len(), 2);
    (ca, cb, qa, qb)
}

#[test]
fn sacks_echoing_a_peer_ev_the_receiver_lacks_still_leave() {
    // b's SACKs echo a's EVs (0..16), none of which is one of b's: the datapath has no
    // socket for them. They must still reach a (on one of b's own sockets), and no
    // burst may fail.
    let net = FakeNet::new();
    let (_ca, _cb, qa, qb) = fake_pair_with_evs(&net, vec![100, 101]);
    assert_eq!(write_iters(&qa, &qb, 16 * 1024, 2, 6), (6, 6));
    let (sa, ea) = qa.stats().unwrap();
    let (sb, eb) = qb.stats().unwrap();
    assert_eq!(sb.verify.checked_messages, 6);
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sb.conn.received, 6 * 4);
    assert_eq!(sa.conn.retransmitted, 0);
    assert_eq!((ea.datapath_errors, eb.datapath_errors), (0, 0));
    // Every datagram of b (all SACKs) echoed one of a's EVs; a echoed b's 100 and 101.
    assert_eq!(eb.tx_foreign_ev, sb.conn.sacks_sent);
    assert_eq!(ea.tx_foreign_ev, 0);
    assert_eq!(net.dropped(), 0);
}

#[test]
fn a_hostile_probe_on_an_unknown_ev_fails_no_burst() {
    use mrc_fabric::datapath::{ConnId, Datapath, PathMap, TxBatch};
    use mrc_transport::Ecn;
    use mrc_transport::stats::DropReason;
    use mrc_transport::wire::{
        Body, BthFlags, BthRepr, BthSpare, MrcethRepr, Opcode, PacketRepr, ProbeRepr,
    };
    let net = FakeNet::new();
    let (_ca, _cb, qa, qb) = fake_pair(&net);
    let a: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    connect_direct(&qa, &qb, a, b);
    // Someone on the network who knows b's QPN and a's generation sends b an EV probe
    // on EV 0xDEAD_BEEF, one of nobody's EVs: b's probe reply echoes it.
    let probe = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::EvProbe,
            pkey: qb.config().pkey,
            dest_qpn: qb.qpn(),
            psn: 0,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 0xDEAD_BEEF,
            msn: 0,
            send_ts_ns: 0,
            generation: qa.local_info().generation,
            reserved: 0,
        },
        body: Body::Probe(ProbeRepr {
            probe_seq: 7,
            reserved: 0,
        }),
    };
    let mut bytes = vec![0u8; probe.buffer_len()];
    probe.emit(&mut bytes).unwrap();
    // From a's IP (connect_direct gives the QPs the peer's IP only, not its source
    // ports: a process on a's host passes the source check).
    let mut hostile = FakeDatapath::new(&net, "10.0.0.1:4793".parse().unwrap());
    let id: ConnId = hostile.open_conn(b, &PathMap::per_ev(vec![1])).unwrap();
    let mut batch = TxBatch::new(1, 256);
    assert!(batch.push(id, 1, Ecn::NotEct, &bytes));
    assert_eq!(hostile.tx_burst(&batch).unwrap().datagrams, 1);
    // The transfer after it is exact, and b's reply (on one of b's own sockets) reached
    // a, which never sent that probe.
    assert_eq!(write_iters(&qa, &qb, 16 * 1024, 2, 4), (4, 4));
    let (sa, ea) = qa.stats().unwrap();
    let (sb, eb) = qb.stats().unwrap();
    assert_eq!(sb.conn.probes_received, 1);
    assert_eq!(sb.verify.checked_messages, 4);
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sa.conn.drops.get(DropReason::StaleProbeReply), 1);
    assert_eq!((ea.datapath_errors, eb.datapath_errors), (0, 0));
    assert_eq!((ea.tx_foreign_ev, eb.tx_foreign_ev), (0, 1));
}

#[test]
fn fake_net_duplicates_and_reordering_deliver_every_byte_once() {
    use mrc_transport::stats::DropReason;
    let net = FakeNet::new();
    let (_ca, _cb, qa, qb) = fake_pair(&net);
    let a: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    // a -> b data: every 3rd datagram twice, every 5th held back behind the next one
    // (15th: held). b -> a: every 4th datagram (SACKs) twice.
    let (mut n_ab, mut n_ba) = (0u64, 0u64);
    let dups = Arc::new(AtomicU64::new(0));
    let d2 = Arc::clone(&dups);
    net.set_filter(move |from, _, b| {
        if from.ip() == a.ip() && b.first().is_some_and(|&op| op < 0x20) {
            n_ab += 1;
            if n_ab % 5 == 0 {
                return FakeVerdict::Hold;
            }
            if n_ab % 3 == 0 {
                d2.fetch_add(1, Ordering::Relaxed);
                return FakeVerdict::Duplicate;
            }
        } else if from.ip() != a.ip() {
            n_ba += 1;
            if n_ba % 4 == 0 {
                return FakeVerdict::Duplicate;
            }
        }
        FakeVerdict::Deliver
    });
    connect_direct(&qa, &qb, a, "10.0.0.2:4792".parse().unwrap());
    assert_eq!(write_iters(&qa, &qb, 32 * 1024, 4, 10), (10, 10));
    let (sa, ea) = qa.stats().unwrap();
    let (sb, eb) = qb.stats().unwrap();
    assert_eq!(sb.verify.checked_messages, 10);
    assert_eq!(sb.verify.checked_bytes, 10 * 32 * 1024);
    assert_eq!(sb.verify.bad_bytes, 0);
    // Every packet once (a retransmission, as the second copy, is a duplicate).
    assert_eq!(sb.conn.received, 10 * 8);
    // Each second copy of a data packet is dropped as a duplicate, once.
    assert_eq!(
        sb.conn.drops.get(DropReason::Duplicate),
        dups.load(Ordering::Relaxed) + sa.conn.retransmitted
    );
    assert_eq!(sb.conn.received_bytes, 10 * 32 * 1024);
    assert_eq!((ea.datapath_errors, eb.datapath_errors), (0, 0));
    assert_eq!(net.dropped(), 0);
}

#[test]
fn a_destroyed_peer_qp_counts_the_datagrams_then_a_new_pair_runs_exactly() {
    let net = FakeNet::new();
    let a: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let ca = Context::with_datapath(FakeDatapath::new(&net, a), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(&net, b), EngineConfig::default());
    let qa = ca.create_qp(short_retry_cfg()).unwrap();
    let qb = cb.create_qp(short_retry_cfg()).unwrap();
    connect_direct(&qa, &qb, a, b);
    let w = PatternWrites::new(&qa, &qb, 4096, 1, 99);
    assert_eq!(write_iters_in(&qa, &qb, &w, 3), (3, 3));
    let (_, eb0) = qb.stats().unwrap();
    let (sa0, ea0) = qa.stats().unwrap();
    drop(qb);
    // a's next WRITE finds no QP at b: every copy (first and retries) is counted there,
    // and the work request fails with RetryExceeded.
    w.post_first(&qa, 7, 4096);
    let c = qa.wait_send_cq(T).unwrap().unwrap();
    assert_eq!((c.wr_id, c.status), (7, WcStatus::RetryExceeded));
    let (sa, ea) = qa.stats().unwrap();
    // The engine of b is still there: ask through a QP created for the purpose.
    let probe = cb.create_qp(qp_cfg()).unwrap();
    // One packet, sent once and retransmitted (RTOs, a tail loss probe) until it failed,
    // and EV probes for the paths its losses took out: a (failed, silent now) sent them
    // all, b counts each once it has read them.
    let copies = sa.conn.sent - sa0.conn.sent;
    assert_eq!(copies, 1 + sa.conn.retransmitted - sa0.conn.retransmitted);
    assert!(copies >= 3, "{copies}");
    let sent = ea.tx_datagrams - ea0.tx_datagrams;
    assert!(sent >= copies, "{sent} {copies}");
    let deadline = std::time::Instant::now() + T;
    let eb = loop {
        let (_, eb) = probe.stats().unwrap();
        if eb.rx_unknown_qpn - eb0.rx_unknown_qpn >= sent || std::time::Instant::now() > deadline {
            break eb;
        }
        std::thread::yield_now();
    };
    assert_eq!(eb.rx_unknown_qpn - eb0.rx_unknown_qpn, sent);
    assert_eq!(qa.stats().unwrap().1.tx_datagrams, ea.tx_datagrams);
    assert_eq!((ea.datapath_errors, eb.datapath_errors), (0, 0));
    drop(probe);
    drop(qa);
    // A new pair on the same engines (new QPNs, new datapath connection ids) runs exactly.
    let qa2 = ca.create_qp(qp_cfg()).unwrap();
    let qb2 = cb.create_qp(qp_cfg()).unwrap();
    connect_direct(&qa2, &qb2, a, b);
    assert_eq!(write_iters(&qa2, &qb2, 16 * 1024, 2, 5), (5, 5));
    let (sb2, eb2) = qb2.stats().unwrap();
    assert_eq!(sb2.verify.checked_messages, 5);
    assert_eq!(sb2.verify.bad_bytes, 0);
    assert_eq!(sb2.conn.received, 5 * 4);
    assert_eq!(eb2.datapath_errors, 0);
    assert_eq!(net.dropped(), 0);
}

fn udp_cfg(bind: &str, range: std::ops::RangeInclusive<u16>) -> UdpConfig {
    let mut u = UdpConfig::bind(bind.parse().unwrap());
    u.ports = PortAllocator::new(range).unwrap();
    u
}

/// Three engines in one context: QPs go to engines 0, 1, 2, 0 in turn, each QP
/// advertises its own engine's receive port, QPNs stay unique across the engines, and
/// three pairs writing at once (each to its own engine) deliver every byte verified.
#[test]
fn three_engines_take_qps_round_robin_and_each_delivers_verified_bytes() {
    let ca = Context::new(
        udp_cfg("127.0.0.1:0", 17000..=17099),
        EngineConfig::default(),
    )
    .unwrap();
    let cb = Context::with_engines(
        udp_cfg("127.0.0.1:0", 17100..=17199),
        EngineConfig::default(),
        3,
    )
    .unwrap();
    assert_eq!((ca.engines(), cb.engines()), (1, 3));
    let addrs = cb.udp_addrs();
    assert_eq!(addrs.len(), 3);
    assert_eq!(addrs[0], cb.udp_addr());
    let ports: std::collections::HashSet<u16> = addrs.iter().map(|a| a.port()).collect();
    assert_eq!(
        ports.len(),
        3,
        "each engine has its own receive socket: {addrs:?}"
    );

    let qbs: Vec<Qp> = (0..4).map(|_| cb.create_qp(qp_cfg()).unwrap()).collect();
    assert_eq!(
        qbs.iter().map(Qp::engine_index).collect::<Vec<_>>(),
        vec![0, 1, 2, 0]
    );
    for q in &qbs {
        assert_eq!(q.udp_addr(), addrs[q.engine_index()]);
        assert_eq!(q.local_info().udp_port, addrs[q.engine_index()].port());
    }
    let qpns: std::collections::HashSet<u32> = qbs.iter().map(Qp::qpn).collect();
    assert_eq!(qpns.len(), 4);
    let mut qbs = qbs;
    drop(qbs.pop()); // the fourth (engine 0 again) is not used below
    let qas: Vec<Qp> = (0..3).map(|_| ca.create_qp(qp_cfg()).unwrap()).collect();

    let size = 128 * 1024;
    let iters = 12u64;
    std::thread::scope(|s| {
        for (qa, qb) in qas.iter().zip(&qbs) {
            s.spawn(move || {
                let w = PatternWrites::new(qa, qb, size, 3, 7 + qb.engine_index() as u64);
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let server_addr = listener.local_addr().unwrap();
                let (a_conn, b_conn) = std::thread::scope(|s2| {
                    let server = s2.spawn(|| qb.accept(&listener, T).unwrap());
                    let a = qa.connect_tcp(server_addr, T).unwrap();
                    (a, server.join().unwrap())
                });
                // The client sends to the engine its peer QP lives on.
                assert_eq!(a_conn.udp, qb.udp_addr());
                assert_eq!(a_conn.remote.qpn, qb.qpn());
                assert_eq!(b_conn.remote.qpn, qa.qpn());
                assert_eq!(write_iters_in(qa, qb, &w, iters), (iters, iters));
                let (sb, eb) = qb.stats().unwrap();
                assert_eq!(sb.verify.checked_messages, iters);
                assert_eq!(sb.verify.checked_bytes, iters * size as u64);
                assert_eq!(sb.verify.bad_bytes, 0);
                assert_eq!(sb.conn.received_bytes, iters * size as u64);
                // Each engine received at least its own QP's data packets.
                assert!(eb.datapath.rx_datagrams >= iters * 32, "{:?}", eb.datapath);
            });
        }
    });
}

#[test]
fn engine_counts_outside_one_to_max_and_ports_past_65535_are_refused() {
    use mrc_fabric::engine::{EngineError, MAX_ENGINES};
    for k in [0, MAX_ENGINES + 1] {
        let e = Context::with_engines(
            udp_cfg("127.0.0.1:0", 17200..=17209),
            EngineConfig::default(),
            k,
        )
        .unwrap_err();
        assert!(
            matches!(&e, EngineError::Refused(m) if m == &format!("engines: {k} is outside 1..=64")),
            "{e}"
        );
    }
    let e = Context::with_engines(
        udp_cfg("127.0.0.1:65534", 17200..=17209),
        EngineConfig::default(),
        3,
    )
    .unwrap_err();
    assert!(
        matches!(&e, EngineError::Refused(m) if m == "engines: ports 65534..=65536 pass 65535"),
        "{e}"
    );
}

/// A fixed base port: engine `i` binds base + `i`. A context whose second engine finds its
/// port taken fails as a whole with the datapath's error, and the engine it had started
/// lets go of its port (a context can bind it again at once).
#[test]
fn engines_bind_consecutive_ports_and_a_taken_one_fails_the_whole_context() {
    let a = Context::with_engines(
        udp_cfg("127.0.0.1:17300", 17210..=17229),
        EngineConfig::default(),
        3,
    )
    .unwrap();
    assert_eq!(
        a.udp_addrs()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
        ["127.0.0.1:17300", "127.0.0.1:17301", "127.0.0.1:17302"]
    );
    let e = Context::with_engines(
        udp_cfg("127.0.0.1:17299", 17230..=17249),
        EngineConfig::default(),
        2,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            mrc_fabric::engine::EngineError::EngineSetup { index: 1, bind, .. }
                if bind.to_string() == "127.0.0.1:17300"
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "engine 1 (receive socket 127.0.0.1:17300): receive socket: Address already in use (os error 98)"
    );
    let b = Context::with_engines(
        udp_cfg("127.0.0.1:17299", 17230..=17249),
        EngineConfig::default(),
        1,
    )
    .unwrap();
    assert_eq!(b.udp_addr().to_string(), "127.0.0.1:17299");
}

/// A context whose datapath has one plane per address of `planes` (loopback addresses).
fn plane_ctx(planes: &[&str], range: std::ops::RangeInclusive<u16>) -> Context {
    let mut u = UdpConfig::bind(format!("{}:0", planes[0]).parse().unwrap());
    u.ports = PortAllocator::new(range).unwrap();
    u.plane_ips = planes.iter().map(|p| p.parse().unwrap()).collect();
    Context::new(u, EngineConfig::default()).unwrap()
}

#[test]
fn two_planes_each_carry_half_the_evs_and_the_bootstrap_swaps_the_plane_addresses() {
    let ca = plane_ctx(&["127.0.0.1", "127.0.0.2"], 27100..=27149);
    let cb = plane_ctx(&["127.0.0.3", "127.0.0.4"], 27150..=27199);
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let server_addr = listener.local_addr().unwrap();
    // Round robin over the EVs: the planes' split is the datapath's mapping alone, not the
    // engine threads' timing (recycling reuses the EVs acknowledged first).
    let mut qc = qp_cfg();
    qc.conn.selection = mrc_transport::path::Selection::RoundRobin;
    let qa = ca.create_qp(qc.clone()).unwrap();
    let qb = cb.create_qp(qc).unwrap();
    let size = 256 * 1024;
    let w = PatternWrites::new(&qa, &qb, size, 4, 7);
    let server = std::thread::spawn(move || {
        let c = qb.accept(&listener, T).unwrap();
        (qb, c)
    });
    let ca_conn = qa.connect_tcp(server_addr, T).unwrap();
    let (qb, cb_conn) = server.join().unwrap();
    let ips =
        |v: &[&str]| -> Vec<std::net::IpAddr> { v.iter().map(|s| s.parse().unwrap()).collect() };
    assert_eq!(ca_conn.remote.plane_ips, ips(&["127.0.0.3", "127.0.0.4"]));
    assert_eq!(cb_conn.remote.plane_ips, ips(&["127.0.0.1", "127.0.0.2"]));
    assert_eq!(write_iters_in(&qa, &qb, &w, 20), (20, 20));
    let (sb, _) = qb.stats().unwrap();
    assert_eq!(sb.verify.checked_bytes, 20 * size as u64);
    assert_eq!(sb.verify.bad_bytes, 0);
    // Datagrams came from both of A's planes, and none was dropped for its source.
    assert_eq!(sb.source_drops.total(), 0);
    assert!(sb.source_ports_checked);
    let (sa, _) = qa.stats().unwrap();
    // 16 EVs interleaved over 2 planes: EV i on plane i % 2, 8 each, each carrying data.
    assert_eq!(
        sa.ev_planes,
        (0..16).map(|i| (i % 2) as u8).collect::<Vec<u8>>()
    );
    assert_eq!(sa.planes.len(), 2);
    assert!(
        sa.planes
            .iter()
            .all(|(st, _)| *st == mrc_transport::path::PlaneState::Up)
    );
    let per_plane = |q: u8| -> u64 {
        sa.evs
            .iter()
            .zip(&sa.ev_planes)
            .filter(|(_, p)| **p == q)
            .map(|((_, _, s), _)| s.sent)
            .sum()
    };
    let (p0, p1) = (per_plane(0), per_plane(1));
    assert_eq!(p0 + p1, sa.conn.sent);
    assert!(sa.evs.iter().all(|(_, _, s)| s.sent > 0));
    assert_planes_split_evenly([p0, p1], &sa);
}

#[test]
fn a_peer_on_another_number_of_planes_is_refused_with_a_clear_error() {
    let ca = plane_ctx(&["127.0.0.1", "127.0.0.2"], 27200..=27249);
    let cb = udp_ctx("127.0.0.3:0", 27250..=27299);
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let server_addr = listener.local_addr().unwrap();
    let qa = ca.create_qp(qp_cfg()).unwrap();
    let qb = cb.create_qp(qp_cfg()).unwrap();
    let server = std::thread::spawn(move || qb.accept(&listener, T).map(|_| ()));
    let e = qa.connect_tcp(server_addr, T).unwrap_err().to_string();
    assert!(
        e.contains("this end sends on 2 plane(s) and the peer has 1"),
        "{e}"
    );
    let e = server.join().unwrap().unwrap_err().to_string();
    // The server's side fails too: it has one plane and the client two (or the client
    // closed the stream first).
    assert!(
        e.contains("this end sends on 1 plane(s) and the peer has 2") || e.contains("bootstrap"),
        "{e}"
    );
}
