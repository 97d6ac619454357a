//! One client connection: its socket, the framer that cuts its byte stream into requests, its
//! unsent output, and the dispatch of each complete request to the registry.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};

use super::route::{Route, Shared};
use crate::framing::{FrameError, Framer};
use crate::message::{encode_response, parse_message, Id, Message, Request};
use crate::{MethodRegistry, Responder, RpcError};

/// Bytes read per `read()` call.
pub(super) const READ_CHUNK: usize = 64 * 1024;
/// Bytes read from one connection per poll before moving on (fairness).
const READ_BUDGET: usize = 4 * 1024 * 1024;
/// Stop taking new requests from a connection while this much output is unsent.
pub(super) const OUT_HIGH_WATER: usize = 32 * 1024 * 1024;
/// Small responses are appended to the last output chunk up to this size.
const COALESCE: usize = 64 * 1024;

pub(super) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    pub(super) fn source(&mut self) -> &mut dyn Source {
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

pub(super) struct Batch {
    pub(super) remaining: usize,
    pub(super) parts: Vec<Vec<u8>>,
}

pub(super) struct Conn {
    pub(super) stream: Stream,
    pub(super) framer: Framer,
    pub(super) out: VecDeque<Vec<u8>>,
    pub(super) out_off: usize,
    pub(super) out_len: usize,
    pub(super) batches: HashMap<usize, Batch>,
    pub(super) next_batch: usize,
    /// Requests (a batch counts once) not yet fully answered.
    pub(super) outstanding: usize,
    pub(super) alive: Arc<AtomicBool>,
    /// Edge-triggered readiness not yet consumed.
    pub(super) readable: bool,
    pub(super) write_blocked: bool,
    /// Complete frames left in the framer because of output back-pressure.
    pub(super) frames_pending: bool,
    /// The peer sent EOF (or we stopped reading after a fatal error).
    pub(super) read_closed: bool,
    /// The peer is gone for good (HUP/ERR): close after reading what is left.
    pub(super) hup: bool,
    /// I/O failed: close now.
    pub(super) broken: bool,
    /// A fatal protocol error to send before closing.
    pub(super) fatal: Option<RpcError>,
    /// The fatal error is queued: close once the output drains, ignore further answers.
    pub(super) closing: bool,
    /// The last time bytes came in or went out (or the connection was accepted).
    pub(super) last_io: Instant,
    /// Part of a request is buffered (updated each time the connection is serviced).
    pub(super) partial: bool,
}

impl Conn {
    pub(super) fn new(stream: Stream, max_request_bytes: usize, now: Instant) -> Self {
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
            last_io: now,
            partial: false,
        }
    }

    /// Takes a handler's answer: queued for sending, or kept until the rest of its batch is
    /// answered, then sent as one array.
    pub(super) fn complete(&mut self, batch: Option<usize>, body: Option<Vec<u8>>) {
        let Some(b) = batch else {
            self.outstanding = self.outstanding.saturating_sub(1);
            if let Some(body) = body {
                if !self.closing {
                    self.queue_out(body);
                }
            }
            return;
        };
        let Some(batch) = self.batches.get_mut(&b) else {
            return;
        };
        if let Some(body) = body {
            batch.parts.push(body);
        }
        batch.remaining = batch.remaining.saturating_sub(1);
        if batch.remaining > 0 {
            return;
        }
        let parts = self.batches.remove(&b).map(|b| b.parts).unwrap_or_default();
        self.outstanding = self.outstanding.saturating_sub(1);
        if !parts.is_empty() && !self.closing {
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
            self.queue_out(out);
        }
    }

    pub(super) fn queue_out(&mut self, body: Vec<u8>) {
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
    pub(super) fn flush(&mut self) -> bool {
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
        if did {
            self.last_io = Instant::now();
        }
        did
    }

    /// Whether the connection waits for its peer: to send the rest of a request, or to read
    /// the answers queued for it. Such a connection stalls when that does not move.
    pub(super) fn waits_on_peer(&self) -> bool {
        self.partial || !self.out.is_empty()
    }

    /// Whether the connection may be closed to make room for a new one: nothing in flight,
    /// nothing to send, nothing arrived that was not read yet. (Half a request does not count:
    /// it is not being worked on.)
    pub(super) fn is_idle(&self) -> bool {
        !self.readable
            && self.outstanding == 0
            && self.out.is_empty()
            && !self.frames_pending
            && !self.closing
            && self.fatal.is_none()
    }

    /// No progress for `timeout` while waiting on the peer: tell it (when it owes us the rest
    /// of a request, best effort) and close now.
    pub(super) fn close_stalled(&mut self, id: usize, timeout: Duration) {
        if self.out.is_empty() {
            tracing::info!(
                conn = id,
                ?timeout,
                "rpc request incomplete, closing connection"
            );
            let err = RpcError::new(
                RpcError::INVALID_REQUEST,
                format!("Invalid request: incomplete request, nothing received for {timeout:?}"),
            );
            let mut body = encode_response(None, &Err(err));
            body.push(b'\n');
            self.queue_out(body);
            self.flush();
        } else {
            tracing::info!(
                conn = id,
                ?timeout,
                "rpc answers not read, closing connection"
            );
        }
        self.broken = true;
    }

    pub(super) fn wants_service(&self) -> bool {
        !self.closing
            && !self.broken
            && self.fatal.is_none()
            && ((self.readable && !self.read_closed) || self.frames_pending)
    }

    pub(super) fn should_close(&self) -> bool {
        self.broken
            || self.hup
            || (self.closing && self.out.is_empty())
            || (self.read_closed
                && self.fatal.is_none()
                && self.outstanding == 0
                && self.out.is_empty())
    }
}

/// Read what is available (within the budget), and dispatch every complete request.
pub(super) fn service_conn(
    id: usize,
    c: &mut Conn,
    registry: &MethodRegistry,
    shared: &Arc<Shared>,
    scratch: &mut [u8],
) {
    read_and_dispatch(id, c, registry, shared, scratch);
    c.partial = c.framer.has_partial();
}

fn read_and_dispatch(
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
                c.last_io = Instant::now();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> (Conn, std::os::unix::net::UnixStream) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let c = Conn::new(Stream::Unix(UnixStream::from_std(a)), 1024, Instant::now());
        (c, b)
    }

    /// Idle: nothing in flight and nothing to send, half a request or not. Waiting on the
    /// peer: half a request, or output it has not read.
    #[test]
    fn idle_and_waiting_states() {
        let (mut c, _peer) = conn();
        assert!(c.is_idle() && !c.waits_on_peer());
        c.framer.push(b"{\"jsonrpc\"");
        c.partial = c.framer.has_partial();
        assert!(c.is_idle() && c.waits_on_peer());
        c.outstanding = 1;
        assert!(!c.is_idle());
        c.outstanding = 0;
        // Input not read yet may be a request.
        c.readable = true;
        assert!(!c.is_idle());
        c.readable = false;
        c.partial = false;
        c.queue_out(b"{}\n".to_vec());
        assert!(!c.is_idle() && c.waits_on_peer());
        assert!(c.flush());
        assert!(c.is_idle() && !c.waits_on_peer());
        // Whitespace between requests is not half a request.
        let (mut c, _peer) = conn();
        c.framer.push(b" \n");
        assert!(!c.framer.has_partial());
    }

    #[test]
    fn stalled_request_gets_an_error_line() {
        use std::io::Read as _;
        let (mut c, mut peer) = conn();
        c.partial = true;
        c.close_stalled(9, Duration::from_secs(30));
        assert!(c.should_close());
        let mut got = String::new();
        drop(c);
        peer.read_to_string(&mut got).unwrap();
        assert_eq!(
            got,
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid request: incomplete request, nothing received for 30s\"}}\n"
        );
    }
}
