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
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    ranges: SmallVec<[(u32, u32); 2]>,
    bytes: u64,
}

impl Coverage {
    /// Bytes covered so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Disjoint ranges kept.
    pub fn ranges(&self) -> usize {
        self.ranges.len()
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
        // before `offset`: no overlap, and it joins that range)
        if self.ranges.last().is_some_and(|&(_, e)| e == offset) {
            return Ok(());
        }
        // the first range that ends after `offset`
        let i = self.ranges.partition_point(|&(_, e)| e <= offset);
        if let Some(&(s, _)) = self.ranges.get(i) {
            if s < end {
                return Err(CoverageError::Inconsistent);
            }
        }
        let joins_before = i > 0 && self.ranges[i - 1].1 == offset;
        let joins_after = self.ranges.get(i).is_some_and(|&(s, _)| s == end);
        if !joins_before && !joins_after && self.ranges.len() >= MAX_COVERAGE_HOLES {
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
        // fast path: in-order arrival extends the last range
        if let Some(last) = self.ranges.last_mut() {
            if last.1 == offset {
                last.1 = end;
                return;
            }
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= offset);
        let joins_before = i > 0 && self.ranges[i - 1].1 == offset;
        let joins_after = self.ranges.get(i).is_some_and(|&(s, _)| s == end);
        match (joins_before, joins_after) {
            (true, true) => {
                self.ranges[i - 1].1 = self.ranges[i].1;
                self.ranges.remove(i);
            }
            (true, false) => self.ranges[i - 1].1 = end,
            (false, true) => self.ranges[i].0 = offset,
            // after every range (the first packet of a message among them): appended
            // without `insert`'s shifting (a call of ~37 instructions)
            (false, false) if i == self.ranges.len() => self.ranges.push((offset, end)),
            (false, false) => self.ranges.insert(i, (offset, end)),
        }
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
}
