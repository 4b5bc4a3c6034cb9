//! A fast, unkeyed hasher for the small integer-keyed maps on the packet path (rkey -> region
//! slot, EV -> path index).
//!
//! Only this endpoint inserts into those maps (rkeys it drew, EVs from its configuration),
//! so a peer cannot grow a collision chain: a hostile lookup key costs one probe sequence
//! like any other, and SipHash's keyed defence buys nothing there while costing ~60
//! instructions per lookup. The hash multiplies by the 64-bit golden-ratio constant and
//! folds the high half into the low, so keys that differ only in their high bits (EVs
//! `0x10000`, `0x20000`, ...) still land in different buckets.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`KeyHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// Multiply-fold hasher for integer keys (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeyHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        let h = (self.0.rotate_left(5) ^ n).wrapping_mul(K);
        self.0 = h ^ (h >> 32);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash(n: u32) -> u64 {
        BuildHasherDefault::<KeyHasher>::default().hash_one(n)
    }

    #[test]
    fn high_bits_reach_the_low_bits() {
        // EVs that differ only above bit 16 must not share their low (bucket) bits
        let low: std::collections::HashSet<u64> =
            (1..=64u32).map(|i| hash(i << 16) & 0x3F).collect();
        assert!(low.len() > 32, "{} distinct buckets of 64", low.len());
        assert_eq!(hash(7), hash(7));
        assert_ne!(hash(7), hash(8));
    }

    #[test]
    fn map_works_with_hostile_lookups() {
        let mut m: FastMap<u32, usize> = FastMap::default();
        for i in 0..100u32 {
            m.insert(i ^ 0x8000_1200, i as usize);
        }
        for i in 0..100u32 {
            assert_eq!(m.get(&(i ^ 0x8000_1200)), Some(&(i as usize)));
        }
        assert_eq!(m.get(&0xDEAD_BEEF), None);
        assert_eq!(m.len(), 100);
    }
}
