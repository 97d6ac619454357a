//! The non-blocking server: listeners, connections, framing, dispatch and response routing.
//!
//! Everything happens inside [`Server::poll`], on the caller's thread, with one `mio` epoll
//! instance for all sockets. Handlers answer through a [`Responder`]; its answer is encoded on the
//! answering thread and pushed onto a queue shared with the server, and a `mio::Waker` makes the
//! epoll fd readable so the owner knows to poll again. Each connection carries a serial id and an
//! `alive` flag, so a late answer for a closed connection is dropped without touching any other.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::Duration;

use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token, Waker};
use parking_lot::Mutex;
use serde_json::Value;

use crate::framing::{FrameError, Framer};
use crate::message::{encode_raw_result, encode_response, parse_message, Id, Message, Request};
use crate::registry::Reply;
use crate::{Error, MethodRegistry, Responder, RpcError};

const UNIX_LISTENER: Token = Token(0);
const TCP_LISTENER: Token = Token(1);
const WAKER: Token = Token(2);
const FIRST_CONN: usize = 3;

/// Bytes read per `read()` call.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes read from one connection per poll before moving on (fairness).
const READ_BUDGET: usize = 4 * 1024 * 1024;
/// Stop taking new requests from a connection while this much output is unsent.
const OUT_HIGH_WATER: usize = 32 * 1024 * 1024;
/// Small responses are appended to the last output chunk up to this size.
const COALESCE: usize = 64 * 1024;
/// `sun_path` is 108 bytes including the terminating NUL.
const SUN_PATH_MAX: usize = 107;

/// Where and how the server listens.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Unix socket path (SPDK's `-r`); the app picks the default. `<path>.lock` is used too.
    pub unix_path: Option<PathBuf>,
    /// Optional TCP listener; give a loopback address (the protocol has no authentication).
    pub tcp_addr: Option<SocketAddr>,
    /// Largest accepted request in bytes; larger ones get -32600 and the connection is closed.
    pub max_request_bytes: usize,
    /// Connections served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            unix_path: None,
            tcp_addr: None,
            max_request_bytes: 64 * 1024 * 1024,
            max_connections: 256,
        }
    }
}

/// One answer on its way to a connection.
struct Completion {
    conn: usize,
    batch: Option<usize>,
    /// Encoded response (with `\n` unless a batch element); `None` for a notification's result.
    body: Option<Vec<u8>>,
}

struct Queue {
    items: Vec<Completion>,
    /// The thread inside `poll` right now: its answers need no wake-up.
    polling: Option<ThreadId>,
}

struct Shared {
    queue: Mutex<Queue>,
    waker: Waker,
}

impl Shared {
    fn push(&self, c: Completion) {
        let mut q = self.queue.lock();
        let was_empty = q.items.is_empty();
        q.items.push(c);
        let in_poll = q.polling == Some(thread::current().id());
        drop(q);
        if was_empty && !in_poll {
            self.wake();
        }
    }

    fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            tracing::warn!(error = %e, "rpc server wake-up failed");
        }
    }
}

/// Where a request's answer goes.
struct Route {
    shared: Arc<Shared>,
    conn: usize,
    alive: Arc<AtomicBool>,
    batch: Option<usize>,
    id: Option<Id>,
}

impl Route {
    fn deliver(self, r: Result<Value, RpcError>) {
        self.deliver_reply(Reply::Value(r));
    }

    fn deliver_reply(self, reply: Reply) {
        if !self.alive.load(Ordering::Acquire) {
            return;
        }
        let is_ok = !matches!(reply, Reply::Value(Err(_)));
        // Notifications (no id, or id null) get no result, but errors are always sent.
        let body = if is_ok && self.id.is_none() {
            None
        } else {
            let mut b = match &reply {
                Reply::Value(r) => encode_response(self.id.as_ref(), r),
                Reply::Raw(raw) => encode_raw_result(self.id.as_ref(), raw),
            };
            if self.batch.is_none() {
                b.push(b'\n');
            }
            Some(b)
        };
        self.shared.push(Completion {
            conn: self.conn,
            batch: self.batch,
            body,
        });
    }
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn source(&mut self) -> &mut dyn Source {
        match self {
            Stream::Unix(s) => s,
            Stream::Tcp(s) => s,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Batch {
    remaining: usize,
    parts: Vec<Vec<u8>>,
}

struct Conn {
    stream: Stream,
    framer: Framer,
    out: VecDeque<Vec<u8>>,
    out_off: usize,
    out_len: usize,
    batches: HashMap<usize, Batch>,
    next_batch: usize,
    /// Requests (a batch counts once) not yet fully answered.
    outstanding: usize,
    alive: Arc<AtomicBool>,
    /// Edge-triggered readiness not yet consumed.
    readable: bool,
    write_blocked: bool,
    /// Complete frames left in the framer because of output back-pressure.
    frames_pending: bool,
    /// The peer sent EOF (or we stopped reading after a fatal error).
    read_closed: bool,
    /// The peer is gone for good (HUP/ERR): close after reading what is left.
    hup: bool,
    /// I/O failed: close now.
    broken: bool,
    /// A fatal protocol error to send before closing.
    fatal: Option<RpcError>,
    /// The fatal error is queued: close once the output drains, ignore further answers.
    closing: bool,
}

impl Conn {
    fn new(stream: Stream, max_request_bytes: usize) -> Self {
        Conn {
            stream,
            framer: Framer::new(max_request_bytes),
            out: VecDeque::new(),
            out_off: 0,
            out_len: 0,
            batches: HashMap::new(),
            next_batch: 0,
            outstanding: 0,
            alive: Arc::new(AtomicBool::new(true)),
            readable: false,
            write_blocked: false,
            frames_pending: false,
            read_closed: false,
            hup: false,
            broken: false,
            fatal: None,
            closing: false,
        }
    }

    fn queue_out(&mut self, body: Vec<u8>) {
        if body.is_empty() {
            return;
        }
        self.out_len += body.len();
        if let Some(back) = self.out.back_mut() {
            if back.len() + body.len() <= COALESCE {
                back.extend_from_slice(&body);
                return;
            }
        }
        self.out.push_back(body);
    }

    /// Write as much output as the socket takes. Returns whether anything was written.
    fn flush(&mut self) -> bool {
        let mut did = false;
        while let Some(front) = self.out.front() {
            match self.stream.write(&front[self.out_off..]) {
                Ok(0) => {
                    self.broken = true;
                    break;
                }
                Ok(n) => {
                    did = true;
                    self.out_off += n;
                    self.out_len -= n;
                    if self.out_off == front.len() {
                        self.out.pop_front();
                        self.out_off = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.write_blocked = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "rpc connection write failed");
                    self.broken = true;
                    break;
                }
            }
        }
        did
    }

    fn wants_service(&self) -> bool {
        !self.closing
            && !self.broken
            && self.fatal.is_none()
            && ((self.readable && !self.read_closed) || self.frames_pending)
    }

    fn should_close(&self) -> bool {
        self.broken
            || self.hup
            || (self.closing && self.out.is_empty())
            || (self.read_closed
                && self.fatal.is_none()
                && self.outstanding == 0
                && self.out.is_empty())
    }
}

/// The unix listener with its lock file; dropping it removes both files.
struct UnixSide {
    listener: Option<UnixListener>,
    path: PathBuf,
    lock_path: PathBuf,
    socket_created: bool,
    // Held (locked) until after the files are removed in `drop`.
    _lock: File,
}

impl Drop for UnixSide {
    fn drop(&mut self) {
        self.listener = None;
        if self.socket_created {
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "remove rpc socket");
            }
        }
        if let Err(e) = fs::remove_file(&self.lock_path) {
            tracing::warn!(path = %self.lock_path.display(), error = %e, "remove rpc lock file");
        }
    }
}

fn bind_unix(path: &Path) -> Result<UnixSide, Error> {
    let mut lock_os = path.as_os_str().to_owned();
    lock_os.push(".lock");
    let lock_path = PathBuf::from(lock_os);
    let len = lock_path.as_os_str().len();
    if len > SUN_PATH_MAX {
        return Err(Error::BindPathTooLong {
            path: path.into(),
            len,
            max: SUN_PATH_MAX,
        });
    }
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|source| Error::BindLock {
            path: lock_path.clone(),
            source,
        })?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(Error::BindInUse { path: path.into() }),
        Err(fs::TryLockError::Error(source)) => {
            return Err(Error::BindLock {
                path: lock_path,
                source,
            })
        }
    }
    // From here on the guard owns the lock: any failure removes the lock file again.
    let mut side = UnixSide {
        listener: None,
        path: path.into(),
        lock_path,
        socket_created: false,
        _lock: lock,
    };
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            fs::remove_file(path).map_err(|source| Error::BindRemoveStale {
                path: path.into(),
                source,
            })?;
            tracing::info!(path = %path.display(), "removed stale rpc socket");
        }
        Ok(_) => return Err(Error::BindNotSocket { path: path.into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(Error::BindRemoveStale {
                path: path.into(),
                source,
            })
        }
    }
    let listener = UnixListener::bind(path).map_err(|source| Error::BindUnix {
        path: path.into(),
        source,
    })?;
    side.socket_created = true;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(|source| {
        Error::BindUnix {
            path: path.into(),
            source,
        }
    })?;
    side.listener = Some(listener);
    Ok(side)
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
            }),
            unix,
            tcp,
            unix_acceptable: true,
            tcp_acceptable: true,
            conns: HashMap::new(),
            next_conn: FIRST_CONN,
            max_request_bytes: opts.max_request_bytes,
            max_connections: opts.max_connections.max(1),
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
        while self.unix_acceptable && self.conns.len() < self.max_connections && !*failed {
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
        while self.tcp_acceptable && self.conns.len() < self.max_connections && !*failed {
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
        let mut conn = Conn::new(stream, self.max_request_bytes);
        if let Err(e) = self.poll.registry().register(
            conn.stream.source(),
            Token(id),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::error!(error = %e, "rpc connection register failed");
            return;
        }
        tracing::debug!(conn = id, "rpc connection accepted");
        self.conns.insert(id, conn);
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
        let items = std::mem::take(&mut self.shared.queue.lock().items);
        let did = !items.is_empty();
        for done in items {
            let Some(c) = self.conns.get_mut(&done.conn) else {
                continue;
            };
            match done.batch {
                None => {
                    c.outstanding = c.outstanding.saturating_sub(1);
                    if let Some(body) = done.body {
                        if !c.closing {
                            c.queue_out(body);
                        }
                    }
                }
                Some(b) => {
                    let Some(batch) = c.batches.get_mut(&b) else {
                        continue;
                    };
                    if let Some(body) = done.body {
                        batch.parts.push(body);
                    }
                    batch.remaining = batch.remaining.saturating_sub(1);
                    if batch.remaining == 0 {
                        let parts = c.batches.remove(&b).map(|b| b.parts).unwrap_or_default();
                        c.outstanding = c.outstanding.saturating_sub(1);
                        if !parts.is_empty() && !c.closing {
                            let len = parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2;
                            let mut out = Vec::with_capacity(len);
                            out.push(b'[');
                            for (i, p) in parts.iter().enumerate() {
                                if i > 0 {
                                    out.push(b',');
                                }
                                out.extend_from_slice(p);
                            }
                            out.extend_from_slice(b"]\n");
                            c.queue_out(out);
                        }
                    }
                }
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
        for (&id, c) in self.conns.iter_mut() {
            if !c.out.is_empty() && !c.write_blocked && !c.broken && !c.hup {
                did |= c.flush();
            }
            if c.should_close() {
                dead.push(id);
            }
        }
        for id in dead {
            did = true;
            if let Some(mut c) = self.conns.remove(&id) {
                c.alive.store(false, Ordering::Release);
                if let Err(e) = self.poll.registry().deregister(c.stream.source()) {
                    tracing::debug!(conn = id, error = %e, "rpc connection deregister failed");
                }
                tracing::debug!(conn = id, "rpc connection closed");
            }
        }
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

/// Read what is available (within the budget), and dispatch every complete request.
fn service_conn(
    id: usize,
    c: &mut Conn,
    registry: &MethodRegistry,
    shared: &Arc<Shared>,
    scratch: &mut [u8],
) {
    let mut budget = READ_BUDGET;
    loop {
        loop {
            if c.out_len >= OUT_HIGH_WATER {
                c.frames_pending = true;
                return;
            }
            let msg = match c.framer.next_frame() {
                None => break,
                Some(Err(e)) => {
                    let err = match e {
                        FrameError::Malformed => RpcError::parse_error(),
                        FrameError::TooLarge { limit } => RpcError::new(
                            RpcError::INVALID_REQUEST,
                            format!("Invalid request: request exceeds {limit} bytes"),
                        ),
                    };
                    tracing::warn!(conn = id, error = %e, "rpc request rejected, closing connection");
                    c.fatal = Some(err);
                    return;
                }
                Some(Ok(frame)) => parse_message(frame),
            };
            match msg {
                Ok(m) => handle_message(id, c, m, registry, shared),
                Err(e) => {
                    tracing::warn!(conn = id, error = %e, "rpc parse error, closing connection");
                    c.fatal = Some(RpcError::parse_error());
                    return;
                }
            }
        }
        c.frames_pending = false;
        if !c.readable || c.read_closed || budget == 0 {
            return;
        }
        match c.stream.read(scratch) {
            Ok(0) => {
                c.readable = false;
                c.read_closed = true;
                if c.framer.has_partial() {
                    tracing::debug!(conn = id, "rpc peer closed mid-request");
                }
                return;
            }
            Ok(n) => {
                c.framer.push(&scratch[..n]);
                budget = budget.saturating_sub(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.readable = false;
                return;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(conn = id, error = %e, "rpc connection read failed");
                c.broken = true;
                return;
            }
        }
    }
}

fn handle_message(
    id: usize,
    c: &mut Conn,
    msg: Message,
    registry: &MethodRegistry,
    shared: &Arc<Shared>,
) {
    let route = |batch: Option<usize>, req_id: Option<Id>| Route {
        shared: Arc::clone(shared),
        conn: id,
        alive: Arc::clone(&c.alive),
        batch,
        id: req_id,
    };
    match msg {
        Message::Other => {
            let r = route(None, None);
            c.outstanding += 1;
            r.deliver(Err(RpcError::invalid_request()));
        }
        Message::Batch(reqs) if reqs.is_empty() => {
            let r = route(None, None);
            c.outstanding += 1;
            r.deliver(Err(RpcError::invalid_request()));
        }
        Message::Single(req) => {
            let r = route(None, request_id(&req));
            c.outstanding += 1;
            run_request(r, req, registry);
        }
        Message::Batch(reqs) => {
            let b = c.next_batch;
            c.next_batch = c.next_batch.wrapping_add(1);
            let routes: Vec<Route> = reqs
                .iter()
                .map(|req| route(Some(b), request_id(req)))
                .collect();
            c.batches.insert(
                b,
                Batch {
                    remaining: reqs.len(),
                    parts: Vec::new(),
                },
            );
            c.outstanding += 1;
            for (r, req) in routes.into_iter().zip(reqs) {
                run_request(r, req, registry);
            }
        }
    }
}

fn request_id(req: &Request) -> Option<Id> {
    match req {
        Request::Call(call) => call.id.clone(),
        Request::Invalid { id } => id.clone(),
    }
}

fn run_request(route: Route, req: Request, registry: &MethodRegistry) {
    match req {
        Request::Invalid { .. } => route.deliver(Err(RpcError::invalid_request())),
        Request::Call(call) => {
            registry.dispatch(
                &call.method,
                call.params,
                Responder::with_reply_sink(move |r| route.deliver_reply(r)),
            );
        }
    }
}
