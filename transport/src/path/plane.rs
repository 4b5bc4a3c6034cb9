//! Planes: the path table's view of a host whose NIC is split into P ports on P identical,
//! independent fabrics (DESIGN.md section 5, "Planes and rails"; OCP MRC 1.0's EV profiles).
//!
//! Every EV belongs to one plane (the datapath says which: the plane of the local NIC port
//! its packets leave from, [`crate::ConnConfig::ev_planes`]); port `p` of one host reaches
//! only port `p` of another, so an EV's plane is the same at both ends. A connection's EV
//! set is split equally across its planes (the configuration refuses an unbalanced split,
//! [`crate::conn::ConfigError::EvPlanes`]), and every plane keeps its EVs for good: no
//! rule here retires an EV, so each plane always has at least one EV that data, and with
//! it the SACKs and NACKs that echo it, can use.
//!
//! A plane is `Up` or `Down` with a cause ([`PlaneDownCause`]):
//! - **Loss**: losses on at least [`plane_down_after_evs`] distinct EVs of the plane (2)
//!   with no delivery on any EV of the plane in between (a loss counts only for a packet
//!   sent after the latest one the plane delivered: one sent before it was overtaken on a
//!   plane that worked, [`Plane::delivered_sent_ns`]) and nothing delivered on the plane
//!   for a smoothed RTT of its EVs ([`Plane::delivered_at_ns`]), or
//!   every usable EV of the plane `AssumedBad`: the plane failed (a NIC port, a plane's
//!   switches), not one path in it. Its EVs leave rotation at once instead of one by one
//!   after each has lost twice ([`super::BAD_AFTER_CONSECUTIVE_LOSSES`]); a dead link
//!   inside a plane that takes it down this way costs one plane probe's round trip, after
//!   which only the EVs hashed onto the link stay out. Only while another plane is
//!   `Up` with an EV in rotation (`Good` or `Skip`): with every other plane down, or
//!   every other plane's EVs out (an RTO over every plane), the per-EV rules alone decide
//!   (taking the last working plane out would leave nothing to compare with). Losses an
//!   RTO declares over several planes at once count against their EVs only
//!   ([`super::PathTable::on_loss_ev`]).
//! - **PeerReport**: the peer's Port Status Update ([`crate::wire::PortStatusRepr`]) says its
//!   port on this plane is down: nothing sent on the plane could arrive.
//! - **Local**: the datapath says this side's own port on the plane is down
//!   ([`PathTable::set_plane_local`]); the plane's EVs are `Denied`.
//!
//! A plane down by loss or by report is probed in the background: one probe at a time on
//! its EVs in turn, the interval doubling once, to twice the connection's probe interval
//! ([`PLANE_PROBE_BACKOFF_SHIFT`]). The first answer brings the plane back `Up` (the answering
//! EV `Good`) and has each of its other EVs probed at once, each returning to rotation on its
//! own answer: a plane comes back by probe, never by a timer alone. A Port Status Update
//! that reports the plane up again makes its probe due at once. A plane back from `Local`
//! has its EVs probed at once too.

use super::{PathState, PathTable, Selection, wrap};
use crate::stats::EvStats;
use std::collections::VecDeque;

/// Unanswered probes after which an EV that is `AssumedBad` on its own (not for its plane)
/// is replaced by a spare EV of the same plane, when the plane has one
/// ([`crate::ConnConfig::spare_evs`]): three probes (0.1 + 0.2 + 0.4 ms at the default
/// interval) without an answer say the route the EV hashes onto is gone, and new entropy
/// takes another route through the same plane.
pub const REPLACE_AFTER_UNANSWERED_PROBES: u32 = 3;

/// A plane's probes back off to at most `2^PLANE_PROBE_BACKOFF_SHIFT` probe intervals
/// (200 us at the default 100 us), not 64 as an EV's: a plane comes back only by probe,
/// so the back-off bounds how long a repaired plane stays unused (with 64x, the simulator's
/// plane back at 1.1 ms was found at 1.75 ms), and the probes of a dead plane load
/// nothing but that plane.
pub const PLANE_PROBE_BACKOFF_SHIFT: u32 = 1;

/// A flow's packets in flight on the plane of the recycled EV next in line may lead those
/// on its least loaded plane that is up by this many before the next packet goes on that
/// plane instead ([`PathTable::select_balanced`]): one packet either way is the ordinary
/// jitter of acknowledgements coming back.
pub const PLANE_BALANCE_SLACK: u32 = 2;

/// Most planes a connection knows (the Port Status Update's bitmap is 32 bits). MRC's
/// deployments use 2 to 8 (an 800G NIC as 8 x 100G planes).
pub const MAX_PLANES: usize = 32;

/// Why a plane is down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaneDownCause {
    /// Losses on many of its EVs with no delivery on it in between (see the module docs).
    Loss,
    /// The peer's Port Status Update reports its port on this plane down.
    PeerReport,
    /// The datapath reports this side's port on this plane down.
    Local,
}

/// State of one plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaneState {
    /// In use: its `Good` EVs are in rotation.
    Up,
    /// Out of rotation, with the cause.
    Down(PlaneDownCause),
}

/// Counters of one plane, beside the per-EV ones ([`PathTable::plane_ev_stats`] sums
/// those over the plane's EVs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlaneStats {
    /// Times the plane went down because of losses.
    pub downs_by_loss: u64,
    /// Times the plane went down because the peer reported its port down.
    pub downs_by_peer: u64,
    /// Times the plane went down because the datapath reported this side's port down.
    pub downs_local: u64,
    /// Times the plane came back up.
    pub ups: u64,
    /// Plane probes sent while it was down (each also counts in its EV's `probes_sent`).
    pub probes_sent: u64,
    /// EVs of the plane replaced by a spare of the plane.
    pub replacements: u64,
    /// Time spent down, ns, over the episodes that ended ([`Plane::down_since_ns`] holds
    /// the start of the current one).
    pub down_ns: u64,
}

/// One plane of the connection.
#[derive(Clone, Debug)]
pub struct Plane {
    /// Current state.
    pub state: PlaneState,
    /// Counters.
    pub stats: PlaneStats,
    /// EVs of the plane.
    pub evs: u32,
    /// Whether the peer's latest Port Status Update reports its port on this plane up
    /// (`true` before any).
    pub peer_up: bool,
    /// When the current down episode began, ns; `None` while up.
    pub down_since_ns: Option<u64>,
    /// When the plane last came back up, ns (`None` before its first return): losses of
    /// packets sent before then do not count against it.
    pub up_since_ns: Option<u64>,
    /// The latest send time of a packet delivered on the plane, ns (`None` before any):
    /// the plane worked at least until then, so the loss of a packet sent before it says
    /// nothing about the plane (it was overtaken, or queued behind others, on a plane that
    /// carried a later one).
    pub delivered_sent_ns: Option<u64>,
    /// When the plane last delivered (an acknowledgement of a packet it carried arrived),
    /// ns; `None` before any. Its loss streak takes it down only after a smoothed RTT of
    /// silence ([`PathTable::on_loss_sent`]).
    pub delivered_at_ns: Option<u64>,
    /// Distinct EVs of the plane with a loss since the latest delivery on the plane.
    streak_evs: u32,
    /// Bumped at each delivery that ends a streak: an EV whose mark equals `epoch + 1`
    /// counts in the current streak.
    epoch: u32,
    /// When the next plane probe is due while down by loss or report, ns.
    next_probe_ns: u64,
    /// Plane probes of the current episode without an answer.
    probes_unanswered: u32,
    /// Where the next plane probe starts looking among the plane's EVs (a path index).
    probe_cursor: usize,
    /// Spare EVs of the plane, oldest first: a replacement takes the front, the replaced
    /// EV joins the back (its route may come back).
    spares: VecDeque<u32>,
}

impl Plane {
    fn new(evs: u32) -> Self {
        Plane {
            state: PlaneState::Up,
            stats: PlaneStats::default(),
            evs,
            peer_up: true,
            down_since_ns: None,
            up_since_ns: None,
            delivered_sent_ns: None,
            delivered_at_ns: None,
            streak_evs: 0,
            epoch: 0,
            next_probe_ns: 0,
            probes_unanswered: 0,
            probe_cursor: 0,
            spares: VecDeque::new(),
        }
    }

    /// Spare EVs of the plane, the next replacement first.
    pub fn spares(&self) -> impl Iterator<Item = u32> + '_ {
        self.spares.iter().copied()
    }

    /// Whether the plane is `Up`.
    #[inline]
    pub fn is_up(&self) -> bool {
        self.state == PlaneState::Up
    }

    /// Whether it is probed in the background (down by loss or by the peer's report).
    fn probed(&self) -> bool {
        matches!(
            self.state,
            PlaneState::Down(PlaneDownCause::Loss | PlaneDownCause::PeerReport)
        )
    }
}

/// Distinct EVs that must lose, with no delivery on their plane in between, before a plane
/// of `usable` EVs (not denied) is taken down: 2; `None` for a plane of fewer than 2 (its
/// one EV's own state says it all). Two, not half or all: recycled entropy keeps only a
/// few of a plane's EVs in flight (the ones its acknowledgements return), so after a
/// plane dies its EVs fail one by one as they are tried, and waiting for half of them
/// left the simulator's all-to-all over 4 and 8 planes to find the dead plane EV by EV
/// (no sender of 56 took it down; settling took 410-615 us). A dead link inside a plane
/// (a spine of two rebooting) can take the plane down too, when two of its EVs hashed onto
/// the link lose before any other EV of the plane delivers; that costs the plane one probe
/// round trip: the first answered plane probe brings it back, and each of its EVs then
/// returns on its own probe, the dead ones staying out.
pub fn plane_down_after_evs(usable: u32) -> Option<u32> {
    (usable >= 2).then_some(2)
}

/// The planes of `ev_planes` (one per EV, parallel to the EV list; empty: every EV on
/// plane 0): `planes` has one entry per plane `0..=max`, each with its EV count.
pub(super) fn build_planes(n_evs: usize, ev_planes: &[u8]) -> Vec<Plane> {
    let n = ev_planes
        .iter()
        .map(|&q| usize::from(q) + 1)
        .max()
        .unwrap_or(1)
        .clamp(1, MAX_PLANES);
    let mut counts = vec![0u32; n];
    for i in 0..n_evs {
        let q = ev_planes.get(i).map_or(0, |&q| usize::from(q).min(n - 1));
        counts[q] += 1;
    }
    counts.into_iter().map(Plane::new).collect()
}

impl PathTable {
    /// Adds spare EVs: `evs[i]` on plane `planes[i]` (empty `planes`: plane 0). An EV
    /// already in the table or among the spares, or on a plane the table lacks, is
    /// ignored.
    pub fn add_spares(&mut self, evs: &[u32], planes: &[u8]) {
        for (i, &ev) in evs.iter().enumerate() {
            let q = usize::from(planes.get(i).copied().unwrap_or(0));
            if self.index_of(ev).is_some()
                || q >= self.planes.len()
                || self.planes.iter().any(|pl| pl.spares.contains(&ev))
            {
                continue;
            }
            self.planes[q].spares.push_back(ev);
        }
    }

    /// Replaces the EV of path `idx` at `now_ns` by the plane's oldest spare when it is
    /// `AssumedBad` on its own after [`REPLACE_AFTER_UNANSWERED_PROBES`] unanswered probes
    /// and its plane has a spare: the path takes the new EV, unproven (`AssumedBad`, its
    /// first probe due at once: it joins the rotation when that is answered), its per-EV
    /// history cleared but its counters kept (they are the path slot's), and the old EV
    /// goes to the back of the plane's spares. Returns whether it did.
    pub(super) fn replace_if_due(&mut self, idx: usize, now_ns: u64) -> bool {
        let Some(p) = self.paths.get(idx) else {
            return false;
        };
        if p.state != PathState::AssumedBad
            || p.plane_held
            || p.probes_unanswered < REPLACE_AFTER_UNANSWERED_PROBES
        {
            return false;
        }
        let (old, q) = (p.ev, usize::from(p.plane));
        let Some(new) = self.planes.get_mut(q).and_then(|pl| pl.spares.pop_front()) else {
            return false;
        };
        self.planes[q].spares.push_back(old);
        self.planes[q].stats.replacements += 1;
        self.by_ev.remove(&old);
        self.by_ev.insert(new, idx);
        let p = &mut self.paths[idx];
        p.ev = new;
        p.probe_seq = None;
        p.probes_unanswered = 0;
        p.next_probe_ns = now_ns;
        p.consecutive_losses = 0;
        p.srtt_ns = 0;
        p.proof_ns = None;
        p.echo_ns = None;
        p.stats.replaced += 1;
        true
    }

    /// The planes, indexed by plane number.
    pub fn planes(&self) -> &[Plane] {
        &self.planes
    }

    /// The plane of path `idx` (0 for an index not in the table).
    #[inline]
    pub fn plane_of(&self, idx: usize) -> u8 {
        self.paths.get(idx).map_or(0, |p| p.plane)
    }

    /// Bitmap of the planes that are `Up` (bit `q` for plane `q`).
    pub fn up_planes(&self) -> u32 {
        self.planes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_up())
            .fold(0, |m, (q, _)| m | 1 << q)
    }

    /// The per-EV counters of plane `q`'s EVs, summed (zero for a plane not in the table).
    pub fn plane_ev_stats(&self, q: u8) -> EvStats {
        let mut s = EvStats::default();
        for p in self.paths.iter().filter(|p| p.plane == q) {
            let e = &p.stats;
            s.sent += e.sent;
            s.retransmitted += e.retransmitted;
            s.acked += e.acked;
            s.trimmed += e.trimmed;
            s.ecn_marked += e.ecn_marked;
            s.timeouts += e.timeouts;
            s.lost += e.lost;
            s.spurious += e.spurious;
            s.probes_sent += e.probes_sent;
            s.probes_answered += e.probes_answered;
            s.revalidations += e.revalidations;
            s.replaced += e.replaced;
            s.drops.merge(&e.drops);
        }
        s
    }

    /// A delivery on plane `q` at `now_ns` of a packet sent at `sent_ns`: ends its loss
    /// streak, and the plane worked until `sent_ns` at least.
    #[inline]
    pub(super) fn plane_delivered(&mut self, q: u8, sent_ns: u64, now_ns: u64) {
        if let Some(pl) = self.planes.get_mut(usize::from(q)) {
            if pl.delivered_sent_ns.is_none_or(|t| t < sent_ns) {
                pl.delivered_sent_ns = Some(sent_ns);
            }
            if pl.delivered_at_ns.is_none_or(|t| t < now_ns) {
                pl.delivered_at_ns = Some(now_ns);
            }
            if pl.streak_evs != 0 {
                pl.streak_evs = 0;
                pl.epoch = pl.epoch.wrapping_add(1);
            }
        }
    }

    /// A loss (or a timeout) at `now_ns` of a packet sent on path `idx` at `sent_ns`
    /// (ignored when sent before the plane last came back up): counts its EV in its plane's
    /// streak once, and takes the plane down when the streak or the plane's `AssumedBad`
    /// EVs say so (see the module docs).
    pub(super) fn plane_loss(&mut self, idx: usize, sent_ns: u64, now_ns: u64) {
        if self.planes.len() < 2 {
            return;
        }
        let Some(p) = self.paths.get_mut(idx) else {
            return;
        };
        let q = usize::from(p.plane);
        let Some(pl) = self.planes.get_mut(q) else {
            return;
        };
        // a packet sent before the plane last came back was lost while it was down
        if !pl.is_up() || pl.up_since_ns.is_some_and(|t| sent_ns < t) {
            return;
        }
        // a packet sent before one the plane delivered: the plane worked after it left
        // (it was overtaken: reordered, or queued behind others), so it is no evidence
        // that the plane failed; only the EV counts it
        let before_delivered = pl.delivered_sent_ns.is_some_and(|t| sent_ns < t);
        let mark = pl.epoch.wrapping_add(1);
        if p.streak_mark != mark && !before_delivered {
            p.streak_mark = mark;
            pl.streak_evs += 1;
        }
        let streak = pl.streak_evs;
        let (mut usable, mut bad) = (0u32, 0u32);
        let mut srtt_ns = 0u64;
        for p in self.paths.iter().filter(|p| usize::from(p.plane) == q) {
            srtt_ns = srtt_ns.max(p.srtt_ns);
            match p.state {
                PathState::Denied => {}
                PathState::AssumedBad => {
                    usable += 1;
                    bad += 1;
                }
                _ => usable += 1,
            }
        }
        // and the plane silent for a smoothed RTT (the largest of its EVs'): RACK declares
        // lost what another plane's packets overtook, and a plane whose packets are only
        // late (bounced off a dead link, queued behind others) keeps delivering its older
        // ones; a dead plane's last acknowledgements arrive within an RTT of its death
        let silent = self.planes[q]
            .delivered_at_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= srtt_ns);
        let by_streak = silent && plane_down_after_evs(usable).is_some_and(|k| streak >= k);
        let all_bad = usable > 0 && bad == usable;
        // Another plane up with an EV in rotation: a plane fails only against another
        // that works. After an RTO over every plane (silence everywhere) each plane's EVs
        // are `AssumedBad`, and the first loss found on any plane would otherwise take
        // that plane down for what was the whole connection's stall.
        let planes = &self.planes;
        let other_works = || {
            self.paths.iter().any(|p| {
                let r = usize::from(p.plane);
                r != q
                    && planes.get(r).is_some_and(Plane::is_up)
                    && matches!(p.state, PathState::Good | PathState::Skip { .. })
            })
        };
        if (by_streak || all_bad) && other_works() {
            self.plane_down(q as u8, PlaneDownCause::Loss, now_ns);
        }
    }

    /// Takes plane `q` down at `now_ns` for `cause`: its EVs that are not denied leave
    /// rotation (`AssumedBad`, held for the plane's probes instead of their own), and for
    /// a loss its first probe is due at once, for a report one probe interval later is
    /// enough (the caller sets it). No effect on a plane already down, except that a
    /// `Local` cause replaces the others.
    pub(super) fn plane_down(&mut self, q: u8, cause: PlaneDownCause, now_ns: u64) {
        let Some(pl) = self.planes.get_mut(usize::from(q)) else {
            return;
        };
        match pl.state {
            PlaneState::Up => {}
            PlaneState::Down(PlaneDownCause::Local) => return,
            PlaneState::Down(_) if cause != PlaneDownCause::Local => return,
            PlaneState::Down(_) => {}
        }
        if pl.is_up() {
            pl.down_since_ns = Some(now_ns);
        }
        pl.state = PlaneState::Down(cause);
        match cause {
            PlaneDownCause::Loss => pl.stats.downs_by_loss += 1,
            PlaneDownCause::PeerReport => pl.stats.downs_by_peer += 1,
            PlaneDownCause::Local => pl.stats.downs_local += 1,
        }
        pl.streak_evs = 0;
        pl.epoch = pl.epoch.wrapping_add(1);
        pl.next_probe_ns = now_ns;
        pl.probes_unanswered = 0;
        for p in self.paths.iter_mut().filter(|p| p.plane == q) {
            if cause == PlaneDownCause::Local {
                p.state = PathState::Denied;
                p.plane_held = false;
                continue;
            }
            if p.state == PathState::Denied {
                continue;
            }
            if p.state != PathState::AssumedBad {
                p.state = PathState::AssumedBad;
                p.probe_seq = None;
                p.probes_unanswered = 0;
            }
            p.plane_held = true;
        }
        self.recount_bad();
    }

    /// Plane `q` is back at `now_ns` (a probe on it was answered, or the datapath says the
    /// local port is up): `Up`; its EVs held for the plane are probed at once, each on its
    /// own (the caller makes the answering EV `Good`).
    fn plane_up(&mut self, q: u8, now_ns: u64) {
        let Some(pl) = self.planes.get_mut(usize::from(q)) else {
            return;
        };
        if pl.is_up() {
            return;
        }
        // a plane that failed in the fabric: down by loss and its first probe unanswered
        // (not a burst of congestion losses, answered at once); a port down (this side's
        // or the peer's) returns as before (counting there too made `port-loss` back to
        // 95% in 8, 6 and 7 runs of 8 at P = 2, 4, 8 instead of 5, 7 and 6)
        let failed =
            pl.state == PlaneState::Down(PlaneDownCause::Loss) && pl.probes_unanswered >= 2;
        pl.state = PlaneState::Up;
        pl.stats.ups += 1;
        pl.up_since_ns = Some(now_ns);
        if let Some(t) = pl.down_since_ns.take() {
            pl.stats.down_ns += now_ns.saturating_sub(t);
        }
        pl.streak_evs = 0;
        pl.epoch = pl.epoch.wrapping_add(1);
        pl.probes_unanswered = 0;
        for p in self.paths.iter_mut().filter(|p| p.plane == q) {
            // those out with the plane (the one whose probe was answered among them)
            // come back counting the flow's packets in flight ([`PathTable::rejoin`])
            if p.plane_held || p.state == PathState::AssumedBad {
                p.plane_return = failed;
            }
            p.plane_held = false;
            if p.state == PathState::AssumedBad {
                p.next_probe_ns = now_ns;
                p.probes_unanswered = 0;
            }
        }
    }

    /// A probe on `idx` was answered at `now_ns`: its plane, if down by loss or report,
    /// is back up.
    pub(super) fn plane_probe_answered(&mut self, idx: usize, now_ns: u64) {
        let q = self.plane_of(idx);
        if self.planes.get(usize::from(q)).is_some_and(Plane::probed) {
            self.plane_up(q, now_ns);
        }
    }

    /// The datapath reports this side's port on plane `q` down (`up == false`: every EV
    /// of the plane `Denied`) or up again at `now_ns` (`up == true`: the plane is `Up`
    /// and each of its EVs `AssumedBad` with a probe due at once, so each returns to
    /// rotation when its probe is answered). Returns whether the plane's state changed.
    pub fn set_plane_local(&mut self, q: u8, up: bool, now_ns: u64) -> bool {
        let Some(pl) = self.planes.get(usize::from(q)) else {
            return false;
        };
        let local_down = pl.state == PlaneState::Down(PlaneDownCause::Local);
        if !up {
            if local_down {
                return false;
            }
            self.plane_down(q, PlaneDownCause::Local, now_ns);
            return true;
        }
        if !local_down {
            return false;
        }
        let peer_up = pl.peer_up;
        for p in self.paths.iter_mut().filter(|p| p.plane == q) {
            p.state = PathState::AssumedBad;
            p.probe_seq = None;
            p.probes_unanswered = 0;
            p.next_probe_ns = now_ns;
            p.plane_held = false;
        }
        self.recount_bad();
        if peer_up {
            self.plane_up(q, now_ns);
        } else {
            // still down at the peer's end: back to being probed as reported
            if let Some(pl) = self.planes.get_mut(usize::from(q)) {
                pl.state = PlaneState::Down(PlaneDownCause::PeerReport);
            }
            for p in self.paths.iter_mut().filter(|p| p.plane == q) {
                p.plane_held = true;
            }
        }
        true
    }

    /// The peer's Port Status Update at `now_ns`: bit `q` of `up_bitmap` set when its port
    /// on plane `q` is up. A plane reported down leaves rotation (probed in the background
    /// from one `interval_ns` on); a plane reported up that was down by report has its
    /// probe due at once (it returns when the probe is answered). Planes this table lacks
    /// are ignored. Returns the planes whose state changed (a bitmap).
    pub fn on_peer_planes(&mut self, up_bitmap: u32, now_ns: u64, interval_ns: u64) -> u32 {
        let mut changed = 0;
        for q in 0..self.planes.len() {
            let up = up_bitmap >> q & 1 == 1;
            let pl = &mut self.planes[q];
            pl.peer_up = up;
            if !up && pl.is_up() {
                self.plane_down(q as u8, PlaneDownCause::PeerReport, now_ns);
                if let Some(pl) = self.planes.get_mut(q) {
                    pl.next_probe_ns = now_ns.saturating_add(interval_ns);
                }
                changed |= 1 << q;
            } else if up && pl.probed() {
                pl.next_probe_ns = now_ns;
                pl.probes_unanswered = 0;
                changed |= 1 << q;
            }
        }
        changed
    }

    /// The next plane probe due at `now_ns`: `(path index, probe sequence)` on the next EV
    /// (in turn) of a plane down by loss or report whose probe time has come.
    pub(super) fn next_plane_probe(
        &mut self,
        now_ns: u64,
        interval_ns: u64,
    ) -> Option<(usize, u32)> {
        let q = (0..self.planes.len()).find(|&q| {
            let pl = &self.planes[q];
            pl.probed() && pl.next_probe_ns <= now_ns && self.has_probe_target(q)
        })?;
        let n = self.paths.len();
        let start = self.planes[q].probe_cursor;
        let idx = (0..n).map(|k| (start + k) % n).find(|&i| {
            let p = &self.paths[i];
            usize::from(p.plane) == q && p.plane_held && p.state == PathState::AssumedBad
        })?;
        let seq = self.next_probe_seq;
        self.next_probe_seq = self.next_probe_seq.wrapping_add(1).max(1);
        let p = &mut self.paths[idx];
        p.probe_seq = Some((p.probe_seq.map_or(seq, |(first, _)| first), seq));
        p.stats.probes_sent += 1;
        let pl = &mut self.planes[q];
        pl.probe_cursor = idx + 1;
        pl.probes_unanswered = pl.probes_unanswered.saturating_add(1);
        pl.stats.probes_sent += 1;
        let wait = interval_ns.max(1) << pl.probes_unanswered.min(PLANE_PROBE_BACKOFF_SHIFT);
        pl.next_probe_ns = now_ns.saturating_add(wait);
        Some((idx, seq))
    }

    /// Earliest plane probe due, if a plane is probed in the background.
    pub(super) fn next_plane_probe_time(&self) -> Option<u64> {
        (0..self.planes.len())
            .filter(|&q| self.planes[q].probed() && self.has_probe_target(q))
            .map(|q| self.planes[q].next_probe_ns)
            .min()
    }

    /// Whether plane `q` has an EV its probes can go on (one held for it; a plane whose
    /// EVs were all denied meanwhile has none, and no probe is due for it).
    fn has_probe_target(&self, q: usize) -> bool {
        self.paths
            .iter()
            .any(|p| usize::from(p.plane) == q && p.plane_held && p.state == PathState::AssumedBad)
    }

    /// The state an EV of plane `q` takes when the datapath stops denying it: `Good` on
    /// an `Up` plane; on a plane probed in the background, `AssumedBad` held for the
    /// plane's probes; on a plane whose local port is down, `Denied` still.
    pub(super) fn undenied_state(&self, q: u8) -> (PathState, bool) {
        match self.planes.get(usize::from(q)).map(|pl| pl.state) {
            Some(PlaneState::Down(PlaneDownCause::Local)) => (PathState::Denied, false),
            Some(PlaneState::Down(_)) => (PathState::AssumedBad, true),
            _ => (PathState::Good, false),
        }
    }

    /// [`PathTable::select`] with the flow's packets in flight per plane (`in_flight[q]`
    /// for plane `q`, by the EV of their latest transmission; the sender counts them,
    /// [`crate::send::SendState::in_flight_by_plane`]): with recycled entropy on two
    /// planes or more, when the packets in flight on the plane of the recycled EV next in
    /// line lead those on an `Up` plane by [`PLANE_BALANCE_SLACK`] or more, the packet
    /// goes on the least loaded such plane instead: the oldest of its recycled EVs that is
    /// still `Good`, or, with none waiting, its next `Good` EV round-robin (one without a
    /// loss since its latest delivery first). The entry next in line stays for a later
    /// packet.
    ///
    /// Why: a plane is a NIC port of its own, and the host's NIC drains its ports side by
    /// side, so a flow whose packets crowd onto one plane is held to that port's rate
    /// while the others idle. Recycled entropy only circulates entries (each
    /// acknowledgement recycles the EV it used), and nothing on the way back tells a busy
    /// local port from an idle one (no queue, no mark builds in the network), so a split
    /// once uneven stays uneven: after a few losses on one plane (a link flapping in it, a
    /// plane down by congestion losses and back), a ring flow of the simulator's `flaps`
    /// kept 6 packets in flight on plane 0 and 33 on plane 1 for the rest of its run, at
    /// 60% of its rate. Per-EV choices inside a plane stay recycled entropy's.
    #[inline]
    pub fn select_balanced(&mut self, avoid: Option<usize>, in_flight: &[u32]) -> Option<usize> {
        if self.selection == Selection::Recycle
            && self.planes.len() >= 2
            && let Some(q) = self.plane_to_balance(avoid, in_flight)
            && let Some(i) = self.take_from_plane(q, avoid)
        {
            self.picks += 1;
            return Some(i);
        }
        self.select(avoid)
    }

    /// The plane the next packet should go on instead of the recycled EV next in line's
    /// (see [`PathTable::select_balanced`]), if any.
    #[inline]
    fn plane_to_balance(&self, avoid: Option<usize>, in_flight: &[u32]) -> Option<u8> {
        let front = self.recycled.front().filter(|&i| Some(i) != avoid)?;
        let q = usize::from(self.paths.get(front)?.plane);
        let lead = in_flight.get(q).copied()?;
        if lead < PLANE_BALANCE_SLACK {
            return None;
        }
        let (m, low) = self
            .planes
            .iter()
            .enumerate()
            .filter(|&(r, pl)| r != q && pl.is_up())
            .filter_map(|(r, _)| in_flight.get(r).map(|&c| (r, c)))
            .min_by_key(|&(r, c)| (c, r))?;
        (lead >= low.saturating_add(PLANE_BALANCE_SLACK)).then_some(m as u8)
    }

    /// An EV of plane `q` other than `avoid` for the next packet: the oldest recycled one
    /// still `Good` (taken out of the FIFO), else the next `Good` one round-robin, one
    /// without a loss since its latest delivery first; `None` when the plane has no `Good`
    /// EV.
    fn take_from_plane(&mut self, q: u8, avoid: Option<usize>) -> Option<usize> {
        let mut k = 0;
        while k < self.recycled.len() {
            let i = self.recycled.at(k);
            if Some(i) == avoid || self.paths.get(i).is_none_or(|p| p.plane != q) {
                k += 1;
                continue;
            }
            self.recycled.remove(k);
            if self.refresh(i) == PathState::Good {
                return Some(i);
            }
        }
        let n = self.paths.len();
        for clean in [true, false] {
            for j in 0..n {
                let i = wrap(self.cursor + j, n);
                let p = &self.paths[i];
                if Some(i) == avoid || p.plane != q || (clean && p.consecutive_losses != 0) {
                    continue;
                }
                if self.refresh(i) == PathState::Good {
                    self.cursor = wrap(i + 1, n);
                    return Some(i);
                }
            }
        }
        None
    }

    /// The EV index for a control packet that must reach the peer (a Port Status Update):
    /// the `k`-th (mod their count) of the EVs that are `Good` on an `Up` plane, taken
    /// one per plane in turn so that successive `k` use different planes; any EV not
    /// denied when none is. Does not count as a selection.
    pub fn control_ev(&self, k: usize) -> Option<usize> {
        let good: Vec<usize> = (0..self.planes.len())
            .filter(|&q| self.planes[q].is_up())
            .filter_map(|q| {
                self.paths
                    .iter()
                    .position(|p| usize::from(p.plane) == q && p.state == PathState::Good)
            })
            .collect();
        if !good.is_empty() {
            return good.get(k % good.len()).copied();
        }
        self.paths.iter().position(|p| p.state != PathState::Denied)
    }
}
