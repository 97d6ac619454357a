//! The TCP transport's side of a poll group: its sockets in one epoll set
//! (mio), so a poll is one `epoll_wait(0)` and then the service of the
//! connections that have something to do; in interrupt mode the set's fd
//! is in the thread's wake-up set (the core registers it), so an idle
//! reactor sleeps until a socket becomes readable or writable.

use std::cell::RefCell;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use bdevkit_nvme_tls::{Stream, TlsConn};
use mio::unix::SourceFd;
use mio::{Events, Interest, Token};

use super::acceptor::Accept;
use super::qpair::TcpQpair;
use crate::addr::ListenAddr;
use crate::core::conns::Conns;
use crate::core::pool::GroupBufs;
use crate::core::qpair::Qpair;
use crate::core::view::Env;
use crate::opts::{TransportOpts, TRTYPE_TCP};
use crate::transport::{Accepted, QpairSet, TransportPollGroup};

/// Socket events taken per poll.
const EVENTS: usize = 256;

/// A poll group's TCP connections.
#[derive(Debug)]
pub(crate) struct TcpPollGroup {
    poll: RefCell<mio::Poll>,
    events: RefCell<Events>,
    conns: Conns<TcpQpair<Stream<TcpStream>>>,
}

impl TcpPollGroup {
    pub fn new() -> std::io::Result<TcpPollGroup> {
        Ok(TcpPollGroup {
            poll: RefCell::new(mio::Poll::new()?),
            events: RefCell::new(Events::with_capacity(EVENTS)),
            conns: Conns::default(),
        })
    }
}

impl TransportPollGroup for TcpPollGroup {
    fn interrupt_fd(&self) -> Option<RawFd> {
        Some(self.poll.borrow().as_raw_fd())
    }

    fn add_qpair(&self, q: Accepted, env: &Env, opts: &TransportOpts, bufs: Rc<GroupBufs>) {
        let Ok(a) = q.downcast::<Accept>() else {
            return;
        };
        let Accept { stream, via } = *a;
        let peer = match stream.peer_addr() {
            Ok(p) => ListenAddr::of_socket(TRTYPE_TCP, p),
            Err(_) => return,
        };
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        // A secure listener's connections start with the TLS handshake
        // (before the ICReq); a plain ICReq fails it, and a ClientHello
        // on a plain listener fails the ICReq: both are refused.
        let stream = if via.secure_channel {
            let Some(cfg) = env.core.tls.server() else {
                return;
            };
            match TlsConn::accept(cfg, stream) {
                Ok(t) => Stream::Tls(Box::new(t)),
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "cannot start TLS");
                    return;
                }
            }
        } else {
            Stream::Plain(stream)
        };
        let idx = self.conns.reserve();
        let r = self.poll.borrow().registry().register(
            &mut SourceFd(&fd),
            Token(idx),
            Interest::READABLE | Interest::WRITABLE,
        );
        if let Err(e) = r {
            tracing::warn!(error = %e, "cannot watch a new connection");
            self.conns.unreserve(idx);
            return;
        }
        tracing::debug!(%peer, listener = %via, group = %env.name, "connection accepted");
        let mut tp = TcpQpair::new(stream, opts);
        tp.identity = |s| {
            let id = s.tls()?.identity()?;
            Some((id.hostnqn().to_owned(), id.subnqn().to_owned()))
        };
        let q = Qpair::new(tp, peer, via, opts.clone(), bufs);
        self.conns.set(idx, q);
    }

    fn poll(&self, env: &Env) -> bool {
        {
            let mut poll = self.poll.borrow_mut();
            let mut events = self.events.borrow_mut();
            if poll.poll(&mut events, Some(Duration::ZERO)).is_ok() {
                let conns = self.conns.list.borrow();
                for ev in events.iter() {
                    if let Some(Some(q)) = conns.get(ev.token().0) {
                        q.on_event(
                            ev.is_readable() || ev.is_read_closed() || ev.is_error(),
                            ev.is_writable() || ev.is_write_closed(),
                        );
                    }
                }
            }
        }
        self.conns.service(env, |q| {
            if let Ok(inner) = q.q.try_borrow() {
                let fd = inner.tp.sock.as_raw_fd();
                let _ = self.poll.borrow().registry().deregister(&mut SourceFd(&fd));
            }
        })
    }

    fn qpairs(&self) -> &dyn QpairSet {
        &self.conns
    }
}
