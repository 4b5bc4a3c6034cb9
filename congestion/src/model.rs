//! A model sender for checking controller invariants, shared by the property tests
//! (`congestion/tests/model.rs`, proptest) and the `cc_ops` fuzz target.
//!
//! The model keeps the shadow list of packets in flight (send time and size). A sequence
//! of [`Op`]s (time steps, sends, SACKs of the oldest packets with real, missing, zero or
//! future timestamp echoes and arbitrary CE counts, CNPs, trims, losses, spurious-loss
//! undos) drives both the shadow and the controller, which receives `bytes_in_flight`
//! from the shadow. After every operation [`run_model`] asserts:
//!
//! * the controller's idea of bytes in flight equals the shadow count;
//! * after the due timers fired, the next timer (if any) lies in the future;
//! * `metrics()` agrees with `cwnd_bytes()` and `pacing_rate_bps()`;
//!
//! and then runs the per-controller check ([`check_dcqcn`], [`check_swift`],
//! [`check_nscc`], [`check_fixed`], or [`check_any`] for whichever is inside an
//! [`AnyController`]): the window is within the controller's `[min, max]`, the pacing
//! rate is `u64::MAX` (no pacing) or within `[min rate, line rate]`, and internal
//! real-valued state (alpha, windows, smoothed delay) is finite and not negative.
//!
//! This is test support: a violated invariant panics with a message naming the operation.

use std::collections::VecDeque;

use crate::{AckSample, AnyController, Controller, Dcqcn, FixedWindow, Nscc, Swift};

/// Where the model clock starts, ns (non-zero so real echoes are never 0).
pub const START_NS: u64 = 1_000_000;

/// What a SACK echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Echo {
    /// The send time of the newest packet it acknowledges.
    Real,
    /// No timestamp.
    Missing,
    /// A zero timestamp.
    Zero,
    /// A timestamp after `now` (hostile peer).
    Future,
}

/// One operation on the model sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Let this many ns pass (due timers fire on the way).
    Step(u64),
    /// Send a packet of this many payload bytes.
    Send(u64),
    /// SACK the oldest `packets` packets in flight, `ce` of them marked (possibly more
    /// than acknowledged: a hostile count).
    Ack {
        /// Packets acknowledged (fewer if fewer are in flight).
        packets: usize,
        /// ECN CE count reported.
        ce: u32,
        /// What the SACK echoes.
        echo: Echo,
    },
    /// A CNP arrives.
    Cnp,
    /// The oldest packet in flight was trimmed.
    Trim,
    /// The oldest packet in flight was declared lost.
    Loss,
    /// A loss declaration proved spurious.
    SpuriousLoss,
}

/// The model sender: a clock and the packets in flight.
#[derive(Clone, Debug)]
pub struct Model {
    /// Model clock, ns.
    pub now_ns: u64,
    /// Packets in flight, oldest first: (send time ns, payload bytes).
    pub in_flight: VecDeque<(u64, u64)>,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            now_ns: START_NS,
            in_flight: VecDeque::new(),
        }
    }
}

impl Model {
    /// Sum of the payload bytes in flight.
    pub fn bytes_in_flight(&self) -> u64 {
        self.in_flight.iter().map(|&(_, b)| b).sum()
    }
}

/// Fires due timers up to `until_ns`: one by one for up to 1000 deadlines, then once at
/// `until_ns` for the rest (controllers must catch up on missed periods).
pub fn fire_timers<C: Controller>(cc: &mut C, until_ns: u64) {
    let mut fired = 0;
    while let Some(deadline) = cc.next_timer_ns() {
        if deadline > until_ns {
            break;
        }
        if fired < 1000 {
            cc.on_timer(deadline);
            fired += 1;
        } else {
            cc.on_timer(until_ns);
        }
    }
}

/// Runs `ops` against `cc` from a fresh [`Model`], asserting the common invariants (see
/// the module docs) and then `check` after every operation.
///
/// # Panics
/// When an invariant does not hold (this is a checker).
pub fn run_model<C: Controller>(cc: &mut C, ops: &[Op], check: impl Fn(&C)) {
    let mut m = Model::default();
    for op in ops {
        apply(cc, &mut m, op);
        // A real caller runs due timers before anything else at this time.
        fire_timers(cc, m.now_ns);
        assert_eq!(
            cc.metrics().bytes_in_flight,
            m.bytes_in_flight(),
            "in-flight mismatch after {op:?}"
        );
        if let Some(next) = cc.next_timer_ns() {
            assert!(
                next > m.now_ns,
                "timer {next} not in the future at {} after {op:?}",
                m.now_ns
            );
        }
        let metrics = cc.metrics();
        assert_eq!(metrics.cwnd_bytes, cc.cwnd_bytes(), "after {op:?}");
        assert_eq!(
            metrics.pacing_rate_bps,
            cc.pacing_rate_bps(),
            "after {op:?}"
        );
        check(cc);
    }
}

/// Applies one operation to the model and the controller (time steps saturate).
fn apply<C: Controller>(cc: &mut C, m: &mut Model, op: &Op) {
    match *op {
        Op::Step(d) => {
            let until = m.now_ns.saturating_add(d);
            fire_timers(cc, until);
            m.now_ns = until;
        }
        Op::Send(bytes) => {
            m.in_flight.push_back((m.now_ns, bytes));
            cc.on_packet_sent(m.now_ns, bytes, m.bytes_in_flight());
        }
        Op::Ack { packets, ce, echo } => {
            let mut acked_bytes = 0;
            let mut newest_send_ns = None;
            let mut acked_packets = 0u32;
            for _ in 0..packets {
                let Some((sent, bytes)) = m.in_flight.pop_front() else {
                    break;
                };
                acked_bytes += bytes;
                acked_packets += 1;
                newest_send_ns = Some(sent);
            }
            let echoed_send_ts_ns = match echo {
                Echo::Real => newest_send_ns,
                Echo::Missing => None,
                Echo::Zero => Some(0),
                Echo::Future => Some(m.now_ns + 1),
            };
            cc.on_ack(
                m.now_ns,
                &AckSample {
                    acked_bytes,
                    echoed_send_ts_ns,
                    ecn_ce_count: ce,
                    acked_packets,
                    bytes_in_flight: m.bytes_in_flight(),
                },
            );
        }
        Op::Cnp => cc.on_cnp(m.now_ns),
        Op::Trim => {
            if let Some((_, bytes)) = m.in_flight.pop_front() {
                cc.on_trim(m.now_ns, bytes);
            }
        }
        Op::Loss => {
            if let Some((_, bytes)) = m.in_flight.pop_front() {
                cc.on_loss(m.now_ns, bytes);
            }
        }
        Op::SpuriousLoss => cc.on_spurious_loss(m.now_ns),
    }
}

/// DCQCN: rate and target rate within `[min_rate_bps, line_rate_bps]`, alpha in
/// `[0, 1]`, the window fixed at `window_bytes`.
///
/// # Panics
/// When an invariant does not hold.
pub fn check_dcqcn(cc: &Dcqcn) {
    let cfg = *cc.config();
    let rate = cc.pacing_rate_bps();
    assert!(
        (cfg.min_rate_bps..=cfg.line_rate_bps).contains(&rate),
        "rate {rate} outside [{}, {}]",
        cfg.min_rate_bps,
        cfg.line_rate_bps
    );
    assert!((cfg.min_rate_bps..=cfg.line_rate_bps).contains(&cc.target_rate_bps()));
    assert!(cc.alpha().is_finite() && (0.0..=1.0).contains(&cc.alpha()));
    assert_eq!(cc.cwnd_bytes(), cc.config().window_bytes);
}

/// Swift: window finite and within `[min_cwnd_bytes, max_cwnd_bytes]`, the integer
/// window at least one MSS, pacing exactly when the window is below one packet.
///
/// # Panics
/// When an invariant does not hold.
pub fn check_swift(cc: &Swift) {
    let cfg = *cc.config();
    let w = cc.window_bytes();
    assert!(w.is_finite(), "window {w}");
    assert!(
        w >= cfg.min_cwnd_bytes as f64 && w <= cfg.max_cwnd_bytes as f64,
        "window {w}"
    );
    assert!(cc.cwnd_bytes() >= cfg.mss_bytes.max(cfg.min_cwnd_bytes));
    let rate = cc.pacing_rate_bps();
    assert!(
        rate == u64::MAX || (1..=cfg.line_rate_bps).contains(&rate),
        "rate {rate}"
    );
    assert_eq!(rate == u64::MAX, w >= cfg.mss_bytes as f64);
}

/// NSCC: window finite and within `[min_cwnd_bytes, max_cwnd_bytes]`, smoothed delay
/// finite and not negative, base RTT within `[min_base_rtt_ns, base_rtt_ns]`, no pacing.
///
/// # Panics
/// When an invariant does not hold.
pub fn check_nscc(cc: &Nscc) {
    let cfg = *cc.config();
    let w = cc.window_bytes();
    assert!(w.is_finite(), "window {w}");
    assert!(
        w >= cfg.min_cwnd_bytes as f64 && w <= cfg.max_cwnd_bytes as f64,
        "window {w}"
    );
    assert!((cfg.min_cwnd_bytes..=cfg.max_cwnd_bytes).contains(&cc.cwnd_bytes()));
    let d = cc.avg_delay_ns();
    assert!(d.is_finite() && d >= 0.0, "smoothed delay {d}");
    assert!((cfg.min_base_rtt_ns..=cfg.base_rtt_ns).contains(&cc.base_rtt_ns()));
    assert_eq!(cc.pacing_rate_bps(), u64::MAX);
}

/// Fixed window: the window never moves from `cwnd_bytes`, no pacing.
///
/// # Panics
/// When an invariant does not hold.
pub fn check_fixed(cc: &FixedWindow, cwnd_bytes: u64) {
    assert_eq!(cc.cwnd_bytes(), cwnd_bytes);
    assert_eq!(cc.pacing_rate_bps(), u64::MAX);
}

/// The check of whichever controller `cc` holds; a fixed window must stay at
/// `fixed_cwnd_bytes`.
///
/// # Panics
/// When an invariant does not hold.
pub fn check_any(cc: &AnyController, fixed_cwnd_bytes: u64) {
    match cc {
        AnyController::Dcqcn(c) => check_dcqcn(c),
        AnyController::Swift(c) => check_swift(c),
        AnyController::Nscc(c) => check_nscc(c),
        AnyController::Fixed(c) => check_fixed(c, fixed_cwnd_bytes),
    }
}
