//! Receive window: `rcv_nxt` plus a SACK bitmap over a window of PSNs.
//!
//! PSNs in `[rcv_nxt, rcv_nxt + window)` are accepted; each accepted PSN sets a bit in a
//! ring bitmap; `rcv_nxt` advances over every received PSN at its front. A PSN before
//! `rcv_nxt` is an old duplicate, a PSN at or beyond `rcv_nxt + window` is out of window
//! (answered with NACK PSN_OUT_OF_WINDOW by the connection). Sequence numbers are kept as
//! 64-bit `seq` whose low 24 bits are the PSN (see [`crate::psn`]).

use crate::psn::Psn;

/// Default receive window in packets (the issue asks for at least 1024).
pub const DEFAULT_RECV_WINDOW_PACKETS: u32 = 1024;

/// Where a wire PSN falls relative to the receive window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowPos {
    /// Before `rcv_nxt`: already delivered, an old duplicate.
    Old(u64),
    /// Inside `[rcv_nxt, rcv_nxt + window)`, with its sequence number.
    InWindow(u64),
    /// At or beyond `rcv_nxt + window`.
    Beyond(u64),
}

/// What an arrival did to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// First copy of `seq`. `in_order`: it was `rcv_nxt` when it arrived; `gap_filled`:
    /// it was `rcv_nxt` and later PSNs had already arrived (a hole closed);
    /// `gap_opened`: it arrived ahead of a missing PSN.
    New {
        /// Sequence number of the packet.
        seq: u64,
        /// It was exactly `rcv_nxt`.
        in_order: bool,
        /// It closed a hole: later PSNs were already received.
        gap_filled: bool,
        /// It left a hole behind it (some earlier PSN is missing).
        gap_opened: bool,
    },
    /// A second copy of a PSN inside the window that was already received.
    Duplicate(u64),
    /// A copy of a PSN before `rcv_nxt`.
    OldDuplicate(u64),
    /// Beyond the window; not recorded.
    OutOfWindow(u64),
}

/// `rcv_nxt` plus the SACK bitmap.
#[derive(Clone, Debug)]
pub struct RecvWindow {
    rcv_nxt: u64,
    /// One past the highest sequence number received (`>= rcv_nxt`).
    highest_end: u64,
    window: u32,
    bits: Vec<u64>,
    duplicates: u64,
}

impl RecvWindow {
    /// A window of `window_packets` (at least 1; at most `2^22`) expecting `initial_psn`.
    #[inline]
    pub fn new(initial_psn: Psn, window_packets: u32) -> Self {
        let window = window_packets.clamp(1, 1 << 22);
        // ring of a power-of-two number of 64-bit words, so slot = seq & mask
        let words = (window as usize).div_ceil(64).next_power_of_two();
        let start = u64::from(initial_psn.value());
        RecvWindow {
            rcv_nxt: start,
            highest_end: start,
            window,
            bits: vec![0; words],
            duplicates: 0,
        }
    }

    /// The next expected sequence number (every one before it has arrived).
    #[inline]
    pub fn rcv_nxt(&self) -> u64 {
        self.rcv_nxt
    }

    /// `rcv_nxt` as a wire PSN.
    #[inline]
    pub fn rcv_nxt_psn(&self) -> Psn {
        Psn::from_seq(self.rcv_nxt)
    }

    /// One past the highest sequence number received so far.
    #[inline]
    pub fn highest_end(&self) -> u64 {
        self.highest_end
    }

    /// Window size in packets.
    #[inline]
    pub fn window_packets(&self) -> u32 {
        self.window
    }

    /// Duplicates seen so far (in-window and old).
    #[inline]
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Ring capacity in bits (a power of two, at least the window).
    #[inline]
    fn cap(&self) -> u64 {
        self.bits.len() as u64 * 64
    }

    #[inline]
    fn bit(&self, seq: u64) -> bool {
        let i = seq & (self.cap() - 1);
        self.bits
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }

    #[inline]
    fn set(&mut self, seq: u64, on: bool) {
        let i = seq & (self.cap() - 1);
        if let Some(w) = self.bits.get_mut((i / 64) as usize) {
            if on {
                *w |= 1u64 << (i % 64);
            } else {
                *w &= !(1u64 << (i % 64));
            }
        }
    }

    /// Where `psn` falls (acceptance: rcv_nxt 0xFFFFF8, window 16: 0x000002 in window,
    /// 0x000008 beyond, 0xFFFFF7 old).
    #[inline]
    pub fn classify(&self, psn: Psn) -> WindowPos {
        let seq = psn.unwrap(self.rcv_nxt);
        if seq < self.rcv_nxt {
            WindowPos::Old(seq)
        } else if seq - self.rcv_nxt < u64::from(self.window) {
            WindowPos::InWindow(seq)
        } else {
            WindowPos::Beyond(seq)
        }
    }

    /// Whether `seq` has been received (true for everything before `rcv_nxt`).
    #[inline]
    pub fn is_received(&self, seq: u64) -> bool {
        if seq == self.rcv_nxt && self.highest_end == seq {
            // in order with nothing beyond it: no bit is set at or after `rcv_nxt` (bits
            // are set only below `highest_end` and cleared as `rcv_nxt` passes them)
            debug_assert!(!self.bit(seq));
            return false;
        }
        if seq < self.rcv_nxt {
            return true;
        }
        if seq - self.rcv_nxt >= u64::from(self.window) {
            return false;
        }
        self.bit(seq)
    }

    /// Records the arrival of `psn`.
    #[inline]
    pub fn on_arrival(&mut self, psn: Psn) -> Arrival {
        match self.classify(psn) {
            WindowPos::Old(seq) => {
                self.duplicates += 1;
                Arrival::OldDuplicate(seq)
            }
            WindowPos::Beyond(seq) => Arrival::OutOfWindow(seq),
            WindowPos::InWindow(seq) => self.on_arrival_seq(seq),
        }
    }

    /// Records the arrival of `seq`, already classified `InWindow` by
    /// [`RecvWindow::classify`] (no window change since).
    #[inline(always)]
    pub fn on_arrival_seq(&mut self, seq: u64) -> Arrival {
        if seq == self.rcv_nxt && self.highest_end == seq {
            // in order with nothing beyond it: no bit to read, set or clear
            self.rcv_nxt += 1;
            self.highest_end = self.rcv_nxt;
            return Arrival::New {
                seq,
                in_order: true,
                gap_filled: false,
                gap_opened: false,
            };
        }
        if seq < self.rcv_nxt || seq - self.rcv_nxt >= u64::from(self.window) {
            return Arrival::OutOfWindow(seq);
        }
        if self.bit(seq) {
            self.duplicates += 1;
            return Arrival::Duplicate(seq);
        }
        let in_order = seq == self.rcv_nxt;
        let gap_filled = in_order && self.highest_end > seq + 1;
        let gap_opened = seq > self.rcv_nxt && seq >= self.highest_end;
        self.highest_end = self.highest_end.max(seq + 1);
        if in_order {
            self.rcv_nxt += 1;
            while self.rcv_nxt < self.highest_end && self.bit(self.rcv_nxt) {
                self.set(self.rcv_nxt, false);
                self.rcv_nxt += 1;
            }
        } else {
            self.set(seq, true);
        }
        Arrival::New {
            seq,
            in_order,
            gap_filled,
            gap_opened,
        }
    }

    /// Sequence numbers in `[rcv_nxt, highest_end)` not yet received, ascending.
    #[inline]
    pub fn missing(&self) -> impl Iterator<Item = u64> + '_ {
        (self.rcv_nxt..self.highest_end).filter(move |&s| !self.bit(s))
    }

    /// The 64-bit SACK bitmap starting at `base_seq`: bit `i` (LSB = 0) set when
    /// `base_seq + i` has been received. Word-level: at most two ring words are read.
    #[inline]
    pub fn bitmap64(&self, base_seq: u64) -> u64 {
        let end = self.rcv_nxt + u64::from(self.window);
        if base_seq + 64 <= self.rcv_nxt {
            return u64::MAX;
        }
        if base_seq >= end {
            return 0;
        }
        // part before rcv_nxt: all received
        let (low_ones, start) = if base_seq < self.rcv_nxt {
            let k = self.rcv_nxt - base_seq;
            ((1u64 << k) - 1, self.rcv_nxt)
        } else {
            (0, base_seq)
        };
        let shift = start - base_seq;
        let avail = 64 - shift;
        let mut bits = self.ring_bits64(start);
        // drop positions at or beyond the window end (their ring slots alias old PSNs)
        let in_window = (end - start).min(avail);
        if in_window < 64 {
            bits &= (1u64 << in_window) - 1;
        }
        if shift > 0 {
            bits = (bits << shift) & !((1u64 << shift) - 1);
        }
        low_ones | bits
    }

    /// 64 ring bits starting at the slot of `seq` (wrapping around the ring).
    #[inline]
    fn ring_bits64(&self, seq: u64) -> u64 {
        let i = seq & (self.cap() - 1);
        let w = (i / 64) as usize;
        let b = (i % 64) as u32;
        let words = self.bits.len();
        let lo = self.bits.get(w).copied().unwrap_or(0);
        if b == 0 {
            return lo;
        }
        let hi = self.bits.get((w + 1) & (words - 1)).copied().unwrap_or(0);
        (lo >> b) | (hi << (64 - b))
    }

    /// Reference implementation of [`RecvWindow::bitmap64`], bit by bit (tests).
    #[cfg(test)]
    #[inline]
    fn bitmap64_slow(&self, base_seq: u64) -> u64 {
        let mut out = 0u64;
        for i in 0..64u64 {
            if self.is_received(base_seq + i) {
                out |= 1 << i;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acceptance_2_window_across_the_wrap() {
        let w = RecvWindow::new(Psn::new(0xFF_FFF8), 16);
        assert_eq!(
            w.classify(Psn::new(0x00_0002)),
            WindowPos::InWindow(0x100_0002)
        );
        assert_eq!(
            w.classify(Psn::new(0x00_0008)),
            WindowPos::Beyond(0x100_0008)
        );
        assert_eq!(
            w.classify(Psn::new(0x00_0007)),
            WindowPos::InWindow(0x100_0007)
        );
        assert_eq!(w.classify(Psn::new(0xFF_FFF7)), WindowPos::Old(0xFF_FFF7));
    }

    #[test]
    fn acceptance_3_duplicate_counted_no_gap() {
        let mut w = RecvWindow::new(Psn::new(100), 1024);
        assert!(matches!(
            w.on_arrival(Psn::new(100)),
            Arrival::New {
                seq: 100,
                in_order: true,
                ..
            }
        ));
        assert!(matches!(
            w.on_arrival(Psn::new(101)),
            Arrival::New {
                seq: 101,
                in_order: true,
                ..
            }
        ));
        assert_eq!(w.on_arrival(Psn::new(101)), Arrival::OldDuplicate(101));
        assert_eq!(w.duplicates(), 1);
        assert_eq!(w.missing().count(), 0);
        assert_eq!(w.rcv_nxt(), 102);
    }

    #[test]
    fn acceptance_3_in_order_across_the_wrap_reports_nothing() {
        let mut w = RecvWindow::new(Psn::new(0xFF_FFFE), 1024);
        for p in [0xFF_FFFE, 0xFF_FFFF, 0, 1] {
            assert!(matches!(
                w.on_arrival(Psn::new(p)),
                Arrival::New { in_order: true, .. }
            ));
        }
        assert_eq!(w.missing().collect::<Vec<_>>(), Vec::<u64>::new());
        assert_eq!(w.rcv_nxt_psn(), Psn::new(2));
        assert_eq!(w.duplicates(), 0);
    }

    #[test]
    fn acceptance_3_one_missing_across_the_wrap() {
        let mut w = RecvWindow::new(Psn::new(0xFF_FFFE), 1024);
        w.on_arrival(Psn::new(0xFF_FFFE));
        assert_eq!(
            w.on_arrival(Psn::new(0)),
            Arrival::New {
                seq: 0x100_0000,
                in_order: false,
                gap_filled: false,
                gap_opened: true
            }
        );
        let missing: Vec<u32> = w.missing().map(|s| Psn::from_seq(s).value()).collect();
        assert_eq!(missing, vec![0xFF_FFFF]);
        assert_eq!(
            w.on_arrival(Psn::new(0xFF_FFFF)),
            Arrival::New {
                seq: 0xFF_FFFF,
                in_order: true,
                gap_filled: true,
                gap_opened: false
            }
        );
        assert_eq!(w.rcv_nxt(), 0x100_0001);
    }

    #[test]
    fn bitmap_and_duplicates_in_window() {
        let mut w = RecvWindow::new(Psn::new(0), 128);
        for p in [0, 1, 3, 5, 70] {
            w.on_arrival(Psn::new(p));
        }
        assert_eq!(w.on_arrival(Psn::new(5)), Arrival::Duplicate(5));
        assert_eq!(w.on_arrival(Psn::new(128 + 2)), Arrival::OutOfWindow(130));
        assert_eq!(w.rcv_nxt(), 2);
        assert_eq!(w.bitmap64(0), 0b101011);
        assert_eq!(w.bitmap64(64), 1 << 6);
        assert_eq!(w.missing().count(), 70 - 2 - 2);
        for base in [
            0u64, 1, 2, 3, 6, 7, 60, 64, 65, 69, 70, 71, 127, 128, 130, 200,
        ] {
            assert_eq!(w.bitmap64(base), w.bitmap64_slow(base), "base {base}");
        }
        // ring reuse: after rcv_nxt passes the window start, bits are clear again
        for p in 2..=200u32 {
            w.on_arrival(Psn::new(p));
        }
        assert_eq!(w.rcv_nxt(), 201);
        assert_eq!(w.missing().count(), 0);
        assert_eq!(w.bitmap64(201), 0);
        assert_eq!(w.bitmap64(190), (1 << 11) - 1);
        for p in [203u32, 250, 260, 328, 329] {
            w.on_arrival(Psn::new(p));
        }
        for base in [
            137u64, 190, 200, 201, 202, 203, 240, 264, 265, 300, 328, 329, 330, 400,
        ] {
            assert_eq!(w.bitmap64(base), w.bitmap64_slow(base), "base {base}");
        }
        // old duplicates 3, 5 and 70 in the loop, plus the in-window 5 before
        assert_eq!(w.duplicates(), 1 + 3);
    }

    proptest::proptest! {
        #[test]
        fn bitmap64_matches_bit_by_bit(
            start in 0u32..0x100_0000,
            window in 1u32..300,
            arrivals in proptest::collection::vec(0u32..400, 0..300),
            bases in proptest::collection::vec(0u64..500, 1..20),
        ) {
            let mut w = RecvWindow::new(Psn::new(start), window);
            for a in arrivals {
                w.on_arrival(Psn::new(start).add(a));
            }
            let s0 = u64::from(start);
            for b in bases {
                let base = (s0 + b).saturating_sub(100);
                proptest::prop_assert_eq!(w.bitmap64(base), w.bitmap64_slow(base));
            }
        }

        /// Every arrival against a set-of-received model: the result, `rcv_nxt`,
        /// `highest_end` and the duplicate count (mostly in-order runs, which take the
        /// no-bitmap fast path, mixed with jumps ahead and repeats).
        #[test]
        fn arrivals_match_a_set_model(
            start in 0u32..0x100_0000,
            window in 1u32..300,
            steps in proptest::collection::vec((0u8..4, 0u32..80), 0..400),
        ) {
            let mut w = RecvWindow::new(Psn::new(start), window);
            let s0 = u64::from(start);
            let mut got = std::collections::BTreeSet::new();
            let (mut nxt, mut high, mut dups, mut next_in_order) = (s0, s0, 0u64, s0);
            for (kind, k) in steps {
                // kind 0..=2: the next in-order sequence; 3: `k` ahead of rcv_nxt
                let seq = if kind < 3 { next_in_order } else { nxt + u64::from(k) };
                next_in_order = next_in_order.max(seq + 1);
                let want = if seq < nxt {
                    dups += 1;
                    Arrival::OldDuplicate(seq)
                } else if seq - nxt >= u64::from(window) {
                    next_in_order = nxt;
                    Arrival::OutOfWindow(seq)
                } else if !got.insert(seq) {
                    dups += 1;
                    Arrival::Duplicate(seq)
                } else {
                    let in_order = seq == nxt;
                    let gap_filled = in_order && high > seq + 1;
                    let gap_opened = seq > nxt && seq >= high;
                    high = high.max(seq + 1);
                    while got.contains(&nxt) {
                        nxt += 1;
                    }
                    Arrival::New { seq, in_order, gap_filled, gap_opened }
                };
                proptest::prop_assert_eq!(w.on_arrival(Psn::from_seq(seq)), want);
                proptest::prop_assert_eq!(w.rcv_nxt(), nxt);
                proptest::prop_assert_eq!(w.highest_end(), high);
                proptest::prop_assert_eq!(w.duplicates(), dups);
            }
        }
    }
}
