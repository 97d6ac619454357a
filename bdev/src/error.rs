//! The crate's error type.

use std::io;

use crate::bdev::{IoStatus, IoType};

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
    /// This OS thread already runs a bdevkit thread (a reactor, or an
    /// embedded thread).
    #[error("this OS thread already runs a bdevkit thread")]
    AlreadyOnThread,
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
    /// An I/O channel was used on a thread other than its own.
    #[error("I/O submitted on a channel of another thread")]
    WrongThread,
    /// Bad argument.
    #[error("invalid argument: {0}")]
    InvalidArg(String),
    /// The bdev does not serve this I/O type.
    #[error("I/O type {0} not supported by this bdev")]
    NotSupported(IoType),
    /// Write through a read-only descriptor.
    #[error("bdev {0} is open read-only")]
    ReadOnly(String),
    /// The block range lies outside the bdev.
    #[error("blocks {offset_blocks}+{num_blocks} outside bdev of {bdev_blocks} blocks")]
    OutOfRange {
        /// First block.
        offset_blocks: u64,
        /// Length.
        num_blocks: u64,
        /// Bdev size.
        bdev_blocks: u64,
    },
    /// The data buffers are shorter than the I/O.
    #[error("buffer of {have} bytes too small for {need} bytes")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// No bdev of that name.
    #[error("bdev {0} not found")]
    NotFound(String),
    /// Name, alias or config already exists.
    #[error("{0} already exists")]
    Exists(String),
    /// The bdev is claimed.
    #[error("bdev {0} is claimed by {1}")]
    Claimed(String, String),
    /// `bdev_set_options` pool too small for the caches.
    #[error("Pool size {pool} too small for cache size {cache}")]
    PoolTooSmall {
        /// Pool size.
        pool: u32,
        /// Cache size.
        cache: u32,
    },
    /// A module's init failed.
    #[error("init of bdev module {module}")]
    ModuleInit {
        /// Module name.
        module: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// A previous change is still in progress.
    #[error("operation in progress, try again")]
    Again,
    /// The object is busy with a long operation.
    #[error("{0}")]
    Busy(String),
    /// An I/O completed with an error status.
    #[error("I/O failed: {0:?}")]
    Io(IoStatus),
    /// No memory (pool or allocation).
    #[error("out of memory")]
    NoMem,
    /// The bdev keeps no latency histogram (SPDK answers `EFAULT`).
    #[error("histogram of bdev {0} is not enabled")]
    HistogramDisabled(String),
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
            Error::AlreadyOnThread => libc::EBUSY,
            Error::IoDeviceUnregistered(_) => libc::ENODEV,
            Error::ChannelType(_) => libc::EINVAL,
            Error::CreateChannel { .. } | Error::NoMem => libc::ENOMEM,
            Error::WrongThread => libc::EPERM,
            Error::InvalidArg(_)
            | Error::OutOfRange { .. }
            | Error::BufferTooSmall { .. }
            | Error::PoolTooSmall { .. } => libc::EINVAL,
            Error::NotSupported(_) => libc::ENOTSUP,
            Error::ReadOnly(_) => libc::EBADF,
            Error::NotFound(_) => libc::ENODEV,
            Error::Exists(_) => libc::EEXIST,
            Error::Claimed(..) => libc::EPERM,
            Error::ModuleInit { .. } => libc::EIO,
            Error::Again => libc::EAGAIN,
            Error::Busy(_) => libc::EBUSY,
            Error::HistogramDisabled(_) => libc::EFAULT,
            Error::Io(s) => s.errno(),
        }
    }
}
