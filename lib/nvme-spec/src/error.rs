//! What can go wrong when building or reading NVMe structures, and the
//! errno each failure maps to.
//!
//! NQN validation has its own error type because callers branch on its
//! detail ([`NqnError`]: which rule broke); it converts into [`Error`].
//! The NVMe/TCP header parser returns its own
//! [`PduError`](crate::tcp::PduError) (which Terminate Connection Request
//! to answer with), which is not an [`Error`]: a parse failure ends the
//! connection, it does not fail a call.

use crate::nqn::NqnError;

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
}

impl Error {
    /// The errno this error maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::BufferTooSmall { .. } => libc::ENOSPC,
            Error::FieldTooLong { .. } => libc::ENAMETOOLONG,
            Error::OutOfRange { .. } | Error::Nqn(_) => libc::EINVAL,
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
