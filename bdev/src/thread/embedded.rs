//! Lightweight threads that an embedder polls on an OS thread of its own
//! (SPDK's `spdk_thread_create` + `spdk_thread_poll` from an application
//! thread), instead of a reactor.
//!
//! fio's engine is the user: fio calls the engine's `queue` and
//! `getevents` on fio's own job thread, so the job's lightweight thread
//! lives *on* that OS thread. Submissions run inline, completions run when
//! `getevents` polls, and no I/O ever crosses threads (no handoff queue, no
//! lock, no wake-up). Everything else is a plain [`Thread`]: messages from
//! other threads queue up and run at the next [`EmbeddedThread::poll`],
//! pollers and channels live on it, `for_each_thread` walks include it
//! (and wait for its next poll, as SPDK's do for a thread its application
//! does not poll).
//!
//! The top layer of the `thread` module, beside `runtime.rs`.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cpuset::CpuSet;
use super::lwthread::{Thread, ThreadHandle};
use super::runtime::RuntimeHandle;
use super::shared::{Reactor, ThreadShared};
use super::sys::{self, Epoll, EventFd, TimerFd};
use crate::clock;
use crate::error::{Error, Result};

/// Stands for "no reactor": an embedded thread's private reactor state has
/// this index, so no reactor lists it in its statistics.
const NO_REACTOR: usize = usize::MAX;

/// A lightweight thread hosted by the OS thread that created it, which
/// polls it with [`EmbeddedThread::poll`]. It is the current thread of
/// that OS thread from creation until it is dropped, so code running there
/// between polls (submitting I/O) sees it as [`Thread::current`].
///
/// Dropping it asks the thread to exit and polls it until its pollers,
/// tasks and I/O channels are gone (at most the runtime's
/// `shutdown_grace`), then retires it. Drop everything that holds one of
/// its channels (bdev descriptors' channels) first.
///
/// `!Send`: it never leaves its OS thread.
pub struct EmbeddedThread {
    thread: Thread,
    runtime: RuntimeHandle,
    grace: Duration,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for EmbeddedThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedThread")
            .field("id", &self.thread.id())
            .field("name", &self.thread.name())
            .finish()
    }
}

impl RuntimeHandle {
    /// Creates a lightweight thread of this runtime hosted by the calling
    /// OS thread, which must not be a reactor nor host another
    /// bdevkit thread: see [`EmbeddedThread`].
    ///
    /// # Errors
    /// [`Error::RuntimeStopped`] when the runtime stops;
    /// [`Error::AlreadyOnThread`] when this OS thread already runs a
    /// bdevkit thread; [`Error::Epoll`] when its wake-up fds cannot be made.
    pub fn embed_current_thread(&self, name: impl Into<String>) -> Result<EmbeddedThread> {
        if self.is_stopping() {
            return Err(Error::RuntimeStopped);
        }
        if Thread::current().is_some() {
            return Err(Error::AlreadyOnThread);
        }
        // Nobody waits on these: the host polls. The thread layer wants
        // them (messages write the eventfd only when the reactor sleeps,
        // which this one never does; interrupt fds land in an epoll set no
        // one waits on).
        let epoll = Epoll::new().map_err(Error::Epoll)?;
        let wake = EventFd::new().map_err(Error::Epoll)?;
        let timer = TimerFd::new().map_err(Error::Epoll)?;
        let reactor = Arc::new(Reactor::new(
            NO_REACTOR,
            u32::MAX,
            epoll,
            wake,
            timer,
            false,
        ));
        let mut mask = CpuSet::new();
        for c in sys::allowed_cpus().unwrap_or_default() {
            mask.insert(c);
        }
        let runtime: std::sync::Weak<dyn std::any::Any + Send + Sync> =
            Arc::downgrade(&self.0) as _;
        let shared = ThreadShared::new(name.into(), mask, Arc::clone(&reactor), runtime);
        reactor.thread_count.fetch_add(1, Ordering::Relaxed);
        reactor.tid.store(sys::gettid(), Ordering::Relaxed);
        self.0
            .threads
            .lock()
            .push(ThreadHandle(Arc::clone(&shared)));
        let thread = Thread::adopt(shared);
        thread.make_current();
        Ok(EmbeddedThread {
            thread,
            runtime: self.clone(),
            grace: self.0.opts.shutdown_grace,
            _not_send: PhantomData,
        })
    }
}

impl EmbeddedThread {
    /// One iteration of the thread: local deferrals, a batch of messages,
    /// active pollers, due timed pollers. Returns whether anything ran
    /// (a poller said `Busy` or a message ran).
    #[inline]
    pub fn poll(&self) -> bool {
        let now = clock::ticks();
        let busy = self.thread.poll_top(now);
        self.thread.account(busy, clock::ticks().wrapping_sub(now));
        busy
    }

    /// The thread, as code running on it sees it.
    #[must_use]
    pub fn thread(&self) -> &Thread {
        &self.thread
    }

    /// A `Send` handle, for other threads to message it.
    #[must_use]
    pub fn handle(&self) -> ThreadHandle {
        self.thread.handle()
    }
}

impl Drop for EmbeddedThread {
    fn drop(&mut self) {
        let t = &self.thread;
        t.exit();
        let start = Instant::now();
        while !t.can_finish_exit() {
            if start.elapsed() > self.grace {
                tracing::warn!(
                    thread = t.name(),
                    "embedded thread did not release its pollers/channels in time; dropping it"
                );
                break;
            }
            self.poll();
        }
        if t.is_current() {
            Thread::leave();
        }
        t.finish();
        t.0.shared
            .reactor
            .thread_count
            .fetch_sub(1, Ordering::Relaxed);
        self.runtime.0.threads.lock().retain(|h| h.id() != t.id());
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    use super::*;
    use crate::thread::{IoDevice, PollerStatus, Runtime, RuntimeOptions};

    fn rt() -> Runtime {
        let opts = RuntimeOptions {
            shutdown_grace: Duration::from_millis(200),
            ..RuntimeOptions::interrupt(CpuSet::single(0))
        };
        Runtime::start(opts).unwrap()
    }

    #[test]
    fn polled_by_its_host_with_messages_and_pollers() {
        let r = rt();
        let h = r.handle();
        let runs = Arc::new(AtomicUsize::new(0));
        let host = std::thread::spawn({
            let runs = Arc::clone(&runs);
            move || {
                let e = h.embed_current_thread("host").unwrap();
                assert_eq!(Thread::current().unwrap().id(), e.thread().id());
                assert!(h.threads().iter().any(|t| t.id() == e.thread().id()));
                let ticks = Rc::new(Cell::new(0u32));
                let t2 = Rc::clone(&ticks);
                let p = e.thread().register_poller("count", 0, move |_| {
                    t2.set(t2.get() + 1);
                    PollerStatus::Busy
                });
                // A message from another OS thread runs at the next poll.
                let handle = e.handle();
                let r2 = Arc::clone(&runs);
                std::thread::spawn(move || {
                    handle
                        .send_msg(move || {
                            assert!(Thread::current().is_some());
                            r2.fetch_add(1, Ordering::SeqCst);
                        })
                        .unwrap();
                })
                .join()
                .unwrap();
                assert_eq!(runs.load(Ordering::SeqCst), 0, "ran before a poll");
                assert!(e.poll());
                assert_eq!(runs.load(Ordering::SeqCst), 1);
                assert_eq!(ticks.get(), 1);
                p.unregister();
                let id = e.thread().id();
                drop(e);
                assert!(Thread::current().is_none());
                assert!(!h.threads().iter().any(|t| t.id() == id));
            }
        });
        host.join().unwrap();
        r.shutdown();
    }

    #[test]
    fn not_on_a_reactor_nor_twice() {
        let r = rt();
        let h = r.handle();
        let on_reactor = r
            .app_thread()
            .run_sync(move || h.embed_current_thread("x").err())
            .unwrap();
        assert!(matches!(on_reactor, Some(Error::AlreadyOnThread)));
        let h = r.handle();
        std::thread::spawn(move || {
            let _e = h.embed_current_thread("one").unwrap();
            assert!(matches!(
                h.embed_current_thread("two"),
                Err(Error::AlreadyOnThread)
            ));
        })
        .join()
        .unwrap();
        r.shutdown();
    }

    #[test]
    fn channels_are_released_on_drop_and_walks_reach_it() {
        struct Ch(Arc<AtomicBool>);
        impl Drop for Ch {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let r = rt();
        let h = r.handle();
        let destroyed = Arc::new(AtomicBool::new(false));
        let d2 = Arc::clone(&destroyed);
        let walked = Arc::new(AtomicUsize::new(0));
        let w2 = Arc::clone(&walked);
        std::thread::spawn(move || {
            let e = h.embed_current_thread("holder").unwrap();
            let dev = IoDevice::register("dev", move || Ok(Ch(Arc::clone(&d2))));
            let ch = dev.get_channel().unwrap();
            // A walk over the runtime's threads waits for our poll.
            let w3 = Arc::clone(&w2);
            h.for_each_thread(
                move |_| {
                    w3.fetch_add(1, Ordering::SeqCst);
                },
                || {},
            );
            let start = Instant::now();
            while w2.load(Ordering::SeqCst) < 2 {
                e.poll();
                assert!(start.elapsed() < Duration::from_secs(10), "walk stuck");
            }
            drop(ch);
            drop(e);
        })
        .join()
        .unwrap();
        assert!(destroyed.load(Ordering::SeqCst));
        assert_eq!(walked.load(Ordering::SeqCst), 2);
        r.shutdown();
    }
}
