//! Issue 17, source validation and unguessable identifiers: forged WRITEs, SACKs and NACKs
//! that carry every right field (QPN, generation, rkey, address, in-window PSN) but come
//! from another socket are dropped in the engine, counted by reason, never answered, and
//! the data stays exact. On loopback UDP (io_uring) with the TCP bootstrap, and on the fake
//! datapath for the control case (the same forgery from an address the filter accepts is
//! placed: the forgeries are real).

mod engine_common;

use engine_common::PatternWrites;
use mrc_fabric::datapath::{ConnId, Datapath, PathMap, TxBatch};
use mrc_fabric::engine::source::SourceDrops;
use mrc_fabric::engine::{Context, EngineConfig, Qp, QpConfig};
use mrc_fabric::udp::{FakeDatapath, FakeNet, PortAllocator, UdpConfig};
use mrc_transport::Ecn;
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::stats::DropReason;
use mrc_transport::wire::{
    Body, BthFlags, BthRepr, BthSpare, MrcethRepr, NackReason, NackRepr, Opcode, PacketRepr,
    SackRepr,
};
use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn bth(opcode: Opcode, qp: &Qp, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        pkey: qp.config().pkey,
        dest_qpn: qp.qpn(),
        psn,
        flags: BthFlags::default(),
        spare: BthSpare::default(),
    }
}

fn emit(p: &PacketRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; p.buffer_len()];
    p.emit(&mut b).unwrap();
    b
}

/// A WRITE of `payload` to `addr` under `rkey`, to `to`, as if from `from` (its generation
/// and its PSN `psn_ahead` after its initial one: inside the receive window).
fn forged_write(
    to: &Qp,
    from: &Qp,
    rkey: u32,
    addr: u64,
    psn_ahead: u32,
    payload: &[u8],
) -> Vec<u8> {
    engine_common::forged_write(to.qpn(), from.config(), psn_ahead, rkey, addr, payload)
}

/// A SACK to `to` (a sender) acknowledging `acked` packets from its initial PSN, as if
/// from `from`.
fn forged_sack(to: &Qp, from: &Qp, acked: u32) -> Vec<u8> {
    let cum = to.config().initial_psn.value().wrapping_add(acked) & 0xFF_FFFF;
    emit(&PacketRepr {
        bth: bth(Opcode::Sack, to, cum),
        mrceth: MrcethRepr {
            ev: 0,
            msn: 0,
            send_ts_ns: 0,
            generation: from.config().generation,
            reserved: 0,
        },
        body: Body::Sack(SackRepr {
            cumulative_psn: cum,
            bitmap_base_psn: cum,
            bitmap: 0,
            echo_ev: 0,
            echo_ts_ns: 0,
            ecn_ce_count: 0,
            credit: 0,
        }),
    })
}

/// A NACK to `to` for its PSN `ahead` after the initial one, as if from `from`.
fn forged_nack(to: &Qp, from: &Qp, ahead: u32, reason: NackReason) -> Vec<u8> {
    let psn = to.config().initial_psn.value().wrapping_add(ahead) & 0xFF_FFFF;
    emit(&PacketRepr {
        bth: bth(Opcode::Nack, to, psn),
        mrceth: MrcethRepr {
            ev: 0,
            msn: 0,
            send_ts_ns: 0,
            generation: from.config().generation,
            reserved: 0,
        },
        body: Body::Nack(NackRepr {
            psn,
            reason,
            reserved: 0,
            echo_ev: 0,
            echo_ts_ns: 0,
        }),
    })
}

/// Writes `iters` verified messages from `qa` into `qb`'s slots; returns (send, recv)
/// completions, all successful, with immediates in order.
fn write_iters(qa: &Qp, qb: &Qp, w: &PatternWrites, iters: u64) -> (u64, u64) {
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
                (c.wr_id, c.opcode, c.status),
                (done, WcOpcode::WriteWithImm, WcStatus::Success)
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
            recvd += 1;
            qb.post_recv(2 * w.slots as u64 + recvd, w.recv_sge())
                .unwrap();
        }
        if done >= iters && recvd < iters {
            let c = qb
                .wait_recv_cq(T)
                .unwrap()
                .expect("recv completion within 10 s");
            assert_eq!(c.imm, Some(recvd as u32));
            recvd += 1;
        }
    }
    (done, recvd)
}

fn udp_ctx(range: std::ops::RangeInclusive<u16>) -> Context {
    let mut u = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
    u.ports = PortAllocator::new(range).unwrap();
    Context::new(u, EngineConfig::default()).unwrap()
}

/// Forged WRITEs at the receiver (into the region, at in-window PSNs) and forged SACKs and
/// NACKs at the sender, from a socket on the same host (127.0.0.1, a port no EV socket
/// has) and from another IP (127.0.0.2): every one dropped before the transport and
/// counted by reason; nothing answers the forger; every byte of the transfer is exact.
#[test]
fn forged_write_sack_nack_from_other_sockets_are_dropped_counted_and_unanswered() {
    let ca = udp_ctx(31000..=31099);
    let cb = udp_ctx(31100..=31199);
    let qa = ca.create_qp(QpConfig::default()).unwrap();
    let qb = cb.create_qp(QpConfig::default()).unwrap();
    let size = 64 * 1024;
    let slots = 4;
    let w = PatternWrites::new(&qa, &qb, size, slots, 17);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server_addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let c = qb.accept(&listener, T).unwrap();
        (qb, c)
    });
    let ca_conn = qa.connect_tcp(server_addr, T).unwrap();
    let (qb, cb_conn) = server.join().unwrap();
    assert_eq!(ca_conn.source_ports, (31000..31016).collect::<Vec<u16>>());
    assert_eq!(cb_conn.source_ports, (31100..31116).collect::<Vec<u16>>());
    let (sa0, _) = qa.stats().unwrap();
    let (sb0, _) = qb.stats().unwrap();
    assert!(sa0.source_ports_checked && sb0.source_ports_checked);

    let same_host = UdpSocket::bind("127.0.0.1:0").unwrap();
    let other_ip = UdpSocket::bind("127.0.0.2:0").unwrap();
    for s in [&same_host, &other_ip] {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
    }
    let a_udp = ca.udp_addr();
    let b_udp = cb.udp_addr();
    // Everything a forger could want: the real rkey and address, in-window PSNs.
    let junk = vec![0xEE; 1024];
    let mut writes = Vec::new();
    for k in 0..50u32 {
        writes.push(forged_write(
            &qb,
            &qa,
            w.dst.rkey,
            w.dst.addr + u64::from(k) * 1024,
            k,
            &junk,
        ));
    }
    // ... and ones with a wrong rkey (which the transport would NACK).
    for k in 0..10u32 {
        writes.push(forged_write(&qb, &qa, w.dst.rkey ^ 1, w.dst.addr, k, &junk));
    }
    let mut to_sender = Vec::new();
    for k in 0..30u32 {
        to_sender.push(forged_sack(&qa, &qb, 1000 + k));
        to_sender.push(forged_nack(&qa, &qb, k, NackReason::Trimmed));
    }
    let mut sent_b = (0u64, 0u64);
    let forge = |n: &mut (u64, u64)| {
        for p in &writes {
            same_host.send_to(p, b_udp).unwrap();
            other_ip.send_to(p, b_udp).unwrap();
            n.0 += 1;
            n.1 += 1;
        }
    };
    forge(&mut sent_b);
    for p in &to_sender {
        same_host.send_to(p, a_udp).unwrap();
        other_ip.send_to(p, a_udp).unwrap();
    }
    // The transfer, with a second round of forged WRITEs while it runs.
    let iters = 40;
    let worker = std::thread::scope(|s| {
        let h = s.spawn(|| write_iters(&qa, &qb, &w, iters));
        let mut n = (0, 0);
        forge(&mut n);
        (h.join().unwrap(), n)
    });
    let (worker, n) = worker;
    sent_b = (sent_b.0 + n.0, sent_b.1 + n.1);
    assert_eq!(worker, (iters, iters));
    let (sa, ea) = qa.stats().unwrap();
    let (sb, eb) = qb.stats().unwrap();
    assert_eq!(
        sb.source_drops,
        SourceDrops {
            before_connect: 0,
            wrong_ip: sent_b.1,
            wrong_port: sent_b.0,
        }
    );
    assert_eq!(sent_b, (120, 120));
    assert_eq!(
        sa.source_drops,
        SourceDrops {
            before_connect: 0,
            wrong_ip: 60,
            wrong_port: 60,
        }
    );
    assert_eq!((ea.rx_bad_source, eb.rx_bad_source), (120, 240));
    // The transports never saw them: no drops but copies of the peer's own
    // retransmissions (an RTO or tail probe on a loaded machine resends a packet whose
    // original then arrives, and the probe's late answer is stale), no NACK (nothing went
    // to the forgers), no access errors; the data is exact.
    let own_copies = |d: &mrc_transport::stats::DropCounts| {
        d.get(DropReason::Duplicate) + d.get(DropReason::StaleProbeReply)
    };
    assert_eq!(
        (
            sa.conn.drops.total() - own_copies(&sa.conn.drops),
            sb.conn.drops.total() - own_copies(&sb.conn.drops)
        ),
        (0, 0),
        "drops a: {:?}, b: {:?}",
        sa.conn.drops,
        sb.conn.drops
    );
    assert!(
        sb.conn.drops.get(DropReason::Duplicate)
            <= sa.conn.retransmitted + sa.conn.tail_loss_probes,
        "b dropped more duplicates than a resent: {:?}, retransmitted {}",
        sb.conn.drops,
        sa.conn.retransmitted
    );
    assert_eq!(sb.conn.nacks_sent, 0);
    assert_eq!(sa.conn.nacks_received, 0);
    assert_eq!(sb.verify.checked_messages, iters);
    assert_eq!(sb.verify.checked_bytes, iters * size as u64);
    assert_eq!(sb.verify.bad_bytes, 0);
    assert_eq!(sb.conn.received_bytes, iters * size as u64);
    let mut buf = [0u8; 64];
    for s in [&same_host, &other_ip] {
        let e = s.recv_from(&mut buf).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "the forger got an answer: {e}"
        );
    }
}

/// Two engines on one fake network (10.0.0.1 and 10.0.0.2, port 4792), a QP on each.
/// (Fields drop in this order: the QPs, then their engines, then the network.)
struct FakePair {
    qa: Qp,
    qb: Qp,
    _ca: Context,
    _cb: Context,
    net: FakeNet,
    a: SocketAddr,
    b: SocketAddr,
}

fn fake_pair() -> FakePair {
    let net = FakeNet::new();
    let a: SocketAddr = "10.0.0.1:4792".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:4792".parse().unwrap();
    let ca = Context::with_datapath(FakeDatapath::new(&net, a), EngineConfig::default());
    let cb = Context::with_datapath(FakeDatapath::new(&net, b), EngineConfig::default());
    let qa = ca.create_qp(QpConfig::default()).unwrap();
    let qb = cb.create_qp(QpConfig::default()).unwrap();
    FakePair {
        net,
        a,
        b,
        _ca: ca,
        _cb: cb,
        qa,
        qb,
    }
}

/// The control case on the fake datapath: the forged WRITE (real rkey, address,
/// QPN, generation, in-window PSN) from another port of the peer's IP is placed while the
/// QP knows only the peer's IP ([`Qp::connect`] alone), and dropped once it knows the
/// peer's EV source ports ([`Qp::set_peer_source_ports`]): region unchanged, counted.
#[test]
fn the_forgery_lands_with_ip_only_checks_and_is_dropped_once_ports_are_known() {
    let FakePair {
        net,
        a,
        b,
        _ca,
        _cb,
        qa,
        qb,
    } = fake_pair();
    let dst = qb
        .reg_mr(
            4096,
            mrc_transport::Access::LOCAL_WRITE | mrc_transport::Access::REMOTE_WRITE,
        )
        .unwrap();
    let ia = qa.local_info();
    let ib = qb.local_info();
    // Before connect: dropped as before_connect.
    let mut hostile = FakeDatapath::new(&net, "10.0.0.1:5000".parse().unwrap());
    let hid: ConnId = hostile.open_conn(b, &PathMap::per_ev(vec![1])).unwrap();
    let send = |hostile: &mut FakeDatapath, bytes: &[u8]| {
        let mut batch = TxBatch::new(1, 2048);
        assert!(batch.push(hid, 1, Ecn::NotEct, bytes));
        assert_eq!(hostile.tx_burst(&batch).unwrap().datagrams, 1);
    };
    let wait_for = |qp: &Qp, f: &dyn Fn(&mrc_fabric::engine::QpStats) -> bool| {
        for _ in 0..1000 {
            if f(&qp.stats().unwrap().0) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!(
            "condition not reached: {:?}",
            qp.stats().unwrap().0.source_drops
        );
    };
    let forged = forged_write(&qb, &qa, dst.rkey, dst.addr, 0, b"FORGED!!");
    send(&mut hostile, &forged);
    wait_for(&qb, &|s| s.source_drops.before_connect == 1);
    let a_ports = qa.connect(&ib, b).unwrap();
    qb.connect(&ia, a).unwrap();
    // IP only: the forger on the peer's host gets its write placed.
    send(&mut hostile, &forged);
    wait_for(&qb, &|s| s.conn.received == 1);
    assert_eq!(&qb.read_mr(dst.lkey, 0, 8).unwrap(), b"FORGED!!");
    // With the peer's ports: the next forgery (the next PSN, new bytes) is dropped.
    qb.set_peer_source_ports(&a_ports).unwrap();
    qb.write_mr(dst.lkey, 0, &[0; 8]).unwrap();
    let forged2 = forged_write(&qb, &qa, dst.rkey, dst.addr, 1, b"AGAIN!!!");
    send(&mut hostile, &forged2);
    wait_for(&qb, &|s| s.source_drops.wrong_port == 1);
    let (sb, eb) = qb.stats().unwrap();
    assert_eq!(
        sb.source_drops,
        SourceDrops {
            before_connect: 1,
            wrong_ip: 0,
            wrong_port: 1,
        }
    );
    assert_eq!(eb.rx_bad_source, 2);
    assert_eq!(sb.conn.received, 1);
    assert_eq!(&qb.read_mr(dst.lkey, 0, 8).unwrap(), &[0; 8]);
    assert!(qb.set_peer_source_ports(&[]).is_err());
}

/// QPNs, initial PSNs, generations and rkeys come from the OS CSPRNG: 64 QPs of one
/// context have 64 distinct nonzero QPNs, and no value follows from another (the issue's
/// `rkey == ((generation & 0xff) ^ 0x80) << 24 | (initial_psn & 0xffff00) | 0x02` holds
/// for none; region addresses are not the fixed sequential ones).
#[test]
fn identifiers_are_random_distinct_and_unrelated() {
    let net = FakeNet::new();
    let ctx = Context::with_datapath(
        FakeDatapath::new(&net, "10.0.0.9:4792".parse().unwrap()),
        EngineConfig::default(),
    );
    let mut qpns = HashSet::new();
    let mut psns = HashSet::new();
    let mut rkeys = HashSet::new();
    let mut addrs = HashSet::new();
    let mut related = 0;
    let mut qps = Vec::new();
    for _ in 0..64 {
        let q = ctx.create_qp(QpConfig::default()).unwrap();
        let k = q
            .reg_mr(
                4096,
                mrc_transport::Access::LOCAL_WRITE | mrc_transport::Access::REMOTE_WRITE,
            )
            .unwrap();
        let c = q.config();
        assert!(q.qpn() > 0 && q.qpn() <= 0xFF_FFFF);
        assert!(c.region_key.is_some());
        qpns.insert(q.qpn());
        psns.insert(c.initial_psn.value());
        rkeys.insert(k.rkey);
        addrs.insert(k.addr);
        let old = ((u32::from(c.generation) & 0xff) ^ 0x80) << 24
            | (c.initial_psn.value() & 0xff_ff00)
            | 0x02;
        related += u32::from(k.rkey == old || k.addr == 0x1_0000);
        qps.push(q);
    }
    assert_eq!(qpns.len(), 64);
    assert_eq!(related, 0);
    // 64 draws of 24 / 32 / 36 bits: a collision has probability below 2^-11.
    assert!(psns.len() >= 63);
    assert_eq!(rkeys.len(), 64);
    assert_eq!(addrs.len(), 64);
    // Consecutive QPNs are not consecutive numbers (1, 2, 3, ... before).
    let seq: Vec<u32> = qps.iter().map(Qp::qpn).collect();
    assert!(seq.windows(2).filter(|w| w[1] == w[0] + 1).count() < 2);
}

/// Issue 17 item 3: with authentication on, the same forgery from an address the source
/// filter accepts (the peer's IP, while only the IP is known) is dropped as `AuthFailed`
/// before the transport parses it, the region is unchanged, and the QP's own
/// authenticated WRITEs still land byte-exact (`--verify` of 8 messages).
#[test]
fn with_authentication_the_forgery_from_an_accepted_address_is_dropped() {
    use mrc_transport::auth::{AuthKeyError, AuthKeys};
    let FakePair {
        net,
        a,
        b,
        _ca,
        _cb,
        qa,
        qb,
    } = fake_pair();
    let psk = b"forged.rs pre-shared key 32 byte";
    let keys = |initiator| -> Result<AuthKeys, AuthKeyError> {
        AuthKeys::derive(psk, &[1; 32], &[2; 32], initiator)
    };
    qa.set_auth(keys(true).unwrap()).unwrap();
    qb.set_auth(keys(false).unwrap()).unwrap();
    let w = PatternWrites::new(&qa, &qb, 4096, 4, 9);
    let (ia, ib) = (qa.local_info(), qb.local_info());
    qa.connect(&ib, b).unwrap();
    qb.connect(&ia, a).unwrap();
    // once connected, authentication can no longer be turned on
    assert!(qb.set_auth(keys(false).unwrap()).is_err());
    let mut hostile = FakeDatapath::new(&net, "10.0.0.1:5000".parse().unwrap());
    let hid: ConnId = hostile.open_conn(b, &PathMap::per_ev(vec![1])).unwrap();
    let forged = forged_write(&qb, &qa, w.dst.rkey, w.dst.addr, 0, b"FORGED!!");
    let mut batch = TxBatch::new(1, 2048);
    assert!(batch.push(hid, 1, Ecn::NotEct, &forged));
    assert_eq!(hostile.tx_burst(&batch).unwrap().datagrams, 1);
    for _ in 0..1000 {
        if qb.stats().unwrap().0.conn.drops.get(DropReason::AuthFailed) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (sb, _) = qb.stats().unwrap();
    assert_eq!(sb.conn.drops.get(DropReason::AuthFailed), 1);
    assert_eq!(sb.conn.received, 0);
    assert_eq!(sb.source_drops, SourceDrops::default());
    assert_ne!(&qb.read_mr(w.dst.lkey, 0, 8).unwrap(), b"FORGED!!");
    assert_eq!(write_iters(&qa, &qb, &w, 8), (8, 8));
    let (sb, _) = qb.stats().unwrap();
    assert_eq!((sb.verify.checked_messages, sb.verify.bad_bytes), (8, 0));
    assert_eq!(sb.conn.drops.get(DropReason::AuthFailed), 1);
}
