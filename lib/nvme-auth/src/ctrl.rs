//! The controller's side of one DH-HMAC-CHAP transaction, on one queue,
//! as SPDK's target runs it: an Authentication Send carries Negotiate,
//! Reply, Success2 or Failure2; an Authentication Receive returns
//! Challenge, Success1 or, after any error, Failure1. A Send that carries
//! a bad message still completes; the next Receive says why.

use zeroize::Zeroizing;

use crate::calc::{response, same, Inputs, Kind};
use crate::dh::DhKey;
use crate::ids::{DhGroup, HashFn};
use crate::key::Secret;
use crate::msg::{Message, Reason};

/// What the controller checks a host with.
#[derive(Debug, Clone)]
pub struct CtrlConfig {
    /// The host's NQN (from its Connect).
    pub hostnqn: String,
    /// The subsystem's NQN.
    pub subnqn: String,
    /// The host's secret (`dhchap_key` of `nvmf_subsystem_add_host`).
    pub key: Secret,
    /// The controller's secret (`dhchap_ctrlr_key`): answer a host that
    /// asks the controller to authenticate.
    pub ctrl_key: Option<Secret>,
    /// Hashes the target allows (`nvmf_set_config` `dhchap_digests`).
    pub hashes: Vec<HashFn>,
    /// Groups the target allows (`dhchap_dhgroups`).
    pub groups: Vec<DhGroup>,
}

/// Where the transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrlState {
    /// Waiting for AUTH_Negotiate.
    Negotiate,
    /// The next Receive returns the challenge.
    Challenge,
    /// Waiting for the reply.
    Reply,
    /// The next Receive returns Success1.
    Success1,
    /// Waiting for Success2 (bidirectional).
    Success2,
    /// The next Receive returns Failure1.
    Failure1,
    /// The host is authenticated.
    Done,
    /// The host is not (Failure1 sent, or Failure2 received).
    Failed,
}

/// One transaction of the controller.
#[derive(Debug)]
pub struct Controller {
    cfg: CtrlConfig,
    state: CtrlState,
    tid: u16,
    hash: HashFn,
    group: DhGroup,
    seqnum: u32,
    cval: Zeroizing<Vec<u8>>,
    dh: Option<DhKey>,
    /// R2 to send in Success1.
    r2: Option<Zeroizing<Vec<u8>>>,
    reason: Reason,
    why: &'static str,
}

/// Strongest first: the strongest pair the host offers is chosen, as
/// SPDK's target does.
const HASH_PREFERENCE: [HashFn; 3] = [HashFn::Sha512, HashFn::Sha384, HashFn::Sha256];
const GROUP_PREFERENCE: [DhGroup; 6] = [
    DhGroup::Ffdhe8192,
    DhGroup::Ffdhe6144,
    DhGroup::Ffdhe4096,
    DhGroup::Ffdhe3072,
    DhGroup::Ffdhe2048,
    DhGroup::Null,
];

impl Controller {
    /// A transaction; `seqnum` (non-zero) numbers its challenge.
    #[must_use]
    pub fn new(cfg: CtrlConfig, seqnum: u32) -> Controller {
        Controller {
            cfg,
            state: CtrlState::Negotiate,
            tid: 0,
            hash: HashFn::Sha256,
            group: DhGroup::Null,
            seqnum: seqnum.max(1),
            cval: Zeroizing::new(Vec::new()),
            dh: None,
            r2: None,
            reason: Reason::Failed,
            why: "",
        }
    }

    /// Where it is.
    #[must_use]
    pub fn state(&self) -> CtrlState {
        self.state
    }

    /// Why it failed (for the log; never key material).
    #[must_use]
    pub fn failure(&self) -> Option<(Reason, &'static str)> {
        matches!(self.state, CtrlState::Failure1 | CtrlState::Failed)
            .then_some((self.reason, self.why))
    }

    /// The hash and group chosen.
    #[must_use]
    pub fn chosen(&self) -> (HashFn, DhGroup) {
        (self.hash, self.group)
    }

    fn fail(&mut self, reason: Reason, why: &'static str) {
        if !matches!(self.state, CtrlState::Failure1 | CtrlState::Failed) {
            self.reason = reason;
            self.why = why;
        }
        self.state = CtrlState::Failure1;
    }

    /// An Authentication Send's payload. The command itself completes
    /// with success whatever it held (SPDK's behaviour): an error shows as
    /// Failure1 on the next Receive.
    pub fn on_send(&mut self, bytes: &[u8]) {
        let msg = match Message::decode(bytes) {
            Ok(m) => m,
            Err(_) => return self.fail(Reason::IncorrectPayload, "bad message"),
        };
        match (self.state, msg) {
            (
                CtrlState::Negotiate,
                Message::Negotiate {
                    tid,
                    sc_c,
                    hashes,
                    groups,
                },
            ) => {
                self.tid = tid;
                self.negotiate(sc_c, &hashes, &groups);
            }
            (CtrlState::Reply, m @ Message::Reply { .. }) if m.tid() == self.tid => self.reply(m),
            (CtrlState::Success2, Message::Success2 { tid }) if tid == self.tid => {
                self.state = CtrlState::Done;
            }
            (
                CtrlState::Success2,
                Message::Failure {
                    which: 2,
                    tid,
                    reason,
                },
            ) if tid == self.tid => {
                self.reason = reason;
                self.why = "the host refused the controller's response";
                self.state = CtrlState::Failed;
            }
            (CtrlState::Failure1 | CtrlState::Failed | CtrlState::Done, _) => {
                self.fail(Reason::IncorrectProtocolMessage, "message after the end");
            }
            (_, m) if m.tid() != self.tid && self.state != CtrlState::Negotiate => {
                self.fail(Reason::IncorrectPayload, "transaction id mismatch");
            }
            _ => self.fail(Reason::IncorrectProtocolMessage, "message out of sequence"),
        }
    }

    fn negotiate(&mut self, sc_c: u8, hashes: &[u8], groups: &[u8]) {
        if sc_c != 0 {
            return self.fail(
                Reason::SccMismatch,
                "secure channel concatenation asked for",
            );
        }
        if hashes.is_empty() && groups.is_empty() {
            return self.fail(Reason::ProtocolUnusable, "no DH-HMAC-CHAP descriptor");
        }
        let Some(hash) = HASH_PREFERENCE
            .into_iter()
            .find(|h| self.cfg.hashes.contains(h) && hashes.contains(&h.id()))
        else {
            return self.fail(Reason::HashUnusable, "no common hash");
        };
        let Some(group) = GROUP_PREFERENCE
            .into_iter()
            .find(|g| self.cfg.groups.contains(g) && groups.contains(&g.id()))
        else {
            return self.fail(Reason::DhGroupUnusable, "no common DH group");
        };
        self.hash = hash;
        self.group = group;
        self.state = CtrlState::Challenge;
    }

    fn reply(&mut self, m: Message) {
        let Message::Reply {
            rval,
            cval,
            seqnum,
            dhv,
            ..
        } = m
        else {
            return;
        };
        if rval.len() != self.hash.len() {
            return self.fail(Reason::IncorrectPayload, "response of the wrong length");
        }
        if cval.is_some() && seqnum == 0 {
            return self.fail(Reason::IncorrectPayload, "host challenge with seqnum 0");
        }
        let secret = match &self.dh {
            None if dhv.is_empty() => None,
            None => return self.fail(Reason::IncorrectPayload, "DH value for the null group"),
            Some(k) => match k.shared(&dhv) {
                Ok(s) => Some(s),
                Err(_) => return self.fail(Reason::IncorrectPayload, "bad DH value"),
            },
        };
        let inputs = Inputs {
            hash: self.hash,
            seqnum: self.seqnum,
            tid: self.tid,
            hostnqn: &self.cfg.hostnqn,
            subnqn: &self.cfg.subnqn,
            dh_secret: secret.as_deref().map(|s| &s[..]),
        };
        let want = response(Kind::Host, &self.cfg.key, &self.cval, &inputs);
        if !same(&rval, &want) {
            return self.fail(Reason::Failed, "the host's response is wrong");
        }
        if let Some(c2) = cval {
            let Some(ck) = &self.cfg.ctrl_key else {
                return self.fail(Reason::Failed, "no controller key to answer the host with");
            };
            self.r2 = Some(response(
                Kind::Controller,
                ck,
                &c2,
                &Inputs { seqnum, ..inputs },
            ));
        }
        self.dh = None;
        self.state = CtrlState::Success1;
    }

    /// An Authentication Receive: the message to return (Challenge,
    /// Success1 or Failure1: a Receive out of sequence fails the
    /// transaction); `None` once Failure1 was returned (the command then
    /// fails, and the queue is torn down).
    pub fn on_receive(&mut self) -> Option<Vec<u8>> {
        match self.state {
            CtrlState::Challenge => {
                let mut c = Zeroizing::new(vec![0u8; self.hash.len()]);
                if crate::random(&mut c).is_err() {
                    self.fail(Reason::Failed, "no randomness");
                    return self.on_receive();
                }
                let dhv = if self.group == DhGroup::Null {
                    Vec::new()
                } else {
                    match DhKey::generate(self.group) {
                        Ok(k) => {
                            let p = k.public().to_vec();
                            self.dh = Some(k);
                            p
                        }
                        Err(_) => {
                            self.fail(Reason::Failed, "DH key generation failed");
                            return self.on_receive();
                        }
                    }
                };
                self.cval = c;
                self.state = CtrlState::Reply;
                Some(
                    Message::Challenge {
                        tid: self.tid,
                        hash: self.hash,
                        group: self.group,
                        seqnum: self.seqnum,
                        cval: self.cval.to_vec(),
                        dhv,
                    }
                    .encode(),
                )
            }
            CtrlState::Success1 => {
                let rval = self.r2.take().map(|r| r.to_vec());
                self.state = if rval.is_some() {
                    CtrlState::Success2
                } else {
                    CtrlState::Done
                };
                Some(
                    Message::Success1 {
                        tid: self.tid,
                        hl: u8::try_from(self.hash.len()).unwrap_or(0),
                        rval,
                    }
                    .encode(),
                )
            }
            CtrlState::Failure1 => {
                self.state = CtrlState::Failed;
                Some(
                    Message::Failure {
                        which: 1,
                        tid: self.tid,
                        reason: self.reason,
                    }
                    .encode(),
                )
            }
            CtrlState::Failed => None,
            _ => {
                self.fail(Reason::IncorrectProtocolMessage, "receive out of sequence");
                self.on_receive()
            }
        }
    }
}
