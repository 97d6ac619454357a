//! The store's shared state and its low-level helpers: device I/O with
//! failure tracking, page and cluster claims, the super block.
//!
//! Everything runs on one thread: state sits in `RefCell`s that are never
//! borrowed across an `.await`, and async locks (`futures::lock::Mutex`)
//! order the metadata writes of one blob and of the super block.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use futures::channel::oneshot;
use futures::lock::Mutex;

use crate::bitmap::BitVec;
use crate::device::BlobDevice;
use crate::error::{Error, Result};
use crate::format::blob_md::BlobMd;
use crate::format::mask_pages;
use crate::format::super_block::SuperBlock;
use crate::format::{
    DATA_RO_FLAGS_MASK, FLAG_READ_ONLY, INVALID_FLAGS_MASK, MD_RO_FLAGS_MASK, PAGE_SIZE,
    PAGE_SIZE_U32, PAGE_SIZE_U64,
};
use crate::options::{ClearMethod, StoreInfo};
use crate::BlobId;

/// Sizes that do not change after init (except by nothing: grow changes
/// only the cluster count, kept in [`State`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub block_size: u32,
    pub cluster_size: u32,
    pub io_unit_size: u32,
    pub blocks_per_page: u64,
    pub blocks_per_cluster: u64,
    pub md_start: u64,
    pub md_len: u32,
    /// Clusters holding the super block, masks and metadata region.
    pub first_data_cluster: u64,
}

/// A blob the store knows (open or not).
#[derive(Debug)]
pub(crate) struct BlobEntry {
    pub id: BlobId,
    /// The persistent state. Cluster entries appear here only once their
    /// mapping is on disk (an allocation) and disappear as a release starts.
    pub md: RefCell<BlobMd>,
    /// Orders this blob's metadata writes.
    pub lock: Mutex<()>,
    pub open_refs: Cell<u32>,
    pub deleting: Cell<bool>,
    /// Thin allocations claimed and waiting to be committed: blob cluster
    /// index -> device cluster.
    pub pending: RefCell<BTreeMap<u64, u32>>,
    /// Allocations waiting for `lock`, told when a commit is done (theirs
    /// may have been in it): the lock is not fair, so an allocation that
    /// another one committed must not wait for the lock to see it.
    pub commit_waiters: RefCell<Vec<oneshot::Sender<()>>>,
    /// A lineage operation (snapshot, clone, inflate, decouple, set_parent,
    /// snapshot delete) holds the blob (SPDK's
    /// `locked_operation_in_progress`): another one answers EBUSY.
    pub busy: Cell<bool>,
    /// Bumped when what the blob's parent chain reads may change (a new
    /// parent, a merge; not a snapshot of the blob): a copy-on-write that
    /// overlapped it is redone.
    pub epoch: Cell<u64>,
    /// Blob cluster indexes with a copy-on-write in flight.
    pub copying: RefCell<std::collections::BTreeSet<u64>>,
    /// Allocations waiting for a copy-on-write of their cluster to end.
    pub copy_waiters: RefCell<Vec<oneshot::Sender<()>>>,
}

impl BlobEntry {
    pub(crate) fn new(md: BlobMd) -> Self {
        BlobEntry {
            id: md.id,
            md: RefCell::new(md),
            lock: Mutex::new(()),
            open_refs: Cell::new(0),
            deleting: Cell::new(false),
            pending: RefCell::new(BTreeMap::new()),
            commit_waiters: RefCell::new(Vec::new()),
            busy: Cell::new(false),
            epoch: Cell::new(0),
            copying: RefCell::new(std::collections::BTreeSet::new()),
            copy_waiters: RefCell::new(Vec::new()),
        }
    }

    /// Invalid flags this library does not know (the blob cannot open).
    pub(crate) fn unknown_invalid_flags(&self) -> u64 {
        self.md.borrow().invalid_flags & !INVALID_FLAGS_MASK
    }

    /// Data read-only: the READ_ONLY flag or unknown data-ro flags.
    pub(crate) fn data_ro(&self) -> bool {
        let md = self.md.borrow();
        md.data_ro_flags & FLAG_READ_ONLY != 0 || md.data_ro_flags & !DATA_RO_FLAGS_MASK != 0
    }

    /// Metadata read-only: data read-only or unknown md-ro flags.
    pub(crate) fn md_ro(&self) -> bool {
        self.data_ro() || self.md.borrow().md_ro_flags & !MD_RO_FLAGS_MASK != 0
    }

    pub(crate) fn clear_method(&self) -> ClearMethod {
        ClearMethod::from_bits(self.md.borrow().md_ro_flags)
    }
}

/// Mutable store state.
#[derive(Debug)]
pub(crate) struct State {
    /// The super block as on disk.
    pub sb: SuperBlock,
    /// The store's size in bytes (the super block's, or the device's at load
    /// when that says 0).
    pub size: u64,
    pub total_clusters: u64,
    pub used_pages: BitVec,
    pub used_clusters: BitVec,
    pub used_blobids: BitVec,
    pub blobs: BTreeMap<BlobId, Rc<BlobEntry>>,
    /// Blobs that have been a parent since load and not deleted (SPDK's
    /// snapshot list: `spdk_blob_is_snapshot`).
    pub snapshots: std::collections::BTreeSet<BlobId>,
    /// Cluster buffers kept for copy-on-write.
    pub cow_bufs: Vec<Vec<u8>>,
    pub failed: bool,
    pub unloaded: bool,
    /// Public operations in flight.
    pub ops: u32,
}

/// The store.
#[derive(Debug)]
pub(crate) struct Store<D> {
    pub dev: D,
    pub geo: Geometry,
    pub state: RefCell<State>,
    /// Orders super block writes.
    pub super_lock: Mutex<()>,
    /// The external snapshots attached (`esnap`).
    pub externals: crate::external::Externals,
    /// Copy-on-write copies in flight (`budget`).
    pub copies: crate::budget::CopyBudget,
}

/// Counts a public operation in flight (unload refuses while any is).
pub(crate) struct OpGuard<'a> {
    state: &'a RefCell<State>,
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        let mut s = self.state.borrow_mut();
        s.ops = s.ops.saturating_sub(1);
    }
}

/// Marks the store failed if a metadata write sequence is dropped half-way
/// (a cancelled future): memory and disk may then disagree.
pub(crate) struct FailOnDrop<'a> {
    state: &'a RefCell<State>,
    armed: bool,
}

impl FailOnDrop<'_> {
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for FailOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.state.borrow_mut().failed = true;
        }
    }
}

impl<D: BlobDevice> Store<D> {
    pub(crate) fn new(dev: D, geo: Geometry, state: State) -> Self {
        Store {
            dev,
            geo,
            state: RefCell::new(state),
            super_lock: Mutex::new(()),
            externals: crate::external::Externals::default(),
            copies: crate::budget::CopyBudget::for_cluster_size(geo.cluster_size),
        }
    }

    /// Starts a public operation: fails on an unloaded store.
    pub(crate) fn op(&self) -> Result<OpGuard<'_>> {
        let mut s = self.state.borrow_mut();
        if s.unloaded {
            return Err(Error::Unloaded);
        }
        s.ops += 1;
        Ok(OpGuard { state: &self.state })
    }

    /// Fails unless metadata may be written.
    pub(crate) fn check_writable(&self) -> Result<()> {
        let s = self.state.borrow();
        if s.unloaded {
            Err(Error::Unloaded)
        } else if s.failed {
            Err(Error::Failed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn fail_on_drop(&self) -> FailOnDrop<'_> {
        FailOnDrop {
            state: &self.state,
            armed: true,
        }
    }

    fn device_error(
        &self,
        op: &'static str,
        offset_blocks: u64,
    ) -> impl FnOnce(crate::DeviceError) -> Error + '_ {
        move |source| {
            self.state.borrow_mut().failed = true;
            Error::Device {
                op,
                offset_blocks,
                source,
            }
        }
    }

    pub(crate) async fn write(&self, lba: u64, buf: &[u8]) -> Result<()> {
        self.dev
            .write(lba, buf)
            .await
            .map_err(self.device_error("write", lba))
    }

    pub(crate) async fn write_zeroes(&self, lba: u64, num_blocks: u64) -> Result<()> {
        self.dev
            .write_zeroes(lba, num_blocks)
            .await
            .map_err(self.device_error("write_zeroes", lba))
    }

    pub(crate) async fn unmap(&self, lba: u64, num_blocks: u64) -> Result<()> {
        self.dev
            .unmap(lba, num_blocks)
            .await
            .map_err(self.device_error("unmap", lba))
    }

    /// Device block of metadata page `page` (of the metadata region).
    pub(crate) fn md_lba(&self, page: u32) -> u64 {
        (self.geo.md_start + u64::from(page)) * self.geo.blocks_per_page
    }

    /// Device block where cluster `cluster` starts.
    pub(crate) fn cluster_lba(&self, cluster: u32) -> u64 {
        u64::from(cluster) * self.geo.blocks_per_cluster
    }

    pub(crate) async fn write_md_page(&self, page: u32, data: &[u8; PAGE_SIZE]) -> Result<()> {
        self.write(self.md_lba(page), data).await
    }

    pub(crate) async fn zero_md_page(&self, page: u32) -> Result<()> {
        self.write_zeroes(self.md_lba(page), self.geo.blocks_per_page)
            .await
    }

    /// Claims the first free metadata page at or after `from`.
    pub(crate) fn claim_page(&self, from: u32) -> Result<u32> {
        let mut s = self.state.borrow_mut();
        let p = s
            .used_pages
            .find_first_clear(u64::from(from))
            .ok_or(Error::NoMetadataSpace)?;
        s.used_pages.set(p);
        u32::try_from(p).map_err(|_| Error::NoMetadataSpace)
    }

    pub(crate) fn release_pages(&self, pages: &[u32]) {
        let mut s = self.state.borrow_mut();
        for &p in pages {
            s.used_pages.clear(u64::from(p));
        }
    }

    /// Claims `n` free clusters (lowest first), all or none.
    pub(crate) fn claim_clusters(&self, n: u64) -> Result<Vec<u32>> {
        let mut s = self.state.borrow_mut();
        if s.used_clusters.count_zeros() < n {
            return Err(Error::NoSpace);
        }
        let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        for _ in 0..n {
            let c = s.used_clusters.find_first_clear(0).ok_or(Error::NoSpace)?;
            s.used_clusters.set(c);
            out.push(u32::try_from(c).map_err(|_| Error::NoSpace)?);
        }
        Ok(out)
    }

    pub(crate) fn release_clusters(&self, clusters: &[u32]) {
        let mut s = self.state.borrow_mut();
        for &c in clusters {
            s.used_clusters.clear(u64::from(c));
        }
    }

    /// Writes the super block (a copy of `sb` with the CRC).
    pub(crate) async fn write_super(&self, sb: &SuperBlock) -> Result<()> {
        let page = sb.encode();
        self.write(0, &page).await
    }

    /// Before the first metadata write after a clean load: the super block
    /// with clean = 0 goes first (SPDK's `bs_mark_dirty`).
    pub(crate) async fn mark_dirty(&self) -> Result<()> {
        if !self.state.borrow().sb.clean {
            return Ok(());
        }
        let _g = self.super_lock.lock().await;
        let mut sb = {
            let s = self.state.borrow();
            if !s.sb.clean {
                return Ok(());
            }
            s.sb.clone()
        };
        sb.clean = false;
        if sb.size == 0 {
            sb.size = self.dev.num_blocks() * u64::from(self.geo.block_size);
        }
        self.check_writable()?;
        self.write_super(&sb).await?;
        self.state.borrow_mut().sb = sb;
        Ok(())
    }

    pub(crate) fn entry(&self, id: BlobId) -> Result<Rc<BlobEntry>> {
        self.state
            .borrow()
            .blobs
            .get(&id)
            .cloned()
            .ok_or(Error::NotFound(id))
    }

    pub(crate) fn max_growable_size(&self) -> u64 {
        let pages = mask_pages(u64::from(self.geo.md_len));
        (pages * PAGE_SIZE_U64 - 5) * 8 * u64::from(self.geo.cluster_size)
    }

    pub(crate) fn info(&self) -> StoreInfo {
        let s = self.state.borrow();
        StoreInfo {
            cluster_size: self.geo.cluster_size,
            io_unit_size: self.geo.io_unit_size,
            md_page_size: PAGE_SIZE_U32,
            total_clusters: s.total_clusters,
            total_data_clusters: s.total_clusters - self.geo.first_data_cluster,
            free_clusters: s.used_clusters.count_zeros(),
            max_growable_size: self.max_growable_size(),
            bstype: s.sb.bstype,
            clean_on_disk: s.sb.clean,
            md_start: self.geo.md_start,
            md_len: self.geo.md_len,
            used_md_pages: s.used_pages.count_ones(),
            num_blobs: s.blobs.len(),
        }
    }
}
