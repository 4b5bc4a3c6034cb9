//! When and what the receiver acknowledges: SACK coalescing, NACKs, CNPs.
//!
//! A SACK is due after every `sack_every_packets` new data packets, at once on anything
//! unusual (an arrival the caller calls urgent: the connection does for one that fills the
//! hole at `rcv_nxt` or carries an ack-request; a duplicate; an ECN-CE mark; an arrival more
//! than `max_ack_delay_ns / sack_every_packets` after the previous one, since at that rate
//! the packets to coalesce do not come before the delay timer), and at the latest `max_ack_delay_ns` after the first unacknowledged
//! arrival. One SACK carries `rcv_nxt` and the 64-bit bitmap from `rcv_nxt`; arrivals that
//! lie beyond `rcv_nxt + 64` are reported in extra SACKs, one per 64-PSN block that saw a
//! new arrival since the previous SACK, so the sender learns of every arrival.
//!
//! CNPs (RoCEv2 Annex A17.9.3 / DCQCN): one for an ECN-CE data packet if none was sent in
//! the last `cnp_interval_ns` (default 50 us, the usual NIC default).

use std::collections::VecDeque;

/// Receiver acknowledgement policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckConfig {
    /// A SACK after this many new data packets. Default 4.
    pub sack_every_packets: u32,
    /// A SACK at most this long after the first unacknowledged arrival, ns. Default 10 us.
    pub max_ack_delay_ns: u64,
    /// At most one CNP per this interval, ns. Default 50 us.
    pub cnp_interval_ns: u64,
    /// At most this many NACKs waiting; more are counted and dropped. Default 256.
    pub max_pending_nacks: usize,
}

impl Default for AckConfig {
    fn default() -> Self {
        AckConfig {
            sack_every_packets: 4,
            max_ack_delay_ns: 10_000,
            cnp_interval_ns: 50_000,
            max_pending_nacks: 256,
        }
    }
}

/// A SACK to send (sequence numbers 64-bit; the connection writes their low 24 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SackOut {
    /// `rcv_nxt`.
    pub cum_seq: u64,
    /// First sequence of the bitmap.
    pub base_seq: u64,
    /// ECN-CE marks since the previous SACK (first SACK of a batch only).
    pub ecn_ce_count: u16,
    /// EV of the packet that triggered the SACK.
    pub echo_ev: u32,
    /// Its send timestamp (low 32 bits of ns).
    pub echo_ts32: u32,
}

/// A NACK to send: PSN, reason code, and the EV and send timestamp of the packet it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NackOut {
    /// The NACKed PSN (24 bits).
    pub psn: u32,
    /// Reason code (wire value).
    pub reason: u8,
    /// EV of the packet that caused it.
    pub echo_ev: u32,
    /// MRCETH send timestamp (low 32 bits, ns) of the packet that caused it (0: none).
    pub echo_ts32: u32,
}

/// Acknowledgement scheduler.
#[derive(Clone, Debug)]
pub struct Acker {
    cfg: AckConfig,
    /// `max_ack_delay_ns / sack_every_packets`: arrivals further apart are sparse.
    sparse_after_ns: u64,
    unacked: u32,
    immediate: bool,
    deadline_ns: Option<u64>,
    far_blocks: Vec<u64>,
    echo: (u32, u32),
    ecn_ce: u16,
    last_cnp_ns: Option<u64>,
    cnp_echo: Option<u32>,
    nacks: VecDeque<NackOut>,
    /// Time of the latest data arrival, ns.
    last_arrival_ns: Option<u64>,
    /// NACKs dropped because the queue was full.
    pub nacks_dropped: u64,
}

impl Acker {
    /// A scheduler with `cfg`.
    pub fn new(cfg: AckConfig) -> Self {
        Acker {
            cfg,
            sparse_after_ns: cfg.max_ack_delay_ns / u64::from(cfg.sack_every_packets.max(1)),
            unacked: 0,
            immediate: false,
            deadline_ns: None,
            far_blocks: Vec::new(),
            echo: (0, 0),
            ecn_ce: 0,
            last_cnp_ns: None,
            cnp_echo: None,
            nacks: VecDeque::new(),
            last_arrival_ns: None,
            nacks_dropped: 0,
        }
    }

    /// A data packet was accepted (`new`) or was a duplicate (`!new`) at `now_ns`.
    /// `seq`: its sequence; `rcv_nxt`: after the arrival; `urgent`: SACK at once (the
    /// connection sets it when the hole at `rcv_nxt` was filled or ack-request is set);
    /// `ce`: it carried ECN CE.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn on_data(
        &mut self,
        now_ns: u64,
        seq: u64,
        rcv_nxt: u64,
        new: bool,
        urgent: bool,
        ce: bool,
        ev: u32,
        ts32: u32,
    ) {
        self.echo = (ev, ts32);
        // Sparse arrivals: when the previous one came more than `max_ack_delay /
        // sack_every` ago, `sack_every` packets will not gather before the delay timer
        // fires, so waiting only delays the sender (a window-limited flow stalls on it).
        let sparse_after_ns = self.sparse_after_ns;
        let sparse = self
            .last_arrival_ns
            .is_some_and(|t| now_ns.saturating_sub(t) > sparse_after_ns);
        self.last_arrival_ns = Some(now_ns);
        if new {
            self.unacked += 1;
        }
        // Beyond the first SACK's bitmap (rcv_nxt + 64): its own block, for a duplicate as
        // for a new arrival. A duplicate is a resend whose SACK was lost; answered only by
        // the SACK at rcv_nxt it stayed unacknowledged for good while the hole at rcv_nxt
        // lasted (the chaos soak: an RTO that resends the oldest copy first went through
        // hundreds of such packets, one per expiry, until the unresponsive budget ran out).
        if seq >= rcv_nxt + 64 {
            let b = seq >> 6;
            if !self.far_blocks.contains(&b) {
                self.far_blocks.push(b);
            }
        }
        if !new || urgent || ce || sparse || self.unacked >= self.cfg.sack_every_packets {
            self.immediate = true;
        }
        if self.deadline_ns.is_none() {
            self.deadline_ns = Some(now_ns.saturating_add(self.cfg.max_ack_delay_ns));
        }
        if ce {
            self.ecn_ce = self.ecn_ce.saturating_add(1);
            if self
                .last_cnp_ns
                .is_none_or(|t| now_ns.saturating_sub(t) >= self.cfg.cnp_interval_ns)
            {
                self.last_cnp_ns = Some(now_ns);
                self.cnp_echo = Some(ev);
            }
        }
    }

    /// Queues a NACK; returns false (and counts it) if the queue is full.
    #[inline]
    pub fn nack(&mut self, n: NackOut) -> bool {
        if self.nacks.len() >= self.cfg.max_pending_nacks {
            self.nacks_dropped += 1;
            return false;
        }
        self.nacks.push_back(n);
        true
    }

    /// Next NACK to send.
    #[inline]
    pub fn poll_nack(&mut self) -> Option<NackOut> {
        self.nacks.pop_front()
    }

    /// Next CNP to send: the EV to echo.
    #[inline]
    pub fn poll_cnp(&mut self) -> Option<u32> {
        self.cnp_echo.take()
    }

    /// Whether nothing is due at `now_ns`: no NACK, no CNP, no SACK
    /// ([`Acker::poll_nack`], [`Acker::poll_cnp`] and [`Acker::poll_sack`] would all return
    /// `None`).
    #[inline]
    pub fn nothing_due(&self, now_ns: u64) -> bool {
        self.nacks.is_empty() && self.cnp_echo.is_none() && !self.sack_due(now_ns)
    }

    /// Whether [`Acker::poll_sack`] would return a SACK at `now_ns` (it may still find
    /// no far block to report, then it returns `None`).
    #[inline]
    pub fn sack_due(&self, now_ns: u64) -> bool {
        self.immediate || self.deadline_ns.is_some_and(|d| now_ns >= d)
    }

    /// Next SACK to send at `now_ns` given `rcv_nxt`, if one is due.
    #[inline]
    pub fn poll_sack(&mut self, now_ns: u64, rcv_nxt: u64) -> Option<SackOut> {
        if !self.sack_due(now_ns) {
            return None;
        }
        let first = self.deadline_ns.is_some();
        let base_seq = if first {
            rcv_nxt
        } else {
            self.far_blocks.retain(|&b| (b << 6) + 64 > rcv_nxt + 64);
            let b = self.far_blocks.pop()?;
            b << 6
        };
        let out = SackOut {
            cum_seq: rcv_nxt,
            base_seq,
            ecn_ce_count: if first { self.ecn_ce } else { 0 },
            echo_ev: self.echo.0,
            echo_ts32: self.echo.1,
        };
        if first {
            self.ecn_ce = 0;
            self.unacked = 0;
            self.deadline_ns = None;
            self.far_blocks.retain(|&b| (b << 6) + 64 > rcv_nxt + 64);
        }
        self.immediate = !self.far_blocks.is_empty();
        Some(out)
    }

    /// When a delayed SACK falls due, if one is pending.
    pub fn timeout_ns(&self) -> Option<u64> {
        if self.immediate {
            return None;
        }
        self.deadline_ns
    }

    /// Whether anything (SACK, NACK, CNP) is ready to send now.
    pub fn has_immediate(&self) -> bool {
        self.immediate || !self.nacks.is_empty() || self.cnp_echo.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesces_every_n_and_on_delay() {
        let mut a = Acker::new(AckConfig::default());
        for s in 0..3u64 {
            a.on_data(100, s, s + 1, true, false, false, 9, 100);
            assert_eq!(a.poll_sack(100, s + 1), None);
        }
        assert_eq!(a.timeout_ns(), Some(10_100));
        a.on_data(200, 3, 4, true, false, false, 9, 200);
        let s = a.poll_sack(200, 4).unwrap();
        assert_eq!(
            (s.cum_seq, s.base_seq, s.echo_ev, s.echo_ts32),
            (4, 4, 9, 200)
        );
        assert_eq!(a.poll_sack(200, 4), None);
        a.on_data(300, 4, 5, true, false, false, 9, 300);
        assert_eq!(a.poll_sack(10_299, 5), None);
        assert_eq!(a.poll_sack(10_300, 5).map(|s| s.cum_seq), Some(5));
        assert_eq!(a.timeout_ns(), None);
    }

    #[test]
    fn immediate_on_gap_duplicate_and_ce_with_rate_limited_cnp() {
        let mut a = Acker::new(AckConfig::default());
        a.on_data(0, 5, 0, true, true, false, 1, 0);
        assert_eq!(a.poll_sack(0, 0).map(|s| s.cum_seq), Some(0));
        a.on_data(1, 5, 0, false, false, false, 1, 0);
        assert!(a.poll_sack(1, 0).is_some());
        a.on_data(2, 0, 1, true, false, true, 3, 2);
        let s = a.poll_sack(2, 1).unwrap();
        assert_eq!((s.ecn_ce_count, s.echo_ev), (1, 3));
        assert_eq!(a.poll_cnp(), Some(3));
        assert_eq!(a.poll_cnp(), None);
        // second CE 49.999 us later: no CNP; at 50 us: one
        a.on_data(50_001, 1, 2, true, false, true, 4, 0);
        assert_eq!(a.poll_cnp(), None);
        a.on_data(50_002, 2, 3, true, false, true, 5, 0);
        assert_eq!(a.poll_cnp(), Some(5));
        let s = a.poll_sack(50_002, 3).unwrap();
        assert_eq!(s.ecn_ce_count, 2);
    }

    #[test]
    fn sparse_arrivals_are_acked_at_once() {
        // defaults: 4 packets or 10 us; arrivals more than 10 us / 4 = 2.5 us apart
        let mut a = Acker::new(AckConfig::default());
        a.on_data(0, 0, 1, true, false, false, 9, 0);
        assert_eq!(a.poll_sack(0, 1), None);
        a.on_data(2_500, 1, 2, true, false, false, 9, 2_500);
        assert_eq!(a.poll_sack(2_500, 2), None);
        a.on_data(5_001, 2, 3, true, false, false, 9, 5_001);
        let s = a.poll_sack(5_001, 3).unwrap();
        assert_eq!((s.cum_seq, s.echo_ts32), (3, 5_001));
        // back-to-back arrivals coalesce again
        a.on_data(5_400, 3, 4, true, false, false, 9, 5_400);
        assert_eq!(a.poll_sack(5_400, 4), None);
        assert_eq!(a.timeout_ns(), Some(15_400));
    }

    #[test]
    fn far_arrivals_get_their_own_sack_blocks() {
        let mut a = Acker::new(AckConfig::default());
        a.on_data(0, 200, 0, true, true, false, 1, 0);
        a.on_data(0, 300, 0, true, true, false, 1, 0);
        a.on_data(0, 10, 0, true, true, false, 1, 0);
        let bases: Vec<u64> =
            std::iter::from_fn(|| a.poll_sack(0, 0).map(|s| s.base_seq)).collect();
        assert_eq!(bases, vec![0, 256, 192]);
    }

    #[test]
    fn a_far_duplicate_gets_a_sack_block_that_covers_it() {
        let mut a = Acker::new(AckConfig::default());
        // 134 received long ago (its SACK lost), the hole at 0 still open: its resend
        a.on_data(0, 134, 0, false, false, false, 2, 7);
        let bases: Vec<u64> =
            std::iter::from_fn(|| a.poll_sack(0, 0).map(|s| s.base_seq)).collect();
        assert_eq!(bases, vec![0, 128]);
        // a duplicate inside the first bitmap needs no block of its own
        a.on_data(1, 63, 0, false, false, false, 2, 8);
        let bases: Vec<u64> =
            std::iter::from_fn(|| a.poll_sack(1, 0).map(|s| s.base_seq)).collect();
        assert_eq!(bases, vec![0]);
    }

    #[test]
    fn nack_queue_is_bounded() {
        let mut a = Acker::new(AckConfig {
            max_pending_nacks: 2,
            ..AckConfig::default()
        });
        let n = NackOut {
            psn: 1,
            reason: 1,
            echo_ev: 0,
            echo_ts32: 0,
        };
        assert!(a.nack(n));
        assert!(a.nack(n));
        assert!(!a.nack(n));
        assert_eq!(a.nacks_dropped, 1);
        assert_eq!(a.poll_nack(), Some(n));
    }
}
