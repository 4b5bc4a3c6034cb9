//! [`VerbsDatapath`]: the burst [`Datapath`] on RDMA UD QPs (feature `verbs`).
//!
//! One device port, one PD, a send CQ and a receive CQ (with a completion channel for
//! [`Datapath::wait`]), `qps` UD QPs sharing one Q_Key, one registered send region and one
//! registered receive region cut into slots ([`SlotPool`]):
//!
//! - send: a burst's datagrams are grouped per QP (order kept within a QP), copied into send
//!   slots, and posted as one WR chain per QP with selective signalling ([`SendQueue`]);
//!   send completions, reaped at every burst, give the slots back.
//! - receive: every QP keeps `rq_depth` buffers of `40 + max_datagram_bytes` posted; a
//!   completion's GRH gives the source GID and the ECN bits ([`grh`](super::grh)), the
//!   payload at offset 40 goes to the callback, and the buffer is reposted in the same burst
//!   (one chain per QP); a receive shorter than the GRH is dropped and counted.
//! - EV -> route: EV index `i` of a connection (in [`PathMap::evs`] order, grouped by
//!   `evs_per_socket`) leaves on local QP `group % qps` to the peer's QPN
//!   `qpns[group % qpns.len()]`, through the AH of (peer, EV flow label) (see
//!   [`sport`](super::sport) for the UDP source port that results).
//!
//! Addresses: the trait speaks `SocketAddr`; here the IP part is the GID (IPv4-mapped GIDs
//! as IPv4) and the port is the RoCEv2 port 4791. A peer's QPNs and Q_Key are not in a
//! `SocketAddr`: register its [`EndpointAddr`] (exchanged out of band) with
//! [`VerbsDatapath::add_peer`] before [`Datapath::open_conn`].

use super::addr::EndpointAddr;
use super::batch::{PlannedWr, SendQueue, WrId};
use super::config::{VerbsConfig, VerbsError};
use super::grh::{GRH_BYTES, GrhError, split_receive};
use super::nic::{Nic, PortInfo, RecvWr, SendWr, WC_SUCCESS, WC_WR_FLUSH_ERR, Wc};
use super::pool::{SlotId, SlotPool};
use super::sport::{ROCEV2_DPORT, flow_label_for_ev, flow_label_to_udp_sport};
#[cfg(feature = "verbs")]
use super::sys::Device;
use crate::datapath::{
    ConnId, Datapath, DatapathError, DatapathStats, PathMap, RxDatagram, TxBatch, TxReport, Waker,
};
use crate::udp::ConnTable;
use mrc_transport::Ecn;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

/// Completions reaped per poll call.
const POLL_BATCH: usize = 64;

/// Verbs-specific counters (on top of [`DatapathStats`]), 64-bit, never reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerbsStats {
    /// Datagrams refused: no free send slot.
    pub tx_no_buffer: u64,
    /// Datagrams refused: the QP's send queue was full.
    pub tx_sq_full: u64,
    /// Datagrams refused: larger than `max_datagram_bytes`.
    pub tx_oversize: u64,
    /// WRs the provider refused at post time.
    pub tx_post_refused: u64,
    /// Send completions with an error status.
    pub tx_error_completions: u64,
    /// Signalled send WRs posted.
    pub tx_signalled: u64,
    /// Receives dropped: shorter than the 40-byte GRH.
    pub rx_short_grh: u64,
    /// Receives dropped: GRH neither IPv4 nor IPv6.
    pub rx_bad_grh: u64,
    /// Receive completions with an error status (flushes included).
    pub rx_error_completions: u64,
    /// Completions whose `wr_id` names no posted buffer (never expected).
    pub bad_wr_id: u64,
    /// Receive buffers reposted.
    pub rx_reposted: u64,
    /// Datagrams not posted because their QP was in the error state (waiting for its
    /// flushes, then a reset).
    pub tx_qp_error: u64,
    /// QPs brought back from the error state (RESET, INIT, RTR, RTS: [`Nic::reset_qp`]).
    pub qp_resets: u64,
    /// QP resets the provider refused (the QP stays out; the next pass tries again).
    pub qp_reset_errors: u64,
}

/// Where [`Datapath::open_conn`] finds a peer's [`EndpointAddr`]: a table from the IP the
/// caller will pass (normally the peer's GID as an IP; any IP that names the peer, such as
/// its control-connection address, works) to the address. Cheap to clone and shareable
/// with other threads, so peers can be added after the datapath moved into an engine.
#[derive(Clone, Debug, Default)]
pub struct PeerBook {
    inner: Arc<Mutex<HashMap<Ipv6Addr, EndpointAddr>>>,
}

impl PeerBook {
    /// Registers `addr` under `ip` (replacing an earlier entry).
    pub fn insert(&self, ip: IpAddr, addr: EndpointAddr) {
        self.lock().insert(ip_to_gid(ip), addr);
    }

    /// The address registered under `ip`.
    pub fn get(&self, ip: IpAddr) -> Option<EndpointAddr> {
        self.lock().get(&ip_to_gid(ip)).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Ipv6Addr, EndpointAddr>> {
        // The map stays consistent whatever panicked while holding it: keep using it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Clone, Copy)]
struct Route {
    qp: u32,
    ah: usize,
    remote_qpn: u32,
    remote_qkey: u32,
}

/// A datagram of a burst bound for one QP: its index in the batch and its route, found
/// once per datagram (the one lookup of its connection and EV).
#[derive(Clone, Copy)]
struct Queued {
    index: usize,
    route: Route,
}

struct VConn {
    /// Predicted UDP source port per QP group (flow-label NICs).
    ports: Vec<u16>,
    /// The peer's GID as an IP: where its datagrams come from ([`gid_to_ip`] of a GRH's
    /// source GID), which may differ from the IP `open_conn` was given (the control
    /// connection's, looked up in the [`PeerBook`]).
    source_ip: IpAddr,
}

/// The RDMA UD datapath over a [`Nic`]: the libibverbs `Device` (`VerbsDatapath::open`,
/// feature `verbs`) or a [`super::FakeNic`] ([`VerbsDatapath::with_nic`]).
pub struct VerbsDatapath<N: Nic> {
    cfg: VerbsConfig,
    dev: N,
    port: PortInfo,
    local: EndpointAddr,
    send_region: usize,
    send_pool: SlotPool,
    recv_region: usize,
    recv_pool: SlotPool,
    sqs: Vec<SendQueue>,
    /// Receive buffers posted per QP.
    rq_posted: Vec<u32>,
    /// Per QP: in the error state (an error completion came back). Nothing is posted to
    /// it until every WR it holds came back flushed; then it is reset
    /// ([`VerbsDatapath::recover_qps`]).
    qp_error: Vec<bool>,
    peers: PeerBook,
    ahs: HashMap<(Ipv6Addr, u32), usize>,
    conns: ConnTable<VConn, Route>,
    stats: DatapathStats,
    vstats: VerbsStats,
    // Scratch, reused between bursts.
    wcs: Vec<Wc>,
    pending_rx: Vec<Wc>,
    per_qp: Vec<Vec<Queued>>,
    wr_ids: Vec<WrId>,
    plan: Vec<PlannedWr>,
    send_wrs: Vec<SendWr>,
    reposts: Vec<Vec<RecvWr>>,
}

impl<N: Nic> std::fmt::Debug for VerbsDatapath<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDatapath")
            .field("device", &self.cfg.device)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// A GID as the IP address it is on RoCEv2: IPv4-mapped GIDs become IPv4.
pub fn gid_to_ip(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

/// The GID of an IP address on RoCEv2: IPv4 becomes `::ffff:a.b.c.d`.
pub fn ip_to_gid(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn io_err(what: &'static str, kind: io::ErrorKind) -> DatapathError {
    DatapathError::Io {
        what,
        source: io::Error::from(kind),
    }
}

/// Checks `cfg` as `VerbsDatapath::open` does.
fn check_config(cfg: &VerbsConfig) -> Result<(), VerbsError> {
    cfg.check()?;
    if u64::from(cfg.send_slots) < u64::from(cfg.qps) * u64::from(cfg.signal_every) {
        return Err(VerbsError::BadConfig(format!(
            "send_slots {} below qps * signal_every = {}",
            cfg.send_slots,
            u64::from(cfg.qps) * u64::from(cfg.signal_every)
        )));
    }
    Ok(())
}

#[cfg(feature = "verbs")]
impl VerbsDatapath<Device> {
    /// Opens `cfg.device` and sets everything up: PD, CQs, `cfg.qps` UD QPs in RTS, the
    /// send and receive regions, and every receive buffer posted.
    ///
    /// # Errors
    /// [`VerbsError::BadConfig`] (also when `send_slots < qps * signal_every`, which could
    /// starve sends behind unsignalled tails), [`VerbsError::NoDevices`],
    /// [`VerbsError::DeviceNotFound`], port/GID/MTU errors, [`VerbsError::Call`].
    pub fn open(cfg: VerbsConfig) -> Result<VerbsDatapath<Device>, VerbsError> {
        check_config(&cfg)?;
        let (dev, port, gid) = Device::open(&cfg)?;
        VerbsDatapath::with_nic(dev, port, gid, cfg)
    }
}

impl<N: Nic> VerbsDatapath<N> {
    /// Sets the datapath up on an opened NIC whose port is `port` and GID `gid`: `cfg.qps`
    /// UD QPs, the send and receive regions, every receive buffer posted.
    ///
    /// # Errors
    /// [`VerbsError::BadConfig`], [`VerbsError::MtuTooSmall`], what the NIC's calls return.
    pub fn with_nic(
        mut dev: N,
        port: PortInfo,
        gid: Ipv6Addr,
        cfg: VerbsConfig,
    ) -> Result<VerbsDatapath<N>, VerbsError> {
        check_config(&cfg)?;
        if cfg.max_datagram_bytes > port.active_mtu_bytes {
            return Err(VerbsError::MtuTooSmall {
                asked: cfg.max_datagram_bytes,
                mtu_bytes: port.active_mtu_bytes,
            });
        }
        let send_pool = SlotPool::new(cfg.send_slots, cfg.max_datagram_bytes as usize)?;
        let recv_slots = cfg.qps.checked_mul(cfg.rq_depth).ok_or_else(|| {
            VerbsError::BadConfig(format!("qps {} * rq_depth {}", cfg.qps, cfg.rq_depth))
        })?;
        let mut recv_pool = SlotPool::new(recv_slots, GRH_BYTES + cfg.max_datagram_bytes as usize)?;
        let send_region = dev.register(send_pool.region_bytes())?;
        let recv_region = dev.register(recv_pool.region_bytes())?;
        let mut qpns = Vec::with_capacity(cfg.qps as usize);
        let mut sqs = Vec::with_capacity(cfg.qps as usize);
        for _ in 0..cfg.qps {
            qpns.push(dev.create_ud_qp(cfg.sq_depth, cfg.rq_depth, cfg.qkey)?);
            sqs.push(SendQueue::new(cfg.sq_depth, cfg.signal_every)?);
        }
        // Post every receive buffer: rq_depth per QP.
        let slot_bytes = recv_pool.slot_bytes() as u32;
        for qp in 0..cfg.qps {
            let mut wrs = Vec::with_capacity(cfg.rq_depth as usize);
            for _ in 0..cfg.rq_depth {
                let s = recv_pool.alloc()?;
                wrs.push(RecvWr {
                    wr_id: WrId::new(qp, s.0).0,
                    region: recv_region,
                    offset: recv_pool.offset_of(s)?,
                    len: slot_bytes,
                });
            }
            dev.post_recv(qp as usize, &wrs)
                .map_err(|e| VerbsError::Call {
                    call: "ibv_post_recv",
                    source: e.source,
                })?;
        }
        let local = EndpointAddr {
            gid,
            lid: port.lid,
            qkey: cfg.qkey,
            qpns,
        };
        let n = cfg.qps as usize;
        Ok(VerbsDatapath {
            rq_posted: vec![cfg.rq_depth; n],
            qp_error: vec![false; n],
            cfg,
            dev,
            port,
            local,
            send_region,
            send_pool,
            recv_region,
            recv_pool,
            sqs,
            peers: PeerBook::default(),
            ahs: HashMap::new(),
            conns: ConnTable::default(),
            stats: DatapathStats::default(),
            vstats: VerbsStats::default(),
            wcs: Vec::with_capacity(POLL_BATCH),
            pending_rx: Vec::new(),
            per_qp: vec![Vec::new(); n],
            wr_ids: Vec::new(),
            plan: Vec::new(),
            send_wrs: Vec::new(),
            reposts: vec![Vec::new(); n],
        })
    }

    /// This endpoint's address (GID, LID, Q_Key, one QPN per QP), to send to the peer.
    pub fn local_endpoint(&self) -> &EndpointAddr {
        &self.local
    }

    /// Whether the port is Ethernet (RoCE) rather than InfiniBand.
    pub fn is_roce(&self) -> bool {
        self.port.ethernet
    }

    /// What the port query found when the device was opened (link layer, active MTU,
    /// LID).
    pub fn port(&self) -> PortInfo {
        self.port
    }

    /// Registers a peer's endpoint address (from the out-of-band exchange) under its GID:
    /// `open_conn` to that GID as an IP uses it. A later call for the same GID replaces it.
    pub fn add_peer(&mut self, peer: EndpointAddr) {
        self.peers.insert(gid_to_ip(peer.gid), peer);
    }

    /// The peer table, to add peers (under any IP) from another thread.
    pub fn peer_book(&self) -> PeerBook {
        self.peers.clone()
    }

    /// Verbs counters.
    pub fn verbs_stats(&self) -> VerbsStats {
        self.vstats
    }

    /// The NIC (for its own counters, e.g. [`super::FakeNic::stats`]).
    pub fn nic(&self) -> &N {
        &self.dev
    }

    /// Books of the send buffer pool (slots held by posted, unretired sends).
    pub fn send_pool(&self) -> &SlotPool {
        &self.send_pool
    }

    /// Books of the receive buffer pool (slots posted as receive buffers).
    pub fn recv_pool(&self) -> &SlotPool {
        &self.recv_pool
    }

    /// The configuration in force.
    pub fn config(&self) -> &VerbsConfig {
        &self.cfg
    }

    fn ah_for(&mut self, gid: Ipv6Addr, lid: u16, flow_label: u32) -> Result<usize, VerbsError> {
        if let Some(&a) = self.ahs.get(&(gid, flow_label)) {
            return Ok(a);
        }
        let a = self.dev.create_ah(
            gid,
            lid,
            flow_label,
            self.cfg.traffic_class,
            self.cfg.hop_limit,
        )?;
        self.ahs.insert((gid, flow_label), a);
        Ok(a)
    }

    /// Reaps send completions: retires WRs, frees their slots.
    fn reap_send(&mut self) -> Result<(), VerbsError> {
        loop {
            self.wcs.clear();
            let n = self.dev.poll_send(POLL_BATCH, &mut self.wcs)?;
            for wc in &self.wcs {
                let id = WrId(wc.wr_id);
                if wc.status != 0 {
                    self.vstats.tx_error_completions += 1;
                    self.stats.tx_errors += 1;
                    // A UD send completes in error only when its QP failed (a local
                    // error; rdma_rxe: its port was down): the QP is in the error state.
                    if let Some(e) = self.qp_error.get_mut(id.qp_index() as usize) {
                        *e = true;
                    }
                }
                let pool = &mut self.send_pool;
                let bad = &mut self.vstats.bad_wr_id;
                match self.sqs.get_mut(id.qp_index() as usize) {
                    Some(sq) => {
                        if sq
                            .on_completion(id, |w| {
                                if pool.free(SlotId(w.slot())).is_err() {
                                    *bad += 1;
                                }
                            })
                            .is_err()
                        {
                            *bad += 1;
                        }
                    }
                    None => *bad += 1,
                }
            }
            if n < POLL_BATCH {
                return Ok(());
            }
        }
    }

    /// Tops every QP's receive queue back up to `rq_depth` from free receive slots
    /// (buffers lost to failed reposts or flushes come back here).
    fn top_up(&mut self) {
        let slot_bytes = self.recv_pool.slot_bytes() as u32;
        for qp in 0..self.sqs.len() {
            if self.qp_error[qp] {
                continue;
            }
            while self.rq_posted[qp] + (self.reposts[qp].len() as u32) < self.cfg.rq_depth {
                let Ok(s) = self.recv_pool.alloc() else { break };
                let Ok(offset) = self.recv_pool.offset_of(s) else {
                    break;
                };
                self.reposts[qp].push(RecvWr {
                    wr_id: WrId::new(qp as u32, s.0).0,
                    region: self.recv_region,
                    offset,
                    len: slot_bytes,
                });
            }
        }
    }

    /// Posts the collected receive buffers, one chain per QP.
    fn flush_reposts(&mut self) {
        for qp in 0..self.reposts.len() {
            if self.reposts[qp].is_empty() {
                continue;
            }
            if self.qp_error[qp] {
                // a QP in error would only flush them: back to the pool until its reset
                for w in self.reposts[qp].drain(..) {
                    let _ = self.recv_pool.free(SlotId(WrId(w.wr_id).slot()));
                }
                continue;
            }
            let wrs = std::mem::take(&mut self.reposts[qp]);
            let accepted = match self.dev.post_recv(qp, &wrs) {
                Ok(()) => wrs.len(),
                Err(e) => e.accepted,
            };
            self.rq_posted[qp] += accepted as u32;
            self.vstats.rx_reposted += accepted as u64;
            for w in &wrs[accepted..] {
                // Not posted: back to the pool, the next top-up retries.
                let _ = self.recv_pool.free(SlotId(WrId(w.wr_id).slot()));
            }
            let mut wrs = wrs;
            wrs.clear();
            self.reposts[qp] = wrs;
        }
    }
}

impl<N: Nic> VerbsDatapath<N> {
    /// Resets each QP in the error state whose WRs have all come back (no send
    /// outstanding, no receive posted): RESET, INIT, RTR, RTS ([`Nic::reset_qp`]), after
    /// which [`VerbsDatapath::top_up`] gives it receive buffers again. A UD QP in error
    /// stays there for good otherwise: on rdma_rxe a send posted while the port was down
    /// did that, and the plane never came back after the port did (the lab's `two-planes`
    /// part).
    fn recover_qps(&mut self) {
        for qp in 0..self.qp_error.len() {
            if !self.qp_error[qp] || self.sqs[qp].outstanding() > 0 || self.rq_posted[qp] > 0 {
                continue;
            }
            match self.dev.reset_qp(qp, self.cfg.qkey) {
                Ok(()) => {
                    self.qp_error[qp] = false;
                    self.vstats.qp_resets += 1;
                }
                Err(_) => self.vstats.qp_reset_errors += 1,
            }
        }
    }
}

impl<N: Nic> Datapath for VerbsDatapath<N> {
    fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(gid_to_ip(self.local.gid), ROCEV2_DPORT)
    }

    fn open_conn(&mut self, peer: SocketAddr, paths: &PathMap) -> Result<ConnId, DatapathError> {
        paths.check()?;
        if !paths.srh.is_empty() {
            return Err(DatapathError::BadPathMap(
                "a segment list per EV needs the udp or raw datapath, not verbs".into(),
            ));
        }
        let remote = self.peers.get(peer.ip()).ok_or_else(|| {
            io_err(
                "verbs open_conn: no endpoint address registered for this peer (add_peer)",
                io::ErrorKind::NotFound,
            )
        })?;
        let mut routes = HashMap::new();
        let mut ports = Vec::new();
        for (i, &ev) in paths.evs.iter().enumerate() {
            let group = i / paths.evs_per_socket;
            let fl = if self.cfg.flow_label_per_ev {
                // One AH per (peer, QP group): the group's first EV names the label.
                flow_label_for_ev(paths.evs[group * paths.evs_per_socket])
            } else {
                0
            };
            let local_gid = self.local.gid;
            let ah = self.ah_for(remote.gid, remote.lid, fl).map_err(|e| {
                // Seen on Soft-RoCE: a link-local GID (index 0 on lo) has no route, and
                // the provider only says ENETUNREACH; name both GIDs.
                let kind = match &e {
                    VerbsError::Call { source, .. } => source.kind(),
                    _ => io::ErrorKind::Other,
                };
                DatapathError::Io {
                    what: "verbs address handle",
                    source: io::Error::new(
                        kind,
                        format!(
                            "{e}, from GID {local_gid} to the peer's GID {}: is the GID \
                                 index one whose address reaches the peer?",
                            remote.gid
                        ),
                    ),
                }
            })?;
            if i % paths.evs_per_socket == 0 {
                ports.push(if fl != 0 {
                    flow_label_to_udp_sport(fl)
                } else {
                    0
                });
            }
            routes.insert(
                ev,
                Route {
                    qp: (group % self.sqs.len()) as u32,
                    ah,
                    remote_qpn: remote.qpns[group % remote.qpns.len()],
                    remote_qkey: remote.qkey,
                },
            );
        }
        let source_ip = gid_to_ip(remote.gid);
        Ok(self.conns.insert(VConn { ports, source_ip }, routes))
    }

    fn close_conn(&mut self, conn: ConnId) {
        self.conns.remove(conn);
    }

    /// The UDP source port each QP group leaves on from a flow-label NIC (0 when
    /// `flow_label_per_ev` is off: the NIC chooses).
    fn source_ports(&self, conn: ConnId) -> Option<Vec<u16>> {
        self.conns.get(conn).map(|c| c.ports.clone())
    }

    fn tx_burst(&mut self, batch: &TxBatch) -> Result<TxReport, DatapathError> {
        self.reap_send().map_err(|e| DatapathError::Io {
            what: "ibv_poll_cq (send)",
            source: io::Error::other(e.to_string()),
        })?;
        for q in &mut self.per_qp {
            q.clear();
        }
        let per_qp = &mut self.per_qp;
        // Each datagram's route is looked up here, once: the loop below posts from it.
        self.conns.resolve(batch, |index, _, _, _, &route| {
            per_qp[route.qp as usize].push(Queued { index, route })
        })?;
        let mut report = TxReport::default();
        let max = self.cfg.max_datagram_bytes as usize;
        self.recover_qps();
        for qp in 0..self.per_qp.len() {
            if self.per_qp[qp].is_empty() {
                continue;
            }
            if self.qp_error[qp] {
                // it would only flush them (the transport sees them lost)
                let n = self.per_qp[qp].len() as u64;
                self.vstats.tx_qp_error += n;
                report.errors += n;
                continue;
            }
            // Copy into send slots.
            self.wr_ids.clear();
            self.send_wrs.clear();
            for k in 0..self.per_qp[qp].len() {
                let Queued { index, route: r } = self.per_qp[qp][k];
                let Some((_, d)) = batch.get(index) else {
                    continue;
                };
                if d.len() > max {
                    self.vstats.tx_oversize += 1;
                    report.errors += 1;
                    continue;
                }
                let Ok(slot) = self.send_pool.alloc() else {
                    self.vstats.tx_no_buffer += 1;
                    report.errors += 1;
                    continue;
                };
                let offset = slot.0 as usize * max;
                match self.dev.bytes_mut(self.send_region, offset, d.len()) {
                    Some(dst) => {
                        let _ = d.copy_to(dst);
                    }
                    None => {
                        let _ = self.send_pool.free(slot);
                        report.errors += 1;
                        continue;
                    }
                }
                let wr_id = WrId::new(qp as u32, slot.0);
                self.wr_ids.push(wr_id);
                self.send_wrs.push(SendWr {
                    wr_id: wr_id.0,
                    region: self.send_region,
                    offset,
                    len: d.len() as u32,
                    ah: r.ah,
                    remote_qpn: r.remote_qpn,
                    remote_qkey: r.remote_qkey,
                    signalled: false,
                });
            }
            if self.wr_ids.is_empty() {
                continue;
            }
            let force_tail = self.send_pool.available() < self.cfg.signal_every;
            let accepted = self.sqs[qp].plan_chain(&self.wr_ids, force_tail, &mut self.plan);
            // Refused by a full send queue: slots back.
            for w in &self.wr_ids[accepted..] {
                let _ = self.send_pool.free(SlotId(w.slot()));
                self.vstats.tx_sq_full += 1;
                report.errors += 1;
            }
            self.send_wrs.truncate(accepted);
            for (wr, p) in self.send_wrs.iter_mut().zip(&self.plan) {
                wr.signalled = p.signalled;
                self.vstats.tx_signalled += u64::from(p.signalled);
            }
            let posted = match self.dev.post_send(qp, &self.send_wrs) {
                Ok(()) => accepted,
                Err(e) => e.accepted,
            };
            if posted < accepted {
                let _ = self.sqs[qp].rollback(accepted - posted);
                for w in &self.send_wrs[posted..] {
                    let _ = self.send_pool.free(SlotId(WrId(w.wr_id).slot()));
                    self.vstats.tx_post_refused += 1;
                    self.vstats.tx_signalled -= u64::from(w.signalled);
                    report.errors += 1;
                }
            }
            report.datagrams += posted as u64;
            report.send_calls += 1;
        }
        self.stats.count_tx(&report);
        Ok(report)
    }

    fn rx_burst(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(RxDatagram<'_>),
    ) -> Result<usize, DatapathError> {
        let poll_err = |e: VerbsError| DatapathError::Io {
            what: "ibv_poll_cq",
            source: io::Error::other(e.to_string()),
        };
        self.reap_send().map_err(poll_err)?;
        self.wcs.clear();
        self.wcs.append(&mut self.pending_rx);
        let room = max.saturating_sub(self.wcs.len()).min(POLL_BATCH * 4);
        if room > 0 {
            self.dev.poll_recv(room, &mut self.wcs).map_err(poll_err)?;
        }
        if !self.wcs.is_empty() {
            self.stats.rx_calls += 1;
        }
        let mut handed = 0;
        let slot_bytes = self.recv_pool.slot_bytes();
        for wc in &self.wcs {
            let id = WrId(wc.wr_id);
            let (qp, slot) = (id.qp_index() as usize, SlotId(id.slot()));
            let offset = match self.recv_pool.offset_of(slot) {
                Ok(o) if qp < self.rq_posted.len() && self.recv_pool.is_in_use(slot) => o,
                _ => {
                    self.vstats.bad_wr_id += 1;
                    continue;
                }
            };
            self.rq_posted[qp] = self.rq_posted[qp].saturating_sub(1);
            if wc.status != WC_SUCCESS {
                self.vstats.rx_error_completions += 1;
                self.stats.rx_errors += 1;
                if wc.status == WC_WR_FLUSH_ERR {
                    // The QP is in error: do not repost; the slot goes back to the pool
                    // (the QP is reset once everything it held came back).
                    self.qp_error[qp] = true;
                    let _ = self.recv_pool.free(slot);
                    continue;
                }
            } else if let Some(buf) = self.dev.bytes(self.recv_region, offset, slot_bytes) {
                match split_receive(buf, wc.byte_len as usize) {
                    Ok((grh, payload)) => {
                        let (from, ecn) = if wc.has_grh {
                            (
                                SocketAddr::new(gid_to_ip(grh.sgid), ROCEV2_DPORT),
                                Ecn::from_bits(grh.ecn_bits()),
                            )
                        } else {
                            (
                                SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
                                Ecn::NotEct,
                            )
                        };
                        f(RxDatagram {
                            from,
                            ecn,
                            bytes: payload,
                        });
                        handed += 1;
                        self.stats.rx_datagrams += 1;
                    }
                    Err(GrhError::Short { .. }) => {
                        self.vstats.rx_short_grh += 1;
                        self.stats.rx_errors += 1;
                    }
                    Err(GrhError::UnknownVersion { .. }) => {
                        self.vstats.rx_bad_grh += 1;
                        self.stats.rx_errors += 1;
                    }
                }
            }
            // Replenish: the same buffer goes back to the same QP.
            self.reposts[qp].push(RecvWr {
                wr_id: wc.wr_id,
                region: self.recv_region,
                offset,
                len: slot_bytes as u32,
            });
        }
        self.recover_qps();
        self.top_up();
        self.flush_reposts();
        Ok(handed)
    }

    fn wait(&mut self, timeout_ns: u64) -> Result<(), DatapathError> {
        if !self.pending_rx.is_empty() {
            return Ok(());
        }
        self.dev
            .wait_recv(timeout_ns, &mut self.pending_rx)
            .map_err(|e| DatapathError::Io {
                what: "verbs wait",
                source: io::Error::other(e.to_string()),
            })
    }

    fn waker(&self) -> Arc<dyn Waker> {
        self.dev.waker()
    }

    /// The peer endpoint's GID as an IP (what [`RxDatagram::from`] carries), not the IP of
    /// the control connection the peer was registered under.
    fn peer_source_ip(&self, conn: ConnId) -> Option<IpAddr> {
        self.conns.get(conn).map(|c| c.source_ip)
    }

    /// No: a receive's source is the GRH's source GID (as an IP) and RoCEv2's fixed port;
    /// the engine checks the peer's IP only (the sender's UD QPN is not handed up).
    fn reports_source_ports(&self) -> bool {
        false
    }

    fn stats(&self) -> DatapathStats {
        self.stats
    }
}
