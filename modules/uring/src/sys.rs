//! The only unsafe code of the crate: an io_uring ring with its in-flight
//! table, whose slots own everything the kernel may touch, plus the probes
//! that read a file directly and `sched_yield`. (The file system calls std
//! does not wrap are `bdevkit_kfile`'s.)
//!
//! The table is the safety boundary: callers hand a [`BdevIo`] to
//! [`Ring::prep`], which builds the SQE from the I/O's own iovec array and
//! keeps the I/O (so its buffers) in the slot (`bdevkit_kfile`'s in-flight
//! table, [`Slots`]) whose index is the SQE's `user_data`. [`Ring::reap`]
//! gives it back only once the kernel posted the completion. `Drop` waits
//! for every request still in the kernel before the slots are dropped.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use bdevkit::bdev::module::{BdevIo, IoStatus, IoVec};
use bdevkit_kfile::slots::{self, Next, Op, Slots, Target};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// How an SQE names its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileRef {
    /// An index in the ring's registered file table.
    Fixed(u32),
    /// A plain descriptor (the table was full).
    Raw(RawFd),
}

/// How a ring was set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RingSetup {
    /// SQ entries (slots).
    pub(crate) entries: u32,
    /// `IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN`: completions are only
    /// posted when the owner enters the kernel (no interrupts of the reactor).
    pub(crate) defer_taskrun: bool,
    /// `IORING_SETUP_COOP_TASKRUN`.
    pub(crate) coop_taskrun: bool,
    /// `IORING_SETUP_SUBMIT_ALL`.
    pub(crate) submit_all: bool,
    /// `IORING_SETUP_TASKRUN_FLAG`: the kernel flags pending completion
    /// work in the SQ ring, so an idle poll can skip `io_uring_enter`.
    pub(crate) taskrun_flag: bool,
    /// `IORING_SETUP_SQPOLL` with this idle time in ms.
    pub(crate) sqpoll_idle_ms: Option<u32>,
    /// `IORING_SETUP_IOPOLL`.
    pub(crate) iopoll: bool,
}

/// Registered file table size per ring.
const FILE_TABLE: u32 = 256;
/// `IORING_REGISTER_RING_FDS` / `IORING_UNREGISTER_RING_FDS`.
const IORING_REGISTER_RING_FDS: libc::c_long = 20;
const IORING_UNREGISTER_RING_FDS: libc::c_long = 21;
/// `IORING_ENTER_REGISTERED_RING`.
const IORING_ENTER_REGISTERED_RING: u32 = 16;

/// `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}
const _: () = assert!(std::mem::size_of::<RsrcUpdate>() == 16);

/// An io_uring ring and its in-flight table (one per thread group).
pub(crate) struct Ring {
    // Field order is drop order: `Drop` drains the kernel first, then the
    // slots (the I/Os and their buffers) drop, then the ring is unmapped.
    /// The requests; a slot's file is its [`FileRef`].
    slots: Slots<FileRef>,
    files_free: Vec<u32>,
    in_kernel: u32,
    pushed: u32,
    /// The solo flag of each pushed, not yet submitted SQE, in SQ order.
    pending: std::collections::VecDeque<bool>,
    /// Completions of one [`Ring::reap`] as `(slot, result)`.
    reaped: Vec<(u32, i64)>,
    /// Slots of one [`Ring::reap`] pushed again.
    again: Vec<u32>,
    setup: RingSetup,
    /// The ring's index in this OS thread's registered ring table
    /// (`io_uring_enter` then skips the fd lookup); `None` if not
    /// registered. Rings are only entered from the thread that built them.
    reg_index: Option<u32>,
    ring: IoUring,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("setup", &self.setup)
            .field("in_kernel", &self.in_kernel)
            .finish_non_exhaustive()
    }
}

impl Ring {
    /// Builds a ring with exactly the flags of `setup`.
    pub(crate) fn build(setup: RingSetup) -> io::Result<Ring> {
        let mut b = IoUring::builder();
        b.setup_cqsize(setup.entries * 2);
        if setup.defer_taskrun {
            b.setup_single_issuer().setup_defer_taskrun();
        }
        if setup.coop_taskrun {
            b.setup_coop_taskrun();
        }
        if setup.submit_all {
            b.setup_submit_all();
        }
        if setup.taskrun_flag {
            b.setup_taskrun_flag();
        }
        if let Some(idle) = setup.sqpoll_idle_ms {
            b.setup_sqpoll(idle);
        }
        if setup.iopoll {
            b.setup_iopoll();
        }
        let ring = b.build(setup.entries)?;
        let files = match ring.submitter().register_files_sparse(FILE_TABLE) {
            Ok(()) => (0..FILE_TABLE).rev().collect(),
            Err(e) => {
                tracing::info!(error = %e, "io_uring: no registered file table; using plain fds");
                Vec::new()
            }
        };
        let n = ring.params().sq_entries();
        let reg_index = register_ring_fd(ring.as_raw_fd());
        Ok(Ring {
            slots: Slots::new(n, FileRef::Raw(-1)),
            files_free: files,
            in_kernel: 0,
            pushed: 0,
            pending: std::collections::VecDeque::with_capacity(n as usize),
            // The CQ has twice the SQ's entries.
            reaped: Vec::with_capacity(2 * n as usize),
            again: Vec::with_capacity(n as usize),
            setup,
            reg_index,
            ring,
        })
    }

    /// How the ring was set up.
    pub(crate) fn setup(&self) -> RingSetup {
        self.setup
    }

    /// Completions `eventfd` is signalled for.
    pub(crate) fn register_eventfd(&self, fd: RawFd) -> io::Result<()> {
        self.ring.submitter().register_eventfd(fd)
    }

    /// Puts `fd` in the registered file table; a plain reference when the
    /// table is full or missing.
    pub(crate) fn add_file(&mut self, fd: RawFd) -> FileRef {
        if let Some(idx) = self.files_free.pop() {
            match self.ring.submitter().register_files_update(idx, &[fd]) {
                Ok(_) => return FileRef::Fixed(idx),
                Err(e) => {
                    self.files_free.push(idx);
                    tracing::debug!(error = %e, "io_uring: register file failed");
                }
            }
        }
        FileRef::Raw(fd)
    }

    /// Removes a file added with [`Ring::add_file`] (requests still using
    /// it keep their own reference in the kernel).
    pub(crate) fn remove_file(&mut self, f: FileRef) {
        if let FileRef::Fixed(idx) = f {
            if self
                .ring
                .submitter()
                .register_files_update(idx, &[-1])
                .is_ok()
            {
                self.files_free.push(idx);
            }
        }
    }

    /// SQEs pushed since the last `io_uring_enter`.
    pub(crate) fn unsubmitted(&self) -> u32 {
        self.pushed
    }

    /// Requests in the kernel (pushed, not yet reaped).
    pub(crate) fn in_kernel(&self) -> u32 {
        self.in_kernel
    }

    /// Takes a free slot for `io` and pushes the SQE of its request on the
    /// bdev `t` ([`Slots::prep`]). Gives the I/O back when no slot is free.
    pub(crate) fn prep<X>(&mut self, io: BdevIo, t: &Target<FileRef, X>) -> Result<(), BdevIo> {
        let idx = self.slots.prep(io, t)?;
        self.push(idx, false);
        Ok(())
    }

    fn push(&mut self, idx: u32, use_rest: bool) {
        let s = self.slots.get(idx);
        let iovs: &[IoVec] = s.segments(use_rest);
        let sqe = match s.op {
            Op::Flush => match s.file {
                FileRef::Fixed(i) => opcode::Fsync::new(types::Fixed(i))
                    .flags(types::FsyncFlags::DATASYNC)
                    .build(),
                FileRef::Raw(fd) => opcode::Fsync::new(types::Fd(fd))
                    .flags(types::FsyncFlags::DATASYNC)
                    .build(),
            },
            op => rw_sqe(op, s.file, iovs, s.next_offset(), s.rw_flags),
        };
        let sqe = sqe.user_data(u64::from(idx));
        self.pending.push_back(s.solo);
        self.slots.mark_in_kernel(idx);
        self.in_kernel += 1;
        self.pushed += 1;
        // SAFETY: the SQE points at `iovs` (the slot's I/O's segment list or
        // the slot's `rest`) and, through it, at data owned by the slot's
        // BdevIo; the table keeps the I/O, and `rest` is not touched, until
        // the completion for `user_data == idx` is reaped (`Slots::take`
        // refuses InKernel slots, `requeue_rest` only runs on reaped ones),
        // and `Drop` waits for the kernel before the slots drop.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        // Never full: there are as many slots as SQ entries and each slot
        // has at most one SQE queued.
        debug_assert!(pushed.is_ok(), "invariant: one SQ entry per slot");
    }

    /// Submits every pushed SQE and (unless SQPOLL) runs the kernel's
    /// completion work, without waiting; returns the number of SQEs
    /// submitted. Consecutive SQEs for memory-backed files go in one
    /// `io_uring_enter`; an SQE for a device-backed file gets one of its
    /// own. (More than one SQE per enter is plugged in the block layer
    /// until all are built; on the virtio disk we measured, single
    /// submissions kept the device busier: 4 KiB randwrite QD 32 went from
    /// 70-90K to 100-138K IOPS. On tmpfs, batching doubles throughput.)
    pub(crate) fn enter(&mut self) -> io::Result<usize> {
        let to_submit = self.pushed;
        if self.setup.sqpoll_idle_ms.is_some() {
            // The kernel thread submits; wake it if it went to sleep, and
            // flush overflowed completions.
            self.pushed = 0;
            self.pending.clear();
            let sq_wakeup = self.ring.submission().need_wakeup();
            let overflow = self.ring.submission().cq_overflow();
            if sq_wakeup || overflow {
                self.ring.submit()?;
            }
            return Ok(to_submit as usize);
        }
        if to_submit == 0 && self.in_kernel == 0 {
            return Ok(0);
        }
        if to_submit == 0 && self.setup.taskrun_flag && !self.setup.iopoll {
            // Nothing to submit: enter only when the kernel flagged
            // completion work (or overflowed completions) for us. A poll
            // that waits on the device then costs a memory read, not a
            // system call.
            let sq = self.ring.submission();
            if !sq.taskrun() && !sq.cq_overflow() {
                return Ok(0);
            }
        }
        // GETEVENTS with min_complete 0 never waits; it runs the deferred
        // completion work (DEFER_TASKRUN) and polls (IOPOLL).
        let flags = io_uring::EnterFlags::GETEVENTS.bits();
        let mut total = 0usize;
        loop {
            let run = match self.pending.front() {
                Some(true) => 1,
                _ => self
                    .pending
                    .iter()
                    .take_while(|solo| !**solo)
                    .count()
                    .max(1),
            };
            let run = u32::try_from(run).unwrap_or(u32::MAX).min(self.pushed);
            let n = self.enter_raw(run, flags)?;
            let done = u32::try_from(n).unwrap_or(0).min(self.pushed);
            self.pushed -= done;
            self.pending
                .drain(..(done as usize).min(self.pending.len()));
            total += n;
            if self.pushed == 0 || n == 0 {
                return Ok(total);
            }
        }
    }

    /// One `io_uring_enter` submitting `to_submit` SQEs with `flags`.
    fn enter_raw(&mut self, to_submit: u32, flags: u32) -> io::Result<usize> {
        let n = match self.reg_index {
            Some(idx) => {
                // SAFETY: io_uring_enter on our own ring, named by its
                // index in this thread's registered ring table (rings are
                // entered only on the thread that built them), no extra
                // argument; the SQEs it consumes were built by `push`.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_io_uring_enter,
                        idx,
                        to_submit,
                        0u32,
                        flags | IORING_ENTER_REGISTERED_RING,
                        std::ptr::null::<libc::c_void>(),
                        0usize,
                    )
                };
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
                usize::try_from(r).unwrap_or(0)
            }
            // SAFETY: as above, with the ring's fd.
            None => unsafe {
                self.ring
                    .submitter()
                    .enter::<libc::sigset_t>(to_submit, 0, flags, None)
            }?,
        };
        Ok(n)
    }

    /// Collects posted completions as `(slot, result)` into `out`.
    fn collect(&mut self, out: &mut Vec<(u32, i64)>) -> usize {
        let mut n = 0;
        for cqe in self.ring.completion() {
            let cqe: cqueue::Entry = cqe;
            let Ok(idx) = u32::try_from(cqe.user_data()) else {
                continue;
            };
            if self.slots.complete(idx) {
                self.in_kernel -= 1;
                out.push((idx, i64::from(cqe.result())));
                n += 1;
            }
        }
        n
    }

    /// Collects posted completions and decides what each means
    /// ([`slots::finish_all`], errors by `on_error`): finished I/Os go to
    /// `batch`; the rest of a short transfer, and requests `on_error`
    /// retries, are pushed again. Returns the number of completions.
    pub(crate) fn reap(
        &mut self,
        batch: &mut Vec<(BdevIo, IoStatus)>,
        on_error: impl Fn(i32, i32) -> Next,
    ) -> usize {
        let mut reaped = std::mem::take(&mut self.reaped);
        let n = self.collect(&mut reaped);
        let mut again = std::mem::take(&mut self.again);
        slots::finish_all(&mut self.slots, &mut reaped, batch, &mut again, on_error);
        for idx in again.drain(..) {
            self.push(idx, true);
        }
        (self.reaped, self.again) = (reaped, again);
        n
    }
}

/// The SQE of a read or write: `Read`/`Write` for one segment (no iovec
/// import in the kernel), `Readv`/`Writev` otherwise.
fn rw_sqe(op: Op, f: FileRef, iovs: &[IoVec], off: u64, rw_flags: i32) -> squeue::Entry {
    let single = match iovs {
        [one] => u32::try_from(one.len).ok().map(|len| (one.base, len)),
        _ => None,
    };
    let cnt = u32::try_from(iovs.len()).unwrap_or(u32::MAX);
    // IoVec is #[repr(C)] {base, len}: the layout of struct iovec.
    let iov = iovs.as_ptr().cast::<libc::iovec>();
    macro_rules! build {
        ($fd:expr) => {
            match (op, single) {
                (Op::Write, Some((p, l))) => opcode::Write::new($fd, p, l)
                    .offset(off)
                    .rw_flags(rw_flags)
                    .build(),
                (Op::Write, None) => opcode::Writev::new($fd, iov, cnt)
                    .offset(off)
                    .rw_flags(rw_flags)
                    .build(),
                (_, Some((p, l))) => opcode::Read::new($fd, p, l)
                    .offset(off)
                    .rw_flags(rw_flags)
                    .build(),
                (_, None) => opcode::Readv::new($fd, iov, cnt)
                    .offset(off)
                    .rw_flags(rw_flags)
                    .build(),
            }
        };
    }
    match f {
        FileRef::Fixed(i) => build!(types::Fixed(i)),
        FileRef::Raw(fd) => build!(types::Fd(fd)),
    }
}

/// Registers `fd` in the calling thread's registered ring table.
fn register_ring_fd(fd: RawFd) -> Option<u32> {
    let mut up = RsrcUpdate {
        offset: u32::MAX,
        resv: 0,
        data: u64::try_from(fd).ok()?,
    };
    // SAFETY: IORING_REGISTER_RING_FDS reads and updates one
    // io_uring_rsrc_update, a live local.
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            fd,
            IORING_REGISTER_RING_FDS,
            &raw mut up,
            1u32,
        )
    };
    (r == 1).then_some(up.offset)
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Unreachable in practice (an in-flight I/O keeps its channel, and
        // so this ring, alive), but memory safety must not depend on it:
        // wait until the kernel is done with every buffer.
        let mut scratch = Vec::new();
        let mut tries = 0u32;
        while self.in_kernel > 0 && tries < 10_000 {
            tries += 1;
            if self.ring.submit_and_wait(1).is_err() {
                break;
            }
            scratch.clear();
            self.collect(&mut scratch);
        }
        if self.in_kernel > 0 {
            // Keep the buffers alive forever rather than free memory the
            // kernel may still write (`forget_ios` below).
            tracing::error!(
                in_kernel = self.in_kernel,
                "io_uring ring dropped with I/O in the kernel; leaking its buffers"
            );
        }
        if let Some(idx) = self.reg_index.take() {
            let mut up = RsrcUpdate {
                offset: idx,
                resv: 0,
                data: 0,
            };
            // SAFETY: IORING_UNREGISTER_RING_FDS reads one
            // io_uring_rsrc_update, a live local; without it the thread's
            // table would keep the ring alive until the thread exits.
            let _ = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_register,
                    self.ring.as_raw_fd(),
                    IORING_UNREGISTER_RING_FDS,
                    &raw mut up,
                    1u32,
                )
            };
        }
        // I/Os the kernel may still use (above), and ones it completed but
        // that were never handed back: nobody can complete them any more
        // (their thread is being torn down).
        self.slots.forget_ios();
    }
}

/// Whether `fd` serves polled I/O: one read of `block_size` bytes at offset 0
/// on a throw-away `IOPOLL` ring built like `base`, waited for (blocking;
/// called once at bdev creation).
pub(crate) fn probe_iopoll(fd: RawFd, block_size: u32, base: RingSetup) -> io::Result<()> {
    let mut setup = base;
    setup.entries = 4;
    setup.iopoll = true;
    setup.sqpoll_idle_ms = None;
    let mut ring = Ring::build(setup)?;
    let len = block_size as usize;
    let mut buf = bdevkit::dma::DmaBuf::alloc(len, len.max(4096))
        .map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
    let sqe = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), block_size)
        .offset(0)
        .build()
        .user_data(u64::MAX);
    // SAFETY: `buf` outlives the request: below, this function either sees
    // the completion before dropping `buf`, or leaks `buf`.
    unsafe { ring.ring.submission().push(&sqe) }
        .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
    let res = loop {
        match ring.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                std::mem::forget(buf);
                return Err(e);
            }
        }
        if let Some(c) = ring.ring.completion().next() {
            break c.result();
        }
    };
    drop(buf);
    if res < 0 {
        return Err(io::Error::from_raw_os_error(-res));
    }
    Ok(())
}

/// Whether the kernel can read `fd` without blocking (`FMODE_NOWAIT`):
/// one `preadv2(RWF_NOWAIT)` of a block at offset 0, which never blocks
/// (it fails with `EAGAIN` instead). io_uring serves files without it
/// (tmpfs, for one) in io-wq worker threads.
pub(crate) fn supports_nowait(fd: RawFd, block_size: u32) -> bool {
    let len = block_size as usize;
    let Ok(mut buf) = bdevkit::dma::DmaBuf::alloc(len, len.max(4096)) else {
        return true;
    };
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    // SAFETY: one iovec over `buf`, which outlives this synchronous call.
    let r = unsafe { libc::preadv2(fd, &raw const iov, 1, 0, libc::RWF_NOWAIT) };
    !(r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP))
}

/// Gives the CPU to another runnable task on this CPU, if any (returns at
/// once otherwise).
pub(crate) fn yield_cpu() {
    // SAFETY: sched_yield takes no arguments and cannot fail.
    unsafe { libc::sched_yield() };
}
