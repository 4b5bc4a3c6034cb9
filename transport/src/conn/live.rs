//! Liveness of the peer on every connection: keepalive probes and the unresponsive budget
//! whatever this side is doing.
//!
//! The sender's unresponsive budget ([`crate::send::SendConfig::unresponsive_budget_ns`])
//! runs only while data of ours waits for an answer. A side that only waits (receives
//! posted, a message half received, nothing of its own in flight) had nothing that timed
//! out: a peer that died after it had taken this side's credit left the receive posted
//! for ever. So, with the budget set, the connection also watches the peer itself:
//!
//! * every valid packet of the peer's generation counts as the peer heard from (one
//!   store per packet; a busy connection needs nothing more);
//! * while this side has work posted (sends not completed, receives posted, a message
//!   partly received) and nothing in flight, and the peer has been silent for the
//!   keepalive interval ([`ConnConfig::keepalive_interval_ns`], by default a twentieth of
//!   the budget: 250 ms at 5 s), an EV probe with `probe_seq` 0 (a keepalive, see
//!   [WIRE.md](../../../docs/WIRE.md)) goes to the peer every interval, on the EVs in
//!   turn; the peer's transport answers it as it answers every probe;
//! * once work has been posted and the peer has been silent for the budget, counted from
//!   the later of the last packet heard and the moment the work was first seen, the
//!   connection fails as the sender's budget fails it: the oldest send work request (or,
//!   with none, the oldest posted receive) completes with [`WcStatus::RetryExceeded`],
//!   the rest [`WcStatus::Flushed`], and [`Connection::give_up`] names
//!   [`GiveUp::PeerUnresponsive`].
//!
//! So a peer that dies or vanishes is found within the budget of its last packet: at the
//! budget when this side was sending or receiving, and between the budget less one
//! interval and the budget when both sides were idle with work posted (the last packet
//! heard was then a keepalive or its answer).
//!
//! The work is looked at only where time is known (`poll_transmit`, `handle_timeout`), so
//! a post only raises a flag; while it is raised [`Connection::poll_timeout`] asks for a
//! call at once.

use super::{ConnState, Connection, Transmit};
use crate::completion::WcStatus;
use crate::path::PathState;
use crate::psn::Psn;
use crate::send::GiveUp;
use crate::wire::{Body, Opcode, ProbeRepr};
use mrc_congestion::Controller;

#[cfg(doc)]
use super::ConnConfig;

/// The `probe_seq` of a keepalive probe (path probes number from 1).
pub const KEEPALIVE_PROBE_SEQ: u32 = 0;

/// [`ConnConfig::keepalive_interval_ns`] when left at 0: this fraction of the budget.
pub const KEEPALIVE_PER_BUDGET: u64 = 20;

/// Liveness state of one connection (see the module docs).
#[derive(Clone, Debug, Default)]
pub(super) struct Liveness {
    /// The unresponsive budget, ns; `None`: liveness off.
    budget_ns: Option<u64>,
    /// Keepalive interval, ns.
    interval_ns: u64,
    /// When the peer was last heard from (a valid packet of its generation), ns.
    heard_ns: u64,
    /// Since when work has been posted (as last looked at), ns.
    since_ns: Option<u64>,
    /// When the latest keepalive left, ns.
    probe_ns: u64,
    /// A post since the work was last looked at.
    recheck: bool,
    /// A keepalive is due: the next `poll_transmit` sends it.
    probe_due: bool,
    /// Index of the EV the next keepalive tries first.
    next_ev: usize,
}

impl Liveness {
    /// Liveness with budget `budget_ns` (`None`: off) and keepalive interval
    /// `interval_ns` (0: the budget / [`KEEPALIVE_PER_BUDGET`]).
    pub(super) fn new(budget_ns: Option<u64>, interval_ns: u64) -> Self {
        let interval_ns = match (budget_ns, interval_ns) {
            (Some(b), 0) => (b / KEEPALIVE_PER_BUDGET).max(1),
            (_, i) => i.max(1),
        };
        Liveness {
            budget_ns,
            interval_ns,
            ..Liveness::default()
        }
    }

    /// A valid packet of the peer arrived at `now_ns`.
    #[inline(always)]
    pub(super) fn heard(&mut self, now_ns: u64) {
        self.heard_ns = now_ns;
    }

    /// Whether `poll_transmit` must take the slow path for liveness (a keepalive due, or
    /// posts not yet looked at).
    #[inline(always)]
    pub(super) fn attention(&self) -> bool {
        self.probe_due | self.recheck
    }

    /// The time silence is counted from, when work is posted.
    fn reference_ns(&self) -> Option<u64> {
        self.since_ns.map(|s| s.max(self.heard_ns))
    }
}

impl<C: Controller> Connection<C> {
    /// Whether this side waits for the peer: sends not completed, receives posted, or a
    /// message partly received.
    pub(super) fn has_live_work(&self) -> bool {
        !self.send.is_idle() || self.rx.posted_recvs() > 0 || self.rx.in_progress()
    }

    /// Called by every post before it adds work: a post onto no work starts the budget
    /// afresh at the next look (`since` may be stale: work that ended is noticed only at
    /// the next look).
    pub(super) fn live_before_post(&mut self) {
        if self.live.budget_ns.is_some() {
            if !self.has_live_work() {
                self.live.since_ns = None;
            }
            self.live.recheck = true;
        }
    }

    /// Looks at the work at `now_ns`: starts or stops the budget.
    pub(super) fn live_look(&mut self, now_ns: u64) {
        if self.live.budget_ns.is_none() {
            return;
        }
        self.live.recheck = false;
        if self.has_live_work() {
            self.live.since_ns.get_or_insert(now_ns);
        } else {
            self.live.since_ns = None;
            self.live.probe_due = false;
        }
    }

    /// Whether nothing of ours waits for an answer (then a keepalive is what asks).
    fn nothing_in_flight(&self) -> bool {
        self.send.snd_una() == self.send.snd_nxt()
    }

    /// When the next keepalive is due, if one will be.
    fn keepalive_at_ns(&self) -> Option<u64> {
        let r = self.live.reference_ns()?;
        if self.live.probe_due || !self.nothing_in_flight() {
            return None;
        }
        Some(
            r.max(self.live.probe_ns)
                .saturating_add(self.live.interval_ns),
        )
    }

    /// When the budget runs out, if work is posted.
    fn live_deadline_ns(&self) -> Option<u64> {
        Some(
            self.live
                .reference_ns()?
                .saturating_add(self.live.budget_ns?),
        )
    }

    /// Liveness's part of [`Connection::poll_timeout`].
    pub(super) fn live_timeout(&self) -> Option<u64> {
        self.live.budget_ns?;
        if self.live.recheck {
            // posts not looked at: at once (any time already past)
            return Some(self.live.heard_ns);
        }
        match (self.keepalive_at_ns(), self.live_deadline_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Liveness's part of [`Connection::handle_timeout`]: fails the connection when the
    /// budget ran out (returns true then), or marks a keepalive due.
    pub(super) fn live_timers(&mut self, now_ns: u64) -> bool {
        self.live_look(now_ns);
        if let (Some(r), Some(d)) = (self.live.reference_ns(), self.live_deadline_ns())
            && now_ns >= d
        {
            self.live_give_up = Some(GiveUp::PeerUnresponsive {
                silent_ns: now_ns - r,
            });
            self.fail_first(WcStatus::RetryExceeded);
            return true;
        }
        if self.keepalive_at_ns().is_some_and(|t| now_ns >= t) {
            self.live.probe_due = true;
        }
        false
    }

    /// Liveness's part of `poll_control`: looks at posts, and writes a due keepalive into
    /// `buf` (on the next EV in turn that is not denied).
    pub(super) fn poll_keepalive(&mut self, now_ns: u64, buf: &mut [u8]) -> Option<Transmit> {
        if self.live.recheck {
            self.live_look(now_ns);
        }
        if !self.live.probe_due || !matches!(self.state, ConnState::Ready | ConnState::Draining) {
            return None;
        }
        if !self.nothing_in_flight() {
            // data went out meanwhile: its answer tells
            self.live.probe_due = false;
            return None;
        }
        let n = self.paths.len();
        let idx = (0..n)
            .map(|k| (self.live.next_ev + k) % n.max(1))
            .find(|&i| {
                self.paths
                    .get(i)
                    .is_some_and(|p| p.state != PathState::Denied)
            })?;
        let ev = self.paths.get(idx).map_or(0, |p| p.ev);
        let body = Body::Probe(ProbeRepr {
            probe_seq: KEEPALIVE_PROBE_SEQ,
            reserved: 0,
        });
        let psn = Psn::from_seq(self.send.snd_nxt()).value();
        let t = self.emit_control(buf, Opcode::EvProbe, psn, ev, now_ns, body)?;
        self.live.next_ev = idx + 1;
        self.live.probe_due = false;
        self.live.probe_ns = now_ns;
        self.stats.keepalives_sent += 1;
        Some(t)
    }
}
