//! A test-only transport, `LOOP`: the host is in the same process and
//! commands, data and completions move as values through a shared
//! [`Wire`], no bytes, no sockets. It proves the seam: a transport that is
//! its own file and one (test-only) line in the registry serves Connect,
//! Identify, writes and reads through the core, the way RDMA (issue 27)
//! will. Its data movement is RDMA's shape, not TCP's: data the core
//! fetches is copied from the host's buffer (an RDMA READ), data it sends
//! is copied to the host (an RDMA WRITE) ahead of the completion.
//!
//! Host side: [`LoopHost::connect`] queues a connection for the
//! transport's `accept`; [`LoopHost::call`] sends one command and waits
//! for its completion.

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bdevkit_nvme_spec::discovery::DiscoveryLogEntry;
use bdevkit_nvme_spec::opcode::DataTransfer;
use bdevkit_nvme_spec::sgl::SglType;
use bdevkit_nvme_spec::{Cqe, Sqe, Status};
use mio::{Events, Token, Waker};

use super::{Accepted, QpairSet, Transport, TransportDef, TransportPollGroup};
use crate::addr::ListenAddr;
use crate::core::conns::Conns;
use crate::core::dispatch::{common_xfer, direction};
use crate::core::pool::GroupBufs;
use crate::core::qpair::{QpInner, QpTransport, Qpair, Sent, Xfer};
use crate::core::slot::Slot;
use crate::core::view::Env;
use crate::error::Result;
use crate::opts::TransportOpts;

/// The transport's type name.
pub(crate) const TRTYPE_LOOP: &str = "LOOP";

/// The registry entry (listed in `TRANSPORTS` under `cfg(test)`).
pub(crate) static TRANSPORT: TransportDef = TransportDef {
    name: TRTYPE_LOOP,
    opts_init: || TransportOpts {
        trtype: TRTYPE_LOOP,
        ..TransportOpts::default()
    },
    create,
    listener_discover,
};

fn create(_: &TransportOpts) -> Result<Arc<dyn Transport>> {
    Ok(Arc::new(LoopTransport::default()))
}

/// No discovery log entry: a loopback listener has no address a host
/// elsewhere could use (the core leaves the entry out).
fn listener_discover(_: u8, _: &str, _: &ListenAddr, _: u16) -> Option<DiscoveryLogEntry> {
    None
}

/// What the host sends.
#[derive(Debug)]
enum HostMsg {
    /// A command, with its in-capsule data (`icd`) and the host buffer
    /// the target may fetch data from (`host_mem`).
    Cmd {
        sqe: Sqe,
        icd: Vec<u8>,
        host_mem: Vec<u8>,
    },
    /// The host goes away.
    Close,
}

/// A completion and the data that came with it.
#[derive(Debug)]
pub(crate) struct Completion {
    pub cqe: Cqe,
    pub data: Vec<u8>,
}

/// The two directions of one connection.
#[derive(Debug, Default)]
struct Wire {
    to_target: Mutex<VecDeque<HostMsg>>,
    to_host: Mutex<VecDeque<Completion>>,
    answered: Condvar,
    /// The poll group's waker, once a group took the connection.
    waker: Mutex<Option<Arc<Waker>>>,
}

impl Wire {
    fn send(&self, m: HostMsg) {
        self.to_target.lock().unwrap().push_back(m);
        // After the push: a group that sets its waker later finds the
        // message when it services the new connection.
        if let Some(w) = &*self.waker.lock().unwrap() {
            let _ = w.wake();
        }
    }
}

/// Connections the host made, waiting for the transport's `accept`.
static PENDING: Mutex<Vec<LoopConn>> = Mutex::new(Vec::new());

/// A connection on its way from `accept` to a poll group.
#[derive(Debug)]
struct LoopConn {
    wire: Arc<Wire>,
    via: ListenAddr,
}

/// The host's end of one connection.
#[derive(Debug)]
pub(crate) struct LoopHost {
    wire: Arc<Wire>,
}

impl LoopHost {
    /// Connects to the loopback listener `via` (taken at the transport's
    /// next accept poll).
    pub fn connect(via: &ListenAddr) -> LoopHost {
        let wire = Arc::new(Wire::default());
        PENDING.lock().unwrap().push(LoopConn {
            wire: Arc::clone(&wire),
            via: via.clone(),
        });
        LoopHost { wire }
    }

    /// Sends `sqe` (its data in the capsule: `icd`; to be fetched:
    /// `host_mem`) and waits for its completion. The wait's bound only
    /// catches a hang; nothing is timed.
    pub fn call(&self, sqe: Sqe, icd: &[u8], host_mem: &[u8]) -> Completion {
        self.wire.send(HostMsg::Cmd {
            sqe,
            icd: icd.to_vec(),
            host_mem: host_mem.to_vec(),
        });
        let mut q = self.wire.to_host.lock().unwrap();
        loop {
            if let Some(c) = q.pop_front() {
                return c;
            }
            let (g, t) = self
                .wire
                .answered
                .wait_timeout(q, Duration::from_secs(30))
                .unwrap();
            assert!(!t.timed_out(), "no completion");
            q = g;
        }
    }
}

impl Drop for LoopHost {
    fn drop(&mut self) {
        self.wire.send(HostMsg::Close);
    }
}

/// The created transport: the addresses it listens on.
#[derive(Debug, Default)]
struct LoopTransport {
    listening: Mutex<Vec<ListenAddr>>,
}

impl Transport for LoopTransport {
    fn listen(&self, addr: &ListenAddr) -> Result<()> {
        self.listening.lock().unwrap().push(addr.clone());
        Ok(())
    }

    fn stop_listen(&self, addr: &ListenAddr) {
        self.listening.lock().unwrap().retain(|a| !a.same(addr));
    }

    fn accept_fd(&self) -> Option<RawFd> {
        None
    }

    fn accept(&self, new_qpair: &mut dyn FnMut(Accepted)) -> usize {
        let listening = self.listening.lock().unwrap();
        let mut pending = PENDING.lock().unwrap();
        let mut n = 0;
        for c in std::mem::take(&mut *pending) {
            if listening.iter().any(|a| a.same(&c.via)) {
                new_qpair(Box::new(c) as Box<dyn Any + Send>);
                n += 1;
            } else {
                pending.push(c);
            }
        }
        n
    }

    fn poll_group_create(&self) -> std::io::Result<Box<dyn TransportPollGroup>> {
        let poll = mio::Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), Token(0))?);
        Ok(Box::new(LoopPollGroup {
            poll: RefCell::new(poll),
            events: RefCell::new(Events::with_capacity(4)),
            waker,
            conns: Conns::default(),
        }))
    }

    fn shutdown(&self) {
        self.listening.lock().unwrap().clear();
    }
}

/// A poll group's loopback connections; one waker for all of them (any
/// host message wakes the group, which then services every connection).
#[derive(Debug)]
struct LoopPollGroup {
    poll: RefCell<mio::Poll>,
    events: RefCell<Events>,
    waker: Arc<Waker>,
    conns: Conns<LoopQpair>,
}

impl TransportPollGroup for LoopPollGroup {
    fn interrupt_fd(&self) -> Option<RawFd> {
        Some(self.poll.borrow().as_raw_fd())
    }

    fn add_qpair(&self, q: Accepted, _: &Env, opts: &TransportOpts, bufs: Rc<GroupBufs>) {
        let Ok(c) = q.downcast::<LoopConn>() else {
            return;
        };
        let LoopConn { wire, via } = *c;
        *wire.waker.lock().unwrap() = Some(Arc::clone(&self.waker));
        let tp = LoopQpair {
            wire,
            outbox: Vec::new(),
            fetched: Vec::new(),
        };
        let idx = self.conns.reserve();
        self.conns
            .set(idx, Qpair::new(tp, via.clone(), via, opts.clone(), bufs));
        let _ = self.waker.wake();
    }

    fn poll(&self, env: &Env) -> bool {
        let mut events = self.events.borrow_mut();
        let woken = self
            .poll
            .borrow_mut()
            .poll(&mut events, Some(Duration::ZERO))
            .is_ok()
            && !events.is_empty();
        if woken {
            for q in self.conns.list.borrow().iter().flatten() {
                q.kick.set(true);
            }
        }
        self.conns.service(env, |_| {})
    }

    fn qpairs(&self) -> &dyn QpairSet {
        &self.conns
    }
}

/// What a slot keeps: the host buffer its data is fetched from, and the
/// data it sends with its completion.
#[derive(Debug, Default)]
struct LoopReq {
    host_mem: Vec<u8>,
    read: Vec<u8>,
}

/// The transport half of one loopback queue pair.
#[derive(Debug)]
struct LoopQpair {
    wire: Arc<Wire>,
    /// Answers waiting for the flush.
    outbox: Vec<(u16, Completion)>,
    /// Slots whose data was asked for: copied at the next receive.
    fetched: Vec<u16>,
}

impl LoopQpair {
    /// Takes one host message into a free slot; `false`: none waiting
    /// (or no slot free: then `rx_blocked`).
    fn take_one(q: &mut QpInner<Self>, me: &Rc<Qpair<Self>>, env: &Env) -> bool {
        let mut inbox = q.tp.wire.to_target.lock().unwrap();
        if inbox.is_empty() {
            return false;
        }
        if q.free.is_empty() {
            q.rx_blocked = true;
            return false;
        }
        let msg = inbox.pop_front();
        drop(inbox);
        let Some(HostMsg::Cmd { sqe, icd, host_mem }) = msg else {
            q.begin_close("host closed the connection", false);
            return false;
        };
        let Ok(icd_len) = u32::try_from(icd.len()) else {
            q.begin_close("capsule too large", false);
            return false;
        };
        if icd_len > q.icd_limit {
            q.begin_close("in-capsule data over the limit", false);
            return false;
        }
        let admin = q.is_admin();
        let Some(slot) = q.free.pop() else {
            return false;
        };
        let s = &mut q.slots[usize::from(slot)];
        s.start(sqe, icd_len);
        s.tp.host_mem = host_mem;
        if !icd.is_empty() {
            if !s.ensure(icd.len(), admin) {
                q.begin_close("in-capsule data over the buffer", false);
                return false;
            }
            s.data_mut()[..icd.len()].copy_from_slice(&icd);
        }
        q.on_capsule(me, env, slot);
        true
    }
}

impl QpTransport for LoopQpair {
    type Req = LoopReq;

    fn receive(q: &mut QpInner<Self>, me: &Rc<Qpair<Self>>, env: &Env) -> bool {
        let mut busy = false;
        loop {
            // Data the core asked for first (an RDMA READ completing).
            while let Some(slot) = q.tp.fetched.pop() {
                let s = &mut q.slots[usize::from(slot)];
                let n = s.xfer as usize;
                let src = std::mem::take(&mut s.tp.host_mem);
                match (s.data_mut().get_mut(..n), src.get(..n)) {
                    (Some(d), Some(src)) => d.copy_from_slice(src),
                    // The host's buffer is short: fail the command.
                    _ => s.digest_error = true,
                }
                q.on_data_received(me, env, slot);
                busy = true;
            }
            if q.closing() || !Self::take_one(q, me, env) {
                return busy;
            }
            busy = true;
        }
    }

    fn flush(q: &mut QpInner<Self>, _: &Rc<Qpair<Self>>) -> bool {
        if q.tp.outbox.is_empty() {
            return false;
        }
        let out = std::mem::take(&mut q.tp.outbox);
        {
            let mut to_host = q.tp.wire.to_host.lock().unwrap();
            for (_, c) in &out {
                to_host.push_back(Completion {
                    cqe: c.cqe,
                    data: c.data.clone(),
                });
            }
        }
        q.tp.wire.answered.notify_all();
        for (slot, _) in out {
            q.release_slot(slot);
        }
        true
    }

    fn tx_idle(&self) -> bool {
        self.outbox.is_empty()
    }

    fn connected(&mut self, entries: usize) {
        self.outbox.reserve(entries);
        self.fetched.reserve(entries);
    }

    /// Data in the capsule (an offset data block, the core's rule), or
    /// moved by the transport (a transport data block).
    fn setup_xfer(s: &mut Slot<LoopReq>, max: u32) -> Result<Xfer, Status> {
        if !s.sqe.psdt().is_sgl() {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        let sgl = s.sqe.sgl1();
        if sgl.kind() != SglType::TransportDataBlock {
            return common_xfer(s, &sgl);
        }
        let len = sgl.length();
        if s.icd_len != 0 || len > max {
            return Err(Status::DATA_SGL_LENGTH_INVALID.with_dnr());
        }
        s.xfer = len;
        Ok(match (len, direction(&s.sqe)) {
            (0, _) | (_, DataTransfer::None) => Xfer::None,
            (_, DataTransfer::HostToController) => Xfer::Fetch,
            (_, DataTransfer::ControllerToHost) => Xfer::Send,
            (_, DataTransfer::Bidirectional) => return Err(Status::INVALID_FIELD.with_dnr()),
        })
    }

    fn respond(&mut self, s: &mut Slot<LoopReq>, slot: u16, cqe: &Cqe) -> bool {
        let data = std::mem::take(&mut s.tp.read);
        self.outbox.push((slot, Completion { cqe: *cqe, data }));
        true
    }

    fn send_data(&mut self, s: &mut Slot<LoopReq>, _: u16, len: u32, _: u32) -> Sent {
        match s.data().get(..len as usize) {
            Some(d) => {
                s.tp.read = d.to_vec();
                Sent::NeedsResponse
            }
            None => Sent::Failed,
        }
    }

    fn fetch_data(&mut self, _: &mut Slot<LoopReq>, slot: u16) -> bool {
        self.fetched.push(slot);
        // The next receive copies it: wake the group (this may run
        // outside a service step, after a wait for a data buffer).
        if let Some(w) = &*self.wire.waker.lock().unwrap() {
            let _ = w.wake();
        }
        true
    }
}

#[cfg(test)]
mod tests;
