//! SRH acceptance tests (issue 2): validation in both contexts, TLVs, builder byte-exactness.

use std::net::Ipv6Addr;

use mrc_fabric::srv6::{HmacTlv, Srh, SrhContext, SrhError, SrhRepr, Tlv};
use pnet_packet::ip::IpNextHeaderProtocols;

/// Bytes from a whitespace-separated hex string.
fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).expect("test hex"))
        .collect()
}

/// An SRH (next header UDP) with the given fixed fields and `n_segments` addresses
/// 2001:db8::1, ::2, ..., zero-filled to `(hdr_ext_len + 1) * 8` bytes.
fn srh_bytes(hdr_ext_len: u8, segments_left: u8, last_entry: u8, n_segments: usize) -> Vec<u8> {
    let mut b = vec![17, hdr_ext_len, 4, segments_left, last_entry, 0, 0, 0];
    for i in 0..n_segments {
        let seg = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16 + 1);
        b.extend_from_slice(&seg.octets());
    }
    b.resize((usize::from(hdr_ext_len) + 1) * 8, 0);
    b
}

/// [`srh_bytes`]`(3, 0, 0, 1)` (one segment) with `tlvs` as its 8-byte TLV area (bytes
/// 24..32).
fn srh_with_tlv_area(tlvs: [u8; 8]) -> Vec<u8> {
    let mut b = srh_bytes(3, 0, 0, 1);
    b[24..32].copy_from_slice(&tlvs);
    b
}

/// Asserts that parsing `bytes` fails with `expected` in both contexts.
fn assert_rejected_in_both_contexts(bytes: &[u8], expected: SrhError) {
    assert_eq!(
        SrhRepr::parse_bytes(bytes, SrhContext::Received),
        Err(expected)
    );
    assert_eq!(
        SrhRepr::parse_bytes(bytes, SrhContext::Local),
        Err(expected)
    );
}

/// Asserts that `repr` emits in `ctx` exactly `bytes`.
fn assert_emits(repr: &SrhRepr, ctx: SrhContext, bytes: &[u8]) {
    let mut out = vec![0u8; bytes.len()];
    assert_eq!(repr.emit(&mut out, ctx), Ok(bytes.len()));
    assert_eq!(&out[..], bytes);
}

#[test]
fn reduced_srh_hdr_ext_len_2_last_entry_0_segments_left_1_accepted_from_wire() {
    let bytes = srh_bytes(2, 1, 0, 1);
    assert_eq!(bytes.len(), 24);
    let repr = SrhRepr::parse_bytes(&bytes, SrhContext::Received).expect("reduced SRH");
    assert_eq!(repr.segments_left, 1);
    assert_eq!(repr.last_entry(), 0);
    assert_eq!(
        repr.segments,
        vec!["2001:db8::1".parse::<Ipv6Addr>().unwrap()]
    );
    // The first segment is only in the IPv6 DA: no active segment inside the list.
    assert_eq!(repr.active_segment(), None);
    let view = Srh::new_checked(&bytes[..], SrhContext::Received).unwrap();
    assert_eq!(view.active_segment(), None);
    // It re-emits byte-identical in the received context.
    assert_emits(&repr, SrhContext::Received, &bytes);
}

#[test]
fn reduced_srh_hdr_ext_len_2_last_entry_0_segments_left_1_rejected_by_builder() {
    let bytes = srh_bytes(2, 1, 0, 1);
    let expected = SrhError::SegmentsLeftOutsideList {
        segments_left: 1,
        last_entry: 0,
    };
    assert_eq!(
        SrhRepr::parse_bytes(&bytes, SrhContext::Local),
        Err(expected)
    );
    assert_eq!(
        Srh::new_checked(&bytes[..], SrhContext::Local).err(),
        Some(expected)
    );
    // The same header as a Repr handed to the API: emit and validate refuse it.
    let repr = SrhRepr::parse_bytes(&bytes, SrhContext::Received).unwrap();
    let mut out = [0u8; 64];
    assert_eq!(repr.emit(&mut out, SrhContext::Local), Err(expected));
    assert_eq!(repr.validate(SrhContext::Local), Err(expected));
}

#[test]
fn segments_left_two_past_last_entry_rejected_from_wire() {
    let bytes = srh_bytes(2, 2, 0, 1);
    assert_eq!(
        SrhRepr::parse_bytes(&bytes, SrhContext::Received),
        Err(SrhError::SegmentsLeftBeyondLastEntry {
            segments_left: 2,
            last_entry: 0
        })
    );
}

#[test]
fn hdr_ext_len_2_last_entry_1_rejected() {
    let bytes = srh_bytes(2, 0, 1, 1);
    let expected = SrhError::LastEntryBeyondHeader {
        last_entry: 1,
        hdr_ext_len: 2,
    };
    assert_rejected_in_both_contexts(&bytes, expected);
}

#[test]
fn hdr_ext_len_4_last_entry_1_valid() {
    let bytes = srh_bytes(4, 1, 1, 2);
    assert_eq!(bytes.len(), 40);
    for ctx in [SrhContext::Received, SrhContext::Local] {
        let repr = SrhRepr::parse_bytes(&bytes, ctx).expect("valid");
        assert_eq!(repr.last_entry(), 1);
        assert_eq!(repr.hdr_ext_len(), Ok(4));
        assert_eq!(
            repr.segments,
            vec![
                "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
                "2001:db8::2".parse().unwrap()
            ]
        );
        assert!(repr.tlvs.is_empty());
        assert_eq!(repr.active_segment(), Some("2001:db8::2".parse().unwrap()));
    }
}

#[test]
fn hdr_ext_len_4_last_entry_3_rejected() {
    let bytes = srh_bytes(4, 0, 3, 2);
    let expected = SrhError::LastEntryBeyondHeader {
        last_entry: 3,
        hdr_ext_len: 4,
    };
    assert_rejected_in_both_contexts(&bytes, expected);
}

#[test]
fn hdr_ext_len_3_last_entry_0_two_padn_of_length_2_valid() {
    // TLV area: bytes 24..32 = PadN(len 2) PadN(len 2).
    let bytes = srh_with_tlv_area([4, 2, 0, 0, 4, 2, 0, 0]);
    let repr = SrhRepr::parse_bytes(&bytes, SrhContext::Received).expect("valid");
    assert_eq!(
        repr.tlvs,
        vec![
            Tlv::PadN {
                padding: vec![0, 0]
            },
            Tlv::PadN {
                padding: vec![0, 0]
            }
        ]
    );
    assert_emits(&repr, SrhContext::Received, &bytes);
    // A local sender must not put padding TLVs back to back (RFC 8754 section 2.1.1).
    assert_eq!(
        SrhRepr::parse_bytes(&bytes, SrhContext::Local),
        Err(SrhError::ConsecutivePadding { offset: 28 })
    );
}

#[test]
fn hdr_ext_len_3_second_padn_of_length_3_runs_past_header_rejected() {
    let mut bytes = srh_with_tlv_area([4, 2, 0, 0, 4, 3, 0, 0]);
    let expected = SrhError::TlvOverrun {
        offset: 28,
        header_len_bytes: 32,
    };
    assert_rejected_in_both_contexts(&bytes, expected);
    // Even with bytes following the header in the buffer, the TLV may not use them.
    bytes.extend_from_slice(&[0; 8]);
    assert_eq!(
        SrhRepr::parse_bytes(&bytes, SrhContext::Received),
        Err(expected)
    );
}

#[test]
fn hdr_ext_len_6_with_only_40_bytes_is_truncated() {
    let mut bytes = srh_bytes(6, 2, 2, 3);
    bytes.truncate(40);
    let expected = SrhError::Truncated {
        needed_bytes: 56,
        available_bytes: 40,
    };
    assert_rejected_in_both_contexts(&bytes, expected);
}

#[test]
fn fewer_than_8_bytes_is_truncated() {
    assert_eq!(
        SrhRepr::parse_bytes(&[17, 2, 4, 0, 0], SrhContext::Received),
        Err(SrhError::Truncated {
            needed_bytes: 8,
            available_bytes: 5
        })
    );
}

#[test]
fn routing_type_0_is_not_an_srh() {
    let mut bytes = srh_bytes(2, 0, 0, 1);
    bytes[2] = 0;
    let expected = SrhError::NotSrh { routing_type: 0 };
    assert_rejected_in_both_contexts(&bytes, expected);
    assert_eq!(
        Srh::new_checked(&bytes[..], SrhContext::Received).err(),
        Some(expected)
    );
}

fn path(addrs: &[&str]) -> Vec<Ipv6Addr> {
    addrs.iter().map(|a| a.parse().unwrap()).collect()
}

/// Build with `for_path`, check DA and the exact bytes, and check it parses back.
fn check_builder(addrs: &[&str], expected_hex: &str) {
    let p = path(addrs);
    let (repr, da) = SrhRepr::for_path(IpNextHeaderProtocols::Udp, &p).unwrap();
    assert_eq!(da, p[0], "destination address = first segment");
    let expected = hex(expected_hex);
    assert_emits(&repr, SrhContext::Local, &expected);
    assert_eq!(repr.active_segment(), Some(p[0]));
    assert_eq!(repr.final_destination(), Some(p[p.len() - 1]));
    assert_eq!(
        SrhRepr::parse_bytes(&expected, SrhContext::Local).as_ref(),
        Ok(&repr)
    );
}

#[test]
fn builder_one_segment_byte_exact() {
    check_builder(
        &["2001:db8:a::1"],
        "11 02 04 00 00 00 00 00
         20 01 0d b8 00 0a 00 00 00 00 00 00 00 00 00 01",
    );
}

#[test]
fn builder_two_segments_byte_exact() {
    check_builder(
        &["2001:db8:a::1", "2001:db8:b::2"],
        "11 04 04 01 01 00 00 00
         20 01 0d b8 00 0b 00 00 00 00 00 00 00 00 00 02
         20 01 0d b8 00 0a 00 00 00 00 00 00 00 00 00 01",
    );
}

#[test]
fn builder_three_segments_byte_exact() {
    check_builder(
        &["2001:db8:a::1", "2001:db8:b::2", "2001:db8:c::3"],
        "11 06 04 02 02 00 00 00
         20 01 0d b8 00 0c 00 00 00 00 00 00 00 00 00 03
         20 01 0d b8 00 0b 00 00 00 00 00 00 00 00 00 02
         20 01 0d b8 00 0a 00 00 00 00 00 00 00 00 00 01",
    );
}

#[test]
fn builder_six_segments_byte_exact() {
    check_builder(
        &[
            "2001:db8:a::1",
            "2001:db8:b::2",
            "2001:db8:c::3",
            "2001:db8:d::4",
            "2001:db8:e::5",
            "fc00:0:f::6",
        ],
        "11 0c 04 05 05 00 00 00
         fc 00 00 00 00 0f 00 00 00 00 00 00 00 00 00 06
         20 01 0d b8 00 0e 00 00 00 00 00 00 00 00 00 05
         20 01 0d b8 00 0d 00 00 00 00 00 00 00 00 00 04
         20 01 0d b8 00 0c 00 00 00 00 00 00 00 00 00 03
         20 01 0d b8 00 0b 00 00 00 00 00 00 00 00 00 02
         20 01 0d b8 00 0a 00 00 00 00 00 00 00 00 00 01",
    );
}

#[test]
fn builder_rejects_empty_and_128_segments() {
    assert_eq!(
        SrhRepr::for_path(IpNextHeaderProtocols::Udp, &[]).err(),
        Some(SrhError::EmptySegmentList)
    );
    let long = vec![Ipv6Addr::LOCALHOST; 128];
    assert_eq!(
        SrhRepr::for_path(IpNextHeaderProtocols::Udp, &long).err(),
        Some(SrhError::TooManySegments { segments: 128 })
    );
    let max = vec![Ipv6Addr::LOCALHOST; 127];
    let (repr, _) = SrhRepr::for_path(IpNextHeaderProtocols::Udp, &max).unwrap();
    assert_eq!(repr.buffer_len(), 8 + 127 * 16);
    assert_eq!(repr.hdr_ext_len(), Ok(254));
}

fn hmac_repr() -> SrhRepr {
    let (mut repr, _) =
        SrhRepr::for_path(IpNextHeaderProtocols::Udp, &path(&["2001:db8::1"])).unwrap();
    repr.tlvs = vec![
        Tlv::Hmac(HmacTlv {
            destination_check_disabled: true,
            reserved: 0,
            key_id: 0x0102_0304,
            hmac: (1..=32).collect(),
        }),
        Tlv::padding(2).unwrap(),
    ];
    repr
}

#[test]
fn hmac_tlv_emits_exact_bytes_and_round_trips() {
    let repr = hmac_repr();
    // 8 fixed + 16 segment + 40 HMAC TLV (2 + 6 + 32) + 2 PadN(0) = 66 -> not 8-aligned.
    assert_eq!(
        repr.validate(SrhContext::Local),
        Err(SrhError::BadHeaderLength { len_bytes: 66 })
    );
    let mut repr = repr;
    repr.tlvs.pop();
    // 8 + 16 + 40 = 64 bytes, hdr_ext_len 7.
    let mut out = [0u8; 64];
    assert_eq!(repr.emit(&mut out, SrhContext::Local), Ok(64));
    assert_eq!(&out[..8], &hex("11 07 04 00 00 00 00 00")[..]);
    assert_eq!(&out[24..32], &hex("05 26 80 00 01 02 03 04")[..]);
    assert_eq!(&out[32..], &(1..=32).collect::<Vec<u8>>()[..]);
    assert_eq!(SrhRepr::parse_bytes(&out, SrhContext::Local), Ok(repr));
}

#[test]
fn hmac_tlv_with_bad_length_rejected() {
    // hdr_ext_len 3: one segment + 8-byte TLV area holding an HMAC TLV of length 6 (no HMAC).
    let bytes = srh_with_tlv_area([5, 6, 0, 0, 0, 0, 0, 1]);
    assert_eq!(
        SrhRepr::parse_bytes(&bytes, SrhContext::Received),
        Err(SrhError::HmacLength {
            offset: 24,
            length: 6
        })
    );
}

#[test]
fn unknown_tlv_carried_opaque_and_pad1_recognised() {
    // Unknown type 0x80 with 4 value bytes, then PadN(0) is 2 bytes: 6 + 2 = 8.
    let bytes = srh_with_tlv_area([0x80, 4, 0xde, 0xad, 0xbe, 0xef, 4, 0]);
    let repr = SrhRepr::parse_bytes(&bytes, SrhContext::Local).unwrap();
    assert_eq!(
        repr.tlvs,
        vec![
            Tlv::Unknown {
                tlv_type: 0x80,
                value: vec![0xde, 0xad, 0xbe, 0xef]
            },
            Tlv::PadN { padding: vec![] }
        ]
    );
    // Unknown type 0x81 with 5 value bytes, then Pad1: 7 + 1 = 8.
    let bytes = srh_with_tlv_area([0x81, 5, 1, 2, 3, 4, 5, 0]);
    let repr = SrhRepr::parse_bytes(&bytes, SrhContext::Local).unwrap();
    assert_eq!(
        repr.tlvs,
        vec![
            Tlv::Unknown {
                tlv_type: 0x81,
                value: vec![1, 2, 3, 4, 5]
            },
            Tlv::Pad1
        ]
    );
    assert_emits(&repr, SrhContext::Local, &bytes);
}

#[test]
fn local_sender_rules_on_padding() {
    // hdr_ext_len 3, TLV area of one PadN with length 6: accepted received, too long locally.
    let bytes = srh_with_tlv_area([4, 6, 0, 0, 0, 0, 0, 0]);
    assert!(SrhRepr::parse_bytes(&bytes, SrhContext::Received).is_ok());
    assert_eq!(
        SrhRepr::parse_bytes(&bytes, SrhContext::Local),
        Err(SrhError::PadNTooLong {
            offset: 24,
            length: 6
        })
    );
    // Non-zero padding: ignored on receipt, refused from a local sender.
    let bytes = srh_with_tlv_area([0x80, 0, 4, 4, 0, 0, 0, 9]);
    assert!(SrhRepr::parse_bytes(&bytes, SrhContext::Received).is_ok());
    assert_eq!(
        SrhRepr::parse_bytes(&bytes, SrhContext::Local),
        Err(SrhError::NonZeroReserved { offset: 26 })
    );
}

#[test]
fn bytes_after_the_header_are_ignored() {
    let mut bytes = srh_bytes(2, 0, 0, 1);
    bytes.extend_from_slice(&[0xff; 10]);
    let repr = SrhRepr::parse_bytes(&bytes, SrhContext::Local).unwrap();
    assert_eq!(repr.buffer_len(), 24);
    assert!(repr.tlvs.is_empty());
}

#[test]
fn tlv_reprs_that_would_not_round_trip_are_refused() {
    let (mut repr, _) =
        SrhRepr::for_path(IpNextHeaderProtocols::Udp, &path(&["2001:db8::1"])).unwrap();
    // Unknown claiming type 4 (PadN) with 6 value bytes: 8-byte TLV area, but refused.
    repr.tlvs = vec![Tlv::Unknown {
        tlv_type: 4,
        value: vec![0; 6],
    }];
    assert_eq!(
        repr.validate(SrhContext::Received),
        Err(SrhError::InvalidTlvRepr { tlv_type: 4 })
    );
    // HMAC reserved needs 16 bits: refused rather than silently masked.
    repr.tlvs = vec![Tlv::Hmac(HmacTlv {
        destination_check_disabled: false,
        reserved: 0x8000,
        key_id: 1,
        hmac: vec![0; 8],
    })];
    assert_eq!(repr.buffer_len(), 8 + 16 + 16);
    assert_eq!(
        repr.validate(SrhContext::Received),
        Err(SrhError::InvalidTlvRepr { tlv_type: 5 })
    );
}
