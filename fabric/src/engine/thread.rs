//! The engine thread: owns the connections (transport endpoints) and the datapath, and
//! busy-polls both while there is work: commands from applications, datagrams in, timers,
//! completions out, datagrams out. When nothing happened for `spin_ns` it sleeps in
//! [`Datapath::wait`] until a datagram arrives, a command wakes it, or the next transport
//! timer is due (at most `max_sleep_ns`), so an idle engine does not burn a core.

use super::pattern;
use super::source::{SourceDrops, SourceFilter};
use super::watch::{self, EngineWatch, Qpn, Watch};
use super::{Cmd, EngineConfig, EngineStats, QpStats, VerifySpec, VerifyStats, Wr};
use crate::datapath::{ConnId, Datapath, PathMap, TxBatch};
use crossbeam_channel::{Receiver, Sender};
use mrc_congestion::AnyController;
use mrc_transport::completion::{Completion, WcOpcode, WcStatus};
use mrc_transport::{Connection, PostError};
use std::collections::{HashMap, HashSet};
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
    pub send_cq: Sender<Completion>,
    pub recv_cq: Sender<Completion>,
    pub verify: Option<VerifySpec>,
    pub vstats: VerifyStats,
    /// Where datagrams may come from.
    pub sources: SourceFilter,
    /// What the source check dropped.
    pub source_drops: SourceDrops,
    /// What the logs saw of it at the previous sample ([`watch`]).
    pub watch: Watch,
}

pub(crate) struct Engine<D: Datapath> {
    pub dp: D,
    pub cfg: EngineConfig,
    pub cmds: Receiver<Cmd>,
    pub sleeping: Arc<AtomicBool>,
    pub qps: HashMap<u32, QpEntry>,
    pub start: Instant,
    pub stats: EngineStats,
    /// Engine-wide counters the logs reported ([`watch`]).
    pub watch: EngineWatch,
    /// When the logs last compared snapshots.
    pub watch_ns: u64,
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
    }
}

impl<D: Datapath> Engine<D> {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Runs until [`Cmd::Shutdown`] or every command sender is gone.
    pub fn run(mut self) {
        let mut batch = TxBatch::new(self.cfg.tx_batch.max(1), self.cfg.slot_bytes);
        let mut last_work = self.now_ns();
        loop {
            self.stats.loops += 1;
            let mut work = false;
            // 1. Commands.
            loop {
                match self.cmds.try_recv() {
                    Ok(Cmd::Shutdown) => return,
                    Ok(cmd) => {
                        work = true;
                        self.handle_cmd(cmd);
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return,
                }
            }
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
            // 4. Completions (before any SACK leaves: a verified message cannot have been
            //    overwritten by a later one, whose sender waits for this SACK).
            for e in self.qps.values_mut() {
                while let Some(c) = e.conn.poll_completion() {
                    work = true;
                    if c.status != WcStatus::Success {
                        e.watch.failed_completion(c.status);
                    }
                    deliver(e, c);
                }
            }
            // 5. Datagrams out.
            loop {
                batch.clear();
                let now = self.now_ns();
                for e in self.qps.values_mut() {
                    let Some(id) = e.dp_conn else { continue };
                    let conn = &mut e.conn;
                    let (own, evs) = (&e.own_evs, &e.paths.evs);
                    let foreign = &mut self.stats.tx_foreign_ev;
                    while batch.push_with(id, |buf| {
                        conn.poll_transmit(now, buf)
                            .map(|t| (route_ev(own, evs, t.ev, foreign), t.len, t.ecn))
                    }) {}
                }
                if batch.is_empty() {
                    break;
                }
                work = true;
                match self.dp.tx_burst(&batch) {
                    Ok(r) => {
                        self.stats.tx_bursts += 1;
                        self.stats.tx_datagrams += r.datagrams;
                    }
                    Err(err) => self.datapath_error("send", &err),
                }
                if !batch.is_full() {
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
            // 7. Idle back-off.
            if work {
                last_work = now;
                continue;
            }
            if now.saturating_sub(last_work) < self.cfg.spin_ns {
                std::thread::yield_now();
                continue;
            }
            let deadline = self
                .qps
                .values()
                .filter_map(|e| e.conn.poll_timeout())
                .min();
            let timeout = match deadline {
                Some(t) if t <= now => continue,
                Some(t) => (t - now).min(self.cfg.max_sleep_ns),
                None => self.cfg.max_sleep_ns,
            };
            self.sleeping.store(true, Ordering::SeqCst);
            if self.cmds.is_empty() {
                self.stats.sleeps += 1;
                if let Err(err) = self.dp.wait(timeout) {
                    self.datapath_error("wait", &err);
                }
            }
            self.sleeping.store(false, Ordering::SeqCst);
        }
    }

    fn handle_cmd(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Shutdown => {}
            Cmd::CreateQp { qpn, entry } => {
                debug!(qpn = %Qpn(qpn), evs = entry.paths.evs.len(), "QP created");
                self.qps.insert(qpn, *entry);
            }
            Cmd::DestroyQp { qpn } => {
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
            Cmd::RegMr {
                qpn,
                len,
                access,
                reply,
            } => {
                let r = match self.qps.get_mut(&qpn) {
                    Some(e) => e
                        .conn
                        .regions_mut()
                        .register(len, access)
                        .map_err(|e| e.to_string()),
                    None => Err(format!("no QP {qpn}")),
                };
                let _ = reply.send(r);
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
                let r = match self.qps.get_mut(&qpn) {
                    Some(e) => e
                        .conn
                        .set_auth(mrc_transport::auth::Authenticator::new(*keys))
                        .map_err(|err| format!("authentication must be set before connect: {err}")),
                    None => Err(format!("no QP {qpn}")),
                };
                let _ = reply.send(r);
            }
            Cmd::Connect {
                qpn,
                peer,
                udp,
                reply,
            } => {
                let r = match self.qps.get_mut(&qpn) {
                    None => Err(format!("no QP {qpn}")),
                    Some(e) => match self.dp.open_conn(udp, &e.paths) {
                        Err(err) => Err(err.to_string()),
                        Ok(id) => match e.conn.connect(peer) {
                            Ok(()) => {
                                e.dp_conn = Some(id);
                                let ip = self.dp.peer_source_ip(id).unwrap_or(udp.ip());
                                e.sources.connect(ip);
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
                let _ = reply.send(r);
            }
            Cmd::PeerPorts { qpn, ports, reply } => {
                let r = match self.qps.get_mut(&qpn) {
                    None => Err(format!("no QP {qpn}")),
                    Some(e) if e.dp_conn.is_none() => Err(format!("QP {qpn} is not connected")),
                    Some(e) => {
                        e.sources.set_ports(&ports);
                        Ok(())
                    }
                };
                let _ = reply.send(r);
            }
            Cmd::Post { qpn, wr } => {
                let Some(e) = self.qps.get_mut(&qpn) else {
                    return;
                };
                let (wr_id, opcode, res) = match wr {
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
                    Wr::Recv { wr_id, sge } => {
                        (wr_id, WcOpcode::Recv, e.conn.post_recv(wr_id, sge))
                    }
                };
                if let Err(err) = res {
                    let c = Completion {
                        wr_id,
                        opcode,
                        status: post_error_status(err),
                        byte_len: 0,
                        imm: None,
                    };
                    let cq = if opcode == WcOpcode::Recv {
                        &e.recv_cq
                    } else {
                        &e.send_cq
                    };
                    let _ = cq.send(c);
                }
            }
            Cmd::Close { qpn } => {
                if let Some(e) = self.qps.get_mut(&qpn) {
                    info!(qpn = %Qpn(qpn), state = ?e.conn.state(), "QP closing");
                    let _ = e.conn.close();
                }
            }
            Cmd::Stats { qpn, reply } => {
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
                let _ = reply.send((r, es));
            }
        }
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
            let _ = e.recv_cq.send(c);
        }
        _ => {
            let _ = e.send_cq.send(c);
        }
    }
}

fn verify_slot(e: &mut QpEntry, v: VerifySpec, imm: u32) {
    let slot = u64::from(imm) % v.slots.max(1);
    let off = slot * v.slot_bytes;
    let Ok(bytes) = e.conn.regions().bytes(v.lkey) else {
        e.vstats.bad_bytes += v.slot_bytes;
        return;
    };
    let region = bytes.get(off as usize..(off + v.slot_bytes) as usize);
    match region {
        Some(b) => {
            e.vstats.bad_bytes += pattern::count_bad(b, v.seed, u64::from(imm));
            e.vstats.checked_bytes += v.slot_bytes;
        }
        None => e.vstats.bad_bytes += v.slot_bytes,
    }
    e.vstats.checked_messages += 1;
}
