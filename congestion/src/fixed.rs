//! A fixed congestion window: no reaction to any signal. The baseline ("`--cc none`").

use crate::rtt::rtt_sample_ns;
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
        FixedWindow {
            cfg: *self,
            metrics: Metrics {
                cwnd_bytes: self.cwnd_bytes,
                pacing_rate_bps: u64::MAX,
                ..Metrics::default()
            },
        }
    }
}

/// A controller whose window never changes and which does not pace. It still keeps the
/// counting fields of [`Metrics`] (bytes in flight, CNPs, trims, lost bytes, RTT samples).
#[derive(Clone, Debug)]
pub struct FixedWindow {
    cfg: FixedWindowConfig,
    metrics: Metrics,
}

impl Controller for FixedWindow {
    fn on_packet_sent(&mut self, _now_ns: u64, _bytes: u64, bytes_in_flight: u64) {
        self.metrics.bytes_in_flight = bytes_in_flight;
    }
    fn on_ack(&mut self, now_ns: u64, ack: &AckSample) {
        self.metrics.bytes_in_flight = ack.bytes_in_flight;
        match rtt_sample_ns(now_ns, ack) {
            Some(rtt_ns) => self.metrics.last_rtt_ns = rtt_ns,
            None => self.metrics.rejected_rtt_samples += 1,
        }
    }
    fn on_trim(&mut self, _now_ns: u64, bytes: u64) {
        self.metrics.trims_received += 1;
        self.metrics.bytes_in_flight = self.metrics.bytes_in_flight.saturating_sub(bytes);
    }
    fn on_loss(&mut self, _now_ns: u64, bytes: u64) {
        self.metrics.lost_bytes = self.metrics.lost_bytes.saturating_add(bytes);
        self.metrics.bytes_in_flight = self.metrics.bytes_in_flight.saturating_sub(bytes);
    }
    fn on_spurious_loss(&mut self, _now_ns: u64) {}
    fn on_cnp(&mut self, _now_ns: u64) {
        self.metrics.cnps_received += 1;
    }
    fn cwnd_bytes(&self) -> u64 {
        self.cfg.cwnd_bytes
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

    #[test]
    fn window_ignores_every_signal() {
        let mut cc = FixedWindowConfig { cwnd_bytes: 65536 }.build();
        cc.on_loss(10, 4096);
        cc.on_cnp(20);
        cc.on_trim(30, 4096);
        assert_eq!(cc.cwnd_bytes(), 65536);
        assert_eq!(cc.pacing_rate_bps(), u64::MAX);
        assert_eq!(cc.next_timer_ns(), None);
        let m = cc.metrics();
        assert_eq!(
            (m.cnps_received, m.trims_received, m.lost_bytes),
            (1, 1, 4096)
        );
        assert_eq!(m.cwnd_bytes, 65536);
    }
}
