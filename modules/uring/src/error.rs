//! The uring module's error type and its errno mapping. (`bdev_uring_create`
//! answers every failure with SPDK's fixed -32603; the errno is for callers
//! of the Rust API and for `bdev_uring_delete`/`bdev_uring_rescan`.)

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
    /// Opening, sizing or validating the backing file failed (the shared
    /// kernel-file support's error; message and errno are its own).
    #[error(transparent)]
    File(#[from] bdevkit_kfile::Error),
    /// io_uring cannot be used in this process (kernel too old, disabled by
    /// `kernel.io_uring_disabled`, seccomp, ...).
    #[error("io_uring is not available: {0}")]
    Unavailable(String),
    /// The bdev layer refused the bdev.
    #[error("register bdev")]
    Register(#[source] bdevkit::Error),
}

impl Error {
    /// The errno this error maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::EmptyName => libc::EINVAL,
            Error::Exists(_) => libc::EEXIST,
            Error::NotFound(_) => libc::ENODEV,
            Error::File(e) => e.errno(),
            Error::Unavailable(_) => libc::ENOSYS,
            Error::Register(e) => e.errno(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapped file error keeps its message and its errno.
    #[test]
    fn file_errors_keep_message_and_errno() {
        let e = Error::from(bdevkit_kfile::Error::IsDirectory("/d".into()));
        assert_eq!(
            (e.to_string().as_str(), e.errno()),
            ("/d is a directory", libc::EISDIR)
        );
        let e = Error::from(bdevkit_kfile::Error::ShrinkWhileOpen("u".into()));
        assert_eq!(
            (e.to_string().as_str(), e.errno()),
            ("cannot shrink u while it is open", libc::EBUSY)
        );
    }
}
