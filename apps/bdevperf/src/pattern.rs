//! The data a job writes and checks: verify patterns, derived from the
//! offset, the job's seed and a generation so that a stale block never
//! passes for a fresh one, and the `-U` stamps.

/// The pattern key of one write: offset, seed and generation.
#[inline]
pub fn pattern_key(offset_blocks: u64, seed: u64, gen: u64) -> u64 {
    let mut z = offset_blocks ^ seed.rotate_left(17) ^ gen.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline]
fn pattern_word(key: u64, i: usize) -> u64 {
    key ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

/// `-U`: stamps each block of a write with its block address, the job's
/// write count and the job id, so no two writes of the run carry the same
/// data. 24 bytes per block; the rest keeps whatever the buffer held.
pub fn stamp_unique(buf: &mut [u8], block_size: usize, offset_blocks: u64, write: u64, job: u64) {
    for (i, block) in buf.chunks_exact_mut(block_size).enumerate() {
        if let Some(head) = block.get_mut(..24) {
            head[..8].copy_from_slice(&(offset_blocks + i as u64).to_le_bytes());
            head[8..16].copy_from_slice(&write.to_le_bytes());
            head[16..].copy_from_slice(&job.to_le_bytes());
        }
    }
}

/// Fills `buf` with the pattern of `key`.
pub fn fill_pattern(buf: &mut [u8], key: u64) {
    for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&pattern_word(key, i).to_le_bytes());
    }
}

/// First differing byte: `(index, expected, actual)`.
pub fn check_pattern(buf: &[u8], key: u64) -> Option<(usize, u8, u8)> {
    for (i, chunk) in buf.chunks_exact(8).enumerate() {
        let want = pattern_word(key, i).to_le_bytes();
        if chunk != want {
            let j = chunk
                .iter()
                .zip(want.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some((i * 8 + j, want[j], chunk[j]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_roundtrip_and_mismatch() {
        let mut b = vec![0u8; 4096];
        let k = pattern_key(100, 7, 1);
        fill_pattern(&mut b, k);
        assert_eq!(check_pattern(&b, k), None);
        assert!(
            check_pattern(&b, pattern_key(100, 7, 2)).is_some(),
            "generation matters"
        );
        assert!(
            check_pattern(&b, pattern_key(101, 7, 1)).is_some(),
            "offset matters"
        );
        b[1000] ^= 1;
        assert_eq!(check_pattern(&b, k).map(|x| x.0), Some(1000));
    }

    #[test]
    fn stamp_marks_every_block() {
        let mut b = vec![0u8; 4 * 512];
        stamp_unique(&mut b, 512, 100, 9, 3);
        for i in 0..4 {
            let blk = &b[i * 512..];
            assert_eq!(blk[..8], (100 + i as u64).to_le_bytes());
            assert_eq!(blk[8..16], 9u64.to_le_bytes());
            assert_eq!(blk[16..24], 3u64.to_le_bytes());
        }
    }
}
