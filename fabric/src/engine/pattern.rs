//! The data pattern of `--verify` runs: every byte of message `i` is a function of
//! `(seed, i, byte offset)`, so sender and receiver agree without exchanging data, and a
//! receiver can check every byte of a message where it landed.

/// Odd step of the per-word Weyl sequence (2^64 / golden ratio).
const STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// The first word of message `msg` under `seed`: a 64-bit mix (SplitMix64 finaliser,
/// Steele et al. 2014) of `(seed, msg)`.
pub fn message_base(seed: u64, msg: u64) -> u64 {
    let mut z = seed ^ msg.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `word` (bytes `8 * word ..`, little-endian) of message `msg`: a Weyl sequence from
/// the message's base, so every 8-byte word of a message differs from its neighbours and
/// from the same word of other messages (one add per word: cheap enough to check every
/// byte at line rate).
pub fn pattern_word(seed: u64, msg: u64, word: u64) -> u64 {
    message_base(seed, msg).wrapping_add(word.wrapping_mul(STEP))
}

/// Fills `buf` with the pattern of message `msg` (byte `j` of `buf` is pattern byte `j`).
pub fn fill(buf: &mut [u8], seed: u64, msg: u64) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut v = message_base(seed, msg);
    for c in &mut chunks {
        c.copy_from_slice(&v.to_le_bytes());
        v = v.wrapping_add(STEP);
    }
    let rest = chunks.into_remainder();
    let last = v.to_le_bytes();
    rest.copy_from_slice(&last[..rest.len()]);
}

/// Bytes of `buf` that differ from the pattern of message `msg`.
pub fn count_bad(buf: &[u8], seed: u64, msg: u64) -> u64 {
    let mut bad = 0u64;
    let mut chunks = buf.chunks_exact(8);
    let mut v = message_base(seed, msg);
    for c in &mut chunks {
        let want = v.to_le_bytes();
        if c != want {
            bad += c.iter().zip(want).filter(|(a, b)| **a != *b).count() as u64;
        }
        v = v.wrapping_add(STEP);
    }
    let rest = chunks.remainder();
    let last = v.to_le_bytes();
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
        let other = count_bad(&b, 7, 43);
        // Every word differs (a constant offset); 903 of 1003 bytes do.
        assert_eq!(other, 903);
        b[0] ^= 1;
        b[500] ^= 0xFF;
        b[1002] = b[1002].wrapping_add(1);
        assert_eq!(count_bad(&b, 7, 42), 3);
        assert_eq!(pattern_word(0, 0, 0), 0);
        assert_eq!(pattern_word(0, 0, 1), STEP);
        assert_eq!(
            u64::from_le_bytes(b[8..16].try_into().unwrap()),
            pattern_word(7, 42, 1)
        );
    }
}
