//! What OpenSSL reads from and writes to: reads go straight to the
//! socket (OpenSSL reads ahead into its own buffer, several records per
//! syscall, no copy here); writes land in a ciphertext queue that the
//! connection sends with as few `write`s as it can (all the records of
//! a batch in one). OpenSSL never sees a full socket, so a write never
//! leaves a record half inside OpenSSL: what is not on the socket yet is
//! in [`Wire::tx`], in order.
//!
//! It also keeps the first bytes the peer sent, to say what a peer that
//! is not TLS sent instead. A bottom layer: no imports from the crate.

use std::io::{self, Read, Write};

/// Bytes of the peer's first bytes kept.
const FIRST: usize = 8;

/// The socket as OpenSSL's BIO sees it.
#[derive(Debug)]
pub(crate) struct Wire<S> {
    pub sock: S,
    /// Ciphertext not yet on the socket: `tx[sent..]`.
    tx: Vec<u8>,
    sent: usize,
    first: [u8; FIRST],
    first_len: usize,
    /// The socket reported end of file.
    pub eof: bool,
    /// The last socket read returned less than asked (or nothing): the
    /// socket was empty after it.
    pub short: bool,
}

impl<S> Wire<S> {
    pub fn new(sock: S) -> Wire<S> {
        Wire {
            sock,
            tx: Vec::new(),
            sent: 0,
            first: [0; FIRST],
            first_len: 0,
            eof: false,
            short: false,
        }
    }

    /// Ciphertext bytes queued so far (an offset that only grows until
    /// the queue empties and restarts at 0).
    #[inline]
    pub fn queued_end(&self) -> usize {
        self.tx.len()
    }

    /// Where the socket has got to in the queue.
    #[inline]
    pub fn sent(&self) -> usize {
        self.sent
    }

    /// Ciphertext bytes waiting for the socket.
    #[inline]
    pub fn pending(&self) -> usize {
        self.tx.len() - self.sent
    }

    /// Makes room for `n` more queued bytes (kept from then on).
    pub fn reserve(&mut self, n: usize) {
        self.tx.reserve(n);
    }

    /// The first bytes the peer sent (up to 8).
    pub fn first_bytes(&self) -> &[u8] {
        &self.first[..self.first_len]
    }
}

impl<S: Write> Wire<S> {
    /// Writes queued ciphertext until none is left (`Ok(true)`) or the
    /// socket is full (`Ok(false)`). When the queue empties it restarts
    /// at offset 0, keeping its memory.
    pub fn drain(&mut self) -> io::Result<bool> {
        while self.sent < self.tx.len() {
            match self.sock.write(&self.tx[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Restarts the queue at 0 once it is empty (callers first retire
    /// whatever referred to offsets in it).
    pub fn recycle(&mut self) {
        if self.sent == self.tx.len() {
            self.tx.clear();
            self.sent = 0;
        }
    }
}

impl<S: Read> Read for Wire<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.short = true;
        let n = loop {
            match self.sock.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        self.short = n < buf.len();
        if n == 0 && !buf.is_empty() {
            self.eof = true;
        }
        if self.first_len < FIRST {
            let take = (FIRST - self.first_len).min(n);
            self.first[self.first_len..self.first_len + take].copy_from_slice(&buf[..take]);
            self.first_len += take;
        }
        Ok(n)
    }
}

impl<S: Write> Write for Wire<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx.extend_from_slice(buf);
        Ok(buf.len())
    }

    /// OpenSSL flushes after each handshake flight, before it waits
    /// for the answer: the flight goes to the socket now (all of it on a
    /// blocking socket; what a nonblocking one takes, the rest after the
    /// connection's next call).
    fn flush(&mut self) -> io::Result<()> {
        self.drain().map(drop)
    }
}
