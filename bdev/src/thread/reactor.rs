//! What a reactor shares with the lightweight threads placed on it and
//! with the OS threads that send to them: how to wake it, its epoll set,
//! the queue of threads being placed on it, whether its OS thread died, and
//! its statistics.
//!
//! The bottom layer of the `thread` module. The queue of incoming threads
//! is generic over its items (`shared.rs` above fills it with the threads'
//! shared state, see [`Reactor`](super::shared::Reactor)), so this file
//! names nothing above it; the reactor loop itself is in `runtime.rs`.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

use crossbeam_queue::SegQueue;

use super::sys::{Epoll, EventFd, TimerFd};

/// Epoll token of the reactor's wake-up eventfd.
pub(crate) const TOKEN_WAKE: u64 = 1;
/// Epoll token of the reactor's timerfd (next timed-poller deadline).
pub(crate) const TOKEN_TIMER: u64 = 2;
/// Epoll token of the fds threads register with
/// [`Thread::register_interrupt_fd`](super::Thread::register_interrupt_fd).
pub(crate) const TOKEN_USER: u64 = 3;

/// One reactor's shared state; `T` is what the runtime queues to it when
/// it places a thread there.
pub(crate) struct ReactorShared<T> {
    pub(crate) index: usize,
    pub(crate) core: u32,
    pub(crate) epoll: Epoll,
    pub(super) wake: EventFd,
    pub(super) timer: TimerFd,
    pub(super) sleeping: AtomicBool,
    /// Threads placed on the reactor, not yet adopted by its loop.
    pub(super) incoming: SegQueue<T>,
    pub(crate) thread_count: AtomicUsize,
    pub(crate) busy_ticks: AtomicU64,
    pub(crate) idle_ticks: AtomicU64,
    pub(crate) tid: AtomicI32,
    pub(crate) in_interrupt: bool,
    /// Set when the reactor's OS thread ended by a panic.
    pub(super) dead: AtomicBool,
}

impl<T> ReactorShared<T> {
    /// A reactor on `core`, `index`-th of its runtime, its wake-up eventfd
    /// and timerfd already in `epoll`.
    pub(super) fn new(
        index: usize,
        core: u32,
        epoll: Epoll,
        wake: EventFd,
        timer: TimerFd,
        in_interrupt: bool,
    ) -> Self {
        ReactorShared {
            index,
            core,
            epoll,
            wake,
            timer,
            sleeping: AtomicBool::new(false),
            incoming: SegQueue::new(),
            thread_count: AtomicUsize::new(0),
            busy_ticks: AtomicU64::new(0),
            idle_ticks: AtomicU64::new(0),
            tid: AtomicI32::new(0),
            in_interrupt,
            dead: AtomicBool::new(false),
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn wake_if_sleeping(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake.notify();
        }
    }

    pub(super) fn wake(&self) {
        self.wake.notify();
    }
}
