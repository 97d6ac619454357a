//! Turning an OpenSSL failure into an [`Error`] that says what went
//! wrong in NVMe/TCP terms: which side's key or identity, a peer that is
//! not TLS, an alert and what it likely means.

use openssl::ssl::ErrorCode;

use crate::config::Lookup;
use crate::error::{alert, Error};
use crate::sniff::{sniff, Sniff};
use crate::sys;

/// Which end of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The initiator (TLS client).
    Client,
    /// The target (TLS server).
    Server,
}

/// What the connection knew when OpenSSL failed.
pub(crate) struct Context<'a> {
    pub side: Side,
    /// The peer's first bytes.
    pub first: &'a [u8],
    /// The socket reported end of file.
    pub eof: bool,
    /// Server: what the PSK lookup found.
    pub lookup: Option<&'a Lookup>,
    /// The handshake had completed.
    pub established: bool,
}

/// OpenSSL's reason codes in `e`, first first.
fn reasons(e: &openssl::ssl::Error) -> Vec<(i32, String)> {
    e.ssl_error()
        .map(|s| {
            s.errors()
                .iter()
                .map(|x| (x.reason_code(), x.reason().unwrap_or("unknown").to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// The error of a failed OpenSSL call (not WANT_READ/WANT_WRITE).
pub(crate) fn classify(e: openssl::ssl::Error, cx: &Context<'_>) -> Error {
    let reasons = reasons(&e);
    let code = e.code();
    if let Some(io) = e.into_io_error().ok().filter(|io| {
        !matches!(
            io.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::UnexpectedEof
        )
    }) {
        return Error::Io(io);
    }
    if !cx.established {
        // The peer sent something that is not TLS at all.
        let s = sniff(cx.first);
        if !matches!(s, Sniff::NeedMore) && !s.is_tls() {
            return Error::NotTls { what: s.describe() };
        }
        if cx.side == Side::Server {
            match cx.lookup {
                Some(Lookup::Malformed(why)) => return Error::BadIdentity(why),
                Some(Lookup::Unknown(id)) => return Error::UnknownIdentity(id.clone()),
                Some(Lookup::Mismatch {
                    identity,
                    asked,
                    configured,
                }) => {
                    return Error::SuiteMismatch {
                        identity: identity.clone(),
                        asked: *asked,
                        configured: *configured,
                    }
                }
                Some(Lookup::Found(id)) => {
                    if reasons
                        .iter()
                        .any(|(r, _)| *r == sys::R_BINDER_DOES_NOT_VERIFY)
                    {
                        return Error::WrongPsk(id.as_str().to_owned());
                    }
                }
                Some(Lookup::NotAsked) | None => {
                    if !cx.first.is_empty() && !cx.eof && !reasons.is_empty() {
                        return Error::NoPsk;
                    }
                }
            }
        }
    }
    // An alert from the peer.
    for (r, _) in &reasons {
        if let Some(a) = r
            .checked_sub(sys::AD_REASON_OFFSET)
            .and_then(|a| u8::try_from(a).ok())
        {
            if a != 0 {
                let (name, hint) = alert(a);
                return Error::PeerAlert {
                    code: a,
                    name,
                    hint,
                };
            }
        }
    }
    let eof = cx.eof
        || code == ErrorCode::ZERO_RETURN
        || reasons
            .iter()
            .any(|(r, _)| *r == sys::R_UNEXPECTED_EOF_WHILE_READING)
        || (code == ErrorCode::SYSCALL && reasons.is_empty());
    if !cx.established && eof {
        return Error::Closed;
    }
    match reasons.first() {
        Some((_, why)) => Error::Tls(why.clone()),
        None => Error::Tls(format!("OpenSSL error {code:?}")),
    }
}

/// Whether `e` is an unexpected end of file (TCP closed without
/// close_notify) on an established connection.
pub(crate) fn is_truncation(e: &openssl::ssl::Error) -> bool {
    if e.code() == ErrorCode::SYSCALL && e.ssl_error().is_none() && e.io_error().is_none() {
        return true;
    }
    reasons(e)
        .iter()
        .any(|(r, _)| *r == sys::R_UNEXPECTED_EOF_WHILE_READING)
}
