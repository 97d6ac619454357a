//! NVMe data structures for bdevkit's NVMe crates: the PCIe driver, the
//! NVMe-oF/TCP target and initiator, and the `xnvme` passthrough module.
//! A support library, not a bdev module: no I/O, no system calls, no
//! dependency on bdevkit.
//!
//! # Model
//!
//! Everything that crosses a wire or sits in DMA memory is a
//! `#[repr(C)]` struct whose size and field offsets are checked against
//! the specifications at compile time, with [`zerocopy`] derives: a
//! caller turns bytes into a structure and back without `unsafe`
//! (`IdentifyController::ref_from_bytes(&buf)`, `sqe.as_bytes()`).
//! Multi-byte fields use zerocopy's little-endian types (alignment 1,
//! `.get()` / `.set(v)`), so a structure can be viewed at any offset of
//! a receive buffer and means the same on any host. The Linux ioctl
//! structures ([`linux`]) are the exception: they are kernel ABI, in
//! host byte order.
//!
//! Commands are typed: each command struct ([`admin`], [`io`],
//! [`fabrics`]) implements [`Command`], which encodes it into a
//! submission queue entry ([`Sqe`]) and decodes it back; the decode
//! enums ([`admin::AdminCommand`], [`io::IoCommand`],
//! [`fabrics::FabricsCommand`]) dispatch a received entry by opcode.
//! Completions are [`Cqe`]s with a [`Status`]. Bit-field registers and
//! dwords ([`regs`], [`features`]) are newtypes or small structs with
//! `from`/`to` conversions.
//!
//! Modules:
//!
//! | module | what |
//! |---|---|
//! | [`cmd`], [`opcode`] | submission entry, fused/PSDT bits, opcodes, the [`Command`] trait |
//! | [`admin`], [`io`] | admin and NVM I/O commands |
//! | [`cpl`], [`status`] | completion entry, status codes and their names |
//! | [`identify`] | Identify Controller / Namespace, NVM controller limits, namespace lists and descriptors |
//! | [`log`], [`discovery`] | log pages, asynchronous events, the discovery log page |
//! | [`features`] | feature ids and typed values |
//! | [`regs`] | controller registers (BAR0) and NVMe-oF properties |
//! | [`sgl`] | SGL descriptors and the PRP rules |
//! | [`fabrics`] | Connect, Property Get/Set, NQN validation |
//! | [`tcp`] | NVMe/TCP PDUs: validating parser, builders, digests |
//! | [`linux`] | `nvme_uring_cmd`, `nvme_passthru_cmd`, ioctl numbers |
//!
//! # Example
//!
//! ```
//! use bdevkit_nvme_spec::cmd::Command;
//! use bdevkit_nvme_spec::identify::IdentifyNamespace;
//! use bdevkit_nvme_spec::io::{BlockRange, IoCommand, Read};
//! use bdevkit_nvme_spec::zerocopy::{FromBytes, IntoBytes};
//! use bdevkit_nvme_spec::{Cqe, Status};
//!
//! // A host reads 8 blocks from LBA 2048 of namespace 1 (command id 7).
//! let read = Read::new(1, BlockRange::new(2048, 8)?);
//! let sqe = read.to_sqe(7);
//! let wire: &[u8] = sqe.as_bytes(); // 64 bytes for the SQ or a capsule
//!
//! // A target decodes the entry from the bytes it received.
//! let got = bdevkit_nvme_spec::Sqe::ref_from_bytes(wire).expect("64 bytes");
//! let IoCommand::Read(r) = IoCommand::decode(got) else { unreachable!() };
//! assert_eq!((r.range.slba(), r.range.num_blocks()), (2048, 8));
//!
//! // ... checks the range against the namespace ...
//! let mut ns = IdentifyNamespace::default();
//! ns.nsze.set(1024);
//! ns.set_single_format(9, 0);
//! let status = if r.range.within(ns.nsze.get()) {
//!     Status::SUCCESS
//! } else {
//!     Status::LBA_OUT_OF_RANGE.with_dnr()
//! };
//!
//! // ... and completes it.
//! let cqe = Cqe::new(got.cid.get(), status, 0);
//! assert!(!cqe.status().is_success() && !cqe.status().is_retryable());
//! assert_eq!(cqe.status().to_string(), "lba out of range (sct 0x0, sc 0x80, dnr)");
//! # Ok::<(), bdevkit_nvme_spec::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
mod bits;
pub mod cmd;
pub mod cpl;
pub mod discovery;
mod error;
pub mod fabrics;
pub mod features;
pub mod identify;
pub mod io;
pub mod linux;
pub mod log;
mod nqn;
pub mod opcode;
pub mod regs;
pub mod sgl;
pub mod status;
pub mod tcp;
pub mod text;

pub use cmd::{Command, Sqe};
pub use cpl::Cqe;
pub use error::{Error, Result};
pub use status::Status;
/// The byte-conversion traits (`FromBytes`, `IntoBytes`, ...) the
/// structures implement, re-exported so callers need no direct dependency.
pub use zerocopy;
