//! An lvol's cluster map as the I/O path reads it: one atomic device
//! cluster number per lvol cluster (0: not allocated; cluster 0 always
//! holds the store's super block, so it is never a data cluster).
//!
//! The metadata thread owns the blob, whose map is authoritative; it
//! stores an entry here after the blobstore has put the mapping on disk,
//! and clears one before it gives a cluster back. Every thread's channel
//! holds the table by `Arc` and reads it with one atomic load per I/O: no
//! lock. A resize makes a new table and hands it to every channel (see the
//! metadata thread's `swap_tables`); a stale table can only lack a mapping,
//! which sends the I/O through the metadata thread, never hold a stale one.

use std::sync::atomic::{AtomicU32, Ordering};

/// A backing-table entry (see the lvol channel's `backing`): the cluster
/// reads from the external snapshot at the root of the lvol's chain. No
/// device cluster has this number (blob cluster numbers are below 2^32 - 1).
pub const EXTERNAL: u32 = u32::MAX;

/// Sizes of a store's clusters in device blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterGeo {
    /// Blocks per cluster.
    pub blocks: u64,
    /// `log2(blocks)` when it is a power of two.
    shift: Option<u32>,
}

impl ClusterGeo {
    /// Clusters of `blocks` device blocks (non-zero).
    #[must_use]
    pub fn new(blocks: u64) -> Self {
        let blocks = blocks.max(1);
        ClusterGeo {
            blocks,
            shift: blocks.is_power_of_two().then(|| blocks.trailing_zeros()),
        }
    }

    /// (cluster index, block within the cluster) of block `offset`.
    #[inline]
    #[must_use]
    pub fn split(&self, offset: u64) -> (u64, u64) {
        match self.shift {
            Some(s) => (offset >> s, offset & (self.blocks - 1)),
            None => (offset / self.blocks, offset % self.blocks),
        }
    }

    /// First device block of device cluster `c`.
    #[inline]
    #[must_use]
    pub fn lba(&self, c: u32) -> u64 {
        match self.shift {
            Some(s) => u64::from(c) << s,
            None => u64::from(c) * self.blocks,
        }
    }
}

/// One lvol's map: lvol cluster index -> device cluster (0: none).
#[derive(Debug)]
pub struct ClusterTable {
    entries: Box<[AtomicU32]>,
}

impl ClusterTable {
    /// A table of `len` clusters, all unallocated but those in `mapped`
    /// (index, device cluster).
    #[must_use]
    pub fn new(len: u64, mapped: impl IntoIterator<Item = (u64, u32)>) -> Self {
        let n = usize::try_from(len).unwrap_or(0);
        let entries: Box<[AtomicU32]> = (0..n).map(|_| AtomicU32::new(0)).collect();
        for (i, c) in mapped {
            if let Some(e) = usize::try_from(i).ok().and_then(|i| entries.get(i)) {
                e.store(c, Ordering::Relaxed);
            }
        }
        ClusterTable { entries }
    }

    /// Clusters in the table.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Whether the table is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The device cluster of lvol cluster `idx` (0: not allocated, or
    /// beyond the table).
    #[inline]
    #[must_use]
    pub fn get(&self, idx: u64) -> u32 {
        usize::try_from(idx)
            .ok()
            .and_then(|i| self.entries.get(i))
            .map_or(0, |e| e.load(Ordering::Acquire))
    }

    /// Sets lvol cluster `idx` (metadata thread only).
    pub fn set(&self, idx: u64, cluster: u32) {
        if let Some(e) = usize::try_from(idx).ok().and_then(|i| self.entries.get(i)) {
            e.store(cluster, Ordering::Release);
        }
    }

    /// Every mapped entry (index, device cluster).
    #[must_use]
    pub fn mapped(&self) -> Vec<(u64, u32)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let c = e.load(Ordering::Acquire);
                (c != 0).then_some((i as u64, c))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_splits_offsets() {
        let g = ClusterGeo::new(8);
        assert_eq!(g.split(17), (2, 1));
        assert_eq!(g.lba(3), 24);
        let g = ClusterGeo::new(6);
        assert_eq!(g.split(17), (2, 5));
        assert_eq!(g.lba(3), 18);
    }

    #[test]
    fn table_maps_and_clears() {
        let t = ClusterTable::new(4, [(1, 9), (7, 5)]);
        assert_eq!(t.len(), 4);
        assert_eq!(t.get(1), 9);
        assert_eq!(t.get(7), 0);
        t.set(2, 11);
        t.set(1, 0);
        assert_eq!(t.mapped(), vec![(2, 11)]);
        assert_eq!(t.get(u64::MAX), 0);
    }
}
