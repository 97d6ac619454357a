//! What the bdev modules over kernel files (`aio`, `uring`, `xnvme`)
//! share: a library, not a bdev module (no `register`, no RPCs).
//!
//! # Model
//!
//! A kernel-file bdev opens a regular file or a block device once, at
//! creation ([`open_new`], [`open`]: `O_DIRECT` where the file system
//! takes it), derives its geometry from the file ([`Backing::geometry`],
//! [`props`]), keeps it as a [`Disk`] and can later pick up a new size
//! ([`rescan`]). Registering, deleting and rescanning a bdev by name, the
//! errors of those steps and their RPCs (`bdev_<module>_delete`,
//! `bdev_<module>_rescan`: [`rpc`]) are the same for every such module and
//! written here once. Its I/O goes through a kernel
//! context per thread (the module's own: an AIO context, an io_uring
//! ring), whose requests live in an in-flight table ([`slots::Slots`]) of
//! preallocated slots: a slot owns the [`BdevIo`](bdevkit::bdev::BdevIo),
//! so its buffers, from submission until the kernel reports the completion
//! (the ownership rule is in [`slots`]), and what a completion means for
//! it ([`slots::finish_all`]: done, or queued again for the rest). The
//! thread's context, its FIFO of waiting I/Os, its poller and its eventfd
//! form a [`group::Group`]. The io_uring ring, with its table, is here
//! too, once for uring's file I/O and xnvme's NVMe passthrough
//! ([`ring::Ring`]: it builds every entry from its slots, so its API is
//! safe). The module keeps what is its own in talking to the kernel (its
//! [`group::Engine`]: aio's AIO context; which ring a uring or xnvme bdev
//! uses, and the NVMe commands xnvme builds) and its error type, which
//! wraps [`Error`] without changing its message or errno.
//!
//! The few system calls std does not wrap are here too, safe to call:
//! block device geometry, [`fallocate`] and [`fdatasync`] (blocking: for a
//! helper thread), [`seek_data`] and [`seek_hole`] (what `bdev_dd
//! --sparse` skips), and the eventfd a thread's context signals in interrupt
//! mode ([`eventfd`], [`eventfd_signal`], [`eventfd_drain`]), whether a
//! file reads without blocking ([`supports_nowait`]), [`yield_cpu`]. Their
//! `unsafe`, and the ring's, is in this crate's private `sys` module.
//!
//! Nothing here allocates, locks or makes a system call per I/O (the ring
//! makes one per poll): the table is plain data, generic over how the
//! module names a file (a descriptor, a registered-file index), so its
//! methods inline into the module's I/O path.
//!
//! # Example
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = std::env::temp_dir().join(format!("kfile-doc-{}", std::process::id()));
//! std::fs::File::create(&path)?.set_len(1 << 20)?;
//! let p = path.to_string_lossy();
//!
//! let backing = bdevkit_kfile::open(&p, false)?;
//! assert_eq!(backing.kind, bdevkit_kfile::Kind::Regular);
//! // Block size 0 = auto: 512 for a regular file.
//! let g = backing.geometry(&p, 0)?;
//! assert_eq!((g.block_size, g.num_blocks), (512, 2048));
//! // A block size the file's size is not a multiple of: EINVAL.
//! std::fs::File::create(&path)?.set_len(1000)?;
//! let e = bdevkit_kfile::open(&p, false)?.geometry(&p, 0).unwrap_err();
//! assert_eq!(e.errno(), libc::EINVAL);
//! std::fs::remove_file(&path)?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod disk;
mod entries;
mod error;
mod file;
pub mod group;
pub mod ring;
pub mod rpc;
pub mod slots;
mod sys;

pub use disk::{check_name, delete, open_new, register, rescan, Disk, KfileBdev};
pub use error::{Error, Result};
pub use file::{choose_block_size, open, props, size, Backing, Geometry, Kind};
pub use sys::{
    blockdev_geometry, clear_nonblock, eventfd, eventfd_drain, eventfd_signal, fallocate,
    fdatasync, seek_data, seek_hole, supports_nowait, yield_cpu,
};
