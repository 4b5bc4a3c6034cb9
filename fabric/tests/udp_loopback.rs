//! The io_uring UDP datapath on loopback (127.0.0.1 and ::1 only): exact datagram counts,
//! GSO grouping, source ports per EV, ECN read back, sticky SRH.

mod udp_common;
use mrc_fabric::datapath::{ConnId, Datapath, DatapathError, PathMap, TxBatch};
use mrc_fabric::srv6::SrhRepr;
use mrc_fabric::udp::{PortAllocator, PortError, UdpConfig, UringDatapath};
use mrc_transport::Ecn;
use pnet_packet::ip::IpNextHeaderProtocols;
use std::collections::BTreeMap;
use std::net::{Ipv6Addr, SocketAddr};
use udp_common::{Got, recv_n};

fn dp(bind: &str, ports: &PortAllocator, gso: bool) -> UringDatapath {
    let mut cfg = UdpConfig::bind(bind.parse().unwrap());
    cfg.ports = ports.clone();
    cfg.gso = gso;
    UringDatapath::new(cfg).unwrap()
}

fn blast(
    family_bind: &str,
    range: std::ops::RangeInclusive<u16>,
    gso: bool,
) -> (u64, Vec<u16>, Got) {
    let ports = PortAllocator::new(range).unwrap();
    let mut a = dp(family_bind, &ports, gso);
    let mut b = dp(family_bind, &ports, gso);
    let evs: Vec<u32> = (0..16).collect();
    let c = a.open_conn(b.local_addr(), &PathMap::per_ev(evs)).unwrap();
    let src = a.source_ports(c).unwrap();
    let mut batch = TxBatch::new(64, 2048);
    for i in 0..64u32 {
        let mut payload = vec![0u8; 1000];
        payload[..4].copy_from_slice(&i.to_be_bytes());
        assert!(batch.push(c, i % 16, Ecn::Ect0, &payload));
    }
    assert!(batch.is_full());
    let rep = a.tx_burst(&batch).unwrap();
    assert_eq!(rep.datagrams, 64);
    assert_eq!(rep.errors, 0);
    let got = recv_n(&mut b, 64);
    (rep.send_calls, src, got)
}

fn check_blast(src: &[u16], got: &[(SocketAddr, Ecn, Vec<u8>)]) {
    assert_eq!(got.len(), 64);
    let mut seen: Vec<u32> = got
        .iter()
        .map(|(_, _, b)| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..64).collect::<Vec<u32>>());
    let mut per_port: BTreeMap<u16, usize> = BTreeMap::new();
    for (from, ecn, bytes) in got {
        assert_eq!(*ecn, Ecn::Ect0);
        assert_eq!(bytes.len(), 1000);
        *per_port.entry(from.port()).or_default() += 1;
        // Datagram i went out on EV i % 16, i.e. socket i % 16.
        let i = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        assert_eq!(from.port(), src[(i % 16) as usize]);
    }
    assert_eq!(per_port.len(), 16);
    assert!(per_port.values().all(|&n| n == 4));
}

#[test]
fn ipv4_sixteen_evs_sixteen_source_ports_exact_counts_with_gso() {
    let (calls, src, got) = blast("127.0.0.1:0", 21000..=21099, true);
    // 64 datagrams of equal size over 16 sockets: one GSO send of 4 per socket.
    assert_eq!(calls, 16);
    assert_eq!(src, (21000..21016).collect::<Vec<u16>>());
    check_blast(&src, &got);
}

#[test]
fn ipv6_sixteen_evs_exact_counts_with_gso() {
    let (calls, src, got) = blast("[::1]:0", 21100..=21199, true);
    assert_eq!(calls, 16);
    assert_eq!(src, (21100..21116).collect::<Vec<u16>>());
    check_blast(&src, &got);
}

#[test]
fn without_gso_one_send_per_datagram() {
    let (calls, src, got) = blast("127.0.0.1:0", 21200..=21299, false);
    assert_eq!(calls, 64);
    check_blast(&src, &got);
}

#[test]
fn shorter_datagram_closes_a_gso_group_and_ecn_splits_groups() {
    let ports = PortAllocator::new(21300..=21399).unwrap();
    let mut a = dp("127.0.0.1:0", &ports, true);
    let mut b = dp("127.0.0.1:0", &ports, true);
    let c = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![7]))
        .unwrap();
    let mut batch = TxBatch::new(8, 2048);
    // One socket: its datagrams go out per ECN codepoint (ECT(0) before CE), longest
    // first, then in batch order. [1200, 1000] one group (the shorter 1000 ends it: a
    // group's segments are one size and a shorter last one); [1000, 500] the next;
    // [1000 CE] its own ECN group. In batch order the longer 1200 after a 1000 would
    // have split the run: [1000] [1200, 1000] [500] [1000 CE], 4 sends.
    for (len, ecn) in [
        (1000, Ecn::Ect0),
        (1200, Ecn::Ect0),
        (1000, Ecn::Ect0),
        (1000, Ecn::Ce),
        (500, Ecn::Ect0),
    ] {
        assert!(batch.push(c, 7, ecn, &vec![len as u8; len]));
    }
    let rep = a.tx_burst(&batch).unwrap();
    assert_eq!((rep.datagrams, rep.send_calls, rep.errors), (5, 3, 0));
    let got = recv_n(&mut b, 5);
    let lens: Vec<(usize, Ecn)> = got.iter().map(|(_, e, b)| (b.len(), *e)).collect();
    assert_eq!(
        lens,
        vec![
            (1200, Ecn::Ect0),
            (1000, Ecn::Ect0),
            (1000, Ecn::Ect0),
            (500, Ecn::Ect0),
            (1000, Ecn::Ce)
        ]
    );
}

fn ecn_round_trip(bind: &str, range: std::ops::RangeInclusive<u16>) {
    let ports = PortAllocator::new(range).unwrap();
    let mut a = dp(bind, &ports, true);
    let mut b = dp(bind, &ports, true);
    let c = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![1, 2, 3, 4]))
        .unwrap();
    let mut batch = TxBatch::new(4, 256);
    let marks = [Ecn::Ce, Ecn::Ect0, Ecn::Ect1, Ecn::NotEct];
    for (ev, ecn) in (1u32..).zip(marks) {
        assert!(batch.push(c, ev, ecn, &[ev as u8; 64]));
    }
    assert_eq!(a.tx_burst(&batch).unwrap().datagrams, 4);
    let got = recv_n(&mut b, 4);
    let mut by_ev: Vec<(u8, Ecn)> = got.iter().map(|(_, e, b)| (b[0], *e)).collect();
    by_ev.sort_by_key(|x| x.0);
    assert_eq!(
        by_ev,
        vec![
            (1, Ecn::Ce),
            (2, Ecn::Ect0),
            (3, Ecn::Ect1),
            (4, Ecn::NotEct)
        ]
    );
}

#[test]
fn ce_marked_send_is_read_back_as_ce_ipv4() {
    ecn_round_trip("127.0.0.1:0", 21400..=21499);
}

#[test]
fn ce_marked_send_is_read_back_as_ce_ipv6() {
    ecn_round_trip("[::1]:0", 21500..=21599);
}

#[test]
fn ev_sockets_are_shared_across_connections_and_exhaustion_is_typed() {
    let ports = PortAllocator::new(21600..=21619).unwrap();
    let mut a = dp("127.0.0.1:0", &ports, true);
    let b = dp("127.0.0.1:0", &ports, true);
    let paths = PathMap {
        evs_per_socket: 4,
        ..PathMap::per_ev((0..16).collect())
    };
    let c1 = a.open_conn(b.local_addr(), &paths).unwrap();
    let c2 = a
        .open_conn(b.local_addr(), &PathMap::per_ev((0..16).collect()))
        .unwrap();
    // Socket index i is one socket (one source port) for every connection of `a`.
    assert_eq!(
        a.source_ports(c1).unwrap(),
        vec![21600, 21601, 21602, 21603]
    );
    assert_eq!(
        a.source_ports(c2).unwrap(),
        (21600..21616).collect::<Vec<u16>>()
    );
    assert_eq!((ports.leased(), a.ev_sockets()), (16, 16));
    // Another datapath has sockets of its own: 4 ports are left for it, the fifth fails
    // typed, and the four it took return.
    let mut c = dp("127.0.0.1:0", &ports, true);
    match c.open_conn(b.local_addr(), &PathMap::per_ev((0..5).collect())) {
        Err(DatapathError::Port(PortError::Exhausted { first, last })) => {
            assert_eq!((first, last), (21600, 21619));
        }
        other => panic!("expected exhaustion, got {other:?}"),
    }
    assert_eq!((ports.leased(), c.ev_sockets()), (16, 0));
    a.close_conn(c1);
    // c2 still uses every socket c1 did.
    assert_eq!((ports.leased(), a.ev_sockets()), (16, 16));
    a.close_conn(c2);
    assert_eq!((ports.leased(), a.ev_sockets()), (0, 0));
    // Next-fit: the cursor wrapped to 21600, which is free again.
    let c3 = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![0]))
        .unwrap();
    assert_eq!(a.source_ports(c3).unwrap(), vec![21600]);
    // A datagram on an EV the connection does not have is refused whole.
    let mut batch = TxBatch::new(2, 64);
    batch.push(c3, 0, Ecn::Ect0, b"ok");
    batch.push(c3, 99, Ecn::Ect0, b"no");
    assert!(matches!(
        a.tx_burst(&batch),
        Err(DatapathError::UnknownEv {
            conn: ConnId(2),
            ev: 99
        })
    ));
}

/// One datapath, three peers, one burst: each peer gets exactly its datagrams, from the
/// same 4 source ports (the EV sockets are shared; the destination differs).
#[test]
fn shared_ev_sockets_send_to_every_peer() {
    let ports = PortAllocator::new(21650..=21699).unwrap();
    let mut a = dp("127.0.0.1:0", &ports, true);
    let mut peers: Vec<UringDatapath> = (0..3).map(|_| dp("127.0.0.1:0", &ports, true)).collect();
    let conns: Vec<ConnId> = peers
        .iter()
        .map(|p| {
            a.open_conn(p.local_addr(), &PathMap::per_ev((0..4).collect()))
                .unwrap()
        })
        .collect();
    assert_eq!(a.ev_sockets(), 4);
    let mut batch = TxBatch::new(24, 64);
    for i in 0..24u8 {
        let k = usize::from(i % 3);
        assert!(batch.push(conns[k], u32::from(i / 3 % 4), Ecn::Ect0, &[k as u8, i]));
    }
    let rep = a.tx_burst(&batch).unwrap();
    assert_eq!((rep.datagrams, rep.errors), (24, 0));
    let src = a.source_ports(conns[0]).unwrap();
    assert_eq!(src, vec![21650, 21651, 21652, 21653]);
    for (k, p) in peers.iter_mut().enumerate() {
        let got = recv_n(p, 8);
        assert_eq!(got.len(), 8);
        let mut seen: Vec<u8> = got.iter().map(|(_, _, b)| b[1]).collect();
        seen.sort_unstable();
        let want: Vec<u8> = (0..24u8).filter(|i| usize::from(i % 3) == k).collect();
        assert_eq!(seen, want);
        for (from, _, b) in &got {
            assert_eq!(b[0], k as u8);
            assert_eq!(from.port(), src[usize::from(b[1] / 3 % 4)]);
        }
    }
}

#[test]
fn a_port_bound_by_someone_else_is_skipped() {
    let ports = PortAllocator::new(21700..=21703).unwrap();
    let _squatter = std::net::UdpSocket::bind("127.0.0.1:21700").unwrap();
    let mut a = dp("127.0.0.1:0", &ports, true);
    let b = dp("127.0.0.1:0", &ports, true);
    let c = a
        .open_conn(b.local_addr(), &PathMap::per_ev(vec![0, 1]))
        .unwrap();
    assert_eq!(a.source_ports(c).unwrap(), vec![21701, 21702]);
}

#[test]
fn sticky_srh_is_set_per_socket() {
    let ports = PortAllocator::new(21800..=21899).unwrap();
    let mut a = dp("[::1]:0", &ports, true);
    let b = dp("[::1]:0", &ports, true);
    let way1: Ipv6Addr = "fc00::1".parse().unwrap();
    let way2: Ipv6Addr = "fc00::2".parse().unwrap();
    let (s1, _) =
        SrhRepr::for_path(IpNextHeaderProtocols::Udp, &[way1, Ipv6Addr::LOCALHOST]).unwrap();
    let (s2, _) =
        SrhRepr::for_path(IpNextHeaderProtocols::Udp, &[way2, Ipv6Addr::LOCALHOST]).unwrap();
    let paths = PathMap {
        srh: vec![s1.clone(), s2.clone()],
        ..PathMap::per_ev(vec![0, 1, 2])
    };
    let c = a.open_conn(b.local_addr(), &paths).unwrap();
    let want1 = mrc_fabric::udp::srh_bytes(&s1).unwrap();
    let want2 = mrc_fabric::udp::srh_bytes(&s2).unwrap();
    assert_eq!(want1.len(), 40); // 8 + 2 segments of 16
    assert_eq!(a.sticky_rthdr(c, 0).unwrap(), want1);
    assert_eq!(a.sticky_rthdr(c, 1).unwrap(), want2);
    assert_eq!(a.sticky_rthdr(c, 2).unwrap(), want1);
    // An SRH on IPv4 is refused.
    let mut v4 = dp("127.0.0.1:0", &ports, true);
    let bv4 = dp("127.0.0.1:0", &ports, true);
    assert!(matches!(
        v4.open_conn(
            bv4.local_addr(),
            &PathMap {
                srh: vec![s1],
                ..PathMap::per_ev(vec![0])
            }
        ),
        Err(DatapathError::BadPathMap(_))
    ));
}

#[test]
fn a_burst_leaves_grouped_per_socket_and_the_datapath_says_so() {
    let ports = PortAllocator::new(21900..=21999).unwrap();
    let mut a = dp("127.0.0.1:0", &ports, true);
    let mut b = dp("127.0.0.1:0", &ports, true);
    // The engine reads this to set SendConfig::burst_may_reorder.
    assert!(a.reorders_bursts());
    let c = a
        .open_conn(b.local_addr(), &PathMap::per_ev((0..4).collect()))
        .unwrap();
    let mut batch = TxBatch::new(8, 2048);
    for i in 0..8u32 {
        assert!(batch.push(c, i % 4, Ecn::Ect0, &i.to_be_bytes()));
    }
    assert_eq!(a.tx_burst(&batch).unwrap().send_calls, 4);
    let got = recv_n(&mut b, 8);
    let order: Vec<u32> = got
        .iter()
        .map(|(_, _, d)| u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
        .collect();
    // Handed over as 0..8 on EVs 0,1,2,3,0,1,2,3; on the wire per socket: 4 leaves
    // before 1.
    assert_eq!(order, vec![0, 4, 1, 5, 2, 6, 3, 7]);
}

/// Receives one datagram on `s` (IP_RECVTOS / IPV6_RECVTCLASS set) and returns its TOS or
/// traffic class byte from the cmsg, within 5 s.
fn recv_tos(s: &std::net::UdpSocket, v6: bool) -> u8 {
    use std::os::fd::AsRawFd;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut data = [0u8; 2048];
    let mut ctl = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr pointing at live buffers, then the CMSG_* walk of what the
    // kernel wrote into them.
    unsafe {
        let mut h: libc::msghdr = std::mem::zeroed();
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = ctl.as_mut_ptr().cast();
        h.msg_controllen = std::mem::size_of_val(&ctl) as _;
        let n = libc::recvmsg(s.as_raw_fd(), &mut h, 0);
        assert!(n > 0, "recvmsg: {}", std::io::Error::last_os_error());
        let mut c = libc::CMSG_FIRSTHDR(&h);
        while !c.is_null() {
            let (l, t) = ((*c).cmsg_level, (*c).cmsg_type);
            if !v6 && l == libc::IPPROTO_IP && t == libc::IP_TOS {
                return *libc::CMSG_DATA(c);
            }
            if v6 && l == libc::IPPROTO_IPV6 && t == libc::IPV6_TCLASS {
                return std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>()) as u8;
            }
            c = libc::CMSG_NXTHDR(&h, c);
        }
    }
    panic!("no TOS / traffic class cmsg");
}

/// `UdpConfig::traffic_class` (mrc-perf's --dscp / --tclass): every datagram leaves with
/// that DSCP and the transport's ECN codepoint in the same byte (the per-send cmsg used to
/// carry the ECN bits alone, DSCP 0), and each EV socket holds it (getsockopt).
#[test]
fn traffic_class_is_on_the_wire_with_the_ecn_bits() {
    use std::os::fd::AsRawFd;
    for (bind, v6) in [("127.0.0.1:0", false), ("[::1]:0", true)] {
        let rx = std::net::UdpSocket::bind(bind).unwrap();
        let (level, name) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS)
        } else {
            (libc::IPPROTO_IP, libc::IP_RECVTOS)
        };
        let one: libc::c_int = 1;
        // SAFETY: valid fd and an int option.
        let r = unsafe {
            libc::setsockopt(
                rx.as_raw_fd(),
                level,
                name,
                (&raw const one).cast(),
                std::mem::size_of::<libc::c_int>() as _,
            )
        };
        assert_eq!(r, 0);
        let mut cfg = UdpConfig::bind(bind.parse().unwrap());
        cfg.ports = PortAllocator::new(23000..=23999).unwrap();
        // DSCP 46 (EF) << 2; the low bits given here are ignored
        cfg.traffic_class = 0xb8 | 3;
        let mut a = UringDatapath::new(cfg).unwrap();
        let c = a
            .open_conn(rx.local_addr().unwrap(), &PathMap::per_ev(vec![0, 1]))
            .unwrap();
        assert_eq!(a.socket_traffic_class(c, 0).unwrap(), 0xb8, "{bind}");
        assert_eq!(a.socket_traffic_class(c, 1).unwrap(), 0xb8, "{bind}");
        for (ecn, bits) in [(Ecn::Ect0, 0b10u8), (Ecn::NotEct, 0)] {
            let mut batch = TxBatch::new(1, 2048);
            assert!(batch.push(c, 1, ecn, &[7u8; 100]));
            assert_eq!(a.tx_burst(&batch).unwrap().datagrams, 1);
            assert_eq!(recv_tos(&rx, v6), 0xb8 | bits, "{bind} {ecn:?}");
        }
    }
}

/// A datapath on two planes of loopback: plane 0 at 127.0.0.1, plane 1 at 127.0.0.2.
fn two_plane_dp(ports: &PortAllocator) -> UringDatapath {
    let mut cfg = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
    cfg.ports = ports.clone();
    cfg.plane_ips = vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()];
    UringDatapath::new(cfg).unwrap()
}

#[test]
fn each_plane_sends_from_its_own_address_to_the_peers_address_on_the_plane() {
    let ports = PortAllocator::new(27000..=27049).unwrap();
    let mut a = two_plane_dp(&ports);
    assert_eq!(
        a.plane_ips(),
        vec![
            "127.0.0.1".parse::<std::net::IpAddr>().unwrap(),
            "127.0.0.2".parse().unwrap()
        ]
    );
    assert_eq!(a.local_addr().ip().to_string(), "127.0.0.1");
    // The peer's two planes as two one-plane datapaths, so each shows what reached it.
    let mut b0 = dp("127.0.0.3:0", &ports, true);
    let mut b1 = dp("127.0.0.4:0", &ports, true);
    // 8 EVs, interleaved: EV e on plane e % 2; two EVs per socket, each plane on its own.
    let paths = PathMap {
        evs_per_socket: 2,
        planes: (0..8).map(|e| (e % 2) as u8).collect(),
        peers: vec![b0.local_addr(), b1.local_addr()],
        ..PathMap::per_ev((0..8).collect())
    };
    assert_eq!(paths.sockets(), 4);
    // The planes' socket groups in turn: plane 0, 1, 0, 1.
    assert_eq!(paths.socket_planes(), vec![0, 1, 0, 1]);
    let c = a.open_conn(b0.local_addr(), &paths).unwrap();
    let src = a.source_ports(c).unwrap();
    assert_eq!(src.len(), 4);
    let mut batch = TxBatch::new(64, 2048);
    for i in 0..64u32 {
        let mut payload = vec![0u8; 500];
        payload[..4].copy_from_slice(&i.to_be_bytes());
        assert!(batch.push(c, i % 8, Ecn::Ect0, &payload));
    }
    let rep = a.tx_burst(&batch).unwrap();
    assert_eq!((rep.datagrams, rep.errors), (64, 0));
    let got0 = recv_n(&mut b0, 32);
    let got1 = recv_n(&mut b1, 32);
    assert_eq!((got0.len(), got1.len()), (32, 32));
    // Plane 0 (EVs 0, 2 on socket 0; 4, 6 on socket 2) from 127.0.0.1; plane 1 (EVs 1, 3
    // on socket 1; 5, 7 on socket 3) from 127.0.0.2.
    for (got, ip, plane) in [(&got0, "127.0.0.1", 0u32), (&got1, "127.0.0.2", 1)] {
        let mut per_port: BTreeMap<u16, usize> = BTreeMap::new();
        for (from, _, bytes) in got.iter() {
            assert_eq!(from.ip().to_string(), ip);
            let i = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            let ev = i % 8;
            assert_eq!(ev % 2, plane, "datagram {i} on EV {ev}");
            let socket = 2 * (ev / 4) as usize + plane as usize;
            assert_eq!(from.port(), src[socket], "datagram {i} on EV {ev}");
            *per_port.entry(from.port()).or_default() += 1;
        }
        assert_eq!(per_port.values().copied().collect::<Vec<_>>(), vec![16, 16]);
    }
    // The receive socket takes datagrams sent to either plane's address.
    let port = a.local_addr().port();
    let s = std::net::UdpSocket::bind("127.0.0.9:0").unwrap();
    s.send_to(b"plane0", ("127.0.0.1", port)).unwrap();
    s.send_to(b"plane1", ("127.0.0.2", port)).unwrap();
    let mut got: Vec<Vec<u8>> = recv_n(&mut a, 2).into_iter().map(|g| g.2).collect();
    got.sort();
    assert_eq!(got, vec![b"plane0".to_vec(), b"plane1".to_vec()]);
}

#[test]
fn plane_lists_and_path_maps_that_cannot_work_are_refused() {
    let ports = PortAllocator::new(27050..=27099).unwrap();
    let bad = |ips: &[&str], bind: &str| {
        let mut cfg = UdpConfig::bind(bind.parse().unwrap());
        cfg.ports = ports.clone();
        cfg.plane_ips = ips.iter().map(|s| s.parse().unwrap()).collect();
        match UringDatapath::new(cfg) {
            Err(DatapathError::BadPathMap(m)) => m,
            Err(e) => panic!("{ips:?}: {e}"),
            Ok(_) => panic!("{ips:?} accepted"),
        }
    };
    assert_eq!(
        bad(&["127.0.0.1", "::1"], "127.0.0.1:0"),
        "plane addresses of two families (127.0.0.1 and ::1)"
    );
    assert_eq!(
        bad(&["127.0.0.1", "127.0.0.1"], "127.0.0.1:0"),
        "127.0.0.1 is the address of two planes"
    );
    assert_eq!(
        bad(&["127.0.0.1", "127.0.0.2"], "127.0.0.5:0"),
        "bind 127.0.0.5 is not plane 0's address 127.0.0.1"
    );
    assert_eq!(
        bad(&["127.0.0.1", "0.0.0.0"], "127.0.0.1:0"),
        "plane 1's address 0.0.0.0 is unspecified"
    );
    let nine: Vec<String> = (1..=9).map(|i| format!("127.0.0.{i}")).collect();
    let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
    assert_eq!(bad(&nine, "0.0.0.0:0"), "9 plane addresses (at most 8)");
    // An EV on a plane the datapath lacks; a peer list shorter than the planes used.
    let mut a = two_plane_dp(&ports);
    let b = dp("127.0.0.3:0", &ports, true);
    let on_plane_2 = PathMap {
        planes: vec![0, 1, 2],
        ..PathMap::per_ev(vec![0, 1, 2])
    };
    match a.open_conn(b.local_addr(), &on_plane_2) {
        Err(DatapathError::BadPathMap(m)) => {
            assert_eq!(m, "an EV on plane 2, and this end has 2 plane(s)")
        }
        r => panic!("{:?}", r.map(|_| ())),
    }
    let short_peers = PathMap {
        planes: vec![0, 1],
        peers: vec![b.local_addr()],
        ..PathMap::per_ev(vec![0, 1])
    };
    match a.open_conn(b.local_addr(), &short_peers) {
        Err(DatapathError::BadPathMap(m)) => {
            assert_eq!(m, "EVs on 2 planes and the peer's address on 1")
        }
        r => panic!("{:?}", r.map(|_| ())),
    }
    // Nothing stayed open.
    assert_eq!(a.ev_sockets(), 0);
}

/// A burst of 8 same-size datagrams on one EV socket with a sticky SRH: each leaves in a
/// `sendmsg` of its own (no `UDP_SEGMENT`: the kernel cannot offload the checksum of a
/// packet with an extension header, and Linux 6.1 answers such a GSO send `EIO`: the lab's
/// SRv6 testbed refused 2784 of 9952 sends so; this host's 6.18 accepts it, so the
/// `send_calls` count is what fails here without the rule), and the kernel refuses none.
/// (The datagrams do not arrive: a host without `seg6_enabled` drops every packet with an
/// SRH.)
#[test]
fn a_burst_on_a_socket_with_a_sticky_srh_leaves_without_gso() {
    let ports = PortAllocator::new(22000..=22099).unwrap();
    let mut a = dp("[::1]:0", &ports, true);
    let b = dp("[::1]:0", &ports, true);
    let (s1, _) = SrhRepr::for_path(IpNextHeaderProtocols::Udp, &[Ipv6Addr::LOCALHOST]).unwrap();
    let paths = PathMap {
        srh: vec![s1],
        ..PathMap::per_ev(vec![0])
    };
    let c = a.open_conn(b.local_addr(), &paths).unwrap();
    let mut batch = TxBatch::new(8, 2048);
    for i in 0..8u32 {
        assert!(batch.push(c, 0, Ecn::Ect0, &[i as u8; 1000]));
    }
    let rep = a.tx_burst(&batch).unwrap();
    assert_eq!((rep.datagrams, rep.send_calls), (8, 8));
    // the send completions (io_uring reports a refused send when it reaps them)
    for _ in 0..10 {
        a.wait(1_000_000).unwrap();
        a.rx_burst(64, &mut |_| {}).unwrap();
        a.tx_burst(&TxBatch::new(1, 64)).unwrap();
    }
    let st = a.stats();
    assert_eq!((st.tx_datagrams, st.tx_errors), (8, 0));
}
