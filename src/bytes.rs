//! Checking that memory still holds a fill pattern, on every free (guards) and every free_track
//! eviction. Most checks pass, so the common case is compared a 64-byte block at a time,
//! leaving early at most once per block; the slow byte-by-byte walk is left to the reports.

const BLOCK: usize = 64;
const WORD: usize = core::mem::size_of::<u64>();

/// Whether every byte of `bytes` equals `value`.
#[inline]
pub fn all_equal(bytes: &[u8], value: u8) -> bool {
    let pattern = u64::from_ne_bytes([value; WORD]);
    let differs = |word: &[u8]| u64::from_ne_bytes(word.try_into().unwrap_or_default()) ^ pattern;
    let mut blocks = bytes.chunks_exact(BLOCK);
    for block in &mut blocks {
        // A fixed-size body without exits: the compiler turns it into a few vector
        // instructions (16 bytes at a time on x86-64's baseline SSE2, NEON on arm64).
        let diff = block.chunks_exact(WORD).fold(0, |d, w| d | differs(w));
        if diff != 0 {
            return false;
        }
    }
    let mut words = blocks.remainder().chunks_exact(WORD);
    let diff = (&mut words).fold(0, |d, w| d | differs(w));
    diff == 0 && words.remainder().iter().all(|&b| b == value)
}

#[cfg(test)]
mod tests {
    use super::all_equal;

    #[test]
    fn finds_any_single_different_byte_at_any_length() {
        for len in [0, 1, 7, 8, 63, 64, 65, 200, 4096 + 3] {
            let mut v = vec![0xefu8; len];
            assert!(all_equal(&v, 0xef), "len {len}");
            for i in 0..len {
                v[i] = 0xee;
                assert!(!all_equal(&v, 0xef), "len {len} byte {i}");
                v[i] = 0xef;
            }
        }
    }
}
