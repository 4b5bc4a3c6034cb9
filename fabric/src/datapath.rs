//! The burst interface every datapath implements (DESIGN.md section 7), in the eRPC manner:
//! [`Datapath::tx_burst`] sends a whole [`TxBatch`], [`Datapath::rx_burst`] hands every
//! received datagram to a callback, [`Datapath::wait`] sleeps until one may be ready. The
//! io_uring UDP datapath ([`crate::udp::UringDatapath`]), the one on plain system calls
//! ([`crate::udp::DirectDatapath`]), the in-memory one
//! ([`crate::udp::FakeDatapath`]) and the RDMA UD one ([`crate::verbs`]) implement it; the
//! engine ([`crate::engine`]) drives any of them.

use crate::srv6::SrhRepr;
use crate::udp::PortError;
use mrc_transport::{Ecn, PayloadRef};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use thiserror::Error;

/// Identifies a connection's sockets in a datapath.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// Why a datapath call failed.
#[derive(Debug, Error)]
pub enum DatapathError {
    /// A socket call failed.
    #[error("{what}: {source}")]
    Io {
        /// The call.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// No source port could be allocated.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The connection id is not open.
    #[error("unknown connection {0:?}")]
    UnknownConn(ConnId),
    /// The EV is not one of the connection's.
    #[error("EV {ev} is not a path of connection {conn:?}")]
    UnknownEv {
        /// The connection.
        conn: ConnId,
        /// The EV.
        ev: u32,
    },
    /// The path map is unusable (no EVs, zero `evs_per_socket`, an SRH on IPv4, an SRH
    /// that does not emit).
    #[error("bad path map: {0}")]
    BadPathMap(String),
    /// The peer address family differs from the receive socket's.
    #[error("address family of {0} differs from the local endpoint's")]
    FamilyMismatch(SocketAddr),
}

impl DatapathError {
    pub(crate) fn io(what: &'static str) -> impl FnOnce(io::Error) -> DatapathError {
        move |source| DatapathError::Io { what, source }
    }
}

/// How a connection's EVs map to sockets (and optionally to segment lists).
#[derive(Clone, Debug)]
pub struct PathMap {
    /// The EVs, in the transport's order (`ConnConfig::evs`).
    pub evs: Vec<u32>,
    /// EVs sharing one socket: EV `evs[i]` goes out on socket `i / evs_per_socket`.
    /// 1 = one socket (source port) per EV.
    pub evs_per_socket: usize,
    /// Optional sticky SRH per socket (IPv6 only), cycled over the sockets: socket `s`
    /// carries `srh[s % srh.len()]`. Empty: no SRH.
    pub srh: Vec<SrhRepr>,
    /// Optional firewall mark per socket (`SO_MARK`, needs `CAP_NET_ADMIN`), cycled like
    /// `srh`: socket `s` marks its packets `marks[s % marks.len()]`, so a policy route
    /// (`ip -6 rule add fwmark M lookup T`) can steer them, e.g. through a table whose
    /// route adds the SRH in the kernel (`encap seg6 mode inline`). Empty: no mark.
    pub marks: Vec<u32>,
    /// The plane of each EV (`planes[i]` for `evs[i]`, as `ConnConfig::ev_planes`): the
    /// datapath sends EV `evs[i]` from its own address on that plane
    /// ([`crate::udp::UdpConfig::plane_ips`]) to the peer's (`peers`). Empty: plane 0 for
    /// all. Sockets never mix planes: the EVs of each plane are cut into groups of
    /// `evs_per_socket` on their own, the planes' groups numbered in turn
    /// ([`PathMap::socket_planes`]).
    pub planes: Vec<u8>,
    /// The peer's receive address on each plane (`peers[p]` for plane `p`). Empty: the
    /// `peer` given to [`Datapath::open_conn`] for every plane; else as long as the
    /// highest plane of `planes` + 1 at least.
    pub peers: Vec<SocketAddr>,
}

impl PathMap {
    /// One socket per EV, no SRH.
    pub fn per_ev(evs: Vec<u32>) -> Self {
        PathMap {
            evs,
            evs_per_socket: 1,
            srh: Vec::new(),
            marks: Vec::new(),
            planes: Vec::new(),
            peers: Vec::new(),
        }
    }

    /// The plane of EV index `i` (0 where `planes` is empty or too short).
    pub fn plane_of(&self, i: usize) -> u8 {
        self.planes.get(i).copied().unwrap_or(0)
    }

    /// Planes the EVs use: the highest plane + 1 (1 where `planes` is empty).
    pub fn plane_count(&self) -> usize {
        self.planes
            .iter()
            .copied()
            .max()
            .map_or(1, |p| usize::from(p) + 1)
    }

    /// EVs on each plane, by plane.
    fn evs_per_plane(&self) -> Vec<usize> {
        let mut n = vec![0usize; self.plane_count()];
        for i in 0..self.evs.len() {
            n[usize::from(self.plane_of(i))] += 1;
        }
        n
    }

    /// Number of sockets: per plane, `ceil(EVs of the plane / evs_per_socket)`, summed
    /// (`ceil(evs.len() / evs_per_socket)` on one plane).
    pub fn sockets(&self) -> usize {
        let k = self.evs_per_socket.max(1);
        self.evs_per_plane().iter().map(|n| n.div_ceil(k)).sum()
    }

    /// The plane of each socket index, in order: the planes' socket groups taken in turn
    /// (group 0 of plane 0, of plane 1, ..., then group 1 of each), so that a burst, sent
    /// socket by socket in index order, alternates the planes (with plane 0's sockets
    /// first, its packets left first in every burst, were acknowledged first and its EVs
    /// came back to the recycle FIFO first: 55/45 on loopback where 50/50 was due).
    pub fn socket_planes(&self) -> Vec<u8> {
        let k = self.evs_per_socket.max(1);
        let groups: Vec<usize> = self.evs_per_plane().iter().map(|n| n.div_ceil(k)).collect();
        let most = groups.iter().copied().max().unwrap_or(0);
        (0..most)
            .flat_map(|j| {
                groups
                    .iter()
                    .enumerate()
                    .filter(move |(_, g)| j < **g)
                    .map(|(p, _)| p as u8)
            })
            .collect()
    }

    /// The peer's receive address on `plane`: `peers[plane]`, or `peer` where `peers` is
    /// empty.
    pub fn peer_on(&self, plane: u8, peer: SocketAddr) -> SocketAddr {
        self.peers.get(usize::from(plane)).copied().unwrap_or(peer)
    }

    pub(crate) fn check(&self) -> Result<(), DatapathError> {
        if self.evs.is_empty() {
            return Err(DatapathError::BadPathMap("no EVs".into()));
        }
        if self.evs_per_socket == 0 {
            return Err(DatapathError::BadPathMap("evs_per_socket is 0".into()));
        }
        if !self.planes.is_empty() && self.planes.len() != self.evs.len() {
            return Err(DatapathError::BadPathMap(format!(
                "{} planes for {} EVs",
                self.planes.len(),
                self.evs.len()
            )));
        }
        if !self.peers.is_empty() && self.peers.len() < self.plane_count() {
            return Err(DatapathError::BadPathMap(format!(
                "EVs on {} planes and the peer's address on {}",
                self.plane_count(),
                self.peers.len()
            )));
        }
        Ok(())
    }

    /// [`PathMap::check`], and that `peer` is of the address family of `local` (the
    /// receive socket's address).
    pub(crate) fn check_peer(
        &self,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Result<(), DatapathError> {
        self.check()?;
        if let Some(p) = std::iter::once(&peer)
            .chain(&self.peers)
            .find(|p| p.is_ipv6() != local.is_ipv6())
        {
            return Err(DatapathError::FamilyMismatch(*p));
        }
        Ok(())
    }

    /// Socket index of each EV, as a lookup table from EV value (sparse EVs use a map):
    /// the `j`-th EV of plane `p` is in group `j / evs_per_socket` of its plane, and that
    /// group's socket is its place in [`PathMap::socket_planes`]' order (one plane: `i /
    /// evs_per_socket`).
    pub(crate) fn socket_of(&self) -> std::collections::HashMap<u32, usize> {
        let k = self.evs_per_socket.max(1);
        let order = self.socket_planes();
        // socket index of (plane, group)
        let mut index: std::collections::HashMap<(u8, usize), usize> =
            std::collections::HashMap::new();
        let mut next = vec![0usize; self.plane_count()];
        for (s, &p) in order.iter().enumerate() {
            index.insert((p, next[usize::from(p)]), s);
            next[usize::from(p)] += 1;
        }
        let mut seen = vec![0usize; self.plane_count()];
        self.evs
            .iter()
            .enumerate()
            .map(|(i, &ev)| {
                let p = self.plane_of(i);
                let j = seen[usize::from(p)];
                seen[usize::from(p)] += 1;
                (ev, index.get(&(p, j / k)).copied().unwrap_or(0))
            })
            .collect()
    }
}

/// Metadata of one queued datagram of a [`TxBatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxMeta {
    /// The connection.
    pub conn: ConnId,
    /// The EV (selects the socket).
    pub ev: u32,
    /// Bytes of the datagram (with a lent payload: the headers' and the payload's).
    pub len: usize,
    /// ECN codepoint to send with.
    pub ecn: Ecn,
}

/// A batch of datagrams to send: fixed-size slots in one arena (owned by the caller, lent
/// to [`Datapath::tx_burst`]). A datagram is its slot's bytes, or (gathered:
/// [`TxBatch::push_gather_with`]) its slot's header bytes followed by a payload that stays
/// in the source region, so that the kernel copies it from there once instead of the
/// transport copying it into the slot first.
#[derive(Debug)]
pub struct TxBatch {
    arena: Vec<u8>,
    slot_bytes: usize,
    meta: Vec<TxMeta>,
    /// Per datagram: bytes in its slot, and the lent payload that follows them.
    parts: Vec<(usize, Option<PayloadRef>)>,
}

/// Datagram bytes of a [`TxBatch`]: `head` (from the batch's slot), then `payload` (lent
/// from a region; none unless gathered). A datapath that sends in place
/// ([`Datapath::sends_in_place`]) hands the kernel both as two pieces of one datagram (two
/// `iovec`s) and never reads the payload itself; any other datapath reads it
/// ([`TxDatagram::copy_to`], [`TxDatagram::to_vec`]), which the engine never asks of it
/// (it lends payloads only to datapaths that send in place).
///
/// The payload stays a pointer and a length, never a Rust reference: a region shared with
/// the application (`SharedMem`) is written by the application under its lock, and the
/// kernel's copy of a lent payload runs without that lock, as a NIC's DMA read does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxDatagram<'a> {
    /// The bytes in the slot: the whole datagram, or its headers when gathered.
    pub head: &'a [u8],
    /// The lent payload, if gathered.
    pub payload: Option<PayloadRef>,
}

impl TxDatagram<'_> {
    /// Bytes of the datagram: `head.len()` plus the payload's.
    pub fn len(&self) -> usize {
        self.head.len() + self.payload_len()
    }

    /// Bytes of the lent payload (0 if none).
    pub fn payload_len(&self) -> usize {
        self.payload.map_or(0, |p| p.len())
    }

    /// The lent payload's bytes (empty if none).
    fn payload_bytes(&self) -> &[u8] {
        match self.payload {
            // SAFETY: `TxBatch::push_gather_with`'s caller keeps a lent payload valid and
            // unwritten until the batch is cleared, which this borrow of the batch
            // precedes; the engine lends only to datapaths that never call this.
            Some(p) => unsafe { p.bytes() },
            None => &[],
        }
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the datagram into the start of `out`; `None` (nothing written) when `out` is
    /// shorter than [`TxDatagram::len`].
    pub fn copy_to(&self, out: &mut [u8]) -> Option<()> {
        let out = out.get_mut(..self.len())?;
        let (h, p) = out.split_at_mut(self.head.len());
        h.copy_from_slice(self.head);
        p.copy_from_slice(self.payload_bytes());
        Some(())
    }

    /// The datagram as one vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(self.head);
        v.extend_from_slice(self.payload_bytes());
        v
    }
}

impl TxBatch {
    /// `slots` datagrams of at most `slot_bytes` bytes each.
    pub fn new(slots: usize, slot_bytes: usize) -> Self {
        TxBatch {
            arena: vec![0; slots * slot_bytes],
            slot_bytes,
            meta: Vec::with_capacity(slots),
            parts: Vec::with_capacity(slots),
        }
    }

    /// Slots in the batch.
    pub fn capacity(&self) -> usize {
        self.meta.capacity()
    }

    /// Bytes of each slot (the largest datagram the batch holds whole).
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// No datagram queued.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Every slot used.
    pub fn is_full(&self) -> bool {
        self.meta.len() * self.slot_bytes >= self.arena.len()
    }

    /// Empties the batch (and forgets every lent payload).
    pub fn clear(&mut self) {
        self.meta.clear();
        self.parts.clear();
    }

    /// Lets `fill` write the next datagram into a free slot: it returns `(ev, len, ecn)`
    /// for a datagram of `len` bytes, or `None` (slot stays free). Returns whether a
    /// datagram was queued; `false` also when the batch is full.
    pub fn push_with(
        &mut self,
        conn: ConnId,
        fill: impl FnOnce(&mut [u8]) -> Option<(u32, usize, Ecn)>,
    ) -> bool {
        // SAFETY: nothing is lent: the slot holds the whole datagram.
        unsafe {
            self.push_gather_with(conn, |slot| {
                fill(slot).map(|(ev, len, ecn)| (ev, len, ecn, None))
            })
        }
    }

    /// [`TxBatch::push_with`] for a gathered datagram: `fill` writes the datagram's first
    /// bytes (its headers) into the slot and returns `(ev, len, ecn, payload)`; the
    /// datagram is those `len` bytes followed by `payload` (none: the slot holds it all),
    /// as [`mrc_transport::Connection::poll_transmit_gather`] returns it.
    ///
    /// # Safety
    /// Every payload lent here stays valid (its region registered, its memory alive) until
    /// the batch is cleared ([`TxBatch::clear`]) or dropped, and, when the batch goes to a
    /// datapath that does not send in place ([`Datapath::sends_in_place`]; it copies the
    /// payload), unwritten until then too.
    pub unsafe fn push_gather_with(
        &mut self,
        conn: ConnId,
        fill: impl FnOnce(&mut [u8]) -> Option<(u32, usize, Ecn, Option<PayloadRef>)>,
    ) -> bool {
        if self.is_full() {
            return false;
        }
        let start = self.meta.len() * self.slot_bytes;
        let slot = &mut self.arena[start..start + self.slot_bytes];
        match fill(slot) {
            Some((ev, head, ecn, payload)) if head <= self.slot_bytes => {
                let len = head + payload.map_or(0, |p| p.len());
                self.meta.push(TxMeta { conn, ev, len, ecn });
                self.parts.push((head, payload));
                true
            }
            _ => false,
        }
    }

    /// Queues a copy of `bytes` (truncated to the slot size). Returns `false` when full.
    pub fn push(&mut self, conn: ConnId, ev: u32, ecn: Ecn, bytes: &[u8]) -> bool {
        self.push_with(conn, |slot| {
            let n = bytes.len().min(slot.len());
            slot[..n].copy_from_slice(&bytes[..n]);
            Some((ev, n, ecn))
        })
    }

    /// Datagram `i`: metadata and bytes (`TxMeta::len` of them, in two pieces).
    pub fn get(&self, i: usize) -> Option<(TxMeta, TxDatagram<'_>)> {
        let m = *self.meta.get(i)?;
        let &(head, payload) = self.parts.get(i)?;
        let start = i * self.slot_bytes;
        Some((
            m,
            TxDatagram {
                head: &self.arena[start..start + head],
                payload,
            },
        ))
    }
}

/// What one [`Datapath::tx_burst`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxReport {
    /// Datagrams handed to the network.
    pub datagrams: u64,
    /// Send calls (one per GSO group).
    pub send_calls: u64,
    /// Datagrams the kernel refused (buffer full, ICMP error pending); the transport
    /// recovers them as losses.
    pub errors: u64,
}

/// One received datagram as handed to the [`Datapath::rx_burst`] callback.
#[derive(Clone, Copy, Debug)]
pub struct RxDatagram<'a> {
    /// Source address (the peer EV socket's address).
    pub from: SocketAddr,
    /// ECN codepoint it arrived with.
    pub ecn: Ecn,
    /// The UDP payload.
    pub bytes: &'a [u8],
}

/// Counters of a datapath, 64-bit, never reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatapathStats {
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Send calls made (GSO groups).
    pub tx_calls: u64,
    /// Datagrams refused on send.
    pub tx_errors: u64,
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// Receive calls completed (a GRO receive holds several datagrams).
    pub rx_calls: u64,
    /// Receives that failed or were truncated.
    pub rx_errors: u64,
}

impl DatapathStats {
    /// Adds what one [`Datapath::tx_burst`] did to the send counters.
    pub(crate) fn count_tx(&mut self, report: &TxReport) {
        self.tx_datagrams += report.datagrams;
        self.tx_calls += report.send_calls;
        self.tx_errors += report.errors;
    }
}

/// Wakes a datapath blocked in [`Datapath::wait`] from another thread.
pub trait Waker: Send + Sync {
    /// Makes the current or next `wait` return at once.
    fn wake(&self);
}

/// The burst interface every datapath implements.
pub trait Datapath {
    /// Address of the receive socket (what peers send to).
    fn local_addr(&self) -> SocketAddr;

    /// Opens the EV sockets of a connection to the peer receive socket `peer`.
    ///
    /// # Errors
    /// [`DatapathError::BadPathMap`], [`DatapathError::FamilyMismatch`],
    /// [`DatapathError::Port`] (range exhausted), [`DatapathError::Io`].
    fn open_conn(&mut self, peer: SocketAddr, paths: &PathMap) -> Result<ConnId, DatapathError>;

    /// Closes a connection's sockets and releases their ports.
    fn close_conn(&mut self, conn: ConnId);

    /// Source ports of a connection's sockets, in socket order.
    fn source_ports(&self, conn: ConnId) -> Option<Vec<u16>>;

    /// Sends every datagram of `batch` (per-datagram refusals are counted, not fatal).
    ///
    /// # Errors
    /// [`DatapathError::UnknownConn`] / [`DatapathError::UnknownEv`] for a datagram that
    /// names neither (nothing of the batch was sent); [`DatapathError::Io`] when the
    /// submission itself fails.
    fn tx_burst(&mut self, batch: &TxBatch) -> Result<TxReport, DatapathError>;

    /// Hands every datagram received so far (at most about `max` of them) to `f`, without
    /// blocking. Returns the number handed over.
    ///
    /// # Errors
    /// [`DatapathError::Io`] when the receive machinery fails.
    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(RxDatagram<'_>),
    ) -> Result<usize, DatapathError>;

    /// Blocks until a datagram may be ready, the [`Waker`] fires, or `timeout_ns` passed.
    ///
    /// # Errors
    /// [`DatapathError::Io`].
    fn wait(&mut self, timeout_ns: u64) -> Result<(), DatapathError>;

    /// A handle other threads use to end a [`Datapath::wait`] early.
    fn waker(&self) -> Arc<dyn Waker>;

    /// Whether [`Datapath::tx_burst`] may emit a batch in another order than the batch's
    /// (the engine then sets `SendConfig::burst_may_reorder` on its connections, so RACK
    /// does not take the reordering for loss). Default false.
    fn reorders_bursts(&self) -> bool {
        false
    }

    /// Whether [`Datapath::tx_burst`] hands a gathered datagram's lent payload to the
    /// kernel by address without reading it (the UDP datapaths: two `iovec`s), so that the
    /// engine may lend payloads ([`TxBatch::push_gather_with`]). Default false: the engine
    /// then writes every datagram whole into the batch.
    fn sends_in_place(&self) -> bool {
        false
    }

    /// The IP the peer of `conn` sends from, as [`RxDatagram::from`] will show it; the
    /// engine's source filter accepts only that IP for the QP. Default `None`: the IP of
    /// the peer address given to [`Datapath::open_conn`].
    fn peer_source_ip(&self, conn: ConnId) -> Option<std::net::IpAddr> {
        let _ = conn;
        None
    }

    /// Whether [`RxDatagram::from`] carries the sender's real source port (UDP: yes; verbs:
    /// no, its port is RoCEv2's fixed 4791 and only the IP, from the source GID, means
    /// anything). The engine checks a QP's peer ports only where it does. Default true.
    fn reports_source_ports(&self) -> bool {
        true
    }

    /// EV sockets open now (the io_uring UDP datapath shares them among its
    /// connections: about the EVs of its widest connection, not connections x EVs).
    /// Default 0, for a datapath without sockets (verbs' UD QPs are shared as well).
    fn ev_sockets(&self) -> usize {
        0
    }

    /// This end's address on each plane, plane 0 first: the IPs its EV sockets send from
    /// and its receive socket takes datagrams on (a host with one NIC port per plane,
    /// [`crate::udp::UdpConfig::plane_ips`]). Its length is the number of planes a
    /// connection of this datapath may spread its EVs over ([`PathMap::planes`]). Default:
    /// one plane, [`Datapath::local_addr`]'s IP.
    fn plane_ips(&self) -> Vec<std::net::IpAddr> {
        vec![self.local_addr().ip()]
    }

    /// Which of [`Datapath::plane_ips`]' planes have their local port up: bit `i` for
    /// plane `i` (the UDP datapaths on two or more planes watch each plane's interface,
    /// [`crate::udp::PlaneWatch`]). The engine takes a plane whose bit clears out of
    /// every connection and tells the peers (`Connection::set_local_plane`). Default: all
    /// up.
    fn planes_up(&self) -> u32 {
        u32::MAX
    }

    /// Counters.
    fn stats(&self) -> DatapathStats;
}

/// A boxed datapath is one (e.g. `Box<dyn Datapath + Send>`, so one
/// [`crate::engine::Worker`] type serves a datapath chosen at run time): every call goes to
/// the box's content.
impl<D: Datapath + ?Sized> Datapath for Box<D> {
    fn local_addr(&self) -> SocketAddr {
        (**self).local_addr()
    }
    fn open_conn(&mut self, peer: SocketAddr, paths: &PathMap) -> Result<ConnId, DatapathError> {
        (**self).open_conn(peer, paths)
    }
    fn close_conn(&mut self, conn: ConnId) {
        (**self).close_conn(conn)
    }
    fn source_ports(&self, conn: ConnId) -> Option<Vec<u16>> {
        (**self).source_ports(conn)
    }
    fn tx_burst(&mut self, batch: &TxBatch) -> Result<TxReport, DatapathError> {
        (**self).tx_burst(batch)
    }
    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(RxDatagram<'_>),
    ) -> Result<usize, DatapathError> {
        (**self).rx_burst(max, f)
    }
    fn wait(&mut self, timeout_ns: u64) -> Result<(), DatapathError> {
        (**self).wait(timeout_ns)
    }
    fn waker(&self) -> Arc<dyn Waker> {
        (**self).waker()
    }
    fn reorders_bursts(&self) -> bool {
        (**self).reorders_bursts()
    }
    fn sends_in_place(&self) -> bool {
        (**self).sends_in_place()
    }
    fn peer_source_ip(&self, conn: ConnId) -> Option<std::net::IpAddr> {
        (**self).peer_source_ip(conn)
    }
    fn reports_source_ports(&self) -> bool {
        (**self).reports_source_ports()
    }
    fn ev_sockets(&self) -> usize {
        (**self).ev_sockets()
    }
    fn plane_ips(&self) -> Vec<std::net::IpAddr> {
        (**self).plane_ips()
    }
    fn planes_up(&self) -> u32 {
        (**self).planes_up()
    }
    fn stats(&self) -> DatapathStats {
        (**self).stats()
    }
}
