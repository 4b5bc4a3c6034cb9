//! The UDP-over-IPv6 checksum (RFC 768, RFC 8200 section 8.1): the ones' complement of the
//! ones' complement sum of the pseudo-header and the datagram, computed the fast way of
//! RFC 1071 section 2: 32-bit words added into a 64-bit accumulator with the carries
//! deferred to one final fold, in native byte order (the sum is byte-order independent,
//! RFC 1071 section 2 (B); the result is swapped back once).
//!
//! ```text
//! pseudo-header (40 bytes): source address (16) | final destination (16) |
//!                           UDP length (4, big-endian) | 0 0 0 | next header 17
//! datagram: UDP header with its checksum field (bytes 6..8) left out, then the payload
//! ```

use std::net::Ipv6Addr;

/// Offset of the checksum field in the UDP header.
pub const UDP_CHECKSUM_OFF: usize = 6;
/// Bytes of the UDP header.
const UDP_HEADER_LEN: usize = 8;
/// IPv6 next header value of UDP.
const NEXT_HEADER_UDP: u8 = 17;

/// Native-order ones' complement partial sum of `data` (an odd last byte padded with a zero
/// byte on its right, RFC 1071), not yet folded.
fn partial_sum(data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(4);
    let mut acc: u64 = chunks
        .by_ref()
        .map(|c| u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
        .sum();
    let rest = chunks.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in pairs.by_ref() {
        acc += u64::from(u16::from_ne_bytes([p[0], p[1]]));
    }
    if let [b] = pairs.remainder() {
        acc += u64::from(u16::from_ne_bytes([*b, 0]));
    }
    acc
}

/// Folds a 64-bit partial sum to 16 bits with end-around carries.
fn fold(mut acc: u64) -> u16 {
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc as u16
}

/// UDP checksum of `udp` (header and payload; the checksum field's current value is
/// ignored) between `src` and `final_dst`. A computed 0 is returned as 0xFFFF (RFC 768,
/// RFC 8200 section 8.1). `udp` shorter than 8 bytes is summed as it is.
pub fn udp_ipv6_checksum(udp: &[u8], src: &Ipv6Addr, final_dst: &Ipv6Addr) -> u16 {
    let mut pseudo = [0u8; 40];
    pseudo[..16].copy_from_slice(&src.octets());
    pseudo[16..32].copy_from_slice(&final_dst.octets());
    pseudo[32..36].copy_from_slice(&(udp.len() as u32).to_be_bytes());
    pseudo[39] = NEXT_HEADER_UDP;
    let (head, payload) = udp.split_at(udp.len().min(UDP_HEADER_LEN));
    let mut header = [0u8; UDP_HEADER_LEN];
    header[..head.len()].copy_from_slice(head);
    header[UDP_CHECKSUM_OFF..].fill(0);
    let acc = partial_sum(&pseudo) + partial_sum(&header) + partial_sum(payload);
    let sum = u16::from_be_bytes(fold(acc).to_ne_bytes());
    match !sum {
        0 => 0xFFFF,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pnet_packet::udp::{self, UdpPacket};
    use proptest::prelude::*;

    fn reference(bytes: &[u8], src: &Ipv6Addr, dst: &Ipv6Addr) -> u16 {
        let p = UdpPacket::new(bytes).expect("8 bytes or more");
        match udp::ipv6_checksum(&p, src, dst) {
            0 => 0xFFFF,
            c => c,
        }
    }

    /// RFC 1071 section 3 numeric example: the words 0001 f203 f4f5 f6f7 sum to ddf2.
    #[test]
    fn rfc1071_example_sum() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(
            u16::from_be_bytes(fold(partial_sum(&data)).to_ne_bytes()),
            0xddf2
        );
        // Odd length: a trailing 0xab is the word ab00.
        assert_eq!(
            u16::from_be_bytes(fold(partial_sum(&[0xab])).to_ne_bytes()),
            0xab00
        );
    }

    proptest! {
        /// Equal to pnet_packet's word-by-word checksum for any datagram, odd lengths and
        /// any checksum field value included.
        #[test]
        fn matches_pnet(
            body in proptest::collection::vec(any::<u8>(), 8..600),
            src in any::<u128>(),
            dst in any::<u128>(),
        ) {
            let (s, d) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            prop_assert_eq!(udp_ipv6_checksum(&body, &s, &d), reference(&body, &s, &d));
        }
    }
}
