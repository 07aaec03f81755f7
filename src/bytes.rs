//! Checking that memory still holds a fill pattern, on every free (guards) and every free_track
//! eviction. Most checks pass, so the common case is compared a word at a time, leaving early
//! at most once per 64-byte block; the slow byte-by-byte walk is left to the reports.

const BLOCK: usize = 64;
const WORD: usize = core::mem::size_of::<u64>();

/// Whether every byte of `bytes` equals `value`.
#[inline]
pub fn all_equal(bytes: &[u8], value: u8) -> bool {
    let pattern = u64::from_ne_bytes([value; WORD]);
    let mut words = bytes.chunks_exact(WORD);
    let mut diff = 0;
    for (i, w) in (&mut words).enumerate() {
        diff |= u64::from_ne_bytes(w.try_into().unwrap_or_default()) ^ pattern;
        // Leave early only once per block, so the loop body stays branch-light.
        if i % (BLOCK / WORD) == BLOCK / WORD - 1 && diff != 0 {
            return false;
        }
    }
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
