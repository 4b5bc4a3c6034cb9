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
/// access first asks whether it spilled to the heap). An arrival before the last range
/// looks its place up in the others from a hint first: where the previous such arrival
/// went, plus one. Packets sprayed over `k` paths, each path's arriving in a batch (a GRO
/// receive of one UDP socket), fill the holes of a message in that order: the first batch
/// leaves a range every `k` packets, and each later one extends those ranges one after
/// the other, so the hint is right for all but the first packet of a batch and the
/// binary search runs once a batch, not once a packet.
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    /// Every range but the last, in order.
    head: SmallVec<[(u32, u32); 2]>,
    /// The last range is `[tail_start, tail_end)`; `tail_end == 0`: there is no range at
    /// all (a range is never empty, so one held ends above 0), and `head` is empty.
    tail_start: u32,
    tail_end: u32,
    /// The index in `head` where the next arrival before the last range likely goes (any
    /// value: it is checked before it is used).
    hint: u32,
    bytes: u64,
    /// Binary searches so far (the hint missed).
    #[cfg(test)]
    searches: std::cell::Cell<u32>,
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

    /// Index of the first range in `head` that ends after `offset` (`head.len()` when none
    /// does): the hint when it is that index, else by binary search.
    #[inline]
    fn head_index(&self, offset: u32) -> usize {
        let head: &[(u32, u32)] = &self.head;
        let g = self.hint as usize;
        let after_prev = match g.checked_sub(1) {
            None => true,
            Some(p) => head.get(p).is_some_and(|&(_, e)| e <= offset),
        };
        // (`after_prev` holds only for g == 0 or g - 1 < head.len(): g is in 0..=len)
        if after_prev && head.get(g).is_none_or(|&(_, e)| e > offset) {
            return g;
        }
        #[cfg(test)]
        self.searches.set(self.searches.get() + 1);
        head.partition_point(|&(_, e)| e <= offset)
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

    /// [`Coverage::check`] of a non-empty range `[offset, end)` that does not start where
    /// the last range ends.
    fn check_general(&self, offset: u32, end: u32) -> Result<(), CoverageError> {
        let (joins_before, joins_after) = if offset >= self.tail_end {
            // past every range (or the first one): touches none of them
            (false, false)
        } else if end > self.tail_start {
            // starts before the last range ends and ends after it starts
            return Err(CoverageError::Inconsistent);
        } else {
            // wholly before the last range
            let i = self.head_index(offset);
            let next_start = self.head.get(i).map_or(self.tail_start, |&(s, _)| s);
            if next_start < end {
                return Err(CoverageError::Inconsistent);
            }
            let joins_before = i > 0 && self.head.get(i - 1).is_some_and(|&(_, e)| e == offset);
            (joins_before, next_start == end)
        };
        if !joins_before && !joins_after && self.ranges() >= MAX_COVERAGE_HOLES {
            return Err(CoverageError::TooFragmented);
        }
        Ok(())
    }

    /// Whether adding `[offset, offset + len)`, which [`Coverage::check`] accepted, makes
    /// one range more (it touches no range that arrived: the first range, or a new hole).
    pub fn opens_range(&self, offset: u32, len: u32) -> bool {
        if len == 0 || self.tail_end == offset {
            return false;
        }
        if self.tail_end == 0 || offset > self.tail_end {
            return true;
        }
        // wholly before the last range (check accepted it)
        let end = offset.saturating_add(len);
        let i = self.head_index(offset);
        let joins_before = i > 0 && self.head.get(i - 1).is_some_and(|&(_, e)| e == offset);
        let next_start = self.head.get(i).map_or(self.tail_start, |&(s, _)| s);
        !joins_before && next_start != end
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

    /// [`Coverage::add`] of a range `[offset, end)` before the end of the last range: since
    /// [`Coverage::check`] accepted it, wholly before the last range (`end <= tail_start`).
    fn add_general(&mut self, offset: u32, end: u32) {
        let i = self.head_index(offset);
        let ranges = &mut self.head;
        let n = ranges.len();
        let joins_before = i > 0 && ranges[i - 1].1 == offset;
        let joins_after = if i < n {
            ranges[i].0 == end
        } else {
            self.tail_start == end
        };
        // where the next arrival likely goes: after this one's range (which, when two
        // ranges merged, is now at `i - 1`)
        let mut hint = i + 1;
        match (joins_before, joins_after) {
            (true, true) if i < n => {
                ranges[i - 1].1 = ranges[i].1;
                ranges.remove(i);
                hint = i;
            }
            (true, true) => {
                // joins the range before it and the last range: they become the last one
                self.tail_start = ranges[i - 1].0;
                ranges.pop();
            }
            (true, false) => ranges[i - 1].1 = end,
            (false, true) if i < n => ranges[i].0 = offset,
            (false, true) => self.tail_start = offset,
            (false, false) => ranges.insert(i, (offset, end)),
        }
        self.hint = hint as u32;
    }

    /// Whether every byte of a `msg_len`-byte message arrived.
    pub fn is_whole(&self, msg_len: u32) -> bool {
        self.bytes >= u64::from(msg_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Coverage {
        /// Every range, in order.
        fn all(&self) -> Vec<(u32, u32)> {
            (0..self.ranges())
                .map(|i| {
                    self.head
                        .get(i)
                        .copied()
                        .unwrap_or((self.tail_start, self.tail_end))
                })
                .collect()
        }
    }

    /// A 256-packet message sprayed over 16 paths, each path's 16 packets arriving
    /// together (PSN order 0, 16, .., 240, then 1, 17, ..): 16 ranges after the first
    /// path, one at the end; the hint finds every place but the first of each later path
    /// (one binary search in `check` and one in `add` for each of those 15 packets).
    #[test]
    fn a_sprayed_message_searches_once_a_path() {
        const PKT: u32 = 4096;
        let msg_len = 256 * PKT;
        let mut c = Coverage::default();
        for path in 0..16 {
            for k in 0..16 {
                let offset = (path + 16 * k) * PKT;
                c.check(offset, PKT, msg_len).unwrap();
                c.add(offset, PKT);
            }
            if path == 0 {
                let firsts: Vec<_> = (0..16)
                    .map(|k| (16 * k * PKT, (16 * k + 1) * PKT))
                    .collect();
                assert_eq!(c.all(), firsts);
            }
            if path == 14 {
                // ranges [16k, 16k + 15) packets, none merged yet
                assert_eq!(c.ranges(), 16);
                assert_eq!(c.all()[3], (48 * PKT, 63 * PKT));
            }
        }
        assert_eq!(c.all(), vec![(0, msg_len)]);
        assert_eq!(c.bytes(), u64::from(msg_len));
        assert!(c.is_whole(msg_len));
        assert_eq!(c.searches.get(), 30);
        // a repeat of any packet is refused, hint or no hint
        for psn in [0, 17, 255] {
            assert_eq!(
                c.check(psn * PKT, PKT, msg_len),
                Err(CoverageError::Inconsistent)
            );
        }
    }

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
                let runs: Vec<(u32, u32)> = (0..map.len())
                    .filter(|&i| map[i] && (i == 0 || !map[i - 1]))
                    .map(|i| {
                        let e = (i..map.len()).find(|&j| !map[j]).unwrap_or(map.len());
                        (i as u32, e as u32)
                    })
                    .collect();
                let bytes = map.iter().filter(|b| **b).count() as u64;
                assert_eq!(
                    (c.all(), c.ranges(), c.bytes()),
                    (runs.clone(), runs.len(), bytes)
                );
                let whole = map.iter().all(|b| *b);
                assert_eq!(c.is_whole(msg_len), whole);
            }
        }
    }
}
