//! The plain-syscall UDP datapath (`--udp-io direct`, `DirectDatapath` under a
//! caller-progressed [`Worker`]), and the io_uring one alike, with strangers on loopback: forged WRITEs that carry
//! every right field (QPN, generation, rkey, address, in-window PSN) from another port
//! and another IP, datagrams for no QP, datagrams too short to name one (0 to 7 bytes),
//! datagrams longer than a receive buffer, and a flood of forgeries while a transfer runs.
//! Each one is dropped and counted by reason (exact counts), none is answered, and every
//! byte of the transfer is exact. `forged.rs` forges SACKs and NACKs too, on io_uring.

mod engine_common;

use engine_common::forged_write;
use mrc_fabric::datapath::Datapath;
use mrc_fabric::engine::source::SourceDrops;
use mrc_fabric::engine::{EngineConfig, QpConfig, Worker};
use mrc_fabric::udp::{PortAllocator, UdpConfig};
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::region::{MrKey, SharedMem};
use mrc_transport::{Access, ConnConfig, Sge};
use std::net::{SocketAddr, UdpSocket};
use std::ops::RangeInclusive;
use std::time::Duration;

fn pattern(i: usize, seed: u8) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed)
}

/// Progresses both workers until `done` holds, at most 20000 passes of up to 1 ms.
fn until<D: Datapath>(
    what: &str,
    a: &mut Worker<D>,
    b: &mut Worker<D>,
    qb: u32,
    mut done: impl FnMut(&mut Worker<D>, &mut Worker<D>) -> bool,
) {
    for _ in 0..20_000 {
        a.progress();
        b.progress();
        if done(a, b) {
            return;
        }
        b.wait(Duration::from_millis(1)).unwrap();
    }
    panic!(
        "{what}: not done within 20000 passes; b: {:?}",
        b.stats(qb)
            .ok()
            .map(|(q, e)| (q.source_drops, e.rx_unknown_qpn, e.datapath))
    );
}

#[test]
fn strangers_on_the_direct_datapath_are_dropped_counted_unanswered_and_the_data_is_exact() {
    strangers(19300..=19399, |u| {
        Worker::direct(u, EngineConfig::default()).unwrap()
    });
}

#[test]
fn strangers_on_the_io_uring_datapath_are_dropped_counted_unanswered_and_the_data_is_exact() {
    strangers(19400..=19499, |u| {
        Worker::new(u, EngineConfig::default()).unwrap()
    });
}

#[test]
fn strangers_on_the_io_uring_multishot_datapath_are_dropped_counted_and_the_data_is_exact() {
    strangers(19500..=19599, |mut u| {
        u.rx_multishot = true;
        Worker::new(u, EngineConfig::default()).unwrap()
    });
}

/// Two workers made by `make` (a receiver b, a sender a) on 127.0.0.1: 64 WRITEs of 1 KiB
/// with immediates, and 29 rounds of strangers' datagrams at b (one before, one after
/// every eighth WRITE, 20 after): 32 in-window forgeries from another port and 32 from
/// another IP, one for another QPN, eight of 0 to 7 bytes, one of 3000 bytes.
fn strangers<D: Datapath>(range: RangeInclusive<u16>, make: impl Fn(UdpConfig) -> Worker<D>) {
    const MSGS: u64 = 64;
    const MSG_BYTES: usize = 1024;
    // Any free ports of this range serve (a port another process holds is skipped); the
    // assertions name the ports the connection reports, never fixed ones.
    let ports = PortAllocator::new(range).unwrap();
    let udp = |ports: &PortAllocator| UdpConfig {
        ports: ports.clone(),
        rx_slots: 8,
        // Small receive buffers: a 3000-byte datagram is truncated (MSG_TRUNC).
        rx_buffer_bytes: 2048,
        ..UdpConfig::bind("127.0.0.1:0".parse().unwrap())
    };
    let mut a = make(udp(&ports));
    let mut b = make(udp(&ports));
    let cfg = QpConfig {
        conn: ConnConfig {
            evs: (0..4).collect(),
            ..mrc_fabric::engine::software_conn_config(
                mrc_fabric::engine::SOFTWARE_MIN_RTO_NS,
                mrc_fabric::engine::SOFTWARE_REORDER_WINDOW_NS,
            )
        },
        ..QpConfig::default()
    };
    let (qa, qb) = (a.create_qp(cfg.clone()).unwrap(), b.create_qp(cfg).unwrap());
    let total = MSGS as usize * MSG_BYTES;
    let (src, dst) = (SharedMem::new(total), SharedMem::new(total));
    let src_bytes: Vec<u8> = (0..total).map(|i| pattern(i, 7)).collect();
    src.write_at(0, &src_bytes).unwrap();
    let ka: MrKey = a.reg_mr_shared(qa, &src, Access::LOCAL_WRITE).unwrap();
    let kb: MrKey = b
        .reg_mr_shared(qb, &dst, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (ia, ib) = (a.local_info(qa).unwrap(), b.local_info(qb).unwrap());
    let pa = a.connect(qa, &ib, b.udp_addr()).unwrap();
    let pb = b.connect(qb, &ia, a.udp_addr()).unwrap();
    a.set_peer_source_ports(qa, &pb).unwrap();
    b.set_peer_source_ports(qb, &pa).unwrap();
    let (ca, _cb) = (a.config(qa).unwrap().clone(), b.config(qb).unwrap().clone());

    let same_host = UdpSocket::bind("127.0.0.1:0").unwrap();
    let other_ip = UdpSocket::bind("127.0.0.2:0").unwrap();
    let b_udp: SocketAddr = b.udp_addr();
    let junk = vec![0xEE; MSG_BYTES];
    // In-window forgeries with the real rkey and addresses of b's region.
    let forgeries: Vec<Vec<u8>> = (0..32u32)
        .map(|k| {
            forged_write(
                qb,
                &ca,
                k,
                kb.rkey,
                kb.addr + u64::from(k) * MSG_BYTES as u64,
                &junk,
            )
        })
        .collect();
    let mut expect = (0u64, 0u64); // (wrong port, wrong IP)
    let mut unknown_qpn = 0u64;
    let mut truncated = 0u64;
    let hostile_round = |expect: &mut (u64, u64), unknown: &mut u64, trunc: &mut u64| {
        for p in &forgeries {
            same_host.send_to(p, b_udp).unwrap();
            other_ip.send_to(p, b_udp).unwrap();
            expect.0 += 1;
            expect.1 += 1;
        }
        // For no QP: another QPN in a well-formed packet, and every length too short to
        // name one (0 to 7 bytes: the QPN is bytes 5..8).
        let mut other = forgeries[0].clone();
        other[7] ^= 0x5a;
        same_host.send_to(&other, b_udp).unwrap();
        for n in 0..8 {
            same_host.send_to(&forgeries[0][..n], b_udp).unwrap();
        }
        *unknown += 9;
        // Longer than a receive buffer (2048 bytes): truncated by the kernel, counted.
        let mut long = forgeries[0].clone();
        long.resize(3000, 0xEE);
        same_host.send_to(&long, b_udp).unwrap();
        *trunc += 1;
    };
    hostile_round(&mut expect, &mut unknown_qpn, &mut truncated);

    // The transfer, with a hostile round after every eighth WRITE.
    b.post_recv(
        qb,
        0,
        Sge {
            lkey: kb.lkey,
            addr: kb.addr,
            len: 0,
        },
    )
    .unwrap();
    let mut recvd = 0u64;
    let mut sent = 0u64;
    for m in 0..MSGS {
        let off = m * MSG_BYTES as u64;
        a.post_write_with_imm(
            qa,
            m,
            Sge {
                lkey: ka.lkey,
                addr: ka.addr + off,
                len: MSG_BYTES as u32,
            },
            kb.addr + off,
            kb.rkey,
            m as u32,
        )
        .unwrap();
        if m % 8 == 7 {
            hostile_round(&mut expect, &mut unknown_qpn, &mut truncated);
        }
        until("transfer", &mut a, &mut b, qb, |a, b| {
            while let Some(c) = a.poll_send_cq(qa) {
                assert_eq!((c.wr_id, c.status), (sent, WcStatus::Success));
                sent += 1;
            }
            if let Some(c) = b.poll_recv_cq(qb) {
                assert_eq!(
                    (c.opcode, c.status, c.imm),
                    (
                        WcOpcode::RecvRdmaWithImm,
                        WcStatus::Success,
                        Some(recvd as u32)
                    )
                );
                recvd += 1;
                b.post_recv(
                    qb,
                    recvd,
                    Sge {
                        lkey: kb.lkey,
                        addr: kb.addr,
                        len: 0,
                    },
                )
                .unwrap();
            }
            recvd == m + 1
        });
    }
    // A flood: 20 more rounds (1640 datagrams), each drained before the next so the
    // kernel drops none and the counts stay exact.
    for _ in 0..20 {
        hostile_round(&mut expect, &mut unknown_qpn, &mut truncated);
        let want = expect.0 + expect.1;
        until("flood", &mut a, &mut b, qb, |_, b| {
            let (q, _) = b.stats(qb).unwrap();
            q.source_drops.wrong_port + q.source_drops.wrong_ip == want
        });
    }
    until("sends", &mut a, &mut b, qb, |a, _| {
        while let Some(c) = a.poll_send_cq(qa) {
            assert_eq!((c.wr_id, c.status), (sent, WcStatus::Success));
            sent += 1;
        }
        sent == MSGS
    });
    // Let every last datagram of the strangers in (counted below exactly).
    let want_unknown = unknown_qpn;
    until("strays", &mut a, &mut b, qb, |_, b| {
        let (_, e) = b.stats(qb).unwrap();
        e.rx_unknown_qpn >= want_unknown && e.datapath.rx_errors >= truncated
    });

    let (qs, es) = b.stats(qb).unwrap();
    let rounds = 1 + MSGS / 8 + 20;
    assert_eq!(expect, (rounds * 32, rounds * 32));
    assert_eq!(
        qs.source_drops,
        SourceDrops {
            before_connect: 0,
            wrong_port: expect.0,
            wrong_ip: expect.1,
        }
    );
    assert_eq!(es.rx_bad_source, expect.0 + expect.1);
    // Every one of 0 to 7 bytes counted (the 0-byte one was handed to nobody).
    assert_eq!(es.rx_unknown_qpn, rounds * 9);
    assert_eq!(es.datapath.rx_errors, rounds);
    // The transport never saw them: no NACK, no drop but copies of a's own resends.
    assert_eq!(qs.conn.nacks_sent, 0);
    assert_eq!(qs.conn.received, MSGS);
    assert_eq!(qs.conn.received_bytes, MSGS * MSG_BYTES as u64);
    let mut got = vec![0u8; total];
    dst.read_at(0, &mut got).unwrap();
    assert_eq!(got, src_bytes, "b's region differs from what a wrote");
    // Nothing answered a stranger.
    let mut buf = [0u8; 64];
    for s in [&same_host, &other_ip] {
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let e = s.recv_from(&mut buf).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "a stranger got an answer: {e}"
        );
    }
}
