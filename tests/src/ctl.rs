//! Controllers for tests: a recorder that counts what the connection told it, and a
//! window that halves on loss and is restored on a spurious loss (so "the window is
//! restored" can be asserted without depending on a particular production controller).

use mrc_congestion::{AckSample, AnyController, CcKind, Controller, LinkParams, Metrics};

/// The link the scenario tests give production controllers: 100 Gb/s, 8 us base RTT,
/// 4096-byte MTU, trimming on.
pub fn test_link() -> LinkParams {
    LinkParams {
        line_rate_bps: 100_000_000_000,
        base_rtt_ns: 8_000,
        mtu_bytes: 4096,
        trimming_enabled: true,
    }
}

/// The production controller `kind` with its presets for `link`.
///
/// # Panics
/// If the presets reject `link` (a test bug).
pub fn preset(kind: CcKind, link: &LinkParams) -> AnyController {
    AnyController::new(kind, link).expect("valid preset")
}

/// Counts of the hooks a controller received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookCounts {
    /// `on_packet_sent` calls.
    pub sent: u64,
    /// `on_ack` calls.
    pub acks: u64,
    /// Bytes acknowledged over all `on_ack` calls.
    pub acked_bytes: u64,
    /// ECN-CE marks reported over all `on_ack` calls.
    pub ecn_ce: u64,
    /// `on_trim` calls.
    pub trims: u64,
    /// `on_loss` calls.
    pub losses: u64,
    /// Bytes over all `on_loss` calls.
    pub lost_bytes: u64,
    /// `on_spurious_loss` calls.
    pub spurious: u64,
    /// `on_cnp` calls.
    pub cnps: u64,
}

/// A window controller for tests: starts at `cwnd_bytes`, halves on each loss (not below
/// `min_bytes`), and a spurious loss restores the window from before the latest halving.
/// Every hook is counted in [`HalvingWindow::hooks`].
#[derive(Clone, Debug)]
pub struct HalvingWindow {
    /// Current window, bytes.
    pub cwnd_bytes: u64,
    /// Lower bound, bytes.
    pub min_bytes: u64,
    /// Windows before each halving not yet undone (most recent last).
    pub undo: Vec<u64>,
    /// Hook counters.
    pub hooks: HookCounts,
}

impl HalvingWindow {
    /// A window of `cwnd_bytes`, never below `min_bytes`.
    pub fn new(cwnd_bytes: u64, min_bytes: u64) -> Self {
        HalvingWindow {
            cwnd_bytes,
            min_bytes,
            undo: Vec::new(),
            hooks: HookCounts::default(),
        }
    }
}

impl Controller for HalvingWindow {
    fn on_packet_sent(&mut self, _now_ns: u64, _bytes: u64, _bytes_in_flight: u64) {
        self.hooks.sent += 1;
    }
    fn on_ack(&mut self, _now_ns: u64, ack: &AckSample) {
        self.hooks.acks += 1;
        self.hooks.acked_bytes += ack.acked_bytes;
        self.hooks.ecn_ce += u64::from(ack.ecn_ce_count);
    }
    fn on_trim(&mut self, _now_ns: u64, _bytes: u64) {
        self.hooks.trims += 1;
    }
    fn on_loss(&mut self, _now_ns: u64, bytes: u64) {
        self.hooks.losses += 1;
        self.hooks.lost_bytes += bytes;
        self.undo.push(self.cwnd_bytes);
        self.cwnd_bytes = (self.cwnd_bytes / 2).max(self.min_bytes);
    }
    fn on_spurious_loss(&mut self, _now_ns: u64) {
        self.hooks.spurious += 1;
        if let Some(w) = self.undo.pop() {
            self.cwnd_bytes = w;
        }
    }
    fn on_cnp(&mut self, _now_ns: u64) {
        self.hooks.cnps += 1;
    }
    fn on_timer(&mut self, _now_ns: u64) {}
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    fn cwnd_bytes(&self) -> u64 {
        self.cwnd_bytes
    }
    fn pacing_rate_bps(&self) -> u64 {
        u64::MAX
    }
    fn metrics(&self) -> Metrics {
        Metrics {
            cwnd_bytes: self.cwnd_bytes,
            pacing_rate_bps: u64::MAX,
            ..Metrics::default()
        }
    }
}
