//! Lightweight threads (SPDK's `spdk_thread`): a message queue, pollers,
//! the I/O channels created on it and a small local task executor.
//!
//! A [`Thread`] lives on one reactor and never moves, so everything it owns
//! may use `Rc`/`RefCell`. Other OS threads reach it through a
//! [`ThreadHandle`] and [`ThreadHandle::send_msg`].
//!
//! The parts a thread is built from sit in the files below this one:
//! `shared.rs` (what other OS threads see: identity, message queue,
//! counters), `poller.rs` (the poller set), `executor.rs` (task slots),
//! `channels.rs` (the channel map). This file holds the thread itself, its
//! poll loop, the current-thread state and [`ThreadHandle`].

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::os::fd::RawFd;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use super::channels::ChannelMap;
use super::cpuset::CpuSet;
use super::executor::{LocalTask, Tasks};
use super::poller::{self, Poller, PollerHost, PollerInfo, PollerState, PollerStatus, Pollers};
use super::reactor::TOKEN_USER;
use super::shared::ThreadShared;
use crate::clock;
use crate::error::{Error, Result};

/// Most messages run per thread per loop iteration, so pollers keep running
/// under a message flood.
const MSG_BATCH: usize = 64;

/// How many missed periods a late timed poller makes up for.
const CATCH_UP_PERIODS: u64 = 10;

thread_local! {
    static CURRENT: RefCell<Option<Thread>> = const { RefCell::new(None) };
    static CURRENT_ID: Cell<u64> = const { Cell::new(0) };
}

// Defined here, not in `shared.rs` with the state it wraps: the methods of
// a type are compiled with the module that defines it, and this one's
// `send_boxed` has `SegQueue::push` inlined only in the poll loop's codegen
// unit (+16 instructions per message otherwise; see `shared.rs`).
/// A `Send + Sync` handle to a lightweight thread: send it messages from
/// anywhere.
#[derive(Clone)]
pub struct ThreadHandle(pub(crate) Arc<ThreadShared>);

impl fmt::Debug for ThreadHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadHandle")
            .field("id", &self.0.id)
            .field("name", &self.0.name)
            .finish()
    }
}

impl PartialEq for ThreadHandle {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}
impl Eq for ThreadHandle {}

impl ThreadHandle {
    /// The thread's unique id (never reused within a process).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The thread's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The CPUs this thread may run on.
    #[must_use]
    pub fn cpumask(&self) -> &CpuSet {
        &self.0.cpumask
    }

    /// Whether the thread has exited.
    #[must_use]
    pub fn is_exited(&self) -> bool {
        self.0.exited.load(Ordering::Acquire)
    }

    /// Runs `f` on the thread. Messages from one sender arrive in order.
    /// Fails (and drops `f`) once the thread has exited.
    pub fn send_msg(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        self.send_boxed(Box::new(f))
    }

    /// [`ThreadHandle::send_msg`] with an already boxed closure.
    pub fn send_boxed(&self, msg: Box<dyn FnOnce() + Send>) -> Result<()> {
        if self.is_exited() {
            return Err(Error::ThreadExited(self.0.name.clone()));
        }
        self.0.msgs.push(msg);
        // A full barrier (SeqCst read-modify-write) pairing with the fence
        // in the reactor before it sleeps: either it sees our message, or
        // we see its `sleeping` flag and wake it.
        self.0.pushed.fetch_add(1, Ordering::SeqCst);
        self.0.reactor.wake_if_sleeping();
        Ok(())
    }

    /// Spawns a `Send` future on the thread.
    pub fn spawn<F>(&self, fut: F) -> Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.send_msg(move || {
            if let Some(t) = Thread::current() {
                t.spawn_local(fut);
            }
        })
    }

    /// Runs `f` on the thread and blocks the calling OS thread until it
    /// returns. For tests and embedding applications; fails when called on
    /// a reactor of this runtime (that could deadlock).
    pub fn run_sync<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        if Thread::current().is_some() {
            return Err(Error::WouldDeadlock);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send_msg(move || {
            let _ = tx.send(f());
        })?;
        self.wait_reply(&rx)
    }

    /// Waits for a reply from the thread; fails instead of hanging when the
    /// thread exits or its reactor died (a panic on it).
    fn wait_reply<R>(&self, rx: &std::sync::mpsc::Receiver<R>) -> Result<R> {
        loop {
            match rx.recv_timeout(std::time::Duration::from_millis(50)) {
                Ok(r) => return Ok(r),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if self.0.reactor.is_dead() || self.is_exited() {
                        return Err(Error::ThreadExited(self.0.name.clone()));
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::ThreadExited(self.0.name.clone()));
                }
            }
        }
    }

    /// Runs a future built by `make` on the thread and blocks the calling OS
    /// thread until it completes. The future itself need not be `Send`.
    pub fn block_on<R, Fut, M>(&self, make: M) -> Result<R>
    where
        M: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        if Thread::current().is_some() {
            return Err(Error::WouldDeadlock);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send_msg(move || {
            if let Some(t) = Thread::current() {
                let fut = make();
                t.spawn_local(async move {
                    let _ = tx.send(fut.await);
                });
            }
        })?;
        self.wait_reply(&rx)
    }
}

struct TaskWaker {
    thread: ThreadHandle,
    key: u64,
    queued: AtomicBool,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            let me = Arc::clone(self);
            let _ = self.thread.send_msg(move || {
                me.queued.store(false, Ordering::Release);
                if let Some(t) = Thread::current() {
                    t.poll_task(me.key, &me);
                }
            });
        }
    }
}

pub(crate) struct ThreadInner {
    pub(crate) shared: Arc<ThreadShared>,
    handle: ThreadHandle,
    pollers: RefCell<Pollers>,
    pub(super) channels: ChannelMap,
    tasks: RefCell<Tasks>,
    exiting: Cell<bool>,
    busy_ticks: Cell<u64>,
    idle_ticks: Cell<u64>,
    fds: RefCell<Vec<RawFd>>,
    local_msgs: RefCell<std::collections::VecDeque<Box<dyn FnOnce()>>>,
}

/// A lightweight thread, as seen from code running on it. `!Send`: obtain
/// it with [`Thread::current`]; other OS threads use a [`ThreadHandle`].
#[derive(Clone)]
pub struct Thread(pub(crate) Rc<ThreadInner>);

impl fmt::Debug for Thread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Thread")
            .field("id", &self.0.shared.id)
            .field("name", &self.0.shared.name)
            .finish()
    }
}

/// Keeps an fd in the reactor's epoll set (interrupt mode) until dropped.
#[derive(Debug)]
pub struct InterruptFd {
    fd: RawFd,
    thread: Weak<ThreadInner>,
}

impl Drop for InterruptFd {
    fn drop(&mut self) {
        if let Some(t) = self.thread.upgrade() {
            let _ = t.shared.reactor.epoll.delete(self.fd);
            t.fds.borrow_mut().retain(|f| *f != self.fd);
        }
    }
}

/// The id of the lightweight thread running on this OS thread right now,
/// or 0. A thread-local read: cheap enough for the I/O path.
#[inline]
#[must_use]
pub fn current_thread_id() -> u64 {
    CURRENT_ID.with(Cell::get)
}

impl Thread {
    pub(crate) fn adopt(shared: Arc<ThreadShared>) -> Thread {
        Thread(Rc::new(ThreadInner {
            handle: ThreadHandle(Arc::clone(&shared)),
            shared,
            pollers: RefCell::new(Pollers::default()),
            channels: ChannelMap::default(),
            tasks: RefCell::new(Tasks::default()),
            exiting: Cell::new(false),
            busy_ticks: Cell::new(0),
            idle_ticks: Cell::new(0),
            fds: RefCell::new(Vec::new()),
            local_msgs: RefCell::new(std::collections::VecDeque::new()),
        }))
    }

    /// The thread running on this OS thread, if any (only inside messages,
    /// pollers and tasks of a reactor).
    #[must_use]
    pub fn current() -> Option<Thread> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Like [`Thread::current`], but an error outside a bdevkit thread.
    pub fn try_current() -> Result<Thread> {
        Self::current().ok_or(Error::NotOnThread)
    }

    /// Runs `f` with `self` as the current thread.
    pub(crate) fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let prev = CURRENT.with(|c| c.replace(Some(self.clone())));
        let prev_id = CURRENT_ID.with(|c| c.replace(self.0.shared.id));
        let r = f();
        CURRENT.with(|c| *c.borrow_mut() = prev);
        CURRENT_ID.with(|c| c.set(prev_id));
        r
    }

    /// A `Send` handle to this thread.
    #[must_use]
    pub fn handle(&self) -> ThreadHandle {
        self.0.handle.clone()
    }

    /// Unique id.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.0.shared.id
    }

    /// Name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0.shared.name
    }

    /// Registers a poller. `period_us == 0` makes an active poller (runs
    /// every loop iteration); otherwise it runs every `period_us` at a fixed
    /// rate: a run delayed by the OS is made up for (up to 10 missed
    /// periods, beyond which it resynchronises).
    pub fn register_poller(
        &self,
        name: impl Into<String>,
        period_us: u64,
        f: impl FnMut(&Poller) -> PollerStatus + 'static,
    ) -> Poller {
        poller::register(&self.0, name.into(), period_us, Box::new(f))
    }

    /// Runs `f` on this thread in a later loop iteration (a local, non-`Send`
    /// message). Used to complete work outside the caller's stack, e.g. an
    /// I/O that fails before reaching its module.
    pub fn defer(&self, f: impl FnOnce() + 'static) {
        self.0.local_msgs.borrow_mut().push_back(Box::new(f));
    }

    /// Whether the thread has queued messages (local or remote).
    pub(crate) fn has_pending_msgs(&self) -> bool {
        self.0.shared.has_msgs() || !self.0.local_msgs.borrow().is_empty()
    }

    /// Asks the thread to exit. It does once every poller is unregistered,
    /// every I/O channel on it is released and every local task finished.
    pub fn exit(&self) {
        self.0.exiting.set(true);
    }

    /// Whether [`Thread::exit`] was called.
    #[must_use]
    pub fn is_exiting(&self) -> bool {
        self.0.exiting.get()
    }

    /// Adds one poll's ticks to the busy or idle counter (single writer:
    /// published with plain stores).
    #[inline]
    pub(crate) fn account(&self, busy: bool, ticks: u64) {
        let (local, shared) = if busy {
            (&self.0.busy_ticks, &self.0.shared.busy_ticks)
        } else {
            (&self.0.idle_ticks, &self.0.shared.idle_ticks)
        };
        let v = local.get().wrapping_add(ticks);
        local.set(v);
        shared.store(v, Ordering::Relaxed);
    }

    /// Adds `fd` to the reactor's wake-up set: in interrupt mode the idle
    /// reactor wakes when it becomes readable and runs every poller (the
    /// owner of `fd` must drain it). Removed when the guard drops.
    pub fn register_interrupt_fd(&self, fd: RawFd) -> Result<InterruptFd> {
        self.0
            .shared
            .reactor
            .epoll
            .add(fd, TOKEN_USER)
            .map_err(Error::Epoll)?;
        self.0.fds.borrow_mut().push(fd);
        Ok(InterruptFd {
            fd,
            thread: Rc::downgrade(&self.0),
        })
    }

    /// Spawns a local (non-`Send`) future on this thread.
    pub fn spawn_local(&self, fut: impl Future<Output = ()> + 'static) {
        let boxed: LocalTask = Box::pin(fut);
        let key = self.0.tasks.borrow_mut().insert(boxed);
        let waker = Arc::new(TaskWaker {
            thread: self.handle(),
            key,
            queued: AtomicBool::new(false),
        });
        self.poll_task(key, &waker);
    }

    fn poll_task(&self, key: u64, waker: &Arc<TaskWaker>) {
        let task = self.0.tasks.borrow_mut().take(key);
        let Some(mut task) = task else { return };
        let w = Waker::from(Arc::clone(waker));
        let mut cx = Context::from_waker(&w);
        let done = self.enter(|| task.as_mut().poll(&mut cx).is_ready());
        let mut tasks = self.0.tasks.borrow_mut();
        if done {
            tasks.finish(key);
        } else {
            tasks.put_back(key, task);
        }
    }

    /// Ticks now (see [`crate::clock`]).
    #[must_use]
    pub fn now(&self) -> u64 {
        clock::ticks()
    }

    /// Snapshots of this thread's pollers.
    #[must_use]
    pub fn pollers(&self) -> Vec<PollerInfo> {
        self.0.pollers.borrow().infos()
    }

    /// Device names and reference counts of the I/O channels held on this
    /// thread, ordered by device id (`thread_get_io_channels`).
    #[must_use]
    pub fn io_channels(&self) -> Vec<(String, usize)> {
        self.0.channels.names_and_refs()
    }

    /// Device ids and reference counts of the I/O channels held on this
    /// thread.
    #[must_use]
    pub fn io_channel_refs(&self) -> Vec<(u64, usize)> {
        self.0.channels.refs()
    }

    /// One loop iteration for this thread (messages, active pollers, due
    /// timed pollers), called from the reactor loop, where nothing is nested: the
    /// thread stays current after the poll, so a reactor polling the same
    /// thread again (the common case) touches no thread-local state.
    /// [`Thread::leave`] clears it.
    #[inline]
    pub(crate) fn poll_top(&self, now: u64) -> bool {
        if CURRENT_ID.with(Cell::get) != self.0.shared.id {
            CURRENT.with(|c| *c.borrow_mut() = Some(self.clone()));
            CURRENT_ID.with(|c| c.set(self.0.shared.id));
        }
        self.0.poll_inner(now)
    }

    /// Makes this thread the current one of the calling OS thread until
    /// [`Thread::leave`] (an embedded thread, for its whole life).
    pub(crate) fn make_current(&self) {
        CURRENT.with(|c| *c.borrow_mut() = Some(self.clone()));
        CURRENT_ID.with(|c| c.set(self.0.shared.id));
    }

    /// Whether this thread is the calling OS thread's current one.
    pub(crate) fn is_current(&self) -> bool {
        CURRENT_ID.with(Cell::get) == self.0.shared.id
    }

    /// Makes no thread current (the reactor, before a thread goes away and
    /// when it stops).
    pub(crate) fn leave() {
        let old = CURRENT.with(|c| c.try_borrow_mut().ok().and_then(|mut b| b.take()));
        CURRENT_ID.with(|c| c.set(0));
        drop(old);
    }

    /// Whether a poll now could do anything: messages queued, an active
    /// poller, a timed poller due, or cleanup pending. Idle threads (an app
    /// thread between RPCs) are skipped without entering them.
    #[inline]
    pub(crate) fn has_work(&self, now: u64) -> bool {
        let i = &self.0;
        if i.shared.has_msgs() || !i.local_msgs.borrow().is_empty() {
            return true;
        }
        let ps = i.pollers.borrow();
        !ps.active.is_empty() || ps.dirty || ps.timed.peek().is_some_and(|s| s.deadline <= now)
    }

    /// Earliest timed-poller deadline, for the reactor's sleep.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.0.pollers.borrow().timed.peek().map(|s| s.deadline)
    }

    /// Whether an exiting thread has released everything.
    pub(crate) fn can_finish_exit(&self) -> bool {
        self.0.exiting.get()
            && self.0.pollers.borrow().live == 0
            && self.0.tasks.borrow().live == 0
            && !self.has_pending_msgs()
            && self.0.channels.all_released()
    }

    /// Marks the thread exited and drops what it still holds (pollers,
    /// tasks, queued messages), with the thread current so destructors that
    /// release channels find it.
    pub(crate) fn finish(&self) {
        self.0.shared.exited.store(true, Ordering::Release);
        self.enter(|| {
            poller::unregister_all(&self.0.pollers);
            let tasks = std::mem::take(&mut *self.0.tasks.borrow_mut());
            drop(tasks);
            while let Some(m) = self.0.shared.msgs.pop() {
                drop(m);
            }
            let local = std::mem::take(&mut *self.0.local_msgs.borrow_mut());
            drop(local);
            let fds = std::mem::take(&mut *self.0.fds.borrow_mut());
            for fd in fds {
                let _ = self.0.shared.reactor.epoll.delete(fd);
            }
        });
    }
}

impl PollerHost for ThreadInner {
    fn pollers(&self) -> &RefCell<Pollers> {
        &self.pollers
    }

    fn shared(&self) -> &ThreadShared {
        &self.shared
    }
}

impl ThreadInner {
    #[inline]
    fn run_poller(handle: &Poller) -> bool {
        let e = &handle.0;
        let Ok(mut slot) = e.f.try_borrow_mut() else {
            return false;
        };
        let Some(f) = slot.as_mut() else { return false };
        crate::clock::refresh_poll_ticks();
        let busy = f(handle) == PollerStatus::Busy;
        if e.state.get() == PollerState::Unregistered {
            // Unregistered from inside: drop the closure now.
            let f = slot.take();
            drop(slot);
            drop(f);
        }
        e.run_count.set(e.run_count.get() + 1);
        if busy {
            e.busy_count.set(e.busy_count.get() + 1);
        }
        busy
    }

    #[inline]
    fn poll_inner(&self, now: u64) -> bool {
        let mut busy = false;
        // Local deferrals queued before this iteration (new ones wait for
        // the next, so a deferral loop cannot starve the pollers).
        let n_local = self.local_msgs.borrow().len();
        for _ in 0..n_local {
            let m = self.local_msgs.borrow_mut().pop_front();
            match m {
                Some(m) => {
                    crate::clock::refresh_poll_ticks();
                    m();
                    busy = true;
                }
                None => break,
            }
        }
        let queued =
            self.shared.pushed.load(Ordering::Acquire) - self.shared.popped.load(Ordering::Relaxed);
        if queued > 0 {
            let mut n = 0u64;
            while n < queued.min(MSG_BATCH as u64) {
                let Some(m) = self.shared.msgs.pop() else {
                    break;
                };
                n += 1;
                crate::clock::refresh_poll_ticks();
                m();
                busy = true;
            }
            self.shared.popped.fetch_add(n, Ordering::Relaxed);
        }

        let n = self.pollers.borrow().active.len();
        for i in 0..n {
            let p = {
                let ps = self.pollers.borrow();
                match ps.active.get(i) {
                    Some(e) if e.state.get() == PollerState::Running => Poller(Rc::clone(e)),
                    Some(_) => continue,
                    None => break,
                }
            };
            busy |= Self::run_poller(&p);
        }

        // Nothing due and nothing to clean up: the common case, one borrow.
        {
            let ps = self.pollers.borrow();
            if !ps.dirty && ps.timed.peek().is_none_or(|s| s.deadline > now) {
                return busy;
            }
        }
        loop {
            let slot = {
                let mut ps = self.pollers.borrow_mut();
                match ps.timed.peek() {
                    Some(s) if s.deadline <= now => ps.timed.pop(),
                    _ => None,
                }
            };
            let Some(slot) = slot else { break };
            let p = Poller(slot.entry);
            let e = &p.0;
            e.in_heap.set(false);
            match e.state.get() {
                PollerState::Running => {
                    busy |= Self::run_poller(&p);
                    if e.state.get() == PollerState::Running && !e.in_heap.get() {
                        // Fixed rate: the next deadline follows the missed
                        // one, so a reactor delayed by the OS catches up
                        // (up to CATCH_UP_PERIODS; beyond that it resyncs
                        // rather than fire a long burst).
                        let behind = now.saturating_sub(slot.deadline);
                        let base = if behind <= e.period_ticks.saturating_mul(CATCH_UP_PERIODS) {
                            slot.deadline
                        } else {
                            now
                        };
                        poller::schedule_timed(&self.pollers, e, base);
                    }
                }
                PollerState::Paused | PollerState::Unregistered => {}
            }
        }

        let mut ps = self.pollers.borrow_mut();
        if ps.dirty {
            ps.dirty = false;
            ps.active
                .retain(|e| e.state.get() != PollerState::Unregistered);
            if ps
                .timed
                .iter()
                .any(|s| s.entry.state.get() == PollerState::Unregistered)
            {
                let kept: Vec<poller::TimedSlot> = std::mem::take(&mut ps.timed)
                    .into_iter()
                    .filter(|s| s.entry.state.get() != PollerState::Unregistered)
                    .collect();
                ps.timed = kept.into();
            }
        }
        busy
    }
}
