//! Ethernet II framing (IEEE 802.3) around [`Ipv6UdpRepr`] packets.
//!
//! ```text
//! +-------------------+-------------------+-------------+---------------------+
//! | destination (6)   | source (6)        | EtherType(2)| IPv6 packet ...     |
//! +-------------------+-------------------+-------------+---------------------+
//!                                           0x86DD
//! ```

use pnet_packet::ethernet::{EtherTypes, EthernetPacket};

use super::checksum::PayloadSum;
use super::{ChecksumCheck, Ipv6UdpRepr, PacketError};
use crate::srv6::SrhContext;

/// Bytes of the Ethernet II header.
pub const ETHERNET_HEADER_LEN: usize = 14;

/// An Ethernet frame carrying an IPv6 + optional SRH + UDP packet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EthernetFrameRepr {
    /// Destination MAC address.
    pub dst_mac: [u8; 6],
    /// Source MAC address.
    pub src_mac: [u8; 6],
    /// The IPv6 packet.
    pub packet: Ipv6UdpRepr,
}

impl EthernetFrameRepr {
    /// Bytes of the frame (without FCS) with a `payload_len_bytes` UDP payload.
    pub fn buffer_len(&self, payload_len_bytes: usize) -> usize {
        ETHERNET_HEADER_LEN + self.packet.buffer_len(payload_len_bytes)
    }

    /// Write the frame at the start of `buf`; returns its length in bytes.
    ///
    /// Errors: [`PacketError::BufferTooSmall`] and those of [`Ipv6UdpRepr::emit`].
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, PacketError> {
        self.emit_in(buf, payload, SrhContext::Local)
    }

    /// As [`EthernetFrameRepr::emit`] with the SRH checked in `ctx` (see
    /// [`Ipv6UdpRepr::emit_in`]).
    pub fn emit_in(
        &self,
        buf: &mut [u8],
        payload: &[u8],
        ctx: SrhContext,
    ) -> Result<usize, PacketError> {
        let needed = self.buffer_len(payload.len());
        let available = buf.len();
        if available < needed {
            return Err(PacketError::BufferTooSmall {
                needed_bytes: needed,
                available_bytes: available,
            });
        }
        let head_len = self.emit_headers(buf, payload, ctx)?;
        let body = buf
            .get_mut(head_len..needed)
            .ok_or(PacketError::BufferTooSmall {
                needed_bytes: needed,
                available_bytes: available,
            })?;
        body.copy_from_slice(payload);
        Ok(needed)
    }

    /// Writes only the frame's headers ([`EthernetFrameRepr::buffer_len`]`(0)` bytes at the
    /// start of `head`) for `payload`, lengths and UDP checksum included (see
    /// [`Ipv6UdpRepr::emit_headers`]); the headers followed by `payload` are the frame
    /// [`EthernetFrameRepr::emit_in`] writes. Returns the header length in bytes.
    ///
    /// Errors: those of [`EthernetFrameRepr::emit_in`].
    pub fn emit_headers(
        &self,
        head: &mut [u8],
        payload: &[u8],
        ctx: SrhContext,
    ) -> Result<usize, PacketError> {
        self.emit_headers_summed(head, &PayloadSum::of(payload), ctx)
    }

    /// [`EthernetFrameRepr::emit_headers`] for a payload known by its length and partial
    /// sum only ([`PayloadSum::of`], computed once for a payload sent many times).
    ///
    /// Errors: those of [`EthernetFrameRepr::emit_in`].
    pub fn emit_headers_summed(
        &self,
        head: &mut [u8],
        payload: &PayloadSum,
        ctx: SrhContext,
    ) -> Result<usize, PacketError> {
        let needed = self.buffer_len(0);
        let available = head.len();
        if available < needed {
            return Err(PacketError::BufferTooSmall {
                needed_bytes: needed,
                available_bytes: available,
            });
        }
        let (eth, rest) = head.split_at_mut(ETHERNET_HEADER_LEN);
        let ip_len = self.packet.emit_headers_summed(rest, payload, ctx)?;
        self.write_ethernet(eth);
        Ok(ETHERNET_HEADER_LEN + ip_len)
    }

    /// Writes the 14-byte Ethernet header at the start of `eth` (at least that long).
    fn write_ethernet(&self, eth: &mut [u8]) {
        // Three stores, the bytes pnet's setters would write (destination, source, the
        // IPv6 EtherType 0x86DD).
        if let Some(h) = eth.get_mut(..ETHERNET_HEADER_LEN) {
            h[0..6].copy_from_slice(&self.dst_mac);
            h[6..12].copy_from_slice(&self.src_mac);
            h[12..14].copy_from_slice(&EtherTypes::Ipv6.0.to_be_bytes());
        }
    }

    /// Parse a frame; returns the Repr and the UDP payload.
    ///
    /// Errors: [`PacketError::Truncated`], [`PacketError::NotIpv6EtherType`] and those of
    /// [`Ipv6UdpRepr::parse`].
    pub fn parse(bytes: &[u8]) -> Result<(EthernetFrameRepr, &[u8]), PacketError> {
        Self::parse_with(bytes, ChecksumCheck::Verify)
    }

    /// [`EthernetFrameRepr::parse`] with the UDP checksum recomputed only for
    /// [`ChecksumCheck::Verify`] (see [`Ipv6UdpRepr::parse_with`]).
    ///
    /// Errors: those of [`EthernetFrameRepr::parse`].
    pub fn parse_with(
        bytes: &[u8],
        check: ChecksumCheck,
    ) -> Result<(EthernetFrameRepr, &[u8]), PacketError> {
        with_ethernet(bytes, |ip| Ipv6UdpRepr::parse_with(ip, check))
    }

    /// [`EthernetFrameRepr::parse_with`] of a frame held in two parts: `head`, every header
    /// up to the end of the UDP header, and `payload`, the rest (see
    /// [`Ipv6UdpRepr::parse_split`]).
    ///
    /// Errors: those of [`EthernetFrameRepr::parse`], and
    /// [`PacketError::SplitNotAtPayload`].
    pub fn parse_split<'a>(
        head: &[u8],
        payload: &'a [u8],
        check: ChecksumCheck,
    ) -> Result<(EthernetFrameRepr, &'a [u8]), PacketError> {
        with_ethernet(head, |ip| Ipv6UdpRepr::parse_split(ip, payload, check))
    }
}

/// Parses the Ethernet II header at the start of `bytes`, then the IPv6 packet after it
/// with `parse_ip`.
///
/// Errors: [`PacketError::Truncated`], [`PacketError::NotIpv6EtherType`], and those of
/// `parse_ip`.
fn with_ethernet<'a, 'b>(
    bytes: &'b [u8],
    parse_ip: impl FnOnce(&'b [u8]) -> Result<(Ipv6UdpRepr, &'a [u8]), PacketError>,
) -> Result<(EthernetFrameRepr, &'a [u8]), PacketError> {
    let (dst_mac, src_mac) = parse_ethernet(bytes)?;
    let (packet, payload) = parse_ip(bytes.get(ETHERNET_HEADER_LEN..).unwrap_or(&[]))?;
    Ok((
        EthernetFrameRepr {
            dst_mac,
            src_mac,
            packet,
        },
        payload,
    ))
}

/// The destination and source MAC addresses of an Ethernet II header carrying IPv6.
///
/// Errors: [`PacketError::Truncated`], [`PacketError::NotIpv6EtherType`].
fn parse_ethernet(bytes: &[u8]) -> Result<([u8; 6], [u8; 6]), PacketError> {
    let frame = EthernetPacket::new(bytes).ok_or(PacketError::Truncated {
        header: "Ethernet",
        needed_bytes: ETHERNET_HEADER_LEN,
        available_bytes: bytes.len(),
    })?;
    let ethertype = frame.get_ethertype();
    if ethertype != EtherTypes::Ipv6 {
        return Err(PacketError::NotIpv6EtherType {
            ethertype: ethertype.0,
        });
    }
    Ok((
        frame.get_destination().octets(),
        frame.get_source().octets(),
    ))
}
