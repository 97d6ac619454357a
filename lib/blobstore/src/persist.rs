//! Writing a blob's metadata in a crash-safe order.
//!
//! A full persist (create, resize, xattrs, flags, thin allocations that
//! need a new extent page) writes, in this order:
//! 1. the super block with clean = 0, if the store was clean;
//! 2. every extent page whose contents change, to a fresh page, and every
//!    non-root chain page, to a fresh page (concurrently: nothing on disk
//!    points at them yet);
//! 3. the root page, in place: one atomic 4 KiB write switches the blob
//!    from its old state to its new one;
//! 4. zeros over the superseded chain and extent pages, and the clear
//!    method over freed clusters;
//! 5. only then are superseded pages and freed clusters released in memory,
//!    so nothing can reuse them while the disk still points at them.
//!
//! A cut anywhere leaves the old or the new root; pages written in step 2
//! but never referenced are not roots (their sequence is not 0, or their id
//! is not their own page's) and recovery ignores them. Unchanged extent
//! pages stay where they are. (SPDK rewrites a resized blob's last extent
//! page in place, before the root; a cut there can leave extents that
//! disagree with the root. Copying it keeps the switch atomic.)

use futures::future::try_join_all;

use crate::device::BlobDevice;
use crate::error::Result;
use crate::format::blob_md::{serialize_chain, serialize_extent_page, BlobMd};
use crate::format::{blob_page, INVALID_PAGE};
use crate::options::ClearMethod;
use crate::store::{BlobEntry, Store};

/// Whether extent page range `k` holds the same entries in both.
fn same_extent_page(a: &BlobMd, b: &BlobMd, k: u64) -> bool {
    a.clusters.chunk_len(k) == b.clusters.chunk_len(k)
        && a.clusters.chunk_entries(k) == b.clusters.chunk_entries(k)
}

/// Device clusters allocated in `cur` that `next` no longer has.
pub(crate) fn freed_clusters(cur: &BlobMd, next: &BlobMd) -> Vec<u32> {
    cur.clusters
        .iter_allocated()
        .filter(|&(i, c)| next.clusters.get(i) != c)
        .map(|(_, c)| c)
        .collect()
}

/// What happens to the clusters a persist drops from a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freed {
    /// Cleared by the blob's clear method, then released.
    Clear,
    /// Released without clearing.
    Release,
    /// Kept: another blob owns them (a snapshot took them).
    Handover,
}

impl<D: BlobDevice> Store<D> {
    /// Writes `next` as the new state of `entry` (whose lock the caller
    /// holds) and applies it; `freed` says what becomes of the clusters
    /// `next` drops. Clusters new in `next` were claimed by the caller (or
    /// handed over by another blob); on an error before any write they are
    /// the caller's to free.
    pub(crate) async fn persist_blob(
        &self,
        entry: &BlobEntry,
        mut next: BlobMd,
        freed_mode: Freed,
    ) -> Result<()> {
        self.check_writable()?;
        let root = blob_page(entry.id).ok_or(crate::Error::NotFound(entry.id))?;
        let cur = entry.md.borrow().clone();

        // Extent pages: keep unchanged ones, copy changed ones to fresh pages.
        let mut claimed: Vec<u32> = Vec::new();
        let mut new_pages: Vec<(u32, Box<crate::format::page::Page>)> = Vec::new();
        let result = (|| -> Result<()> {
            if next.use_extent_table {
                let n = next.clusters.num_chunks();
                let mut eps = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
                for k in 0..n {
                    if next.is_thin() && !next.clusters.chunk_is_allocated(k) {
                        eps.push(0);
                        continue;
                    }
                    let old = if cur.use_extent_table {
                        cur.extent_pages
                            .get(usize::try_from(k).unwrap_or(usize::MAX))
                            .copied()
                            .unwrap_or(0)
                    } else {
                        0
                    };
                    if old != 0 && same_extent_page(&cur, &next, k) {
                        eps.push(old);
                        continue;
                    }
                    let p = self.claim_page(1)?;
                    claimed.push(p);
                    new_pages.push((
                        p,
                        serialize_extent_page(next.id, k, &next.clusters.chunk_entries(k)),
                    ));
                    eps.push(p);
                }
                next.extent_pages = eps;
            } else {
                next.extent_pages.clear();
            }
            let chain = serialize_chain(&next)?;
            let mut pages = vec![root];
            for _ in 1..chain.len() {
                let p = self.claim_page(0)?;
                claimed.push(p);
                pages.push(p);
            }
            let mut root_page = None;
            for (i, b) in chain.into_iter().enumerate() {
                let nxt = pages.get(i + 1).copied().unwrap_or(INVALID_PAGE);
                if i == 0 {
                    root_page = Some(b.finish(nxt));
                } else {
                    new_pages.push((pages[i], b.finish(nxt)));
                }
            }
            // The root goes last.
            new_pages.extend(root_page.map(|p| (root, p)));
            next.pages = pages;
            Ok(())
        })();
        if let Err(e) = result {
            self.release_pages(&claimed);
            return Err(e);
        }

        let guard = self.fail_on_drop();
        self.mark_dirty().await?;
        // The root page is last in new_pages.
        let (root_write, others) = new_pages.split_last().ok_or(crate::Error::Failed)?;
        try_join_all(others.iter().map(|(p, page)| self.write_md_page(*p, page))).await?;
        self.write_md_page(root_write.0, &root_write.1).await?;

        // The disk has the new state.
        let keep: std::collections::HashSet<u32> = next
            .pages
            .iter()
            .chain(next.extent_pages.iter())
            .copied()
            .collect();
        let superseded: Vec<u32> = cur.all_pages().filter(|p| !keep.contains(p)).collect();
        let freed = if freed_mode == Freed::Handover {
            Vec::new()
        } else {
            freed_clusters(&cur, &next)
        };
        *entry.md.borrow_mut() = next;

        let method = if freed_mode == Freed::Clear {
            entry.clear_method()
        } else {
            ClearMethod::None
        };
        try_join_all(superseded.iter().map(|&p| self.zero_md_page(p))).await?;
        self.clear_clusters(&freed, method).await?;
        self.release_pages(&superseded);
        self.release_clusters(&freed);
        guard.disarm();
        Ok(())
    }

    /// Applies a clear method to clusters, one command per contiguous run.
    pub(crate) async fn clear_clusters(&self, clusters: &[u32], method: ClearMethod) -> Result<()> {
        if method == ClearMethod::None || clusters.is_empty() {
            return Ok(());
        }
        let mut sorted = clusters.to_vec();
        sorted.sort_unstable();
        let mut runs: Vec<(u32, u64)> = Vec::new();
        for c in sorted {
            match runs.last_mut() {
                Some((start, n)) if u64::from(*start) + *n == u64::from(c) => *n += 1,
                _ => runs.push((c, 1)),
            }
        }
        let bpc = self.geo.blocks_per_cluster;
        try_join_all(runs.iter().map(|&(start, n)| {
            let lba = self.cluster_lba(start);
            async move {
                if method == ClearMethod::WriteZeroes {
                    self.write_zeroes(lba, n * bpc).await
                } else {
                    self.unmap(lba, n * bpc).await
                }
            }
        }))
        .await?;
        Ok(())
    }

    /// Deletes a blob's metadata (lock held): the root page is zeroed first
    /// (one atomic write: the blob is gone), then its other pages, then its
    /// clusters are cleared; all are released after.
    pub(crate) async fn delete_blob_md(&self, entry: &BlobEntry) -> Result<()> {
        self.check_writable()?;
        let root = blob_page(entry.id).ok_or(crate::Error::NotFound(entry.id))?;
        let guard = self.fail_on_drop();
        self.mark_dirty().await?;
        self.zero_md_page(root).await?;
        {
            let mut s = self.state.borrow_mut();
            s.used_blobids.clear(u64::from(root));
            s.blobs.remove(&entry.id);
        }
        let md = entry.md.borrow().clone();
        let others: Vec<u32> = md.all_pages().skip(1).collect();
        let clusters: Vec<u32> = md.clusters.iter_allocated().map(|(_, c)| c).collect();
        try_join_all(others.iter().map(|&p| self.zero_md_page(p))).await?;
        self.clear_clusters(&clusters, entry.clear_method()).await?;
        self.release_pages(&others);
        self.release_pages(&[root]);
        self.release_clusters(&clusters);
        guard.disarm();
        Ok(())
    }
}
