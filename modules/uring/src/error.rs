//! The uring module's error type and its errno mapping. (`bdev_uring_create`
//! answers every failure with SPDK's fixed -32603; the errno is for callers
//! of the Rust API and for `bdev_uring_delete`/`bdev_uring_rescan`.)

use std::io;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a uring bdev operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bdev name is empty.
    #[error("bdev name must not be empty")]
    EmptyName,
    /// A bdev of that name exists.
    #[error("bdev {0} already exists")]
    Exists(String),
    /// No uring bdev of that name.
    #[error("no uring bdev named {0}")]
    NotFound(String),
    /// `open()` failed.
    #[error("open {path}")]
    Open {
        /// The file.
        path: String,
        /// What open reported.
        #[source]
        source: io::Error,
    },
    /// Reading the file's type or size failed.
    #[error("read size of {path}")]
    Size {
        /// The file.
        path: String,
        /// What the kernel reported.
        #[source]
        source: io::Error,
    },
    /// The path is a directory.
    #[error("{0} is a directory")]
    IsDirectory(String),
    /// The path is neither a regular file nor a block device.
    #[error("{0} is not a regular file or block device")]
    UnsupportedFileType(String),
    /// io_uring cannot be used in this process (kernel too old, disabled by
    /// `kernel.io_uring_disabled`, seccomp, ...).
    #[error("io_uring is not available: {0}")]
    Unavailable(String),
    /// The block size is not a power of two >= 512 and >= the device's.
    #[error("invalid block size {block_size} (detected {detected})")]
    InvalidBlockSize {
        /// Requested.
        block_size: u32,
        /// Detected from the device (0 = none).
        detected: u32,
    },
    /// The file size is not a multiple of the block size.
    #[error("size {size} of {path} is not a multiple of the block size {block_size}")]
    SizeNotMultiple {
        /// The file.
        path: String,
        /// Its size in bytes.
        size: u64,
        /// The block size.
        block_size: u32,
    },
    /// The file is empty.
    #[error("{0} is empty")]
    Empty(String),
    /// Shrinking a bdev that has open descriptors.
    #[error("cannot shrink {0} while it is open")]
    ShrinkWhileOpen(String),
    /// The bdev layer refused the bdev.
    #[error("register bdev")]
    Register(#[source] bdevkit::Error),
}

impl Error {
    /// The errno this error maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::EmptyName
            | Error::UnsupportedFileType(_)
            | Error::InvalidBlockSize { .. }
            | Error::SizeNotMultiple { .. }
            | Error::Empty(_) => libc::EINVAL,
            Error::Exists(_) => libc::EEXIST,
            Error::NotFound(_) => libc::ENODEV,
            Error::Open { source, .. } | Error::Size { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            Error::IsDirectory(_) => libc::EISDIR,
            Error::Unavailable(_) => libc::ENOSYS,
            Error::ShrinkWhileOpen(_) => libc::EBUSY,
            Error::Register(e) => e.errno(),
        }
    }
}
