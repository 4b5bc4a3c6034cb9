//! The byte ranges of one message that have arrived.
//!
//! A receiver counts a message whole when every byte of `[0, len)` arrived exactly once. A
//! count of payload bytes is not enough: a peer that repeats an offset at a fresh PSN would
//! make the count reach `len` while some bytes were never written (a success completion over
//! memory nobody wrote breaks the verbs guarantee). [`Coverage`] keeps the arrived ranges as
//! sorted, disjoint, merged intervals: a packet that overlaps one, or reaches past the
//! message's length, is refused before anything is written.
//!
//! Packets of a message mostly arrive in order, so the set is usually one interval that
//! grows at its end (inline, no allocation). Each hole costs one interval more; at most
//! [`MAX_COVERAGE_HOLES`] are kept, so a hostile peer cannot make it grow without bound: a
//! packet that would open one more hole is refused (the sender retransmits it later, when
//! the holes before it have filled, since a packet that fills or extends an existing range
//! never adds one).

use smallvec::SmallVec;

/// Most disjoint ranges one message keeps (8 bytes each): with 4 KiB packets, 1024 holes
/// is every other packet of a 8 MiB message missing at once.
pub const MAX_COVERAGE_HOLES: usize = 1024;

/// Why a payload range cannot be added to a message's coverage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoverageError {
    /// The range reaches past the message's length, or overlaps bytes that already arrived.
    Inconsistent,
    /// The range would open more than [`MAX_COVERAGE_HOLES`] disjoint ranges.
    TooFragmented,
}

/// Sorted, disjoint, non-adjacent byte ranges `[start, end)` of one message, in bytes from
/// the message's start.
///
/// The last range is kept apart from the others, in two plain fields: an in-order arrival
/// (the usual one) checks and extends it without touching the `SmallVec` (whose every
/// access first asks whether it spilled to the heap).
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    /// Every range but the last, in order.
    head: SmallVec<[(u32, u32); 2]>,
    /// The last range is `[tail_start, tail_end)`; `tail_end == 0`: there is no range at
    /// all (a range is never empty, so one held ends above 0), and `head` is empty.
    tail_start: u32,
    tail_end: u32,
    bytes: u64,
}

impl Coverage {
    /// Bytes covered so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Disjoint ranges kept.
    pub fn ranges(&self) -> usize {
        self.head.len() + usize::from(self.tail_end != 0)
    }

    /// The `i`-th range, in order.
    fn range(&self, i: usize) -> Option<(u32, u32)> {
        if i < self.head.len() {
            self.head.get(i).copied()
        } else if i == self.head.len() && self.tail_end != 0 {
            Some((self.tail_start, self.tail_end))
        } else {
            None
        }
    }

    /// Index of the first range that ends after `offset` (`ranges()` when none does).
    fn first_ending_after(&self, offset: u32) -> usize {
        let i = self.head.partition_point(|&(_, e)| e <= offset);
        if i == self.head.len() && self.tail_end != 0 && self.tail_end <= offset {
            i + 1
        } else {
            i
        }
    }

    /// Whether `[offset, offset + len)` may be added to a message of `msg_len` bytes: within
    /// the message, overlapping nothing that arrived, and not opening a range past the cap.
    /// Zero-length ranges are always accepted when `offset <= msg_len`.
    ///
    /// # Errors
    /// [`CoverageError::Inconsistent`] past the end or on overlap,
    /// [`CoverageError::TooFragmented`] past [`MAX_COVERAGE_HOLES`].
    #[inline(always)]
    pub fn check(&self, offset: u32, len: u32, msg_len: u32) -> Result<(), CoverageError> {
        let end = offset.checked_add(len).ok_or(CoverageError::Inconsistent)?;
        if end > msg_len {
            return Err(CoverageError::Inconsistent);
        }
        if len == 0 {
            return Ok(());
        }
        // fast path: in-order arrival right after the last range (every range ends at or
        // before `offset`: no overlap, and it joins that range), or the first range at 0
        // (nothing to overlap, no hole opened)
        if self.tail_end == offset {
            return Ok(());
        }
        self.check_general(offset, end)
    }

    /// [`Coverage::check`] of a range `[offset, end)` that does not start where the last
    /// range ends.
    fn check_general(&self, offset: u32, end: u32) -> Result<(), CoverageError> {
        // the first range that ends after `offset`
        let i = self.first_ending_after(offset);
        let next = self.range(i);
        if let Some((s, _)) = next {
            if s < end {
                return Err(CoverageError::Inconsistent);
            }
        }
        let joins_before = i > 0 && self.range(i - 1).is_some_and(|(_, e)| e == offset);
        let joins_after = next.is_some_and(|(s, _)| s == end);
        if !joins_before && !joins_after && self.ranges() >= MAX_COVERAGE_HOLES {
            return Err(CoverageError::TooFragmented);
        }
        Ok(())
    }

    /// Adds `[offset, offset + len)`, which [`Coverage::check`] accepted, merging it with
    /// the ranges it touches.
    #[inline]
    pub fn add(&mut self, offset: u32, len: u32) {
        if len == 0 {
            return;
        }
        let end = offset.saturating_add(len);
        self.bytes += u64::from(len);
        if self.tail_end == 0 {
            // the first range
            (self.tail_start, self.tail_end) = (offset, end);
        } else if self.tail_end == offset {
            // in-order arrival extends the last range
            self.tail_end = end;
        } else if self.tail_end < offset {
            // past the last range, with a hole before it: the new last range
            self.head.push((self.tail_start, self.tail_end));
            (self.tail_start, self.tail_end) = (offset, end);
        } else {
            self.add_general(offset, end);
        }
    }

    /// [`Coverage::add`] of a range `[offset, end)` before the end of the last range.
    fn add_general(&mut self, offset: u32, end: u32) {
        // on the whole list, the last range back in `head`, then out of it again
        let ranges = &mut self.head;
        ranges.push((self.tail_start, self.tail_end));
        let i = ranges.partition_point(|&(_, e)| e <= offset);
        let joins_before = i > 0 && ranges[i - 1].1 == offset;
        let joins_after = ranges.get(i).is_some_and(|&(s, _)| s == end);
        match (joins_before, joins_after) {
            (true, true) => {
                ranges[i - 1].1 = ranges[i].1;
                ranges.remove(i);
            }
            (true, false) => ranges[i - 1].1 = end,
            (false, true) => ranges[i].0 = offset,
            (false, false) => ranges.insert(i, (offset, end)),
        }
        (self.tail_start, self.tail_end) = ranges.pop().unwrap_or((0, 0));
    }

    /// Whether every byte of a `msg_len`-byte message arrived.
    pub fn is_whole(&self, msg_len: u32) -> bool {
        self.bytes >= u64::from(msg_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_out_of_order_and_overlaps() {
        let mut c = Coverage::default();
        for (off, len) in [(0, 4), (8, 4), (4, 4)] {
            c.check(off, len, 12).unwrap();
            c.add(off, len);
        }
        assert_eq!((c.bytes(), c.ranges()), (12, 1));
        assert!(c.is_whole(12));
        // a repeated offset at a fresh PSN, and a range straddling the end
        assert_eq!(c.check(0, 4, 12), Err(CoverageError::Inconsistent));
        assert_eq!(c.check(10, 4, 12), Err(CoverageError::Inconsistent));
        assert_eq!(c.check(u32::MAX, 2, 12), Err(CoverageError::Inconsistent));
        assert_eq!(c.check(12, 0, 12), Ok(()));
        assert_eq!(c.check(13, 0, 12), Err(CoverageError::Inconsistent));
    }

    #[test]
    fn partial_overlap_is_refused_and_holes_are_capped() {
        let mut c = Coverage::default();
        c.add(4, 4);
        assert_eq!(c.check(2, 4, 100), Err(CoverageError::Inconsistent));
        assert_eq!(c.check(7, 4, 100), Err(CoverageError::Inconsistent));
        assert_eq!(c.check(0, 4, 100), Ok(()));
        let mut c = Coverage::default();
        let msg_len = 2 * MAX_COVERAGE_HOLES as u32 + 2;
        for k in 0..MAX_COVERAGE_HOLES as u32 {
            c.add(2 * k + 1, 1);
        }
        assert_eq!(c.ranges(), MAX_COVERAGE_HOLES);
        // one more isolated byte is refused; a byte that fills a hole is not
        assert_eq!(
            c.check(msg_len - 1, 1, msg_len),
            Err(CoverageError::TooFragmented)
        );
        c.check(2, 1, msg_len).unwrap();
        c.add(2, 1);
        assert_eq!((c.ranges(), c.bytes()), (MAX_COVERAGE_HOLES - 1, 1025));
        c.check(0, 1, msg_len).unwrap();
        c.add(0, 1);
        assert_eq!(c.ranges(), MAX_COVERAGE_HOLES - 1);
        // at the cap, a range right after the last one extends it (the in-order fast
        // path), and one past the message's end is still refused there
        let last_end = 2 * (MAX_COVERAGE_HOLES as u32 - 1) + 2;
        assert_eq!(c.check(last_end, 1, msg_len), Ok(()));
        assert_eq!(
            c.check(last_end, 2, last_end + 1),
            Err(CoverageError::Inconsistent)
        );
    }

    #[test]
    fn in_order_after_a_hole_checks_like_the_general_path() {
        let mut c = Coverage::default();
        c.add(0, 4);
        c.add(8, 4);
        // right after the last range: accepted
        assert_eq!(c.check(12, 4, 16), Ok(()));
        // right after the first range (before the last): the general path, also accepted
        assert_eq!(c.check(4, 4, 16), Ok(()));
        // after the first range but overlapping the last: refused
        assert_eq!(c.check(4, 5, 16), Err(CoverageError::Inconsistent));
        c.add(12, 4);
        assert_eq!((c.bytes(), c.ranges()), (12, 2));
    }

    /// Against a byte map: `check` refuses exactly the ranges past the end or over bytes
    /// that arrived, and the ranges kept are the map's runs, whatever the arrival order
    /// (the last range kept apart from the others must not change that).
    #[test]
    fn agrees_with_a_byte_map() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            let msg_len = 1 + next(48) as u32;
            let mut c = Coverage::default();
            let mut map = vec![false; msg_len as usize];
            for _ in 0..40 {
                let offset = next(u64::from(msg_len) + 2) as u32;
                let len = next(6) as u32;
                let end = offset + len;
                let fits = end <= msg_len;
                let free = fits && map[offset as usize..end as usize].iter().all(|b| !b);
                let want = if free {
                    Ok(())
                } else {
                    Err(CoverageError::Inconsistent)
                };
                assert_eq!(c.check(offset, len, msg_len), want);
                if want.is_ok() {
                    c.add(offset, len);
                    map[offset as usize..end as usize].fill(true);
                }
                let runs = (0..map.len())
                    .filter(|&i| map[i] && (i == 0 || !map[i - 1]))
                    .count();
                let bytes = map.iter().filter(|b| **b).count() as u64;
                assert_eq!((c.ranges(), c.bytes()), (runs, bytes));
                let whole = map.iter().all(|b| *b);
                assert_eq!(c.is_whole(msg_len), whole);
            }
        }
    }
}
