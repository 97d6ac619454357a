//! The aio module's per-thread group (SPDK's `bdev_aio_group_channel`):
//! one AIO context and one poller per lightweight thread, shared by every
//! aio bdev channel on that thread. The group itself (waiting FIFO,
//! poller, batch completion, eventfd) is `bdevkit_kfile`'s
//! [`Group`]; this file is its AIO engine.
//!
//! `submit` only prepares an iocb in a slot of the in-flight table
//! ([`crate::sys::Table`]); the poller hands all prepared iocbs to the
//! kernel with one `io_submit` and reads the completion ring in user space
//! (no system call).
//!
//! In interrupt mode every iocb carries `IOCB_FLAG_RESFD` with the group's
//! eventfd, which is in the reactor's wake-up set: an idle reactor sleeps
//! until a completion arrives.
//!
//! What AIO cannot do asynchronously (`fallocate` for unmap and write
//! zeroes, and `fdatasync` on files whose kernel refuses
//! `IOCB_CMD_FDSYNC`) runs on a helper thread while the I/O is parked in
//! the engine; the result comes back as a message to the group's thread.

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use bdevkit::bdev::module::{BdevIo, BoxError, IoStatus, IoType, ModuleIo};
use bdevkit::thread::{IoChannel, ThreadHandle};
use bdevkit_kfile::group::{Engine, Group};
use bdevkit_kfile::slots::{self, Next, Op};

use crate::helper;
use crate::sys::Table;

/// Requests one thread's AIO context holds at once (SPDK uses 128).
pub(crate) const GROUP_DEPTH: u32 = 256;

/// What the group needs per I/O about a bdev: its file is a descriptor.
pub(crate) type Target = slots::Target<RawFd>;

/// One thread's group: the channel value of the module's group io_device.
pub(crate) type AioGroup = Group<AioEngine>;

/// Finds the calling thread's group of the module instance again (a
/// helper thread's reply arrives as a message, which cannot carry the
/// group); `None` once the module is gone.
pub(crate) type FindGroup = Arc<dyn Fn() -> Option<IoChannel<AioGroup>> + Send + Sync>;

/// Creates the calling thread's group (the io_device's constructor).
pub(crate) fn create(find: FindGroup) -> Result<AioGroup, BoxError> {
    Group::create("bdev_aio_poll", |setup| {
        let table = Table::new(GROUP_DEPTH, setup.eventfd)
            .map_err(|e| io::Error::new(e.kind(), format!("io_setup({GROUP_DEPTH}): {e}")))?;
        let depth = GROUP_DEPTH as usize;
        Ok(AioEngine {
            table,
            failed: Vec::with_capacity(depth),
            parked: Vec::new(),
            parked_free: Vec::new(),
            no_fdsync: Vec::new(),
            thread: setup.thread.handle(),
            find,
        })
    })
}

/// Serves `io` for the bdev described by `t`. Never completes inline.
#[inline]
pub(crate) fn submit(g: &AioGroup, io: BdevIo, t: Target) {
    match io.io_type() {
        IoType::Read | IoType::Write | IoType::Flush => g.queue(io, t),
        IoType::Unmap | IoType::WriteZeroes => {
            let zeroes = io.io_type() == IoType::WriteZeroes;
            let (fd, shift) = (t.file, t.block_shift);
            let (off, len) = (io.offset_blocks() << shift, io.num_blocks() << shift);
            g.with(|e| {
                e.run_blocking(io, move || {
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
            });
        }
        IoType::Reset => io.complete_deferred(IoStatus::Success),
        _ => io.complete_deferred(IoStatus::Errno(libc::ENOTSUP)),
    }
}

/// The bdev channel for `fd` on this thread is gone.
pub(crate) fn forget_fd(g: &AioGroup, fd: RawFd) {
    g.with(|e| e.no_fdsync.retain(|f| *f != fd));
}

/// One thread's AIO context and what it needs besides.
pub(crate) struct AioEngine {
    table: Table,
    failed: Vec<(u32, i32)>,
    /// I/Os whose blocking call runs on a helper thread.
    parked: Vec<Option<BdevIo>>,
    parked_free: Vec<usize>,
    /// Files whose kernel refused `IOCB_CMD_FDSYNC`: flushes go to a helper.
    no_fdsync: Vec<RawFd>,
    thread: ThreadHandle,
    find: FindGroup,
}

impl fmt::Debug for AioEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AioEngine")
            .field("in_kernel", &self.table.in_kernel())
            .field("parked", &(self.parked.len() - self.parked_free.len()))
            .finish_non_exhaustive()
    }
}

impl Engine for AioEngine {
    type Target = Target;

    #[inline]
    fn prep(&mut self, io: BdevIo, t: Target) -> Result<(), BdevIo> {
        if io.io_type() == IoType::Flush && self.no_fdsync.contains(&t.file) {
            let fd = t.file;
            self.run_blocking(io, move || bdevkit_kfile::fdatasync(fd));
            return Ok(());
        }
        self.table.prep(io, &t)
    }

    fn unsubmitted(&self) -> bool {
        self.table.queued() > 0
    }

    fn depth(&self) -> usize {
        GROUP_DEPTH as usize
    }

    fn step(&mut self, batch: &mut Vec<(BdevIo, IoStatus)>) -> bool {
        let mut busy = false;
        if self.table.queued() > 0 {
            let sub = self.table.submit(&mut self.failed);
            busy |= sub.accepted > 0 || sub.again;
            let mut failed = std::mem::take(&mut self.failed);
            for (idx, errno) in failed.drain(..) {
                busy = true;
                self.refused(idx, errno, batch);
            }
            self.failed = failed;
        }
        let reaped = self.table.reap(batch, |errno, flags| match errno {
            // RWF_NOWAIT would block: try again without it.
            libc::EAGAIN if flags & libc::RWF_NOWAIT != 0 => Next::Again(flags & !libc::RWF_NOWAIT),
            libc::EINTR => Next::Again(flags),
            libc::EAGAIN => Next::Done(IoStatus::NoMem),
            _ => Next::Done(IoStatus::Errno(errno)),
        });
        busy || reaped > 0
    }
}

impl AioEngine {
    /// The kernel refused slot `idx`'s request with `errno`: a flush the
    /// file cannot do through AIO goes to a helper thread from now on,
    /// anything else fails.
    fn refused(&mut self, idx: u32, errno: i32, batch: &mut Vec<(BdevIo, IoStatus)>) {
        let s = self.table.slot(idx);
        let (op, fd) = (s.op, s.file);
        let Some(io) = self.table.take(idx) else {
            return;
        };
        if op == Op::Flush && errno == libc::EINVAL {
            tracing::info!(
                fd,
                "IOCB_CMD_FDSYNC not supported for this file; flushing on a helper thread"
            );
            if !self.no_fdsync.contains(&fd) {
                self.no_fdsync.push(fd);
            }
            self.run_blocking(io, move || bdevkit_kfile::fdatasync(fd));
        } else {
            batch.push((io, IoStatus::Errno(errno)));
        }
    }

    /// Parks `io` and runs `call` on a helper thread; the result comes back
    /// as a message to this thread, which completes the I/O.
    fn run_blocking(&mut self, io: BdevIo, call: impl FnOnce() -> io::Result<()> + Send + 'static) {
        let key = match self.parked_free.pop() {
            Some(k) => {
                self.parked[k] = Some(io);
                k
            }
            None => {
                self.parked.push(Some(io));
                self.parked.len() - 1
            }
        };
        let thread = self.thread.clone();
        let find = Arc::clone(&self.find);
        let job: helper::Job = Box::new(move || {
            let status = match call() {
                Ok(()) => IoStatus::Success,
                Err(e) => IoStatus::Errno(e.raw_os_error().unwrap_or(libc::EIO)),
            };
            let sent = thread.send_msg(move || {
                // The parked I/O keeps its bdev channel, and so this group,
                // alive: the channel is there.
                let io = find().and_then(|g| g.with(|e| e.take_parked(key)));
                if let Some(io) = io {
                    io.complete(status);
                }
            });
            if sent.is_err() {
                tracing::warn!("aio helper: owning thread exited");
            }
        });
        if helper::run(job).is_err() {
            tracing::error!("no aio helper thread: blocking call failed");
            if let Some(io) = self.take_parked(key) {
                io.complete_deferred(IoStatus::Errno(libc::EAGAIN));
            }
        }
    }

    fn take_parked(&mut self, key: usize) -> Option<BdevIo> {
        let io = self.parked.get_mut(key).and_then(Option::take);
        if io.is_some() {
            self.parked_free.push(key);
        }
        io
    }
}
