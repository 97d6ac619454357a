//! [`Blobstore`]: init, load, unload and grow a store; create, open, delete
//! and list its blobs.

use std::fmt;
use std::rc::Rc;

use futures::future::try_join_all;

use crate::blob::{check_xattr, Blob};
use crate::device::BlobDevice;
use crate::error::{Error, Result};
use crate::format::blob_md::{BlobMd, Xattr};
use crate::format::clusters::ClusterMap;
use crate::format::mask::{self, MASK_USED_BLOBIDS, MASK_USED_CLUSTERS, MASK_USED_PAGES};
use crate::format::super_block::BLOBID_INVALID;
use crate::format::{
    blob_id, mask_pages, FLAG_EXTENT_TABLE, FLAG_EXTERNAL_SNAPSHOT, FLAG_INTERNAL_XATTR,
    FLAG_THIN_PROV, MAX_BLOB_CLUSTERS, PAGE_SIZE, XATTR_EXTSNAP,
};
use crate::options::{BlobOptions, InitOptions, LoadOptions, StoreInfo};
use crate::persist::Freed;
use crate::store::{BlobEntry, Store};
use crate::BlobId;

/// A blobstore on a device. Cheap to clone: clones share the store.
pub struct Blobstore<D: BlobDevice> {
    pub(crate) store: Rc<Store<D>>,
}

impl<D: BlobDevice> Clone for Blobstore<D> {
    fn clone(&self) -> Self {
        Blobstore {
            store: self.store.clone(),
        }
    }
}

impl<D: BlobDevice> fmt::Debug for Blobstore<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blobstore")
            .field("info", &self.store.info())
            .finish()
    }
}

/// What [`Blobstore::verify`] found besides errors: pages and clusters
/// marked used that no blob owns (leaks: harmless, never double use).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Metadata pages marked used but unowned.
    pub leaked_pages: u64,
    /// Data clusters marked used but unowned.
    pub leaked_clusters: u64,
}

fn xattrs(list: &[(String, Vec<u8>)]) -> Result<Vec<Xattr>> {
    let mut out: Vec<Xattr> = Vec::new();
    for (n, v) in list {
        check_xattr(n, v)?;
        match out.iter_mut().find(|x| x.name == n.as_bytes()) {
            Some(x) => x.value.clone_from(v),
            None => out.push(Xattr {
                name: n.as_bytes().to_vec(),
                value: v.clone(),
            }),
        }
    }
    Ok(out)
}

impl<D: BlobDevice> Blobstore<D> {
    /// Creates a store on `dev` (everything on it is lost).
    pub async fn init(dev: D, opts: &InitOptions) -> Result<Self> {
        Ok(Blobstore {
            store: Rc::new(crate::init::init(dev, opts).await?),
        })
    }

    /// Loads the store on `dev`.
    pub async fn load(dev: D, opts: &LoadOptions) -> Result<Self> {
        let (store, fixups) = crate::load::load(dev, opts).await?;
        let bs = Blobstore {
            store: Rc::new(store),
        };
        bs.store.apply_fixups(&fixups).await?;
        if opts.grow {
            bs.grow().await?;
        }
        Ok(bs)
    }

    /// The device.
    #[must_use]
    pub fn device(&self) -> &D {
        &self.store.dev
    }

    /// Sizes and counts.
    #[must_use]
    pub fn info(&self) -> StoreInfo {
        self.store.info()
    }

    /// The super blob (lvol keeps the store's name and uuid there).
    #[must_use]
    pub fn super_blob(&self) -> Option<BlobId> {
        let sb = self.store.state.borrow().sb.super_blob;
        (sb != BLOBID_INVALID).then_some(sb)
    }

    /// Sets (or clears) the super blob: one super block write.
    pub async fn set_super_blob(&self, id: Option<BlobId>) -> Result<()> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        if let Some(id) = id {
            self.store.entry(id)?;
        }
        let _g = self.store.super_lock.lock().await;
        let mut sb = self.store.state.borrow().sb.clone();
        sb.super_blob = id.unwrap_or(BLOBID_INVALID);
        self.store.write_super(&sb).await?;
        self.store.state.borrow_mut().sb = sb;
        Ok(())
    }

    /// Every blob's id, in page order (SPDK's iteration order).
    #[must_use]
    pub fn blob_ids(&self) -> Vec<BlobId> {
        self.store.state.borrow().blobs.keys().copied().collect()
    }

    /// Creates a blob; returns its id.
    pub async fn create_blob(&self, opts: &BlobOptions) -> Result<BlobId> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        if opts.num_clusters > MAX_BLOB_CLUSTERS {
            return Err(Error::InvalidArgument("blob larger than 2^32 - 1 clusters"));
        }
        let user = xattrs(&opts.xattrs)?;
        let internal = xattrs(&opts.internal_xattrs)?;
        let root = self.store.claim_page(0)?;
        let id = blob_id(root);
        self.store
            .state
            .borrow_mut()
            .used_blobids
            .set(u64::from(root));
        let undo = |claimed: &[u32]| {
            self.store.release_clusters(claimed);
            self.store.release_pages(&[root]);
            self.store
                .state
                .borrow_mut()
                .used_blobids
                .clear(u64::from(root));
        };
        let mut invalid = 0;
        if opts.thin_provision {
            invalid |= FLAG_THIN_PROV;
        }
        if opts.use_extent_table {
            invalid |= FLAG_EXTENT_TABLE;
        }
        if !internal.is_empty() {
            invalid |= FLAG_INTERNAL_XATTR;
        }
        if opts.thin_provision && opts.internal_xattrs.iter().any(|(n, _)| n == XATTR_EXTSNAP) {
            invalid |= FLAG_EXTERNAL_SNAPSHOT;
        }
        let empty = BlobMd {
            id,
            invalid_flags: invalid,
            data_ro_flags: 0,
            md_ro_flags: opts.clear_method.bits(),
            xattrs: Vec::new(),
            internal_xattrs: Vec::new(),
            clusters: ClusterMap::new(0),
            use_extent_table: opts.use_extent_table,
            extent_pages: Vec::new(),
            pages: Vec::new(),
        };
        let mut md = BlobMd {
            xattrs: user,
            internal_xattrs: internal,
            clusters: ClusterMap::new(opts.num_clusters),
            ..empty.clone()
        };
        let mut claimed = Vec::new();
        if !opts.thin_provision {
            claimed = match self.store.claim_clusters(opts.num_clusters) {
                Ok(c) => c,
                Err(e) => {
                    undo(&[]);
                    return Err(e);
                }
            };
            for (i, &c) in claimed.iter().enumerate() {
                md.clusters.set(i as u64, c);
            }
        }
        let entry = Rc::new(BlobEntry::new(empty));
        let r = {
            let _lock = entry.lock.lock().await;
            self.store.persist_blob(&entry, md, Freed::Release).await
        };
        if let Err(e) = r {
            if !self.store.state.borrow().failed {
                undo(&claimed);
            }
            return Err(e);
        }
        self.store.state.borrow_mut().blobs.insert(id, entry);
        Ok(id)
    }

    /// Opens a blob (its metadata is in memory since load: no I/O).
    pub fn open_blob(&self, id: BlobId) -> Result<Blob<D>> {
        let _op = self.store.op()?;
        let entry = self.store.entry(id)?;
        if entry.deleting.get() {
            return Err(Error::NotFound(id));
        }
        let unknown = entry.unknown_invalid_flags();
        if unknown != 0 {
            return Err(Error::UnknownFlags {
                blob: id,
                flags: entry.md.borrow().invalid_flags,
            });
        }
        entry.open_refs.set(entry.open_refs.get() + 1);
        Ok(Blob {
            store: self.store.clone(),
            entry,
        })
    }

    /// Deletes a blob that is not open: its clusters are freed (and cleared
    /// by its clear method). A snapshot with one clone is merged into it
    /// first (see [`Blobstore::create_snapshot`]); one with several clones
    /// is refused with [`Error::HasClones`] (EBUSY), as SPDK does.
    pub async fn delete_blob(&self, id: BlobId) -> Result<()> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        let entry = self.store.entry(id)?;
        if entry.deleting.get() || entry.open_refs.get() > 0 || entry.busy.get() {
            return Err(Error::Busy(id));
        }
        let clones = self.clones(id);
        if clones.len() > 1 {
            return Err(Error::HasClones(id));
        }
        if let Some(&clone) = clones.first() {
            return self.merge_snapshot(&entry, clone).await;
        }
        if entry.unknown_invalid_flags() != 0 {
            return Err(Error::UnknownFlags {
                blob: id,
                flags: entry.md.borrow().invalid_flags,
            });
        }
        entry.deleting.set(true);
        let _lock = entry.lock.lock().await;
        let r = self.store.delete_blob_md(&entry).await;
        if r.is_err() && !self.store.state.borrow().failed {
            entry.deleting.set(false);
        }
        if r.is_ok() {
            self.store.state.borrow_mut().snapshots.remove(&id);
        }
        r
    }

    /// Grows the store into a device that grew (SPDK's `spdk_bs_grow_live`):
    /// one super block write with the new size. Returns false if the device
    /// did not grow; fails if the used-cluster mask has no room for the new
    /// size (see `max_growable_size`).
    pub async fn grow(&self) -> Result<bool> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        let _g = self.store.super_lock.lock().await;
        let geo = self.store.geo;
        let dev_bytes = self
            .store
            .dev
            .num_blocks()
            .saturating_mul(u64::from(geo.block_size));
        let (mut sb, size, total) = {
            let s = self.store.state.borrow();
            (s.sb.clone(), s.size, s.total_clusters)
        };
        if dev_bytes == size {
            return Ok(false);
        }
        let new_total = dev_bytes / u64::from(geo.cluster_size);
        let needed = mask_pages(new_total);
        let room = u64::from(
            sb.used_blobid_mask_start
                .saturating_sub(sb.used_cluster_mask_start),
        );
        if dev_bytes < size || new_total < total || needed > room {
            return Err(Error::CannotGrow);
        }
        sb.clean = false;
        sb.size = dev_bytes;
        sb.used_cluster_mask_len = u32::try_from(needed).map_err(|_| Error::CannotGrow)?;
        self.store.write_super(&sb).await?;
        let mut s = self.store.state.borrow_mut();
        s.sb = sb;
        s.size = dev_bytes;
        s.total_clusters = new_total;
        s.used_clusters.grow(new_total);
        Ok(true)
    }

    /// Unloads: with no blob open and nothing in flight, writes the masks,
    /// then the super block with clean = 1 (nothing if the disk is clean
    /// already). The store answers `Unloaded` after.
    pub async fn unload(&self) -> Result<()> {
        {
            let s = self.store.state.borrow();
            if s.unloaded {
                return Err(Error::Unloaded);
            }
            if s.ops > 0 || s.blobs.values().any(|b| b.open_refs.get() > 0) {
                return Err(Error::StoreBusy);
            }
        }
        let _op = self.store.op()?;
        if self.store.state.borrow().failed {
            self.store.state.borrow_mut().unloaded = true;
            return Err(Error::Failed);
        }
        let _g = self.store.super_lock.lock().await;
        let (mut sb, writes) = {
            let s = self.store.state.borrow();
            let sb = s.sb.clone();
            let mut w = Vec::new();
            if !sb.clean {
                w.push((
                    sb.used_page_mask_start,
                    mask::encode(MASK_USED_PAGES, &s.used_pages, sb.used_page_mask_len),
                ));
                if sb.used_blobid_mask_len != 0 {
                    w.push((
                        sb.used_blobid_mask_start,
                        mask::encode(MASK_USED_BLOBIDS, &s.used_blobids, sb.used_blobid_mask_len),
                    ));
                }
                w.push((
                    sb.used_cluster_mask_start,
                    mask::encode(
                        MASK_USED_CLUSTERS,
                        &s.used_clusters,
                        sb.used_cluster_mask_len,
                    ),
                ));
            }
            (sb, w)
        };
        if !writes.is_empty() {
            let bpp = self.store.geo.blocks_per_page;
            try_join_all(
                writes
                    .iter()
                    .map(|(start, data)| self.store.write(u64::from(*start) * bpp, data)),
            )
            .await?;
            sb.clean = true;
            self.store.write_super(&sb).await?;
        }
        let mut s = self.store.state.borrow_mut();
        s.sb = sb;
        s.unloaded = true;
        Ok(())
    }

    /// Destroys the store (SPDK's `spdk_bs_destroy`): with no blob open and
    /// nothing in flight, zeroes the super block, so that the device no
    /// longer loads as a store. The blobs' clusters are left as they are
    /// (delete the blobs first to clear them). The store answers
    /// `Unloaded` after, whatever the outcome.
    pub async fn destroy(&self) -> Result<()> {
        {
            let s = self.store.state.borrow();
            if s.unloaded {
                return Err(Error::Unloaded);
            }
            if s.ops > 0 || s.blobs.values().any(|b| b.open_refs.get() > 0) {
                return Err(Error::StoreBusy);
            }
        }
        let _op = self.store.op()?;
        let _g = self.store.super_lock.lock().await;
        let r = self
            .store
            .write_zeroes(0, self.store.geo.blocks_per_page)
            .await;
        self.store.state.borrow_mut().unloaded = true;
        r
    }

    /// Checks the in-memory state: every blob's pages and clusters marked
    /// used, inside their areas, and owned once. Errors name the conflict;
    /// the report counts leaks.
    pub fn verify(&self) -> Result<VerifyReport> {
        let s = self.store.state.borrow();
        let geo = self.store.geo;
        let mut pages = crate::bitmap::BitVec::new(u64::from(geo.md_len));
        let mut clusters = crate::bitmap::BitVec::new(s.total_clusters);
        let mut page_owner = std::collections::HashMap::new();
        let mut cluster_owner = std::collections::HashMap::new();
        for (&id, b) in &s.blobs {
            let md = b.md.borrow();
            for p in md.all_pages() {
                if !s.used_pages.get(u64::from(p)) {
                    return Err(Error::CorruptBlob {
                        blob: id,
                        page: p,
                        reason: crate::error::Corruption::PageNotMarked(p),
                    });
                }
                if !pages.set(u64::from(p)) {
                    return Err(Error::ClaimedTwice {
                        what: "page",
                        index: u64::from(p),
                        first: page_owner[&p],
                        second: id,
                    });
                }
                page_owner.insert(p, id);
            }
            for (_, c) in md.clusters.iter_allocated() {
                let c64 = u64::from(c);
                if c64 < geo.first_data_cluster
                    || c64 >= s.total_clusters
                    || !s.used_clusters.get(c64)
                {
                    return Err(Error::CorruptBlob {
                        blob: id,
                        page: md.pages.first().copied().unwrap_or(0),
                        reason: crate::error::Corruption::ClusterNotMarked(c64),
                    });
                }
                if !clusters.set(c64) {
                    return Err(Error::ClaimedTwice {
                        what: "cluster",
                        index: c64,
                        first: cluster_owner[&c],
                        second: id,
                    });
                }
                cluster_owner.insert(c, id);
            }
        }
        let pending: u64 = s
            .blobs
            .values()
            .map(|b| b.pending.borrow().len() as u64)
            .sum();
        Ok(VerifyReport {
            leaked_pages: s.used_pages.count_ones() - pages.count_ones(),
            leaked_clusters: (s.used_clusters.count_ones() - geo.first_data_cluster)
                .saturating_sub(clusters.count_ones() + pending),
        })
    }

    /// Bytes per metadata page (4096).
    #[must_use]
    pub fn page_size(&self) -> usize {
        PAGE_SIZE
    }
}
