//! Run statistics: per-port counters (see [`super::queue::PortStats`]), per-flow results,
//! and the arrival-order tracker that tells reordering from loss.

use std::collections::BTreeSet;

use serde::Serialize;

/// Tells reordering from loss on a stream of sequence numbers (PSNs unwrapped to `u64`):
/// an arrival below the highest seen that was not seen before is *out of order*, never lost;
/// a number is *lost* only if it never arrives (counted over `first..=highest`);
/// a repeat is a *duplicate*.
///
/// Arrivals 1, 2, 4, 3, 5: lost 0, out of order 1, duplicates 0.
#[derive(Clone, Debug, Default)]
pub struct ReorderTracker {
    first: Option<u64>,
    highest: Option<u64>,
    /// Numbers above the contiguous prefix that have arrived.
    above: BTreeSet<u64>,
    /// Every number below this has arrived.
    contiguous: u64,
    out_of_order: u64,
    duplicates: u64,
    distinct: u64,
}

impl ReorderTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an arrival of `seq`.
    pub fn on_arrival(&mut self, seq: u64) {
        let first = *self.first.get_or_insert(seq);
        if self.distinct == 0 {
            self.contiguous = first;
        }
        // `above` never holds `contiguous` itself, so an arrival of exactly `contiguous`
        // (the common in-order case) needs no set lookup.
        if seq < first
            || seq < self.contiguous
            || (seq != self.contiguous && self.above.contains(&seq))
        {
            self.duplicates += 1;
            return;
        }
        self.distinct += 1;
        match self.highest {
            Some(h) if seq < h => self.out_of_order += 1,
            _ => self.highest = Some(seq),
        }
        if seq == self.contiguous {
            self.contiguous += 1;
            while self.above.first() == Some(&self.contiguous) {
                self.above.pop_first();
                self.contiguous += 1;
            }
        } else {
            self.above.insert(seq);
        }
    }

    /// Numbers in `first..=highest` that never arrived.
    pub fn lost(&self) -> u64 {
        match (self.first, self.highest) {
            (Some(f), Some(h)) => h - f + 1 - self.distinct,
            _ => 0,
        }
    }

    /// Arrivals below the highest already seen (first copies only).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Repeated arrivals.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }
}

/// Results of one flow (a WRITE of `bytes` from `src` to `dst`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FlowStats {
    /// Flow index.
    pub id: u32,
    /// Sending host.
    pub src: u32,
    /// Receiving host.
    pub dst: u32,
    /// Bytes written.
    pub bytes: u64,
    /// Start, ns.
    pub start_ns: u64,
    /// Sender completion (every byte acknowledged), ns.
    pub done_ns: Option<u64>,
    /// bytes x 8 / (done - start), bit/s (0 when not done).
    pub goodput_bps: f64,
    /// Data packets sent (with retransmissions).
    pub packets_sent: u64,
    /// Retransmitted data packets.
    pub retransmitted: u64,
    /// NACK(TRIMMED) received by the sender.
    pub trims: u64,
    /// RTO expiries.
    pub timeouts: u64,
    /// RACK losses.
    pub rack_losses: u64,
    /// ECN-CE marks reported to the sender.
    pub ecn_marked: u64,
    /// Data arrivals at the receiver below the highest PSN seen.
    pub out_of_order: u64,
    /// PSNs never received at all (never counts reordering).
    pub lost: u64,
    /// Repeated arrivals at the receiver.
    pub duplicates: u64,
}

/// Completion time of `bytes` at `rate_bps`, ns (the ideal of one flow on an idle link).
pub fn ideal_ns(bytes: u64, rate_bps: u64) -> f64 {
    bytes as f64 * 8e9 / rate_bps.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reordering_is_not_loss() {
        let mut t = ReorderTracker::new();
        for s in [1, 2, 4, 3, 5] {
            t.on_arrival(s);
        }
        assert_eq!((t.lost(), t.out_of_order(), t.duplicates()), (0, 1, 0));
    }

    #[test]
    fn gaps_are_loss_and_repeats_are_duplicates() {
        let mut t = ReorderTracker::new();
        for s in [10, 12, 15, 11, 12, 10] {
            t.on_arrival(s);
        }
        // Missing 13, 14; 11 out of order; 12 and 10 repeated.
        assert_eq!((t.lost(), t.out_of_order(), t.duplicates()), (2, 1, 2));
    }
}
