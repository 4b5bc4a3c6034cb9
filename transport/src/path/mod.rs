//! The path table: one entry per entropy value (EV) with its state, RTT and counters, and
//! the per-packet EV selection (DESIGN.md section 5).
//!
//! States: `Good` (in rotation); `Skip` (an ECN mark or a trim: left out for one rotation,
//! i.e. the next `n_paths` selections); `AssumedBad` (evidence of a path failure: a timeout,
//! or [`BAD_AFTER_CONSECUTIVE_LOSSES`] losses on the EV with no delivery on it in between;
//! left out until an EV probe on it is answered); `Denied` (the datapath says it is down;
//! only [`PathTable::set_denied`] brings it back). One loss alone does not take an EV out:
//! with random loss (a bit error, a dropped frame) every EV loses now and then, and taking
//! each out until a probe returns only shrinks the set of paths; a dead path loses every
//! packet sent on it, so its second loss in a row condemns it.
//!
//! Selection: recycled entropy (default; REPS, Bonato et al., "REPS: Recycled Entropy Packet
//! Spraying for Adaptive Load Balancing and Failure Mitigation", 2024): the EV of a packet
//! acknowledged without an ECN CE mark goes into a FIFO of recycled EVs, and the next packet
//! takes the oldest recycled EV that is still `Good`; only when the FIFO is empty is an EV
//! chosen round-robin ("explored"), and exploration passes over EVs whose latest outcome
//! was a loss (consecutive-loss count above 0) while a `Good` EV without one exists, so a
//! dead path's EV that lost one packet is not fed more long after the failure just because
//! its turn came (a live EV's count is cleared by its next delivery). Each EV then carries
//! as many packets as its path returns
//! per RTT: a path with a longer queue returns its EVs later and so gets fewer packets, a
//! marked or lost packet's EV is not reused, a dead path's EVs never come back. (Plain
//! round-robin keeps sending `1/n` of the packets into an overloaded or failed path.)
//! Alternatives: round-robin over `Good` EVs, or power-of-two-choices on smoothed RTT (two
//! random `Good` EVs, the lower RTT wins; Mitzenmacher 2001) with the caller-seeded RNG.
//! When no EV is `Good`, `Skip` EVs are used, then `AssumedBad` ones (so a connection never
//! stalls while any path is not denied); `None` only when every EV is denied.

use crate::stats::EvStats;
pub use plane::{
    MAX_PLANES, PLANE_BALANCE_SLACK, PLANE_PROBE_BACKOFF_SHIFT, Plane, PlaneDownCause, PlaneState,
    PlaneStats, REPLACE_AFTER_UNANSWERED_PROBES, plane_down_after_evs,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// State of one EV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathState {
    /// In rotation.
    Good,
    /// Out of rotation until the selection counter reaches `until_pick`.
    Skip {
        /// Selection count at which the EV is `Good` again.
        until_pick: u64,
    },
    /// Out of rotation until a probe is answered.
    AssumedBad,
    /// Down according to the datapath.
    Denied,
}

/// How the next EV is chosen among `Good` ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Selection {
    /// Recycled entropy (REPS, default): the oldest EV acknowledged without ECN CE; when
    /// none is waiting, round-robin over `Good` EVs.
    #[default]
    Recycle,
    /// Round-robin.
    RoundRobin,
    /// Power-of-two-choices on smoothed RTT.
    PowerOfTwo,
}

/// One path.
#[derive(Clone, Debug)]
pub struct Path {
    /// The entropy value.
    pub ev: u32,
    /// Current state.
    pub state: PathState,
    /// Smoothed RTT in ns (RFC 6298 gains 1/8), 0 before the first sample.
    pub srtt_ns: u64,
    /// Counters.
    pub stats: EvStats,
    /// Sequence numbers `(first, latest)` of the probes sent in the current `AssumedBad`
    /// episode; a reply to any of them brings the EV back.
    pub probe_seq: Option<(u32, u32)>,
    /// Probes sent in this episode without a reply (the probe interval doubles with each,
    /// up to 64 times the configured interval).
    pub probes_unanswered: u32,
    /// When the next probe may be sent (ns), for `AssumedBad` EVs.
    pub next_probe_ns: u64,
    /// Losses declared on this EV since its latest delivery (an acknowledged packet whose
    /// latest transmission went on it).
    pub consecutive_losses: u32,
    /// Time of the latest evidence that the EV carries packets: a delivery on it
    /// ([`PathTable::on_delivered`]) or an answered probe, ns; `None` before any.
    pub proof_ns: Option<u64>,
    /// The table's evidence count ([`PathTable::evidence_count`]) at this EV's latest
    /// evidence (0 before any).
    pub proof_count: u64,
    /// Time of the latest SACK or probe reply that echoed this EV ([`PathTable::on_echo`]):
    /// a round trip on it, both directions, worked then, ns; `None` before any.
    pub echo_ns: Option<u64>,
    /// The plane the EV belongs to ([`plane`]; 0 on a single fabric).
    pub plane: u8,
    /// `AssumedBad` because its plane is down: probed with the plane
    /// ([`PathTable::planes`]), not on its own.
    pub plane_held: bool,
    /// Out of rotation with its plane when the plane came back from a failure in the
    /// fabric (down by loss, its first plane probe unanswered): when the EV comes back,
    /// its plane's share of the recycle FIFO counts the flow's packets in flight
    /// ([`PathTable::set_in_flight_evs`]). Cleared when it rejoins.
    pub plane_return: bool,
    /// Its plane's epoch + 1 when its latest loss counted in the plane's loss streak.
    streak_mark: u32,
}

/// Consecutive losses on one EV (no delivery on it in between) that make it `AssumedBad`.
/// Two: a dead path loses every packet, so the second loss in a row names it at once, while
/// with 4% random loss two in a row on one EV happen for about 1 loss in 25.
pub const BAD_AFTER_CONSECUTIVE_LOSSES: u32 = 2;

/// Most EVs kept in the recycle FIFO (when full, the oldest is dropped and a later packet
/// explores instead): a window of 1 MiB of 4 KiB packets.
pub const RECYCLE_CAPACITY: usize = 256;

/// The recycle FIFO: a ring of [`RECYCLE_CAPACITY`] (a power of two) EV indices, oldest
/// first; pushing onto a full ring drops the oldest. A fixed ring instead of a `VecDeque`:
/// one push per acknowledged packet and one pop per sent one, with no growth check and no
/// bounds check (every index is masked into the array).
#[derive(Clone, Debug)]
struct RecycleFifo {
    buf: Box<[usize; RECYCLE_CAPACITY]>,
    /// Slot of the oldest entry.
    head: usize,
    /// Entries held (`<= RECYCLE_CAPACITY`).
    len: usize,
}

const RECYCLE_MASK: usize = RECYCLE_CAPACITY - 1;
const _: () = assert!(RECYCLE_CAPACITY.is_power_of_two());

impl RecycleFifo {
    fn new() -> Self {
        RecycleFifo {
            buf: Box::new([0; RECYCLE_CAPACITY]),
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn front(&self) -> Option<usize> {
        (self.len > 0).then(|| self.buf[self.head & RECYCLE_MASK])
    }

    #[inline]
    fn pop_front(&mut self) {
        if self.len > 0 {
            self.head = (self.head + 1) & RECYCLE_MASK;
            self.len -= 1;
        }
    }

    /// Appends `idx`, dropping the oldest entry when full.
    #[inline]
    fn push_back(&mut self, idx: usize) {
        if self.len >= RECYCLE_CAPACITY {
            self.pop_front();
        }
        self.buf[(self.head + self.len) & RECYCLE_MASK] = idx;
        self.len += 1;
    }

    /// Entries held.
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    /// Drops the newest entry, if any.
    fn pop_back(&mut self) {
        if self.len > 0 {
            self.len -= 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len).map(|k| self.buf[(self.head + k) & RECYCLE_MASK])
    }

    /// Removes the entry `k` places from the oldest (`k < len`), the later ones moving up
    /// one place. O(len - k): for the plane balance's rarer picks.
    fn remove(&mut self, k: usize) {
        if k >= self.len {
            return;
        }
        for j in k..self.len - 1 {
            self.buf[(self.head + j) & RECYCLE_MASK] = self.buf[(self.head + j + 1) & RECYCLE_MASK];
        }
        self.len -= 1;
    }

    /// The entry `k` places from the oldest (`k < len`).
    #[inline]
    fn at(&self, k: usize) -> usize {
        self.buf[(self.head + k) & RECYCLE_MASK]
    }

    /// Puts `idx` at position `pos` (0: taken next; `len`: the back), dropping the newest
    /// entry first when full. O(len): for rare events only.
    fn insert(&mut self, pos: usize, idx: usize) {
        if self.len >= RECYCLE_CAPACITY {
            self.pop_back();
        }
        let pos = pos.min(self.len);
        // shift the entries from `pos` on one place back
        for k in (pos..self.len).rev() {
            self.buf[(self.head + k + 1) & RECYCLE_MASK] = self.buf[(self.head + k) & RECYCLE_MASK];
        }
        self.buf[(self.head + pos) & RECYCLE_MASK] = idx;
        self.len += 1;
    }
}

/// All paths of a connection.
#[derive(Clone, Debug)]
pub struct PathTable {
    paths: Vec<Path>,
    by_ev: crate::keyhash::FastMap<u32, usize>,
    cursor: usize,
    picks: u64,
    selection: Selection,
    rng: ChaCha8Rng,
    next_probe_seq: u32,
    /// Number of `AssumedBad` paths (so the per-packet probe check is O(1) when zero).
    n_bad: usize,
    /// Recycled EV indices, oldest first (at most [`RECYCLE_CAPACITY`]).
    recycled: RecycleFifo,
    /// EV indices of the packets acknowledged by the SACK being applied.
    delivered: Vec<usize>,
    /// A `Good` EV without evidence ([`Path::proof_ns`]) for this long while another EV
    /// had some is revalidated ([`PathTable::set_revalidate_after_ns`]), ns.
    revalidate_after_ns: u64,
    /// Time of the table's first evidence on any EV (stands in for the evidence of EVs
    /// never proven), ns.
    first_proof_ns: Option<u64>,
    /// Time of the latest evidence on any EV, ns.
    latest_proof_ns: Option<u64>,
    /// Pieces of evidence (deliveries, answered probes) on all EVs so far.
    proofs: u64,
    /// The planes, by plane number (one, plane 0, on a single fabric).
    planes: Vec<Plane>,
    /// Packets in flight per plane (by the EV of their latest transmission), as the
    /// sender last told ([`PathTable::set_in_flight_evs`]) for the EV about to come back;
    /// empty when not told. Read by [`PathTable::rejoin`], cleared after each probe reply
    /// and un-denial.
    in_flight: Vec<u32>,
}

/// Rotations' worth of evidence on the other EVs (this many times the number of EVs) that
/// an EV must also have missed before it is revalidated: a slow flow (an incast sender with
/// a sixteenth of a link) uses each of its EVs only every few tens of microseconds, and its
/// EVs are not stale for that (with 4 rotations the incast experiment revalidated 169 EVs
/// per run, mostly ones the recycle FIFO had not needed yet, and finished 1% later; with 16,
/// 256 deliveries for 16 EVs, a 1 MiB flow's worth, none), while a flow at line rate has
/// 256 deliveries in under 100 us, so for it the time bound governs.
pub const REVALIDATE_AFTER_ROTATIONS: u64 = 16;

/// Whether `p` has had no evidence ([`Path::proof_ns`], or the table's `first` evidence
/// for an EV never proven) for more than `after_ns` before the `latest` evidence on any
/// EV, and the table has had more than `rotations` ([`REVALIDATE_AFTER_ROTATIONS`] x the
/// number of EVs) pieces of evidence since (the table's count is `proofs`).
#[inline]
fn is_stale(
    p: &Path,
    latest: Option<u64>,
    first: Option<u64>,
    after_ns: u64,
    proofs: u64,
    rotations: u64,
) -> bool {
    let Some(latest) = latest else {
        return false;
    };
    let since = p.proof_ns.or(first).unwrap_or(latest);
    latest.saturating_sub(since) > after_ns && proofs.saturating_sub(p.proof_count) > rotations
}

impl PathTable {
    /// A table over `evs` (duplicates ignored), all `Good`, on one plane; `seed` seeds the
    /// selection RNG.
    pub fn new(evs: &[u32], selection: Selection, seed: u64) -> Self {
        Self::with_planes(evs, &[], selection, seed)
    }

    /// A table over `evs` (duplicates ignored), all `Good`, EV `evs[i]` on plane
    /// `ev_planes[i]` (empty: all on plane 0; a plane at or above [`MAX_PLANES`] counts as
    /// the last one); `seed` seeds the selection RNG. The planes are `0..=max(ev_planes)`.
    pub fn with_planes(evs: &[u32], ev_planes: &[u8], selection: Selection, seed: u64) -> Self {
        let mut paths = Vec::with_capacity(evs.len());
        let mut by_ev =
            crate::keyhash::FastMap::with_capacity_and_hasher(evs.len(), Default::default());
        let mut unique_planes = Vec::with_capacity(ev_planes.len());
        let max_plane = (MAX_PLANES - 1) as u8;
        for (i, &ev) in evs.iter().enumerate() {
            if by_ev.contains_key(&ev) {
                continue;
            }
            let plane = ev_planes.get(i).map_or(0, |&q| q.min(max_plane));
            if !ev_planes.is_empty() {
                unique_planes.push(plane);
            }
            by_ev.insert(ev, paths.len());
            paths.push(Path {
                ev,
                state: PathState::Good,
                srtt_ns: 0,
                stats: EvStats::default(),
                probe_seq: None,
                probes_unanswered: 0,
                next_probe_ns: 0,
                consecutive_losses: 0,
                proof_ns: None,
                proof_count: 0,
                echo_ns: None,
                plane,
                plane_held: false,
                plane_return: false,
                streak_mark: 0,
            });
        }
        let planes = plane::build_planes(paths.len(), &unique_planes);
        PathTable {
            paths,
            by_ev,
            cursor: 0,
            picks: 0,
            selection,
            rng: ChaCha8Rng::seed_from_u64(seed),
            next_probe_seq: 1,
            revalidate_after_ns: u64::MAX,
            first_proof_ns: None,
            latest_proof_ns: None,
            proofs: 0,
            n_bad: 0,
            recycled: RecycleFifo::new(),
            delivered: Vec::new(),
            planes,
            in_flight: Vec::new(),
        }
    }

    /// Number of paths.
    #[inline]
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether the table has no paths.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// All paths, in EV registration order.
    pub fn paths(&self) -> &[Path] {
        &self.paths
    }

    /// Path index of `ev`.
    #[inline]
    pub fn index_of(&self, ev: u32) -> Option<usize> {
        // EVs are unique, so a path whose EV equals its index is the one (the usual `0..n`)
        if let Some(p) = self.paths.get(ev as usize)
            && p.ev == ev
        {
            return Some(ev as usize);
        }
        self.by_ev.get(&ev).copied()
    }

    /// The path at `idx`.
    #[inline]
    pub fn get(&self, idx: usize) -> Option<&Path> {
        self.paths.get(idx)
    }

    /// The path at `idx`, mutable (for counters).
    #[inline]
    pub fn get_mut(&mut self, idx: usize) -> Option<&mut Path> {
        self.paths.get_mut(idx)
    }

    /// The state of `ev`, if it is in the table.
    pub fn state_of(&self, ev: u32) -> Option<PathState> {
        self.index_of(ev)
            .and_then(|i| self.paths.get(i))
            .map(|p| p.state)
    }

    /// The state of `idx` now: a `Skip` whose rotation is over is `Good` again, and a
    /// `Good` EV gone stale is revalidated (see [`PathTable::set_revalidate_after_ns`]).
    #[inline]
    fn refresh(&mut self, idx: usize) -> PathState {
        let picks = self.picks;
        let (latest, first, after_ns, proofs) = (
            self.latest_proof_ns,
            self.first_proof_ns,
            self.revalidate_after_ns,
            self.proofs,
        );
        let rotations = REVALIDATE_AFTER_ROTATIONS.saturating_mul(self.paths.len() as u64);
        // one lookup of the path for the staleness test and the state change
        let Some(p) = self.paths.get_mut(idx) else {
            return PathState::Denied;
        };
        if let PathState::Skip { until_pick } = p.state {
            if picks >= until_pick {
                p.state = PathState::Good;
            }
        }
        if p.state == PathState::Good && is_stale(p, latest, first, after_ns, proofs, rotations) {
            // no evidence for a while: an answered probe must show the path still
            // carries packets before data goes on it again; the probe is due now
            p.state = PathState::AssumedBad;
            p.probe_seq = None;
            p.probes_unanswered = 0;
            p.next_probe_ns = 0;
            p.stats.revalidations += 1;
            self.n_bad += 1;
        }
        p.state
    }

    /// Pieces of evidence (deliveries, answered probes) on all EVs so far.
    pub fn evidence_count(&self) -> u64 {
        self.proofs
    }

    /// An EV that has shown no evidence of carrying packets (no delivery, no answered
    /// probe) for more than `ns` while the other EVs of the table had some (more than
    /// [`REVALIDATE_AFTER_ROTATIONS`] rotations' worth) is not given data
    /// again until a probe on it is answered: when it would be selected it becomes
    /// `AssumedBad` with its first probe due at once, and the packet takes another EV.
    /// With recycled entropy an EV that drops out of the recycle FIFO (a loss, an ECN mark)
    /// may sit unused for a long time; a path that failed meanwhile would otherwise get a
    /// packet whenever exploration comes round to it, long after the failure. The
    /// reference is the latest evidence on any EV, not the clock, so an idle connection
    /// revalidates nothing. Default (for a new table) `u64::MAX`: never; a connection sets
    /// `ConnConfig::revalidate_ev_after_ns`.
    pub fn set_revalidate_after_ns(&mut self, ns: u64) {
        self.revalidate_after_ns = ns;
    }

    #[inline]
    fn note_proof(&mut self, idx: usize, now_ns: u64) {
        if let Some(p) = self.paths.get_mut(idx) {
            p.proof_ns = Some(p.proof_ns.map_or(now_ns, |t| t.max(now_ns)));
            self.proofs += 1;
            p.proof_count = self.proofs;
            self.note_proof_time(now_ns);
        }
    }

    /// The table's side of evidence at `now_ns` on some EV: its first and latest evidence
    /// times.
    #[inline]
    pub(crate) fn note_proof_time(&mut self, now_ns: u64) {
        self.first_proof_ns.get_or_insert(now_ns);
        self.latest_proof_ns = Some(self.latest_proof_ns.map_or(now_ns, |t| t.max(now_ns)));
    }

    /// A packet sent once on `idx` at `sent_ns` was acknowledged at `now_ns`: its EV's
    /// `acked` counter, then [`PathTable::on_delivered_sent`] without the table's evidence
    /// times, which the
    /// caller notes once for a run of such packets ([`PathTable::note_proof_time`], same
    /// `now_ns`) when this returns true (`idx` is in the table). One lookup of the path
    /// instead of three. `late`: the packet arrived after RACK's deadline (see
    /// [`PathTable::on_delivered_late`]), so its EV is not recycled.
    #[inline]
    pub(crate) fn on_acked_delivered(
        &mut self,
        idx: usize,
        sent_ns: u64,
        now_ns: u64,
        late: bool,
    ) -> bool {
        let Some(p) = self.paths.get_mut(idx) else {
            return false;
        };
        p.stats.acked += 1;
        p.proof_ns = Some(p.proof_ns.map_or(now_ns, |t| t.max(now_ns)));
        self.proofs += 1;
        p.proof_count = self.proofs;
        p.consecutive_losses = 0;
        let q = p.plane;
        if self.selection == Selection::Recycle && !late {
            self.delivered.push(idx);
        }
        self.plane_delivered(q, sent_ns, now_ns);
        true
    }

    /// Whether [`PathTable::select`] can return an EV (some EV is not denied).
    #[inline]
    pub fn any_usable(&self) -> bool {
        self.paths.iter().any(|p| p.state != PathState::Denied)
    }

    /// Chooses the EV for the next packet; returns its index, `None` if every EV is denied.
    /// `avoid`: an index to avoid if any other usable one exists (retransmit on another EV).
    #[inline]
    pub fn select(&mut self, avoid: Option<usize>) -> Option<usize> {
        let n = self.paths.len();
        if n == 0 {
            return None;
        }
        self.picks += 1;
        let chosen = match self.selection {
            Selection::Recycle => self.select_recycled(avoid),
            Selection::RoundRobin => self.select_rr(avoid),
            Selection::PowerOfTwo => self.select_p2c(avoid),
        };
        chosen.or_else(|| self.fallback(avoid))
    }

    /// The oldest recycled EV that is still `Good` (stale entries are dropped); when none is
    /// waiting or the oldest is `avoid` (which then stays for the next packet), round-robin
    /// over `Good` EVs without a loss since their latest delivery, then over all `Good` ones.
    #[inline]
    fn select_recycled(&mut self, avoid: Option<usize>) -> Option<usize> {
        // the usual case, the oldest recycled EV still `Good`, without the set-up of the
        // loop below (it holds a dozen of the table's fields in registers and spills them)
        if let Some(i) = self.recycled.front()
            && Some(i) != avoid
        {
            self.recycled.pop_front();
            if self.refresh(i) == PathState::Good {
                return Some(i);
            }
        }
        self.select_recycled_loop(avoid)
    }

    /// [`PathTable::select_recycled`] past its first candidate.
    #[inline(never)]
    fn select_recycled_loop(&mut self, avoid: Option<usize>) -> Option<usize> {
        while let Some(i) = self.recycled.front() {
            if Some(i) == avoid {
                break;
            }
            self.recycled.pop_front();
            if self.refresh(i) == PathState::Good {
                return Some(i);
            }
        }
        self.select_rr_where(avoid, |p| p.consecutive_losses == 0)
            .or_else(|| self.select_rr(avoid))
    }

    fn select_rr(&mut self, avoid: Option<usize>) -> Option<usize> {
        self.select_rr_where(avoid, |_| true)
    }

    /// Round-robin from the cursor over `Good` EVs other than `avoid` that satisfy `ok`.
    fn select_rr_where(&mut self, avoid: Option<usize>, ok: fn(&Path) -> bool) -> Option<usize> {
        let n = self.paths.len();
        for k in 0..n {
            let i = wrap(self.cursor + k, n);
            if Some(i) == avoid || !ok(&self.paths[i]) {
                continue;
            }
            if self.refresh(i) == PathState::Good {
                self.cursor = wrap(i + 1, n);
                return Some(i);
            }
        }
        None
    }

    fn select_p2c(&mut self, avoid: Option<usize>) -> Option<usize> {
        let n = self.paths.len();
        for i in 0..n {
            self.refresh(i);
        }
        let good = self
            .paths
            .iter()
            .enumerate()
            .filter(|(i, p)| p.state == PathState::Good && Some(*i) != avoid)
            .count();
        if good == 0 {
            return None;
        }
        let nth = |t: &PathTable, k: usize| {
            t.paths
                .iter()
                .enumerate()
                .filter(|(i, p)| p.state == PathState::Good && Some(*i) != avoid)
                .nth(k)
                .map(|(i, _)| i)
        };
        let ka = self.rng.random_range(0..good);
        let kb = self.rng.random_range(0..good);
        let a = nth(self, ka)?;
        let b = nth(self, kb)?;
        let (ra, rb) = (self.paths[a].srtt_ns, self.paths[b].srtt_ns);
        Some(if rb < ra { b } else { a })
    }

    fn fallback(&mut self, avoid: Option<usize>) -> Option<usize> {
        let n = self.paths.len();
        let rank = |s: PathState| match s {
            PathState::Good => 0,
            PathState::Skip { .. } => 1,
            PathState::AssumedBad => 2,
            PathState::Denied => 3,
        };
        let mut best: Option<(u8, usize)> = None;
        for k in 0..n {
            let i = wrap(self.cursor + k, n);
            let r = rank(self.paths[i].state) + if Some(i) == avoid { 4 } else { 0 };
            if self.paths[i].state != PathState::Denied && best.is_none_or(|(br, _)| r < br) {
                best = Some((r, i));
            }
        }
        let (_, i) = best?;
        self.cursor = wrap(i + 1, n);
        Some(i)
    }

    /// A packet whose copy on `idx` arrived was acknowledged at `now_ns` by the SACK being
    /// applied (see [`crate::send::state::SentPacket::delivered_ev`]): the EV delivers (its
    /// consecutive-loss count restarts, it has evidence at `now_ns`), and with
    /// [`Selection::Recycle`] it is a candidate for recycling ([`PathTable::end_ack`]).
    #[inline]
    pub fn on_delivered(&mut self, idx: usize, now_ns: u64) {
        self.on_delivered_sent(idx, now_ns, now_ns);
    }

    /// [`PathTable::on_delivered`] of the copy sent at `sent_ns`: its plane carried a
    /// packet sent then, so a later-declared loss of one sent before it does not count
    /// against the plane ([`PathTable::on_loss_sent`]).
    #[inline]
    pub fn on_delivered_sent(&mut self, idx: usize, sent_ns: u64, now_ns: u64) {
        self.delivered_sent(idx, sent_ns, now_ns, true);
    }

    /// [`PathTable::on_delivered_sent`] of a packet that arrived late: one sent after it
    /// was acknowledged more than RACK's `rtt + reorder window` before it, the time after
    /// which the connection-wide rule would have declared it lost (the sender waits longer
    /// for a packet on an EV whose own round trips are longer,
    /// [`crate::send::SendState::detect_losses`]). The EV delivers (its losses restart,
    /// its plane delivered) but is not recycled: its path is slower than the others, and
    /// recycled entropy keeps the EVs whose packets come back promptly (REPS), as it did
    /// when such a packet was declared lost and its late original credited no EV.
    #[inline]
    pub fn on_delivered_late(&mut self, idx: usize, sent_ns: u64, now_ns: u64) {
        self.delivered_sent(idx, sent_ns, now_ns, false);
    }

    #[inline]
    fn delivered_sent(&mut self, idx: usize, sent_ns: u64, now_ns: u64, recycle: bool) {
        self.note_proof(idx, now_ns);
        if let Some(p) = self.paths.get_mut(idx) {
            p.consecutive_losses = 0;
            let q = p.plane;
            if self.selection == Selection::Recycle && recycle {
                self.delivered.push(idx);
            }
            self.plane_delivered(q, sent_ns, now_ns);
        }
    }

    /// The SACK whose deliveries [`PathTable::on_delivered`] reported is applied; it carried
    /// `ecn_ce_count` CE marks and echoed EV index `echo`. No mark: every delivered EV is
    /// recycled, in acknowledgement order. One mark: all but the echoed EV (the receiver
    /// SACKs at once on a CE arrival, so the echoed packet is the marked one). More marks:
    /// none (which were marked is not known). Only `Good` EVs are recycled.
    #[inline]
    pub fn end_ack(&mut self, ecn_ce_count: u32, echo: Option<usize>) {
        let mut delivered = std::mem::take(&mut self.delivered);
        if ecn_ce_count <= 1 {
            for &i in &delivered {
                if ecn_ce_count == 1 && Some(i) == echo {
                    continue;
                }
                if self.refresh(i) != PathState::Good {
                    continue;
                }
                self.recycled.push_back(i);
            }
        }
        delivered.clear();
        self.delivered = delivered;
    }

    /// Recycled EV indices waiting, oldest first.
    pub fn recycled(&self) -> impl Iterator<Item = usize> + '_ {
        self.recycled.iter()
    }

    /// An ECN mark or a trim on `idx`: `Skip` for one rotation (if it was `Good`).
    pub fn on_congestion(&mut self, idx: usize) {
        let until_pick = self.picks + self.paths.len() as u64;
        if let Some(p) = self.paths.get_mut(idx) {
            if matches!(p.state, PathState::Good | PathState::Skip { .. }) {
                p.state = PathState::Skip { until_pick };
            }
        }
    }

    /// A loss declared on `idx` by time-based detection: counted; the
    /// [`BAD_AFTER_CONSECUTIVE_LOSSES`]-th loss without a delivery in between makes the EV
    /// `AssumedBad` (see [`PathTable::assume_bad`]).
    pub fn on_loss(&mut self, idx: usize, now_ns: u64) {
        self.on_loss_sent(idx, now_ns, now_ns);
    }

    /// [`PathTable::on_loss`] of a packet sent at `sent_ns`: a packet sent before its
    /// plane last came back up does not count against the plane (it was lost while the
    /// plane was down, which is known), only against its EV.
    pub fn on_loss_sent(&mut self, idx: usize, sent_ns: u64, now_ns: u64) {
        self.on_loss_ev(idx, now_ns);
        self.plane_loss(idx, sent_ns, now_ns);
    }

    /// [`PathTable::on_loss`] charged to the EV alone, not to its plane's loss streak: a
    /// loss an RTO expiry declared while packets of several planes expired together (the
    /// silence was everywhere, a stalled receiver or host, and says nothing about one
    /// plane; see [`crate::send::SendState::on_rto`]).
    pub fn on_loss_ev(&mut self, idx: usize, now_ns: u64) {
        let Some(p) = self.paths.get_mut(idx) else {
            return;
        };
        p.consecutive_losses = p.consecutive_losses.saturating_add(1);
        if p.consecutive_losses >= BAD_AFTER_CONSECUTIVE_LOSSES {
            self.assume_bad_ev(idx, now_ns);
        }
    }

    /// Evidence of a path failure on `idx` (an RTO declared a packet sent on it lost, a
    /// go-back-N NACK named a packet lost on it, or [`BAD_AFTER_CONSECUTIVE_LOSSES`] losses
    /// in a row): `AssumedBad` (unless denied); the first probe may go at `now_ns`.
    pub fn assume_bad(&mut self, idx: usize, now_ns: u64) {
        self.assume_bad_sent(idx, now_ns, now_ns);
    }

    /// [`PathTable::assume_bad`] for the loss of a packet sent at `sent_ns` (see
    /// [`PathTable::on_loss_sent`]).
    pub fn assume_bad_sent(&mut self, idx: usize, sent_ns: u64, now_ns: u64) {
        self.assume_bad_ev(idx, now_ns);
        self.plane_loss(idx, sent_ns, now_ns);
    }

    /// The EV's part of [`PathTable::assume_bad`]: `AssumedBad` (unless denied), without
    /// a count in its plane's loss streak (see [`PathTable::on_loss_ev`]).
    pub fn assume_bad_ev(&mut self, idx: usize, now_ns: u64) {
        if let Some(p) = self.paths.get_mut(idx) {
            if p.state != PathState::Denied && p.state != PathState::AssumedBad {
                p.state = PathState::AssumedBad;
                p.probe_seq = None;
                p.probes_unanswered = 0;
                p.next_probe_ns = now_ns;
            }
        }
        self.recount_bad();
    }

    fn recount_bad(&mut self) {
        self.n_bad = self
            .paths
            .iter()
            .filter(|p| p.state == PathState::AssumedBad)
            .count();
    }

    /// A loss on `idx` proved spurious: an `AssumedBad` EV goes back to `Good`.
    pub fn undo_loss(&mut self, idx: usize) {
        if let Some(p) = self.paths.get_mut(idx) {
            p.consecutive_losses = 0;
            // an EV held for its plane returns with the plane, by probe
            if p.state == PathState::AssumedBad && !p.plane_held {
                p.state = PathState::Good;
                p.probe_seq = None;
            }
        }
        self.recount_bad();
    }

    /// The datapath reports `ev` down (`true`) or up again (`false`, back to `Good`, or,
    /// while its plane is down, to what the plane's EVs are: see
    /// [`plane`]). An EV
    /// back from `Denied` counts as proven as of the latest evidence on any EV (no
    /// revalidation probe first) and, with [`Selection::Recycle`], goes to the front of
    /// the recycle FIFO: the next packet takes it (else a busy flow, whose FIFO never runs
    /// dry, would never explore it again).
    pub fn set_denied(&mut self, ev: u32, denied: bool) {
        let Some(idx) = self.index_of(ev) else {
            return;
        };
        let (latest, proofs) = (self.latest_proof_ns, self.proofs);
        let (back_state, held) = self.undenied_state(self.plane_of(idx));
        let mut back = false;
        if let Some(p) = self.paths.get_mut(idx) {
            if denied {
                p.state = PathState::Denied;
                p.plane_held = false;
            } else if p.state == PathState::Denied && back_state != PathState::Good {
                // its plane is down: it waits for the plane (probed with it, or for the
                // local port)
                p.state = back_state;
                p.plane_held = held;
                p.probe_seq = None;
                p.probes_unanswered = 0;
            } else if p.state == PathState::Denied {
                // Back in rotation, as fresh as the latest evidence on any EV (the denial,
                // not the path, kept it silent: no revalidation probe first).
                p.state = PathState::Good;
                if latest.is_some() {
                    p.proof_ns = latest;
                    p.proof_count = proofs;
                }
                back = true;
            }
        }
        if back {
            self.rejoin(idx);
        }
        self.in_flight.clear();
        self.recount_bad();
    }

    /// With [`Selection::Recycle`], EV `idx` is back in rotation (un-denied, or its probe
    /// answered) and takes its share of the recycle FIFO at once: recycled entropy
    /// explores only when its FIFO runs dry, which a busy flow's never does, so an EV
    /// that merely became `Good` again would never be used, and one given a single entry
    /// would carry one packet per round trip while the others carry their share. So the
    /// EV gets `max(1, len / good)` entries at the front (`len` the FIFO's entries, `good`
    /// the `Good` EVs, itself included): the next packets take it, its acknowledgements
    /// recycle it from then on, and all but one of its entries replace the newest entries
    /// of the others (the FIFO grows by one, as for a single entry), so the traffic in
    /// flight is moved, not added. (Counting the packets in flight too, which come back as
    /// entries of the EVs they went on, was tried: it sent more to EVs just back from a
    /// loss and cost the reordering tests 27% more retransmissions, and the plane-loss
    /// recovery did not need it once plane probes stopped backing off to 6.4 ms.) Without it a plane back from a failure stayed unused
    /// under a busy flow (the `plane-loss` experiment never got back to 95% of its rate).
    ///
    /// Three bounds keep a returning plane from taking more than its part, which would
    /// last: entries only circulate (each acknowledgement recycles the EV it used), so the
    /// plane's share of the FIFO is its share of the flow's packets from then on, and the
    /// host's port on that plane, not the network, becomes the bottleneck (a NIC drains
    /// its ports side by side and cannot take the next packet while one port is backed up):
    /// - the EV's entries still in the FIFO (its plane was down a round trip or two)
    ///   count in its share: it is topped up, so a plane that goes down and up again does
    ///   not gain a share each time;
    /// - its plane's entries stay within the plane's share of the FIFO (its `Good` EVs'
    ///   part of all `Good` EVs, rounded up): a flow with fewer entries waiting than EVs
    ///   gave each of the 16 EVs of a returning plane its one entry, 16 against the 10 of
    ///   the three other planes, and in the `plane-loss` all-to-all over 4 planes host 0's
    ///   port on the returned plane stayed 99% busy and its others 30% (the EVs left
    ///   without an entry are used when exploration comes to them);
    /// - the entries go where no entry of the same plane is within `planes up - 1` places
    ///   ([`PathTable::spread_slot`]), not in a run at the front.
    ///
    /// An EV back with its plane from a failure in the fabric ([`Path::plane_return`])
    /// counts the flow's packets in flight on the planes up in the plane's bound, as the
    /// sender told them ([`PathTable::set_in_flight_evs`]): each comes back as an entry of
    /// the EV it went on, and the next packets take the returning plane's entries, so with
    /// the FIFO alone each of its EVs, answering a little later, found none of the
    /// plane's waiting and added one (16 of a flow's circulating entries where its share
    /// was 5-7; the `plane-loss` all-to-all back to 95% in 9 runs of 24, 21 with them).
    fn rejoin(&mut self, idx: usize) {
        if self.selection != Selection::Recycle {
            return;
        }
        let good = self
            .paths
            .iter()
            .filter(|p| p.state == PathState::Good)
            .count()
            .max(1);
        let share = (self.recycled.len() / good).max(1);
        // entries it still holds from before (its plane was down a round trip or two)
        // count in its share: topping up, not adding a share per return, keeps a plane
        // that goes down and up again from gaining a share each time
        let have = self.recycled.iter().filter(|&i| i == idx).count();
        let q = self.plane_of(idx);
        let good_q = self
            .paths
            .iter()
            .filter(|p| p.plane == q && p.state == PathState::Good)
            .count();
        let mut on_q = self
            .recycled
            .iter()
            .filter(|&i| self.plane_of(i) == q)
            .count();
        let apart = self.planes.iter().filter(|pl| pl.is_up()).count().max(1);
        // an EV back with its plane from a failure: the flow's packets in flight on the
        // planes up count in the plane's share (each comes back as an entry of the EV it
        // went on; those on a plane down come back as nothing)
        let (flying_q, flying) = if std::mem::take(&mut self.paths[idx].plane_return) {
            (
                self.in_flight
                    .get(usize::from(q))
                    .map_or(0, |&n| n as usize),
                self.in_flight
                    .iter()
                    .zip(&self.planes)
                    .filter(|(_, pl)| pl.is_up())
                    .map(|(&n, _)| n as usize)
                    .sum::<usize>(),
            )
        } else {
            (0, 0)
        };
        for k in 0..share.saturating_sub(have) {
            // the first entry is one more; the others replace the newest entries (above)
            let at = (k > 0)
                .then(|| self.recycled.len().checked_sub(1))
                .flatten();
            let replaced = at.map(|j| self.recycled.at(j));
            let after_q = on_q + 1 - usize::from(replaced.is_some_and(|i| self.plane_of(i) == q));
            let len = self.recycled.len() + usize::from(replaced.is_none());
            // the plane's entries stay within its share of the FIFO, its `Good` EVs' part
            // of all `Good` EVs (rounded up)
            if (after_q + flying_q) * good > (len + flying) * good_q + good - 1 {
                break;
            }
            if at.is_some() {
                self.recycled.pop_back();
            }
            let pos = self.spread_slot(q, apart);
            self.recycled.insert(pos, idx);
            on_q = after_q;
        }
    }

    /// Where an entry of plane `q` joins the recycle FIFO: the first position from the
    /// front with no entry of plane `q` within `apart - 1` places on either side (`apart`
    /// the planes that are up), the back when there is none. The host's NIC drains its
    /// planes' ports side by side, one packet each in turn: a run of one plane's entries
    /// (the EVs of a plane just back, each given its entry at the front) leaves the other
    /// ports idle while that plane's port sends the run, and the acknowledgements, which
    /// come back in the order sent, recycle the run as a run, round trip after round trip
    /// (the `plane-loss` all-to-all over 4 planes sent 118 packets on the returned plane
    /// for 35 on each other one in the 5 us after its return, and its goodput stayed at
    /// 70-90% of the no-failure run's). With one plane up, the front.
    fn spread_slot(&self, q: u8, apart: usize) -> usize {
        let len = self.recycled.len();
        let on_q = |k: usize| self.plane_of(self.recycled.at(k)) == q;
        let reach = apart - 1;
        (0..=len)
            .find(|&j| (j.saturating_sub(reach)..(j + reach).min(len)).all(|k| !on_q(k)))
            .unwrap_or(len)
    }

    /// Whether some EV is `AssumedBad` ([`PathTable::next_probe`] returns `None` while
    /// none is).
    #[inline]
    pub(crate) fn any_assumed_bad(&self) -> bool {
        self.n_bad != 0
    }

    /// The next probe to send at `now_ns`: `(index, probe sequence)` of an `AssumedBad` EV
    /// whose probe time has come; schedules its next probe `interval_ns << k` later, `k`
    /// the probes of this episode so far (at most 6: exponential back-off to 64x).
    #[inline]
    pub fn next_probe(&mut self, now_ns: u64, interval_ns: u64) -> Option<(usize, u32)> {
        if self.n_bad == 0 {
            // every packet asks: no call while no EV is assumed bad
            return None;
        }
        self.next_probe_due(now_ns, interval_ns)
    }

    /// [`PathTable::next_probe`] while some EV is `AssumedBad`.
    #[inline(never)]
    fn next_probe_due(&mut self, now_ns: u64, interval_ns: u64) -> Option<(usize, u32)> {
        if let Some(probe) = self.next_plane_probe(now_ns, interval_ns) {
            return Some(probe);
        }
        let i = self.paths.iter().position(|p| {
            p.state == PathState::AssumedBad && !p.plane_held && p.next_probe_ns <= now_ns
        })?;
        // an EV whose probes went unanswered long enough gives way to a spare of its plane,
        // probed at once
        self.replace_if_due(i, now_ns);
        let seq = self.next_probe_seq;
        let p = &mut self.paths[i];
        p.probe_seq = Some((p.probe_seq.map_or(seq, |(first, _)| first), seq));
        p.probes_unanswered = p.probes_unanswered.saturating_add(1);
        let wait = interval_ns.max(1) << p.probes_unanswered.min(6);
        p.next_probe_ns = now_ns.saturating_add(wait);
        p.stats.probes_sent += 1;
        self.next_probe_seq = self.next_probe_seq.wrapping_add(1).max(1);
        Some((i, seq))
    }

    /// Earliest time a probe is due, if any EV is `AssumedBad`.
    pub fn next_probe_time(&self) -> Option<u64> {
        if self.n_bad == 0 {
            return None;
        }
        let own = self
            .paths
            .iter()
            .filter(|p| p.state == PathState::AssumedBad && !p.plane_held)
            .map(|p| p.next_probe_ns)
            .min();
        match (own, self.next_plane_probe_time()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The sender's packets in flight, by the EV index of each one's latest transmission
    /// ([`crate::send::SendState::in_flight_evs`]), for the next
    /// [`PathTable::on_probe_reply`] or [`PathTable::set_denied`] only: an EV back with its
    /// plane from a failure ([`Path::plane_return`]) takes entries of the recycle FIFO
    /// only while its plane's share of the flow's entries, those waiting and those in
    /// flight on the planes up (each comes back as an entry of the EV it went on), is
    /// within the plane's share of the `Good` EVs. Kept only with [`Selection::Recycle`]
    /// and more than one plane.
    pub fn set_in_flight_evs(&mut self, evs: impl Iterator<Item = usize>) {
        self.in_flight.clear();
        if self.selection != Selection::Recycle || self.planes.len() < 2 {
            return;
        }
        self.in_flight.resize(self.planes.len(), 0);
        for i in evs {
            if let Some(p) = self.paths.get(i) {
                if let Some(n) = self.in_flight.get_mut(usize::from(p.plane)) {
                    *n += 1;
                }
            }
        }
    }

    /// A probe reply for `ev` with `probe_seq`: if it answers a probe of the current
    /// episode, the EV is `Good` again. Returns whether it did.
    pub fn on_probe_reply(&mut self, ev: u32, probe_seq: u32, now_ns: u64) -> bool {
        let answered = self.on_probe_reply_inner(ev, probe_seq, now_ns);
        self.in_flight.clear();
        answered
    }

    fn on_probe_reply_inner(&mut self, ev: u32, probe_seq: u32, now_ns: u64) -> bool {
        let Some(idx) = self.index_of(ev) else {
            return false;
        };
        let Some(p) = self.paths.get_mut(idx) else {
            return false;
        };
        let Some((first, latest)) = p.probe_seq else {
            return false;
        };
        if latest.wrapping_sub(probe_seq) > latest.wrapping_sub(first) {
            return false;
        }
        p.probe_seq = None;
        p.probes_unanswered = 0;
        p.consecutive_losses = 0;
        p.stats.probes_answered += 1;
        let held = p.plane_held;
        let back = p.state == PathState::AssumedBad;
        if back {
            p.state = PathState::Good;
        }
        if held {
            self.plane_probe_answered(idx, now_ns);
        }
        if back {
            self.rejoin(idx);
        }
        self.note_proof(idx, now_ns);
        self.on_echo(idx, now_ns);
        self.recount_bad();
        true
    }

    /// A SACK or probe reply echoing `idx` arrived at `now_ns`: the EV's round trip works
    /// (the echoed packet went out on it and the answer came back on it; the peer sends
    /// its answer on the EV it echoes).
    #[inline]
    pub fn on_echo(&mut self, idx: usize, now_ns: u64) {
        if let Some(p) = self.paths.get_mut(idx) {
            p.echo_ns = Some(p.echo_ns.map_or(now_ns, |t| t.max(now_ns)));
        }
    }

    /// The EV for a tail loss probe: the `Good` EV other than `avoid` whose round trip
    /// worked most recently ([`Path::echo_ns`]; the lowest index on a tie), counted as a
    /// selection; [`PathTable::select`] when none has worked yet. The probe is the last
    /// packet of a flight whose answer did not come: its answer travels back on the EV it
    /// goes on, and an EV that merely delivered (acknowledged by a SACK that came back on
    /// another EV) may have a dead return path, which would cost the probe and leave the
    /// tail to the RTO.
    pub fn select_for_probe(&mut self, avoid: Option<usize>) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for i in 0..self.paths.len() {
            let Some(t) = self.paths[i].echo_ns else {
                continue;
            };
            if Some(i) == avoid || best.is_some_and(|(bt, _)| t <= bt) {
                continue;
            }
            if self.refresh(i) == PathState::Good {
                best = Some((t, i));
            }
        }
        match best {
            Some((_, i)) => {
                self.picks += 1;
                Some(i)
            }
            None => self.select(avoid),
        }
    }

    /// An RTT sample (ns) for `idx`: `srtt = 7/8 srtt + 1/8 sample` (RFC 6298 2.3).
    pub fn on_rtt_sample(&mut self, idx: usize, rtt_ns: u64) {
        if let Some(p) = self.paths.get_mut(idx) {
            p.srtt_ns = if p.srtt_ns == 0 {
                rtt_ns
            } else {
                (p.srtt_ns * 7 + rtt_ns) / 8
            };
        }
    }
}

/// `i mod n` for `i < 2n` without a division (the round-robin cursor is always below `n`).
#[inline]
fn wrap(i: usize, n: usize) -> usize {
    if i >= n { i - n } else { i }
}

pub mod plane;
#[cfg(test)]
mod tests;
