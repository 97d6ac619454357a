//! What fails, in words an operator can act on. No variant holds key
//! material: identities (NQNs, sent in clear anyway) and OpenSSL's
//! reason strings at most.

use std::io;

use crate::suite::Suite;

/// Everything that fails here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configured PSK of the wrong kind (or a derivation that cannot
    /// be made with it).
    #[error("invalid TLS PSK: {0}")]
    Key(&'static str),
    /// A PSK identity or NQN that is malformed.
    #[error("invalid PSK identity: {0}")]
    Identity(&'static str),
    /// Setting up OpenSSL failed (out of memory, a broken build).
    #[error("TLS setup: {0}")]
    Setup(String),
    /// The peer does not speak TLS: `what` says what it sent instead
    /// (a host without TLS on a secure listener, or a listener without
    /// TLS answering a TLS host).
    #[error("the peer does not speak TLS: it sent {what}")]
    NotTls {
        /// What the first bytes look like.
        what: &'static str,
    },
    /// Server: the host's identity is not of the NVMe/TCP form (why).
    #[error("TLS handshake refused: the host's PSK identity is unusable: {0}")]
    BadIdentity(&'static str),
    /// Server: the host offered no PSK at all (a certificate-based or
    /// resumption-only client).
    #[error("TLS handshake refused: the host offered no PSK")]
    NoPsk,
    /// Server: no PSK is configured for the host's identity.
    #[error("TLS handshake refused: no PSK for identity '{0}'")]
    UnknownIdentity(String),
    /// The identity names one suite, the PSK configured for it selects
    /// the other (the configured PSKs of the two sides differ in size).
    #[error(
        "TLS handshake refused: identity '{identity}' asks for {asked}, \
         but the PSK configured for it is for {configured}"
    )]
    SuiteMismatch {
        /// The identity the host sent.
        identity: String,
        /// The suite it names.
        asked: Suite,
        /// The suite of the configured PSK.
        configured: Suite,
    },
    /// Server: the host's PSK is not the one configured for its identity
    /// (the PSK binder does not verify).
    #[error("TLS handshake refused: the host's PSK differs from the one configured for '{0}'")]
    WrongPsk(String),
    /// The peer ended the handshake with an alert.
    #[error("TLS handshake refused by the peer: {name} alert ({hint})")]
    PeerAlert {
        /// The alert's number (RFC 8446, section 6).
        code: u8,
        /// Its name.
        name: &'static str,
        /// What it most likely means here.
        hint: &'static str,
    },
    /// The peer closed the connection before the handshake ended.
    #[error("the peer closed the connection during the TLS handshake")]
    Closed,
    /// Any other TLS failure (OpenSSL's reason).
    #[error("TLS: {0}")]
    Tls(String),
    /// The socket failed.
    #[error("TLS socket: {0}")]
    Io(#[from] io::Error),
}

impl Error {
    /// The `io::ErrorKind` this is reported with through `Read`/`Write`.
    #[must_use]
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::Io(e) => e.kind(),
            Error::Closed => io::ErrorKind::UnexpectedEof,
            Error::BadIdentity(_)
            | Error::NoPsk
            | Error::UnknownIdentity(_)
            | Error::SuiteMismatch { .. }
            | Error::WrongPsk(_)
            | Error::PeerAlert { .. } => io::ErrorKind::PermissionDenied,
            Error::Key(_) | Error::Identity(_) => io::ErrorKind::InvalidInput,
            Error::Setup(_) => io::ErrorKind::Other,
            Error::NotTls { .. } | Error::Tls(_) => io::ErrorKind::InvalidData,
        }
    }

    /// Whether it is an authentication failure (the keys or identities
    /// do not match), as opposed to a transport or protocol one.
    #[must_use]
    pub fn is_auth(&self) -> bool {
        self.kind() == io::ErrorKind::PermissionDenied
    }

    /// The positive errno SPDK-style RPC results would carry.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::Closed => libc::ECONNRESET,
            Error::Key(_) | Error::Identity(_) => libc::EINVAL,
            Error::Setup(_) => libc::ENOMEM,
            _ if self.is_auth() => libc::EACCES,
            _ => libc::EPROTO,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(e) => e,
            e => io::Error::new(e.kind(), e),
        }
    }
}

/// The name of TLS alert `code` and what it most likely means when the
/// peer sends it during an NVMe/TCP PSK handshake.
#[must_use]
pub fn alert(code: u8) -> (&'static str, &'static str) {
    match code {
        10 => ("unexpected_message", "a protocol error"),
        20 => ("bad_record_mac", "the data was damaged or the keys differ"),
        40 => (
            "handshake_failure",
            "the peer has no PSK for our identity, or no common cipher suite",
        ),
        47 => ("illegal_parameter", "a malformed handshake message"),
        50 => ("decode_error", "a malformed handshake message"),
        51 => (
            "decrypt_error",
            "the peer's PSK for our identity is not ours: the keys differ",
        ),
        70 => ("protocol_version", "the peer does not do TLS 1.3"),
        71 => ("insufficient_security", "no common cipher suite"),
        80 => (
            "internal_error",
            "the peer failed, often because it has no PSK for our identity",
        ),
        109 => ("missing_extension", "the peer wants a PSK we did not offer"),
        115 => (
            "unknown_psk_identity",
            "the peer has no PSK for our identity",
        ),
        _ => ("unknown", "see the peer's log"),
    }
}
