//! The engine: owns the connections (transport endpoints) and the datapath. One pass of
//! [`Engine::poll_once`] moves datagrams in, runs due timers, routes completions to the
//! CQs and sends datagrams out; the engine thread ([`Engine::run`]) loops on it between
//! commands from applications, and a [`super::Worker`] calls it on the application's own
//! thread (`progress()`). When nothing happened for `spin_ns` the engine thread sleeps in
//! [`Datapath::wait`] until a datagram arrives, a command wakes it, or the next transport
//! timer is due (at most `max_sleep_ns`), so an idle engine does not burn a core.

use super::pattern;
use super::source::{SourceDrops, SourceFilter};
use super::watch::{self, EngineWatch, Qpn, Watch};
use super::{Cmd, EngineConfig, EngineStats, MrMem, QpStats, VerifySpec, VerifyStats, Wr};
use crate::datapath::{ConnId, Datapath, PathMap, TxBatch};
use crossbeam_channel::{Receiver, Sender};
use mrc_congestion::AnyController;
use mrc_transport::completion::{Completion, WcOpcode, WcStatus};
use mrc_transport::region::MrKey;
use mrc_transport::{Access, Connection, DeregisterError, PeerParams, PostError};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tracing::{debug, info, warn};

pub(crate) struct QpEntry {
    pub conn: Connection<AnyController>,
    pub dp_conn: Option<ConnId>,
    pub paths: PathMap,
    /// The EVs of `paths`, the ones the datapath has a route for.
    pub own_evs: HashSet<u32>,
    /// Where its completions go.
    pub cq: Cq,
    pub verify: Option<VerifySpec>,
    pub vstats: VerifyStats,
    /// Where datagrams may come from.
    pub sources: SourceFilter,
    /// What the source check dropped.
    pub source_drops: SourceDrops,
    /// What the logs saw of it at the previous sample ([`watch`]).
    pub watch: Watch,
}

/// The completion queues of a QP: channels to a [`super::Qp`] on another thread, or
/// queues on the engine itself that a [`super::Worker`]'s caller polls (no channel hop).
pub(crate) enum Cq {
    Channel {
        send: Sender<Completion>,
        recv: Sender<Completion>,
    },
    Local {
        send: VecDeque<Completion>,
        recv: VecDeque<Completion>,
    },
}

impl Cq {
    fn push(&mut self, recv_side: bool, c: Completion) {
        match (self, recv_side) {
            (Cq::Channel { send, .. }, false) => {
                let _ = send.send(c);
            }
            (Cq::Channel { recv, .. }, true) => {
                let _ = recv.send(c);
            }
            (Cq::Local { send, .. }, false) => send.push_back(c),
            (Cq::Local { recv, .. }, true) => recv.push_back(c),
        }
    }
}

pub(crate) struct Engine<D: Datapath> {
    pub dp: D,
    pub cfg: EngineConfig,
    /// Scratch batch of datagrams out (reused every pass).
    pub batch: TxBatch,
    pub qps: HashMap<u32, QpEntry>,
    pub start: Instant,
    pub stats: EngineStats,
    /// Engine-wide counters the logs reported ([`watch`]).
    pub watch: EngineWatch,
    /// When the logs last compared snapshots.
    pub watch_ns: u64,
    /// The datapath's [`Datapath::planes_up`] as the connections were last told.
    pub planes_up: u32,
}

/// Thread CPU time in ns (`CLOCK_THREAD_CPUTIME_ID`).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and out pointer.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// The EV a datagram the transport put on `ev` leaves on: `ev` itself when it is one of
/// the QP's (`own`, the EVs of `evs`); else (a NACK, CNP, SACK or probe reply echoing an
/// EV of the peer's, which a peer with another EV list or a hostile packet names) EV
/// `evs[ev % evs.len()]`, counted in `foreign`. The datagram's MRCETH still names the
/// echoed EV; only its socket changes, so the datapath never refuses the burst with
/// [`crate::datapath::DatapathError::UnknownEv`].
/// Adds QP entry `e`'s datagrams due at `now` to `batch` while it has room (`gather`:
/// the datapath sends in place, so data payloads are lent from the QP's regions);
/// `foreign` counts EVs routed to another socket ([`route_ev`]).
fn fill_burst(batch: &mut TxBatch, e: &mut QpEntry, now: u64, gather: bool, foreign: &mut u64) {
    let Some(id) = e.dp_conn else { return };
    let conn = &mut e.conn;
    let (own, evs) = (&e.own_evs, &e.paths.evs);
    // SAFETY: only with `gather` is a data packet's payload lent, from `conn`'s regions,
    // which nothing registers or deregisters until the batch is cleared, after
    // `tx_burst` ([`Engine::poll_out_first`]: commands and received datagrams are handled
    // in other steps of the loop, on the same thread), and the datapath sends in place (it
    // hands the kernel the payload's address, never reads it).
    while unsafe {
        batch.push_gather_with(id, |buf| {
            let polled = if gather {
                conn.poll_transmit_gather(now, buf)
            } else {
                conn.poll_transmit(now, buf).map(|t| (t, None))
            };
            polled.map(|(t, lent)| (route_ev(own, evs, t.ev, foreign), t.len, t.ecn, lent))
        })
    } {}
}

fn route_ev(own: &HashSet<u32>, evs: &[u32], ev: u32, foreign: &mut u64) -> u32 {
    if own.contains(&ev) {
        return ev;
    }
    *foreign += 1;
    let i = usize::try_from(ev).unwrap_or(0) % evs.len().max(1);
    evs.get(i).copied().unwrap_or(ev)
}

fn post_error_status(e: PostError) -> WcStatus {
    match e {
        PostError::BadState(_) => WcStatus::Flushed,
        PostError::LocalAccess(_) => WcStatus::LocalProtectionError,
        // (the `Qp` handle refuses a post beyond its queue before it reaches the engine:
        // its count includes completions not yet taken, so the transport's never fills)
        PostError::SendQueueFull { .. } | PostError::RecvQueueFull { .. } => WcStatus::Flushed,
    }
}

impl<D: Datapath> Engine<D> {
    /// The engine's clock: monotonic ns since it started (what the transport gets as
    /// `now`).
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// An engine over `dp` with no QPs yet.
    pub fn new(dp: D, cfg: EngineConfig) -> Self {
        Engine {
            dp,
            batch: TxBatch::new(cfg.tx_batch.max(1), cfg.slot_bytes),
            cfg,
            qps: HashMap::new(),
            start: Instant::now(),
            stats: EngineStats::default(),
            watch: EngineWatch::default(),
            watch_ns: 0,
            planes_up: u32::MAX,
        }
    }

    /// Step 3b of [`Engine::poll_once`]: a local port that went down (or came back) since
    /// the last pass ([`Datapath::planes_up`]) takes its plane out of every connected QP
    /// (or back), each telling its peer (`Connection::set_local_plane`). Returns whether
    /// anything changed.
    fn poll_planes(&mut self, now: u64) -> bool {
        let up = self.dp.planes_up();
        let changed = up ^ self.planes_up;
        if changed == 0 {
            return false;
        }
        let prev = std::mem::replace(&mut self.planes_up, up);
        for (plane, is_up) in plane_changes(prev, up, self.dp.plane_ips().len()) {
            let mut qps = 0;
            for e in self.qps.values_mut().filter(|e| e.dp_conn.is_some()) {
                qps += usize::from(e.conn.set_local_plane(plane, is_up, now));
            }
            if is_up {
                info!(plane, qps, "local port of plane {plane} up: back in use");
            } else {
                warn!(
                    plane,
                    qps, "local port of plane {plane} down: plane out of use, peers told"
                );
            }
        }
        true
    }

    /// The engine thread: runs until [`Cmd::Shutdown`] or every command sender is gone,
    /// taking commands between passes of [`Engine::poll_once`]; sleeps in the datapath
    /// (flagging `sleeping`, so a command sender wakes it) after `spin_ns` without work.
    pub fn run(mut self, cmds: Receiver<Cmd>, sleeping: Arc<AtomicBool>) {
        let mut last_work = self.now_ns();
        loop {
            let mut work = false;
            // 1. Commands.
            loop {
                match cmds.try_recv() {
                    Ok(Cmd::Shutdown) => return,
                    Ok(cmd) => {
                        work = true;
                        self.handle_cmd(cmd);
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return,
                }
            }
            // 2.-6.
            work |= self.poll_once();
            // 7. Idle back-off.
            let now = self.now_ns();
            if work {
                last_work = now;
                continue;
            }
            if now.saturating_sub(last_work) < self.cfg.spin_ns {
                std::thread::yield_now();
                continue;
            }
            let timeout = self.sleep_ns(now);
            if timeout == 0 {
                continue;
            }
            sleeping.store(true, Ordering::SeqCst);
            if cmds.is_empty() {
                self.stats.sleeps += 1;
                if let Err(err) = self.dp.wait(timeout) {
                    self.datapath_error("wait", &err);
                }
            }
            sleeping.store(false, Ordering::SeqCst);
        }
    }

    /// How long an idle engine may sleep at `now`: until the earliest transport timer, at
    /// most `max_sleep_ns` (0: a timer is due already).
    pub fn sleep_ns(&self, now: u64) -> u64 {
        let deadline = self
            .qps
            .values()
            .filter_map(|e| e.conn.poll_timeout())
            .min();
        match deadline {
            Some(t) if t <= now => 0,
            Some(t) => (t - now).min(self.cfg.max_sleep_ns),
            None => self.cfg.max_sleep_ns,
        }
    }

    /// One pass over the datapath and every connection, the body both progress modes
    /// share: datagrams in, due timers, completions to the CQs, datagrams out, logs.
    /// Returns whether anything happened. The clock is read here (monotonic, ns since the
    /// engine started) and handed to the transport.
    pub fn poll_once(&mut self) -> bool {
        let (work, _) = self.poll_in();
        self.poll_out() | work
    }

    /// Steps 2 to 4 of [`Engine::poll_once`]: datagrams in, due timers, completions to
    /// the CQs. Returns whether anything happened and whether a receive completion was
    /// delivered.
    pub(crate) fn poll_in(&mut self) -> (bool, bool) {
        self.stats.loops += 1;
        let mut work = false;
        let mut received = false;
        // 2. Datagrams in.
        let now = self.now_ns();
        let qps = &mut self.qps;
        let stats = &mut self.stats;
        let check_port = self.dp.reports_source_ports();
        let rx = self.dp.rx_burst(self.cfg.rx_burst, &mut |d| {
            let qpn = match d.bytes.get(5..8) {
                Some(q) => u32::from_be_bytes([0, q[0], q[1], q[2]]),
                None => {
                    stats.rx_unknown_qpn += 1;
                    return;
                }
            };
            match qps.get_mut(&qpn) {
                Some(e) => match e.sources.check(d.from, check_port) {
                    Ok(()) => e.conn.handle_datagram(now, 0, d.ecn, d.bytes),
                    Err(why) => {
                        e.source_drops.count(why);
                        stats.rx_bad_source += 1;
                    }
                },
                None => stats.rx_unknown_qpn += 1,
            }
        });
        match rx {
            Ok(n) if n > 0 => work = true,
            Ok(_) => {}
            Err(err) => self.datapath_error("receive", &err),
        }
        // 3. Timers.
        let now = self.now_ns();
        for e in self.qps.values_mut() {
            if e.conn.poll_timeout().is_some_and(|t| t <= now) {
                e.conn.handle_timeout(now);
                work = true;
            }
        }
        // 3b. Local ports of the planes.
        work |= self.poll_planes(now);
        // 4. Completions (before any SACK leaves: a message verified in the engine cannot
        //    have been overwritten by a later one, whose sender waits for this SACK).
        for e in self.qps.values_mut() {
            while let Some(c) = e.conn.poll_completion() {
                work = true;
                if c.status != WcStatus::Success {
                    e.watch.failed_completion(c.status);
                }
                received |= matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
                deliver(e, c);
            }
        }
        (work, received)
    }

    /// Steps 5 and 6 of [`Engine::poll_once`]: datagrams out, logs. Returns whether a
    /// datagram was sent.
    pub(crate) fn poll_out(&mut self) -> bool {
        self.poll_out_first(None)
    }

    /// [`Engine::poll_out`], QP `first`'s datagrams ahead of the other QPs' in each burst
    /// (a reply posted on it leaves before the SACKs other QPs owe: [`super::Worker`]).
    pub(crate) fn poll_out_first(&mut self, first: Option<u32>) -> bool {
        let mut work = false;
        // 5. Datagrams out.
        let batch = &mut self.batch;
        let start = self.start;
        let gather = self.dp.sends_in_place();
        loop {
            batch.clear();
            let now = start.elapsed().as_nanos() as u64;
            let foreign = &mut self.stats.tx_foreign_ev;
            if let Some(e) = first.and_then(|q| self.qps.get_mut(&q)) {
                fill_burst(batch, e, now, gather, foreign);
            }
            for (&qpn, e) in self.qps.iter_mut() {
                if Some(qpn) != first {
                    fill_burst(batch, e, now, gather, foreign);
                }
            }
            if batch.is_empty() {
                break;
            }
            work = true;
            let sent = self.dp.tx_burst(batch);
            let full = batch.is_full();
            // the lent payloads are the regions' again
            batch.clear();
            match sent {
                Ok(r) => {
                    self.stats.tx_bursts += 1;
                    self.stats.tx_datagrams += r.datagrams;
                }
                Err(err) => {
                    self.stats.datapath_errors += 1;
                    if watch::on() {
                        self.watch.last_dp_error = Some(format!("send: {err}"));
                    }
                }
            }
            if !full {
                break;
            }
        }
        // 6. Logs: compare snapshots at most every watch::SAMPLE_NS, only while a
        //    subscriber takes events.
        let now = self.now_ns();
        if now.saturating_sub(self.watch_ns) >= watch::SAMPLE_NS && watch::on() {
            self.watch_ns = now;
            self.observe(now);
        }
        work
    }

    /// Adds QP `qpn`.
    pub fn add_qp(&mut self, qpn: u32, entry: QpEntry) {
        debug!(qpn = %Qpn(qpn), evs = entry.paths.evs.len(), "QP created");
        self.qps.insert(qpn, entry);
    }

    /// Removes QP `qpn` and closes its sockets.
    pub fn remove_qp(&mut self, qpn: u32) {
        if let Some(mut e) = self.qps.remove(&qpn) {
            if watch::on() {
                e.watch.observe(qpn, &e.conn, self.now_ns());
            }
            info!(qpn = %Qpn(qpn), state = ?e.conn.state(), "QP destroyed");
            if let Some(id) = e.dp_conn {
                self.dp.close_conn(id);
            }
        }
    }

    /// Registers `mem` with `access` in QP `qpn`'s region table.
    pub fn register(&mut self, qpn: u32, mem: MrMem, access: Access) -> Result<MrKey, String> {
        let e = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| format!("no QP {qpn}"))?;
        let t = e.conn.regions_mut();
        match mem {
            MrMem::Owned(len) => t.register(len, access),
            MrMem::Shared(m) => t.register_shared(&m, access),
            MrMem::Raw(m) => t.register_raw(m, access),
        }
        .map_err(|e| e.to_string())
    }

    /// Deregisters region `lkey` of QP `qpn` unless a work request names it.
    pub fn deregister(&mut self, qpn: u32, lkey: u32) -> Result<(), DeregisterError> {
        match self.qps.get_mut(&qpn) {
            Some(e) => e.conn.deregister_mr(lkey),
            None => Err(DeregisterError::UnknownKey(lkey)),
        }
    }

    /// Opens the datapath connection of QP `qpn` to `udp` and connects its transport to
    /// `peer`; a peer on two or more planes has its address on each in `plane_ips`
    /// ([`super::QpInfo::plane_ips`], at `udp`'s port), among which `udp`'s IP must be.
    /// Returns this side's EV source ports.
    pub fn connect_qp(
        &mut self,
        qpn: u32,
        peer: PeerParams,
        udp: SocketAddr,
        plane_ips: &[IpAddr],
    ) -> Result<Vec<u16>, String> {
        if !plane_ips.is_empty() && !plane_ips.contains(&udp.ip().to_canonical()) {
            let r = format!(
                "the peer's plane addresses {plane_ips:?} do not include {}, where it was reached",
                udp.ip()
            );
            warn!(qpn = %Qpn(qpn), peer = %udp, "QP connect failed: {r}");
            return Err(r);
        }
        if let Some(e) = self.qps.get_mut(&qpn) {
            e.paths.peers = plane_ips
                .iter()
                .map(|&ip| SocketAddr::new(ip, udp.port()))
                .collect();
        }
        let r = match self.qps.get_mut(&qpn) {
            None => Err(format!("no QP {qpn}")),
            Some(e) => match self.dp.open_conn(udp, &e.paths) {
                Err(err) => Err(err.to_string()),
                Ok(id) => match e.conn.connect(peer) {
                    Ok(()) => {
                        e.dp_conn = Some(id);
                        // A plane whose local port is down already starts out of use.
                        let now = self.start.elapsed().as_nanos() as u64;
                        for plane in (0..32u8).filter(|p| self.planes_up & (1 << p) == 0) {
                            e.conn.set_local_plane(plane, false, now);
                        }
                        let ip = self.dp.peer_source_ip(id).unwrap_or(udp.ip());
                        if plane_ips.is_empty() {
                            e.sources.connect(&[ip]);
                        } else {
                            e.sources.connect(plane_ips);
                        }
                        info!(
                            qpn = %Qpn(qpn),
                            peer = %udp,
                            peer_qpn = %Qpn(peer.qpn),
                            evs = e.paths.evs.len(),
                            "QP connected to {udp}"
                        );
                        Ok(self.dp.source_ports(id).unwrap_or_default())
                    }
                    Err(err) => {
                        self.dp.close_conn(id);
                        Err(err.to_string())
                    }
                },
            },
        };
        if let Err(err) = &r {
            warn!(qpn = %Qpn(qpn), peer = %udp, "QP connect failed: {err}");
        }
        r
    }

    /// Accepts datagrams of QP `qpn` only from the peer's EV source `ports`.
    pub fn set_peer_ports(&mut self, qpn: u32, ports: &[u16]) -> Result<(), String> {
        match self.qps.get_mut(&qpn) {
            None => Err(format!("no QP {qpn}")),
            Some(e) if e.dp_conn.is_none() => Err(format!("QP {qpn} is not connected")),
            Some(e) => {
                e.sources.set_ports(ports);
                Ok(())
            }
        }
    }

    /// Hands work request `wr` to QP `qpn`'s transport. Returns the opcode and wr_id of
    /// its completion-to-be with the transport's refusal, if any.
    pub fn post_wr(&mut self, qpn: u32, wr: Wr) -> (u64, WcOpcode, Result<(), PostError>) {
        let Some(e) = self.qps.get_mut(&qpn) else {
            let (wr_id, opcode) = wr.id_opcode();
            return (
                wr_id,
                opcode,
                Err(PostError::BadState(mrc_transport::ConnState::Closed)),
            );
        };
        match wr {
            Wr::Write {
                wr_id,
                sge,
                remote_addr,
                rkey,
                imm: None,
            } => (
                wr_id,
                WcOpcode::Write,
                e.conn.post_write(wr_id, sge, remote_addr, rkey),
            ),
            Wr::Write {
                wr_id,
                sge,
                remote_addr,
                rkey,
                imm: Some(imm),
            } => (
                wr_id,
                WcOpcode::WriteWithImm,
                e.conn
                    .post_write_with_imm(wr_id, sge, remote_addr, rkey, imm),
            ),
            Wr::Send {
                wr_id,
                sge,
                imm: None,
            } => (wr_id, WcOpcode::Send, e.conn.post_send(wr_id, sge)),
            Wr::Send {
                wr_id,
                sge,
                imm: Some(imm),
            } => (
                wr_id,
                WcOpcode::Send,
                e.conn.post_send_with_imm(wr_id, sge, imm),
            ),
            Wr::Recv { wr_id, sge } => (wr_id, WcOpcode::Recv, e.conn.post_recv(wr_id, sge)),
        }
    }

    /// Turns per-packet authentication on for QP `qpn` (before it connects).
    pub fn set_auth(
        &mut self,
        qpn: u32,
        keys: mrc_transport::auth::AuthKeys,
    ) -> Result<(), String> {
        match self.qps.get_mut(&qpn) {
            Some(e) => e
                .conn
                .set_auth(mrc_transport::auth::Authenticator::new(keys))
                .map_err(|err| format!("authentication must be set before connect: {err}")),
            None => Err(format!("no QP {qpn}")),
        }
    }

    /// Starts draining QP `qpn`.
    pub fn close_qp(&mut self, qpn: u32) {
        if let Some(e) = self.qps.get_mut(&qpn) {
            info!(qpn = %Qpn(qpn), state = ?e.conn.state(), "QP closing");
            let _ = e.conn.close();
        }
    }

    /// Counters of QP `qpn` (`None` if gone) and of the engine.
    pub fn qp_stats(&self, qpn: u32) -> (Option<QpStats>, EngineStats) {
        let r = self.qps.get(&qpn).map(|e| {
            let ports = e
                .dp_conn
                .and_then(|id| self.dp.source_ports(id))
                .unwrap_or_default();
            let socket_of = e.paths.socket_of();
            QpStats {
                state: e.conn.state(),
                conn: *e.conn.stats(),
                evs: e
                    .conn
                    .paths()
                    .paths()
                    .iter()
                    .map(|p| {
                        let port = socket_of
                            .get(&p.ev)
                            .and_then(|&s| ports.get(s).copied())
                            .unwrap_or(0);
                        (p.ev, port, p.stats)
                    })
                    .collect(),
                ev_states: e.conn.paths().paths().iter().map(|p| p.state).collect(),
                ev_planes: e.conn.paths().paths().iter().map(|p| p.plane).collect(),
                planes: e
                    .conn
                    .paths()
                    .planes()
                    .iter()
                    .map(|p| (p.state, p.stats))
                    .collect(),
                verify: e.vstats,
                source_drops: e.source_drops,
                source_ports_checked: e.sources.checks_ports(),
                srtt_ns: e.conn.send_state().rtt.srtt_ns,
                give_up: e.conn.give_up(),
            }
        });
        let mut es = self.stats;
        es.datapath = self.dp.stats();
        es.cpu_ns = thread_cpu_ns();
        es.ev_sockets = self.dp.ev_sockets() as u64;
        (r, es)
    }

    fn handle_cmd(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Shutdown => {}
            Cmd::CreateQp { qpn, entry } => self.add_qp(qpn, *entry),
            Cmd::DestroyQp { qpn, reply } => {
                self.remove_qp(qpn);
                let _ = reply.send(());
            }
            Cmd::RegMr {
                qpn,
                mem,
                access,
                reply,
            } => {
                let _ = reply.send(self.register(qpn, mem, access));
            }
            Cmd::DeregMr { qpn, lkey, reply } => {
                let _ = reply.send(self.deregister(qpn, lkey));
            }
            Cmd::WriteMr {
                qpn,
                lkey,
                offset,
                data,
                reply,
            } => {
                let r = self.with_region(qpn, lkey, offset, data.len(), |b| {
                    b.copy_from_slice(&data);
                });
                let _ = reply.send(r);
            }
            Cmd::ReadMr {
                qpn,
                lkey,
                offset,
                len,
                reply,
            } => {
                let mut out = Vec::new();
                let r = self
                    .with_region(qpn, lkey, offset, len, |b| out.extend_from_slice(b))
                    .map(|()| out);
                let _ = reply.send(r);
            }
            Cmd::FillPattern {
                qpn,
                lkey,
                offset,
                len,
                seed,
                msg,
            } => {
                let _ = self.with_region(qpn, lkey, offset, len, |b| pattern::fill(b, seed, msg));
            }
            Cmd::SetVerify { qpn, spec } => {
                if let Some(e) = self.qps.get_mut(&qpn) {
                    e.verify = Some(spec);
                }
            }
            Cmd::SetAuth { qpn, keys, reply } => {
                let _ = reply.send(self.set_auth(qpn, *keys));
            }
            Cmd::Connect {
                qpn,
                peer,
                udp,
                plane_ips,
                reply,
            } => {
                let _ = reply.send(self.connect_qp(qpn, peer, udp, &plane_ips));
            }
            Cmd::PeerPorts { qpn, ports, reply } => {
                let _ = reply.send(self.set_peer_ports(qpn, &ports));
            }
            Cmd::Post { qpn, wr } => {
                let (wr_id, opcode, res) = self.post_wr(qpn, wr);
                if let (Err(err), Some(e)) = (res, self.qps.get_mut(&qpn)) {
                    let c = Completion {
                        wr_id,
                        opcode,
                        status: post_error_status(err),
                        byte_len: 0,
                        imm: None,
                    };
                    e.cq.push(opcode == WcOpcode::Recv, c);
                }
            }
            Cmd::Close { qpn } => self.close_qp(qpn),
            Cmd::Stats { qpn, reply } => {
                let _ = reply.send(self.qp_stats(qpn));
            }
        }
    }

    /// Runs `f` on `len` bytes at `offset` of the engine-owned region `lkey` of QP `qpn`.
    fn with_region(
        &mut self,
        qpn: u32,
        lkey: u32,
        offset: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), String> {
        let e = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| format!("no QP {qpn}"))?;
        let bytes = e
            .conn
            .regions_mut()
            .bytes_mut(lkey)
            .map_err(|e| e.to_string())?;
        let start = usize::try_from(offset).map_err(|_| "offset too large".to_string())?;
        let end = start.checked_add(len).ok_or("range overflows")?;
        let total = bytes.len();
        let b = bytes
            .get_mut(start..end)
            .ok_or_else(|| format!("range {start}..{end} outside region of {total} bytes"))?;
        f(b);
        Ok(())
    }

    /// Counts a datapath error; keeps its text for the logs while they are on.
    fn datapath_error(&mut self, what: &str, err: &dyn std::fmt::Display) {
        self.stats.datapath_errors += 1;
        if watch::on() {
            self.watch.last_dp_error = Some(format!("{what}: {err}"));
        }
    }

    /// Compares every QP with its previous snapshot and logs the changes ([`watch`]).
    fn observe(&mut self, now: u64) {
        for (&qpn, e) in self.qps.iter_mut() {
            e.watch.observe(qpn, &e.conn, now);
        }
        self.watch.observe(self.stats.datapath_errors, now);
    }
}

/// Routes a completion to its CQ; a `RecvRdmaWithImm` on a QP with a [`VerifySpec`] first
/// checks every byte of the slot its immediate names.
fn deliver(e: &mut QpEntry, c: Completion) {
    match c.opcode {
        WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => {
            if c.opcode == WcOpcode::RecvRdmaWithImm
                && c.status == WcStatus::Success
                && let (Some(v), Some(imm)) = (e.verify, c.imm)
            {
                verify_slot(e, v, imm);
            }
            e.cq.push(true, c);
        }
        _ => e.cq.push(false, c),
    }
}

fn verify_slot(e: &mut QpEntry, v: VerifySpec, imm: u32) {
    let slot = u64::from(imm) % v.slots.max(1);
    let off = slot * v.slot_bytes;
    let t = e.conn.regions();
    let region = t
        .key(v.lkey)
        .and_then(|k| t.read(v.lkey, k.addr.saturating_add(off), v.slot_bytes));
    match region {
        Ok(b) => {
            e.vstats.bad_bytes += pattern::count_bad(&b, v.seed, u64::from(imm));
            e.vstats.checked_bytes += v.slot_bytes;
        }
        Err(_) => e.vstats.bad_bytes += v.slot_bytes,
    }
    e.vstats.checked_messages += 1;
}

/// The planes among the datapath's `planes` whose local port changed between the masks
/// `prev` and `up` ([`Datapath::planes_up`]), each with its new state, lowest first. A bit
/// past the datapath's planes is no port: a watch publishes none for a plane it does not
/// have, so its first mask against the all-up start cleared bits 2-31 of a two-plane
/// datapath, and the engine logged 30 planes going down.
fn plane_changes(prev: u32, up: u32, planes: usize) -> impl Iterator<Item = (u8, bool)> {
    let changed = prev ^ up;
    (0..planes.min(32) as u8)
        .filter(move |p| changed & (1 << p) != 0)
        .map(move |p| (p, up & (1 << p) != 0))
}

#[cfg(test)]
mod plane_change_tests {
    #[test]
    fn only_the_datapaths_planes_change() {
        // a two-plane watch's first mask against the all-up start: nothing changed
        assert_eq!(super::plane_changes(u32::MAX, 0b11, 2).count(), 0);
        // plane 1's port down, then up again
        assert_eq!(
            super::plane_changes(0b11, 0b01, 2).collect::<Vec<_>>(),
            vec![(1, false)]
        );
        assert_eq!(
            super::plane_changes(0b01, 0b11, 2).collect::<Vec<_>>(),
            vec![(1, true)]
        );
        // both down at once, lowest first; 32 planes at most
        assert_eq!(
            super::plane_changes(0b11, 0, 2).collect::<Vec<_>>(),
            vec![(0, false), (1, false)]
        );
        assert_eq!(super::plane_changes(0, u32::MAX, 40).count(), 32);
    }
}
