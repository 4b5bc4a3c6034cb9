//! DCQCN, the RoCEv2 reaction point (RP) rate controller.
//!
//! Source: Y. Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
//! SIGCOMM 2015 (DCQCN): the "DCQCN algorithm" section, reaction point (RP) part (rate
//! cut and alpha update on a CNP, the alpha timer, the rate-increase state machine), and the
//! parameter values the paper recommends (listed at [`DcqcnConfig::paper`]). The increase
//! machinery (fast recovery, additive and hyper increase, byte counter and timer) is QCN's
//! (IEEE 802.1Qau), which DCQCN reuses. (Section titles, not numbers, are cited: we could not
//! check the numbering against the paper.)
//!
//! DCQCN is rate-based: [`Controller::pacing_rate_bps`] is the current rate R_C, and
//! [`Controller::cwnd_bytes`] is `window_bytes`: `u64::MAX` (no window, the paper's DCQCN)
//! in both presets; [`crate::AnyController`] sets 4 x BDP, the window-capped DCQCN
//! ("DCQCN+win") of Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019,
//! for a fabric without PFC (see [`crate::CcKind::Dcqcn`]). It reacts to CNPs only; ACKs,
//! ECN CE counts in SACKs (the receiver, the notification point, turns those into CNPs),
//! trims and losses are recorded in the metrics but do not move the rate.
//!
//! # On a CNP (in this order)
//!
//! 1. R_T := R_C (the target rate remembers the rate before the cut);
//! 2. R_C := R_C * (1 - alpha / 2), using alpha **before** this CNP's update, then clamped to
//!    at least `min_rate_bps` (and, for the firmware preset, to at least
//!    `min_decrease_factor_percent` of the old rate);
//! 3. alpha := (1 - g) * alpha + g;
//! 4. the alpha timer, the rate-increase timer, the byte counter and both stage counters
//!    restart.
//!
//! From 100 Gb/s with alpha = 0.5 and g = 1/16 one CNP gives exactly 75 Gb/s and then
//! alpha = 0.53125 (the other order would give 73.4375 Gb/s).
//!
//! # Alpha timer
//!
//! Every `alpha_timer_ns` (K = 55 us) without a CNP, alpha := (1 - g) * alpha. The period
//! restarts at each CNP; before the first CNP alpha stays at `initial_alpha`. Periods that passed while the controller was idle are applied when
//! it is next touched, so the result does not depend on how often the caller polls.
//!
//! # Rate increase
//!
//! Increase events come from the increase timer (every `increase_timer_ns`, T = 55 us,
//! counted in the timer stage counter) and from the byte counter (every
//! `byte_counter_bytes` sent, B = 10 MB, counted in the byte stage counter). At each event,
//! with `t` and `bc` the two stage counters after counting the event and F =
//! `fast_recovery_stages`:
//!
//! * fast recovery while `max(t, bc) <= F`: R_C := (R_T + R_C) / 2;
//! * hyper increase once both `t > F` and `bc > F`: R_T += R_HAI, then R_C := (R_T + R_C) / 2;
//! * additive increase otherwise: R_T += R_AI, then R_C := (R_T + R_C) / 2.
//!
//! Both rates are capped at the line rate; the averaging rounds towards R_T so R_C reaches
//! it. Once R_C and R_T both equal the line rate the flow has recovered and the timers stop
//! ([`Controller::next_timer_ns`] returns `None`).
//!
//! # The two parameter sets
//!
//! | parameter | [`DcqcnConfig::paper`] (Zhu et al., SIGCOMM 2015) | [`DcqcnConfig::nvidia_connectx`] (ConnectX firmware default, mlx5 name) |
//! |---|---|---|
//! | g, alpha gain | 1/256 | 5/1024 (`dce_tcp_g` = 1019, i.e. 1 - g = 1019/1024) |
//! | initial alpha | 1 | 1023/1024 (`initial_alpha_value` = 1023) |
//! | K, alpha period | 55 us | 1 us (`dce_tcp_rtt` = 1) |
//! | T, increase timer | 55 us | 300 us (`rpg_time_reset` = 300) |
//! | B, byte counter | 10 MB | 32 767 bytes (`rpg_byte_reset` = 32767) |
//! | F, fast-recovery stages | 5 | 1 (`rpg_threshold` = 1) |
//! | R_AI | 40 Mb/s | 5 Mb/s (`rpg_ai_rate` = 5) |
//! | R_HAI | 200 Mb/s | 50 Mb/s (`rpg_hai_rate` = 50) |
//! | minimum rate | none given (1 Mb/s here) | 1 Mb/s (`rpg_min_rate` = 1) |
//! | smallest cut keeps | no bound | 50% (`rpg_min_dec_fac` = 50) |
//! | cuts at most once per | every CNP | 4 us (`rate_reduce_monitor_period` = 4) |
//! | CNP interval (notification point) | 50 us | 4 us (`min_time_between_cnps` = 4) |
//! | window | none (rate only) | none (rate only) |
//!
//! Sources: the paper's "DCQCN algorithm" section and its parameter recommendations for
//! the left column; NVIDIA's "DCQCN CC Parameters" (DOCA documentation) for the right
//! (the five rate-increase rows are the commonly documented mlx5 defaults, see
//! [`DcqcnConfig::nvidia_connectx`]). How each is run: [`crate::CcKind::DcqcnRoce`]
//! (firmware) and [`crate::CcKind::DcqcnRocePaper`] (paper) rate only, as a RoCE NIC
//! under PFC, the baselines of `mrc-sim experiment incast-victim` and `pfc-spread`;
//! [`crate::CcKind::Dcqcn`] (`--cc dcqcn`) the firmware set with a 4 x BDP window, for
//! a fabric without PFC ([`DcqcnConfig::for_link`]). Either way the simulator's
//! notification point sends at most one CNP per 50 us (the transport's
//! `AckConfig::cnp_interval_ns`), the paper's interval.
//!
//! What the two sets do under PFC (`incast-victim`, seeds 1-8): the firmware's 300 us
//! timer with a 32 KB byte counter and F = 1 brings a cut flow back within a few
//! increase events, and its incast finishes within 1.04-1.18 x ideal; the paper's 10 MB
//! byte counter never fills in a 1 MiB flow, so recovery runs on the 55 us timer alone,
//! R_AI = 40 Mb/s per event after 5 fast-recovery steps, and the incast takes 1.04-3.91
//! x ideal (7:1) and 1.38-2.99 x (16:1). Both leave the victim flow hurt.
//!
//! Choices where the paper leaves room: hyper increase adds a constant R_HAI per event (QCN
//! multiplies R_HAI by the number of hyper stages); the stage-counter comparisons follow the
//! QCN state machine as written above; the minimum rate is not in the paper (see
//! [`DcqcnConfig::paper`]).

use crate::error::{
    ConfigError, check_nonzero, check_order, check_unit_closed, check_unit_open_closed,
};
use crate::rtt::rtt_sample_ns;
use crate::{AckSample, Controller, Metrics};

/// Parameters of [`Dcqcn`]. All rates in bits per second, times in ns, sizes in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DcqcnConfig {
    /// Line rate: the starting rate and the cap of R_C and R_T, bits per second.
    pub line_rate_bps: u64,
    /// Floor of R_C, bits per second.
    pub min_rate_bps: u64,
    /// alpha before the first CNP, in `[0, 1]` (paper: 1).
    pub initial_alpha: f64,
    /// EWMA gain g of alpha, in `(0, 1]` (paper: 1/256).
    pub g: f64,
    /// K: alpha decays once per this period without a CNP, ns (paper: 55 us).
    pub alpha_timer_ns: u64,
    /// T: rate-increase timer period, ns (paper: 55 us).
    pub increase_timer_ns: u64,
    /// B: bytes sent per byte-counter increase event (paper: 10 MB).
    pub byte_counter_bytes: u64,
    /// F: number of fast-recovery stages (paper: 5).
    pub fast_recovery_stages: u32,
    /// R_AI: additive-increase step of R_T, bits per second (paper: 40 Mb/s).
    pub ai_rate_bps: u64,
    /// R_HAI: hyper-increase step of R_T, bits per second (paper: 200 Mb/s).
    pub hai_rate_bps: u64,
    /// Notification-point parameter: the receiver sends at most one CNP per flow per this
    /// interval, ns (paper: 50 us). Not used by the reaction point itself; a record of the
    /// preset's value. The transport's notification point is `AckConfig::cnp_interval_ns`
    /// (mrc-transport, 50 us), which does not read this field (see
    /// [`DcqcnConfig::for_link`] for why 4 us there cuts the rate to the floor).
    pub cnp_interval_ns: u64,
    /// One cut never leaves R_C below this percentage of the rate before the cut, in
    /// `0..=100` (0: no bound; firmware `rpg_min_dec_fac`).
    pub min_decrease_factor_percent: u32,
    /// CNPs arriving less than this long after the previous cut are counted and otherwise
    /// ignored (no cut, no alpha update, no timer restart), ns (0: every CNP acts; firmware
    /// `rate_reduce_monitor_period`).
    pub min_decrease_interval_ns: u64,
    /// At most this many bytes in flight, the value of [`Controller::cwnd_bytes`]
    /// (`u64::MAX`: no window, rate only, as in the paper and the NIC firmware).
    pub window_bytes: u64,
}

impl DcqcnConfig {
    /// The parameters recommended by Zhu et al., SIGCOMM 2015: g = 1/256,
    /// K = T = 55 us, B = 10 MB (taken as 10 000 000 bytes), F = 5, R_AI = 40 Mb/s,
    /// R_HAI = 200 Mb/s, CNP interval 50 us, alpha starting at 1.
    ///
    /// The paper gives no minimum rate; `min_rate_bps` is 1 Mb/s, the ConnectX default
    /// `rpg_min_rate` (see [`DcqcnConfig::nvidia_connectx`]).
    pub fn paper(line_rate_bps: u64) -> Self {
        Self {
            line_rate_bps,
            min_rate_bps: 1_000_000,
            initial_alpha: 1.0,
            g: 1.0 / 256.0,
            alpha_timer_ns: 55_000,
            increase_timer_ns: 55_000,
            byte_counter_bytes: 10_000_000,
            fast_recovery_stages: 5,
            ai_rate_bps: 40_000_000,
            hai_rate_bps: 200_000_000,
            cnp_interval_ns: 50_000,
            min_decrease_factor_percent: 0,
            min_decrease_interval_ns: 0,
            window_bytes: u64::MAX,
        }
    }

    /// A NIC-firmware-style preset after NVIDIA ConnectX-4-and-later DCQCN defaults
    /// (NVIDIA "DCQCN CC Parameters", DOCA documentation; mlx5 sysfs names in brackets):
    ///
    /// * g = 5/1024: the firmware keeps `1 - g` as 1019/1024 [`dce_tcp_g` = 1019];
    /// * alpha period 1 us [`dce_tcp_rtt` = 1]; initial alpha 1023/1024
    ///   [`initial_alpha_value` = 1023];
    /// * minimum rate 1 Mb/s [`rpg_min_rate` = 1]; a cut keeps at least 50 % of the rate
    ///   [`rpg_min_dec_fac` = 50]; at most one cut per 4 us [`rate_reduce_monitor_period` = 4];
    /// * increase timer 300 us [`rpg_time_reset` = 300]; byte counter 32 767 bytes
    ///   [`rpg_byte_reset` = 32767]; F = 1 [`rpg_threshold` = 1]; R_AI = 5 Mb/s
    ///   [`rpg_ai_rate` = 5]; R_HAI = 50 Mb/s [`rpg_hai_rate` = 50];
    /// * CNP interval 4 us [`min_time_between_cnps` = 4, notification point].
    ///
    /// The alpha and rate-decrease values were checked against the NVIDIA table; the stored
    /// copy we read was cut before the rate-increase rows, so those five (`rpg_time_reset`,
    /// `rpg_byte_reset`, `rpg_threshold`, `rpg_ai_rate`, `rpg_hai_rate`) are the commonly
    /// documented mlx5 defaults, to be checked against the firmware in use.
    ///
    /// The firmware updates alpha once per period (up if a CNP came in it, down otherwise);
    /// this controller keeps the paper's order (cut, then alpha up at the CNP itself) for
    /// both presets.
    pub fn nvidia_connectx(line_rate_bps: u64) -> Self {
        Self {
            line_rate_bps,
            min_rate_bps: 1_000_000,
            initial_alpha: 1023.0 / 1024.0,
            g: 5.0 / 1024.0,
            alpha_timer_ns: 1_000,
            increase_timer_ns: 300_000,
            byte_counter_bytes: 32_767,
            fast_recovery_stages: 1,
            ai_rate_bps: 5_000_000,
            hai_rate_bps: 50_000_000,
            cnp_interval_ns: 4_000,
            min_decrease_factor_percent: 50,
            min_decrease_interval_ns: 4_000,
            window_bytes: u64::MAX,
        }
    }

    /// The preset [`crate::CcKind::Dcqcn`] runs: [`DcqcnConfig::nvidia_connectx`] with a
    /// window of 4 x BDP (`line_rate_bps` x `base_rtt_ns`, at least one `mtu_bytes`), the
    /// ceiling [`crate::SwiftConfig::for_link`] gives Swift's window.
    ///
    /// Why not [`DcqcnConfig::paper`] (issue 21, `mrc-sim experiment cc`, 16 x 1 MiB incast
    /// into one 100 Gb/s port, drop-tail 1 MiB, no PFC, seeds 1-8):
    ///
    /// * the paper's byte counter B = 10 MB never fires in a flow shorter than 10 MB (seed
    ///   1: 896 increase events, every one with byte stage 0), so hyper increase (both
    ///   stage counters past F = 5) never starts and a flow cut during the incast climbs
    ///   back by R_AI = 40 Mb/s per 55 us: the link idles. The paper preset with this
    ///   window reached 35.0-44.6 Gb/s; the firmware's B = 32 767 bytes and F = 1 recover
    ///   within a few increase events;
    /// * without a window a rate-based sender starting at line rate offers 16 x 100 Gb/s
    ///   for the tens of microseconds before the first CNP, and keeps its packets in
    ///   flight while the queue, marked at enqueue, tells it about congestion one
    ///   queueing delay (up to 84 us at 1 MiB) late. The paper assumes PFC (a lossless
    ///   fabric); mrc runs without it. Firmware preset without a window: 61.4-81.0 Gb/s
    ///   (seeds 1-4), with 4 x BDP: 84.0-88.6 Gb/s (seeds 1-8; 3 x BDP: 78.0-90.4).
    ///
    /// The window is the "DCQCN+win" of Li et al., "HPCC", SIGCOMM 2019 (DCQCN with a
    /// window limit, for loss and queue control). The notification point is the
    /// transport's `AckConfig::cnp_interval_ns` (50 us), not this preset's
    /// `cnp_interval_ns` (4 us): with a CNP every 4 us on a signal 84 us late the rate is
    /// cut to the floor (4.7-4.9 Gb/s in the same incast).
    pub fn for_link(line_rate_bps: u64, base_rtt_ns: u64, mtu_bytes: u64) -> Self {
        let bdp = crate::swift::bdp_bytes(line_rate_bps, base_rtt_ns);
        Self {
            window_bytes: bdp.saturating_mul(4).max(mtu_bytes).max(1),
            ..Self::nvidia_connectx(line_rate_bps)
        }
    }

    /// Checks the parameters and builds the controller, starting at the line rate.
    ///
    /// Errors: [`ConfigError::Zero`] for a zero line rate, minimum rate, timer period, byte
    /// counter, stage count, R_AI or window; [`ConfigError::OutOfRange`] for g outside `(0, 1]`,
    /// initial alpha outside `[0, 1]` or a percentage above 100; [`ConfigError::Inverted`]
    /// when the minimum rate exceeds the line rate.
    pub fn build(&self) -> Result<Dcqcn, ConfigError> {
        check_nonzero("line_rate_bps", self.line_rate_bps)?;
        check_nonzero("min_rate_bps", self.min_rate_bps)?;
        check_order(
            "min_rate_bps",
            self.min_rate_bps,
            "line_rate_bps",
            self.line_rate_bps,
        )?;
        check_unit_closed("initial_alpha", self.initial_alpha)?;
        check_unit_open_closed("g", self.g)?;
        check_nonzero("alpha_timer_ns", self.alpha_timer_ns)?;
        check_nonzero("increase_timer_ns", self.increase_timer_ns)?;
        check_nonzero("byte_counter_bytes", self.byte_counter_bytes)?;
        check_nonzero("fast_recovery_stages", u64::from(self.fast_recovery_stages))?;
        check_nonzero("ai_rate_bps", self.ai_rate_bps)?;
        check_nonzero("window_bytes", self.window_bytes)?;
        if self.min_decrease_factor_percent > 100 {
            return Err(ConfigError::OutOfRange {
                field: "min_decrease_factor_percent",
                range: "0..=100",
            });
        }
        Ok(Dcqcn {
            cfg: *self,
            current_rate_bps: self.line_rate_bps,
            target_rate_bps: self.line_rate_bps,
            alpha: self.initial_alpha,
            alpha_deadline_ns: None,
            increase_deadline_ns: None,
            timer_stage: 0,
            byte_stage: 0,
            bytes_since_stage: 0,
            last_decrease_ns: None,
            metrics: Metrics {
                cwnd_bytes: self.window_bytes,
                pacing_rate_bps: self.line_rate_bps,
                target_rate_bps: self.line_rate_bps,
                ..Metrics::default()
            },
        })
    }
}

/// The DCQCN reaction point of one flow (see the module docs for the algorithm).
#[derive(Clone, Debug)]
pub struct Dcqcn {
    cfg: DcqcnConfig,
    /// R_C, bits per second.
    current_rate_bps: u64,
    /// R_T, bits per second.
    target_rate_bps: u64,
    /// alpha in `[0, 1]`.
    alpha: f64,
    /// End of the current alpha period; `None` before the first CNP.
    alpha_deadline_ns: Option<u64>,
    /// Next increase-timer expiry; `None` when the flow is at line rate.
    increase_deadline_ns: Option<u64>,
    /// Timer stage counter (T in QCN terms), reset by a CNP.
    timer_stage: u32,
    /// Byte stage counter (BC), reset by a CNP.
    byte_stage: u32,
    /// Bytes sent since the last byte-counter event.
    bytes_since_stage: u64,
    /// Time of the last cut.
    last_decrease_ns: Option<u64>,
    metrics: Metrics,
}

/// `(low + high) / 2` rounded up, for `low <= high`, without overflow.
fn midpoint_up(low: u64, high: u64) -> u64 {
    low + (high - low).div_ceil(2)
}

impl Dcqcn {
    /// The current alpha (congestion estimate in `[0, 1]`), with alpha periods up to the
    /// last hook call applied.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// R_T, the target rate, in bits per second.
    pub fn target_rate_bps(&self) -> u64 {
        self.target_rate_bps
    }

    /// The configuration this controller was built from.
    pub fn config(&self) -> &DcqcnConfig {
        &self.cfg
    }

    fn recovering(&self) -> bool {
        self.current_rate_bps < self.cfg.line_rate_bps
            || self.target_rate_bps < self.cfg.line_rate_bps
    }

    /// Applies every alpha period and increase-timer expiry due at or before `now_ns`, in
    /// time order.
    fn advance_to(&mut self, now_ns: u64) {
        self.decay_alpha_to(now_ns);
        while let Some(deadline) = self.increase_deadline_ns {
            if deadline > now_ns {
                break;
            }
            self.timer_stage = self.timer_stage.saturating_add(1);
            self.increase_event();
            self.increase_deadline_ns = if self.recovering() {
                Some(deadline.saturating_add(self.cfg.increase_timer_ns))
            } else {
                None
            };
        }
        self.sync_metrics();
    }

    /// alpha := (1 - g) * alpha once per full alpha period that ended at or before `now_ns`.
    fn decay_alpha_to(&mut self, now_ns: u64) {
        let Some(deadline) = self.alpha_deadline_ns else {
            return;
        };
        if deadline > now_ns {
            return;
        }
        let periods = (now_ns - deadline) / self.cfg.alpha_timer_ns + 1;
        let keep = 1.0 - self.cfg.g;
        if periods <= 64 {
            for _ in 0..periods {
                self.alpha *= keep;
            }
        } else {
            let n = i32::try_from(periods).unwrap_or(i32::MAX);
            self.alpha *= keep.powi(n);
        }
        self.alpha_deadline_ns =
            Some(deadline.saturating_add(periods.saturating_mul(self.cfg.alpha_timer_ns)));
    }

    /// One rate-increase event with the stage counters already updated.
    fn increase_event(&mut self) {
        let f = self.cfg.fast_recovery_stages;
        let (t, bc) = (self.timer_stage, self.byte_stage);
        let line = self.cfg.line_rate_bps;
        if t.max(bc) <= f {
            // Fast recovery: R_T unchanged.
        } else if t.min(bc) > f {
            self.target_rate_bps = self
                .target_rate_bps
                .saturating_add(self.cfg.hai_rate_bps)
                .min(line);
        } else {
            self.target_rate_bps = self
                .target_rate_bps
                .saturating_add(self.cfg.ai_rate_bps)
                .min(line);
        }
        if self.current_rate_bps <= self.target_rate_bps {
            self.current_rate_bps = midpoint_up(self.current_rate_bps, self.target_rate_bps);
        }
        self.current_rate_bps = self.current_rate_bps.clamp(self.cfg.min_rate_bps, line);
    }

    fn sync_metrics(&mut self) {
        self.metrics.pacing_rate_bps = self.current_rate_bps;
        self.metrics.target_rate_bps = self.target_rate_bps;
    }
}

impl Controller for Dcqcn {
    fn on_packet_sent(&mut self, now_ns: u64, bytes: u64, bytes_in_flight: u64) {
        self.advance_to(now_ns);
        self.metrics.bytes_in_flight = bytes_in_flight;
        if self.increase_deadline_ns.is_none() {
            return;
        }
        self.bytes_since_stage = self.bytes_since_stage.saturating_add(bytes);
        while self.bytes_since_stage >= self.cfg.byte_counter_bytes && self.recovering() {
            self.bytes_since_stage -= self.cfg.byte_counter_bytes;
            self.byte_stage = self.byte_stage.saturating_add(1);
            self.increase_event();
        }
        if !self.recovering() {
            self.increase_deadline_ns = None;
            self.bytes_since_stage = 0;
        }
        self.sync_metrics();
    }

    fn on_ack(&mut self, now_ns: u64, ack: &AckSample) {
        self.advance_to(now_ns);
        self.metrics.bytes_in_flight = ack.bytes_in_flight;
        // RTT is not a DCQCN input; it is recorded for the metrics only.
        match rtt_sample_ns(now_ns, ack) {
            Some(rtt_ns) => self.metrics.last_rtt_ns = rtt_ns,
            None => self.metrics.rejected_rtt_samples += 1,
        }
    }

    fn on_trim(&mut self, now_ns: u64, bytes: u64) {
        self.advance_to(now_ns);
        self.metrics.trims_received += 1;
        self.metrics.bytes_in_flight = self.metrics.bytes_in_flight.saturating_sub(bytes);
    }

    fn on_loss(&mut self, now_ns: u64, bytes: u64) {
        self.advance_to(now_ns);
        self.metrics.lost_bytes = self.metrics.lost_bytes.saturating_add(bytes);
        self.metrics.bytes_in_flight = self.metrics.bytes_in_flight.saturating_sub(bytes);
    }

    fn on_spurious_loss(&mut self, now_ns: u64) {
        self.advance_to(now_ns);
    }

    fn on_cnp(&mut self, now_ns: u64) {
        self.advance_to(now_ns);
        self.metrics.cnps_received += 1;
        if let Some(last) = self.last_decrease_ns
            && now_ns.saturating_sub(last) < self.cfg.min_decrease_interval_ns
        {
            return;
        }
        let old_rate = self.current_rate_bps;
        // 1. R_T := R_C.
        self.target_rate_bps = old_rate;
        // 2. R_C := R_C * (1 - alpha/2) with the alpha from before this CNP.
        let cut = (old_rate as f64 * (1.0 - self.alpha / 2.0)) as u64;
        let floor_by_factor = old_rate / 100 * u64::from(self.cfg.min_decrease_factor_percent)
            + old_rate % 100 * u64::from(self.cfg.min_decrease_factor_percent) / 100;
        self.current_rate_bps = cut
            .max(floor_by_factor)
            .clamp(self.cfg.min_rate_bps, self.cfg.line_rate_bps);
        // 3. alpha := (1 - g) * alpha + g.
        self.alpha = (1.0 - self.cfg.g) * self.alpha + self.cfg.g;
        // 4. Restart the alpha period, the increase timer and the stage counters.
        self.alpha_deadline_ns = Some(now_ns.saturating_add(self.cfg.alpha_timer_ns));
        self.timer_stage = 0;
        self.byte_stage = 0;
        self.bytes_since_stage = 0;
        self.increase_deadline_ns = if self.recovering() {
            Some(now_ns.saturating_add(self.cfg.increase_timer_ns))
        } else {
            None
        };
        self.last_decrease_ns = Some(now_ns);
        self.metrics.decreases += 1;
        self.sync_metrics();
    }

    fn on_timer(&mut self, now_ns: u64) {
        self.advance_to(now_ns);
    }

    fn next_timer_ns(&self) -> Option<u64> {
        let increase = self.increase_deadline_ns?;
        // The alpha timer only matters while the rate recovers; at line rate its periods
        // are applied lazily at the next CNP.
        Some(match self.alpha_deadline_ns {
            Some(alpha) => alpha.min(increase),
            None => increase,
        })
    }

    fn cwnd_bytes(&self) -> u64 {
        self.cfg.window_bytes
    }

    fn pacing_rate_bps(&self) -> u64 {
        self.current_rate_bps
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBPS: u64 = 1_000_000_000;

    fn paper_100g() -> Dcqcn {
        DcqcnConfig::paper(100 * GBPS).build().unwrap()
    }

    #[test]
    fn ten_cnps_from_alpha_one_halve_ten_times() {
        let mut cc = paper_100g();
        for i in 0..10u64 {
            // 50 us apart: the CNP interval, shorter than both 55 us timers.
            cc.on_cnp(i * 50_000);
        }
        assert_eq!(cc.pacing_rate_bps(), 97_656_250);
        assert_eq!(cc.pacing_rate_bps(), (100 * GBPS) >> 10);
        assert_eq!(cc.alpha(), 1.0);
        assert_eq!(cc.metrics().decreases, 10);
        assert_eq!(cc.metrics().cnps_received, 10);
        assert_eq!(cc.cwnd_bytes(), u64::MAX);
    }

    #[test]
    fn for_link_is_the_firmware_preset_with_four_bdp_of_window() {
        // The simulator's cross-leaf path: 100 Gb/s, base RTT 5 396 ns, BDP 67 450 bytes.
        let cfg = DcqcnConfig::for_link(100 * GBPS, 5_396, 4096);
        assert_eq!(cfg.window_bytes, 269_800);
        assert_eq!(
            DcqcnConfig {
                window_bytes: u64::MAX,
                ..cfg
            },
            DcqcnConfig::nvidia_connectx(100 * GBPS)
        );
        assert_eq!(cfg.byte_counter_bytes, 32_767);
        assert_eq!(cfg.fast_recovery_stages, 1);
        // A path shorter than one packet's BDP still gets one MTU of window.
        assert_eq!(DcqcnConfig::for_link(GBPS, 1, 4096).window_bytes, 4096);
    }

    #[test]
    fn window_caps_bytes_in_flight_and_zero_is_refused() {
        let cfg = DcqcnConfig {
            window_bytes: 269_800,
            ..DcqcnConfig::nvidia_connectx(100 * GBPS)
        };
        let mut cc = cfg.build().unwrap();
        assert_eq!(cc.cwnd_bytes(), 269_800);
        // A cut moves the rate, not the window.
        cc.on_cnp(10_000);
        assert_eq!(cc.cwnd_bytes(), 269_800);
        assert_eq!(cc.pacing_rate_bps(), 50_048_828_125);
        assert_eq!(
            DcqcnConfig {
                window_bytes: 0,
                ..cfg
            }
            .build()
            .unwrap_err(),
            ConfigError::Zero {
                field: "window_bytes"
            }
        );
    }

    #[test]
    fn ten_cnps_stop_at_configured_minimum_rate() {
        let cfg = DcqcnConfig {
            min_rate_bps: GBPS,
            ..DcqcnConfig::paper(100 * GBPS)
        };
        let mut cc = cfg.build().unwrap();
        for i in 0..10u64 {
            cc.on_cnp(i * 50_000);
        }
        assert_eq!(cc.pacing_rate_bps(), GBPS);
        // Six halvings reach 1.5625 Gb/s, the seventh would give 781.25 Mb/s.
        assert_eq!(cc.target_rate_bps(), GBPS);
    }

    #[test]
    fn cut_uses_old_alpha_then_alpha_updates() {
        let cfg = DcqcnConfig {
            initial_alpha: 0.5,
            g: 1.0 / 16.0,
            ..DcqcnConfig::paper(100 * GBPS)
        };
        let mut cc = cfg.build().unwrap();
        cc.on_cnp(1_000);
        // Old alpha 0.5: 100 * (1 - 0.25) = 75 Gb/s. Updating alpha first would give
        // alpha 0.53125 and 100 * (1 - 0.265625) = 73.4375 Gb/s.
        assert_eq!(cc.pacing_rate_bps(), 75 * GBPS);
        assert_ne!(cc.pacing_rate_bps(), 73_437_500_000);
        assert_eq!(cc.alpha(), 0.53125);
        assert_eq!(cc.target_rate_bps(), 100 * GBPS);
    }

    #[test]
    fn alpha_decays_once_per_quiet_period() {
        let cfg = DcqcnConfig {
            initial_alpha: 0.5,
            g: 1.0 / 16.0,
            ..DcqcnConfig::paper(100 * GBPS)
        };
        let mut cc = cfg.build().unwrap();
        cc.on_cnp(0);
        assert_eq!(cc.alpha(), 0.53125);
        assert_eq!(cc.next_timer_ns(), Some(55_000));
        cc.on_timer(55_000);
        assert_eq!(cc.alpha(), 0.53125 * 15.0 / 16.0);
        // Two more periods at once (110 us and 165 us).
        cc.on_timer(165_000);
        assert_eq!(cc.alpha(), 0.53125 * (15.0f64 / 16.0).powi(3));
        // A CNP restarts the period: none of the alpha decays are due 54 us later.
        cc.on_cnp(200_000);
        let after_cnp = cc.alpha();
        cc.on_timer(254_999);
        assert_eq!(cc.alpha(), after_cnp);
    }

    #[test]
    fn fast_recovery_then_additive_increase_on_timer() {
        let mut cc = paper_100g();
        cc.on_cnp(0); // R_T 100 G, R_C 50 G, alpha stays 1.
        cc.on_cnp(1_000); // R_T 50 G, R_C 25 G.
        assert_eq!(cc.target_rate_bps(), 50 * GBPS);
        assert_eq!(cc.pacing_rate_bps(), 25 * GBPS);
        let expected_fr = [
            37_500_000_000,
            43_750_000_000,
            46_875_000_000,
            48_437_500_000,
            49_218_750_000,
        ];
        let mut t = 1_000;
        for want in expected_fr {
            t += 55_000;
            assert_eq!(cc.next_timer_ns().map(|d| d <= t), Some(true));
            cc.on_timer(t);
            assert_eq!(cc.pacing_rate_bps(), want);
            assert_eq!(cc.target_rate_bps(), 50 * GBPS);
        }
        // Sixth timer event: additive increase, R_T += 40 Mb/s.
        t += 55_000;
        cc.on_timer(t);
        assert_eq!(cc.target_rate_bps(), 50_040_000_000);
        assert_eq!(cc.pacing_rate_bps(), 49_629_375_000);
    }

    #[test]
    fn hyper_increase_needs_both_counters_past_f() {
        let mut cc = paper_100g();
        cc.on_cnp(0);
        cc.on_cnp(1_000); // R_T 50 G, R_C 25 G.
        // Six byte-counter events (6 x 10 MB): 5 fast recovery, 1 additive.
        cc.on_packet_sent(2_000, 60_000_000, 60_000_000);
        assert_eq!(cc.target_rate_bps(), 50_040_000_000);
        // Five timer events: stage counters (5, 6): still additive.
        for k in 1..=5u64 {
            cc.on_timer(1_000 + k * 55_000);
        }
        assert_eq!(cc.target_rate_bps(), 50_240_000_000);
        // Sixth timer event: (6, 6): hyper increase, R_T += 200 Mb/s.
        cc.on_timer(1_000 + 6 * 55_000);
        assert_eq!(cc.target_rate_bps(), 50_440_000_000);
        // The next byte-counter event is hyper too.
        cc.on_packet_sent(1_000 + 6 * 55_000 + 1, 10_000_000, 10_000_000);
        assert_eq!(cc.target_rate_bps(), 50_640_000_000);
    }

    #[test]
    fn recovers_to_line_rate_and_stops_its_timers() {
        let mut cc = paper_100g();
        cc.on_cnp(0);
        assert!(cc.next_timer_ns().is_some());
        let mut now = 0;
        while let Some(deadline) = cc.next_timer_ns() {
            now = deadline;
            cc.on_timer(now);
            assert!(now < 1_000_000_000, "no recovery within 1 s");
        }
        assert_eq!(cc.pacing_rate_bps(), 100 * GBPS);
        assert_eq!(cc.target_rate_bps(), 100 * GBPS);
        // 5 fast-recovery events bring 50 G to 98.4375 G; R_T is already at line rate so
        // every later event halves the gap: 100 G - 1.5625 G / 2^k, rounded up, reaches
        // line rate after 31 more events (1.5625e9 < 2^31).
        assert_eq!(now, 36 * 55_000);
    }

    #[test]
    fn firmware_preset_limits_cuts_and_spaces_them() {
        let mut cc = DcqcnConfig::nvidia_connectx(100 * GBPS).build().unwrap();
        cc.on_cnp(10_000);
        // alpha 1023/1024: 100 G * (1 - 1023/2048) = 50.048828125 G (floor to bps).
        assert_eq!(cc.pacing_rate_bps(), 50_048_828_125);
        // 1 us later, inside the 4 us monitor period: counted, not applied.
        cc.on_cnp(11_000);
        assert_eq!(cc.pacing_rate_bps(), 50_048_828_125);
        assert_eq!(cc.metrics().cnps_received, 2);
        assert_eq!(cc.metrics().decreases, 1);
    }

    #[test]
    fn minimum_decrease_factor_bounds_a_single_cut() {
        let cfg = DcqcnConfig {
            min_decrease_factor_percent: 80,
            ..DcqcnConfig::paper(100 * GBPS)
        };
        let mut cc = cfg.build().unwrap();
        cc.on_cnp(0);
        assert_eq!(cc.pacing_rate_bps(), 80 * GBPS);
    }

    #[test]
    fn invalid_configs_are_typed_errors() {
        let base = DcqcnConfig::paper(100 * GBPS);
        assert_eq!(
            DcqcnConfig { g: 0.0, ..base }.build().unwrap_err(),
            ConfigError::OutOfRange {
                field: "g",
                range: "(0, 1]"
            }
        );
        assert_eq!(
            DcqcnConfig {
                min_rate_bps: 200 * GBPS,
                ..base
            }
            .build()
            .unwrap_err(),
            ConfigError::Inverted {
                low: "min_rate_bps",
                high: "line_rate_bps"
            }
        );
        assert_eq!(
            DcqcnConfig {
                initial_alpha: f64::NAN,
                ..base
            }
            .build()
            .unwrap_err(),
            ConfigError::OutOfRange {
                field: "initial_alpha",
                range: "[0, 1]"
            }
        );
        assert_eq!(
            DcqcnConfig {
                line_rate_bps: 0,
                ..base
            }
            .build()
            .unwrap_err(),
            ConfigError::Zero {
                field: "line_rate_bps"
            }
        );
    }
}
