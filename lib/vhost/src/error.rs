//! The crate's error type and its errno mapping (what the RPCs answer).

use std::path::PathBuf;

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can fail in the vhost target.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A controller of that name exists.
    #[error("vhost controller {0} already exists")]
    Exists(String),
    /// No controller of that name.
    #[error("no vhost controller {0}")]
    NoController(String),
    /// The bdev could not be opened.
    #[error("could not open bdev {bdev}")]
    OpenBdev {
        /// The bdev's name.
        bdev: String,
        /// Why.
        #[source]
        source: bdevkit::Error,
    },
    /// The cpumask does not parse or selects no core of the app's mask.
    #[error("invalid cpumask {0}")]
    CpuMask(String),
    /// A transport other than `vhost_user_blk`.
    #[error("transport type {0} unavailable")]
    Transport(String),
    /// A parameter the target does not serve.
    #[error("{0} is not supported")]
    NotSupported(&'static str),
    /// The socket path is too long or the directory unusable.
    #[error("socket path {0:?} is invalid")]
    SocketPath(PathBuf),
    /// The unix socket could not be set up.
    #[error("could not listen on {path:?}")]
    Listen {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Coalescing parameters out of range.
    #[error("invalid coalescing parameters")]
    Coalescing,
    /// The app's threads could not be had.
    #[error("could not start controller thread")]
    Thread(#[source] bdevkit::Error),
    /// A VM is connected to the controller.
    #[error("vhost controller {0} has a connected vm")]
    Busy(String),
}

impl Error {
    /// The errno the RPCs answer with.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::Exists(_) => libc::EEXIST,
            Error::NoController(_) => libc::ENODEV,
            Error::OpenBdev { source, .. } => source.errno(),
            Error::CpuMask(_)
            | Error::Transport(_)
            | Error::NotSupported(_)
            | Error::SocketPath(_)
            | Error::Coalescing => libc::EINVAL,
            Error::Listen { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Thread(_) => libc::EIO,
            Error::Busy(_) => libc::EBUSY,
        }
    }
}
