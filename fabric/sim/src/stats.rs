//! Run statistics: per-port counters (see [`super::queue::PortStats`]), per-flow results,
//! and the arrival-order tracker that tells reordering from loss.

use std::collections::{BTreeSet, VecDeque};

use serde::Serialize;

/// Words of the arrival bitmap of a [`ReorderTracker`] (64 numbers each) ahead of its
/// contiguous prefix: 2^14 words = 1 Mi numbers, 128 KiB at most per tracker. Arrivals
/// further ahead go to an ordered set instead.
const BITMAP_WINDOW_WORDS: u64 = 1 << 14;

/// Tells reordering from loss on a stream of sequence numbers (PSNs unwrapped to `u64`):
/// an arrival below the highest seen that was not seen before is *out of order*, never lost;
/// a number is *lost* only if it never arrives (counted over `first..=highest`);
/// a repeat is a *duplicate*.
///
/// Arrivals 1, 2, 4, 3, 5: lost 0, out of order 1, duplicates 0.
///
/// The arrivals above the contiguous prefix are kept as a bitmap of 64-bit words from the
/// prefix's word on (one bit test per arrival, a word at a time to advance the prefix), and
/// in an ordered set only for numbers more than `BITMAP_WINDOW_WORDS` (2^14) words ahead, so a
/// far jump costs a set entry, not memory in proportion to the distance.
#[derive(Clone, Debug, Default)]
pub struct ReorderTracker {
    first: Option<u64>,
    highest: Option<u64>,
    /// Bit `n % 64` of word `n / 64 - base` is set when number `n` (at or above
    /// `contiguous`) has arrived; bits below `contiguous` do not matter.
    above: VecDeque<u64>,
    /// Word index (`n / 64`) of `above[0]`; at most `contiguous / 64`.
    base: u64,
    /// Arrived numbers above `contiguous` that were beyond the bitmap window when they came.
    far: BTreeSet<u64>,
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
        // `contiguous` itself has never arrived, so an arrival of exactly `contiguous`
        // (the common in-order case) needs no bitmap lookup.
        if seq < first
            || seq < self.contiguous
            || (seq != self.contiguous && self.arrived_above(seq))
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
            self.advance();
        } else {
            self.mark(seq);
        }
    }

    /// Whether `seq` (above `contiguous`) has arrived.
    fn arrived_above(&self, seq: u64) -> bool {
        let in_bitmap = usize::try_from((seq >> 6) - self.base)
            .ok()
            .and_then(|w| self.above.get(w))
            .is_some_and(|word| (word >> (seq & 63)) & 1 == 1);
        in_bitmap || (!self.far.is_empty() && self.far.contains(&seq))
    }

    /// Records the arrival of `seq` (above `contiguous`).
    fn mark(&mut self, seq: u64) {
        if self.above.is_empty() {
            self.base = self.contiguous >> 6;
        }
        let w = (seq >> 6) - self.base;
        if w >= BITMAP_WINDOW_WORDS {
            self.far.insert(seq);
            return;
        }
        // w < 2^14: fits any usize.
        let w = w as usize;
        if self.above.len() <= w {
            self.above.resize(w + 1, 0);
        }
        self.above[w] |= 1 << (seq & 63);
    }

    /// Moves `contiguous` past every number that has arrived, dropping the bitmap words
    /// wholly below it.
    fn advance(&mut self) {
        loop {
            while !self.above.is_empty() && self.base < self.contiguous >> 6 {
                self.above.pop_front();
                self.base += 1;
            }
            if let Some(&word) = self.above.front() {
                // Arrived numbers from `contiguous` up, within its word.
                let run = (word >> (self.contiguous & 63)).trailing_ones();
                if run > 0 {
                    self.contiguous += u64::from(run);
                    continue;
                }
            }
            if self.far.first() == Some(&self.contiguous) {
                self.far.pop_first();
                self.contiguous += 1;
                continue;
            }
            return;
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

    /// The bitmap tracker counts as a plain set of every arrival does, on seeded random
    /// streams with reordering, repeats, gaps and jumps past the bitmap window.
    #[test]
    fn bitmap_tracker_equals_a_set_of_arrivals() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for round in 0..200 {
            let mut t = ReorderTracker::new();
            let mut seen = BTreeSet::new();
            let (mut dups, mut ooo, mut highest) = (0u64, 0u64, None::<u64>);
            let start: u64 = rng.random_range(0..1_000);
            let mut next = start;
            let n = rng.random_range(1..2_000);
            for _ in 0..n {
                let seq = match rng.random_range(0..100) {
                    // Far jump past the bitmap window (2^20 numbers).
                    0 if round % 4 == 0 => next + (1 << 20) + rng.random_range(0..5_000),
                    // Repeat or late arrival.
                    1..=15 => rng.random_range(start..=next),
                    // Small gap.
                    16..=25 => next + rng.random_range(1..200),
                    _ => next,
                };
                next = next.max(seq + 1);
                t.on_arrival(seq);
                // Numbers below the first arrival count as repeats (the tracker's rule).
                let first = *seen.first().unwrap_or(&seq);
                if seq < first || !seen.insert(seq) {
                    dups += 1;
                } else if highest.is_some_and(|h| seq < h) {
                    ooo += 1;
                }
                highest = highest.max(Some(seq));
            }
            let first = *seen.first().unwrap();
            let lost = highest.map_or(0, |h| h - first + 1 - seen.len() as u64);
            assert_eq!(
                (t.lost(), t.out_of_order(), t.duplicates()),
                (lost, ooo, dups),
                "round {round}"
            );
        }
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
