//! Reset: freeze every channel (new I/O is aborted, queued I/O aborted),
//! pass the reset to the module if it serves resets, wait until every
//! channel has drained, unfreeze, then complete the reset. One reset runs
//! per bdev at a time; others queue on their channel.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use super::dispatch;
use super::end;
use super::finish;
use super::io::{BdevDevice, BdevIo, ChannelCore, Role};
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
    let device = core.device.clone();
    let d2 = device.clone();
    device.for_each_channel(
        |ch| {
            ch.set_frozen(true);
            abort_queued(ch);
        },
        move || to_module_or_drain(&d2),
    );
}

/// Aborts what a frozen channel holds back: I/O waiting for a NoMem retry
/// and I/O queued by QoS.
fn abort_queued(core: &ChannelCore) {
    loop {
        let next = core.nomem.borrow_mut().pop_front();
        let Some(mut io) = next else { break };
        io.inner_mut().status = IoStatus::Aborted;
        if let Some(reset) = end::end(core, io) {
            module_done(core, reset);
        }
    }
    loop {
        let next = core
            .qos
            .borrow_mut()
            .as_mut()
            .and_then(|q| q.queue.pop_front());
        let Some(mut io) = next else { break };
        io.inner_mut().status = IoStatus::Aborted;
        finish::finish_user(core, io);
    }
}

/// Runs on the thread of the channel that holds the active reset.
fn with_active<R>(device: &BdevDevice, f: impl FnOnce(&ChannelCore) -> R) -> Option<R> {
    let ch = device.get_channel().ok()?;
    Some(f(&ch))
}

fn to_module_or_drain(device: &BdevDevice) {
    with_active(device, |core| {
        let Some(mut io) = core.active_reset.borrow_mut().take() else {
            return;
        };
        if core.bdev.module_supports(IoType::Reset) {
            io.inner_mut().role = Role::ResetToModule;
            dispatch::to_module(core, io);
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
    let device = core.device.clone();
    let d2 = device.clone();
    device.for_each_channel_async(
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
        move || unfreeze(&d2),
    );
}

fn unfreeze(device: &BdevDevice) {
    let d2 = device.clone();
    device.for_each_channel(
        |ch| ch.set_frozen(false),
        move || {
            with_active(&d2, |core| {
                let io = core.active_reset.borrow_mut().take();
                core.bdev.reset_in_progress.store(false, Ordering::Release);
                if let Some(mut io) = io {
                    if io.inner().status == IoStatus::Pending {
                        io.inner_mut().status = IoStatus::Success;
                    }
                    finish::finish_user(core, io);
                }
            });
            // Start a reset queued meanwhile on any channel.
            d2.for_each_channel(
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
