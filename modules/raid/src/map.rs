//! Address mapping of raid0 and concat: which member block serves a raid
//! block, and back. Pure functions, checked by proptest.
//!
//! * raid0 deals strips round-robin: strip `s` lives on member `s % n` as
//!   that member's strip `s / n`.
//! * concat lays the members end to end.
//!
//! Both use only whole strips of each member (the remainder is unused), so
//! that the bdev layer's split on the strip boundary also splits on member
//! boundaries.

/// raid0 geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raid0Map {
    /// Strip size in blocks (> 0).
    pub strip_blocks: u64,
    /// Number of members (> 0).
    pub members: u64,
    /// Blocks used on each member (a multiple of `strip_blocks`).
    pub member_blocks: u64,
}

impl Raid0Map {
    /// Blocks of the raid.
    #[must_use]
    pub fn num_blocks(&self) -> u64 {
        self.member_blocks * self.members
    }

    /// The member and member block serving raid block `block`.
    #[must_use]
    pub fn map(&self, block: u64) -> (usize, u64) {
        let strip = block / self.strip_blocks;
        let member = strip % self.members;
        let member_strip = strip / self.members;
        (
            usize::try_from(member).unwrap_or(usize::MAX),
            member_strip * self.strip_blocks + block % self.strip_blocks,
        )
    }

    /// The raid block that member block `mblock` of `member` serves.
    #[must_use]
    pub fn unmap(&self, member: usize, mblock: u64) -> u64 {
        let member_strip = mblock / self.strip_blocks;
        let strip = member_strip * self.members + member as u64;
        strip * self.strip_blocks + mblock % self.strip_blocks
    }

    /// The member blocks `(start, len)` of `member` that serve raid blocks
    /// `[offset, offset + num)`: one contiguous range, or `None`. For
    /// requests that fan out to every member (flush, unmap).
    #[must_use]
    pub fn member_range(&self, offset: u64, num: u64, member: usize) -> Option<(u64, u64)> {
        if num == 0 {
            return None;
        }
        let (n, s, m) = (self.members, self.strip_blocks, member as u64);
        let first_strip = offset / s;
        let last = offset + num - 1;
        let last_strip = last / s;
        // First and last strips of the range that live on `member`.
        let first = first_strip + (m + n - first_strip % n) % n;
        let lastm = last_strip.checked_sub((last_strip % n + n - m) % n)?;
        if first > last_strip || lastm < first_strip || first > lastm {
            return None;
        }
        let start = (first / n) * s + if first == first_strip { offset % s } else { 0 };
        let end = (lastm / n) * s + if lastm == last_strip { last % s + 1 } else { s };
        Some((start, end - start))
    }
}

/// concat geometry: member `i` serves raid blocks `starts[i] ..
/// starts[i] + lens[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcatMap {
    /// First raid block of each member.
    pub starts: Vec<u64>,
    /// Blocks used on each member.
    pub lens: Vec<u64>,
}

impl ConcatMap {
    /// Members of `lens` blocks each, end to end.
    #[must_use]
    pub fn new(lens: Vec<u64>) -> Self {
        let mut starts = Vec::with_capacity(lens.len());
        let mut at = 0u64;
        for l in &lens {
            starts.push(at);
            at += l;
        }
        ConcatMap { starts, lens }
    }

    /// Blocks of the raid.
    #[must_use]
    pub fn num_blocks(&self) -> u64 {
        self.starts
            .last()
            .map_or(0, |s| s + self.lens.last().copied().unwrap_or(0))
    }

    /// The member and member block serving raid block `block`.
    #[must_use]
    pub fn map(&self, block: u64) -> (usize, u64) {
        let member = self
            .starts
            .partition_point(|s| *s <= block)
            .saturating_sub(1);
        (
            member,
            block - self.starts.get(member).copied().unwrap_or(0),
        )
    }

    /// The raid block that member block `mblock` of `member` serves.
    #[must_use]
    pub fn unmap(&self, member: usize, mblock: u64) -> u64 {
        self.starts.get(member).copied().unwrap_or(0) + mblock
    }

    /// The member blocks `(start, len)` of `member` inside raid blocks
    /// `[offset, offset + num)`, or `None`.
    #[must_use]
    pub fn member_range(&self, offset: u64, num: u64, member: usize) -> Option<(u64, u64)> {
        let (s, l) = (*self.starts.get(member)?, *self.lens.get(member)?);
        let lo = offset.max(s);
        let hi = (offset + num).min(s + l);
        (lo < hi).then(|| (lo - s, hi - lo))
    }
}

/// How raid blocks map onto members.
#[derive(Debug, Clone)]
pub(crate) enum Geometry {
    /// Strips dealt round-robin.
    Raid0(Raid0Map),
    /// Every member holds every block.
    Raid1 {
        /// Blocks of the raid (the smallest member).
        num_blocks: u64,
    },
    /// Members end to end.
    Concat(ConcatMap),
}

impl Geometry {
    pub(crate) fn num_blocks(&self) -> u64 {
        match self {
            Geometry::Raid0(m) => m.num_blocks(),
            Geometry::Raid1 { num_blocks } => *num_blocks,
            Geometry::Concat(m) => m.num_blocks(),
        }
    }

    /// Blocks of the raid's data on each member (raid0: the same on
    /// every member; concat: per member, so 0 here).
    pub(crate) fn data_size(&self) -> u64 {
        match self {
            Geometry::Raid0(m) => m.member_blocks,
            Geometry::Raid1 { num_blocks } => *num_blocks,
            Geometry::Concat(_) => 0,
        }
    }

    /// Strip size in blocks (raid0, concat).
    pub(crate) fn strip_blocks(&self, strip_size_kb: u32, block_size: u32) -> Option<u64> {
        match self {
            Geometry::Raid1 { .. } => None,
            _ => Some(u64::from(strip_size_kb) * 1024 / u64::from(block_size)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn raid0() -> impl Strategy<Value = Raid0Map> {
        (0u32..7, 1u64..9, 1u64..20).prop_map(|(shift, members, strips)| {
            let strip_blocks = 1u64 << shift;
            Raid0Map {
                strip_blocks,
                members,
                member_blocks: strips * strip_blocks,
            }
        })
    }

    fn concat() -> impl Strategy<Value = ConcatMap> {
        (0u32..5, prop::collection::vec(1u64..20, 1..8))
            .prop_map(|(shift, strips)| ConcatMap::new(strips.iter().map(|s| s << shift).collect()))
    }

    proptest! {
        #[test]
        fn raid0_maps_every_block_to_one_member_block_and_back(m in raid0(), pick in any::<u64>()) {
            let block = pick % m.num_blocks();
            let (member, mblock) = m.map(block);
            prop_assert!((member as u64) < m.members);
            prop_assert!(mblock < m.member_blocks);
            prop_assert_eq!(m.unmap(member, mblock), block);
        }

        #[test]
        fn raid0_every_member_block_serves_one_raid_block(m in raid0(), pm in any::<u64>(), px in any::<u64>()) {
            let member = usize::try_from(pm % m.members).unwrap();
            let mblock = px % m.member_blocks;
            let block = m.unmap(member, mblock);
            prop_assert!(block < m.num_blocks());
            prop_assert_eq!(m.map(block), (member, mblock));
        }

        #[test]
        fn raid0_strips_stay_on_one_member(m in raid0(), pick in any::<u64>()) {
            // What the bdev layer's split on the strip boundary relies on.
            let strip = pick % (m.num_blocks() / m.strip_blocks);
            let first = m.map(strip * m.strip_blocks);
            for i in 0..m.strip_blocks {
                let (mem, mb) = m.map(strip * m.strip_blocks + i);
                prop_assert_eq!(mem, first.0);
                prop_assert_eq!(mb, first.1 + i);
            }
        }

        #[test]
        fn raid0_member_ranges_cover_a_request_exactly(m in raid0(), a in any::<u64>(), b in any::<u64>()) {
            let total = m.num_blocks();
            let offset = a % total;
            let num = 1 + b % (total - offset);
            let mut covered = 0;
            for member in 0..usize::try_from(m.members).unwrap() {
                if let Some((start, len)) = m.member_range(offset, num, member) {
                    covered += len;
                    for x in start..start + len {
                        let blk = m.unmap(member, x);
                        prop_assert!(blk >= offset && blk < offset + num, "{} outside", blk);
                    }
                }
            }
            prop_assert_eq!(covered, num);
        }

        #[test]
        fn concat_maps_every_block_to_one_member_block_and_back(m in concat(), pick in any::<u64>()) {
            let block = pick % m.num_blocks();
            let (member, mblock) = m.map(block);
            prop_assert!(member < m.lens.len());
            prop_assert!(mblock < m.lens[member]);
            prop_assert_eq!(m.unmap(member, mblock), block);
        }

        #[test]
        fn concat_every_member_block_serves_one_raid_block(m in concat(), pm in any::<usize>(), px in any::<u64>()) {
            let member = pm % m.lens.len();
            let mblock = px % m.lens[member];
            let block = m.unmap(member, mblock);
            prop_assert!(block < m.num_blocks());
            prop_assert_eq!(m.map(block), (member, mblock));
        }

        #[test]
        fn concat_member_ranges_cover_a_request_exactly(m in concat(), a in any::<u64>(), b in any::<u64>()) {
            let total = m.num_blocks();
            let offset = a % total;
            let num = 1 + b % (total - offset);
            let mut covered = 0;
            for member in 0..m.lens.len() {
                if let Some((start, len)) = m.member_range(offset, num, member) {
                    covered += len;
                    prop_assert_eq!(m.map(m.unmap(member, start)).0, member);
                    let first = m.unmap(member, start);
                    prop_assert!(first >= offset && first + len <= offset + num);
                }
            }
            prop_assert_eq!(covered, num);
        }
    }
}
