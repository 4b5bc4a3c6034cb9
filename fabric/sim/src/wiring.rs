//! Which spine each leaf uplink goes to, and how many lanes that puts on each spine.
//!
//! Rule (rotation): number the uplink lanes of all leaves one after the other, leaf by
//! leaf, `k = leaf x uplinks_per_leaf + j` for uplink `j` of `leaf`, and wire lane `k` to
//! spine `k mod spines`. With `T = leaves x uplinks_per_leaf` lanes and `S` spines:
//!
//! - spine `s` carries `floor(T / S) + 1` lanes if `s < T mod S`, else `floor(T / S)`:
//!   the fullest spine has `ceil(T / S)`, so a design with `S = ceil(T / P)` spines of
//!   `P` lanes never puts more than `P` lanes on a spine;
//! - each leaf's `u` uplinks are `u` consecutive lanes: it has `ceil(u / S)` lanes to
//!   `u mod S` spines and `floor(u / S)` to the others, and reaches every spine when
//!   `u >= S`;
//! - when `u` is a multiple of `S`, `k mod S = j mod S`: uplink `j` of every leaf goes to
//!   spine `j mod S`, `u / S` lanes per leaf-spine pair (the uniform fabric is unchanged).
//!
//! The rule it replaces sent uplink `j` of every leaf to spine `j mod S`; with `u` not a
//! multiple of `S`, spines `0..u mod S` took `ceil(u / S)` lanes of every leaf: at 1024
//! GPUs and 2:1 (26 leaves x 20 uplinks over 9 spines of 64 lanes) spines 0 and 1 needed
//! 26 x 3 = 78 lanes. Rotated, spines 0-6 carry 58 lanes and spines 7-8 carry 57.

use serde::Serialize;

/// The leaf-to-spine wiring of a two-tier fabric (see the module docs for the rule).
/// Counts are in lanes (logical ports); with `spines = 0` no lane has a spine and every
/// count is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UplinkWiring {
    /// Leaves.
    pub leaves: u32,
    /// Uplink lanes of each leaf.
    pub uplinks_per_leaf: u32,
    /// Spines.
    pub spines: u32,
}

/// Lanes `k` in `0..n` with `k mod m = r` (`r < m`, `m > 0`).
fn residues_below(n: u64, r: u64, m: u64) -> u64 {
    (n + m - 1 - r) / m
}

impl UplinkWiring {
    /// Uplink lanes of all leaves: `leaves x uplinks_per_leaf`.
    pub fn total_lanes(&self) -> u64 {
        u64::from(self.leaves) * u64::from(self.uplinks_per_leaf)
    }

    /// The spine (index among spines, `0..spines`) of uplink `uplink` of leaf `leaf`:
    /// `(leaf x uplinks_per_leaf + uplink) mod spines`. `None` when `leaf >= leaves`,
    /// `uplink >= uplinks_per_leaf` or `spines = 0`.
    pub fn spine_of(&self, leaf: u32, uplink: u32) -> Option<u32> {
        if leaf >= self.leaves || uplink >= self.uplinks_per_leaf || self.spines == 0 {
            return None;
        }
        let k = u64::from(leaf) * u64::from(self.uplinks_per_leaf) + u64::from(uplink);
        // The remainder is below `spines`, a u32.
        Some((k % u64::from(self.spines)) as u32)
    }

    /// Lanes (downlinks to leaves) of spine `spine`: `floor(T / S)`, plus one for the first
    /// `T mod S` spines. 0 when `spine >= spines`.
    pub fn spine_lanes(&self, spine: u32) -> u64 {
        if spine >= self.spines {
            return 0;
        }
        residues_below(self.total_lanes(), u64::from(spine), u64::from(self.spines))
    }

    /// Lanes between leaf `leaf` and spine `spine` (0 when either is out of range).
    pub fn leaf_spine_lanes(&self, leaf: u32, spine: u32) -> u64 {
        if leaf >= self.leaves || spine >= self.spines {
            return 0;
        }
        let (u, s, m) = (
            u64::from(self.uplinks_per_leaf),
            u64::from(spine),
            u64::from(self.spines),
        );
        let first = u64::from(leaf) * u;
        residues_below(first + u, s, m) - residues_below(first, s, m)
    }

    /// Lanes of the fullest spine: `ceil(T / S)` (0 without spines).
    pub fn max_spine_lanes(&self) -> u64 {
        match self.spines {
            0 => 0,
            s => self.total_lanes().div_ceil(u64::from(s)),
        }
    }

    /// Lanes of the emptiest spine: `floor(T / S)` (0 without spines).
    pub fn min_spine_lanes(&self) -> u64 {
        match self.spines {
            0 => 0,
            s => self.total_lanes() / u64::from(s),
        }
    }

    /// Spines carrying [`max_spine_lanes`](Self::max_spine_lanes): spines `0..n` (all of
    /// them when `T` is a multiple of `S`).
    pub fn fullest_spines(&self) -> u32 {
        match self.spines {
            0 => 0,
            s => match self.total_lanes() % u64::from(s) {
                0 => s,
                // Below `s`, a u32.
                r => r as u32,
            },
        }
    }

    /// Most lanes between one leaf and one spine: `ceil(u / S)` (0 without spines).
    pub fn max_leaf_spine_lanes(&self) -> u32 {
        match self.spines {
            0 => 0,
            s => self.uplinks_per_leaf.div_ceil(s),
        }
    }

    /// Fewest lanes between one leaf and one spine: `floor(u / S)` (0 without spines; 0
    /// means some leaf does not reach some spine).
    pub fn min_leaf_spine_lanes(&self) -> u32 {
        self.uplinks_per_leaf.checked_div(self.spines).unwrap_or(0)
    }

    /// Spines to which each leaf has [`max_leaf_spine_lanes`](Self::max_leaf_spine_lanes)
    /// lanes: `u mod S`, or all `S` when `u` is a multiple of `S`.
    pub fn fullest_pairs_per_leaf(&self) -> u32 {
        match self.uplinks_per_leaf.checked_rem(self.spines) {
            None => 0,
            Some(0) => self.spines,
            Some(r) => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(leaves: u32, uplinks_per_leaf: u32, spines: u32) -> UplinkWiring {
        UplinkWiring {
            leaves,
            uplinks_per_leaf,
            spines,
        }
    }

    /// Per-spine and per-pair lanes by walking every lane, against the closed forms.
    #[test]
    fn closed_forms_match_enumeration() {
        for leaves in 1..=7 {
            for u in 1..=11 {
                for spines in 1..=9 {
                    let wi = w(leaves, u, spines);
                    let mut per_spine = vec![0u64; spines as usize];
                    let mut per_pair = vec![0u64; (leaves * spines) as usize];
                    for l in 0..leaves {
                        for j in 0..u {
                            let s = wi.spine_of(l, j).unwrap();
                            per_spine[s as usize] += 1;
                            per_pair[(l * spines + s) as usize] += 1;
                        }
                    }
                    for s in 0..spines {
                        assert_eq!(wi.spine_lanes(s), per_spine[s as usize], "{wi:?} {s}");
                        for l in 0..leaves {
                            assert_eq!(
                                wi.leaf_spine_lanes(l, s),
                                per_pair[(l * spines + s) as usize],
                                "{wi:?} leaf {l} spine {s}"
                            );
                        }
                    }
                    let max = *per_spine.iter().max().unwrap();
                    let min = *per_spine.iter().min().unwrap();
                    assert_eq!((wi.max_spine_lanes(), wi.min_spine_lanes()), (max, min));
                    assert!(max - min <= 1, "{wi:?}");
                    let fullest = per_spine.iter().filter(|&&n| n == max).count();
                    assert_eq!(wi.fullest_spines() as usize, fullest, "{wi:?}");
                    let pmax = *per_pair.iter().max().unwrap();
                    let pmin = *per_pair.iter().min().unwrap();
                    assert_eq!(
                        (
                            u64::from(wi.max_leaf_spine_lanes()),
                            u64::from(wi.min_leaf_spine_lanes())
                        ),
                        (pmax, pmin),
                        "{wi:?}"
                    );
                    for l in 0..leaves {
                        let row = &per_pair[(l * spines) as usize..((l + 1) * spines) as usize];
                        let at_max = row.iter().filter(|&&n| n == pmax).count();
                        assert_eq!(wi.fullest_pairs_per_leaf() as usize, at_max, "{wi:?}");
                    }
                }
            }
        }
    }

    /// Uplinks a multiple of the spines: uplink j of every leaf on spine j mod S, as before.
    #[test]
    fn multiple_of_spines_keeps_j_mod_spines() {
        for (leaves, u, spines) in [(32, 32, 16), (4, 32, 2), (2, 32, 1), (4, 4, 4), (2, 2, 2)] {
            let wi = w(leaves, u, spines);
            for l in 0..leaves {
                for j in 0..u {
                    assert_eq!(wi.spine_of(l, j), Some(j % spines));
                }
            }
        }
    }

    /// 1024 GPUs on 32x400G switches with 200G NICs: 2:1 is 26 leaves x 20 uplinks over 9
    /// spines, 4:1 is 22 x 15 over 6, spines of 64 lanes.
    #[test]
    fn reference_2_to_1_and_4_to_1_spine_lanes() {
        let two = w(26, 20, 9);
        let lanes: Vec<u64> = (0..9).map(|s| two.spine_lanes(s)).collect();
        assert_eq!(lanes, [58, 58, 58, 58, 58, 58, 58, 57, 57]);
        assert_eq!((two.max_spine_lanes(), two.fullest_spines()), (58, 7));
        assert_eq!(
            (two.max_leaf_spine_lanes(), two.min_leaf_spine_lanes()),
            (3, 2)
        );
        assert_eq!(two.fullest_pairs_per_leaf(), 2);
        // Leaf 0 has 3 lanes to spines 0 and 1, leaf 1 to spines 2 and 3.
        let leaf = |l: u32| {
            (0..9)
                .map(|s| two.leaf_spine_lanes(l, s))
                .collect::<Vec<_>>()
        };
        assert_eq!(leaf(0), [3, 3, 2, 2, 2, 2, 2, 2, 2]);
        assert_eq!(leaf(1), [2, 2, 3, 3, 2, 2, 2, 2, 2]);
        let four = w(22, 15, 6);
        let lanes: Vec<u64> = (0..6).map(|s| four.spine_lanes(s)).collect();
        assert_eq!(lanes, [55; 6]);
        assert_eq!(four.fullest_spines(), 6);
        assert_eq!(four.fullest_pairs_per_leaf(), 3);
    }

    #[test]
    fn out_of_range_and_no_spines() {
        let wi = w(3, 3, 2);
        assert_eq!(wi.spine_of(3, 0), None);
        assert_eq!(wi.spine_of(0, 3), None);
        assert_eq!(wi.spine_lanes(2), 0);
        assert_eq!(wi.leaf_spine_lanes(3, 0), 0);
        let none = w(3, 3, 0);
        assert_eq!(none.spine_of(0, 0), None);
        assert_eq!(
            (
                none.max_spine_lanes(),
                none.min_spine_lanes(),
                none.fullest_spines()
            ),
            (0, 0, 0)
        );
        assert_eq!(
            (
                none.max_leaf_spine_lanes(),
                none.min_leaf_spine_lanes(),
                none.fullest_pairs_per_leaf()
            ),
            (0, 0, 0)
        );
        // Counts past u32: 2^32 - 1 leaves x 2^32 - 1 uplinks.
        let big = w(u32::MAX, u32::MAX, 1);
        assert_eq!(
            big.max_spine_lanes(),
            u64::from(u32::MAX) * u64::from(u32::MAX)
        );
        assert_eq!(big.spine_of(u32::MAX - 1, u32::MAX - 1), Some(0));
    }
}
