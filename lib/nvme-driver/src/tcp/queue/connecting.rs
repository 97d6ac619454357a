//! The queue's side of connecting (see `connect.rs`): the steps its
//! polls take, and the wait of a queue connected off the reactor threads.

use std::time::Instant;

use bdevkit_nvme_spec::fabrics::ConnectResponse;
use bdevkit_nvme_spec::tcp::{self, TxConfig};
use bdevkit_nvme_spec::Cqe;

use super::{io_err, TcpQueue};
use crate::error::{Error, Result};
use crate::tcp::connect::{Connecting, Failure, Phase};

impl TcpQueue {
    /// Sends the ICReq; what the controller answers is read by the polls.
    pub(crate) fn send_ic_req(&mut self) {
        self.send_pending();
    }

    /// One step of the connection: sends what is pending, handles what
    /// arrived (R2Ts queue data, an ICResp queues the Connect, the
    /// Connect's response sends the held commands), and fails a connect
    /// past its deadline.
    pub(super) fn advance(&mut self) {
        if self.sock.is_none() {
            return;
        }
        self.send_pending();
        self.receive();
        self.send_pending();
        if self
            .conn
            .as_ref()
            .is_some_and(|c| Instant::now() >= c.deadline)
        {
            self.failure = Some(Failure::TimedOut);
            self.close("connect timed out");
        }
    }

    /// ICResp arrived: takes its settings and queues the Fabrics Connect
    /// (in the capsule, in the slot past the queue pair's).
    pub(super) fn ic_resp_done(&mut self, dgst: u8, cpda: u8, maxh2cdata: u32) {
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        let got = match c.granted(dgst) {
            Ok(g) => g,
            Err(why) => return self.close(why),
        };
        c.phase = Phase::Connect;
        let mut sqe = c.connect;
        let data = std::mem::take(&mut c.data);
        self.maxh2cdata = maxh2cdata;
        self.tx = TxConfig {
            digests: got,
            pda: cpda,
        };
        self.rx = self.rx.connected(got, 0);
        let slot = self.depth;
        sqe.cid.set(slot);
        let len32 = u32::try_from(data.len()).expect("invariant: Connect data is 1 KiB");
        if !self.push_capsule(&mut sqe, len32, true) {
            return self.close("cannot build the Fabrics Connect");
        }
        self.out.extend_from_slice(&data);
        if got.data {
            self.out
                .extend_from_slice(&tcp::data_digest(&data).to_le_bytes());
        }
        let s = &mut self.slots[usize::from(slot)];
        s.busy = true;
        s.completed = false;
        s.bad_digest = false;
        s.got = 0;
        s.len = data.len();
        s.from_dev = false;
        s.in_capsule = true;
    }

    /// The Fabrics Connect's response: the queue is ready and sends what
    /// it held, or the connection closes.
    pub(super) fn connect_done(&mut self, cqe: &Cqe) {
        self.slots[usize::from(self.depth)].busy = false;
        let Some(mut c) = self.conn.take() else {
            return;
        };
        let st = cqe.status();
        if !st.is_success() {
            self.failure = Some(Failure::Rejected(st));
            return self.close(&format!("Fabrics Connect rejected: {st}"));
        }
        self.connect_dw0 = cqe.dw0.get();
        let atr = ConnectResponse::from_dword(self.connect_dw0).auth_required();
        if atr || c.auth.is_some() {
            if c.auth.is_none() {
                self.failure = Some(Failure::Auth(
                    "the controller requires DH-HMAC-CHAP and no dhchap_key was given",
                ));
                return self.close("authentication required without a key");
            }
            c.phase = Phase::Auth;
            self.conn = Some(c);
            return self.auth_start();
        }
        self.ready(*c);
    }

    /// The queue is ready: it takes the I/O in-capsule limit and sends
    /// what it held.
    pub(super) fn ready(&mut self, mut c: Connecting) {
        self.icd_max = c.in_capsule;
        tracing::debug!(qid = self.qid, digests = ?self.tx.digests, held = c.held.len(),
            "NVMe/TCP queue connected");
        while let Some((slot, mut sqe)) = c.held.pop_front() {
            let s = &self.slots[usize::from(slot)];
            let len = s.len;
            let in_capsule = !s.from_dev && len > 0 && len <= self.icd_max;
            let len32 = u32::try_from(len).expect("invariant: checked at submission");
            if !self.push_capsule(&mut sqe, len32, in_capsule) {
                return self.close("cannot build a command capsule");
            }
            self.slots[usize::from(slot)].in_capsule = in_capsule;
            if in_capsule {
                let piece = &self.slots[usize::from(slot)].buf[..len];
                self.out.extend_from_slice(piece);
                if self.tx.digests.data {
                    self.out
                        .extend_from_slice(&tcp::data_digest(piece).to_le_bytes());
                }
            }
        }
    }

    /// Waits (off the reactor threads only: the admin queue at attach or
    /// reset) until the queue is connected, blocking in the socket's
    /// reads; returns dword 0 of the Connect's response.
    pub(crate) fn wait_connected(&mut self) -> Result<u32> {
        self.set_blocking(true)?;
        while let Some(deadline) = self.conn.as_ref().map(|c| c.deadline) {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(sock) = self.sock.as_ref() {
                if !left.is_zero() {
                    sock.get_ref()
                        .set_read_timeout(Some(left))
                        .map_err(io_err("socket timeout"))?;
                }
            }
            self.advance();
        }
        if self.sock.is_some() {
            self.set_blocking(false)?;
            return Ok(self.connect_dw0);
        }
        Err(match self.failure {
            Some(Failure::Rejected(status)) => Error::Command {
                opcode: <bdevkit_nvme_spec::fabrics::Connect as bdevkit_nvme_spec::Command>::OPCODE,
                status,
            },
            Some(Failure::TimedOut) => Error::Timeout("NVMe/TCP connect"),
            Some(Failure::Auth(why)) => Error::Auth(why.into()),
            None => Error::Unsupported(format!(
                "NVMe/TCP: {}",
                self.dead_reason.as_deref().unwrap_or("connection lost")
            )),
        })
    }

    fn set_blocking(&mut self, on: bool) -> Result<()> {
        let Some(sock) = self.sock.as_ref() else {
            return Ok(());
        };
        sock.get_ref()
            .set_nonblocking(!on)
            .map_err(io_err("nonblocking socket"))?;
        sock.get_ref()
            .set_read_timeout(None)
            .map_err(io_err("socket timeout"))
    }
}
