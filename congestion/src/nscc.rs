//! NSCC, the Ultra Ethernet sender-side window controller ("Network Signal-based
//! Congestion Control").
//!
//! Sources, all public: the Ultra Ethernet Specification 1.0 (2025), congestion management
//! sublayer, NSCC (the algorithm is specified there; we had no verbatim access to its text
//! and worked from the descriptions below); the UEC reference simulator htsim
//! (`sim/src/protocols/uec.cpp`, functions `updateCwndOnAck_NSCC`, `quick_adapt`,
//! `fair_increase`, `proportional_increase`, `fast_increase`, `multiplicative_decrease`,
//! `fulfill_adjustment`, `updateCwndOnNack_NSCC`, `initNsccParams`), read for behaviour and
//! parameter defaults (no code was copied); D. Singh, "Notes on Network Signal Congestion
//! Control" (dipsingh.github.io/NSCC-Deep-Dive) and the nwktimes.blogspot.com Ultra Ethernet
//! series for the quadrant view.
//!
//! # Signals
//!
//! Each SACK gives newly acknowledged bytes, how many of its packets carried ECN CE, and an
//! RTT sample. The queuing delay is `rtt - base_rtt` (0 if negative), with `base_rtt` the
//! smaller of the configured base RTT and the smallest RTT seen, but not below
//! `min_base_rtt_ns`. Without a valid RTT sample the smoothed
//! delay stands in (and the sample is counted as rejected).
//!
//! # The four quadrants (per SACK)
//!
//! | ECN CE | delay vs target | action |
//! |--------|-----------------|--------|
//! | no     | below           | proportional increase: `inc += alpha * bytes * (target - delay)`; fast increase (`cwnd += bytes * fi_scale`) once more than a window has been acknowledged with delay under 1 us |
//! | no     | at or above     | fair increase: `inc += fi * bytes` (a small constant share, so flows converge) |
//! | yes    | at or above     | multiplicative decrease, at most once per base RTT and only if the *smoothed* delay exceeds the target: `cwnd *= max(1 - gamma * (avg - target) / avg, 1 - max_md)` |
//! | yes    | below           | hold: no window change (the mark is blamed on the path; the transport may change EV) |
//!
//! Increases accumulate in `inc` and are applied in a "fulfill adjustment" once more than
//! `adjust_bytes` have been acknowledged or `adjust_period_ns` has passed since the last
//! one: `cwnd += inc / cwnd`, plus a constant `eta` once per adjust period.
//!
//! Smoothed delay: `avg := g * sample + (1 - g) * avg` with `g = delay_ewma_gain`, where
//! `sample` is the queuing delay, except that a high delay *without* ECN counts as
//! `base_rtt / 4` (a queue that does not mark is not this flow's bottleneck).
//!
//! # Quick adapt
//!
//! Measurement periods last `base_rtt + target`. When a period ends with a congestion sign
//! (a trim or loss since the last quick adapt, or a delay above `qa_threshold_ns`) and the
//! bytes acknowledged during the period are below `max_cwnd >> qa_gate_shift`, the window
//! drops straight to those acknowledged bytes (at least the minimum). Marked
//! acknowledgements of the data in flight at that moment are then ignored, so one episode is
//! not punished twice.
//!
//! # Trims and losses
//!
//! A NACK(TRIMMED) (`on_trim`) feeds a delay sample of one base RTT, arms quick adapt and,
//! unless quick adapt fires or is still draining, takes the trimmed bytes off the window.
//! A loss (`on_loss`) that comes with a congestion signal (the latest RTT sample's queuing
//! delay at or above the target, or an ECN mark within the last `base_rtt + target`) arms
//! quick adapt and takes the lost bytes off the window, like a trim (htsim's
//! `updateCwndOnNack_NSCC`); an isolated loss, with low delay and no mark, is not
//! congestion (a bit error, a frame dropped by a failing link, a black hole) and leaves the
//! window alone: at 1% loss per link a 4-hop path loses 4% of its packets, and a window cut
//! for each would hold the flow far below the rate the uncongested path carries.
//! `on_spurious_loss` gives the last reduction back. CNPs are not an NSCC signal and are
//! only counted.
//!
//! # Where we chose
//!
//! * A coalesced SACK covering `n` packets of which `k` were CE-marked splits its bytes:
//!   `bytes * k / n` count as marked, the rest as unmarked (htsim acknowledges per packet).
//!   The increase quadrants use the unmarked bytes; the decrease/hold quadrants apply if
//!   `k > 0`.
//! * Receiver-driven window penalties (`rcv_cwnd_pend` in ACK_CC) and the EV (path)
//!   changes are outside this crate: the trait carries neither.
//! * No timers: everything happens on SACK, trim and loss events.
//! * Parameter scaling follows htsim's `initNsccParams`: against a reference network of
//!   100 Gb/s and 12 us, `a = BDP / BDP_ref` and `b = target / 12 us`; see
//!   [`NsccConfig::for_link`].

use crate::error::{ConfigError, check_nonzero, check_order, check_unit_open_closed};
use crate::rtt::rtt_sample_ns;
use crate::swift::bdp_bytes;
use crate::{AckSample, Controller, Metrics};

/// Reference network of the NSCC parameter scaling: 100 Gb/s ...
const REFERENCE_RATE_BPS: u64 = 100_000_000_000;
/// ... and a 12 us base RTT (so a 150 000-byte BDP).
const REFERENCE_RTT_NS: u64 = 12_000;

/// Parameters of [`Nscc`]. Sizes in bytes, times in ns, rates in bits per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NsccConfig {
    /// Packet size, bytes (the scaling unit; the default minimum window is one packet).
    pub mtu_bytes: u64,
    /// Line rate, bits per second (for the BDP).
    pub line_rate_bps: u64,
    /// Configured base (unloaded) RTT, ns.
    pub base_rtt_ns: u64,
    /// Floor of the base RTT learnt from samples, ns: one bogus tiny RTT sample (a forged
    /// echo equal to `now`) cannot make every later delay look like queuing.
    pub min_base_rtt_ns: u64,
    /// Target queuing delay, ns.
    pub target_qdelay_ns: u64,
    /// Smallest window, bytes.
    pub min_cwnd_bytes: u64,
    /// Largest window, bytes.
    pub max_cwnd_bytes: u64,
    /// Window at start, bytes.
    pub initial_cwnd_bytes: u64,
    /// Fair-increase constant `fi`, bytes: each unmarked high-delay byte adds `fi` to the
    /// increase accumulator (window grows by `fi * bytes / cwnd`).
    pub fair_increase_bytes: f64,
    /// Proportional-increase gain `alpha`, bytes per ns of delay headroom.
    pub proportional_gain_bytes_per_ns: f64,
    /// Delay below which fast increase may engage, ns.
    pub fast_increase_delay_ns: u64,
    /// Fast-increase factor `fi_scale`: window bytes added per byte acknowledged.
    pub fast_increase_scale: f64,
    /// Constant `eta` added once per adjust period, bytes.
    pub eta_bytes: f64,
    /// Multiplicative-decrease gain `gamma` in `(0, 1]`.
    pub md_gain: f64,
    /// Largest fraction of the window one decrease removes, in `(0, 1)`.
    pub max_md_fraction: f64,
    /// EWMA gain of the smoothed delay, in `(0, 1]`.
    pub delay_ewma_gain: f64,
    /// Longest time between fulfill adjustments, ns.
    pub adjust_period_ns: u64,
    /// Acknowledged bytes that trigger a fulfill adjustment.
    pub adjust_bytes: u64,
    /// Whether quick adapt runs.
    pub quick_adapt: bool,
    /// Delay above which a period end triggers quick adapt, ns.
    pub qa_threshold_ns: u64,
    /// Quick adapt only fires when the period's acknowledged bytes are below
    /// `max_cwnd_bytes >> qa_gate_shift`.
    pub qa_gate_shift: u32,
}

impl NsccConfig {
    /// Defaults for a path of `line_rate_bps` and base RTT `base_rtt_ns` with packets of
    /// `mtu_bytes`, after htsim's `initNsccParams` (UEC reference simulator):
    ///
    /// * target queuing delay = base RTT, or 3/4 of it when switches trim;
    /// * window from one packet to the BDP at the target delay, `line rate x (base RTT +
    ///   target)` (2 BDP without trimming, 1.75 BDP with), starting there: a flow whose
    ///   queuing delay sits at the target needs that much in flight to keep its line rate,
    ///   and spraying over paths of unequal load raises the mean delay that far (htsim's
    ///   `initNscc` caps at 1.5 BDP, one of its earlier versions at 2 BDP; our choice);
    /// * with `a = BDP / 150 000 B` and `b = target / 12 us`: `alpha = 4 * mtu * a * b /
    ///   target`, `fi = 5 * mtu * a`, `eta = 0.15 * mtu * a`, `fi_scale = 0.25 * a`;
    /// * gamma 0.8, max decrease 0.5, delay EWMA gain 0.0125, fast increase under 1 us;
    /// * adjust every base RTT or 8 packets; quick adapt on, threshold 4 targets, gate
    ///   `max_cwnd >> 3`;
    /// * the learnt base RTT never drops below half the configured one (our choice; htsim
    ///   has no floor).
    pub fn for_link(
        line_rate_bps: u64,
        base_rtt_ns: u64,
        mtu_bytes: u64,
        trimming_enabled: bool,
    ) -> Self {
        let target_qdelay_ns = if trimming_enabled {
            base_rtt_ns / 4 * 3 + base_rtt_ns % 4 * 3 / 4
        } else {
            base_rtt_ns
        };
        let bdp = bdp_bytes(line_rate_bps, base_rtt_ns);
        let reference_bdp = bdp_bytes(REFERENCE_RATE_BPS, REFERENCE_RTT_NS) as f64;
        let a = bdp as f64 / reference_bdp;
        let b = target_qdelay_ns as f64 / REFERENCE_RTT_NS as f64;
        let mtu = mtu_bytes as f64;
        let max_cwnd =
            bdp_bytes(line_rate_bps, base_rtt_ns.saturating_add(target_qdelay_ns)).max(mtu_bytes);
        Self {
            mtu_bytes,
            line_rate_bps,
            base_rtt_ns,
            min_base_rtt_ns: base_rtt_ns / 2,
            target_qdelay_ns,
            min_cwnd_bytes: mtu_bytes,
            max_cwnd_bytes: max_cwnd,
            initial_cwnd_bytes: max_cwnd,
            fair_increase_bytes: 5.0 * mtu * a,
            proportional_gain_bytes_per_ns: if target_qdelay_ns == 0 {
                0.0
            } else {
                4.0 * mtu * a * b / target_qdelay_ns as f64
            },
            fast_increase_delay_ns: 1_000,
            fast_increase_scale: 0.25 * a,
            eta_bytes: 0.15 * mtu * a,
            md_gain: 0.8,
            max_md_fraction: 0.5,
            delay_ewma_gain: 0.0125,
            adjust_period_ns: base_rtt_ns,
            adjust_bytes: 8 * mtu_bytes,
            quick_adapt: true,
            qa_threshold_ns: target_qdelay_ns.saturating_mul(4),
            qa_gate_shift: 3,
        }
    }

    /// Checks the parameters and builds the controller.
    ///
    /// Errors: [`ConfigError::Zero`] for a zero MTU, line rate, base RTT, target delay or
    /// minimum window; [`ConfigError::OutOfRange`] for gains outside their intervals
    /// (`md_gain`, `delay_ewma_gain` in `(0, 1]`, `max_md_fraction` in `(0, 1)`, the
    /// increase constants finite and non-negative, `qa_gate_shift` below 64);
    /// [`ConfigError::Inverted`] unless `min <= initial <= max` window.
    pub fn build(&self) -> Result<Nscc, ConfigError> {
        check_nonzero("mtu_bytes", self.mtu_bytes)?;
        check_nonzero("line_rate_bps", self.line_rate_bps)?;
        check_nonzero("base_rtt_ns", self.base_rtt_ns)?;
        check_nonzero("target_qdelay_ns", self.target_qdelay_ns)?;
        check_nonzero("min_cwnd_bytes", self.min_cwnd_bytes)?;
        check_order(
            "min_base_rtt_ns",
            self.min_base_rtt_ns,
            "base_rtt_ns",
            self.base_rtt_ns,
        )?;
        check_order(
            "min_cwnd_bytes",
            self.min_cwnd_bytes,
            "initial_cwnd_bytes",
            self.initial_cwnd_bytes,
        )?;
        check_order(
            "initial_cwnd_bytes",
            self.initial_cwnd_bytes,
            "max_cwnd_bytes",
            self.max_cwnd_bytes,
        )?;
        check_unit_open_closed("md_gain", self.md_gain)?;
        check_unit_open_closed("delay_ewma_gain", self.delay_ewma_gain)?;
        if !(self.max_md_fraction.is_finite()
            && self.max_md_fraction > 0.0
            && self.max_md_fraction < 1.0)
        {
            return Err(ConfigError::OutOfRange {
                field: "max_md_fraction",
                range: "(0, 1)",
            });
        }
        for (field, value) in [
            ("fair_increase_bytes", self.fair_increase_bytes),
            (
                "proportional_gain_bytes_per_ns",
                self.proportional_gain_bytes_per_ns,
            ),
            ("fast_increase_scale", self.fast_increase_scale),
            ("eta_bytes", self.eta_bytes),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ConfigError::OutOfRange {
                    field,
                    range: "[0, inf)",
                });
            }
        }
        if self.qa_gate_shift >= 64 {
            return Err(ConfigError::OutOfRange {
                field: "qa_gate_shift",
                range: "0..64",
            });
        }
        let cwnd = self.initial_cwnd_bytes as f64;
        Ok(Nscc {
            cfg: *self,
            cwnd_bytes: cwnd,
            base_rtt_ns: self.base_rtt_ns,
            avg_delay_ns: 0.0,
            inc_accumulator: 0.0,
            received_bytes: 0,
            achieved_bytes: 0,
            bytes_ignored: 0,
            bytes_to_ignore: 0,
            trigger_qa: false,
            qa_end_ns: None,
            last_adjust_ns: None,
            last_decrease_ns: None,
            fast_count_bytes: 0,
            fast_increasing: false,
            loss_reduction_bytes: None,
            last_delay_ns: 0,
            last_ecn_ns: None,
            quick_adapts: 0,
            isolated_losses: 0,
            last_quadrant: None,
            metrics: Metrics {
                cwnd_bytes: self.initial_cwnd_bytes,
                pacing_rate_bps: u64::MAX,
                ..Metrics::default()
            },
        })
    }
}

/// Which quadrant a SACK fell in (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quadrant {
    /// No ECN, delay below target.
    ProportionalIncrease,
    /// No ECN, delay at or above target.
    FairIncrease,
    /// ECN, delay at or above target.
    MultiplicativeDecrease,
    /// ECN, delay below target.
    Hold,
}

/// The NSCC controller of one connection (see the module docs).
#[derive(Clone, Debug)]
pub struct Nscc {
    cfg: NsccConfig,
    /// Window, bytes, within `[min_cwnd_bytes, max_cwnd_bytes]`.
    cwnd_bytes: f64,
    /// Smallest of the configured base RTT and every RTT sample, ns.
    base_rtt_ns: u64,
    /// Smoothed queuing delay, ns.
    avg_delay_ns: f64,
    /// Pending increase in bytes squared (applied divided by the window).
    inc_accumulator: f64,
    /// Bytes acknowledged since the last fulfill adjustment.
    received_bytes: u64,
    /// Bytes acknowledged in the current quick-adapt period.
    achieved_bytes: u64,
    /// Bytes acknowledged or trimmed since the last quick adapt.
    bytes_ignored: u64,
    /// Bytes in flight at the last quick adapt.
    bytes_to_ignore: u64,
    /// A trim or loss asked for quick adapt at the next period end.
    trigger_qa: bool,
    /// End of the current quick-adapt period; `None` before the first SACK.
    qa_end_ns: Option<u64>,
    last_adjust_ns: Option<u64>,
    last_decrease_ns: Option<u64>,
    /// Bytes acknowledged in a row with delay under the fast-increase threshold.
    fast_count_bytes: u64,
    fast_increasing: bool,
    /// Window taken off by the last loss, for `on_spurious_loss`.
    loss_reduction_bytes: Option<f64>,
    /// Queuing delay of the latest RTT sample, ns.
    last_delay_ns: u64,
    /// Time of the latest SACK that reported an ECN CE mark, ns.
    last_ecn_ns: Option<u64>,
    quick_adapts: u64,
    isolated_losses: u64,
    last_quadrant: Option<Quadrant>,
    metrics: Metrics,
}

impl Nscc {
    /// The exact window in bytes.
    pub fn window_bytes(&self) -> f64 {
        self.cwnd_bytes
    }

    /// The smoothed queuing delay, ns.
    pub fn avg_delay_ns(&self) -> f64 {
        self.avg_delay_ns
    }

    /// The base RTT in use (configured, or a smaller one seen since), ns.
    pub fn base_rtt_ns(&self) -> u64 {
        self.base_rtt_ns
    }

    /// How many times quick adapt cut the window.
    pub fn quick_adapts(&self) -> u64 {
        self.quick_adapts
    }

    /// How many losses came without a congestion signal and left the window alone.
    pub fn isolated_losses(&self) -> u64 {
        self.isolated_losses
    }

    /// The quadrant of the latest SACK that reached the quadrant logic (`None` before, or
    /// when quick adapt consumed it).
    pub fn last_quadrant(&self) -> Option<Quadrant> {
        self.last_quadrant
    }

    /// The configuration this controller was built from.
    pub fn config(&self) -> &NsccConfig {
        &self.cfg
    }

    fn update_avg_delay(&mut self, delay_ns: u64, ecn: bool) {
        let sample = if !ecn && delay_ns > self.cfg.target_qdelay_ns {
            self.base_rtt_ns as f64 / 4.0
        } else {
            delay_ns as f64
        };
        let g = self.cfg.delay_ewma_gain;
        self.avg_delay_ns = g * sample + (1.0 - g) * self.avg_delay_ns;
    }

    /// Runs the quick-adapt check; `true` when this event must not move the window further.
    fn quick_adapt(&mut self, now_ns: u64, is_loss: bool, ecn: bool, delay_ns: u64) -> bool {
        if !self.cfg.quick_adapt {
            return false;
        }
        let mut consumed = false;
        if self.bytes_ignored < self.bytes_to_ignore && ecn {
            consumed = true;
        } else if self.qa_end_ns.is_none_or(|end| now_ns > end) {
            let congested = self.trigger_qa || is_loss || delay_ns > self.cfg.qa_threshold_ns;
            let gate = self.cfg.max_cwnd_bytes >> self.cfg.qa_gate_shift;
            if self.qa_end_ns.is_some() && congested && self.achieved_bytes < gate {
                self.cwnd_bytes = (self.achieved_bytes as f64).max(self.cfg.min_cwnd_bytes as f64);
                self.bytes_to_ignore = self.metrics.bytes_in_flight;
                self.bytes_ignored = 0;
                self.trigger_qa = false;
                self.quick_adapts += 1;
                self.metrics.decreases += 1;
                consumed = true;
            }
            self.achieved_bytes = 0;
            self.qa_end_ns = Some(
                now_ns
                    .saturating_add(self.base_rtt_ns)
                    .saturating_add(self.cfg.target_qdelay_ns),
            );
        }
        if consumed {
            self.inc_accumulator = 0.0;
            self.received_bytes = 0;
        }
        consumed
    }

    /// Fast increase; `true` when it applied (and proportional increase is skipped).
    fn fast_increase(&mut self, bytes: u64, delay_ns: u64) -> bool {
        if delay_ns < self.cfg.fast_increase_delay_ns {
            self.fast_count_bytes = self.fast_count_bytes.saturating_add(bytes);
            if self.fast_count_bytes as f64 > self.cwnd_bytes || self.fast_increasing {
                self.cwnd_bytes += bytes as f64 * self.cfg.fast_increase_scale;
                self.fast_increasing = true;
                return true;
            }
        } else {
            self.fast_count_bytes = 0;
        }
        self.fast_increasing = false;
        false
    }

    /// Whether a loss at `now_ns` comes with a congestion signal: the latest queuing delay
    /// at or above the target, or an ECN mark within the last `base_rtt + target`.
    fn loss_is_congestion(&self, now_ns: u64) -> bool {
        let window = self.base_rtt_ns.saturating_add(self.cfg.target_qdelay_ns);
        self.last_delay_ns >= self.cfg.target_qdelay_ns
            || self
                .last_ecn_ns
                .is_some_and(|t| now_ns.saturating_sub(t) <= window)
    }

    fn multiplicative_decrease(&mut self, now_ns: u64) {
        self.fast_increasing = false;
        self.fast_count_bytes = 0;
        let target = self.cfg.target_qdelay_ns as f64;
        let avg = self.avg_delay_ns;
        if avg <= target {
            return;
        }
        let due = self
            .last_decrease_ns
            .is_none_or(|last| now_ns.saturating_sub(last) > self.base_rtt_ns);
        if due {
            let factor =
                (1.0 - self.cfg.md_gain * (avg - target) / avg).max(1.0 - self.cfg.max_md_fraction);
            self.cwnd_bytes *= factor;
            self.last_decrease_ns = Some(now_ns);
            self.metrics.decreases += 1;
        }
    }

    fn fulfill_if_due(&mut self, now_ns: u64) {
        let period = self.cfg.adjust_period_ns;
        let since = self.last_adjust_ns.map(|t| now_ns.saturating_sub(t));
        if self.received_bytes > self.cfg.adjust_bytes || since.is_none_or(|s| s > period) {
            self.cwnd_bytes += self.inc_accumulator / self.cwnd_bytes;
            if since.is_none_or(|s| s >= period) {
                self.cwnd_bytes += self.cfg.eta_bytes;
                self.last_adjust_ns = Some(now_ns);
            }
            self.inc_accumulator = 0.0;
            self.received_bytes = 0;
        }
    }

    fn clamp_and_sync(&mut self) {
        self.cwnd_bytes = self.cwnd_bytes.clamp(
            self.cfg.min_cwnd_bytes as f64,
            self.cfg.max_cwnd_bytes as f64,
        );
        self.metrics.cwnd_bytes = self.cwnd_bytes as u64;
    }
}

impl Controller for Nscc {
    fn on_packet_sent(&mut self, _now_ns: u64, _bytes: u64, bytes_in_flight: u64) {
        self.metrics.bytes_in_flight = bytes_in_flight;
    }

    fn on_ack(&mut self, now_ns: u64, ack: &AckSample) {
        self.metrics.bytes_in_flight = ack.bytes_in_flight;
        let acked = ack.acked_bytes;
        self.achieved_bytes = self.achieved_bytes.saturating_add(acked);
        self.received_bytes = self.received_bytes.saturating_add(acked);
        self.bytes_ignored = self.bytes_ignored.saturating_add(acked);

        let ce = u64::from(ack.ecn_ce_count);
        let ecn = ce > 0;
        if ecn {
            self.last_ecn_ns = Some(now_ns);
        }
        let packets = u64::from(ack.acked_packets).max(ce);
        let marked_bytes = if packets == 0 {
            0
        } else {
            u64::try_from(u128::from(acked) * u128::from(ce) / u128::from(packets)).unwrap_or(acked)
        };
        let unmarked_bytes = acked - marked_bytes.min(acked);

        let delay_ns = match rtt_sample_ns(now_ns, ack) {
            Some(rtt_ns) => {
                self.metrics.last_rtt_ns = rtt_ns;
                self.base_rtt_ns = self.base_rtt_ns.min(rtt_ns.max(self.cfg.min_base_rtt_ns));
                let delay = rtt_ns.saturating_sub(self.base_rtt_ns);
                self.update_avg_delay(delay, ecn);
                self.last_delay_ns = delay;
                delay
            }
            None => {
                self.metrics.rejected_rtt_samples += 1;
                self.avg_delay_ns as u64
            }
        };

        if self.quick_adapt(now_ns, false, ecn, delay_ns) {
            self.last_quadrant = None;
            self.clamp_and_sync();
            return;
        }

        let high = delay_ns >= self.cfg.target_qdelay_ns;
        if unmarked_bytes > 0 {
            if high {
                self.inc_accumulator += self.cfg.fair_increase_bytes * unmarked_bytes as f64;
                self.last_quadrant = Some(Quadrant::FairIncrease);
            } else {
                if !self.fast_increase(unmarked_bytes, delay_ns) {
                    let headroom = (self.cfg.target_qdelay_ns - delay_ns) as f64;
                    self.inc_accumulator +=
                        self.cfg.proportional_gain_bytes_per_ns * unmarked_bytes as f64 * headroom;
                }
                self.last_quadrant = Some(Quadrant::ProportionalIncrease);
            }
        }
        if ecn {
            if high {
                self.multiplicative_decrease(now_ns);
                self.last_quadrant = Some(Quadrant::MultiplicativeDecrease);
            } else {
                self.last_quadrant = Some(Quadrant::Hold);
            }
        }
        self.clamp_and_sync();
        self.fulfill_if_due(now_ns);
        self.clamp_and_sync();
    }

    fn on_trim(&mut self, now_ns: u64, bytes: u64) {
        self.metrics.trims_received += 1;
        self.metrics.bytes_in_flight = self.metrics.bytes_in_flight.saturating_sub(bytes);
        self.bytes_ignored = self.bytes_ignored.saturating_add(bytes);
        // The trimmed packet met a queue at the trim threshold: about one base RTT of delay.
        self.update_avg_delay(self.cfg.base_rtt_ns, true);
        self.trigger_qa = true;
        if !self.quick_adapt(now_ns, true, true, 0) {
            self.cwnd_bytes -= bytes as f64;
        }
        self.clamp_and_sync();
    }

    fn on_loss(&mut self, now_ns: u64, bytes: u64) {
        self.metrics.lost_bytes = self.metrics.lost_bytes.saturating_add(bytes);
        self.metrics.bytes_in_flight = self.metrics.bytes_in_flight.saturating_sub(bytes);
        if !self.loss_is_congestion(now_ns) {
            self.isolated_losses += 1;
            self.loss_reduction_bytes = Some(0.0);
            return;
        }
        self.trigger_qa = true;
        let before = self.cwnd_bytes;
        self.cwnd_bytes -= bytes as f64;
        self.clamp_and_sync();
        self.loss_reduction_bytes = Some(before - self.cwnd_bytes);
    }

    fn on_spurious_loss(&mut self, _now_ns: u64) {
        if let Some(reduction) = self.loss_reduction_bytes.take() {
            self.cwnd_bytes += reduction;
        }
        self.clamp_and_sync();
    }

    fn on_cnp(&mut self, _now_ns: u64) {
        self.metrics.cnps_received += 1;
    }

    fn cwnd_bytes(&self) -> u64 {
        self.cwnd_bytes as u64
    }

    fn pacing_rate_bps(&self) -> u64 {
        u64::MAX
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE_RTT_NS: u64 = 10_000;

    /// Simple numbers: 100 000-byte window, 10 us base RTT and target, adjustment at every
    /// SACK, no eta, no quick adapt, binary-fraction gains so results are exact.
    fn plain() -> NsccConfig {
        NsccConfig {
            target_qdelay_ns: 10_000,
            min_cwnd_bytes: 4096,
            initial_cwnd_bytes: 100_000,
            max_cwnd_bytes: 1_000_000,
            fair_increase_bytes: 1024.0,
            proportional_gain_bytes_per_ns: 1.0 / 1024.0,
            fast_increase_scale: 0.25,
            eta_bytes: 0.0,
            md_gain: 0.5,
            delay_ewma_gain: 1.0,
            adjust_bytes: 0,
            quick_adapt: false,
            ..NsccConfig::for_link(100_000_000_000, BASE_RTT_NS, 4096, false)
        }
    }

    fn ack(now_ns: u64, rtt_ns: u64, bytes: u64, packets: u32, ce: u32) -> (u64, AckSample) {
        (
            now_ns,
            AckSample {
                acked_bytes: bytes,
                echoed_send_ts_ns: Some(now_ns - rtt_ns),
                ecn_ce_count: ce,
                acked_packets: packets,
                bytes_in_flight: 50_000,
            },
        )
    }

    fn feed(cc: &mut Nscc, (now, a): (u64, AckSample)) {
        cc.on_ack(now, &a);
    }

    #[test]
    fn defaults_scale_with_the_link() {
        // 100 Gb/s, 12 us: the reference network, a = b = 1.
        let cfg = NsccConfig::for_link(100_000_000_000, 12_000, 4096, false);
        // Window up to the BDP at base RTT + target (12 + 12 us): 2 x 150 000 bytes.
        assert_eq!(cfg.max_cwnd_bytes, 300_000);
        assert_eq!(cfg.initial_cwnd_bytes, 300_000);
        assert_eq!(cfg.fair_increase_bytes, 5.0 * 4096.0);
        assert_eq!(cfg.eta_bytes, 0.15 * 4096.0);
        assert_eq!(cfg.qa_threshold_ns, 48_000);
        // 400 Gb/s, 12 us with trimming: a = 4, target 9 us, b = 0.75.
        let cfg = NsccConfig::for_link(400_000_000_000, 12_000, 4096, true);
        assert_eq!(cfg.target_qdelay_ns, 9_000);
        // 400 Gb/s x (12 + 9) us = 1.75 BDP.
        assert_eq!(cfg.max_cwnd_bytes, 1_050_000);
        assert_eq!(cfg.fast_increase_scale, 1.0);
        assert_eq!(
            cfg.proportional_gain_bytes_per_ns,
            4.0 * 4096.0 * 4.0 * 0.75 / 9_000.0
        );
        cfg.build().unwrap();
    }

    #[test]
    fn no_ecn_low_delay_is_proportional_increase() {
        let mut cc = plain().build().unwrap();
        // RTT 14 us: delay 4 us, headroom 6 us. inc = 4096 * 6000 / 1024 = 24000 bytes^2;
        // window += 24000 / 100000 = 0.24 bytes.
        feed(&mut cc, ack(1_000_000, 14_000, 4096, 1, 0));
        assert_eq!(cc.last_quadrant(), Some(Quadrant::ProportionalIncrease));
        assert_eq!(cc.window_bytes(), 100_000.0 + 24_000.0 / 100_000.0);
    }

    #[test]
    fn no_ecn_high_delay_is_fair_increase() {
        let mut cc = plain().build().unwrap();
        // RTT 30 us: delay 20 us >= 10 us target. inc = 1024 * 4096; window += 41.94304.
        feed(&mut cc, ack(1_000_000, 30_000, 4096, 1, 0));
        assert_eq!(cc.last_quadrant(), Some(Quadrant::FairIncrease));
        assert_eq!(cc.window_bytes(), 100_000.0 + 1024.0 * 4096.0 / 100_000.0);
        assert_eq!(cc.cwnd_bytes(), 100_041);
        // High delay without ECN counts as base_rtt / 4 in the smoothed delay.
        assert_eq!(cc.avg_delay_ns(), 2_500.0);
    }

    #[test]
    fn ecn_high_delay_is_multiplicative_decrease_once_per_base_rtt() {
        let mut cc = plain().build().unwrap();
        // Delay 20 us, smoothed 20 us (gain 1): factor 1 - 0.5 * 10/20 = 0.75.
        feed(&mut cc, ack(1_000_000, 30_000, 4096, 1, 1));
        assert_eq!(cc.last_quadrant(), Some(Quadrant::MultiplicativeDecrease));
        assert_eq!(cc.window_bytes(), 75_000.0);
        assert_eq!(cc.metrics().decreases, 1);
        // 5 us later: within one base RTT, no second cut.
        feed(&mut cc, ack(1_005_000, 30_000, 4096, 1, 1));
        assert_eq!(cc.window_bytes(), 75_000.0);
        // 40 us delay: 1 - 0.5 * 30/40 = 0.625, bounded by max decrease 0.5 -> 0.625 holds.
        feed(&mut cc, ack(1_020_000, 50_000, 4096, 1, 1));
        assert_eq!(cc.window_bytes(), 75_000.0 * 0.625);
        assert_eq!(cc.metrics().decreases, 2);
    }

    #[test]
    fn ecn_low_delay_holds() {
        let mut cc = plain().build().unwrap();
        feed(&mut cc, ack(1_000_000, 12_000, 4096, 1, 1));
        assert_eq!(cc.last_quadrant(), Some(Quadrant::Hold));
        assert_eq!(cc.window_bytes(), 100_000.0);
    }

    #[test]
    fn coalesced_sack_splits_marked_and_unmarked_bytes() {
        let mut cc = plain().build().unwrap();
        // 4 packets, 1 marked, low delay: 3/4 of the bytes increase, the mark holds.
        feed(&mut cc, ack(1_000_000, 14_000, 16_384, 4, 1));
        assert_eq!(cc.last_quadrant(), Some(Quadrant::Hold));
        assert_eq!(
            cc.window_bytes(),
            100_000.0 + 12_288.0 * 6_000.0 / 1024.0 / 100_000.0
        );
    }

    #[test]
    fn fast_increase_after_a_window_of_near_zero_delay() {
        let cfg = NsccConfig {
            initial_cwnd_bytes: 8192,
            ..plain()
        };
        let mut cc = cfg.build().unwrap();
        // Delay 0.5 us: fast count 4096, then 8192 (not above the 8192 window), both
        // proportional.
        feed(&mut cc, ack(1_000_000, 10_500, 4096, 1, 0));
        feed(&mut cc, ack(1_001_000, 10_500, 4096, 1, 0));
        let before = cc.window_bytes();
        // Third: 12288 > window: fast increase, window += 4096 * 0.25.
        feed(&mut cc, ack(1_002_000, 10_500, 4096, 1, 0));
        assert_eq!(cc.window_bytes(), before + 1024.0);
    }

    #[test]
    fn eta_is_added_once_per_adjust_period() {
        let cfg = NsccConfig {
            eta_bytes: 64.0,
            fair_increase_bytes: 0.0,
            ..plain()
        };
        let mut cc = cfg.build().unwrap();
        feed(&mut cc, ack(1_000_000, 30_000, 4096, 1, 0)); // first adjustment: eta
        feed(&mut cc, ack(1_005_000, 30_000, 4096, 1, 0)); // 5 us later: none
        feed(&mut cc, ack(1_010_000, 30_000, 4096, 1, 0)); // 10 us = period: eta
        assert_eq!(cc.window_bytes(), 100_128.0);
    }

    #[test]
    fn trim_takes_bytes_off_and_arms_quick_adapt() {
        let cfg = NsccConfig {
            quick_adapt: true,
            qa_threshold_ns: 40_000,
            ..plain()
        };
        let mut cc = cfg.build().unwrap();
        // First SACK opens the first quick-adapt period (ends at 1 ms + 10 + 10 us).
        feed(&mut cc, ack(1_000_000, 12_000, 4096, 1, 0));
        let w = cc.window_bytes();
        cc.on_trim(1_001_000, 4096);
        assert_eq!(cc.window_bytes(), w - 4096.0);
        assert_eq!(cc.metrics().trims_received, 1);
        // Two SACKs of 4096 bytes inside the period.
        feed(&mut cc, ack(1_005_000, 12_000, 4096, 1, 0));
        feed(&mut cc, ack(1_010_000, 12_000, 4096, 1, 0));
        // After the period: the trim armed quick adapt; 3 x 4096 acknowledged (the SACK
        // ending the period included) is below max >> 3 = 125000: window := 12288.
        feed(&mut cc, ack(1_021_000, 12_000, 4096, 1, 0));
        assert_eq!(cc.quick_adapts(), 1);
        assert_eq!(cc.window_bytes(), 12_288.0);
        assert_eq!(cc.last_quadrant(), None);
    }

    #[test]
    fn sustained_high_delay_triggers_quick_adapt_without_trim() {
        let cfg = NsccConfig {
            quick_adapt: true,
            qa_threshold_ns: 40_000,
            ..plain()
        };
        let mut cc = cfg.build().unwrap();
        feed(&mut cc, ack(1_000_000, 12_000, 4096, 1, 0));
        // Period ends at 1.02 ms; this SACK's delay is 50 us > 40 us threshold.
        feed(&mut cc, ack(1_030_000, 60_000, 4096, 1, 0));
        assert_eq!(cc.quick_adapts(), 1);
        assert_eq!(cc.window_bytes(), 4096.0);
        // Marked SACKs for the 50 000 bytes in flight at that moment are ignored.
        feed(&mut cc, ack(1_031_000, 60_000, 4096, 1, 1));
        assert_eq!(cc.window_bytes(), 4096.0);
        assert_eq!(cc.metrics().decreases, 1);
    }

    #[test]
    fn learnt_base_rtt_is_floored() {
        let mut cc = plain().build().unwrap();
        // 8 us sample: the base RTT drops to 8 us.
        feed(&mut cc, ack(1_000_000, 8_000, 4096, 1, 0));
        assert_eq!(cc.base_rtt_ns(), 8_000);
        // A forged 0 ns sample only reaches the 5 us floor (half the configured 10 us).
        feed(&mut cc, ack(1_001_000, 0, 4096, 1, 0));
        assert_eq!(cc.base_rtt_ns(), 5_000);
        assert_eq!(
            NsccConfig {
                min_base_rtt_ns: 20_000,
                ..plain()
            }
            .build()
            .unwrap_err(),
            ConfigError::Inverted {
                low: "min_base_rtt_ns",
                high: "base_rtt_ns"
            }
        );
    }

    #[test]
    fn isolated_loss_leaves_the_window_alone() {
        let mut cc = plain().build().unwrap();
        // No sample yet: no delay, no mark: an isolated loss.
        cc.on_loss(1_000, 4096);
        assert_eq!(cc.window_bytes(), 100_000.0);
        assert_eq!((cc.isolated_losses(), cc.metrics().lost_bytes), (1, 4096));
        // RTT 14 us: delay 4 us, below the 10 us target; the loss is still isolated and
        // does not arm quick adapt.
        feed(&mut cc, ack(1_000_000, 14_000, 4096, 1, 0));
        let w = cc.window_bytes();
        cc.on_loss(1_001_000, 4096);
        assert_eq!(cc.window_bytes(), w);
        assert_eq!(cc.isolated_losses(), 2);
        assert_eq!(cc.metrics().decreases, 0);
    }

    #[test]
    fn loss_with_high_delay_reduces_and_spurious_loss_restores() {
        let mut cc = plain().build().unwrap();
        // RTT 30 us: delay 20 us >= 10 us target (fair increase: + 41.94304 bytes).
        feed(&mut cc, ack(1_000_000, 30_000, 4096, 1, 0));
        let w = 100_000.0 + 1024.0 * 4096.0 / 100_000.0;
        assert_eq!(cc.window_bytes(), w);
        cc.on_loss(1_001_000, 4096);
        assert_eq!(cc.window_bytes(), w - 4096.0);
        assert_eq!(cc.isolated_losses(), 0);
        cc.on_spurious_loss(1_002_000);
        assert_eq!(cc.window_bytes(), w);
        assert_eq!(cc.metrics().lost_bytes, 4096);
    }

    #[test]
    fn loss_within_base_rtt_plus_target_of_a_mark_reduces() {
        let mut cc = plain().build().unwrap();
        // Low delay (2 us) but one CE mark at 1 ms: hold quadrant, no window change.
        feed(&mut cc, ack(1_000_000, 12_000, 4096, 1, 1));
        assert_eq!(cc.window_bytes(), 100_000.0);
        // 20 us later (= base RTT 10 us + target 10 us): still congestion.
        cc.on_loss(1_020_000, 4096);
        assert_eq!(cc.window_bytes(), 95_904.0);
        // 1 ns beyond: isolated.
        cc.on_loss(1_020_001, 4096);
        assert_eq!(cc.window_bytes(), 95_904.0);
        assert_eq!(cc.isolated_losses(), 1);
    }

    #[test]
    fn missing_echo_uses_the_smoothed_delay_and_is_counted() {
        let mut cc = plain().build().unwrap();
        let a = AckSample {
            acked_bytes: 4096,
            echoed_send_ts_ns: None,
            ecn_ce_count: 0,
            acked_packets: 1,
            bytes_in_flight: 0,
        };
        cc.on_ack(1_000_000, &a);
        cc.on_ack(
            1_000_100,
            &AckSample {
                echoed_send_ts_ns: Some(0),
                ..a
            },
        );
        assert_eq!(cc.metrics().rejected_rtt_samples, 2);
        // Smoothed delay 0 < target: proportional increase with 10 us headroom, twice:
        // inc = 4096 * 10000 / 1024 = 40000 each time.
        assert_eq!(cc.last_quadrant(), Some(Quadrant::ProportionalIncrease));
        let w1 = 100_000.0 + 40_000.0 / 100_000.0;
        assert_eq!(cc.window_bytes(), w1 + 40_000.0 / w1);
    }
}
