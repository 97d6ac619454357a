//! The non-blocking server: listeners, connections, framing, dispatch and response routing.
//!
//! Everything happens inside [`Server::poll`], on the caller's thread, with one `mio` epoll
//! instance for all sockets. Handlers answer through a [`Responder`]; its answer is encoded on the
//! answering thread and pushed onto a queue shared with the server, and a `mio::Waker` makes the
//! epoll fd readable so the owner knows to poll again. Each connection carries a serial id and an
//! `alive` flag, so a late answer for a closed connection is dropped without touching any other.
//!
//! Limits: a new client is always served while a connection is idle (at the connection limit
//! the one idle for longest is closed for it), and a connection that waits on its peer without
//! progress for the stall timeout is closed (see [`ServerOptions`]).

mod conn;
mod route;
mod timer;
mod unix;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use parking_lot::Mutex;

use self::conn::{service_conn, Conn, Stream, OUT_HIGH_WATER, READ_CHUNK};
use self::route::{Queue, Shared};
use self::timer::StallTimer;
use self::unix::{bind_unix, UnixSide};
use crate::message::encode_response;
use crate::{Error, MethodRegistry};

/// Default [`ServerOptions::max_request_bytes`]: 64 MiB (a batch creating 10 000 bdevs is about
/// 2 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// Default [`ServerOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default [`ServerOptions::stall_timeout`].
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

const UNIX_LISTENER: Token = Token(0);
const TCP_LISTENER: Token = Token(1);
const WAKER: Token = Token(2);
const STALL_TIMER: Token = Token(3);
const FIRST_CONN: usize = 4;

/// Where and how the server listens.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Unix socket path (SPDK's `-r`); the app picks the default. `<path>.lock` is used too.
    pub unix_path: Option<PathBuf>,
    /// Optional TCP listener; give a loopback address (the protocol has no authentication).
    pub tcp_addr: Option<SocketAddr>,
    /// Largest accepted request in bytes; larger ones get -32600 and the connection is closed.
    pub max_request_bytes: usize,
    /// Connections served at once (at least 1). At the limit a new client is still accepted:
    /// the connection idle for longest (no request in flight, no answer unsent; half a request
    /// counts as idle) is closed to make room. Only while every connection is busy does a new
    /// client wait in the listen backlog, until one of them is idle.
    pub max_connections: usize,
    /// A connection that waits on its peer, for the rest of a request or to read its answers,
    /// and sees no byte move for this long is closed: half a request gets a -32600 answer
    /// first. `None`: never. A connection that has sent nothing is not affected (it is idle,
    /// and makes room at the connection limit).
    pub stall_timeout: Option<Duration>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            unix_path: None,
            tcp_addr: None,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
        }
    }
}

/// A JSON-RPC server over a unix socket (and optionally TCP), driven by [`poll`](Self::poll).
///
/// It never blocks and never spawns threads: the owner calls `poll` from a poller, or whenever
/// [`as_raw_fd`](Self::as_raw_fd) is readable. Handlers run inside `poll`, on that thread.
/// Dropping the server closes every connection and removes the socket and lock files.
///
/// The process must ignore `SIGPIPE` (Rust binaries do by default): writing to a client that
/// vanished then fails with `EPIPE`, which closes that connection only.
pub struct Server {
    poll: Poll,
    events: Events,
    registry: MethodRegistry,
    shared: Arc<Shared>,
    unix: Option<UnixSide>,
    tcp: Option<TcpListener>,
    unix_acceptable: bool,
    tcp_acceptable: bool,
    conns: HashMap<usize, Conn>,
    next_conn: usize,
    max_request_bytes: usize,
    max_connections: usize,
    stall_timeout: Option<Duration>,
    /// Armed while a connection waits on its peer (only with a stall timeout).
    timer: Option<StallTimer>,
    /// The connection limit was reached and said so; cleared once below it.
    at_limit: bool,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("unix_path", &self.unix.as_ref().map(|u| &u.path))
            .field("tcp_addr", &self.tcp_local_addr())
            .field("connections", &self.conns.len())
            .finish()
    }
}

impl Server {
    /// Take the lock, bind the listeners and get ready to [`poll`](Self::poll).
    ///
    /// For the unix socket: `<path>.lock` is locked (failing with [`Error::BindInUse`] when
    /// another live process holds it), a stale socket file is removed, the socket is bound and
    /// its mode set to 0600.
    pub fn bind(opts: ServerOptions, registry: MethodRegistry) -> Result<Server, Error> {
        if opts.unix_path.is_none() && opts.tcp_addr.is_none() {
            return Err(Error::BindNoListener);
        }
        let poll = Poll::new().map_err(|source| Error::PollSetup { source })?;
        let waker =
            Waker::new(poll.registry(), WAKER).map_err(|source| Error::PollSetup { source })?;
        let mut unix = match &opts.unix_path {
            Some(p) => Some(bind_unix(p)?),
            None => None,
        };
        if let Some(l) = unix.as_mut().and_then(|u| u.listener.as_mut()) {
            poll.registry()
                .register(l, UNIX_LISTENER, Interest::READABLE)
                .map_err(|source| Error::PollSetup { source })?;
        }
        let tcp = match opts.tcp_addr {
            Some(addr) => {
                let mut l =
                    TcpListener::bind(addr).map_err(|source| Error::BindTcp { addr, source })?;
                poll.registry()
                    .register(&mut l, TCP_LISTENER, Interest::READABLE)
                    .map_err(|source| Error::PollSetup { source })?;
                if !addr.ip().is_loopback() {
                    tracing::warn!(%addr, "rpc tcp listener is not on a loopback address");
                }
                Some(l)
            }
            None => None,
        };
        let timer = match opts.stall_timeout {
            Some(_) => Some(
                StallTimer::new(poll.registry(), STALL_TIMER)
                    .map_err(|source| Error::PollSetup { source })?,
            ),
            None => None,
        };
        Ok(Server {
            poll,
            events: Events::with_capacity(256),
            registry,
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue {
                    items: Vec::new(),
                    polling: None,
                }),
                waker,
                pending: std::sync::atomic::AtomicBool::new(false),
            }),
            unix,
            tcp,
            unix_acceptable: true,
            tcp_acceptable: true,
            conns: HashMap::new(),
            next_conn: FIRST_CONN,
            max_request_bytes: opts.max_request_bytes,
            max_connections: opts.max_connections.max(1),
            stall_timeout: opts.stall_timeout,
            timer,
            at_limit: false,
            scratch: vec![0; READ_CHUNK],
        })
    }

    /// The method registry this server dispatches to.
    pub fn registry(&self) -> &MethodRegistry {
        &self.registry
    }

    /// The unix socket path, if listening on one.
    pub fn unix_path(&self) -> Option<&Path> {
        self.unix.as_ref().map(|u| u.path.as_path())
    }

    /// The bound TCP address (useful after binding port 0), if listening on TCP.
    pub fn tcp_local_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Connections currently open.
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// An fd (the epoll instance) that is readable whenever [`poll`](Self::poll) has work: a new
    /// connection, incoming data, writable space for pending output, or an answer from another
    /// thread.
    pub fn as_raw_fd(&self) -> RawFd {
        self.poll.as_raw_fd()
    }

    /// Whether answers wait to be written: an owner that polls the server on
    /// a period can poll at once when this says so (one atomic load), so
    /// that an answer does not wait for the next period.
    pub fn answers_pending(&self) -> bool {
        self.shared
            .pending
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Do all work that is ready without blocking: accept, read, frame, parse, dispatch (the
    /// handlers run here), collect answers, write. Returns whether it did anything.
    pub fn poll(&mut self) -> bool {
        self.poll_timeout(Some(Duration::ZERO))
    }

    /// Like [`poll`](Self::poll), but first wait up to `timeout` (`None`: forever) for
    /// something to do. For owners that give the server a thread of its own.
    pub fn poll_timeout(&mut self, timeout: Option<Duration>) -> bool {
        self.shared.queue.lock().polling = Some(thread::current().id());
        let mut did = false;
        if let Err(e) = self.poll.poll(&mut self.events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(error = %e, "rpc server epoll failed");
            }
        }
        for ev in self.events.iter() {
            did = true;
            match ev.token() {
                UNIX_LISTENER => self.unix_acceptable = true,
                TCP_LISTENER => self.tcp_acceptable = true,
                WAKER => {}
                STALL_TIMER => {
                    if let Some(t) = &mut self.timer {
                        t.fired();
                    }
                }
                Token(id) => {
                    if let Some(c) = self.conns.get_mut(&id) {
                        if ev.is_readable() || ev.is_read_closed() {
                            c.readable = true;
                        }
                        if ev.is_writable() {
                            c.write_blocked = false;
                        }
                        if ev.is_error() || (ev.is_read_closed() && ev.is_write_closed()) {
                            // Gone for good; still read what it sent before closing.
                            c.hup = true;
                            c.readable = true;
                        }
                    }
                }
            }
        }
        let mut accept_failed = false;
        did |= self.accept(&mut accept_failed);
        did |= self.service_reads();
        did |= self.route_completions();
        did |= self.flush_and_close();
        did |= self.accept(&mut accept_failed);

        let leftover = self
            .conns
            .values()
            .any(|c| c.wants_service() && c.out_len < OUT_HIGH_WATER)
            || (!accept_failed
                && self.conns.len() < self.max_connections
                && ((self.unix_acceptable && self.unix.is_some())
                    || (self.tcp_acceptable && self.tcp.is_some())));
        let mut q = self.shared.queue.lock();
        q.polling = None;
        let wake = leftover || !q.items.is_empty();
        drop(q);
        if wake {
            // Keep the fd readable so an fd-driven owner comes back.
            self.shared.wake();
        }
        did
    }

    fn accept(&mut self, failed: &mut bool) -> bool {
        let mut did = false;
        while self.unix_acceptable && !*failed && self.has_room() {
            let Some(l) = self.unix.as_ref().and_then(|u| u.listener.as_ref()) else {
                self.unix_acceptable = false;
                break;
            };
            match l.accept() {
                Ok((s, _)) => {
                    did = true;
                    self.add_conn(Stream::Unix(s));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.unix_acceptable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!(error = %e, "rpc accept failed");
                    *failed = true;
                }
            }
        }
        while self.tcp_acceptable && !*failed && self.has_room() {
            let Some(l) = self.tcp.as_ref() else {
                self.tcp_acceptable = false;
                break;
            };
            match l.accept() {
                Ok((s, _)) => {
                    did = true;
                    if let Err(e) = s.set_nodelay(true) {
                        tracing::debug!(error = %e, "rpc tcp set_nodelay failed");
                    }
                    self.add_conn(Stream::Tcp(s));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tcp_acceptable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!(error = %e, "rpc accept failed");
                    *failed = true;
                }
            }
        }
        did
    }

    fn add_conn(&mut self, stream: Stream) {
        let mut id = self.next_conn;
        while self.conns.contains_key(&id) || id < FIRST_CONN {
            id = id.wrapping_add(1);
        }
        self.next_conn = id.wrapping_add(1);
        let mut conn = Conn::new(stream, self.max_request_bytes, Instant::now());
        if let Err(e) = self.poll.registry().register(
            conn.stream.source(),
            Token(id),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::error!(error = %e, "rpc connection register failed");
            return;
        }
        tracing::debug!(conn = id, "rpc connection accepted");
        // A client sends its request right after connecting: read it in
        // this poll, not the next (edge-triggered: an empty read just says
        // WouldBlock).
        conn.readable = true;
        self.conns.insert(id, conn);
        if self.conns.len() > self.max_connections {
            self.make_room(id);
        }
    }

    /// Whether one more client can be served: below the limit, or an idle connection can make
    /// room for it.
    fn has_room(&self) -> bool {
        self.conns.len() < self.max_connections || self.idle_for_longest(None).is_some()
    }

    /// The idle connection with the oldest traffic, other than `except`.
    fn idle_for_longest(&self, except: Option<usize>) -> Option<usize> {
        self.conns
            .iter()
            .filter(|(id, c)| Some(**id) != except && c.is_idle() && !c.should_close())
            .min_by_key(|(_, c)| c.last_io)
            .map(|(id, _)| *id)
    }

    /// Over the limit after accepting `new`: close the connection idle for longest.
    fn make_room(&mut self, new: usize) {
        let Some(id) = self.idle_for_longest(Some(new)) else {
            return;
        };
        if !self.at_limit {
            self.at_limit = true;
            tracing::warn!(
                limit = self.max_connections,
                "rpc connection limit reached: each new client closes the connection idle for longest"
            );
        }
        tracing::debug!(
            conn = id,
            "rpc connection idle for longest, closed to make room"
        );
        self.remove_conn(id);
    }

    fn remove_conn(&mut self, id: usize) {
        if let Some(mut c) = self.conns.remove(&id) {
            c.alive.store(false, Ordering::Release);
            if let Err(e) = self.poll.registry().deregister(c.stream.source()) {
                tracing::debug!(conn = id, error = %e, "rpc connection deregister failed");
            }
            tracing::debug!(conn = id, "rpc connection closed");
        }
    }

    fn service_reads(&mut self) -> bool {
        let mut did = false;
        for (&id, c) in self.conns.iter_mut() {
            if c.wants_service() {
                did = true;
                service_conn(id, c, &self.registry, &self.shared, &mut self.scratch);
            }
        }
        did
    }

    fn route_completions(&mut self) -> bool {
        let items = {
            let mut q = self.shared.queue.lock();
            self.shared
                .pending
                .store(false, std::sync::atomic::Ordering::Relaxed);
            std::mem::take(&mut q.items)
        };
        let did = !items.is_empty();
        for done in items {
            if let Some(c) = self.conns.get_mut(&done.conn) {
                c.complete(done.batch, done.body);
            }
        }
        // Fatal errors go out after everything answered before them.
        for c in self.conns.values_mut() {
            if let Some(e) = c.fatal.take() {
                let mut body = encode_response(None, &Err(e));
                body.push(b'\n');
                c.queue_out(body);
                c.closing = true;
            }
        }
        did
    }

    fn flush_and_close(&mut self) -> bool {
        let mut did = false;
        let mut dead = Vec::new();
        let mut oldest_wait: Option<Instant> = None;
        for (&id, c) in self.conns.iter_mut() {
            if !c.out.is_empty() && !c.write_blocked && !c.broken && !c.hup {
                did |= c.flush();
            }
            if c.should_close() {
                dead.push(id);
            } else if c.waits_on_peer() {
                oldest_wait = Some(oldest_wait.map_or(c.last_io, |t| t.min(c.last_io)));
            }
        }
        if let Some(timeout) = self.stall_timeout {
            did |= self.close_stalled(timeout, oldest_wait, &mut dead);
        }
        for id in dead {
            did = true;
            self.remove_conn(id);
        }
        if self.conns.len() < self.max_connections {
            self.at_limit = false;
        }
        did
    }

    /// Closes the connections that waited on their peer for `timeout` without progress (adding
    /// them to `dead`), and arms the timer for the next one that could. `oldest` is the oldest
    /// traffic of a waiting connection.
    fn close_stalled(
        &mut self,
        timeout: Duration,
        oldest: Option<Instant>,
        dead: &mut Vec<usize>,
    ) -> bool {
        let Some(timer) = self.timer.as_mut() else {
            return false;
        };
        if oldest.is_none() && !timer.is_armed() {
            return false;
        }
        let now = Instant::now();
        // A timeout too large to add to an instant never expires.
        let mut next = oldest.and_then(|t| t.checked_add(timeout));
        let mut did = false;
        if next.is_some_and(|at| at <= now) {
            next = None;
            for (&id, c) in self.conns.iter_mut() {
                if c.should_close() || !c.waits_on_peer() {
                    continue;
                }
                match c.last_io.checked_add(timeout) {
                    Some(at) if at <= now => {
                        c.close_stalled(id, timeout);
                        dead.push(id);
                        did = true;
                    }
                    Some(at) => next = Some(next.map_or(at, |n: Instant| n.min(at))),
                    None => {}
                }
            }
        }
        timer.arm(next, now);
        did
    }
}

impl AsRawFd for Server {
    fn as_raw_fd(&self) -> RawFd {
        self.poll.as_raw_fd()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for c in self.conns.values() {
            c.alive.store(false, Ordering::Release);
        }
        // `UnixSide`'s drop removes the socket and lock files.
    }
}
