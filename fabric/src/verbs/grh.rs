//! The 40-byte Global Route Header that a UD receive places in front of every payload.
//!
//! A UD QP always writes 40 bytes of GRH space at the start of the receive buffer, then the
//! payload (IBTA Vol. 1, section 11.4.1.2 "post receive request"; `ibv_post_recv(3)`), so
//! every receive buffer is posted [`GRH_BYTES`] longer than the largest datagram and the
//! payload starts at offset [`GRH_BYTES`]. What the 40 bytes hold depends on the packet:
//!
//! ```text
//! RoCEv2 over IPv6 (and InfiniBand): the GRH / IPv6 header itself
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-------+---------------+---------------------------------------+
//! |Ver= 6 | Traffic Class |             Flow Label                |  0
//! +-------+-------+-------+-------+---------------+---------------+
//! |        Payload Length         |  Next Header  |   Hop Limit   |  4
//! +-------------------------------+---------------+---------------+
//! |                     SGID (source address)                     |  8..24
//! |                  DGID (destination address)                   | 24..40
//! +---------------------------------------------------------------+
//!
//! RoCEv2 over IPv4: bytes 0..20 undefined, bytes 20..40 the IPv4 header
//! +---------------------------------------------------------------+
//! |                 20 bytes, contents undefined                  |  0..20
//! +-------+-------+---------------+-------------------------------+
//! |Ver= 4 | IHL=5 |   DSCP | ECN  |          Total Length         | 20
//! |              ...              |   Source Address (32 bits)    | 32..36
//! |  Destination Address (32 bits)                                | 36..40
//! +---------------------------------------------------------------+
//! ```
//!
//! Telling the two apart (the receive completion does not say which): when the first
//! nibble is not 6, the packet is IPv4 if byte 20 starts an IPv4 header; when it is 6, the
//! bytes at 20 are believed to be an IPv4 header only if they have version 4, IHL 5 and a
//! correct header checksum (the same rule libibverbs applies in `ibv_init_ah_from_wc`).
//! An IPv4 source becomes the IPv4-mapped GID `::ffff:a.b.c.d` (RoCEv2 GID format, IBTA
//! Annex A17.4.5.1).
//!
//! Every byte here came from the network: parsing returns a typed [`GrhError`], never
//! panics.

use pnet_packet::ipv4::{Ipv4Packet, checksum as ipv4_checksum};
use std::net::{Ipv4Addr, Ipv6Addr};
use thiserror::Error;

/// Bytes of GRH space in front of every UD receive (IBTA Vol. 1, 11.4.1.2).
pub const GRH_BYTES: usize = 40;

/// Offset of the IPv4 header inside the GRH space on RoCEv2 over IPv4.
pub const IPV4_HDR_OFFSET: usize = 20;

/// Field offsets of the IPv6 form, bytes from the start of the GRH.
pub mod field {
    use std::ops::Range;
    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FL: Range<usize> = 0..4;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source GID.
    pub const SGID: Range<usize> = 8..24;
    /// Destination GID.
    pub const DGID: Range<usize> = 24..40;
}

/// The IP version a received GRH carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrhVersion {
    /// RoCEv2 over IPv4: the IPv4 header sits at bytes 20..40.
    Ipv4,
    /// RoCEv2 over IPv6 (or InfiniBand): a full GRH.
    Ipv6,
}

/// Why a receive's GRH could not be used; the datagram is dropped and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum GrhError {
    /// The completion's byte count is below the 40 GRH bytes.
    #[error("receive of {len_bytes} bytes is shorter than the 40-byte GRH")]
    Short {
        /// Bytes the completion reported.
        len_bytes: usize,
    },
    /// Neither an IPv6 GRH nor an IPv4 header at byte 20.
    #[error("GRH holds neither IPv6 (first nibble {first_nibble}) nor an IPv4 header at byte 20")]
    UnknownVersion {
        /// The first 4 bits of the GRH.
        first_nibble: u8,
    },
}

/// A parsed GRH: what the receive path needs (source GID for the reply AH, ECN for the
/// transport, flow label for diagnostics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrhRepr {
    /// Which form the 40 bytes held.
    pub version: GrhVersion,
    /// Source GID; for IPv4, the IPv4-mapped address `::ffff:a.b.c.d`.
    pub sgid: Ipv6Addr,
    /// Destination GID; for IPv4, IPv4-mapped.
    pub dgid: Ipv6Addr,
    /// IPv6 traffic class, or the IPv4 TOS byte (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits); 0 for IPv4.
    pub flow_label: u32,
    /// IPv6 hop limit or IPv4 TTL.
    pub hop_limit: u8,
}

impl GrhRepr {
    /// The 2-bit ECN codepoint (RFC 3168 section 5: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub fn ecn_bits(&self) -> u8 {
        self.traffic_class & 0b11
    }

    /// Parses the first 40 bytes of `buf`.
    ///
    /// # Errors
    /// [`GrhError::Short`] when `buf` has fewer than 40 bytes, [`GrhError::UnknownVersion`]
    /// when it is neither form.
    pub fn parse(buf: &[u8]) -> Result<GrhRepr, GrhError> {
        let grh: &[u8; GRH_BYTES] =
            buf.get(..GRH_BYTES)
                .and_then(|b| b.try_into().ok())
                .ok_or(GrhError::Short {
                    len_bytes: buf.len(),
                })?;
        let first_nibble = grh[0] >> 4;
        let v4 = &grh[IPV4_HDR_OFFSET..];
        let v4_version = v4[0] >> 4;
        let is_v4 = if first_nibble != 6 {
            if v4_version != 4 {
                return Err(GrhError::UnknownVersion { first_nibble });
            }
            true
        } else {
            v4_header_checks_out(v4)
        };
        if is_v4 {
            let src = Ipv4Addr::new(v4[12], v4[13], v4[14], v4[15]);
            let dst = Ipv4Addr::new(v4[16], v4[17], v4[18], v4[19]);
            return Ok(GrhRepr {
                version: GrhVersion::Ipv4,
                sgid: src.to_ipv6_mapped(),
                dgid: dst.to_ipv6_mapped(),
                traffic_class: v4[1],
                flow_label: 0,
                hop_limit: v4[8],
            });
        }
        let word = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        Ok(GrhRepr {
            version: GrhVersion::Ipv6,
            sgid: Ipv6Addr::from(octets16(&grh[field::SGID])),
            dgid: Ipv6Addr::from(octets16(&grh[field::DGID])),
            traffic_class: ((word >> 20) & 0xff) as u8,
            flow_label: word & 0x000f_ffff,
            hop_limit: grh[field::HOP_LIMIT],
        })
    }

    /// Writes the 40 bytes the way a RoCEv2 NIC delivers them (IPv6: a full GRH with
    /// next header 17 and the given `payload_len_bytes` + 8 UDP bytes; IPv4: 20 zero bytes
    /// then an IPv4 header with a correct checksum). Used by tests and the fake backend.
    ///
    /// A GID that is not IPv4-mapped is written as-is into an IPv4 header's addresses'
    /// low 32 bits only when `version` is IPv4 (callers pass IPv4-mapped GIDs there).
    pub fn emit(&self, payload_len_bytes: u16, out: &mut [u8; GRH_BYTES]) {
        out.fill(0);
        match self.version {
            GrhVersion::Ipv6 => {
                let word = (6u32 << 28)
                    | (u32::from(self.traffic_class) << 20)
                    | (self.flow_label & 0x000f_ffff);
                out[field::VER_TC_FL].copy_from_slice(&word.to_be_bytes());
                // RoCEv2: payload = UDP header (8) + BTH.. ; next header UDP (17).
                out[4..6].copy_from_slice(&payload_len_bytes.saturating_add(8).to_be_bytes());
                out[6] = 17;
                out[field::HOP_LIMIT] = self.hop_limit;
                out[field::SGID].copy_from_slice(&self.sgid.octets());
                out[field::DGID].copy_from_slice(&self.dgid.octets());
            }
            GrhVersion::Ipv4 => {
                let v4 = &mut out[IPV4_HDR_OFFSET..];
                v4[0] = 0x45;
                v4[1] = self.traffic_class;
                let total = payload_len_bytes.saturating_add(28);
                v4[2..4].copy_from_slice(&total.to_be_bytes());
                v4[6] = 0x40; // DF
                v4[8] = self.hop_limit;
                v4[9] = 17;
                v4[12..16].copy_from_slice(&self.sgid.octets()[12..]);
                v4[16..20].copy_from_slice(&self.dgid.octets()[12..]);
                let sum = Ipv4Packet::new(v4).map(|p| ipv4_checksum(&p)).unwrap_or(0);
                v4[10..12].copy_from_slice(&sum.to_be_bytes());
            }
        }
    }
}

/// Splits a completed receive of `byte_len` bytes (as the completion reports it, GRH
/// included) in `buf` into its GRH and payload.
///
/// # Errors
/// [`GrhError::Short`] when `byte_len < 40` (or `buf` is shorter than 40 bytes), and
/// whatever [`GrhRepr::parse`] returns. A `byte_len` past the end of `buf` is clamped to
/// `buf.len()` (the NIC never writes past the posted length).
pub fn split_receive(buf: &[u8], byte_len: usize) -> Result<(GrhRepr, &[u8]), GrhError> {
    if byte_len < GRH_BYTES {
        return Err(GrhError::Short {
            len_bytes: byte_len,
        });
    }
    let grh = GrhRepr::parse(buf)?;
    let end = byte_len.min(buf.len());
    let payload = buf.get(GRH_BYTES..end).unwrap_or(&[]);
    Ok((grh, payload))
}

fn octets16(b: &[u8]) -> [u8; 16] {
    let mut o = [0u8; 16];
    o.copy_from_slice(b);
    o
}

/// Version 4, IHL 5 and a correct header checksum.
fn v4_header_checks_out(v4: &[u8]) -> bool {
    match Ipv4Packet::new(v4) {
        Some(p) => {
            p.get_version() == 4
                && p.get_header_length() == 5
                && ipv4_checksum(&p) == p.get_checksum()
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6_repr() -> GrhRepr {
        GrhRepr {
            version: GrhVersion::Ipv6,
            sgid: "fd00::1".parse().unwrap(),
            dgid: "fd00::2".parse().unwrap(),
            traffic_class: 0x8b, // DSCP 34, ECN CE
            flow_label: 0x4_0001,
            hop_limit: 64,
        }
    }

    #[test]
    fn ipv6_grh_round_trip_and_fields() {
        let mut b = [0u8; GRH_BYTES];
        v6_repr().emit(1024, &mut b);
        assert_eq!(&b[0..4], &[0x68, 0xb4, 0x00, 0x01]);
        assert_eq!(&b[4..8], &[0x04, 0x08, 17, 64]);
        let r = GrhRepr::parse(&b).unwrap();
        assert_eq!(r, v6_repr());
        assert_eq!(r.ecn_bits(), 3);
    }

    #[test]
    fn ipv4_grh_sgid_is_ipv4_mapped() {
        let repr = GrhRepr {
            version: GrhVersion::Ipv4,
            sgid: Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped(),
            dgid: Ipv4Addr::new(10, 0, 0, 9).to_ipv6_mapped(),
            traffic_class: 0x02, // ECT(0)
            flow_label: 0,
            hop_limit: 63,
        };
        let mut b = [0u8; GRH_BYTES];
        repr.emit(100, &mut b);
        assert_eq!(&b[..20], &[0u8; 20]);
        assert_eq!(b[20], 0x45);
        assert_eq!(&b[32..36], &[10, 0, 0, 7]);
        let r = GrhRepr::parse(&b).unwrap();
        assert_eq!(r.version, GrhVersion::Ipv4);
        assert_eq!(r.sgid.to_string(), "::ffff:10.0.0.7");
        assert_eq!(r.dgid.to_string(), "::ffff:10.0.0.9");
        assert_eq!(r.ecn_bits(), 2);
        assert_eq!(r.hop_limit, 63);
    }

    #[test]
    fn ipv4_in_grh_that_starts_with_six_needs_valid_checksum() {
        let repr = GrhRepr {
            version: GrhVersion::Ipv4,
            sgid: Ipv4Addr::new(192, 168, 1, 1).to_ipv6_mapped(),
            dgid: Ipv4Addr::new(192, 168, 1, 2).to_ipv6_mapped(),
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        };
        let mut b = [0u8; GRH_BYTES];
        repr.emit(0, &mut b);
        // Garbage in the undefined first 20 bytes that looks like version 6.
        b[0] = 0x60;
        assert_eq!(GrhRepr::parse(&b).unwrap().version, GrhVersion::Ipv4);
        // Break the checksum: now the bytes are taken as an IPv6 GRH.
        b[30] ^= 0xff;
        let r = GrhRepr::parse(&b).unwrap();
        assert_eq!(r.version, GrhVersion::Ipv6);
        assert_eq!(r.sgid.octets()[..], b[8..24]);
    }

    #[test]
    fn neither_version_is_typed_error() {
        let b = [0x50u8; GRH_BYTES];
        assert_eq!(
            GrhRepr::parse(&b),
            Err(GrhError::UnknownVersion { first_nibble: 5 })
        );
    }

    #[test]
    fn short_receive_is_typed_error() {
        let b = [0u8; 64];
        assert_eq!(
            split_receive(&b, 39).unwrap_err(),
            GrhError::Short { len_bytes: 39 }
        );
        assert_eq!(
            GrhRepr::parse(&b[..12]).unwrap_err(),
            GrhError::Short { len_bytes: 12 }
        );
    }

    #[test]
    fn split_receive_offsets_payload_by_40() {
        let mut b = [0u8; 128];
        let mut g = [0u8; GRH_BYTES];
        v6_repr().emit(5, &mut g);
        b[..GRH_BYTES].copy_from_slice(&g);
        b[40..45].copy_from_slice(b"hello");
        let (grh, payload) = split_receive(&b, 45).unwrap();
        assert_eq!(grh.flow_label, 0x4_0001);
        assert_eq!(payload, b"hello");
        // Exactly a GRH, no payload.
        assert_eq!(split_receive(&b, 40).unwrap().1, b"");
        // A byte count past the buffer is clamped.
        assert_eq!(split_receive(&b, 4096).unwrap().1.len(), 88);
    }
}
