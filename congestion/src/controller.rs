//! The controller trait every congestion controller implements.
//!
//! Shaped after quinn-proto's `congestion::Controller` and s2n-quic's
//! `CongestionController`: the connection calls the `on_*` hooks as events happen and asks
//! [`Controller::cwnd_bytes`] / [`Controller::pacing_rate_bps`] before it sends.

/// What one acknowledgement (SACK) tells the controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckSample {
    /// Bytes newly acknowledged by this SACK (payload bytes, not counting headers).
    pub acked_bytes: u64,
    /// Send timestamp echoed by the receiver, in ns on the sender's clock (the same clock
    /// as `now_ns`). `None` when the packet carried no timestamp; `Some(0)` is treated as
    /// missing too. Controllers derive RTT samples as `now_ns - echoed_send_ts_ns`.
    pub echoed_send_ts_ns: Option<u64>,
    /// Number of packets acknowledged by this SACK that arrived with ECN CE set.
    pub ecn_ce_count: u32,
    /// Number of packets this SACK newly acknowledged (so `ecn_ce_count / acked_packets`
    /// is the marked fraction).
    pub acked_packets: u32,
    /// Bytes still in flight after this acknowledgement was applied.
    pub bytes_in_flight: u64,
}

/// Point-in-time figures a controller reports; every field carries its unit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    /// Congestion window in bytes (`u64::MAX` when the controller is purely rate-based).
    pub cwnd_bytes: u64,
    /// Pacing rate in bits per second (`u64::MAX` when the controller does not pace).
    pub pacing_rate_bps: u64,
    /// Latest accepted RTT sample in ns, 0 if none yet.
    pub last_rtt_ns: u64,
    /// Acknowledgements whose echoed timestamp was zero or missing and so gave no RTT sample.
    pub rejected_rtt_samples: u64,
    /// Number of multiplicative decreases applied so far (rate cuts for DCQCN, window cuts
    /// for Swift and NSCC, quick adapts included).
    pub decreases: u64,
    /// Bytes in flight as last reported by the caller (`on_packet_sent`, `on_ack`), minus the
    /// bytes of later `on_trim` / `on_loss` reports.
    pub bytes_in_flight: u64,
    /// DCQCN target rate R_T in bits per second; 0 for controllers without one.
    pub target_rate_bps: u64,
    /// CNPs received so far.
    pub cnps_received: u64,
    /// NACK(TRIMMED) reports received so far.
    pub trims_received: u64,
    /// Bytes declared lost so far (sum of `on_loss` arguments).
    pub lost_bytes: u64,
}

/// A congestion controller for one connection.
///
/// All hooks take `now_ns`, the caller's monotonic clock in nanoseconds. Implementations
/// must keep `cwnd_bytes()` at or above their configured minimum and `pacing_rate_bps()`
/// within `[min_rate, line_rate]`, and never produce NaN or negative internal values.
pub trait Controller: core::fmt::Debug + Send {
    /// A data packet of `bytes` payload bytes left; `bytes_in_flight` includes it.
    fn on_packet_sent(&mut self, now_ns: u64, bytes: u64, bytes_in_flight: u64);
    /// A SACK newly acknowledged data (see [`AckSample`]).
    fn on_ack(&mut self, now_ns: u64, ack: &AckSample);
    /// A NACK(TRIMMED) reported that a switch cut the payload of a `bytes`-byte packet.
    fn on_trim(&mut self, now_ns: u64, bytes: u64);
    /// Loss detection (RACK or RTO) declared `bytes` lost.
    fn on_loss(&mut self, now_ns: u64, bytes: u64);
    /// A loss declared earlier proved spurious (the original was acknowledged): undo the
    /// reaction to it where the controller can.
    fn on_spurious_loss(&mut self, now_ns: u64);
    /// A congestion notification packet (RoCEv2 CNP) arrived.
    fn on_cnp(&mut self, now_ns: u64);
    /// The timer returned by [`Controller::next_timer_ns`] fired (called with `now_ns` at or
    /// after it).
    /// The default does nothing, for controllers without timers.
    fn on_timer(&mut self, now_ns: u64) {
        let _ = now_ns;
    }
    /// When the controller next needs [`Controller::on_timer`], if ever. The default is
    /// `None`: no timer.
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    /// Congestion window in bytes; `u64::MAX` for a purely rate-based controller.
    fn cwnd_bytes(&self) -> u64;
    /// Pacing rate in bits per second; `u64::MAX` when the controller does not pace.
    fn pacing_rate_bps(&self) -> u64;
    /// Current figures.
    fn metrics(&self) -> Metrics;
}
