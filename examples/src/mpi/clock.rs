//! Clock offsets between ranks, NTP style: rank `r` stamps `t1`, rank 0 answers with its
//! time `t2`, rank `r` stamps `t4` on the answer. With a symmetric path, rank 0's clock
//! minus rank `r`'s is `t2 - (t1 + t4) / 2`, off by at most half the round trip
//! `t4 - t1`; the sample with the smallest round trip is kept. A second round with the
//! offset applied measures what is left (the residual skew).
//!
//! The clock is `CLOCK_MONOTONIC` (ranks on one host share it: their offsets come out
//! near 0, which checks the method).

/// `CLOCK_MONOTONIC`, ns.
pub fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid pointer given.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// One ping-pong: `t1` and `t4` on this rank's clock, `t2` on rank 0's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Sent, local clock, ns.
    pub t1: i64,
    /// Answered, rank 0's clock, ns.
    pub t2: i64,
    /// Answer received, local clock, ns.
    pub t4: i64,
}

/// The offset estimate of the samples: (rank 0's clock minus this one's, ns; the round
/// trip of the sample it came from, ns), from the sample with the smallest round trip.
/// `None` for no samples.
pub fn offset(samples: &[Sample]) -> Option<(i64, i64)> {
    samples
        .iter()
        .min_by_key(|s| s.t4 - s.t1)
        .map(|s| (s.t2 - (s.t1 + (s.t4 - s.t1) / 2), s.t4 - s.t1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_rtt_sample_wins_and_offset_is_exact_on_symmetric_paths() {
        // rank 0 is 1_000_000 ns ahead; symmetric 500 ns legs, then an asymmetric slow one
        let s = [
            Sample {
                t1: 100,
                t2: 1_000_100 + 9000,
                t4: 100 + 20_000,
            },
            Sample {
                t1: 5000,
                t2: 1_005_000 + 500,
                t4: 6000,
            },
        ];
        assert_eq!(offset(&s), Some((1_000_000, 1000)));
        assert_eq!(offset(&[]), None);
        let a = monotonic_ns();
        assert!(monotonic_ns() >= a);
    }
}
