//! Port Status Updates ([`crate::wire::PortStatusRepr`]): this side tells the peer which of
//! its planes (local NIC ports) are up when the datapath reports a change
//! ([`Connection::set_local_plane`]), resends the update every probe interval until the
//! peer acknowledges it, each copy on an EV of another up plane; and acts on the peer's
//! updates ([`crate::path::PathTable::on_peer_planes`]), acknowledging each.

use super::{ConnState, Connection, Transmit};
use crate::psn::Psn;
use crate::stats::DropReason;
use crate::wire::{Body, Opcode, PortStatusRepr};
use mrc_congestion::Controller;

/// What a connection knows of Port Status Updates, both ways.
#[derive(Clone, Debug, Default)]
pub(super) struct PsuState {
    /// Sequence number of this side's latest update (0: none sent yet).
    seq: u32,
    /// This side's latest update waits for the peer's acknowledgement.
    due: bool,
    /// When it is (re)sent next, ns.
    next_ns: u64,
    /// Copies of the current update sent (picks the plane of the next one).
    copies: usize,
    /// The sequence number of the peer's latest update applied.
    peer_seq: Option<u32>,
    /// An acknowledgement of the peer's update `seq` to send.
    ack_due: Option<u32>,
}

impl PsuState {
    /// Whether a Port Status Update or an acknowledgement may need sending now.
    #[inline]
    pub(super) fn pending(&self) -> bool {
        self.due || self.ack_due.is_some()
    }

    /// When this side's update is next (re)sent, ns, while it waits for an ack.
    pub(super) fn timer_ns(&self) -> Option<u64> {
        self.due.then_some(self.next_ns)
    }
}

impl<C: Controller> Connection<C> {
    /// The datapath reports this side's port on plane `plane` down (`up == false`) or up
    /// again at `now_ns`. Down: every EV of the plane is denied. Up: each of its EVs is
    /// probed at once and returns to rotation when its probe is answered. Either way a
    /// Port Status Update with this side's up planes goes to the peer (resent every probe
    /// interval until acknowledged), so that the peer stops sending on the plane within
    /// one RTT, or probes it again. A plane this connection lacks, or no change, does
    /// nothing. Returns whether the plane's state changed.
    pub fn set_local_plane(&mut self, plane: u8, up: bool, now_ns: u64) -> bool {
        if !self.paths.set_plane_local(plane, up, now_ns) {
            return false;
        }
        if self.paths.any_usable() {
            self.send.on_unblocked();
        }
        self.psu.seq = self.psu.seq.wrapping_add(1).max(1);
        self.psu.due = true;
        self.psu.next_ns = now_ns;
        self.psu.copies = 0;
        true
    }

    /// Bitmap of this side's planes whose local port is up (bit `q` for plane `q`), as its
    /// Port Status Updates say.
    pub fn local_up_planes(&self) -> u32 {
        use crate::path::{PlaneDownCause, PlaneState};
        self.paths
            .planes()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.state != PlaneState::Down(PlaneDownCause::Local))
            .fold(0, |m, (q, _)| m | 1 << q)
    }

    /// A Port Status Update (or an acknowledgement) from the peer, arriving on `ev_in`.
    pub(super) fn on_port_status(&mut self, now_ns: u64, ev_in: u32, r: &PortStatusRepr) {
        if r.ack {
            if self.psu.due && r.psu_seq == self.psu.seq {
                self.psu.due = false;
                self.stats.psu_acked += 1;
            } else {
                self.drop_pkt(ev_in, DropReason::StalePortStatus);
            }
            return;
        }
        self.stats.psu_received += 1;
        // acknowledge every copy (an ack may have been lost); apply only a newer update
        self.psu.ack_due = Some(r.psu_seq);
        let newer = self
            .psu
            .peer_seq
            .is_none_or(|s| r.psu_seq.wrapping_sub(s) as i32 > 0);
        if !newer {
            return;
        }
        self.psu.peer_seq = Some(r.psu_seq);
        // planes the peer lacks count as down at its end
        let n = self.paths.planes().len();
        let mine = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
        let theirs = if r.planes >= 32 {
            u32::MAX
        } else {
            (1u32 << r.planes) - 1
        };
        let up = r.up_planes & mine & theirs;
        self.paths
            .on_peer_planes(up, now_ns, self.cfg.probe_interval_ns);
        if self.paths.any_usable() {
            self.send.on_unblocked();
        }
    }

    /// The next Port Status Update or acknowledgement to send at `now_ns`, if one is due.
    pub(super) fn poll_port_status(&mut self, now_ns: u64, buf: &mut [u8]) -> Option<Transmit> {
        if !matches!(self.state, ConnState::Ready | ConnState::Draining) {
            return None;
        }
        let planes = self.paths.planes().len().min(32) as u8;
        let up_planes = self.local_up_planes();
        let (seq, ack) = if let Some(seq) = self.psu.ack_due {
            (seq, true)
        } else if self.psu.due && self.psu.next_ns <= now_ns {
            (self.psu.seq, false)
        } else {
            return None;
        };
        let k = if ack { 0 } else { self.psu.copies };
        let Some(idx) = self.paths.control_ev(k) else {
            // No EV to send on (this side's only plane is the one whose port is down): try
            // again a probe interval later, so the update's timer never stays due with
            // nothing it can send (a peer waiting on it would spin at one instant).
            if !ack {
                self.psu.next_ns = now_ns.saturating_add(self.cfg.probe_interval_ns.max(1));
            }
            return None;
        };
        let ev = self.paths.get(idx)?.ev;
        let body = Body::PortStatus(PortStatusRepr {
            psu_seq: seq,
            up_planes,
            planes,
            ack,
            other_flags: 0,
            reserved: 0,
        });
        let psn = Psn::from_seq(self.send.snd_nxt()).value();
        let t = self.emit_control(buf, Opcode::PortStatus, psn, ev, now_ns, body)?;
        if ack {
            self.psu.ack_due = None;
        } else {
            self.psu.copies += 1;
            self.psu.next_ns = now_ns.saturating_add(self.cfg.probe_interval_ns.max(1));
            self.stats.psu_sent += 1;
        }
        Some(t)
    }
}
