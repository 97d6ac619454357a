//! Reading through a clone's parent chain and copying a cluster on the
//! first write to it (copy-on-write), plus whole-blob data reads and writes
//! for consumers without an I/O path of their own (and the tests).
//!
//! A clone's unallocated cluster reads from the nearest blob up its chain
//! of `SNAP` parents that holds it, and zeros past the end of the chain. Its
//! first write allocates a cluster that gets the parent's whole cluster
//! before the mapping is committed ([`Store::allocate_cluster`]): the
//! mapping reaches the disk only after the copy, so a crash leaves the
//! cluster unmapped (the clone reads the parent) or mapped with the copy.
//! Two writes racing for one cluster copy and allocate once: the second
//! waits for the first's copy, then for its commit. A copy that overlaps a
//! change of the blob's parent (its `epoch` moved) is thrown away and
//! redone from the new chain.

use crate::blob::Blob;
use crate::device::BlobDevice;
use crate::error::{Error, Result};
use crate::external::ClusterSource;
use crate::store::{BlobEntry, Store};
use crate::BlobId;

/// The largest device copy of a cluster copy-on-write: small enough that a
/// memory device's copy (a memcpy on the store's thread) lets other work
/// in between pieces of a 4 MiB cluster, large enough that a real device
/// copies at full bandwidth one piece after another.
pub(crate) const COPY_PIECE: u64 = 1 << 20;

impl<D: BlobDevice> Store<D> {
    /// The parent of blob `id`, if it has one the store knows.
    pub(crate) fn parent_of(&self, id: BlobId) -> Option<BlobId> {
        let s = self.state.borrow();
        let p = s.blobs.get(&id)?.md.borrow().parent()?;
        s.blobs.contains_key(&p).then_some(p)
    }

    /// The device LBA that holds blob cluster `idx` of `entry` for a read:
    /// its own cluster, else the nearest ancestor's; `None`: zeros or the
    /// external snapshot (see [`Store::parent_source`]).
    pub(crate) fn read_cluster_lba(&self, entry: &BlobEntry, idx: u64) -> Option<u64> {
        let c = entry.md.borrow().clusters.get(idx);
        if c != 0 {
            return Some(self.cluster_lba(c));
        }
        match self.parent_source(entry, idx) {
            ClusterSource::Device(lba) => Some(lba),
            _ => None,
        }
    }

    pub(crate) fn take_buf(&self) -> Vec<u8> {
        let size = self.geo.cluster_size as usize;
        self.state
            .borrow_mut()
            .cow_bufs
            .pop()
            .unwrap_or_else(|| vec![0; size])
    }

    pub(crate) fn put_buf(&self, buf: Vec<u8>) {
        let mut s = self.state.borrow_mut();
        if s.cow_bufs.len() < 4 {
            s.cow_bufs.push(buf);
        }
    }

    /// Copies a whole cluster from `src_lba` into device cluster `dst`
    /// (the device's copy). Data errors fail the copy, not the store (no
    /// metadata was written).
    /// The copy goes in pieces of at most [`COPY_PIECE`] bytes, one after
    /// another, so that a memory device's copy (done on this thread) lets
    /// the thread's other work in between.
    pub(crate) async fn copy_cluster(&self, src_lba: u64, dst: u32) -> Result<()> {
        let lba = self.cluster_lba(dst);
        let total = self.geo.blocks_per_cluster;
        let piece = (COPY_PIECE / u64::from(self.geo.block_size.max(1))).clamp(1, total.max(1));
        let mut done = 0;
        while done < total {
            let n = piece.min(total - done);
            self.dev
                .copy(lba + done, src_lba + done, n)
                .await
                .map_err(|source| Error::Device {
                    op: "copy",
                    offset_blocks: src_lba + done,
                    source,
                })?;
            done += n;
        }
        Ok(())
    }

    /// Writes a whole cluster's bytes into device cluster `dst`.
    pub(crate) async fn write_cluster(&self, dst: u32, buf: &[u8]) -> Result<()> {
        let lba = self.cluster_lba(dst);
        self.dev
            .write(lba, buf)
            .await
            .map_err(|source| Error::Device {
                op: "write",
                offset_blocks: lba,
                source,
            })
    }

    /// Zeroes device cluster `c` (data only: the store stays usable on error).
    pub(crate) async fn zero_cluster(&self, c: u32) -> Result<()> {
        let lba = self.cluster_lba(c);
        self.dev
            .write_zeroes(lba, self.geo.blocks_per_cluster)
            .await
            .map_err(|source| Error::Device {
                op: "write_zeroes",
                offset_blocks: lba,
                source,
            })
    }
}

impl<D: BlobDevice> Blob<D> {
    /// The device LBA a read of blob cluster `idx` goes to: the blob's own
    /// cluster, else the nearest ancestor's that holds it; `None` reads as
    /// zeros. No allocation; one borrow per level of the chain.
    #[must_use]
    pub fn read_cluster_lba(&self, idx: u64) -> Option<u64> {
        self.store.read_cluster_lba(&self.entry, idx)
    }

    /// Where blob cluster `idx` reads from when the blob itself does not
    /// hold it: an ancestor's cluster, the external snapshot, or zeros.
    #[must_use]
    pub fn parent_source(&self, idx: u64) -> ClusterSource {
        self.store.parent_source(&self.entry, idx)
    }

    /// The parent snapshot (the `SNAP` link of a thin blob), if the store
    /// has it.
    #[must_use]
    pub fn parent(&self) -> Option<BlobId> {
        self.store.parent_of(self.entry.id)
    }

    /// A clone: a thin blob with a parent snapshot (SPDK's
    /// `spdk_blob_is_clone`).
    #[must_use]
    pub fn is_clone(&self) -> bool {
        self.parent().is_some()
    }

    /// Size in device blocks.
    #[must_use]
    pub fn num_blocks(&self) -> u64 {
        self.num_clusters() * self.blocks_per_cluster()
    }

    fn split(&self, offset_blocks: u64, len: usize) -> Result<Vec<(u64, u64, usize, usize)>> {
        let bs = u64::from(self.store.geo.block_size);
        let bpc = self.blocks_per_cluster();
        let blocks = len as u64 / bs;
        if !(len as u64).is_multiple_of(bs)
            || offset_blocks.saturating_add(blocks) > self.num_blocks()
        {
            return Err(Error::InvalidArgument("data range outside the blob"));
        }
        let mut out = Vec::new();
        let mut at = 0usize;
        let mut lba = offset_blocks;
        while at < len {
            let idx = lba / bpc;
            let in_cluster = lba % bpc;
            let n = (bpc - in_cluster).min((len - at) as u64 / bs);
            let bytes = usize::try_from(n * bs).unwrap_or(usize::MAX);
            out.push((idx, in_cluster, at, bytes));
            at += bytes;
            lba += n;
        }
        Ok(out)
    }

    /// Reads blob blocks into `buf` through the parent chain (zeros where
    /// nothing holds data).
    pub async fn read(&self, offset_blocks: u64, buf: &mut [u8]) -> Result<()> {
        for (idx, off, at, bytes) in self.split(offset_blocks, buf.len())? {
            let part = &mut buf[at..at + bytes];
            let own = self.entry.md.borrow().clusters.get(idx);
            let src = if own != 0 {
                ClusterSource::Device(self.store.cluster_lba(own))
            } else {
                self.parent_source(idx)
            };
            match src {
                ClusterSource::Zeros => part.fill(0),
                ClusterSource::External => {
                    let bs = u64::from(self.store.geo.block_size);
                    let offset = (idx * self.blocks_per_cluster() + off) * bs;
                    self.store.read_external(&self.entry, offset, part).await?;
                }
                ClusterSource::Device(lba) => {
                    self.store
                        .dev
                        .read(lba + off, part)
                        .await
                        .map_err(|source| Error::Device {
                            op: "read",
                            offset_blocks: lba + off,
                            source,
                        })?
                }
            }
        }
        Ok(())
    }

    /// Writes blob blocks from `buf`, allocating (and copying from the
    /// parent) the clusters first written. A cluster of a thin blob with no
    /// parent data gets zeros outside the written range.
    pub async fn write(&self, offset_blocks: u64, buf: &[u8]) -> Result<()> {
        let _op = self.store.op()?;
        if self.entry.data_ro() {
            return Err(Error::ReadOnly(self.entry.id));
        }
        for (idx, off, at, bytes) in self.split(offset_blocks, buf.len())? {
            let lba = self.store.allocate_cluster(&self.entry, idx, true).await?;
            self.store
                .dev
                .write(lba + off, &buf[at..at + bytes])
                .await
                .map_err(|source| Error::Device {
                    op: "write",
                    offset_blocks: lba + off,
                    source,
                })?;
        }
        Ok(())
    }
}
