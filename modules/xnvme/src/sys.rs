//! The only unsafe code of the crate: the io_uring_cmd ring (128-byte SQEs,
//! 32-byte CQEs) with its in-flight table, and the NVMe ioctls
//! (`NVME_IOCTL_ID`, `NVME_IOCTL_ADMIN_CMD`).
//!
//! The table is the safety boundary, as in the uring module:
//! [`CmdRing::prep`] puts the [`BdevIo`] in a slot of `bdevkit_kfile`'s
//! in-flight table ([`Slots`]) before it pushes the SQE, whose `user_data`
//! is the slot index and whose data pointer is the I/O's own buffer or
//! iovec array, or the slot's Dataset Management ranges. The slot keeps
//! the I/O (so that memory) until the completion for its index is reaped,
//! and the ranges of a slot are only written while it is free. `Drop`
//! waits for the kernel before anything is freed.
#![allow(unsafe_code)]

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use bdevkit::bdev::module::{BdevIo, IoStatus, ModuleIo};
use bdevkit::dma::DmaBuf;
use bdevkit_kfile::slots::{self, Slots};
use bdevkit_nvme_spec::io::{BlockRange, DsmRange, Read};
use bdevkit_nvme_spec::linux::{
    NvmeAdminCmd, NvmeUringCmd, NVME_IOCTL_ADMIN_CMD, NVME_IOCTL_ID, NVME_URING_CMD_IO,
};
use bdevkit_nvme_spec::{Command, Sqe};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::cmd::build::{self, Built, Data, Dest, Request};
use crate::cmd::geometry::SLOT_RANGES;

/// A 128/32-byte-entry ring.
type Uring = IoUring<squeue::Entry128, cqueue::Entry32>;

/// How a ring was set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RingSetup {
    /// SQ entries (slots).
    pub(crate) entries: u32,
    /// `SINGLE_ISSUER | DEFER_TASKRUN`: completions are posted only when
    /// the owner enters the kernel.
    pub(crate) defer_taskrun: bool,
    /// `COOP_TASKRUN` (the fallback where `DEFER_TASKRUN` is missing).
    pub(crate) coop_taskrun: bool,
    /// `TASKRUN_FLAG`: an idle poll skips `io_uring_enter` unless the
    /// kernel flagged completion work.
    pub(crate) taskrun_flag: bool,
    /// `IOPOLL`: completions are found by polling the device's poll queues.
    pub(crate) iopoll: bool,
}

/// Where a command goes: the files of one bdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Files {
    /// The namespace's generic char device.
    pub(crate) ns: RawFd,
    /// The controller's char device (`None`: no admin passthrough).
    pub(crate) ctrl: Option<RawFd>,
}

/// An io_uring_cmd ring and its in-flight table (one or two per thread
/// group).
pub(crate) struct CmdRing {
    // Field order is drop order: `Drop` drains the kernel first, then the
    // slots (the I/Os, their buffers) and the ranges go, then the ring.
    slots: Slots<RawFd>,
    /// Each slot's Dataset Management ranges (unmap).
    ranges: Box<[[DsmRange; SLOT_RANGES]]>,
    /// Each slot's I/O wants completion dword 0 (passthrough).
    wants_cdw0: Box<[bool]>,
    in_kernel: u32,
    pushed: u32,
    setup: RingSetup,
    /// Dropped by `Drop` once the kernel is done with every request;
    /// leaked otherwise.
    ring: ManuallyDrop<Uring>,
}

impl std::fmt::Debug for CmdRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmdRing")
            .field("setup", &self.setup)
            .field("in_kernel", &self.in_kernel)
            .finish_non_exhaustive()
    }
}

/// What [`CmdRing::prep`] could not do.
#[derive(Debug)]
pub(crate) enum NotQueued {
    /// Every slot is busy: try again after the next round.
    Full(BdevIo),
    /// The request cannot be sent: complete it with this status.
    Failed(BdevIo, IoStatus),
}

impl CmdRing {
    /// A ring of `entries` entries, `iopoll` or not, with the best task
    /// work mode the kernel has (probed in order: `DEFER_TASKRUN`,
    /// `COOP_TASKRUN`, neither).
    pub(crate) fn new(entries: u32, iopoll: bool) -> io::Result<CmdRing> {
        let mut last = None;
        for (defer_taskrun, coop_taskrun) in [(true, false), (false, true), (false, false)] {
            let setup = RingSetup {
                entries,
                defer_taskrun,
                coop_taskrun,
                taskrun_flag: defer_taskrun || coop_taskrun,
                iopoll,
            };
            match CmdRing::build(setup) {
                Ok(r) => return Ok(r),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)))
    }

    fn build(setup: RingSetup) -> io::Result<CmdRing> {
        let mut b = Uring::builder();
        b.setup_cqsize(setup.entries * 2);
        if setup.defer_taskrun {
            b.setup_single_issuer().setup_defer_taskrun();
        }
        if setup.coop_taskrun {
            b.setup_coop_taskrun();
        }
        if setup.taskrun_flag {
            b.setup_taskrun_flag();
        }
        if setup.iopoll {
            b.setup_iopoll();
        }
        let ring = b.build(setup.entries)?;
        let n = ring.params().sq_entries();
        Ok(CmdRing {
            slots: Slots::new(n, -1),
            ranges: vec![[DsmRange::default(); SLOT_RANGES]; n as usize].into_boxed_slice(),
            wants_cdw0: vec![false; n as usize].into_boxed_slice(),
            in_kernel: 0,
            pushed: 0,
            setup: RingSetup {
                entries: n,
                ..setup
            },
            ring: ManuallyDrop::new(ring),
        })
    }

    /// How the ring was set up.
    pub(crate) fn setup(&self) -> RingSetup {
        self.setup
    }

    /// Completions `fd` (an eventfd) is signalled for.
    pub(crate) fn register_eventfd(&self, fd: RawFd) -> io::Result<()> {
        self.ring.submitter().register_eventfd(fd)
    }

    /// SQEs pushed since the last `io_uring_enter`.
    pub(crate) fn unsubmitted(&self) -> u32 {
        self.pushed
    }

    /// Requests in the kernel (pushed, not yet reaped).
    pub(crate) fn in_kernel(&self) -> u32 {
        self.in_kernel
    }

    /// Builds the command of `io` for the bdev with namespace `ns` and
    /// `files`, puts the I/O in a free slot and pushes the SQE.
    ///
    /// # Errors
    /// [`NotQueued::Full`] when every slot is busy, [`NotQueued::Failed`]
    /// for a request no command can carry.
    pub(crate) fn prep(
        &mut self,
        io: BdevIo,
        ns: &build::NsParams,
        files: Files,
    ) -> Result<(), NotQueued> {
        let mut ranges = [DsmRange::default(); SLOT_RANGES];
        let built = {
            let r = Request {
                io_type: io.io_type(),
                offset_blocks: io.offset_blocks(),
                num_blocks: io.num_blocks(),
                nvme_cmd: &io.nvme_cmd().cdw,
            };
            build::build(&r, ns, &mut ranges)
        };
        let b: Built = match built {
            Ok(b) => b,
            Err(build::NotSent::Fail(status)) => return Err(NotQueued::Failed(io, status)),
            Err(build::NotSent::Done) => return Err(NotQueued::Failed(io, IoStatus::Success)),
        };
        let fd = match b.dest {
            Dest::Namespace => files.ns,
            Dest::Controller => match files.ctrl {
                Some(fd) => fd,
                None => return Err(NotQueued::Failed(io, IoStatus::Errno(libc::ENOTSUP))),
            },
        };
        // The table's file-oriented fields (offset, transfer flags) are not
        // used for NVMe commands: the slot only owns the I/O.
        let target = slots::Target {
            file: fd,
            block_shift: 0,
            rw_flags: 0,
            solo: false,
            extra: (),
        };
        let idx = self.slots.prep(io, &target).map_err(NotQueued::Full)?;
        let i = idx as usize;
        let (cmd, cmd_op) = match b.data {
            Data::None => (b.cmd, build::cmd_op(b.dest, false)),
            Data::Segments => {
                build::with_segments(b.cmd, b.dest, self.slots.get(idx).segments(false))
            }
            Data::Ranges(n) => {
                // The slot was free until `prep` above: nothing in the
                // kernel reads its ranges.
                self.ranges[i] = ranges;
                let cmd = build::with_ranges(b.cmd, &self.ranges[i], n);
                (cmd, build::cmd_op(b.dest, false))
            }
        };
        self.wants_cdw0[i] = b.wants_cdw0;
        self.push(idx, fd, cmd_op, &cmd);
        Ok(())
    }

    fn push(&mut self, idx: u32, fd: RawFd, cmd_op: u32, cmd: &NvmeUringCmd) {
        let sqe = opcode::UringCmd80::new(types::Fd(fd), cmd_op)
            .cmd(cmd.to_cmd80())
            .build()
            .user_data(u64::from(idx));
        self.slots.mark_in_kernel(idx);
        self.in_kernel += 1;
        self.pushed += 1;
        // SAFETY: the command points at memory of slot `idx`: the data
        // buffer or iovec array of the BdevIo the slot owns, or the slot's
        // ranges. The table keeps the I/O until the completion for
        // `user_data == idx` is reaped (`Slots::take` refuses InKernel
        // slots), the ranges of a slot are written only while it is free,
        // and `Drop` waits for the kernel before either is freed.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        // Never full: as many slots as SQ entries, one SQE per slot.
        debug_assert!(pushed.is_ok(), "invariant: one SQ entry per slot");
    }

    /// Submits every pushed SQE in one `io_uring_enter` that also runs the
    /// kernel's completion work (and, `IOPOLL`, polls once), without
    /// waiting. Skips the system call when there is nothing to submit and
    /// the kernel flagged no completion work.
    pub(crate) fn enter(&mut self) -> io::Result<usize> {
        let to_submit = self.pushed;
        if to_submit == 0 && self.in_kernel == 0 {
            return Ok(0);
        }
        if to_submit == 0 && self.setup.taskrun_flag && !self.setup.iopoll {
            let sq = self.ring.submission();
            if !sq.taskrun() && !sq.cq_overflow() {
                return Ok(0);
            }
        }
        let flags = io_uring::EnterFlags::GETEVENTS.bits();
        // SAFETY: io_uring_enter on our own ring without an extra
        // argument; the SQEs it consumes were built by `push`.
        let n = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(to_submit, 0, flags, None)
        }?;
        let done = u32::try_from(n).unwrap_or(u32::MAX).min(self.pushed);
        self.pushed -= done;
        Ok(n)
    }

    /// Takes the finished I/Os out of the completion queue into `batch`,
    /// with their status and, for passthrough, completion dword 0.
    /// Returns the number of completions.
    pub(crate) fn reap(&mut self, batch: &mut Vec<(BdevIo, IoStatus)>) -> usize {
        let mut n = 0;
        for cqe in self.ring.completion() {
            let Ok(idx) = u32::try_from(cqe.user_data()) else {
                continue;
            };
            if !self.slots.complete(idx) {
                continue;
            }
            self.in_kernel -= 1;
            n += 1;
            let Some(mut io) = self.slots.take(idx) else {
                continue;
            };
            if self.wants_cdw0[idx as usize] {
                io.set_nvme_cdw0(build::cdw0_of(cqe.big_cqe()[0]));
            }
            batch.push((io, build::status_of(cqe.result())));
        }
        n
    }

    /// Waits (blocking) for every request in the kernel, for at most
    /// `limit`; returns whether none is left.
    fn drain(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        let mut scratch = Vec::new();
        while self.in_kernel > 0 && start.elapsed() < limit {
            // Submit what is pushed, then wait in the kernel for one
            // completion (IOPOLL: poll until one).
            match self.ring.submit_and_wait(1) {
                Ok(_) => self.pushed = 0,
                Err(_) => std::thread::yield_now(),
            }
            scratch.clear();
            self.reap(&mut scratch);
            // Finished I/Os of a ring being dropped cannot be completed
            // any more (their thread is being torn down).
            for (io, _) in scratch.drain(..) {
                std::mem::forget(io);
            }
        }
        self.in_kernel == 0
    }
}

impl Drop for CmdRing {
    fn drop(&mut self) {
        // Unreachable in practice (an in-flight I/O keeps its channel, and
        // so this ring, alive), but memory safety must not depend on it.
        if !self.drain(Duration::from_secs(30)) {
            tracing::error!(
                in_kernel = self.in_kernel,
                "io_uring_cmd ring dropped with I/O in the kernel; leaking it and its buffers"
            );
            // The kernel may still write the ranges and buffers: keep all
            // of it (and the ring, `ManuallyDrop`) forever.
            self.slots.forget_ios();
            std::mem::forget(std::mem::take(&mut self.ranges));
            return;
        }
        // I/Os completed but never handed back: nobody can complete them
        // any more (their thread is being torn down).
        self.slots.forget_ios();
        // SAFETY: the ring is dropped once, here, after the kernel finished
        // every request; no field uses it after this.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
    }
}

/// The namespace id of an NVMe namespace device (`NVME_IOCTL_ID`).
pub(crate) fn namespace_id(fd: RawFd) -> io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument.
    let r = unsafe { libc::ioctl(fd, libc::c_ulong::from(NVME_IOCTL_ID)) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(r)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTTY))
}

/// What an admin command returned: the NVMe status field (0 = success)
/// and completion dword 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AdminResult {
    /// The status field (`cqe.res` style: 0 or positive).
    pub(crate) status: i32,
    /// Completion dword 0.
    pub(crate) cdw0: u32,
}

/// Runs admin command `sqe` through `NVME_IOCTL_ADMIN_CMD` on `fd` (a
/// namespace or controller char device) with `buf` as its data (blocking:
/// creation time, off the I/O path).
pub(crate) fn admin_cmd(fd: RawFd, sqe: &Sqe, buf: Option<&mut DmaBuf>) -> io::Result<AdminResult> {
    let (addr, len) = match buf {
        Some(b) => (
            b.as_mut_ptr() as u64,
            u32::try_from(b.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
        ),
        None => (0, 0),
    };
    let mut cmd = NvmeAdminCmd::from_sqe(sqe, addr, len);
    // SAFETY: the ioctl reads and writes one nvme_admin_cmd, a live local,
    // and transfers at most `len` bytes at `addr`, the live buffer `buf`
    // borrowed for this synchronous call.
    let r = unsafe { libc::ioctl(fd, libc::c_ulong::from(NVME_IOCTL_ADMIN_CMD), &raw mut cmd) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(AdminResult {
        status: r,
        cdw0: cmd.result,
    })
}

/// Whether the namespace `nsid` behind `fd` completes I/O on an `IOPOLL`
/// ring: one read of its first block on a throw-away polled ring, polled
/// for at most a second (blocking; once, at bdev creation). Without poll
/// queues the kernel fails such I/O or never completes it by polling.
pub(crate) fn probe_iopoll(file: &std::fs::File, nsid: u32, block_size: u32) -> io::Result<()> {
    let mut ring = Uring::builder().setup_iopoll().build(2)?;
    let len = block_size as usize;
    let mut buf = DmaBuf::alloc(len, len.max(4096))
        .map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
    let range = BlockRange::new(0, 1).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let sqe = Read::new(nsid, range).to_sqe(0);
    let cmd = NvmeUringCmd::from_sqe(&sqe, buf.as_mut_ptr() as u64, block_size);
    let entry = opcode::UringCmd80::new(types::Fd(file.as_raw_fd()), NVME_URING_CMD_IO)
        .cmd(cmd.to_cmd80())
        .build()
        .user_data(1);
    // SAFETY: `buf` outlives the request: below, this function either sees
    // its completion before dropping `buf`, or leaks `buf` and the ring.
    unsafe { ring.submission().push(&entry) }
        .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
    let start = Instant::now();
    let flags = io_uring::EnterFlags::GETEVENTS.bits();
    let mut to_submit = 1;
    let res = loop {
        // SAFETY: as in `CmdRing::enter`: our ring, no extra argument.
        match unsafe {
            ring.submitter()
                .enter::<libc::sigset_t>(to_submit, 0, flags, None)
        } {
            Ok(n) => to_submit -= u32::try_from(n).unwrap_or(0).min(to_submit),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => {
                if to_submit == 0 {
                    leak(ring, buf);
                }
                return Err(e);
            }
        }
        if let Some(c) = ring.completion().next() {
            break c.result();
        }
        if start.elapsed() > Duration::from_secs(1) {
            leak(ring, buf);
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
    };
    drop(buf);
    match build::status_of(res) {
        IoStatus::Success => Ok(()),
        IoStatus::Errno(e) => Err(io::Error::from_raw_os_error(e)),
        other => Err(io::Error::other(format!("polled read failed: {other:?}"))),
    }
}

/// Keeps a ring with a request in the kernel and its buffer forever.
fn leak(ring: Uring, buf: DmaBuf) {
    std::mem::forget(buf);
    std::mem::forget(ring);
}
