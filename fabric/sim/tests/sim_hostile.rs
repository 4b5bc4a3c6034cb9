//! Hostile and damaged frames in the simulator: truncated, malformed, corrupted, duplicated
//! and trimmed frames, with shared payloads; every frame is accounted for and none panics.

mod common;

use common::*;
use mrc_fabric_sim::SimConfig;
use mrc_fabric_sim::host::{Datagram, Forwarding, build_frame};
use mrc_frame::packet::{ChecksumCheck, EthernetFrameRepr};
use mrc_transport::wire::PacketRepr;

/// An mrc RDMA_WRITE_ONLY datagram with `len` payload bytes and PSN `psn` for QPN 0x77
/// (no endpoint has it: hosts capture the frames).
fn write_datagram(psn: u32, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i * 13 + 7) as u8).collect();
    write_datagram_of(psn, &payload)
}

fn frame(fwd: Forwarding, src: u32, dst: u32, ev: u32, dgram: &[u8]) -> Vec<u8> {
    let sim = sim16(cfg(1));
    let mut out = Vec::new();
    let d = Datagram {
        src,
        dst,
        ev,
        ecn: 2,
        port: 0,
    };
    build_frame(sim.topology(), fwd, d, dgram, &mut out).unwrap();
    out
}

/// A uSID frame injected (so verified in full wherever it is checked) and trimmed at its
/// first hop, before the spine shifts its container, is trimmed, not dropped: the checksum
/// is over the final container, not the one on the wire.
#[test]
fn injected_usid_frame_is_trimmed_before_the_shift() {
    let mut sim = sim16(SimConfig {
        forwarding: Forwarding::Usid,
        ..trimming_cfg(1)
    });
    sim.set_capture(5, true);
    for (h, psn) in [(0, 10), (1, 11), (2, 12)] {
        let f = frame(Forwarding::Usid, h, 5, 2, &write_datagram(psn, 4096));
        sim.inject(h, f).unwrap();
    }
    let r = sim.run();
    let summary = captured_data(&sim, 5);
    assert_eq!(r.host_bad_frames, 0);
    assert_eq!(
        summary,
        [(10, false, 4096), (12, true, 0), (11, false, 4096)]
    );
}

/// `frame::trim` of a uSID frame whose container is not yet in its final form verifies
/// the checksum over the final form: intact, it is trimmed to its 114 header bytes with a
/// checksum the final destination verifies; one payload bit flipped, it is left as it is
/// (trimming never launders a corrupted frame) unless the caller vouches for its bytes.
#[test]
fn usid_trim_verifies_over_the_final_container() {
    use mrc_fabric_sim::buf::FrameBuf;
    use mrc_fabric_sim::frame;
    let bytes = frame(Forwarding::Usid, 0, 5, 2, &write_datagram(10, 4096));
    // fd00:5:17:6:: on the wire, fd00:5:6:: at host5.
    let on_wire = u128::from_be_bytes(bytes[38..54].try_into().unwrap());
    let last: u128 = "fd00:5:6::".parse::<std::net::Ipv6Addr>().unwrap().into();
    assert_eq!(
        on_wire,
        "fd00:5:17:6::"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .into()
    );
    assert_eq!(frame::usid_final(on_wire, 32), last);
    let mut f = FrameBuf::from_vec(bytes.clone());
    assert!(frame::trim(&mut f, ChecksumCheck::Verify, Some(32)));
    let mut trimmed = f.to_vec();
    assert_eq!(trimmed.len(), 114);
    assert_eq!(trimmed[38..54], bytes[38..54]);
    frame::set_dst(&mut trimmed, last);
    let (_, dgram) = EthernetFrameRepr::parse(&trimmed).unwrap();
    let p = PacketRepr::parse(dgram).unwrap();
    assert_eq!((p.bth.psn, p.bth.flags.trimmed), (10, true));

    let mut bad = bytes.clone();
    *bad.last_mut().unwrap() ^= 0x04;
    let mut g = FrameBuf::from_vec(bad.clone());
    assert!(!frame::trim(&mut g, ChecksumCheck::Verify, Some(32)));
    assert_eq!(g.to_vec(), bad);
    assert!(frame::trim(&mut g, ChecksumCheck::Known, Some(32)));
    assert_eq!(g.len(), 114);
}

/// Every frame injected is accounted for exactly once: dropped by a switch (no route,
/// unparseable, bad SRH), dropped by a queue, counted bad by a host, or captured (or
/// counted unclaimed) by a host.
fn accounted(sim: &mrc_fabric_sim::Simulator) -> u64 {
    let r = sim.report();
    let hosts: u64 = (0..16)
        .map(|h| {
            let host = sim.host(h).unwrap();
            host.rx_bad_frames + host.rx_unclaimed
        })
        .sum();
    let queue_drops: u64 = r.ports.iter().map(|p| p.stats.drops).sum();
    r.counters.no_route_drops
        + r.counters.loss_drops
        + r.counters.black_hole_drops
        + r.counters.link_down_drops
        + queue_drops
        + hosts
        - r.counters.duplicated
}

/// Frames of every forwarding mode, then damaged: up to four bytes set anywhere in the
/// first 160 (the headers), the tail cut or padded.
fn damaged_frame() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        0usize..3,
        0usize..200,
        proptest::collection::vec((0usize..160, any::<u8>()), 0..4),
        prop_oneof![Just(None), (0usize..400).prop_map(Some),],
        0usize..40,
        any::<bool>(),
    )
        .prop_map(|(mode, len, sets, cut, pad, cross)| {
            let fwd = [Forwarding::Ecmp, Forwarding::Srv6, Forwarding::Usid][mode];
            let dst = if cross { 5 } else { 2 };
            let mut f = frame(fwd, 0, dst, 2, &write_datagram(9, len));
            for (i, v) in sets {
                if let Some(b) = f.get_mut(i) {
                    *b = v;
                }
            }
            if let Some(c) = cut {
                f.truncate(c);
            }
            f.extend(std::iter::repeat_n(0u8, pad));
            f
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// A frame stored split (`FrameBuf::from_vec`) is the same frame: its bytes, its
    /// header, and its parse (split when it has a payload, whole otherwise, as a host
    /// parses it) equal those of the contiguous bytes; after any bit flip too.
    #[test]
    fn a_split_frame_parses_as_its_bytes(
        bytes in damaged_frame(),
        flip in (
            proptest::prop_oneof![
                proptest::prelude::any::<usize>(),
                // The bytes that say where the UDP payload starts.
                proptest::sample::select(vec![12usize, 13, 14, 20, 54, 55]),
            ],
            proptest::prelude::any::<u8>(),
        ),
    ) {
        use mrc_fabric_sim::buf::FrameBuf;
        use mrc_fabric_sim::frame;
        let mut f = FrameBuf::from_vec(bytes.clone());
        let mut expect = bytes.clone();
        for round in 0..2 {
            proptest::prop_assert_eq!(f.to_vec(), expect.clone());
            proptest::prop_assert_eq!(frame::header_split(f.head(), f.payload()), frame::header(&expect), "round {}", round);
            for check in [ChecksumCheck::Known, ChecksumCheck::Verify] {
                let whole = EthernetFrameRepr::parse_with(&expect, check);
                let split = if f.payload().is_empty() {
                    EthernetFrameRepr::parse_with(f.head(), check)
                } else {
                    EthernetFrameRepr::parse_split(f.head(), f.payload(), check)
                };
                proptest::prop_assert_eq!(split.is_ok(), whole.is_ok(), "round {} {:?} {:?}", round, split, whole);
                if let (Ok(a), Ok(b)) = (split, whole) {
                    proptest::prop_assert_eq!(a, b);
                }
            }
            if expect.is_empty() {
                break;
            }
            let i = flip.0 % expect.len();
            let mask = flip.1 | 1;
            proptest::prop_assert!(f.flip(i, mask));
            expect[i] ^= mask;
        }
    }

    /// Damaged frames injected into the simulator never panic it, and each is dropped and
    /// counted, or received, exactly once.
    #[test]
    fn injected_damaged_frames_are_all_accounted(frames in proptest::collection::vec(damaged_frame(), 1..12)) {
        for fwd in [Forwarding::Ecmp, Forwarding::Srv6, Forwarding::Usid] {
            let mut sim = sim16(SimConfig { forwarding: fwd, ..cfg(1) });
            for (k, f) in frames.iter().enumerate() {
                if k % 2 == 0 {
                    sim.inject(0, f.clone()).unwrap();
                } else {
                    sim.inject_slice(0, f).unwrap();
                }
            }
            sim.run();
            proptest::prop_assert_eq!(accounted(&sim), frames.len() as u64);
        }
    }
}

/// A flip that makes an unparseable frame parse (next header 16 -> 17), or that moves
/// where its UDP payload starts (SRH hdr_ext_len 5 -> 4), re-cuts the frame: its header
/// (data, trimmable) and its parse are those of its bytes.
#[test]
fn a_flip_that_changes_the_headers_recuts_the_frame() {
    use mrc_fabric_sim::buf::FrameBuf;
    use mrc_fabric_sim::frame;
    let good = frame(Forwarding::Ecmp, 0, 2, 0, &write_datagram(5, 100));
    assert_eq!(good.len(), 62 + 152);
    let mut bad = good.clone();
    bad[20] = 16;
    let mut f = FrameBuf::from_vec(bad);
    assert_eq!((f.head().len(), f.payload().len()), (214, 0));
    assert!(f.flip(20, 0x01));
    assert_eq!(f.to_vec(), good);
    assert_eq!((f.head().len(), f.payload().len()), (62, 152));
    let h = frame::header_split(f.head(), f.payload());
    assert!(h.data && !h.trimmed);
    assert_eq!(h, frame::header(&good));
    // And back: no longer UDP, all in the head.
    assert!(f.flip(20, 0x01));
    assert_eq!((f.head().len(), f.payload().len()), (214, 0));
    assert_eq!(f.head()[20], 16);

    // SRv6, 2 segments: SRH of 40 bytes (hdr_ext_len 4), UDP payload at 102.
    let srv6 = frame(Forwarding::Srv6, 0, 5, 0, &write_datagram(5, 100));
    assert_eq!(srv6[55], 4);
    let mut g = FrameBuf::from_vec(srv6.clone());
    assert_eq!(g.head().len(), 102);
    // hdr_ext_len 5: UDP at 102, payload at 110.
    assert!(g.flip(55, 0x01));
    assert_eq!((g.head().len(), g.payload().len()), (110, 144));
    let mut expect = srv6.clone();
    expect[55] = 5;
    assert_eq!(g.to_vec(), expect);
    assert_eq!(
        frame::header_split(g.head(), g.payload()),
        frame::header(&expect)
    );
}

/// A `Write` into a buffer the test keeps a handle on.
#[derive(Clone, Default)]
struct SharedBuf(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The frames of a pcap stream, in order.
fn pcap_frames(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut r = pcap_file::pcap::PcapReader::new(bytes).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert_eq!(p.orig_len as usize, p.data.len());
        out.push(p.data.into_owned());
    }
    out
}

/// 50 frames sharing one payload cross four links that corrupt and duplicate a fifth of
/// the frames each (seed 3): a corrupted copy is always a copy, so the shared bytes stay as
/// they were and every frame that arrives uncorrupted is the frame sent, bit for bit,
/// duplicates included; the corrupted ones (one flipped bit in the UDP header or payload)
/// are all caught by the UDP checksum.
#[test]
fn corrupting_a_shared_payload_frame_never_alters_the_others() {
    use mrc_fabric_sim::buf::SharedPayload;
    use mrc_fabric_sim::{Fault, FaultKind, LinkSelector};
    let dgram = write_datagram(21, 1024);
    let payload = SharedPayload::new(dgram.clone().into());
    let mut sim = sim16(SimConfig {
        faults: vec![
            Fault {
                at_ns: 0,
                links: LinkSelector::All,
                kind: FaultKind::Corrupt { p: 0.2 },
            },
            Fault {
                at_ns: 0,
                links: LinkSelector::All,
                kind: FaultKind::Duplicate { p: 0.2 },
            },
        ],
        ..cfg(3)
    });
    sim.set_capture(5, true);
    let d = Datagram {
        src: 0,
        dst: 5,
        ev: 2,
        ecn: 2,
        port: 0,
    };
    for _ in 0..50 {
        sim.send_shared(d, &payload).unwrap();
    }
    let r = sim.run();
    assert_eq!(payload.bytes().as_ref(), &dgram[..]);
    let sent = frame(Forwarding::Ecmp, 0, 5, 2, &dgram);
    let host = sim.host(5).unwrap();
    assert!(host.captured.iter().all(|(_, f)| *f == sent));
    // Seed 3: 41 frames corrupted (each once: on a later corrupting link it stays as it
    // is) and 54 duplicated on the way; 63 corrupted copies arrive (a corrupted frame's
    // duplicates are corrupted too), all caught; 41 intact ones. Were a corrupted frame
    // corrupted again, two of its flips (+0x10 in the low byte of one word, -0x10 in
    // another) could cancel out in the checksum and deliver it as intact.
    assert_eq!((r.counters.corrupted, r.counters.duplicated), (41, 54));
    assert_eq!((host.rx_bad_frames, host.captured.len()), (63, 41));
    assert_eq!(host.rx_bad_frames + host.captured.len() as u64, 50 + 54);
}

/// Frames sharing their payloads are trimmed into frames of their own: the shared bytes
/// stay whole for the frames still carrying them, the trimmed frame's checksum verifies,
/// and the pcap of the port writes each frame's bytes exactly as the host receives them.
#[test]
fn trimming_a_shared_payload_frame_copies_its_headers_and_pcap_sees_whole_frames() {
    use mrc_fabric_sim::buf::SharedPayload;
    let mut sim = sim16(trimming_cfg(1));
    sim.set_capture(3, true);
    let leaf0 = sim.topology().node_by_name("leaf0").unwrap();
    let pcap = SharedBuf::default();
    sim.set_pcap(leaf0, 3, Box::new(pcap.clone())).unwrap();
    let dgrams: Vec<Vec<u8>> = [10, 11, 12].map(|psn| write_datagram(psn, 4096)).into();
    let shared: Vec<SharedPayload> = dgrams
        .iter()
        .map(|g| SharedPayload::new(g.clone().into()))
        .collect();
    // Each host sends its payload twice: PSN 12 of the first round and the whole second
    // round are trimmed, and the trimmed frames go first (priority queue).
    for _ in 0..2 {
        for h in 0..3u32 {
            let d = Datagram {
                src: h,
                dst: 3,
                ev: 0,
                ecn: 2,
                port: 0,
            };
            sim.send_shared(d, &shared[h as usize]).unwrap();
        }
    }
    let r = sim.run();
    sim.finish_pcap().unwrap();
    for (s, g) in shared.iter().zip(&dgrams) {
        assert_eq!(s.bytes().as_ref(), &g[..]);
    }
    assert_eq!(r.host_bad_frames, 0);
    let got = &sim.host(3).unwrap().captured;
    let summary = captured_data(&sim, 3);
    assert_eq!(
        summary,
        [
            (10, false, 4096),
            (12, true, 0),
            (10, true, 0),
            (11, true, 0),
            (12, true, 0),
            (11, false, 4096),
        ]
    );
    let st = sim.port_stats(leaf0, 3).unwrap();
    assert_eq!((st.trims, st.drops, st.tx_packets), (4, 0, 6));
    let frames = pcap_frames(&pcap.0.borrow());
    let received: Vec<Vec<u8>> = got.iter().map(|(_, f)| f.clone()).collect();
    assert_eq!(frames, received);
    assert_eq!(frames[0], frame(Forwarding::Ecmp, 0, 3, 0, &dgrams[0]));
}

/// Where one injected frame ended: dropped by a switch (no route, unparseable, bad SRH),
/// dropped by a queue, counted bad by host `h`, or received by host `h`.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    NoRoute,
    QueueDrop,
    Bad(u32),
    Received(u32),
}

/// Injects `bytes` at host 0 of a fresh simulator forwarding `fwd` and says where it ended.
fn fate(fwd: Forwarding, bytes: &[u8]) -> Fate {
    let mut sim = sim16(SimConfig {
        forwarding: fwd,
        ..cfg(1)
    });
    for h in 0..16 {
        sim.set_capture(h, true);
    }
    sim.inject_slice(0, bytes).unwrap();
    let r = sim.run();
    assert_eq!(accounted(&sim), 1);
    if r.counters.no_route_drops == 1 {
        return Fate::NoRoute;
    }
    if r.ports.iter().any(|p| p.stats.drops == 1) {
        return Fate::QueueDrop;
    }
    for h in 0..16 {
        let host = sim.host(h).unwrap();
        if host.rx_bad_frames == 1 {
            return Fate::Bad(h);
        }
        if host.captured.len() == 1 {
            return Fate::Received(h);
        }
    }
    unreachable!("accounted")
}

/// Every prefix of a cross-leaf frame, in every forwarding mode: shorter than its UDP
/// ports, a switch cannot forward it (no route); longer, the receiver counts it bad (its
/// lengths say more bytes); whole, it is received; with Ethernet padding after it, too.
#[test]
fn every_prefix_of_a_frame_is_dropped_or_counted() {
    // (mode, frame length, UDP header offset)
    for (fwd, len, udp_off) in [
        (Forwarding::Ecmp, 178, 54),
        (Forwarding::Srv6, 218, 94),
        (Forwarding::Usid, 178, 54),
    ] {
        let f = frame(fwd, 0, 5, 2, &write_datagram(7, 64));
        assert_eq!(f.len(), len);
        let mut counts = [0u32; 3];
        for cut in 0..=len + 64 {
            let mut bytes = f[..cut.min(len)].to_vec();
            bytes.resize(cut, 0);
            let i = match fate(fwd, &bytes) {
                Fate::NoRoute => 0,
                Fate::Bad(5) => 1,
                Fate::Received(5) => 2,
                other => panic!("{fwd:?} cut {cut}: {other:?}"),
            };
            counts[i] += 1;
            // The fate changes at the UDP ports (udp_off + 4) and at the whole frame.
            let expect = if cut < udp_off + 4 {
                0
            } else if cut < len {
                1
            } else {
                2
            };
            assert_eq!(i, expect, "{fwd:?} cut {cut}");
        }
        assert_eq!(
            counts.map(|c| c as usize),
            [udp_off + 4, len - udp_off - 4, 65]
        );
    }
}

/// `bytes` with `f` applied.
fn with(bytes: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = bytes.to_vec();
    f(&mut v);
    v
}

/// Writes the IPv6 address `a` at `off`.
fn put_addr(v: &mut [u8], off: usize, a: &str) {
    let a: std::net::Ipv6Addr = a.parse().unwrap();
    v[off..off + 16].copy_from_slice(&a.octets());
}

/// Hostile header fields: each frame (host 0 to host 5 on EV 2, the SRH's path through
/// spine2) ends where RFC 8754 / RFC 9800 / RFC 8200 say, counted, never a panic.
#[test]
fn hostile_header_fields_are_counted_where_they_fail() {
    let srv6 = frame(Forwarding::Srv6, 0, 5, 2, &write_datagram(7, 64));
    let usid = frame(Forwarding::Usid, 0, 5, 2, &write_datagram(7, 64));
    let plain = frame(Forwarding::Ecmp, 0, 5, 2, &write_datagram(7, 64));
    // SRH at 54: next header, hdr_ext_len (4), routing type (4), segments_left (1),
    // last_entry (1), flags, tag; Segment List[0] = host5 at 62, [1] = spine2 at 78.
    assert_eq!(srv6[54..59], [17, 4, 4, 1, 1]);
    let cases: Vec<(&str, Forwarding, Vec<u8>, Fate)> = vec![
        (
            "intact SRv6",
            Forwarding::Srv6,
            srv6.clone(),
            Fate::Received(5),
        ),
        // segments_left > last_entry + 1: the spine's End refuses it.
        (
            "segments_left 3",
            Forwarding::Srv6,
            with(&srv6, |v| v[57] = 3),
            Fate::NoRoute,
        ),
        // segments_left 0 at the node owning the destination: no End to do.
        (
            "segments_left 0",
            Forwarding::Srv6,
            with(&srv6, |v| v[57] = 0),
            Fate::NoRoute,
        ),
        // segments_left = last_entry + 1: End copies Segment List[1], the spine itself,
        // which has no route to itself.
        (
            "segments_left 2",
            Forwarding::Srv6,
            with(&srv6, |v| v[57] = 2),
            Fate::NoRoute,
        ),
        (
            "last_entry 2 beyond the header",
            Forwarding::Srv6,
            with(&srv6, |v| v[58] = 2),
            Fate::NoRoute,
        ),
        (
            "hdr_ext_len 0",
            Forwarding::Srv6,
            with(&srv6, |v| v[55] = 0),
            Fate::NoRoute,
        ),
        (
            "hdr_ext_len 255 beyond the frame",
            Forwarding::Srv6,
            with(&srv6, |v| v[55] = 255),
            Fate::NoRoute,
        ),
        (
            "hdr_ext_len 6 over the UDP header",
            Forwarding::Srv6,
            with(&srv6, |v| v[55] = 6),
            Fate::NoRoute,
        ),
        (
            "routing type 3",
            Forwarding::Srv6,
            with(&srv6, |v| v[56] = 3),
            Fate::NoRoute,
        ),
        (
            "SRH next header TCP",
            Forwarding::Srv6,
            with(&srv6, |v| v[54] = 6),
            Fate::NoRoute,
        ),
        // Segment List[0] rewritten to host4: End sends it there, and host4's checksum
        // (over the final segment the sender put, host5) fails.
        (
            "final segment rewritten",
            Forwarding::Srv6,
            with(&srv6, |v| v[77] ^= 1),
            Fate::Bad(4),
        ),
        (
            "IPv4 EtherType",
            Forwarding::Ecmp,
            with(&plain, |v| v[12] = 8),
            Fate::NoRoute,
        ),
        (
            "IP version 4",
            Forwarding::Ecmp,
            with(&plain, |v| v[14] = 0x40),
            Fate::NoRoute,
        ),
        (
            "next header TCP",
            Forwarding::Ecmp,
            with(&plain, |v| v[20] = 6),
            Fate::NoRoute,
        ),
        (
            "payload_len beyond the frame",
            Forwarding::Ecmp,
            with(&plain, |v| v[19] += 1),
            Fate::Bad(5),
        ),
        (
            "payload_len short of the UDP length",
            Forwarding::Ecmp,
            with(&plain, |v| v[19] -= 1),
            Fate::Bad(5),
        ),
        (
            "UDP length short",
            Forwarding::Ecmp,
            with(&plain, |v| v[59] -= 1),
            Fate::Bad(5),
        ),
        (
            "UDP checksum zero",
            Forwarding::Ecmp,
            with(&plain, |v| v[60..62].fill(0)),
            Fate::Bad(5),
        ),
        (
            "intact uSID",
            Forwarding::Usid,
            usid.clone(),
            Fate::Received(5),
        ),
        // Active uSID of no node.
        (
            "uSID ffff",
            Forwarding::Usid,
            with(&usid, |v| put_addr(v, 38, "fd00:5:ffff:6::")),
            Fate::NoRoute,
        ),
        // No active uSID at all.
        (
            "empty container",
            Forwarding::Usid,
            with(&usid, |v| put_addr(v, 38, "fd00:5::")),
            Fate::NoRoute,
        ),
        // leaf0's uSID (node 16, uSID 0x11) first: leaf0 shifts it to fd00:5:6::, the
        // final container the checksum is over.
        (
            "leaf0 then host5",
            Forwarding::Usid,
            with(&usid, |v| put_addr(v, 38, "fd00:5:11:6::")),
            Fate::Received(5),
        ),
        // Host0's own uSID: back to host0, whose checksum (not over fd00:5:1::) fails.
        (
            "the sender's uSID",
            Forwarding::Usid,
            with(&usid, |v| put_addr(v, 38, "fd00:5:1::")),
            Fate::Bad(0),
        ),
        // A uSID after host5's: host5 receives a container the checksum is not over.
        (
            "a uSID after the host's",
            Forwarding::Usid,
            with(&usid, |v| put_addr(v, 38, "fd00:5:17:6:7::")),
            Fate::Bad(5),
        ),
    ];
    for (name, fwd, bytes, expect) in cases {
        assert_eq!(fate(fwd, &bytes), expect, "{name}");
    }
}

/// Frames at the edges of size: no UDP payload at all (the frame ends where its payload
/// would start), the largest UDP datagram (65,535 bytes), 512 KiB of padding after a
/// frame, and a frame longer than a port's whole buffer.
#[test]
fn frames_at_the_size_edges() {
    use mrc_frame::packet::Ipv6UdpRepr;
    let repr = |dst: &str| EthernetFrameRepr {
        dst_mac: [2, 0, 0, 0, 0, 1],
        src_mac: [2, 0, 0, 0, 0, 2],
        packet: Ipv6UdpRepr {
            src_addr: "fd00::1:0:0".parse().unwrap(),
            dst_addr: dst.parse().unwrap(),
            traffic_class: 2,
            flow_label: 0,
            hop_limit: 64,
            srh: None,
            src_port: 49152,
            dst_port: 4791,
        },
    };
    let host5 = "fd00::1:0:5";
    let emit = |payload: &[u8]| {
        let r = repr(host5);
        let mut v = vec![0u8; r.buffer_len(payload.len())];
        r.emit(&mut v, payload).unwrap();
        v
    };
    let empty = emit(&[]);
    assert_eq!(empty.len(), 62);
    assert_eq!(fate(Forwarding::Ecmp, &empty), Fate::Received(5));
    let largest = emit(&vec![0x5A; 65_535 - 8]);
    assert_eq!(largest.len(), 14 + 40 + 65_535);
    assert_eq!(fate(Forwarding::Ecmp, &largest), Fate::Received(5));
    let mut padded = frame(Forwarding::Ecmp, 0, 5, 2, &write_datagram(7, 64));
    padded.resize(padded.len() + (512 << 10), 0xEE);
    assert_eq!(fate(Forwarding::Ecmp, &padded), Fate::Received(5));
    let mut huge = frame(Forwarding::Ecmp, 0, 5, 2, &write_datagram(7, 64));
    huge.resize(huge.len() + (1 << 20), 0xEE);
    assert_eq!(fate(Forwarding::Ecmp, &huge), Fate::QueueDrop);
    assert_eq!(fate(Forwarding::Ecmp, &[]), Fate::NoRoute);
}
