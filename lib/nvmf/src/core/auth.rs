//! DH-HMAC-CHAP on a queue (NVMe Base 2.0 section 8.13, SPDK's
//! `lib/nvmf/auth.c` behaviour): a host with a `dhchap_key` gets AUTHREQ.ATR
//! in its Connect response, and until the queue's transaction ends with
//! success every command but Authentication Send / Receive is answered
//! Authentication Required. The messages are those of
//! `bdevkit_nvme_auth::Controller`; this file moves them, keeps each
//! queue's state and ends the queue when the transaction fails. An
//! authenticated queue may authenticate again (the host re-keys); its
//! commands keep running meanwhile. This file has a queue's state; the
//! commands are run in `auth_exec.rs`.

use bdevkit_nvme_auth::{Controller, CtrlState, Message, Reason};

/// A queue's authentication.
#[derive(Debug, Default)]
pub(crate) enum QueueAuth {
    /// Not asked for, or done: commands run.
    #[default]
    Open,
    /// Connect said ATR: only Authentication Send / Receive until the
    /// transaction succeeds.
    Pending(Option<Txn>),
    /// An open queue authenticating again: commands still run.
    Again(Txn),
}

impl QueueAuth {
    /// Whether commands other than authentication are refused.
    #[inline]
    pub fn blocks(&self) -> bool {
        matches!(self, QueueAuth::Pending(_))
    }
}

/// One transaction: the protocol state machine, or a refusal decided
/// here (no key for the host, a Receive before any Negotiate).
#[derive(Debug)]
pub(crate) enum Txn {
    /// The controller's state machine.
    Ctrl(Box<Controller>),
    /// The next Receive returns Failure1 with `reason`.
    Refuse {
        /// The transaction id (from the Negotiate, if any).
        tid: u16,
        /// Why.
        reason: Reason,
        /// Failure1 was returned.
        sent: bool,
    },
}

impl Txn {
    pub(crate) fn on_send(&mut self, bytes: &[u8]) {
        match self {
            Txn::Ctrl(c) => c.on_send(bytes),
            // A message after the refusal: still the refusal.
            Txn::Refuse { .. } => {}
        }
    }

    pub(crate) fn on_receive(&mut self) -> Option<Vec<u8>> {
        match self {
            Txn::Ctrl(c) => c.on_receive(),
            Txn::Refuse { sent: true, .. } => None,
            Txn::Refuse { tid, reason, sent } => {
                *sent = true;
                Some(
                    Message::Failure {
                        which: 1,
                        tid: *tid,
                        reason: *reason,
                    }
                    .encode(),
                )
            }
        }
    }

    pub(crate) fn state(&self) -> CtrlState {
        match self {
            Txn::Ctrl(c) => c.state(),
            Txn::Refuse { sent: false, .. } => CtrlState::Failure1,
            Txn::Refuse { sent: true, .. } => CtrlState::Failed,
        }
    }

    pub(crate) fn why(&self) -> (Reason, &'static str) {
        match self {
            Txn::Ctrl(c) => c.failure().unwrap_or((Reason::Failed, "")),
            Txn::Refuse { reason, .. } => (*reason, "refused before the protocol ran"),
        }
    }
}

/// The transaction id of a Negotiate (0 when `bytes` is not one).
pub(crate) fn negotiate_tid(bytes: &[u8]) -> u16 {
    match Message::decode(bytes) {
        Ok(m @ Message::Negotiate { .. }) => m.tid(),
        _ => 0,
    }
}
