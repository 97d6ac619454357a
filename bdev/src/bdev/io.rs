//! [`BdevIo`]: one block I/O request, from a bounded per-thread pool.
//!
//! A consumer allocates one from its channel ([`super::BdevChannel::alloc_io`]),
//! fills it with a request builder ([`BdevIo::read`], [`BdevIo::write`],
//! ...), names a completion and submits it. The module receives it by value
//! and completes it exactly once with [`BdevIo::complete`]; the bdev layer
//! then accounts for it and calls the consumer's completion **on the
//! submitting thread**. Dropping a `BdevIo` returns it to the pool.
//!
//! Data buffers are owned ([`DmaBuf`]): moved in with the request and taken
//! back with [`BdevIo::take_buf`] after completion.
//!
//! A completed I/O may be filled again and resubmitted on the same channel
//! instead of being dropped and a new one allocated: the fastest way for a
//! consumer that keeps a queue depth busy. Modules see the data as
//! iovecs ([`BdevIo::iovs`]) and through safe copy helpers.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::mem::ManuallyDrop;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::channel::{self, ChannelCore};
use super::types::{IoStatus, IoType, NvmeCmd};
use crate::dma::DmaBuf;
use crate::thread::{IoChannel, Thread};

/// One data segment: the same layout as `struct iovec`, so a module can
/// pass `io.iovs()` to the kernel as an iovec array.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoVec {
    /// Start address.
    pub base: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

/// Something that consumes completed I/Os: the zero-allocation way for a
/// stateful consumer (one `Rc` per channel, cloned per I/O).
pub trait IoCompletion {
    /// Called on the submitting thread with the completed I/O.
    fn io_done(&self, io: BdevIo);
}

/// What runs when an I/O completes.
#[derive(Default)]
pub enum Completion {
    /// Nothing (the I/O is dropped back to the pool).
    #[default]
    None,
    /// A plain function; state travels in the I/O (tag, parent).
    Fn(fn(BdevIo)),
    /// A shared handler object.
    Handler(Rc<dyn IoCompletion>),
    /// A closure (allocates: convenience path, not the fast path).
    Closure(Box<dyn FnOnce(BdevIo)>),
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Completion::None => "None",
            Completion::Fn(_) => "Fn",
            Completion::Handler(_) => "Handler",
            Completion::Closure(_) => "Closure",
        })
    }
}

/// Owned data buffers of an I/O.
#[derive(Debug, Default)]
pub(crate) enum Bufs {
    #[default]
    None,
    One(DmaBuf),
    Many(Vec<DmaBuf>),
}

/// Where an I/O is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IoState {
    /// Being built by its owner.
    Building,
    /// Submitted: owned by the bdev layer or a module until completed.
    Submitted,
    /// Completed; handed back to the owner.
    Done,
}

/// The bdev layer's role for an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Submitted by a consumer.
    User,
    /// Submitted by a consumer while the channel keeps a latency
    /// histogram: its completion is counted there (set off the fast path,
    /// which a histogram turns off).
    UserTimed,
    /// A child of a split (or emulated) parent held in the channel.
    Child { parent_key: usize },
    /// A consumer's reset, passed to the module by the reset sequence.
    ResetToModule,
}

pub(crate) struct IoInner {
    pub(crate) io_type: IoType,
    pub(crate) offset_blocks: u64,
    pub(crate) num_blocks: u64,
    pub(crate) src_offset_blocks: u64,
    pub(crate) iovs: Vec<IoVec>,
    pub(crate) aux_iovs: Vec<IoVec>,
    pub(crate) bufs: Bufs,
    pub(crate) aux_bufs: Bufs,
    pub(crate) nvme_cmd: NvmeCmd,
    pub(crate) nvme_cdw0: u32,
    pub(crate) status: IoStatus,
    pub(crate) cb: Completion,
    pub(crate) tag: u64,
    pub(crate) parent: Option<BdevIo>,
    pub(crate) ch: Option<IoChannel<ChannelCore>>,
    pub(crate) thread_id: u64,
    pub(crate) submit_tick: u64,
    pub(crate) complete_tick: u64,
    pub(crate) role: Role,
    pub(crate) state: IoState,
    pub(crate) bounce: Option<DmaBuf>,
    pub(crate) saved_iovs: Vec<IoVec>,
    pub(crate) driver_ctx: [u64; 4],
}

impl IoInner {
    /// Reused after its completion: start afresh, keeping the pool slot
    /// and the channel.
    #[inline]
    fn reuse(&mut self) {
        self.state = IoState::Building;
        self.status = IoStatus::Pending;
        self.role = Role::User;
        self.driver_ctx = [0; 4];
        self.nvme_cdw0 = 0;
    }

    /// Whether dropping this I/O has more to release than its channel
    /// (buffers, a parent, a completion, a bounce buffer).
    #[inline]
    fn owns_extras(&self) -> bool {
        self.parent.is_some()
            || self.bounce.is_some()
            || !matches!(self.cb, Completion::None)
            || !matches!(self.bufs, Bufs::None)
            || !matches!(self.aux_bufs, Bufs::None)
    }
}

/// Process-wide bound on `BdevIo`s of one bdev manager: the pool size of
/// `bdev_set_options`. Threads take credits as they grow their caches.
#[derive(Debug)]
pub(crate) struct PoolShared {
    pub(crate) available: AtomicUsize,
    pub(crate) pool_size: AtomicUsize,
    pub(crate) cache_size: AtomicUsize,
}

impl PoolShared {
    pub(crate) fn new(pool_size: usize, cache_size: usize) -> Arc<Self> {
        Arc::new(PoolShared {
            available: AtomicUsize::new(pool_size),
            pool_size: AtomicUsize::new(pool_size),
            cache_size: AtomicUsize::new(cache_size),
        })
    }

    fn take_credit(&self) -> bool {
        self.available
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| a.checked_sub(1))
            .is_ok()
    }

    fn return_credit(&self) {
        self.available.fetch_add(1, Ordering::AcqRel);
    }

    /// Changes the pool size; in-use credits stay valid.
    pub(crate) fn resize(&self, pool_size: usize, cache_size: usize) {
        let old = self.pool_size.swap(pool_size, Ordering::AcqRel);
        if pool_size >= old {
            self.available.fetch_add(pool_size - old, Ordering::AcqRel);
        } else {
            let mut shrink = old - pool_size;
            let _ = self
                .available
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                    let d = shrink.min(a);
                    shrink = d;
                    Some(a - d)
                });
        }
        self.cache_size.store(cache_size, Ordering::Release);
    }
}

/// A callback waiting for a free `BdevIo` on this thread (`io_wait`).
pub type IoWaitFn = Box<dyn FnOnce()>;

/// This thread's cache of free `BdevIo`s and its io_wait queue (part of the
/// per-thread management channel).
pub(crate) struct IoCache {
    #[expect(
        clippy::vec_box,
        reason = "a BdevIo is a pointer to its box; caching boxes keeps alloc/free a pointer move"
    )]
    free: RefCell<Vec<Box<IoInner>>>,
    /// BdevIos this thread holds credits for (free + in use).
    held: Cell<usize>,
    pub(crate) shared: Arc<PoolShared>,
    waiters: RefCell<VecDeque<IoWaitFn>>,
    has_waiters: Cell<bool>,
    waiter_poller: RefCell<Option<crate::thread::Poller>>,
    pub(crate) bounce_cache: RefCell<Vec<DmaBuf>>,
    /// Set when the owning thread's management channel is destroyed: late
    /// I/Os are then freed instead of cached.
    closed: Cell<bool>,
}

impl fmt::Debug for IoCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoCache")
            .field("free", &self.free.borrow().len())
            .field("held", &self.held.get())
            .finish_non_exhaustive()
    }
}

impl IoCache {
    pub(crate) fn new(shared: Arc<PoolShared>) -> Rc<Self> {
        Rc::new(IoCache {
            free: RefCell::new(Vec::new()),
            held: Cell::new(0),
            shared,
            waiters: RefCell::new(VecDeque::new()),
            has_waiters: Cell::new(false),
            waiter_poller: RefCell::new(None),
            bounce_cache: RefCell::new(Vec::new()),
            closed: Cell::new(false),
        })
    }

    /// A fresh I/O bound to `ch`, or `None` when the pool is exhausted.
    #[inline]
    pub(crate) fn get(&self, ch: &IoChannel<ChannelCore>, thread_id: u64) -> Option<BdevIo> {
        let popped = self.free.borrow_mut().pop();
        let mut inner = match popped {
            Some(b) => b,
            None => self.grow()?,
        };
        inner.ch = Some(ch.clone());
        inner.thread_id = thread_id;
        inner.tag = 0;
        inner.status = IoStatus::Pending;
        inner.role = Role::User;
        inner.driver_ctx = [0; 4];
        inner.nvme_cdw0 = 0;
        Some(BdevIo(ManuallyDrop::new(inner)))
    }

    #[cold]
    fn grow(&self) -> Option<Box<IoInner>> {
        if !self.shared.take_credit() {
            return None;
        }
        self.held.set(self.held.get() + 1);
        Some(Box::new(IoInner {
            io_type: IoType::Read,
            offset_blocks: 0,
            num_blocks: 0,
            src_offset_blocks: 0,
            iovs: Vec::with_capacity(4),
            aux_iovs: Vec::new(),
            bufs: Bufs::None,
            aux_bufs: Bufs::None,
            nvme_cmd: NvmeCmd::default(),
            nvme_cdw0: 0,
            status: IoStatus::Pending,
            cb: Completion::None,
            tag: 0,
            parent: None,
            ch: None,
            thread_id: 0,
            submit_tick: 0,
            complete_tick: 0,
            role: Role::User,
            state: IoState::Building,
            bounce: None,
            saved_iovs: Vec::new(),
            driver_ctx: [0; 4],
        }))
    }

    #[inline]
    fn put(&self, inner: Box<IoInner>) {
        let cache_size = self.shared.cache_size.load(Ordering::Relaxed);
        let mut free = self.free.borrow_mut();
        if free.len() < cache_size.max(1) && !self.closed.get() {
            free.push(inner);
        } else {
            drop(free);
            self.shrink(inner);
        }
        if self.has_waiters.get() {
            self.wake_waiter();
        }
    }

    #[cold]
    fn shrink(&self, inner: Box<IoInner>) {
        drop(inner);
        self.held.set(self.held.get() - 1);
        self.shared.return_credit();
    }

    #[cold]
    fn wake_waiter(&self) {
        let w = self.waiters.borrow_mut().pop_front();
        self.has_waiters.set(!self.waiters.borrow().is_empty());
        if let Some(w) = w {
            w();
        }
    }

    /// Queues `f` until a `BdevIo` is freed on this thread. A slow poller
    /// also retries, so a waiter is not stranded when every I/O in flight
    /// belongs to other threads.
    pub(crate) fn wait(self: &Rc<Self>, f: IoWaitFn) {
        self.waiters.borrow_mut().push_back(f);
        self.has_waiters.set(true);
        if self.waiter_poller.borrow().is_none() {
            if let Some(t) = Thread::current() {
                let me = Rc::downgrade(self);
                let p = t.register_poller("bdev_io_wait", 1_000, move |p| {
                    let Some(me) = me.upgrade() else {
                        p.unregister();
                        return crate::thread::PollerStatus::Idle;
                    };
                    if me.waiters.borrow().is_empty() {
                        p.unregister();
                        *me.waiter_poller.borrow_mut() = None;
                        return crate::thread::PollerStatus::Idle;
                    }
                    let avail =
                        me.free.borrow().len() + me.shared.available.load(Ordering::Acquire);
                    // Counted first: a temporary in the `for` head would
                    // keep `waiters` borrowed through the loop, and waking
                    // borrows it mutably.
                    let n = avail.min(me.waiters.borrow().len());
                    for _ in 0..n {
                        me.wake_waiter();
                    }
                    crate::thread::PollerStatus::Busy
                });
                *self.waiter_poller.borrow_mut() = Some(p);
            }
        }
    }

    /// Drops cached I/Os and returns their credits (thread teardown).
    pub(crate) fn release(&self) {
        self.closed.set(true);
        self.waiters.borrow_mut().clear();
        self.has_waiters.set(false);
        self.bounce_cache.borrow_mut().clear();
        let free = std::mem::take(&mut *self.free.borrow_mut());
        for b in free {
            drop(b);
            self.held.set(self.held.get() - 1);
            self.shared.return_credit();
        }
        if let Some(p) = self.waiter_poller.borrow_mut().take() {
            p.unregister();
        }
    }

    /// Free I/Os cached on this thread.
    pub(crate) fn cached(&self) -> usize {
        self.free.borrow().len()
    }
}

impl Drop for IoCache {
    fn drop(&mut self) {
        self.release();
    }
}

/// Stores `new` in `slot`; the old value is dropped out of line, and only
/// when it holds something (on the fast path the slot is empty, and a plain
/// assignment would still call the enum's drop glue).
#[inline(always)]
fn replace_field<T: Default + IsEmpty>(slot: &mut T, new: T) {
    let old = std::mem::replace(slot, new);
    if old.is_empty() {
        // Nothing to release; skip the drop glue.
        std::mem::forget(old);
    } else {
        drop_cold(old);
    }
}

#[cold]
fn drop_cold<T>(v: T) {
    drop(v);
}

trait IsEmpty {
    fn is_empty(&self) -> bool;
}

impl IsEmpty for Bufs {
    #[inline]
    fn is_empty(&self) -> bool {
        matches!(self, Bufs::None)
    }
}

impl IsEmpty for Completion {
    #[inline]
    fn is_empty(&self) -> bool {
        matches!(self, Completion::None)
    }
}

/// One block I/O request.
///
/// A consumer allocates one from its channel
/// ([`super::BdevChannel::alloc_io`]), fills it with a request builder
/// ([`BdevIo::read`], [`BdevIo::write`], ...), names a completion and submits
/// it. The module receives it by value and completes it exactly once with
/// [`BdevIo::complete`]; the bdev layer then accounts for it and calls the
/// consumer's completion on the submitting thread. Dropping it returns it to
/// the pool. Data buffers are owned ([`DmaBuf`]): moved in with the request
/// and taken back with [`BdevIo::take_buf`] after completion.
// The box is wrapped in `ManuallyDrop` so that `Drop` can move it back into
// the pool: a plain `Option<Box<_>>` would cost a check on every accessor.
pub struct BdevIo(ManuallyDrop<Box<IoInner>>);

impl fmt::Debug for BdevIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.inner();
        f.debug_struct("BdevIo")
            .field("type", &i.io_type)
            .field("offset_blocks", &i.offset_blocks)
            .field("num_blocks", &i.num_blocks)
            .field("status", &i.status)
            .field("tag", &i.tag)
            .finish()
    }
}

impl Drop for BdevIo {
    /// Returns the I/O to its thread's cache. What it still owns (buffers,
    /// parent, completion) is dropped after the box is back, so that
    /// recursive drops find the cache consistent.
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and `self.0` is not touched afterwards;
        // this is the only place that takes the box out.
        let inner = unsafe { ManuallyDrop::take(&mut self.0) };
        debug_assert!(
            inner.state != IoState::Submitted || std::thread::panicking(),
            "BdevIo dropped while submitted: a module must complete every I/O"
        );
        if inner.owns_extras() {
            recycle_slow(inner);
            return;
        }
        recycle(inner);
    }
}

#[inline]
fn recycle(mut inner: Box<IoInner>) {
    inner.iovs.clear();
    inner.aux_iovs.clear();
    inner.state = IoState::Building;
    if let Some(ch) = inner.ch.take() {
        ch.cache().put(inner);
    }
}

#[cold]
fn recycle_slow(mut inner: Box<IoInner>) {
    let extras = (
        inner.parent.take(),
        std::mem::take(&mut inner.cb),
        std::mem::take(&mut inner.bufs),
        std::mem::take(&mut inner.aux_bufs),
        inner.bounce.take(),
    );
    recycle(inner);
    drop(extras);
}

impl BdevIo {
    #[inline]
    pub(crate) fn inner(&self) -> &IoInner {
        &self.0
    }

    #[inline]
    pub(crate) fn inner_mut(&mut self) -> &mut IoInner {
        &mut self.0
    }

    #[inline(always)]
    fn set_request(
        &mut self,
        io_type: IoType,
        offset_blocks: u64,
        num_blocks: u64,
    ) -> &mut IoInner {
        let i = self.inner_mut();
        assert!(
            i.state != IoState::Submitted,
            "request set on a submitted I/O"
        );
        if i.state == IoState::Done {
            i.reuse();
        }
        i.io_type = io_type;
        i.offset_blocks = offset_blocks;
        i.num_blocks = num_blocks;
        i.iovs.clear();
        i.aux_iovs.clear();
        i
    }

    #[inline(always)]
    fn set_buf(i: &mut IoInner, mut buf: DmaBuf) {
        i.iovs.push(IoVec {
            base: buf.as_mut_ptr(),
            len: buf.len(),
        });
        replace_field(&mut i.bufs, Bufs::One(buf));
    }

    fn set_bufs(i: &mut IoInner, mut bufs: Vec<DmaBuf>) {
        for b in &mut bufs {
            i.iovs.push(IoVec {
                base: b.as_mut_ptr(),
                len: b.len(),
            });
        }
        replace_field(&mut i.bufs, Bufs::Many(bufs));
    }

    // ---- request builders (consumer side) ----

    /// Read `num_blocks` at `offset_blocks` into `buf` (its first
    /// `num_blocks * block_size` bytes).
    #[inline(always)]
    pub fn read(&mut self, offset_blocks: u64, num_blocks: u64, buf: DmaBuf) -> &mut Self {
        let i = self.set_request(IoType::Read, offset_blocks, num_blocks);
        Self::set_buf(i, buf);
        self
    }

    /// Read into several buffers, in order.
    pub fn readv(&mut self, offset_blocks: u64, num_blocks: u64, bufs: Vec<DmaBuf>) -> &mut Self {
        let i = self.set_request(IoType::Read, offset_blocks, num_blocks);
        Self::set_bufs(i, bufs);
        self
    }

    /// Write `num_blocks` at `offset_blocks` from `buf`.
    #[inline(always)]
    pub fn write(&mut self, offset_blocks: u64, num_blocks: u64, buf: DmaBuf) -> &mut Self {
        let i = self.set_request(IoType::Write, offset_blocks, num_blocks);
        Self::set_buf(i, buf);
        self
    }

    /// Write from several buffers, in order.
    pub fn writev(&mut self, offset_blocks: u64, num_blocks: u64, bufs: Vec<DmaBuf>) -> &mut Self {
        let i = self.set_request(IoType::Write, offset_blocks, num_blocks);
        Self::set_bufs(i, bufs);
        self
    }

    /// Compare the blocks with `buf`; [`IoStatus::Miscompare`] on difference.
    pub fn compare(&mut self, offset_blocks: u64, num_blocks: u64, buf: DmaBuf) -> &mut Self {
        let i = self.set_request(IoType::Compare, offset_blocks, num_blocks);
        Self::set_buf(i, buf);
        self
    }

    /// Compare with `cmp`, and only if equal write `data`, atomically.
    pub fn compare_and_write(
        &mut self,
        offset_blocks: u64,
        num_blocks: u64,
        cmp: DmaBuf,
        mut data: DmaBuf,
    ) -> &mut Self {
        let i = self.set_request(IoType::CompareAndWrite, offset_blocks, num_blocks);
        Self::set_buf(i, cmp);
        i.aux_iovs.push(IoVec {
            base: data.as_mut_ptr(),
            len: data.len(),
        });
        i.aux_bufs = Bufs::One(data);
        self
    }

    /// Write zeroes over the range.
    pub fn write_zeroes(&mut self, offset_blocks: u64, num_blocks: u64) -> &mut Self {
        self.set_request(IoType::WriteZeroes, offset_blocks, num_blocks);
        self
    }

    /// Deallocate the range.
    pub fn unmap(&mut self, offset_blocks: u64, num_blocks: u64) -> &mut Self {
        self.set_request(IoType::Unmap, offset_blocks, num_blocks);
        self
    }

    /// Make completed writes in the range durable.
    pub fn flush(&mut self, offset_blocks: u64, num_blocks: u64) -> &mut Self {
        self.set_request(IoType::Flush, offset_blocks, num_blocks);
        self
    }

    /// Reset the bdev (see the bdev layer's reset semantics).
    pub fn reset(&mut self) -> &mut Self {
        self.set_request(IoType::Reset, 0, 0);
        self
    }

    /// Copy `num_blocks` from `src_offset_blocks` to `dst_offset_blocks`.
    pub fn copy(
        &mut self,
        dst_offset_blocks: u64,
        src_offset_blocks: u64,
        num_blocks: u64,
    ) -> &mut Self {
        let i = self.set_request(IoType::Copy, dst_offset_blocks, num_blocks);
        i.src_offset_blocks = src_offset_blocks;
        self
    }

    /// NVMe I/O command passthrough with an optional data buffer.
    pub fn nvme_io(&mut self, cmd: NvmeCmd, buf: Option<DmaBuf>) -> &mut Self {
        let i = self.set_request(IoType::NvmeIo, 0, 0);
        i.nvme_cmd = cmd;
        if let Some(b) = buf {
            Self::set_buf(i, b);
        }
        self
    }

    /// NVMe admin command passthrough with an optional data buffer.
    pub fn nvme_admin(&mut self, cmd: NvmeCmd, buf: Option<DmaBuf>) -> &mut Self {
        let i = self.set_request(IoType::NvmeAdmin, 0, 0);
        i.nvme_cmd = cmd;
        if let Some(b) = buf {
            Self::set_buf(i, b);
        }
        self
    }

    /// Abort the outstanding I/O with this tag on the same channel.
    pub fn abort(&mut self, target_tag: u64) -> &mut Self {
        let i = self.set_request(IoType::Abort, 0, 0);
        i.src_offset_blocks = target_tag;
        self
    }

    /// Completion: a plain function.
    pub fn on_done_fn(&mut self, f: fn(BdevIo)) -> &mut Self {
        replace_field(&mut self.inner_mut().cb, Completion::Fn(f));
        self
    }

    /// Completion: a shared handler.
    #[inline]
    pub fn on_done(&mut self, h: Rc<dyn IoCompletion>) -> &mut Self {
        replace_field(&mut self.inner_mut().cb, Completion::Handler(h));
        self
    }

    /// Completion: a closure (allocates once per I/O).
    pub fn on_done_closure(&mut self, f: impl FnOnce(BdevIo) + 'static) -> &mut Self {
        replace_field(&mut self.inner_mut().cb, Completion::Closure(Box::new(f)));
        self
    }

    /// Sets the caller's tag (any value; returned with the completion).
    #[inline]
    pub fn set_tag(&mut self, tag: u64) -> &mut Self {
        self.inner_mut().tag = tag;
        self
    }

    /// Attaches another I/O that travels with this one until completion
    /// (how a virtual bdev keeps the I/O it is serving).
    pub fn set_parent(&mut self, parent: BdevIo) -> &mut Self {
        self.inner_mut().parent = Some(parent);
        self
    }

    /// Copies the request of `other` (type, range, data segments, NVMe
    /// command) without taking its buffers: `other` must stay alive (attach
    /// it with [`BdevIo::set_parent`]) until this I/O completes.
    pub fn copy_request_from(&mut self, other: &BdevIo) -> &mut Self {
        let o = other.inner();
        let i = self.inner_mut();
        i.io_type = o.io_type;
        i.offset_blocks = o.offset_blocks;
        i.num_blocks = o.num_blocks;
        i.src_offset_blocks = o.src_offset_blocks;
        i.iovs.clear();
        i.iovs.extend_from_slice(&o.iovs);
        i.aux_iovs.clear();
        i.aux_iovs.extend_from_slice(&o.aux_iovs);
        i.nvme_cmd = o.nvme_cmd;
        self
    }

    // ---- accessors ----

    /// The I/O type.
    #[must_use]
    pub fn io_type(&self) -> IoType {
        self.inner().io_type
    }

    /// First block.
    #[must_use]
    pub fn offset_blocks(&self) -> u64 {
        self.inner().offset_blocks
    }

    /// Number of blocks.
    #[must_use]
    pub fn num_blocks(&self) -> u64 {
        self.inner().num_blocks
    }

    /// Source block of a copy.
    #[must_use]
    pub fn src_offset_blocks(&self) -> u64 {
        self.inner().src_offset_blocks
    }

    /// Tag of the I/O an abort targets.
    #[must_use]
    pub fn abort_target_tag(&self) -> u64 {
        self.inner().src_offset_blocks
    }

    /// Changes the block range (a virtual bdev translating offsets, e.g.
    /// split and raid).
    pub fn set_offset_blocks(&mut self, offset_blocks: u64) {
        self.inner_mut().offset_blocks = offset_blocks;
    }

    /// Changes the source block of a copy.
    pub fn set_src_offset_blocks(&mut self, src: u64) {
        self.inner_mut().src_offset_blocks = src;
    }

    /// The caller's tag.
    #[must_use]
    pub fn tag(&self) -> u64 {
        self.inner().tag
    }

    /// Completion status.
    #[must_use]
    pub fn status(&self) -> IoStatus {
        self.inner().status
    }

    /// NVMe command of a passthrough I/O.
    #[must_use]
    pub fn nvme_cmd(&self) -> &NvmeCmd {
        &self.inner().nvme_cmd
    }

    /// Completion dword 0 of an NVMe passthrough I/O.
    #[must_use]
    pub fn nvme_cdw0(&self) -> u32 {
        self.inner().nvme_cdw0
    }

    /// Sets completion dword 0 (modules).
    pub fn set_nvme_cdw0(&mut self, v: u32) {
        self.inner_mut().nvme_cdw0 = v;
    }

    /// The data segments.
    #[must_use]
    pub fn iovs(&self) -> &[IoVec] {
        &self.inner().iovs
    }

    /// The second data set (the write data of compare-and-write).
    #[must_use]
    pub fn aux_iovs(&self) -> &[IoVec] {
        &self.inner().aux_iovs
    }

    /// Total bytes in the data segments.
    #[must_use]
    pub fn iov_len(&self) -> usize {
        self.inner().iovs.iter().map(|v| v.len).sum()
    }

    /// Takes back the (single) data buffer after completion.
    pub fn take_buf(&mut self) -> Option<DmaBuf> {
        match std::mem::take(&mut self.inner_mut().bufs) {
            Bufs::One(b) => Some(b),
            Bufs::Many(mut v) if v.len() == 1 => v.pop(),
            other => {
                self.inner_mut().bufs = other;
                None
            }
        }
    }

    /// Takes back all data buffers after completion.
    pub fn take_bufs(&mut self) -> Vec<DmaBuf> {
        match std::mem::take(&mut self.inner_mut().bufs) {
            Bufs::None => Vec::new(),
            Bufs::One(b) => vec![b],
            Bufs::Many(v) => v,
        }
    }

    /// Takes back the compare-and-write data buffer.
    pub fn take_aux_buf(&mut self) -> Option<DmaBuf> {
        match std::mem::take(&mut self.inner_mut().aux_bufs) {
            Bufs::One(b) => Some(b),
            _ => None,
        }
    }

    /// Takes the attached parent I/O (see [`BdevIo::set_parent`]).
    pub fn take_parent(&mut self) -> Option<BdevIo> {
        self.inner_mut().parent.take()
    }

    /// The attached parent I/O.
    #[must_use]
    pub fn parent(&self) -> Option<&BdevIo> {
        self.inner().parent.as_ref()
    }

    /// The attached parent I/O, mutable.
    pub fn parent_mut(&mut self) -> Option<&mut BdevIo> {
        self.inner_mut().parent.as_mut()
    }

    /// Ticks when the I/O was submitted.
    #[must_use]
    pub fn submit_tick(&self) -> u64 {
        self.inner().submit_tick
    }

    /// Ticks when the bdev layer completed the I/O to its consumer (the
    /// same reading its statistics use; valid inside the completion).
    #[must_use]
    pub fn complete_tick(&self) -> u64 {
        self.inner().complete_tick
    }

    /// Four words of per-I/O scratch space for the module serving it.
    pub fn driver_ctx(&mut self) -> &mut [u64; 4] {
        &mut self.inner_mut().driver_ctx
    }

    // ---- data access for modules ----

    /// Copies the I/O's data (its segments, in order) into `dst`; returns
    /// the bytes copied (`min(dst.len(), iov_len())`).
    pub fn copy_from_iovs(&self, dst: &mut [u8]) -> usize {
        copy_from_segments(&self.inner().iovs, dst)
    }

    /// Copies the compare-and-write data into `dst`.
    pub fn copy_from_aux_iovs(&self, dst: &mut [u8]) -> usize {
        copy_from_segments(&self.inner().aux_iovs, dst)
    }

    /// Copies `src` into the I/O's segments, in order; returns bytes copied.
    pub fn copy_to_iovs(&mut self, src: &[u8]) -> usize {
        copy_to_segments(&self.inner().iovs, src)
    }

    /// Zero-fills the I/O's segments.
    pub fn zero_iovs(&mut self) {
        for v in &self.inner().iovs {
            // SAFETY: see `segment_mut`.
            unsafe { std::ptr::write_bytes(v.base, 0, v.len) };
        }
    }

    /// Whether the I/O's data equals `data` (compare I/O).
    #[must_use]
    pub fn iovs_equal(&self, data: &[u8]) -> bool {
        let mut off = 0;
        for v in &self.inner().iovs {
            if off >= data.len() {
                break;
            }
            let seg = segment(v);
            let n = seg.len().min(data.len() - off);
            if seg[..n] != data[off..off + n] {
                return false;
            }
            off += n;
        }
        true
    }

    /// Calls `f` with each data segment as a mutable slice, in order.
    pub fn for_each_segment_mut(&mut self, mut f: impl FnMut(&mut [u8])) {
        for v in &self.inner().iovs {
            f(segment_mut(v));
        }
    }

    /// Calls `f` with each data segment, in order.
    pub fn for_each_segment(&self, mut f: impl FnMut(&[u8])) {
        for v in &self.inner().iovs {
            f(segment(v));
        }
    }

    // ---- completion (module side) ----

    /// Completes the I/O. Modules call this exactly once per submitted I/O,
    /// never from inside `submit` (defer with [`BdevIo::complete_deferred`]).
    pub fn complete(mut self, status: IoStatus) {
        self.inner_mut().status = status;
        channel::complete(self);
    }

    /// Completes the I/O in a later iteration of the current thread (for
    /// failures detected inside `submit`).
    pub fn complete_deferred(self, status: IoStatus) {
        match Thread::current() {
            Some(t) => t.defer(move || self.complete(status)),
            None => self.complete(status),
        }
    }

    /// Completes with the status (and NVMe cdw0) of a finished child I/O.
    pub fn complete_from(mut self, child: &BdevIo) {
        let cdw0 = child.nvme_cdw0();
        self.inner_mut().nvme_cdw0 = cdw0;
        self.complete(child.status());
    }
}

fn segment(v: &IoVec) -> &[u8] {
    // SAFETY: every IoVec of a BdevIo points into memory owned by that I/O
    // (its DmaBufs or bounce buffer), by an ancestor I/O that it keeps alive
    // through `parent`/the split table, or by the bdev layer's zero buffer,
    // all of which outlive the I/O; and an I/O is accessed by one thread at
    // a time, so no other reference to the segment is live here.
    unsafe { std::slice::from_raw_parts(v.base, v.len) }
}

#[expect(
    clippy::mut_from_ref,
    reason = "the segment is memory the I/O owns, not memory behind the IoVec"
)]
fn segment_mut(v: &IoVec) -> &mut [u8] {
    // SAFETY: as in `segment`; callers hold the I/O mutably (or own it as a
    // module serving it), so this is the only access to the segment, and
    // the zero buffer is never a read destination.
    unsafe { std::slice::from_raw_parts_mut(v.base, v.len) }
}

pub(crate) fn copy_from_segments(iovs: &[IoVec], dst: &mut [u8]) -> usize {
    let mut off = 0;
    for v in iovs {
        if off >= dst.len() {
            break;
        }
        let seg = segment(v);
        let n = seg.len().min(dst.len() - off);
        dst[off..off + n].copy_from_slice(&seg[..n]);
        off += n;
    }
    off
}

pub(crate) fn copy_to_segments(iovs: &[IoVec], src: &[u8]) -> usize {
    let mut off = 0;
    for v in iovs {
        if off >= src.len() {
            break;
        }
        let seg = segment_mut(v);
        let n = seg.len().min(src.len() - off);
        seg[..n].copy_from_slice(&src[off..off + n]);
        off += n;
    }
    off
}
