//! The aio module's error type and its errno mapping (what the RPC handlers
//! answer, SPDK's convention).

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an aio bdev operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bdev name is empty.
    #[error("bdev name must not be empty")]
    EmptyName,
    /// A bdev of that name exists.
    #[error("bdev {0} already exists")]
    Exists(String),
    /// No aio bdev of that name.
    #[error("no aio bdev named {0}")]
    NotFound(String),
    /// Opening, sizing or validating the backing file failed (the shared
    /// kernel-file support's error; message and errno are its own).
    #[error(transparent)]
    File(#[from] bdevkit_kfile::Error),
    /// `nowait` asked for on something that is not a block device.
    #[error("nowait is only supported on block devices ({0} is not one)")]
    NowaitNotBlockDevice(String),
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
            Error::NowaitNotBlockDevice(_) => libc::ENOTSUP,
            Error::Register(e) => e.errno(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// A wrapped file error keeps its message, its source and its errno.
    #[test]
    fn file_errors_keep_message_source_and_errno() {
        let source = std::io::Error::from_raw_os_error(libc::EACCES);
        let e = Error::from(bdevkit_kfile::Error::Open {
            path: "/x".into(),
            source,
        });
        assert_eq!(
            (e.to_string().as_str(), e.errno()),
            ("open /x", libc::EACCES)
        );
        assert!(e
            .source()
            .is_some_and(|s| s.to_string().contains("os error 13")));
    }
}
