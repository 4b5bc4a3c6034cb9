//! What a switch reads and rewrites in a frame, at fixed offsets and with every length
//! checked (frames are untrusted: a malformed one is a counted drop, never a panic).
//!
//! ```text
//! 0      Ethernet II, 14 bytes (ETH_LEN)
//! 14     IPv6, 40 bytes: traffic class straddles bytes 14-15 (ECN = bits 4-5 of byte 15),
//!        next header at 20, source address 22..38, destination address 38..54
//! 54     SRH if next header = 43: (hdr_ext_len + 1) x 8 bytes (segments_left at +3)
//! then   UDP, 8 bytes: source port, destination port, length, checksum
//! then   mrc: BTH (opcode at +0, byte 4 bit 0x20 = trimmed, destination QP at +5..+8,
//!        PSN at +9..+12), MRCETH, ...
//! ```

use std::net::Ipv6Addr;

use mrc_transport::wire::{Body, PacketRepr};

use smallvec::SmallVec;

use super::buf::{FrameBuf, Head};
use mrc_frame::packet::checksum::{UDP_CHECKSUM_OFF, udp_ipv6_checksum_parts};
use mrc_frame::packet::ipv6_udp::UDP_HEADER_LEN;
use mrc_frame::packet::{ChecksumCheck, EthernetFrameRepr};
use mrc_frame::srv6::{NEXT_HEADER_ROUTING, Srh, SrhContext, UsidContainer};

/// Ethernet header bytes.
pub const ETH_LEN: usize = 14;
/// Offset of the IPv6 header.
pub const IPV6_OFF: usize = ETH_LEN;
/// Offset of the IPv6 next header field.
pub const NEXT_HEADER_OFF: usize = IPV6_OFF + 6;
/// Offset of the IPv6 source address.
pub const SRC_ADDR_OFF: usize = IPV6_OFF + 8;
/// Offset of the IPv6 destination address.
pub const DST_ADDR_OFF: usize = IPV6_OFF + 24;
/// Offset of the first extension header (or UDP).
pub const EXT_OFF: usize = IPV6_OFF + 40;
/// UDP next header value.
pub const NEXT_HEADER_UDP: u8 = 17;
/// The BTH trimmed flag: byte 4, bit 0x20 (docs/WIRE.md).
pub const BTH_TRIMMED_BIT: u8 = 0x20;
/// Offset of the flags byte holding the trimmed bit inside the BTH.
pub const BTH_TRIMMED_BYTE: usize = 4;

/// Offsets and fields a switch needs, read once per hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// IPv6 source address.
    pub src: u128,
    /// IPv6 destination address (the active segment with an SRH).
    pub dst: u128,
    /// Offset of the SRH, if there is one, bytes. (Offsets fit 16 bits: an SRH is at most
    /// 2,048 bytes. Two-byte offsets keep [`Header`] within one 64-byte cache line.)
    pub srh_off: Option<u16>,
    /// Offset of the UDP header, bytes.
    pub udp_off: u16,
    /// UDP source port (the EV's entropy).
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

impl FrameInfo {
    /// Offset of the UDP payload (the BTH).
    pub fn payload_off(&self) -> usize {
        usize::from(self.udp_off) + 8
    }
}

fn addr_at(b: &[u8], off: usize) -> Option<u128> {
    let a: [u8; 16] = b.get(off..off + 16)?.try_into().ok()?;
    Some(u128::from_be_bytes(a))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

/// Reads the fields a switch forwards on; `None` for a frame too short or not IPv6 /
/// (SRH) / UDP.
pub fn inspect(b: &[u8]) -> Option<FrameInfo> {
    if u16_at(b, 12)? != 0x86DD || b.get(IPV6_OFF)? >> 4 != 6 {
        return None;
    }
    let src = addr_at(b, SRC_ADDR_OFF)?;
    let dst = addr_at(b, DST_ADDR_OFF)?;
    let (srh_off, udp_off) = match *b.get(NEXT_HEADER_OFF)? {
        NEXT_HEADER_UDP => (None, EXT_OFF),
        NEXT_HEADER_ROUTING => {
            let len = (usize::from(*b.get(EXT_OFF + 1)?) + 1) * 8;
            if *b.get(EXT_OFF)? != NEXT_HEADER_UDP {
                return None;
            }
            (Some(EXT_OFF as u16), EXT_OFF + len)
        }
        _ => return None,
    };
    Some(FrameInfo {
        src,
        dst,
        srh_off,
        // At most EXT_OFF + 2,048: fits.
        udp_off: u16::try_from(udp_off).ok()?,
        src_port: u16_at(b, udp_off)?,
        dst_port: u16_at(b, udp_off + 2)?,
    })
}

/// What the simulator keeps beside a frame's bytes so a switch does not read them again at
/// every hop: refreshed whenever the bytes are built, injected or rewritten (SRv6 End, uSID
/// shift, trimming, corruption), so it always equals [`header`] of the current bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// The forwarding fields; `None` for a frame a switch cannot parse.
    pub info: Option<FrameInfo>,
    /// It carries an mrc data opcode.
    pub data: bool,
    /// Its BTH trimmed flag is set.
    pub trimmed: bool,
    /// ECN-capable (ECT(0), ECT(1) or CE).
    pub ect: bool,
}

/// Bytes of the UDP payload [`header`] reads: the BTH's first 12 (opcode, flags, PSN). A
/// prefix of a frame holding its headers and this many payload bytes (or all of them) has
/// the frame's [`Header`].
pub const HEADER_PAYLOAD_BYTES: usize = 12;

/// Reads the [`Header`] of frame `b`.
pub fn header(b: &[u8]) -> Header {
    let split = inspect(b)
        .map(|i| i.payload_off())
        .filter(|&off| off <= b.len())
        .unwrap_or(b.len());
    let (head, payload) = b.split_at(split);
    header_split(head, payload)
}

/// [`header`] of the frame `head` followed by `payload`, where `head` ends where the UDP
/// payload starts (or holds the whole frame, when it does not parse that far) and `payload`
/// holds the UDP payload, or at least its first [`HEADER_PAYLOAD_BYTES`].
pub fn header_split(head: &[u8], payload: &[u8]) -> Header {
    header_of(inspect(head), head, payload)
}

/// [`header_split`] of a frame whose forwarding fields `info` (what [`inspect`] returns
/// for `head`) are already known.
pub fn header_of(info: Option<FrameInfo>, head: &[u8], payload: &[u8]) -> Header {
    let (data, trimmed) = match info.and(bth_opcode_psn(payload)) {
        Some((op, _)) => (
            mrc_transport::wire::Opcode::from(op).is_data(),
            is_trimmed(payload),
        ),
        None => (false, false),
    };
    Header {
        info,
        data,
        trimmed,
        ect: ecn_bits(head) != 0,
    }
}

/// ECN codepoint (low 2 bits of the traffic class).
pub fn ecn_bits(b: &[u8]) -> u8 {
    b.get(IPV6_OFF + 1).map_or(0, |x| (x >> 4) & 3)
}

/// Sets ECN to CE (0b11). Does not change the UDP checksum (the traffic class is not in the
/// pseudo-header).
pub fn set_ce(b: &mut [u8]) {
    if let Some(x) = b.get_mut(IPV6_OFF + 1) {
        *x |= 0x30;
    }
}

/// Whether the mrc packet `udp_payload` (a frame's UDP payload) is already trimmed.
pub fn is_trimmed(udp_payload: &[u8]) -> bool {
    udp_payload
        .get(BTH_TRIMMED_BYTE)
        .is_some_and(|x| x & BTH_TRIMMED_BIT != 0)
}

/// BTH opcode and PSN of the mrc packet `udp_payload`, if it is that long.
pub fn bth_opcode_psn(udp_payload: &[u8]) -> Option<(u8, u32)> {
    let op = *udp_payload.first()?;
    let psn = u32::from_be_bytes(udp_payload.get(8..12)?.try_into().ok()?) & 0x00FF_FFFF;
    Some((op, psn))
}

/// BTH destination QP of the mrc packet `udp_payload`, if it is that long.
pub fn bth_dest_qpn(udp_payload: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(udp_payload.get(4..8)?.try_into().ok()?) & 0x00FF_FFFF)
}

/// Writes a new IPv6 destination address.
pub fn set_dst(b: &mut [u8], dst: u128) {
    if let Some(s) = b.get_mut(DST_ADDR_OFF..DST_ADDR_OFF + 16) {
        s.copy_from_slice(&dst.to_be_bytes());
    }
}

/// SRv6 End behaviour (RFC 8754 section 4.3.1.1) at the node owning the destination
/// address: decrement segments_left, copy Segment List\[segments_left\] to the destination.
/// Returns the new destination; `None` when there is no SRH, segments_left is 0 or the SRH
/// is malformed (the caller drops and counts).
pub fn srv6_end(b: &mut [u8], info: &FrameInfo) -> Option<u128> {
    let off = usize::from(info.srh_off?);
    let slice = b.get_mut(off..usize::from(info.udp_off))?;
    let mut srh = Srh::new_checked(slice, SrhContext::Received).ok()?;
    let sl = srh.segments_left();
    if sl == 0 {
        return None;
    }
    let next = srh.segment(sl - 1)?;
    srh.set_segments_left(sl - 1);
    let dst = u128::from(next);
    set_dst(b, dst);
    Some(dst)
}

/// uSID shift (RFC 9800 NEXT-C-SID) of the destination container behind a
/// `block_len_bits` block; returns the new destination.
pub fn usid_shift(b: &mut [u8], dst: u128, block_len_bits: u8) -> Option<u128> {
    let c = UsidContainer::from_address(Ipv6Addr::from(dst), block_len_bits).ok()?;
    let n = u128::from(c.shift().ok()?.address());
    set_dst(b, n);
    Some(n)
}

/// The last container a uSID destination becomes (shifted until its active uSID is the
/// last), i.e. the address the final node sees and the UDP checksum is computed over.
pub fn usid_final(dst: u128, block_len_bits: u8) -> u128 {
    let Ok(mut c) = UsidContainer::from_address(Ipv6Addr::from(dst), block_len_bits) else {
        return dst;
    };
    while !c.is_last() {
        match c.shift() {
            Ok(n) if !n.is_exhausted() => c = n,
            _ => break,
        }
    }
    u128::from(c.address())
}

/// Trims the frame in place: the mrc data payload is cut off, the BTH trimmed flag set, the
/// IPv6 payload length, UDP length and UDP checksum recomputed. `check` says whether the
/// checksum is first verified (a corrupted frame is not trimmed, so that trimming never
/// launders it). `usid_block_len_bits` is `Some` when the destination is a uSID container
/// (the checksum is then over its final form). Returns `false` (frame unchanged) when it is
/// not an intact, untrimmed mrc data packet with a payload.
pub fn trim(f: &mut FrameBuf, check: ChecksumCheck, usid_block_len_bits: Option<u8>) -> bool {
    // Parsed without the checksum, which is then verified over the final destination: for
    // a uSID container that is its last form, not the one on the wire.
    let Ok((mut repr, payload)) =
        EthernetFrameRepr::parse_split(f.head(), f.payload(), ChecksumCheck::Known)
    else {
        return false;
    };
    let on_wire_dst = repr.packet.dst_addr;
    if let Some(bits) = usid_block_len_bits {
        repr.packet.dst_addr = Ipv6Addr::from(usid_final(u128::from(on_wire_dst), bits));
    }
    if check == ChecksumCheck::Verify && !checksum_ok(f.head(), payload, &repr) {
        return false;
    }
    let Ok(pkt) = PacketRepr::parse(payload) else {
        return false;
    };
    let Body::Data(d) = pkt.body else {
        return false;
    };
    if pkt.bth.flags.trimmed || d.payload.is_empty() {
        return false;
    }
    let hdr_len = payload.len() - d.payload.len();
    let mut mrc: SmallVec<[u8; 128]> = SmallVec::from_slice(&payload[..hdr_len]);
    if let Some(x) = mrc.get_mut(BTH_TRIMMED_BYTE) {
        *x |= BTH_TRIMMED_BIT;
    }
    let mut head = Head::from_elem(0, repr.buffer_len(0));
    if repr
        .emit_headers(&mut head, &mrc, SrhContext::Received)
        .is_err()
    {
        return false;
    }
    set_dst(&mut head, u128::from(on_wire_dst));
    f.set_copy(&head, &mrc);
    true
}

/// Whether the UDP checksum of the frame `head` (ending with the UDP header, as
/// [`EthernetFrameRepr::parse_split`] accepted it) followed by the UDP payload `payload`
/// matches its datagram between `repr`'s source and final destination.
fn checksum_ok(head: &[u8], payload: &[u8], repr: &EthernetFrameRepr) -> bool {
    let Some(udp_header) = head
        .len()
        .checked_sub(UDP_HEADER_LEN)
        .and_then(|off| head.get(off..))
        .and_then(|h| <&[u8; UDP_HEADER_LEN]>::try_from(h).ok())
    else {
        return false;
    };
    let found = u16::from_be_bytes([
        udp_header[UDP_CHECKSUM_OFF],
        udp_header[UDP_CHECKSUM_OFF + 1],
    ]);
    let expected = udp_ipv6_checksum_parts(
        udp_header,
        payload,
        &repr.packet.src_addr,
        &repr.packet.final_destination(),
    );
    expected == found
}
