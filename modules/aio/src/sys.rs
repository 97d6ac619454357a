//! The only unsafe code of the crate: Linux AIO through raw syscalls, the
//! in-flight table whose slots own everything the kernel may touch, and the
//! user-space reaping of the completion ring. (The file system calls std
//! does not wrap are `bdevkit_kfile`'s.)
//!
//! The table is the safety boundary. Its slots (`bdevkit_kfile`'s in-flight
//! table, [`Slots`]) own each request's [`BdevIo`] (and so the data
//! buffers and the iovec array the iocb points at) from [`Table::prep`]
//! until the kernel reported its completion and [`Table::take`] hands it
//! back; `take` refuses while the kernel may still use it. The iocbs live in
//! a boxed slice beside the slots that never reallocates. `io_destroy` (in
//! `Drop`) waits for every request the kernel still holds before the slots
//! are dropped.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

use bdevkit::bdev::module::{BdevIo, IoStatus, IoVec};
use bdevkit_kfile::slots::{self, Next, Op, Slot, Slots, Target};

// ---- kernel ABI (include/uapi/linux/aio_abi.h) ----

/// `IOCB_CMD_PREAD`.
const IOCB_CMD_PREAD: u16 = 0;
/// `IOCB_CMD_PWRITE`.
const IOCB_CMD_PWRITE: u16 = 1;
/// `IOCB_CMD_PREADV`.
const IOCB_CMD_PREADV: u16 = 7;
/// `IOCB_CMD_PWRITEV`.
const IOCB_CMD_PWRITEV: u16 = 8;
/// `IOCB_CMD_FDSYNC`.
const IOCB_CMD_FDSYNC: u16 = 3;
/// `IOCB_FLAG_RESFD`: signal `aio_resfd` (an eventfd) on completion.
const IOCB_FLAG_RESFD: u32 = 1;
/// `AIO_RING_MAGIC`: the completion ring layout this code knows.
const AIO_RING_MAGIC: u32 = 0xa10a_10a1;

/// `struct iocb` (little-endian field order of `aio_key`/`aio_rw_flags`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}
const _: () = assert!(std::mem::size_of::<Iocb>() == 64);
#[cfg(not(target_endian = "little"))]
compile_error!("the iocb layout here is the little-endian one");

/// `struct io_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}
const _: () = assert!(std::mem::size_of::<IoEvent>() == 32);

/// `struct aio_ring`, the header of the completion ring the kernel maps at
/// the address that is the context id.
#[repr(C)]
struct AioRing {
    id: u32,
    nr: u32,
    head: u32,
    tail: u32,
    magic: u32,
    compat_features: u32,
    incompat_features: u32,
    header_length: u32,
}

fn syscall_result(r: libc::c_long) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        usize::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
    }
}

/// Outcome of [`Table::submit`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Submitted {
    /// Requests the kernel accepted.
    pub(crate) accepted: usize,
    /// The kernel is out of resources (`EAGAIN`): the rest stays queued.
    pub(crate) again: bool,
}

/// An AIO context and its in-flight table (one per thread group).
#[derive(Debug)]
pub(crate) struct Table {
    ctx: u64,
    /// Whether completions can be read from the mapped ring (else
    /// `io_getevents`).
    user_reap: bool,
    /// The requests; a slot's file is its descriptor.
    slots: Slots<RawFd>,
    /// The iocb of each slot, same index.
    iocbs: Box<[Iocb]>,
    queued: Vec<u32>,
    ptrs: Vec<*mut Iocb>,
    events: Box<[IoEvent]>,
    /// Completions of one [`Table::reap`] as `(slot, result)`.
    reaped: Vec<(u32, i64)>,
    /// Slots of one [`Table::reap`] queued again.
    again: Vec<u32>,
    resfd: Option<RawFd>,
    in_kernel: u32,
}

impl Table {
    /// `io_setup(depth)` plus a table of `depth` slots. With `resfd`, every
    /// completion signals that eventfd.
    pub(crate) fn new(depth: u32, resfd: Option<RawFd>) -> io::Result<Table> {
        let mut ctx: u64 = 0;
        // SAFETY: io_setup writes one aio_context_t (u64) to the pointer,
        // which points at a live local.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, depth, &raw mut ctx) };
        syscall_result(r)?;
        let ring = ctx as *const AioRing;
        // SAFETY: on success the context id is the address of the ring the
        // kernel mapped into this process; it stays mapped until io_destroy
        // (in Drop). Only the immutable header fields are read here.
        let user_reap = unsafe {
            (*ring).magic == AIO_RING_MAGIC
                && (*ring).incompat_features == 0
                && (*ring).header_length as usize == std::mem::size_of::<AioRing>()
        };
        let n = depth as usize;
        Ok(Table {
            ctx,
            user_reap,
            slots: Slots::new(depth, -1),
            iocbs: vec![Iocb::default(); n].into_boxed_slice(),
            queued: Vec::with_capacity(n),
            ptrs: Vec::with_capacity(n),
            events: vec![IoEvent::default(); n].into_boxed_slice(),
            reaped: Vec::with_capacity(n),
            again: Vec::with_capacity(n),
            resfd,
            in_kernel: 0,
        })
    }

    /// Requests the kernel holds.
    pub(crate) fn in_kernel(&self) -> u32 {
        self.in_kernel
    }

    /// Requests prepared and waiting for [`Table::submit`].
    pub(crate) fn queued(&self) -> usize {
        self.queued.len()
    }

    /// The slot `idx`.
    pub(crate) fn slot(&self, idx: u32) -> &Slot<RawFd> {
        self.slots.get(idx)
    }

    /// Takes a free slot for `io` and queues its request on the bdev `t`
    /// ([`Slots::prep`]). Gives the I/O back when no slot is free.
    pub(crate) fn prep(&mut self, io: BdevIo, t: &Target<RawFd>) -> Result<(), BdevIo> {
        let idx = self.slots.prep(io, t)?;
        self.fill_iocb(idx, false);
        Ok(())
    }

    fn fill_iocb(&mut self, idx: u32, use_rest: bool) {
        let resfd = self.resfd;
        let s = self.slots.get(idx);
        let iovs: &[IoVec] = s.segments(use_rest);
        // One segment: PREAD/PWRITE name the buffer directly (the kernel
        // imports no iovec); several: PREADV/PWRITEV with the array.
        let (opcode, buf, nbytes) = match (s.op, iovs) {
            (Op::Read, [one]) => (IOCB_CMD_PREAD, one.base as u64, one.len as u64),
            (Op::Write, [one]) => (IOCB_CMD_PWRITE, one.base as u64, one.len as u64),
            (Op::Read, _) => (IOCB_CMD_PREADV, iovs.as_ptr() as u64, iovs.len() as u64),
            (Op::Write, _) => (IOCB_CMD_PWRITEV, iovs.as_ptr() as u64, iovs.len() as u64),
            (Op::Flush, _) => (IOCB_CMD_FDSYNC, 0, 0),
        };
        self.iocbs[idx as usize] = Iocb {
            aio_data: u64::from(idx),
            aio_rw_flags: s.rw_flags,
            aio_lio_opcode: opcode,
            aio_fildes: u32::try_from(s.file).unwrap_or(u32::MAX),
            aio_buf: buf,
            aio_nbytes: nbytes,
            aio_offset: i64::try_from(s.next_offset()).unwrap_or(i64::MAX),
            aio_flags: if resfd.is_some() { IOCB_FLAG_RESFD } else { 0 },
            aio_resfd: resfd.and_then(|f| u32::try_from(f).ok()).unwrap_or(0),
            ..Iocb::default()
        };
        self.queued.push(idx);
    }

    /// Hands every queued request to the kernel: consecutive requests to
    /// memory-backed files in one `io_submit`, each request to a
    /// device-backed file in one of its own. (A batch is plugged in the
    /// block layer until the whole batch is built; on the virtio disk we
    /// measured, single submissions kept the device busier: 4 KiB randwrite
    /// QD 32 went from 78-99K to 115-128K IOPS. On tmpfs the I/O runs
    /// inside `io_submit` and batching is the win.) A request the kernel
    /// refuses with an error other than `EAGAIN` goes to `failed` with its
    /// errno; the others stay queued on `EAGAIN`.
    pub(crate) fn submit(&mut self, failed: &mut Vec<(u32, i32)>) -> Submitted {
        let mut out = Submitted::default();
        let mut first = 0;
        while first < self.queued.len() {
            self.ptrs.clear();
            let solo = self.slots.get(self.queued[first]).solo;
            for &idx in &self.queued[first..] {
                if !self.ptrs.is_empty() && (solo || self.slots.get(idx).solo) {
                    break;
                }
                self.ptrs.push(&raw mut self.iocbs[idx as usize]);
            }
            let nr = libc::c_long::try_from(self.ptrs.len()).unwrap_or(libc::c_long::MAX);
            // SAFETY: every pointer points at the iocb of a Queued slot in
            // `self.iocbs`, a boxed slice that is never reallocated. Each
            // iocb's buffer or iovec array is the slot's segments (its I/O's
            // segment list or the slot's `rest`), and the data behind it is
            // owned by the slot's BdevIo; the table keeps both until the
            // kernel reports the completion (`Slots::take` refuses InKernel
            // slots, the segments change only for reaped ones) and
            // io_destroy in Drop waits for any request still in the kernel.
            let r =
                unsafe { libc::syscall(libc::SYS_io_submit, self.ctx, nr, self.ptrs.as_mut_ptr()) };
            match syscall_result(r) {
                Ok(n) => {
                    for &idx in &self.queued[first..first + n] {
                        self.slots.mark_in_kernel(idx);
                    }
                    self.in_kernel += u32::try_from(n).unwrap_or(u32::MAX);
                    out.accepted += n;
                    first += n;
                    if n == 0 {
                        out.again = true;
                        break;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    out.again = true;
                    break;
                }
                Err(e) => {
                    // The first request was refused; the ones after it were
                    // not looked at.
                    let idx = self.queued[first];
                    self.slots.refuse(idx);
                    failed.push((idx, e.raw_os_error().unwrap_or(libc::EIO)));
                    first += 1;
                }
            }
        }
        self.queued.drain(..first);
        out
    }

    /// Collects finished requests (without a system call when the ring
    /// layout is known) and decides what each means
    /// ([`slots::finish_all`], errors by `on_error`): finished I/Os go to
    /// `batch`; the rest of a short transfer, and requests `on_error`
    /// retries, are queued again. Returns the number of events read.
    pub(crate) fn reap(
        &mut self,
        batch: &mut Vec<(BdevIo, IoStatus)>,
        on_error: impl Fn(i32, i32) -> Next,
    ) -> usize {
        if self.in_kernel == 0 {
            return 0;
        }
        let n = if self.user_reap {
            self.reap_ring()
        } else {
            self.reap_syscall()
        };
        for ev in &self.events[..n] {
            let Ok(idx) = u32::try_from(ev.data) else {
                continue;
            };
            if self.slots.complete(idx) {
                self.in_kernel -= 1;
                self.reaped.push((idx, ev.res));
            }
        }
        let mut again = std::mem::take(&mut self.again);
        slots::finish_all(
            &mut self.slots,
            &mut self.reaped,
            batch,
            &mut again,
            on_error,
        );
        for idx in again.drain(..) {
            self.fill_iocb(idx, true);
        }
        self.again = again;
        n
    }

    fn reap_ring(&mut self) -> usize {
        let ring = self.ctx as *mut AioRing;
        // SAFETY: the ring stays mapped until io_destroy (Drop). `nr` and
        // `header_length` never change after io_setup. `tail` is written by
        // the kernel on completion, so it is read atomically with Acquire
        // ordering, which makes the events before it visible; `head` is only
        // written by us (the kernel writes it only inside io_getevents,
        // which this context never calls when user_reap is set).
        let (nr, head, tail, events) = unsafe {
            let nr = (*ring).nr;
            let head = (*ring).head;
            let tail = AtomicU32::from_ptr(&raw mut (*ring).tail).load(Ordering::Acquire);
            let events = ring
                .cast::<u8>()
                .add((*ring).header_length as usize)
                .cast::<IoEvent>();
            (nr, head, tail, events)
        };
        if nr == 0 || head == tail || head >= nr || tail >= nr {
            return 0;
        }
        let avail = if tail > head {
            tail - head
        } else {
            nr - head + tail
        };
        let n = (avail as usize).min(self.events.len());
        let mut h = head;
        for ev in &mut self.events[..n] {
            // SAFETY: h < nr, so the event lies inside the mapped ring; the
            // kernel finished writing it before publishing `tail` (Acquire
            // above), and it does not reuse the entry before `head` passes it.
            *ev = unsafe { std::ptr::read_volatile(events.add(h as usize)) };
            h += 1;
            if h == nr {
                h = 0;
            }
        }
        // SAFETY: `head` is ours to write (see above); the Release store
        // orders the event copies before the kernel sees the slots free.
        unsafe { AtomicU32::from_ptr(&raw mut (*ring).head).store(h, Ordering::Release) };
        n
    }

    fn reap_syscall(&mut self) -> usize {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let max = libc::c_long::try_from(self.events.len()).unwrap_or(libc::c_long::MAX);
        // SAFETY: `events` has room for `max` io_events; the timeout is a
        // live local; min_nr 0 makes the call non-blocking.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                self.ctx,
                0 as libc::c_long,
                max,
                self.events.as_mut_ptr(),
                &raw const ts,
            )
        };
        syscall_result(r).unwrap_or(0)
    }

    /// Takes the I/O back from a slot the kernel is done with (or never
    /// saw) and frees the slot. `None` while the kernel may use it.
    #[inline]
    pub(crate) fn take(&mut self, idx: u32) -> Option<BdevIo> {
        match self.slots.take(idx) {
            Some(io) => Some(io),
            None => self.cancel(idx),
        }
    }

    /// [`Table::take`] of a slot still queued: out of the queue too.
    #[cold]
    fn cancel(&mut self, idx: u32) -> Option<BdevIo> {
        let io = self.slots.cancel(idx)?;
        self.queued.retain(|q| *q != idx);
        Some(io)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from io_setup and is destroyed once. io_destroy
        // cancels what it can and waits for every request still in the
        // kernel, so the buffers the slots own are no longer in use when
        // the slots drop after this.
        let r = unsafe { libc::syscall(libc::SYS_io_destroy, self.ctx) };
        if r < 0 {
            tracing::warn!(error = %io::Error::last_os_error(), "io_destroy failed");
        }
    }
}
