//! The last stage: a consumer's I/O is done. Statistics (and the latency
//! histogram when one is kept), then the consumer's completion, on the
//! submitting thread.

use super::io::{BdevIo, ChannelCore, Completion, IoState, Role};
use super::types::IoStatus;
use crate::clock;
use crate::thread::Thread;

/// Completes a consumer I/O of any consumer role.
pub(crate) fn finish_user(core: &ChannelCore, io: BdevIo) {
    match io.inner().role {
        Role::UserTimed | Role::UserLending { timed: true } => finish_timed(core, io),
        _ => finish(core, io),
    }
}

/// [`finish`], counting the latency in the channel's histogram first.
#[cold]
pub(crate) fn finish_timed(core: &ChannelCore, io: BdevIo) {
    let i = io.inner();
    core.tally_histogram(i.io_type, clock::poll_ticks().wrapping_sub(i.submit_tick));
    finish(core, io);
}

/// Completes a consumer I/O: statistics, then the consumer's callback.
#[inline(always)]
pub(crate) fn finish(core: &ChannelCore, mut io: BdevIo) {
    let now = clock::poll_ticks();
    let i = io.inner_mut();
    if i.status == IoStatus::Pending {
        i.status = IoStatus::Success;
    }
    let bytes = i.num_blocks * core.block_size;
    let ticks = now.wrapping_sub(i.submit_tick);
    core.stat
        .borrow_mut()
        .record(i.io_type, bytes, i.status, ticks);
    core.outstanding.set(core.outstanding.get() - 1);
    i.state = IoState::Done;
    i.complete_tick = now;
    let cb = std::mem::take(&mut i.cb);
    match cb {
        Completion::None => drop(io),
        Completion::Fn(f) => f(io),
        Completion::Handler(h) => h.io_done(io),
        Completion::Closure(c) => c(io),
    }
}

/// Finishes a consumer I/O in a later iteration of its thread (an I/O
/// that ends inside `submit`, where the completion may not run yet).
pub(crate) fn finish_later(core: &ChannelCore, io: BdevIo) {
    let ch = io.inner().ch.clone();
    match (Thread::current(), ch) {
        (Some(t), Some(ch)) => t.defer(move || finish_user(&ch, io)),
        _ => finish_user(core, io),
    }
}
