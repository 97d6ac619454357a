//! The crate's error type.

use std::io;

/// A boxed error from a callback (channel constructors, modules).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can fail in `bdevkit`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A core of the mask is not in this process's affinity set.
    #[error("core {0} is not available to this process")]
    CoreUnavailable(u32),
    /// No reactor runs on any core of the requested mask.
    #[error("no reactor runs on a core of mask {0}")]
    NoReactorForMask(String),
    /// Reading the process CPU affinity failed.
    #[error("read cpu affinity")]
    Affinity(#[source] io::Error),
    /// Creating an epoll/eventfd/timerfd failed.
    #[error("set up reactor wake-up fds")]
    Epoll(#[source] io::Error),
    /// Spawning a reactor OS thread failed.
    #[error("spawn reactor thread")]
    SpawnReactor(#[source] io::Error),
    /// The runtime is stopping or gone.
    #[error("runtime is stopped")]
    RuntimeStopped,
    /// The target thread has exited.
    #[error("thread {0} has exited")]
    ThreadExited(String),
    /// The call must run on a bdevkit lightweight thread.
    #[error("not called on a bdevkit thread")]
    NotOnThread,
    /// A blocking call from a reactor thread would deadlock.
    #[error("blocking call from a reactor thread would deadlock")]
    WouldDeadlock,
    /// The io_device is being unregistered.
    #[error("io device {0} is being unregistered")]
    IoDeviceUnregistered(String),
    /// Internal type confusion for an io_device's channel (a bug).
    #[error("io device {0} channel has an unexpected type")]
    ChannelType(String),
    /// The device's channel constructor failed.
    #[error("create channel for io device {name}")]
    CreateChannel {
        /// Device name.
        name: String,
        /// What the constructor reported.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// The errno this error maps to (positive), for RPC replies.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::CoreUnavailable(_) | Error::NoReactorForMask(_) => libc::EINVAL,
            Error::Affinity(e) | Error::Epoll(e) | Error::SpawnReactor(e) => {
                e.raw_os_error().unwrap_or(libc::EIO)
            }
            Error::RuntimeStopped | Error::ThreadExited(_) => libc::ESHUTDOWN,
            Error::NotOnThread | Error::WouldDeadlock => libc::EPERM,
            Error::IoDeviceUnregistered(_) => libc::ENODEV,
            Error::ChannelType(_) => libc::EINVAL,
            Error::CreateChannel { .. } => libc::ENOMEM,
        }
    }
}
