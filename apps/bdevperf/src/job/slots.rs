//! A job's slots: the I/O-size units of the bdev it works on.

use super::JobConfig;

/// Uniform in `0..n` without a division (Lemire).
#[inline]
pub(super) fn below(r: u64, n: u64) -> u64 {
    u64::try_from((u128::from(r) * u128::from(n)) >> 64).unwrap_or(0)
}

/// The job's slots `(first, count)` in I/O-size units: a job file's block
/// range (whole I/Os inside it, the first one holding `offset`, as SPDK
/// rounds), or the job's `-C` slice of the bdev.
pub(super) fn slots_of(
    cfg: &JobConfig,
    num_blocks: u64,
    io_blocks: u64,
) -> anyhow::Result<(u64, u64)> {
    let (first, count) = if let Some((offset, length)) = cfg.range_blocks {
        let length = if length == 0 {
            num_blocks.saturating_sub(offset)
        } else {
            length
        };
        if offset
            .checked_add(length)
            .is_none_or(|end| end > num_blocks)
        {
            anyhow::bail!(
                "offset {offset} + length {length} blocks is past the end of bdev {} ({num_blocks} blocks)",
                cfg.bdev
            );
        }
        (offset / io_blocks, length / io_blocks)
    } else {
        let (index, count) = cfg.slice;
        let per = num_blocks / io_blocks / count.max(1);
        (index * per, per)
    };
    if count == 0 {
        anyhow::bail!(
            "bdev {} is smaller than one I/O of {} bytes per job",
            cfg.bdev,
            cfg.io_size
        );
    }
    Ok((first, count))
}
