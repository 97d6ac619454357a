//! Error types: the crate error, the client error, and the JSON-RPC error object sent on the wire.

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Failures of the registry and the server (not of individual RPC calls: those are [`RpcError`]s).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A method or alias with this name is already registered.
    #[error("rpc method {name} is already registered")]
    RegisterDuplicate {
        /// The name that clashed.
        name: String,
    },
    /// An alias was registered for a name that is not a registered method.
    #[error("alias {alias} targets {target}, which is not a registered method")]
    RegisterAliasTarget {
        /// The alias being registered.
        alias: String,
        /// The missing target.
        target: String,
    },
    /// [`ServerOptions`](crate::ServerOptions) named no listener at all.
    #[error("no rpc listener configured: set a unix path or a tcp address")]
    BindNoListener,
    /// The socket path (or `<path>.lock`) does not fit `sun_path`.
    #[error("rpc socket path {} is too long ({len} bytes with its .lock suffix, at most {max})", path.display())]
    BindPathTooLong {
        /// The socket path.
        path: PathBuf,
        /// Length in bytes of the longer of the two paths.
        len: usize,
        /// The longest path that fits, in bytes.
        max: usize,
    },
    /// Another process holds `<path>.lock`.
    #[error("rpc socket {} is in use by another process", path.display())]
    BindInUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Opening or locking `<path>.lock` failed.
    #[error("lock rpc socket lock file {}", path.display())]
    BindLock {
        /// The lock file path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Something that is not a socket is in the way at the socket path.
    #[error("{} exists and is not a socket; refusing to remove it", path.display())]
    BindNotSocket {
        /// The socket path.
        path: PathBuf,
    },
    /// Removing a stale socket file failed.
    #[error("remove stale rpc socket {}", path.display())]
    BindRemoveStale {
        /// The socket path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Binding the unix socket or setting its mode failed.
    #[error("bind rpc socket {}", path.display())]
    BindUnix {
        /// The socket path.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Binding the TCP listener failed.
    #[error("bind rpc tcp listener {addr}")]
    BindTcp {
        /// The requested address.
        addr: std::net::SocketAddr,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Creating the epoll instance or its waker, or registering a listener, failed.
    #[error("set up rpc event polling")]
    PollSetup {
        /// What the OS said.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The errno that best describes this failure (positive, e.g. `libc::EADDRINUSE`).
    pub fn errno(&self) -> i32 {
        match self {
            Error::RegisterDuplicate { .. } => libc::EEXIST,
            Error::RegisterAliasTarget { .. } => libc::ENOENT,
            Error::BindNoListener => libc::EINVAL,
            Error::BindPathTooLong { .. } => libc::ENAMETOOLONG,
            Error::BindInUse { .. } => libc::EADDRINUSE,
            Error::BindNotSocket { .. } => libc::EEXIST,
            Error::BindLock { source, .. }
            | Error::BindRemoveStale { source, .. }
            | Error::BindUnix { source, .. }
            | Error::BindTcp { source, .. }
            | Error::PollSetup { source } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// Formats an error with its `source()` chain, `outer: inner: innermost`: how servers log a
/// failure whose reply carries only the errno (STYLE §5: messages never repeat their source, the
/// reporter prints the chain). The one printer of the workspace; it lives here because every
/// crate that reports errors (modules, apps, the `bdev_rpc` client) already depends on this one.
///
/// ```
/// use bdevkit_jsonrpc::ErrorChain;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("open /x")]
/// struct Open(#[source] std::io::Error);
///
/// let e = Open(std::io::Error::other("denied"));
/// assert_eq!(ErrorChain(&e).to_string(), "open /x: denied");
/// ```
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut src = self.0.source();
        while let Some(s) = src {
            write!(f, ": {s}")?;
            src = s.source();
        }
        Ok(())
    }
}

impl std::fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Failures seen by a [`Client`](crate::Client).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Connecting to the server failed.
    #[error("connect to {addr}")]
    Connect {
        /// The address as given.
        addr: String,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Reading or writing the socket failed.
    #[error("rpc connection i/o failed")]
    Io(#[source] io::Error),
    /// No complete response arrived before the timeout.
    #[error("timeout while waiting for response")]
    Timeout,
    /// The server closed the connection.
    #[error("connection closed{}", if *partial { " with partial response" } else { "" })]
    Closed {
        /// Whether part of a response had arrived.
        partial: bool,
    },
    /// The server sent bytes that are not valid JSON.
    #[error("server sent invalid json")]
    Json(#[source] serde_json::Error),
    /// The server sent valid JSON that is not a valid response.
    #[error("invalid response: {0}")]
    InvalidResponse(String),
    /// The server answered with a JSON-RPC error object.
    #[error(transparent)]
    Rpc(RpcError),
}

/// A JSON-RPC error object: serialises as exactly `{"code": .., "message": ..}`, as SPDK sends it.
///
/// Handlers answer with one of these through [`Responder::err`](crate::Responder::err). Module
/// failures use [`RpcError::from_errno`] (negative errno + `strerror` text, SPDK's convention).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("json-rpc error {code}: {message}")]
pub struct RpcError {
    /// The error code (negative).
    pub code: i32,
    /// Human-readable text; wire-exact where SPDK's text is.
    pub message: String,
}

impl RpcError {
    /// -32700: the request is not valid JSON.
    pub const PARSE_ERROR: i32 = -32700;
    /// -32600: the JSON is not a valid request.
    pub const INVALID_REQUEST: i32 = -32600;
    /// -32601: no such method (or not allow-listed).
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// -32602: bad parameters.
    pub const INVALID_PARAMS: i32 = -32602;
    /// -32603: internal error (also SPDK's code for most parameter-decode failures).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// -1: method exists but not in the current RPC state (clashes with -EPERM, as in SPDK).
    pub const INVALID_STATE: i32 = -1;

    /// An error with any code and message.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// -32700 "Parse error".
    pub fn parse_error() -> Self {
        Self::new(Self::PARSE_ERROR, "Parse error")
    }

    /// -32600 "Invalid request".
    pub fn invalid_request() -> Self {
        Self::new(Self::INVALID_REQUEST, "Invalid request")
    }

    /// -32601 "Method not found".
    pub fn method_not_found() -> Self {
        Self::new(Self::METHOD_NOT_FOUND, "Method not found")
    }

    /// -32602 with the given message.
    pub fn invalid_params(msg: impl Into<String>) -> Self {
        Self::new(Self::INVALID_PARAMS, msg)
    }

    /// -32603 with the given message.
    pub fn internal_error(msg: impl Into<String>) -> Self {
        Self::new(Self::INTERNAL_ERROR, msg)
    }

    /// -32603 "spdk_json_decode_object failed": what most SPDK bdev handlers answer when their
    /// parameters do not decode.
    pub fn decode_failed() -> Self {
        Self::internal_error("spdk_json_decode_object failed")
    }

    /// `-errno` with glibc's `strerror` text, e.g. `from_errno(libc::ENODEV)` is
    /// `{-19, "No such device"}`. A negative `errno` is accepted as well.
    pub fn from_errno(errno: i32) -> Self {
        let errno = if errno < 0 {
            errno.saturating_neg()
        } else {
            errno
        };
        Self::new(-errno, strerror(errno))
    }

    /// -32603 with SPDK's `sentence` followed by the `strerror` text of
    /// `errno`: `internal_with_cause("Unable to create URING bdev.", libc::EACCES)`
    /// is `{-32603, "Unable to create URING bdev. Permission denied"}`. The
    /// sentence stays unchanged at the start, so clients that match it keep
    /// working.
    pub fn internal_with_cause(sentence: &str, errno: i32) -> Self {
        Self::internal_error(format!("{sentence} {}", strerror(errno)))
    }
}

/// glibc's `strerror` text of `errno` (either sign): `strerror(libc::ENOENT)`
/// is "No such file or directory".
pub fn strerror(errno: i32) -> String {
    let errno = errno.saturating_abs();
    let text = io::Error::from_raw_os_error(errno).to_string();
    let suffix = format!(" (os error {errno})");
    text.strip_suffix(&suffix).unwrap_or(&text).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chain_prints_every_source() {
        let e = ClientError::Io(io::Error::other("broken pipe"));
        assert_eq!(
            ErrorChain(&e).to_string(),
            "rpc connection i/o failed: broken pipe"
        );
        assert_eq!(
            format!("{:?}", ErrorChain(&ClientError::Timeout)),
            "timeout while waiting for response"
        );
    }

    #[test]
    fn errno_text_is_strerror() {
        assert_eq!(
            RpcError::from_errno(libc::ENODEV),
            RpcError::new(-19, "No such device")
        );
        assert_eq!(
            RpcError::from_errno(-libc::EINVAL),
            RpcError::new(-22, "Invalid argument")
        );
        assert_eq!(RpcError::from_errno(libc::EEXIST).message, "File exists");
        assert_eq!(
            RpcError::from_errno(libc::EAGAIN).message,
            "Resource temporarily unavailable"
        );
        assert_eq!(RpcError::from_errno(libc::ENOTSUP).code, -95);
    }

    #[test]
    fn rpc_error_serialises_code_and_message_only() {
        let s = serde_json::to_string(&RpcError::method_not_found()).unwrap();
        assert_eq!(s, r#"{"code":-32601,"message":"Method not found"}"#);
        let e: RpcError =
            serde_json::from_str(r#"{"code":-1,"message":"m","data":{"x":1}}"#).unwrap();
        assert_eq!(e, RpcError::new(-1, "m"));
    }

    #[test]
    fn protocol_errors_have_spdk_text() {
        assert_eq!(RpcError::parse_error().message, "Parse error");
        assert_eq!(RpcError::invalid_request().code, -32600);
        assert_eq!(RpcError::decode_failed().code, -32603);
        assert_eq!(
            RpcError::decode_failed().message,
            "spdk_json_decode_object failed"
        );
    }
}
