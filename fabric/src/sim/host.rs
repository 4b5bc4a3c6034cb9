//! Hosts: one NIC port, transport endpoints (one [`Connection`] per flow end), and the
//! datapath part the transport leaves to us: EV -> route (UDP source port, SRH segment list
//! or uSID container) and the Ethernet / IPv6 / UDP framing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv6Addr;

use mrc_congestion::AnyController;
use mrc_transport::Connection;

use super::buf::Head;
use super::frame::{self, ETH_LEN};
use super::stats::ReorderTracker;
use super::topo::{Topology, USID_BLOCK, USID_BLOCK_BITS};
use crate::packet::checksum::PayloadSum;
use crate::packet::{EthernetFrameRepr, Ipv6UdpRepr};
use crate::srv6::{LocatorBlock, SrhContext, UsidContainer};

/// UDP destination port of mrc in the simulator (not 4791, DESIGN.md section 4).
pub const MRC_UDP_PORT: u16 = 4792;
/// UDP source ports carrying EVs start here (the IANA dynamic range).
pub const EV_PORT_BASE: u16 = 0xC000;
/// EVs map to `EV_PORT_BASE + (ev % EV_PORT_SPAN)`.
pub const EV_PORT_SPAN: u32 = 0x4000;

/// The UDP source port that carries `ev` (RoCEv2 style entropy).
pub fn ev_src_port(ev: u32) -> u16 {
    EV_PORT_BASE + (ev % EV_PORT_SPAN) as u16
}

/// The EV a received UDP source port stands for.
pub fn ev_of_port(port: u16) -> u32 {
    u32::from(port.wrapping_sub(EV_PORT_BASE)) % EV_PORT_SPAN
}

/// How a sender turns an EV into a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Forwarding {
    /// Switches hash the 5-tuple; the EV is the UDP source port.
    Ecmp,
    /// Cross-leaf packets carry an SRH `[spine(ev % spines), destination]` (RFC 8754).
    Srv6,
    /// Cross-leaf packets carry a uSID container `[spine(ev % spines), destination]` as
    /// their destination address (RFC 9800), no SRH.
    Usid,
}

/// MAC address of node `n`: locally administered `02:00:00:nn:nn:nn`.
pub fn mac_of(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0, b[0], b[1], b[2], b[3]]
}

/// Addressing of one datagram a host sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// Sending host.
    pub src: u32,
    /// Receiving host.
    pub dst: u32,
    /// EV chosen by the transport.
    pub ev: u32,
    /// ECN bits for the traffic class.
    pub ecn: u8,
}

/// Builds the frame for a datagram `payload` (addressing `d`) into `out` (replaced), and
/// returns its [`frame::Header`] (equal to `frame::header(out)`). Returns `None` when the
/// route cannot be expressed (e.g. a node id beyond the uSID space). The frame is
/// [`build_headers`] followed by `payload`.
pub fn build_frame(
    topo: &Topology,
    forwarding: Forwarding,
    d: Datagram,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Option<frame::Header> {
    let mut head = Head::new();
    let hdr = build_headers(
        topo,
        forwarding,
        d,
        &PayloadSum::of(payload),
        payload,
        &mut head,
    );
    out.clear();
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    hdr
}

/// Writes into `head` (replaced) the headers of the frame of a datagram (addressing `d`)
/// whose payload has the partial sum `sum` and starts with `peek` (at least its first
/// [`frame::HEADER_PAYLOAD_BYTES`], or all of it): Ethernet / IPv6 / SRH or uSID per
/// `forwarding` / UDP with its length and checksum. The payload itself is neither read nor
/// copied. Returns the frame's [`frame::Header`], or `None` when the route cannot be
/// expressed (e.g. a node id beyond the uSID space).
pub fn build_headers(
    topo: &Topology,
    forwarding: Forwarding,
    d: Datagram,
    sum: &PayloadSum,
    peek: &[u8],
    head: &mut Head,
) -> Option<frame::Header> {
    let Datagram { src, dst, ev, ecn } = d;
    let src_addr = Ipv6Addr::from(topo.addr(src));
    let dst_addr = Ipv6Addr::from(topo.addr(dst));
    let cross_leaf = topo.leaf_of(src) != topo.leaf_of(dst);
    let spine = topo
        .spines
        .get((ev as usize) % topo.spines.len().max(1))
        .copied();
    let sport = ev_src_port(ev);
    let plain = Ipv6UdpRepr {
        src_addr,
        dst_addr,
        traffic_class: ecn & 3,
        flow_label: 0,
        hop_limit: 64,
        srh: None,
        src_port: sport,
        dst_port: MRC_UDP_PORT,
    };
    let mut patch_dst = None;
    let packet = match (forwarding, cross_leaf, spine) {
        (Forwarding::Srv6, true, Some(s)) => {
            let path = [Ipv6Addr::from(topo.addr(s)), dst_addr];
            match Ipv6UdpRepr::with_segment_path(src_addr, &path, sport, MRC_UDP_PORT) {
                Ok(mut p) => {
                    p.traffic_class = ecn & 3;
                    p
                }
                Err(_) => return None,
            }
        }
        (Forwarding::Usid, true, Some(s)) => {
            let (us, ud) = (topo.usid(s)?, topo.usid(dst)?);
            let block = LocatorBlock::new(Ipv6Addr::from(USID_BLOCK), USID_BLOCK_BITS).ok()?;
            let first = UsidContainer::build(block, &[us, ud]).ok()?;
            let last = UsidContainer::build(block, &[ud]).ok()?;
            // The checksum is over the address the destination will see (the last
            // container); the wire carries the first.
            patch_dst = Some(u128::from(first.address()));
            Ipv6UdpRepr {
                dst_addr: last.address(),
                ..plain
            }
        }
        _ => plain,
    };
    let repr = EthernetFrameRepr {
        dst_mac: mac_of(topo.leaf_of(src).unwrap_or(0)),
        src_mac: mac_of(src),
        packet,
    };
    // Written in full below: the stale bytes of a reused head do not matter.
    head.resize(repr.buffer_len(0), 0);
    repr.emit_headers_summed(head, sum, SrhContext::Local)
        .ok()?;
    if let Some(d) = patch_dst {
        frame::set_dst(head, d);
    }
    debug_assert!(head.len() > ETH_LEN);
    // The fields just written, without reading them back ([`frame::header_split`] of the
    // bytes, as debug builds check): the wire destination is the one patched in or the
    // packet's (with an SRH, its active segment), the UDP header ends the head.
    let info = frame::FrameInfo {
        src: u128::from(repr.packet.src_addr),
        dst: patch_dst.unwrap_or_else(|| u128::from(repr.packet.dst_addr)),
        srh_off: repr.packet.srh.is_some().then_some(frame::EXT_OFF as u16),
        udp_off: u16::try_from(head.len().checked_sub(8)?).ok()?,
        src_port: sport,
        dst_port: MRC_UDP_PORT,
    };
    let hdr = frame::header_of(Some(info), head, peek);
    debug_assert_eq!(hdr, frame::header_split(head, peek));
    Some(hdr)
}

/// Hasher of the QPN table: Fibonacci hashing (one multiply by 2^64 / phi, Knuth, TAOCP
/// vol. 3 section 6.4) instead of SipHash, which costs more than the rest of the lookup.
/// Keys are the host's own QPNs (a received packet's QPN is only looked up, never
/// inserted), so there is no collision flooding to defend against.
#[derive(Clone, Copy, Debug, Default)]
pub struct QpnHasher(u64);

const FIB_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(FIB_MUL);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(FIB_MUL);
    }
}

/// A map keyed by QPN.
pub type QpnMap<V> = HashMap<u32, V, BuildHasherDefault<QpnHasher>>;

/// One end of a flow on a host.
#[derive(Debug)]
pub struct Endpoint {
    /// The transport connection.
    pub conn: Connection<AnyController>,
    /// Flow index.
    pub flow: u32,
    /// Whether this end sends the flow's data.
    pub is_sender: bool,
    /// The peer host.
    pub peer: u32,
    /// The peer's initial PSN (for the reorder tracker's offsets).
    pub peer_initial_psn: u32,
    /// Arrival order of the peer's data PSNs (receiver side).
    pub tracker: ReorderTracker,
}

/// A host: endpoints and the NIC's send arbitration.
#[derive(Debug, Default)]
pub struct Host {
    /// Endpoints.
    pub endpoints: Vec<Endpoint>,
    /// Endpoint index by local QPN.
    pub by_qpn: QpnMap<usize>,
    /// Next endpoint the NIC asks first (round-robin).
    pub rr: usize,
    /// The wake-up currently scheduled, ns.
    pub wake_at: Option<u64>,
    /// Frames received that failed to parse (checksum, lengths), counted.
    pub rx_bad_frames: u64,
    /// Frames for no endpoint on this host.
    pub rx_unclaimed: u64,
    /// Unclaimed frames kept when capturing (tests, raw injection), with arrival time ns.
    pub captured: Vec<(u64, Vec<u8>)>,
    /// Keep unclaimed frames in `captured`.
    pub capture: bool,
}
