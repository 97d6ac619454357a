//! The host's side of one DH-HMAC-CHAP transaction, on one queue:
//! Negotiate → (Challenge) → Reply → (Success1) → \[Success2\]. Sans I/O:
//! it makes the payloads of Authentication Send and reads those of
//! Authentication Receive; the caller moves them.

use zeroize::Zeroizing;

use crate::calc::{response, same, Inputs, Kind};
use crate::dh::DhKey;
use crate::ids::{DhGroup, HashFn};
use crate::key::Secret;
use crate::msg::{Message, Reason};
use crate::Error;

/// What the host authenticates with.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Its NQN.
    pub hostnqn: String,
    /// The subsystem's NQN.
    pub subnqn: String,
    /// Its secret.
    pub key: Secret,
    /// The controller's secret: ask the controller to authenticate too.
    pub ctrl_key: Option<Secret>,
    /// Hashes it allows (offered in this order).
    pub hashes: Vec<HashFn>,
    /// Groups it allows.
    pub groups: Vec<DhGroup>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    AwaitChallenge,
    AwaitSuccess1,
    Done,
    Failed,
}

/// What the host does next.
#[derive(Debug)]
pub enum HostStep {
    /// Send this with Authentication Send, then receive the next message.
    SendThenReceive(Vec<u8>),
    /// Send this (Success2), and authentication is done.
    SendAndFinish(Vec<u8>),
    /// Authentication is done.
    Finished,
}

/// The transaction failed: send `failure2` (if any) with Authentication
/// Send, then give up on the queue.
#[derive(Debug)]
pub struct HostFailure {
    /// Why (for the log; never key material).
    pub reason: Reason,
    /// What happened.
    pub why: &'static str,
    /// AUTH_Failure2 to send, when the protocol says so.
    pub failure2: Option<Vec<u8>>,
}

/// One transaction of the host.
#[derive(Debug)]
pub struct Host {
    cfg: HostConfig,
    tid: u16,
    seqnum: u32,
    state: State,
    /// R2 the controller must answer with (bidirectional).
    expect: Option<Zeroizing<Vec<u8>>>,
}

impl Host {
    /// A transaction with id `tid`; `seqnum` (non-zero) numbers the
    /// host's own challenge when it authenticates the controller.
    #[must_use]
    pub fn new(cfg: HostConfig, tid: u16, seqnum: u32) -> Host {
        Host {
            cfg,
            tid,
            seqnum: seqnum.max(1),
            state: State::Start,
            expect: None,
        }
    }

    /// Whether it succeeded.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The AUTH_Negotiate payload.
    pub fn negotiate(&mut self) -> Vec<u8> {
        self.state = State::AwaitChallenge;
        Message::Negotiate {
            tid: self.tid,
            sc_c: 0,
            hashes: self.cfg.hashes.iter().map(|h| h.id()).collect(),
            groups: self.cfg.groups.iter().map(|g| g.id()).collect(),
        }
        .encode()
    }

    fn fail(&mut self, reason: Reason, why: &'static str, send: bool) -> HostFailure {
        self.state = State::Failed;
        HostFailure {
            reason,
            why,
            failure2: send.then(|| {
                Message::Failure {
                    which: 2,
                    tid: self.tid,
                    reason,
                }
                .encode()
            }),
        }
    }

    /// An Authentication Receive's payload arrived.
    ///
    /// # Errors
    /// [`HostFailure`] when authentication failed: a Failure1 from the
    /// controller, a message out of place, or a wrong response.
    pub fn on_message(&mut self, bytes: &[u8]) -> Result<HostStep, HostFailure> {
        let msg = match Message::decode_received(bytes) {
            Ok(m) => m,
            Err(Error::Message(w)) => return Err(self.fail(Reason::IncorrectPayload, w, true)),
            Err(_) => return Err(self.fail(Reason::IncorrectPayload, "bad message", true)),
        };
        if let Message::Failure {
            which: 1, reason, ..
        } = msg
        {
            return Err(self.fail(reason, "the controller refused", false));
        }
        if msg.tid() != self.tid {
            return Err(self.fail(Reason::IncorrectPayload, "transaction id mismatch", true));
        }
        match (self.state, msg) {
            (
                State::AwaitChallenge,
                Message::Challenge {
                    hash,
                    group,
                    seqnum,
                    cval,
                    dhv,
                    ..
                },
            ) => self.reply(hash, group, seqnum, &cval, &dhv),
            (State::AwaitSuccess1, Message::Success1 { rval, .. }) => self.success1(rval),
            _ => Err(self.fail(
                Reason::IncorrectProtocolMessage,
                "message out of sequence",
                true,
            )),
        }
    }

    fn reply(
        &mut self,
        hash: HashFn,
        group: DhGroup,
        seqnum: u32,
        cval: &[u8],
        dhv: &[u8],
    ) -> Result<HostStep, HostFailure> {
        if seqnum == 0 {
            return Err(self.fail(Reason::IncorrectPayload, "challenge with seqnum 0", true));
        }
        if !self.cfg.hashes.contains(&hash) {
            return Err(self.fail(Reason::HashUnusable, "hash not allowed", true));
        }
        if !self.cfg.groups.contains(&group) {
            return Err(self.fail(Reason::DhGroupUnusable, "DH group not allowed", true));
        }
        let (secret, public) = if group == DhGroup::Null {
            (None, Vec::new())
        } else {
            let k = DhKey::generate(group)
                .map_err(|_| self.fail(Reason::Failed, "DH key generation failed", true))?;
            let s = k
                .shared(dhv)
                .map_err(|_| self.fail(Reason::IncorrectPayload, "bad DH value", true))?;
            (Some(s), k.public().to_vec())
        };
        let mut c2 = vec![0u8; hash.len()];
        if self.cfg.ctrl_key.is_some() && crate::random(&mut c2).is_err() {
            return Err(self.fail(Reason::Failed, "no randomness", true));
        }
        let inputs = Inputs {
            hash,
            seqnum,
            tid: self.tid,
            hostnqn: &self.cfg.hostnqn,
            subnqn: &self.cfg.subnqn,
            dh_secret: secret.as_deref().map(|s| &s[..]),
        };
        let rval = response(Kind::Host, &self.cfg.key, cval, &inputs);
        let (c2, s2) = match &self.cfg.ctrl_key {
            None => (None, 0),
            Some(ck) => {
                let s2 = self.seqnum;
                let r2 = response(
                    Kind::Controller,
                    ck,
                    &c2,
                    &Inputs {
                        seqnum: s2,
                        ..inputs
                    },
                );
                self.expect = Some(r2);
                (Some(c2), s2)
            }
        };
        self.state = State::AwaitSuccess1;
        Ok(HostStep::SendThenReceive(
            Message::Reply {
                tid: self.tid,
                rval: rval.to_vec(),
                cval: c2,
                seqnum: s2,
                dhv: public,
            }
            .encode(),
        ))
    }

    fn success1(&mut self, rval: Option<Vec<u8>>) -> Result<HostStep, HostFailure> {
        match (&self.expect, rval) {
            (None, _) => {
                self.state = State::Done;
                Ok(HostStep::Finished)
            }
            (Some(want), Some(got)) if same(&got, want) => {
                self.state = State::Done;
                Ok(HostStep::SendAndFinish(
                    Message::Success2 { tid: self.tid }.encode(),
                ))
            }
            (Some(_), Some(_)) => {
                Err(self.fail(Reason::Failed, "the controller's response is wrong", true))
            }
            (Some(_), None) => Err(self.fail(
                Reason::IncorrectPayload,
                "the controller did not authenticate itself",
                true,
            )),
        }
    }
}
