//! [`Stream`]: a transport's socket, plain or TLS, with one type — what a
//! target with both kinds of listener, or an initiator with both kinds
//! of controller, keeps per connection.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, RawFd};

use crate::conn::TlsConn;

/// A plain or a TLS byte stream over `S`.
#[derive(Debug)]
pub enum Stream<S> {
    /// Plain NVMe/TCP.
    Plain(S),
    /// NVMe/TCP over TLS.
    Tls(Box<TlsConn<S>>),
}

impl<S: Read + Write> Stream<S> {
    /// The stream under TLS (or the plain one).
    pub fn get_ref(&self) -> &S {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.get_ref(),
        }
    }

    /// The stream under TLS, mutably (socket options, `shutdown`).
    pub fn get_mut(&mut self) -> &mut S {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.get_mut(),
        }
    }

    /// The TLS connection, if it is one.
    pub fn tls(&self) -> Option<&TlsConn<S>> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(t) => Some(t),
        }
    }

    /// Whether a read may return data without the socket being readable
    /// (never for a plain stream).
    pub fn has_buffered_input(&self) -> bool {
        self.tls().is_some_and(TlsConn::has_buffered_input)
    }

    /// Whether bytes wait for the socket to be writable (never for a
    /// plain stream: the kernel holds them).
    pub fn wants_write(&self) -> bool {
        self.tls().is_some_and(TlsConn::wants_write)
    }

    /// Sends TLS close_notify (nothing for a plain stream); see
    /// [`TlsConn::shutdown`].
    ///
    /// # Errors
    /// The socket's.
    pub fn close_notify(&mut self) -> io::Result<bool> {
        match self {
            Stream::Plain(_) => Ok(true),
            Stream::Tls(t) => t.shutdown(),
        }
    }
}

impl<S: Read + Write> Read for Stream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read_vectored(bufs),
            Stream::Tls(t) => t.read_vectored(bufs),
        }
    }
}

impl<S: Read + Write> Write for Stream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_vectored(bufs),
            Stream::Tls(t) => t.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(t) => t.flush(),
        }
    }
}

impl<S: AsRawFd> AsRawFd for Stream<S> {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Plain(s) => s.as_raw_fd(),
            Stream::Tls(t) => t.as_raw_fd(),
        }
    }
}
