//! Gathered sends (`TxBatch::push_gather_with`: headers in the batch's slot, the payload
//! lent from elsewhere, as the engine sends data packets) over every UDP datapath: the
//! io_uring one with and without `UDP_SEGMENT`, the plain system-call one, the in-memory
//! one. Each datagram must arrive as its headers followed by its payload, byte for byte,
//! whether gathered or whole, alone in a send or inside a GSO group with whole ones.

mod udp_common;
use mrc_fabric::datapath::{ConnId, Datapath, PathMap, TxBatch};
use mrc_fabric::udp::{
    DirectDatapath, FakeDatapath, FakeNet, PortAllocator, UdpConfig, UringDatapath,
};
use mrc_transport::{Ecn, PayloadRef};
use udp_common::recv_n;

/// Datagrams per burst.
const N: u32 = 48;
/// Header bytes of each datagram (its number, then a marker).
const HEAD: usize = 16;

/// Datagram `n`'s payload length: 1000 bytes, but every 16th is 300 (it ends a GSO group)
/// and every 16th + 7 is empty (a header-only datagram).
fn payload_len(n: u32) -> usize {
    match n % 16 {
        15 => 300,
        7 => 0,
        _ => 1000,
    }
}

fn head(n: u32) -> [u8; HEAD] {
    let mut h = [0xA5u8; HEAD];
    h[..4].copy_from_slice(&n.to_be_bytes());
    h
}

/// Queues `N` datagrams of `conn`, datagram `n` on EV `n % evs`: even ones gathered
/// (headers in the slot, payload lent from `src`), odd ones whole (copied into the slot).
fn fill_batch(batch: &mut TxBatch, conn: ConnId, src: &[u8], evs: u32) {
    for n in 0..N {
        let len = payload_len(n);
        let off = n as usize * 7;
        let payload = &src[off..off + len];
        let ev = n % evs;
        if n % 2 == 0 {
            // SAFETY: `src` outlives the batch's use (the test sends, then drops both).
            let queued = unsafe {
                batch.push_gather_with(conn, |slot| {
                    slot[..HEAD].copy_from_slice(&head(n));
                    let lent = (!payload.is_empty()).then(|| PayloadRef::of(payload));
                    Some((ev, HEAD, Ecn::Ect0, lent))
                })
            };
            assert!(queued);
        } else {
            let mut whole = head(n).to_vec();
            whole.extend_from_slice(payload);
            assert!(batch.push(conn, ev, Ecn::Ect0, &whole));
        }
    }
}

fn source() -> Vec<u8> {
    (0..N as usize * 7 + 1000)
        .map(|i| (i * 13 % 251) as u8)
        .collect()
}

/// Sends one batch from `a` to `b` over `evs` EVs and checks every datagram; returns `a`'s
/// send calls.
fn gather_over<A: Datapath, B: Datapath>(a: &mut A, b: &mut B, evs: u32) -> u64 {
    let conn = a
        .open_conn(b.local_addr(), &PathMap::per_ev((0..4).collect()))
        .unwrap();
    let src = source();
    let mut batch = TxBatch::new(64, 2048);
    fill_batch(&mut batch, conn, &src, evs);
    let (m, d) = batch.get(0).unwrap();
    assert_eq!(
        (m.len, d.head.len(), d.payload_len()),
        (HEAD + 1000, HEAD, 1000)
    );
    let (m, d) = batch.get(1).unwrap();
    assert_eq!(
        (m.len, d.head.len(), d.payload_len()),
        (HEAD + 1000, HEAD + 1000, 0)
    );
    assert_eq!(d.payload, None);
    let rep = a.tx_burst(&batch).unwrap();
    assert_eq!((rep.datagrams, rep.errors), (u64::from(N), 0));
    let mut got = recv_n(b, N as usize);
    assert_eq!(got.len(), N as usize);
    got.sort_by_key(|(_, _, bytes)| u32::from_be_bytes(bytes[..4].try_into().unwrap()));
    for (n, (_, ecn, bytes)) in (0..N).zip(&got) {
        let off = n as usize * 7;
        let mut want = head(n).to_vec();
        want.extend_from_slice(&src[off..off + payload_len(n)]);
        assert_eq!(bytes, &want, "datagram {n}");
        assert_eq!(*ecn, Ecn::Ect0);
    }
    rep.send_calls
}

fn udp_cfg(ports: &PortAllocator, gso: bool) -> UdpConfig {
    let mut cfg = UdpConfig::bind("127.0.0.1:0".parse().unwrap());
    cfg.ports = ports.clone();
    cfg.gso = gso;
    cfg
}

#[test]
fn gathered_and_whole_datagrams_arrive_byte_for_byte_over_io_uring() {
    let ports = PortAllocator::new(26600..=26649).unwrap();
    let mut a = UringDatapath::new(udp_cfg(&ports, true)).unwrap();
    let mut b = UringDatapath::new(udp_cfg(&ports, true)).unwrap();
    assert!(a.sends_in_place());
    // 4 sockets of 12 datagrams each (numbers n = s, s + 4, ...). A socket's datagrams go
    // out longest first (then in batch order), and a GSO group ends after a shorter one.
    // Socket 3 holds six of 1016 bytes, three of 316 (n % 16 == 15) and three header-only
    // (n % 16 == 7): groups [3 11 19 27 35 43 15] [31 47 7] [23 39]; the others one group
    // each: 6 sends (9 in batch order, where each header-only datagram ended a group
    // before a longer one).
    assert_eq!(gather_over(&mut a, &mut b, 4), 6);
}

#[test]
fn gathered_datagrams_without_gso_are_one_send_each() {
    let ports = PortAllocator::new(26650..=26699).unwrap();
    let mut a = UringDatapath::new(udp_cfg(&ports, false)).unwrap();
    let mut b = UringDatapath::new(udp_cfg(&ports, false)).unwrap();
    assert_eq!(gather_over(&mut a, &mut b, 4), u64::from(N));
}

#[test]
fn gathered_and_whole_datagrams_arrive_byte_for_byte_over_system_calls() {
    let ports = PortAllocator::new(26700..=26749).unwrap();
    let mut a = DirectDatapath::new(udp_cfg(&ports, true)).unwrap();
    let mut b = DirectDatapath::new(udp_cfg(&ports, true)).unwrap();
    assert!(a.sends_in_place());
    // in the batch's order: consecutive datagrams go to different sockets, one send each
    assert_eq!(gather_over(&mut a, &mut b, 4), u64::from(N));
    // one EV: runs of 8 (0..=7: the header-only 7th ends it; 8..=15: the shorter 15th)
    let mut c = DirectDatapath::new(udp_cfg(&ports, true)).unwrap();
    assert_eq!(gather_over(&mut a, &mut c, 1), 6);
}

#[test]
fn gathered_datagrams_arrive_whole_over_the_in_memory_network() {
    // The in-memory datapath copies a lent payload (the engine lends only to datapaths that
    // send in place; this batch is the test's own, its source alive and unwritten)
    assert!(!FakeDatapath::new(&FakeNet::new(), "10.0.0.9:1".parse().unwrap()).sends_in_place());
    let net = FakeNet::new();
    let mut a = FakeDatapath::new(&net, "10.0.0.1:4791".parse().unwrap());
    let mut b = FakeDatapath::new(&net, "10.0.0.2:4791".parse().unwrap());
    assert_eq!(gather_over(&mut a, &mut b, 4), u64::from(N));
}
