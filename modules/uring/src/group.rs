//! The per-thread ring group (SPDK's `bdev_uring_group_channel`): one
//! io_uring ring and one poller per lightweight thread, shared by every
//! uring bdev channel of the module instance on that thread, plus a
//! second, `IOPOLL` ring for bdevs that serve polled I/O when that option
//! is on. The group itself (waiting FIFO, poller, batch completion,
//! eventfd) is `bdevkit_kfile`'s [`Group`], and so is the ring
//! ([`FileRing`]); this file is the group's io_uring engine.
//!
//! `submit` only pushes an SQE (no system call). The poller makes **one
//! `io_uring_enter` per ring per iteration**, which submits everything
//! pushed since the last one and runs the kernel's completion work, then
//! reaps the completion queue.
//!
//! In interrupt mode the rings signal the group's eventfd, which is in the
//! reactor's wake-up set.

use std::fmt;
use std::io;
use std::os::fd::RawFd;

use bdevkit::bdev::module::{BdevIo, BoxError, IoStatus, IoType, ModuleIo};
use bdevkit_kfile::group::{Engine, Group};
use bdevkit_kfile::ring::{FileRef, FileRing};
use bdevkit_kfile::slots::{self, Next};

use crate::options::{SharedOptions, UringOptions};
use crate::probe;

/// Ring of a target: the plain one or the `IOPOLL` one.
pub(crate) const PLAIN: usize = 0;
/// See [`PLAIN`].
pub(crate) const POLLED: usize = 1;

/// Where a channel's requests go on its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    /// [`PLAIN`] or [`POLLED`].
    pub(crate) ring: usize,
    /// The file has no non-blocking reads: the kernel serves it in io-wq
    /// workers.
    pub(crate) punts: bool,
}

/// What the group needs per I/O about a channel: its file is a
/// [`FileRef`] in its ring.
pub(crate) type Target = slots::Target<FileRef, Placement>;

/// One thread's group: the channel value of the module's group io_device.
pub(crate) type UringGroup = Group<UringEngine>;

/// Creates the calling thread's group (the io_device's constructor) with
/// the module instance's `options`.
pub(crate) fn create(options: SharedOptions) -> Result<UringGroup, BoxError> {
    Group::create("bdev_uring_poll", |setup| {
        let o = *options.lock();
        let ring = new_ring(false, setup.eventfd, &o)?;
        Ok(UringEngine {
            rings: [Some(ring), None],
            punting: 0,
            idle_yield: !setup.interrupt() && o.idle_yield,
            efd: setup.eventfd,
            options,
        })
    })
}

/// Adds a bdev's file to the ring it uses on this thread.
pub(crate) fn attach(
    g: &UringGroup,
    fd: RawFd,
    polled: bool,
    block_shift: u32,
    punts: bool,
    solo: bool,
) -> io::Result<Target> {
    g.with(|e| {
        let ring = if polled { POLLED } else { PLAIN };
        if e.rings[ring].is_none() {
            let o = *e.options.lock();
            e.rings[ring] = Some(new_ring(polled, e.efd, &o)?);
        }
        let r = e.rings[ring]
            .as_mut()
            .expect("invariant: ring created above");
        let file = r.add_file(fd);
        e.punting += u32::from(punts);
        Ok(Target {
            file,
            block_shift,
            rw_flags: 0,
            solo,
            extra: Placement { ring, punts },
        })
    })
}

/// A bdev channel on this thread is gone (all its I/O completed).
pub(crate) fn detach(g: &UringGroup, t: &Target) {
    g.with(|e| {
        e.punting -= u32::from(t.extra.punts);
        if let Some(r) = e.rings[t.extra.ring].as_mut() {
            r.remove_file(t.file);
        }
    });
}

/// Serves `io` for the channel described by `t`. Never completes inline.
#[inline]
pub(crate) fn submit(g: &UringGroup, io: BdevIo, t: Target) {
    match io.io_type() {
        IoType::Read | IoType::Write | IoType::Flush => g.queue(io, t),
        _ => io.complete_deferred(IoStatus::Errno(libc::ENOTSUP)),
    }
}

fn new_ring(polled: bool, efd: Option<RawFd>, o: &UringOptions) -> io::Result<FileRing> {
    let ring = probe::build_ring(polled, o)?;
    if let Some(fd) = efd {
        ring.register_eventfd(fd)?;
    }
    Ok(ring)
}

/// One thread's rings and what the group needs besides.
pub(crate) struct UringEngine {
    rings: [Option<FileRing>; 2],
    /// Channels whose file the kernel serves in io-wq workers.
    punting: u32,
    /// Yield the CPU on idle polls with requests in the kernel (poll
    /// mode, [`UringOptions::idle_yield`]).
    idle_yield: bool,
    /// The group's eventfd (interrupt mode), for rings created later.
    efd: Option<RawFd>,
    /// The module instance's options, for rings created later.
    options: SharedOptions,
}

impl fmt::Debug for UringEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringEngine")
            .field("rings", &self.rings)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
impl UringEngine {
    /// The SQ entries the plain ring was built with.
    pub(crate) fn plain_entries(&self) -> Option<u32> {
        self.rings[PLAIN].as_ref().map(|r| r.setup().entries)
    }
}

impl Engine for UringEngine {
    type Target = Target;

    /// Pushes `io` into a free slot of its ring (or gives it back).
    #[inline]
    fn prep(&mut self, io: BdevIo, t: Target) -> Result<(), BdevIo> {
        match self.rings[t.extra.ring].as_mut() {
            Some(ring) => ring.prep(io, &t),
            None => Err(io),
        }
    }

    fn unsubmitted(&self) -> bool {
        self.rings.iter().flatten().any(|r| r.unsubmitted() > 0)
    }

    fn depth(&self) -> usize {
        // Both rings, when the IOPOLL one is built.
        self.rings.iter().flatten().map(FileRing::cq_entries).sum()
    }

    /// One enter + reap round per ring.
    fn step(&mut self, batch: &mut Vec<(BdevIo, IoStatus)>) -> bool {
        let mut busy = false;
        for ring in self.rings.iter_mut().flatten() {
            if ring.in_kernel() == 0 {
                continue;
            }
            busy |= ring.enter_logged();
            let reaped = ring.reap(batch, |errno, flags| match errno {
                libc::EAGAIN | libc::EINTR => Next::Again(flags & !libc::RWF_NOWAIT),
                libc::ECANCELED => Next::Done(IoStatus::Aborted),
                _ => Next::Done(IoStatus::Errno(errno)),
            });
            if reaped > 0 {
                busy = true;
            }
            // Polled completions only show up when we ask: keep spinning.
            if ring.setup().iopoll && ring.in_kernel() > 0 {
                busy = true;
            }
        }
        busy
    }

    /// Poll mode, nothing to do but wait for the kernel, which serves files
    /// without non-blocking reads (tmpfs) in io-wq workers that inherit the
    /// reactor's CPU: give them the CPU instead of spinning against them.
    /// (For other files there is no worker to yield to, only unrelated
    /// tasks: keep polling.)
    fn idle(&self) {
        if self.idle_yield
            && self.punting > 0
            && self.rings.iter().flatten().any(|r| r.in_kernel() > 0)
        {
            bdevkit_kfile::yield_cpu();
        }
    }
}
