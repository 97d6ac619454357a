//! The per-thread group of the `io_uring_cmd` mechanism: one 128/32-byte
//! entry ring per lightweight thread, shared by every `io_uring_cmd` bdev
//! of the module instance with a channel there, plus an `IOPOLL` ring for
//! the bdevs whose namespace has poll queues. The group itself (FIFO of
//! I/Os waiting for a slot, the poller, batch completion, the eventfd of
//! interrupt mode) is `bdevkit_kfile`'s [`Group`]; this file is its
//! engine.
//!
//! `submit` builds the NVMe command and pushes the SQE (no system call);
//! the poller's one `io_uring_enter` per ring submits everything pushed
//! since the last poll and runs the kernel's completion work, then the
//! completion queue is reaped.

use std::fmt;
use std::io;
use std::os::fd::RawFd;

use bdevkit::bdev::module::{BdevIo, BoxError, IoStatus, IoType};
use bdevkit::thread::IoChannel;
use bdevkit_kfile::group::{Engine, Group};
use bdevkit_kfile::ring::{CmdRing, Dest, RingSetup, SLOT_RANGES};
use bdevkit_nvme_spec::io::DsmRange;

use super::build::{self, NotSent, NsParams, Request};

/// Entries (so in-flight slots) of each ring: SPDK's bdev_xnvme queue
/// depth.
pub(crate) const RING_ENTRIES: u32 = 512;

/// Ring of a target: the plain one or the `IOPOLL` one.
pub(crate) const PLAIN: usize = 0;
/// See [`PLAIN`].
pub(crate) const POLLED: usize = 1;

/// One thread's group: the channel value of the module's io_device.
pub(crate) type CmdGroup = Group<CmdEngine>;

/// Where a command goes: the files of one bdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Files {
    /// The namespace's generic char device.
    pub(crate) ns: RawFd,
    /// The controller's char device (`None`: no admin passthrough).
    pub(crate) ctrl: Option<RawFd>,
}

/// What the engine needs per I/O about its bdev (copied; no reference
/// counting per I/O).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    /// The namespace as commands need it.
    pub(crate) ns: NsParams,
    /// The bdev's files.
    pub(crate) files: Files,
    /// [`PLAIN`] or [`POLLED`].
    pub(crate) ring: usize,
}

/// Creates the calling thread's group (the io_device's constructor).
pub(crate) fn create() -> Result<CmdGroup, BoxError> {
    Group::create("bdev_xnvme_poll", |setup| {
        let ring = new_ring(RING_ENTRIES, false).map_err(|e| {
            io::Error::new(e.kind(), format!("io_uring_cmd ring (SQE128|CQE32): {e}"))
        })?;
        if let Some(fd) = setup.eventfd {
            ring.register_eventfd(fd)?;
        }
        let depth = ring.cq_entries();
        Ok(CmdEngine {
            rings: [Some(ring), None],
            spinners: [0, 0],
            failed: Vec::with_capacity(depth),
            eventfd: setup.eventfd,
        })
    })
}

/// A ring of `entries` entries, `iopoll` or not, with the best task work
/// mode the kernel has (probed in order: `DEFER_TASKRUN`, `COOP_TASKRUN`,
/// neither).
pub(crate) fn new_ring(entries: u32, iopoll: bool) -> io::Result<CmdRing> {
    let mut last = None;
    for (defer_taskrun, coop_taskrun) in [(true, false), (false, true), (false, false)] {
        let setup = RingSetup {
            entries,
            defer_taskrun,
            coop_taskrun,
            taskrun_flag: defer_taskrun || coop_taskrun,
            iopoll,
            ..RingSetup::default()
        };
        match CmdRing::build(setup) {
            Ok(r) => return Ok(r),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)))
}

/// Adds a bdev channel to its thread's group: the bdev's ring
/// (`polled`: the `IOPOLL` one, built on first use; the plain one if that
/// fails) and whether its I/O keeps the poller spinning (`spin`:
/// `conserve_cpu` false). Returns the ring it got.
pub(crate) fn attach(g: &IoChannel<CmdGroup>, polled: bool, spin: bool) -> usize {
    g.with(|e| {
        let mut ring = PLAIN;
        if polled {
            if e.rings[POLLED].is_none() {
                match new_ring(RING_ENTRIES, true) {
                    Ok(r) => e.rings[POLLED] = Some(r),
                    Err(err) => {
                        tracing::warn!(error = %err, "io_uring_cmd: no IOPOLL ring; polling the plain ring");
                    }
                }
            }
            if e.rings[POLLED].is_some() {
                ring = POLLED;
            }
        }
        e.spinners[ring] += u32::from(spin);
        ring
    })
}

/// A bdev channel attached with `attach(.., spin)` to `ring` is gone.
pub(crate) fn detach(g: &IoChannel<CmdGroup>, ring: usize, spin: bool) {
    g.with(|e| e.spinners[ring] -= u32::from(spin));
}

/// One thread's rings and what the group needs besides.
pub(crate) struct CmdEngine {
    rings: [Option<CmdRing>; 2],
    /// Channels per ring whose bdev polls (`conserve_cpu` false): while
    /// that ring has I/O in the kernel the poller reports busy, so the
    /// reactor does not sleep on the eventfd.
    spinners: [u32; 2],
    /// I/Os no command could carry (or that need none), completed by the
    /// next round.
    failed: Vec<(BdevIo, IoStatus)>,
    /// The group's eventfd (interrupt mode), signalled by the plain ring.
    eventfd: Option<RawFd>,
}

impl fmt::Debug for CmdEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmdEngine")
            .field("rings", &self.rings)
            .field("spinners", &self.spinners)
            .field("failed", &self.failed.len())
            .field("eventfd", &self.eventfd)
            .finish()
    }
}

impl Engine for CmdEngine {
    type Target = Target;

    #[inline]
    fn prep(&mut self, io: BdevIo, t: Target) -> Result<(), BdevIo> {
        // The admin queue is never polled: the kernel refuses admin
        // commands on an IOPOLL ring (EOPNOTSUPP).
        let ring = if io.io_type() == IoType::NvmeAdmin {
            PLAIN
        } else {
            t.ring
        };
        let Some(ring) = self.rings[ring].as_mut() else {
            self.failed.push((io, IoStatus::Errno(libc::ENODEV)));
            return Ok(());
        };
        let mut ranges = [DsmRange::default(); SLOT_RANGES];
        let built = {
            let r = Request {
                io_type: io.io_type(),
                offset_blocks: io.offset_blocks(),
                num_blocks: io.num_blocks(),
                nvme_cmd: &io.nvme_cmd().cdw,
            };
            build::build(&r, &t.ns, &mut ranges)
        };
        let sent = match built {
            Ok(c) => match (c.dest, t.files.ctrl) {
                (Dest::Namespace, _) => Ok((c, t.files.ns)),
                (Dest::Controller, Some(fd)) => Ok((c, fd)),
                (Dest::Controller, None) => Err(IoStatus::Errno(libc::ENOTSUP)),
            },
            Err(NotSent::Fail(status)) => Err(status),
            // Nothing to send (a flush without a volatile write cache).
            Err(NotSent::Done) => Err(IoStatus::Success),
        };
        match sent {
            Ok((c, fd)) => ring.prep_cmd(io, fd, &c, &ranges),
            Err(status) => {
                self.failed.push((io, status));
                Ok(())
            }
        }
    }

    fn unsubmitted(&self) -> bool {
        !self.failed.is_empty() || self.rings.iter().flatten().any(|r| r.unsubmitted() > 0)
    }

    fn step(&mut self, batch: &mut Vec<(BdevIo, IoStatus)>) -> bool {
        let mut busy = !self.failed.is_empty();
        batch.append(&mut self.failed);
        for (i, ring) in self.rings.iter_mut().enumerate() {
            let Some(ring) = ring else { continue };
            if ring.in_kernel() == 0 {
                continue;
            }
            busy |= ring.enter_logged();
            if ring.reap_cmd(batch, build::status_of) > 0 {
                busy = true;
            }
            // Polled completions show up only when asked for, and polling
            // bdevs keep the reactor awake while their I/O is out.
            if ring.in_kernel() > 0 && (ring.setup().iopoll || self.spinners[i] > 0) {
                busy = true;
            }
        }
        busy
    }

    fn depth(&self) -> usize {
        let cq = self.rings.iter().flatten().map(CmdRing::cq_entries).sum();
        // Never less than the plain ring's (built with the group).
        usize::max(cq, 2 * RING_ENTRIES as usize)
    }
}
