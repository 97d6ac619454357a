//! [`BdevChannel`]: a consumer's handle to a bdev on one thread, and the
//! submission path: checks (`check.rs`), then frozen by a reset → aborted,
//! QoS (`qos.rs`), routing (`route.rs`).

use std::fmt;

use super::bdev::Bdev;
use super::check;
use super::finish;
use super::io::{BdevIo, ChannelCore, IoState, Role};
use super::qos;
use super::route;
use super::stats::IoStat;
use super::types::{IoStatus, IoType};
use crate::clock;
use crate::error::Error;
use crate::thread::IoChannel;

/// A consumer's handle to a bdev on the current thread (from
/// [`super::BdevDesc::get_io_channel`]). `!Send`: it can only be used on the
/// thread that created it.
#[derive(Clone)]
pub struct BdevChannel {
    core: IoChannel<ChannelCore>,
    bdev: Bdev,
    writable: bool,
    /// I/O types this channel may submit (supported, emulated, and allowed
    /// by the descriptor's mode): one bit test on the fast path.
    allowed: u32,
}

impl fmt::Debug for BdevChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BdevChannel")
            .field("bdev", &self.core.bdev.name)
            .field("thread_id", &self.core.thread_id)
            .field("writable", &self.writable)
            .finish()
    }
}

#[cold]
fn rejected(error: Error, io: BdevIo) -> Box<SubmitError> {
    Box::new(SubmitError { error, io })
}

/// A submission rejected before reaching the module; the I/O (with its
/// buffers) comes back.
pub struct SubmitError {
    /// Why.
    pub error: Error,
    /// The rejected I/O.
    pub io: BdevIo,
}

impl fmt::Debug for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitError")
            .field("error", &self.error)
            .field("io", &self.io)
            .finish()
    }
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for SubmitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl BdevChannel {
    pub(crate) fn new(core: IoChannel<ChannelCore>, bdev: Bdev, writable: bool) -> Self {
        let allowed = check::allowed_types(&core, writable);
        BdevChannel {
            core,
            bdev,
            writable,
            allowed,
        }
    }

    /// The bdev.
    #[must_use]
    pub fn bdev(&self) -> Bdev {
        self.bdev.clone()
    }

    /// Id of the thread the channel belongs to.
    #[must_use]
    pub fn thread_id(&self) -> u64 {
        self.core.thread_id
    }

    /// Whether writes are allowed through this channel's descriptor.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// A `BdevIo` from this thread's pool; `None` when the pool is empty
    /// (then [`BdevChannel::queue_io_wait`]).
    #[inline]
    #[must_use]
    pub fn alloc_io(&self) -> Option<BdevIo> {
        BdevIo::alloc(&self.core)
    }

    /// Calls `f` on this thread once a `BdevIo` has been freed (SPDK's
    /// `spdk_bdev_queue_io_wait`).
    pub fn queue_io_wait(&self, f: impl FnOnce() + 'static) {
        self.core.pool().wait(Box::new(f));
    }

    /// Statistics of this channel.
    #[must_use]
    pub fn stat(&self) -> IoStat {
        *self.core.stat.borrow()
    }

    /// I/Os waiting in this channel's QoS queue for quota.
    #[cfg(test)]
    pub(crate) fn qos_queued(&self) -> usize {
        self.core.qos.borrow().as_ref().map_or(0, |q| q.queue.len())
    }

    /// Consumer I/Os in flight on this channel.
    #[must_use]
    pub fn outstanding(&self) -> u64 {
        self.core.outstanding.get()
    }

    /// Submits `io`. Checks happen here, before the module sees it: thread,
    /// supported type, write permission, range, buffer size. A rejected I/O
    /// comes back in the error. The completion always runs later, never
    /// inside this call.
    ///
    /// The error is boxed: a rejection is rare, and a result one register
    /// wide keeps every accepted submission cheap.
    #[inline]
    pub fn submit(&self, mut io: BdevIo) -> std::result::Result<(), Box<SubmitError>> {
        if let Err(error) = check::check(&self.core, self.allowed, self.writable, io.inner_mut()) {
            return Err(rejected(error, io));
        }
        self.submit_checked(io);
        Ok(())
    }

    /// The rest of `submit`, once the checks passed (one return: the
    /// caller's `Ok` stays a constant the compiler sees).
    #[inline(always)]
    fn submit_checked(&self, mut io: BdevIo) {
        let core: &ChannelCore = &self.core;
        let i = io.inner_mut();
        i.state = IoState::Submitted;
        i.role = Role::User;
        i.status = IoStatus::Pending;
        i.submit_tick = clock::poll_ticks();
        if !matches!(&i.ch, Some(c) if IoChannel::ptr_eq(c, &self.core)) {
            i.ch = Some(self.core.clone());
        }
        core.outstanding.set(core.outstanding.get() + 1);
        let io_type = i.io_type;
        let rw = matches!(io_type, IoType::Read | IoType::Write);
        if core.fast_rw.get() && rw
            || core.fast_fit.get() && rw && core.fit.fits(i.num_blocks, &i.iovs)
        {
            core.module.submit(io);
            return;
        }
        if core.hist_on.get() {
            io.inner_mut().role = Role::UserTimed;
        }
        if core.is_frozen() && io_type != IoType::Reset {
            io.inner_mut().status = IoStatus::Aborted;
            finish::finish_later(core, io);
            return;
        }
        if qos::is_limited(core, io_type) {
            qos::submit(core, io);
            return;
        }
        route::route(core, io);
    }
}
