//! The per-thread AIO group (SPDK's `bdev_aio_group_channel`): one AIO
//! context and one poller per lightweight thread, shared by every aio bdev
//! channel on that thread.
//!
//! `submit` only prepares an iocb in a slot of the in-flight table
//! ([`crate::sys::Table`]); the poller hands all prepared iocbs to the
//! kernel with one `io_submit`, reads the completion ring in user space (no
//! system call) and completes the finished I/Os as one batch, outside any
//! borrow, so that completion callbacks can submit again. I/Os that find
//! the table full wait in a FIFO and are prepared as slots free up.
//!
//! In interrupt mode every iocb carries `IOCB_FLAG_RESFD` with the group's
//! eventfd, which is in the reactor's wake-up set: an idle reactor sleeps
//! until a completion arrives.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::rc::{Rc, Weak};
use std::sync::OnceLock;

use bdevkit::bdev::module::{BdevIo, BoxError, IoStatus, IoType, ModuleIo};
use bdevkit::thread::{InterruptFd, IoDevice, Poller, PollerStatus, Thread, ThreadHandle};
use bdevkit_kfile::slots::{Op, Transfer};

use crate::helper;
use crate::sys::Table;

/// Requests one thread's AIO context holds at once (SPDK uses 128).
pub(crate) const GROUP_DEPTH: u32 = 256;

/// Per-bdev facts the group needs for each I/O (copied, no reference
/// counting per I/O).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    /// The bdev's file.
    pub(crate) fd: RawFd,
    /// log2 of the block size.
    pub(crate) block_shift: u32,
    /// `RWF_*` flags for reads and writes (`RWF_NOWAIT`).
    pub(crate) rw_flags: i32,
    /// Device-backed file: each request gets its own `io_submit`.
    pub(crate) solo: bool,
}

static DEVICE: OnceLock<IoDevice<AioGroup>> = OnceLock::new();

/// The process-wide io_device whose per-thread channel is the group.
pub(crate) fn device() -> &'static IoDevice<AioGroup> {
    DEVICE.get_or_init(|| IoDevice::register("bdev_aio_group", AioGroup::create))
}

/// One thread's group (the io_device channel value).
pub(crate) struct AioGroup {
    // Field order is drop order: the eventfd leaves the reactor's epoll set
    // before `inner` closes it.
    _intr: Option<InterruptFd>,
    inner: Rc<GroupInner>,
    poller: Poller,
}

impl fmt::Debug for AioGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.st.borrow();
        f.debug_struct("AioGroup")
            .field("in_kernel", &st.table.in_kernel())
            .field("waiting", &st.waiting.len())
            .finish()
    }
}

struct State {
    table: Table,
    waiting: VecDeque<(BdevIo, Target)>,
    failed: Vec<(u32, i32)>,
    reaped: Vec<(u32, i64)>,
    /// I/Os whose blocking call runs on a helper thread.
    parked: Vec<Option<BdevIo>>,
    parked_free: Vec<usize>,
    /// Files whose kernel refused `IOCB_CMD_FDSYNC`: flushes go to a helper.
    no_fdsync: Vec<RawFd>,
}

struct GroupInner {
    st: RefCell<State>,
    /// Completions of one poll, reused (no allocation in steady state).
    batch: RefCell<Vec<(BdevIo, IoStatus)>>,
    efd: Option<OwnedFd>,
    in_poll: Cell<bool>,
    thread: ThreadHandle,
}

impl AioGroup {
    fn create() -> Result<AioGroup, BoxError> {
        let t = Thread::try_current()?;
        let interrupt = t.runtime().map(|r| r.interrupt_mode()).unwrap_or(false);
        let efd = if interrupt {
            Some(bdevkit_kfile::eventfd()?)
        } else {
            None
        };
        let table = Table::new(GROUP_DEPTH, efd.as_ref().map(AsRawFd::as_raw_fd))
            .map_err(|e| io::Error::new(e.kind(), format!("io_setup({GROUP_DEPTH}): {e}")))?;
        let depth = GROUP_DEPTH as usize;
        let inner = Rc::new(GroupInner {
            st: RefCell::new(State {
                table,
                waiting: VecDeque::new(),
                failed: Vec::with_capacity(depth),
                reaped: Vec::with_capacity(depth),
                parked: Vec::new(),
                parked_free: Vec::new(),
                no_fdsync: Vec::new(),
            }),
            batch: RefCell::new(Vec::with_capacity(depth)),
            efd,
            in_poll: Cell::new(false),
            thread: t.handle(),
        });
        let intr = match &inner.efd {
            Some(fd) => Some(t.register_interrupt_fd(fd.as_raw_fd())?),
            None => None,
        };
        let weak: Weak<GroupInner> = Rc::downgrade(&inner);
        let poller = t.register_poller("bdev_aio_poll", 0, move |_| match weak.upgrade() {
            Some(g) => g.poll(),
            None => PollerStatus::Idle,
        });
        Ok(AioGroup {
            _intr: intr,
            inner,
            poller,
        })
    }

    /// Serves `io` for the bdev described by `t`. Never completes inline.
    #[inline]
    pub(crate) fn submit(&self, io: BdevIo, t: Target) {
        self.inner.submit(io, t);
    }

    /// The bdev channel for `fd` on this thread is gone.
    pub(crate) fn forget_fd(&self, fd: RawFd) {
        self.inner.st.borrow_mut().no_fdsync.retain(|f| *f != fd);
    }
}

impl Drop for AioGroup {
    fn drop(&mut self) {
        self.poller.unregister();
    }
}

impl GroupInner {
    fn submit(&self, io: BdevIo, t: Target) {
        match io.io_type() {
            IoType::Read | IoType::Write => self.queue(io, t),
            IoType::Flush => {
                let fallback = self.st.borrow().no_fdsync.contains(&t.fd);
                if fallback {
                    let fd = t.fd;
                    self.run_blocking(io, move || bdevkit_kfile::fdatasync(fd));
                } else {
                    self.queue(io, t);
                }
            }
            IoType::Unmap | IoType::WriteZeroes => {
                let zeroes = io.io_type() == IoType::WriteZeroes;
                let (fd, shift) = (t.fd, t.block_shift);
                let (off, len) = (io.offset_blocks() << shift, io.num_blocks() << shift);
                self.run_blocking(io, move || {
                    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                    if !zeroes {
                        return bdevkit_kfile::fallocate(fd, punch, off, len);
                    }
                    // Zero range where the file system has it (tmpfs does
                    // not); a punched hole reads back as zeroes too.
                    let zero = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
                    match bdevkit_kfile::fallocate(fd, zero, off, len) {
                        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                            bdevkit_kfile::fallocate(fd, punch, off, len)
                        }
                        r => r,
                    }
                });
            }
            IoType::Reset => io.complete_deferred(IoStatus::Success),
            _ => io.complete_deferred(IoStatus::Errno(libc::ENOTSUP)),
        }
    }

    fn queue(&self, io: BdevIo, t: Target) {
        let mut st = self.st.borrow_mut();
        let was_idle = st.table.queued() == 0 && st.waiting.is_empty();
        if st.waiting.is_empty() {
            if let Err(io) = prep(&mut st.table, io, t) {
                st.waiting.push_back((io, t));
            }
        } else {
            st.waiting.push_back((io, t));
        }
        drop(st);
        // A submission from outside our poller (a message, another poller)
        // must wake a reactor that might otherwise go to sleep first.
        if was_idle && !self.in_poll.get() {
            if let Some(fd) = &self.efd {
                bdevkit_kfile::eventfd_signal(fd.as_raw_fd());
            }
        }
    }

    /// Parks `io` and runs `call` on a helper thread; the result comes back
    /// as a message to this thread.
    fn run_blocking(&self, io: BdevIo, call: impl FnOnce() -> io::Result<()> + Send + 'static) {
        let key = {
            let mut st = self.st.borrow_mut();
            match st.parked_free.pop() {
                Some(k) => {
                    st.parked[k] = Some(io);
                    k
                }
                None => {
                    st.parked.push(Some(io));
                    st.parked.len() - 1
                }
            }
        };
        let thread = self.thread.clone();
        let job: helper::Job = Box::new(move || {
            let errno = match call() {
                Ok(()) => 0,
                Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
            };
            let sent = thread.send_msg(move || {
                // The parked I/O keeps its bdev channel, and so this group,
                // alive: the channel is there.
                if let Ok(g) = device().get_channel() {
                    g.inner.unpark(key, errno);
                }
            });
            if sent.is_err() {
                tracing::warn!("aio helper: owning thread exited");
            }
        });
        if helper::run(job).is_err() {
            tracing::error!("no aio helper thread: blocking call failed");
            let io = self.take_parked(key);
            if let Some(io) = io {
                io.complete_deferred(IoStatus::Errno(libc::EAGAIN));
            }
        }
    }

    fn take_parked(&self, key: usize) -> Option<BdevIo> {
        let mut st = self.st.borrow_mut();
        let io = st.parked.get_mut(key).and_then(Option::take);
        if io.is_some() {
            st.parked_free.push(key);
        }
        io
    }

    fn unpark(&self, key: usize, errno: i32) {
        if let Some(io) = self.take_parked(key) {
            io.complete(if errno == 0 {
                IoStatus::Success
            } else {
                IoStatus::Errno(errno)
            });
        }
    }

    fn poll(&self) -> PollerStatus {
        self.in_poll.set(true);
        let mut batch = std::mem::take(&mut *self.batch.borrow_mut());
        let mut fallback = Vec::new();
        let mut busy = self.step(&mut batch, &mut fallback);
        if !busy {
            if let Some(fd) = &self.efd {
                // About to report idle: reset the eventfd first, then look
                // once more, so that a completion racing with the reset
                // is either seen now or signals the eventfd again.
                bdevkit_kfile::eventfd_drain(fd.as_raw_fd());
                busy = self.step(&mut batch, &mut fallback);
            }
        }
        let work = busy || !batch.is_empty();
        for (io, status) in batch.drain(..) {
            io.complete(status);
        }
        *self.batch.borrow_mut() = batch;
        for (io, fd) in fallback {
            self.run_blocking(io, move || bdevkit_kfile::fdatasync(fd));
        }
        self.in_poll.set(false);
        PollerStatus::from(work)
    }

    /// One submit + reap round. Finished I/Os go to `batch`, flushes the
    /// kernel cannot run asynchronously to `fallback`.
    fn step(
        &self,
        batch: &mut Vec<(BdevIo, IoStatus)>,
        fallback: &mut Vec<(BdevIo, RawFd)>,
    ) -> bool {
        let mut st = self.st.borrow_mut();
        let State {
            table,
            waiting,
            failed,
            reaped,
            no_fdsync,
            ..
        } = &mut *st;
        while table.has_free() {
            let Some((io, t)) = waiting.pop_front() else {
                break;
            };
            if let Err(io) = prep(table, io, t) {
                waiting.push_front((io, t));
                break;
            }
        }
        let mut busy = false;
        if table.queued() > 0 {
            let sub = table.submit(failed);
            busy |= sub.accepted > 0 || sub.again;
            for (idx, errno) in failed.drain(..) {
                let s = table.slot(idx);
                let (op, fd) = (s.op, s.file);
                let Some(io) = table.take(idx) else { continue };
                busy = true;
                if op == Op::Flush && errno == libc::EINVAL {
                    tracing::info!(
                        fd,
                        "IOCB_CMD_FDSYNC not supported for this file; flushing on a helper thread"
                    );
                    if !no_fdsync.contains(&fd) {
                        no_fdsync.push(fd);
                    }
                    fallback.push((io, fd));
                } else {
                    batch.push((io, IoStatus::Errno(errno)));
                }
            }
        }
        if table.reap(reaped) > 0 {
            busy = true;
        }
        for (idx, res) in reaped.drain(..) {
            if let Some(done) = finish(table, idx, res) {
                batch.push(done);
            }
        }
        busy
    }
}

/// Prepares `io` in a free slot (or gives it back).
#[inline]
fn prep(table: &mut Table, io: BdevIo, t: Target) -> Result<(), BdevIo> {
    let (op, flags) = match io.io_type() {
        IoType::Read => (Op::Read, t.rw_flags),
        IoType::Write => (Op::Write, t.rw_flags),
        _ => (Op::Flush, 0),
    };
    let offset = io.offset_blocks() << t.block_shift;
    table.prep(io, op, t.fd, offset, flags, t.solo).map(|_| ())
}

/// Decides what a completion means: done (the I/O and its status), or
/// queued again for the rest of a short transfer or after `EAGAIN`.
fn finish(table: &mut Table, idx: u32, res: i64) -> Option<(BdevIo, IoStatus)> {
    let flags = table.slot(idx).rw_flags;
    if res < 0 {
        let errno = i32::try_from(-res).unwrap_or(libc::EIO);
        return match errno {
            // RWF_NOWAIT would block: try again without it.
            libc::EAGAIN if flags & libc::RWF_NOWAIT != 0 => {
                table.requeue_rest(idx, flags & !libc::RWF_NOWAIT);
                None
            }
            libc::EINTR => {
                table.requeue_rest(idx, flags);
                None
            }
            libc::EAGAIN => table.take(idx).map(|io| (io, IoStatus::NoMem)),
            _ => table.take(idx).map(|io| (io, IoStatus::Errno(errno))),
        };
    }
    match table.transferred(idx, u64::try_from(res).unwrap_or(0)) {
        Transfer::Complete => table.take(idx).map(|io| (io, IoStatus::Success)),
        // End of file inside the bdev (the file shrank): no more data will
        // come, so fail rather than resubmit forever.
        Transfer::EndOfFile => table.take(idx).map(|io| (io, IoStatus::Errno(libc::EIO))),
        Transfer::Partial => {
            table.requeue_rest(idx, flags);
            None
        }
    }
}
