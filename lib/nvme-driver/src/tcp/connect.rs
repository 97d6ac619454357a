//! A queue's way to "connected", advanced from its polls, never waited
//! for on the owner's thread: ICReq goes out with the queue, ICResp
//! settles digests and PDU alignment, then the Fabrics Connect goes out
//! (in a slot of its own, past the slots the queue pair uses) and its
//! response makes the queue ready (or, when the controller asks for it
//! or the host has a DH-HMAC-CHAP key, authentication runs first:
//! `queue/auth.rs`). Commands submitted meanwhile are held
//! by the queue and go out once it is ready; a failure or the deadline
//! closes the queue like a dropped connection (held commands complete
//! with Transient Transport Error, the queue reports itself dead).

use std::collections::VecDeque;
use std::time::Instant;

use bdevkit_nvme_auth::{Host, HostConfig};
use bdevkit_nvme_spec::tcp::{digest_bits, Digests};
use bdevkit_nvme_spec::{Sqe, Status};

/// How far the connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// ICReq sent (or pending), ICResp awaited.
    IcResp,
    /// Fabrics Connect sent, its response awaited.
    Connect,
    /// DH-HMAC-CHAP running over Authentication Send / Receive.
    Auth,
}

/// Why a connection attempt ended without a ready queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The controller rejected the Fabrics Connect with this status.
    Rejected(Status),
    /// The deadline passed first.
    TimedOut,
    /// DH-HMAC-CHAP failed (why, for the error; never key material).
    Auth(&'static str),
}

/// A connection attempt in progress.
#[derive(Debug)]
pub(crate) struct Connecting {
    /// Where it is.
    pub(crate) phase: Phase,
    /// When it fails if not ready.
    pub(crate) deadline: Instant,
    /// Digests asked for in the ICReq.
    pub(crate) digests: Digests,
    /// The Fabrics Connect command (its CID is set when it goes out).
    pub(crate) connect: Sqe,
    /// Its data (Connect data, in the capsule).
    pub(crate) data: Vec<u8>,
    /// In-capsule limit once connected.
    pub(crate) in_capsule: usize,
    /// Commands submitted meanwhile, in order (slot, command).
    pub(crate) held: VecDeque<(u16, Sqe)>,
    /// DH-HMAC-CHAP: what the queue authenticates with after Connect.
    pub(crate) auth: Option<Box<HostConfig>>,
    /// DH-HMAC-CHAP in progress (phase [`Phase::Auth`]).
    pub(crate) run: Option<AuthRun>,
}

/// What an authenticating queue waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthWait {
    /// A Send's completion; then receive the next message.
    SendThenReceive,
    /// A Send's completion; then the queue is ready (Success2 went).
    SendThenReady,
    /// A Send's completion (Failure2 went); then the queue fails.
    SendThenFail(&'static str),
    /// A Receive's completion and its message.
    Receive,
}

/// One DH-HMAC-CHAP transaction in progress.
#[derive(Debug)]
pub(crate) struct AuthRun {
    /// The protocol's state machine.
    pub(crate) host: Host,
    /// What comes next.
    pub(crate) wait: AuthWait,
}

impl Connecting {
    /// An attempt asking for `digests`, sending `connect` with `data`
    /// once ICResp arrived, failing at `deadline`; the ready queue takes
    /// `in_capsule` bytes of write data in a capsule.
    pub(crate) fn new(
        digests: Digests,
        deadline: Instant,
        connect: Sqe,
        data: Vec<u8>,
        in_capsule: usize,
    ) -> Self {
        Connecting {
            phase: Phase::IcResp,
            deadline,
            digests,
            connect,
            data,
            in_capsule,
            held: VecDeque::new(),
            auth: None,
            run: None,
        }
    }

    /// The digests an ICResp's `dgst` field enables, checked against what
    /// was asked for (a controller may turn one down, never add one).
    pub(crate) fn granted(&self, dgst: u8) -> Result<Digests, &'static str> {
        let got = Digests {
            header: dgst & digest_bits::HEADER != 0,
            data: dgst & digest_bits::DATA != 0,
        };
        let asked = self.digests;
        if (got.header && !asked.header) || (got.data && !asked.data) {
            return Err("controller enabled digests not asked for");
        }
        if got != asked {
            tracing::warn!(asked = ?asked, got = ?got, "NVMe/TCP digests not all enabled");
        }
        Ok(got)
    }
}
