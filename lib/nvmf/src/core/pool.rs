//! The transport's data buffers: `num_shared_buffers` buffers of
//! `max_io_size` shared by the poll groups, each group with a cache of
//! `buf_cache_size` in front (SPDK's design: the transport's data buffer
//! pool with per poll group caches, `spdk_iobuf` today).
//!
//! * A transfer larger than its slot's in-capsule buffer takes one buffer
//!   for all of it (a request never spans buffers): from the group's
//!   cache, else the shared free queue, else a new allocation while fewer
//!   than `num_shared_buffers` exist. The memory is bounded by the
//!   options, `num_shared_buffers × max_io_size`, whatever hosts connect;
//!   buffers are allocated on first use and reused after that.
//! * When none is left the request waits in its group's queue, first come
//!   first served, and resumes (its R2T goes out, or its read is
//!   submitted) when a buffer comes back. Nothing fails for want of a
//!   buffer, and nothing deadlocks: a transfer is at most `max_io_size`,
//!   so every request fits in one buffer, and no request holds a buffer
//!   while it waits for another.
//! * The shared part is a lock-free bounded queue (crossbeam's
//!   `ArrayQueue`, as large as the pool, so a push never fails): a cache
//!   miss or overflow costs one atomic operation from any thread, and the
//!   I/O path takes no lock. A mutex guards only the list of groups and
//!   which of them wait: taken when a group starts or stops waiting (the
//!   pool ran dry) and when a buffer goes back while one does.
//! * A group with requests waiting is woken (an empty message) when a
//!   buffer reaches the shared queue. When a group starts waiting every
//!   group is woken, and a group with nothing waiting empties its cache
//!   into the shared queue while another waits, so that no cache sits on
//!   a buffer someone waits for.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bdevkit::dma::DmaBuf;
use bdevkit::thread::ThreadHandle;
use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;

/// The transport's data buffer accounting ([`crate::Target::buffer_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferStats {
    /// Bytes of one shared buffer (`max_io_size`).
    pub buf_size: u32,
    /// Most shared buffers (`num_shared_buffers`).
    pub shared_limit: u32,
    /// Shared buffers allocated so far (never more than the limit).
    pub shared_allocated: u32,
    /// Shared buffers on loan to requests now.
    pub shared_in_use: u32,
    /// Buffers a poll group caches at most.
    pub cache_size: u32,
    /// Requests waiting for a shared buffer now.
    pub waiting: u32,
    /// Requests that found no buffer and waited, since the transport began.
    pub waits: u64,
    /// Bytes of the I/O queues' in-capsule buffers (`in_capsule_data_size`
    /// per slot), allocated at Connect and freed when the queue goes.
    pub in_capsule_bytes: u64,
}

impl BufferStats {
    /// Every data buffer byte the transport holds now.
    #[must_use]
    pub fn allocated_bytes(&self) -> u64 {
        u64::from(self.shared_allocated) * u64::from(self.buf_size) + self.in_capsule_bytes
    }
}

/// One poll group as the pool knows it.
#[derive(Debug)]
struct GroupReg {
    id: u64,
    thread: ThreadHandle,
    waiting: bool,
}

/// The shared pool of one transport.
#[derive(Debug)]
pub(crate) struct BufPool {
    buf_len: usize,
    limit: usize,
    cache_size: usize,
    free: ArrayQueue<DmaBuf>,
    allocated: AtomicUsize,
    in_use: AtomicUsize,
    waiting: AtomicUsize,
    waits: AtomicU64,
    /// Groups with requests waiting.
    waiting_groups: AtomicUsize,
    icd_bytes: AtomicU64,
    groups: Mutex<Vec<GroupReg>>,
    next_group: AtomicU64,
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl BufPool {
    /// A pool of at most `limit` (at least 1) buffers of `buf_len` bytes,
    /// groups caching `cache_size` each.
    pub fn new(buf_len: usize, limit: usize, cache_size: usize) -> Arc<BufPool> {
        let limit = limit.max(1);
        Arc::new(BufPool {
            buf_len,
            limit,
            cache_size,
            free: ArrayQueue::new(limit),
            allocated: AtomicUsize::new(0),
            in_use: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            waiting_groups: AtomicUsize::new(0),
            icd_bytes: AtomicU64::new(0),
            groups: Mutex::new(Vec::new()),
            next_group: AtomicU64::new(0),
        })
    }

    /// The accounting now.
    pub fn stats(&self) -> BufferStats {
        BufferStats {
            buf_size: to_u32(self.buf_len),
            shared_limit: to_u32(self.limit),
            shared_allocated: to_u32(self.allocated.load(Ordering::Relaxed)),
            shared_in_use: to_u32(self.in_use.load(Ordering::Relaxed)),
            cache_size: to_u32(self.cache_size),
            waiting: to_u32(self.waiting.load(Ordering::Relaxed)),
            waits: self.waits.load(Ordering::Relaxed),
            in_capsule_bytes: self.icd_bytes.load(Ordering::Relaxed),
        }
    }

    /// A queue allocated (`add`) or freed in-capsule buffers.
    pub fn account_icd(&self, bytes: u64, add: bool) {
        if add {
            self.icd_bytes.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.icd_bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// A new buffer while fewer than the limit exist: `None` at the limit,
    /// `Some(Err)` when the allocation fails.
    fn try_alloc(&self) -> Option<Result<DmaBuf, ()>> {
        self.allocated
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()?;
        match DmaBuf::new(self.buf_len) {
            Ok(b) => Some(Ok(b)),
            Err(e) => {
                self.allocated.fetch_sub(1, Ordering::AcqRel);
                tracing::error!(error = %e, "nvmf: no memory for a shared data buffer");
                Some(Err(()))
            }
        }
    }

    fn push_free(&self, b: DmaBuf) {
        if self.free.push(b).is_err() {
            // Cannot happen: the queue holds as many as may exist.
            self.allocated.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Wakes the groups with requests waiting (a buffer reached the queue).
    fn wake_waiting(&self) {
        if self.waiting_groups.load(Ordering::SeqCst) == 0 {
            return;
        }
        for g in self.groups.lock().iter().filter(|g| g.waiting) {
            let _ = g.thread.send_msg(|| {});
        }
    }
}

/// Where a buffer handed to a waiting request went.
#[derive(Debug)]
pub(crate) enum Ready {
    /// The request took it (or, given none, failed).
    Taken,
    /// The request no longer waits (its queue closed): the buffer is back.
    Unused(Option<DmaBuf>),
    /// The queue pair is busy now: try again later.
    Busy(Option<DmaBuf>),
}

/// A queue pair with requests waiting for buffers.
pub(crate) trait BufWaiter {
    /// A buffer for `slot`, which waited (`None`: there will be none, the
    /// allocation failed; the request fails).
    fn buf_ready(&self, slot: u16, buf: Option<DmaBuf>) -> Ready;
}

/// What [`GroupBufs::take`] found.
#[derive(Debug)]
pub(crate) enum Take {
    Buf(DmaBuf),
    /// None left (or requests wait already): wait.
    Wait,
    /// The allocation failed.
    NoMem,
}

type Waiter = (Weak<dyn BufWaiter>, u16);

/// One poll group's side of the pool: its cache and its waiting requests.
pub(crate) struct GroupBufs {
    pool: Arc<BufPool>,
    id: u64,
    cache: RefCell<Vec<DmaBuf>>,
    waiters: RefCell<VecDeque<Waiter>>,
    /// Marked waiting in the pool.
    registered: Cell<bool>,
    /// A buffer came back (or may have) while requests wait: serve.
    pending: Cell<bool>,
}

impl std::fmt::Debug for GroupBufs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupBufs")
            .field("id", &self.id)
            .field("cached", &self.cache.borrow().len())
            .field("waiting", &self.waiters.borrow().len())
            .finish_non_exhaustive()
    }
}

impl GroupBufs {
    /// The side of `pool` of the group on `thread`.
    pub fn new(pool: &Arc<BufPool>, thread: ThreadHandle) -> Rc<GroupBufs> {
        let id = pool.next_group.fetch_add(1, Ordering::Relaxed);
        pool.groups.lock().push(GroupReg {
            id,
            thread,
            waiting: false,
        });
        Rc::new(GroupBufs {
            pool: Arc::clone(pool),
            id,
            cache: RefCell::new(Vec::with_capacity(pool.cache_size + 1)),
            waiters: RefCell::new(VecDeque::new()),
            registered: Cell::new(false),
            pending: Cell::new(false),
        })
    }

    /// Whether this is the side of `pool`.
    pub fn is_of(&self, pool: &Arc<BufPool>) -> bool {
        Arc::ptr_eq(&self.pool, pool)
    }

    /// The shared pool.
    pub fn pool(&self) -> &BufPool {
        &self.pool
    }

    /// A buffer from the cache, the shared queue or a new allocation.
    fn grab(&self) -> Option<Result<DmaBuf, ()>> {
        let b = self
            .cache
            .borrow_mut()
            .pop()
            .or_else(|| self.pool.free.pop());
        let r = match b {
            Some(b) => Ok(b),
            None => self.pool.try_alloc()?,
        };
        if r.is_ok() {
            self.pool.in_use.fetch_add(1, Ordering::Relaxed);
        }
        Some(r)
    }

    /// A buffer now, unless none is left or requests wait already (they
    /// go first).
    pub fn take(&self) -> Take {
        if !self.waiters.borrow().is_empty() {
            return Take::Wait;
        }
        match self.grab() {
            Some(Ok(b)) => Take::Buf(b),
            Some(Err(())) => Take::NoMem,
            None => Take::Wait,
        }
    }

    /// Queues `slot` of `who` for the next buffer.
    pub fn wait(&self, who: Weak<dyn BufWaiter>, slot: u16) {
        self.waiters.borrow_mut().push_back((who, slot));
        self.pool.waiting.fetch_add(1, Ordering::Relaxed);
        self.pool.waits.fetch_add(1, Ordering::Relaxed);
        if !self.registered.get() {
            self.register_waiting();
        }
    }

    /// Forgets the waiting requests of `who` (its queue closes).
    pub fn forget(&self, who: &Weak<dyn BufWaiter>) {
        let mut w = self.waiters.borrow_mut();
        let before = w.len();
        w.retain(|(x, _)| !Weak::ptr_eq(x, who));
        let gone = before - w.len();
        self.pool.waiting.fetch_sub(gone, Ordering::Relaxed);
        if gone > 0 {
            self.pending.set(true);
        }
    }

    /// A request is done with `b`.
    pub fn give_back(&self, b: DmaBuf) {
        self.pool.in_use.fetch_sub(1, Ordering::Relaxed);
        if !self.waiters.borrow().is_empty() {
            // For this group's next waiter, at its next poll.
            self.cache.borrow_mut().push(b);
            self.pending.set(true);
            return;
        }
        if self.pool.waiting_groups.load(Ordering::SeqCst) > 0 {
            self.pool.push_free(b);
            self.pool.wake_waiting();
            return;
        }
        let mut c = self.cache.borrow_mut();
        if c.len() < self.pool.cache_size {
            c.push(b);
        } else {
            drop(c);
            self.pool.push_free(b);
        }
    }

    /// Hands buffers to the waiting requests, in order; empties an idle
    /// cache while another group waits. Runs in the group's poll, outside
    /// any queue pair's service. Returns whether it did anything.
    pub fn serve(&self) -> bool {
        let mut busy = self.pending.replace(false);
        loop {
            if self.waiters.borrow().is_empty() {
                break;
            }
            let Some(got) = self.grab() else { break };
            let Some((who, slot)) = self.waiters.borrow_mut().pop_front() else {
                break;
            };
            self.pool.waiting.fetch_sub(1, Ordering::Relaxed);
            busy = true;
            let buf = got.ok();
            let r = match who.upgrade() {
                Some(w) => w.buf_ready(slot, buf),
                None => Ready::Unused(buf),
            };
            match r {
                Ready::Taken => {}
                Ready::Unused(b) => {
                    if let Some(b) = b {
                        self.give_back(b);
                    }
                }
                Ready::Busy(b) => {
                    // Cannot happen (serve runs outside queue pair
                    // services): it keeps its place.
                    self.waiters.borrow_mut().push_front((who, slot));
                    self.pool.waiting.fetch_add(1, Ordering::Relaxed);
                    if let Some(b) = b {
                        self.give_back(b);
                    }
                    self.pending.set(true);
                    break;
                }
            }
        }
        if self.waiters.borrow().is_empty() {
            if self.registered.get() {
                self.unregister_waiting();
            }
            if self.pool.waiting_groups.load(Ordering::SeqCst) > 0
                && !self.cache.borrow().is_empty()
            {
                let mut c = self.cache.borrow_mut();
                for b in c.drain(..) {
                    self.pool.push_free(b);
                }
                drop(c);
                self.pool.wake_waiting();
                busy = true;
            }
        }
        busy
    }

    /// This group waits: mark it, and wake every group (idle caches go to
    /// the shared queue). The next `serve` looks at the queue again, for a
    /// buffer that went back before the mark.
    fn register_waiting(&self) {
        self.registered.set(true);
        self.pending.set(true);
        let others: Vec<ThreadHandle> = {
            let mut g = self.pool.groups.lock();
            if let Some(me) = g.iter_mut().find(|g| g.id == self.id) {
                me.waiting = true;
            }
            self.pool.waiting_groups.fetch_add(1, Ordering::SeqCst);
            g.iter()
                .filter(|g| g.id != self.id)
                .map(|g| g.thread.clone())
                .collect()
        };
        for t in others {
            let _ = t.send_msg(|| {});
        }
    }

    fn unregister_waiting(&self) {
        self.registered.set(false);
        let mut g = self.pool.groups.lock();
        if let Some(me) = g.iter_mut().find(|g| g.id == self.id) {
            me.waiting = false;
        }
        self.pool.waiting_groups.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for GroupBufs {
    fn drop(&mut self) {
        let n = self.waiters.get_mut().len();
        self.pool.waiting.fetch_sub(n, Ordering::Relaxed);
        if self.registered.get() {
            self.unregister_waiting();
        }
        for b in self.cache.get_mut().drain(..) {
            self.pool.push_free(b);
        }
        self.pool.groups.lock().retain(|g| g.id != self.id);
        self.pool.wake_waiting();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};

    struct Taker(RefCell<Vec<(u16, DmaBuf)>>);

    impl BufWaiter for Taker {
        fn buf_ready(&self, slot: u16, buf: Option<DmaBuf>) -> Ready {
            let Some(b) = buf else { return Ready::Taken };
            self.0.borrow_mut().push((slot, b));
            Ready::Taken
        }
    }

    #[test]
    fn bounded_first_come_first_served_and_given_back() {
        let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0))).unwrap();
        let pool = BufPool::new(4096, 2, 1);
        let g = GroupBufs::new(&pool, rt.app_thread());
        let Take::Buf(a) = g.take() else { panic!() };
        let Take::Buf(b) = g.take() else { panic!() };
        assert!(matches!(g.take(), Take::Wait));
        let t = Rc::new(Taker(RefCell::new(Vec::new())));
        let w: Weak<dyn BufWaiter> = Rc::downgrade(&t) as Weak<dyn BufWaiter>;
        g.wait(w.clone(), 7);
        g.wait(w.clone(), 8);
        // Waiters go first, even when a buffer is back.
        g.give_back(a);
        assert!(matches!(g.take(), Take::Wait));
        assert!(g.serve());
        assert_eq!(t.0.borrow().iter().map(|x| x.0).collect::<Vec<_>>(), [7]);
        g.give_back(b);
        g.serve();
        assert_eq!(t.0.borrow().iter().map(|x| x.0).collect::<Vec<_>>(), [7, 8]);
        let s = pool.stats();
        assert_eq!(
            (s.shared_allocated, s.shared_in_use, s.waiting, s.waits),
            (2, 2, 0, 2)
        );
        for (_, b) in t.0.borrow_mut().drain(..) {
            g.give_back(b);
        }
        let s = pool.stats();
        assert_eq!((s.shared_allocated, s.shared_in_use), (2, 0));
        // A waiter that went away leaves its buffer to the next.
        let Take::Buf(a) = g.take() else { panic!() };
        let Take::Buf(b) = g.take() else { panic!() };
        let gone = Rc::new(Taker(RefCell::new(Vec::new())));
        g.wait(Rc::downgrade(&gone) as Weak<dyn BufWaiter>, 1);
        g.wait(w.clone(), 2);
        drop(gone);
        g.give_back(a);
        g.serve();
        assert_eq!(t.0.borrow().len(), 1);
        g.give_back(b);
        for (_, b) in t.0.borrow_mut().drain(..) {
            g.give_back(b);
        }
        g.serve();
        assert_eq!(pool.stats().shared_in_use, 0);
        drop(g);
        assert_eq!(pool.free.len(), 2);
        rt.shutdown();
    }

    #[test]
    fn an_idle_cache_goes_to_a_waiting_group() {
        let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0))).unwrap();
        let pool = BufPool::new(4096, 2, 2);
        let a = GroupBufs::new(&pool, rt.app_thread());
        let b = GroupBufs::new(&pool, rt.app_thread());
        let Take::Buf(x) = a.take() else { panic!() };
        let Take::Buf(y) = a.take() else { panic!() };
        // Both back in a's cache; b finds nothing.
        a.give_back(x);
        a.give_back(y);
        assert!(matches!(b.take(), Take::Wait));
        let t = Rc::new(Taker(RefCell::new(Vec::new())));
        b.wait(Rc::downgrade(&t) as Weak<dyn BufWaiter>, 3);
        // a, woken, empties its cache into the shared queue; b serves.
        a.serve();
        b.serve();
        assert_eq!(t.0.borrow().len(), 1);
        assert_eq!(pool.stats().waiting, 0);
        for (_, x) in t.0.borrow_mut().drain(..) {
            b.give_back(x);
        }
        drop((a, b));
        rt.shutdown();
    }
}
