//! Reset: freeze every channel (new I/O is aborted, queued I/O aborted),
//! pass the reset to the module if it serves resets, wait until every
//! channel has drained, unfreeze, then complete the reset. One reset runs
//! per bdev at a time; others queue on their channel.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use super::channel::{self, ChannelCore};
use super::io::{BdevIo, Role};
use super::manager::Bdev;
use super::qos;
use super::types::{IoStatus, IoType};
use crate::thread::{PollerStatus, Thread};

/// Drain check period on each channel.
const DRAIN_POLL_US: u64 = 100;

pub(crate) fn start(core: &ChannelCore, io: BdevIo) {
    if core.bdev.reset_in_progress.swap(true, Ordering::AcqRel) {
        core.reset_queue.borrow_mut().push_back(io);
        return;
    }
    *core.active_reset.borrow_mut() = Some(io);
    let bdev = core.bdev();
    let b2 = bdev.clone();
    bdev.0.device.for_each_channel(
        |ch| {
            ch.set_frozen(true);
            channel::abort_queued(ch);
            qos::abort_queued(ch);
        },
        move || to_module_or_drain(&b2),
    );
}

/// Runs on the thread of the channel that holds the active reset.
fn with_active<R>(bdev: &Bdev, f: impl FnOnce(&ChannelCore) -> R) -> Option<R> {
    let ch = bdev.0.device.get_channel().ok()?;
    Some(f(&ch))
}

fn to_module_or_drain(bdev: &Bdev) {
    let native = bdev.module_supports(IoType::Reset);
    with_active(bdev, |core| {
        let Some(mut io) = core.active_reset.borrow_mut().take() else {
            return;
        };
        if native {
            io.inner_mut().role = Role::ResetToModule;
            channel::to_module(core, io);
        } else {
            *core.active_reset.borrow_mut() = Some(io);
            drain(core);
        }
    });
}

/// The module completed its reset.
pub(crate) fn module_done(core: &ChannelCore, mut io: BdevIo) {
    io.inner_mut().role = core.user_role();
    *core.active_reset.borrow_mut() = Some(io);
    drain(core);
}

fn drain(core: &ChannelCore) {
    let bdev = core.bdev();
    let b2 = bdev.clone();
    bdev.0.device.for_each_channel_async(
        |ch, step| {
            let own = u64::from(ch.active_reset.borrow().is_some());
            if ch.outstanding.get() <= own {
                step.next();
                return;
            }
            let Some(t) = Thread::current() else {
                step.next();
                return;
            };
            let ch = ch.clone();
            let step = Cell::new(Some(step));
            t.register_poller("bdev_reset_drain", DRAIN_POLL_US, move |p| {
                let own = u64::from(ch.active_reset.borrow().is_some());
                if ch.outstanding.get() <= own {
                    p.unregister();
                    if let Some(s) = step.take() {
                        s.next();
                    }
                    PollerStatus::Busy
                } else {
                    PollerStatus::Idle
                }
            });
        },
        move || unfreeze(&b2),
    );
}

fn unfreeze(bdev: &Bdev) {
    let b2 = bdev.clone();
    bdev.0.device.for_each_channel(
        |ch| ch.set_frozen(false),
        move || {
            with_active(&b2, |core| {
                let io = core.active_reset.borrow_mut().take();
                b2.0.reset_in_progress.store(false, Ordering::Release);
                if let Some(mut io) = io {
                    if io.inner().status == IoStatus::Pending {
                        io.inner_mut().status = IoStatus::Success;
                    }
                    channel::finish_user(core, io);
                }
            });
            // Start a reset queued meanwhile on any channel.
            b2.0.device.for_each_channel(
                |ch| {
                    let next = ch.reset_queue.borrow_mut().pop_front();
                    if let Some(io) = next {
                        start(ch, io);
                    }
                },
                || {},
            );
        },
    );
}
