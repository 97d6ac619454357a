//! The Linux NVMe passthrough ABI (`include/uapi/linux/nvme_ioctl.h`):
//! `struct nvme_uring_cmd` for `IORING_OP_URING_CMD`, `struct
//! nvme_passthru_cmd` (alias `nvme_admin_cmd`) for the ioctls, and the
//! ioctl / `cmd_op` numbers.
//!
//! These are kernel structures in host byte order (plain integers, not
//! the little-endian wire types of the rest of the crate). The kernel
//! builds the NVMe command from their fields: it assigns the command id,
//! builds the data pointer from `addr`/`data_len` (PRPs or SGLs, its
//! choice) and rejects any `flags` (no fused commands, no caller SGLs).
//! For the `_VEC` variants `addr` points at an array of `struct iovec`
//! and `data_len` is their count.
//!
//! Completion: `cqe.res` is 0, a positive NVMe status field
//! ([`crate::status::Status::from_uring_res`]) or a negative errno;
//! completion dword 0 is the first extra word of the 32-byte CQE (the
//! ioctls return it in `result`).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::cmd::Sqe;

/// `struct nvme_uring_cmd` (72 bytes): the first 72 bytes of the 80-byte
/// command area of a 128-byte io_uring submission entry.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NvmeUringCmd {
    /// Opcode.
    pub opcode: u8,
    /// Flags (must be 0).
    pub flags: u8,
    /// Reserved.
    pub rsvd1: u16,
    /// Namespace id.
    pub nsid: u32,
    /// Command dword 2.
    pub cdw2: u32,
    /// Command dword 3.
    pub cdw3: u32,
    /// Metadata buffer address (user memory).
    pub metadata: u64,
    /// Data buffer address (user memory; an iovec array for `_VEC`).
    pub addr: u64,
    /// Metadata buffer length.
    pub metadata_len: u32,
    /// Data buffer length (iovec count for `_VEC`).
    pub data_len: u32,
    /// Command dword 10.
    pub cdw10: u32,
    /// Command dword 11.
    pub cdw11: u32,
    /// Command dword 12.
    pub cdw12: u32,
    /// Command dword 13.
    pub cdw13: u32,
    /// Command dword 14.
    pub cdw14: u32,
    /// Command dword 15.
    pub cdw15: u32,
    /// Timeout, ms (0 = the driver's default).
    pub timeout_ms: u32,
    /// Reserved.
    pub rsvd2: u32,
}

/// `struct nvme_passthru_cmd` (72 bytes), the argument of
/// [`NVME_IOCTL_ADMIN_CMD`] and [`NVME_IOCTL_IO_CMD`]; the kernel writes
/// completion dword 0 into `result`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NvmePassthruCmd {
    /// Opcode.
    pub opcode: u8,
    /// Flags (must be 0).
    pub flags: u8,
    /// Reserved.
    pub rsvd1: u16,
    /// Namespace id.
    pub nsid: u32,
    /// Command dword 2.
    pub cdw2: u32,
    /// Command dword 3.
    pub cdw3: u32,
    /// Metadata buffer address.
    pub metadata: u64,
    /// Data buffer address.
    pub addr: u64,
    /// Metadata buffer length.
    pub metadata_len: u32,
    /// Data buffer length.
    pub data_len: u32,
    /// Command dword 10.
    pub cdw10: u32,
    /// Command dword 11.
    pub cdw11: u32,
    /// Command dword 12.
    pub cdw12: u32,
    /// Command dword 13.
    pub cdw13: u32,
    /// Command dword 14.
    pub cdw14: u32,
    /// Command dword 15.
    pub cdw15: u32,
    /// Timeout, ms (0 = the driver's default).
    pub timeout_ms: u32,
    /// Completion dword 0 (written by the kernel).
    pub result: u32,
}

/// `struct nvme_admin_cmd` is `struct nvme_passthru_cmd`.
pub type NvmeAdminCmd = NvmePassthruCmd;

/// Bytes of both structures.
pub const PASSTHRU_CMD_SIZE: u32 = 72;

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<NvmeUringCmd>() == PASSTHRU_CMD_SIZE as usize);
    assert!(offset_of!(NvmeUringCmd, nsid) == 4);
    assert!(offset_of!(NvmeUringCmd, metadata) == 16);
    assert!(offset_of!(NvmeUringCmd, addr) == 24);
    assert!(offset_of!(NvmeUringCmd, metadata_len) == 32);
    assert!(offset_of!(NvmeUringCmd, data_len) == 36);
    assert!(offset_of!(NvmeUringCmd, cdw10) == 40);
    assert!(offset_of!(NvmeUringCmd, timeout_ms) == 64);
    assert!(size_of::<NvmePassthruCmd>() == PASSTHRU_CMD_SIZE as usize);
    assert!(offset_of!(NvmePassthruCmd, cdw10) == 40);
    assert!(offset_of!(NvmePassthruCmd, result) == 68);
};

const IOC_NONE: u32 = 0;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// The generic Linux ioctl number encoding (`_IOC`): direction in bits
/// 31:30, size in 29:16, type in 15:8, number in 7:0. This is the layout
/// of x86, arm, arm64 and riscv; powerpc, mips and sparc differ.
#[must_use]
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: u32) -> u32 {
    (dir << 30) | ((size & 0x3fff) << 16) | ((ty as u32) << 8) | nr as u32
}

/// `_IO('N', 0x40)`: returns the namespace id of an `ngXnY`/`nvmeXnY` fd.
pub const NVME_IOCTL_ID: u32 = ioc(IOC_NONE, b'N', 0x40, 0);
/// `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
pub const NVME_IOCTL_ADMIN_CMD: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x41, PASSTHRU_CMD_SIZE);
/// `_IOWR('N', 0x43, struct nvme_passthru_cmd)`.
pub const NVME_IOCTL_IO_CMD: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x43, PASSTHRU_CMD_SIZE);
/// `_IOWR('N', 0x80, struct nvme_uring_cmd)`: the `cmd_op` of an I/O command.
pub const NVME_URING_CMD_IO: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x80, PASSTHRU_CMD_SIZE);
/// `_IOWR('N', 0x81, struct nvme_uring_cmd)`: an I/O command with an iovec.
pub const NVME_URING_CMD_IO_VEC: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x81, PASSTHRU_CMD_SIZE);
/// `_IOWR('N', 0x82, struct nvme_uring_cmd)`: an admin command (controller char device).
pub const NVME_URING_CMD_ADMIN: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x82, PASSTHRU_CMD_SIZE);
/// `_IOWR('N', 0x83, struct nvme_uring_cmd)`: an admin command with an iovec.
pub const NVME_URING_CMD_ADMIN_VEC: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x83, PASSTHRU_CMD_SIZE);

/// Bytes of the command area of a 128-byte io_uring submission entry.
pub const URING_CMD_AREA: usize = 80;

impl NvmeUringCmd {
    /// The passthrough form of `sqe` moving `data_len` bytes at `addr`
    /// (the entry's CID, data pointer and metadata pointer are dropped:
    /// the kernel sets them).
    #[must_use]
    pub fn from_sqe(sqe: &Sqe, addr: u64, data_len: u32) -> Self {
        NvmeUringCmd {
            opcode: sqe.opcode,
            flags: sqe.flags,
            rsvd1: 0,
            nsid: sqe.nsid.get(),
            cdw2: sqe.cdw2.get(),
            cdw3: sqe.cdw3.get(),
            metadata: 0,
            addr,
            metadata_len: 0,
            data_len,
            cdw10: sqe.cdw10.get(),
            cdw11: sqe.cdw11.get(),
            cdw12: sqe.cdw12.get(),
            cdw13: sqe.cdw13.get(),
            cdw14: sqe.cdw14.get(),
            cdw15: sqe.cdw15.get(),
            timeout_ms: 0,
            rsvd2: 0,
        }
    }

    /// With a metadata buffer of `len` bytes at `addr`.
    #[must_use]
    pub fn with_metadata(mut self, addr: u64, len: u32) -> Self {
        self.metadata = addr;
        self.metadata_len = len;
        self
    }

    /// With a timeout.
    #[must_use]
    pub fn with_timeout_ms(mut self, ms: u32) -> Self {
        self.timeout_ms = ms;
        self
    }

    /// The 80-byte command area of an io_uring `UringCmd80` entry.
    #[must_use]
    pub fn to_cmd80(&self) -> [u8; URING_CMD_AREA] {
        let mut area = [0u8; URING_CMD_AREA];
        area[..size_of::<Self>()].copy_from_slice(self.as_bytes());
        area
    }

    /// The NVMe submission entry the kernel will send (CID `cid`, data
    /// pointer zero), for logs and tests.
    #[must_use]
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(self.opcode, cid, self.nsid);
        s.flags = self.flags;
        s.cdw2.set(self.cdw2);
        s.cdw3.set(self.cdw3);
        s.cdw10.set(self.cdw10);
        s.cdw11.set(self.cdw11);
        s.cdw12.set(self.cdw12);
        s.cdw13.set(self.cdw13);
        s.cdw14.set(self.cdw14);
        s.cdw15.set(self.cdw15);
        s
    }
}

impl NvmePassthruCmd {
    /// The ioctl form of `sqe` moving `data_len` bytes at `addr`.
    #[must_use]
    pub fn from_sqe(sqe: &Sqe, addr: u64, data_len: u32) -> Self {
        let u = NvmeUringCmd::from_sqe(sqe, addr, data_len);
        NvmePassthruCmd {
            opcode: u.opcode,
            flags: u.flags,
            rsvd1: 0,
            nsid: u.nsid,
            cdw2: u.cdw2,
            cdw3: u.cdw3,
            metadata: 0,
            addr,
            metadata_len: 0,
            data_len,
            cdw10: u.cdw10,
            cdw11: u.cdw11,
            cdw12: u.cdw12,
            cdw13: u.cdw13,
            cdw14: u.cdw14,
            cdw15: u.cdw15,
            timeout_ms: 0,
            result: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::Identify;
    use crate::cmd::Command;
    use crate::io::{BlockRange, Read};
    use proptest::prelude::*;

    #[test]
    fn ioctl_numbers() {
        // The values <linux/nvme_ioctl.h> gives on x86_64.
        assert_eq!(NVME_IOCTL_ID, 0x4e40);
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xc048_4e41);
        assert_eq!(NVME_IOCTL_IO_CMD, 0xc048_4e43);
        assert_eq!(NVME_URING_CMD_IO, 0xc048_4e80);
        assert_eq!(NVME_URING_CMD_IO_VEC, 0xc048_4e81);
        assert_eq!(NVME_URING_CMD_ADMIN, 0xc048_4e82);
        assert_eq!(NVME_URING_CMD_ADMIN_VEC, 0xc048_4e83);
    }

    #[test]
    fn identify_as_admin_cmd() {
        let sqe = Identify::controller().to_sqe(0);
        let c = NvmeAdminCmd::from_sqe(&sqe, 0x7f00_0000_1000, 4096);
        let b = c.as_bytes();
        assert_eq!(b[0], 0x06);
        assert_eq!(&b[24..32], &0x7f00_0000_1000u64.to_ne_bytes());
        assert_eq!(&b[36..40], &4096u32.to_ne_bytes());
        assert_eq!(&b[40..44], &1u32.to_ne_bytes());
    }

    proptest! {
        #[test]
        fn uring_cmd_keeps_the_command(slba in 0u64..1 << 40, n in 1u32..=256, nsid: u32, cid: u16, addr: u64, md: u64) {
            let rd = Read::new(nsid, BlockRange::new(slba, n).unwrap());
            let sqe = rd.to_sqe(cid);
            let u = NvmeUringCmd::from_sqe(&sqe, addr, n * 512).with_metadata(md, 8 * n).with_timeout_ms(30_000);
            prop_assert_eq!((u.opcode, u.nsid, u.addr, u.data_len), (0x02, nsid, addr, n * 512));
            prop_assert_eq!(u64::from(u.cdw10) | u64::from(u.cdw11) << 32, slba);
            prop_assert_eq!(u.cdw12 & 0xffff, n - 1);
            prop_assert_eq!((u.metadata, u.metadata_len, u.timeout_ms), (md, 8 * n, 30_000));
            prop_assert_eq!(Read::decode(&u.to_sqe(cid)), rd);
            let area = u.to_cmd80();
            prop_assert_eq!(&area[..72], u.as_bytes());
            prop_assert_eq!(&area[72..], &[0u8; 8]);
            let p = NvmePassthruCmd::from_sqe(&sqe, addr, 512);
            let u512 = NvmeUringCmd::from_sqe(&sqe, addr, 512);
            prop_assert_eq!(&p.as_bytes()[..64], &u512.as_bytes()[..64]);
        }
    }
}
