//! IPv6 (RFC 8200) + optional SRH (RFC 8754) + UDP (RFC 768) headers.
//!
//! ```text
//! offset 0        IPv6 fixed header, 40 bytes
//!  +-------+---------------+--------------------------------------+
//!  |Ver=6  | Traffic Class |          Flow Label (20)             |
//!  +-------+---------------+------+---------------+---------------+
//!  |     Payload Length (16)      | Next Header   |   Hop Limit   |
//!  +------------------------------+---------------+---------------+
//!  |                 Source Address (128)                         |
//!  |               Destination Address (128)                      |
//!  +--------------------------------------------------------------+
//! offset 40       SRH, (hdr_ext_len + 1) * 8 bytes, if Next Header = 43
//! then            UDP header, 8 bytes
//!  +------------------------------+-------------------------------+
//!  |     Source Port (16)         |    Destination Port (16)      |
//!  |     Length (16)              |    Checksum (16)              |
//!  +------------------------------+-------------------------------+
//! then            UDP payload
//! ```
//!
//! Payload Length = SRH + 8 + payload bytes; UDP Length = 8 + payload bytes; the UDP checksum
//! uses the final destination in its pseudo-header (RFC 8200 section 8.1): Segment List\[0\]
//! of the SRH when there is one, else the destination address. A computed 0 is sent as
//! 0xFFFF and a received 0 is an error (RFC 8200 section 8.1, RFC 768).

use std::net::Ipv6Addr;

use pnet_packet::ip::{IpNextHeaderProtocol, IpNextHeaderProtocols};
use pnet_packet::ipv6::Ipv6Packet;
use pnet_packet::udp::UdpPacket;

use super::PacketError;
use super::checksum::{PayloadSum, UDP_CHECKSUM_OFF};
use crate::srv6::{NEXT_HEADER_ROUTING, Srh, SrhContext, SrhRepr};

/// Whether parsing recomputes the UDP checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChecksumCheck {
    /// Recompute it and compare (any bytes from the network).
    Verify,
    /// The caller computed the checksum over these very bytes itself and knows that no
    /// covered byte changed since (a simulator delivering a frame it built and never
    /// corrupted): the sum over the whole datagram is skipped.
    Known,
}

/// Bytes of the IPv6 fixed header.
pub const IPV6_HEADER_LEN: usize = 40;
/// Bytes of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// Largest flow label (20 bits).
pub const FLOW_LABEL_MAX: u32 = 0x000f_ffff;

/// IPv6 + optional SRH + UDP header fields, in parsed form. Lengths and the checksum are not
/// fields: they are computed by [`Ipv6UdpRepr::emit`] and checked by [`Ipv6UdpRepr::parse`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ipv6UdpRepr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address as on the wire: with an SRH, the active segment (a source puts
    /// the first segment here, RFC 8754 section 4.1).
    pub dst_addr: Ipv6Addr,
    /// Traffic Class: DSCP (high 6 bits) and ECN (low 2 bits).
    pub traffic_class: u8,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// The SRH, if any; its `next_header` must be UDP.
    pub srh: Option<SrhRepr>,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

impl Ipv6UdpRepr {
    /// A packet from `src_addr` steered along `path` (travel order) with an SRH built by
    /// [`SrhRepr::for_path`]: the destination address is `path[0]`. Traffic class 0, flow
    /// label 0, hop limit 64.
    ///
    /// Errors: [`PacketError::Srh`] for an empty or over-long path.
    pub fn with_segment_path(
        src_addr: Ipv6Addr,
        path: &[Ipv6Addr],
        src_port: u16,
        dst_port: u16,
    ) -> Result<Self, PacketError> {
        let (srh, dst_addr) = SrhRepr::for_path(IpNextHeaderProtocols::Udp, path)?;
        Ok(Ipv6UdpRepr {
            src_addr,
            dst_addr,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            srh: Some(srh),
            src_port,
            dst_port,
        })
    }

    /// The final destination: Segment List\[0\] with an SRH, else `dst_addr`.
    pub fn final_destination(&self) -> Ipv6Addr {
        self.srh
            .as_ref()
            .and_then(SrhRepr::final_destination)
            .unwrap_or(self.dst_addr)
    }

    /// Bytes of all headers: 40 + SRH + 8.
    pub fn header_len(&self) -> usize {
        IPV6_HEADER_LEN + self.srh.as_ref().map_or(0, SrhRepr::buffer_len) + UDP_HEADER_LEN
    }

    /// Bytes of the whole packet with a `payload_len_bytes` payload.
    pub fn buffer_len(&self, payload_len_bytes: usize) -> usize {
        self.header_len() + payload_len_bytes
    }

    /// Write headers and `payload` at the start of `buf`; returns the packet length in bytes.
    /// The SRH is checked in [`SrhContext::Local`].
    ///
    /// Errors: [`PacketError::FlowLabelOutOfRange`], [`PacketError::SrhNextHeaderNotUdp`],
    /// [`PacketError::PayloadTooLong`], [`PacketError::BufferTooSmall`], [`PacketError::Srh`].
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, PacketError> {
        self.emit_in(buf, payload, SrhContext::Local)
    }

    /// As [`Ipv6UdpRepr::emit`] with the SRH checked in `ctx` (use
    /// [`SrhContext::Received`] to re-emit a packet as it was received, e.g. a reduced SRH).
    pub fn emit_in(
        &self,
        buf: &mut [u8],
        payload: &[u8],
        ctx: SrhContext,
    ) -> Result<usize, PacketError> {
        let total = self.checked_len(payload.len())?;
        let available = buf.len();
        let out = buf.get_mut(..total).ok_or(PacketError::BufferTooSmall {
            needed_bytes: total,
            available_bytes: available,
        })?;
        let (head, body) = out.split_at_mut(self.header_len());
        self.write_headers(head, &PayloadSum::of(payload), ctx)?;
        body.copy_from_slice(payload);
        Ok(total)
    }

    /// Writes only the headers ([`Ipv6UdpRepr::header_len`] bytes at the start of `head`)
    /// of the packet carrying `payload`: lengths and UDP checksum included, the payload
    /// itself not written. The headers followed by `payload` are byte for byte what
    /// [`Ipv6UdpRepr::emit_in`] writes (for a caller that places the payload itself).
    /// Returns the header length in bytes.
    ///
    /// Errors: those of [`Ipv6UdpRepr::emit_in`] ([`PacketError::BufferTooSmall`] when
    /// `head` is shorter than the headers).
    pub fn emit_headers(
        &self,
        head: &mut [u8],
        payload: &[u8],
        ctx: SrhContext,
    ) -> Result<usize, PacketError> {
        self.emit_headers_summed(head, &PayloadSum::of(payload), ctx)
    }

    /// [`Ipv6UdpRepr::emit_headers`] for a payload known only by its length and partial
    /// sum ([`PayloadSum::of`], computed once for a payload sent many times).
    ///
    /// Errors: those of [`Ipv6UdpRepr::emit_headers`].
    pub fn emit_headers_summed(
        &self,
        head: &mut [u8],
        payload: &PayloadSum,
        ctx: SrhContext,
    ) -> Result<usize, PacketError> {
        self.checked_len(payload.len_bytes())?;
        let len = self.header_len();
        let available = head.len();
        let head = head.get_mut(..len).ok_or(PacketError::BufferTooSmall {
            needed_bytes: len,
            available_bytes: available,
        })?;
        self.write_headers(head, payload, ctx)?;
        Ok(len)
    }

    /// The packet length with a `payload_len_bytes` payload, after the checks that need no
    /// buffer: flow label, SRH next header, IPv6 payload length.
    fn checked_len(&self, payload_len_bytes: usize) -> Result<usize, PacketError> {
        if self.flow_label > FLOW_LABEL_MAX {
            return Err(PacketError::FlowLabelOutOfRange {
                flow_label: self.flow_label,
            });
        }
        if let Some(srh) = &self.srh {
            if srh.next_header != IpNextHeaderProtocols::Udp {
                return Err(PacketError::SrhNextHeaderNotUdp {
                    next_header: srh.next_header.0,
                });
            }
        }
        let total = self.buffer_len(payload_len_bytes);
        let ip_payload_len = total - IPV6_HEADER_LEN;
        u16::try_from(ip_payload_len).map_err(|_| PacketError::PayloadTooLong {
            len_bytes: ip_payload_len,
        })?;
        Ok(total)
    }

    /// Writes the headers into `head` (exactly [`Ipv6UdpRepr::header_len`] bytes) for a
    /// payload summed as `payload`, whose length [`Ipv6UdpRepr::checked_len`] accepted.
    fn write_headers(
        &self,
        head: &mut [u8],
        payload: &PayloadSum,
        ctx: SrhContext,
    ) -> Result<(), PacketError> {
        let payload_len = payload.len_bytes();
        let ip_payload_len = head.len() - IPV6_HEADER_LEN + payload_len;
        let too_long = || PacketError::PayloadTooLong {
            len_bytes: ip_payload_len,
        };
        let ip_payload_len_u16 = u16::try_from(ip_payload_len).map_err(|_| too_long())?;
        let needed = head.len() + payload_len;
        let too_small = || PacketError::BufferTooSmall {
            needed_bytes: needed,
            available_bytes: needed,
        };
        let (ip_bytes, rest) = head.split_at_mut(IPV6_HEADER_LEN);
        let srh_len = match &self.srh {
            Some(srh) => srh.emit(rest, ctx)?,
            None => 0,
        };
        let udp_header: &mut [u8; UDP_HEADER_LEN] = rest
            .get_mut(srh_len..)
            .and_then(|u| u.try_into().ok())
            .ok_or_else(too_small)?;
        let udp_len = u16::try_from(UDP_HEADER_LEN + payload_len).map_err(|_| too_long())?;
        // Written byte by byte (RFC 8200 section 3, RFC 768): every header byte is set, as
        // pnet's setters would set them, in a few stores instead of field-by-field
        // read-modify-writes (this runs for every frame a simulated host sends).
        let ip: &mut [u8; IPV6_HEADER_LEN] = ip_bytes.try_into().map_err(|_| too_small())?;
        let vtf = (6u32 << 28)
            | (u32::from(self.traffic_class) << 20)
            | (self.flow_label & FLOW_LABEL_MAX);
        ip[0..4].copy_from_slice(&vtf.to_be_bytes());
        ip[4..6].copy_from_slice(&ip_payload_len_u16.to_be_bytes());
        ip[6] = if self.srh.is_some() {
            NEXT_HEADER_ROUTING
        } else {
            IpNextHeaderProtocols::Udp.0
        };
        ip[7] = self.hop_limit;
        ip[8..24].copy_from_slice(&self.src_addr.octets());
        ip[24..40].copy_from_slice(&self.dst_addr.octets());
        udp_header[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        udp_header[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        udp_header[4..6].copy_from_slice(&udp_len.to_be_bytes());
        udp_header[6..8].copy_from_slice(&[0, 0]);
        let checksum = super::checksum::udp_ipv6_checksum_summed(
            udp_header,
            payload,
            &self.src_addr,
            &self.final_destination(),
        );
        udp_header[UDP_CHECKSUM_OFF..].copy_from_slice(&checksum.to_be_bytes());
        Ok(())
    }

    /// Parse a packet that starts with the IPv6 header. Bytes past payload_len (e.g. Ethernet
    /// padding) are ignored. The SRH is validated in [`SrhContext::Received`].
    /// Returns the Repr and the UDP payload.
    ///
    /// Errors: [`PacketError::Truncated`], [`PacketError::NotIpv6`],
    /// [`PacketError::PayloadLenBeyondBuffer`], [`PacketError::UnsupportedNextHeader`] (only
    /// SRH then UDP, or UDP, are carried), [`PacketError::Srh`] (including a Routing header
    /// of another type: `SrhError::NotSrh`), [`PacketError::UdpLengthMismatch`],
    /// [`PacketError::UdpZeroChecksum`], [`PacketError::UdpChecksumMismatch`].
    pub fn parse(bytes: &[u8]) -> Result<(Ipv6UdpRepr, &[u8]), PacketError> {
        Self::parse_with(bytes, ChecksumCheck::Verify)
    }

    /// [`Ipv6UdpRepr::parse`], recomputing the UDP checksum only with
    /// [`ChecksumCheck::Verify`]; every other check (lengths, headers, a zero checksum) is
    /// made either way.
    ///
    /// Errors: those of [`Ipv6UdpRepr::parse`].
    pub fn parse_with(
        bytes: &[u8],
        check: ChecksumCheck,
    ) -> Result<(Ipv6UdpRepr, &[u8]), PacketError> {
        let h = Self::parse_headers(bytes, bytes.len())?;
        // The headers were checked to lie within `bytes`.
        let (head, rest) = bytes.split_at((h.udp_off + UDP_HEADER_LEN).min(bytes.len()));
        Self::finish_split(h, head, rest, check)
    }

    /// [`Ipv6UdpRepr::parse_with`] of a packet held in two parts: `head`, every header up
    /// to the end of the UDP header, and `payload`, the UDP payload and any padding after
    /// it (a frame kept as rewritable headers beside shared payload bytes). The checks and
    /// the result are those of `parse_with` on `head` followed by `payload`.
    ///
    /// Errors: those of [`Ipv6UdpRepr::parse`], and [`PacketError::SplitNotAtPayload`] when
    /// `head` does not end where the UDP payload starts.
    pub fn parse_split<'a>(
        head: &[u8],
        payload: &'a [u8],
        check: ChecksumCheck,
    ) -> Result<(Ipv6UdpRepr, &'a [u8]), PacketError> {
        let h = Self::parse_headers(head, head.len() + payload.len())?;
        Self::finish_split(h, head, payload, check)
    }

    /// The end of [`Ipv6UdpRepr::parse_split`] once the headers `h` are read from `head`:
    /// the split checked, the payload cut to the UDP length, the checksum verified.
    fn finish_split<'a>(
        h: ParsedHeaders,
        head: &[u8],
        payload: &'a [u8],
        check: ChecksumCheck,
    ) -> Result<(Ipv6UdpRepr, &'a [u8]), PacketError> {
        let payload_off = h.udp_off + UDP_HEADER_LEN;
        let udp_header: &[u8; UDP_HEADER_LEN] = head
            .get(h.udp_off..)
            .and_then(|u| u.try_into().ok())
            .ok_or(PacketError::SplitNotAtPayload {
                head_bytes: head.len(),
                payload_off,
            })?;
        // The length checks of the headers bound the UDP payload by the bytes present.
        let payload = payload.get(..h.udp_len - UDP_HEADER_LEN).unwrap_or(&[]);
        if check == ChecksumCheck::Verify {
            let expected = super::checksum::udp_ipv6_checksum_parts(
                udp_header,
                payload,
                &h.repr.src_addr,
                &h.repr.final_destination(),
            );
            if expected != h.checksum {
                return Err(PacketError::UdpChecksumMismatch {
                    expected,
                    found: h.checksum,
                });
            }
        }
        Ok((h.repr, payload))
    }

    /// Reads and checks every header of a packet of `total_len` bytes whose first bytes
    /// are `bytes` (at least its headers): all the checks of
    /// [`Ipv6UdpRepr::parse_with`] but the checksum's.
    fn parse_headers(bytes: &[u8], total_len: usize) -> Result<ParsedHeaders, PacketError> {
        let ip = Ipv6Packet::new(bytes).ok_or(PacketError::Truncated {
            header: "IPv6",
            needed_bytes: IPV6_HEADER_LEN,
            available_bytes: bytes.len(),
        })?;
        let version = ip.get_version();
        if version != 6 {
            return Err(PacketError::NotIpv6 { version });
        }
        let payload_len = ip.get_payload_length();
        let after_header = total_len.saturating_sub(IPV6_HEADER_LEN);
        if usize::from(payload_len) > after_header {
            return Err(PacketError::PayloadLenBeyondBuffer {
                payload_len_bytes: payload_len,
                available_bytes: after_header,
            });
        }
        // The IPv6 payload's bytes that `bytes` holds.
        let ip_end = (IPV6_HEADER_LEN + usize::from(payload_len)).min(bytes.len());
        let ip_payload = bytes.get(IPV6_HEADER_LEN..ip_end).unwrap_or(&[]);
        let src_addr = ip.get_source();
        let dst_addr = ip.get_destination();
        let (srh, srh_len) = match ip.get_next_header() {
            IpNextHeaderProtocols::Udp => (None, 0),
            IpNextHeaderProtocol(NEXT_HEADER_ROUTING) => {
                let view = Srh::new_checked(ip_payload, SrhContext::Received)?;
                let repr = SrhRepr::parse(&view, SrhContext::Received)?;
                if repr.next_header != IpNextHeaderProtocols::Udp {
                    return Err(PacketError::UnsupportedNextHeader {
                        next_header: repr.next_header.0,
                    });
                }
                (Some(repr), view.header_len())
            }
            other => {
                return Err(PacketError::UnsupportedNextHeader {
                    next_header: other.0,
                });
            }
        };
        // Bytes of the UDP datagram, by the IPv6 payload length.
        let udp_total = usize::from(payload_len).saturating_sub(srh_len);
        let udp_off = IPV6_HEADER_LEN + srh_len;
        let udp = UdpPacket::new(ip_payload.get(srh_len..).unwrap_or(&[])).ok_or(
            if udp_total >= UDP_HEADER_LEN {
                // The packet has the header, `bytes` (the first part of a split) does not.
                PacketError::SplitNotAtPayload {
                    head_bytes: bytes.len(),
                    payload_off: udp_off + UDP_HEADER_LEN,
                }
            } else {
                PacketError::Truncated {
                    header: "UDP",
                    needed_bytes: UDP_HEADER_LEN,
                    available_bytes: udp_total,
                }
            },
        )?;
        let udp_len = udp.get_length();
        if usize::from(udp_len) != udp_total {
            return Err(PacketError::UdpLengthMismatch {
                udp_len_bytes: udp_len,
                ip_remaining_bytes: udp_total,
            });
        }
        let checksum = udp.get_checksum();
        if checksum == 0 {
            return Err(PacketError::UdpZeroChecksum);
        }
        let repr = Ipv6UdpRepr {
            src_addr,
            dst_addr,
            traffic_class: ip.get_traffic_class(),
            flow_label: ip.get_flow_label(),
            hop_limit: ip.get_hop_limit(),
            srh,
            src_port: udp.get_source(),
            dst_port: udp.get_destination(),
        };
        Ok(ParsedHeaders {
            repr,
            udp_off,
            udp_len: udp_total,
            checksum,
        })
    }
}

/// The headers of a packet as [`Ipv6UdpRepr::parse_headers`] read them.
struct ParsedHeaders {
    repr: Ipv6UdpRepr,
    /// Offset of the UDP header from the IPv6 header's start.
    udp_off: usize,
    /// Bytes of the UDP datagram (header and payload).
    udp_len: usize,
    /// The UDP checksum field (not zero).
    checksum: u16,
}
