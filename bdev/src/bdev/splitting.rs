//! The split stage: an I/O the bdev cannot take whole (boundary, size or
//! segment limits, unmap/write-zeroes/copy limits) waits in its channel's
//! table while children that fit are sent to the module, at most
//! [`MAX_CHILDREN_IN_FLIGHT`] at a time; write zeroes on a bdev without it
//! is emulated the same way, with writes from the thread's zero buffer.
//! The arithmetic (which children) is [`super::split`].
//!
//! A child's segments describe part of the parent's memory (or the zero
//! buffer, read-only): the parent stays in the table until every child it
//! sent is done, and siblings describe disjoint parts.

use super::dispatch;
use super::finish;
use super::io::{BdevIo, ChannelCore, IoState, Role, SplitKind, SplitParent};
use super::pool::ZERO_BUF_LEN;
use super::segments::IoVec;
use super::split::{SplitCursor, SplitLimits};
use super::types::{IoStatus, IoType};

/// Most children of one split parent in flight at once.
const MAX_CHILDREN_IN_FLIGHT: u32 = 32;

/// Write zeroes on a bdev whose module lacks it: writes of the zero buffer,
/// each within the write limits and the buffer's size.
pub(crate) fn emulate_write_zeroes(core: &ChannelCore, io: BdevIo) {
    let bs = core.block_size.max(1);
    let mut limits = core.write_limits;
    let mut zero_blocks = (ZERO_BUF_LEN as u64 / bs).max(1);
    if core.write_unit != 0 && zero_blocks >= core.write_unit {
        zero_blocks -= zero_blocks % core.write_unit;
    }
    limits.max_blocks = if limits.max_blocks == 0 {
        zero_blocks
    } else {
        limits.max_blocks.min(zero_blocks)
    };
    start(core, io, SplitKind::ZeroWrites, limits);
}

/// Puts `io` in the channel's table and sends its first children.
pub(crate) fn start(core: &ChannelCore, io: BdevIo, kind: SplitKind, limits: SplitLimits) {
    let i = io.inner();
    let cursor = SplitCursor {
        offset_blocks: i.offset_blocks,
        remaining_blocks: i.num_blocks,
        iov_idx: 0,
        iov_off: 0,
    };
    let zero = if kind == SplitKind::ZeroWrites {
        core.pool().zero_buf()
    } else {
        None
    };
    if kind == SplitKind::ZeroWrites && zero.is_none() {
        let mut io = io;
        io.inner_mut().status = IoStatus::NoMem;
        finish::finish_later(core, io);
        return;
    }
    let parent = SplitParent {
        io: Some(io),
        cursor,
        limits,
        kind,
        outstanding: 0,
        status: IoStatus::Pending,
        waiting_for_io: false,
        zero,
    };
    let key = {
        let mut parents = core.parents.borrow_mut();
        match core.free_parents.borrow_mut().pop() {
            Some(k) => {
                parents[k] = Some(parent);
                k
            }
            None => {
                parents.push(Some(parent));
                parents.len() - 1
            }
        }
    };
    next_children(core, key, true);
}

/// Submits more children of parent `key`; finishes it when all are done.
fn next_children(core: &ChannelCore, key: usize, from_submit: bool) {
    loop {
        let mut parents = core.parents.borrow_mut();
        let Some(p) = parents.get_mut(key).and_then(Option::as_mut) else {
            return;
        };
        let failed = !matches!(p.status, IoStatus::Pending | IoStatus::Success);
        if failed || p.cursor.remaining_blocks == 0 || p.outstanding >= MAX_CHILDREN_IN_FLIGHT {
            break;
        }
        let ch =
            p.io.as_ref()
                .and_then(|io| io.inner().ch.clone())
                .expect("invariant: split parent has a channel");
        let Some(mut child) = BdevIo::alloc(&ch) else {
            if p.outstanding == 0 && !p.waiting_for_io {
                p.waiting_for_io = true;
                drop(parents);
                let ch2 = ch.clone();
                core.pool().wait(Box::new(move || {
                    let core: &ChannelCore = &ch2;
                    if let Some(Some(p)) = core.parents.borrow_mut().get_mut(key) {
                        p.waiting_for_io = false;
                    }
                    next_children(core, key, false);
                }));
            }
            return;
        };
        let parent_io = p.io.as_ref().expect("invariant: parent present");
        let pi = parent_io.inner();
        let ci = child.inner_mut();
        let range = match p.kind {
            SplitKind::Data => match p.limits.next_child(&mut p.cursor, &pi.iovs, &mut ci.iovs) {
                Ok(r) => r,
                Err(_) => {
                    p.status = IoStatus::Errno(libc::EINVAL);
                    drop(child);
                    break;
                }
            },
            SplitKind::Range | SplitKind::ZeroWrites => p.limits.next_range(&mut p.cursor),
        };
        let Some((off, n)) = range else {
            drop(child);
            break;
        };
        ci.offset_blocks = off;
        ci.num_blocks = n;
        ci.io_type = pi.io_type;
        match p.kind {
            // A view of the parent's memory, read-only where the parent's is.
            SplitKind::Data => {
                ci.ro_data = pi.ro_data;
                ci.ext_data = pi.ext_data;
            }
            SplitKind::Range => {
                ci.src_offset_blocks = pi.src_offset_blocks + (off - pi.offset_blocks);
            }
            SplitKind::ZeroWrites => {
                ci.io_type = IoType::Write;
                let zero = p
                    .zero
                    .as_ref()
                    .expect("invariant: zero buffer for emulation");
                let len = usize::try_from(n * core.block_size).unwrap_or(usize::MAX);
                ci.iovs.push(IoVec {
                    base: zero.as_ptr().cast_mut(),
                    len: len.min(zero.len()),
                });
                // Every emulated write of this thread shares the buffer.
                ci.ro_data = true;
            }
        }
        ci.role = Role::Child { parent_key: key };
        ci.state = IoState::Submitted;
        ci.status = IoStatus::Pending;
        ci.submit_tick = pi.submit_tick;
        p.outstanding += 1;
        drop(parents);
        dispatch::to_module(core, child);
    }
    let done = {
        let parents = core.parents.borrow();
        match parents.get(key).and_then(Option::as_ref) {
            Some(p) => {
                let failed = !matches!(p.status, IoStatus::Pending | IoStatus::Success);
                p.outstanding == 0 && (failed || p.cursor.remaining_blocks == 0)
            }
            None => false,
        }
    };
    if done {
        let (mut io, status) = {
            let mut parents = core.parents.borrow_mut();
            let p = parents[key].take().expect("invariant: parent present");
            core.free_parents.borrow_mut().push(key);
            (p.io.expect("invariant: parent io"), p.status)
        };
        io.inner_mut().status = if status == IoStatus::Pending {
            IoStatus::Success
        } else {
            status
        };
        if from_submit {
            finish::finish_later(core, io);
        } else {
            finish::finish_user(core, io);
        }
    }
}

/// A child of parent `key` is done (any status but `NoMem`, which is
/// retried before it gets here).
pub(crate) fn child_done(core: &ChannelCore, key: usize, mut child: BdevIo) {
    let status = child.status();
    {
        let mut parents = core.parents.borrow_mut();
        if let Some(Some(p)) = parents.get_mut(key) {
            p.outstanding -= 1;
            if status != IoStatus::Success
                && matches!(p.status, IoStatus::Pending | IoStatus::Success)
            {
                p.status = status;
            }
        }
    }
    child.inner_mut().state = IoState::Done;
    drop(child);
    next_children(core, key, false);
}
