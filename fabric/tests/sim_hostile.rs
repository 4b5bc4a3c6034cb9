//! Hostile and damaged frames in the simulator: truncated, malformed, corrupted, duplicated
//! and trimmed frames, with shared payloads; every frame is accounted for and none panics.

mod common;

use common::*;
use mrc_fabric::packet::{ChecksumCheck, EthernetFrameRepr};
use mrc_fabric::sim::host::{Datagram, Forwarding, build_frame};
use mrc_fabric::sim::{QueueConfig, SimConfig};
use mrc_transport::wire::{
    Body, BthFlags, BthRepr, BthSpare, DataRepr, MrcethRepr, MsgethRepr, Opcode, PacketRepr,
    RethRepr,
};

/// An mrc RDMA_WRITE_ONLY datagram with `len` payload bytes and PSN `psn` for QPN 0x77
/// (no endpoint has it: hosts capture the frames).
fn write_datagram(psn: u32, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i * 13 + 7) as u8).collect();
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RdmaWriteOnly,
            pkey: 0xFFFF,
            dest_qpn: 0x77,
            psn,
            flags: BthFlags::default(),
            spare: BthSpare::default(),
        },
        mrceth: MrcethRepr {
            ev: 3,
            msn: 1,
            send_ts_ns: 0,
            generation: 1,
            reserved: 0,
        },
        body: Body::Data(DataRepr {
            msgeth: MsgethRepr {
                message_len: len as u32,
                offset: 0,
            },
            reth: Some(RethRepr {
                virtual_addr: 0x1_0000,
                rkey: 0x1234,
                dma_len: len as u32,
            }),
            imm: None,
            payload: &payload,
        }),
    };
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).unwrap();
    buf
}

fn frame(fwd: Forwarding, src: u32, dst: u32, ev: u32, dgram: &[u8]) -> Vec<u8> {
    let sim = sim16(cfg(1));
    let mut out = Vec::new();
    let d = Datagram {
        src,
        dst,
        ev,
        ecn: 2,
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
        queue: QueueConfig {
            trim_threshold_bytes: Some(8_000),
            ..QueueConfig::default()
        },
        ..cfg(1)
    });
    sim.set_capture(5, true);
    for (h, psn) in [(0, 10), (1, 11), (2, 12)] {
        let f = frame(Forwarding::Usid, h, 5, 2, &write_datagram(psn, 4096));
        sim.inject(h, f).unwrap();
    }
    let r = sim.run();
    let got = &sim.host(5).unwrap().captured;
    let summary: Vec<(u32, bool, usize)> = got
        .iter()
        .map(|(_, f)| {
            let (_, dgram) = EthernetFrameRepr::parse(f).unwrap();
            let p = PacketRepr::parse(dgram).unwrap();
            let Body::Data(d) = p.body else {
                panic!("not data")
            };
            (p.bth.psn, p.bth.flags.trimmed, d.payload.len())
        })
        .collect();
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
    use mrc_fabric::sim::buf::FrameBuf;
    use mrc_fabric::sim::frame;
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
fn accounted(sim: &mrc_fabric::sim::Simulator) -> u64 {
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
        use mrc_fabric::sim::buf::FrameBuf;
        use mrc_fabric::sim::frame;
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
    use mrc_fabric::sim::buf::FrameBuf;
    use mrc_fabric::sim::frame;
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
