//! The io_uring ring of the kernel-file modules, written once: `uring`
//! (reads, writes and flushes of files, 64-byte entries) and `xnvme`'s
//! `io_uring_cmd` mechanism (NVMe passthrough commands, 128-byte
//! submission and 32-byte completion entries) use the same [`Ring`],
//! generic over its entry size ([`FileIo`], [`NvmeCmd`]).
//!
//! A ring owns its in-flight table ([`crate::slots::Slots`]): a request's
//! slot keeps the [`BdevIo`](bdevkit::bdev::BdevIo), so the memory the
//! kernel reads or writes, from the moment its entry is pushed until its
//! completion is reaped; the entry's `user_data` is the slot index, never
//! a pointer. The ring builds every entry itself, from the slot's I/O
//! (modules never build entries), so its methods are safe; the unsafe
//! code is in this crate's private `sys` module. What the ring does, for
//! either entry size:
//!
//! * set up with the flags of a [`RingSetup`] (task work mode, `SQPOLL`,
//!   `IOPOLL`, ...), registered in the thread's ring table so that
//!   `io_uring_enter` skips the fd lookup, optionally signalling an
//!   eventfd on completion ([`Ring::register_eventfd`]);
//! * `prep` takes a free slot and pushes the entry (no system call);
//! * [`Ring::enter`] submits what was pushed and runs the kernel's
//!   completion work in one `io_uring_enter` that never waits (requests
//!   for device-backed files get one each; an idle ring with
//!   `TASKRUN_FLAG` makes no system call), [`Ring::enter_logged`] the same
//!   for a poller, which logs a failure once;
//! * `reap` collects the completions and hands finished I/Os back with
//!   their status;
//! * dropping a ring waits for the kernel to finish every request first
//!   (and leaks the memory, rather than free it, if the kernel never does).
//!
//! Nothing here allocates, locks or makes more than that one system call
//! per poll: entries are built in place, the table is preallocated.

pub use crate::entries::*;
pub use crate::sys::ring::{probe_iopoll_file, probe_iopoll_nvme, Ring};

/// A ring of file I/O: 64-byte submission and 16-byte completion entries.
pub type FileRing = Ring<FileIo>;
/// A ring of NVMe passthrough commands: 128-byte submission and 32-byte
/// completion entries (`IORING_SETUP_SQE128 | CQE32`).
pub type CmdRing = Ring<NvmeCmd>;
