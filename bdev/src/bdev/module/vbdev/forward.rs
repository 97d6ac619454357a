//! The I/O path of a virtual bdev: an I/O it serves goes to the base as a
//! child `BdevIo` that carries it ([`forward`]), and comes back through
//! [`complete_parent`]. Generic and inlined: no allocation, no lock and no
//! dynamic call of its own per I/O.

use crate::bdev::channel::BdevChannel;
use crate::bdev::io::BdevIo;
use crate::bdev::module::serve::ModuleIo;
use crate::bdev::types::IoStatus;

/// Sends `parent` to the base through `base` (this thread's channel to
/// it) as a child I/O; returns whether the child was submitted.
///
/// * The child comes from this thread's pool. When it is empty the parent
///   completes (deferred) with `NoMem`, and the bdev layer retries it once
///   an I/O is freed.
/// * The child takes the parent's request (type, range, data segments,
///   NVMe command, tag — so an abort forwarded below finds its target) and
///   the parent itself ([`ModuleIo::take_request_of`]): the parent owns
///   the memory the child's segments describe, and rides with the child
///   until its completion takes it back. Then `setup(child)` sets the
///   child's completion ([`BdevIo::on_done_fn`] with [`complete_parent`],
///   or [`BdevIo::on_done`]) and anything else (a translated offset).
/// * A child the base rejects hands the parent back, which completes
///   (deferred) with the rejection's errno.
///
/// The parent is never completed inside this call.
#[inline]
pub fn forward(base: &BdevChannel, parent: BdevIo, setup: impl FnOnce(&mut BdevIo)) -> bool {
    let Some(mut child) = base.alloc_io() else {
        parent.complete_deferred(IoStatus::NoMem);
        return false;
    };
    child.take_request_of(parent);
    setup(&mut child);
    match base.submit(child) {
        Ok(()) => true,
        Err(e) => {
            let mut child = e.io;
            if let Some(parent) = child.take_parent() {
                parent.complete_deferred(IoStatus::Errno(e.error.errno()));
            }
            false
        }
    }
}

/// Completion of a child sent by [`forward`], for `on_done_fn`: completes
/// the parent with the child's status (and NVMe `cdw0`). Runs on the
/// submitting thread; the child returns to its pool when it drops at the
/// end.
pub fn complete_parent(mut child: BdevIo) {
    if let Some(parent) = child.take_parent() {
        parent.complete_from(&child);
    }
}
