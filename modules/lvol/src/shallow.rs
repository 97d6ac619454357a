//! Shallow copy, on a store's metadata thread: the clusters a read-only
//! lvol holds itself (not those of its parents) copied to the same byte
//! offsets of another bdev (SPDK's `spdk_bs_blob_shallow_copy`, through
//! `vbdev_lvol_shallow_copy` and `bdev_lvol_start_shallow_copy`).
//!
//! [`start`] opens the destination for writing and claims it
//! (read-many-write-one, as SPDK's `spdk_bs_bdev_claim`); a missing
//! destination (ENODEV), a claimed one or one another descriptor writes
//! (EPERM) fails the start. Then, as SPDK does once the
//! copy is under way, a writable lvol (EPERM), a destination smaller than
//! the lvol or with a block size that does not divide the store's
//! (EINVAL), or another operation on the lvol (EBUSY) end the copy in
//! error at once, the destination released. Otherwise the lvol is marked
//! busy (SPDK's `locked_operation_in_progress`: delete, snapshot, clone,
//! resize, inflate and set_parent of it answer EBUSY meanwhile) and a task
//! copies its allocated clusters, read through the lvol's own bdev (the
//! clusters are its own, so this reads their bytes) and written to the
//! destination, at most [`SLOTS`] clusters in flight, each slot with one
//! buffer of at most [`CHUNK_BYTES`] reused for every chunk. Progress
//! counts whole clusters. The removal of the lvol's bdev (its store
//! unloaded) or of the destination ends the copy with ENODEV after the
//! chunk in flight. The destination is closed (its claim released) before
//! the copy reports its end.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bdevkit::bdev::{BdevChannel, BdevDesc, BdevEvent, ClaimType};
use bdevkit::dma::DmaBuf;
use bdevkit_blobstore::BlobId;
use parking_lot::Mutex;

use crate::error::{LvolError, Result};
use crate::md::{spawn, MdStore};
use crate::MODULE;

/// Cluster copies in flight at most, per copy.
pub const SLOTS: usize = 4;
/// The most bytes one slot reads and writes at a time (its buffer's size).
pub const CHUNK_BYTES: u64 = 1 << 20;

/// Where a shallow copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyState {
    /// Copying (or about to).
    InProgress,
    /// Every cluster copied; the destination released.
    Complete,
    /// Ended with this (positive) errno; the destination released.
    Failed(i32),
}

/// A shallow copy's progress at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyStatus {
    /// Where it is.
    pub state: CopyState,
    /// Clusters copied so far.
    pub copied_clusters: u64,
    /// Clusters to copy: those the lvol held itself at the start.
    pub total_clusters: u64,
}

#[derive(Debug)]
struct Shared {
    copied: AtomicU64,
    total: u64,
    state: Mutex<CopyState>,
}

/// A shallow copy started by [`crate::start_shallow_copy`]: it runs on its
/// own; this handle reads its progress (from any thread).
#[derive(Debug, Clone)]
pub struct ShallowCopy(Arc<Shared>);

impl ShallowCopy {
    fn new(total: u64) -> ShallowCopy {
        ShallowCopy(Arc::new(Shared {
            copied: AtomicU64::new(0),
            total,
            state: Mutex::new(CopyState::InProgress),
        }))
    }

    /// Its progress now.
    #[must_use]
    pub fn status(&self) -> CopyStatus {
        let state = *self.0.state.lock();
        CopyStatus {
            state,
            copied_clusters: self.0.copied.load(Ordering::Acquire),
            total_clusters: self.0.total,
        }
    }

    fn finish(&self, state: CopyState) {
        *self.0.state.lock() = state;
    }
}

/// The lvol marked busy while the copy runs (owned, for the copy's task).
struct Locked {
    md: Rc<MdStore>,
    blob: BlobId,
}

impl Locked {
    fn take(md: &Rc<MdStore>, blob: BlobId) -> Result<Locked> {
        let mut lvols = md.lvols.borrow_mut();
        let l = lvols
            .get_mut(&blob)
            .ok_or_else(|| LvolError::NotFound(format!("lvol {blob:#x}")))?;
        if l.busy {
            return Err(LvolError::Busy(format!("lvol {blob:#x}")));
        }
        l.busy = true;
        Ok(Locked {
            md: Rc::clone(md),
            blob,
        })
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        if let Some(l) = self.md.lvols.borrow_mut().get_mut(&self.blob) {
            l.busy = false;
        }
    }
}

/// What the copy's task works from.
struct Job {
    /// The clusters to copy (lvol cluster indices).
    clusters: Vec<u64>,
    next: Cell<usize>,
    cluster_bytes: u64,
    chunk_bytes: u64,
    src_block: u64,
    dst_block: u64,
    src: BdevChannel,
    dst: BdevChannel,
    /// The lvol's bdev or the destination is going.
    removed: Arc<AtomicBool>,
    failed: Cell<Option<i32>>,
    progress: ShallowCopy,
}

impl Job {
    fn fail(&self, errno: i32) {
        if self.failed.get().is_none() {
            self.failed.set(Some(errno));
        }
    }

    /// Copies clusters until none is left or the copy fails, with `buf`.
    async fn slot(&self, mut buf: DmaBuf) {
        loop {
            if self.failed.get().is_some() {
                return;
            }
            let i = self.next.get();
            let Some(&idx) = self.clusters.get(i) else {
                return;
            };
            self.next.set(i + 1);
            let mut off = 0;
            while off < self.cluster_bytes {
                if self.removed.load(Ordering::Acquire) {
                    return self.fail(libc::ENODEV);
                }
                let n = self.chunk_bytes.min(self.cluster_bytes - off);
                let at = idx * self.cluster_bytes + off;
                buf = match self
                    .src
                    .read(at / self.src_block, n / self.src_block, buf)
                    .await
                {
                    Ok(b) => b,
                    Err(e) => return self.fail(e.error.errno()),
                };
                buf = match self
                    .dst
                    .write(at / self.dst_block, n / self.dst_block, buf)
                    .await
                {
                    Ok(b) => b,
                    Err(e) => return self.fail(e.error.errno()),
                };
                off += n;
            }
            self.progress.0.copied.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Opens `name` (writing or not); its removal sets `removed`.
fn open(md: &MdStore, name: &str, write: bool, removed: &Arc<AtomicBool>) -> Result<BdevDesc> {
    let r = Arc::clone(removed);
    Ok(md.mgr.open(name, write, move |ev| {
        if ev == BdevEvent::Remove {
            r.store(true, Ordering::Release);
        }
    })?)
}

/// Starts the shallow copy of lvol `blob` to bdev `dst_name`: fails only
/// when the destination cannot be opened and claimed (or the lvol is not
/// served); every later failure ends the copy, reported by its status.
pub(crate) fn start(md: &Rc<MdStore>, blob: BlobId, dst_name: &str) -> Result<ShallowCopy> {
    md.check_ready()?;
    let not_found = || LvolError::NotFound(format!("lvol {blob:#x}"));
    let (_, src_bdev) = md.bdev_of(blob).ok_or_else(not_found)?;
    let (read_only, num_clusters, clusters) = {
        let lvols = md.lvols.borrow();
        let b = lvols
            .get(&blob)
            .and_then(|l| l.blob.as_ref())
            .ok_or_else(not_found)?;
        let clusters: Vec<u64> = b.allocated_clusters().into_iter().map(|(i, _)| i).collect();
        (b.is_read_only(), b.num_clusters(), clusters)
    };
    let removed = Arc::new(AtomicBool::new(false));
    let dst = open(md, dst_name, true, &removed)?;
    dst.claim(ClaimType::ReadManyWriteOne, MODULE)?;
    let progress = ShallowCopy::new(clusters.len() as u64);
    let (lvs, lvol) = (md.core.name(), src_bdev.name().to_string());
    let cluster_bytes = md.core.cluster_size();
    let src_block = u64::from(src_bdev.block_size());
    let dst_block = u64::from(dst.bdev().block_size());
    let dst_bytes = dst.bdev().num_blocks().saturating_mul(dst_block);
    let checked = if !read_only {
        Err(LvolError::NotPermitted(format!(
            "lvol {lvol}: shallow copy needs a read-only lvol"
        )))
    } else if num_clusters.saturating_mul(cluster_bytes) > dst_bytes {
        Err(LvolError::invalid(format!(
            "bdev {dst_name} is smaller than lvol {lvol}"
        )))
    } else if src_block.checked_rem(dst_block) != Some(0) {
        Err(LvolError::invalid(format!(
            "bdev {dst_name}: block size {dst_block} does not divide {src_block}"
        )))
    } else {
        Locked::take(md, blob)
    };
    let locked = match checked {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(lvs = %lvs, lvol = %lvol, dst = %dst_name, error = %e,
                "shallow copy not started");
            drop(dst);
            progress.finish(CopyState::Failed(e.errno()));
            return Ok(progress);
        }
    };
    let src_desc = open(md, &lvol, false, &removed)?;
    let chunk_bytes = ((CHUNK_BYTES / src_block).max(1) * src_block).min(cluster_bytes);
    let len = usize::try_from(chunk_bytes)
        .map_err(|_| LvolError::invalid("cluster too large for a buffer"))?;
    let bufs = (0..SLOTS.min(clusters.len()))
        .map(|_| DmaBuf::new(len).map_err(|_| LvolError::Bdev(bdevkit::Error::NoMem)))
        .collect::<Result<Vec<_>>>()?;
    let job = Job {
        clusters,
        next: Cell::new(0),
        cluster_bytes,
        chunk_bytes,
        src_block,
        dst_block,
        src: src_desc.get_io_channel()?,
        dst: dst.get_io_channel()?,
        removed,
        failed: Cell::new(None),
        progress: progress.clone(),
    };
    tracing::info!(lvs = %lvs, lvol = %lvol, dst = %dst_name, clusters = job.clusters.len(),
        "shallow copy started");
    let dst_name = dst_name.to_string();
    spawn(async move {
        futures::future::join_all(bufs.into_iter().map(|b| job.slot(b))).await;
        let (failed, progress) = (job.failed.get(), job.progress.clone());
        // Channels before their descriptors; the destination's claim goes
        // with its descriptor, before the end is reported.
        drop(job);
        drop((src_desc, dst));
        drop(locked);
        match failed {
            None => {
                tracing::info!(lvs = %lvs, lvol = %lvol, dst = %dst_name, "shallow copy done");
                progress.finish(CopyState::Complete);
            }
            Some(errno) => {
                tracing::error!(lvs = %lvs, lvol = %lvol, dst = %dst_name, errno,
                    "shallow copy failed");
                progress.finish(CopyState::Failed(errno));
            }
        }
    });
    Ok(progress)
}
