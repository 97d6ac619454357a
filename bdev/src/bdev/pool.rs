//! The bounded pool of I/O requests: a process-wide credit counter per
//! bdev manager (`bdev_io_pool_size`) and one cache of free requests per
//! thread (`bdev_io_cache_size`), with the io_wait queue of callbacks
//! waiting for a free request, the thread's bounce-buffer cache and its
//! zero buffer. Generic over the request so that it sits below the
//! request type (which returns itself here when dropped).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::dma::DmaBuf;
use crate::thread::{Poller, PollerStatus, Thread};

/// Size of the zero buffer write-zeroes emulation writes from.
pub(crate) const ZERO_BUF_LEN: usize = 1 << 20;
/// Bounce buffers kept per thread for reuse.
const BOUNCE_CACHE: usize = 8;

/// Process-wide bound on the requests of one bdev manager: the pool size
/// of `bdev_set_options`. Threads take credits as they grow their caches.
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

/// A callback waiting for a free request on this thread (`io_wait`).
pub type IoWaitFn = Box<dyn FnOnce()>;

/// This thread's cache of free requests, its io_wait queue, bounce
/// buffers and zero buffer.
pub(crate) struct IoPool<T> {
    free: RefCell<Vec<Box<T>>>,
    /// Requests this thread holds credits for (free + in use).
    held: Cell<usize>,
    pub(crate) shared: Arc<PoolShared>,
    waiters: RefCell<VecDeque<IoWaitFn>>,
    has_waiters: Cell<bool>,
    waiter_poller: RefCell<Option<Poller>>,
    bounce: RefCell<Vec<DmaBuf>>,
    zero: RefCell<Option<Rc<DmaBuf>>>,
    /// Set when the owning thread's management channel is destroyed: late
    /// requests are then freed instead of cached.
    closed: Cell<bool>,
}

impl<T> fmt::Debug for IoPool<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoPool")
            .field("free", &self.free.borrow().len())
            .field("held", &self.held.get())
            .finish_non_exhaustive()
    }
}

impl<T> IoPool<T> {
    pub(crate) fn new(shared: Arc<PoolShared>) -> Rc<Self> {
        Rc::new(IoPool {
            free: RefCell::new(Vec::new()),
            held: Cell::new(0),
            shared,
            waiters: RefCell::new(VecDeque::new()),
            has_waiters: Cell::new(false),
            waiter_poller: RefCell::new(None),
            bounce: RefCell::new(Vec::new()),
            zero: RefCell::new(None),
            closed: Cell::new(false),
        })
    }

    /// A free request, or a new one from `make` while the pool has credits;
    /// `None` when it is exhausted.
    #[inline]
    pub(crate) fn get(&self, make: fn() -> Box<T>) -> Option<Box<T>> {
        let popped = self.free.borrow_mut().pop();
        match popped {
            Some(b) => Some(b),
            None => self.grow(make),
        }
    }

    #[cold]
    fn grow(&self, make: fn() -> Box<T>) -> Option<Box<T>> {
        if !self.shared.take_credit() {
            return None;
        }
        self.held.set(self.held.get() + 1);
        Some(make())
    }

    /// Takes a request back, then wakes one io_wait waiter if there is one
    /// (with no borrow held: the waiter usually allocates at once).
    #[inline]
    pub(crate) fn put(&self, req: Box<T>) {
        let cache_size = self.shared.cache_size.load(Ordering::Relaxed);
        let mut free = self.free.borrow_mut();
        if free.len() < cache_size.max(1) && !self.closed.get() {
            free.push(req);
            drop(free);
        } else {
            drop(free);
            self.shrink(req);
        }
        if self.has_waiters.get() {
            self.wake_waiter();
        }
    }

    #[cold]
    fn shrink(&self, req: Box<T>) {
        drop(req);
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

    /// Drops cached requests and returns their credits (thread teardown).
    pub(crate) fn release(&self) {
        self.closed.set(true);
        self.waiters.borrow_mut().clear();
        self.has_waiters.set(false);
        self.bounce.borrow_mut().clear();
        self.zero.borrow_mut().take();
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

    /// Free requests cached on this thread.
    pub(crate) fn cached(&self) -> usize {
        self.free.borrow().len()
    }

    /// A cached bounce buffer of at least `len` bytes aligned to `align`,
    /// or a new one (`None` when allocation fails).
    pub(crate) fn bounce_buf(&self, len: usize, align: usize) -> Option<DmaBuf> {
        let cached = {
            let mut bc = self.bounce.borrow_mut();
            bc.iter()
                .position(|b| b.len() >= len && b.align() >= align)
                .map(|pos| bc.swap_remove(pos))
        };
        if cached.is_some() {
            return cached;
        }
        let rounded = len.div_ceil(align) * align;
        DmaBuf::alloc(rounded.max(align), align.max(512)).ok()
    }

    /// Keeps a bounce buffer for reuse (or frees it when enough are kept).
    pub(crate) fn return_bounce(&self, buf: DmaBuf) {
        let mut bc = self.bounce.borrow_mut();
        if bc.len() < BOUNCE_CACHE && !self.closed.get() {
            bc.push(buf);
        }
    }

    /// This thread's zero buffer ([`ZERO_BUF_LEN`] zeroed bytes, allocated
    /// on first use, read-only for every I/O that describes it).
    pub(crate) fn zero_buf(&self) -> Option<Rc<DmaBuf>> {
        let mut z = self.zero.borrow_mut();
        if z.is_none() {
            *z = DmaBuf::new(ZERO_BUF_LEN).ok().map(Rc::new);
        }
        z.clone()
    }
}

impl<T: 'static> IoPool<T> {
    /// Queues `f` until a request is freed on this thread. A slow poller
    /// also retries, so a waiter is not stranded when every request in
    /// flight belongs to other threads.
    pub(crate) fn wait(self: &Rc<Self>, f: IoWaitFn) {
        self.waiters.borrow_mut().push_back(f);
        self.has_waiters.set(true);
        if self.waiter_poller.borrow().is_some() {
            return;
        }
        let Some(t) = Thread::current() else { return };
        let me = Rc::downgrade(self);
        let p = t.register_poller("bdev_io_wait", 1_000, move |p| {
            let Some(me) = me.upgrade() else {
                p.unregister();
                return PollerStatus::Idle;
            };
            if me.waiters.borrow().is_empty() {
                p.unregister();
                *me.waiter_poller.borrow_mut() = None;
                return PollerStatus::Idle;
            }
            let avail = me.free.borrow().len() + me.shared.available.load(Ordering::Acquire);
            // Counted first: a temporary in the `for` head would keep
            // `waiters` borrowed through the loop, and waking borrows it.
            let n = avail.min(me.waiters.borrow().len());
            for _ in 0..n {
                me.wake_waiter();
            }
            PollerStatus::Busy
        });
        *self.waiter_poller.borrow_mut() = Some(p);
    }
}

impl<T> Drop for IoPool<T> {
    fn drop(&mut self) {
        self.release();
    }
}
