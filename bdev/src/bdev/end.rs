//! How an I/O the module is done with leaves the pipeline, by its role: a
//! consumer's I/O finishes, a split child reports to its parent. An I/O
//! whose memory other I/Os still borrow (its module lent it,
//! `share_request_of`) waits for them first. The reset's own I/O goes back
//! to the caller, which is the reset sequence's business.

use super::finish;
use super::io::{park_completed, BdevIo, ChannelCore, Role};
use super::splitting;

/// Ends `io`; returns it when it is the reset passed to the module.
pub(crate) fn end(core: &ChannelCore, io: BdevIo) -> Option<BdevIo> {
    match io.inner().role {
        Role::User => finish::finish(core, io),
        Role::UserTimed => finish::finish_timed(core, io),
        Role::UserLending { .. } => {
            if let Some(io) = park_completed(io, resume) {
                finish::finish_user(core, io);
            }
        }
        Role::Child { parent_key } => {
            if let Some(io) = park_completed(io, resume) {
                splitting::child_done(core, parent_key, io);
            }
        }
        Role::ResetToModule => return Some(io),
    }
    None
}

/// A parked I/O whose borrowers are gone: end it now.
fn resume(io: BdevIo) {
    let ch = io.inner().ch.clone();
    if let Some(ch) = ch {
        // Only consumer I/Os and split children are parked.
        let _ = end(&ch, io);
    }
}
