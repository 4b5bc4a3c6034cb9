//! [`PlanesDatapath`]: one endpoint over several datapaths, one per plane: a host with one
//! NIC port per plane whose datapath drives one port each (the verbs datapath: one device
//! and port per `VerbsDatapath`). It is itself a [`Datapath`]: the engine sees one endpoint
//! with [`Datapath::plane_ips`] (each plane datapath's address) and sprays a connection's
//! EVs over the planes as on the UDP datapath (docs/PLANES.md).
//!
//! - **Connections**: [`Datapath::open_conn`] cuts the [`PathMap`] by plane
//!   ([`PathMap::planes`]) and opens, on plane `p`'s datapath, a connection of plane `p`'s
//!   EVs to the peer's address on plane `p` ([`PathMap::peer_on`]).
//! - **Send**: a burst is split by plane (each datagram copied into that plane's batch; the
//!   plane datapaths copy it again into their own buffers, as verbs does anyway), then each
//!   plane's datapath sends its part.
//! - **Receive**: every plane datapath's receives, in plane order.
//! - **Wait**: the plane datapaths block on their own descriptors, so one wait cannot cover
//!   them all: [`Datapath::wait`] blocks on one plane datapath at a time, in turn, for a
//!   slice that starts at [`MIN_WAIT_SLICE_NS`] and doubles while nothing arrives, up to
//!   [`MAX_WAIT_SLICE_NS`]: under traffic a datagram on another plane waits at most one
//!   short slice, and an idle endpoint wakes about a thousand times a second.
//! - **Ports**: each plane's address is watched ([`crate::udp::PlaneWatch`]): a RoCE
//!   device's GID is an address of its network interface, which goes down with the port.

use crate::datapath::{
    ConnId, Datapath, DatapathError, DatapathStats, PathMap, RxDatagram, TxBatch, TxReport, Waker,
};
use crate::udp::{ConnTable, PLANE_WATCH_INTERVAL, PlaneWatch};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Shortest wait on one plane datapath, ns (50 us: about a spin of the engine).
pub const MIN_WAIT_SLICE_NS: u64 = 50_000;
/// Longest wait on one plane datapath, ns (1 ms).
pub const MAX_WAIT_SLICE_NS: u64 = 1_000_000;

/// Wakes every plane datapath's wait.
struct AllWakers(Vec<Arc<dyn Waker>>);

impl Waker for AllWakers {
    fn wake(&self) {
        for w in &self.0 {
            w.wake();
        }
    }
}

/// One endpoint over `D`s, one per plane (see the module docs).
pub struct PlanesDatapath<D: Datapath> {
    planes: Vec<D>,
    /// Per connection: its connection on each plane's datapath (`None` where it has no EV
    /// on the plane); per EV: its plane.
    conns: ConnTable<Vec<Option<ConnId>>, u8>,
    /// Scratch: one batch per plane.
    batches: Vec<TxBatch>,
    waker: Arc<AllWakers>,
    watch: Option<PlaneWatch>,
    /// The plane whose datapath the next wait blocks on, and the slice it blocks for.
    next_wait: usize,
    slice_ns: u64,
    /// Datagrams received at the last wait's return (a change resets the slice).
    rx_seen: u64,
}

impl<D: Datapath> std::fmt::Debug for PlanesDatapath<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanesDatapath")
            .field("plane_ips", &self.plane_ips())
            .field("conns", &self.conns.len())
            .finish()
    }
}

impl<D: Datapath> PlanesDatapath<D> {
    /// One endpoint over `planes` (plane 0 first; at least two, at most
    /// [`crate::udp::MAX_PLANE_IPS`]), whose addresses are watched when `watch` (a port
    /// whose interface goes down takes its plane out, [`Datapath::planes_up`]).
    ///
    /// # Errors
    /// [`DatapathError::BadPathMap`] for fewer than two or too many planes, two planes on
    /// one address or of two families; the watch's I/O error.
    pub fn new(planes: Vec<D>, watch: bool) -> Result<Self, DatapathError> {
        let ips: Vec<IpAddr> = planes.iter().map(|d| d.local_addr().ip()).collect();
        if !(2..=crate::udp::MAX_PLANE_IPS).contains(&ips.len()) {
            return Err(DatapathError::BadPathMap(format!(
                "{} plane datapaths (2 to {})",
                ips.len(),
                crate::udp::MAX_PLANE_IPS
            )));
        }
        for (i, ip) in ips.iter().enumerate() {
            if ips[..i].contains(ip) || ip.is_ipv6() != ips[0].is_ipv6() {
                return Err(DatapathError::BadPathMap(format!(
                    "plane {i}'s address {ip}: the planes need one address each, of one family"
                )));
            }
        }
        let watch = if watch {
            Some(
                PlaneWatch::start(ips, PLANE_WATCH_INTERVAL)
                    .map_err(DatapathError::io("plane port watch"))?,
            )
        } else {
            None
        };
        let waker = Arc::new(AllWakers(planes.iter().map(|d| d.waker()).collect()));
        Ok(PlanesDatapath {
            batches: Vec::new(),
            planes,
            conns: ConnTable::default(),
            waker,
            watch,
            next_wait: 0,
            slice_ns: MIN_WAIT_SLICE_NS,
            rx_seen: 0,
        })
    }

    /// The datapath of plane `p`.
    pub fn plane(&self, p: usize) -> Option<&D> {
        self.planes.get(p)
    }

    fn rx_total(&self) -> u64 {
        self.planes.iter().map(|d| d.stats().rx_datagrams).sum()
    }
}

impl<D: Datapath> Datapath for PlanesDatapath<D> {
    /// Plane 0's address.
    fn local_addr(&self) -> SocketAddr {
        self.planes[0].local_addr()
    }

    fn plane_ips(&self) -> Vec<IpAddr> {
        self.planes.iter().map(|d| d.local_addr().ip()).collect()
    }

    fn planes_up(&self) -> u32 {
        self.watch.as_ref().map_or(u32::MAX, |w| w.up_mask())
    }

    fn open_conn(&mut self, peer: SocketAddr, paths: &PathMap) -> Result<ConnId, DatapathError> {
        paths.check()?;
        let n = paths.plane_count();
        if n > self.planes.len() {
            return Err(DatapathError::BadPathMap(format!(
                "an EV on plane {}, and this end has {} plane(s)",
                n - 1,
                self.planes.len()
            )));
        }
        let mut subs: Vec<Option<ConnId>> = vec![None; self.planes.len()];
        let mut routes: HashMap<u32, u8> = HashMap::new();
        for p in 0..n {
            let evs: Vec<u32> = paths
                .evs
                .iter()
                .enumerate()
                .filter(|(i, _)| usize::from(paths.plane_of(*i)) == p)
                .map(|(_, &ev)| ev)
                .collect();
            if evs.is_empty() {
                continue;
            }
            for &ev in &evs {
                routes.insert(ev, p as u8);
            }
            let sub = PathMap {
                evs_per_socket: paths.evs_per_socket,
                srh: paths.srh.clone(),
                marks: paths.marks.clone(),
                ..PathMap::per_ev(evs)
            };
            match self.planes[p].open_conn(paths.peer_on(p as u8, peer), &sub) {
                Ok(id) => subs[p] = Some(id),
                Err(e) => {
                    for (q, id) in subs.iter().enumerate() {
                        if let Some(id) = id {
                            self.planes[q].close_conn(*id);
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(self.conns.insert(subs, routes))
    }

    fn close_conn(&mut self, conn: ConnId) {
        if let Some(subs) = self.conns.get(conn).cloned() {
            for (p, id) in subs.iter().enumerate() {
                if let Some(id) = id {
                    self.planes[p].close_conn(*id);
                }
            }
        }
        self.conns.remove(conn);
    }

    /// Every plane datapath's source ports of the connection, plane 0's first (what the
    /// bootstrap tells the peer; verbs' are predicted, and its receivers do not check
    /// ports, [`Datapath::reports_source_ports`]).
    fn source_ports(&self, conn: ConnId) -> Option<Vec<u16>> {
        let subs = self.conns.get(conn)?;
        let mut ports = Vec::new();
        for (p, id) in subs.iter().enumerate() {
            if let Some(id) = id {
                ports.extend(self.planes[p].source_ports(*id)?);
            }
        }
        Some(ports)
    }

    fn tx_burst(&mut self, batch: &TxBatch) -> Result<TxReport, DatapathError> {
        let mut report = TxReport::default();
        if batch.is_empty() {
            return Ok(report);
        }
        if self.batches.len() != self.planes.len()
            || self.batches[0].capacity() < batch.capacity()
            || self.batches[0].slot_bytes() < batch.slot_bytes()
        {
            self.batches = (0..self.planes.len())
                .map(|_| TxBatch::new(batch.capacity(), batch.slot_bytes()))
                .collect();
        }
        for b in &mut self.batches {
            b.clear();
        }
        let batches = &mut self.batches;
        self.conns.resolve(batch, |_, m, d, subs, &plane| {
            let p = usize::from(plane);
            if let Some(Some(sub)) = subs.get(p) {
                batches[p].push_with(*sub, |buf| d.copy_to(buf).map(|()| (m.ev, d.len(), m.ecn)));
            }
        })?;
        for (p, b) in self.batches.iter().enumerate() {
            if b.is_empty() {
                continue;
            }
            let r = self.planes[p].tx_burst(b)?;
            report.datagrams += r.datagrams;
            report.send_calls += r.send_calls;
            report.errors += r.errors;
        }
        Ok(report)
    }

    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(RxDatagram<'_>),
    ) -> Result<usize, DatapathError> {
        let mut n = 0;
        for d in &mut self.planes {
            if n >= max {
                break;
            }
            n += d.rx_burst(max - n, f)?;
        }
        Ok(n)
    }

    fn wait(&mut self, timeout_ns: u64) -> Result<(), DatapathError> {
        let rx = self.rx_total();
        if rx != self.rx_seen {
            // something arrived since the last wait: short slices again
            self.slice_ns = MIN_WAIT_SLICE_NS;
            self.rx_seen = rx;
        }
        let p = self.next_wait % self.planes.len();
        self.next_wait = self.next_wait.wrapping_add(1);
        self.planes[p].wait(timeout_ns.min(self.slice_ns))?;
        self.slice_ns = (self.slice_ns * 2).min(MAX_WAIT_SLICE_NS);
        Ok(())
    }

    fn waker(&self) -> Arc<dyn Waker> {
        self.waker.clone()
    }

    fn reorders_bursts(&self) -> bool {
        self.planes.iter().any(Datapath::reorders_bursts)
    }

    /// Plane 0's datapath's: every plane is of one kind.
    fn reports_source_ports(&self) -> bool {
        self.planes[0].reports_source_ports()
    }

    fn ev_sockets(&self) -> usize {
        self.planes.iter().map(Datapath::ev_sockets).sum()
    }

    /// The plane datapaths' counters, added.
    fn stats(&self) -> DatapathStats {
        let mut s = DatapathStats::default();
        for d in &self.planes {
            let x = d.stats();
            s.tx_datagrams += x.tx_datagrams;
            s.tx_calls += x.tx_calls;
            s.tx_errors += x.tx_errors;
            s.rx_datagrams += x.rx_datagrams;
            s.rx_calls += x.rx_calls;
            s.rx_errors += x.rx_errors;
        }
        s
    }
}
