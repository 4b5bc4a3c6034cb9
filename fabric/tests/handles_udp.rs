//! Issue 44: connection set-up in band, the handshake of `engine::setup` in UDP
//! datagrams (`engine::setup_udp`) on real loopback sockets. Two workers connect and
//! move a checked WRITE without a TCP socket in the process; a relay that loses every
//! other set-up datagram each way still lets them connect; a stray datagram is dropped
//! and counted; a closed port fails the attempt; IPv6 works alike. (The
//! datagram-by-datagram cases, with exact counts, are the deterministic harness in
//! `engine::setup`'s tests.) This file opens no TCP socket, so its check of
//! `/proc/self/net/tcp*` sees every test here.

mod handles_common;

use handles_common::{connect_with, until_some, worker, worker_at};
use mrc_fabric::engine::bootstrap::BootstrapError;
use mrc_fabric::engine::setup::HANDLE_FLAG_UDP_SETUP;
use mrc_fabric::engine::{
    ConnHandle, EngineError, ListenOptions, QpConfig, SetupCarrier, SetupStats, Worker,
};
use mrc_fabric::udp::UringDatapath;
use mrc_transport::completion::WcStatus;
use mrc_transport::{Access, Sge, SharedMem};
use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

const IN_BAND: ListenOptions = ListenOptions {
    authenticate_packets: false,
    carrier: SetupCarrier::Udp,
};

/// Socket inodes of this process's descriptors.
fn own_socket_inodes() -> HashSet<u64> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let s = l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
            s.parse().ok()
        })
        .collect()
}

/// Inodes of the sockets `/proc/self/net/<table>` lists (its tenth column).
fn table_inodes(table: &str) -> HashSet<u64> {
    let t = std::fs::read_to_string(format!("/proc/self/net/{table}")).unwrap_or_default();
    t.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(9)?.parse().ok())
        .collect()
}

/// Writes `len` checked bytes from `qb` of `b` into a region of `qa` of `a`.
fn checked_write(
    a: &mut Worker<UringDatapath>,
    qa: u32,
    b: &mut Worker<UringDatapath>,
    qb: u32,
    len: usize,
) {
    let a_mem = SharedMem::from_vec(vec![0u8; len]);
    let a_mr = a
        .reg_mr_shared(qa, &a_mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let sent: Vec<u8> = (0..len).map(|i| (i * 31 % 253) as u8).collect();
    let b_mem = SharedMem::from_vec(sent.clone());
    let b_mr = b.reg_mr_shared(qb, &b_mem, Access::LOCAL_WRITE).unwrap();
    let sge = Sge {
        lkey: b_mr.lkey,
        addr: b_mr.addr,
        len: len as u32,
    };
    b.post_write(qb, 42, sge, a_mr.addr, a_mr.rkey).unwrap();
    let (c, _) = until_some(|| {
        a.progress();
        b.progress();
        b.poll_send_cq(qb)
    });
    assert_eq!((c.wr_id, c.status), (42, WcStatus::Success));
    assert!(a_mem.with(|m| m == sent.as_slice()), "bytes differ");
}

#[test]
fn two_workers_connect_in_band_and_no_tcp_socket_is_opened() {
    let mut a = worker(14000..=14049);
    let mut b = worker(14050..=14099);
    let (lid, handle) = a.listen_with(QpConfig::default(), IN_BAND).unwrap();
    assert_eq!(handle.carrier(), SetupCarrier::Udp);
    let bytes = handle.to_bytes();
    assert_eq!(bytes.len(), 60);
    assert_eq!(bytes[56], HANDLE_FLAG_UDP_SETUP);
    assert_eq!(ConnHandle::from_bytes(&bytes).unwrap(), handle);
    // The handle's port is a UDP socket of this process.
    let udp_port = format!(":{:04X} ", handle.addr().port());
    let udp = std::fs::read_to_string("/proc/self/net/udp").unwrap();
    assert!(udp.lines().any(|l| l.contains(&udp_port)), "{udp}");

    let ((qb, qa), _) = connect_with(&mut b, &mut a, lid, &handle, || {});
    assert_eq!(a.peer_info(qa).unwrap().qpn, qb);
    assert_eq!(b.peer_info(qb).unwrap().qpn, qa);
    assert_eq!(a.peer_info(qa).unwrap().udp_port, b.udp_addr().port());
    let (sa, _) = a.stats(qa).unwrap();
    let (sb, _) = b.stats(qb).unwrap();
    assert!(sa.source_ports_checked && sb.source_ports_checked);
    assert_eq!(a.setup_stats().accepted, 1);
    assert_eq!(b.setup_stats().connected, 1);
    assert_eq!(
        (
            a.setup_stats().datagrams_dropped,
            b.setup_stats().datagrams_dropped
        ),
        (0, 0)
    );
    checked_write(&mut a, qa, &mut b, qb, 200_000);

    // No socket of this process is a TCP one, while the listener is open.
    let own = own_socket_inodes();
    assert!(!own.is_empty());
    let tcp: HashSet<u64> = table_inodes("tcp")
        .union(&table_inodes("tcp6"))
        .copied()
        .collect();
    assert_eq!(own.intersection(&tcp).count(), 0, "a TCP socket is open");
    assert!(a.close_listener(lid));
}

#[test]
fn every_other_set_up_datagram_lost_each_way_still_connects() {
    let mut a = worker(14100..=14149);
    let mut b = worker(14150..=14199);
    let (lid, handle) = a.listen_with(QpConfig::default(), IN_BAND).unwrap();
    // A relay between them that loses the 1st, 3rd, 5th ... datagram each way.
    let relay = UdpSocket::bind("127.0.0.1:0").unwrap();
    relay.set_nonblocking(true).unwrap();
    let mut via = handle.to_bytes();
    via[6..8].copy_from_slice(&relay.local_addr().unwrap().port().to_be_bytes());
    let via = ConnHandle::from_bytes(&via).unwrap();
    let mut client: Option<SocketAddr> = None;
    let mut seen = [0u64; 2];
    let mut lost = [0u64; 2];
    let mut relay_once = || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = relay.recv_from(&mut buf) {
            let (way, to) = if from == handle.addr() {
                (1, client.expect("the listener answers a client"))
            } else {
                client = Some(from);
                (0, handle.addr())
            };
            seen[way] += 1;
            if seen[way] % 2 == 1 {
                lost[way] += 1;
                continue;
            }
            relay.send_to(&buf[..n], to).unwrap();
        }
    };
    let ((qb, qa), _) = connect_with(&mut b, &mut a, lid, &via, &mut relay_once);
    assert_eq!(a.peer_info(qa).unwrap().qpn, qb);
    assert_eq!(b.peer_info(qb).unwrap().qpn, qa);
    // Half of each way lost (rounded up), and made good by retransmissions.
    assert_eq!(lost, [seen[0].div_ceil(2), seen[1].div_ceil(2)]);
    assert!(lost[0] >= 3 && lost[1] >= 3, "{lost:?} of {seen:?}");
    let (sa, sb) = (a.setup_stats(), b.setup_stats());
    assert!(
        sa.datagrams_retransmitted + sb.datagrams_retransmitted >= lost[0] + lost[1] - 2,
        "{sa:?} {sb:?} {lost:?}"
    );
    assert_eq!(
        (sa.accepted, sa.rejected_timeout, sa.rejected_secret),
        (1, 0, 0)
    );
    assert_eq!((sb.connected, sb.connect_failures), (1, 0));
    checked_write(&mut a, qa, &mut b, qb, 50_000);
}

#[test]
fn a_stray_datagram_is_dropped_counted_and_unanswered() {
    let mut a = worker(14200..=14249);
    let (lid, handle) = a.listen_with(QpConfig::default(), IN_BAND).unwrap();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s.send_to(b"GET / HTTP/1.0\r\n\r\n", handle.addr()).unwrap();
    until_some(|| {
        a.progress();
        (a.setup_stats().datagrams_dropped == 1).then_some(())
    });
    assert_eq!(
        a.setup_stats(),
        SetupStats {
            datagrams_dropped: 1,
            ..SetupStats::default()
        }
    );
    let mut buf = [0u8; 64];
    assert!(s.recv_from(&mut buf).is_err(), "the listener answered");
    assert!(a.poll_accept(lid).is_none());
}

#[test]
fn a_closed_port_fails_the_attempt() {
    let mut b = worker(14250..=14299);
    let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = gone.local_addr().unwrap();
    drop(gone);
    let handle = ConnHandle::new(addr, [3; 32], IN_BAND);
    let cid = b.connect_start(&handle, QpConfig::default()).unwrap();
    let (r, _) = until_some(|| {
        b.progress();
        match b.poll_connect(cid) {
            Ok(None) => None,
            other => Some(other),
        }
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
    assert_eq!(b.setup_stats().connect_failures, 1);
}

#[test]
fn in_band_set_up_works_over_ipv6() {
    let w = |range| worker_at("[::1]:0", range);
    let (mut a, mut b) = (w(14300..=14349), w(14350..=14399));
    let (lid, handle) = a.listen_with(QpConfig::default(), IN_BAND).unwrap();
    let bytes = handle.to_bytes();
    assert_eq!((bytes[5], bytes[56]), (6, HANDLE_FLAG_UDP_SETUP));
    assert_eq!(&bytes[8..24], &std::net::Ipv6Addr::LOCALHOST.octets());
    let ((qb, qa), _) = connect_with(&mut b, &mut a, lid, &handle, || {});
    assert_eq!(a.peer_info(qa).unwrap().qpn, qb);
    assert_eq!(b.peer_info(qb).unwrap().qpn, qa);
    checked_write(&mut a, qa, &mut b, qb, 10_000);
}
