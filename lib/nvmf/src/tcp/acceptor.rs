//! The TCP transport's listening sockets, in one epoll set. The core polls
//! them from the transport's accept poller on the app thread (every
//! `acceptor_poll_rate` µs, or when one becomes readable in interrupt
//! mode); each accepted connection goes to a poll group, round robin, by
//! message, as an [`Accept`].

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Token};

use crate::addr::ListenAddr;
use crate::error::{Error, Result};

/// Connections accepted per listener per poll.
const ACCEPT_BATCH: usize = 1024;
/// Connections the kernel queues for a listener until they are accepted:
/// SPDK's (its posix sock layer listens with 512). The standard library
/// listens with 128: a flood of connections then fills the queue faster
/// than a loaded target accepts them, and a real host's SYN is dropped
/// (it retries after 1, 3, 7 s ...). The kernel caps it at
/// `net.core.somaxconn`.
const LISTEN_BACKLOG: i32 = 512;

/// A connection accepted on a listener, on its way to a poll group.
#[derive(Debug)]
pub(crate) struct Accept {
    pub stream: TcpStream,
    /// The listener it came through.
    pub via: ListenAddr,
}

/// The listening sockets and their epoll set.
#[derive(Debug)]
pub(crate) struct Acceptor {
    poll: mio::Poll,
    events: Events,
    listeners: Vec<(usize, TcpListener, ListenAddr)>,
    next_token: usize,
}

impl Acceptor {
    pub fn new() -> Result<Acceptor> {
        Ok(Acceptor {
            poll: mio::Poll::new().map_err(Error::Poller)?,
            events: Events::with_capacity(16),
            listeners: Vec::new(),
            next_token: 0,
        })
    }

    /// The epoll fd (readable when a listener is).
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.poll.as_raw_fd()
    }

    /// Binds and listens on `addr`.
    pub fn listen(&mut self, addr: &ListenAddr) -> Result<()> {
        let l = TcpListener::bind(addr.sock).map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })?;
        l.set_nonblocking(true).map_err(|source| Error::Listen {
            addr: addr.to_string(),
            source,
        })?;
        // Listening again on a listening socket sets its backlog.
        rustix::net::listen(&l, LISTEN_BACKLOG).map_err(|e| Error::Listen {
            addr: addr.to_string(),
            source: e.into(),
        })?;
        let tok = self.next_token;
        self.next_token += 1;
        let fd = l.as_raw_fd();
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), Token(tok), Interest::READABLE)
            .map_err(Error::Poller)?;
        tracing::info!(listener = %addr, "NVMe/TCP target listening");
        self.listeners.push((tok, l, addr.clone()));
        Ok(())
    }

    /// Stops listening on `addr`.
    pub fn unlisten(&mut self, addr: &ListenAddr) {
        self.listeners.retain(|(_, l, a)| {
            if a.same(addr) {
                let fd = l.as_raw_fd();
                let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
                tracing::info!(listener = %addr, "NVMe/TCP target stopped listening");
                false
            } else {
                true
            }
        });
    }

    /// Stops listening everywhere.
    pub fn close_all(&mut self) {
        let all: Vec<ListenAddr> = self.listeners.iter().map(|(_, _, a)| a.clone()).collect();
        for a in &all {
            self.unlisten(a);
        }
    }

    /// Accepts what is waiting; returns the connections.
    pub fn accept(&mut self) -> Vec<Accept> {
        let _ = self.poll.poll(&mut self.events, Some(Duration::ZERO));
        let mut out = Vec::new();
        for (_, l, a) in &self.listeners {
            for _ in 0..ACCEPT_BATCH {
                match l.accept() {
                    Ok((stream, _)) => out.push(Accept {
                        stream,
                        via: a.clone(),
                    }),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        tracing::warn!(listener = %a, error = %e, "accept failed");
                        break;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opts::TRTYPE_TCP;

    /// The kernel's cap on listen backlogs.
    fn somaxconn() -> Option<usize> {
        std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    #[test]
    fn listener_queues_more_than_the_std_backlog() {
        // More than the standard library's 128 (129 fit), fewer than 512.
        const N: usize = 200;
        if somaxconn().is_some_and(|m| m < N) {
            eprintln!("skipping: net.core.somaxconn is below {N}");
            return;
        }
        let mut a = Acceptor::new().unwrap();
        a.listen(&ListenAddr::of_socket(
            TRTYPE_TCP,
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
        let at = a.listeners[0].1.local_addr().unwrap();
        // Nothing accepts meanwhile: every connection waits in the
        // listen queue. One past the backlog would not connect (the
        // kernel drops its SYNs), and time out.
        let held: Vec<TcpStream> = (0..N)
            .map(|i| {
                TcpStream::connect_timeout(&at, Duration::from_secs(10))
                    .unwrap_or_else(|e| panic!("connection {i}: {e}"))
            })
            .collect();
        assert_eq!(a.accept().len(), held.len());
    }
}
