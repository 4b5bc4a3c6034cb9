//! A Swift-style delay-based window controller.
//!
//! Source: G. Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in
//! the Datacenter", SIGCOMM 2020: the design section's Algorithm 1 (AIMD on delay against a
//! target, multiplicative decrease at most once per RTT, retransmit-timeout and
//! fast-recovery handling, pacing when the window is below one packet) and its target-delay
//! scaling (topology-based: a per-hop term; flow-based: a term that grows as the window
//! shrinks, `fs_range`, `fs_min_cwnd`, `fs_max_cwnd`). Section titles, not numbers, are
//! cited: we could not check the numbering against the paper.
//!
//! # Per acknowledgement with an RTT sample
//!
//! `delay` is the RTT sample `now_ns - echoed_send_ts_ns` and `target` is
//!
//! ```text
//! target = base_target + hops * per_hop + clamp(fs_alpha / sqrt(cwnd_packets) + fs_beta, 0, fs_range)
//! fs_alpha = fs_range / (1/sqrt(fs_min_cwnd) - 1/sqrt(fs_max_cwnd)),  fs_beta = -fs_alpha / sqrt(fs_max_cwnd)
//! ```
//!
//! * `delay < target`: additive increase of `ai_bytes` per window acknowledged:
//!   `cwnd += ai_bytes * acked_bytes / cwnd` (for `cwnd < mss`: `cwnd += ai_bytes *
//!   acked_bytes / mss`, Algorithm 1's `ai * num_acked`).
//! * otherwise, if no decrease happened within the last RTT: `cwnd *= max(1 - beta *
//!   (delay - target) / delay, 1 - max_mdf)`.
//!
//! An acknowledgement without an RTT sample (echo missing, zero, or in the future) changes
//! nothing but `Metrics::rejected_rtt_samples`: Swift has no signal to act on.
//!
//! # Losses, trims, CNPs
//!
//! `on_loss` is Algorithm 1's retransmission branch: the retransmit counter grows (an ACK
//! resets it); at `retx_reset_threshold` consecutive losses the window drops to its
//! minimum, otherwise it is cut by `max_mdf` if no decrease happened within the last RTT.
//! `on_spurious_loss` undoes the last loss cut. Swift predates packet trimming: `on_trim` is
//! treated like a loss cut (at most once per RTT, by `max_mdf`) but does not count towards
//! the reset threshold, since the trimmed packet's header did arrive. CNPs are not a Swift
//! signal and are only counted.
//!
//! # Window and pacing
//!
//! The window is kept in bytes (as `f64`, for fractions below one packet) within
//! `[min_cwnd_bytes, max_cwnd_bytes]`. [`Controller::cwnd_bytes`] reports at least one MSS
//! so that one packet may always be outstanding; below one MSS the sending rate is set by
//! pacing instead (Algorithm 1: one packet per `rtt / cwnd`): [`Controller::pacing_rate_bps`]
//! is `cwnd * 8 / rtt` (capped at the line rate, at least 1 b/s) and `u64::MAX` (no pacing)
//! at or above one MSS. `rtt` is the latest RTT sample, or the target delay before the
//! first sample.
//!
//! Choices: the RTT sample stands in for Swift's fabric delay (mrc has no NIC timestamps to
//! split host from fabric delay); the hop count is a configuration value (Swift reads it
//! from the IP TTL); the numeric defaults of [`SwiftConfig::for_link`] are ours, the paper
//! treats them as tunables.

use crate::error::{ConfigError, check_nonzero, check_order, check_unit_open_closed};
use crate::rtt::rtt_sample_ns;
use crate::{AckSample, Controller, Metrics};

/// Parameters of [`Swift`]. Sizes in bytes, times in ns, rates in bits per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwiftConfig {
    /// Maximum segment size: payload bytes of a full packet (the "one packet" unit).
    pub mss_bytes: u64,
    /// Line rate, the cap of the pacing rate, bits per second.
    pub line_rate_bps: u64,
    /// Base target delay, ns.
    pub base_target_delay_ns: u64,
    /// Target added per hop of the path, ns (topology-based scaling).
    pub per_hop_delay_ns: u64,
    /// Hops of the path (switches traversed).
    pub hops: u32,
    /// Flow-based scaling range: the most the target grows for tiny windows, ns. 0 disables
    /// flow scaling.
    pub fs_range_ns: u64,
    /// Window, in packets, at and below which flow scaling adds the full `fs_range_ns`.
    pub fs_min_cwnd_packets: f64,
    /// Window, in packets, at and above which flow scaling adds nothing.
    pub fs_max_cwnd_packets: f64,
    /// Additive increase per window acknowledged (per RTT), bytes.
    pub ai_bytes: u64,
    /// Multiplicative-decrease gain beta in `(0, 1]`.
    pub beta: f64,
    /// Largest fraction of the window one decrease removes, in `(0, 1)` (below 1 so the
    /// window never reaches zero).
    pub max_mdf: f64,
    /// Smallest window, bytes (may be below one MSS; see the module docs on pacing).
    pub min_cwnd_bytes: u64,
    /// Largest window, bytes.
    pub max_cwnd_bytes: u64,
    /// Window at start, bytes.
    pub initial_cwnd_bytes: u64,
    /// Consecutive losses (without an ACK in between) that drop the window to its minimum.
    pub retx_reset_threshold: u32,
}

impl SwiftConfig {
    /// Defaults for a path of `line_rate_bps` with unloaded RTT `base_rtt_ns` and packets of
    /// `mss_bytes` payload. These values are our choice (the paper gives the mechanisms, not
    /// one parameter set):
    ///
    /// * base target = base RTT + 10 us of queueing; per hop 1 us; hops 0 (set it per path);
    /// * flow scaling range 10 us between 0.1 and 100 packets;
    /// * ai = one MSS per RTT; beta = 0.8; max_mdf = 0.5; reset after 5 losses;
    /// * window from 1/1000 packet (at least 1 byte) to 4 BDP, starting at one BDP (at
    ///   least one MSS).
    pub fn for_link(line_rate_bps: u64, base_rtt_ns: u64, mss_bytes: u64) -> Self {
        let bdp_bytes = bdp_bytes(line_rate_bps, base_rtt_ns);
        let initial = bdp_bytes.max(mss_bytes);
        Self {
            mss_bytes,
            line_rate_bps,
            base_target_delay_ns: base_rtt_ns.saturating_add(10_000),
            per_hop_delay_ns: 1_000,
            hops: 0,
            fs_range_ns: 10_000,
            fs_min_cwnd_packets: 0.1,
            fs_max_cwnd_packets: 100.0,
            ai_bytes: mss_bytes,
            beta: 0.8,
            max_mdf: 0.5,
            min_cwnd_bytes: (mss_bytes / 1000).max(1),
            max_cwnd_bytes: initial.saturating_mul(4),
            initial_cwnd_bytes: initial,
            retx_reset_threshold: 5,
        }
    }

    /// Checks the parameters and builds the controller.
    ///
    /// Errors: [`ConfigError::Zero`] for a zero MSS, line rate, minimum window or reset
    /// threshold; [`ConfigError::OutOfRange`] for beta outside `(0, 1]`, max_mdf outside
    /// `(0, 1)` or flow-scaling bounds that are not finite with `0 < fs_min < fs_max`;
    /// [`ConfigError::Inverted`] unless `min <= initial <= max` window.
    pub fn build(&self) -> Result<Swift, ConfigError> {
        check_nonzero("mss_bytes", self.mss_bytes)?;
        check_nonzero("line_rate_bps", self.line_rate_bps)?;
        check_nonzero("min_cwnd_bytes", self.min_cwnd_bytes)?;
        check_nonzero("retx_reset_threshold", u64::from(self.retx_reset_threshold))?;
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
        check_unit_open_closed("beta", self.beta)?;
        if !(self.max_mdf.is_finite() && self.max_mdf > 0.0 && self.max_mdf < 1.0) {
            return Err(ConfigError::OutOfRange {
                field: "max_mdf",
                range: "(0, 1)",
            });
        }
        let fs_ok = self.fs_min_cwnd_packets.is_finite()
            && self.fs_max_cwnd_packets.is_finite()
            && self.fs_min_cwnd_packets > 0.0
            && self.fs_min_cwnd_packets < self.fs_max_cwnd_packets;
        if !fs_ok {
            return Err(ConfigError::OutOfRange {
                field: "fs_min_cwnd_packets",
                range: "(0, fs_max_cwnd_packets)",
            });
        }
        let fs_alpha = self.fs_range_ns as f64
            / (1.0 / self.fs_min_cwnd_packets.sqrt() - 1.0 / self.fs_max_cwnd_packets.sqrt());
        let fs_beta = -fs_alpha / self.fs_max_cwnd_packets.sqrt();
        let cwnd = self.initial_cwnd_bytes as f64;
        Ok(Swift {
            cfg: *self,
            cwnd_bytes: cwnd,
            fs_alpha,
            fs_beta,
            last_decrease_ns: None,
            rtt_ns: 0,
            retransmit_count: 0,
            cwnd_before_loss: None,
            metrics: Metrics {
                cwnd_bytes: (cwnd as u64).max(self.mss_bytes),
                pacing_rate_bps: u64::MAX,
                ..Metrics::default()
            },
        })
    }
}

/// Bandwidth-delay product in bytes: `line_rate_bps * rtt_ns / 8e9`, saturating.
pub(crate) fn bdp_bytes(line_rate_bps: u64, rtt_ns: u64) -> u64 {
    let bytes = u128::from(line_rate_bps) * u128::from(rtt_ns) / 8_000_000_000;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The Swift-style controller of one connection (see the module docs).
#[derive(Clone, Debug)]
pub struct Swift {
    cfg: SwiftConfig,
    /// Window in bytes, within `[min_cwnd_bytes, max_cwnd_bytes]`.
    cwnd_bytes: f64,
    fs_alpha: f64,
    fs_beta: f64,
    last_decrease_ns: Option<u64>,
    /// Latest accepted RTT sample, ns; 0 before the first.
    rtt_ns: u64,
    retransmit_count: u32,
    /// Window before the latest loss cut, for `on_spurious_loss`.
    cwnd_before_loss: Option<f64>,
    metrics: Metrics,
}

impl Swift {
    /// The target delay for the current window, in ns (rounded to the nearest ns).
    pub fn target_delay_ns(&self) -> u64 {
        let cwnd_packets = self.cwnd_bytes / self.cfg.mss_bytes as f64;
        let fs = if self.cfg.fs_range_ns == 0 {
            0.0
        } else {
            (self.fs_alpha / cwnd_packets.sqrt() + self.fs_beta)
                .clamp(0.0, self.cfg.fs_range_ns as f64)
        };
        self.cfg
            .base_target_delay_ns
            .saturating_add(u64::from(self.cfg.hops).saturating_mul(self.cfg.per_hop_delay_ns))
            .saturating_add(fs.round() as u64)
    }

    /// The exact window in bytes, fractions included (may be below one MSS).
    pub fn window_bytes(&self) -> f64 {
        self.cwnd_bytes
    }

    /// The configuration this controller was built from.
    pub fn config(&self) -> &SwiftConfig {
        &self.cfg
    }

    fn can_decrease(&self, now_ns: u64) -> bool {
        match self.last_decrease_ns {
            None => true,
            Some(last) => now_ns.saturating_sub(last) >= self.rtt_estimate_ns(),
        }
    }

    fn rtt_estimate_ns(&self) -> u64 {
        if self.rtt_ns == 0 {
            self.target_delay_ns()
        } else {
            self.rtt_ns
        }
    }

    fn decrease_by(&mut self, now_ns: u64, factor: f64) {
        self.cwnd_bytes *= factor;
        self.last_decrease_ns = Some(now_ns);
        self.metrics.decreases += 1;
    }

    fn clamp_and_sync(&mut self) {
        self.cwnd_bytes = self.cwnd_bytes.clamp(
            self.cfg.min_cwnd_bytes as f64,
            self.cfg.max_cwnd_bytes as f64,
        );
        self.metrics.cwnd_bytes = self.cwnd_bytes();
        self.metrics.pacing_rate_bps = self.pacing_rate_bps();
        self.metrics.last_rtt_ns = self.rtt_ns;
    }
}

impl Controller for Swift {
    fn on_packet_sent(&mut self, _now_ns: u64, _bytes: u64, bytes_in_flight: u64) {
        self.metrics.bytes_in_flight = bytes_in_flight;
    }

    fn on_ack(&mut self, now_ns: u64, ack: &AckSample) {
        self.metrics.bytes_in_flight = ack.bytes_in_flight;
        self.retransmit_count = 0;
        let Some(delay_ns) = rtt_sample_ns(now_ns, ack) else {
            self.metrics.rejected_rtt_samples += 1;
            return;
        };
        self.rtt_ns = delay_ns;
        let target_ns = self.target_delay_ns();
        let mss = self.cfg.mss_bytes as f64;
        if delay_ns < target_ns {
            let acked = ack.acked_bytes as f64;
            let ai = self.cfg.ai_bytes as f64;
            if self.cwnd_bytes >= mss {
                self.cwnd_bytes += ai * acked / self.cwnd_bytes;
            } else {
                self.cwnd_bytes += ai * acked / mss;
            }
        } else if self.can_decrease(now_ns) {
            let excess = (delay_ns - target_ns) as f64 / delay_ns as f64;
            let factor = (1.0 - self.cfg.beta * excess).max(1.0 - self.cfg.max_mdf);
            self.decrease_by(now_ns, factor);
        }
        self.clamp_and_sync();
    }

    fn on_trim(&mut self, now_ns: u64, bytes: u64) {
        self.metrics.trims_received += 1;
        self.metrics.bytes_in_flight = self.metrics.bytes_in_flight.saturating_sub(bytes);
        if self.can_decrease(now_ns) {
            self.decrease_by(now_ns, 1.0 - self.cfg.max_mdf);
        }
        self.clamp_and_sync();
    }

    fn on_loss(&mut self, now_ns: u64, bytes: u64) {
        self.metrics.lost_bytes = self.metrics.lost_bytes.saturating_add(bytes);
        self.metrics.bytes_in_flight = self.metrics.bytes_in_flight.saturating_sub(bytes);
        self.retransmit_count = self.retransmit_count.saturating_add(1);
        let before = self.cwnd_bytes;
        if self.retransmit_count >= self.cfg.retx_reset_threshold {
            self.cwnd_bytes = self.cfg.min_cwnd_bytes as f64;
            self.last_decrease_ns = Some(now_ns);
            self.metrics.decreases += 1;
            self.cwnd_before_loss = Some(before);
        } else if self.can_decrease(now_ns) {
            self.decrease_by(now_ns, 1.0 - self.cfg.max_mdf);
            self.cwnd_before_loss = Some(before);
        }
        self.clamp_and_sync();
    }

    fn on_spurious_loss(&mut self, _now_ns: u64) {
        if let Some(before) = self.cwnd_before_loss.take() {
            self.cwnd_bytes = self.cwnd_bytes.max(before);
            self.retransmit_count = self.retransmit_count.saturating_sub(1);
        }
        self.clamp_and_sync();
    }

    fn on_cnp(&mut self, _now_ns: u64) {
        self.metrics.cnps_received += 1;
    }

    fn cwnd_bytes(&self) -> u64 {
        (self.cwnd_bytes as u64).max(self.cfg.mss_bytes)
    }

    fn pacing_rate_bps(&self) -> u64 {
        if self.cwnd_bytes >= self.cfg.mss_bytes as f64 {
            return u64::MAX;
        }
        let rtt_ns = self.rtt_estimate_ns().max(1) as f64;
        let rate = self.cwnd_bytes * 8.0 * 1e9 / rtt_ns;
        (rate as u64).clamp(1, self.cfg.line_rate_bps)
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4096-byte packets, 64 KiB window, a fixed 50 us target (no hops, no flow scaling).
    fn fixed_target_50us() -> SwiftConfig {
        SwiftConfig {
            base_target_delay_ns: 50_000,
            hops: 0,
            fs_range_ns: 0,
            initial_cwnd_bytes: 65_536,
            ..SwiftConfig::for_link(100_000_000_000, 10_000, 4096)
        }
    }

    fn ack_at(echo: Option<u64>, acked_bytes: u64) -> AckSample {
        AckSample {
            acked_bytes,
            echoed_send_ts_ns: echo,
            ecn_ce_count: 0,
            acked_packets: 1,
            bytes_in_flight: 0,
        }
    }

    #[test]
    fn twelve_us_rtt_under_50us_target_is_additive_increase() {
        let mut cc = fixed_target_50us().build().unwrap();
        assert_eq!(cc.target_delay_ns(), 50_000);
        cc.on_ack(1_012_000, &ack_at(Some(1_000_000), 4096));
        // cwnd += ai * acked / cwnd = 4096 * 4096 / 65536 = 256 bytes.
        assert_eq!(cc.cwnd_bytes(), 65_792);
        assert_eq!(cc.metrics().last_rtt_ns, 12_000);
        assert_eq!(cc.metrics().decreases, 0);
        assert_eq!(cc.metrics().rejected_rtt_samples, 0);
    }

    #[test]
    fn zero_or_missing_echo_is_rejected_and_changes_nothing() {
        let mut cc = fixed_target_50us().build().unwrap();
        cc.on_ack(1_012_000, &ack_at(None, 4096));
        cc.on_ack(1_013_000, &ack_at(Some(0), 4096));
        cc.on_ack(1_014_000, &ack_at(Some(2_000_000), 4096));
        assert_eq!(cc.cwnd_bytes(), 65_536);
        assert_eq!(cc.metrics().rejected_rtt_samples, 3);
        assert_eq!(cc.metrics().last_rtt_ns, 0);
    }

    #[test]
    fn decrease_is_proportional_capped_and_once_per_rtt() {
        let mut cc = fixed_target_50us().build().unwrap();
        // 100 us delay: factor 1 - 0.8 * 50/100 = 0.6.
        cc.on_ack(1_100_000, &ack_at(Some(1_000_000), 4096));
        assert_eq!(cc.cwnd_bytes(), 39_321); // 65536 * 0.6 = 39321.6
        // 50 us later (< one 100 us RTT): no second decrease.
        cc.on_ack(1_150_000, &ack_at(Some(1_050_000), 4096));
        assert_eq!(cc.cwnd_bytes(), 39_321);
        assert_eq!(cc.metrics().decreases, 1);
        // One RTT after the first: 1 ms delay would be 1 - 0.8 * 0.95 = 0.24, capped at 0.5.
        cc.on_ack(2_200_000, &ack_at(Some(1_200_000), 4096));
        assert_eq!(cc.window_bytes(), 65_536.0 * 0.6 * 0.5);
        assert_eq!(cc.metrics().decreases, 2);
    }

    #[test]
    fn below_one_packet_the_window_paces() {
        let cfg = SwiftConfig {
            initial_cwnd_bytes: 2048,
            ..fixed_target_50us()
        };
        let mut cc = cfg.build().unwrap();
        // Half a packet: one packet may be outstanding, paced at cwnd / rtt.
        assert_eq!(cc.cwnd_bytes(), 4096);
        cc.on_ack(1_020_000, &ack_at(Some(1_000_000), 1024));
        // Below one packet: cwnd += ai * acked / mss = 4096 * 1024 / 4096 = 1024.
        assert_eq!(cc.window_bytes(), 3072.0);
        // 3072 bytes per 20 us RTT = 1.2288 Gb/s.
        assert_eq!(cc.pacing_rate_bps(), 1_228_800_000);
        cc.on_ack(1_040_000, &ack_at(Some(1_020_000), 1024));
        assert_eq!(cc.window_bytes(), 4096.0);
        assert_eq!(cc.pacing_rate_bps(), u64::MAX);
    }

    #[test]
    fn flow_scaling_raises_the_target_for_small_windows() {
        let cfg = SwiftConfig {
            base_target_delay_ns: 20_000,
            per_hop_delay_ns: 1_000,
            hops: 3,
            fs_range_ns: 9_000,
            fs_min_cwnd_packets: 1.0,
            fs_max_cwnd_packets: 100.0,
            min_cwnd_bytes: 1,
            initial_cwnd_bytes: 4096 * 25,
            max_cwnd_bytes: 4096 * 400,
            ..SwiftConfig::for_link(100_000_000_000, 10_000, 4096)
        };
        // fs_alpha = 9000 / (1 - 0.1) = 10000, fs_beta = -1000: at 25 packets 10000/5 - 1000.
        assert_eq!(
            cfg.build().unwrap().target_delay_ns(),
            20_000 + 3_000 + 1_000
        );
        let at = |packets: u64| {
            SwiftConfig {
                initial_cwnd_bytes: 4096 * packets,
                ..cfg
            }
            .build()
            .unwrap()
            .target_delay_ns()
        };
        assert_eq!(at(1), 32_000); // the full 9 us range
        assert_eq!(at(100), 23_000); // nothing
        assert_eq!(at(400), 23_000); // clamped at 0
    }

    #[test]
    fn losses_cut_and_reset_and_spurious_undoes() {
        let mut cc = fixed_target_50us().build().unwrap();
        cc.on_loss(1_000, 4096);
        assert_eq!(cc.cwnd_bytes(), 32_768);
        cc.on_spurious_loss(2_000);
        assert_eq!(cc.cwnd_bytes(), 65_536);
        // Five consecutive losses reach the reset threshold: minimum window (4 bytes).
        for k in 0..5u64 {
            cc.on_loss(1_000_000 + k * 1_000_000, 4096);
        }
        assert_eq!(cc.window_bytes(), 4.0);
        assert_eq!(cc.cwnd_bytes(), 4096);
        assert_eq!(cc.metrics().lost_bytes, 6 * 4096);
    }

    #[test]
    fn trim_cuts_once_per_rtt_without_counting_as_loss() {
        let mut cc = fixed_target_50us().build().unwrap();
        cc.on_trim(1_000, 4096);
        cc.on_trim(2_000, 4096); // within one (estimated 50 us) RTT
        assert_eq!(cc.cwnd_bytes(), 32_768);
        assert_eq!(cc.metrics().trims_received, 2);
        assert_eq!(cc.metrics().decreases, 1);
    }

    #[test]
    fn invalid_configs_are_typed_errors() {
        let base = fixed_target_50us();
        assert_eq!(
            SwiftConfig {
                max_mdf: 1.0,
                ..base
            }
            .build()
            .unwrap_err(),
            ConfigError::OutOfRange {
                field: "max_mdf",
                range: "(0, 1)"
            }
        );
        assert_eq!(
            SwiftConfig {
                initial_cwnd_bytes: base.max_cwnd_bytes + 1,
                ..base
            }
            .build()
            .unwrap_err(),
            ConfigError::Inverted {
                low: "initial_cwnd_bytes",
                high: "max_cwnd_bytes"
            }
        );
    }
}
