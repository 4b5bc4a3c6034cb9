//! A connection in the sans-IO manner of quinn-proto: work requests in (`post_*`),
//! datagrams in (`handle_datagram`), datagrams out (`poll_transmit`), timers
//! (`poll_timeout` / `handle_timeout`), completions out (`poll_completion`). Time is passed
//! in as `now_ns`; nothing here reads a clock, a socket or a global RNG.
//!
//! Setup and teardown (a reduced IBA QP state machine, see [`ConnState`]):
//! `new` -> `Init` --`connect(peer)`--> `Ready` --`close()`--> `Draining` --(all work
//! requests done)--> `Closed`; any state --fatal error--> `Error`. Peer parameters (QPN,
//! initial PSN, generation) are exchanged out of band, as with RDMA CM.
//!
//! Peer restart. A packet whose MRCETH generation is not the peer's may mean the peer
//! restarted: it is dropped and counted ([`DropReason::GenerationMismatch`]) and, unless
//! it is itself a NACK(GENERATION_MISMATCH), answered with one that echoes its PSN. The
//! connection fails every outstanding work request with [`WcStatus::GenerationMismatch`]
//! (no silent corruption) only on evidence an off-path attacker cannot produce blind, in
//! the manner of RFC 5961 (section 3.2: a RST counts only inside the receive window):
//! * only a packet that echoes a PSN this side has in flight and not yet acknowledged
//!   counts: a NACK (of any reason, of another generation; or a
//!   NACK(GENERATION_MISMATCH) of the peer's generation, the peer's answer to a packet of
//!   ours) whose PSN names such a packet, or a SACK of another generation that
//!   acknowledges such a packet and names no PSN never sent. A forger must guess one of
//!   the `snd_nxt - snd_una` PSNs in flight out of 2^24; on an idle connection there is
//!   none to guess. Everything else of another generation (data, CNPs, probes, SACKs and
//!   NACKs naming nothing in flight) is a counted drop and
//!   [`ConnStats::restart_evidence_rejected`], never a teardown; a
//!   NACK(GENERATION_MISMATCH) naming nothing in flight is a [`DropReason::InvalidAck`]
//!   drop and counted there too. Data of another generation never counts: its PSN lies
//!   in the sender's own, new PSN space, which this side cannot check (so a SYN never
//!   resets a synchronized TCP connection, RFC 5961 section 4); the NACK it is answered
//!   with is the challenge, and a restarted peer with that PSN in flight takes the NACK as
//!   evidence on its side;
//! * one such packet proves nothing either (a forger may guess right), so the evidence
//!   must persist: another counting packet arrives at least one RTO
//!   ([`crate::send::SendState::base_rto_ns`], without back-off) after the first, with no
//!   packet of the peer's generation in between.
//!
//! Liveness (`conn/live.rs`): with the unresponsive budget set
//! ([`crate::send::SendConfig::unresponsive_budget_ns`]) a peer silent for the budget
//! fails the connection whatever this side does: sending (the sender's budget), or
//! waiting with receives posted and nothing in flight (keepalive probes, probe sequence
//! [`KEEPALIVE_PROBE_SEQ`], every [`ConnConfig::keepalive_interval_ns`] of silence). A busy
//! connection sends none.
//!
//! A restarted peer answers the packets of ours in flight with its new generation,
//! echoing their PSNs; with nothing acknowledged our RTO resends the flight one RTO after
//! it left, and the peer answers the resends as it answered the originals, so the restart
//! is detected one base RTO after its first answer (1 ms, the initial RTO, in the test
//! `restarted_peer_gives_error_completions`). A connection with nothing in flight has
//! nothing to fail and notices the restart once it sends again. (A restarted peer not
//! yet connected answers nothing: the RTO's retry limit ends the work requests with
//! [`WcStatus::RetryExceeded`].)
//!
//! ```
//! use mrc_congestion::FixedWindowConfig;
//! use mrc_transport::{Access, ConnConfig, Connection, Psn, Sge, WcStatus};
//!
//! let cc = || FixedWindowConfig::default().build();
//! let mut a = Connection::new(ConnConfig { local_qpn: 1, ..ConnConfig::default() }, cc())?;
//! let mut b = Connection::new(
//!     ConnConfig { local_qpn: 2, initial_psn: Psn::new(77), ..ConnConfig::default() },
//!     cc(),
//! )?;
//! a.connect(b.local_params()).unwrap();
//! b.connect(a.local_params()).unwrap();
//! let src = a.regions_mut().register(10_000, Access::LOCAL_WRITE).unwrap();
//! let dst = b.regions_mut().register(10_000, Access::REMOTE_WRITE).unwrap();
//! a.regions_mut().bytes_mut(src.lkey).unwrap().fill(7);
//! let sge = Sge { lkey: src.lkey, addr: src.addr, len: 10_000 };
//! a.post_write(42, sge, dst.addr, dst.rkey).unwrap();
//!
//! // a zero-delay "network": move datagrams both ways until both are quiet
//! let (mut buf, now) = (vec![0u8; 4096 + 56], 1_000);
//! loop {
//!     let mut moved = false;
//!     while let Some(t) = a.poll_transmit(now, &mut buf) {
//!         b.handle_datagram(now, t.ev, t.ecn, &buf[..t.len]);
//!         moved = true;
//!     }
//!     while let Some(t) = b.poll_transmit(now, &mut buf) {
//!         a.handle_datagram(now, t.ev, t.ecn, &buf[..t.len]);
//!         moved = true;
//!     }
//!     if !moved {
//!         break;
//!     }
//! }
//! let c = a.poll_completion().unwrap();
//! assert_eq!((c.wr_id, c.status, c.byte_len), (42, WcStatus::Success, 10_000));
//! assert!(b.regions().bytes(dst.lkey).unwrap().iter().all(|&x| x == 7));
//! # Ok::<(), mrc_transport::conn::ConfigError>(())
//! ```

mod config;
mod live;
mod rx;
mod tx;

pub use config::{
    ConfigError, ConnConfig, ConnState, DEFAULT_MAX_RECV_WR, DEFAULT_MAX_SEND_WR, Ecn, PeerParams,
    PostError, Sge, StateError, Transmit,
};
pub use live::{KEEPALIVE_PER_BUDGET, KEEPALIVE_PROBE_SEQ};
pub use tx::{MAX_DATA_HEADER_BYTES, data_opcode};

/// Why [`Connection::deregister_mr`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeregisterError {
    /// No region has this lkey.
    #[error("no region with lkey {0:#x}")]
    UnknownKey(u32),
    /// Work requests still name the region (nothing was deregistered).
    #[error("region {lkey:#x} in use by {sends} send and {recvs} receive work requests")]
    InUse {
        /// The region.
        lkey: u32,
        /// Sends posted and not completed whose source lies in it.
        sends: usize,
        /// Receive buffers posted in it.
        recvs: usize,
    },
}

use crate::auth::Authenticator;
use crate::completion::{Completion, WcStatus};
use crate::path::PathTable;
use crate::recv::{Acker, RecvWindow, RecvWr, RxMessages};
use crate::region::RegionTable;
#[cfg(doc)]
use crate::region::SharedMem;
use crate::send::{MsgKind, MsgSpec, SendState};
use crate::stats::ConnStats;
#[cfg(doc)]
use crate::stats::DropReason;
use mrc_congestion::Controller;
use std::collections::VecDeque;

/// One reliable multipath connection with congestion controller `C`.
#[derive(Debug)]
pub struct Connection<C: Controller> {
    cfg: ConnConfig,
    state: ConnState,
    peer: Option<PeerParams>,
    regions: RegionTable,
    send: SendState,
    paths: PathTable,
    cc: C,
    rwin: RecvWindow,
    rx: RxMessages,
    acker: Acker,
    completions: VecDeque<Completion>,
    stats: ConnStats,
    /// Go-back-N receiver: the `rcv_nxt` a NACK(NO_BITMAP) was last sent for.
    gbn_nacked: Option<u64>,
    /// Pacing: start of the last paced data packet's slot, ns (the later of its send
    /// time less the pacing credit and the release time it was sent against).
    paced_from_ns: u64,
    /// Pacing: bits of the last paced data packet (0: none sent paced yet).
    paced_bits: u64,
    probe_replies: VecDeque<(u32, u32, u32)>,
    /// Port Status Updates, both ways ([`psu`]).
    psu: psu::PsuState,
    /// Evidence that the peer restarted: when the first packet of another generation (or a
    /// NACK(GENERATION_MISMATCH)) arrived since the last packet of the peer's generation.
    gen_mismatch_since_ns: Option<u64>,
    /// Per-packet authentication, when on ([`Connection::set_auth`]).
    auth: Option<Authenticator>,
    /// Scratch for the plain packet of an authenticated datagram (reused).
    auth_plain: Vec<u8>,
    /// [`Connection::set_data_before_sack`].
    data_before_sack: bool,
    /// A data packet went ahead of the SACK now due (cleared when that SACK leaves).
    data_jumped_sack: bool,
    /// Liveness of the peer: keepalives and the budget on every connection ([`live`]).
    live: live::Liveness,
    /// Why the connection gave up on a silent peer while nothing of its own was in flight
    /// ([`live`]).
    live_give_up: Option<crate::send::GiveUp>,
}

impl<C: Controller> Connection<C> {
    /// A connection in state `Init` with congestion controller `cc`.
    ///
    /// # Errors
    /// [`ConfigError`] from [`ConnConfig::validate`].
    pub fn new(cfg: ConnConfig, cc: C) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let mut paths = PathTable::with_planes(&cfg.evs, &cfg.ev_planes, cfg.selection, cfg.seed);
        paths.set_revalidate_after_ns(cfg.revalidate_ev_after_ns);
        paths.add_spares(&cfg.spare_evs, &cfg.spare_ev_planes);
        let mut send_cfg = cfg.send;
        // A go-back-N receiver drops everything after a hole, so a probe of the highest
        // in-flight packet tells nothing: go-back-N relies on NACK and RTO, like RoCE RC.
        send_cfg.tlp &= !cfg.go_back_n;
        send_cfg.go_back_n = cfg.go_back_n;
        let mut send = SendState::new(cfg.initial_psn, send_cfg);
        // the sender counts its packets in flight per plane for the EV selection
        // ([`PathTable::select_balanced`])
        let ev_plane: Vec<u8> = paths.paths().iter().map(|p| p.plane).collect();
        send.set_ev_planes(&ev_plane);
        let rwin = RecvWindow::new(crate::psn::Psn::new(0), cfg.recv_window_packets);
        let mut rx = RxMessages::new(cfg.max_rx_messages, cfg.max_staged_bytes);
        rx.set_max_ranges(
            cfg.max_rx_messages as usize
                + (cfg.recv_window_packets as usize).max(crate::recv::MAX_COVERAGE_HOLES),
        );
        let acker = Acker::new(cfg.ack);
        let live = live::Liveness::new(cfg.send.unresponsive_budget_ns, cfg.keepalive_interval_ns);
        let regions = match cfg.region_key {
            Some(key) => RegionTable::random(key),
            None => RegionTable::new((cfg.seed as u32) ^ (cfg.local_qpn << 8)),
        };
        Ok(Connection {
            cfg,
            state: ConnState::Init,
            peer: None,
            regions,
            send,
            paths,
            cc,
            rwin,
            rx,
            acker,
            completions: VecDeque::new(),
            stats: ConnStats::default(),
            gbn_nacked: None,
            paced_from_ns: 0,
            paced_bits: 0,
            probe_replies: VecDeque::new(),
            psu: psu::PsuState::default(),
            gen_mismatch_since_ns: None,
            auth: None,
            auth_plain: Vec::new(),
            data_before_sack: false,
            data_jumped_sack: false,
            live,
            live_give_up: None,
        })
    }

    /// What the peer needs to connect to this side: local QPN, initial PSN, generation.
    pub fn local_params(&self) -> PeerParams {
        PeerParams {
            qpn: self.cfg.local_qpn,
            initial_psn: self.cfg.initial_psn,
            generation: self.cfg.generation,
        }
    }

    /// `Init` -> `Ready` with the peer's parameters.
    ///
    /// # Errors
    /// [`StateError`] unless in `Init`.
    pub fn connect(&mut self, peer: PeerParams) -> Result<(), StateError> {
        if self.state != ConnState::Init {
            return Err(StateError(self.state));
        }
        self.peer = Some(peer);
        self.rwin = RecvWindow::new(peer.initial_psn, self.cfg.recv_window_packets);
        self.state = ConnState::Ready;
        // receives posted before connecting start the budget at the next look
        if self.has_live_work() {
            self.live_before_post();
        }
        Ok(())
    }

    /// Turns per-packet authentication on ([`crate::auth`]): from now on every datagram
    /// this side sends has its body encrypted and carries the trailer, and every datagram
    /// it receives must carry a valid one (else it is dropped, unparsed, as
    /// [`DropReason::AuthFailed`] or [`DropReason::Replayed`]). Both ends turn it on before they connect. The buffer
    /// handed to [`Connection::poll_transmit`] must then hold
    /// [`crate::auth::AUTH_TRAILER_BYTES`] more.
    ///
    /// # Errors
    /// [`StateError`] unless in `Init`.
    pub fn set_auth(&mut self, auth: Authenticator) -> Result<(), StateError> {
        if self.state != ConnState::Init {
            return Err(StateError(self.state));
        }
        self.auth = Some(auth);
        Ok(())
    }

    /// Lets one data packet leave ahead of a due SACK: [`Connection::poll_transmit`] then
    /// returns the next data packet (if the window, pacing and paths allow one) before the
    /// SACK, and the SACK right after it, so at most one data packet precedes each SACK.
    /// For request-response traffic on real sockets, where each datagram is its own
    /// system call: the reply is on its way one `sendmsg` (2-3 us on loopback) sooner,
    /// and the SACK follows in the same burst. Off by default (the SACK first, as every
    /// exact packet order in the tests assumes); may change at any time.
    pub fn set_data_before_sack(&mut self, on: bool) {
        self.data_before_sack = on;
        self.data_jumped_sack = false;
    }

    /// Whether per-packet authentication is on.
    pub fn is_authenticated(&self) -> bool {
        self.auth.is_some()
    }

    /// `Ready` -> `Draining` (no new work requests; `Closed` once all finished).
    ///
    /// # Errors
    /// [`StateError`] unless in `Ready`.
    pub fn close(&mut self) -> Result<(), StateError> {
        if self.state != ConnState::Ready {
            return Err(StateError(self.state));
        }
        self.state = ConnState::Draining;
        self.maybe_closed();
        Ok(())
    }

    fn maybe_closed(&mut self) {
        if self.state == ConnState::Draining && self.send.is_idle() {
            self.state = ConnState::Closed;
            self.rx.flush(&mut self.completions);
        }
    }

    /// Fails the connection: every outstanding send work request completes with `status`
    /// (the oldest) or `Flushed`, every posted receive with `Flushed`.
    fn fail(&mut self, status: WcStatus) {
        if matches!(self.state, ConnState::Error | ConnState::Closed) {
            return;
        }
        self.state = ConnState::Error;
        self.send.fail_all(status);
        self.drain_send_completions();
        self.rx.flush(&mut self.completions);
    }

    /// [`Connection::fail`] where `status` must reach the application even when no send
    /// work request is outstanding: then the oldest posted receive completes with it
    /// (the rest `Flushed`), so a side that only receives learns why.
    fn fail_first(&mut self, status: WcStatus) {
        if matches!(self.state, ConnState::Error | ConnState::Closed) {
            return;
        }
        let sends = !self.send.is_idle();
        self.state = ConnState::Error;
        self.send.fail_all(status);
        self.drain_send_completions();
        let first = self.completions.len();
        self.rx.flush(&mut self.completions);
        if !sends && let Some(c) = self.completions.get_mut(first) {
            c.status = status;
        }
    }

    fn drain_send_completions(&mut self) {
        self.send.take_completions_into(&mut self.completions);
    }

    /// Current state.
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// The configuration.
    pub fn config(&self) -> &ConnConfig {
        &self.cfg
    }

    /// Memory regions of this connection (register buffers here).
    pub fn regions(&self) -> &RegionTable {
        &self.regions
    }

    /// Memory regions, mutable (register, fill, deregister).
    pub fn regions_mut(&mut self) -> &mut RegionTable {
        &mut self.regions
    }

    /// Deregisters the region `lkey` unless a work request still names it (verbs
    /// `ibv_dereg_mr` refuses with `EBUSY` in the same case): a send not yet completed
    /// whose source lies in it, or a posted receive buffer in it. Once this returns `Ok`
    /// the transport never touches the region's bytes again, so memory registered with
    /// [`RegionTable::register_raw`] may then be freed.
    ///
    /// # Errors
    /// [`DeregisterError::UnknownKey`]; [`DeregisterError::InUse`] (nothing changed).
    pub fn deregister_mr(&mut self, lkey: u32) -> Result<(), DeregisterError> {
        self.regions
            .key(lkey)
            .map_err(|_| DeregisterError::UnknownKey(lkey))?;
        let sends = self.send.messages_using(lkey);
        let recvs = self.rx.recvs_using(lkey);
        if sends + recvs > 0 {
            return Err(DeregisterError::InUse { lkey, sends, recvs });
        }
        self.regions
            .deregister(lkey)
            .map_err(|_| DeregisterError::UnknownKey(lkey))
    }

    /// Connection counters.
    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }

    /// The path table (EV states, RTTs, per-EV counters).
    pub fn paths(&self) -> &PathTable {
        &self.paths
    }

    /// Turns this side's trim NACKs ([`ConnConfig::trim_nacks`]) on or off, e.g. when
    /// the peer says at set-up that it relies on none (OCP MRC's
    /// `MRC_QP_CAP_TRIM_NACK_DEST_UNSUPPORTED`). Applies to trimmed packets that arrive
    /// from now on.
    pub fn set_trim_nacks(&mut self, on: bool) {
        self.cfg.trim_nacks = on;
    }

    /// The datapath reports `ev` down (`true`) or up (`false`). While every EV is down
    /// nothing is sent, but the RTO keeps running from when work began to wait (the next
    /// `poll_transmit` or `handle_timeout` notes it): after the retry limit the work
    /// requests fail with [`WcStatus::RetryExceeded`] and the connection goes to `Error`,
    /// as with every EV black-holed.
    pub fn set_ev_denied(&mut self, ev: u32, denied: bool) {
        self.paths.set_in_flight_evs(self.send.in_flight_evs());
        self.paths.set_denied(ev, denied);
        if self.paths.any_usable() {
            self.send.on_unblocked();
        }
    }

    /// Notes at `now_ns` that work waits which no EV can carry (every EV denied), so the
    /// RTO runs (see [`SendState::on_blocked`]).
    pub(super) fn note_blocked(&mut self, now_ns: u64) {
        if !self.paths.any_usable() && self.send.next_tx(self.cc.cwnd_bytes()).is_some() {
            self.send.on_blocked(now_ns);
        }
    }

    /// The congestion controller.
    pub fn controller(&self) -> &C {
        &self.cc
    }

    /// The congestion controller, to change: a controller API sets a QP's profile this
    /// way before the connection carries traffic (a controller swapped mid-flight starts
    /// from its own initial window).
    pub fn controller_mut(&mut self) -> &mut C {
        &mut self.cc
    }

    /// Why the sender gave up, when its work requests failed with
    /// [`WcStatus::RetryExceeded`] after RTO expiries: the retry limit, or the peer silent
    /// for the unresponsive budget (`Display`: `peer unresponsive for 5.0 s`).
    pub fn give_up(&self) -> Option<crate::send::GiveUp> {
        self.send.give_up().or(self.live_give_up)
    }

    /// Sender state (snd_una, snd_nxt, bytes in flight, retransmit queue).
    pub fn send_state(&self) -> &SendState {
        &self.send
    }

    /// Receive work requests posted and not yet completed.
    pub fn posted_recvs(&self) -> usize {
        self.rx.posted_recvs()
    }

    /// Messages of the peer received whole and completed in order, of every kind (SEND,
    /// WRITE, WRITE_WITH_IMM): the receiver's next message sequence number. A plain
    /// WRITE raises no completion (verbs semantics), so this is how a layer above counts
    /// the WRITEs that landed (a libfabric provider's `FI_RMA_EVENT` counters): this
    /// count less the receive completions it took.
    pub fn messages_received(&self) -> u64 {
        self.rx.next_msn()
    }

    /// Receive window (rcv_nxt, bitmap).
    pub fn recv_window(&self) -> &RecvWindow {
        &self.rwin
    }

    fn post(&mut self, spec: MsgSpec) -> Result<(), PostError> {
        if self.state != ConnState::Ready {
            return Err(PostError::BadState(self.state));
        }
        if self.send.outstanding_messages() >= self.cfg.max_send_wr as usize {
            return Err(PostError::SendQueueFull {
                max_send_wr: self.cfg.max_send_wr,
            });
        }
        self.regions
            .check_local_read(spec.local_lkey, spec.local_addr, u64::from(spec.len))
            .map_err(PostError::LocalAccess)?;
        self.live_before_post();
        self.send.post(spec);
        Ok(())
    }

    /// Posts an RDMA WRITE of `local` to `remote_addr` in the peer region `rkey`.
    ///
    /// # Errors
    /// [`PostError::BadState`] unless `Ready`; [`PostError::SendQueueFull`] with
    /// [`ConnConfig::max_send_wr`] work requests outstanding; [`PostError::LocalAccess`]
    /// for a bad `local`.
    pub fn post_write(
        &mut self,
        wr_id: u64,
        local: Sge,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), PostError> {
        self.post(MsgSpec {
            wr_id,
            kind: MsgKind::Write { remote_addr, rkey },
            imm: None,
            local_lkey: local.lkey,
            local_addr: local.addr,
            len: local.len,
        })
    }

    /// Posts an RDMA WRITE with immediate data `imm`; the peer completes it into a posted
    /// receive (`RecvRdmaWithImm`) once it and every earlier message arrived.
    ///
    /// # Errors
    /// As [`Connection::post_write`].
    pub fn post_write_with_imm(
        &mut self,
        wr_id: u64,
        local: Sge,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), PostError> {
        self.post(MsgSpec {
            wr_id,
            kind: MsgKind::Write { remote_addr, rkey },
            imm: Some(imm),
            local_lkey: local.lkey,
            local_addr: local.addr,
            len: local.len,
        })
    }

    /// Posts a SEND of `local` (into the peer's next posted receive).
    ///
    /// # Errors
    /// As [`Connection::post_write`].
    pub fn post_send(&mut self, wr_id: u64, local: Sge) -> Result<(), PostError> {
        self.post(MsgSpec {
            wr_id,
            kind: MsgKind::Send,
            imm: None,
            local_lkey: local.lkey,
            local_addr: local.addr,
            len: local.len,
        })
    }

    /// Posts a SEND with immediate data.
    ///
    /// # Errors
    /// As [`Connection::post_write`].
    pub fn post_send_with_imm(
        &mut self,
        wr_id: u64,
        local: Sge,
        imm: u32,
    ) -> Result<(), PostError> {
        self.post(MsgSpec {
            wr_id,
            kind: MsgKind::Send,
            imm: Some(imm),
            local_lkey: local.lkey,
            local_addr: local.addr,
            len: local.len,
        })
    }

    /// Posts a receive buffer for an incoming SEND or WRITE_WITH_IMM (allowed in `Init`).
    ///
    /// # Errors
    /// [`PostError::BadState`] in `Draining`, `Closed`, `Error`;
    /// [`PostError::RecvQueueFull`] with [`ConnConfig::max_recv_wr`] receives posted;
    /// [`PostError::LocalAccess`] if `buf` is not a registered range.
    pub fn post_recv(&mut self, wr_id: u64, buf: Sge) -> Result<(), PostError> {
        if !matches!(self.state, ConnState::Init | ConnState::Ready) {
            return Err(PostError::BadState(self.state));
        }
        if self.rx.posted_recvs() >= self.cfg.max_recv_wr as usize {
            return Err(PostError::RecvQueueFull {
                max_recv_wr: self.cfg.max_recv_wr,
            });
        }
        self.regions
            .check_local_read(buf.lkey, buf.addr, u64::from(buf.len))
            .map_err(PostError::LocalAccess)?;
        self.live_before_post();
        self.rx.post_recv(RecvWr {
            wr_id,
            lkey: buf.lkey,
            addr: buf.addr,
            len: buf.len,
        });
        self.rx.advance(&mut self.regions, &mut self.completions);
        Ok(())
    }

    /// Next completion (sender side in posting order, receiver side in message order).
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.drain_send_completions();
        self.completions.pop_front()
    }

    /// The earliest time [`Connection::handle_timeout`] (or `poll_transmit`, for a delayed
    /// SACK, a probe or pacing) needs calling, ns.
    pub fn poll_timeout(&self) -> Option<u64> {
        if !matches!(self.state, ConnState::Ready | ConnState::Draining) {
            return None;
        }
        let mut t: Option<u64> = None;
        let mut min = |x: Option<u64>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        min(self.acker.timeout_ns());
        min(self.send.rack_timer_ns());
        min(self.send.rto_deadline_ns());
        min(self.send.tlp_deadline_ns());
        min(self.send.rnr_deadline_ns());
        min(self.paths.next_probe_time());
        min(self.psu.timer_ns());
        min(self.cc.next_timer_ns());
        min(self.live_timeout());
        // The pacing release time is a timer only while a data packet could leave then:
        // with every EV denied nothing can, and a release time in the past would be
        // returned forever (the caller would spin).
        if self.paced_bits > 0
            && self.paths.any_usable()
            && self.send.next_tx(self.cc.cwnd_bytes()).is_some()
        {
            min(Some(self.pacing_release_ns()));
        }
        t
    }

    /// Runs the timers due at `now_ns`: RACK loss detection, the RTO, the controller timer.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        if !matches!(self.state, ConnState::Ready | ConnState::Draining) {
            return;
        }
        if self.cc.next_timer_ns().is_some_and(|t| t <= now_ns) {
            self.cc.on_timer(now_ns);
        }
        if self.send.rack_timer_ns().is_some_and(|t| t <= now_ns) {
            let l = self
                .send
                .detect_losses(now_ns, &mut self.paths, &mut self.stats);
            if l.lost_bytes > 0 {
                self.cc.on_loss(now_ns, l.lost_bytes);
            }
        }
        self.send.on_rnr_timer(now_ns);
        self.send.on_tlp(now_ns, &mut self.stats);
        let l = self.send.on_rto(now_ns, &mut self.paths, &mut self.stats);
        if l.failed {
            self.fail(WcStatus::RetryExceeded);
            return;
        }
        if self.live_timers(now_ns) {
            return;
        }
        if l.lost_packets > 0 {
            self.cc.on_loss(now_ns, l.lost_bytes);
        }
        self.note_blocked(now_ns);
        self.drain_send_completions();
    }
}

mod psu;
#[cfg(test)]
mod tests;
