//! IPv6 + SRH + UDP build/parse tests: computed lengths and checksum, typed parse errors.

use std::net::Ipv6Addr;

use mrc_fabric::packet::{EthernetFrameRepr, Ipv6UdpRepr, PacketError};
use mrc_fabric::srv6::{SrhContext, SrhError, SrhRepr};
use pnet_packet::ip::IpNextHeaderProtocols;

fn addr(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// RFC 1071 one's-complement sum over the IPv6 pseudo-header and the UDP datagram, written
/// independently of pnet to cross-check it.
fn reference_udp_checksum(src: Ipv6Addr, dst: Ipv6Addr, udp: &[u8]) -> u16 {
    let mut data = Vec::new();
    data.extend_from_slice(&src.octets());
    data.extend_from_slice(&dst.octets());
    data.extend_from_slice(&(udp.len() as u32).to_be_bytes());
    data.extend_from_slice(&[0, 0, 0, 17]);
    let mut udp = udp.to_vec();
    udp[6] = 0;
    udp[7] = 0;
    data.extend_from_slice(&udp);
    if data.len() % 2 == 1 {
        data.push(0);
    }
    let mut sum: u32 = data
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

fn srh_packet() -> Ipv6UdpRepr {
    Ipv6UdpRepr::with_segment_path(
        addr("2001:db8::100"),
        &[
            addr("fc00:0:1::"),
            addr("fc00:0:2::"),
            addr("2001:db8::200"),
        ],
        49152,
        4792,
    )
    .unwrap()
}

#[test]
fn plain_ipv6_udp_exact_header_bytes() {
    let repr = Ipv6UdpRepr {
        src_addr: addr("2001:db8::1"),
        dst_addr: addr("2001:db8::2"),
        traffic_class: 0x02, // ECT(0)
        flow_label: 0xabcde,
        hop_limit: 64,
        srh: None,
        src_port: 0x1234,
        dst_port: 0x12b8,
    };
    let payload = b"hello";
    let mut buf = [0u8; 128];
    let len = repr.emit(&mut buf, payload).unwrap();
    assert_eq!(len, 40 + 8 + 5);
    // version 6, TC 0x02, flow label 0xabcde; payload_len 13; next header 17; hop limit 64.
    assert_eq!(&buf[..8], &[0x60, 0x2a, 0xbc, 0xde, 0x00, 0x0d, 17, 64]);
    assert_eq!(&buf[40..46], &[0x12, 0x34, 0x12, 0xb8, 0x00, 0x0d]);
    let checksum = u16::from_be_bytes([buf[46], buf[47]]);
    assert_eq!(
        checksum,
        reference_udp_checksum(repr.src_addr, repr.dst_addr, &buf[40..len])
    );
    assert_eq!(&buf[48..len], payload);
    let (parsed, got_payload) = Ipv6UdpRepr::parse(&buf[..len]).unwrap();
    assert_eq!(parsed, repr);
    assert_eq!(got_payload, payload);
}

#[test]
fn srh_packet_lengths_and_checksum_use_final_destination() {
    let repr = srh_packet();
    assert_eq!(repr.dst_addr, addr("fc00:0:1::"));
    assert_eq!(repr.final_destination(), addr("2001:db8::200"));
    let payload = [0xa5u8; 7]; // odd length exercises the checksum's last byte
    let mut buf = [0u8; 256];
    let len = repr.emit(&mut buf, &payload).unwrap();
    // 40 IPv6 + 56 SRH (3 segments) + 8 UDP + 7 payload.
    assert_eq!(len, 111);
    assert_eq!(u16::from_be_bytes([buf[4], buf[5]]), 56 + 8 + 7);
    assert_eq!(buf[6], 43, "next header = Routing");
    assert_eq!(&buf[24..40], &addr("fc00:0:1::").octets());
    assert_eq!(&buf[40..48], &[17, 6, 4, 2, 2, 0, 0, 0]);
    assert_eq!(&buf[48..64], &addr("2001:db8::200").octets());
    let udp = &buf[96..len];
    assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 15);
    let checksum = u16::from_be_bytes([udp[6], udp[7]]);
    assert_eq!(
        checksum,
        reference_udp_checksum(repr.src_addr, addr("2001:db8::200"), udp)
    );
    assert_ne!(
        checksum,
        reference_udp_checksum(repr.src_addr, repr.dst_addr, udp),
        "the DA is not the final destination"
    );
    let (parsed, got) = Ipv6UdpRepr::parse(&buf[..len]).unwrap();
    assert_eq!(parsed, repr);
    assert_eq!(got, &payload);
}

#[test]
fn trailing_bytes_past_payload_len_are_ignored() {
    let repr = srh_packet();
    let mut buf = [0u8; 256];
    let len = repr.emit(&mut buf, b"x").unwrap();
    let (parsed, payload) = Ipv6UdpRepr::parse(&buf[..len + 20]).unwrap();
    assert_eq!(parsed, repr);
    assert_eq!(payload, b"x");
}

#[test]
fn parse_errors_are_typed() {
    let repr = srh_packet();
    let mut buf = [0u8; 256];
    let len = repr.emit(&mut buf, b"abcd").unwrap();
    let good = buf[..len].to_vec();

    assert_eq!(
        Ipv6UdpRepr::parse(&good[..39]).err(),
        Some(PacketError::Truncated {
            header: "IPv6",
            needed_bytes: 40,
            available_bytes: 39
        })
    );
    assert_eq!(
        Ipv6UdpRepr::parse(&good[..len - 1]).err(),
        Some(PacketError::PayloadLenBeyondBuffer {
            payload_len_bytes: 56 + 8 + 4,
            available_bytes: 56 + 8 + 3
        })
    );

    let mut bad = good.clone();
    bad[0] = 0x40;
    assert_eq!(
        Ipv6UdpRepr::parse(&bad).err(),
        Some(PacketError::NotIpv6 { version: 4 })
    );

    let mut bad = good.clone();
    bad[42] = 0; // routing type 0
    assert_eq!(
        Ipv6UdpRepr::parse(&bad).err(),
        Some(PacketError::Srh(SrhError::NotSrh { routing_type: 0 }))
    );

    let mut bad = good.clone();
    bad[6] = 6; // TCP
    assert_eq!(
        Ipv6UdpRepr::parse(&bad).err(),
        Some(PacketError::UnsupportedNextHeader { next_header: 6 })
    );

    let mut bad = good.clone();
    bad[96 + 5] = 11; // UDP length 11 instead of 12
    assert_eq!(
        Ipv6UdpRepr::parse(&bad).err(),
        Some(PacketError::UdpLengthMismatch {
            udp_len_bytes: 11,
            ip_remaining_bytes: 12
        })
    );

    let mut bad = good.clone();
    bad[96 + 6] = 0;
    bad[96 + 7] = 0;
    assert_eq!(
        Ipv6UdpRepr::parse(&bad).err(),
        Some(PacketError::UdpZeroChecksum)
    );

    let mut bad = good.clone();
    let found = u16::from_be_bytes([bad[96 + 6], bad[96 + 7]]);
    bad[len - 1] ^= 0x01; // payload bit flip
    match Ipv6UdpRepr::parse(&bad) {
        Err(PacketError::UdpChecksumMismatch { found: f, expected }) => {
            assert_eq!(f, found);
            assert_ne!(expected, found);
        }
        other => panic!("expected checksum mismatch, got {other:?}"),
    }

    // payload_len too small for the UDP header after the SRH.
    let mut bad = good.clone();
    bad[4] = 0;
    bad[5] = 60;
    assert_eq!(
        Ipv6UdpRepr::parse(&bad).err(),
        Some(PacketError::Truncated {
            header: "UDP",
            needed_bytes: 8,
            available_bytes: 4
        })
    );
}

#[test]
fn emit_errors_are_typed() {
    let mut repr = srh_packet();
    let mut small = [0u8; 100];
    assert_eq!(
        repr.emit(&mut small, b"abcd").err(),
        Some(PacketError::BufferTooSmall {
            needed_bytes: 108,
            available_bytes: 100
        })
    );
    let mut buf = vec![0u8; 70_000];
    assert_eq!(
        repr.emit(&mut buf, &[0u8; 65_500]).err(),
        Some(PacketError::PayloadTooLong { len_bytes: 65_564 })
    );
    repr.flow_label = 0x10_0000;
    assert_eq!(
        repr.emit(&mut buf, b"").err(),
        Some(PacketError::FlowLabelOutOfRange {
            flow_label: 0x10_0000
        })
    );
    repr.flow_label = 0;
    let srh = repr.srh.as_mut().unwrap();
    srh.next_header = IpNextHeaderProtocols::Tcp;
    assert_eq!(
        repr.emit(&mut buf, b"").err(),
        Some(PacketError::SrhNextHeaderNotUdp { next_header: 6 })
    );
}

#[test]
fn reduced_srh_packet_emits_only_in_received_context() {
    // Reduced SRH (RFC 8754 section 4.1.1): two-segment policy, first segment only in DA.
    let srh = SrhRepr {
        next_header: IpNextHeaderProtocols::Udp,
        segments_left: 1,
        flags: 0,
        tag: 0,
        segments: vec![addr("2001:db8::200")],
        tlvs: vec![],
    };
    let repr = Ipv6UdpRepr {
        src_addr: addr("2001:db8::100"),
        dst_addr: addr("fc00:0:1::"),
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 64,
        srh: Some(srh),
        src_port: 1,
        dst_port: 2,
    };
    let mut buf = [0u8; 128];
    assert_eq!(
        repr.emit(&mut buf, b"").err(),
        Some(PacketError::Srh(SrhError::SegmentsLeftOutsideList {
            segments_left: 1,
            last_entry: 0
        }))
    );
    let len = repr.emit_in(&mut buf, b"", SrhContext::Received).unwrap();
    assert_eq!(len, 40 + 24 + 8);
    assert_eq!(Ipv6UdpRepr::parse(&buf[..len]).unwrap().0, repr);
}

#[test]
fn ethernet_frame_round_trip_and_errors() {
    let frame = EthernetFrameRepr {
        dst_mac: [0x02, 0, 0, 0, 0, 0x02],
        src_mac: [0x02, 0, 0, 0, 0, 0x01],
        packet: srh_packet(),
    };
    let mut buf = [0u8; 256];
    let len = frame.emit(&mut buf, b"payload").unwrap();
    assert_eq!(len, 14 + 40 + 56 + 8 + 7);
    assert_eq!(
        &buf[..14],
        &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd]
    );
    let (parsed, payload) = EthernetFrameRepr::parse(&buf[..len]).unwrap();
    assert_eq!(parsed, frame);
    assert_eq!(payload, b"payload");
    let mut bad = buf[..len].to_vec();
    bad[12] = 0x08;
    bad[13] = 0x00;
    assert_eq!(
        EthernetFrameRepr::parse(&bad).err(),
        Some(PacketError::NotIpv6EtherType { ethertype: 0x0800 })
    );
    assert_eq!(
        EthernetFrameRepr::parse(&buf[..13]).err(),
        Some(PacketError::Truncated {
            header: "Ethernet",
            needed_bytes: 14,
            available_bytes: 13
        })
    );
}

/// `ChecksumCheck::Known` skips only the sum: a payload bit flip parses (the caller vouched
/// for the bytes), a zero checksum and bad lengths are still errors; `Verify` is `parse`.
#[test]
fn known_checksum_skips_only_the_sum() {
    use mrc_fabric::packet::ChecksumCheck;
    let repr = srh_packet();
    let mut buf = [0u8; 256];
    let len = repr.emit(&mut buf, b"abcd").unwrap();
    let good = buf[..len].to_vec();
    let mut flipped = good.clone();
    flipped[len - 1] ^= 0x01;
    let (r, payload) = Ipv6UdpRepr::parse_with(&flipped, ChecksumCheck::Known).unwrap();
    assert_eq!(r, repr);
    assert_eq!(payload, b"abce");
    assert!(matches!(
        Ipv6UdpRepr::parse_with(&flipped, ChecksumCheck::Verify),
        Err(PacketError::UdpChecksumMismatch { .. })
    ));
    let mut zero = good.clone();
    zero[96 + 6] = 0;
    zero[96 + 7] = 0;
    assert_eq!(
        Ipv6UdpRepr::parse_with(&zero, ChecksumCheck::Known).err(),
        Some(PacketError::UdpZeroChecksum)
    );
    assert_eq!(
        Ipv6UdpRepr::parse_with(&good[..len - 1], ChecksumCheck::Known).err(),
        Some(PacketError::PayloadLenBeyondBuffer {
            payload_len_bytes: 56 + 8 + 4,
            available_bytes: 56 + 8 + 3
        })
    );
}

/// Frames of 0..3 segments and 0..600 payload bytes, then damaged: one byte changed at a
/// chosen offset (headers or payload) and the tail cut at a chosen length, or neither.
fn damaged_frame() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        0usize..4,
        proptest::collection::vec(any::<u8>(), 0..600),
        any::<bool>(),
        any::<usize>(),
        any::<u8>(),
        any::<usize>(),
    )
        .prop_map(|(segments, payload, damage, at, xor, cut)| {
            let path: Vec<Ipv6Addr> = (0..segments)
                .map(|i| addr(&format!("fc00:0:{}::", i + 1)))
                .chain(std::iter::once(addr("2001:db8::200")))
                .collect();
            let mut repr =
                Ipv6UdpRepr::with_segment_path(addr("2001:db8::100"), &path, 49152, 4792).unwrap();
            if segments == 0 {
                repr.srh = None;
                repr.dst_addr = addr("2001:db8::200");
            }
            let frame = EthernetFrameRepr {
                dst_mac: [2, 0, 0, 0, 0, 1],
                src_mac: [2, 0, 0, 0, 0, 2],
                packet: repr,
            };
            let mut buf = vec![0u8; frame.buffer_len(payload.len())];
            frame.emit(&mut buf, &payload).unwrap();
            if damage {
                let i = at % buf.len();
                buf[i] ^= xor;
                buf.truncate(cut % (buf.len() + 1));
            }
            buf
        })
}

proptest::proptest! {
    /// Parsing a frame in two parts, cut where its UDP payload starts, gives exactly what
    /// parsing it whole gives (the same Repr and payload, or the same error), with and
    /// without the checksum check; cut anywhere else, a frame that parses whole is an error
    /// in two parts. Never a panic.
    #[test]
    fn split_parse_equals_whole_parse(bytes in damaged_frame(), cut in proptest::prelude::any::<usize>()) {
        use mrc_fabric::packet::ChecksumCheck;
        for check in [ChecksumCheck::Known, ChecksumCheck::Verify] {
            let whole = EthernetFrameRepr::parse_with(&bytes, check);
            // Where the payload starts by the headers (even when the sum is wrong).
            let start = EthernetFrameRepr::parse_with(&bytes, ChecksumCheck::Known)
                .ok()
                .map(|(_, p)| p.as_ptr() as usize - bytes.as_ptr() as usize);
            if let Some(p) = start {
                let (head, tail) = bytes.split_at(p);
                let split = EthernetFrameRepr::parse_split(head, tail, check);
                proptest::prop_assert_eq!(&split, &whole);
            }
            let k = cut % (bytes.len() + 1);
            let (head, tail) = bytes.split_at(k);
            let split = EthernetFrameRepr::parse_split(head, tail, check);
            if Some(k) != start {
                proptest::prop_assert!(split.is_err() || whole.is_err());
                if whole.is_ok() {
                    proptest::prop_assert!(split.is_err());
                }
            }
        }
    }
}

/// The two-part parse of the frame `srh_packet()` with payload "abcd": the Repr and payload
/// come back; a cut 1 byte early is `SplitNotAtPayload` at the exact offsets.
#[test]
fn split_parse_exact() {
    use mrc_fabric::packet::ChecksumCheck;
    let frame = EthernetFrameRepr {
        dst_mac: [2, 0, 0, 0, 0, 1],
        src_mac: [2, 0, 0, 0, 0, 2],
        packet: srh_packet(),
    };
    let mut buf = [0u8; 256];
    let len = frame.emit(&mut buf, b"abcd").unwrap();
    // Ethernet 14 + IPv6 40 + SRH 8 + 3 x 16 + UDP 8 = 118.
    assert_eq!(len, 118 + 4);
    let (r, p) =
        EthernetFrameRepr::parse_split(&buf[..118], &buf[118..len], ChecksumCheck::Verify).unwrap();
    assert_eq!(r, frame);
    assert_eq!(p, b"abcd");
    assert_eq!(
        EthernetFrameRepr::parse_split(&buf[..117], &buf[117..len], ChecksumCheck::Verify).err(),
        Some(PacketError::SplitNotAtPayload {
            head_bytes: 117 - 14,
            payload_off: 118 - 14
        })
    );
}
