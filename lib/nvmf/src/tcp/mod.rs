//! The NVMe/TCP transport (TP 8000): how commands, data and responses
//! move over TCP. What they mean is the core's (`core/`).
//!
//! * `acceptor`: the listening sockets, polled on the app thread.
//! * `group`: a poll group per reactor core (a lightweight thread): its
//!   connections in one epoll set, their service, keep alive checks.
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
use std::rc::Rc;
use std::sync::Arc;

use crate::addr::ListenAddr;
use crate::core::qpair::Qpair;
use crate::core::view::Env;
use crate::error::{Error, Result};
use crate::opts::TRTYPE_TCP;
use crate::service::Target;
use qpair::TcpQpair;

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
            match (&st.transport, &st.pool) {
                (Some(o), Some(p)) => (o.clone(), Arc::clone(p)),
                _ => return Err(Error::NoTransport(TRTYPE_TCP.into())),
            }
        };
        let env = Env::new(core, t.handle(), t.name().to_string());
        let bufs = env.group_bufs(&pool);
        let tp = TcpQpair::new(sock, &opts);
        let q = Qpair::new(
            tp,
            ListenAddr::of_socket(peer),
            ListenAddr::of_socket(via),
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
