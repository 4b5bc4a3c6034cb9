//! Logs: the engine's `tracing` events.
//!
//! The transport is sans-IO and logs nothing; the engine watches it from outside. At most
//! every [`SAMPLE_NS`] (and only while a subscriber takes `ERROR` events or more,
//! [`on`]), it compares a cheap snapshot of each QP (connection state, each EV's
//! [`PathState`] and loss counters, the RTO expiry count, error completions) with the
//! previous one and emits an event for each change that an operator asks about:
//!
//! | level | event |
//! |-------|-------|
//! | `error` | `connection failed: CAUSE` (the sender's [`mrc_transport::send::GiveUp`], e.g. `peer unresponsive for 5.0 s`) |
//! | `warn`  | `EV N ASSUMED_BAD: CAUSE` / `EV N DENIED: ...` (an EV out of rotation; cause `loss`, `RTO timeout`, `unproven (revalidation)`) |
//! | `warn`  | `plane Q down: CAUSE` (cause `losses on its EVs`, `the peer reports its port down`, `local port down`; a connection over several planes, [`mrc_transport::path::plane`]) |
//! | `warn`  | `RTO expired K times` (at most one event per QP per [`RTO_REPORT_NS`], with the count since the previous one) |
//! | `warn`  | `K work requests completed with an error`, datapath errors (at most one a second) |
//! | `warn`  | `K more EV state changes not logged in the last second` (past [`EV_EVENTS_PER_WINDOW`] EV events of one QP a second) |
//! | `info`  | connection state changes (`Init -> Ready`, ...), QP connect, close, destroy; an EV back in rotation; `plane Q back up` |
//! | `debug` | an EV skipped for one rotation (trim, ECN); the TCP bootstrap's steps ([`super::bootstrap`]) |
//!
//! Nothing is logged per packet. Each event carries `qpn` (hex) and, for EV events, `ev`
//! and `cause` as fields. With no subscriber (or one that takes nothing from mrc) the
//! engine's cost is one [`tracing::enabled!`] check per loop iteration.

use mrc_congestion::AnyController;
use mrc_transport::completion::WcStatus;
use mrc_transport::path::{PathState, PlaneDownCause, PlaneState};
use mrc_transport::stats::EvStats;
use mrc_transport::{ConnState, Connection};
use tracing::{Level, debug, error, info, warn};

/// How often the engine compares snapshots, ns: 1 ms.
pub(crate) const SAMPLE_NS: u64 = 1_000_000;

/// Least time between two RTO reports of one QP, ns: 1 s.
pub(crate) const RTO_REPORT_NS: u64 = 1_000_000_000;

/// Most EV events of one QP per [`EV_WINDOW_NS`]; the rest are counted, and the count is
/// reported (warn) when the window ends, so an EV that flaps under random loss cannot flood
/// the log.
pub(crate) const EV_EVENTS_PER_WINDOW: u32 = 32;

/// The window of [`EV_EVENTS_PER_WINDOW`], ns: 1 s.
pub(crate) const EV_WINDOW_NS: u64 = 1_000_000_000;

/// Whether any engine event could be taken now (the gate of every observation).
#[inline]
pub(crate) fn on() -> bool {
    tracing::enabled!(Level::ERROR)
}

/// A QPN as the logs write it.
pub(crate) struct Qpn(pub u32);

impl std::fmt::Display for Qpn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

/// The name of a state as the docs write it.
pub(crate) fn path_state_name(s: PathState) -> &'static str {
    match s {
        PathState::Good => "GOOD",
        PathState::Skip { .. } => "SKIP",
        PathState::AssumedBad => "ASSUMED_BAD",
        PathState::Denied => "DENIED",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Good,
    Skip,
    Bad,
    Denied,
}

fn kind(s: PathState) -> Kind {
    match s {
        PathState::Good => Kind::Good,
        PathState::Skip { .. } => Kind::Skip,
        PathState::AssumedBad => Kind::Bad,
        PathState::Denied => Kind::Denied,
    }
}

#[derive(Clone, Copy, Debug)]
struct EvSnap {
    kind: Kind,
    timeouts: u64,
    lost: u64,
    trimmed: u64,
    ecn_marked: u64,
    revalidations: u64,
}

impl EvSnap {
    fn of(state: PathState, s: &EvStats) -> Self {
        EvSnap {
            kind: kind(state),
            timeouts: s.timeouts,
            lost: s.lost,
            trimmed: s.trimmed,
            ecn_marked: s.ecn_marked,
            revalidations: s.revalidations,
        }
    }
}

/// Why an EV left `GOOD`, from its counters since the previous sample.
fn cause(old: &EvSnap, new: &EvSnap) -> &'static str {
    if new.kind == Kind::Denied {
        "denied by the datapath"
    } else if new.timeouts > old.timeouts {
        "RTO timeout"
    } else if new.lost > old.lost {
        "loss"
    } else if new.revalidations > old.revalidations {
        "unproven (revalidation)"
    } else if new.trimmed > old.trimmed {
        "trim"
    } else if new.ecn_marked > old.ecn_marked {
        "ECN"
    } else {
        "unknown"
    }
}

/// What the engine saw of one QP at its previous sample.
#[derive(Debug)]
pub(crate) struct Watch {
    state: ConnState,
    evs: Vec<EvSnap>,
    /// RTO expiries already reported.
    rto_reported: u64,
    /// When the previous RTO report was emitted.
    rto_report_ns: Option<u64>,
    /// Error completions since the previous sample, and the first one's status.
    failed_wcs: u64,
    first_failed: Option<WcStatus>,
    /// The EV events' rate limit.
    ev_budget: Budget,
    /// Each plane's state at the previous sample.
    planes: Vec<PlaneState>,
}

/// The event for plane `q` going from `old` to `new`: `(true, text)` for a warning (down),
/// `(false, text)` for information (back up); `None` when nothing an operator asks about
/// changed (the same state, or one down cause giving way to another).
fn plane_event(q: usize, old: PlaneState, new: PlaneState) -> Option<(bool, String)> {
    match (old, new) {
        (PlaneState::Up, PlaneState::Down(c)) => {
            let why = match c {
                PlaneDownCause::Loss => "losses on its EVs",
                PlaneDownCause::PeerReport => "the peer reports its port down",
                PlaneDownCause::Local => "local port down",
            };
            Some((true, format!("plane {q} down: {why}")))
        }
        (PlaneState::Down(_), PlaneState::Up) => Some((false, format!("plane {q} back up"))),
        _ => None,
    }
}

/// At most `EV_EVENTS_PER_WINDOW` events per `EV_WINDOW_NS`; the rest counted.
#[derive(Debug, Default)]
struct Budget {
    window_ns: Option<u64>,
    events: u32,
    suppressed: u64,
}

impl Budget {
    /// Starts a new window at `now_ns` when the current one is over; returns the events
    /// suppressed in the one that ended (nonzero only).
    fn roll(&mut self, now_ns: u64) -> Option<u64> {
        let w = self.window_ns.get_or_insert(now_ns);
        if now_ns.saturating_sub(*w) < EV_WINDOW_NS {
            return None;
        }
        *w = now_ns;
        self.events = 0;
        Some(std::mem::take(&mut self.suppressed)).filter(|&n| n > 0)
    }

    /// Whether one more event may be logged in this window (else it is counted).
    fn take(&mut self) -> bool {
        if self.events < EV_EVENTS_PER_WINDOW {
            self.events += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

impl Watch {
    pub(crate) fn new(conn: &Connection<AnyController>) -> Self {
        Watch {
            state: conn.state(),
            evs: snap_evs(conn),
            rto_reported: conn.stats().timeouts,
            rto_report_ns: None,
            failed_wcs: 0,
            first_failed: None,
            ev_budget: Budget::default(),
            planes: snap_planes(conn),
        }
    }

    /// Notes an error completion (called only for those).
    #[inline]
    pub(crate) fn failed_completion(&mut self, status: WcStatus) {
        self.failed_wcs += 1;
        self.first_failed.get_or_insert(status);
    }

    /// Compares `conn` with the previous sample and logs the changes.
    pub(crate) fn observe(&mut self, qpn: u32, conn: &Connection<AnyController>, now_ns: u64) {
        let q = Qpn(qpn);
        let state = conn.state();
        let failing = state == ConnState::Error && self.state != ConnState::Error;
        // RTO expiries: one report per burst (RTO_REPORT_NS), and always before a failure.
        let timeouts = conn.stats().timeouts;
        if timeouts > self.rto_reported
            && (failing
                || self
                    .rto_report_ns
                    .is_none_or(|t| now_ns.saturating_sub(t) >= RTO_REPORT_NS))
        {
            let n = timeouts - self.rto_reported;
            let rto_ms = conn.send_state().rto_ns() as f64 / 1e6;
            if n == 1 {
                warn!(qpn = %q, expiries = n, total = timeouts, rto_ms, "RTO expired");
            } else {
                warn!(qpn = %q, expiries = n, total = timeouts, rto_ms, "RTO expired {n} times");
            }
            self.rto_reported = timeouts;
            self.rto_report_ns = Some(now_ns);
        }
        // EVs: at most EV_EVENTS_PER_WINDOW events a window, then a count.
        if let Some(n) = self.ev_budget.roll(now_ns) {
            warn!(qpn = %q, suppressed = n, "{n} more EV state changes not logged in the last second");
        }
        let paths = conn.paths().paths();
        if paths.len() == self.evs.len() {
            for (p, old) in paths.iter().zip(self.evs.iter_mut()) {
                let new = EvSnap::of(p.state, &p.stats);
                if new.kind != old.kind {
                    let logged = matches!(
                        (old.kind, new.kind),
                        (_, Kind::Bad | Kind::Denied)
                            | (Kind::Good, Kind::Skip)
                            | (Kind::Bad | Kind::Denied, Kind::Good | Kind::Skip)
                    );
                    if logged && self.ev_budget.take() {
                        let ev = p.ev;
                        let to = path_state_name(p.state);
                        let why = cause(old, &new);
                        match (old.kind, new.kind) {
                            (_, Kind::Bad | Kind::Denied) => {
                                warn!(qpn = %q, ev, state = to, cause = why, "EV {ev} {to}: {why}");
                            }
                            (Kind::Good, _) => {
                                debug!(qpn = %q, ev, state = to, cause = why, "EV {ev} SKIP: {why}");
                            }
                            _ => {
                                info!(qpn = %q, ev, state = to, "EV {ev} back in rotation");
                            }
                        }
                    }
                }
                *old = new;
            }
        } else {
            self.evs = snap_evs(conn);
        }
        // Planes (a handful per connection: no rate limit).
        let planes = conn.paths().planes();
        if planes.len() == self.planes.len() {
            for (i, (p, old)) in planes.iter().zip(self.planes.iter_mut()).enumerate() {
                match plane_event(i, *old, p.state) {
                    Some((true, text)) => warn!(qpn = %q, plane = i, "{text}"),
                    Some((false, text)) => info!(qpn = %q, plane = i, "{text}"),
                    None => {}
                }
                *old = p.state;
            }
        } else {
            self.planes = snap_planes(conn);
        }
        // Connection state.
        if state != self.state {
            if state == ConnState::Error {
                let why = match (conn.give_up(), self.first_failed) {
                    (Some(g), _) => g.to_string(),
                    (None, Some(s)) => format!("work requests failed with {s:?}"),
                    (None, None) => "fatal error".to_string(),
                };
                error!(qpn = %q, from = ?self.state, cause = %why, "connection failed: {why}");
            } else {
                info!(qpn = %q, from = ?self.state, to = ?state, "connection {:?} -> {state:?}", self.state);
            }
            self.state = state;
        }
        if self.failed_wcs > 0 {
            let n = self.failed_wcs;
            let first = self.first_failed.unwrap_or(WcStatus::Flushed);
            warn!(qpn = %q, count = n, first = ?first, "{n} work requests completed with an error (first: {first:?})");
            self.failed_wcs = 0;
            self.first_failed = None;
        }
    }
}

fn snap_planes(conn: &Connection<AnyController>) -> Vec<PlaneState> {
    conn.paths().planes().iter().map(|p| p.state).collect()
}

fn snap_evs(conn: &Connection<AnyController>) -> Vec<EvSnap> {
    conn.paths()
        .paths()
        .iter()
        .map(|p| EvSnap::of(p.state, &p.stats))
        .collect()
}

/// Engine-wide counters already reported.
#[derive(Debug, Default)]
pub(crate) struct EngineWatch {
    dp_errors_reported: u64,
    dp_report_ns: Option<u64>,
    /// The latest datapath error's text (kept only while logging is on).
    pub(crate) last_dp_error: Option<String>,
}

impl EngineWatch {
    /// Reports datapath errors at most once a second.
    pub(crate) fn observe(&mut self, dp_errors: u64, now_ns: u64) {
        if dp_errors > self.dp_errors_reported
            && self
                .dp_report_ns
                .is_none_or(|t| now_ns.saturating_sub(t) >= RTO_REPORT_NS)
        {
            let n = dp_errors - self.dp_errors_reported;
            let last = self.last_dp_error.take().unwrap_or_default();
            warn!(count = n, total = dp_errors, last = %last, "{n} datapath errors (latest: {last})");
            self.dp_errors_reported = dp_errors;
            self.dp_report_ns = Some(now_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ev_events_are_limited_per_window_and_the_rest_counted() {
        let mut b = Budget::default();
        assert_eq!(b.roll(5), None);
        let logged = (0..40).filter(|_| b.take()).count();
        assert_eq!(logged, EV_EVENTS_PER_WINDOW as usize);
        assert_eq!(b.roll(5 + EV_WINDOW_NS - 1), None);
        assert!(!b.take());
        assert_eq!(b.roll(5 + EV_WINDOW_NS), Some(9));
        assert!(b.take());
        assert_eq!(b.roll(5 + 3 * EV_WINDOW_NS), None);
    }

    #[test]
    fn plane_events_name_the_cause_and_the_return() {
        let down = |c| PlaneState::Down(c);
        assert_eq!(
            plane_event(1, PlaneState::Up, down(PlaneDownCause::Loss)),
            Some((true, "plane 1 down: losses on its EVs".to_string()))
        );
        assert_eq!(
            plane_event(0, PlaneState::Up, down(PlaneDownCause::PeerReport)),
            Some((
                true,
                "plane 0 down: the peer reports its port down".to_string()
            ))
        );
        assert_eq!(
            plane_event(3, PlaneState::Up, down(PlaneDownCause::Local)),
            Some((true, "plane 3 down: local port down".to_string()))
        );
        assert_eq!(
            plane_event(2, down(PlaneDownCause::Local), PlaneState::Up),
            Some((false, "plane 2 back up".to_string()))
        );
        assert_eq!(
            plane_event(2, down(PlaneDownCause::Loss), down(PlaneDownCause::Local)),
            None
        );
        assert_eq!(plane_event(2, PlaneState::Up, PlaneState::Up), None);
    }

    #[test]
    fn causes_in_order_of_evidence() {
        let s = EvSnap {
            kind: Kind::Good,
            timeouts: 0,
            lost: 0,
            trimmed: 0,
            ecn_marked: 0,
            revalidations: 0,
        };
        let bad = |f: fn(&mut EvSnap)| {
            let mut n = s;
            n.kind = Kind::Bad;
            f(&mut n);
            cause(&s, &n)
        };
        assert_eq!(bad(|n| n.timeouts = 1), "RTO timeout");
        assert_eq!(
            bad(|n| {
                n.lost = 2;
                n.trimmed = 1
            }),
            "loss"
        );
        assert_eq!(bad(|n| n.revalidations = 1), "unproven (revalidation)");
        assert_eq!(bad(|n| n.trimmed = 1), "trim");
        assert_eq!(bad(|n| n.ecn_marked = 1), "ECN");
        assert_eq!(bad(|_| {}), "unknown");
        let mut d = s;
        d.kind = Kind::Denied;
        assert_eq!(cause(&s, &d), "denied by the datapath");
    }
}
