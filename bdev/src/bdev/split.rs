//! Splitting one I/O into children that respect a bdev's limits: no child
//! crosses `boundary`, exceeds `max_blocks`, has a segment longer than
//! `max_segment_size` or more than `max_segments` segments. Children tile
//! the parent exactly and in order; pure arithmetic, tested with proptest.

use super::segments::IoVec;

/// Limits that force a split (0 = no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SplitLimits {
    /// Block size in bytes.
    pub block_size: u32,
    /// Children do not cross multiples of this (blocks).
    pub boundary: u64,
    /// Most blocks per child.
    pub max_blocks: u64,
    /// Longest segment per child (bytes).
    pub max_segment_size: usize,
    /// Most segments per child.
    pub max_segments: usize,
}

/// Where the next child starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SplitCursor {
    /// Next child's first block.
    pub offset_blocks: u64,
    /// Blocks left to cover.
    pub remaining_blocks: u64,
    /// Current parent segment.
    pub iov_idx: usize,
    /// Byte offset inside it.
    pub iov_off: usize,
}

/// A child does not fit: one block would need more segments than allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a block spans more segments than the bdev accepts")]
pub struct SplitError;

/// The submission path's quick test that a read or write needs neither
/// a split nor a bounce buffer (for limits without a boundary): one
/// segment, aligned, within the caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FitCaps {
    max_blocks: u64,
    max_segment: usize,
    align_mask: usize,
}

impl FitCaps {
    /// Fits nothing (for channels that do not use the test).
    pub(crate) const NONE: FitCaps = FitCaps {
        max_blocks: 0,
        max_segment: 0,
        align_mask: usize::MAX,
    };

    /// Whether `num_blocks` in `iovs` fit as they are (then
    /// [`SplitLimits::needs_split`] is false and no segment is misaligned).
    #[inline(always)]
    pub(crate) fn fits(&self, num_blocks: u64, iovs: &[IoVec]) -> bool {
        let [v] = iovs else {
            return false;
        };
        num_blocks <= self.max_blocks
            && v.len <= self.max_segment
            && (v.base as usize | v.len) & self.align_mask == 0
    }
}

impl SplitLimits {
    /// The quick test for these limits and `align_mask`; `None` when
    /// they have a boundary (an offset matters, not just sizes).
    pub(crate) fn fit_caps(&self, align_mask: usize) -> Option<FitCaps> {
        let cap = |v: usize| if v == 0 { usize::MAX } else { v };
        (self.boundary == 0).then(|| FitCaps {
            max_blocks: if self.max_blocks == 0 {
                u64::MAX
            } else {
                self.max_blocks
            },
            max_segment: cap(self.max_segment_size),
            align_mask,
        })
    }

    /// Whether a request needs splitting at all (cheap checks only).
    #[must_use]
    pub fn needs_split(&self, offset_blocks: u64, num_blocks: u64, iovs: &[IoVec]) -> bool {
        if self.boundary != 0 && (offset_blocks % self.boundary) + num_blocks > self.boundary {
            return true;
        }
        if self.max_blocks != 0 && num_blocks > self.max_blocks {
            return true;
        }
        if self.max_segments != 0 && iovs.len() > self.max_segments {
            return true;
        }
        self.max_segment_size != 0 && iovs.iter().any(|v| v.len > self.max_segment_size)
    }

    fn child_blocks(&self, c: &SplitCursor) -> u64 {
        let mut n = c.remaining_blocks;
        if self.boundary != 0 {
            n = n.min(self.boundary - c.offset_blocks % self.boundary);
        }
        if self.max_blocks != 0 {
            n = n.min(self.max_blocks);
        }
        n
    }

    /// Next child of a request without data (unmap, write zeroes): its
    /// `(offset_blocks, num_blocks)`, or `None` when done.
    pub fn next_range(&self, c: &mut SplitCursor) -> Option<(u64, u64)> {
        if c.remaining_blocks == 0 {
            return None;
        }
        let n = self.child_blocks(c);
        let off = c.offset_blocks;
        c.offset_blocks += n;
        c.remaining_blocks -= n;
        Some((off, n))
    }

    /// Next child of a data request: fills `out` with its segments (views
    /// into `iovs`) and returns `(offset_blocks, num_blocks)`, or `None`
    /// when done.
    pub fn next_child(
        &self,
        c: &mut SplitCursor,
        iovs: &[IoVec],
        out: &mut Vec<IoVec>,
    ) -> Result<Option<(u64, u64)>, SplitError> {
        out.clear();
        if c.remaining_blocks == 0 {
            return Ok(None);
        }
        let bs = u64::from(self.block_size.max(1));
        let want_blocks = self.child_blocks(c);
        let want = usize::try_from(want_blocks * bs).map_err(|_| SplitError)?;
        let mut got = 0usize;
        let (mut idx, mut off) = (c.iov_idx, c.iov_off);
        while got < want && idx < iovs.len() {
            if self.max_segments != 0 && out.len() == self.max_segments {
                break;
            }
            let v = iovs[idx];
            let avail = v.len - off;
            if avail == 0 {
                idx += 1;
                off = 0;
                continue;
            }
            let mut take = avail.min(want - got);
            if self.max_segment_size != 0 {
                take = take.min(self.max_segment_size);
            }
            out.push(IoVec {
                base: v.base.wrapping_add(off),
                len: take,
            });
            got += take;
            off += take;
            if off == v.len {
                idx += 1;
                off = 0;
            }
        }
        // Trim to whole blocks (a segment limit may have cut mid-block).
        let bs_usize = usize::try_from(bs).map_err(|_| SplitError)?;
        let keep = got / bs_usize * bs_usize;
        if keep == 0 {
            return Err(SplitError);
        }
        let mut excess = got - keep;
        while excess > 0 {
            let last = out.last_mut().expect("invariant: excess < got");
            if last.len <= excess {
                excess -= last.len;
                out.pop();
            } else {
                last.len -= excess;
                excess = 0;
            }
        }
        // Advance the cursor over exactly `keep` bytes.
        let mut left = keep;
        let (mut idx, mut off) = (c.iov_idx, c.iov_off);
        while left > 0 {
            let avail = iovs[idx].len - off;
            let step = avail.min(left);
            left -= step;
            off += step;
            if off == iovs[idx].len {
                idx += 1;
                off = 0;
            }
        }
        c.iov_idx = idx;
        c.iov_off = off;
        let blocks = u64::try_from(keep).map_err(|_| SplitError)? / bs;
        let offset = c.offset_blocks;
        c.offset_blocks += blocks;
        c.remaining_blocks -= blocks;
        Ok(Some((offset, blocks)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fake_iovs(lens: &[usize]) -> Vec<IoVec> {
        // Addresses are only compared, never dereferenced.
        let mut addr = 0x1000usize;
        lens.iter()
            .map(|l| {
                let v = IoVec {
                    base: std::ptr::without_provenance_mut(addr),
                    len: *l,
                };
                addr += l + 64;
                v
            })
            .collect()
    }

    fn flatten(iovs: &[IoVec]) -> Vec<usize> {
        iovs.iter()
            .flat_map(|v| (0..v.len).map(move |i| v.base as usize + i))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn children_tile_parent(
            bs_shift in 0u32..4,
            offset in 0u64..10_000,
            num in 1u64..300,
            boundary in prop_oneof![Just(0u64), 1u64..64],
            max_blocks in prop_oneof![Just(0u64), 1u64..64],
            max_seg in prop_oneof![Just(0usize), 512usize..9000],
            max_segs in prop_oneof![Just(0usize), 1usize..8],
            cuts in proptest::collection::vec(1usize..5000, 0..6),
        ) {
            let bs = 512u32 << bs_shift;
            let total = usize::try_from(num).unwrap() * bs as usize;
            // Parent segments: cut the buffer at arbitrary points.
            let mut points: Vec<usize> = cuts.iter().map(|c| c % total).filter(|c| *c > 0).collect();
            points.sort_unstable();
            points.dedup();
            let mut lens = Vec::new();
            let mut prev = 0;
            for p in points.iter().chain(std::iter::once(&total)) {
                lens.push(p - prev);
                prev = *p;
            }
            let iovs = fake_iovs(&lens);
            let lim = SplitLimits { block_size: bs, boundary, max_blocks, max_segment_size: max_seg, max_segments: max_segs };
            let mut c = SplitCursor { offset_blocks: offset, remaining_blocks: num, iov_idx: 0, iov_off: 0 };
            let mut out = Vec::new();
            let mut covered = Vec::new();
            let mut next_off = offset;
            loop {
                match lim.next_child(&mut c, &iovs, &mut out) {
                    Ok(Some((o, n))) => {
                        prop_assert_eq!(o, next_off, "children in order, no gaps");
                        prop_assert!(n > 0);
                        next_off = o + n;
                        if let (Some(a), Some(b)) = (o.checked_div(boundary), (o + n - 1).checked_div(boundary)) {
                            prop_assert!(a == b, "crosses boundary");
                        }
                        if max_blocks != 0 { prop_assert!(n <= max_blocks); }
                        if max_segs != 0 { prop_assert!(out.len() <= max_segs); }
                        if max_seg != 0 { prop_assert!(out.iter().all(|v| v.len <= max_seg)); }
                        let bytes: usize = out.iter().map(|v| v.len).sum();
                        prop_assert_eq!(bytes as u64, n * u64::from(bs));
                        covered.extend(flatten(&out));
                    }
                    Ok(None) => break,
                    Err(SplitError) => {
                        // Only legal when a segment limit cannot hold one block.
                        prop_assert!(max_segs != 0);
                        return Ok(());
                    }
                }
            }
            prop_assert_eq!(next_off, offset + num);
            prop_assert_eq!(covered, flatten(&iovs), "bytes kept in order");
        }

        #[test]
        fn what_fits_needs_no_split(
            num in 1u64..300,
            max_blocks in prop_oneof![Just(0u64), 1u64..64],
            max_seg in prop_oneof![Just(0usize), 512usize..90_000],
            max_segs in prop_oneof![Just(0usize), 1usize..8],
            align_shift in 0u32..13,
            base in 0usize..1 << 20,
            nseg in 1usize..3,
        ) {
            let len = usize::try_from(num).unwrap() * 512;
            let lim = SplitLimits { block_size: 512, boundary: 0, max_blocks, max_segment_size: max_seg, max_segments: max_segs };
            let mask = (1usize << align_shift) - 1;
            let caps = lim.fit_caps(mask).expect("no boundary");
            let iovs: Vec<IoVec> = (0..nseg)
                .map(|i| IoVec { base: std::ptr::without_provenance_mut(base + i * len), len })
                .collect();
            let aligned = iovs.iter().all(|v| (v.base as usize | v.len) & mask == 0);
            let fits = caps.fits(num * nseg as u64, &iovs);
            if fits {
                prop_assert!(!lim.needs_split(0, num * nseg as u64, &iovs) && aligned);
            }
            // And it does not refuse the plain case.
            if nseg == 1 && aligned && !lim.needs_split(0, num, &iovs) {
                prop_assert!(fits);
            }
        }

        #[test]
        fn ranges_tile(offset in 0u64..100_000, num in 1u64..5000, boundary in 0u64..128, max_blocks in 0u64..128) {
            let lim = SplitLimits { block_size: 512, boundary, max_blocks, ..Default::default() };
            let mut c = SplitCursor { offset_blocks: offset, remaining_blocks: num, ..Default::default() };
            let mut at = offset;
            while let Some((o, n)) = lim.next_range(&mut c) {
                prop_assert_eq!(o, at);
                if let (Some(a), Some(b)) = (o.checked_div(boundary), (o + n - 1).checked_div(boundary)) {
                    prop_assert!(a == b);
                }
                if max_blocks != 0 { prop_assert!(n <= max_blocks); }
                at += n;
            }
            prop_assert_eq!(at, offset + num);
        }
    }

    #[test]
    fn needs_split_checks() {
        let lim = SplitLimits {
            block_size: 512,
            boundary: 8,
            ..Default::default()
        };
        let iovs = fake_iovs(&[4096]);
        assert!(!lim.needs_split(0, 8, &iovs));
        assert!(lim.needs_split(4, 8, &iovs));
        let lim = SplitLimits {
            block_size: 512,
            max_segment_size: 1024,
            ..Default::default()
        };
        assert!(lim.needs_split(0, 8, &iovs));
        assert!(!lim.fit_caps(0).unwrap().fits(8, &iovs));
        assert!(lim.fit_caps(0).unwrap().fits(2, &fake_iovs(&[1024])));
        let lim = SplitLimits { boundary: 8, ..lim };
        assert_eq!(lim.fit_caps(0), None);
    }
}
