//! What the io_uring [`Ring`](crate::ring::Ring) is built from and
//! builds: its setup, the two entry sizes ([`FileIo`], [`NvmeCmd`]) and
//! the NVMe passthrough commands' encoding. Below both the ring's unsafe
//! half (`sys/ring.rs`) and its public face (`ring.rs`).

use std::fmt;

use bdevkit_nvme_spec::io::DsmRange;
use bdevkit_nvme_spec::linux::{
    NvmeUringCmd, NVME_URING_CMD_ADMIN, NVME_URING_CMD_ADMIN_VEC, NVME_URING_CMD_IO,
    NVME_URING_CMD_IO_VEC,
};
use io_uring::{cqueue, squeue};

use bdevkit::bdev::module::IoVec;

/// How a ring is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingSetup {
    /// SQ entries (and slots of the in-flight table).
    pub entries: u32,
    /// `IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN`: completions are only
    /// posted when the owner enters the kernel (no interrupts of the
    /// reactor).
    pub defer_taskrun: bool,
    /// `IORING_SETUP_COOP_TASKRUN` (where `DEFER_TASKRUN` is missing).
    pub coop_taskrun: bool,
    /// `IORING_SETUP_SUBMIT_ALL`.
    pub submit_all: bool,
    /// `IORING_SETUP_TASKRUN_FLAG`: the kernel flags pending completion
    /// work in the SQ ring, so an idle poll can skip `io_uring_enter`.
    pub taskrun_flag: bool,
    /// `IORING_SETUP_SQPOLL` with this idle time in ms.
    pub sqpoll_idle_ms: Option<u32>,
    /// `IORING_SETUP_IOPOLL`: completions are found by polling the
    /// device.
    pub iopoll: bool,
}

/// How a file I/O entry names its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileRef {
    /// An index in the ring's registered file table
    /// ([`Ring::add_file`](crate::ring::Ring::add_file)).
    Fixed(u32),
    /// A plain descriptor (the table was full or missing).
    Raw(std::os::fd::RawFd),
}

mod sealed {
    pub trait Sealed {}
}

/// The entries of a ring: [`FileIo`] or [`NvmeCmd`] (sealed).
pub trait Entries: sealed::Sealed + fmt::Debug + 'static {
    /// The submission entry.
    type Sqe: squeue::EntryMarker;
    /// The completion entry.
    type Cqe: cqueue::EntryMarker;
    /// How a request names its file.
    type File: Copy + fmt::Debug;
    /// What each slot keeps besides its I/O, for the kernel to read while
    /// the slot's request is in flight.
    type Aux: Copy + fmt::Debug;
    /// Size of the registered file table (0: none).
    const FILE_TABLE: u32;
    /// A slot's file before its first request.
    const NO_FILE: Self::File;
    /// What the ring is, for log lines.
    const WHAT: &'static str;
    /// A slot's [`Entries::Aux`] before its first request.
    fn aux() -> Self::Aux;
    /// Completion dword 0 of an NVMe command (0 for file I/O).
    fn cdw0(cqe: &Self::Cqe) -> u32;
}

/// File reads, writes and flushes (the `uring` module): 64-byte entries,
/// files in a registered table of 256.
#[derive(Debug)]
pub struct FileIo;

impl sealed::Sealed for FileIo {}

impl Entries for FileIo {
    type Sqe = squeue::Entry;
    type Cqe = cqueue::Entry;
    type File = FileRef;
    type Aux = ();
    const FILE_TABLE: u32 = 256;
    const NO_FILE: FileRef = FileRef::Raw(-1);
    const WHAT: &'static str = "io_uring";
    #[inline]
    fn aux() {}
    #[inline]
    fn cdw0(_: &cqueue::Entry) -> u32 {
        0
    }
}

/// NVMe commands through `IORING_OP_URING_CMD` on an NVMe char device
/// (`xnvme`'s `io_uring_cmd`): 128-byte submission and 32-byte completion
/// entries, plain descriptors, and per slot the Dataset Management ranges
/// an unmap sends.
#[derive(Debug)]
pub struct NvmeCmd;

impl sealed::Sealed for NvmeCmd {}

/// What a slot of an [`NvmeCmd`] ring keeps besides its I/O.
#[derive(Debug, Clone, Copy)]
pub struct CmdAux {
    /// The Dataset Management ranges of the slot's command (unmap); the
    /// kernel reads them while the command is in flight.
    pub(crate) ranges: [DsmRange; SLOT_RANGES],
    /// The I/O wants completion dword 0 (passthrough).
    pub(crate) wants_cdw0: bool,
}

impl Entries for NvmeCmd {
    type Sqe = squeue::Entry128;
    type Cqe = cqueue::Entry32;
    type File = std::os::fd::RawFd;
    type Aux = CmdAux;
    const FILE_TABLE: u32 = 0;
    const NO_FILE: std::os::fd::RawFd = -1;
    const WHAT: &'static str = "io_uring_cmd";
    fn aux() -> CmdAux {
        CmdAux {
            ranges: [DsmRange::default(); SLOT_RANGES],
            wants_cdw0: false,
        }
    }
    /// The kernel puts the 64-bit NVMe result in the first extra word of
    /// the 32-byte entry; dword 0 is its low half.
    #[inline]
    fn cdw0(cqe: &cqueue::Entry32) -> u32 {
        (cqe.big_cqe()[0] & 0xffff_ffff) as u32
    }
}

/// Dataset Management ranges a slot of an [`NvmeCmd`] ring has room for:
/// at most this many per unmap command.
pub const SLOT_RANGES: usize = 16;

/// Which char device an NVMe command goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// The namespace's generic char device (`/dev/ngXnY`): I/O commands.
    Namespace,
    /// The controller's char device (`/dev/nvmeX`): admin commands.
    Controller,
}

/// Where an NVMe command's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// No data transfer.
    None,
    /// The I/O's own segments.
    Segments,
    /// The first `n` (at most [`SLOT_RANGES`]) Dataset Management ranges
    /// given to [`Ring::prep_cmd`](crate::ring::Ring::prep_cmd).
    Ranges(usize),
}

/// An NVMe command for [`Ring::prep_cmd`](crate::ring::Ring::prep_cmd): the command without its data
/// (the ring fills in the data and metadata pointers and lengths; what
/// `cmd` has there is ignored), where it goes and where its data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmeCommand {
    /// The command.
    pub cmd: NvmeUringCmd,
    /// Which file.
    pub dest: Dest,
    /// Its data.
    pub data: Data,
    /// Completion dword 0 goes back to the I/O (passthrough).
    pub wants_cdw0: bool,
}

/// The `cmd_op` of a command to `dest`, with an iovec array (`vectored`)
/// or a plain buffer.
#[must_use]
pub fn cmd_op(dest: Dest, vectored: bool) -> u32 {
    match (dest, vectored) {
        (Dest::Namespace, false) => NVME_URING_CMD_IO,
        (Dest::Namespace, true) => NVME_URING_CMD_IO_VEC,
        (Dest::Controller, false) => NVME_URING_CMD_ADMIN,
        (Dest::Controller, true) => NVME_URING_CMD_ADMIN_VEC,
    }
}

/// `cmd` without data (no data or metadata pointer).
pub(crate) fn without_data(mut cmd: NvmeUringCmd) -> NvmeUringCmd {
    cmd.addr = 0;
    cmd.data_len = 0;
    cmd.metadata = 0;
    cmd.metadata_len = 0;
    cmd
}

/// `cmd` moving the data of `iovs` (none for none), and its `cmd_op`: one
/// segment is a plain buffer, several are the iovec array itself (`IoVec`
/// is `#[repr(C)]` like `struct iovec`: the `_VEC` variant).
pub(crate) fn with_segments(cmd: NvmeUringCmd, dest: Dest, iovs: &[IoVec]) -> (NvmeUringCmd, u32) {
    let mut cmd = without_data(cmd);
    match iovs {
        [] => (cmd, cmd_op(dest, false)),
        [one] if u32::try_from(one.len).is_ok() => {
            cmd.addr = one.base as u64;
            cmd.data_len = u32::try_from(one.len).expect("invariant: checked above");
            (cmd, cmd_op(dest, false))
        }
        many => {
            cmd.addr = many.as_ptr() as u64;
            cmd.data_len = u32::try_from(many.len()).unwrap_or(u32::MAX);
            (cmd, cmd_op(dest, true))
        }
    }
}

/// `cmd` sending the first `n` of `ranges`.
pub(crate) fn with_ranges(cmd: NvmeUringCmd, ranges: &[DsmRange], n: usize) -> NvmeUringCmd {
    let mut cmd = without_data(cmd);
    cmd.addr = ranges.as_ptr() as u64;
    let bytes = n.min(ranges.len()) * size_of::<DsmRange>();
    cmd.data_len = u32::try_from(bytes).expect("invariant: at most 16 ranges");
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_ranges_and_cmd_ops() {
        let (mut a, mut c) = ([0u8; 4096], [0u8; 512]);
        let one = [IoVec {
            base: a.as_mut_ptr(),
            len: 4096,
        }];
        let two = [
            one[0],
            IoVec {
                base: c.as_mut_ptr(),
                len: 512,
            },
        ];
        let (a, two_at) = (a.as_ptr() as u64, two.as_ptr() as u64);
        // What a command carries in its data and metadata fields never
        // reaches the kernel.
        let cmd = NvmeUringCmd {
            addr: 0xdead,
            data_len: 7,
            metadata: 0xbeef,
            metadata_len: 8,
            ..NvmeUringCmd::default()
        };
        let cases: [(Dest, &[IoVec], u64, u32, u32); 4] = [
            (Dest::Namespace, &[], 0, 0, NVME_URING_CMD_IO),
            (Dest::Controller, &one, a, 4096, NVME_URING_CMD_ADMIN),
            (Dest::Namespace, &two, two_at, 2, NVME_URING_CMD_IO_VEC),
            (Dest::Controller, &two, two_at, 2, NVME_URING_CMD_ADMIN_VEC),
        ];
        for (dest, iovs, addr, len, op) in cases {
            let (k, got) = with_segments(cmd, dest, iovs);
            let fields = (k.addr, k.data_len, k.metadata, k.metadata_len, got);
            assert_eq!(fields, (addr, len, 0, 0, op), "{dest:?} {}", iovs.len());
        }
        let ranges = [DsmRange::default(); SLOT_RANGES];
        let k = with_ranges(cmd, &ranges, 3);
        let fields = (k.addr, k.data_len, k.metadata, k.metadata_len);
        assert_eq!(fields, (ranges.as_ptr() as u64, 48, 0, 0));
        assert_eq!(without_data(cmd), NvmeUringCmd::default());
    }
}
