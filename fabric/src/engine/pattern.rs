//! The data pattern of `--verify` runs: every byte of message `i` is a function of
//! `(seed, i, byte offset)`, so sender and receiver agree without exchanging data, and a
//! receiver can check every byte of a message where it landed.

/// Byte `offset` of message `msg` under `seed`: the little-endian bytes of a 64-bit mix
/// (SplitMix64 finaliser, Steele et al. 2014) of `(seed, msg, offset / 8)`.
pub fn pattern_word(seed: u64, msg: u64, word: u64) -> u64 {
    let mut z =
        seed ^ msg.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ word.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with the pattern of message `msg` (byte `j` of `buf` is pattern byte `j`).
pub fn fill(buf: &mut [u8], seed: u64, msg: u64) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut w = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&pattern_word(seed, msg, w).to_le_bytes());
        w += 1;
    }
    let rest = chunks.into_remainder();
    let last = pattern_word(seed, msg, w).to_le_bytes();
    rest.copy_from_slice(&last[..rest.len()]);
}

/// Bytes of `buf` that differ from the pattern of message `msg`.
pub fn count_bad(buf: &[u8], seed: u64, msg: u64) -> u64 {
    let mut bad = 0u64;
    let mut chunks = buf.chunks_exact(8);
    let mut w = 0u64;
    for c in &mut chunks {
        let want = pattern_word(seed, msg, w).to_le_bytes();
        if c != want {
            bad += c.iter().zip(want).filter(|(a, b)| **a != *b).count() as u64;
        }
        w += 1;
    }
    let rest = chunks.remainder();
    let last = pattern_word(seed, msg, w).to_le_bytes();
    bad += rest.iter().zip(last).filter(|(a, b)| **a != *b).count() as u64;
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_count_is_zero_and_flips_are_counted_exactly() {
        let mut b = vec![0u8; 1003];
        fill(&mut b, 7, 42);
        assert_eq!(count_bad(&b, 7, 42), 0);
        // Another message's pattern differs in almost every byte.
        assert!(count_bad(&b, 7, 43) > 990);
        b[0] ^= 1;
        b[500] ^= 0xFF;
        b[1002] = b[1002].wrapping_add(1);
        assert_eq!(count_bad(&b, 7, 42), 3);
        assert_eq!(pattern_word(0, 0, 0), 0);
        assert_ne!(pattern_word(0, 0, 1), 0);
    }
}
