//! The copy arithmetic: which bytes move where, in I/O units of `--bs`
//! bytes, with spdk_dd's checks and messages. Pure functions, no I/O.
//!
//! The input region starts at `skip * bs`, the output region at
//! `seek * bs`; the copy is `count * bs` bytes, or what the input has after
//! the skip. Unit `i` moves `[i * bs, i * bs + len)` of the region, `len`
//! being `bs` except for a shorter last unit. A side with a block size
//! (a bdev, a block device, a file opened `direct`) is read and written in
//! whole blocks: the last unit's read is rounded up (a file gives back
//! what it has), and its write, when rounded up, keeps the output's bytes
//! past `len` (read first: read-modify-write).

use anyhow::{bail, Result};

/// What the plan needs to know about one side of the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Side {
    /// Size in bytes when it is fixed (a bdev, a block device, an input
    /// file); `None` when it is not: an output file grows, a character
    /// device has no size.
    pub size: Option<u64>,
    /// Offsets and lengths are multiples of this (1 for buffered files).
    pub block_size: u64,
}

/// What the command line asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// I/O unit size in bytes (> 0).
    pub bs: u64,
    /// I/O units to copy; `None` = all of the input after the skip.
    pub count: Option<u64>,
    /// I/O units skipped at the start of the input.
    pub skip: u64,
    /// I/O units skipped at the start of the output.
    pub seek: u64,
    /// I/O units in flight (> 0).
    pub qd: u32,
}

/// A checked copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// I/O unit size in bytes.
    pub bs: u64,
    /// First input byte.
    pub in_start: u64,
    /// First output byte.
    pub out_start: u64,
    /// Bytes to copy.
    pub copy_size: u64,
    /// I/O units: `copy_size / bs` rounded up.
    pub units: u64,
    /// I/O units in flight: the request's, at most `units`.
    pub qd: u32,
    /// The input's block size.
    pub in_block: u64,
    /// The output's block size.
    pub out_block: u64,
}

/// One I/O unit of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    /// Input byte offset.
    pub in_off: u64,
    /// Output byte offset.
    pub out_off: u64,
    /// Bytes that move (`<= bs`).
    pub len: u64,
    /// Bytes to read: `len` rounded up to the input's block size.
    pub read_len: u64,
    /// Bytes to write: `len` rounded up to the output's block size; more
    /// than `len` means the output's bytes past `len` are read first.
    pub write_len: u64,
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// Checks the request against both sides and plans the copy.
///
/// # Errors
/// spdk_dd's messages: an I/O unit smaller than or not a multiple of a
/// side's block size, `--skip`, `--seek` or `--count` beyond a side's end;
/// also an output too small for the whole input, and an input of unknown
/// size without `--count`.
pub fn plan(req: Request, input: Side, output: Side) -> Result<Plan> {
    let bs = req.bs;
    let (ib, ob) = (input.block_size.max(1), output.block_size.max(1));
    if bs < ib || bs < ob {
        bail!(
            "--bs value cannot be less than input ({ib}) neither output ({ob}) native block size"
        );
    }
    if !bs.is_multiple_of(ib) {
        bail!("--bs value must be a multiple of input native block size ({ib})");
    }
    if !bs.is_multiple_of(ob) {
        bail!("--bs value must be a multiple of output native block size ({ob})");
    }
    let Some(in_start) = req.skip.checked_mul(bs) else {
        bail!("--skip value too big ({})", req.skip);
    };
    if let Some(size) = input.size {
        if in_start > size {
            bail!(
                "--skip value too big ({}) - only {} blocks available in input",
                req.skip,
                size / bs
            );
        }
    }
    let write_size = match req.count {
        None => None,
        Some(c) => match c.checked_mul(bs) {
            Some(w) => Some(w),
            None => bail!("--count value too big ({c})"),
        },
    };
    let copy_size = match (write_size, input.size) {
        (Some(w), Some(size)) if in_start.checked_add(w).is_none_or(|end| end > size) => bail!(
            "--count value too big ({}) - only {} blocks available from input",
            req.count.unwrap_or(0),
            (size - in_start) / bs
        ),
        (Some(w), _) => w,
        (None, Some(size)) => size - in_start,
        (None, None) => bail!("--count must be given: the input has no size (a character device)"),
    };
    let Some(out_start) = req.seek.checked_mul(bs) else {
        bail!("--seek value too big ({})", req.seek);
    };
    if let Some(size) = output.size {
        if out_start > size {
            bail!(
                "--seek value too big ({}) - only {} blocks available in output",
                req.seek,
                size / bs
            );
        }
        if out_start
            .checked_add(copy_size)
            .is_none_or(|end| end > size)
        {
            match req.count {
                Some(c) => bail!(
                    "--count value too big ({c}) - only {} blocks available in output",
                    (size - out_start) / bs
                ),
                None => bail!(
                    "input too big for output: {copy_size} bytes to copy, only {} bytes available in output",
                    size - out_start
                ),
            }
        }
    } else if out_start.checked_add(copy_size).is_none() {
        bail!("--seek value too big ({})", req.seek);
    }
    let units = copy_size.div_ceil(bs);
    let qd = u32::try_from(units).map_or(req.qd, |u| req.qd.min(u));
    Ok(Plan {
        bs,
        in_start,
        out_start,
        copy_size,
        units,
        qd,
        in_block: ib,
        out_block: ob,
    })
}

impl Plan {
    /// Unit `i` (`i < units`).
    #[must_use]
    pub fn unit(&self, i: u64) -> Unit {
        let rel = i * self.bs;
        let len = self.bs.min(self.copy_size - rel);
        Unit {
            in_off: self.in_start + rel,
            out_off: self.out_start + rel,
            len,
            read_len: round_up(len, self.in_block),
            write_len: round_up(len, self.out_block),
        }
    }

    /// The output's end: where an output file ends after the copy.
    #[must_use]
    pub fn out_end(&self) -> u64 {
        self.out_start + self.copy_size
    }
}

/// The data ranges of an input file (`--sparse`): sorted, disjoint
/// `[start, end)` byte ranges; everything else is a hole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataMap(Vec<(u64, u64)>);

impl DataMap {
    /// From sorted, disjoint ranges.
    #[must_use]
    pub fn new(ranges: Vec<(u64, u64)>) -> DataMap {
        debug_assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0));
        DataMap(ranges)
    }

    /// The ranges.
    #[cfg(test)]
    #[must_use]
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.0
    }

    /// Whether `[lo, hi)` overlaps any data range.
    #[must_use]
    pub fn has_data(&self, lo: u64, hi: u64) -> bool {
        // The first range that ends after `lo`.
        let i = self.0.partition_point(|&(_, end)| end <= lo);
        self.0.get(i).is_some_and(|&(start, _)| start < hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(bs: u64, count: Option<u64>, skip: u64, seek: u64) -> Request {
        Request {
            bs,
            count,
            skip,
            seek,
            qd: 2,
        }
    }

    fn fixed(size: u64, block_size: u64) -> Side {
        Side {
            size: Some(size),
            block_size,
        }
    }

    const GROWS: Side = Side {
        size: None,
        block_size: 1,
    };

    fn err(r: Request, i: Side, o: Side) -> String {
        plan(r, i, o).unwrap_err().to_string()
    }

    #[test]
    fn whole_input_with_a_short_last_unit() {
        let p = plan(req(4096, None, 0, 0), fixed(10_000, 1), GROWS).unwrap();
        assert_eq!((p.copy_size, p.units, p.qd), (10_000, 3, 2));
        assert_eq!(
            p.unit(2),
            Unit {
                in_off: 8192,
                out_off: 8192,
                len: 1808,
                read_len: 1808,
                write_len: 1808
            }
        );
        assert_eq!(p.out_end(), 10_000);
    }

    #[test]
    fn skip_seek_and_count_in_units() {
        // 100 units of 4 KiB in; skip 10, seek 5, copy 20.
        let p = plan(
            req(4096, Some(20), 10, 5),
            fixed(100 * 4096, 512),
            fixed(50 * 4096, 4096),
        )
        .unwrap();
        assert_eq!(
            (p.in_start, p.out_start, p.copy_size),
            (40_960, 20_480, 81_920)
        );
        assert_eq!(p.units, 20);
        let u = p.unit(19);
        assert_eq!(
            (u.in_off, u.out_off, u.len),
            (40_960 + 19 * 4096, 20_480 + 19 * 4096, 4096)
        );
        assert_eq!(p.out_end(), 20_480 + 81_920);
    }

    #[test]
    fn rounding_to_block_sizes() {
        // A 1000-byte file onto a bdev of 512-byte blocks: one unit, read
        // 1000, write 1024 (the last 24 bytes read back from the output).
        let p = plan(req(4096, None, 0, 0), fixed(1000, 1), fixed(1 << 20, 512)).unwrap();
        let u = p.unit(0);
        assert_eq!((u.len, u.read_len, u.write_len), (1000, 1000, 1024));
        // Read rounded up for an input opened direct.
        let p = plan(req(4096, None, 0, 0), fixed(1000, 512), GROWS).unwrap();
        assert_eq!(p.unit(0).read_len, 1024);
    }

    #[test]
    fn queue_depth_at_most_the_units() {
        let r = Request {
            qd: 64,
            ..req(4096, Some(3), 0, 0)
        };
        assert_eq!(plan(r, fixed(1 << 20, 1), GROWS).unwrap().qd, 3);
        let p = plan(r, fixed(0, 1), GROWS);
        assert!(p.is_err(), "count beyond an empty input");
        let p = plan(req(4096, None, 0, 0), fixed(0, 1), GROWS).unwrap();
        assert_eq!((p.units, p.qd, p.copy_size), (0, 0, 0));
    }

    #[test]
    fn spdk_dd_messages() {
        assert_eq!(
            err(req(512, None, 0, 0), fixed(1 << 20, 4096), GROWS),
            "--bs value cannot be less than input (4096) neither output (1) native block size"
        );
        assert_eq!(
            err(req(6144, None, 0, 0), fixed(1 << 20, 4096), GROWS),
            "--bs value must be a multiple of input native block size (4096)"
        );
        assert_eq!(
            err(
                req(6144, None, 0, 0),
                fixed(1 << 20, 1),
                fixed(1 << 20, 4096)
            ),
            "--bs value must be a multiple of output native block size (4096)"
        );
        assert_eq!(
            err(req(4096, None, 300, 0), fixed(1 << 20, 1), GROWS),
            "--skip value too big (300) - only 256 blocks available in input"
        );
        assert_eq!(
            err(req(4096, Some(200), 100, 0), fixed(1 << 20, 1), GROWS),
            "--count value too big (200) - only 156 blocks available from input"
        );
        assert_eq!(
            err(
                req(4096, None, 0, 300),
                fixed(1 << 20, 1),
                fixed(1 << 20, 512)
            ),
            "--seek value too big (300) - only 256 blocks available in output"
        );
        assert_eq!(
            err(
                req(4096, Some(100), 0, 200),
                fixed(1 << 20, 1),
                fixed(1 << 20, 512)
            ),
            "--count value too big (100) - only 56 blocks available in output"
        );
        assert_eq!(
            err(req(4096, None, 0, 200), fixed(1 << 20, 1), fixed(1 << 20, 512)),
            "input too big for output: 1048576 bytes to copy, only 229376 bytes available in output"
        );
        assert!(err(
            req(4096, None, 0, 0),
            Side {
                size: None,
                block_size: 1
            },
            GROWS
        )
        .contains("--count must be given"));
        assert!(err(req(4096, None, u64::MAX, 0), fixed(1, 1), GROWS).starts_with("--skip"));
        assert!(err(req(4096, Some(u64::MAX), 0, 0), fixed(1, 1), GROWS).starts_with("--count"));
        assert!(err(req(4096, Some(1), 0, u64::MAX), fixed(4096, 1), GROWS).starts_with("--seek"));
        // Exactly to the end is fine.
        assert!(plan(
            req(4096, Some(256), 0, 0),
            fixed(1 << 20, 1),
            fixed(1 << 20, 512)
        )
        .is_ok());
    }

    #[test]
    fn data_map_overlaps() {
        let m = DataMap::new(vec![(4096, 8192), (1 << 20, (1 << 20) + 4096)]);
        assert!(!m.has_data(0, 4096));
        assert!(m.has_data(0, 4097));
        assert!(m.has_data(8191, 9000));
        assert!(!m.has_data(8192, 1 << 20));
        assert!(m.has_data(8192, (1 << 20) + 1));
        assert!(!m.has_data((1 << 20) + 4096, u64::MAX));
        assert!(!DataMap::default().has_data(0, u64::MAX));
    }

    proptest! {
        /// The units tile the copy exactly; every offset and length is
        /// aligned to its side's block size, inside the side and within
        /// one I/O unit.
        #[test]
        fn units_tile_the_copy(
            in_shift in 0u32..13,
            out_shift in 0u32..13,
            bs_mult in 1u64..9,
            in_blocks in 0u64..5000,
            out_extra in 0u64..5000,
            count in proptest::option::of(0u64..60),
            skip in 0u64..40,
            seek in 0u64..40,
            qd in 1u32..70,
        ) {
            let (ib, ob) = (1u64 << in_shift, 1u64 << out_shift);
            let bs = ib.max(ob) * bs_mult;
            let in_size = in_blocks * ib;
            let out_size = in_size + out_extra * ob;
            let r = Request { bs, count: count.filter(|c| *c > 0), skip, seek, qd };
            let Ok(p) = plan(r, fixed(in_size, ib), fixed(out_size, ob)) else {
                // Only the documented reasons reject it.
                let want = skip * bs > in_size
                    || count.is_some_and(|c| c > 0 && skip * bs + c * bs > in_size)
                    || seek * bs > out_size
                    || seek * bs + count.filter(|c| *c > 0).map_or(in_size.saturating_sub(skip * bs), |c| c * bs) > out_size;
                prop_assert!(want);
                return Ok(());
            };
            prop_assert!(p.qd <= qd && u64::from(p.qd) <= p.units);
            prop_assert_eq!(p.qd == 0, p.units == 0);
            let mut next = 0;
            for i in 0..p.units {
                let u = p.unit(i);
                prop_assert_eq!(u.in_off - p.in_start, next);
                prop_assert_eq!(u.out_off - p.out_start, next);
                prop_assert!(u.len > 0 && u.len <= bs);
                prop_assert!(u.read_len >= u.len && u.read_len <= bs && u.read_len % ib == 0);
                prop_assert!(u.write_len >= u.len && u.write_len <= bs && u.write_len % ob == 0);
                prop_assert_eq!(u.in_off % ib, 0);
                prop_assert_eq!(u.out_off % ob, 0);
                prop_assert!(u.in_off + u.read_len <= in_size);
                prop_assert!(u.out_off + u.write_len <= out_size);
                next += u.len;
            }
            prop_assert_eq!(next, p.copy_size);
            prop_assert!(p.out_end() <= out_size);
        }

        /// `has_data` agrees with a byte-by-byte look at the ranges.
        #[test]
        fn data_map_matches_brute_force(
            gaps in proptest::collection::vec((0u64..50, 1u64..50), 0..8),
            lo in 0u64..600,
            len in 1u64..200,
        ) {
            let mut ranges = Vec::new();
            let mut at = 0;
            for (gap, n) in gaps {
                ranges.push((at + gap, at + gap + n));
                at += gap + n;
            }
            let want = (lo..lo + len).any(|b| ranges.iter().any(|&(s, e)| s <= b && b < e));
            prop_assert_eq!(DataMap::new(ranges).has_data(lo, lo + len), want);
        }
    }
}
