//! The lvol bdev and its I/O path.
//!
//! The bdev declares its cluster size as `optimal_io_boundary` with
//! split-on-boundary (as SPDK's lvol does), so the bdev layer hands every
//! read, write, unmap and write zeroes over one cluster at most. The
//! channel looks the cluster up in its [`ClusterTable`] (one atomic load)
//! and sends the I/O to this thread's channel of the store's base as a
//! child carrying the parent: no allocation, no lock.
//!
//! A cluster that is not allocated (thin lvols):
//! * reads return zeros; unmap and write zeroes have nothing to do;
//! * a write waits on the channel while the store's metadata thread
//!   allocates the cluster (the first write of a cluster on a channel asks
//!   once; later ones queue behind it; the blobstore allocates it once for
//!   all channels and commits concurrent allocations together), and goes to
//!   the base once the mapping is on disk. I/O to other clusters carries on.
//!
//! An unmap of a whole allocated cluster of a thin lvol gives the cluster
//! back: once the base has unmapped it, the metadata thread clears the
//! table entry (new I/O sees no cluster), waits until every channel has
//! finished the I/O it sent before (each channel counts the children in
//! flight in two epochs; a walk flips the epoch and waits for the old one
//! to drain), then frees the cluster; the unmap completes after that, so
//! no cluster is reused while an I/O to it is in flight.
//!
//! Flush goes to the base as one flush over the base blocks of the range's
//! allocated clusters. Reset completes at once (the bdev layer has drained
//! the lvol's channels; resetting the base would disturb its other lvols).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::vbdev::{BaseBdev, BaseEvents};
use bdevkit::bdev::module::{
    BdevChannel, BdevIo, BdevOps, BoxError, Done, IoCompletion, IoStatus, IoType, ModuleIo,
};
use bdevkit::thread::{ChannelStep, IoChannel, IoDevice, Thread, ThreadHandle};
use bdevkit_blobstore::BlobId;
use parking_lot::Mutex;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::table::{ClusterGeo, ClusterTable, EXTERNAL};

/// What the I/O path asks of a store's metadata thread. Answers come back
/// through [`LvolBdev::allocated`] and [`LvolBdev::released`], on the
/// asking thread.
pub(crate) trait MdPort: Send + Sync + 'static {
    /// Allocate cluster `idx` of lvol `blob` (a write waits for it).
    fn allocate(&self, blob: BlobId, idx: u64, from: ThreadHandle);
    /// Give cluster `idx` of lvol `blob` back: the base unmapped all of it.
    fn release(&self, blob: BlobId, idx: u64, from: ThreadHandle);
    /// The bdev of lvol `blob` is gone (its last channel too).
    fn destructed(&self, blob: BlobId, done: Done);
    /// The store's base is going away.
    fn base_removed(&self);
    /// External snapshot bdev `id` (its UUID) is going away.
    fn esnap_removed(&self, id: String);
}

/// What every lvol of a store shares (`Send + Sync`; the store itself
/// lives on its metadata thread): names, the open base, the way to the
/// metadata thread.
pub(crate) struct StoreLink {
    pub uuid: Uuid,
    pub name: Mutex<String>,
    pub base: BaseBdev,
    pub geo: ClusterGeo,
    pub port: Box<dyn MdPort>,
}

impl std::fmt::Debug for StoreLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLink")
            .field("uuid", &self.uuid)
            .field("name", &*self.name.lock())
            .finish_non_exhaustive()
    }
}

/// The base's events reach the store's metadata thread.
impl BaseEvents for StoreLink {
    fn base_bdev(&self) -> &BaseBdev {
        &self.base
    }

    fn base_removed(&self) {
        self.port.base_removed();
    }

    /// The store grows only when asked (`bdev_lvol_grow_lvstore`).
    fn base_resized(&self) {}
}

/// An external snapshot's bdev, open read-only and claimed
/// `read_many_write_none` by the store (SPDK's esnap `bs_dev`): the lvols
/// whose chain ends at it read their unwritten clusters there.
pub(crate) struct ExtLink {
    /// Its id in the store: the bdev's UUID.
    pub id: String,
    pub base: BaseBdev,
    pub store: Arc<StoreLink>,
}

impl std::fmt::Debug for ExtLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtLink")
            .field("id", &self.id)
            .field("bdev", &self.base.bdev().name())
            .finish_non_exhaustive()
    }
}

impl BaseEvents for ExtLink {
    fn base_bdev(&self) -> &BaseBdev {
        &self.base
    }

    fn base_removed(&self) {
        self.store.port.esnap_removed(self.id.clone());
    }

    fn base_resized(&self) {}
}

/// Where an lvol's unallocated clusters read from, for its channels.
#[derive(Debug, Clone)]
pub(crate) struct Lineage {
    /// The parent chain's device cluster of each cluster (0: zeros;
    /// [`EXTERNAL`]: the external snapshot).
    pub backing: Arc<ClusterTable>,
    pub thin: bool,
    /// The external snapshot at the root of the chain.
    pub ext: Option<Arc<ExtLink>>,
}

/// What `bdev_get_bdevs` shows of an lvol's lineage (the metadata thread
/// refreshes it after every change).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LvolFlags {
    pub thin: bool,
    pub snapshot: bool,
    /// The parent snapshot's lvol name (a clone).
    pub base_snapshot: Option<String>,
    /// The clones' lvol names (a snapshot).
    pub clones: Vec<String>,
    /// Its own external snapshot's id (an esnap clone).
    pub esnap: Option<String>,
}

/// One lvol bdev.
pub struct LvolBdev {
    pub(crate) blob: BlobId,
    pub(crate) store: Arc<StoreLink>,
    pub(crate) flags: Mutex<LvolFlags>,
    read_only: AtomicBool,
    allocated: AtomicU64,
    /// The current table, for channels created from now on.
    table: Mutex<Arc<ClusterTable>>,
    /// Where unallocated clusters read from, for new channels.
    lineage: Mutex<Lineage>,
    device: IoDevice<LvolChannel>,
    flush: bool,
}

impl std::fmt::Debug for LvolBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LvolBdev")
            .field("blob", &format_args!("{:#x}", self.blob))
            .field("store", &self.store.uuid)
            .finish_non_exhaustive()
    }
}

impl LvolBdev {
    pub(crate) fn new(
        blob: BlobId,
        store: Arc<StoreLink>,
        flags: LvolFlags,
        read_only: bool,
        table: Arc<ClusterTable>,
        lineage: Lineage,
    ) -> Arc<LvolBdev> {
        let flush = store.base.bdev().supports(IoType::Flush);
        let allocated = table.mapped().len() as u64;
        Arc::new_cyclic(|weak: &Weak<LvolBdev>| {
            let w = weak.clone();
            LvolBdev {
                blob,
                store,
                flags: Mutex::new(flags),
                lineage: Mutex::new(lineage),
                read_only: AtomicBool::new(read_only),
                allocated: AtomicU64::new(allocated),
                table: Mutex::new(table),
                flush,
                device: IoDevice::register(format!("lvol_{blob:#x}"), move || {
                    let b = w.upgrade().ok_or("lvol bdev is gone")?;
                    LvolChannel::new(b)
                }),
            }
        })
    }

    /// Its blob.
    #[must_use]
    pub fn blob_id(&self) -> BlobId {
        self.blob
    }

    /// Writes fail from now on (`bdev_lvol_set_read_only`).
    pub(crate) fn set_read_only(&self) {
        self.read_only.store(true, Ordering::Release);
    }

    pub(crate) fn set_allocated(&self, n: u64) {
        self.allocated.store(n, Ordering::Relaxed);
    }

    /// Hands every channel (and channels to come) `table`; then `done` on
    /// the calling thread.
    pub(crate) fn swap_tables(
        &self,
        table: Arc<ClusterTable>,
        done: impl FnOnce() + Send + 'static,
    ) {
        *self.table.lock() = Arc::clone(&table);
        self.device.for_each_channel(
            move |ch| {
                ch.inner.table.replace(Arc::clone(&table));
            },
            done,
        );
    }

    /// Hands every channel (and channels to come) `lineage`: the parent
    /// chain's table, the thin flag, the external snapshot; then `done` on
    /// the calling thread.
    pub(crate) fn set_lineage(&self, lineage: Lineage, done: impl FnOnce() + Send + 'static) {
        *self.lineage.lock() = lineage.clone();
        self.device.for_each_channel(
            move |ch| {
                let c = &ch.inner;
                c.backing.replace(Arc::clone(&lineage.backing));
                c.thin.set(lineage.thin);
                let same = match (&*c.ext.borrow(), &lineage.ext) {
                    (Some((id, _)), Some(e)) => *id == e.id,
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    let ext = lineage.ext.as_ref().and_then(|e| {
                        let ch = e.base.channel().ok()?;
                        Some((e.id.clone(), ch))
                    });
                    c.ext.replace(ext);
                }
            },
            done,
        );
    }

    /// Holds new writes, unmaps and write zeroes (and writes whose cluster
    /// arrives) on every channel until [`LvolBdev::unfreeze`]; then `done`.
    /// Reads go on. Follow with [`LvolBdev::drain`] for the writes sent.
    pub(crate) fn freeze(&self, done: impl FnOnce() + Send + 'static) {
        self.device
            .for_each_channel(|ch| ch.inner.frozen.set(true), done);
    }

    /// Resubmits what [`LvolBdev::freeze`] held, in order; then `done`.
    pub(crate) fn unfreeze(&self, done: impl FnOnce() + Send + 'static) {
        self.device.for_each_channel(
            |ch| {
                let chan = &ch.inner;
                chan.frozen.set(false);
                let held = std::mem::take(&mut *chan.held.borrow_mut());
                for io in held {
                    chan.submit(io);
                }
            },
            done,
        );
    }

    /// Waits until every channel has finished the I/O it sent to the base
    /// before this call (the epoch drain); then `done` on the calling
    /// thread. One drain at a time per lvol (the metadata thread runs them
    /// one after another).
    pub(crate) fn drain(&self, done: impl FnOnce() + Send + 'static) {
        self.device
            .for_each_channel_async(|ch, step| ch.inner.drain(step), done);
    }

    /// Answer to [`MdPort::allocate`]: device cluster `Ok(c)` or errno.
    pub(crate) fn allocated(&self, from: &ThreadHandle, idx: u64, r: Result<u32, i32>) {
        let device = self.device.clone();
        let _ = from.send_msg(move || {
            if let Ok(ch) = device.get_channel() {
                ch.inner.allocated(idx, r);
            }
        });
    }

    /// Answer to [`MdPort::release`].
    pub(crate) fn released(&self, from: &ThreadHandle, idx: u64, ok: bool) {
        let device = self.device.clone();
        let _ = from.send_msg(move || {
            if let Ok(ch) = device.get_channel() {
                ch.inner.released(idx, ok);
            }
        });
    }
}

impl BdevOps for LvolBdev {
    type Channel = IoChannel<LvolChannel>;

    fn create_channel(&self) -> Result<IoChannel<LvolChannel>, BoxError> {
        Ok(self.device.get_channel()?)
    }

    #[inline]
    fn submit(&self, ch: &IoChannel<LvolChannel>, io: BdevIo) {
        ch.inner.submit(io);
    }

    /// SPDK's set (seek aside: the bdev layer has no seek result), plus
    /// flush where the base has one.
    fn io_type_supported(&self, io_type: IoType) -> bool {
        let writable = !self.read_only.load(Ordering::Acquire);
        match io_type {
            IoType::Read | IoType::Reset => true,
            IoType::Write | IoType::Unmap | IoType::WriteZeroes => writable,
            IoType::Flush => self.flush,
            _ => false,
        }
    }

    /// The metadata thread closes the blob (or deletes it, when this was
    /// `bdev_lvol_delete`), then `done`.
    fn destruct(&self, done: Done) {
        self.device.unregister(|| {});
        self.store.port.destructed(self.blob, done);
    }

    fn dump_info_json(&self) -> Value {
        let f = self.flags.lock().clone();
        let mut lvol = json!({
            "lvol_store_uuid": self.store.uuid.to_string(),
            "base_bdev": self.store.base.bdev().name(),
            "thin_provision": f.thin,
            "num_allocated_clusters": self.allocated.load(Ordering::Relaxed),
            "snapshot": f.snapshot,
            "clone": f.base_snapshot.is_some(),
        });
        if let Some(base) = &f.base_snapshot {
            lvol["base_snapshot"] = json!(base);
        }
        if f.snapshot {
            lvol["clones"] = json!(f.clones);
        }
        lvol["esnap_clone"] = json!(f.esnap.is_some());
        if let Some(e) = &f.esnap {
            lvol["external_snapshot_name"] = json!(e);
        }
        json!({ "lvol": lvol })
    }
}

/// An lvol's per-thread channel (also its `IoDevice` channel).
#[derive(Debug)]
pub struct LvolChannel {
    inner: Rc<Chan>,
}

impl LvolChannel {
    fn new(bdev: Arc<LvolBdev>) -> Result<LvolChannel, BoxError> {
        let base = bdev.store.base.channel()?;
        let table = Arc::clone(&bdev.table.lock());
        let lineage = bdev.lineage.lock().clone();
        let ext = match &lineage.ext {
            Some(e) => Some((e.id.clone(), e.base.channel()?)),
            None => None,
        };
        let me = Thread::try_current()?.handle();
        Ok(LvolChannel {
            inner: Rc::new(Chan {
                geo: bdev.store.geo,
                thin: Cell::new(lineage.thin),
                backing: RefCell::new(lineage.backing),
                ext: RefCell::new(ext),
                frozen: Cell::new(false),
                held: RefCell::new(Vec::new()),
                bdev,
                base,
                me,
                table: RefCell::new(table),
                epoch: Cell::new(0),
                inflight: [Cell::new(0), Cell::new(0)],
                draining: RefCell::new(None),
                waiting: RefCell::new(Vec::new()),
                requested: RefCell::new(Vec::new()),
                releasing: RefCell::new(Vec::new()),
                ready: RefCell::new(Vec::new()),
            }),
        })
    }
}

/// `driver_ctx` of a parent sent to the base: `[epoch, release index + 1
/// (0: none), ..]`.
const CTX_EPOCH: usize = 0;
const CTX_RELEASE: usize = 1;

struct Chan {
    bdev: Arc<LvolBdev>,
    base: BdevChannel,
    geo: ClusterGeo,
    thin: Cell<bool>,
    me: ThreadHandle,
    table: RefCell<Arc<ClusterTable>>,
    /// The parent chain's cluster of each lvol cluster (0: zeros;
    /// [`EXTERNAL`]: the external snapshot): where reads of an unallocated
    /// cluster go.
    backing: RefCell<Arc<ClusterTable>>,
    /// This thread's channel to the external snapshot at the root of the
    /// chain (with its id), if the chain ends at one.
    ext: RefCell<Option<(String, BdevChannel)>>,
    /// A lineage change is under way: writes, unmaps and write zeroes wait
    /// in `held` (in order) instead of going to the base.
    frozen: Cell<bool>,
    held: RefCell<Vec<BdevIo>>,
    /// Children in flight per epoch, and the drain waiting for the old
    /// epoch (its index and the walk's step).
    epoch: Cell<usize>,
    inflight: [Cell<u64>; 2],
    draining: RefCell<Option<(usize, ChannelStep)>>,
    /// Writes waiting for their cluster (index, write).
    waiting: RefCell<Vec<(u64, BdevIo)>>,
    /// Clusters this channel asked the metadata thread for.
    requested: RefCell<Vec<u64>>,
    /// Unmaps waiting for their cluster to be given back.
    releasing: RefCell<Vec<(u64, BdevIo)>>,
    /// Scratch for I/O taken out of `waiting` or `releasing`.
    ready: RefCell<Vec<BdevIo>>,
}

impl std::fmt::Debug for Chan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chan")
            .field("blob", &format_args!("{:#x}", self.bdev.blob))
            .field(
                "inflight",
                &[self.inflight[0].get(), self.inflight[1].get()],
            )
            .finish_non_exhaustive()
    }
}

impl Chan {
    fn handler(self: &Rc<Self>) -> Rc<dyn IoCompletion> {
        Rc::clone(self) as Rc<dyn IoCompletion>
    }

    #[inline]
    fn submit(self: &Rc<Self>, mut io: BdevIo) {
        if self.bdev.store.base.is_removing() {
            return io.complete_deferred(IoStatus::Aborted);
        }
        let t = io.io_type();
        match t {
            IoType::Read | IoType::Write | IoType::Unmap | IoType::WriteZeroes => {}
            IoType::Flush => return self.flush(io),
            IoType::Reset => return io.complete_deferred(IoStatus::Success),
            _ => return io.complete_deferred(IoStatus::Errno(libc::ENOTSUP)),
        }
        if t != IoType::Read && self.bdev.read_only.load(Ordering::Relaxed) {
            return io.complete_deferred(IoStatus::Failed);
        }
        if t != IoType::Read && self.frozen.get() {
            return self.held.borrow_mut().push(io);
        }
        let (idx, within) = self.geo.split(io.offset_blocks());
        let c = self.table.borrow().get(idx);
        if c != 0 {
            let whole = within == 0 && io.num_blocks() == self.geo.blocks;
            let release = (t == IoType::Unmap && self.thin.get() && whole).then_some(idx);
            return self.send(io, self.geo.lba(c) + within, release);
        }
        if !self.thin.get() {
            // A thick lvol owns every cluster: only an I/O past a table
            // being replaced by a resize gets here.
            return io.complete_deferred(IoStatus::Failed);
        }
        let parent = self.backing.borrow().get(idx);
        match t {
            IoType::Read if parent == EXTERNAL => {
                // Same block size: the external's block is the lvol's.
                let lba = io.offset_blocks();
                let ext = self.ext.borrow();
                match ext.as_ref() {
                    Some((_, ch)) => self.send_on(ch, io, lba, None),
                    None => io.complete_deferred(IoStatus::Errno(libc::ENODEV)),
                }
            }
            IoType::Read if parent != 0 => self.send(io, self.geo.lba(parent) + within, None),
            // Zeros must hide the parent's data: a write, with copy-on-write.
            IoType::WriteZeroes if parent != 0 => self.wait_for_cluster(idx, io),
            IoType::Read => {
                let status = if io.zero_iovs() {
                    IoStatus::Success
                } else {
                    IoStatus::Failed
                };
                io.complete_deferred(status);
            }
            IoType::Write => self.wait_for_cluster(idx, io),
            _ => io.complete_deferred(IoStatus::Success),
        }
    }

    /// Sends `io` to the base at `lba` as a child carrying it, counted in
    /// this epoch; `release`: give the cluster back once it is unmapped.
    fn send(self: &Rc<Self>, io: BdevIo, lba: u64, release: Option<u64>) {
        self.send_on(&self.base, io, lba, release);
    }

    /// [`Chan::send`] to `ch` (the base's channel or the external
    /// snapshot's).
    fn send_on(self: &Rc<Self>, ch: &BdevChannel, mut io: BdevIo, lba: u64, release: Option<u64>) {
        let Some(mut child) = ch.alloc_io() else {
            return io.complete_deferred(IoStatus::NoMem);
        };
        let e = self.epoch.get();
        {
            let ctx = io.driver_ctx();
            ctx[CTX_EPOCH] = e as u64;
            ctx[CTX_RELEASE] = release.map_or(0, |i| i + 1);
        }
        self.inflight[e].set(self.inflight[e].get() + 1);
        child.take_request_of(io).on_done(self.handler());
        child.set_offset_blocks(lba);
        self.go(ch, child, e);
    }

    /// Submits a child counted in epoch `e` on `ch`.
    fn go(&self, ch: &BdevChannel, child: BdevIo, e: usize) {
        if let Err(err) = ch.submit(child) {
            let errno = err.error.errno();
            let mut child = err.io;
            self.done_in(e);
            if let Some(parent) = child.take_parent() {
                parent.complete_deferred(IoStatus::Errno(errno));
            }
        }
    }

    /// One child of epoch `e` is done: a drain waiting for it may finish.
    fn done_in(&self, e: usize) {
        let left = self.inflight[e].get().saturating_sub(1);
        self.inflight[e].set(left);
        if left == 0 {
            let step = {
                let mut d = self.draining.borrow_mut();
                match d.as_ref() {
                    Some((old, _)) if *old == e => d.take().map(|(_, s)| s),
                    _ => None,
                }
            };
            if let Some(step) = step {
                step.next();
            }
        }
    }

    /// A drain visits: later children count in the other epoch; the walk
    /// moves on once the children of this one are done.
    fn drain(&self, step: ChannelStep) {
        let old = self.epoch.get();
        self.epoch.set(old ^ 1);
        if self.inflight[old].get() == 0 {
            step.next();
        } else {
            *self.draining.borrow_mut() = Some((old, step));
        }
    }

    fn wait_for_cluster(&self, idx: u64, io: BdevIo) {
        self.waiting.borrow_mut().push((idx, io));
        let asked = self.requested.borrow().contains(&idx);
        if !asked {
            self.requested.borrow_mut().push(idx);
            self.bdev
                .store
                .port
                .allocate(self.bdev.blob, idx, self.me.clone());
        }
    }

    /// Takes the I/O waiting for cluster `idx` out of `list` into `ready`.
    fn take_waiting(&self, list: &RefCell<Vec<(u64, BdevIo)>>, idx: u64) {
        let mut list = list.borrow_mut();
        let mut ready = self.ready.borrow_mut();
        let mut i = 0;
        while i < list.len() {
            if list[i].0 == idx {
                ready.push(list.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
    }

    /// The metadata thread allocated cluster `idx` (device cluster `c`), or
    /// failed with an errno: the writes waiting for it go on.
    fn allocated(self: &Rc<Self>, idx: u64, r: Result<u32, i32>) {
        self.requested.borrow_mut().retain(|&i| i != idx);
        self.take_waiting(&self.waiting, idx);
        loop {
            let next = self.ready.borrow_mut().pop();
            let Some(io) = next else { break };
            if self.frozen.get() {
                // The cluster may belong to a snapshot by now: look again
                // once the lineage change is done.
                self.held.borrow_mut().push(io);
                continue;
            }
            match r {
                Ok(c) => {
                    let (_, within) = self.geo.split(io.offset_blocks());
                    self.send(io, self.geo.lba(c) + within, None);
                }
                Err(errno) => io.complete(IoStatus::Errno(errno)),
            }
        }
    }

    /// The metadata thread gave cluster `idx` back (or could not): the
    /// unmaps waiting for it complete.
    fn released(&self, idx: u64, ok: bool) {
        self.take_waiting(&self.releasing, idx);
        loop {
            let next = self.ready.borrow_mut().pop();
            let Some(io) = next else { break };
            io.complete(if ok {
                IoStatus::Success
            } else {
                IoStatus::Failed
            });
        }
    }

    /// Flush: one flush over the base blocks of the allocated clusters of
    /// the range.
    fn flush(self: &Rc<Self>, mut io: BdevIo) {
        let n = io.num_blocks();
        if !self.bdev.flush || n == 0 {
            return io.complete_deferred(IoStatus::Success);
        }
        let (first, _) = self.geo.split(io.offset_blocks());
        let (last, _) = self.geo.split(io.offset_blocks() + n - 1);
        let span = {
            let t = self.table.borrow();
            let last = last.min(t.len().saturating_sub(1));
            (first..=last).map(|i| t.get(i)).filter(|&c| c != 0).fold(
                None,
                |acc: Option<(u32, u32)>, c| match acc {
                    None => Some((c, c)),
                    Some((lo, hi)) => Some((lo.min(c), hi.max(c))),
                },
            )
        };
        let Some((lo, hi)) = span else {
            return io.complete_deferred(IoStatus::Success);
        };
        let Some(mut child) = self.base.alloc_io() else {
            return io.complete_deferred(IoStatus::NoMem);
        };
        let e = self.epoch.get();
        {
            let ctx = io.driver_ctx();
            ctx[CTX_EPOCH] = e as u64;
            ctx[CTX_RELEASE] = 0;
        }
        self.inflight[e].set(self.inflight[e].get() + 1);
        let start = self.geo.lba(lo);
        let len = self.geo.lba(hi) + self.geo.blocks - start;
        // The child carries the parent; its own range is the base span.
        child.take_request_of(io).on_done(self.handler());
        child.flush(start, len);
        self.go(&self.base, child, e);
    }
}

impl IoCompletion for Chan {
    fn io_done(&self, mut child: BdevIo) {
        let Some(mut parent) = child.take_parent() else {
            return;
        };
        let ctx = *parent.driver_ctx();
        let e = usize::from(ctx[CTX_EPOCH] != 0);
        self.done_in(e);
        if ctx[CTX_RELEASE] != 0 && child.status().is_success() {
            let idx = ctx[CTX_RELEASE] - 1;
            drop(child);
            self.releasing.borrow_mut().push((idx, parent));
            self.bdev
                .store
                .port
                .release(self.bdev.blob, idx, self.me.clone());
            return;
        }
        parent.complete_from(&child);
    }
}
