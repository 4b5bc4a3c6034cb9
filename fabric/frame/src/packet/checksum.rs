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

/// Bytes summed per round of [`LANES`] lanes in [`partial_sum`].
const ROUND_BYTES: usize = 2 * LANES;
/// 16-bit words summed side by side: 16 `u32` lanes (two 128-bit vectors with SSE2, one
/// with AVX2), which the compiler vectorises.
const LANES: usize = 16;
/// Bytes summed into the lanes before they are added up: each lane then holds at most
/// `BLOCK_BYTES / ROUND_BYTES = 2048` words of at most 0xFFFF, which cannot overflow a
/// `u32`.
const BLOCK_BYTES: usize = 1 << 16;

/// Native-order ones' complement partial sum of `data` (an odd last byte padded with a zero
/// byte on its right, RFC 1071), not yet folded.
///
/// The 16-bit words are added in [`LANES`] `u32` lanes (RFC 1071 section 2 (C), parallel
/// summation: the carries stay in each lane's high bits and are folded in at the end), then
/// the tail shorter than a round as 32-bit words. Any grouping of the same 16-bit words
/// gives the same ones' complement sum, so this equals the word-by-word sum.
fn partial_sum(data: &[u8]) -> u64 {
    if data.len() < 2 * ROUND_BYTES {
        // Headers and pseudo-headers: too short for the lanes to pay.
        return tail_sum(data);
    }
    let mut acc = 0u64;
    for block in data.chunks(BLOCK_BYTES) {
        let mut lanes = [0u32; LANES];
        let mut rounds = block.chunks_exact(ROUND_BYTES);
        for round in rounds.by_ref() {
            for (lane, w) in lanes.iter_mut().zip(round.chunks_exact(2)) {
                *lane += u32::from(u16::from_ne_bytes([w[0], w[1]]));
            }
        }
        acc += lanes.iter().map(|&l| u64::from(l)).sum::<u64>();
        acc += tail_sum(rounds.remainder());
    }
    acc
}

/// [`partial_sum`] of a short slice: 32-bit words, then a 16-bit word, then an odd byte.
fn tail_sum(data: &[u8]) -> u64 {
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

/// [`udp_ipv6_checksum`] of the datagram `udp_header` followed by `payload`, without the
/// two being contiguous (a caller that writes the payload elsewhere, or later); the
/// header's checksum field (bytes 6..8) is ignored.
pub fn udp_ipv6_checksum_parts(
    udp_header: &[u8; UDP_HEADER_LEN],
    payload: &[u8],
    src: &Ipv6Addr,
    final_dst: &Ipv6Addr,
) -> u16 {
    udp_ipv6_checksum_summed(udp_header, &PayloadSum::of(payload), src, final_dst)
}

/// [`udp_ipv6_checksum_parts`] with the payload's partial sum computed beforehand
/// ([`PayloadSum::of`]): the payload bytes are not read again (RFC 1071 section 2 (D),
/// incremental update: the sum of a datagram is the sum of its parts' sums).
pub fn udp_ipv6_checksum_summed(
    udp_header: &[u8; UDP_HEADER_LEN],
    payload: &PayloadSum,
    src: &Ipv6Addr,
    final_dst: &Ipv6Addr,
) -> u16 {
    let mut header = *udp_header;
    header[UDP_CHECKSUM_OFF..].fill(0);
    // The header is a whole number of 32-bit words, so the payload's words line up as in
    // the contiguous datagram.
    let acc = pseudo_header_sum(UDP_HEADER_LEN + payload.len_bytes, src, final_dst)
        + partial_sum(&header)
        + u64::from(payload.sum);
    finish(acc)
}

/// The ones' complement partial sum of a UDP payload and its length, for a caller that
/// sends the same payload bytes in many datagrams (a registered buffer posted again and
/// again): summed once by [`PayloadSum::of`], then added to each datagram's header sum by
/// [`udp_ipv6_checksum_summed`] without reading the payload again. The payload sits after
/// the 8-byte UDP header, at an even offset, so its 16-bit words line up with the
/// datagram's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadSum {
    /// Native-order sum, folded to 16 bits (end-around carries do not change a ones'
    /// complement sum).
    sum: u16,
    /// Payload length, bytes (it enters the pseudo-header's UDP length).
    len_bytes: usize,
}

impl PayloadSum {
    /// Sums `payload` (RFC 1071 section 2).
    pub fn of(payload: &[u8]) -> PayloadSum {
        PayloadSum {
            sum: fold(partial_sum(payload)),
            len_bytes: payload.len(),
        }
    }

    /// The summed payload's length, bytes.
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }
}

/// Partial sum of the pseudo-header for a datagram of `udp_len` bytes.
fn pseudo_header_sum(udp_len: usize, src: &Ipv6Addr, final_dst: &Ipv6Addr) -> u64 {
    let mut pseudo = [0u8; 40];
    pseudo[..16].copy_from_slice(&src.octets());
    pseudo[16..32].copy_from_slice(&final_dst.octets());
    pseudo[32..36].copy_from_slice(&(udp_len as u32).to_be_bytes());
    pseudo[39] = NEXT_HEADER_UDP;
    partial_sum(&pseudo)
}

/// The checksum from a partial sum: folded, swapped back to network order, complemented;
/// 0 sent as 0xFFFF.
fn finish(acc: u64) -> u16 {
    let sum = u16::from_be_bytes(fold(acc).to_ne_bytes());
    match !sum {
        0 => 0xFFFF,
        c => c,
    }
}

/// UDP checksum of `udp` (header and payload; the checksum field's current value is
/// ignored) between `src` and `final_dst`. A computed 0 is returned as 0xFFFF (RFC 768,
/// RFC 8200 section 8.1). `udp` shorter than 8 bytes is summed as it is.
pub fn udp_ipv6_checksum(udp: &[u8], src: &Ipv6Addr, final_dst: &Ipv6Addr) -> u16 {
    let (head, payload) = udp.split_at(udp.len().min(UDP_HEADER_LEN));
    let mut header = [0u8; UDP_HEADER_LEN];
    header[..head.len()].copy_from_slice(head);
    header[UDP_CHECKSUM_OFF..].fill(0);
    let acc =
        pseudo_header_sum(udp.len(), src, final_dst) + partial_sum(&header) + partial_sum(payload);
    finish(acc)
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

    /// The checksum the plain way: every 16-bit big-endian word added with end-around
    /// carry (RFC 1071 section 1), pseudo-header included.
    fn word_by_word(udp: &[u8], src: &Ipv6Addr, dst: &Ipv6Addr) -> u16 {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src.octets());
        bytes.extend_from_slice(&dst.octets());
        bytes.extend_from_slice(&(udp.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, NEXT_HEADER_UDP]);
        bytes.extend_from_slice(udp);
        if let Some(c) = bytes.get_mut(40 + UDP_CHECKSUM_OFF..40 + UDP_CHECKSUM_OFF + 2) {
            c.fill(0);
        }
        let mut sum = 0u32;
        for w in bytes.chunks(2) {
            let word = u32::from(w[0]) << 8 | u32::from(w.get(1).copied().unwrap_or(0));
            sum += word;
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        match !(sum as u16) {
            0 => 0xFFFF,
            c => c,
        }
    }

    /// Lanes at their fullest: a 65,535-byte datagram of 0xFF bytes (every word 0xFFFF,
    /// two 64 KiB blocks), and lengths around the 32-byte round and the block size.
    #[test]
    fn long_and_boundary_lengths_match_the_word_by_word_sum() {
        let (s, d) = (Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
        let ones = vec![0xFFu8; 65_535];
        assert_eq!(
            udp_ipv6_checksum(&ones, &s, &d),
            word_by_word(&ones, &s, &d)
        );
        let ramp: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [
            8, 31, 32, 33, 63, 64, 65, 4_148, 4_156, 65_535, 65_536, 65_537, 70_000,
        ] {
            let udp = &ramp[..len];
            assert_eq!(
                udp_ipv6_checksum(udp, &s, &d),
                word_by_word(udp, &s, &d),
                "length {len}"
            );
        }
    }

    proptest! {
        /// The header and payload summed apart equal the contiguous datagram.
        #[test]
        fn parts_match_the_contiguous_datagram(
            body in proptest::collection::vec(any::<u8>(), 8..5_000),
            src in any::<u128>(),
            dst in any::<u128>(),
        ) {
            let (s, d) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            let header: [u8; UDP_HEADER_LEN] = body[..8].try_into().unwrap();
            prop_assert_eq!(
                udp_ipv6_checksum_parts(&header, &body[8..], &s, &d),
                udp_ipv6_checksum(&body, &s, &d)
            );
        }

        /// Equal to the word-by-word sum for datagrams up to a jumbo frame's size.
        #[test]
        fn matches_word_by_word_up_to_9000_bytes(
            body in proptest::collection::vec(any::<u8>(), 8..9_000),
            src in any::<u128>(),
            dst in any::<u128>(),
        ) {
            let (s, d) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            prop_assert_eq!(udp_ipv6_checksum(&body, &s, &d), word_by_word(&body, &s, &d));
        }


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
