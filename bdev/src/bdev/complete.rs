//! The module finished an I/O (`ModuleIo::complete`): back from a bounce
//! buffer, then by its status and role — `NoMem` is queued for a retry, a
//! consumer's I/O finishes, a split child reports to its parent, the
//! reset's own I/O continues the reset sequence. One I/O held back by
//! `NoMem` gets another try afterwards.

use super::bounce;
use super::dispatch;
use super::end;
use super::finish;
use super::io::{BdevIo, ChannelCore, Role};
use super::reset;
use super::types::IoStatus;

/// Completes `io`, which its module has finished.
#[inline]
pub(crate) fn complete(mut io: BdevIo) {
    let ch = io
        .inner()
        .ch
        .clone()
        .expect("invariant: a submitted I/O knows its channel");
    let core: &ChannelCore = &ch;
    if io.inner().bounce.is_some() {
        bounce::unbounce(core, &mut io);
    }
    let (status, role) = {
        let i = io.inner();
        (i.status, i.role)
    };
    if status == IoStatus::NoMem && role != Role::ResetToModule {
        dispatch::requeue_nomem(core, &ch, io);
        return;
    }
    match role {
        Role::User => finish::finish(core, io),
        Role::UserTimed => finish::finish_timed(core, io),
        _ => {
            if let Some(reset_io) = end::end(core, io) {
                reset::module_done(core, reset_io);
            }
        }
    }
    dispatch::retry_one(core);
}
