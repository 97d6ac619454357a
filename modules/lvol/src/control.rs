//! The control operations, on a store's metadata thread: lvol create,
//! delete, resize, rename and read-only; store rename, grow, unload and
//! destroy; what `bdev_lvol_get_lvstores` and `bdev_lvol_get_lvols` show.
//!
//! Each checks first and changes nothing when a check fails; one
//! operation per lvol at a time (another answers EBUSY, as SPDK's
//! `action_in_progress`).

use std::rc::Rc;
use std::sync::Arc;

use bdevkit_blobstore::BlobId;
use futures::channel::oneshot;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::error::{LvolError, Result};
use crate::lvs::{c_str_id, check_name, esnap_name, LvolOptions, Parent};
use crate::md::{spawn, MdStore, StoreState};
use crate::table::ClusterTable;

/// Marks lvol `blob` busy for the life of the guard.
pub(crate) struct Busy<'a> {
    md: &'a MdStore,
    blob: BlobId,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if let Some(l) = self.md.lvols.borrow_mut().get_mut(&self.blob) {
            l.busy = false;
        }
    }
}

pub(crate) fn busy(md: &MdStore, blob: BlobId) -> Result<Busy<'_>> {
    md.check_ready()?;
    let mut lvols = md.lvols.borrow_mut();
    let l = lvols
        .get_mut(&blob)
        .ok_or_else(|| LvolError::NotFound(format!("lvol {blob:#x}")))?;
    if l.busy {
        return Err(LvolError::Busy(format!("lvol {blob:#x}")));
    }
    l.busy = true;
    Ok(Busy { md, blob })
}

/// `bdev_lvol_create`: creates the lvol and registers its bdev; returns
/// its unique id (the bdev name). A bdev that cannot register takes the
/// new blob with it.
pub(crate) async fn create_lvol(md: Rc<MdStore>, o: LvolOptions) -> Result<String> {
    md.check_ready()?;
    let id = md.core.create_lvol(&o).await?;
    let meta = md
        .core
        .lvol(id)
        .ok_or_else(|| LvolError::NotFound(format!("new lvol {id:#x}")))?;
    if let Err(e) = md.add_lvol(&meta) {
        if let Err(e2) = md.core.delete_lvol(id).await {
            tracing::error!(lvol = %o.name, error = %e2, "cannot delete the lvol whose bdev failed");
        }
        return Err(e);
    }
    tracing::info!(lvs = %md.core.name(), lvol = %o.name, blob = id, "lvol created");
    Ok(meta.unique_id(&md.link.uuid))
}

/// `bdev_lvol_delete`: unregisters the bdev (its openers get a remove
/// event), then deletes the blob. A snapshot with one clone is merged into
/// it, the clone's writes held meanwhile; with more, EBUSY before anything
/// changes (SPDK's). If the blob cannot be deleted the lvol is served
/// again.
pub(crate) async fn delete_lvol(md: Rc<MdStore>, blob: BlobId) -> Result<()> {
    let guard = busy(&md, blob)?;
    let clones = md.core.clones_of(blob);
    if clones.len() > 1 {
        return Err(LvolError::Busy(format!(
            "lvol {blob:#x} has {} clones",
            clones.len()
        )));
    }
    let _clone_guard = match clones.first() {
        Some(&c) => Some(busy(&md, c)?),
        None => None,
    };
    md.unserve(blob).await;
    let frozen = match clones.first() {
        Some(&c) => md.freeze(c).await,
        None => None,
    };
    let r = md.core.delete_lvol(blob).await;
    if r.is_ok() {
        md.lvols.borrow_mut().remove(&blob);
    }
    md.refresh_lineage(&clones).await;
    MdStore::thaw(frozen).await;
    match r {
        Ok(()) => {
            drop(guard);
            close_unused_externals(&md).await;
            Ok(())
        }
        Err(e) => {
            drop(guard);
            if let Some(meta) = md.core.lvol(blob) {
                if let Err(e2) = md.add_lvol(&meta) {
                    tracing::error!(blob, error = %e2, "cannot serve the lvol again");
                }
            }
            Err(e)
        }
    }
}

/// `bdev_lvol_resize`: to `size_bytes` rounded up to clusters. Shrinking
/// an lvol whose bdev is open answers EBUSY before anything changes (SPDK
/// shrinks the blob, then fails to shrink the bdev).
pub(crate) async fn resize_lvol(md: Rc<MdStore>, blob: BlobId, size_bytes: u64) -> Result<()> {
    let _guard = busy(&md, blob)?;
    let new = md.core.clusters_for(size_bytes);
    let cur = md
        .core
        .lvol(blob)
        .map(|l| l.num_clusters)
        .ok_or_else(|| LvolError::NotFound(format!("lvol {blob:#x}")))?;
    if new == cur {
        return Ok(());
    }
    let served = md.bdev_of(blob);
    let Some((bdev, handle)) = served else {
        return md.core.resize_lvol(blob, size_bytes).await;
    };
    if new < cur && handle.open_descriptors() > 0 {
        return Err(LvolError::Busy(format!(
            "bdev {} is open: cannot shrink it",
            handle.name()
        )));
    }
    if new < cur {
        // Channels stop seeing the clusters past the end before they are
        // freed.
        let old = md.lvols.borrow().get(&blob).map(|l| Arc::clone(&l.table));
        let kept: Vec<(u64, u32)> = old
            .map(|t| t.mapped().into_iter().filter(|&(i, _)| i < new).collect())
            .unwrap_or_default();
        let t = Arc::new(ClusterTable::new(new, kept));
        if let Some(l) = md.lvols.borrow_mut().get_mut(&blob) {
            l.table = Arc::clone(&t);
        }
        MdStore::swap_tables(&bdev, t).await;
    }
    let r = md.core.resize_lvol(blob, size_bytes).await;
    if let Some(t) = md.rebuild_table(blob) {
        MdStore::swap_tables(&bdev, t).await;
    }
    r?;
    let blocks = new * md.core.cluster_size() / u64::from(handle.block_size());
    handle.notify_resize(blocks);
    if let Some(l) = md.lvols.borrow().get(&blob) {
        if let Some(b) = &l.blob {
            bdev.set_allocated(b.num_allocated_clusters());
        }
    }
    Ok(())
}

/// `bdev_lvol_rename`: the name xattr, then the alias.
pub(crate) async fn rename_lvol(md: Rc<MdStore>, blob: BlobId, new_name: String) -> Result<()> {
    let _guard = busy(&md, blob)?;
    let old = md
        .core
        .lvol(blob)
        .map(|l| l.name)
        .ok_or_else(|| LvolError::NotFound(format!("lvol {blob:#x}")))?;
    if old == new_name {
        return Ok(());
    }
    check_name(&new_name)?;
    let (old_alias, new_alias) = (md.alias(&old), md.alias(&new_name));
    let served = md.bdev_of(blob);
    if served.is_some() && md.mgr.get(&new_alias).is_some() {
        return Err(LvolError::Exists(new_alias));
    }
    md.core.rename_lvol(blob, &new_name).await?;
    if let Some((_, handle)) = served {
        if let Err(e) = md.mgr.alias_add(&handle, &new_alias) {
            tracing::error!(alias = %new_alias, error = %e, "cannot add the lvol's new alias");
        }
        let _ = md.mgr.alias_del(&handle, &old_alias);
    }
    Ok(())
}

/// `bdev_lvol_set_read_only`.
pub(crate) async fn set_read_only(md: Rc<MdStore>, blob: BlobId) -> Result<()> {
    let _guard = busy(&md, blob)?;
    md.core.set_read_only(blob).await?;
    if let Some((bdev, _)) = md.bdev_of(blob) {
        bdev.set_read_only();
    }
    Ok(())
}

/// `bdev_lvol_rename_lvstore` (the module checked the name against the
/// other stores): the super blob's name, then every lvol's alias.
pub(crate) async fn rename_store(md: Rc<MdStore>, new_name: String) -> Result<()> {
    md.check_ready()?;
    let old = md.core.name();
    if old == new_name {
        return Ok(());
    }
    md.core.rename(&new_name).await?;
    *md.link.name.lock() = new_name.clone();
    let lvols = md.core.lvols();
    for l in lvols {
        if let Some((_, handle)) = md.bdev_of(l.id) {
            let (from, to) = (
                format!("{old}/{}", l.name),
                format!("{new_name}/{}", l.name),
            );
            if let Err(e) = md.mgr.alias_add(&handle, &to) {
                tracing::error!(alias = %to, error = %e, "cannot add the lvol's new alias");
            }
            let _ = md.mgr.alias_del(&handle, &from);
        }
    }
    Ok(())
}

/// `bdev_lvol_grow_lvstore`: into the base's current size.
pub(crate) async fn grow(md: Rc<MdStore>) -> Result<()> {
    md.check_ready()?;
    let grew = md.core.grow().await?;
    tracing::info!(lvs = %md.core.name(), grew, "lvol store grow");
    Ok(())
}

/// Unregisters every lvol bdev and returns once they are gone.
async fn unserve_all(md: &MdStore) {
    let ids: Vec<BlobId> = md.lvols.borrow().keys().copied().collect();
    for id in ids {
        md.unserve(id).await;
    }
}

/// Closes the external snapshots not named by any lvol any more (all of
/// them once the store is unloaded), releasing their claims.
pub(crate) async fn close_unused_externals(md: &MdStore) {
    let bs = md.core.blobstore();
    let named: Vec<String> = if md.state.get() == StoreState::Removing {
        Vec::new()
    } else {
        bs.external_ids().iter().map(|e| esnap_name(e)).collect()
    };
    let unused: Vec<_> = {
        let mut ext = md.externals.borrow_mut();
        let gone: Vec<String> = ext.keys().filter(|k| !named.contains(k)).cloned().collect();
        gone.iter().filter_map(|k| ext.remove(k)).collect()
    };
    for e in unused {
        bs.detach_external(&c_str_id(&e.id));
        let (tx, rx) = oneshot::channel();
        e.base.close(move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
        tracing::info!(lvs = %md.core.name(), esnap = %e.id, "external snapshot closed");
    }
}

/// Closes the base (on this, the opening thread) and forgets the store.
async fn close(md: &MdStore) {
    close_unused_externals(md).await;
    let (tx, rx) = oneshot::channel();
    md.link.base.close(move || {
        let _ = tx.send(());
    });
    let _ = rx.await;
    md.stop();
}

/// Unloads the store (the base is going, or the app stops): its bdevs go,
/// then the blobstore is unloaded cleanly, then the base is closed.
pub(crate) async fn unload(md: Rc<MdStore>) -> Result<()> {
    if md.state.replace(StoreState::Removing) == StoreState::Removing {
        return Err(LvolError::NotFound("lvol store (being removed)".into()));
    }
    unserve_all(&md).await;
    let r = md.core.unload().await;
    if let Err(e) = &r {
        tracing::error!(lvs = %md.core.name(), error = %e, "lvol store not unloaded cleanly");
    } else {
        tracing::info!(lvs = %md.core.name(), "lvol store unloaded");
    }
    close(&md).await;
    r
}

/// [`unload`] in a task of its own.
pub(crate) fn spawn_unload(md: &Rc<MdStore>) {
    let md = Rc::clone(md);
    spawn(async move {
        let _ = unload(md).await;
    });
}

/// `bdev_lvol_delete_lvstore`: every lvol bdev goes (openers get a remove
/// event, as SPDK's), every lvol is deleted, then the store.
pub(crate) async fn destroy(md: Rc<MdStore>) -> Result<()> {
    md.check_ready()?;
    md.state.set(StoreState::Removing);
    unserve_all(&md).await;
    let r = md.core.destroy().await;
    if let Err(e) = &r {
        tracing::error!(lvs = %md.core.name(), error = %e, "lvol store not fully destroyed");
    } else {
        tracing::info!(lvs = %md.core.name(), "lvol store destroyed");
    }
    close(&md).await;
    r
}

/// One entry of `bdev_lvol_get_lvstores`.
pub(crate) fn store_json(md: &MdStore) -> Value {
    let info = md.core.blobstore().info();
    json!({
        "uuid": md.link.uuid.to_string(),
        "name": md.core.name(),
        "base_bdev": md.link.base.bdev().name(),
        "total_data_clusters": info.total_data_clusters,
        "free_clusters": info.free_clusters,
        "block_size": info.io_unit_size,
        "cluster_size": info.cluster_size,
        "max_growable_size": info.max_growable_size,
    })
}

/// The entries of `bdev_lvol_get_lvols` for this store.
pub(crate) fn lvols_json(md: &MdStore) -> Vec<Value> {
    let (name, uuid) = (md.core.name(), md.link.uuid.to_string());
    md.core
        .lvols()
        .into_iter()
        .map(|l| {
            json!({
                "alias": format!("{name}/{}", l.name),
                "uuid": l.uuid.unwrap_or(Uuid::nil()).to_string(),
                "name": l.name,
                "is_thin_provisioned": l.thin,
                "is_snapshot": l.is_snapshot,
                "is_clone": matches!(l.parent, Parent::Snapshot(_)),
                "is_esnap_clone": matches!(l.parent, Parent::External(_)),
                "is_degraded": l.degraded,
                "num_allocated_clusters": l.allocated_clusters,
                "lvs": {"name": name, "uuid": uuid},
            })
        })
        .collect()
}
