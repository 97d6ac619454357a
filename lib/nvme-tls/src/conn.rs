//! [`TlsConn`]: a TLS 1.3 connection over a nonblocking byte stream,
//! shaped like the NVMe/TCP transports use their sockets.
//!
//! # Reading
//! A read (or a vectored read, filling each buffer in turn) takes
//! records until the space offered is full or the socket has nothing
//! more (a socket read came back short, or would block). So, as with a
//! socket: a read that returns *fewer* bytes than offered left nothing
//! behind inside TLS and found the socket empty, and waiting for the
//! socket's next readable event is safe (edge-triggered too); a read that
//! fills all the space may have left plaintext inside TLS, which
//! [`TlsConn::has_buffered_input`] tells even though the socket may not
//! be readable. (On a blocking socket a read returns what the socket had,
//! as a socket read does, waiting only for the rest of a record.) `Ok(0)` is the end of the stream (the peer's
//! close_notify, or TCP closed without it: [`TlsConn::peer_closed`]
//! says which); `WouldBlock` means nothing now.
//!
//! # Writing
//! A vectored write gathers the slices (many small PDUs) into records of
//! up to 16 KiB, encrypting large slices in place and copying only what
//! shares a record, up to 256 KiB per call, and sends all the records of
//! the call with one socket write. It returns how many plaintext bytes
//! are *on the socket*; a record that the socket did not take entirely
//! stays queued inside, and its bytes are not counted yet. **The bytes
//! not yet counted must be offered again, first, by the next write** (as
//! a send queue that re-gathers from its first unsent byte does): TLS
//! cannot take back a record it has encrypted. The connection checks the
//! length and fails a write that offers fewer bytes with `InvalidInput`.
//! `WouldBlock` means no byte could be counted now; wait for the socket
//! to be writable. [`TlsConn::wants_write`] says whether ciphertext waits
//! (a KeyUpdate answer, the close_notify, a partly sent batch).
//!
//! # Handshake
//! [`TlsConn::connect`] / [`TlsConn::accept`] start it; it moves on in
//! [`TlsConn::handshake`] or in any read or write, which return
//! `WouldBlock` until it is done (and go on with data at once after).
//! A failed handshake is an [`Error`] that says why (wrong key, unknown
//! identity, a peer that is not TLS, ...); through `Read`/`Write` it
//! comes as an `io::Error` of [`Error::kind`] whose inner error is the
//! [`Error`] (`e.get_ref()` and `downcast_ref`).

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, RawFd};

use openssl::error::ErrorStack;
use openssl::ssl::{ErrorCode, Ssl, SslStream};

use crate::classify::{classify, is_truncation, Context, Side};
use crate::config::{lookup_index, setup, ClientConfig, Lookup, ServerConfig};
use crate::error::Error;
use crate::psk::PskIdentity;
use crate::suite::Suite;
use crate::sys;
use crate::wire::Wire;

/// Largest TLS record payload.
const RECORD: usize = 16 * 1024;
/// Most plaintext one write call encrypts.
const BATCH: usize = 256 * 1024;
/// Record overhead: header, content type, AES-GCM tag.
const RECORD_OVERHEAD: usize = 5 + 1 + 16;

/// How the peer ended its side of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerClose {
    /// With a close_notify alert.
    CloseNotify,
    /// TCP closed without close_notify (data up to there was intact; the
    /// NVMe/TCP PDU layer tells whether a PDU was cut).
    Truncated,
}

/// Where a handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// Done: data can flow.
    Done,
    /// Waiting for the socket (readable; writable too when
    /// [`TlsConn::wants_write`]).
    WouldBlock,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Handshaking,
    Open,
    /// A fatal error happened (reported once); every call fails.
    Failed(io::ErrorKind),
}

/// A TLS 1.3 PSK connection over `S` (a nonblocking `TcpStream`, or any
/// nonblocking byte stream).
pub struct TlsConn<S> {
    stream: SslStream<Wire<S>>,
    side: Side,
    state: State,
    /// Plaintext of small slices gathered into one record.
    stage: Vec<u8>,
    /// Per encrypted chunk: (end of its ciphertext in the wire queue,
    /// plaintext bytes).
    marks: VecDeque<(usize, usize)>,
    /// Plaintext encrypted but not yet counted to the caller.
    inflight: usize,
    /// The part of `inflight` whose ciphertext is all on the socket.
    ready: usize,
    /// The last read stopped because TLS needed more from the socket.
    read_blocked: bool,
    /// The handshake just ended and no read came since: records that
    /// came with the peer's last flight may wait inside (OpenSSL moves
    /// read-ahead bytes to the new epoch's record layer, where
    /// `SSL_has_pending` does not see them).
    fresh: bool,
    peer_closed: Option<PeerClose>,
    close_sent: bool,
    identity: Option<PskIdentity>,
    /// Why it failed, for the calls after the failure.
    failure: String,
}

impl<S> fmt::Debug for TlsConn<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConn")
            .field("side", &self.side)
            .field("state", &self.state)
            .field("identity", &self.identity)
            .field("inflight", &self.inflight)
            .finish_non_exhaustive()
    }
}

fn would_block() -> io::Error {
    io::ErrorKind::WouldBlock.into()
}

impl<S: Read + Write> TlsConn<S> {
    fn new(ssl: Ssl, sock: S, side: Side) -> Result<TlsConn<S>, Error> {
        let stream = SslStream::new(ssl, Wire::new(sock)).map_err(setup)?;
        Ok(TlsConn {
            stream,
            side,
            state: State::Handshaking,
            stage: Vec::new(),
            marks: VecDeque::with_capacity(BATCH / RECORD + 4),
            inflight: 0,
            ready: 0,
            read_blocked: false,
            fresh: false,
            peer_closed: None,
            close_sent: false,
            identity: None,
            failure: String::new(),
        })
    }

    /// Starts the client side of a handshake on `sock` (connected,
    /// nonblocking, nothing exchanged yet). Nothing is sent before the
    /// first [`TlsConn::handshake`], read or write.
    ///
    /// # Errors
    /// [`Error::Setup`] when OpenSSL fails.
    pub fn connect(cfg: &ClientConfig, sock: S) -> Result<TlsConn<S>, Error> {
        let mut ssl = Ssl::new(&cfg.ctx).map_err(setup)?;
        ssl.set_connect_state();
        let mut c = TlsConn::new(ssl, sock, Side::Client)?;
        c.identity = Some(cfg.identity().clone());
        Ok(c)
    }

    /// Starts the server side of a handshake on an accepted `sock`.
    ///
    /// # Errors
    /// [`Error::Setup`] when OpenSSL fails.
    pub fn accept(cfg: &ServerConfig, sock: S) -> Result<TlsConn<S>, Error> {
        let mut ssl = Ssl::new(&cfg.ctx).map_err(setup)?;
        ssl.set_accept_state();
        ssl.set_ex_data(lookup_index()?, Lookup::NotAsked);
        TlsConn::new(ssl, sock, Side::Server)
    }

    /// Moves the handshake on as far as the socket allows.
    ///
    /// # Errors
    /// Why it failed (see [`Error`]); it fails for good, and every later
    /// call fails too. The alert that tells the peer is sent if the
    /// socket takes it.
    pub fn handshake(&mut self) -> Result<Handshake, Error> {
        match self.state {
            State::Open => return Ok(Handshake::Done),
            State::Failed(k) => return Err(Error::Io(self.failed(k))),
            State::Handshaking => {}
        }
        clear_errors();
        let r = self.stream.do_handshake();
        let out = match r {
            Ok(()) => {
                self.state = State::Open;
                self.fresh = true;
                if self.side == Side::Server {
                    self.identity = self.lookup().and_then(|l| match l {
                        Lookup::Found(id) => Some(id.clone()),
                        _ => None,
                    });
                }
                Handshake::Done
            }
            Err(e) if matches!(e.code(), ErrorCode::WANT_READ | ErrorCode::WANT_WRITE) => {
                Handshake::WouldBlock
            }
            Err(e) => {
                let err = self.fail(e);
                // Best effort: the alert, so that the peer knows why.
                let _ = self.stream.get_mut().drain();
                return Err(err);
            }
        };
        if let Err(e) = self.stream.get_mut().drain() {
            self.set_failed(e.kind(), &e);
            return Err(Error::Io(e));
        }
        Ok(out)
    }

    /// Classifies a fatal OpenSSL error and marks the connection failed.
    fn fail(&mut self, e: openssl::ssl::Error) -> Error {
        let wire = self.stream.get_ref();
        let cx = Context {
            side: self.side,
            first: wire.first_bytes(),
            eof: wire.eof,
            lookup: self.lookup(),
            established: self.state == State::Open,
        };
        let err = classify(e, &cx);
        self.set_failed(err.kind(), &err);
        err
    }

    fn set_failed(&mut self, kind: io::ErrorKind, why: &dyn fmt::Display) {
        self.state = State::Failed(kind);
        self.failure = why.to_string();
    }

    /// The error every call returns after a failure.
    fn failed(&self, kind: io::ErrorKind) -> io::Error {
        io::Error::new(
            kind,
            format!("the TLS connection failed earlier: {}", self.failure),
        )
    }

    fn lookup(&self) -> Option<&Lookup> {
        lookup_index()
            .ok()
            .and_then(|i| self.stream.ssl().ex_data(i))
    }

    /// `Ok(true)` when data may flow, `Ok(false)` while handshaking.
    fn ready_for_data(&mut self) -> io::Result<bool> {
        match self.state {
            State::Open => Ok(true),
            State::Failed(k) => Err(self.failed(k)),
            State::Handshaking => match self.handshake() {
                Ok(Handshake::Done) => Ok(true),
                Ok(Handshake::WouldBlock) => Ok(false),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// Whether the handshake is done.
    #[must_use]
    pub fn is_established(&self) -> bool {
        self.state == State::Open
    }

    /// Which side this is.
    #[must_use]
    pub fn side(&self) -> Side {
        self.side
    }

    /// The PSK identity of the connection: the client's own; on the
    /// server, the host's, once the handshake is done. The target must
    /// check that the Fabrics Connect's host NQN and subsystem NQN are
    /// the identity's: the PSK authenticates that pair, nothing else.
    #[must_use]
    pub fn identity(&self) -> Option<&PskIdentity> {
        self.identity.as_ref()
    }

    /// The negotiated suite, once established.
    #[must_use]
    pub fn suite(&self) -> Option<Suite> {
        if self.state != State::Open {
            return None;
        }
        let id = self.stream.ssl().current_cipher()?.protocol_id();
        Suite::ALL.into_iter().find(|s| s.code() == id)
    }

    /// Whether a read may return data without the socket being
    /// readable: plaintext, or whole records read ahead, wait inside TLS.
    /// True too right after the handshake, until the first read (what
    /// came with the peer's last flight may be inside). False after a
    /// read that stopped for want of socket bytes (a partial record may
    /// be inside then, but needs the socket).
    #[must_use]
    pub fn has_buffered_input(&self) -> bool {
        self.state == State::Open
            && !self.read_blocked
            && self.peer_closed.is_none()
            && (self.fresh
                || self.stream.ssl().pending() > 0
                || sys::has_pending(self.stream.ssl()))
    }

    /// Whether ciphertext waits for the socket to be writable.
    #[must_use]
    pub fn wants_write(&self) -> bool {
        self.stream.get_ref().pending() > 0
    }

    /// How the peer closed its side, once a read returned `Ok(0)`.
    #[must_use]
    pub fn peer_closed(&self) -> Option<PeerClose> {
        self.peer_closed
    }

    /// The stream.
    pub fn get_ref(&self) -> &S {
        &self.stream.get_ref().sock
    }

    /// The stream, mutably (socket options, `shutdown`): reading or
    /// writing it directly breaks the TLS stream.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.stream.get_mut().sock
    }

    /// Counts the in-flight chunks whose ciphertext is all on the socket.
    fn retire(&mut self) {
        let sent = self.stream.get_ref().sent();
        while let Some(&(end, plain)) = self.marks.front() {
            if end > sent {
                break;
            }
            self.ready += plain;
            self.marks.pop_front();
        }
        if self.marks.is_empty() {
            self.stream.get_mut().recycle();
        }
    }

    /// Sends queued ciphertext and counts what left.
    fn push_out(&mut self) -> io::Result<()> {
        if let Err(e) = self.stream.get_mut().drain() {
            self.set_failed(e.kind(), &e);
            return Err(e);
        }
        self.retire();
        Ok(())
    }

    /// Encrypts `p` in one `SSL_write` (records of up to 16 KiB) into
    /// the wire queue and remembers its place there.
    fn seal(&mut self, p: &[u8]) -> io::Result<()> {
        clear_errors();
        match self.stream.ssl_write(p) {
            Ok(n) if n == p.len() => {}
            Ok(_) => return Err(self.fatal_write("OpenSSL wrote part of a record")),
            Err(e) => {
                let err = self.fail(e);
                return Err(err.into());
            }
        }
        self.marks
            .push_back((self.stream.get_ref().queued_end(), p.len()));
        self.inflight += p.len();
        Ok(())
    }

    fn fatal_write(&mut self, why: &str) -> io::Error {
        let e = Error::Tls(why.to_owned());
        self.set_failed(io::ErrorKind::Other, &e);
        io::Error::other(e)
    }

    /// Encrypts the slices of `bufs` after their first `skip` bytes, up
    /// to [`BATCH`] bytes, in as few records as the slices allow.
    fn encrypt(&mut self, bufs: &[IoSlice<'_>], mut skip: usize) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum::<usize>() - skip;
        let budget = total.min(BATCH);
        self.stream
            .get_mut()
            .reserve(budget + (budget / RECORD + 2) * RECORD_OVERHEAD);
        let mut stage = std::mem::take(&mut self.stage);
        stage.clear();
        let mut done = 0;
        let r = (|| {
            for b in bufs {
                let mut p: &[u8] = b;
                if skip >= p.len() {
                    skip -= p.len();
                    continue;
                }
                p = &p[skip..];
                skip = 0;
                while !p.is_empty() && done + stage.len() < budget {
                    let room = budget - done - stage.len();
                    if stage.is_empty() && p.len() >= RECORD && room >= RECORD {
                        // Whole records straight from the caller's slice.
                        let n = (p.len().min(room) / RECORD) * RECORD;
                        self.seal(&p[..n])?;
                        done += n;
                        p = &p[n..];
                    } else {
                        let take = (RECORD - stage.len()).min(p.len()).min(room);
                        if stage.capacity() < RECORD {
                            stage.reserve_exact(RECORD);
                        }
                        stage.extend_from_slice(&p[..take]);
                        p = &p[take..];
                        if stage.len() == RECORD {
                            self.seal(&stage)?;
                            done += RECORD;
                            stage.clear();
                        }
                    }
                }
                if done + stage.len() >= budget {
                    break;
                }
            }
            if !stage.is_empty() {
                self.seal(&stage)?;
            }
            Ok(())
        })();
        stage.clear();
        self.stage = stage;
        r
    }

    /// Sends close_notify (once). `Ok(true)` when it is on the socket,
    /// `Ok(false)` while the socket is full (call again when writable).
    /// Before the handshake ends, or after a failure, there is nothing to
    /// close: `Ok(true)`. The stream itself stays open (shut it down or
    /// drop it after).
    ///
    /// # Errors
    /// The socket's.
    pub fn shutdown(&mut self) -> io::Result<bool> {
        if self.state != State::Open {
            return Ok(true);
        }
        if !self.close_sent {
            clear_errors();
            self.close_sent = true;
            if let Err(e) = self.stream.shutdown() {
                if !matches!(e.code(), ErrorCode::WANT_READ | ErrorCode::WANT_WRITE) {
                    let err = self.fail(e);
                    return Err(err.into());
                }
            }
        }
        self.push_out()?;
        Ok(!self.wants_write())
    }

    /// Records the end of the peer's stream.
    fn on_eof(&mut self, how: PeerClose) {
        self.peer_closed = Some(how);
    }
}

/// OpenSSL's thread-local error queue must be empty before an I/O call
/// for its result to be read right.
fn clear_errors() {
    let _ = ErrorStack::get();
}

impl<S: Read + Write> Read for TlsConn<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_vectored(&mut [IoSliceMut::new(buf)])
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        if !self.ready_for_data()? {
            return Err(would_block());
        }
        if self.peer_closed.is_some() {
            return Ok(0);
        }
        self.read_blocked = false;
        self.fresh = false;
        let mut n = 0;
        let mut fatal = None;
        'bufs: for b in bufs.iter_mut() {
            let mut off = 0;
            while off < b.len() {
                clear_errors();
                match self.stream.ssl_read(&mut b[off..]) {
                    Ok(k) => {
                        off += k;
                        n += k;
                        // Nothing left inside TLS, and the socket was
                        // empty after its last read: stop here, as a
                        // socket read would (and do not wait on a
                        // blocking socket).
                        let ssl = self.stream.ssl();
                        if self.stream.get_ref().short
                            && ssl.pending() == 0
                            && !sys::has_pending(ssl)
                        {
                            break 'bufs;
                        }
                    }
                    Err(e) => {
                        match e.code() {
                            ErrorCode::WANT_READ | ErrorCode::WANT_WRITE => {
                                self.read_blocked = true;
                            }
                            ErrorCode::ZERO_RETURN => self.on_eof(PeerClose::CloseNotify),
                            _ if is_truncation(&e) => self.on_eof(PeerClose::Truncated),
                            _ => fatal = Some(self.fail(e)),
                        }
                        break 'bufs;
                    }
                }
            }
        }
        // Whatever reading made TLS send (a KeyUpdate answer) goes now if
        // the socket takes it; else with the next write.
        if self.wants_write() {
            self.push_out()?;
        }
        match fatal {
            // Bytes before the failure count; the next call reports it.
            Some(_) if n > 0 => Ok(n),
            Some(e) => Err(e.into()),
            None if n > 0 || self.peer_closed.is_some() => Ok(n),
            None => Err(would_block()),
        }
    }
}

impl<S: Read + Write> Write for TlsConn<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if !self.ready_for_data()? {
            return Err(would_block());
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        if total < self.inflight {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TLS write: the bytes not yet accepted must be offered again first",
            ));
        }
        self.push_out()?;
        let mut accepted = std::mem::take(&mut self.ready);
        self.inflight -= accepted;
        if self.inflight > 0 || self.wants_write() {
            // Part of the last batch still waits for the socket.
            return if accepted > 0 {
                Ok(accepted)
            } else {
                Err(would_block())
            };
        }
        self.encrypt(bufs, accepted)?;
        self.push_out()?;
        let now = std::mem::take(&mut self.ready);
        self.inflight -= now;
        accepted += now;
        if accepted == 0 {
            Err(would_block())
        } else {
            Ok(accepted)
        }
    }

    /// Sends queued ciphertext; `WouldBlock` while some is left.
    fn flush(&mut self) -> io::Result<()> {
        if let State::Failed(k) = self.state {
            return Err(self.failed(k));
        }
        self.push_out()?;
        if self.wants_write() {
            Err(would_block())
        } else {
            Ok(())
        }
    }
}

impl<S: AsRawFd> AsRawFd for TlsConn<S> {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.get_ref().sock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests;
