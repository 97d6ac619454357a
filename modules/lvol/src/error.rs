//! The module's error: what failed, and the errno SPDK answers for it.
//!
//! SPDK's lvol RPCs answer in two ways. A check made before any I/O
//! (names, sizes, lookups: [`LvolError::is_check`]) answers `-errno` with
//! its `strerror` text; a failure reported by the operation's completion
//! answers `-32602` (invalid params) with the `strerror` text (or, for
//! `bdev_lvol_delete`, `-32603`). The RPC layer picks; this type only
//! says which kind a failure is.

use bdevkit_blobstore::Error as BlobError;

/// An lvol operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LvolError {
    /// A bad name, size or option (EINVAL), found before any I/O.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A name taken (EEXIST), found before any I/O.
    #[error("{0} already exists")]
    Exists(String),
    /// No such store, lvol or bdev (ENODEV).
    #[error("{0} not found")]
    NotFound(String),
    /// A bdev an operation needs, found missing once it started (ENODEV,
    /// answered as SPDK's completions answer it).
    #[error("bdev {0} could not be opened")]
    NoDevice(String),
    /// Refused by the RPC's own checks with this message (SPDK answers
    /// `-32602` and the message; `bdev_lvol_clone_bdev`).
    #[error("{0}")]
    Refused(&'static str),
    /// The base bdev is claimed by another module (EPERM).
    #[error("bdev {0} is claimed")]
    Claimed(String),
    /// Not allowed: a snapshot with clones (EPERM).
    #[error("{0}: operation not permitted")]
    NotPermitted(String),
    /// Busy: an operation in flight, or a bdev still open (EBUSY).
    #[error("{0} is busy")]
    Busy(String),
    /// Not an lvol store: no super blob, or its name or uuid is missing or
    /// bad (ENODEV / EINVAL as SPDK's load answers).
    #[error("not an lvol store: {why}")]
    NotLvs {
        /// What is wrong.
        why: &'static str,
        /// The errno SPDK's load answers.
        errno: i32,
    },
    /// The blobstore failed.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The bdev layer failed.
    #[error(transparent)]
    Bdev(#[from] bdevkit::Error),
}

/// Results of this crate.
pub type Result<T, E = LvolError> = std::result::Result<T, E>;

impl LvolError {
    /// The (positive) errno.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            LvolError::Invalid(_) => libc::EINVAL,
            LvolError::Exists(_) => libc::EEXIST,
            LvolError::NotFound(_) | LvolError::NoDevice(_) => libc::ENODEV,
            LvolError::Refused(_) => libc::EINVAL,
            LvolError::Claimed(_) | LvolError::NotPermitted(_) => libc::EPERM,
            LvolError::Busy(_) => libc::EBUSY,
            LvolError::NotLvs { errno, .. } => *errno,
            LvolError::Blob(e) => e.errno(),
            LvolError::Bdev(e) => e.errno(),
        }
    }

    /// Whether SPDK finds this failure before starting the operation (its
    /// RPC then answers `-errno`, not `-32602`).
    #[must_use]
    pub fn is_check(&self) -> bool {
        matches!(
            self,
            LvolError::Invalid(_)
                | LvolError::Exists(_)
                | LvolError::NotFound(_)
                | LvolError::Claimed(_)
        )
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        LvolError::Invalid(what.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_follow_spdk() {
        assert_eq!(LvolError::invalid("x").errno(), libc::EINVAL);
        assert_eq!(LvolError::Exists("x".into()).errno(), libc::EEXIST);
        assert_eq!(LvolError::Blob(BlobError::NoSpace).errno(), libc::ENOSPC);
        assert_eq!(
            LvolError::Bdev(bdevkit::Error::Claimed("a".into(), "b".into())).errno(),
            libc::EPERM
        );
        assert!(LvolError::Exists("x".into()).is_check());
        assert!(!LvolError::Blob(BlobError::NoSpace).is_check());
    }
}
