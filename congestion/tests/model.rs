//! Model-based property tests for every controller.
//!
//! A model sender keeps the shadow list of packets in flight (send time and size). Random
//! operations (time steps, sends, SACKs of the oldest packets with real, missing, zero or
//! future timestamp echoes and random CE counts, CNPs, trims, losses, spurious-loss undos)
//! drive both the shadow and the controller, which receives `bytes_in_flight` from the
//! shadow. After every operation:
//!
//! * the controller's idea of bytes in flight equals the shadow count;
//! * the window is at least the controller's minimum (and at most its maximum);
//! * the pacing rate is `u64::MAX` (no pacing) or within `[min rate, line rate]`;
//! * internal real-valued state (alpha, windows, smoothed delay) is finite and not
//!   negative;
//! * after the due timers fired, the next timer (if any) lies in the future.

use std::collections::VecDeque;

use mrc_congestion::{
    AckSample, AnyController, CcKind, Controller, Dcqcn, DcqcnConfig, LinkParams, Nscc, NsccConfig,
    Swift, SwiftConfig,
};
use proptest::prelude::*;

/// Where the simulated clock starts, ns (non-zero so real echoes are never 0).
const START_NS: u64 = 1_000_000;

/// What a SACK echoes.
#[derive(Clone, Copy, Debug)]
enum Echo {
    /// The send time of the newest packet it acknowledges.
    Real,
    /// No timestamp.
    Missing,
    /// A zero timestamp.
    Zero,
    /// A timestamp after `now` (hostile peer).
    Future,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Let time pass.
    Step(u64),
    /// Send a packet of this many payload bytes.
    Send(u64),
    /// SACK the oldest `packets` packets in flight, `ce` of them marked (possibly more
    /// than acknowledged: a hostile count).
    Ack {
        packets: usize,
        ce: u32,
        echo: Echo,
    },
    Cnp,
    /// The oldest packet in flight was trimmed.
    Trim,
    /// The oldest packet in flight was declared lost.
    Loss,
    SpuriousLoss,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let echo = prop_oneof![
        6 => Just(Echo::Real),
        1 => Just(Echo::Missing),
        1 => Just(Echo::Zero),
        1 => Just(Echo::Future),
    ];
    prop_oneof![
        4 => (1u64..200_000).prop_map(Op::Step),
        1 => (1_000_000u64..1_000_000_000).prop_map(Op::Step),
        6 => (1u64..=9_000).prop_map(Op::Send),
        6 => (0usize..=8, 0u32..=10, echo).prop_map(|(packets, ce, echo)| Op::Ack { packets, ce, echo }),
        1 => Just(Op::Cnp),
        1 => Just(Op::Trim),
        1 => Just(Op::Loss),
        1 => Just(Op::SpuriousLoss),
    ]
}

/// The model sender.
struct Model {
    now_ns: u64,
    /// Packets in flight, oldest first: (send time, payload bytes).
    in_flight: VecDeque<(u64, u64)>,
}

impl Model {
    fn bytes_in_flight(&self) -> u64 {
        self.in_flight.iter().map(|&(_, b)| b).sum()
    }
}

/// Fires due timers up to `until_ns`: one by one for up to 1000 deadlines, then once at
/// `until_ns` for the rest (controllers must catch up on missed periods).
fn fire_timers<C: Controller>(cc: &mut C, until_ns: u64) {
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

/// Runs `ops` against `cc`, calling `check` after every operation.
fn run_model<C: Controller>(cc: &mut C, ops: &[Op], check: impl Fn(&C)) {
    let mut m = Model {
        now_ns: START_NS,
        in_flight: VecDeque::new(),
    };
    for op in ops {
        match *op {
            Op::Step(d) => {
                let until = m.now_ns + d;
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
                "timer {next} not in the future at {}",
                m.now_ns
            );
        }
        let metrics = cc.metrics();
        assert_eq!(metrics.cwnd_bytes, cc.cwnd_bytes());
        assert_eq!(metrics.pacing_rate_bps, cc.pacing_rate_bps());
        check(cc);
    }
}

fn line_rate_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(10_000_000_000u64),
        Just(100_000_000_000),
        Just(400_000_000_000),
        Just(800_000_000_000),
    ]
}

fn check_dcqcn(cc: &Dcqcn) {
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
    assert_eq!(cc.cwnd_bytes(), u64::MAX);
}

fn check_swift(cc: &Swift) {
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
    // Pacing exactly when the window is below one packet.
    assert_eq!(rate == u64::MAX, w >= cfg.mss_bytes as f64);
}

fn check_nscc(cc: &Nscc) {
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn dcqcn_paper_model(line in line_rate_strategy(), min_mbps in 1u64..=5_000,
                         ops in prop::collection::vec(op_strategy(), 1..200)) {
        let cfg = DcqcnConfig {
            min_rate_bps: (min_mbps * 1_000_000).min(line),
            ..DcqcnConfig::paper(line)
        };
        let mut cc = cfg.build().unwrap();
        run_model(&mut cc, &ops, check_dcqcn);
    }

    #[test]
    fn dcqcn_connectx_model(line in line_rate_strategy(),
                            ops in prop::collection::vec(op_strategy(), 1..200)) {
        let mut cc = DcqcnConfig::nvidia_connectx(line).build().unwrap();
        run_model(&mut cc, &ops, check_dcqcn);
    }

    #[test]
    fn swift_model(line in line_rate_strategy(), base_rtt_ns in 2_000u64..100_000,
                   hops in 0u32..8,
                   ops in prop::collection::vec(op_strategy(), 1..200)) {
        let cfg = SwiftConfig {
            hops,
            ..SwiftConfig::for_link(line, base_rtt_ns, 4096)
        };
        let mut cc = cfg.build().unwrap();
        run_model(&mut cc, &ops, check_swift);
    }

    #[test]
    fn nscc_model(line in line_rate_strategy(), base_rtt_ns in 2_000u64..100_000,
                  trimming in any::<bool>(),
                  ops in prop::collection::vec(op_strategy(), 1..200)) {
        let mut cc = NsccConfig::for_link(line, base_rtt_ns, 4096, trimming).build().unwrap();
        run_model(&mut cc, &ops, check_nscc);
    }

    #[test]
    fn any_controller_model(kind in prop::sample::select(CcKind::ALL.to_vec()),
                            ops in prop::collection::vec(op_strategy(), 1..100)) {
        let link = LinkParams {
            line_rate_bps: 100_000_000_000,
            base_rtt_ns: 12_000,
            mtu_bytes: 4096,
            trimming_enabled: true,
        };
        let mut cc = AnyController::new(kind, &link).unwrap();
        run_model(&mut cc, &ops, |cc: &AnyController| match cc {
            AnyController::Dcqcn(c) => check_dcqcn(c),
            AnyController::Swift(c) => check_swift(c),
            AnyController::Nscc(c) => check_nscc(c),
            AnyController::Fixed(c) => {
                assert_eq!(c.cwnd_bytes(), 300_000);
                assert_eq!(c.pacing_rate_bps(), u64::MAX);
            }
        });
    }
}
