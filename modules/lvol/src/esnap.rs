//! External-snapshot clones on a store's metadata thread (SPDK's esnap
//! clones): `bdev_lvol_clone_bdev`, `bdev_lvol_set_parent_bdev`, and the
//! life of the external snapshots' bdevs.
//!
//! A store opens each bdev its lvols name as an external snapshot (by
//! UUID) once, read-only, claimed `read_many_write_none` (nobody writes
//! under a clone; other readers may share it), and attaches it to the
//! blobstore, which copies a cluster from it on an esnap clone's first
//! write; the lvols' channels read unwritten clusters from it directly
//! (`io.rs`). A bdev missing at load leaves every lvol whose chain ends at
//! it *degraded*: listed (`is_degraded`), not served, as SPDK defers their
//! bdevs. When the bdev appears (examine of any new bdev), it is opened
//! and those lvols are served; when it goes, they are unregistered and
//! degraded again. The store closes an external snapshot no lvol names any
//! more (after a delete, inflate or parent change) and all of them when it
//! unloads.
//!
//! The external snapshot must have the store's block size (SPDK accepts a
//! smaller one; bdevkit refuses it with EINVAL, see `doc/lvol.md`).

use std::rc::Rc;
use std::sync::Arc;

use bdevkit::bdev::module::vbdev::BaseBdev;
use bdevkit::bdev::module::{Bdev, ClaimType};
use bdevkit_blobstore::BlobId;
use uuid::Uuid;

use crate::control::{busy, close_unused_externals};
use crate::dev::ExtDev;
use crate::error::{LvolError, Result};
use crate::io::ExtLink;
use crate::lvs::{c_str_id, esnap_name};
use crate::md::{spawn, MdStore};
use crate::snap::serve;
use crate::MODULE;

/// Checks that `bdev` can be an external snapshot of this store: its size
/// a whole number of clusters (SPDK's EINVAL), the store's block size.
fn check_external(md: &MdStore, bdev: &Bdev) -> Result<u64> {
    let size = bdev.num_blocks() * u64::from(bdev.block_size());
    let cluster = md.core.cluster_size();
    if size == 0 || !size.is_multiple_of(cluster) {
        return Err(LvolError::invalid(format!(
            "bdev {}: size {size} is not a whole number of {cluster}-byte clusters",
            bdev.name()
        )));
    }
    let block = md.link.base.bdev().block_size();
    if bdev.block_size() != block {
        return Err(LvolError::invalid(format!(
            "bdev {}: block size {} differs from the lvol store's {block}",
            bdev.name(),
            bdev.block_size()
        )));
    }
    Ok(size)
}

/// The external snapshot `uuid`, opened, claimed and attached to the
/// blobstore now if it was not yet.
fn open_external(md: &MdStore, uuid: &str) -> Result<Arc<ExtLink>> {
    if let Some(e) = md.externals.borrow().get(uuid) {
        return Ok(Arc::clone(e));
    }
    let bdev = md
        .mgr
        .get(uuid)
        .ok_or_else(|| LvolError::NoDevice(uuid.to_string()))?;
    check_external(md, &bdev)?;
    let (base, events) =
        BaseBdev::open_claimed::<ExtLink>(&md.mgr, &bdev, MODULE, ClaimType::ReadManyWriteNone)
            .map_err(|e| match e {
                bdevkit::Error::Claimed(..) => LvolError::Claimed(bdev.name().to_string()),
                e => LvolError::Bdev(e),
            })?;
    let link = Arc::new(ExtLink {
        id: uuid.to_string(),
        base,
        store: Arc::clone(&md.link),
    });
    events.bind(&link);
    let attached = link
        .base
        .channel()
        .map_err(|e| LvolError::invalid(e.to_string()))
        .and_then(|ch| {
            md.core
                .blobstore()
                .attach_external(&c_str_id(uuid), Rc::new(ExtDev::new(ch)))
                .map_err(LvolError::from)
        });
    if let Err(e) = attached {
        link.base.close(|| {});
        return Err(e);
    }
    md.externals
        .borrow_mut()
        .insert(uuid.to_string(), Arc::clone(&link));
    tracing::info!(lvs = %md.core.name(), esnap = %uuid, bdev = %bdev.name(),
        "external snapshot opened");
    events.catch_up();
    Ok(link)
}

/// At load: opens every external snapshot the store's lvols name; those
/// missing leave their lvols degraded.
pub(crate) fn open_all(md: &MdStore) {
    for id in md.core.blobstore().external_ids() {
        let name = esnap_name(&id);
        if let Err(e) = open_external(md, &name) {
            tracing::warn!(lvs = %md.core.name(), esnap = %name, error = %e,
                "external snapshot not available: its clones are degraded");
        }
    }
}

/// Serves the lvols that are known, not served, not busy and no longer
/// degraded.
fn serve_ready(md: &MdStore) {
    let waiting: Vec<BlobId> = md
        .lvols
        .borrow()
        .iter()
        .filter(|(_, l)| l.bdev.is_none() && !l.busy)
        .map(|(&id, _)| id)
        .collect();
    for id in waiting {
        if md.core.blobstore().is_degraded(id) {
            continue;
        }
        if let Some(meta) = md.core.lvol(id) {
            match md.add_lvol(&meta) {
                Ok(()) => tracing::info!(lvs = %md.core.name(), lvol = %meta.name,
                    "lvol no longer degraded: served"),
                Err(e) => tracing::error!(lvs = %md.core.name(), lvol = %meta.name, error = %e,
                    "cannot register the lvol's bdev"),
            }
        }
    }
}

/// `bdev_lvol_clone_bdev`: a thin clone `name` of bdev `esnap`, as long as
/// it; returns its unique id.
pub(crate) async fn clone_bdev(md: Rc<MdStore>, esnap: Bdev, name: String) -> Result<String> {
    md.check_ready()?;
    md.core.check_new_lvol_name(&name)?;
    let size = check_external(&md, &esnap)?;
    let uuid = esnap.uuid();
    let ext = open_external(&md, &uuid.to_string())?;
    let r = match md.core.create_esnap_clone(&uuid, size, &name).await {
        Ok(id) => serve(&md, id),
        Err(e) => Err(e),
    };
    drop(ext);
    match &r {
        Ok(_) => {
            md.refresh_lineage(&[]).await;
            tracing::info!(lvs = %md.core.name(), clone = %name, of = %esnap.name(),
                "lvol esnap clone created");
        }
        Err(_) => close_unused_externals(&md).await,
    }
    r
}

/// `bdev_lvol_set_parent_bdev`: bdev `esnap` becomes the external snapshot
/// parent of thin lvol `blob` (its writes held while the lineage changes).
pub(crate) async fn set_parent_bdev(md: Rc<MdStore>, blob: BlobId, esnap: Bdev) -> Result<()> {
    let guard = busy(&md, blob)?;
    let uuid = esnap.uuid();
    if md.core.lvol(blob).and_then(|l| l.uuid) == Some(uuid) {
        return Err(LvolError::Blob(bdevkit_blobstore::Error::InvalidArgument(
            "an lvol cannot be its own external snapshot",
        )));
    }
    check_external(&md, &esnap).map_err(|e| match e {
        LvolError::Invalid(_) => LvolError::Blob(bdevkit_blobstore::Error::InvalidArgument(
            "external snapshot size or block size",
        )),
        e => e,
    })?;
    let ext = open_external(&md, &uuid.to_string())?;
    let r = md.core.set_external_parent(blob, &uuid).await;
    drop(ext);
    let frozen = md.freeze(blob).await;
    md.refresh_lineage(&[blob]).await;
    MdStore::thaw(frozen).await;
    drop(guard);
    close_unused_externals(&md).await;
    serve_ready(&md);
    r
}

/// A bdev appeared: if lvols of the store name it as their external
/// snapshot, it is opened and they are served (SPDK's hotplug of an
/// esnap, from examine).
pub(crate) async fn arrived(md: Rc<MdStore>, uuid: Uuid) {
    let name = uuid.to_string();
    if md.externals.borrow().contains_key(&name) {
        return;
    }
    let named = md
        .core
        .blobstore()
        .external_ids()
        .iter()
        .any(|e| esnap_name(e) == name);
    if !named || md.check_ready().is_err() {
        return;
    }
    if let Err(e) = open_external(&md, &name) {
        tracing::warn!(lvs = %md.core.name(), esnap = %name, error = %e,
            "external snapshot appeared but cannot be opened");
        return;
    }
    serve_ready(&md);
    md.refresh_lineage(&[]).await;
}

/// The bdev of external snapshot `id` is going away: the lvols reading it
/// are unregistered (degraded until it comes back), then it is closed.
pub(crate) fn removed(md: &Rc<MdStore>, id: String) {
    let md = Rc::clone(md);
    spawn(async move {
        let bs = md.core.blobstore();
        let users: Vec<BlobId> = md
            .lvols
            .borrow()
            .keys()
            .copied()
            .filter(|&b| bs.esnap_of_chain(b).is_some_and(|e| esnap_name(&e) == id))
            .collect();
        bs.detach_external(&c_str_id(&id));
        let ext = md.externals.borrow_mut().remove(&id);
        for b in users {
            md.unserve(b).await;
        }
        if let Some(e) = ext {
            let (tx, rx) = futures::channel::oneshot::channel();
            e.base.close(move || {
                let _ = tx.send(());
            });
            let _ = rx.await;
        }
        tracing::warn!(lvs = %md.core.name(), esnap = %id,
            "external snapshot removed: its clones are degraded");
    });
}
