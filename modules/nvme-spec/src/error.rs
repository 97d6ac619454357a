//! What can go wrong when building or reading NVMe structures, and the
//! errno each failure maps to.
//!
//! Two failures have their own types because callers branch on their
//! detail: [`NqnError`](crate::fabrics::NqnError) (which NQN rule broke)
//! and [`PduError`](crate::tcp::PduError) (which Terminate Connection
//! Request to answer with). Both convert into [`Error`].

use crate::fabrics::NqnError;
use crate::tcp::PduError;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a structure could not be built or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A caller's buffer is shorter than the structure.
    #[error("buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// A string does not fit its fixed-size field.
    #[error("{field} too long: {len} bytes, at most {max}")]
    FieldTooLong {
        /// The field (`"subnqn"`, `"traddr"`, ...).
        field: &'static str,
        /// The string's length in bytes.
        len: usize,
        /// The most the field holds.
        max: usize,
    },
    /// A numeric argument is outside what the field can encode.
    #[error("{what} out of range: {value}")]
    OutOfRange {
        /// The argument (`"num_blocks"`, `"log page length"`, ...).
        what: &'static str,
        /// The value given.
        value: u64,
    },
    /// An NQN breaks the naming rules.
    #[error("invalid nqn")]
    Nqn(#[from] NqnError),
    /// A received NVMe/TCP PDU header is malformed.
    #[error("invalid nvme/tcp pdu")]
    Pdu(#[from] PduError),
}

impl Error {
    /// The errno this error maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::BufferTooSmall { .. } => libc::ENOSPC,
            Error::FieldTooLong { .. } => libc::ENAMETOOLONG,
            Error::OutOfRange { .. } | Error::Nqn(_) => libc::EINVAL,
            Error::Pdu(_) => libc::EPROTO,
        }
    }
}

/// Checks that `buf` holds at least `need` bytes.
pub(crate) fn need(buf_len: usize, need: usize) -> Result<()> {
    if buf_len < need {
        return Err(Error::BufferTooSmall {
            need,
            have: buf_len,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_and_messages() {
        let e = Error::BufferTooSmall { need: 72, have: 8 };
        assert_eq!(e.errno(), libc::ENOSPC);
        assert_eq!(e.to_string(), "buffer too small: need 72 bytes, have 8");
        let e = Error::OutOfRange {
            what: "num_blocks",
            value: 0,
        };
        assert_eq!(e.errno(), libc::EINVAL);
        assert_eq!(e.to_string(), "num_blocks out of range: 0");
        assert_eq!(need(4, 8), Err(Error::BufferTooSmall { need: 8, have: 4 }));
        assert_eq!(need(8, 8), Ok(()));
    }
}
