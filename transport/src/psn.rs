//! 24-bit packet sequence numbers (PSNs) with wrap-aware arithmetic.
//!
//! The BTH carries a 24-bit PSN (IBA vol 1, 9.2; RoCEv2). Inside the transport every PSN is
//! also kept as a 64-bit sequence number (`seq`) that never wraps; [`Psn::unwrap`] turns a
//! wire PSN back into a sequence number relative to a known one, in the manner of RFC 9000
//! appendix A.3 (packet-number decoding) and RFC 1982 (serial number arithmetic).
//!
//! ## The equal-distance rule
//!
//! Forward distance `d = (wire - last) mod 2^24`. If `d < 2^23` the PSN is read as `d`
//! ahead of `last`; if `d >= 2^23` it is read as `2^24 - d` behind. So a PSN exactly
//! `2^23` away (the equal-distance case) is always read as **behind** (older). A result
//! that would fall below sequence 0 is read forward instead.

use core::fmt;

/// Number of bits in a wire PSN.
pub const PSN_BITS: u32 = 24;
/// Modulus of PSN arithmetic, `2^24`.
pub const PSN_MODULUS: u32 = 1 << PSN_BITS;
/// Mask of the 24 PSN bits, `0x00FF_FFFF`.
pub const PSN_MASK: u32 = PSN_MODULUS - 1;
/// Half the PSN space, `2^23`: the largest distance that is read as "ahead".
pub const PSN_HALF: u32 = 1 << (PSN_BITS - 1);

/// A 24-bit PSN as carried in the BTH; the upper 8 bits of the inner `u32` are always 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Builds a PSN from the low 24 bits of `raw` (upper bits are discarded).
    #[inline]
    pub const fn new(raw: u32) -> Self {
        Psn(raw & PSN_MASK)
    }

    /// The PSN that a 64-bit sequence number is sent as (its low 24 bits).
    #[inline]
    pub const fn from_seq(seq: u64) -> Self {
        Psn((seq as u32) & PSN_MASK)
    }

    /// The 24-bit value, `0..=0x00FF_FFFF`.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// This PSN advanced by `n` (mod 2^24).
    #[inline]
    pub const fn add(self, n: u32) -> Self {
        Psn(self.0.wrapping_add(n) & PSN_MASK)
    }

    /// Forward distance from `self` to `other`, `(other - self) mod 2^24`, `0..2^24`.
    #[inline]
    pub const fn forward_to(self, other: Psn) -> u32 {
        other.0.wrapping_sub(self.0) & PSN_MASK
    }

    /// Signed distance from `self` to `other` by the equal-distance rule of this module:
    /// in `-2^23..2^23`, where exactly `2^23` away reads as `-2^23` (behind).
    #[inline]
    pub const fn distance_to(self, other: Psn) -> i32 {
        let d = self.forward_to(other);
        if d < PSN_HALF {
            d as i32
        } else {
            d as i32 - PSN_MODULUS as i32
        }
    }

    /// Whether `self` is strictly before `other` (wrap-aware, equal-distance rule).
    #[inline]
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance_to(other) > 0
    }

    /// Unwraps this wire PSN to the 64-bit sequence number closest to `last_seq`
    /// (equal-distance case: the older one; never below 0).
    ///
    /// Acceptance examples: last `0x00FF_FFFF`, wire `0x000000` gives `0x0100_0000`;
    /// last `0x0100_0005`, wire `0xFF_FFFE` gives `0x00FF_FFFE`.
    #[inline]
    pub const fn unwrap(self, last_seq: u64) -> u64 {
        let d = Psn::from_seq(last_seq).distance_to(self);
        if d >= 0 {
            last_seq + d as u64
        } else {
            let back = (-(d as i64)) as u64;
            if back > last_seq {
                // Would be negative: read forward instead.
                last_seq + (d as i64 + PSN_MODULUS as i64) as u64
            } else {
                last_seq - back
            }
        }
    }
}

impl fmt::Debug for Psn {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acceptance_1_unwrap_across_the_wrap() {
        assert_eq!(Psn::new(0x000000).unwrap(0x00FF_FFFF), 0x0100_0000);
        assert_eq!(Psn::new(0xFF_FFFE).unwrap(0x0100_0005), 0x00FF_FFFE);
    }

    #[test]
    fn equal_distance_reads_as_behind() {
        // last 0x0100_0000 (low 0), wire 0x80_0000: exactly 2^23 away -> behind.
        assert_eq!(Psn::new(0x80_0000).unwrap(0x0100_0000), 0x0080_0000);
        assert_eq!(Psn::new(0).distance_to(Psn::new(0x80_0000)), -(1 << 23));
        // one less than half is ahead
        assert_eq!(Psn::new(0x7F_FFFF).unwrap(0x0100_0000), 0x017F_FFFF);
        // would go negative: read forward
        assert_eq!(Psn::new(0xFF_FFFE).unwrap(5), 0xFF_FFFE);
        assert_eq!(Psn::new(0x80_0000).unwrap(0), 0x80_0000);
    }

    #[test]
    fn arithmetic_wraps() {
        assert_eq!(Psn::new(0xFF_FFFF).add(1), Psn::new(0));
        assert_eq!(Psn::new(0x1FF_FFFF), Psn::new(0xFF_FFFF));
        assert_eq!(Psn::new(0xFF_FFF8).forward_to(Psn::new(2)), 10);
        assert_eq!(Psn::new(0xFF_FFF8).distance_to(Psn::new(0xFF_FFF7)), -1);
        assert!(Psn::new(0xFF_FFFF).is_before(Psn::new(0)));
        assert!(!Psn::new(0).is_before(Psn::new(0)));
        assert_eq!(Psn::from_seq(0x0123_4567_89AB_CDEF), Psn::new(0xAB_CDEF));
        assert_eq!(format!("{:?}", Psn::new(5)), "Psn(0x000005)");
    }
}
