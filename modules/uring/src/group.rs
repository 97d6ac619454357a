//! The per-thread ring group (SPDK's `bdev_uring_group_channel`): one
//! io_uring ring and one poller per lightweight thread, shared by every
//! uring bdev channel on that thread, plus a second, `IOPOLL` ring for
//! bdevs that serve polled I/O when that option is on.
//!
//! `submit` only pushes an SQE (no system call). The poller makes **one
//! `io_uring_enter` per ring per iteration**, which submits everything
//! pushed since the last one and runs the kernel's completion work, then
//! reaps the completion queue and completes the finished I/Os as a batch
//! outside any borrow, so callbacks can submit again. I/Os that find every
//! slot busy wait in a FIFO.
//!
//! In interrupt mode the rings signal the group's eventfd, which is in the
//! reactor's wake-up set.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::{Rc, Weak};
use std::sync::OnceLock;

use bdevkit::bdev::module::{BdevIo, BoxError, IoStatus, IoType, ModuleIo};
use bdevkit::thread::{InterruptFd, IoDevice, Poller, PollerStatus, Thread};
use bdevkit_kfile::slots::{Op, Transfer};

use crate::probe;
use crate::sys::{self, FileRef, Ring};

/// Ring of a target: the plain one or the `IOPOLL` one.
pub(crate) const PLAIN: usize = 0;
/// See [`PLAIN`].
pub(crate) const POLLED: usize = 1;

/// Per-channel facts the group needs for each I/O (copied, no reference
/// counting per I/O).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    /// The file in its ring.
    pub(crate) file: FileRef,
    /// [`PLAIN`] or [`POLLED`].
    pub(crate) ring: usize,
    /// log2 of the block size.
    pub(crate) block_shift: u32,
    /// The file has no non-blocking reads: the kernel serves it in io-wq
    /// workers.
    pub(crate) punts: bool,
    /// Device-backed file: each SQE gets its own `io_uring_enter`.
    pub(crate) solo: bool,
}

static DEVICE: OnceLock<IoDevice<UringGroup>> = OnceLock::new();

/// The process-wide io_device whose per-thread channel is the group.
pub(crate) fn device() -> &'static IoDevice<UringGroup> {
    DEVICE.get_or_init(|| IoDevice::register("bdev_uring_group", UringGroup::create))
}

/// One thread's group (the io_device channel value).
pub(crate) struct UringGroup {
    // Field order is drop order: the eventfd leaves the reactor's epoll set
    // before `inner` closes it.
    _intr: Option<InterruptFd>,
    inner: Rc<GroupInner>,
    poller: Poller,
}

impl fmt::Debug for UringGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.st.borrow();
        f.debug_struct("UringGroup")
            .field("rings", &st.rings)
            .field("waiting", &st.waiting.len())
            .finish()
    }
}

struct State {
    rings: [Option<Ring>; 2],
    waiting: VecDeque<(BdevIo, Target)>,
    reaped: Vec<(u32, i32)>,
    enter_failed: bool,
    /// Channels whose file the kernel serves in io-wq workers.
    punting: u32,
}

struct GroupInner {
    st: RefCell<State>,
    /// Completions of one poll, reused (no allocation in steady state).
    batch: RefCell<Vec<(BdevIo, IoStatus)>>,
    efd: Option<OwnedFd>,
    in_poll: Cell<bool>,
    /// Yield the CPU on idle polls with requests in the kernel (poll
    /// mode, [`crate::UringOptions::idle_yield`]).
    idle_yield: bool,
}

impl UringGroup {
    fn create() -> Result<UringGroup, BoxError> {
        let t = Thread::try_current()?;
        let interrupt = t.runtime().map(|r| r.interrupt_mode()).unwrap_or(false);
        let efd = if interrupt {
            Some(bdevkit_kfile::eventfd()?)
        } else {
            None
        };
        let ring = new_ring(false, efd.as_ref().map(AsRawFd::as_raw_fd))?;
        let depth = ring.setup().entries as usize * 2;
        let inner = Rc::new(GroupInner {
            st: RefCell::new(State {
                rings: [Some(ring), None],
                waiting: VecDeque::new(),
                reaped: Vec::with_capacity(depth),
                enter_failed: false,
                punting: 0,
            }),
            batch: RefCell::new(Vec::with_capacity(depth)),
            idle_yield: !interrupt && probe::options().idle_yield,
            efd,
            in_poll: Cell::new(false),
        });
        let intr = match &inner.efd {
            Some(fd) => Some(t.register_interrupt_fd(fd.as_raw_fd())?),
            None => None,
        };
        let weak: Weak<GroupInner> = Rc::downgrade(&inner);
        let poller = t.register_poller("bdev_uring_poll", 0, move |_| match weak.upgrade() {
            Some(g) => g.poll(),
            None => PollerStatus::Idle,
        });
        Ok(UringGroup {
            _intr: intr,
            inner,
            poller,
        })
    }

    /// Adds a bdev's file to the ring it uses on this thread.
    pub(crate) fn attach(
        &self,
        fd: RawFd,
        polled: bool,
        block_shift: u32,
        punts: bool,
        solo: bool,
    ) -> io::Result<Target> {
        let mut st = self.inner.st.borrow_mut();
        let ring = if polled { POLLED } else { PLAIN };
        if st.rings[ring].is_none() {
            let efd = self.inner.efd.as_ref().map(AsRawFd::as_raw_fd);
            st.rings[ring] = Some(new_ring(polled, efd)?);
        }
        let r = st.rings[ring]
            .as_mut()
            .expect("invariant: ring created above");
        let file = r.add_file(fd);
        st.punting += u32::from(punts);
        Ok(Target {
            file,
            ring,
            block_shift,
            punts,
            solo,
        })
    }

    /// A bdev channel on this thread is gone (all its I/O completed).
    pub(crate) fn detach(&self, t: &Target) {
        let mut st = self.inner.st.borrow_mut();
        st.punting -= u32::from(t.punts);
        if let Some(r) = st.rings[t.ring].as_mut() {
            r.remove_file(t.file);
        }
    }

    /// Serves `io` for the channel described by `t`. Never completes
    /// inline.
    #[inline]
    pub(crate) fn submit(&self, io: BdevIo, t: Target) {
        match io.io_type() {
            IoType::Read | IoType::Write | IoType::Flush => self.inner.queue(io, t),
            _ => io.complete_deferred(IoStatus::Errno(libc::ENOTSUP)),
        }
    }
}

impl Drop for UringGroup {
    fn drop(&mut self) {
        self.poller.unregister();
    }
}

fn new_ring(polled: bool, efd: Option<RawFd>) -> io::Result<Ring> {
    let ring = probe::build_ring(polled)?;
    if let Some(fd) = efd {
        ring.register_eventfd(fd)?;
    }
    Ok(ring)
}

impl GroupInner {
    fn queue(&self, io: BdevIo, t: Target) {
        let mut st = self.st.borrow_mut();
        let was_idle =
            st.waiting.is_empty() && st.rings.iter().flatten().all(|r| r.unsubmitted() == 0);
        if st.waiting.is_empty() {
            if let Err(io) = prep(&mut st.rings, io, t) {
                st.waiting.push_back((io, t));
            }
        } else {
            st.waiting.push_back((io, t));
        }
        drop(st);
        // A submission from outside our poller must wake a reactor that
        // might otherwise go to sleep before the poller pushes it.
        if was_idle && !self.in_poll.get() {
            if let Some(fd) = &self.efd {
                bdevkit_kfile::eventfd_signal(fd.as_raw_fd());
            }
        }
    }

    fn poll(&self) -> PollerStatus {
        self.in_poll.set(true);
        let mut batch = std::mem::take(&mut *self.batch.borrow_mut());
        let mut busy = self.step(&mut batch);
        if !busy && batch.is_empty() {
            if let Some(fd) = &self.efd {
                // About to report idle: reset the eventfd, then look once
                // more, so a completion racing with the reset is seen now
                // or signals the eventfd again.
                bdevkit_kfile::eventfd_drain(fd.as_raw_fd());
                busy = self.step(&mut batch);
            }
        }
        let work = busy || !batch.is_empty();
        if !work && self.idle_yield {
            // Poll mode, nothing to do but wait for the kernel, which
            // serves files without non-blocking reads (tmpfs) in io-wq
            // workers that inherit the reactor's CPU: give them the CPU
            // instead of spinning against them. (For other files there is
            // no worker to yield to, only unrelated tasks: keep polling.)
            let st = self.st.borrow();
            if st.punting > 0 && st.rings.iter().flatten().any(|r| r.in_kernel() > 0) {
                sys::yield_cpu();
            }
        }
        for (io, status) in batch.drain(..) {
            io.complete(status);
        }
        *self.batch.borrow_mut() = batch;
        self.in_poll.set(false);
        PollerStatus::from(work)
    }

    /// One enter + reap round per ring; finished I/Os go to `batch`.
    fn step(&self, batch: &mut Vec<(BdevIo, IoStatus)>) -> bool {
        let mut st = self.st.borrow_mut();
        let State {
            rings,
            waiting,
            reaped,
            enter_failed,
            ..
        } = &mut *st;
        while let Some((io, t)) = waiting.pop_front() {
            if let Err(io) = prep(rings, io, t) {
                waiting.push_front((io, t));
                break;
            }
        }
        let mut busy = false;
        for ring in rings.iter_mut().flatten() {
            if ring.in_kernel() == 0 {
                continue;
            }
            match ring.enter() {
                Ok(n) => {
                    busy |= n > 0;
                    *enter_failed = false;
                }
                Err(e) => {
                    busy = true;
                    let transient = matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    );
                    if !transient && !*enter_failed {
                        *enter_failed = true;
                        tracing::warn!(error = %e, "io_uring_enter failed; retrying");
                    }
                }
            }
            if ring.reap(reaped) > 0 {
                busy = true;
            }
            for (idx, res) in reaped.drain(..) {
                if let Some(done) = finish(ring, idx, res) {
                    batch.push(done);
                }
            }
            // Polled completions only show up when we ask: keep spinning.
            if ring.setup().iopoll && ring.in_kernel() > 0 {
                busy = true;
            }
        }
        busy
    }
}

/// Pushes `io` into a free slot of its ring (or gives it back).
#[inline]
fn prep(rings: &mut [Option<Ring>; 2], io: BdevIo, t: Target) -> Result<(), BdevIo> {
    let Some(ring) = rings[t.ring].as_mut() else {
        return Err(io);
    };
    let op = match io.io_type() {
        IoType::Read => Op::Read,
        IoType::Write => Op::Write,
        _ => Op::Flush,
    };
    let offset = io.offset_blocks() << t.block_shift;
    ring.prep(io, op, t.file, offset, 0, t.solo).map(|_| ())
}

/// Decides what a completion means: done (the I/O and its status), or
/// pushed again for the rest of a short transfer or after `EAGAIN`.
fn finish(ring: &mut Ring, idx: u32, res: i32) -> Option<(BdevIo, IoStatus)> {
    let flags = ring.slot(idx).rw_flags;
    if res < 0 {
        return match -res {
            libc::EAGAIN | libc::EINTR => {
                ring.requeue_rest(idx, flags & !libc::RWF_NOWAIT);
                None
            }
            libc::ECANCELED => ring.take(idx).map(|io| (io, IoStatus::Aborted)),
            errno => ring.take(idx).map(|io| (io, IoStatus::Errno(errno))),
        };
    }
    match ring.transferred(idx, u64::try_from(res).unwrap_or(0)) {
        Transfer::Complete => ring.take(idx).map(|io| (io, IoStatus::Success)),
        // End of file inside the bdev (the file shrank): fail rather than
        // resubmit forever.
        Transfer::EndOfFile => ring.take(idx).map(|io| (io, IoStatus::Errno(libc::EIO))),
        Transfer::Partial => {
            ring.requeue_rest(idx, flags);
            None
        }
    }
}
