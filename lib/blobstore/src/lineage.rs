//! Snapshots and clones, SPDK's way, and the operations that change a
//! blob's parent: inflate, decouple, set_parent, and deleting a snapshot.
//!
//! A clone is a thin blob whose internal xattr `SNAP` holds its parent's id;
//! the parent (a snapshot) is data read-only. The lineage lives on disk only
//! in those links and is rebuilt from them at load.
//!
//! # Crash safety, operation by operation
//!
//! Every single-blob change is one atomic root write (see `persist`).
//!
//! - **Snapshot** of blob O (SPDK's `spdk_bs_create_snapshot` order): (1) a
//!   new thin blob S with `SNAPTMP` = O; (2) S rewritten with O's clusters,
//!   O's flags and O's parent — both now claim the clusters on disk; (3) O
//!   rewritten as a thin clone with `SNAP` = S and no clusters; (4) S
//!   rewritten without `SNAPTMP`, READ_ONLY. A cut after (1) or (2) leaves S
//!   marked and O not pointing at it: load deletes S without O's clusters
//!   (O's old lineage). A cut after (3) leaves O pointing at S: load
//!   finishes (4) (the new lineage). See `recover`.
//! - **Clone** of S: one blob created with `SNAP` = S: one root write.
//! - **Inflate / decouple**: clusters are allocated and copied one at a
//!   time, each an ordinary allocation (the blob reads the same bytes either
//!   way), then one root write drops or moves the parent link.
//! - **set_parent**: one root write.
//! - **Delete a snapshot with one clone C** (SPDK's order): (1) S gets
//!   `SNAPRM` = C; (2) C rewritten with the clusters of S it lacks and the
//!   parent of S; (3) S's root zeroed (S gone), then the clusters C did not
//!   take cleared and freed. A cut after (1) leaves C pointing at S: load
//!   keeps S (marker removed). A cut after (2) leaves C pointing past S:
//!   load deletes S without the clusters C holds.
//!
//! Data writes to a blob whose lineage changes must be held by the caller
//! (SPDK freezes the blob's I/O): the store commits allocations queued on
//! the blob before the change and redoes copy-on-writes that overlap it,
//! but a data write to a cluster a snapshot takes would change the snapshot.

use std::rc::Rc;

use crate::blobstore::Blobstore;
use crate::device::BlobDevice;
use crate::error::{Error, Result};
use crate::format::clusters::ClusterMap;
use crate::format::{
    FLAG_EXTERNAL_SNAPSHOT, FLAG_INTERNAL_XATTR, FLAG_READ_ONLY, FLAG_THIN_PROV, XATTR_EXTSNAP,
    XATTR_SNAP, XATTR_SNAPRM, XATTR_SNAPTMP,
};
use crate::options::BlobOptions;
use crate::persist::Freed;
use crate::store::BlobEntry;
use crate::BlobId;

/// Holds a blob for one lineage operation (SPDK's
/// `locked_operation_in_progress`).
pub(crate) struct Held<'a>(&'a BlobEntry);

impl<'a> Held<'a> {
    pub(crate) fn take(entry: &'a BlobEntry) -> Result<Self> {
        if entry.busy.get() || entry.deleting.get() {
            return Err(Error::Busy(entry.id));
        }
        entry.busy.set(true);
        Ok(Held(entry))
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.busy.set(false);
    }
}

impl<D: BlobDevice> Blobstore<D> {
    pub(crate) fn live_entry(&self, id: BlobId) -> Result<Rc<BlobEntry>> {
        let entry = self.store.entry(id)?;
        if entry.deleting.get() {
            return Err(Error::NotFound(id));
        }
        if entry.unknown_invalid_flags() != 0 {
            return Err(Error::UnknownFlags {
                blob: id,
                flags: entry.md.borrow().invalid_flags,
            });
        }
        Ok(entry)
    }

    /// The parent snapshot of blob `id` (its `SNAP` link), if it has one.
    #[must_use]
    pub fn parent(&self, id: BlobId) -> Option<BlobId> {
        self.store.parent_of(id)
    }

    /// The clones of blob `id` (blobs whose parent it is), in id order.
    #[must_use]
    pub fn clones(&self, id: BlobId) -> Vec<BlobId> {
        let s = self.store.state.borrow();
        s.blobs
            .iter()
            .filter(|(_, b)| b.md.borrow().parent() == Some(id))
            .map(|(&c, _)| c)
            .collect()
    }

    /// Whether blob `id` is a snapshot: it has been a parent since load
    /// and not deleted (SPDK's `spdk_blob_is_snapshot`).
    #[must_use]
    pub fn is_snapshot(&self, id: BlobId) -> bool {
        self.store.state.borrow().snapshots.contains(&id)
    }

    /// Takes a snapshot of blob `id`: a new read-only blob with `xattrs`
    /// takes over its clusters, and `id` becomes its thin clone. Refused on a
    /// read-only blob (EINVAL) and on one held by another lineage operation
    /// (EBUSY), as SPDK does. Returns the snapshot's id. The caller holds the
    /// blob's data writes meanwhile (see the module docs).
    pub async fn create_snapshot(
        &self,
        id: BlobId,
        xattrs: &[(String, Vec<u8>)],
    ) -> Result<BlobId> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        let orig = self.live_entry(id)?;
        if orig.md_ro() {
            return Err(Error::InvalidArgument("snapshot of a read-only blob"));
        }
        let _held = Held::take(&orig)?;
        let (num_clusters, use_extent_table) = {
            let md = orig.md.borrow();
            (md.clusters.len(), md.use_extent_table)
        };
        // (1) The snapshot, empty and marked.
        let snap_id = self
            .create_blob(&BlobOptions {
                num_clusters,
                thin_provision: true,
                xattrs: xattrs.to_vec(),
                internal_xattrs: vec![(XATTR_SNAPTMP.into(), id.to_le_bytes().to_vec())],
                clear_method: orig.clear_method(),
                use_extent_table,
            })
            .await?;
        let snap = self.store.entry(snap_id)?;
        let _snap_held = Held::take(&snap)?;
        let lock = orig.lock.lock().await;
        if let Err(e) = self.store.commit_pending(&orig).await {
            drop(lock);
            self.undo_new_blob(snap_id).await;
            return Err(e);
        }
        // The origin's epoch stays: a copy-on-write in flight is of a
        // cluster the origin does not hold, so the snapshot (taking what it
        // holds) does not hold it either, and the cluster reads from the
        // same ancestor before and after. The copy stays good and commits
        // to the origin, now the clone.
        let cur = orig.md.borrow().clone();

        // (2) The snapshot takes the origin's clusters, flags and parent.
        let mut s_next = snap.md.borrow().clone();
        s_next.clusters = cur.clusters.clone();
        s_next.invalid_flags = cur.invalid_flags | FLAG_INTERNAL_XATTR;
        if let Some(p) = cur.parent() {
            s_next.set_internal(XATTR_SNAP, &p.to_le_bytes());
        }
        if let Some(v) = cur.internal(XATTR_EXTSNAP) {
            s_next.set_internal(XATTR_EXTSNAP, v);
        }
        let r = {
            let _l = snap.lock.lock().await;
            self.store
                .persist_blob(&snap, s_next, Freed::Handover)
                .await
        };
        if let Err(e) = r {
            drop(lock);
            self.undo_new_blob(snap_id).await;
            return Err(e);
        }

        // (3) The origin becomes a thin clone of the snapshot.
        let mut o_next = cur.clone();
        o_next.clusters = ClusterMap::new(num_clusters);
        o_next.invalid_flags = (o_next.invalid_flags | FLAG_THIN_PROV) & !FLAG_EXTERNAL_SNAPSHOT;
        o_next.remove_internal(XATTR_EXTSNAP);
        o_next.set_internal(XATTR_SNAP, &snap_id.to_le_bytes());
        if let Err(e) = self
            .store
            .persist_blob(&orig, o_next, Freed::Handover)
            .await
        {
            drop(lock);
            if !self.store.state.borrow().failed {
                // Nothing was written: give the clusters back to the origin
                // alone, then drop the snapshot.
                let mut back = snap.md.borrow().clone();
                back.clusters = ClusterMap::new(num_clusters);
                let _l = snap.lock.lock().await;
                let _ = self.store.persist_blob(&snap, back, Freed::Handover).await;
            }
            self.undo_new_blob(snap_id).await;
            return Err(e);
        }
        self.store.state.borrow_mut().snapshots.insert(snap_id);
        drop(lock);

        // (4) The snapshot: marker off, read-only.
        let mut done = snap.md.borrow().clone();
        done.remove_internal(XATTR_SNAPTMP);
        done.data_ro_flags |= FLAG_READ_ONLY;
        let _l = snap.lock.lock().await;
        self.store.persist_blob(&snap, done, Freed::Release).await?;
        Ok(snap_id)
    }

    /// Deletes a blob a failed operation created (best effort: a failed
    /// store is reloaded, and load resolves the markers).
    async fn undo_new_blob(&self, id: BlobId) {
        if self.store.state.borrow().failed {
            return;
        }
        if let Ok(entry) = self.store.entry(id) {
            entry.busy.set(false);
            let _l = entry.lock.lock().await;
            let _ = self.store.delete_blob_md(&entry).await;
        }
    }

    /// Creates a thin clone of snapshot `snapshot` with `xattrs`; returns its
    /// id. The parent must be read-only (EINVAL otherwise, as SPDK's).
    pub async fn create_clone(
        &self,
        snapshot: BlobId,
        xattrs: &[(String, Vec<u8>)],
    ) -> Result<BlobId> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        let snap = self.live_entry(snapshot)?;
        if !snap.data_ro() || !snap.md_ro() {
            return Err(Error::InvalidArgument(
                "clone of a blob that is not read-only",
            ));
        }
        let _held = Held::take(&snap)?;
        let (num_clusters, use_extent_table) = {
            let md = snap.md.borrow();
            (md.clusters.len(), md.use_extent_table)
        };
        let id = self
            .create_blob(&BlobOptions {
                num_clusters,
                thin_provision: true,
                xattrs: xattrs.to_vec(),
                internal_xattrs: vec![(XATTR_SNAP.into(), snapshot.to_le_bytes().to_vec())],
                use_extent_table,
                ..BlobOptions::default()
            })
            .await?;
        self.store.state.borrow_mut().snapshots.insert(snapshot);
        Ok(id)
    }

    /// Merges snapshot `snap` into its only clone and deletes it (SPDK's
    /// `update_clone_on_snapshot_deletion` and what follows).
    pub(crate) async fn merge_snapshot(&self, snap: &BlobEntry, clone_id: BlobId) -> Result<()> {
        let clone = self.live_entry(clone_id)?;
        let _held = Held::take(snap)?;
        let _clone_held = Held::take(&clone)?;
        snap.deleting.set(true);
        let r = self.merge_steps(snap, &clone).await;
        if r.is_err() && !self.store.state.borrow().failed {
            snap.deleting.set(false);
        }
        r
    }

    async fn merge_steps(&self, snap: &BlobEntry, clone: &BlobEntry) -> Result<()> {
        let snap_lock = snap.lock.lock().await;
        // (1) The marker.
        let mut marked = snap.md.borrow().clone();
        marked.set_internal(XATTR_SNAPRM, &clone.id.to_le_bytes());
        self.store
            .persist_blob(snap, marked, Freed::Release)
            .await?;

        // (2) The clone takes what it lacks, and the snapshot's parent.
        let clone_lock = clone.lock.lock().await;
        let r = self.store.commit_pending(clone).await;
        let r = match r {
            Ok(()) => {
                clone.epoch.set(clone.epoch.get() + 1);
                let s = snap.md.borrow().clone();
                let mut c_next = clone.md.borrow().clone();
                let mut taken = Vec::new();
                for (i, c) in s.clusters.iter_allocated() {
                    if i < c_next.clusters.len() && c_next.clusters.get(i) == 0 {
                        c_next.clusters.set(i, c);
                        taken.push(i);
                    }
                }
                match s.parent() {
                    Some(p) => c_next.set_internal(XATTR_SNAP, &p.to_le_bytes()),
                    None => c_next.remove_internal(XATTR_SNAP),
                }
                if let Some(v) = s.internal(XATTR_EXTSNAP) {
                    c_next.set_internal(XATTR_EXTSNAP, v);
                    c_next.invalid_flags |= FLAG_EXTERNAL_SNAPSHOT;
                }
                self.store
                    .persist_blob(clone, c_next, Freed::Release)
                    .await
                    .map(|()| taken)
            }
            Err(e) => Err(e),
        };
        clone.epoch.set(clone.epoch.get() + 1);
        drop(clone_lock);
        let taken = match r {
            Ok(t) => t,
            Err(e) => {
                if !self.store.state.borrow().failed {
                    let mut back = snap.md.borrow().clone();
                    back.remove_internal(XATTR_SNAPRM);
                    let _ = self.store.persist_blob(snap, back, Freed::Release).await;
                }
                return Err(e);
            }
        };

        // (3) The snapshot, without what the clone took, is deleted.
        {
            let mut md = snap.md.borrow_mut();
            for i in taken {
                md.clusters.set(i, 0);
            }
        }
        self.store.delete_blob_md(snap).await?;
        drop(snap_lock);
        self.store.state.borrow_mut().snapshots.remove(&snap.id);
        Ok(())
    }

    /// Inflates blob `id`: every cluster it does not hold is allocated and
    /// filled from its parent chain (zeros where the chain has none; the
    /// external snapshot's data where it ends at one, which must be
    /// attached), and it becomes a thick blob with no parent. A thick blob: nothing to do.
    /// ENOSPC if the store lacks the clusters (checked first).
    pub async fn inflate_blob(&self, id: BlobId) -> Result<()> {
        self.inflate(id, true).await
    }

    /// Decouples blob `id` from its parent: the clusters the parent itself
    /// holds are copied into the blob, and the blob's parent becomes the
    /// parent's parent (none at the top; the external snapshot where the
    /// parent is an esnap clone). EINVAL without a parent; an esnap clone
    /// is inflated (SPDK's).
    pub async fn decouple_parent(&self, id: BlobId) -> Result<()> {
        self.inflate(id, false).await
    }

    fn needed(&self, entry: &BlobEntry, allocate_all: bool) -> Vec<u64> {
        let s = self.store.state.borrow();
        let md = entry.md.borrow();
        let parent = md.parent().and_then(|p| s.blobs.get(&p));
        (0..md.clusters.len())
            .filter(|&i| md.clusters.get(i) == 0)
            .filter(|&i| match parent {
                None => allocate_all,
                Some(p) => allocate_all || p.md.borrow().clusters.get(i) != 0,
            })
            .collect()
    }

    async fn inflate(&self, id: BlobId, allocate_all: bool) -> Result<()> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        let entry = self.live_entry(id)?;
        // An esnap clone has its device's data in every cluster: decouple
        // is inflate (SPDK's).
        let allocate_all = allocate_all || entry.md.borrow().esnap_id().is_some();
        let _held = Held::take(&entry)?;
        let parent = self.parent(id);
        if parent.is_none() && !allocate_all {
            return Err(Error::InvalidArgument("decouple of a blob with no parent"));
        }
        if !entry.md.borrow().is_thin() {
            return Ok(());
        }
        if entry.data_ro() {
            return Err(Error::ReadOnly(id));
        }
        let needed = self.needed(&entry, allocate_all);
        if needed.len() as u64 > self.store.info().free_clusters {
            return Err(Error::NoSpace);
        }
        let lock = loop {
            for &idx in &self.needed(&entry, allocate_all) {
                self.store.allocate_cluster(&entry, idx, true).await?;
            }
            let lock = entry.lock.lock().await;
            self.store.commit_pending(&entry).await?;
            // A release between the allocations and the lock: go again.
            if self.needed(&entry, allocate_all).is_empty() {
                break lock;
            }
        };
        entry.epoch.set(entry.epoch.get() + 1);
        let mut next = entry.md.borrow().clone();
        let grandparent = parent.and_then(|p| self.parent(p));
        if allocate_all {
            next.remove_internal(XATTR_SNAP);
            next.remove_internal(XATTR_EXTSNAP);
            next.invalid_flags &= !(FLAG_THIN_PROV | FLAG_EXTERNAL_SNAPSHOT);
        } else {
            match grandparent {
                Some(g) => next.set_internal(XATTR_SNAP, &g.to_le_bytes()),
                None => next.remove_internal(XATTR_SNAP),
            }
            // The parent was the root of a chain that ends at an external
            // snapshot: the blob becomes its clone.
            let esnap = parent.and_then(|p| self.esnap_id(p));
            if let (None, Some(e)) = (grandparent, esnap) {
                next.set_internal(XATTR_EXTSNAP, &e);
                next.invalid_flags |= FLAG_EXTERNAL_SNAPSHOT;
            }
        }
        self.store
            .persist_blob(&entry, next, Freed::Release)
            .await?;
        drop(lock);
        Ok(())
    }

    /// Makes snapshot `snapshot` the parent of thin blob `id` (SPDK's
    /// `spdk_bs_blob_set_parent`): the blob's own clusters stay, the rest
    /// read from the new parent. EINVAL for the same blob, a thick blob, a
    /// parent that is not a snapshot or of another size, or a link that
    /// would make a cycle; EEXIST if it is the parent already; EBUSY while
    /// either is held by another operation.
    pub async fn set_parent(&self, id: BlobId, snapshot: BlobId) -> Result<()> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        if id == snapshot {
            return Err(Error::InvalidArgument("a blob cannot be its own parent"));
        }
        if self.parent(id) == Some(snapshot) {
            return Err(Error::AlreadyParent {
                blob: id,
                parent: snapshot,
            });
        }
        let entry = self.live_entry(id)?;
        if !entry.md.borrow().is_thin() {
            return Err(Error::InvalidArgument("parent of a thick blob"));
        }
        let snap = self.live_entry(snapshot)?;
        if !self.is_snapshot(snapshot) {
            return Err(Error::InvalidArgument("parent is not a snapshot"));
        }
        if entry.md.borrow().clusters.len() != snap.md.borrow().clusters.len() {
            return Err(Error::InvalidArgument("parent of another size"));
        }
        let mut up = Some(snapshot);
        let limit = self.store.state.borrow().blobs.len();
        for _ in 0..limit {
            match up {
                Some(p) if p == id => {
                    return Err(Error::InvalidArgument("parent link would make a cycle"))
                }
                Some(p) => up = self.parent(p),
                None => break,
            }
        }
        let _held = Held::take(&entry)?;
        let _snap_held = Held::take(&snap)?;
        let _lock = entry.lock.lock().await;
        self.store.commit_pending(&entry).await?;
        entry.epoch.set(entry.epoch.get() + 1);
        let mut next = entry.md.borrow().clone();
        next.set_internal(XATTR_SNAP, &snapshot.to_le_bytes());
        next.remove_internal(XATTR_EXTSNAP);
        next.invalid_flags &= !FLAG_EXTERNAL_SNAPSHOT;
        self.store
            .persist_blob(&entry, next, Freed::Release)
            .await?;
        self.store.state.borrow_mut().snapshots.insert(snapshot);
        Ok(())
    }
}
