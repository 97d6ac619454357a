//! The NVMe/TCP transport (TP 8000): how commands, data and responses
//! move over TCP. What they mean is the core's (`core/`); this folder is
//! the transport seam's TCP implementation (`transport/`).
//!
//! * `TRANSPORT`: the registry entry (`-t TCP`); `TcpTransport` the
//!   created transport (listeners, accept).
//! * `acceptor`: the listening sockets, polled on the app thread.
//! * `group`: the TCP side of a poll group: its connections in one epoll
//!   set.
//! * `qpair`: one connection's transport half: the receive state machine
//!   (ICReq, capsules, H2CData, digests, TermReq) and the SGL rules;
//!   `respond` (responses, C2HData, R2T, the send queue flush); `conn`
//!   (receive buffer and send queue: batched `read`/`readv`, `writev`).
//!
//! Steady state allocates nothing per command: the send queue and the
//! slots' PDU headers are sized at Connect.

pub(crate) mod acceptor;
pub(crate) mod conn;
pub(crate) mod group;
pub(crate) mod qpair;
pub(crate) mod respond;

pub use conn::Sock;

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;

use bdevkit_nvme_spec::discovery::DiscoveryLogEntry;
use parking_lot::Mutex;

use crate::addr::ListenAddr;
use crate::core::qpair::Qpair;
use crate::core::view::Env;
use crate::error::{Error, Result};
use crate::opts::{TransportOpts, TRTYPE_TCP};
use crate::service::Target;
use crate::transport::{Accepted, Transport, TransportDef, TransportPollGroup};
use acceptor::Acceptor;
use qpair::TcpQpair;

/// The TCP transport's registry entry.
pub(crate) static TRANSPORT: TransportDef = TransportDef {
    name: TRTYPE_TCP,
    opts_init: TransportOpts::default,
    create,
    listener_discover,
};

/// `sock_priority` is accepted and reported, not applied (`opts.rs`
/// warns).
fn create(_: &TransportOpts) -> Result<Arc<dyn Transport>> {
    let t = TcpTransport {
        acceptor: Mutex::new(Acceptor::new()?),
    };
    Ok(Arc::new(t))
}

fn listener_discover(
    subtype: u8,
    subnqn: &str,
    l: &ListenAddr,
    portid: u16,
) -> Option<DiscoveryLogEntry> {
    DiscoveryLogEntry::tcp(
        subtype,
        subnqn,
        l.adrfam.code(),
        &l.traddr,
        &l.trsvcid,
        portid,
    )
    .ok()
}

/// A created TCP transport: its listening sockets.
#[derive(Debug)]
pub(crate) struct TcpTransport {
    acceptor: Mutex<Acceptor>,
}

impl Transport for TcpTransport {
    fn listen(&self, addr: &ListenAddr) -> Result<()> {
        self.acceptor.lock().listen(addr)
    }

    fn stop_listen(&self, addr: &ListenAddr) {
        self.acceptor.lock().unlisten(addr);
    }

    fn accept_fd(&self) -> Option<RawFd> {
        Some(self.acceptor.lock().fd())
    }

    fn accept(&self, new_qpair: &mut dyn FnMut(Accepted)) -> usize {
        let conns = self.acceptor.lock().accept();
        let n = conns.len();
        for c in conns {
            new_qpair(Box::new(c));
        }
        n
    }

    fn poll_group_create(&self) -> std::io::Result<Box<dyn TransportPollGroup>> {
        Ok(Box::new(group::TcpPollGroup::new()?))
    }

    fn shutdown(&self) {
        self.acceptor.lock().close_all();
    }
}

/// One target-side NVMe/TCP connection over any byte stream, driven by
/// hand: the protocol core without sockets or poll groups, for tests and
/// fuzzing (an in-memory pipe), and for an initiator's tests against this
/// target. The poll groups run the same code over TCP sockets.
///
/// It lives on the bdevkit thread that made it (its bdev channels are
/// that thread's). Dropping it ends its association (an admin queue's
/// controller goes) without waiting for bdev I/O in flight.
#[derive(Debug)]
pub struct Connection<S: Sock + 'static> {
    q: Rc<Qpair<TcpQpair<S>>>,
    env: Env,
}

impl<S: Sock + 'static> Connection<S> {
    /// A connection of `target` over `sock`, from `peer`, as accepted on
    /// the listener `via` (Connect checks it against the subsystem's
    /// listeners). Needs the target's TCP transport; call on a bdevkit
    /// thread.
    pub fn new(
        target: &Target,
        sock: S,
        peer: SocketAddr,
        via: SocketAddr,
    ) -> Result<Connection<S>> {
        let t = bdevkit::thread::Thread::current().ok_or(Error::NotRunning)?;
        let core = Arc::clone(&target.0.core);
        let (opts, pool) = {
            let st = core.state.lock();
            match st.transport(TRTYPE_TCP) {
                Some(r) => (r.opts.clone(), Arc::clone(&r.pool)),
                None => return Err(Error::NoTransport(TRTYPE_TCP.into())),
            }
        };
        let env = Env::new(core, t.handle(), t.name().to_string());
        let bufs = env.group_bufs(&pool);
        let tp = TcpQpair::new(sock, &opts);
        let q = Qpair::new(
            tp,
            ListenAddr::of_socket(TRTYPE_TCP, peer),
            ListenAddr::of_socket(TRTYPE_TCP, via),
            opts,
            bufs,
        );
        Ok(Connection { q, env })
    }

    /// One service step (as a poll group runs it on readable and writable
    /// events): reads what the stream has, handles it, writes what is
    /// queued. Returns whether it did anything.
    pub fn poll(&self) -> bool {
        self.q.on_event(true, true);
        let busy = self.q.service(&self.env);
        self.env.serve_bufs() | busy
    }

    /// Whether the connection ended (the target closed it).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.q.done.get()
    }

    /// Runs `f` on the stream (feed a fake socket, take its output).
    pub fn with_sock<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut self.q.q.borrow_mut().tp.sock)
    }
}

impl<S: Sock + 'static> Drop for Connection<S> {
    fn drop(&mut self) {
        if !self.q.done.get() {
            self.q.abandon(&self.env);
        }
    }
}
