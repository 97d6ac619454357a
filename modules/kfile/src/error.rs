//! What can go wrong with a backing file, and the errno each failure maps
//! to. The modules wrap this error in theirs without changing its message
//! or errno (SPDK's RPC convention: `-errno` and its `strerror` text).

use std::io;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why opening, sizing or resizing a backing file failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
}

impl Error {
    /// The errno this error maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::UnsupportedFileType(_)
            | Error::InvalidBlockSize { .. }
            | Error::SizeNotMultiple { .. }
            | Error::Empty(_) => libc::EINVAL,
            Error::Open { source, .. } | Error::Size { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            Error::IsDirectory(_) => libc::EISDIR,
            Error::ShrinkWhileOpen(_) => libc::EBUSY,
        }
    }
}
