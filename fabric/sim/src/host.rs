//! Hosts: one NIC port per plane, transport endpoints (one [`Connection`] per flow end),
//! and the datapath part the transport leaves to us: EV -> NIC port (the EV's plane,
//! [`mrc_transport::ConnConfig::ev_planes`]) and route (UDP source port, SRH segment list
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
use mrc_frame::packet::checksum::{PayloadSum, UDP_CHECKSUM_OFF, udp_ipv6_checksum_summed};
use mrc_frame::packet::ipv6_udp::UDP_HEADER_LEN;
use mrc_frame::packet::{EthernetFrameRepr, Ipv6UdpRepr};
use mrc_frame::srv6::{LocatorBlock, SrhContext, UsidContainer};

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
    /// Cross-leaf packets carry an SRH `[spine(ev % spines), destination]` (RFC 8754),
    /// the spine among those of the plane the packet leaves on.
    Srv6,
    /// Cross-leaf packets carry a uSID container `[spine(ev % spines), destination]` as
    /// their destination address (RFC 9800), no SRH; the spine as for `Srv6`.
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
    /// The sending host's NIC port it leaves from: its plane (0 on a single fabric).
    pub port: u16,
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
    // Without an SRH or a uSID container (ECMP, or the same leaf) the headers have one
    // layout, written directly; the others go through the packet crate's emitter.
    if forwarding == Forwarding::Ecmp
        || topo.leaf_of_port(d.src, d.port) == topo.leaf_of_port(d.dst, d.port)
    {
        return build_plain_headers(topo, d, sum, peek, head);
    }
    build_headers_emitted(topo, forwarding, d, sum, peek, head)
}

/// Offset of the UDP header of a frame without an SRH.
const PLAIN_UDP_OFF: usize = frame::EXT_OFF;
/// Header bytes of a frame without an SRH: Ethernet, IPv6, UDP.
const PLAIN_HEAD_LEN: usize = PLAIN_UDP_OFF + UDP_HEADER_LEN;

/// [`build_headers`] of a datagram sent without an SRH or a uSID container: the bytes
/// [`EthernetFrameRepr::emit_headers_summed`] writes for it (RFC 8200 section 3, RFC 768;
/// traffic class `ecn & 3`, flow label 0, hop limit 64), stored field by field without
/// building the packet's representation. `None` when the UDP length does not fit 16 bits,
/// as the emitter's.
fn build_plain_headers(
    topo: &Topology,
    d: Datagram,
    sum: &PayloadSum,
    peek: &[u8],
    head: &mut Head,
) -> Option<frame::Header> {
    let Datagram {
        src,
        dst,
        ev,
        ecn,
        port,
    } = d;
    let (src_addr, dst_addr) = (topo.addr(src), topo.addr(dst));
    let sport = ev_src_port(ev);
    // Without an SRH the IPv6 payload is the UDP datagram: one length for both fields.
    let udp_len = u16::try_from(UDP_HEADER_LEN + sum.len_bytes()).ok()?;
    head.resize(PLAIN_HEAD_LEN, 0);
    let h: &mut [u8; PLAIN_HEAD_LEN] = head.as_mut_slice().try_into().ok()?;
    h[0..6].copy_from_slice(&mac_of(topo.leaf_of_port(src, port).unwrap_or(0)));
    h[6..12].copy_from_slice(&mac_of(src));
    h[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    let vtf = (6u32 << 28) | (u32::from(ecn & 3) << 20);
    h[14..18].copy_from_slice(&vtf.to_be_bytes());
    h[18..20].copy_from_slice(&udp_len.to_be_bytes());
    h[20] = frame::NEXT_HEADER_UDP;
    h[21] = 64;
    h[frame::SRC_ADDR_OFF..frame::SRC_ADDR_OFF + 16].copy_from_slice(&src_addr.to_be_bytes());
    h[frame::DST_ADDR_OFF..frame::DST_ADDR_OFF + 16].copy_from_slice(&dst_addr.to_be_bytes());
    let mut udp = [0u8; UDP_HEADER_LEN];
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&MRC_UDP_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    let checksum = udp_ipv6_checksum_summed(
        &udp,
        sum,
        &Ipv6Addr::from(src_addr),
        &Ipv6Addr::from(dst_addr),
    );
    udp[UDP_CHECKSUM_OFF..].copy_from_slice(&checksum.to_be_bytes());
    h[PLAIN_UDP_OFF..].copy_from_slice(&udp);
    let info = frame::FrameInfo {
        src: src_addr,
        dst: dst_addr,
        srh_off: None,
        udp_off: PLAIN_UDP_OFF as u16,
        src_port: sport,
        dst_port: MRC_UDP_PORT,
    };
    let hdr = frame::header_of(Some(info), head, peek);
    debug_assert_eq!(hdr, frame::header_split(head, peek));
    Some(hdr)
}

/// The IPv6 EtherType.
const ETHERTYPE_IPV6: u16 = 0x86DD;

/// [`build_headers`] through the packet crate's emitter ([`EthernetFrameRepr`]), for
/// every route (plain, SRH, uSID container).
fn build_headers_emitted(
    topo: &Topology,
    forwarding: Forwarding,
    d: Datagram,
    sum: &PayloadSum,
    peek: &[u8],
    head: &mut Head,
) -> Option<frame::Header> {
    let Datagram {
        src,
        dst,
        ev,
        ecn,
        port,
    } = d;
    let src_addr = Ipv6Addr::from(topo.addr(src));
    let dst_addr = Ipv6Addr::from(topo.addr(dst));
    let leaf = topo.leaf_of_port(src, port);
    let cross_leaf = leaf != topo.leaf_of_port(dst, port);
    let spines = topo.plane_spines(u32::from(port));
    let spine = spines.get((ev as usize) % spines.len().max(1)).copied();
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
        dst_mac: mac_of(leaf.unwrap_or(0)),
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

impl Endpoint {
    /// The NIC port a packet of this endpoint on `ev` leaves from: the EV's plane in the
    /// connection's [`mrc_transport::ConnConfig::ev_planes`] (the simulator's EVs are
    /// `0..n`, EV `i` at index `i`); port 0 without planes.
    #[inline]
    pub fn port_of_ev(&self, ev: u32) -> u16 {
        let planes = &self.conn.config().ev_planes;
        planes.get(ev as usize).map_or(0, |&q| u16::from(q))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::LinkSpec;
    use crate::topo::SpineLeafSpec;

    /// The direct writer of plain headers gives the emitter's bytes and header, for
    /// same-leaf and cross-leaf datagrams, every ECN value, EVs past the port span, and
    /// payloads from empty to too long for UDP; into a head holding stale bytes.
    #[test]
    fn plain_headers_equal_the_emitted_ones() {
        let topo = Topology::spine_leaf(&SpineLeafSpec {
            hosts: 8,
            leaves: 2,
            spines: 2,
            hosts_per_leaf: 4,
            uplinks_per_leaf: 2,
            host_link: LinkSpec::gbps(100, 500),
            fabric_link: LinkSpec::gbps(100, 500),
        })
        .expect("topology");
        let bth = [0x2au8, 0, 0xff, 0xff, 0x20, 0, 0, 7, 0, 1, 2, 3];
        let mut checked = 0;
        for (src, dst) in [(0, 1), (0, 5), (7, 2), (3, 3)] {
            for ev in [0, 1, 5, EV_PORT_SPAN + 3] {
                for ecn in 0..4 {
                    for len in [0usize, 3, 12, 4148, 65_527, 65_528] {
                        let mut payload = vec![0u8; len];
                        for (i, b) in payload.iter_mut().enumerate() {
                            *b = (i as u8).wrapping_mul(31) ^ ecn;
                        }
                        let n = len.min(bth.len());
                        payload[..n].copy_from_slice(&bth[..n]);
                        let sum = PayloadSum::of(&payload);
                        let d = Datagram {
                            src,
                            dst,
                            ev,
                            ecn,
                            port: 0,
                        };
                        let mut want = Head::from_slice(&[0xAA; 100]);
                        let mut got = Head::from_slice(&[0x55; 100]);
                        let e = build_headers_emitted(
                            &topo,
                            Forwarding::Ecmp,
                            d,
                            &sum,
                            &payload,
                            &mut want,
                        );
                        let p = build_plain_headers(&topo, d, &sum, &payload, &mut got);
                        assert_eq!(p, e, "{d:?} {len}");
                        if e.is_some() {
                            assert_eq!(got, want, "{d:?} {len}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 300);
    }
}
