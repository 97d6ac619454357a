//! The driver's error type.

use std::io;

use bdevkit_nvme_spec::Status;

/// Driver errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A VFIO or system call failed.
    #[error("{op} failed")]
    Sys {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// No such device, or it is not bound to vfio-pci.
    #[error("no usable device {0}")]
    NoDevice(String),
    /// The controller did not answer within its timeout.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The controller reported a fatal status (CSTS.CFS).
    #[error("controller fatal status")]
    Fatal,
    /// The controller is gone (registers read all ones).
    #[error("controller removed")]
    Removed,
    /// An admin command failed.
    #[error("admin command {opcode:#04x} failed with status {status}")]
    Command {
        /// Its opcode.
        opcode: u8,
        /// The status it completed with.
        status: Status,
    },
    /// The controller lacks something the driver needs.
    #[error("unsupported controller: {0}")]
    Unsupported(String),
    /// A bad argument.
    #[error("invalid argument: {0}")]
    InvalidArg(String),
    /// The controller is not in a state to do this (resetting, failed).
    #[error("controller busy")]
    Busy,
    /// DH-HMAC-CHAP authentication of a queue failed (never key
    /// material).
    #[error("DH-HMAC-CHAP authentication failed: {0}")]
    Auth(String),
}

impl Error {
    /// The errno for JSON-RPC answers and I/O statuses.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::Sys { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::NoDevice(_) | Error::Removed => libc::ENODEV,
            Error::Timeout(_) => libc::ETIMEDOUT,
            Error::Fatal | Error::Command { .. } => libc::EIO,
            Error::Unsupported(_) => libc::ENOTSUP,
            Error::InvalidArg(_) => libc::EINVAL,
            Error::Busy => libc::EBUSY,
            Error::Auth(_) => libc::EACCES,
        }
    }

    pub(crate) fn sys(op: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Sys { op, source }
    }
}

/// Driver result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
