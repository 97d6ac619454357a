//! What can go wrong creating, finding or deleting an xnvme bdev, and the
//! errno each failure maps to (the cause `bdev_xnvme_create` adds to
//! SPDK's sentence is its `strerror` text). Failures in the steps shared
//! with the kernel-file modules (the name, opening a file, the io_uring
//! and libaio mechanisms) keep `bdevkit_kfile`'s message and errno.

use std::io;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an xnvme bdev could not be created, found or deleted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A step shared with the aio and uring modules failed (the name, the
    /// file, the io_uring and libaio mechanisms).
    #[error(transparent)]
    Kfile(#[from] bdevkit_kfile::Error),
    /// `io_mechanism` is none of `io_uring_cmd`, `io_uring`, `libaio`.
    #[error("unknown io_mechanism {0:?} (io_uring_cmd, io_uring or libaio)")]
    UnknownMechanism(String),
    /// The module is not registered with the bdev manager.
    #[error("the xnvme module is not registered")]
    NotRegistered,
    /// `open()` of the namespace's char device failed.
    #[error("open {path}")]
    Open {
        /// The path.
        path: String,
        /// open's error.
        #[source]
        source: io::Error,
    },
    /// `io_uring_cmd` was given something that is not an NVMe generic char
    /// device (a block device, a regular file).
    #[error("io_uring_cmd needs an NVMe generic char device (/dev/ngXnY); {path} is {what}")]
    NotCharDevice {
        /// The path.
        path: String,
        /// What it is instead.
        what: &'static str,
    },
    /// The char device does not answer `NVME_IOCTL_ID`: not an NVMe
    /// namespace.
    #[error("{path} is not an NVMe namespace (NVME_IOCTL_ID)")]
    NotNvme {
        /// The path.
        path: String,
        /// The ioctl's error.
        #[source]
        source: io::Error,
    },
    /// An Identify command failed in the kernel.
    #[error("Identify {what}")]
    IdentifyIo {
        /// Which structure.
        what: &'static str,
        /// The ioctl's error.
        #[source]
        source: io::Error,
    },
    /// An Identify command failed with an NVMe status.
    #[error("Identify {what}: NVMe status {status:#x}")]
    IdentifyStatus {
        /// Which structure.
        what: &'static str,
        /// The status field.
        status: i32,
    },
    /// The namespace's LBA format cannot be served.
    #[error("unsupported LBA format: {0}")]
    UnsupportedFormat(String),
    /// NSZE is 0: the namespace is not active.
    #[error("namespace {0} has no blocks")]
    EmptyNamespace(u32),
}

impl Error {
    /// The errno for the failure.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::Kfile(e) => e.errno(),
            Error::UnknownMechanism(_) | Error::NotRegistered | Error::NotCharDevice { .. } => {
                libc::EINVAL
            }
            Error::Open { source, .. }
            | Error::NotNvme { source, .. }
            | Error::IdentifyIo { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::IdentifyStatus { .. } => libc::EIO,
            Error::UnsupportedFormat(_) => libc::ENOTSUP,
            Error::EmptyNamespace(_) => libc::ENODEV,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_errnos() {
        let cases = [
            (
                Error::UnknownMechanism("spdk".into()),
                "unknown io_mechanism \"spdk\" (io_uring_cmd, io_uring or libaio)",
                libc::EINVAL,
            ),
            (
                Error::NotCharDevice {
                    path: "/dev/nvme0n1".into(),
                    what: "a block device",
                },
                "io_uring_cmd needs an NVMe generic char device (/dev/ngXnY); /dev/nvme0n1 is a block device",
                libc::EINVAL,
            ),
            (
                Error::NotNvme {
                    path: "/dev/null".into(),
                    source: io::Error::from_raw_os_error(libc::ENOTTY),
                },
                "/dev/null is not an NVMe namespace (NVME_IOCTL_ID)",
                libc::ENOTTY,
            ),
            (
                Error::IdentifyStatus {
                    what: "namespace",
                    status: 0x4002,
                },
                "Identify namespace: NVMe status 0x4002",
                libc::EIO,
            ),
            (Error::EmptyNamespace(3), "namespace 3 has no blocks", libc::ENODEV),
            (
                Error::Kfile(bdevkit_kfile::Error::Exists("x".into())),
                "bdev x already exists",
                libc::EEXIST,
            ),
        ];
        for (e, msg, errno) in cases {
            assert_eq!((e.to_string().as_str(), e.errno()), (msg, errno));
        }
    }
}
