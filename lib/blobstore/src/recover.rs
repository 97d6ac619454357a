//! Finishing or undoing snapshot operations that a crash cut half-way, at
//! load, as SPDK's `bs_load_iter` / `bs_examine_clone` do.
//!
//! Two operations change two blobs and cannot switch both with one write;
//! each marks its snapshot with an internal xattr naming the other blob
//! while both may claim the same clusters:
//!
//! - `SNAPTMP` = origin (snapshot create): the snapshot was written with the
//!   origin's clusters before the origin became its clone. If the origin's
//!   `SNAP` names the snapshot, the origin switched: the snapshot is kept
//!   (marker removed, READ_ONLY set). Otherwise the origin still owns the
//!   clusters: the snapshot is deleted without them.
//! - `SNAPRM` = clone (snapshot delete with one clone): the clone takes the
//!   snapshot's clusters and parent. If the clone's `SNAP` still names the
//!   snapshot, the merge had not switched: the snapshot is kept (marker
//!   removed). Otherwise the clone owns what it took: the snapshot is
//!   deleted without those clusters (the rest are freed).
//!
//! A marker naming a blob that does not exist keeps the snapshot, with its
//! clusters (nothing else claims them). `resolve` runs on the parsed
//! metadata before clusters are claimed, so the sharing does not fail the
//! load; `apply` writes the outcome once the store is up.

use std::collections::{BTreeMap, HashSet};

use crate::device::BlobDevice;
use crate::error::Result;
use crate::format::blob_md::BlobMd;
use crate::format::clusters::ClusterMap;
use crate::format::{FLAG_READ_ONLY, XATTR_SNAPRM, XATTR_SNAPTMP};
use crate::persist::Freed;
use crate::store::Store;
use crate::BlobId;

/// What load must do with a marked snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fixup {
    /// Keep it: remove the marker, data read-only.
    Finish(BlobId),
    /// Delete it (its shared clusters were dropped from its map).
    Remove(BlobId),
}

/// The marker of an interrupted operation: (marker, the other blob).
fn marker(md: &BlobMd) -> Option<(&'static str, BlobId)> {
    // SNAPRM first, as SPDK looks at it first.
    for name in [XATTR_SNAPRM, XATTR_SNAPTMP] {
        if let Some(other) = md.internal_id(name) {
            return Some((name, other));
        }
    }
    None
}

/// Decides every marked blob's fate and drops, from the ones to delete, the
/// clusters and extent pages the other blob holds.
pub(crate) fn resolve(mds: &mut BTreeMap<BlobId, BlobMd>) -> Vec<Fixup> {
    let marked: Vec<(BlobId, BlobId)> = mds
        .iter()
        .filter_map(|(&id, md)| marker(md).map(|(_, other)| (id, other)))
        .collect();
    let mut out = Vec::new();
    for (snap, other) in marked {
        let keep = match mds.get(&other) {
            _ if other == snap => true,
            None => true,
            Some(o) => o.parent() == Some(snap),
        };
        if keep {
            out.push(Fixup::Finish(snap));
            continue;
        }
        let (theirs, their_pages): (HashSet<u32>, HashSet<u32>) = match mds.get(&other) {
            Some(o) => (
                o.clusters.iter_allocated().map(|(_, c)| c).collect(),
                o.all_pages().collect(),
            ),
            None => (HashSet::new(), HashSet::new()),
        };
        if let Some(s) = mds.get_mut(&snap) {
            let mut map = ClusterMap::new(s.clusters.len());
            for (i, c) in s.clusters.iter_allocated() {
                if !theirs.contains(&c) {
                    map.set(i, c);
                }
            }
            s.clusters = map;
            for p in &mut s.extent_pages {
                if their_pages.contains(p) {
                    *p = 0;
                }
            }
        }
        out.push(Fixup::Remove(snap));
    }
    out
}

impl<D: BlobDevice> Store<D> {
    /// Writes the outcome of `resolve`: each write is atomic on its own (a
    /// root rewrite, or a root zeroed first), so a crash here is resolved
    /// the same way at the next load.
    pub(crate) async fn apply_fixups(&self, fixups: &[Fixup]) -> Result<()> {
        for f in fixups {
            match *f {
                Fixup::Finish(id) => {
                    let entry = self.entry(id)?;
                    let _lock = entry.lock.lock().await;
                    let mut next = entry.md.borrow().clone();
                    next.remove_internal(XATTR_SNAPTMP);
                    next.remove_internal(XATTR_SNAPRM);
                    next.data_ro_flags |= FLAG_READ_ONLY;
                    self.persist_blob(&entry, next, Freed::Release).await?;
                    tracing::info!(blob = id, "interrupted snapshot operation finished");
                }
                Fixup::Remove(id) => {
                    let entry = self.entry(id)?;
                    let _lock = entry.lock.lock().await;
                    self.delete_blob_md(&entry).await?;
                    self.state.borrow_mut().snapshots.remove(&id);
                    tracing::info!(blob = id, "interrupted snapshot operation undone");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::blob_md::Xattr;
    use crate::format::{FLAG_INTERNAL_XATTR, FLAG_THIN_PROV, XATTR_SNAP};

    fn md(id: BlobId, clusters: &[u32], internal: &[(&str, u64)], thin: bool) -> BlobMd {
        let mut map = ClusterMap::new(clusters.len() as u64);
        for (i, &c) in clusters.iter().enumerate() {
            map.set(i as u64, c);
        }
        BlobMd {
            id,
            invalid_flags: if thin { FLAG_THIN_PROV } else { 0 }
                | if internal.is_empty() {
                    0
                } else {
                    FLAG_INTERNAL_XATTR
                },
            data_ro_flags: 0,
            md_ro_flags: 0,
            xattrs: Vec::new(),
            internal_xattrs: internal
                .iter()
                .map(|(n, v)| Xattr {
                    name: n.as_bytes().to_vec(),
                    value: v.to_le_bytes().to_vec(),
                })
                .collect(),
            clusters: map,
            use_extent_table: true,
            extent_pages: Vec::new(),
            pages: Vec::new(),
        }
    }

    const O: BlobId = 0x1_0000_0001;
    const S: BlobId = 0x1_0000_0002;

    #[test]
    fn snapshot_create_cut_before_the_origin_switched_is_undone() {
        let mut m = BTreeMap::new();
        m.insert(O, md(O, &[10, 11], &[], false));
        m.insert(S, md(S, &[10, 11], &[(XATTR_SNAPTMP, O)], false));
        assert_eq!(resolve(&mut m), vec![Fixup::Remove(S)]);
        assert_eq!(m[&S].clusters.allocated(), 0);
        assert_eq!(m[&O].clusters.allocated(), 2);
    }

    #[test]
    fn snapshot_create_cut_after_the_origin_switched_is_finished() {
        let mut m = BTreeMap::new();
        m.insert(O, md(O, &[0, 0], &[(XATTR_SNAP, S)], true));
        m.insert(S, md(S, &[10, 11], &[(XATTR_SNAPTMP, O)], false));
        assert_eq!(resolve(&mut m), vec![Fixup::Finish(S)]);
        assert_eq!(m[&S].clusters.allocated(), 2);
    }

    #[test]
    fn snapshot_delete_cut_after_the_merge_drops_only_the_taken_clusters() {
        // The clone had its own cluster 0 (20) and took the snapshot's 1 (11).
        let mut m = BTreeMap::new();
        m.insert(O, md(O, &[20, 11], &[], true));
        m.insert(S, md(S, &[10, 11], &[(XATTR_SNAPRM, O)], false));
        assert_eq!(resolve(&mut m), vec![Fixup::Remove(S)]);
        assert_eq!(m[&S].clusters.get(0), 10);
        assert_eq!(m[&S].clusters.get(1), 0);
    }

    #[test]
    fn snapshot_delete_cut_before_the_merge_keeps_the_snapshot() {
        let mut m = BTreeMap::new();
        m.insert(O, md(O, &[20, 0], &[(XATTR_SNAP, S)], true));
        m.insert(S, md(S, &[10, 11], &[(XATTR_SNAPRM, O)], false));
        assert_eq!(resolve(&mut m), vec![Fixup::Finish(S)]);
    }

    #[test]
    fn a_marker_naming_a_missing_blob_keeps_the_snapshot() {
        let mut m = BTreeMap::new();
        m.insert(S, md(S, &[10], &[(XATTR_SNAPTMP, O)], false));
        assert_eq!(resolve(&mut m), vec![Fixup::Finish(S)]);
        assert_eq!(m[&S].clusters.allocated(), 1);
    }
}
