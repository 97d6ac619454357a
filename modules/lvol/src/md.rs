//! A store's metadata thread: the one thread that holds the blobstore (as
//! SPDK's lvstore has its thread), the open blob of every served lvol, and
//! the services the I/O path asks for.
//!
//! The store lives in [`MdStore`], owned by a task spawned on the thread
//! that created or loaded the store. Everything else reaches it by message
//! ([`MdMsg`] on an unbounded queue, [`MdTx`]): the I/O path's cluster
//! allocations and releases, bdev destructs, the base's removal, and
//! closures the control operations (`control.rs`) run there. Each message
//! that waits for I/O runs as a task of its own, so a slow operation never
//! holds up an allocation.
//!
//! Cluster releases of one lvol run one batch at a time: clear the table
//! entries, drain every channel (`LvolBdev::drain`), give the clusters
//! back; an allocation of a cluster being released waits for it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;

use bdevkit::bdev::module::{Bdev, BdevManager, BdevProps, Done};
use bdevkit::thread::{Thread, ThreadHandle};
use bdevkit_blobstore::{Blob, BlobId, ClusterSource};
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;

use crate::dev::BdevDev;
use crate::error::{LvolError, Result};
use crate::io::{ExtLink, Lineage, LvolBdev, LvolFlags, MdPort, StoreLink};
use crate::lvs::{esnap_name, LvolMeta, LvsCore};
use crate::table::{ClusterTable, EXTERNAL};
use crate::{MODULE, PRODUCT_NAME};

/// A closure run on the metadata thread.
pub(crate) type MdTask = Box<dyn FnOnce(&Rc<MdStore>) + Send>;

/// What reaches a store's metadata thread.
pub(crate) enum MdMsg {
    Alloc {
        blob: BlobId,
        idx: u64,
        from: ThreadHandle,
    },
    Release {
        blob: BlobId,
        idx: u64,
        from: ThreadHandle,
    },
    Destructed {
        blob: BlobId,
        done: Done,
    },
    BaseRemoved,
    /// The bdev of external snapshot (UUID) is going away.
    EsnapRemoved(String),
    Run(MdTask),
}

/// What a removal of the base, and of an external snapshot's bdev, start
/// (given to [`MdStore::start`] by the module).
pub(crate) type Hooks = (fn(&Rc<MdStore>), fn(&Rc<MdStore>, String));

/// The sending side of a store's queue.
#[derive(Clone)]
pub(crate) struct MdTx(mpsc::UnboundedSender<MdMsg>);

impl std::fmt::Debug for MdTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MdTx")
    }
}

impl MdTx {
    /// Runs `f` on the metadata thread; `false` when the store is gone.
    pub(crate) fn run(&self, f: impl FnOnce(&Rc<MdStore>) + Send + 'static) -> bool {
        self.0.unbounded_send(MdMsg::Run(Box::new(f))).is_ok()
    }

    /// Runs the future `f` makes on the metadata thread and returns its
    /// output (`NotFound` when the store is gone first).
    pub(crate) async fn ask<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Rc<MdStore>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T>> + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let sent = self.run(move |md| {
            let md = Rc::clone(md);
            let fut = f(md);
            spawn(async move {
                let _ = tx.send(fut.await);
            });
        });
        if !sent {
            return Err(LvolError::NotFound("lvol store".into()));
        }
        rx.await
            .unwrap_or_else(|_| Err(LvolError::NotFound("lvol store".into())))
    }
}

impl MdPort for MdTx {
    fn allocate(&self, blob: BlobId, idx: u64, from: ThreadHandle) {
        let _ = self.0.unbounded_send(MdMsg::Alloc { blob, idx, from });
    }

    fn release(&self, blob: BlobId, idx: u64, from: ThreadHandle) {
        let _ = self.0.unbounded_send(MdMsg::Release { blob, idx, from });
    }

    /// A store already gone drops the message, and `done` with it.
    fn destructed(&self, blob: BlobId, done: Done) {
        let _ = self.0.unbounded_send(MdMsg::Destructed { blob, done });
    }

    fn base_removed(&self) {
        let _ = self.0.unbounded_send(MdMsg::BaseRemoved);
    }

    fn esnap_removed(&self, id: String) {
        let _ = self.0.unbounded_send(MdMsg::EsnapRemoved(id));
    }
}

/// A new queue.
pub(crate) fn queue() -> (MdTx, mpsc::UnboundedReceiver<MdMsg>) {
    let (tx, rx) = mpsc::unbounded();
    (MdTx(tx), rx)
}

/// Spawns `fut` on this (bdevkit) thread.
pub(crate) fn spawn(fut: impl std::future::Future<Output = ()> + 'static) {
    match Thread::current() {
        Some(t) => t.spawn_local(fut),
        None => tracing::error!("lvol: metadata work outside a bdevkit thread"),
    }
}

/// Where a store is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreState {
    Ready,
    /// Being unloaded or destroyed: new operations fail (ENODEV).
    Removing,
}

/// One lvol the store knows, served as a bdev or not.
pub(crate) struct MdLvol {
    /// Open while its bdev is registered.
    pub blob: Option<Blob<BdevDev>>,
    pub bdev: Option<(Arc<LvolBdev>, Bdev)>,
    /// The table every channel reads (`LvolBdev::swap_tables` replaces it).
    pub table: Arc<ClusterTable>,
    /// An operation (resize, rename, delete...) is under way.
    pub busy: bool,
    releasing: BTreeSet<u64>,
    release_queue: Vec<(u64, ThreadHandle)>,
    release_running: bool,
    alloc_waiting: Vec<(u64, ThreadHandle)>,
    /// One channel drain at a time (releases and lineage changes).
    drain_lock: Rc<futures::lock::Mutex<()>>,
}

/// The store on its metadata thread.
pub(crate) struct MdStore {
    pub core: LvsCore<BdevDev>,
    pub link: Arc<StoreLink>,
    pub mgr: BdevManager,
    pub lvols: RefCell<BTreeMap<BlobId, MdLvol>>,
    pub state: Cell<StoreState>,
    /// Set when the store is gone: the task ends.
    stopped: Cell<bool>,
    /// Called once the store is gone (the module forgets it).
    on_gone: RefCell<Option<Box<dyn FnOnce()>>>,
    /// What a removal of the base starts (the unload, `control.rs`).
    on_base_removed: fn(&Rc<MdStore>),
    /// What a removal of an external snapshot's bdev starts (`esnap.rs`).
    on_esnap_removed: fn(&Rc<MdStore>, String),
    /// The external snapshots open, by id (the bdev's UUID).
    pub externals: RefCell<BTreeMap<String, Arc<ExtLink>>>,
    /// Its own queue, to wake the task when the store is gone.
    wake: MdTx,
}

impl std::fmt::Debug for MdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MdStore")
            .field("uuid", &self.link.uuid)
            .finish_non_exhaustive()
    }
}

impl MdStore {
    /// Starts the metadata task of `core` on this thread, serving its
    /// queue `rx`. `on_gone` runs when the store has been unloaded or
    /// destroyed; `on_base_removed` when the base goes away.
    pub(crate) fn start(
        core: LvsCore<BdevDev>,
        link: Arc<StoreLink>,
        mgr: BdevManager,
        (wake, rx): (MdTx, mpsc::UnboundedReceiver<MdMsg>),
        on_gone: Box<dyn FnOnce()>,
        (on_base_removed, on_esnap_removed): Hooks,
    ) -> Rc<MdStore> {
        let md = Rc::new(MdStore {
            core,
            link,
            mgr,
            lvols: RefCell::new(BTreeMap::new()),
            state: Cell::new(StoreState::Ready),
            stopped: Cell::new(false),
            on_gone: RefCell::new(Some(on_gone)),
            on_base_removed,
            on_esnap_removed,
            externals: RefCell::new(BTreeMap::new()),
            wake,
        });
        spawn(run(Rc::clone(&md), rx));
        md
    }

    /// The store is gone: the module forgets it, the task ends (and with
    /// it, once the operations still running let go, the store and its
    /// channel to the base, which the base's removal waits for).
    pub(crate) fn stop(&self) {
        self.stopped.set(true);
        let f = self.on_gone.borrow_mut().take();
        if let Some(f) = f {
            f();
        }
        self.wake.run(|_| {});
    }

    /// Fails unless the store takes new operations.
    pub(crate) fn check_ready(&self) -> Result<()> {
        match self.state.get() {
            StoreState::Ready => Ok(()),
            StoreState::Removing => Err(LvolError::NotFound(format!(
                "lvol store {} (being removed)",
                self.link.uuid
            ))),
        }
    }

    /// `lvs/lvol`, the alias of an lvol bdev.
    pub(crate) fn alias(&self, lvol_name: &str) -> String {
        format!("{}/{lvol_name}", self.core.name())
    }

    /// Knows lvol `meta`, and serves it as a bdev if it can: named by its
    /// unique id, with the alias `lvs/lvol`. A degraded lvol (its external
    /// snapshot is missing) is known but not served.
    pub(crate) fn add_lvol(&self, meta: &LvolMeta) -> Result<()> {
        let blob = self.core.blobstore().open_blob(meta.id)?;
        let table = Arc::new(ClusterTable::new(
            meta.num_clusters,
            blob.allocated_clusters(),
        ));
        let entry = MdLvol {
            blob: None,
            bdev: None,
            table: Arc::clone(&table),
            busy: false,
            releasing: BTreeSet::new(),
            release_queue: Vec::new(),
            release_running: false,
            alloc_waiting: Vec::new(),
            drain_lock: Rc::new(futures::lock::Mutex::new(())),
        };
        self.lvols.borrow_mut().insert(meta.id, entry);
        if self.core.blobstore().is_degraded(meta.id) {
            tracing::warn!(lvs = %self.core.name(), lvol = %meta.name,
                "lvol is degraded (its external snapshot is missing): bdev deferred");
            return Ok(());
        }
        let (lineage, flags) = self.lineage_of(meta.id, meta.num_clusters);
        let bdev = LvolBdev::new(
            meta.id,
            Arc::clone(&self.link),
            flags,
            meta.read_only,
            table,
            lineage,
        );
        let base = self.link.base.bdev();
        let block = base.block_size();
        let cluster = self.core.cluster_size();
        let mut p = BdevProps::new(
            meta.unique_id(&self.link.uuid),
            PRODUCT_NAME,
            block,
            meta.num_clusters * cluster / u64::from(block),
        );
        p.uuid = meta.uuid;
        p.aliases = vec![self.alias(&meta.name)];
        p.phys_block_size = base.props().phys_block_size;
        p.required_alignment = base.props().required_alignment;
        p.numa_id = base.props().numa_id;
        p.optimal_io_boundary = u32::try_from(self.link.geo.blocks).unwrap_or(u32::MAX);
        p.split_on_optimal_io_boundary = true;
        // Open before registering: examine may read the new bdev at once.
        if let Some(l) = self.lvols.borrow_mut().get_mut(&meta.id) {
            l.blob = Some(blob);
        }
        match self
            .mgr
            .register_bdev(MODULE, p, Arc::clone(&bdev) as Arc<LvolBdev>)
        {
            Ok(handle) => {
                if let Some(l) = self.lvols.borrow_mut().get_mut(&meta.id) {
                    l.bdev = Some((bdev, handle));
                }
                Ok(())
            }
            Err(e) => {
                self.lvols.borrow_mut().remove(&meta.id);
                Err(e.into())
            }
        }
    }

    /// The registered bdev of lvol `blob`.
    pub(crate) fn bdev_of(&self, blob: BlobId) -> Option<(Arc<LvolBdev>, Bdev)> {
        self.lvols.borrow().get(&blob).and_then(|l| l.bdev.clone())
    }

    /// Unregisters the bdev of lvol `blob` (its openers get a remove
    /// event) and returns once it is gone and its blob closed.
    pub(crate) async fn unserve(&self, blob: BlobId) {
        let Some((_, handle)) = self.bdev_of(blob) else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        self.mgr.unregister(&handle, move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
    }

    /// Where lvol `id`'s unallocated clusters read from (the device cluster
    /// its parent chain holds, [`EXTERNAL`], or nothing: zeros), and its
    /// lineage flags.
    pub(crate) fn lineage_of(&self, id: BlobId, num_clusters: u64) -> (Lineage, LvolFlags) {
        let bs = self.core.blobstore();
        let geo = self.link.geo;
        let blob = bs.open_blob(id).ok();
        let mapped: Vec<(u64, u32)> = match (
            &blob,
            bs.parent(id).is_some() || bs.esnap_of_chain(id).is_some(),
        ) {
            (Some(b), true) => (0..num_clusters)
                .filter_map(|i| match b.parent_source(i) {
                    ClusterSource::Device(lba) => {
                        Some((i, u32::try_from(lba / geo.blocks).unwrap_or(0)))
                    }
                    ClusterSource::External => Some((i, EXTERNAL)),
                    ClusterSource::Zeros => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let ext = bs
            .esnap_of_chain(id)
            .and_then(|e| self.externals.borrow().get(&esnap_name(&e)).cloned());
        let parent = bs.parent(id);
        let name = |b: BlobId| self.core.lvol(b).map(|l| l.name);
        let thin = blob.as_ref().is_some_and(|b| b.is_thin());
        let flags = LvolFlags {
            thin,
            snapshot: bs.is_snapshot(id),
            base_snapshot: parent.and_then(name),
            clones: self
                .core
                .clones_of(id)
                .into_iter()
                .filter_map(name)
                .collect(),
            esnap: bs.esnap_id(id).map(|e| esnap_name(&e)),
        };
        let lineage = Lineage {
            backing: Arc::new(ClusterTable::new(num_clusters, mapped)),
            thin,
            ext,
        };
        (lineage, flags)
    }

    /// Waits until every channel of `bdev` (lvol `blob`) has finished the
    /// I/O it sent before, one drain at a time per lvol.
    pub(crate) async fn drain(&self, blob: BlobId, bdev: &LvolBdev) {
        let lock = self
            .lvols
            .borrow()
            .get(&blob)
            .map(|l| Rc::clone(&l.drain_lock));
        let _g = match &lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        let (tx, rx) = oneshot::channel();
        bdev.drain(move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
    }

    /// Holds the writes of lvol `blob`'s channels and waits for those sent
    /// (SPDK's `blob_freeze_io`); returns its bdev for [`MdStore::thaw`].
    pub(crate) async fn freeze(&self, blob: BlobId) -> Option<Arc<LvolBdev>> {
        let (bdev, _) = self.bdev_of(blob)?;
        let (tx, rx) = oneshot::channel();
        bdev.freeze(move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
        self.drain(blob, &bdev).await;
        Some(bdev)
    }

    /// Lets the writes [`MdStore::freeze`] held go, in order.
    pub(crate) async fn thaw(bdev: Option<Arc<LvolBdev>>) {
        let Some(bdev) = bdev else { return };
        let (tx, rx) = oneshot::channel();
        bdev.unfreeze(move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
    }

    /// After a lineage change: lvol `changed` (frozen by the caller) gets
    /// its table rebuilt from its blob (less the clusters being released),
    /// and every served lvol its parent chain's table and flags.
    pub(crate) async fn refresh_lineage(&self, changed: &[BlobId]) {
        for &id in changed {
            let t = {
                let mut lvols = self.lvols.borrow_mut();
                let Some(l) = lvols.get_mut(&id) else {
                    continue;
                };
                let Some(b) = l.blob.as_ref() else { continue };
                let mapped = b
                    .allocated_clusters()
                    .into_iter()
                    .filter(|(i, _)| !l.releasing.contains(i));
                let t = Arc::new(ClusterTable::new(b.num_clusters(), mapped));
                l.table = Arc::clone(&t);
                t
            };
            if let Some((bdev, _)) = self.bdev_of(id) {
                MdStore::swap_tables(&bdev, t).await;
            }
            self.update_allocated(id);
        }
        let served: Vec<(BlobId, Arc<LvolBdev>, u64)> = self
            .lvols
            .borrow()
            .iter()
            .filter_map(|(&id, l)| {
                let (bdev, _) = l.bdev.as_ref()?;
                Some((id, Arc::clone(bdev), l.table.len()))
            })
            .collect();
        for (id, bdev, n) in served {
            let (lineage, flags) = self.lineage_of(id, n);
            *bdev.flags.lock() = flags;
            let (tx, rx) = oneshot::channel();
            bdev.set_lineage(lineage, move || {
                let _ = tx.send(());
            });
            let _ = rx.await;
        }
    }

    /// The table lvol `blob`'s channels read now, rebuilt from its blob.
    pub(crate) fn rebuild_table(&self, blob: BlobId) -> Option<Arc<ClusterTable>> {
        let mut lvols = self.lvols.borrow_mut();
        let l = lvols.get_mut(&blob)?;
        let b = l.blob.as_ref()?;
        let t = Arc::new(ClusterTable::new(b.num_clusters(), b.allocated_clusters()));
        l.table = Arc::clone(&t);
        Some(t)
    }

    /// Hands `table` to every channel of `bdev`, and returns when all have
    /// it.
    pub(crate) async fn swap_tables(bdev: &LvolBdev, table: Arc<ClusterTable>) {
        let (tx, rx) = oneshot::channel();
        bdev.swap_tables(table, move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
    }

    fn update_allocated(&self, blob: BlobId) {
        let lvols = self.lvols.borrow();
        if let Some(l) = lvols.get(&blob) {
            if let (Some(b), Some((bdev, _))) = (&l.blob, &l.bdev) {
                bdev.set_allocated(b.num_allocated_clusters());
            }
        }
    }

    /// [`MdPort::allocate`].
    fn allocate(self: &Rc<Self>, blob: BlobId, idx: u64, from: ThreadHandle) {
        let (b, bdev, c) = {
            let mut lvols = self.lvols.borrow_mut();
            let Some(l) = lvols.get_mut(&blob) else {
                return;
            };
            let (Some(b), Some((bdev, _))) = (l.blob.clone(), l.bdev.clone()) else {
                return;
            };
            if l.releasing.contains(&idx) {
                l.alloc_waiting.push((idx, from));
                return;
            }
            (b, bdev, l.table.get(idx))
        };
        if c != 0 {
            return bdev.allocated(&from, idx, Ok(c));
        }
        let md = Rc::clone(self);
        spawn(async move {
            let r = b.allocate_cluster(idx).await;
            drop(b);
            let geo = md.link.geo;
            let r = match r {
                Ok(lba) => {
                    let c = u32::try_from(lba / geo.blocks).unwrap_or(0);
                    if let Some(l) = md.lvols.borrow().get(&blob) {
                        l.table.set(idx, c);
                    }
                    md.update_allocated(blob);
                    Ok(c)
                }
                Err(e) => {
                    tracing::error!(lvol = blob, idx, error = %e, "cluster allocation failed");
                    Err(e.errno())
                }
            };
            bdev.allocated(&from, idx, r);
        });
    }

    /// [`MdPort::release`].
    fn release(self: &Rc<Self>, blob: BlobId, idx: u64, from: ThreadHandle) {
        let start = {
            let mut lvols = self.lvols.borrow_mut();
            let Some(l) = lvols.get_mut(&blob) else {
                return;
            };
            l.release_queue.push((idx, from));
            !std::mem::replace(&mut l.release_running, true)
        };
        if start {
            spawn(release_loop(Rc::clone(self), blob));
        }
    }

    /// [`MdPort::destructed`]: the bdev is gone; its blob closes.
    fn destructed(&self, blob: BlobId, done: Done) {
        if let Some(l) = self.lvols.borrow_mut().get_mut(&blob) {
            l.blob = None;
            l.bdev = None;
        }
        done.done();
    }
}

/// The metadata task: serves the queue until the store is gone.
async fn run(md: Rc<MdStore>, mut rx: mpsc::UnboundedReceiver<MdMsg>) {
    while let Some(msg) = rx.next().await {
        match msg {
            MdMsg::Alloc { blob, idx, from } => md.allocate(blob, idx, from),
            MdMsg::Release { blob, idx, from } => md.release(blob, idx, from),
            MdMsg::Destructed { blob, done } => md.destructed(blob, done),
            MdMsg::BaseRemoved => {
                tracing::info!(lvs = %md.core.name(), base = %md.link.base.bdev().name(),
                    "base bdev removed: unloading the lvol store");
                (md.on_base_removed)(&md);
            }
            MdMsg::EsnapRemoved(id) => (md.on_esnap_removed)(&md, id),
            MdMsg::Run(f) => f(&md),
        }
        if md.stopped.get() {
            break;
        }
    }
}

/// Gives back the clusters queued for release on lvol `blob`, one batch
/// at a time.
async fn release_loop(md: Rc<MdStore>, blob: BlobId) {
    loop {
        let (batch, todo, bdev, b) = {
            let mut lvols = md.lvols.borrow_mut();
            let Some(l) = lvols.get_mut(&blob) else {
                return;
            };
            let batch = std::mem::take(&mut l.release_queue);
            let (Some(b), Some((bdev, _))) = (l.blob.clone(), l.bdev.clone()) else {
                l.release_running = false;
                return;
            };
            if batch.is_empty() {
                l.release_running = false;
                return;
            }
            let mut todo = Vec::new();
            for (idx, _) in &batch {
                if l.table.get(*idx) != 0 && l.releasing.insert(*idx) {
                    // New I/O sees no cluster from now on.
                    l.table.set(*idx, 0);
                    todo.push(*idx);
                }
            }
            (batch, todo, bdev, b)
        };
        if !todo.is_empty() {
            // I/O sent before the entries were cleared finishes first.
            md.drain(blob, &bdev).await;
        }
        let mut ok = BTreeSet::new();
        for &idx in &todo {
            match b.release_cluster(idx).await {
                Ok(_) => {
                    ok.insert(idx);
                }
                Err(e) => tracing::error!(lvol = blob, idx, error = %e, "cluster release failed"),
            }
        }
        drop(b);
        md.update_allocated(blob);
        let waiting = {
            let mut lvols = md.lvols.borrow_mut();
            let Some(l) = lvols.get_mut(&blob) else {
                return;
            };
            for idx in &todo {
                l.releasing.remove(idx);
            }
            let (now, later): (Vec<_>, Vec<_>) = l
                .alloc_waiting
                .drain(..)
                .partition(|(i, _)| todo.contains(i));
            l.alloc_waiting = later;
            now
        };
        for (idx, from) in batch {
            bdev.released(&from, idx, !todo.contains(&idx) || ok.contains(&idx));
        }
        for (idx, from) in waiting {
            md.allocate(blob, idx, from);
        }
    }
}

/// Forgets a store whose task is gone without it (the thread exited).
impl Drop for MdStore {
    fn drop(&mut self) {
        if let Some(f) = self.on_gone.get_mut().take() {
            f();
        }
    }
}
