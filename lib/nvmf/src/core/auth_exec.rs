//! Authentication Send / Receive on a queue (the state is `auth.rs`'s):
//! the checks of SPDK's `nvmf_auth_check_command`, the messages in and
//! out, the queue opened on success and closed on failure.

use bdevkit_nvme_auth::{Controller, CtrlState, Reason};
use bdevkit_nvme_spec::fabrics::Auth;
use bdevkit_nvme_spec::Status;

use super::auth::{negotiate_tid, QueueAuth, Txn};
use super::qpair::{QpInner, QpTransport};
use super::view::Env;

/// How long a transaction may take when the controller has no keep
/// alive timeout (SPDK's `NVMF_AUTH_DEFAULT_KATO_US`).
const AUTH_DEFAULT_TIMEOUT_US: u64 = 120_000_000;

impl<T: QpTransport> QpInner<T> {
    /// SPDK's authentication timeout (the controller's keep alive
    /// timeout, else 120 s), checked by the group's housekeeping: a queue
    /// that never authenticated closes; a re-authentication that never
    /// ended is dropped and the queue goes on (SPDK: not fatal). Returns
    /// whether it changed anything.
    pub(crate) fn auth_timed_out(&mut self, now: u64) -> bool {
        if matches!(self.auth, QueueAuth::Open) {
            return false;
        }
        let kato = self.conn.as_ref().map_or(0, |a| a.ctrlr.kato_ms());
        let limit = if kato > 0 {
            u64::from(kato) * 1000
        } else {
            AUTH_DEFAULT_TIMEOUT_US
        };
        if now.saturating_sub(self.auth_since) <= bdevkit::clock::us_to_ticks(limit) {
            return false;
        }
        let qid = self.conn.as_ref().map_or(0, |a| a.qid);
        tracing::warn!(peer = %self.peer, qid, "DH-HMAC-CHAP: authentication timed out");
        if matches!(self.auth, QueueAuth::Pending(_)) {
            self.auth = QueueAuth::Pending(None);
            self.begin_close("authentication timed out", false);
        } else {
            self.auth = QueueAuth::Open;
        }
        true
    }

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
            QueueAuth::Open => {
                self.auth_since = bdevkit::clock::ticks();
                QueueAuth::Again(fresh(env))
            }
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
                QueueAuth::Open => {
                    self.auth_since = bdevkit::clock::ticks();
                    QueueAuth::Again(t)
                }
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
