//! DH-HMAC-CHAP on a queue (NVMe Base 2.0 section 8.13, SPDK's
//! `lib/nvmf/auth.c` behaviour): a host with a `dhchap_key` gets AUTHREQ.ATR
//! in its Connect response, and until the queue's transaction ends with
//! success every command but Authentication Send / Receive is answered
//! Authentication Required. The messages are those of
//! `bdevkit_nvme_auth::Controller`; this file moves them, keeps each
//! queue's state and ends the queue when the transaction fails. An
//! authenticated queue may authenticate again (the host re-keys); its
//! commands keep running meanwhile.

use bdevkit_nvme_auth::{Controller, CtrlState, Message, Reason};
use bdevkit_nvme_spec::fabrics::Auth;
use bdevkit_nvme_spec::Status;

use super::qpair::{QpInner, QpTransport};
use super::view::Env;

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
    fn on_send(&mut self, bytes: &[u8]) {
        match self {
            Txn::Ctrl(c) => c.on_send(bytes),
            // A message after the refusal: still the refusal.
            Txn::Refuse { .. } => {}
        }
    }

    fn on_receive(&mut self) -> Option<Vec<u8>> {
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

    fn state(&self) -> CtrlState {
        match self {
            Txn::Ctrl(c) => c.state(),
            Txn::Refuse { sent: false, .. } => CtrlState::Failure1,
            Txn::Refuse { sent: true, .. } => CtrlState::Failed,
        }
    }

    fn why(&self) -> (Reason, &'static str) {
        match self {
            Txn::Ctrl(c) => c.failure().unwrap_or((Reason::Failed, "")),
            Txn::Refuse { reason, .. } => (*reason, "refused before the protocol ran"),
        }
    }
}

/// The transaction id of a Negotiate (0 when `bytes` is not one).
fn negotiate_tid(bytes: &[u8]) -> u16 {
    match Message::decode(bytes) {
        Ok(m @ Message::Negotiate { .. }) => m.tid(),
        _ => 0,
    }
}

impl<T: QpTransport> QpInner<T> {
    /// Authentication Send or Receive on this queue.
    pub(crate) fn auth(&mut self, env: &Env, slot: u16, a: &Auth) {
        let Some(assoc) = &self.conn else {
            return self.respond(slot, Status::COMMAND_SEQUENCE_ERROR.with_dnr(), 0, 0);
        };
        let (qid, subnqn, hostnqn) = (
            assoc.qid,
            assoc.ctrlr.subnqn.clone(),
            assoc.ctrlr.hostnqn.clone(),
        );
        let xfer = self.slots[usize::from(slot)].xfer;
        if !a.is_dhchap() || a.len != xfer {
            tracing::warn!(peer = %self.peer, qid, secp = a.secp, spsp0 = a.spsp0, spsp1 = a.spsp1,
                len = a.len, xfer, "authentication command with bad fields");
            return self.respond(slot, Status::INVALID_FIELD.with_dnr(), 0, 0);
        }
        if a.receive {
            self.auth_receive(slot, qid, &hostnqn);
        } else {
            self.auth_send(env, slot, qid, &subnqn, &hostnqn);
        }
    }

    fn auth_send(&mut self, env: &Env, slot: u16, qid: u16, subnqn: &str, hostnqn: &str) {
        let bytes = self.slots[usize::from(slot)].in_capsule().to_vec();
        let fresh = |env: &Env| -> Txn {
            match env.core.dhchap_config(subnqn, hostnqn) {
                Ok(cfg) => Txn::Ctrl(Box::new(Controller::new(cfg, env.core.auth_seqnum(subnqn)))),
                Err(why) => {
                    tracing::error!(%hostnqn, %subnqn, qid, %why, "DH-HMAC-CHAP: cannot authenticate");
                    Txn::Refuse {
                        tid: negotiate_tid(&bytes),
                        reason: Reason::Failed,
                        sent: false,
                    }
                }
            }
        };
        let txn = match std::mem::take(&mut self.auth) {
            QueueAuth::Pending(Some(t)) => QueueAuth::Pending(Some(t)),
            QueueAuth::Pending(None) => QueueAuth::Pending(Some(fresh(env))),
            QueueAuth::Again(t) => QueueAuth::Again(t),
            QueueAuth::Open => QueueAuth::Again(fresh(env)),
        };
        self.auth = txn;
        if let QueueAuth::Pending(Some(t)) | QueueAuth::Again(t) = &mut self.auth {
            t.on_send(&bytes);
        }
        // The command succeeds whatever it carried (an error shows as
        // Failure1 on the next Receive), as SPDK's.
        self.respond(slot, Status::SUCCESS, 0, 0);
        self.auth_settle(qid, hostnqn);
    }

    fn auth_receive(&mut self, slot: u16, qid: u16, hostnqn: &str) {
        if let QueueAuth::Pending(None) | QueueAuth::Open = self.auth {
            // A Receive before any Negotiate: Failure1.
            let t = Txn::Refuse {
                tid: 0,
                reason: Reason::IncorrectProtocolMessage,
                sent: false,
            };
            self.auth = match self.auth {
                QueueAuth::Open => QueueAuth::Again(t),
                _ => QueueAuth::Pending(Some(t)),
            };
        }
        let msg = match &mut self.auth {
            QueueAuth::Pending(Some(t)) | QueueAuth::Again(t) => t.on_receive(),
            _ => None,
        };
        let Some(msg) = msg else {
            // Failure1 went already: the queue is ending.
            self.respond(slot, Status::COMMAND_SEQUENCE_ERROR, 0, 0);
            return self.auth_settle(qid, hostnqn);
        };
        let s = &mut self.slots[usize::from(slot)];
        let admin = s.icd.is_none();
        if msg.len() > s.xfer as usize || !s.ensure(msg.len(), admin) {
            tracing::warn!(peer = %self.peer, qid, need = msg.len(), al = s.xfer,
                "authentication receive buffer too small");
            self.respond(slot, Status::INVALID_FIELD.with_dnr(), 0, 0);
            self.auth = QueueAuth::Open;
            return self.begin_close("authentication failed", true);
        }
        s.data_mut()[..msg.len()].copy_from_slice(&msg);
        self.send_data(slot, u32::try_from(msg.len()).unwrap_or(0), 0);
        self.auth_settle(qid, hostnqn);
    }

    /// After a step: done opens the queue; a failure (Failure1 returned,
    /// or Failure2 received) ends it, letting the answer go out first.
    fn auth_settle(&mut self, qid: u16, hostnqn: &str) {
        let t = match &self.auth {
            QueueAuth::Pending(Some(t)) | QueueAuth::Again(t) => t,
            _ => return,
        };
        match t.state() {
            CtrlState::Done => {
                if let Txn::Ctrl(c) = t {
                    let (hash, group) = c.chosen();
                    tracing::info!(peer = %self.peer, %hostnqn, qid, digest = hash.name(),
                        dhgroup = group.name(), "DH-HMAC-CHAP: queue authenticated");
                }
                self.auth = QueueAuth::Open;
            }
            CtrlState::Failed => {
                let (reason, why) = t.why();
                tracing::warn!(peer = %self.peer, %hostnqn, qid, ?reason, %why,
                    "DH-HMAC-CHAP: authentication failed");
                self.auth = QueueAuth::Pending(None);
                self.begin_close("authentication failed", true);
            }
            _ => {}
        }
    }
}
