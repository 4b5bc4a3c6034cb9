//! Fuzz target: any bytes -> SRH parse in both contexts, IPv6/UDP and Ethernet parse, and uSID
//! container operations never panic; an SRH that parses re-emits byte-identical.
#![no_main]

use std::net::Ipv6Addr;

use libfuzzer_sys::fuzz_target;
use mrc_fabric::packet::{EthernetFrameRepr, Ipv6UdpRepr};
use mrc_fabric::srv6::{Srh, SrhContext, SrhRepr, UsidContainer};

fuzz_target!(|data: &[u8]| {
    for ctx in [SrhContext::Received, SrhContext::Local] {
        if let Ok(repr) = SrhRepr::parse_bytes(data, ctx) {
            let mut out = vec![0u8; repr.buffer_len()];
            let len = repr
                .emit(&mut out, ctx)
                .expect("a parsed SRH re-emits in its context");
            assert_eq!(&out[..], &data[..len], "re-emit is byte-identical");
            assert_eq!(SrhRepr::parse_bytes(&out, ctx).as_ref(), Ok(&repr));
        }
    }
    let view = Srh::new_unchecked(data);
    let _ = (
        view.active_segment(),
        view.segment(u8::MAX),
        view.tlvs().count(),
    );

    if let Ok((repr, payload)) = Ipv6UdpRepr::parse(data) {
        let mut out = vec![0u8; repr.buffer_len(payload.len())];
        let len = repr
            .emit_in(&mut out, payload, SrhContext::Received)
            .expect("a parsed packet re-emits");
        assert_eq!(&out[..len], &data[..len], "re-emit is byte-identical");
    }
    let _ = EthernetFrameRepr::parse(data);

    if let Some(octets) = data.get(..16).and_then(|b| <[u8; 16]>::try_from(b).ok()) {
        for block_len in [32u8, 48] {
            let Ok(mut c) = UsidContainer::from_address(Ipv6Addr::from(octets), block_len) else {
                continue;
            };
            let mut steps = 0;
            while let Ok(next) = c.shift() {
                assert_eq!(next.block(), c.block());
                c = next;
                steps += 1;
                assert!(steps <= 6);
            }
            assert!(c.is_exhausted());
            let _ = (c.is_last(), c.usids().count());
        }
    }
});
