//! DH-HMAC-CHAP on a queue, after its Fabrics Connect and before it is
//! ready (NVMe Base 2.0 section 8.13): `bdevkit_nvme_auth::Host` makes
//! and checks the messages; here they go out in Authentication Send
//! commands and come back in Authentication Receive ones, in the
//! Connect's slot (past the queue pair's), driven by the queue's polls
//! like the rest of connecting. Success makes the queue ready (held
//! commands go out); a failure closes it as a refused Connect would
//! (AUTH_Failure2 sent first when the protocol says so).

use bdevkit_nvme_auth::{Host, HostStep};
use bdevkit_nvme_spec::fabrics::Auth;
use bdevkit_nvme_spec::tcp;
use bdevkit_nvme_spec::{Command, Cqe};

use super::TcpQueue;
use crate::tcp::connect::{AuthRun, AuthWait as Wait, Failure};

/// The Authentication Receive buffer (the largest message, a challenge
/// or reply of ffdhe8192, is well within it).
const AUTH_AL: usize = bdevkit_nvme_auth::msg::MAX_MESSAGE;

impl TcpQueue {
    /// Starts the transaction: AUTH_Negotiate.
    pub(super) fn auth_start(&mut self) {
        let Some(cfg) = self.conn.as_mut().and_then(|c| c.auth.take()) else {
            return;
        };
        let seq = bdevkit_nvme_auth::random_seqnum().unwrap_or(1);
        let mut host = Host::new(*cfg, self.qid.wrapping_add(1), seq);
        let msg = host.negotiate();
        if let Some(c) = self.conn.as_mut() {
            c.run = Some(AuthRun {
                host,
                wait: Wait::SendThenReceive,
            });
        }
        self.auth_send(&msg, Wait::SendThenReceive);
    }

    /// Sends `msg` with Authentication Send (in the capsule when it fits,
    /// else pulled by R2T from the slot's buffer).
    fn auth_send(&mut self, msg: &[u8], then: Wait) {
        let slot = self.depth;
        let in_capsule = msg.len() <= self.icd_max;
        let s = &mut self.slots[usize::from(slot)];
        if s.buf.len() < msg.len() {
            s.buf.resize(msg.len(), 0);
        }
        s.buf[..msg.len()].copy_from_slice(msg);
        s.busy = true;
        s.completed = false;
        s.bad_digest = false;
        s.got = 0;
        s.len = msg.len();
        s.from_dev = false;
        s.in_capsule = in_capsule;
        let len = u32::try_from(msg.len()).unwrap_or(u32::MAX);
        let mut sqe = Auth::send(len).to_sqe(slot);
        if !self.push_capsule(&mut sqe, len, in_capsule) {
            return self.close("cannot build an Authentication Send");
        }
        if in_capsule {
            self.out.extend_from_slice(msg);
            if self.tx.digests.data {
                self.out
                    .extend_from_slice(&tcp::data_digest(msg).to_le_bytes());
            }
        }
        if let Some(a) = self.conn.as_mut().and_then(|c| c.run.as_mut()) {
            a.wait = then;
        }
    }

    /// Asks for the controller's next message (Authentication Receive).
    fn auth_receive(&mut self) {
        let slot = self.depth;
        let s = &mut self.slots[usize::from(slot)];
        if s.buf.len() < AUTH_AL {
            s.buf.resize(AUTH_AL, 0);
        }
        s.busy = true;
        s.completed = false;
        s.bad_digest = false;
        s.got = 0;
        s.len = AUTH_AL;
        s.from_dev = true;
        s.in_capsule = false;
        let al = u32::try_from(AUTH_AL).unwrap_or(u32::MAX);
        let mut sqe = Auth::receive(al).to_sqe(slot);
        if !self.push_capsule(&mut sqe, al, false) {
            return self.close("cannot build an Authentication Receive");
        }
        if let Some(a) = self.conn.as_mut().and_then(|c| c.run.as_mut()) {
            a.wait = Wait::Receive;
        }
    }

    fn auth_fail(&mut self, why: &'static str) {
        tracing::warn!(qid = self.qid, why, "DH-HMAC-CHAP authentication failed");
        self.failure = Some(Failure::Auth(why));
        self.close("DH-HMAC-CHAP authentication failed");
    }

    /// An authentication command of the Connect's slot completed.
    pub(super) fn auth_step(&mut self, cqe: &Cqe) {
        let slot = usize::from(self.depth);
        self.slots[slot].busy = false;
        let Some(wait) = self
            .conn
            .as_ref()
            .and_then(|c| c.run.as_ref())
            .map(|a| a.wait)
        else {
            return;
        };
        let st = cqe.status();
        if !st.is_success() || self.slots[slot].bad_digest {
            tracing::warn!(qid = self.qid, status = %st, "authentication command failed");
            return self.auth_fail("the controller failed an authentication command");
        }
        match wait {
            Wait::SendThenReceive => self.auth_receive(),
            Wait::SendThenReady => self.auth_done(),
            Wait::SendThenFail(why) => self.auth_fail(why),
            Wait::Receive => {
                let got = self.slots[slot].got.min(AUTH_AL);
                let msg = self.slots[slot].buf[..got].to_vec();
                let Some(a) = self.conn.as_mut().and_then(|c| c.run.as_mut()) else {
                    return;
                };
                match a.host.on_message(&msg) {
                    Ok(HostStep::SendThenReceive(m)) => self.auth_send(&m, Wait::SendThenReceive),
                    Ok(HostStep::SendAndFinish(m)) => self.auth_send(&m, Wait::SendThenReady),
                    Ok(HostStep::Finished) => self.auth_done(),
                    Err(f) => {
                        tracing::warn!(qid = self.qid, reason = ?f.reason, why = f.why,
                            "DH-HMAC-CHAP: the transaction failed");
                        match f.failure2 {
                            Some(m) => self.auth_send(&m, Wait::SendThenFail(f.why)),
                            None => self.auth_fail(f.why),
                        }
                    }
                }
            }
        }
    }

    fn auth_done(&mut self) {
        tracing::debug!(qid = self.qid, "DH-HMAC-CHAP: queue authenticated");
        if let Some(mut c) = self.conn.take() {
            c.run = None;
            self.ready(*c);
        }
    }
}
