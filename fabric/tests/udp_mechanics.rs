//! The io_uring UDP datapath's optional mechanics on loopback (127.0.0.1 and ::1 only):
//! multishot receive over a provided buffer ring (`UdpConfig::rx_multishot`), zero-copy
//! sends (`UdpConfig::tx_zerocopy`) and cooperative task work (`UdpConfig::coop_taskrun`), each alone and together. Every datagram is counted and checked byte for byte: the same
//! datagrams, sources, ECN and sizes as the plain path, no receive errors.

mod udp_common;
use mrc_fabric::datapath::{Datapath, PathMap, TxBatch};
use mrc_fabric::udp::{PortAllocator, UdpConfig, UringDatapath};
use mrc_transport::Ecn;
use std::collections::BTreeMap;
use udp_common::recv_n;

#[derive(Clone, Copy, Debug)]
struct Mech {
    multishot: bool,
    ring_buffers: u16,
    zerocopy: bool,
    coop: bool,
    gro: bool,
}

const PLAIN: Mech = Mech {
    multishot: false,
    ring_buffers: 64,
    zerocopy: false,
    coop: false,
    gro: true,
};

fn dp(bind: &str, ports: &PortAllocator, m: Mech) -> UringDatapath {
    let mut cfg = UdpConfig::bind(bind.parse().unwrap());
    cfg.ports = ports.clone();
    cfg.rx_multishot = m.multishot;
    cfg.rx_ring_buffers = m.ring_buffers;
    cfg.tx_zerocopy = m.zerocopy;
    cfg.coop_taskrun = m.coop;
    cfg.gro = m.gro;
    UringDatapath::new(cfg).unwrap()
}

/// `rounds` bursts of 64 datagrams of 1000 bytes (datagram i numbered in its first 4
/// bytes, the rest a pattern of i) over 16 EVs, each burst received in full before the
/// next; checks every datagram and returns the send calls of the first burst.
fn blast(bind: &str, range: std::ops::RangeInclusive<u16>, m: Mech, ecn: Ecn, rounds: u32) -> u64 {
    let ports = PortAllocator::new(range).unwrap();
    let mut a = dp(bind, &ports, m);
    let mut b = dp(bind, &ports, m);
    let c = a
        .open_conn(b.local_addr(), &PathMap::per_ev((0..16).collect()))
        .unwrap();
    let src = a.source_ports(c).unwrap();
    let mut first_calls = 0;
    for round in 0..rounds {
        let mut batch = TxBatch::new(64, 2048);
        for i in 0..64u32 {
            let n = round * 64 + i;
            let mut payload = vec![(n % 251) as u8; 1000];
            payload[..4].copy_from_slice(&n.to_be_bytes());
            assert!(batch.push(c, i % 16, ecn, &payload));
        }
        let rep = a.tx_burst(&batch).unwrap();
        assert_eq!((rep.datagrams, rep.errors), (64, 0), "{m:?}");
        if round == 0 {
            first_calls = rep.send_calls;
        }
        let got = recv_n(&mut b, 64);
        assert_eq!(got.len(), 64, "{m:?} round {round}");
        let mut seen: Vec<u32> = Vec::new();
        let mut per_port: BTreeMap<u16, usize> = BTreeMap::new();
        for (from, e, bytes) in &got {
            assert_eq!(*e, ecn);
            assert_eq!(bytes.len(), 1000);
            let n = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            assert!(bytes[4..].iter().all(|&x| x == (n % 251) as u8), "{m:?}");
            assert_eq!(from.port(), src[(n % 16) as usize]);
            *per_port.entry(from.port()).or_default() += 1;
            seen.push(n);
        }
        seen.sort_unstable();
        assert_eq!(seen, (round * 64..round * 64 + 64).collect::<Vec<u32>>());
        assert_eq!(per_port.len(), 16);
        assert!(per_port.values().all(|&n| n == 4));
    }
    let (sa, sb) = (a.stats(), b.stats());
    let total = u64::from(rounds) * 64;
    assert_eq!((sa.tx_datagrams, sa.tx_errors), (total, 0), "{m:?}");
    assert_eq!((sb.rx_datagrams, sb.rx_errors), (total, 0), "{m:?}");
    first_calls
}

#[test]
fn multishot_receive_delivers_every_datagram_ipv4_and_ipv6() {
    let m = Mech {
        multishot: true,
        ..PLAIN
    };
    // 16 sockets, 4 equal datagrams each: one GSO send per socket, as without multishot.
    assert_eq!(blast("127.0.0.1:0", 26000..=26049, m, Ecn::Ect0, 3), 16);
    assert_eq!(blast("[::1]:0", 26050..=26099, m, Ecn::Ce, 3), 16);
}

#[test]
fn multishot_with_a_ring_smaller_than_a_burst_rearms_and_loses_nothing() {
    // 2 buffers, no GRO: 64 datagrams per burst need the receive re-armed after ENOBUFS
    // many times; the waiting datagrams stay in the socket meanwhile.
    let m = Mech {
        multishot: true,
        ring_buffers: 2,
        gro: false,
        ..PLAIN
    };
    assert_eq!(blast("127.0.0.1:0", 26100..=26149, m, Ecn::Ect1, 4), 16);
}

#[test]
fn zero_copy_alone_and_with_the_rest_delivers_every_datagram() {
    let zc = Mech {
        zerocopy: true,
        ..PLAIN
    };
    assert_eq!(blast("127.0.0.1:0", 26200..=26249, zc, Ecn::Ect0, 2), 16);
    let all = Mech {
        multishot: true,
        ring_buffers: 8,
        zerocopy: true,
        coop: true,
        gro: true,
    };
    assert_eq!(blast("[::1]:0", 26250..=26299, all, Ecn::Ect0, 3), 16);
}

#[test]
fn cooperative_task_work_delivers_every_datagram_with_either_receive() {
    let coop = Mech {
        coop: true,
        ..PLAIN
    };
    assert_eq!(blast("127.0.0.1:0", 26400..=26449, coop, Ecn::Ect0, 3), 16);
    let coop_ms = Mech {
        coop: true,
        multishot: true,
        ring_buffers: 4,
        gro: false,
        ..PLAIN
    };
    assert_eq!(blast("[::1]:0", 26450..=26499, coop_ms, Ecn::Ce, 3), 16);
}

/// A datapath built on one thread and polled only on another (the receives are submitted
/// by the polling thread, at its first `rx_burst` or `wait`) receives every datagram, with
/// the plain receive and with multishot plus cooperative task work.
#[test]
fn a_datapath_built_on_one_thread_receives_on_another() {
    for m in [
        PLAIN,
        Mech {
            multishot: true,
            coop: true,
            ..PLAIN
        },
    ] {
        let ports = PortAllocator::new(26500..=26549).unwrap();
        let mut a = dp("127.0.0.1:0", &ports, m);
        let b = dp("127.0.0.1:0", &ports, m);
        let to = b.local_addr();
        let rx = std::thread::spawn(move || {
            let mut b = b;
            recv_n(&mut b, 32).len()
        });
        let c = a.open_conn(to, &PathMap::per_ev((0..4).collect())).unwrap();
        let mut batch = TxBatch::new(32, 2048);
        for i in 0..32u32 {
            assert!(batch.push(c, i % 4, Ecn::Ect0, &[7; 900]));
        }
        assert_eq!(a.tx_burst(&batch).unwrap().datagrams, 32);
        assert_eq!(rx.join().unwrap(), 32, "{m:?}");
    }
}

#[test]
fn a_buffer_ring_size_that_is_not_a_power_of_two_is_an_error() {
    let mut cfg = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
    cfg.rx_multishot = true;
    cfg.rx_ring_buffers = 3;
    let e = UringDatapath::new(cfg).unwrap_err().to_string();
    assert!(e.contains("provided buffer ring"), "{e}");
}
