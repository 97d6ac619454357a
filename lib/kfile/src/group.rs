//! The per-thread group of a kernel-file module (SPDK's group channel:
//! `bdev_aio_group_channel`, `bdev_uring_group_channel`): one kernel
//! context and one poller per lightweight thread, shared by every bdev
//! channel of the module on that thread.
//!
//! [`Group`] is what the modules do alike: the FIFO of I/Os that found
//! every slot busy, the poller (one submit + reap round, then the finished
//! I/Os completed as one batch outside any borrow, so that completion
//! callbacks can submit again), and interrupt mode (an eventfd in the
//! reactor's wake-up set that the kernel context signals, drained before
//! the poller reports idle). The module's [`Engine`] is its kernel side:
//! the AIO context or the rings, with their in-flight tables.
//!
//! A module keeps its groups in an io_device owned by its module instance
//! (one per `BdevManager`), whose per-thread channel value is a
//! `Group<Engine>`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::{Rc, Weak};

use bdevkit::bdev::module::BoxError;
use bdevkit::bdev::module::{BdevIo, IoStatus, ModuleIo};
use bdevkit::thread::{InterruptFd, Poller, PollerStatus, Thread};

use crate::sys;

/// The kernel side of a [`Group`]: a module's kernel context(s) and their
/// in-flight tables. All methods run on the group's thread, inside the
/// group's borrow: they must not complete an I/O inline or call into the
/// bdev layer (that could submit to this group again); finished I/Os go
/// to the batch of [`Engine::step`].
pub trait Engine: fmt::Debug + 'static {
    /// What the engine needs to know per I/O about its bdev (copied, no
    /// reference counting per I/O).
    type Target: Copy;

    /// Prepares `io` for `t` in a free slot; gives it back when every slot
    /// is busy (the group queues it and retries after the next round).
    fn prep(&mut self, io: BdevIo, t: Self::Target) -> Result<(), BdevIo>;

    /// Whether prepared requests wait for the next [`Engine::step`] to
    /// hand them to the kernel.
    fn unsubmitted(&self) -> bool;

    /// One round: hands prepared requests to the kernel, reaps what it
    /// finished and pushes the I/Os that are done, with their status, to
    /// `batch`. Returns whether it did or found work.
    fn step(&mut self, batch: &mut Vec<(BdevIo, IoStatus)>) -> bool;

    /// How many I/Os the engine holds at once (sizes the reused batch so
    /// that steady state allocates nothing).
    fn depth(&self) -> usize;

    /// Optional: called when a poll found nothing to do, before it reports
    /// idle. Default: nothing.
    fn idle(&self) {}
}

/// What [`Group::create`] gives the engine's constructor.
#[derive(Debug)]
pub struct Setup<'a> {
    /// The thread the group belongs to.
    pub thread: &'a Thread,
    /// In interrupt mode, the group's eventfd, which the kernel context
    /// must signal on completion; `None` in poll mode.
    pub eventfd: Option<RawFd>,
}

impl Setup<'_> {
    /// Whether the thread's reactor runs in interrupt mode.
    #[must_use]
    pub fn interrupt(&self) -> bool {
        self.eventfd.is_some()
    }
}

/// One thread's group: the channel value of the module's group io_device.
pub struct Group<E: Engine> {
    // Field order is drop order: the eventfd leaves the reactor's wake-up
    // set before `inner` (the only strong reference) closes it.
    _intr: Option<InterruptFd>,
    inner: Rc<Inner<E>>,
    poller: Poller,
}

struct Inner<E: Engine> {
    // Field order is drop order: the engine (which waits for the kernel to
    // finish with its buffers) goes before the eventfd it signals.
    st: RefCell<State<E>>,
    /// Completions of one poll, reused (no allocation in steady state).
    batch: RefCell<Vec<(BdevIo, IoStatus)>>,
    efd: Option<OwnedFd>,
    in_poll: Cell<bool>,
}

struct State<E: Engine> {
    engine: E,
    /// I/Os that found every slot busy, in arrival order.
    waiting: VecDeque<(BdevIo, E::Target)>,
}

impl<E: Engine> fmt::Debug for Group<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Group");
        if let Ok(st) = self.inner.st.try_borrow() {
            d.field("engine", &st.engine)
                .field("waiting", &st.waiting.len());
        }
        d.finish_non_exhaustive()
    }
}

impl<E: Engine> Group<E> {
    /// Creates the calling thread's group: in interrupt mode an eventfd in
    /// the reactor's wake-up set, the engine from `make`, and an active
    /// poller named `poller`.
    ///
    /// # Errors
    /// When not on a bdevkit thread, when the eventfd cannot be created or
    /// registered, and what `make` reports.
    pub fn create(
        poller: &str,
        make: impl FnOnce(&Setup<'_>) -> Result<E, BoxError>,
    ) -> Result<Group<E>, BoxError> {
        let t = Thread::try_current()?;
        let interrupt = t.runtime().map(|r| r.interrupt_mode()).unwrap_or(false);
        let efd = if interrupt {
            Some(sys::eventfd()?)
        } else {
            None
        };
        let engine = make(&Setup {
            thread: &t,
            eventfd: efd.as_ref().map(AsRawFd::as_raw_fd),
        })?;
        let depth = engine.depth();
        let inner = Rc::new(Inner {
            st: RefCell::new(State {
                engine,
                waiting: VecDeque::new(),
            }),
            batch: RefCell::new(Vec::with_capacity(depth)),
            efd,
            in_poll: Cell::new(false),
        });
        let intr = match &inner.efd {
            Some(fd) => Some(t.register_interrupt_fd(fd.as_raw_fd())?),
            None => None,
        };
        let weak: Weak<Inner<E>> = Rc::downgrade(&inner);
        let poller = t.register_poller(poller, 0, move |_| match weak.upgrade() {
            Some(g) => g.poll(),
            None => PollerStatus::Idle,
        });
        Ok(Group {
            _intr: intr,
            inner,
            poller,
        })
    }

    /// Queues `io` for `t`: prepared in a free slot now, or after the I/Os
    /// that wait for one. The poller hands it to the kernel; it never
    /// completes inline.
    #[inline]
    pub fn queue(&self, io: BdevIo, t: E::Target) {
        self.inner.queue(io, t);
    }

    /// Runs `f` on the engine (attach a file, park an I/O, ...), inside
    /// the group's borrow: `f` must not complete I/Os or call into the
    /// bdev layer.
    pub fn with<R>(&self, f: impl FnOnce(&mut E) -> R) -> R {
        f(&mut self.inner.st.borrow_mut().engine)
    }
}

impl<E: Engine> Drop for Group<E> {
    fn drop(&mut self) {
        self.poller.unregister();
    }
}

impl<E: Engine> Inner<E> {
    #[inline]
    fn queue(&self, io: BdevIo, t: E::Target) {
        let mut st = self.st.borrow_mut();
        let State { engine, waiting } = &mut *st;
        let was_idle = waiting.is_empty() && !engine.unsubmitted();
        if waiting.is_empty() {
            if let Err(io) = engine.prep(io, t) {
                waiting.push_back((io, t));
            }
        } else {
            waiting.push_back((io, t));
        }
        drop(st);
        // A submission from outside our poller (a message, another poller)
        // must wake a reactor that might otherwise go to sleep before the
        // poller hands it to the kernel.
        if was_idle && !self.in_poll.get() {
            if let Some(fd) = &self.efd {
                sys::eventfd_signal(fd.as_raw_fd());
            }
        }
    }

    fn poll(&self) -> PollerStatus {
        self.in_poll.set(true);
        let mut batch = std::mem::take(&mut *self.batch.borrow_mut());
        let mut busy = self.step(&mut batch);
        if !busy && batch.is_empty() {
            if let Some(fd) = &self.efd {
                // About to report idle: reset the eventfd first, then look
                // once more, so that a completion racing with the reset is
                // either seen now or signals the eventfd again.
                sys::eventfd_drain(fd.as_raw_fd());
                busy = self.step(&mut batch);
            }
        }
        let work = busy || !batch.is_empty();
        if !work {
            self.st.borrow().engine.idle();
        }
        for (io, status) in batch.drain(..) {
            io.complete(status);
        }
        *self.batch.borrow_mut() = batch;
        self.in_poll.set(false);
        PollerStatus::from(work)
    }

    /// Prepares waiting I/Os while slots are free, then one engine round.
    fn step(&self, batch: &mut Vec<(BdevIo, IoStatus)>) -> bool {
        let mut st = self.st.borrow_mut();
        let State { engine, waiting } = &mut *st;
        while let Some((io, t)) = waiting.pop_front() {
            if let Err(io) = engine.prep(io, t) {
                waiting.push_front((io, t));
                break;
            }
        }
        engine.step(batch)
    }
}
