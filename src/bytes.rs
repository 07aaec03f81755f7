//! Checking that memory still holds a fill pattern, on every free (guards) and every free_track
//! eviction. Most checks pass, so the common case is compared a word at a time without an
//! early exit inside each 64-byte block, which the compiler vectorises; the slow byte-by-byte
//! walk is left to the reports.

const BLOCK: usize = 64;
const WORD: usize = core::mem::size_of::<u64>();

/// Whether every byte of `bytes` equals `value`.
pub fn all_equal(bytes: &[u8], value: u8) -> bool {
    let pattern = u64::from_ne_bytes([value; WORD]);
    let mut blocks = bytes.chunks_exact(BLOCK);
    for block in &mut blocks {
        let diff = block
            .chunks_exact(WORD)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()) ^ pattern)
            .fold(0, |acc, d| acc | d);
        if diff != 0 {
            return false;
        }
    }
    blocks.remainder().iter().all(|&b| b == value)
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
