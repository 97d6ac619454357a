//! The only unsafe code of the crate: the NVMe ioctls (`NVME_IOCTL_ID`,
//! `NVME_IOCTL_ADMIN_CMD`) that creation uses (blocking, off the I/O
//! path). The io_uring_cmd ring is `bdevkit_kfile`'s
//! ([`bdevkit_kfile::ring::CmdRing`]), written once there for this module
//! and the uring module.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

use bdevkit::dma::DmaBuf;
use bdevkit_nvme_spec::linux::{NvmeAdminCmd, NVME_IOCTL_ADMIN_CMD, NVME_IOCTL_ID};
use bdevkit_nvme_spec::Sqe;

/// The namespace id of an NVMe namespace device (`NVME_IOCTL_ID`).
pub(crate) fn namespace_id(fd: RawFd) -> io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument.
    let r = unsafe { libc::ioctl(fd, libc::c_ulong::from(NVME_IOCTL_ID)) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(r)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTTY))
}

/// What an admin command returned: the NVMe status field (0 = success)
/// and completion dword 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AdminResult {
    /// The status field (`cqe.res` style: 0 or positive).
    pub(crate) status: i32,
    /// Completion dword 0.
    pub(crate) cdw0: u32,
}

/// Runs admin command `sqe` through `NVME_IOCTL_ADMIN_CMD` on `fd` (a
/// namespace or controller char device) with `buf` as its data (blocking:
/// creation time, off the I/O path).
pub(crate) fn admin_cmd(fd: RawFd, sqe: &Sqe, buf: Option<&mut DmaBuf>) -> io::Result<AdminResult> {
    let (addr, len) = match buf {
        Some(b) => (
            b.as_mut_ptr() as u64,
            u32::try_from(b.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
        ),
        None => (0, 0),
    };
    let mut cmd = NvmeAdminCmd::from_sqe(sqe, addr, len);
    // SAFETY: the ioctl reads and writes one nvme_admin_cmd, a live local,
    // and transfers at most `len` bytes at `addr`, the live buffer `buf`
    // borrowed for this synchronous call.
    let r = unsafe { libc::ioctl(fd, libc::c_ulong::from(NVME_IOCTL_ADMIN_CMD), &raw mut cmd) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(AdminResult {
        status: r,
        cdw0: cmd.result,
    })
}
