//! The lineage operations, on a store's metadata thread: snapshot, clone,
//! inflate, decouple_parent, set_parent (SPDK's `vbdev_lvol_create_snapshot`
//! and friends).
//!
//! An operation that moves clusters between lvols (a snapshot takes its
//! volume's, the delete of a snapshot gives them to its clone) freezes the
//! lvol whose clusters move: its channels hold new writes, unmaps and write
//! zeroes, and writes whose allocation comes back, while the writes already
//! sent finish (the drain); then the blobstore changes the lineage; then the
//! lvol's channels get the new table and parent chain and the held I/O goes
//! on in order, through the new lineage (a write to a cluster the snapshot
//! took copies it first). Reads go on throughout: they read the same bytes
//! before and after. Writes in flight are thus neither lost nor reordered,
//! and a read after the snapshot returns the last acknowledged write.

use std::rc::Rc;

use bdevkit_blobstore::BlobId;

use crate::control::{busy, close_unused_externals};
use crate::error::{LvolError, Result};
use crate::md::MdStore;

/// Serves new lvol `id` as a bdev; returns its unique id.
pub(crate) fn serve(md: &MdStore, id: BlobId) -> Result<String> {
    let meta = md
        .core
        .lvol(id)
        .ok_or_else(|| LvolError::NotFound(format!("new lvol {id:#x}")))?;
    md.add_lvol(&meta)?;
    Ok(meta.unique_id(&md.link.uuid))
}

/// `bdev_lvol_snapshot`: returns the snapshot's unique id (its bdev name).
pub(crate) async fn snapshot(md: Rc<MdStore>, blob: BlobId, name: String) -> Result<String> {
    let _guard = busy(&md, blob)?;
    md.core.check_new_lvol_name(&name)?;
    let frozen = md.freeze(blob).await;
    let r = md.core.snapshot_lvol(blob, &name).await;
    md.refresh_lineage(&[blob]).await;
    MdStore::thaw(frozen).await;
    let id = r?;
    let out = serve(&md, id);
    md.refresh_lineage(&[]).await;
    tracing::info!(lvs = %md.core.name(), snapshot = %name, of = blob, "lvol snapshot created");
    out
}

/// `bdev_lvol_clone`: returns the clone's unique id.
pub(crate) async fn clone(md: Rc<MdStore>, snapshot: BlobId, name: String) -> Result<String> {
    let _guard = busy(&md, snapshot)?;
    md.core.check_new_lvol_name(&name)?;
    let id = md.core.clone_lvol(snapshot, &name).await?;
    let out = serve(&md, id);
    md.refresh_lineage(&[]).await;
    tracing::info!(lvs = %md.core.name(), clone = %name, of = snapshot, "lvol clone created");
    out
}

/// Which parent-changing operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relink {
    /// `bdev_lvol_inflate`.
    Inflate,
    /// `bdev_lvol_decouple_parent`.
    Decouple,
    /// `bdev_lvol_set_parent` to this snapshot.
    SetParent(BlobId),
}

/// `bdev_lvol_inflate`, `bdev_lvol_decouple_parent`, `bdev_lvol_set_parent`.
/// The clusters they allocate are copies (the lvol reads the same bytes),
/// so its writes go on while they are copied; the switch of parent holds
/// them (freeze) so that no channel reads through a stale chain after.
pub(crate) async fn relink(md: Rc<MdStore>, blob: BlobId, how: Relink) -> Result<()> {
    let _guard = busy(&md, blob)?;
    let _parent_guard = match how {
        Relink::SetParent(p) => Some(busy(&md, p)?),
        _ => None,
    };
    let r = match how {
        Relink::Inflate => md.core.inflate_lvol(blob).await,
        Relink::Decouple => md.core.decouple_lvol(blob).await,
        Relink::SetParent(p) => md.core.set_parent_lvol(blob, p).await,
    };
    let frozen = md.freeze(blob).await;
    md.refresh_lineage(&[blob]).await;
    MdStore::thaw(frozen).await;
    close_unused_externals(&md).await;
    r
}
