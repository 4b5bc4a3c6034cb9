//! Slot accounting for the registered send and receive buffer pools.
//!
//! A pool is one registered memory region (one MR, one lkey) cut into `slots` equal slots of
//! `slot_bytes` bytes; a slot is named by its index, which is also the low half of the
//! `wr_id` of the work request that uses it (see [`super::batch::WrId`]). This module only
//! keeps the books (which slot is free, which is lent out) so it is testable without a
//! device; the memory itself lives in the verbs backend. Invariants, checked and counted:
//! a slot is lent out at most once at a time (a second `free` is
//! [`PoolError::DoubleFree`]), an index past the pool is [`PoolError::OutOfRange`], and an
//! empty pool answers [`PoolError::Exhausted`] instead of blocking.

use thiserror::Error;

/// Index of a slot in a [`SlotPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(pub u32);

/// Why a pool call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum PoolError {
    /// Every slot is lent out.
    #[error("buffer pool exhausted: all {slots} slots in use")]
    Exhausted {
        /// Slots in the pool.
        slots: u32,
    },
    /// The slot was already free.
    #[error("double free of slot {0}")]
    DoubleFree(u32),
    /// The slot index is past the pool.
    #[error("slot {slot} out of range (pool has {slots})")]
    OutOfRange {
        /// The index given.
        slot: u32,
        /// Slots in the pool.
        slots: u32,
    },
    /// A pool of zero slots or zero-byte slots, or one whose size overflows `usize`.
    #[error("bad pool shape: {slots} slots of {slot_bytes} bytes")]
    BadShape {
        /// Slots asked for.
        slots: u32,
        /// Bytes per slot asked for.
        slot_bytes: usize,
    },
}

/// Counters of a [`SlotPool`], never reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Successful allocations.
    pub allocs: u64,
    /// Successful frees.
    pub frees: u64,
    /// Allocations refused because the pool was empty.
    pub exhausted: u64,
    /// Frees refused because the slot was already free.
    pub double_frees: u64,
}

/// Free list and ownership bits of `slots` equal slots.
#[derive(Clone, Debug)]
pub struct SlotPool {
    slot_bytes: usize,
    /// LIFO free list (a recently freed slot is still warm in cache).
    free: Vec<u32>,
    in_use: Vec<bool>,
    stats: PoolStats,
}

impl SlotPool {
    /// `slots` slots of `slot_bytes` bytes each, all free.
    ///
    /// # Errors
    /// [`PoolError::BadShape`] when either is zero or `slots * slot_bytes` overflows.
    pub fn new(slots: u32, slot_bytes: usize) -> Result<SlotPool, PoolError> {
        if slots == 0 || slot_bytes == 0 || (slots as usize).checked_mul(slot_bytes).is_none() {
            return Err(PoolError::BadShape { slots, slot_bytes });
        }
        Ok(SlotPool {
            slot_bytes,
            // Reverse so the first allocations hand out 0, 1, 2, ...
            free: (0..slots).rev().collect(),
            in_use: vec![false; slots as usize],
            stats: PoolStats::default(),
        })
    }

    /// Slots in the pool.
    pub fn slots(&self) -> u32 {
        self.in_use.len() as u32
    }

    /// Bytes per slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Bytes of the whole region: `slots * slot_bytes`.
    pub fn region_bytes(&self) -> usize {
        self.in_use.len() * self.slot_bytes
    }

    /// Byte offset of `slot` in the region.
    ///
    /// # Errors
    /// [`PoolError::OutOfRange`].
    pub fn offset_of(&self, slot: SlotId) -> Result<usize, PoolError> {
        self.check(slot)?;
        Ok(slot.0 as usize * self.slot_bytes)
    }

    /// Free slots.
    pub fn available(&self) -> u32 {
        self.free.len() as u32
    }

    /// Slots lent out.
    pub fn in_use(&self) -> u32 {
        self.slots() - self.available()
    }

    /// Whether `slot` is lent out (false for an out-of-range index).
    pub fn is_in_use(&self, slot: SlotId) -> bool {
        self.in_use.get(slot.0 as usize).copied().unwrap_or(false)
    }

    /// Counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Lends out a free slot.
    ///
    /// # Errors
    /// [`PoolError::Exhausted`] (counted) when none is free.
    pub fn alloc(&mut self) -> Result<SlotId, PoolError> {
        match self.free.pop() {
            Some(s) => {
                self.in_use[s as usize] = true;
                self.stats.allocs += 1;
                Ok(SlotId(s))
            }
            None => {
                self.stats.exhausted += 1;
                Err(PoolError::Exhausted {
                    slots: self.slots(),
                })
            }
        }
    }

    /// Returns a lent-out slot.
    ///
    /// # Errors
    /// [`PoolError::DoubleFree`] (counted; the pool is unchanged) when it is already free,
    /// [`PoolError::OutOfRange`].
    pub fn free(&mut self, slot: SlotId) -> Result<(), PoolError> {
        self.check(slot)?;
        let bit = &mut self.in_use[slot.0 as usize];
        if !*bit {
            self.stats.double_frees += 1;
            return Err(PoolError::DoubleFree(slot.0));
        }
        *bit = false;
        self.free.push(slot.0);
        self.stats.frees += 1;
        Ok(())
    }

    fn check(&self, slot: SlotId) -> Result<(), PoolError> {
        if (slot.0 as usize) < self.in_use.len() {
            Ok(())
        } else {
            Err(PoolError::OutOfRange {
                slot: slot.0,
                slots: self.slots(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_accounting_exact() {
        let mut p = SlotPool::new(4, 4136).unwrap();
        assert_eq!(p.region_bytes(), 16_544);
        let a: Vec<SlotId> = (0..4).map(|_| p.alloc().unwrap()).collect();
        assert_eq!(a, vec![SlotId(0), SlotId(1), SlotId(2), SlotId(3)]);
        assert_eq!(p.offset_of(SlotId(3)).unwrap(), 12_408);
        assert_eq!(p.available(), 0);
        assert_eq!(p.in_use(), 4);
        assert_eq!(p.alloc(), Err(PoolError::Exhausted { slots: 4 }));
        assert_eq!(p.alloc(), Err(PoolError::Exhausted { slots: 4 }));
        p.free(SlotId(2)).unwrap();
        assert_eq!(p.alloc().unwrap(), SlotId(2));
        p.free(SlotId(1)).unwrap();
        p.free(SlotId(0)).unwrap();
        assert_eq!(
            p.stats(),
            PoolStats {
                allocs: 5,
                frees: 3,
                exhausted: 2,
                double_frees: 0
            }
        );
        assert_eq!(p.in_use(), 2);
    }

    #[test]
    fn double_free_detected_and_pool_unchanged() {
        let mut p = SlotPool::new(2, 64).unwrap();
        let s = p.alloc().unwrap();
        p.free(s).unwrap();
        assert_eq!(p.free(s), Err(PoolError::DoubleFree(0)));
        // Never-allocated slot too.
        assert_eq!(p.free(SlotId(1)), Err(PoolError::DoubleFree(1)));
        assert_eq!(p.available(), 2);
        assert_eq!(p.stats().double_frees, 2);
        assert_eq!(p.stats().frees, 1);
        // The free list holds each slot once: two allocs, then exhausted.
        p.alloc().unwrap();
        p.alloc().unwrap();
        assert!(matches!(p.alloc(), Err(PoolError::Exhausted { .. })));
    }

    #[test]
    fn out_of_range_and_bad_shape() {
        let mut p = SlotPool::new(2, 64).unwrap();
        assert_eq!(
            p.free(SlotId(2)),
            Err(PoolError::OutOfRange { slot: 2, slots: 2 })
        );
        assert_eq!(
            p.offset_of(SlotId(9)),
            Err(PoolError::OutOfRange { slot: 9, slots: 2 })
        );
        assert!(!p.is_in_use(SlotId(9)));
        assert_eq!(
            SlotPool::new(0, 64).unwrap_err(),
            PoolError::BadShape {
                slots: 0,
                slot_bytes: 64
            }
        );
        assert!(SlotPool::new(2, 0).is_err());
        assert!(SlotPool::new(u32::MAX, usize::MAX / 2).is_err());
    }
}
