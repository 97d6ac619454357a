//! A poll group: one lightweight thread's connections. Its sockets sit in
//! one epoll set (mio), so a poll is one `epoll_wait(0)` and then work on
//! the connections that have something to do; in interrupt mode the set's
//! fd is in the reactor's wake-up set, so an idle reactor sleeps until a
//! socket becomes readable or writable. A timer does the keep alive
//! checks.
//!
//! The group is the per-thread context of the target's I/O device
//! (`service.rs`), so the control plane reaches every group with a
//! channel walk.

use std::cell::{Cell, RefCell};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bdevkit::clock;
use bdevkit::thread::{InterruptFd, IoChannel, Poller, PollerStatus, Thread};
use mio::unix::SourceFd;
use mio::{Events, Interest, Token};
use serde_json::{json, Value};

use super::qpair::{Qp, TcpQpair};
use crate::addr::ListenAddr;
use crate::core::pool::BufPool;
use crate::core::qpair::{Phase, Qpair};
use crate::core::view::Env;
use crate::ctrlr::Controller;
use crate::opts::TransportOpts;
use crate::target::Core;

/// Housekeeping period (keep alive checks), µs.
const HOUSEKEEPING_US: u64 = 100_000;
/// Socket events taken per poll.
const EVENTS: usize = 256;

type Conn = Rc<Qp<TcpStream>>;

/// One poll group.
#[derive(Debug)]
pub(crate) struct PollGroup {
    pub env: Env,
    poll: RefCell<mio::Poll>,
    events: RefCell<Events>,
    conns: RefCell<Vec<Option<Conn>>>,
    free: RefCell<Vec<usize>>,
    pollers: RefCell<Vec<Poller>>,
    irq: RefCell<Option<InterruptFd>>,
    stopping: Cell<bool>,
}

impl PollGroup {
    /// A group for the current thread.
    pub fn new(core: Arc<Core>) -> std::io::Result<PollGroup> {
        let t =
            Thread::current().ok_or_else(|| std::io::Error::other("not on a bdevkit thread"))?;
        Ok(PollGroup {
            env: Env::new(core, t.handle(), t.name().to_string()),
            poll: RefCell::new(mio::Poll::new()?),
            events: RefCell::new(Events::with_capacity(EVENTS)),
            conns: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            pollers: RefCell::new(Vec::new()),
            irq: RefCell::new(None),
            stopping: Cell::new(false),
        })
    }

    /// Starts the group's pollers on its thread (`ch` is its channel,
    /// which the pollers keep alive until the group stops).
    pub fn start(ch: &IoChannel<PollGroup>, interrupt_mode: bool) {
        let Some(t) = Thread::current() else { return };
        if interrupt_mode {
            let fd = ch.poll.borrow().as_raw_fd();
            match t.register_interrupt_fd(fd) {
                Ok(g) => *ch.irq.borrow_mut() = Some(g),
                Err(e) => tracing::warn!(error = %e, "poll group: polling its sockets instead"),
            }
        }
        let g = ch.clone();
        let main = t.register_poller("nvmf_poll_group_poll", 0, move |_| {
            PollerStatus::from(g.poll_once())
        });
        let g = ch.clone();
        let hk = t.register_poller("nvmf_poll_group_housekeeping", HOUSEKEEPING_US, move |_| {
            g.housekeeping();
            PollerStatus::Idle
        });
        ch.pollers.borrow_mut().extend([main, hk]);
    }

    /// Takes a new connection (sent from the acceptor).
    pub fn add_connection(
        &self,
        stream: TcpStream,
        via: ListenAddr,
        opts: TransportOpts,
        pool: &Arc<BufPool>,
    ) {
        if self.stopping.get() {
            return;
        }
        let peer = match stream.peer_addr() {
            Ok(p) => ListenAddr::of_socket(p),
            Err(_) => return,
        };
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        let idx = self.free.borrow_mut().pop().unwrap_or_else(|| {
            let mut c = self.conns.borrow_mut();
            c.push(None);
            c.len() - 1
        });
        let r = self.poll.borrow().registry().register(
            &mut SourceFd(&fd),
            Token(idx),
            Interest::READABLE | Interest::WRITABLE,
        );
        if let Err(e) = r {
            tracing::warn!(error = %e, "cannot watch a new connection");
            self.free.borrow_mut().push(idx);
            return;
        }
        tracing::debug!(%peer, listener = %via, group = %self.env.name, "connection accepted");
        let tp = TcpQpair::new(stream, &opts);
        let q = Qpair::new(tp, peer, via, opts, self.env.group_bufs(pool));
        self.conns.borrow_mut()[idx] = Some(q);
    }

    /// One poll: socket events, then every connection with work.
    fn poll_once(&self) -> bool {
        let mut busy = false;
        {
            let mut poll = self.poll.borrow_mut();
            let mut events = self.events.borrow_mut();
            if poll.poll(&mut events, Some(Duration::ZERO)).is_ok() {
                let conns = self.conns.borrow();
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
        let n = self.conns.borrow().len();
        for i in 0..n {
            let q = self.conns.borrow().get(i).cloned().flatten();
            let Some(q) = q else { continue };
            if q.wants_service() {
                busy |= q.service(&self.env);
                if q.done.get() {
                    self.remove(i, &q);
                }
            }
        }
        // Buffers that came back go to the requests waiting for them.
        busy |= self.env.serve_bufs();
        if self.stopping.get() && self.conns.borrow().iter().all(Option::is_none) {
            self.finish_stop();
        }
        busy
    }

    fn remove(&self, i: usize, q: &Conn) {
        if let Ok(inner) = q.q.try_borrow() {
            let fd = inner.tp.sock.as_raw_fd();
            let _ = self.poll.borrow().registry().deregister(&mut SourceFd(&fd));
        }
        if let Some(slot) = self.conns.borrow_mut().get_mut(i) {
            *slot = None;
        }
        self.free.borrow_mut().push(i);
    }

    fn housekeeping(&self) {
        let now = clock::ticks();
        for q in self.conns.borrow().iter().flatten() {
            q.housekeeping(now);
        }
    }

    /// Closes the connections whose controller (or, unconnected, whose
    /// listener) matches.
    pub fn disconnect_if(
        &self,
        pred: &dyn Fn(Option<&Controller>, &ListenAddr) -> bool,
        why: &'static str,
    ) {
        for q in self.conns.borrow().iter().flatten() {
            let hit = match q.q.try_borrow() {
                Ok(inner) => pred(inner.conn.as_ref().map(|a| &*a.ctrlr), &inner.via),
                Err(_) => false,
            };
            if hit {
                q.disconnect(why);
            }
        }
    }

    /// `nvmf_subsystem_get_qpairs` objects of subsystem `id` on this group.
    pub fn qpairs_json(&self, id: u32) -> Vec<Value> {
        let mut out = Vec::new();
        for q in self.conns.borrow().iter().flatten() {
            let Ok(inner) = q.q.try_borrow() else {
                continue;
            };
            let Some(a) = &inner.conn else { continue };
            if a.ctrlr.subsys_id != id {
                continue;
            }
            let state = if matches!(inner.phase, Phase::Closing { .. }) {
                "deactivating"
            } else {
                "enabled"
            };
            out.push(json!({
                "cntlid": a.ctrlr.cntlid,
                "qid": a.qid,
                "state": state,
                "thread": self.env.name,
                "hostnqn": a.ctrlr.hostnqn,
                "listen_address": inner.via.to_json(),
                "peer_address": inner.peer.to_json(),
            }));
        }
        out
    }

    /// Number of connections.
    pub fn connections(&self) -> usize {
        self.conns.borrow().iter().flatten().count()
    }

    /// Stops the group: every connection closes (draining its I/O), then
    /// the pollers go and the thread exits.
    pub fn stop(&self) {
        self.stopping.set(true);
        for q in self.conns.borrow().iter().flatten() {
            q.disconnect("target stopping");
        }
    }

    fn finish_stop(&self) {
        let pollers = std::mem::take(&mut *self.pollers.borrow_mut());
        if pollers.is_empty() {
            return;
        }
        self.irq.borrow_mut().take();
        self.env.drop_all();
        for p in &pollers {
            p.unregister();
        }
        if let Some(t) = Thread::current() {
            t.exit();
        }
        tracing::debug!(group = %self.env.name, "poll group stopped");
    }
}
