//! Property tests (issue 2): SRH Repr emit -> parse gives the same Repr and bytes; any bytes
//! parse to Ok or a typed error without panicking (SRH, IPv6/UDP, Ethernet); uSID container
//! operations on any address keep their invariants.

use std::net::Ipv6Addr;

use mrc_fabric::packet::{EthernetFrameRepr, Ipv6UdpRepr};
use mrc_fabric::srv6::{
    HmacTlv, LocatorBlock, Srh, SrhContext, SrhRepr, Tlv, UsidContainer, UsidError,
};
use pnet_packet::ip::IpNextHeaderProtocol;
use proptest::prelude::*;

fn arb_addr() -> impl Strategy<Value = Ipv6Addr> {
    any::<u128>().prop_map(Ipv6Addr::from)
}

fn arb_hmac(reserved: impl Strategy<Value = u16>) -> impl Strategy<Value = Tlv> {
    (
        any::<bool>(),
        reserved,
        any::<u32>(),
        prop::sample::select(vec![8usize, 16, 24, 32])
            .prop_flat_map(|n| prop::collection::vec(any::<u8>(), n)),
    )
        .prop_map(|(d, reserved, key_id, hmac)| {
            Tlv::Hmac(HmacTlv {
                destination_check_disabled: d,
                reserved,
                key_id,
                hmac,
            })
        })
}

fn arb_unknown() -> impl Strategy<Value = Tlv> {
    (
        any::<u8>().prop_filter("not a known type", |t| ![0u8, 4, 5].contains(t)),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(tlv_type, value)| Tlv::Unknown { tlv_type, value })
}

/// Non-padding TLVs a local sender may use.
fn arb_local_tlv() -> impl Strategy<Value = Tlv> {
    prop_oneof![arb_unknown(), arb_hmac(Just(0u16))]
}

fn tlv_bytes(tlvs: &[Tlv]) -> usize {
    tlvs.iter().map(Tlv::buffer_len).sum()
}

/// Lay out `body` as a local sender would: padding before each HMAC to reach an 8-octet
/// boundary (the TLV area starts at one), and padding at the end to a multiple of 8.
fn lay_out_local(body: Vec<Tlv>) -> Vec<Tlv> {
    let mut out = Vec::new();
    for tlv in body {
        if matches!(tlv, Tlv::Hmac(_)) {
            let misalign = tlv_bytes(&out) % 8;
            if misalign != 0 {
                out.extend(Tlv::padding(8 - misalign));
            }
        }
        out.push(tlv);
    }
    let misalign = tlv_bytes(&out) % 8;
    if misalign != 0 {
        out.extend(Tlv::padding(8 - misalign));
    }
    out
}

fn arb_local_repr() -> impl Strategy<Value = SrhRepr> {
    (
        any::<u8>(),
        any::<u8>(),
        any::<u16>(),
        prop::collection::vec(arb_addr(), 1..=12),
        prop::collection::vec(arb_local_tlv(), 0..4),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(nh, flags, tag, segments, body, sl)| SrhRepr {
            next_header: IpNextHeaderProtocol(nh),
            segments_left: sl.index(segments.len()) as u8,
            flags,
            tag,
            segments,
            tlvs: lay_out_local(body),
        })
}

/// Anything a receiver accepts: reduced form allowed, padding anywhere with any content,
/// HMAC unaligned with reserved bits set.
fn arb_received_repr() -> impl Strategy<Value = SrhRepr> {
    let tlv = prop_oneof![
        arb_unknown(),
        arb_hmac(0u16..0x8000),
        Just(Tlv::Pad1),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(|padding| Tlv::PadN { padding }),
    ];
    (
        any::<u8>(),
        any::<u8>(),
        any::<u16>(),
        prop::collection::vec(arb_addr(), 1..=12),
        prop::collection::vec(tlv, 0..6),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(nh, flags, tag, segments, mut tlvs, sl)| {
            let misalign = tlv_bytes(&tlvs) % 8;
            if misalign != 0 {
                tlvs.extend(Tlv::padding(8 - misalign));
            }
            SrhRepr {
                next_header: IpNextHeaderProtocol(nh),
                segments_left: sl.index(segments.len() + 1) as u8,
                flags,
                tag,
                segments,
                tlvs,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn local_repr_emit_parse_same_repr_and_bytes(repr in arb_local_repr()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        let len = repr.emit(&mut buf, SrhContext::Local).unwrap();
        prop_assert_eq!(len, repr.buffer_len());
        for ctx in [SrhContext::Local, SrhContext::Received] {
            let parsed = SrhRepr::parse_bytes(&buf, ctx).unwrap();
            prop_assert_eq!(&parsed, &repr);
            let mut again = vec![0u8; len];
            prop_assert_eq!(parsed.emit(&mut again, ctx), Ok(len));
            prop_assert_eq!(&again, &buf);
        }
        let view = Srh::new_checked(&buf[..], SrhContext::Local).unwrap();
        prop_assert_eq!(view.header_len(), len);
        prop_assert_eq!(view.active_segment(), repr.active_segment());
    }

    #[test]
    fn received_repr_emit_parse_same_repr_and_bytes(repr in arb_received_repr()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        let len = repr.emit(&mut buf, SrhContext::Received).unwrap();
        let parsed = SrhRepr::parse_bytes(&buf, SrhContext::Received).unwrap();
        prop_assert_eq!(&parsed, &repr);
        let mut again = vec![0u8; len];
        prop_assert_eq!(parsed.emit(&mut again, SrhContext::Received), Ok(len));
        prop_assert_eq!(&again, &buf);
        // Local is stricter: whatever it accepts, Received accepts.
        if SrhRepr::parse_bytes(&buf, SrhContext::Local).is_ok() {
            prop_assert!(usize::from(repr.segments_left) < repr.segments.len());
        }
    }

    #[test]
    fn any_repr_emit_accepts_parses_back_equal(
        nh in any::<u8>(),
        segments_left in any::<u8>(),
        segments in prop::collection::vec(arb_addr(), 0..4),
        tlvs in prop::collection::vec(prop_oneof![
            (any::<u8>(), prop::collection::vec(any::<u8>(), 0..10))
                .prop_map(|(tlv_type, value)| Tlv::Unknown { tlv_type, value }),
            (any::<bool>(), any::<u16>(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..40))
                .prop_map(|(d, reserved, key_id, hmac)| Tlv::Hmac(HmacTlv {
                    destination_check_disabled: d, reserved, key_id, hmac,
                })),
            Just(Tlv::Pad1),
            prop::collection::vec(any::<u8>(), 0..8).prop_map(|padding| Tlv::PadN { padding }),
        ], 0..4),
    ) {
        let repr = SrhRepr {
            next_header: IpNextHeaderProtocol(nh),
            segments_left,
            flags: 0,
            tag: 0,
            segments,
            tlvs,
        };
        for ctx in [SrhContext::Received, SrhContext::Local] {
            let mut buf = vec![0u8; repr.buffer_len()];
            if let Ok(len) = repr.emit(&mut buf, ctx) {
                prop_assert_eq!(len, buf.len());
                let parsed = SrhRepr::parse_bytes(&buf, ctx).unwrap();
                prop_assert_eq!(&parsed, &repr);
                prop_assert_eq!(repr.validate(ctx), Ok(()));
            } else {
                prop_assert!(repr.validate(ctx).is_err());
            }
        }
    }

    #[test]
    fn any_bytes_parse_ok_or_typed_error_and_reemit_identical(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        force_srh in any::<bool>(),
    ) {
        let mut bytes = bytes;
        if force_srh && bytes.len() > 2 {
            bytes[2] = 4;
        }
        for ctx in [SrhContext::Received, SrhContext::Local] {
            if let Ok(repr) = SrhRepr::parse_bytes(&bytes, ctx) {
                let mut out = vec![0u8; repr.buffer_len()];
                let len = repr.emit(&mut out, ctx).unwrap();
                prop_assert_eq!(&out[..], &bytes[..len]);
            }
            let view = Srh::new_unchecked(&bytes[..]);
            let _ = (view.segment(255), view.tlv_area(), view.tlvs().count(), view.active_segment());
        }
    }

    #[test]
    fn mutated_valid_header_parses_or_errors(
        repr in arb_local_repr(),
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, SrhContext::Local).unwrap();
        let i = at.index(buf.len());
        buf[i] ^= xor;
        let keep = cut.index(buf.len() + 1);
        for bytes in [&buf[..], &buf[..keep]] {
            for ctx in [SrhContext::Received, SrhContext::Local] {
                if let Ok(parsed) = SrhRepr::parse_bytes(bytes, ctx) {
                    let mut out = vec![0u8; parsed.buffer_len()];
                    let len = parsed.emit(&mut out, ctx).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..len]);
                }
            }
        }
    }

    #[test]
    fn ipv6_udp_emit_parse_round_trip(
        src in arb_addr(),
        path in prop::collection::vec(arb_addr(), 0..8),
        tc in any::<u8>(),
        flow_label in 0u32..=0xfffff,
        hop_limit in any::<u8>(),
        ports in any::<(u16, u16)>(),
        payload in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut repr = if path.is_empty() {
            Ipv6UdpRepr {
                src_addr: src,
                dst_addr: Ipv6Addr::LOCALHOST,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 0,
                srh: None,
                src_port: 0,
                dst_port: 0,
            }
        } else {
            Ipv6UdpRepr::with_segment_path(src, &path, 0, 0).unwrap()
        };
        repr.traffic_class = tc;
        repr.flow_label = flow_label;
        repr.hop_limit = hop_limit;
        repr.src_port = ports.0;
        repr.dst_port = ports.1;
        let frame = EthernetFrameRepr { dst_mac: [2, 0, 0, 0, 0, 2], src_mac: [2, 0, 0, 0, 0, 1], packet: repr };
        let mut buf = vec![0u8; frame.buffer_len(payload.len())];
        let len = frame.emit(&mut buf, &payload).unwrap();
        prop_assert_eq!(len, buf.len());
        let (parsed, got) = EthernetFrameRepr::parse(&buf).unwrap();
        prop_assert_eq!(&parsed, &frame);
        prop_assert_eq!(got, &payload[..]);
        prop_assert_eq!(
            usize::from(u16::from_be_bytes([buf[18], buf[19]])),
            len - 14 - 40
        );
    }

    #[test]
    fn any_bytes_ipv6_and_ethernet_parse_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        shape in any::<bool>(),
    ) {
        let mut bytes = bytes;
        // Half the time make it look like IPv6 + SRH so the parser goes deeper.
        if shape && bytes.len() > 48 {
            bytes[0] = 0x60;
            bytes[6] = 43;
            bytes[42] = 4;
            let plen = (bytes.len() - 40) as u16;
            bytes[4..6].copy_from_slice(&plen.to_be_bytes());
        }
        let _ = Ipv6UdpRepr::parse(&bytes);
        let _ = EthernetFrameRepr::parse(&bytes);
    }

    #[test]
    fn usid_ops_on_any_address(address in arb_addr(), wide in any::<bool>()) {
        let block_len: u8 = if wide { 48 } else { 32 };
        let c = UsidContainer::from_address(address, block_len).unwrap();
        let arg_bits = 128 - u32::from(block_len);
        let bits = u128::from(address);
        let expected_active = ((bits >> (arg_bits - 16)) & 0xffff) as u16;
        prop_assert_eq!(c.active_usid(), (expected_active != 0).then_some(expected_active));
        prop_assert_eq!(c.is_exhausted(), expected_active == 0);
        let _ = c.is_last();
        match c.shift() {
            Ok(next) => {
                prop_assert!(expected_active != 0);
                let mask = u128::MAX << arg_bits;
                let want = (bits & mask) | ((bits << 16) & !mask);
                prop_assert_eq!(u128::from(next.address()), want);
                prop_assert_eq!(next.block(), c.block());
                prop_assert_eq!(u128::from(next.address()) & 0xffff, 0);
            }
            Err(e) => {
                prop_assert_eq!(e, UsidError::Exhausted);
                prop_assert_eq!(expected_active, 0);
            }
        }
        // Repeated shifts exhaust the container within capacity + 1 steps.
        let mut cur = c;
        let mut steps = 0;
        while let Ok(next) = cur.shift() {
            cur = next;
            steps += 1;
            prop_assert!(steps <= arg_bits / 16);
        }
        prop_assert!(cur.is_exhausted());
        prop_assert!(c.usids().count() <= (arg_bits / 16) as usize);
    }

    #[test]
    fn usid_build_then_walk_gives_the_list(
        prefix in any::<u128>(),
        wide in any::<bool>(),
        usids in prop::collection::vec(1u16..=u16::MAX, 1..=6),
    ) {
        let block_len: u8 = if wide { 48 } else { 32 };
        let block = LocatorBlock::new(Ipv6Addr::from(prefix & (u128::MAX << (128 - u32::from(block_len)))), block_len).unwrap();
        match UsidContainer::build(block, &usids) {
            Ok(c) => {
                prop_assert!(usids.len() <= block.capacity());
                prop_assert_eq!(c.usids().collect::<Vec<_>>(), usids.clone());
                prop_assert_eq!(c.block(), block);
                let mut cur = c;
                for (i, &u) in usids.iter().enumerate() {
                    prop_assert_eq!(cur.active_usid(), Some(u));
                    prop_assert_eq!(cur.is_last(), i + 1 == usids.len());
                    cur = cur.shift().unwrap();
                }
                prop_assert!(cur.is_exhausted());
                prop_assert_eq!(cur.address(), block.prefix());
            }
            Err(e) => {
                prop_assert_eq!(e, UsidError::TooMany { count: usids.len(), capacity: block.capacity() });
            }
        }
    }
}
