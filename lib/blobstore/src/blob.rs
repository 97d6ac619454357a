//! An open blob: its size and cluster map, xattrs and flags, and the
//! metadata operations on it.

use std::fmt;
use std::rc::Rc;

use crate::device::BlobDevice;
use crate::error::{Error, Result};
use crate::format::blob_md::{BlobMd, Xattr, MAX_XATTR_PAYLOAD};
use crate::format::{
    FLAG_EXTERNAL_SNAPSHOT, FLAG_INTERNAL_XATTR, FLAG_READ_ONLY, MAX_BLOB_CLUSTERS,
};
use crate::options::ClearMethod;
use crate::persist::Freed;
use crate::store::{BlobEntry, Store};
use crate::BlobId;

/// An open blob. Dropping the last handle closes it (nothing to write: every
/// operation persists before it returns). Clones are further open handles.
pub struct Blob<D: BlobDevice> {
    pub(crate) store: Rc<Store<D>>,
    pub(crate) entry: Rc<BlobEntry>,
}

impl<D: BlobDevice> fmt::Debug for Blob<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blob")
            .field("id", &format_args!("{:#x}", self.entry.id))
            .finish()
    }
}

impl<D: BlobDevice> Clone for Blob<D> {
    fn clone(&self) -> Self {
        self.entry.open_refs.set(self.entry.open_refs.get() + 1);
        Blob {
            store: self.store.clone(),
            entry: self.entry.clone(),
        }
    }
}

impl<D: BlobDevice> Drop for Blob<D> {
    fn drop(&mut self) {
        self.entry
            .open_refs
            .set(self.entry.open_refs.get().saturating_sub(1));
    }
}

/// Checks an xattr fits in one metadata page.
pub(crate) fn check_xattr(name: &str, value: &[u8]) -> Result<()> {
    if name.len() + value.len() > MAX_XATTR_PAYLOAD {
        return Err(Error::XattrTooLarge);
    }
    Ok(())
}

fn put(list: &mut Vec<Xattr>, name: &str, value: &[u8]) {
    match list.iter_mut().find(|x| x.name == name.as_bytes()) {
        Some(x) => x.value = value.to_vec(),
        None => list.push(Xattr {
            name: name.as_bytes().to_vec(),
            value: value.to_vec(),
        }),
    }
}

fn get(list: &[Xattr], name: &str) -> Option<Vec<u8>> {
    list.iter()
        .find(|x| x.name == name.as_bytes())
        .map(|x| x.value.clone())
}

impl<D: BlobDevice> Blob<D> {
    /// The blob's id.
    #[must_use]
    pub fn id(&self) -> BlobId {
        self.entry.id
    }

    /// Size in clusters.
    #[must_use]
    pub fn num_clusters(&self) -> u64 {
        self.entry.md.borrow().clusters.len()
    }

    /// Clusters allocated.
    #[must_use]
    pub fn num_allocated_clusters(&self) -> u64 {
        self.entry.md.borrow().clusters.allocated()
    }

    /// Device blocks per cluster.
    #[must_use]
    pub fn blocks_per_cluster(&self) -> u64 {
        self.store.geo.blocks_per_cluster
    }

    /// Thin provisioned.
    #[must_use]
    pub fn is_thin(&self) -> bool {
        self.entry.md.borrow().is_thin()
    }

    /// Data read-only (the READ_ONLY flag, or data-ro flags this library
    /// does not know).
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.entry.data_ro()
    }

    /// Metadata read-only (data read-only, or md-ro flags not known).
    #[must_use]
    pub fn is_md_read_only(&self) -> bool {
        self.entry.md_ro()
    }

    /// A clone of an external snapshot (EXTERNAL_SNAPSHOT flag).
    #[must_use]
    pub fn is_esnap_clone(&self) -> bool {
        self.entry.md.borrow().invalid_flags & FLAG_EXTERNAL_SNAPSHOT != 0
    }

    /// Extents kept in an extent table (else RLE, from an older store).
    #[must_use]
    pub fn uses_extent_table(&self) -> bool {
        self.entry.md.borrow().use_extent_table
    }

    /// The raw flags: (invalid, data_ro, md_ro).
    #[must_use]
    pub fn flags(&self) -> (u64, u64, u64) {
        let md = self.entry.md.borrow();
        (md.invalid_flags, md.data_ro_flags, md.md_ro_flags)
    }

    /// How freed clusters are cleared.
    #[must_use]
    pub fn clear_method(&self) -> ClearMethod {
        self.entry.clear_method()
    }

    /// The device LBA where blob cluster `idx` starts, if it is allocated
    /// (and its mapping is on disk). For the I/O path: no allocation, no
    /// lock, one `RefCell` borrow.
    #[must_use]
    pub fn cluster_lba(&self, idx: u64) -> Option<u64> {
        let c = self.entry.md.borrow().clusters.get(idx);
        (c != 0).then(|| self.store.cluster_lba(c))
    }

    /// The device cluster of every allocated cluster: (blob index, device
    /// cluster number).
    #[must_use]
    pub fn allocated_clusters(&self) -> Vec<(u64, u32)> {
        self.entry.md.borrow().clusters.iter_allocated().collect()
    }

    /// The metadata pages the blob uses: its chain (root first), then its
    /// extent pages.
    #[must_use]
    pub fn metadata_pages(&self) -> Vec<u32> {
        let md = self.entry.md.borrow();
        md.pages
            .iter()
            .chain(md.extent_pages.iter().filter(|&&p| p != 0))
            .copied()
            .collect()
    }

    /// An xattr's value.
    #[must_use]
    pub fn xattr(&self, name: &str) -> Option<Vec<u8>> {
        get(&self.entry.md.borrow().xattrs, name)
    }

    /// The names of the xattrs (lossy UTF-8), in stored order.
    #[must_use]
    pub fn xattr_names(&self) -> Vec<String> {
        self.entry
            .md
            .borrow()
            .xattrs
            .iter()
            .map(|x| String::from_utf8_lossy(&x.name).into_owned())
            .collect()
    }

    /// An internal xattr's value (SNAP, EXTSNAP, ...).
    #[must_use]
    pub fn internal_xattr(&self, name: &str) -> Option<Vec<u8>> {
        get(&self.entry.md.borrow().internal_xattrs, name)
    }

    /// The names of the internal xattrs.
    #[must_use]
    pub fn internal_xattr_names(&self) -> Vec<String> {
        self.entry
            .md
            .borrow()
            .internal_xattrs
            .iter()
            .map(|x| String::from_utf8_lossy(&x.name).into_owned())
            .collect()
    }

    /// Changes the metadata with `f` and persists it (unchanged: no write).
    async fn update(&self, f: impl FnOnce(&mut BlobMd) -> Result<()>) -> Result<()> {
        let _op = self.store.op()?;
        self.store.check_writable()?;
        let _lock = self.entry.lock.lock().await;
        if self.entry.md_ro() {
            return Err(Error::ReadOnly(self.entry.id));
        }
        let mut next = self.entry.md.borrow().clone();
        f(&mut next)?;
        if next == *self.entry.md.borrow() {
            return Ok(());
        }
        self.store
            .persist_blob(&self.entry, next, Freed::Clear)
            .await
    }

    /// Sets an xattr (replacing its value) and persists it.
    pub async fn set_xattr(&self, name: &str, value: &[u8]) -> Result<()> {
        check_xattr(name, value)?;
        self.update(|md| {
            put(&mut md.xattrs, name, value);
            Ok(())
        })
        .await
    }

    /// Removes an xattr and persists it.
    pub async fn remove_xattr(&self, name: &str) -> Result<()> {
        self.update(|md| {
            let before = md.xattrs.len();
            md.xattrs.retain(|x| x.name != name.as_bytes());
            if md.xattrs.len() == before {
                Err(Error::XattrNotFound)
            } else {
                Ok(())
            }
        })
        .await
    }

    /// Sets an internal xattr (and the INTERNAL_XATTR flag).
    pub async fn set_internal_xattr(&self, name: &str, value: &[u8]) -> Result<()> {
        check_xattr(name, value)?;
        self.update(|md| {
            put(&mut md.internal_xattrs, name, value);
            md.invalid_flags |= FLAG_INTERNAL_XATTR;
            Ok(())
        })
        .await
    }

    /// Removes an internal xattr (the flag goes with the last one).
    pub async fn remove_internal_xattr(&self, name: &str) -> Result<()> {
        self.update(|md| {
            let before = md.internal_xattrs.len();
            md.internal_xattrs.retain(|x| x.name != name.as_bytes());
            if md.internal_xattrs.len() == before {
                return Err(Error::XattrNotFound);
            }
            if md.internal_xattrs.is_empty() {
                md.invalid_flags &= !FLAG_INTERNAL_XATTR;
            }
            Ok(())
        })
        .await
    }

    /// Marks the blob read-only (data and metadata), persisted.
    pub async fn set_read_only(&self) -> Result<()> {
        if self.entry.md_ro() {
            return Ok(());
        }
        self.update(|md| {
            md.data_ro_flags |= FLAG_READ_ONLY;
            Ok(())
        })
        .await
    }

    /// Resizes to `num_clusters`. Growing a thick blob allocates clusters
    /// (ENOSPC if there are not enough); shrinking frees the clusters past
    /// the end, cleared by the blob's clear method.
    pub async fn resize(&self, num_clusters: u64) -> Result<()> {
        if num_clusters > MAX_BLOB_CLUSTERS {
            return Err(Error::InvalidArgument("blob larger than 2^32 - 1 clusters"));
        }
        let _op = self.store.op()?;
        self.store.check_writable()?;
        let _lock = self.entry.lock.lock().await;
        if self.entry.md_ro() {
            return Err(Error::ReadOnly(self.entry.id));
        }
        let mut next = self.entry.md.borrow().clone();
        let cur = next.clusters.len();
        if num_clusters == cur {
            return Ok(());
        }
        next.clusters.resize(num_clusters);
        let mut claimed = Vec::new();
        if num_clusters > cur && !next.is_thin() {
            claimed = self.store.claim_clusters(num_clusters - cur)?;
            for (i, &c) in claimed.iter().enumerate() {
                next.clusters.set(cur + i as u64, c);
            }
        }
        let r = self
            .store
            .persist_blob(&self.entry, next, Freed::Clear)
            .await;
        if r.is_err() && !self.store.state.borrow().failed {
            self.store.release_clusters(&claimed);
        }
        r
    }

    /// The device LBA of blob cluster `idx`, allocating the cluster first if
    /// it is not (thin blobs). Concurrent calls for one cluster allocate it
    /// once; the mapping is on disk when this returns.
    pub async fn allocate_cluster(&self, idx: u64) -> Result<u64> {
        if let Some(lba) = self.cluster_lba(idx) {
            return Ok(lba);
        }
        let _op = self.store.op()?;
        self.store.allocate_cluster(&self.entry, idx, false).await
    }

    /// Gives blob cluster `idx` back to the store (a thin blob's cluster the
    /// I/O path unmapped whole; it does not clear data itself). Returns
    /// whether a cluster was released (false: not allocated, or not thin).
    pub async fn release_cluster(&self, idx: u64) -> Result<bool> {
        let _op = self.store.op()?;
        self.store.release_cluster(&self.entry, idx).await
    }
}
