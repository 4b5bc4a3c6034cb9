//! RTT estimation, RTO computation and RACK-style time-based loss detection.
//!
//! - [`RttEstimator`]: RFC 6298 section 2 (SRTT, RTTVAR, `RTO = SRTT + 4 RTTVAR`, clamped
//!   to `[min_rto_ns, max_rto_ns]`) plus the minimum RTT seen.
//! - [`Rack`]: RFC 8985 (RACK-TLP) reduced to its core rule: a packet is lost when a packet
//!   *sent after it* (send time, then sequence number; or, for a datapath that reorders
//!   the packets handed out at one `now`, a strictly later send time) has been
//!   acknowledged and more than `rtt + reorder_window` has passed
//!   since it was sent. Because the rule compares send times, not sequence numbers, a packet
//!   that is merely slower (on a longer EV) is not declared lost while it is still within
//!   the reorder window, which is what spraying over paths of different delay needs. The
//!   reorder window is `max(min_reorder_window_ns, min_rtt / 4, (srtt - min_rtt) + 4
//!   rttvar)`: RFC 8985 6.2 starts from `min_rtt / 4`; the last term bounds the skew between
//!   paths by what the connection measures (its mean queuing delay plus four deviations, the
//!   RFC 6298 margin), since a sprayed packet on a path with a longer queue is only late,
//!   not lost, while it is within that skew. The sender
//!   ([`crate::send::SendState::detect_losses`]) also gives each packet at least its own
//!   EV's smoothed RTT in place of `rtt`: the acknowledged packet's RTT is that of the
//!   path it took, and a packet on a path with a longer standing queue (an ECMP collision
//!   in the fabric) is late by the difference, which a window derived from the
//!   connection's RTTs does not always cover.

/// Smoothed RTT state (RFC 6298).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttEstimator {
    /// Smoothed RTT in ns (0 before the first sample).
    pub srtt_ns: u64,
    /// RTT variation in ns.
    pub rttvar_ns: u64,
    /// Smallest sample seen in ns (`u64::MAX` before the first).
    pub min_rtt_ns: u64,
    /// Most recent sample in ns.
    pub latest_ns: u64,
    initial_rto_ns: u64,
}

impl RttEstimator {
    /// No samples yet; the RTO is `initial_rto_ns` until the first sample.
    pub fn new(initial_rto_ns: u64) -> Self {
        RttEstimator {
            srtt_ns: 0,
            rttvar_ns: 0,
            min_rtt_ns: u64::MAX,
            latest_ns: 0,
            initial_rto_ns,
        }
    }

    /// Whether any sample was taken.
    #[inline]
    pub fn has_sample(&self) -> bool {
        self.min_rtt_ns != u64::MAX
    }

    /// Feeds one RTT sample (ns); RFC 6298 2.2 / 2.3 with alpha 1/8, beta 1/4.
    #[inline]
    pub fn on_sample(&mut self, rtt_ns: u64) {
        self.latest_ns = rtt_ns;
        if !self.has_sample() {
            self.srtt_ns = rtt_ns;
            self.rttvar_ns = rtt_ns / 2;
        } else {
            let err = self.srtt_ns.abs_diff(rtt_ns);
            self.rttvar_ns = (3 * self.rttvar_ns + err) / 4;
            self.srtt_ns = (7 * self.srtt_ns + rtt_ns) / 8;
        }
        self.min_rtt_ns = self.min_rtt_ns.min(rtt_ns);
    }

    /// `SRTT + 4 RTTVAR` clamped to `[min_rto_ns, max_rto_ns]` (before back-off).
    #[inline]
    pub fn rto_ns(&self, min_rto_ns: u64, max_rto_ns: u64) -> u64 {
        let raw = if self.has_sample() {
            self.srtt_ns
                .saturating_add(self.rttvar_ns.saturating_mul(4))
        } else {
            self.initial_rto_ns
        };
        raw.clamp(min_rto_ns, max_rto_ns.max(min_rto_ns))
    }
}

/// RACK state: the send time of the most recently *sent* packet that has been acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Rack {
    /// Send time (ns) of the latest-sent acknowledged packet; 0 if none.
    pub xmit_ns: u64,
    /// Its sequence number (orders acknowledged packets sent at the same ns, so `seq` is
    /// the highest of its burst; it bounds the scan of [`Rack::overtaken`] candidates).
    pub seq: u64,
    /// RTT (ns) measured on that packet (`now - sent` at its acknowledgement).
    pub rtt_ns: u64,
    /// That packet was a retransmission ([`Rack::on_ack_of_resend`]): packets of a higher
    /// sequence number may have left before it, so the scan for overtaken packets runs to
    /// `snd_nxt` instead of stopping at `seq` ([`Rack::scan_end`]).
    pub resent: bool,
}

impl Rack {
    /// A packet sent at `sent_ns` with sequence `seq` was acknowledged at `now_ns`.
    /// `retransmitted`: it was sent more than once, so its RTT is ambiguous (Karn) and
    /// only a send time after the newest retransmission would update (we skip it).
    #[inline]
    pub fn on_ack(&mut self, sent_ns: u64, seq: u64, now_ns: u64, retransmitted: bool) {
        if retransmitted {
            return;
        }
        self.take(sent_ns, seq, now_ns, false);
    }

    /// [`Rack::on_ack`] of a retransmission whose SACK echoed that very copy (its EV and
    /// send timestamp), so its send time `sent_ns` is known (Karn's ambiguity resolved;
    /// RFC 8985 uses such a sample too). Its sequence `seq` is below packets that left
    /// before it, so from now on the scan covers every packet in flight
    /// ([`Rack::scan_end`]).
    #[inline]
    pub fn on_ack_of_resend(&mut self, sent_ns: u64, seq: u64, now_ns: u64) {
        self.take(sent_ns, seq, now_ns, true);
    }

    /// The packet sent at `sent_ns` (`seq`; `resent` as [`Rack::resent`]), acknowledged at
    /// `now_ns`, becomes RACK's packet if it was sent later than RACK's (the sequence
    /// number breaking a tie).
    #[inline]
    fn take(&mut self, sent_ns: u64, seq: u64, now_ns: u64, resent: bool) {
        if (sent_ns, seq) > (self.xmit_ns, self.seq) {
            self.xmit_ns = sent_ns;
            self.seq = seq;
            self.rtt_ns = now_ns.saturating_sub(sent_ns);
            self.resent = resent;
        }
    }

    /// The end (exclusive) of the sequence numbers that [`Rack::overtaken`] can hold for,
    /// given `snd_nxt`: first transmissions leave in sequence order, so after a first
    /// transmission nothing above its `seq` left before it; after a retransmission
    /// ([`Rack::resent`]) anything in flight may have. Stopping at `seq` there left the
    /// packets above the resent one (an RTO's resend of the oldest) to later expiries, one
    /// packet each: on the two-plane testbed with a link blackholed every 100 ms, 12-23
    /// RTOs of 20-40 ms per 5 s run.
    #[inline]
    pub fn scan_end(&self, snd_nxt: u64) -> u64 {
        if self.resent {
            snd_nxt
        } else {
            self.seq.min(snd_nxt)
        }
    }

    /// Whether a packet sent at `sent_ns` (sequence `seq`) was overtaken by an
    /// acknowledged one.
    ///
    /// `burst_may_reorder = false`: RFC 8985's order, send time then sequence number
    /// (packets handed out at the same ns leave in sequence order, like TCP's TSO
    /// segments). `true`: only a packet sent *strictly later* overtakes. Packets handed
    /// out at the same `now` form one burst, and a datapath may emit a burst in another
    /// order: the UDP datapath groups a burst per EV socket (one `UDP_SEGMENT` send each),
    /// so with 16 EVs the burst's last packet can leave first, and the sequence tie-break
    /// would declare the rest of the burst lost whenever the receiver takes longer than
    /// the reorder window to get from the first group to the last. The next burst, which
    /// leaves after the whole burst, still overtakes it.
    #[inline]
    pub fn overtaken(&self, sent_ns: u64, seq: u64, burst_may_reorder: bool) -> bool {
        if burst_may_reorder {
            sent_ns < self.xmit_ns
        } else {
            (sent_ns, seq) < (self.xmit_ns, self.seq)
        }
    }

    /// When an overtaken packet sent at `sent_ns` counts as lost.
    #[inline]
    pub fn deadline_ns(&self, sent_ns: u64, reorder_window_ns: u64) -> u64 {
        sent_ns
            .saturating_add(self.rtt_ns)
            .saturating_add(reorder_window_ns)
    }

    /// Whether a packet sent at `sent_ns` (sequence `seq`; `burst_may_reorder` as in
    /// [`Rack::overtaken`]) and acknowledged at `now_ns` came late: overtaken, and past
    /// [`Rack::deadline_ns`], when the connection-wide rule would have declared it lost.
    #[inline]
    pub fn acked_late(
        &self,
        sent_ns: u64,
        seq: u64,
        burst_may_reorder: bool,
        reorder_window_ns: u64,
        now_ns: u64,
    ) -> bool {
        self.overtaken(sent_ns, seq, burst_may_reorder)
            && self.deadline_ns(sent_ns, reorder_window_ns) < now_ns
    }
}

/// The reorder window: `max(floor_ns, min_rtt / 4, (srtt - min_rtt) + 4 rttvar)` (RFC 8985
/// 6.2 plus the measured delay variation, see the module docs); `floor_ns` before the first
/// sample.
pub fn reorder_window_ns(floor_ns: u64, rtt: &RttEstimator) -> u64 {
    if rtt.has_sample() {
        let skew = rtt
            .srtt_ns
            .saturating_sub(rtt.min_rtt_ns)
            .saturating_add(rtt.rttvar_ns.saturating_mul(4));
        floor_ns.max(rtt.min_rtt_ns / 4).max(skew)
    } else {
        floor_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_estimator_exact() {
        let mut r = RttEstimator::new(1_000_000);
        assert_eq!(r.rto_ns(10_000, 1_000_000_000), 1_000_000);
        r.on_sample(100_000);
        assert_eq!((r.srtt_ns, r.rttvar_ns), (100_000, 50_000));
        assert_eq!(r.rto_ns(10_000, 1_000_000_000), 300_000);
        r.on_sample(20_000);
        // rttvar = (3*50000 + 80000)/4 = 57500; srtt = (700000 + 20000)/8 = 90000
        assert_eq!(
            (r.srtt_ns, r.rttvar_ns, r.min_rtt_ns),
            (90_000, 57_500, 20_000)
        );
        assert_eq!(r.rto_ns(10_000, 200_000), 200_000);
        // skew = (srtt - min_rtt) + 4 rttvar = 70 000 + 230 000 = 300 000 > min_rtt / 4
        assert_eq!(reorder_window_ns(1_000, &r), 300_000);
        assert_eq!(reorder_window_ns(400_000, &r), 400_000);
        // steady samples: the skew term shrinks to the deviation, min_rtt / 4 takes over
        let mut s = RttEstimator::new(1_000_000);
        for _ in 0..40 {
            s.on_sample(20_000);
        }
        // rttvar 10 000 decays by 3/4 per sample, in integer steps, to 0
        assert_eq!((s.srtt_ns, s.rttvar_ns, s.min_rtt_ns), (20_000, 0, 20_000));
        assert_eq!(reorder_window_ns(0, &s), 5_000);
        s.on_sample(28_000);
        // srtt 21 000, rttvar 2 000: skew 1 000 + 8 000 = 9 000
        assert_eq!((s.srtt_ns, s.rttvar_ns), (21_000, 2_000));
        assert_eq!(reorder_window_ns(0, &s), 9_000);
        // before any sample: the floor
        assert_eq!(reorder_window_ns(3_000, &RttEstimator::new(1)), 3_000);
    }

    #[test]
    fn rack_compares_send_times() {
        let mut k = Rack::default();
        k.on_ack(5_000, 4, 25_000, false);
        assert_eq!((k.xmit_ns, k.seq, k.rtt_ns), (5_000, 4, 20_000));
        // an older packet acked later does not move RACK back
        k.on_ack(1_000, 0, 30_000, false);
        assert_eq!(k.seq, 4);
        // retransmitted packets give no sample
        k.on_ack(9_000, 1, 30_000, true);
        assert_eq!(k.seq, 4);
        assert!(k.overtaken(4_000, 3, false));
        assert!(k.overtaken(5_000, 3, false));
        assert!(!k.overtaken(5_000, 4, false));
        assert!(!k.overtaken(6_000, 5, false));
        assert_eq!(k.deadline_ns(4_000, 2_000), 26_000);
    }

    #[test]
    fn a_packet_is_not_overtaken_by_one_of_its_own_burst() {
        // Sequences 3 and 4 were handed out at the same ns (one datapath burst, which the
        // UDP datapath may emit as 4 before 3): the acknowledgement of 4 overtakes
        // nothing of that burst, only packets sent strictly earlier.
        let mut k = Rack::default();
        k.on_ack(5_000, 4, 25_000, false);
        assert!(!k.overtaken(5_000, 3, true));
        assert!(k.overtaken(4_999, 5, true));
        // without the flag, the sequence number breaks the tie
        assert!(k.overtaken(5_000, 3, false));
    }
}
