//! Fuzz `mrc_transport::wire::PacketRepr::parse` with arbitrary datagrams.
//!
//! Properties: parsing never panics; a datagram that parses re-emits byte-identical. "The
//! bytes consumed" is the whole input: the data payload and an unknown opcode's rest extend to
//! the end of the datagram, and fixed-size control bodies reject trailing bytes, so a parsed
//! packet's `buffer_len()` equals the input length. A `Truncated` error describes the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mrc_transport::wire::{PacketRepr, WireError};

fuzz_target!(|data: &[u8]| {
    match PacketRepr::parse(data) {
        Ok(packet) => {
            let len = packet.buffer_len();
            assert_eq!(len, data.len(), "a parsed packet covers the whole datagram");
            let mut out = vec![0u8; len];
            let written = packet
                .emit(&mut out)
                .expect("a packet that parsed must emit");
            assert_eq!(written, len);
            assert_eq!(&out[..], data, "re-emit is byte-identical");
            assert_eq!(PacketRepr::parse(&out), Ok(packet));
        }
        Err(WireError::Truncated { need, have, .. }) => {
            assert_eq!(have, data.len());
            assert!(need > have);
        }
        Err(_) => {}
    }
});
