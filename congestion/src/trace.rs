//! Replaying a scripted signal trace against a controller.
//!
//! A trace is a time-ordered list of [`TimedEvent`]s (sends, SACKs with RTT echoes and ECN
//! CE counts, CNPs, trims, losses, pure time steps). [`replay`] feeds it to any
//! [`Controller`], firing [`Controller::on_timer`] whenever [`Controller::next_timer_ns`]
//! falls due before the next event, keeps the bytes-in-flight count the controller is told
//! about, and returns the window/rate [`Trajectory`]. [`canonical_trace`] is the one
//! scenario the snapshot tests run every controller through.

use core::fmt::Write as _;

use thiserror::Error;

use crate::{AckSample, Controller};

/// One scripted signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// A data packet (or a burst, counted as one event) of `bytes` payload bytes left.
    Sent {
        /// Payload bytes sent.
        bytes: u64,
    },
    /// A SACK arrived.
    Ack {
        /// Bytes newly acknowledged.
        acked_bytes: u64,
        /// Packets newly acknowledged.
        acked_packets: u32,
        /// Of those, packets that arrived with ECN CE.
        ecn_ce_count: u32,
        /// Echoed send timestamp, ns (`None` or `Some(0)`: no RTT sample).
        echoed_send_ts_ns: Option<u64>,
    },
    /// A CNP arrived.
    Cnp,
    /// A NACK(TRIMMED) for a packet of `bytes` payload bytes.
    Trim {
        /// Payload bytes of the trimmed packet.
        bytes: u64,
    },
    /// Loss detection declared `bytes` lost.
    Loss {
        /// Bytes declared lost.
        bytes: u64,
    },
    /// A loss declared earlier proved spurious.
    SpuriousLoss,
    /// Nothing happens but time: timers due by then fire.
    Advance,
}

impl TraceEvent {
    /// A short lowercase name for tables: `sent`, `ack`, `cnp`, `trim`, `loss`, `spurious`,
    /// `advance`.
    pub fn name(&self) -> &'static str {
        match self {
            TraceEvent::Sent { .. } => "sent",
            TraceEvent::Ack { .. } => "ack",
            TraceEvent::Cnp => "cnp",
            TraceEvent::Trim { .. } => "trim",
            TraceEvent::Loss { .. } => "loss",
            TraceEvent::SpuriousLoss => "spurious",
            TraceEvent::Advance => "advance",
        }
    }
}

/// A [`TraceEvent`] at an absolute time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedEvent {
    /// When it happens, ns.
    pub at_ns: u64,
    /// What happens.
    pub event: TraceEvent,
}

/// What caused a trajectory point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The controller's timer fired.
    Timer,
    /// A trace event was applied.
    Event(TraceEvent),
}

impl Cause {
    /// `timer` or the event's [`TraceEvent::name`].
    pub fn name(&self) -> &'static str {
        match self {
            Cause::Timer => "timer",
            Cause::Event(e) => e.name(),
        }
    }
}

/// The controller's state right after one event or timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrajectoryPoint {
    /// Time, ns.
    pub time_ns: u64,
    /// [`Controller::cwnd_bytes`] (`u64::MAX`: no window).
    pub cwnd_bytes: u64,
    /// [`Controller::pacing_rate_bps`] (`u64::MAX`: no pacing).
    pub pacing_rate_bps: u64,
    /// Bytes in flight per the replay's count.
    pub bytes_in_flight: u64,
    /// What produced this point.
    pub cause: Cause,
}

/// The points of one replay, in time order (one per event and per timer firing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trajectory {
    /// The points.
    pub points: Vec<TrajectoryPoint>,
}

impl Trajectory {
    /// A text table of the points where the window or the rate changed (and the first
    /// point): `time_ns cwnd_bytes pacing_rate_bps bytes_in_flight cause`, with `-` for
    /// `u64::MAX` (no window, no pacing). Used by the snapshot tests.
    pub fn render_changes(&self) -> String {
        fn show(v: u64) -> String {
            if v == u64::MAX {
                "-".to_owned()
            } else {
                v.to_string()
            }
        }
        let mut out = String::from("time_ns cwnd_bytes pacing_rate_bps bytes_in_flight cause\n");
        let mut last: Option<(u64, u64)> = None;
        for p in &self.points {
            let now = (p.cwnd_bytes, p.pacing_rate_bps);
            if last == Some(now) {
                continue;
            }
            last = Some(now);
            let _ = writeln!(
                out,
                "{} {} {} {} {}",
                p.time_ns,
                show(p.cwnd_bytes),
                show(p.pacing_rate_bps),
                p.bytes_in_flight,
                p.cause.name()
            );
        }
        out
    }
}

/// Why a trace could not be replayed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TraceError {
    /// Event `index` is earlier than the event before it.
    #[error("trace event {index} at {at_ns} ns is earlier than its predecessor")]
    OutOfOrder {
        /// Position in the trace.
        index: usize,
        /// Its time, ns.
        at_ns: u64,
    },
    /// After `on_timer(at_ns)` the controller still asked for a timer at or before
    /// `at_ns`: it would never make progress.
    #[error("controller timer did not advance past {at_ns} ns")]
    TimerStuck {
        /// The timer time, ns.
        at_ns: u64,
    },
}

/// Fires every timer of `cc` due at or before `until_ns`, recording a point for each.
fn fire_timers<C: Controller + ?Sized>(
    cc: &mut C,
    until_ns: u64,
    bytes_in_flight: u64,
    out: &mut Trajectory,
) -> Result<(), TraceError> {
    while let Some(deadline) = cc.next_timer_ns() {
        if deadline > until_ns {
            break;
        }
        cc.on_timer(deadline);
        if cc.next_timer_ns().is_some_and(|next| next <= deadline) {
            return Err(TraceError::TimerStuck { at_ns: deadline });
        }
        out.points.push(TrajectoryPoint {
            time_ns: deadline,
            cwnd_bytes: cc.cwnd_bytes(),
            pacing_rate_bps: cc.pacing_rate_bps(),
            bytes_in_flight,
            cause: Cause::Timer,
        });
    }
    Ok(())
}

/// Replays `trace` against `cc` and returns its trajectory.
///
/// Before each event, timers due at or before the event's time fire (at their own
/// deadlines); after the last event, timers due at or before it fire too. Bytes in flight
/// start at 0, grow with `Sent` and shrink (saturating at 0) with `Ack`, `Trim` and `Loss`;
/// the controller receives that count in `on_packet_sent` and in
/// [`AckSample::bytes_in_flight`].
///
/// Errors: [`TraceError::OutOfOrder`] if the trace goes back in time,
/// [`TraceError::TimerStuck`] if the controller's timer does not advance.
pub fn replay<C: Controller + ?Sized>(
    cc: &mut C,
    trace: &[TimedEvent],
) -> Result<Trajectory, TraceError> {
    let mut out = Trajectory::default();
    let mut in_flight: u64 = 0;
    let mut prev_ns = 0;
    for (index, ev) in trace.iter().enumerate() {
        let now = ev.at_ns;
        if index > 0 && now < prev_ns {
            return Err(TraceError::OutOfOrder { index, at_ns: now });
        }
        prev_ns = now;
        fire_timers(cc, now, in_flight, &mut out)?;
        match ev.event {
            TraceEvent::Sent { bytes } => {
                in_flight = in_flight.saturating_add(bytes);
                cc.on_packet_sent(now, bytes, in_flight);
            }
            TraceEvent::Ack {
                acked_bytes,
                acked_packets,
                ecn_ce_count,
                echoed_send_ts_ns,
            } => {
                in_flight = in_flight.saturating_sub(acked_bytes);
                cc.on_ack(
                    now,
                    &AckSample {
                        acked_bytes,
                        echoed_send_ts_ns,
                        ecn_ce_count,
                        acked_packets,
                        bytes_in_flight: in_flight,
                    },
                );
            }
            TraceEvent::Cnp => cc.on_cnp(now),
            TraceEvent::Trim { bytes } => {
                in_flight = in_flight.saturating_sub(bytes);
                cc.on_trim(now, bytes);
            }
            TraceEvent::Loss { bytes } => {
                in_flight = in_flight.saturating_sub(bytes);
                cc.on_loss(now, bytes);
            }
            TraceEvent::SpuriousLoss => cc.on_spurious_loss(now),
            TraceEvent::Advance => {}
        }
        out.points.push(TrajectoryPoint {
            time_ns: now,
            cwnd_bytes: cc.cwnd_bytes(),
            pacing_rate_bps: cc.pacing_rate_bps(),
            bytes_in_flight: in_flight,
            cause: Cause::Event(ev.event),
        });
    }
    Ok(out)
}

/// Packet payload of the canonical trace, bytes.
pub const CANONICAL_PACKET_BYTES: u64 = 4096;

/// Absolute time of the canonical trace's first event, ns. Not 0: an echoed send time of 0
/// means "no timestamp".
pub const CANONICAL_START_NS: u64 = 1_000_000;

/// The canonical trace: 3 ms of one flow, sending a SACK-sized burst of 4 packets
/// (16 384 bytes) every 10 us, each acknowledged one RTT later by one SACK echoing its send
/// time, through four phases (times relative to [`CANONICAL_START_NS`]):
///
/// 1. 0 to 200 us, quiet: RTT 12 us, no marks;
/// 2. 200 to 500 us, a queue builds: RTT grows by 4 us per burst from 12 us to 60 us and
///    stays there; once the RTT exceeds 30 us every packet is CE-marked; a CNP every 50 us
///    from 250 us;
/// 3. 500 to 600 us, overflow: RTT 80 us, all marked, trims at 520 and 540 us and a loss
///    at 560 us (each packet retransmitted 2 us later), CNPs at 500 and 550 us;
/// 4. 600 us to 3 ms, drain: RTT back to 12 us, no marks, bursts every 20 us; the SACK of
///    the burst sent at 1 ms carries no timestamp echo; an `Advance` at 3 ms.
pub fn canonical_trace() -> Vec<TimedEvent> {
    const BURST_BYTES: u64 = 4 * CANONICAL_PACKET_BYTES;
    let mut events = Vec::new();
    let mut rtt_ns: u64 = 12_000;
    let mut send_ns: u64 = 0;
    while send_ns < 3_000_000 {
        let (rtt, marked) = match send_ns {
            0..200_000 => (12_000, false),
            200_000..500_000 => {
                rtt_ns = (rtt_ns + 4_000).min(60_000);
                (rtt_ns, rtt_ns > 30_000)
            }
            500_000..600_000 => (80_000, true),
            _ => (12_000, false),
        };
        events.push(TimedEvent {
            at_ns: CANONICAL_START_NS + send_ns,
            event: TraceEvent::Sent { bytes: BURST_BYTES },
        });
        let echo = if send_ns == 1_000_000 {
            None
        } else {
            Some(CANONICAL_START_NS + send_ns)
        };
        events.push(TimedEvent {
            at_ns: CANONICAL_START_NS + send_ns + rtt,
            event: TraceEvent::Ack {
                acked_bytes: BURST_BYTES,
                acked_packets: 4,
                ecn_ce_count: if marked { 4 } else { 0 },
                echoed_send_ts_ns: echo,
            },
        });
        send_ns += if send_ns < 600_000 { 10_000 } else { 20_000 };
    }
    for cnp_ns in (250_000..=550_000).step_by(50_000) {
        events.push(TimedEvent {
            at_ns: CANONICAL_START_NS + cnp_ns,
            event: TraceEvent::Cnp,
        });
    }
    for (at_ns, event) in [
        (
            520_000,
            TraceEvent::Trim {
                bytes: CANONICAL_PACKET_BYTES,
            },
        ),
        (
            540_000,
            TraceEvent::Trim {
                bytes: CANONICAL_PACKET_BYTES,
            },
        ),
        (
            560_000,
            TraceEvent::Loss {
                bytes: CANONICAL_PACKET_BYTES,
            },
        ),
        // Retransmissions of the two trimmed packets and the lost one; each is then
        // acknowledged inside its burst's SACK.
        (
            522_000,
            TraceEvent::Sent {
                bytes: CANONICAL_PACKET_BYTES,
            },
        ),
        (
            542_000,
            TraceEvent::Sent {
                bytes: CANONICAL_PACKET_BYTES,
            },
        ),
        (
            562_000,
            TraceEvent::Sent {
                bytes: CANONICAL_PACKET_BYTES,
            },
        ),
        (3_000_000, TraceEvent::Advance),
    ] {
        events.push(TimedEvent {
            at_ns: CANONICAL_START_NS + at_ns,
            event,
        });
    }
    // Stable sort: events at the same time keep their insertion order.
    events.sort_by_key(|e| e.at_ns);
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DcqcnConfig, FixedWindowConfig};

    #[test]
    fn canonical_trace_shape() {
        let trace = canonical_trace();
        // 60 bursts in the first 600 us, 120 afterwards; one SACK each; 7 CNPs; 2 trims,
        // 1 loss, 3 retransmissions, 1 advance.
        assert_eq!(trace.len(), 2 * 180 + 7 + 7);
        assert!(trace.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
        let sent: u64 = trace
            .iter()
            .map(|e| match e.event {
                TraceEvent::Sent { bytes } => bytes,
                _ => 0,
            })
            .sum();
        assert_eq!(sent, 180 * 16_384 + 3 * 4096);
        // Every byte sent is acknowledged, trimmed or lost: the flight ends empty and never
        // needs the saturation at zero.
        let mut cc = FixedWindowConfig::default().build();
        let t = replay(&mut cc, &trace).unwrap();
        assert_eq!(t.points.last().map(|p| p.bytes_in_flight), Some(0));
        let mut in_flight: i64 = 0;
        for e in &trace {
            match e.event {
                TraceEvent::Sent { bytes } => in_flight += bytes as i64,
                TraceEvent::Ack { acked_bytes, .. } => in_flight -= acked_bytes as i64,
                TraceEvent::Trim { bytes } | TraceEvent::Loss { bytes } => {
                    in_flight -= bytes as i64
                }
                _ => {}
            }
            assert!(in_flight >= 0, "flight below zero at {} ns", e.at_ns);
        }
    }

    #[test]
    fn replay_counts_bytes_in_flight_and_fires_timers() {
        let trace = [
            TimedEvent {
                at_ns: 0,
                event: TraceEvent::Sent { bytes: 8192 },
            },
            TimedEvent {
                at_ns: 1_000,
                event: TraceEvent::Cnp,
            },
            TimedEvent {
                at_ns: 2_000,
                event: TraceEvent::Trim { bytes: 4096 },
            },
            TimedEvent {
                at_ns: 60_000,
                event: TraceEvent::Ack {
                    acked_bytes: 4096,
                    acked_packets: 1,
                    ecn_ce_count: 0,
                    echoed_send_ts_ns: Some(1),
                },
            },
        ];
        let mut cc = DcqcnConfig::paper(100_000_000_000).build().unwrap();
        let t = replay(&mut cc, &trace).unwrap();
        let flights: Vec<u64> = t.points.iter().map(|p| p.bytes_in_flight).collect();
        // sent, cnp, trim, timer at 56 us (the alpha and increase timers share it), ack.
        assert_eq!(flights, [8192, 8192, 4096, 4096, 0]);
        assert_eq!(t.points[3].cause, Cause::Timer);
        assert_eq!(t.points[3].time_ns, 56_000);
        assert_eq!(t.points[1].pacing_rate_bps, 50_000_000_000);
        assert_eq!(t.points[3].pacing_rate_bps, 75_000_000_000);
        assert_eq!(cc.metrics().bytes_in_flight, 0);
    }

    #[test]
    fn out_of_order_trace_is_an_error() {
        let trace = [
            TimedEvent {
                at_ns: 10,
                event: TraceEvent::Advance,
            },
            TimedEvent {
                at_ns: 5,
                event: TraceEvent::Advance,
            },
        ];
        let mut cc = FixedWindowConfig::default().build();
        assert_eq!(
            replay(&mut cc, &trace),
            Err(TraceError::OutOfOrder { index: 1, at_ns: 5 })
        );
    }

    #[test]
    fn render_keeps_only_changes() {
        let trace = [
            TimedEvent {
                at_ns: 0,
                event: TraceEvent::Sent { bytes: 100 },
            },
            TimedEvent {
                at_ns: 5,
                event: TraceEvent::Advance,
            },
        ];
        let mut cc = FixedWindowConfig { cwnd_bytes: 4096 }.build();
        let t = replay(&mut cc, &trace).unwrap();
        assert_eq!(t.points.len(), 2);
        assert_eq!(
            t.render_changes(),
            "time_ns cwnd_bytes pacing_rate_bps bytes_in_flight cause\n0 4096 - 100 sent\n"
        );
    }
}
