//! The UDP datapath (DESIGN.md section 7): datagrams of a transport endpoint on real UDP
//! sockets through io_uring ([`UringDatapath`]) or through plain non-blocking system calls
//! ([`DirectDatapath`], for latency under progress on the caller's thread), or through an in-memory network
//! ([`FakeDatapath`]) so the engine builds and tests without sockets. Both sit behind one
//! small burst interface in the eRPC manner, [`crate::datapath::Datapath`] (re-exported here
//! for older paths): `tx_burst` sends a whole batch, `rx_burst` hands every received datagram
//! to a callback.
//!
//! Every EV socket is bound to its own UDP source port from the process-wide
//! [`PortAllocator`] (the source port is the entropy that ECMP hashes). The io_uring
//! datapath shares its EV sockets among all its connections: socket index `i` (with the
//! same sticky SRH and mark) is one unconnected socket that names each connection's peer
//! in its `sendmsg`, so a datapath talking to N peers over E EVs holds about E sockets,
//! not N x E, and the 5-tuple still differs per peer (its destination). A socket closes
//! when its last connection does. Each endpoint has one receive socket
//! (port [`DEFAULT_RX_PORT`] unless configured; not 4791, which a RoCE NIC on the host would
//! take). An IPv6 EV socket may carry a sticky Segment Routing Header (`IPV6_RTHDR`, routing
//! type 4, RFC 8754), so the EV names a segment list instead of a hash input.
//!
//! ECN: the codepoint of every datagram is set through `IP_TOS` / `IPV6_TCLASS` ancillary
//! data, and the receive socket reads it back (`IP_RECVTOS` / `IPV6_RECVTCLASS`), so CE
//! reaches [`mrc_transport::Connection::handle_datagram`].
//!
//! Batching: the datagrams of a burst are grouped per socket (order kept within a socket);
//! consecutive datagrams of one socket with the same length and ECN go out in one
//! `sendmsg` with `UDP_SEGMENT` (GSO, up to [`MAX_GSO_SEGMENTS`] segments, 64 KiB), and the
//! receive socket coalesces with `UDP_GRO`. All `sendmsg`s of a burst are one io_uring
//! submission. The grouping reorders a burst (with 16 EVs the burst's last PSN can leave
//! first): [`Datapath::reorders_bursts`] says so, the engine hands the transport one `now`
//! per burst and sets `SendConfig::burst_may_reorder`, so RACK
//! (`mrc_transport::loss::Rack::overtaken`) never lets a packet of a burst overtake
//! another of the same burst.
//!
//! EV to socket: a connection's EV list is cut into groups of `evs_per_socket` consecutive
//! EVs that share one socket ([`PathMap`]). Consecutive EVs go to one socket, so when the
//! transport walks its EVs in order (round-robin, or recycled EVs coming back in the order
//! they were sent, `mrc_transport::path::Selection`), `evs_per_socket = k` sends about `k`
//! consecutive packets on one source port (one GSO send): the packets-per-EV burst knob of
//! DESIGN.md section 7 (1 = pure per-packet spraying).

mod bufring;
mod conns;
mod direct;
mod evsock;
mod fake;
pub mod mtu;
pub mod planelist;
pub mod planewatch;
pub mod ports;
mod sock;
mod uring;

pub use direct::{DirectCounters, DirectDatapath};
pub use fake::{FakeDatapath, FakeNet, FakeVerdict};
pub use planelist::{PlaneListError, parse_plane_list};
pub use planewatch::{PLANE_WATCH_INTERVAL, PlaneWatch};
pub use ports::{DEFAULT_PORT_RANGE, PortAllocator, PortError, PortLease};
pub use sock::{read_sticky_rthdr, srh_bytes};
pub use uring::{MAX_PLANE_IPS, UdpConfig, UringDatapath};

pub(crate) use conns::ConnTable;

#[doc(no_inline)]
pub use crate::datapath::{
    ConnId, Datapath, DatapathError, DatapathStats, PathMap, RxDatagram, TxBatch, TxMeta, TxReport,
    Waker,
};

/// Default UDP port of an endpoint's receive socket (not 4791, the RoCEv2 port a RoCE NIC
/// claims).
pub const DEFAULT_RX_PORT: u16 = 4792;

/// Most segments the kernel accepts in one `UDP_SEGMENT` send (`UDP_MAX_SEGMENTS`,
/// include/linux/udp.h).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Largest payload of one GSO send, bytes (IPv4 64 KiB minus IP and UDP headers).
pub const MAX_GSO_BYTES: usize = 65_507;

/// Datagrams per send burst (`EngineConfig::tx_batch`) at most `max`, chosen so that each
/// of the `sockets` EV sockets a burst is sprayed over gets whole GSO sends: a GSO send
/// holds `MAX_GSO_BYTES / datagram_bytes` datagrams (15 of 4152 bytes, mrc's data packet at
/// 4096-byte payload), and a burst over `sockets` sockets gives each about
/// `burst / sockets`. A burst of 256 over 16 sockets gave each 16, sent as a GSO send of 15
/// and one of 1: 8.1 datagrams per send call where 240 gave 10.3, and 0.92-0.93x the CPU
/// per byte of mrc-perf `--verify` at `--burst-size 1` (docs/PERFORMANCE.md). The largest
/// multiple of `segments x sockets` up to `max`; where even one such round is above `max`,
/// each socket's share of `max` fits one send, and the burst is the largest multiple of
/// `sockets` up to `max` (`max` itself for more sockets than that). `datagram_bytes` is the
/// largest datagram of the burst; it, `sockets` and `max` count as 1 where 0.
pub fn gso_tx_batch(datagram_bytes: usize, sockets: usize, max: usize) -> usize {
    let max = max.max(1);
    let sockets = sockets.max(1);
    let segments = (MAX_GSO_BYTES / datagram_bytes.max(1)).clamp(1, MAX_GSO_SEGMENTS);
    let unit = segments.saturating_mul(sockets);
    if unit <= max {
        max / unit * unit
    } else if sockets <= max {
        max / sockets * sockets
    } else {
        max
    }
}

#[cfg(test)]
mod tests {
    use super::gso_tx_batch;

    #[test]
    fn a_burst_fills_whole_gso_sends() {
        // 4096-byte payload (4152-byte datagrams: 15 a send) over 16 sockets: 16 x 15
        assert_eq!(gso_tx_batch(4152, 16, 256), 240);
        // one socket: 17 sends of 15
        assert_eq!(gso_tx_batch(4152, 1, 256), 255);
        // 8192-byte payload: 7 a send, 16 sockets: 112 twice
        assert_eq!(gso_tx_batch(8248, 16, 256), 224);
        // 1024-byte payload: 60 a send (65507 / 1080); 16 x 60 > 256, so 16 each, one send
        assert_eq!(gso_tx_batch(1080, 16, 256), 256);
        // 64 sockets: 4 each
        assert_eq!(gso_tx_batch(4152, 64, 256), 256);
        // 5 sockets of 58 a send: 51 each (255), one send each
        assert_eq!(gso_tx_batch(1120, 5, 256), 255);
        // more sockets than the burst
        assert_eq!(gso_tx_batch(4152, 300, 256), 256);
        // a datagram above 64 KiB: no GSO, one a send
        assert_eq!(gso_tx_batch(70_000, 16, 256), 256);
        assert_eq!(gso_tx_batch(70_000, 3, 256), 255);
        // tiny datagrams (64 segments at most), small bursts, degenerate inputs
        assert_eq!(gso_tx_batch(100, 1, 256), 256);
        assert_eq!(gso_tx_batch(100, 3, 256), 192);
        assert_eq!(gso_tx_batch(100, 1, 32), 32);
        assert_eq!(gso_tx_batch(4152, 16, 10), 10);
        assert_eq!(gso_tx_batch(0, 0, 0), 1);
    }
}
