//! Issue 18, item 3: connection setup through opaque handles with non-blocking connect and
//! accept on `engine::Worker`. Two workers in one process on UDP loopback, driven from one
//! thread that alternates connect and accept polls; a stray TCP connection, a forged
//! secret, a silent listener, each with exact outcomes and counters.

mod handles_common;

use handles_common::{connect_with, until_some, worker, worker_at};
use mrc_fabric::datapath::Datapath;
use mrc_fabric::engine::bootstrap::BootstrapError;
use mrc_fabric::engine::setup::{HANDLE_BYTES, HandleError};
use mrc_fabric::engine::{
    ConnHandle, EngineConfig, EngineError, ListenOptions, QpConfig, SetupStats, Worker,
};
use mrc_fabric::udp::{FakeDatapath, FakeNet, FakeVerdict, UringDatapath};
use mrc_transport::completion::{WcOpcode, WcStatus};
use mrc_transport::{Access, Sge, SharedMem};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Connects `client` to `server`'s listener through `handle` bytes
/// ([`handles_common::connect_with`]); every pass returns within 1 s. Returns (client
/// QPN, server QPN).
fn connect_pair<A: Datapath, B: Datapath>(
    client: &mut Worker<A>,
    server: &mut Worker<B>,
    lid: mrc_fabric::engine::ListenerId,
    handle_bytes: &[u8],
) -> (u32, u32) {
    let handle = ConnHandle::from_bytes(handle_bytes).unwrap();
    let (qpns, longest) = connect_with(client, server, lid, &handle, || {});
    assert!(longest < Duration::from_secs(1), "a poll took {longest:?}");
    qpns
}

#[test]
fn handle_bytes_round_trip_and_hostile_handles_are_typed_errors() {
    let mut w = worker(13000..=13049);
    let (lid, h) = w.listen(QpConfig::default()).unwrap();
    let b = h.to_bytes();
    assert_eq!(b.len(), HANDLE_BYTES);
    const { assert!(HANDLE_BYTES <= 128, "NCCL_NET_HANDLE_MAXSIZE") };
    assert_eq!(&b[..6], b"MRCH\x01\x04");
    assert_eq!(u16::from_be_bytes([b[6], b[7]]), h.addr().port());
    assert_eq!(
        &b[8..24],
        &[127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(&b[56..], &[0, 0, 0, 0]);
    assert_eq!(ConnHandle::from_bytes(&b).unwrap(), h);
    // A 128-byte NCCL buffer holding the handle parses the same.
    let mut nccl = [0xAAu8; 128];
    nccl[..HANDLE_BYTES].copy_from_slice(&b);
    assert_eq!(ConnHandle::from_bytes(&nccl).unwrap(), h);
    // The secret never shows in Debug.
    let dbg = format!("{h:?}");
    assert!(dbg.starts_with("ConnHandle { addr: 127.0.0.1:"), "{dbg}");
    assert!(!dbg.contains("secret"), "{dbg}");
    let bad = |i: usize, v: u8| {
        let mut x = b;
        x[i] = v;
        ConnHandle::from_bytes(&x)
    };
    assert_eq!(
        ConnHandle::from_bytes(&b[..59]),
        Err(HandleError::Short(59))
    );
    assert_eq!(bad(0, b'X'), Err(HandleError::BadMagic(*b"XRCH")));
    assert_eq!(bad(4, 2), Err(HandleError::BadVersion(2)));
    assert_eq!(bad(5, 5), Err(HandleError::BadFamily(5)));
    assert_eq!(bad(12, 1), Err(HandleError::BadAddress)); // IPv4 with bytes in the v6 tail
    assert_eq!(bad(57, 1), Err(HandleError::BadPlanes(1))); // one plane is 0
    assert_eq!(bad(57, 9), Err(HandleError::BadPlanes(9)));
    assert_eq!(bad(58, 1), Err(HandleError::BadAddress)); // reserved
    assert_eq!(h.planes(), 1);
    assert_eq!(bad(57, 2).unwrap().planes(), 2);
    assert_eq!(bad(56, 4), Err(HandleError::BadFlags(4)));
    assert!(!h.authenticates_packets());
    let mut port0 = b;
    port0[6..8].copy_from_slice(&[0, 0]);
    assert_eq!(ConnHandle::from_bytes(&port0), Err(HandleError::BadAddress));
    let mut unspec = b;
    unspec[8..12].copy_from_slice(&[0, 0, 0, 0]);
    assert_eq!(
        ConnHandle::from_bytes(&unspec),
        Err(HandleError::BadAddress)
    );
    assert!(w.close_listener(lid));
    assert!(!w.close_listener(lid));
    assert!(matches!(
        w.poll_accept(lid),
        Some(Err(EngineError::Refused(m))) if m == format!("no listener {}", lid.0)
    ));
}

/// Connect and accept alternated on one thread through handle bytes, then a WRITE each
/// way with every byte checked, and a second connection to the same listener.
#[test]
fn two_workers_connect_through_handles_and_move_checked_writes() {
    let mut a = worker(13050..=13099);
    let mut b = worker(13100..=13149);
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let bytes = handle.to_bytes();
    let (qb, qa) = connect_pair(&mut b, &mut a, lid, &bytes);
    assert_eq!(a.peer_info(qa).unwrap().qpn, qb);
    assert_eq!(b.peer_info(qb).unwrap().qpn, qa);
    assert_eq!(a.peer_info(qa).unwrap().udp_port, b.udp_addr().port());
    let (sa, _) = a.stats(qa).unwrap();
    let (sb, _) = b.stats(qb).unwrap();
    assert!(sa.source_ports_checked && sb.source_ports_checked);
    assert_eq!(
        a.setup_stats(),
        SetupStats {
            accepted: 1,
            ..SetupStats::default()
        }
    );
    assert_eq!(
        b.setup_stats(),
        SetupStats {
            connected: 1,
            ..SetupStats::default()
        }
    );

    // b -> a: 200000 bytes into a's region, with immediate 7.
    const LEN: usize = 200_000;
    let a_mem = SharedMem::from_vec(vec![0u8; LEN]);
    let a_mr = a
        .reg_mr_shared(qa, &a_mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let sent: Vec<u8> = (0..LEN).map(|i| (i * 31 % 253) as u8).collect();
    let b_mem = SharedMem::from_vec(sent.clone());
    let b_mr = b.reg_mr_shared(qb, &b_mem, Access::LOCAL_WRITE).unwrap();
    a.post_recv(
        qa,
        1,
        Sge {
            lkey: a_mr.lkey,
            addr: a_mr.addr,
            len: 0,
        },
    )
    .unwrap();
    let sge = Sge {
        lkey: b_mr.lkey,
        addr: b_mr.addr,
        len: LEN as u32,
    };
    b.post_write_with_imm(qb, 42, sge, a_mr.addr, a_mr.rkey, 7)
        .unwrap();
    let ((sc, rc), _) = {
        let (mut s, mut r) = (None, None);
        until_some(|| {
            a.progress();
            b.progress();
            s = s.or_else(|| b.poll_send_cq(qb));
            r = r.or_else(|| a.poll_recv_cq(qa));
            s.zip(r)
        })
    };
    assert_eq!(
        (sc.wr_id, sc.opcode, sc.status),
        (42, WcOpcode::WriteWithImm, WcStatus::Success)
    );
    assert_eq!(
        (rc.wr_id, rc.opcode, rc.status, rc.byte_len, rc.imm),
        (
            1,
            WcOpcode::RecvRdmaWithImm,
            WcStatus::Success,
            LEN as u32,
            Some(7)
        )
    );
    assert!(a_mem.with(|m| m == sent.as_slice()), "bytes differ");

    // A second peer QP through the same handle: the listener serves many.
    let (qb2, qa2) = connect_pair(&mut b, &mut a, lid, &bytes);
    assert_ne!(qa2, qa);
    assert_ne!(qb2, qb);
    assert_eq!(a.setup_stats().accepted, 2);
    assert_eq!(b.setup_stats().connected, 2);
    // a -> b on it: a WRITE of 5000 bytes from a into b's region.
    let b2_mem = SharedMem::from_vec(vec![0u8; 5000]);
    let b2_mr = b
        .reg_mr_shared(qb2, &b2_mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let a2_mem = SharedMem::from_vec((0..5000).map(|i| (i % 7) as u8 + 1).collect());
    let a2_mr = a.reg_mr_shared(qa2, &a2_mem, Access::LOCAL_WRITE).unwrap();
    a.post_write(
        qa2,
        9,
        Sge {
            lkey: a2_mr.lkey,
            addr: a2_mr.addr,
            len: 5000,
        },
        b2_mr.addr,
        b2_mr.rkey,
    )
    .unwrap();
    let (c, _) = until_some(|| {
        a.progress();
        b.progress();
        a.poll_send_cq(qa2)
    });
    assert_eq!((c.wr_id, c.status), (9, WcStatus::Success));
    assert_eq!(b2_mem.with(|m| m.to_vec()), a2_mem.with(|m| m.to_vec()));
    assert!(a.close_listener(lid));
}

/// Stray TCP connections to a listener: foreign bytes, an immediate close, a silent
/// one, and a valid nonce followed by a forged confirmation; each is dropped and counted,
/// and a real peer connects meanwhile.
#[test]
fn stray_connections_are_dropped_and_counted_and_the_listener_keeps_working() {
    let mut a = worker(13150..=13199);
    let mut b = worker(13200..=13249);
    a.set_setup_timeout(Duration::from_millis(1500));
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let addr = handle.addr();
    let mut http = TcpStream::connect(addr).unwrap();
    http.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    drop(TcpStream::connect(addr).unwrap()); // closes at once
    let silent = TcpStream::connect(addr).unwrap();
    let mut forger = TcpStream::connect(addr).unwrap();
    let mut msg = b"MRCN".to_vec();
    msg.extend_from_slice(&[0x55; 32]);
    msg.extend_from_slice(b"MRCK");
    msg.extend_from_slice(&[0x66; 32]);
    forger.write_all(&msg).unwrap();
    // The real peer connects while the strays are in flight.
    let (qb, qa) = connect_pair(&mut b, &mut a, lid, &handle.to_bytes());
    assert_eq!(a.peer_info(qa).unwrap().qpn, qb);
    // The forger got the listener's nonce and confirmation, then the stream closed
    // (no QpInfo: no QPN, PSN or rkey leaks to it).
    forger
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    forger.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), 72, "{got:02x?}");
    assert_eq!((&got[..4], &got[36..40]), (&b"MRCN"[..], &b"MRCK"[..]));
    // The silent one is dropped at its deadline.
    let (_, _) = until_some(|| {
        a.progress();
        (a.setup_stats().rejected_timeout == 1).then_some(())
    });
    assert_eq!(
        a.setup_stats(),
        SetupStats {
            accepted: 1,
            rejected_secret: 1,
            rejected_protocol: 2,
            rejected_timeout: 1,
            ..SetupStats::default()
        }
    );
    assert!(a.poll_accept(lid).is_none());
    drop((http, silent));
    // Still accepting.
    let (_, qa2) = connect_pair(&mut b, &mut a, lid, &handle.to_bytes());
    assert_ne!(qa2, qa);
    assert_eq!(a.setup_stats().accepted, 2);
}

/// A handle whose secret was changed: the attempt fails with `AuthMismatch` at the
/// client, the listener counts a rejected secret and hands out nothing; the true handle
/// then works.
#[test]
fn a_forged_handle_secret_is_refused_at_both_ends() {
    let mut a = worker(13250..=13299);
    let mut b = worker(13300..=13349);
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let mut forged = handle.to_bytes();
    forged[30] ^= 1;
    let h = ConnHandle::from_bytes(&forged).unwrap();
    let cid = b.connect_start(&h, QpConfig::default()).unwrap();
    let (r, _) = until_some(|| {
        assert!(a.poll_accept(lid).is_none());
        match b.poll_connect(cid) {
            Ok(None) => None,
            other => Some(other),
        }
    });
    match r {
        Err(EngineError::Bootstrap(BootstrapError::AuthMismatch(m))) => {
            assert_eq!(m, "the peer does not hold this connection handle's secret")
        }
        other => panic!("want AuthMismatch, got {other:?}"),
    }
    let (_, _) = until_some(|| {
        assert!(a.poll_accept(lid).is_none());
        (a.setup_stats().rejected_secret == 1).then_some(())
    });
    assert_eq!(
        b.setup_stats(),
        SetupStats {
            connect_failures: 1,
            ..SetupStats::default()
        }
    );
    // The attempt is over: polling it again is a typed refusal.
    assert!(matches!(b.poll_connect(cid), Err(EngineError::Refused(_))));
    let (qb, qa) = connect_pair(&mut b, &mut a, lid, &handle.to_bytes());
    assert_eq!(b.peer_info(qb).unwrap().qpn, qa);
    assert_eq!(
        a.setup_stats(),
        SetupStats {
            accepted: 1,
            rejected_secret: 1,
            ..SetupStats::default()
        }
    );
}

/// A listener that never answers (a TCP socket nobody accepts on) ends the attempt at
/// its deadline, with every poll returning at once; a closed port fails as refused.
#[test]
fn a_silent_listener_times_out_the_attempt_without_blocking() {
    let mut b = worker(13350..=13399);
    b.set_setup_timeout(Duration::from_millis(1000));
    let mut a = worker(13400..=13449);
    let (_, real) = a.listen(QpConfig::default()).unwrap();
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut bytes = real.to_bytes();
    bytes[6..8].copy_from_slice(&mute.local_addr().unwrap().port().to_be_bytes());
    let h = ConnHandle::from_bytes(&bytes).unwrap();
    let start = Instant::now();
    let cid = b.connect_start(&h, QpConfig::default()).unwrap();
    let (r, longest) = until_some(|| match b.poll_connect(cid) {
        Ok(None) => None,
        other => Some(other),
    });
    let took = start.elapsed();
    assert!(
        matches!(
            r,
            Err(EngineError::Bootstrap(BootstrapError::TimedOut {
                what: "nonce"
            }))
        ),
        "{r:?}"
    );
    assert!(took >= Duration::from_millis(1000), "{took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(
        longest < Duration::from_millis(500),
        "one poll took {longest:?}"
    );
    // A closed port: refused.
    let port = mute.local_addr().unwrap().port();
    drop(mute);
    bytes[6..8].copy_from_slice(&port.to_be_bytes());
    let cid = b
        .connect_start(
            &ConnHandle::from_bytes(&bytes).unwrap(),
            QpConfig::default(),
        )
        .unwrap();
    let (r, _) = until_some(|| match b.poll_connect(cid) {
        Ok(None) => None,
        other => Some(other),
    });
    assert!(
        matches!(
            r,
            Err(EngineError::Bootstrap(BootstrapError::Io {
                what: "connect",
                ..
            }))
        ),
        "{r:?}"
    );
    assert_eq!(b.setup_stats().connect_failures, 2);
}

/// Over the in-memory network (so every datagram's length is seen): the sizes of the
/// data packets of one 100-byte WRITE on a connection from a listener with
/// `authenticate_packets`, after checking the bytes landed.
fn write_100_bytes(
    authenticate_packets: bool,
    forge_flag: bool,
) -> Result<Vec<usize>, EngineError> {
    use std::sync::{Arc, Mutex};
    let net = FakeNet::new();
    let lens = Arc::new(Mutex::new(Vec::new()));
    let l2 = Arc::clone(&lens);
    net.set_filter(move |_, _, b| {
        // Data packets: BTH, MRC extension, RETH and 100 payload bytes; SACKs are short.
        if b.len() > 120 {
            l2.lock().unwrap().push(b.len());
        }
        FakeVerdict::Deliver
    });
    let fake = |port| {
        Worker::with_datapath(
            FakeDatapath::new(&net, SocketAddr::new([127, 0, 0, 1].into(), port)),
            EngineConfig::default(),
        )
    };
    let (mut a, mut b) = (fake(5000), fake(5001));
    let opts = ListenOptions {
        authenticate_packets,
        ..ListenOptions::default()
    };
    let (lid, handle) = a.listen_with(QpConfig::default(), opts).unwrap();
    assert_eq!(handle.authenticates_packets(), authenticate_packets);
    let mut bytes = handle.to_bytes();
    if forge_flag {
        bytes[56] ^= 1;
        let cid = b
            .connect_start(
                &ConnHandle::from_bytes(&bytes).unwrap(),
                QpConfig::default(),
            )
            .unwrap();
        let (r, _) = until_some(|| {
            a.progress();
            match b.poll_connect(cid) {
                Ok(None) => None,
                other => Some(other),
            }
        });
        let (_, _) = until_some(|| {
            a.progress();
            (a.setup_stats().rejected_secret == 1).then_some(())
        });
        return r.map(|_| Vec::new());
    }
    let (qb, qa) = connect_pair(&mut b, &mut a, lid, &bytes);
    let dst = SharedMem::from_vec(vec![0u8; 100]);
    let dk = a
        .reg_mr_shared(qa, &dst, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let src = SharedMem::from_vec((1..=100).collect());
    let sk = b.reg_mr_shared(qb, &src, Access::LOCAL_WRITE).unwrap();
    b.post_write(
        qb,
        5,
        Sge {
            lkey: sk.lkey,
            addr: sk.addr,
            len: 100,
        },
        dk.addr,
        dk.rkey,
    )
    .unwrap();
    let (c, _) = until_some(|| {
        a.progress();
        b.progress();
        b.poll_send_cq(qb)
    });
    assert_eq!((c.wr_id, c.status), (5, WcStatus::Success));
    assert_eq!(dst.with(|d| d.to_vec()), (1..=100).collect::<Vec<u8>>());
    let mut l = lens.lock().unwrap().clone();
    l.dedup();
    Ok(l)
}

/// A listener with `authenticate_packets`: its handle says so, both ends derive the
/// packet keys from the handle's secret and the handshake's nonces, and every datagram
/// carries the 24 bytes of tag and packet number (the same WRITE, measured plain and
/// authenticated). A handle whose flag was flipped fails the confirmation.
#[test]
fn an_authenticating_listener_authenticates_every_packet_and_its_flag_cannot_be_stripped() {
    let plain = write_100_bytes(false, false).unwrap();
    let auth = write_100_bytes(true, false).unwrap();
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert_eq!(auth, vec![plain[0] + 24]);
    match write_100_bytes(true, true) {
        Err(EngineError::Bootstrap(BootstrapError::AuthMismatch(_))) => {}
        other => panic!("want AuthMismatch, got {other:?}"),
    }
}

/// The same over IPv6 loopback.
#[test]
fn handles_work_over_ipv6() {
    let w = |range| worker_at("[::1]:0", range);
    let (mut a, mut b) = (w(13450..=13499), w(13500..=13549));
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let bytes = handle.to_bytes();
    assert_eq!(bytes[5], 6);
    assert_eq!(&bytes[8..24], &std::net::Ipv6Addr::LOCALHOST.octets());
    let (qb, qa) = connect_pair(&mut b, &mut a, lid, &bytes);
    assert_eq!(a.peer_info(qa).unwrap().qpn, qb);
}

/// A peer that holds the handle (it proves the secret) and then misbehaves: a QpInfo of
/// another version, or the fixed part of one announcing 1024 regions and then silence.
/// The listener made a QP for each after the proof, and destroys it when the handshake
/// fails: counted, nothing handed out, nothing left behind.
#[test]
fn a_peer_holding_the_secret_that_then_misbehaves_leaves_no_qp_behind() {
    use mrc_fabric::engine::bootstrap::QpInfo;
    use mrc_transport::auth::key_confirmation;
    let mut a = worker(13550..=13599);
    a.set_setup_timeout(Duration::from_millis(800));
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let hb = handle.to_bytes();
    let psk: Vec<u8> = hb[24..57].to_vec(); // the secret and the flags
    let hostile = |a: &mut Worker<UringDatapath>, info: &[u8]| {
        let mut s = TcpStream::connect(handle.addr()).unwrap();
        s.set_nonblocking(true).unwrap();
        let nonce = [0x11u8; 32];
        let mut out = b"MRCN".to_vec();
        out.extend_from_slice(&nonce);
        s.write_all(&out).unwrap();
        // The listener's nonce arrives once it accepted (progressing it meanwhile).
        let mut got = Vec::new();
        let (_, _) = until_some(|| {
            a.progress();
            let mut b = [0u8; 64];
            if let Ok(n) = s.read(&mut b) {
                got.extend_from_slice(&b[..n]);
            }
            (got.len() >= 36).then_some(())
        });
        let mut peer = [0u8; 32];
        peer.copy_from_slice(&got[4..36]);
        // The connecting end is always the initiator.
        let (initiator, ni, nr) = (true, nonce, peer);
        let mut c = b"MRCK".to_vec();
        c.extend_from_slice(&key_confirmation(&psk, &ni, &nr, initiator).unwrap());
        c.extend_from_slice(info);
        s.write_all(&c).unwrap();
        s
    };
    let good = QpInfo {
        qpn: 7,
        initial_psn: 1,
        generation: 1,
        udp_port: 9,
        recv_window_packets: 1024,
        mtu_payload_bytes: 4096,
        go_back_n: false,
        regions: Vec::new(),
        plane_ips: Vec::new(),
    }
    .encode()
    .unwrap();
    let mut v9 = good.clone();
    v9[4] = 9;
    let _s1 = hostile(&mut a, &v9);
    let (_, _) = until_some(|| {
        assert!(a.poll_accept(lid).is_none());
        (a.setup_stats().rejected_protocol == 1).then_some(())
    });
    assert_eq!(a.qp_count(), 0);
    // 1024 regions announced (20480 bytes due), none sent.
    let mut many = good.clone();
    many[18..20].copy_from_slice(&1024u16.to_be_bytes());
    let _s2 = hostile(&mut a, &many);
    let (_, _) = until_some(|| {
        a.progress();
        (a.qp_count() == 1).then_some(())
    });
    let (_, _) = until_some(|| {
        assert!(a.poll_accept(lid).is_none());
        (a.setup_stats().rejected_timeout == 1).then_some(())
    });
    assert_eq!(a.qp_count(), 0);
    assert_eq!(
        a.setup_stats(),
        SetupStats {
            rejected_protocol: 1,
            rejected_timeout: 1,
            ..SetupStats::default()
        }
    );
}

/// A parallel-session (reflection) attack on the listener's key confirmation, by a peer
/// that does NOT hold the secret: open two connections, send each the listener's nonce
/// of the other, then send each the listener's confirmation of the other. When the
/// roles came from comparing nonces, connection 1 (listener initiator over (N1, N2))
/// expected exactly what connection 2 (listener responder over (N1, N2)) sent, so both
/// passed: two QPs created, QPN, PSN and rkeys sent to a stranger. The listener is now
/// always the responder, so neither confirmation it sends is one it accepts: both are
/// refused as forged secrets after the 72 bytes of nonce and confirmation.
/// What the reflection test waits for: a condition on (bytes read, EOF seen) per stream.
type Until = dyn Fn(&[Vec<u8>; 2], &[bool; 2]) -> bool;

#[test]
fn a_reflected_confirmation_from_a_second_connection_is_refused() {
    let mut a = worker(13600..=13649);
    a.set_setup_timeout(Duration::from_millis(1500));
    let (lid, handle) = a.listen(QpConfig::default()).unwrap();
    let mut s = [
        TcpStream::connect(handle.addr()).unwrap(),
        TcpStream::connect(handle.addr()).unwrap(),
    ];
    for x in &s {
        x.set_nonblocking(true).unwrap();
    }
    let mut got = [Vec::new(), Vec::new()];
    let mut eof = [false, false];
    // Reads what each stream has, progressing the listener, until `f` holds.
    let mut pump = |a: &mut Worker<UringDatapath>,
                    s: &mut [TcpStream; 2],
                    got: &mut [Vec<u8>; 2],
                    f: &Until| {
        let (_, _) = until_some(|| {
            assert!(a.poll_accept(lid).is_none());
            for i in 0..2 {
                let mut b = [0u8; 4096];
                match s[i].read(&mut b) {
                    Ok(0) => eof[i] = true,
                    Ok(n) => got[i].extend_from_slice(&b[..n]),
                    Err(_) => {}
                }
            }
            f(got, &eof).then_some(())
        });
    };
    pump(&mut a, &mut s, &mut got, &|g, _| {
        g[0].len() >= 36 && g[1].len() >= 36
    });
    assert_eq!((&got[0][..4], &got[1][..4]), (&b"MRCN"[..], &b"MRCN"[..]));
    let (n0, n1) = (got[0][4..36].to_vec(), got[1][4..36].to_vec());
    s[0].write_all(&[&b"MRCN"[..], &n1].concat()).unwrap();
    s[1].write_all(&[&b"MRCN"[..], &n0].concat()).unwrap();
    pump(&mut a, &mut s, &mut got, &|g, _| {
        g[0].len() >= 72 && g[1].len() >= 72
    });
    assert_eq!(
        (&got[0][36..40], &got[1][36..40]),
        (&b"MRCK"[..], &b"MRCK"[..])
    );
    let (c0, c1) = (got[0][40..72].to_vec(), got[1][40..72].to_vec());
    s[0].write_all(&[&b"MRCK"[..], &c1].concat()).unwrap();
    s[1].write_all(&[&b"MRCK"[..], &c0].concat()).unwrap();
    pump(&mut a, &mut s, &mut got, &|_, e| e[0] && e[1]);
    // Nothing past the confirmation: no QpInfo (no QPN, PSN or rkey) to the stranger.
    assert_eq!((got[0].len(), got[1].len()), (72, 72));
    assert_eq!(a.qp_count(), 0);
    assert_eq!(
        a.setup_stats(),
        SetupStats {
            rejected_secret: 2,
            ..SetupStats::default()
        }
    );
}

#[test]
fn a_listener_at_a_chosen_port_and_secret_answers_the_handle_built_from_them() {
    let mut server = worker(18100..=18199);
    let mut client = worker(18200..=18299);
    let secret = *b"a secret both sides derive: test";
    // The kernel picks a free port; listening again at it with the chosen secret.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (lid, h) = server
        .listen_at(
            QpConfig::default(),
            ListenOptions::default(),
            port,
            Some(secret),
        )
        .unwrap();
    let at: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let built = ConnHandle::new(at, secret, ListenOptions::default());
    assert_eq!(h, built);
    assert_eq!(h.to_bytes()[24..56], secret);
    // The port is taken now: a second listener there is a bootstrap error.
    let again = server.listen_at(QpConfig::default(), ListenOptions::default(), port, None);
    assert!(matches!(again, Err(EngineError::Bootstrap(_))), "{again:?}");
    // A peer that built the handle from the port and secret connects.
    let (c, s) = connect_pair(&mut client, &mut server, lid, &built.to_bytes());
    assert!(c != 0 && s != 0);
    // Port 0 and no secret: as `listen_with` (a drawn port and secret).
    let (_, h0) = server
        .listen_at(QpConfig::default(), ListenOptions::default(), 0, None)
        .unwrap();
    assert_ne!(h0.addr().port(), 0);
    assert_ne!(h0.to_bytes()[24..56], secret);
}
