//! Links: rate and propagation delay, and the exact serialisation arithmetic.
//!
//! Serialisation time of a frame of `B` bytes on a link of `R` bit/s is `8 B / R` seconds,
//! usually not a whole number of nanoseconds (4148 bytes at 100 Gb/s: 331.84 ns). A port
//! floors each frame's time and carries the remainder (in bit-nanoseconds, i.e. units of
//! `1 / R` ns) to its next frame, so each frame's time is within 1 ns of exact and `N`
//! back-to-back frames take exactly `floor(N x 8 B x 1e9 / R)` ns: the line rate is kept
//! exactly over any run.

use serde::Serialize;

/// Nanoseconds per second.
pub const NS_PER_S: u128 = 1_000_000_000;

/// A link's physical parameters (both directions are the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LinkSpec {
    /// Line rate, bit/s (> 0).
    pub rate_bps: u64,
    /// One-way propagation delay, ns.
    pub propagation_ns: u64,
}

impl LinkSpec {
    /// A link of `gbps` Gb/s and `propagation_ns`.
    pub fn gbps(gbps: u64, propagation_ns: u64) -> LinkSpec {
        LinkSpec {
            rate_bps: gbps * 1_000_000_000,
            propagation_ns,
        }
    }
}

/// Serialisation clock of one transmitting port: floors each frame's time, carries the
/// remainder. `carry` is in units of `1 / rate_bps` ns (always `< rate_bps`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SerialClock {
    carry: u64,
}

impl SerialClock {
    /// Serialisation time of the next `bytes`-byte frame at `rate_bps` (> 0), ns, carrying
    /// the fraction to the next call.
    pub fn next_ns(&mut self, bytes: usize, rate_bps: u64) -> u64 {
        let rate = rate_bps.max(1);
        // In 64 bits when it fits (any frame), else in 128.
        match (bytes as u64)
            .checked_mul(8 * NS_PER_S as u64)
            .and_then(|n| n.checked_add(self.carry))
        {
            Some(num) => {
                self.carry = num % rate;
                num / rate
            }
            None => {
                let num = bytes as u128 * 8 * NS_PER_S + u128::from(self.carry);
                let rate = u128::from(rate);
                // The remainder is below `rate`, a u64.
                self.carry = (num % rate) as u64;
                (num / rate) as u64
            }
        }
    }
}

/// Exact serialisation time of `bytes` at `rate_bps` rounded up, ns (what a single frame on
/// an idle port can never beat).
pub fn serialisation_ns_ceil(bytes: usize, rate_bps: u64) -> u64 {
    (bytes as u128 * 8 * NS_PER_S).div_ceil(u128::from(rate_bps.max(1))) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_of_4148_bytes_at_100g() {
        let mut c = SerialClock::default();
        // 331.84 ns: floored to 331, 0.84 ns carried.
        assert_eq!(c.next_ns(4148, 100_000_000_000), 331);
        assert_eq!(c.next_ns(4148, 100_000_000_000), 332); // 663.68 total -> 663
        assert_eq!(serialisation_ns_ceil(4148, 100_000_000_000), 332);
    }

    /// A size whose bit-nanoseconds overflow 64 bits takes the 128-bit path, exactly.
    #[test]
    fn a_huge_frame_is_timed_in_128_bits() {
        let mut c = SerialClock::default();
        // 2^62 bytes at 3 Gb/s: 2^65 x 1e9 / 3e9 = 2^65 / 3 ns.
        assert_eq!(
            c.next_ns(1 << 62, 3_000_000_000),
            ((1u128 << 65) / 3) as u64
        );
        assert_eq!(
            c.carry,
            ((1u128 << 65) * 1_000_000_000 % 3_000_000_000) as u64
        );
    }

    #[test]
    fn hundred_frames_take_exactly_the_line_rate_time() {
        let mut c = SerialClock::default();
        let total: u64 = (0..100).map(|_| c.next_ns(4148, 100_000_000_000)).sum();
        assert_eq!(total, 33_184);
        let mut c = SerialClock::default();
        let total: u64 = (0..3).map(|_| c.next_ns(1, 3_000_000_000)).sum();
        assert_eq!(total, 8); // 3 x 2.667 ns = 8.0
    }
}
