//! A fixed congestion window: no reaction to any signal. The baseline ("`--cc none`").

use crate::{AckSample, Controller, Metrics};

/// Configuration of [`FixedWindow`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowConfig {
    /// The window in bytes. Default 4 MiB (about the BDP of 400 Gb/s at 80 us RTT).
    pub cwnd_bytes: u64,
}

impl Default for FixedWindowConfig {
    fn default() -> Self {
        Self {
            cwnd_bytes: 4 << 20,
        }
    }
}

impl FixedWindowConfig {
    /// Builds the controller.
    pub fn build(&self) -> FixedWindow {
        FixedWindow { cfg: *self }
    }
}

/// A controller whose window never changes and which does not pace.
#[derive(Clone, Debug)]
pub struct FixedWindow {
    cfg: FixedWindowConfig,
}

impl Controller for FixedWindow {
    fn on_packet_sent(&mut self, _now_ns: u64, _bytes: u64, _bytes_in_flight: u64) {}
    fn on_ack(&mut self, _now_ns: u64, _ack: &AckSample) {}
    fn on_trim(&mut self, _now_ns: u64, _bytes: u64) {}
    fn on_loss(&mut self, _now_ns: u64, _bytes: u64) {}
    fn on_spurious_loss(&mut self, _now_ns: u64) {}
    fn on_cnp(&mut self, _now_ns: u64) {}
    fn on_timer(&mut self, _now_ns: u64) {}
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    fn cwnd_bytes(&self) -> u64 {
        self.cfg.cwnd_bytes
    }
    fn pacing_rate_bps(&self) -> u64 {
        u64::MAX
    }
    fn metrics(&self) -> Metrics {
        Metrics {
            cwnd_bytes: self.cfg.cwnd_bytes,
            pacing_rate_bps: u64::MAX,
            ..Metrics::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_ignores_every_signal() {
        let mut cc = FixedWindowConfig { cwnd_bytes: 65536 }.build();
        cc.on_loss(10, 4096);
        cc.on_cnp(20);
        cc.on_trim(30, 4096);
        assert_eq!(cc.cwnd_bytes(), 65536);
        assert_eq!(cc.pacing_rate_bps(), u64::MAX);
        assert_eq!(cc.next_timer_ns(), None);
    }
}
