//! The NVMe/TCP transport.
//!
//! * `acceptor`: the listening sockets, polled on the app thread; new
//!   connections go to the poll groups round robin.
//! * `group`: a poll group per reactor core (a lightweight thread): its
//!   connections in one epoll set, their service, keep alive checks.
//! * `qpair`: one connection: the receive state machine over the spec
//!   crate's parser; `close` (closing and draining); `dispatch` (capsules, fabrics
//!   and admin commands), `exec_io` (I/O on bdevs), `fused` (fused
//!   Compare and Write), `respond` (responses,
//!   C2HData, R2T, the send queue flush).
//! * `conn`: receive buffer and send queue (batched `read`/`readv`,
//!   `writev`); `slot`: the per-entry request slots; `view`: a group's
//!   namespaces with its bdev channels; `pool`: the transport's shared
//!   data buffers and the groups' caches in front of them.
//!
//! Steady state allocates nothing per command: slots, their in-capsule
//! buffers, the send queue and the completion list are sized at Connect;
//! larger transfers borrow a shared buffer, allocated once.

pub(crate) mod acceptor;
pub(crate) mod close;
pub(crate) mod conn;
pub(crate) mod dispatch;
pub(crate) mod exec_io;
pub(crate) mod fused;
pub(crate) mod group;
pub(crate) mod pool;
pub(crate) mod qpair;
pub(crate) mod respond;
pub(crate) mod slot;
pub(crate) mod view;

pub use conn::Sock;

use std::net::SocketAddr;
use std::rc::Rc;

use crate::addr::ListenAddr;
use crate::error::{Error, Result};
use crate::service::Target;

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
    q: Rc<qpair::Qpair<S>>,
    env: view::Env,
}

impl<S: Sock + 'static> Connection<S> {
    /// A connection of `target` over `sock`, from `peer`, as accepted on
    /// the listener `via` (Connect checks it against the subsystem's
    /// listeners). Needs the target's transport; call on a bdevkit thread.
    pub fn new(
        target: &Target,
        sock: S,
        peer: SocketAddr,
        via: SocketAddr,
    ) -> Result<Connection<S>> {
        let t = bdevkit::thread::Thread::current().ok_or(Error::NotRunning)?;
        let core = std::sync::Arc::clone(&target.0.core);
        let (opts, pool) = {
            let st = core.state.lock();
            match (&st.transport, &st.pool) {
                (Some(o), Some(p)) => (o.clone(), std::sync::Arc::clone(p)),
                _ => return Err(Error::NoTransport(crate::opts::TRTYPE_TCP.into())),
            }
        };
        let env = view::Env::new(core, t.handle(), t.name().to_string());
        let bufs = env.group_bufs(&pool);
        let q = qpair::Qpair::new(
            sock,
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
        f(&mut self.q.q.borrow_mut().sock)
    }
}

impl<S: Sock + 'static> Drop for Connection<S> {
    fn drop(&mut self) {
        if !self.q.done.get() {
            self.q.abandon(&self.env);
        }
    }
}
