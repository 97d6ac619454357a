//! What can go wrong with a kernel-file bdev, and the errno each failure
//! maps to (SPDK's RPC convention: `-errno` and its `strerror` text). It
//! is the error type of the `aio` and `uring` modules too: most failures
//! are in the steps they share (the name, the backing file, registering,
//! finding, resizing), and the few of one module's own are variants here,
//! so that the errno mapping is written once.

use std::io;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why creating, finding, deleting or rescanning a kernel-file bdev, or
/// setting its module's options, failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bdev name is empty.
    #[error("bdev name must not be empty")]
    EmptyName,
    /// A bdev of that name exists.
    #[error("bdev {0} already exists")]
    Exists(String),
    /// No bdev of that module and name.
    #[error("no {module} bdev named {name}")]
    NotFound {
        /// The module (`aio`).
        module: &'static str,
        /// The name asked for.
        name: String,
    },
    /// The module is not registered with the bdev manager.
    #[error("the {0} module is not registered")]
    NotRegistered(&'static str),
    /// The bdev layer refused the bdev.
    #[error("register bdev")]
    Register(#[source] bdevkit::Error),
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
    /// `nowait` asked for on something that is not a block device (aio).
    #[error("nowait is only supported on block devices ({0} is not one)")]
    NowaitNotBlockDevice(String),
    /// The module's kernel interface cannot be used in this process
    /// (io_uring: kernel too old, disabled by `kernel.io_uring_disabled`,
    /// seccomp, ...).
    #[error("{interface} is not available: {reason}")]
    Unavailable {
        /// The interface (`io_uring`).
        interface: &'static str,
        /// What the probe reported.
        reason: String,
    },
    /// Module options with an invalid value (`bdev_uring_set_options`).
    #[error("invalid options: {0}")]
    InvalidOptions(String),
}

impl Error {
    /// The errno this error maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::EmptyName | Error::NotRegistered(_) | Error::InvalidOptions(_) => libc::EINVAL,
            Error::Exists(_) => libc::EEXIST,
            Error::NotFound { .. } => libc::ENODEV,
            Error::Register(e) => e.errno(),
            Error::UnsupportedFileType(_)
            | Error::InvalidBlockSize { .. }
            | Error::SizeNotMultiple { .. }
            | Error::Empty(_) => libc::EINVAL,
            Error::Open { source, .. } | Error::Size { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            Error::IsDirectory(_) => libc::EISDIR,
            Error::ShrinkWhileOpen(_) => libc::EBUSY,
            Error::NowaitNotBlockDevice(_) => libc::ENOTSUP,
            Error::Unavailable { .. } => libc::ENOSYS,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// Messages never repeat their source (reporters print the chain), and
    /// each failure has its errno.
    #[test]
    fn messages_sources_and_errnos() {
        let e = Error::Open {
            path: "/x".into(),
            source: io::Error::from_raw_os_error(libc::EACCES),
        };
        assert_eq!(
            (e.to_string().as_str(), e.errno()),
            ("open /x", libc::EACCES)
        );
        assert!(e
            .source()
            .is_some_and(|s| s.to_string().contains("os error 13")));
        let cases = [
            (
                Error::EmptyName,
                "bdev name must not be empty",
                libc::EINVAL,
            ),
            (
                Error::Exists("a".into()),
                "bdev a already exists",
                libc::EEXIST,
            ),
            (
                Error::NotFound {
                    module: "aio",
                    name: "a".into(),
                },
                "no aio bdev named a",
                libc::ENODEV,
            ),
            (
                Error::ShrinkWhileOpen("u".into()),
                "cannot shrink u while it is open",
                libc::EBUSY,
            ),
            (
                Error::NowaitNotBlockDevice("/f".into()),
                "nowait is only supported on block devices (/f is not one)",
                libc::ENOTSUP,
            ),
            (
                Error::Unavailable {
                    interface: "io_uring",
                    reason: "Operation not permitted".into(),
                },
                "io_uring is not available: Operation not permitted",
                libc::ENOSYS,
            ),
        ];
        for (e, msg, errno) in cases {
            assert_eq!((e.to_string().as_str(), e.errno()), (msg, errno));
        }
    }
}
