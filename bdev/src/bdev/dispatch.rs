//! Handing an I/O to the module: bounce it first if its buffers break the
//! bdev's alignment need, and keep it for a retry when resources ran out
//! (the module completed it with `NoMem`, or no bounce buffer was free).

use super::bounce;
use super::io::{BdevIo, ChannelCore};
use super::types::IoStatus;
use crate::thread::{IoChannel, PollerStatus, Thread};

/// Retry period of the NoMem queue when nothing completes to drive it.
const NOMEM_RETRY_US: u64 = 1_000;

/// Last step before the module.
#[inline]
pub(crate) fn to_module(core: &ChannelCore, mut io: BdevIo) {
    if core.align_mask != 0 && bounce::misaligned(core, &io) && !bounce::bounce(core, &mut io) {
        let ch = io.inner().ch.clone();
        if let Some(ch) = ch {
            requeue_nomem(core, &ch, io);
        }
        return;
    }
    core.module.submit(io);
}

/// Queues `io` for another try: when the next I/O of the channel
/// completes, and from a slow poller in case none does.
pub(crate) fn requeue_nomem(core: &ChannelCore, ch: &IoChannel<ChannelCore>, mut io: BdevIo) {
    io.inner_mut().status = IoStatus::Pending;
    core.nomem.borrow_mut().push_back(io);
    if core.nomem_poller.borrow().is_some() {
        return;
    }
    let Some(t) = Thread::current() else { return };
    let ch = ch.clone();
    let p = t.register_poller("bdev_nomem_retry", NOMEM_RETRY_US, move |p| {
        let core: &ChannelCore = &ch;
        let next = core.nomem.borrow_mut().pop_front();
        match next {
            Some(io) => {
                to_module(core, io);
                PollerStatus::Busy
            }
            None => {
                p.unregister();
                *core.nomem_poller.borrow_mut() = None;
                PollerStatus::Idle
            }
        }
    });
    *core.nomem_poller.borrow_mut() = Some(p);
}

/// After a completion: one queued I/O gets another try.
#[inline]
pub(crate) fn retry_one(core: &ChannelCore) {
    if !core.nomem.borrow().is_empty() {
        let next = core.nomem.borrow_mut().pop_front();
        if let Some(next) = next {
            to_module(core, next);
        }
    }
}
