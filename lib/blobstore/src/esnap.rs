//! External-snapshot clones (SPDK's "esnap" clones): a thin blob whose
//! parent is a read-only device outside the store, named by an id the
//! consumer chooses (SPDK's lvol: the bdev's UUID string with its NUL).
//!
//! On disk the blob carries the EXTERNAL_SNAPSHOT invalid flag and the
//! internal xattr `EXTSNAP` = the id, and nothing else: the store does not
//! know the device. The consumer attaches a device to an id
//! ([`Blobstore::attach_external`]); an unallocated cluster of a blob whose
//! parent chain ends at that id reads from the device at the cluster's own
//! offset ([`ClusterSource::External`]), and its first write copies the
//! device's cluster in, as from a snapshot. A chain whose device is not
//! attached is *degraded*: its clusters cannot be copied (ENODEV) and the
//! consumer should not serve it.
//!
//! Crash safety: creating a clone and changing a parent are one root
//! write each (as for snapshots, `lineage`).

use std::rc::Rc;

use crate::blobstore::Blobstore;
use crate::device::{BlobDevice, DeviceError};
use crate::error::{Error, Result};
use crate::external::{ClusterSource, ExternalDevice};
use crate::format::{FLAG_EXTERNAL_SNAPSHOT, XATTR_EXTSNAP, XATTR_SNAP};
use crate::lineage::Held;
use crate::options::BlobOptions;
use crate::persist::Freed;
use crate::store::{BlobEntry, Store};
use crate::BlobId;

/// The id of the external snapshot blob `entry` itself names.
fn own_esnap(entry: &BlobEntry) -> Option<Vec<u8>> {
    entry.md.borrow().esnap_id().map(<[u8]>::to_vec)
}

impl<D: BlobDevice> Store<D> {
    /// Where cluster `idx` of `entry`'s parent chain (not `entry` itself)
    /// reads from. The walk stops at a parent shorter than `idx` (zeros),
    /// and after as many steps as there are blobs (a corrupt cycle).
    pub(crate) fn parent_source(&self, entry: &BlobEntry, idx: u64) -> ClusterSource {
        let s = self.state.borrow();
        let mut cur: Option<Rc<BlobEntry>> = None;
        for _ in 0..=s.blobs.len() {
            let e = cur.as_deref().unwrap_or(entry);
            let parent = e.md.borrow().parent();
            let Some(p) = parent else {
                let len = e.md.borrow().clusters.len();
                return match own_esnap(e) {
                    Some(id) if idx < len && self.external_holds(&id, idx) => {
                        ClusterSource::External
                    }
                    _ => ClusterSource::Zeros,
                };
            };
            let Some(b) = s.blobs.get(&p) else {
                return ClusterSource::Zeros;
            };
            {
                let bmd = b.md.borrow();
                if idx >= bmd.clusters.len() {
                    // Past a parent's end: zeros (as SPDK's blob back device).
                    return ClusterSource::Zeros;
                }
                let c = bmd.clusters.get(idx);
                if c != 0 {
                    return ClusterSource::Device(self.cluster_lba(c));
                }
            }
            cur = Some(Rc::clone(b));
        }
        ClusterSource::Zeros
    }

    /// Whether the external device `id` reaches cluster `idx` (past its end
    /// a clone reads zeros); a detached one counts as reaching it (the
    /// chain is degraded, not zeros).
    fn external_holds(&self, id: &[u8], idx: u64) -> bool {
        match self.externals.get(id) {
            Some(dev) => {
                let end = (idx + 1) * u64::from(self.geo.cluster_size);
                end <= dev.num_blocks() * u64::from(dev.block_size())
            }
            None => true,
        }
    }

    /// The external snapshot id at the root of `entry`'s chain (itself
    /// included): the first blob up the chain with no parent, if it names
    /// one.
    pub(crate) fn chain_esnap(&self, entry: &BlobEntry) -> Option<Vec<u8>> {
        let s = self.state.borrow();
        let mut cur: Option<Rc<BlobEntry>> = None;
        for _ in 0..=s.blobs.len() {
            let e = cur.as_deref().unwrap_or(entry);
            let parent = e.md.borrow().parent();
            match parent {
                Some(p) => cur = Some(Rc::clone(s.blobs.get(&p)?)),
                None => return own_esnap(e),
            }
        }
        None
    }

    fn external_of(&self, entry: &BlobEntry, offset_blocks: u64) -> Result<Rc<dyn ExternalDevice>> {
        self.chain_esnap(entry)
            .and_then(|id| self.externals.get(&id))
            .ok_or(Error::Device {
                op: "read external snapshot",
                offset_blocks,
                source: DeviceError::new(libc::ENODEV),
            })
    }

    /// Reads `buf.len()` bytes at byte `offset` of the external snapshot of
    /// `entry`'s chain (ENODEV when it is not attached).
    pub(crate) async fn read_external(
        &self,
        entry: &BlobEntry,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let dev = self.external_of(entry, offset / u64::from(self.geo.block_size))?;
        let lba = offset / u64::from(dev.block_size());
        dev.read(lba, buf).await.map_err(|source| Error::Device {
            op: "read external snapshot",
            offset_blocks: lba,
            source,
        })
    }

    /// Copies cluster `idx` of the external snapshot at the root of
    /// `entry`'s chain into device cluster `dst`.
    pub(crate) async fn copy_external(&self, entry: &BlobEntry, idx: u64, dst: u32) -> Result<()> {
        let mut buf = self.take_buf();
        let r = async {
            self.read_external(entry, idx * u64::from(self.geo.cluster_size), &mut buf)
                .await?;
            self.write_cluster(dst, &buf).await
        }
        .await;
        self.put_buf(buf);
        r
    }
}

impl<D: BlobDevice> Blobstore<D> {
    /// Attaches `dev` as the external snapshot called `id`: the chains that
    /// end at `id` read from it from now on (replacing a device attached
    /// before). EINVAL when its block size does not divide the cluster
    /// size.
    pub fn attach_external(&self, id: &[u8], dev: Rc<dyn ExternalDevice>) -> Result<()> {
        let bs = dev.block_size();
        if bs == 0 || !self.store.geo.cluster_size.is_multiple_of(bs) {
            return Err(Error::InvalidArgument(
                "external snapshot block size does not divide the cluster size",
            ));
        }
        self.store.externals.insert(id, dev);
        Ok(())
    }

    /// Detaches external snapshot `id`: the chains that end at it are
    /// degraded. Returns the device.
    pub fn detach_external(&self, id: &[u8]) -> Option<Rc<dyn ExternalDevice>> {
        self.store.externals.remove(id)
    }

    /// The external snapshot ids that blobs of the store name (each chain's
    /// root), attached or not, in order.
    #[must_use]
    pub fn external_ids(&self) -> Vec<Vec<u8>> {
        let s = self.store.state.borrow();
        let mut ids: Vec<Vec<u8>> = s.blobs.values().filter_map(|b| own_esnap(b)).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The external snapshot id of blob `id` itself (an esnap clone's
    /// `EXTSNAP`), if it has one.
    #[must_use]
    pub fn esnap_id(&self, id: BlobId) -> Option<Vec<u8>> {
        self.store.entry(id).ok().and_then(|e| own_esnap(&e))
    }

    /// The external snapshot id at the root of blob `id`'s parent chain
    /// (itself included), if the chain ends at one.
    #[must_use]
    pub fn esnap_of_chain(&self, id: BlobId) -> Option<Vec<u8>> {
        let e = self.store.entry(id).ok()?;
        self.store.chain_esnap(&e)
    }

    /// Whether blob `id`'s chain ends at an external snapshot that is not
    /// attached (SPDK's `spdk_blob_is_degraded`).
    #[must_use]
    pub fn is_degraded(&self, id: BlobId) -> bool {
        self.esnap_of_chain(id)
            .is_some_and(|e| self.store.externals.get(&e).is_none())
    }

    /// Creates a thin clone of external snapshot `esnap_id`, `num_clusters`
    /// long, with `xattrs` (SPDK's `spdk_bs_create_blob_ext` with an
    /// `esnap_id`): one root write. Returns its id.
    pub async fn create_esnap_clone(
        &self,
        esnap_id: &[u8],
        num_clusters: u64,
        xattrs: &[(String, Vec<u8>)],
        clear_method: crate::options::ClearMethod,
    ) -> Result<BlobId> {
        if esnap_id.is_empty() {
            return Err(Error::InvalidArgument("empty external snapshot id"));
        }
        self.create_blob(&BlobOptions {
            num_clusters,
            thin_provision: true,
            xattrs: xattrs.to_vec(),
            internal_xattrs: vec![(XATTR_EXTSNAP.into(), esnap_id.to_vec())],
            clear_method,
            ..BlobOptions::default()
        })
        .await
    }

    /// Makes external snapshot `esnap_id` the parent of thin blob `id`
    /// (SPDK's `spdk_bs_blob_set_external_parent`): its own clusters stay,
    /// the rest read from the device; a parent snapshot it had is left.
    /// EINVAL for a thick blob, EEXIST if `esnap_id` is its parent already,
    /// EBUSY while another operation holds it. One root write.
    pub async fn set_external_parent(&self, id: BlobId, esnap_id: &[u8]) -> Result<()> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        if esnap_id.is_empty() {
            return Err(Error::InvalidArgument("empty external snapshot id"));
        }
        let entry = self.live_entry(id)?;
        if own_esnap(&entry).as_deref() == Some(esnap_id) {
            return Err(Error::AlreadyExternal(id));
        }
        if !entry.md.borrow().is_thin() {
            return Err(Error::InvalidArgument("parent of a thick blob"));
        }
        let _held = Held::take(&entry)?;
        let _lock = entry.lock.lock().await;
        self.store.commit_pending(&entry).await?;
        entry.epoch.set(entry.epoch.get() + 1);
        let mut next = entry.md.borrow().clone();
        next.remove_internal(XATTR_SNAP);
        next.set_internal(XATTR_EXTSNAP, esnap_id);
        next.invalid_flags |= FLAG_EXTERNAL_SNAPSHOT;
        self.store.persist_blob(&entry, next, Freed::Release).await
    }
}
