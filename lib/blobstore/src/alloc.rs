//! Thin provisioning: allocating a cluster on first write, and giving one
//! back when the I/O path unmaps all of it.
//!
//! An allocation claims a free cluster in memory, queues (blob index,
//! cluster) on the blob and takes the blob's metadata lock. Whoever holds
//! the lock commits every queued allocation at once (group commit), so
//! allocations that arrive while a commit is in flight wait for one write,
//! not for one write each, and a metadata sync of the blob waits at most for
//! the commit in flight. A commit rewrites each touched extent page in
//! place: one atomic 4 KiB write per page, nothing else references the new
//! cluster, so a cut leaves it free or mapped. An allocation that needs a
//! new extent page (or a blob with RLE extents) goes through a full persist
//! (see `persist`). The mapping becomes visible to
//! [`Blob::cluster_lba`](crate::Blob::cluster_lba) only when it is on disk:
//! the I/O path writes data to a cluster only after its allocation returned.

use std::collections::BTreeMap;

use futures::channel::oneshot;
use futures::future::{select, try_join_all, Either};

use crate::device::BlobDevice;
use crate::error::{Error, Result};
use crate::external::ClusterSource;
use crate::format::blob_md::serialize_extent_page;
use crate::format::EXTENTS_PER_EP;
use crate::persist::Freed;
use crate::store::{BlobEntry, Store};

/// Takes back a queued allocation if its future is dropped before anyone
/// committed it.
struct Queued<'a, D: BlobDevice> {
    store: &'a Store<D>,
    entry: &'a BlobEntry,
    idx: u64,
    cluster: u32,
}

impl<D: BlobDevice> Drop for Queued<'_, D> {
    fn drop(&mut self) {
        let mut pending = self.entry.pending.borrow_mut();
        if pending.get(&self.idx) == Some(&self.cluster) {
            pending.remove(&self.idx);
            drop(pending);
            self.store.release_clusters(&[self.cluster]);
        }
    }
}

/// Ends a copy-on-write: wakes the allocations waiting for it and, unless
/// the copy was queued, gives its cluster back.
struct Copying<'a, D: BlobDevice> {
    store: &'a Store<D>,
    entry: &'a BlobEntry,
    idx: u64,
    cluster: Option<u32>,
}

impl<D: BlobDevice> Drop for Copying<'_, D> {
    fn drop(&mut self) {
        self.entry.copying.borrow_mut().remove(&self.idx);
        for w in std::mem::take(&mut *self.entry.copy_waiters.borrow_mut()) {
            let _ = w.send(());
        }
        if let Some(c) = self.cluster {
            self.store.release_clusters(&[c]);
        }
    }
}

fn chunk_of(idx: u64) -> (usize, usize) {
    (
        usize::try_from(idx / EXTENTS_PER_EP).unwrap_or(usize::MAX),
        usize::try_from(idx % EXTENTS_PER_EP).unwrap_or(0),
    )
}

impl<D: BlobDevice> Store<D> {
    fn check_range(&self, entry: &BlobEntry, idx: u64) -> Result<()> {
        let len = entry.md.borrow().clusters.len();
        if idx >= len {
            return Err(Error::OutOfRange {
                blob: entry.id,
                index: idx,
                num_clusters: len,
            });
        }
        Ok(())
    }

    /// The device LBA of blob cluster `idx`, allocating it if needed. A
    /// clone's new cluster first gets the whole cluster its parent chain
    /// holds there (copy-on-write); with `zero_fill`, one the chain does not
    /// hold is zeroed (inflate: it must keep reading zeros).
    pub(crate) async fn allocate_cluster(
        &self,
        entry: &BlobEntry,
        idx: u64,
        zero_fill: bool,
    ) -> Result<u64> {
        loop {
            let c = entry.md.borrow().clusters.get(idx);
            if c != 0 {
                return Ok(self.cluster_lba(c));
            }
            self.check_writable()?;
            if entry.data_ro() {
                return Err(Error::ReadOnly(entry.id));
            }
            self.check_range(entry, idx)?;
            if entry.copying.borrow().contains(&idx) {
                // A copy-on-write of this cluster is in flight: wait for it.
                let (tx, rx) = oneshot::channel();
                entry.copy_waiters.borrow_mut().push(tx);
                let _ = rx.await;
                continue;
            }
            let _queued = if entry.pending.borrow().contains_key(&idx) {
                // Another allocation of this cluster is queued: wait for it.
                None
            } else {
                let cluster = self.claim_clusters(1)?[0];
                if self.parent_source(entry, idx) != ClusterSource::Zeros || zero_fill {
                    entry.copying.borrow_mut().insert(idx);
                    let mut copying = Copying {
                        store: self,
                        entry,
                        idx,
                        cluster: Some(cluster),
                    };
                    // Wait for a turn (`budget`), then look at the chain
                    // again: it may have changed meanwhile.
                    let slot = self.copies.take().await;
                    let epoch = entry.epoch.get();
                    match self.parent_source(entry, idx) {
                        ClusterSource::Device(src) => self.copy_cluster(src, cluster).await?,
                        ClusterSource::External => {
                            self.copy_external(entry, idx, cluster).await?;
                        }
                        ClusterSource::Zeros if zero_fill => self.zero_cluster(cluster).await?,
                        ClusterSource::Zeros => {}
                    }
                    drop(slot);
                    if entry.epoch.get() != epoch {
                        // The parent changed during the copy: redo it.
                        drop(copying);
                        continue;
                    }
                    copying.cluster = None;
                }
                entry.pending.borrow_mut().insert(idx, cluster);
                Some(Queued {
                    store: self,
                    entry,
                    idx,
                    cluster,
                })
            };
            let lock = match entry.lock.try_lock() {
                Some(g) => g,
                None => {
                    // Whoever holds the lock may commit ours: wait for the
                    // lock or the end of a commit, whichever comes first.
                    let (tx, rx) = oneshot::channel();
                    entry.commit_waiters.borrow_mut().push(tx);
                    let locking = entry.lock.lock();
                    futures::pin_mut!(locking);
                    match select(locking, rx).await {
                        Either::Left((g, _)) => g,
                        Either::Right(_) => continue,
                    }
                }
            };
            self.commit_pending(entry).await?;
            drop(lock);
        }
    }

    /// Commits the queued allocations of `entry` (its lock held): before a
    /// lineage change, so that they belong to the old lineage.
    pub(crate) async fn commit_pending(&self, entry: &BlobEntry) -> Result<()> {
        let batch = std::mem::take(&mut *entry.pending.borrow_mut());
        if batch.is_empty() {
            return Ok(());
        }
        let r = self.commit_allocations(entry, batch).await;
        for w in std::mem::take(&mut *entry.commit_waiters.borrow_mut()) {
            let _ = w.send(());
        }
        r
    }

    /// Writes queued allocations (lock held).
    async fn commit_allocations(&self, entry: &BlobEntry, batch: BTreeMap<u64, u32>) -> Result<()> {
        let mut valid = Vec::new();
        let mut stale = Vec::new();
        let in_place = {
            let md = entry.md.borrow();
            for (idx, c) in batch {
                if idx >= md.clusters.len() || md.clusters.get(idx) != 0 {
                    stale.push(c);
                } else {
                    valid.push((idx, c));
                }
            }
            md.use_extent_table
                && valid.iter().all(|&(idx, _)| {
                    md.extent_pages
                        .get(chunk_of(idx).0)
                        .is_some_and(|&p| p != 0)
                })
        };
        self.release_clusters(&stale);
        if valid.is_empty() {
            return Ok(());
        }
        if in_place {
            let pages = {
                let md = entry.md.borrow();
                let mut by_page: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
                for &(idx, c) in &valid {
                    let (k, i) = chunk_of(idx);
                    let entries = by_page
                        .entry(k)
                        .or_insert_with(|| md.clusters.chunk_entries(k as u64));
                    entries[i] = c;
                }
                by_page
                    .into_iter()
                    .map(|(k, e)| {
                        (
                            md.extent_pages[k],
                            serialize_extent_page(md.id, k as u64, &e),
                        )
                    })
                    .collect::<Vec<_>>()
            };
            let guard = self.fail_on_drop();
            self.mark_dirty().await?;
            try_join_all(pages.iter().map(|(p, page)| self.write_md_page(*p, page))).await?;
            let mut md = entry.md.borrow_mut();
            for &(idx, c) in &valid {
                md.clusters.set(idx, c);
            }
            guard.disarm();
            return Ok(());
        }
        let mut next = entry.md.borrow().clone();
        for &(idx, c) in &valid {
            next.clusters.set(idx, c);
        }
        let r = self.persist_blob(entry, next, Freed::Release).await;
        if r.is_err() && !self.state.borrow().failed {
            let clusters: Vec<u32> = valid.iter().map(|&(_, c)| c).collect();
            self.release_clusters(&clusters);
        }
        r
    }

    /// Gives blob cluster `idx` of a thin blob back to the store; returns
    /// whether there was one to give. The caller has unmapped the data.
    pub(crate) async fn release_cluster(&self, entry: &BlobEntry, idx: u64) -> Result<bool> {
        self.check_writable()?;
        if entry.data_ro() {
            return Err(Error::ReadOnly(entry.id));
        }
        self.check_range(entry, idx)?;
        if !entry.md.borrow().is_thin() {
            return Ok(false);
        }
        let _lock = entry.lock.lock().await;
        let (c, in_place) = {
            let md = entry.md.borrow();
            let c = md.clusters.get(idx);
            let (k, i) = chunk_of(idx);
            let page = if md.use_extent_table {
                md.extent_pages.get(k).copied().unwrap_or(0)
            } else {
                0
            };
            let in_place = (page != 0).then(|| {
                let mut e = md.clusters.chunk_entries(k as u64);
                e[i] = 0;
                (page, serialize_extent_page(md.id, k as u64, &e))
            });
            (c, in_place)
        };
        if c == 0 {
            return Ok(false);
        }
        if let Some((page, data)) = in_place {
            let guard = self.fail_on_drop();
            self.mark_dirty().await?;
            entry.md.borrow_mut().clusters.set(idx, 0);
            self.write_md_page(page, &data).await?;
            self.release_clusters(&[c]);
            guard.disarm();
            return Ok(true);
        }
        let mut next = entry.md.borrow().clone();
        next.clusters.set(idx, 0);
        self.persist_blob(entry, next, Freed::Release).await?;
        Ok(true)
    }
}
