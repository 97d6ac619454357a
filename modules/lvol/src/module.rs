//! The module: the stores it holds, examine (a bdev carrying an lvol store
//! is claimed and its lvols registered), and the operations the RPCs and
//! tests call, each sent to its store's metadata thread.

use std::rc::Rc;
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::vbdev::BaseBdev;
use bdevkit::bdev::module::{Bdev, BdevManager, BdevModule, DmaBuf, Done};
use bdevkit::thread::Thread;
use bdevkit_blobstore::{BlobId, StoreClearMethod};
use parking_lot::Mutex;
use serde_json::Value;
use uuid::Uuid;

use crate::control;
use crate::dev::BdevDev;
use crate::error::{LvolError, Result};
use crate::esnap;
use crate::io::{LvolBdev, StoreLink};
use crate::lvs::{check_name, LvolOptions, LvsCore, LvsOptions, BSTYPE};
use crate::md::{self, spawn, MdStore, MdTx};
use crate::shallow::{self, ShallowCopy};
use crate::snap;
use crate::table::ClusterGeo;
use crate::MODULE;

/// A store the module holds: what every thread may know of it, and its
/// metadata thread's queue.
#[derive(Debug, Clone)]
pub(crate) struct StoreEntry {
    pub link: Arc<StoreLink>,
    pub md: MdTx,
}

/// The lvol module: its stores (loaded, by examine or creation).
#[derive(Debug, Default)]
pub struct LvolModule {
    stores: Mutex<Vec<StoreEntry>>,
    /// Names of stores being created.
    reserved: Mutex<Vec<String>>,
}

/// Which store an RPC means: its UUID or its name (SPDK's "uuid xor
/// lvs_name").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LvsRef {
    /// By UUID (a string, as the RPC gives it).
    Uuid(String),
    /// By name.
    Name(String),
}

impl LvsRef {
    /// From an RPC's two optional params: exactly one (EINVAL otherwise).
    pub fn from_params(uuid: Option<String>, name: Option<String>) -> Result<LvsRef> {
        match (uuid, name) {
            (Some(u), None) => Ok(LvsRef::Uuid(u)),
            (None, Some(n)) => Ok(LvsRef::Name(n)),
            _ => Err(LvolError::invalid("give the lvol store's uuid or its name")),
        }
    }
}

/// `bdev_lvol_create_lvstore` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateLvstore {
    /// The base bdev.
    pub bdev_name: String,
    /// The store's options (name, cluster size, clear method, ratio).
    pub opts: LvsOptions,
    /// Metadata page size (0: 4096, the only size supported).
    pub md_page_size: u32,
}

impl LvolModule {
    /// The module registered with `mgr`.
    pub fn of(mgr: &BdevManager) -> Result<Arc<LvolModule>> {
        mgr.module_as::<LvolModule>(MODULE)
            .ok_or_else(|| LvolError::invalid("the lvol module is not registered"))
    }

    fn entries(&self) -> Vec<StoreEntry> {
        self.stores.lock().clone()
    }

    fn name_taken(&self, name: &str) -> bool {
        self.stores
            .lock()
            .iter()
            .any(|s| *s.link.name.lock() == name)
            || self.reserved.lock().iter().any(|n| n == name)
    }

    fn forget(&self, uuid: Uuid) {
        self.stores.lock().retain(|s| s.link.uuid != uuid);
    }

    pub(crate) fn find(&self, r: &LvsRef) -> Result<StoreEntry> {
        let stores = self.stores.lock();
        let found = match r {
            LvsRef::Uuid(u) => {
                let u = Uuid::parse_str(u).ok();
                stores.iter().find(|s| Some(s.link.uuid) == u)
            }
            LvsRef::Name(n) => stores.iter().find(|s| *s.link.name.lock() == *n),
        };
        found
            .cloned()
            .ok_or_else(|| LvolError::NotFound(format!("lvol store {r:?}")))
    }

    fn find_uuid(&self, uuid: Uuid) -> Option<StoreEntry> {
        self.stores
            .lock()
            .iter()
            .find(|s| s.link.uuid == uuid)
            .cloned()
    }
}

impl BdevModule for LvolModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    fn has_examine(&self) -> bool {
        true
    }

    /// A new bdev that nobody claimed may carry an lvol store: read its
    /// first 4 KiB and, with SPDK's blobstore signature and the type
    /// `LVOLSTORE` there, load the store on this thread.
    /// Any new bdev may also be the missing external snapshot of some
    /// store's lvols (SPDK's `examine_config` hotplug of an esnap).
    fn examine_disk(&self, mgr: &BdevManager, bdev: &Bdev, done: Done) {
        let uuid = bdev.uuid();
        for s in self.entries() {
            s.md.run(move |md| spawn(esnap::arrived(Rc::clone(md), uuid)));
        }
        if bdev.claim().is_some() {
            return done.done();
        }
        let Some(t) = Thread::current() else {
            return done.done();
        };
        let (mgr, bdev) = (mgr.clone(), bdev.clone());
        t.spawn_local(async move {
            if carries_lvs(&mgr, &bdev).await {
                match attach(&mgr, &bdev, None).await {
                    Ok(uuid) => {
                        tracing::info!(bdev = %bdev.name(), lvs = %uuid, "lvol store loaded");
                    }
                    Err(e) => {
                        tracing::warn!(bdev = %bdev.name(), error = %e, "lvol store not loaded");
                    }
                }
            }
            done.done();
        });
    }
}

/// Whether `bdev` starts with a blobstore super block of type LVOLSTORE.
async fn carries_lvs(mgr: &BdevManager, bdev: &Bdev) -> bool {
    let Ok(desc) = mgr.open(bdev.name(), false, |_| {}) else {
        return false;
    };
    let Ok(ch) = desc.get_io_channel() else {
        return false;
    };
    let bs = u64::from(bdev.block_size().max(1));
    let blocks = 4096u64.div_ceil(bs);
    if bdev.num_blocks() < blocks {
        return false;
    }
    let Ok(len) = usize::try_from(blocks * bs) else {
        return false;
    };
    let Ok(buf) = DmaBuf::new(len) else {
        return false;
    };
    match ch.read(0, blocks, buf).await {
        Ok(b) => {
            let s = b.as_slice();
            s.len() >= 72
                && &s[..8] == b"SPDKBLOB"
                && s[56..72] == bdevkit_blobstore::bstype(BSTYPE)
        }
        Err(_) => false,
    }
}

/// Closes `base` (releasing the claim) and returns once it is closed.
async fn close_base(base: &BaseBdev) {
    let (tx, rx) = futures::channel::oneshot::channel();
    base.close(move || {
        let _ = tx.send(());
    });
    let _ = rx.await;
}

/// Opens and claims `bdev`, then creates a store on it (`init`) or loads
/// the one it carries, starts its metadata task on this thread and
/// registers its lvols. Nothing is left behind on failure.
async fn attach(mgr: &BdevManager, bdev: &Bdev, init: Option<LvsOptions>) -> Result<Uuid> {
    let module = LvolModule::of(mgr)?;
    let (base, events) = BaseBdev::open::<StoreLink>(mgr, bdev, MODULE).map_err(|e| match e {
        bdevkit::Error::Claimed(..) => LvolError::Claimed(bdev.name().to_string()),
        e => LvolError::Bdev(e),
    })?;
    let core = match base.channel() {
        Ok(ch) => {
            let dev = BdevDev::new(ch);
            match &init {
                Some(o) => LvsCore::init(dev, o).await,
                None => LvsCore::load(dev).await,
            }
        }
        Err(e) => Err(LvolError::invalid(e.to_string())),
    };
    let core = match core {
        Ok(c) if init.is_none() && module.name_taken(&c.name()) => {
            // SPDK's EEXIST: two stores of one name; the second is left
            // alone (not written).
            let name = c.name();
            drop(c);
            close_base(&base).await;
            return Err(LvolError::Exists(format!("lvol store {name}")));
        }
        Ok(c) => c,
        Err(e) => {
            close_base(&base).await;
            return Err(e);
        }
    };
    let (tx, rx) = md::queue();
    let wake = tx.clone();
    let block = u64::from(bdev.block_size());
    let link = Arc::new(StoreLink {
        uuid: core.uuid(),
        name: Mutex::new(core.name()),
        base,
        geo: ClusterGeo::new(core.cluster_size() / block),
        port: Box::new(tx.clone()),
    });
    events.bind(&link);
    let uuid = link.uuid;
    module.stores.lock().push(StoreEntry {
        link: Arc::clone(&link),
        md: tx,
    });
    let weak: Weak<LvolModule> = Arc::downgrade(&module);
    let md = MdStore::start(
        core,
        link,
        mgr.clone(),
        (wake, rx),
        Box::new(move || {
            if let Some(m) = weak.upgrade() {
                m.forget(uuid);
            }
        }),
        (control::spawn_unload, esnap::removed),
    );
    esnap::open_all(&md);
    for meta in md.core.lvols() {
        if let Err(e) = md.add_lvol(&meta) {
            tracing::error!(lvs = %md.core.name(), lvol = %meta.name, error = %e,
                "cannot register the lvol's bdev");
        }
    }
    drop(md);
    events.catch_up();
    Ok(uuid)
}

/// `bdev_lvol_create_lvstore`: returns the new store's UUID.
pub async fn create_lvstore(mgr: &BdevManager, args: CreateLvstore) -> Result<Uuid> {
    let module = LvolModule::of(mgr)?;
    check_name(&args.opts.name)?;
    if args.md_page_size != 0
        && (!(4096..=65536).contains(&args.md_page_size) || !args.md_page_size.is_power_of_two())
    {
        return Err(LvolError::invalid(format!(
            "metadata page size {} (must be a power of two from 4096 to 65536)",
            args.md_page_size
        )));
    }
    let base = mgr
        .get(&args.bdev_name)
        .ok_or_else(|| LvolError::NotFound(format!("bdev {}", args.bdev_name)))?;
    let (bs, cluster) = (base.block_size(), args.opts.cluster_size);
    if cluster != 0 && (cluster < bs || cluster % bs != 0) {
        return Err(LvolError::invalid(format!(
            "cluster size {cluster} is not a multiple of the block size {bs}"
        )));
    }
    let name = args.opts.name.clone();
    {
        let taken = module.name_taken(&name);
        if taken {
            return Err(LvolError::Exists(format!("lvol store {name}")));
        }
        module.reserved.lock().push(name.clone());
    }
    let r = if args.md_page_size > 4096 {
        Err(LvolError::Blob(bdevkit_blobstore::Error::Unsupported(
            "metadata page size other than 4096",
        )))
    } else {
        attach(mgr, &base, Some(args.opts)).await
    };
    module.reserved.lock().retain(|n| *n != name);
    if let Ok(u) = &r {
        tracing::info!(lvs = %name, uuid = %u, base = %args.bdev_name, "lvol store created");
    }
    r
}

/// SPDK's clear method names, for the data area of a new store.
pub fn store_clear_method(name: &str) -> Option<StoreClearMethod> {
    match name.to_ascii_lowercase().as_str() {
        "none" => Some(StoreClearMethod::None),
        "unmap" => Some(StoreClearMethod::Unmap),
        "write_zeroes" => Some(StoreClearMethod::WriteZeroes),
        _ => None,
    }
}

fn store(mgr: &BdevManager, r: &LvsRef) -> Result<StoreEntry> {
    LvolModule::of(mgr)?.find(r)
}

/// `bdev_lvol_delete_lvstore`.
pub async fn delete_lvstore(mgr: &BdevManager, r: &LvsRef) -> Result<()> {
    store(mgr, r)?.md.ask(control::destroy).await
}

/// `bdev_lvol_grow_lvstore`.
pub async fn grow_lvstore(mgr: &BdevManager, r: &LvsRef) -> Result<()> {
    store(mgr, r)?.md.ask(control::grow).await
}

/// `bdev_lvol_rename_lvstore`: ENOENT-style `NotFound` when no store is
/// called `old`, EEXIST when another is called `new`.
pub async fn rename_lvstore(mgr: &BdevManager, old: &str, new: &str) -> Result<()> {
    let module = LvolModule::of(mgr)?;
    let s = module.find(&LvsRef::Name(old.to_string()))?;
    if old == new {
        return Ok(());
    }
    check_name(new)?;
    if module.name_taken(new) {
        return Err(LvolError::Exists(format!("lvol store {new}")));
    }
    module.reserved.lock().push(new.to_string());
    let new2 = new.to_string();
    let r = s.md.ask(move |md| control::rename_store(md, new2)).await;
    module.reserved.lock().retain(|n| n != new);
    r
}

/// `bdev_lvol_get_lvstores`: one store, or all.
pub async fn get_lvstores(mgr: &BdevManager, r: Option<&LvsRef>) -> Result<Vec<Value>> {
    each_ready_store(mgr, r, control::store_json).await
}

/// `bdev_lvol_get_lvols`: the lvols of one store, or of all.
pub async fn get_lvols(mgr: &BdevManager, r: Option<&LvsRef>) -> Result<Vec<Value>> {
    Ok(each_ready_store(mgr, r, control::lvols_json)
        .await?
        .into_iter()
        .flatten()
        .collect())
}

/// `f` of store `r`, or of every store, on each one's metadata thread;
/// stores not ready (loading, going) are left out.
async fn each_ready_store<T: Send + 'static>(
    mgr: &BdevManager,
    r: Option<&LvsRef>,
    f: fn(&MdStore) -> T,
) -> Result<Vec<T>> {
    let module = LvolModule::of(mgr)?;
    let stores = match r {
        Some(r) => vec![module.find(r)?],
        None => module.entries(),
    };
    let mut out = Vec::new();
    for s in stores {
        if let Ok(v) =
            s.md.ask(move |md: Rc<MdStore>| async move {
                md.check_ready()?;
                Ok(f(&md))
            })
            .await
        {
            out.push(v);
        }
    }
    Ok(out)
}

/// `bdev_lvol_create` in store `r`: returns the lvol's unique id (its
/// bdev's name).
pub async fn create_lvol(mgr: &BdevManager, r: &LvsRef, o: LvolOptions) -> Result<String> {
    store(mgr, r)?
        .md
        .ask(move |md| control::create_lvol(md, o))
        .await
}

/// The store and blob of the lvol bdev called (or aliased) `name`.
fn lvol_of(mgr: &BdevManager, name: &str) -> Result<(StoreEntry, BlobId)> {
    let not_found = || LvolError::NotFound(format!("lvol {name}"));
    let bdev = mgr.get(name).ok_or_else(not_found)?;
    let ops = bdev.ops_as::<LvolBdev>().ok_or_else(not_found)?;
    let s = LvolModule::of(mgr)?
        .find_uuid(ops.store.uuid)
        .ok_or_else(not_found)?;
    Ok((s, ops.blob_id()))
}

/// `bdev_lvol_delete`: by bdev name or alias, or, for an lvol without a
/// bdev (a clone, not served yet), by `lvs_name/lvol_name`.
pub async fn delete_lvol(mgr: &BdevManager, name: &str) -> Result<()> {
    if let Ok((s, blob)) = lvol_of(mgr, name) {
        return s.md.ask(move |md| control::delete_lvol(md, blob)).await;
    }
    let not_found = || LvolError::NotFound(format!("lvol {name}"));
    let (lvs, lvol) = name.split_once('/').ok_or_else(not_found)?;
    let s = store(mgr, &LvsRef::Name(lvs.to_string())).map_err(|_| not_found())?;
    let lvol = lvol.to_string();
    s.md.ask(move |md| async move {
        let blob = md
            .core
            .find(&lvol)
            .ok_or_else(|| LvolError::NotFound(format!("lvol {lvol}")))?;
        control::delete_lvol(md, blob).await
    })
    .await
}

/// `bdev_lvol_resize`: to `size_bytes`, rounded up to clusters.
pub async fn resize_lvol(mgr: &BdevManager, name: &str, size_bytes: u64) -> Result<()> {
    let (s, blob) = lvol_of(mgr, name)?;
    s.md.ask(move |md| control::resize_lvol(md, blob, size_bytes))
        .await
}

/// `bdev_lvol_rename`: `old` is the bdev's name or alias, `new` the lvol's
/// new name in its store.
pub async fn rename_lvol(mgr: &BdevManager, old: &str, new: &str) -> Result<()> {
    let (s, blob) = lvol_of(mgr, old)?;
    let new = new.to_string();
    s.md.ask(move |md| control::rename_lvol(md, blob, new))
        .await
}

/// `bdev_lvol_set_read_only`.
pub async fn set_read_only(mgr: &BdevManager, name: &str) -> Result<()> {
    let (s, blob) = lvol_of(mgr, name)?;
    s.md.ask(move |md| control::set_read_only(md, blob)).await
}

/// `bdev_lvol_snapshot`: snapshots the lvol bdev `lvol` as `snapshot_name`
/// in its store; returns the snapshot's unique id (its bdev name).
pub async fn snapshot_lvol(mgr: &BdevManager, lvol: &str, snapshot_name: &str) -> Result<String> {
    let (s, blob) = lvol_of(mgr, lvol)?;
    let name = snapshot_name.to_string();
    s.md.ask(move |md| snap::snapshot(md, blob, name)).await
}

/// `bdev_lvol_clone`: a thin clone `clone_name` of the snapshot bdev
/// `snapshot`; returns its unique id.
pub async fn clone_lvol(mgr: &BdevManager, snapshot: &str, clone_name: &str) -> Result<String> {
    let (s, blob) = lvol_of(mgr, snapshot)?;
    let name = clone_name.to_string();
    s.md.ask(move |md| snap::clone(md, blob, name)).await
}

/// `bdev_lvol_inflate`.
pub async fn inflate_lvol(mgr: &BdevManager, name: &str) -> Result<()> {
    let (s, blob) = lvol_of(mgr, name)?;
    s.md.ask(move |md| snap::relink(md, blob, snap::Relink::Inflate))
        .await
}

/// `bdev_lvol_decouple_parent`.
pub async fn decouple_parent(mgr: &BdevManager, name: &str) -> Result<()> {
    let (s, blob) = lvol_of(mgr, name)?;
    s.md.ask(move |md| snap::relink(md, blob, snap::Relink::Decouple))
        .await
}

/// `bdev_lvol_set_parent`: the snapshot bdev `parent` becomes the parent
/// of the lvol bdev `lvol` (both in one store: EINVAL otherwise).
pub async fn set_parent(mgr: &BdevManager, lvol: &str, parent: &str) -> Result<()> {
    let (s, blob) = lvol_of(mgr, lvol)?;
    let (ps, pblob) = lvol_of(mgr, parent)?;
    if !Arc::ptr_eq(&s.link, &ps.link) {
        return Err(LvolError::invalid("the parent is in another lvol store"));
    }
    s.md.ask(move |md| snap::relink(md, blob, snap::Relink::SetParent(pblob)))
        .await
}

/// `bdev_lvol_clone_bdev`: a thin clone `clone_name` in store `lvs_name`
/// of bdev `bdev` (not an lvol of that store: use `bdev_lvol_clone`);
/// returns its unique id.
pub async fn clone_bdev(
    mgr: &BdevManager,
    bdev: &str,
    lvs_name: &str,
    clone_name: &str,
) -> Result<String> {
    let module = LvolModule::of(mgr)?;
    let s = module
        .find(&LvsRef::Name(lvs_name.to_string()))
        .map_err(|_| LvolError::Refused("lvs does not exist"))?;
    let esnap = mgr
        .get(bdev)
        .ok_or(LvolError::Refused("bdev does not exist"))?;
    if lvol_of(mgr, bdev).is_ok_and(|(o, _)| Arc::ptr_eq(&o.link, &s.link)) {
        return Err(LvolError::Refused(
            "bdev is an lvol in same lvs as clone; use bdev_lvol_clone instead",
        ));
    }
    let name = clone_name.to_string();
    s.md.ask(move |md| esnap::clone_bdev(md, esnap, name)).await
}

/// `bdev_lvol_set_parent_bdev`: bdev `parent` becomes the external
/// snapshot parent of the thin lvol bdev `lvol`.
pub async fn set_parent_bdev(mgr: &BdevManager, lvol: &str, parent: &str) -> Result<()> {
    let (s, blob) = lvol_of(mgr, lvol)?;
    let esnap = mgr
        .get(parent)
        .ok_or_else(|| LvolError::NoDevice(parent.to_string()))?;
    s.md.ask(move |md| esnap::set_parent_bdev(md, blob, esnap))
        .await
}

/// `bdev_lvol_start_shallow_copy`: starts copying the clusters the lvol
/// bdev `src` holds itself to the same offsets of bdev `dst`, and returns
/// at once with the copy's handle. `NotFound` when `src` is not an lvol;
/// a failure to open or claim `dst` fails the start; every later one ends
/// the copy (see its status).
pub async fn start_shallow_copy(mgr: &BdevManager, src: &str, dst: &str) -> Result<ShallowCopy> {
    let (s, blob) = lvol_of(mgr, src)?;
    let dst = dst.to_string();
    s.md.ask(move |md| async move { shallow::start(&md, blob, &dst) })
        .await
}
