//! Who sends to whom: the streams of a pattern, and the QPs a rank needs for them.

use super::opts::Pattern;

/// One direction of traffic: `src` writes messages into `dst`'s region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stream {
    /// Sending rank.
    pub src: u32,
    /// Receiving rank.
    pub dst: u32,
}

/// SplitMix64 step (the permutation's generator: the same on every rank for one seed).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A cyclic permutation of `0..n` (Sattolo's algorithm: one cycle, so no rank maps to
/// itself) drawn from `seed`: `perm[r]` is where rank `r` sends.
pub fn derangement(n: u32, seed: u64) -> Vec<u32> {
    let mut p: Vec<u32> = (0..n).collect();
    let mut s = seed;
    for i in (1..n as usize).rev() {
        let j = (splitmix(&mut s) % i as u64) as usize; // j < i
        p.swap(i, j);
    }
    p
}

/// Every stream of `pattern` among `n` ranks, sorted. The allreduce's are its ring's
/// (`r` to `r + 1`).
pub fn streams(pattern: Pattern, n: u32, root: u32, seed: u64) -> Vec<Stream> {
    let mut v = Vec::new();
    match pattern {
        Pattern::Pairs => {
            for r in 0..n {
                v.push(Stream { src: r, dst: r ^ 1 });
            }
        }
        Pattern::Permutation => {
            for (r, d) in derangement(n, seed).into_iter().enumerate() {
                v.push(Stream {
                    src: r as u32,
                    dst: d,
                });
            }
        }
        Pattern::AllToAll => {
            for s in 0..n {
                for d in (0..n).filter(|d| *d != s) {
                    v.push(Stream { src: s, dst: d });
                }
            }
        }
        Pattern::Incast => {
            for s in (0..n).filter(|s| *s != root) {
                v.push(Stream { src: s, dst: root });
            }
        }
        Pattern::OneToAll => {
            for d in (0..n).filter(|d| *d != root) {
                v.push(Stream { src: root, dst: d });
            }
        }
        Pattern::Allreduce => {
            for r in 0..n {
                v.push(Stream {
                    src: r,
                    dst: (r + 1) % n,
                });
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

/// The peers `rank` needs a QP with (it sends to them or they send to it), ascending:
/// one QP per pair of ranks carries both directions.
pub fn peers(streams: &[Stream], rank: u32) -> Vec<u32> {
    let mut p: Vec<u32> = streams
        .iter()
        .filter_map(|s| {
            if s.src == rank {
                Some(s.dst)
            } else if s.dst == rank {
                Some(s.src)
            } else {
                None
            }
        })
        .collect();
    p.sort_unstable();
    p.dedup();
    p
}

/// Destinations `rank` sends to, ascending.
pub fn destinations(streams: &[Stream], rank: u32) -> Vec<u32> {
    streams
        .iter()
        .filter(|s| s.src == rank)
        .map(|s| s.dst)
        .collect()
}

/// Sources that send to `rank`, ascending.
pub fn sources(streams: &[Stream], rank: u32) -> Vec<u32> {
    let mut v: Vec<u32> = streams
        .iter()
        .filter(|s| s.dst == rank)
        .map(|s| s.src)
        .collect();
    v.sort_unstable();
    v
}

/// The pattern seed of the stream `src -> dst` (the `--verify` pattern of its messages):
/// distinct per direction, so data that lands at the wrong rank fails the check.
pub fn stream_seed(base: u64, src: u32, dst: u32) -> u64 {
    let mut s = base ^ (u64::from(src) << 32 | u64::from(dst));
    splitmix(&mut s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_have_the_exact_streams() {
        let s = |src, dst| Stream { src, dst };
        assert_eq!(
            streams(Pattern::Incast, 4, 0, 1),
            vec![s(1, 0), s(2, 0), s(3, 0)]
        );
        assert_eq!(streams(Pattern::OneToAll, 3, 2, 1), vec![s(2, 0), s(2, 1)]);
        assert_eq!(streams(Pattern::AllToAll, 4, 0, 1).len(), 12);
        assert_eq!(
            streams(Pattern::Pairs, 4, 0, 1),
            vec![s(0, 1), s(1, 0), s(2, 3), s(3, 2)]
        );
        assert_eq!(
            streams(Pattern::Allreduce, 3, 0, 1),
            vec![s(0, 1), s(1, 2), s(2, 0)]
        );
        // two ranks: the ring's two directions on one QP
        let a2 = streams(Pattern::Allreduce, 2, 0, 1);
        assert_eq!(a2, vec![s(0, 1), s(1, 0)]);
        assert_eq!(peers(&a2, 0), vec![1]);
        let i = streams(Pattern::Incast, 4, 0, 1);
        assert_eq!(peers(&i, 0), vec![1, 2, 3]);
        assert_eq!(peers(&i, 2), vec![0]);
        assert_eq!(sources(&i, 0), vec![1, 2, 3]);
        assert_eq!(destinations(&i, 3), vec![0]);
        assert!(destinations(&i, 0).is_empty());
    }

    #[test]
    fn derangements_are_single_cycles_and_seeded() {
        for n in 2..40u32 {
            for seed in 0..5 {
                let p = derangement(n, seed);
                let mut seen = vec![false; n as usize];
                let mut r = 0u32;
                for _ in 0..n {
                    assert!(!seen[r as usize]);
                    seen[r as usize] = true;
                    r = p[r as usize];
                }
                assert_eq!(r, 0, "one cycle through all {n}");
                assert_eq!(p, derangement(n, seed));
            }
        }
        assert_ne!(derangement(16, 1), derangement(16, 2));
        assert_ne!(stream_seed(7, 1, 2), stream_seed(7, 2, 1));
    }
}
