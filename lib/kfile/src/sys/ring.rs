//! The unsafe code of the io_uring [`Ring`] (see [`crate::ring`]): its
//! entries handed to the kernel, `io_uring_enter`, the thread's registered
//! ring table, and the probes that send one read on a throw-away ring.
//!
//! The in-flight table is the safety boundary. Every entry this file
//! pushes is built here, from slot memory: the buffers and iovec array of
//! the slot's I/O, the segments left after a short transfer (the slot's
//! `rest`), or the slot's [`Entries::Aux`] (an NVMe command's ranges).
//! From the push until the completion for `user_data == slot` is reaped
//! that memory neither moves nor goes away: [`Slots::take`] refuses slots
//! in the kernel, `requeue_rest` wants a reaped one, a slot's aux is
//! written only while the slot is free (just after [`Slots::prep`]), and
//! `Drop` waits for the kernel before anything is freed (or leaks it all).
//! The table is private to the ring, so nothing else changes a slot's
//! state.

use std::collections::VecDeque;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use bdevkit::bdev::module::{BdevIo, IoStatus, IoVec, ModuleIo};
use bdevkit::dma::DmaBuf;
use bdevkit_nvme_spec::io::{BlockRange, DsmRange, Read};
use bdevkit_nvme_spec::linux::{NvmeUringCmd, NVME_URING_CMD_IO};
use bdevkit_nvme_spec::Command;
use io_uring::cqueue::EntryMarker as _;
use io_uring::squeue::EntryMarker as _;
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::entries::{
    self as ring, Data, Entries, FileIo, FileRef, NvmeCmd, NvmeCommand, RingSetup,
};
use crate::slots::{self, Next, Op, Slots, Target};

/// `IORING_REGISTER_RING_FDS` / `IORING_UNREGISTER_RING_FDS`.
const IORING_REGISTER_RING_FDS: libc::c_long = 20;
const IORING_UNREGISTER_RING_FDS: libc::c_long = 21;
/// `IORING_ENTER_REGISTERED_RING`.
const IORING_ENTER_REGISTERED_RING: u32 = 16;
/// How long dropping a ring waits for the kernel to finish its requests.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// How long a probe waits for its read.
const PROBE_LIMIT: Duration = Duration::from_secs(1);

/// `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}
const _: () = assert!(std::mem::size_of::<RsrcUpdate>() == 16);

/// An io_uring ring and its in-flight table (one or two per thread
/// group), with [`FileIo`] or [`NvmeCmd`] entries.
pub struct Ring<K: Entries> {
    // Field order is drop order, but `Drop` does the work: it drains the
    // kernel first, then the slots (the I/Os, their buffers) and the aux
    // memory go, then the ring; if the kernel never finishes, all of it
    // is leaked.
    /// The requests; a slot's file is the entry's file.
    slots: Slots<K::File>,
    /// Per slot, memory the kernel may read (NVMe: the ranges).
    aux: Box<[K::Aux]>,
    files_free: Vec<u32>,
    in_kernel: u32,
    pushed: u32,
    /// The solo flag of each pushed, not yet submitted entry, in SQ order.
    pending: VecDeque<bool>,
    /// Completions of one [`Ring::reap`] as `(slot, result)`.
    reaped: Vec<(u32, i64)>,
    /// Slots of one [`Ring::reap`] pushed again.
    again: Vec<u32>,
    setup: RingSetup,
    /// The last `io_uring_enter` of [`Ring::enter_logged`] failed (logged
    /// once per failure streak).
    enter_failed: bool,
    /// The ring's index in this OS thread's registered ring table
    /// (`io_uring_enter` then skips the fd lookup); `None` if not
    /// registered. Rings are only entered from the thread that built them.
    reg_index: Option<u32>,
    /// Dropped by `Drop` once the kernel is done with every request;
    /// leaked otherwise.
    ring: ManuallyDrop<IoUring<K::Sqe, K::Cqe>>,
}

impl<K: Entries> std::fmt::Debug for Ring<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("entries", &K::WHAT)
            .field("setup", &self.setup)
            .field("in_kernel", &self.in_kernel)
            .finish_non_exhaustive()
    }
}

impl<K: Entries> Ring<K> {
    /// Builds a ring with exactly the flags of `setup` (its `entries` are
    /// what the kernel gave: a power of two at least as large).
    ///
    /// # Errors
    /// What `io_uring_setup` reports (`EINVAL` for flags this kernel does
    /// not have).
    pub fn build(setup: RingSetup) -> io::Result<Ring<K>> {
        let mut b = IoUring::<K::Sqe, K::Cqe>::builder();
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
        let files = if K::FILE_TABLE == 0 {
            Vec::new()
        } else {
            match ring.submitter().register_files_sparse(K::FILE_TABLE) {
                Ok(()) => (0..K::FILE_TABLE).rev().collect(),
                Err(e) => {
                    tracing::info!(error = %e, "io_uring: no registered file table; using plain fds");
                    Vec::new()
                }
            }
        };
        let n = ring.params().sq_entries();
        let reg_index = register_ring_fd(ring.as_raw_fd());
        Ok(Ring {
            slots: Slots::new(n, K::NO_FILE),
            aux: vec![K::aux(); n as usize].into_boxed_slice(),
            files_free: files,
            in_kernel: 0,
            pushed: 0,
            pending: VecDeque::with_capacity(n as usize),
            // The CQ has twice the SQ's entries.
            reaped: Vec::with_capacity(2 * n as usize),
            again: Vec::with_capacity(n as usize),
            setup: RingSetup {
                entries: n,
                ..setup
            },
            enter_failed: false,
            reg_index,
            ring: ManuallyDrop::new(ring),
        })
    }

    /// How the ring was set up.
    #[must_use]
    pub fn setup(&self) -> RingSetup {
        self.setup
    }

    /// Completions signal `fd` (an eventfd).
    ///
    /// # Errors
    /// What `IORING_REGISTER_EVENTFD` reports.
    pub fn register_eventfd(&self, fd: RawFd) -> io::Result<()> {
        self.ring.submitter().register_eventfd(fd)
    }

    /// The most completions one reap hands back (the CQ's size: twice
    /// the SQ's entries), for sizing a reused batch.
    #[must_use]
    pub fn cq_entries(&self) -> usize {
        2 * self.setup.entries as usize
    }

    /// Entries pushed since the last `io_uring_enter`.
    #[must_use]
    pub fn unsubmitted(&self) -> u32 {
        self.pushed
    }

    /// Requests in the kernel (pushed, not yet reaped).
    #[must_use]
    pub fn in_kernel(&self) -> u32 {
        self.in_kernel
    }

    /// Pushes `sqe`, the request of slot `idx` (prepared), marking the
    /// slot in the kernel; `solo`: submit it in an `io_uring_enter` of
    /// its own.
    ///
    /// # Safety
    /// Every address in `sqe` is memory of slot `idx` (the buffers or
    /// segment list of its I/O, its `rest`, its aux), which the slot keeps
    /// until the completion for `user_data == idx` is reaped.
    unsafe fn push(&mut self, idx: u32, mut sqe: K::Sqe, solo: bool) {
        sqe.set_user_data(u64::from(idx));
        self.pending.push_back(solo);
        self.slots.mark_in_kernel(idx);
        self.in_kernel += 1;
        self.pushed += 1;
        // SAFETY: the caller's duty: the entry points at memory the slot
        // keeps until its completion is reaped, and `Drop` waits for the
        // kernel before the slots drop (module doc).
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        // Never full: there are as many slots as SQ entries and each slot
        // has at most one entry queued.
        debug_assert!(pushed.is_ok(), "invariant: one SQ entry per slot");
    }

    /// Submits every pushed entry and (unless SQPOLL) runs the kernel's
    /// completion work, without waiting; returns the number of entries
    /// submitted. Consecutive entries for memory-backed files go in one
    /// `io_uring_enter`; an entry for a device-backed file (`solo`) gets
    /// one of its own. (More than one entry per enter is plugged in the
    /// block layer until all are built; on the virtio disk we measured,
    /// single submissions kept the device busier: 4 KiB randwrite QD 32
    /// went from 70-90K to 100-138K IOPS. On tmpfs, batching doubles
    /// throughput.)
    ///
    /// # Errors
    /// What `io_uring_enter` reports; what it did not submit stays pushed.
    pub fn enter(&mut self) -> io::Result<usize> {
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

    /// [`Ring::enter`] for a poller: returns whether it did or found work.
    /// A failure counts as work (the next poll retries); it is logged once
    /// until an enter succeeds again, and not at all when transient
    /// (`EINTR`, `EAGAIN`, `EBUSY`).
    pub fn enter_logged(&mut self) -> bool {
        match self.enter() {
            Ok(n) => {
                self.enter_failed = false;
                n > 0
            }
            Err(e) => {
                let transient = matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                );
                if !transient && !self.enter_failed {
                    self.enter_failed = true;
                    tracing::warn!(error = %e, ring = K::WHAT, "io_uring_enter failed; retrying");
                }
                true
            }
        }
    }

    /// One `io_uring_enter` submitting `to_submit` entries with `flags`.
    fn enter_raw(&mut self, to_submit: u32, flags: u32) -> io::Result<usize> {
        let n = match self.reg_index {
            Some(idx) => {
                // SAFETY: io_uring_enter on our own ring, named by its
                // index in this thread's registered ring table (rings are
                // entered only on the thread that built them), no extra
                // argument; the entries it consumes were built by `push`.
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

    /// Marks the slot of each posted completion reaped and calls `f` with
    /// the table, the slot, its aux and the completion; returns their
    /// number. Completions of unknown or stale slots are skipped.
    #[inline]
    fn collect(&mut self, mut f: impl FnMut(&mut Slots<K::File>, u32, &K::Aux, &K::Cqe)) -> usize {
        let mut n = 0;
        for cqe in self.ring.completion() {
            let Ok(idx) = u32::try_from(cqe.user_data()) else {
                continue;
            };
            if self.slots.complete(idx) {
                self.in_kernel -= 1;
                n += 1;
                f(&mut self.slots, idx, &self.aux[idx as usize], &cqe);
            }
        }
        n
    }

    /// Waits (blocking) for every request in the kernel, for at most
    /// `limit`; returns whether none is left.
    fn drain(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while self.in_kernel > 0 && start.elapsed() < limit {
            // Submit what is pushed, then wait in the kernel for one
            // completion (IOPOLL: poll until one).
            match self.ring.submit_and_wait(1) {
                Ok(_) => {
                    self.pushed = 0;
                    self.pending.clear();
                }
                Err(_) => std::thread::yield_now(),
            }
            self.collect(|_, _, _, _| {});
        }
        self.in_kernel == 0
    }
}

impl Ring<FileIo> {
    /// Puts `fd` in the registered file table; a plain reference when the
    /// table is full or missing.
    pub fn add_file(&mut self, fd: RawFd) -> FileRef {
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
    pub fn remove_file(&mut self, f: FileRef) {
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

    /// Takes a free slot for `io` (a read, a write or a flush) and pushes
    /// its entry for the file of `t` ([`Slots::prep`]): `READ`/`WRITE` for
    /// one segment, `READV`/`WRITEV` for several, `FSYNC` with `DATASYNC`
    /// for a flush.
    ///
    /// # Errors
    /// The I/O, when no slot is free.
    #[inline]
    pub fn prep<X>(&mut self, io: BdevIo, t: &Target<FileRef, X>) -> Result<(), BdevIo> {
        let idx = self.slots.prep(io, t)?;
        self.push_file(idx, false);
        Ok(())
    }

    /// Pushes the entry of slot `idx`: its whole request, or with
    /// `use_rest` what a short transfer left.
    fn push_file(&mut self, idx: u32, use_rest: bool) {
        let s = self.slots.get(idx);
        let sqe = match s.op {
            Op::Flush => match s.file {
                FileRef::Fixed(i) => opcode::Fsync::new(types::Fixed(i))
                    .flags(types::FsyncFlags::DATASYNC)
                    .build(),
                FileRef::Raw(fd) => opcode::Fsync::new(types::Fd(fd))
                    .flags(types::FsyncFlags::DATASYNC)
                    .build(),
            },
            op => rw_sqe(
                op,
                s.file,
                s.segments(use_rest),
                s.next_offset(),
                s.rw_flags,
            ),
        };
        let solo = s.solo;
        // SAFETY: the entry points at the slot's segments (its I/O's
        // segment list, or its `rest`) and through them at the I/O's
        // buffers, all memory of slot `idx`.
        unsafe { self.push(idx, sqe, solo) };
    }

    /// Collects posted completions and decides what each means
    /// ([`slots::finish_all`], errors by `on_error`): finished I/Os go to
    /// `batch`; the rest of a short transfer, and requests `on_error`
    /// retries, are pushed again. Returns the number of completions.
    pub fn reap(
        &mut self,
        batch: &mut Vec<(BdevIo, IoStatus)>,
        on_error: impl Fn(i32, i32) -> Next,
    ) -> usize {
        let mut reaped = std::mem::take(&mut self.reaped);
        let n = self.collect(|_, idx, (), cqe| reaped.push((idx, i64::from(cqe.result()))));
        let mut again = std::mem::take(&mut self.again);
        slots::finish_all(&mut self.slots, &mut reaped, batch, &mut again, on_error);
        for idx in again.drain(..) {
            self.push_file(idx, true);
        }
        (self.reaped, self.again) = (reaped, again);
        n
    }
}

impl Ring<NvmeCmd> {
    /// Puts `io` in a free slot and pushes NVMe command `c` for it on
    /// `fd` (the char device `c.dest` names), with its data as `c.data`
    /// says: the I/O's segments (a plain buffer, or the iovec array with
    /// the `_VEC` command), or the first `n` of `ranges`, copied into the
    /// slot. The command's own data and metadata fields are ignored.
    ///
    /// # Errors
    /// The I/O, when no slot is free.
    #[inline]
    pub fn prep_cmd(
        &mut self,
        io: BdevIo,
        fd: RawFd,
        c: &NvmeCommand,
        ranges: &[DsmRange; ring::SLOT_RANGES],
    ) -> Result<(), BdevIo> {
        // The table's file-oriented fields (offset, transfer flags) are
        // not used for NVMe commands: the slot only owns the I/O.
        let target = Target {
            file: fd,
            block_shift: 0,
            rw_flags: 0,
            solo: false,
            extra: (),
        };
        let idx = self.slots.prep(io, &target)?;
        let aux = &mut self.aux[idx as usize];
        aux.wants_cdw0 = c.wants_cdw0;
        let (cmd, cmd_op) = match c.data {
            Data::None => (ring::without_data(c.cmd), ring::cmd_op(c.dest, false)),
            Data::Segments => {
                ring::with_segments(c.cmd, c.dest, self.slots.get(idx).segments(false))
            }
            Data::Ranges(n) => {
                // The slot was free until `prep` above: nothing in the
                // kernel reads its ranges.
                aux.ranges = *ranges;
                let cmd = ring::with_ranges(c.cmd, &aux.ranges, n);
                (cmd, ring::cmd_op(c.dest, false))
            }
        };
        let sqe = cmd_sqe(fd, cmd_op, &cmd);
        // SAFETY: the command's data pointer (the only address in it: the
        // metadata pointer is cleared) is the buffer or iovec array of the
        // slot's I/O, or the slot's ranges.
        unsafe { self.push(idx, sqe, false) };
        Ok(())
    }

    /// Takes the finished I/Os out of the completion queue into `batch`,
    /// with their status (`status_of` the completion's result) and, for
    /// passthrough, completion dword 0. Returns the number of completions.
    pub fn reap_cmd(
        &mut self,
        batch: &mut Vec<(BdevIo, IoStatus)>,
        status_of: impl Fn(i32) -> IoStatus,
    ) -> usize {
        self.collect(|slots, idx, aux, cqe| {
            if let Some(mut io) = slots.take(idx) {
                if aux.wants_cdw0 {
                    io.set_nvme_cdw0(NvmeCmd::cdw0(cqe));
                }
                batch.push((io, status_of(cqe.result())));
            }
        })
    }
}

impl<K: Entries> Drop for Ring<K> {
    fn drop(&mut self) {
        // Unreachable in practice (an in-flight I/O keeps its channel, and
        // so this ring, alive), but memory safety must not depend on it:
        // wait until the kernel is done with every buffer.
        let drained = self.drain(DRAIN_LIMIT);
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
        // I/Os completed but never handed back, and (if the kernel never
        // finished) ones it may still use: nobody can complete them any
        // more (their thread is being torn down).
        self.slots.forget_ios();
        if !drained {
            tracing::error!(
                in_kernel = self.in_kernel,
                ring = K::WHAT,
                "io_uring ring dropped with I/O in the kernel; leaking it and its buffers"
            );
            // The kernel may still use the aux memory and the ring: keep
            // them forever.
            std::mem::forget(std::mem::take(&mut self.aux));
            return;
        }
        // SAFETY: the ring is dropped once, here, after the kernel finished
        // every request; no field uses it after this.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
    }
}

/// The entry of a read or write: `Read`/`Write` for one segment (no iovec
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

/// The entry of NVMe command `cmd` on `fd`.
fn cmd_sqe(fd: RawFd, cmd_op: u32, cmd: &NvmeUringCmd) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), cmd_op)
        .cmd(cmd.to_cmd80())
        .build()
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

/// Whether `fd` serves polled I/O: one read of `block_size` bytes at
/// offset 0 on a throw-away `IOPOLL` ring built like `base` (blocking, at
/// most a second; called once at bdev creation).
///
/// # Errors
/// What building the ring reports, the read's error, or `ETIMEDOUT`.
pub fn probe_iopoll_file(fd: RawFd, block_size: u32, base: RingSetup) -> io::Result<()> {
    let setup = RingSetup {
        entries: 4,
        iopoll: true,
        sqpoll_idle_ms: None,
        ..base
    };
    // SAFETY: the entry reads `len` bytes into the buffer it is given.
    let res = unsafe {
        probe_read::<FileIo>(setup, block_size, |buf, len| {
            opcode::Read::new(types::Fd(fd), buf, len).offset(0).build()
        })
    }?;
    if res < 0 {
        return Err(io::Error::from_raw_os_error(-res));
    }
    Ok(())
}

/// Whether the NVMe namespace `nsid` behind `fd` (its generic char
/// device) completes I/O on an `IOPOLL` ring: one read of its first block
/// on a throw-away polled ring, polled for at most a second (blocking;
/// once, at bdev creation). Returns the completion's result (0, an NVMe
/// status, or `-errno`). Without poll queues the kernel fails such I/O or
/// never completes it by polling.
///
/// # Errors
/// What building the ring reports, or `ETIMEDOUT`.
pub fn probe_iopoll_nvme(fd: RawFd, nsid: u32, block_size: u32) -> io::Result<i32> {
    let setup = RingSetup {
        entries: 2,
        iopoll: true,
        ..RingSetup::default()
    };
    let range = BlockRange::new(0, 1).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let sqe = Read::new(nsid, range).to_sqe(0);
    // SAFETY: the command reads `len` bytes into the buffer it is given
    // (its only address: `from_sqe` leaves no metadata pointer).
    unsafe {
        probe_read::<NvmeCmd>(setup, block_size, |buf, len| {
            let cmd = NvmeUringCmd::from_sqe(&sqe, buf as u64, len);
            cmd_sqe(fd, NVME_URING_CMD_IO, &cmd)
        })
    }
}

/// Sends the read `make(buffer, len)` builds, of `len` bytes into a
/// buffer of its own, on a throw-away ring set up as `setup`, and waits
/// for its completion for at most [`PROBE_LIMIT`] (a polled ring is
/// polled); returns the completion's result. On failure after the
/// submission the ring and the buffer are leaked, since the kernel may
/// still write it.
///
/// # Safety
/// The entry `make` returns touches no memory but the `len` bytes at the
/// pointer it is given.
unsafe fn probe_read<K: Entries>(
    setup: RingSetup,
    len: u32,
    make: impl FnOnce(*mut u8, u32) -> K::Sqe,
) -> io::Result<i32> {
    let mut ring = Ring::<K>::build(setup)?;
    let size = len as usize;
    let mut buf = DmaBuf::alloc(size, size.max(4096))
        .map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
    let mut sqe = make(buf.as_mut_ptr(), len);
    sqe.set_user_data(u64::MAX);
    // SAFETY: `buf` outlives the request: below, this function either
    // sees its completion before dropping `buf`, or leaks `buf` and the
    // ring (the caller's duty covers the rest of the entry).
    unsafe { ring.ring.submission().push(&sqe) }
        .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
    let start = Instant::now();
    let flags = io_uring::EnterFlags::GETEVENTS.bits();
    let mut to_submit = 1;
    let leak = |ring: Ring<K>, buf: DmaBuf| {
        std::mem::forget(buf);
        std::mem::forget(ring);
    };
    let res = loop {
        // SAFETY: as in `Ring::enter`: our ring, no extra argument.
        match unsafe {
            ring.ring
                .submitter()
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
        if let Some(c) = ring.ring.completion().next() {
            let c: cqueue::Entry = c.into();
            break c.result();
        }
        if start.elapsed() > PROBE_LIMIT {
            leak(ring, buf);
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
    };
    drop(buf);
    Ok(res)
}
