//! The `aio` bdev module: files and block devices through Linux AIO, the
//! kernel's native asynchronous I/O (`io_setup`, `io_submit`, and a
//! completion ring mapped into the process), called through raw system
//! calls — no libaio.
//!
//! # Design
//!
//! * **One AIO context per thread**, shared by every aio bdev with a channel
//!   on that thread (SPDK's group channel). Each bdev channel holds the
//!   group's channel; the group owns the context, the in-flight table and
//!   one active poller.
//! * **Batching**: `submit` only fills an iocb in a free slot of the
//!   in-flight table. The poller hands every prepared iocb to the kernel with
//!   one `io_submit`, then reads completions straight from the ring the
//!   kernel maps at the context address (no `io_getevents` call), and
//!   completes them as a batch. One system call per poll, whatever the
//!   queue depth: this is where aio beats fio's libaio engine on tmpfs.
//!   Requests to device-backed files (block devices, files on disk file
//!   systems) get an `io_submit` each instead: a batch sits in the block
//!   layer's plug until it is complete, and on the disk we measured, single
//!   submissions kept the device busier (numbers in `doc/aio-uring.md`).
//! * **No allocation and no lock per I/O**: slots are preallocated, the
//!   kernel's `aio_data` is the slot index (never a pointer), the iocb points
//!   at the `BdevIo`'s own iovec array, and the slot owns the `BdevIo` (so
//!   its buffers) until the kernel reports the completion. I/Os that find
//!   the table full wait in a FIFO (no NOMEM round trip).
//! * **Errors and partial transfers**: a short read or write is resubmitted
//!   for the rest; `EAGAIN` from an `RWF_NOWAIT` request is retried without
//!   the flag; other `EAGAIN`s complete with [`IoStatus::NoMem`](bdevkit::bdev::IoStatus::NoMem) so the bdev
//!   layer retries; real errors reach the I/O as [`IoStatus::Errno`](bdevkit::bdev::IoStatus::Errno). End of
//!   file inside the bdev (the file shrank) fails the I/O with `EIO`.
//! * **Flush is a real `fdatasync`**, run by the kernel's AIO workqueue with
//!   `IOCB_CMD_FDSYNC`, so the reactor never blocks. If the kernel refuses
//!   it for a file, that file's flushes run `fdatasync` on a helper thread.
//!   Unmap and write zeroes (`fallocate` param) call `fallocate` (punch hole
//!   / zero range) on the helper thread: AIO has no fallocate command.
//! * `O_DIRECT` by default, buffered with an `info!` line when the file
//!   system refuses it. `required_alignment` is log2 of the block size; the
//!   bdev layer bounces misaligned buffers.
//! * **Interrupt mode**: iocbs carry `IOCB_FLAG_RESFD` with the group's
//!   eventfd, registered with [`bdevkit::thread::Thread::register_interrupt_fd`].
//!
//! RPCs (SPDK's): `bdev_aio_create`, `bdev_aio_delete`, `bdev_aio_rescan`
//! (see [`rpc`]). Supported I/O: read, write, flush, reset; unmap and write
//! zeroes with `fallocate`; no writes on a `readonly` bdev.
//!
//! # Example
//!
//! ```no_run
//! use bdevkit::bdev::{BdevManager, BdevOptions};
//! use bdevkit_aio::AioCreateParams;
//!
//! let mgr = BdevManager::new(BdevOptions::default());
//! bdevkit_aio::register(&mgr);
//! // On a bdevkit thread:
//! let bdev = bdevkit_aio::create(&mgr, AioCreateParams::new("aio0", "/dev/shm/disk"))?;
//! assert_eq!(bdev.product_name(), "AIO disk");
//! # Ok::<(), bdevkit_aio::Error>(())
//! ```
#![warn(missing_docs)]

mod group;
mod helper;
pub mod rpc;
mod sys;

use std::sync::{Arc, Weak};

use bdevkit::bdev::module::{Bdev, BdevIo, BdevManager, BdevModule, BdevOps, BoxError, IoType};
use bdevkit::thread::{IoChannel, IoDevice};
use bdevkit_kfile::{Disk, Kind};
use serde_json::{json, Value};

pub use bdevkit_kfile::{Error, KfileBdev, Result};
pub use rpc::AioCreateParams;

use group::{AioGroup, FindGroup, Target};

/// Module name.
pub const MODULE: &str = "aio";
/// `product_name` of aio bdevs.
pub const PRODUCT_NAME: &str = "AIO disk";

/// The aio module, one per [`BdevManager`]: it owns the io_device whose
/// per-thread channel is the thread's group (AIO context and poller), so
/// the bdevs of two managers in one process never share a context.
#[derive(Debug)]
pub struct AioModule {
    groups: IoDevice<AioGroup>,
}

impl AioModule {
    fn new() -> Arc<AioModule> {
        Arc::new_cyclic(|me: &Weak<AioModule>| {
            let me = me.clone();
            let find: FindGroup = Arc::new(move || me.upgrade()?.groups.get_channel().ok());
            AioModule {
                groups: IoDevice::register("bdev_aio_group", move || {
                    group::create(Arc::clone(&find))
                }),
            }
        })
    }
}

impl BdevModule for AioModule {
    fn name(&self) -> &'static str {
        MODULE
    }
}

/// Adds the aio module to `mgr`.
pub fn register(mgr: &BdevManager) {
    mgr.register_module(AioModule::new());
}

/// What an app links of this module: [`register`], the RPC methods of
/// [`rpc`] and its log flags (`log_set_flag`).
pub const MODULE_DEF: bdevkit::bdev::module::ModuleDef<
    bdevkit_jsonrpc::MethodRegistry,
    bdevkit_jsonrpc::Error,
> = bdevkit::bdev::module::ModuleDef {
    name: MODULE,
    register,
    register_rpcs: rpc::register_rpcs,
    log_flags: &[bdevkit::bdev::module::LogFlag {
        name: "aio",
        targets: &["bdevkit_aio", "bdevkit_kfile"],
        aliases: &["bdev_aio"],
    }],
};

/// One aio bdev.
#[derive(Debug)]
pub struct AioBdev {
    params: AioCreateParams,
    disk: Disk,
    rw_flags: i32,
    fallocate: bool,
    readonly: bool,
    groups: IoDevice<AioGroup>,
}

impl KfileBdev for AioBdev {
    fn disk(&self) -> &Disk {
        &self.disk
    }
}

/// Per-thread channel of one aio bdev: the thread's group and what the
/// group needs to know about the bdev.
#[derive(Debug)]
pub struct AioChannel {
    group: IoChannel<AioGroup>,
    target: Target,
}

impl Drop for AioChannel {
    fn drop(&mut self) {
        group::forget_fd(&self.group, self.target.file);
    }
}

impl BdevOps for AioBdev {
    type Channel = AioChannel;

    fn create_channel(&self) -> std::result::Result<AioChannel, BoxError> {
        Ok(AioChannel {
            group: self.groups.get_channel()?,
            target: Target {
                file: self.disk.fd(),
                block_shift: self.disk.geometry.block_shift,
                rw_flags: self.rw_flags,
                solo: self.disk.device_backed,
                extra: (),
            },
        })
    }

    #[inline]
    fn submit(&self, ch: &AioChannel, io: BdevIo) {
        group::submit(&ch.group, io, ch.target);
    }

    fn io_type_supported(&self, io_type: IoType) -> bool {
        match io_type {
            IoType::Read | IoType::Flush | IoType::Reset => true,
            IoType::Write => !self.readonly,
            IoType::Unmap | IoType::WriteZeroes => self.fallocate && !self.readonly,
            _ => false,
        }
    }

    fn dump_info_json(&self) -> Value {
        let p = &self.params;
        json!({
            "aio": {
                "filename": p.filename,
                "block_size_override": p.block_size.is_some_and(|b| b != 0),
                "readonly": self.readonly,
                "fallocate": self.fallocate,
                "nowait": p.nowait.unwrap_or(false),
            }
        })
    }

    /// SPDK's `bdev_aio_create` entry, keys in its order.
    fn write_config_json(&self) -> Option<Value> {
        let p = &self.params;
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(p.name));
        if let Some(bs) = p.block_size.filter(|b| *b != 0) {
            m.insert("block_size".into(), json!(bs));
        }
        m.insert("filename".into(), json!(p.filename));
        m.insert("readonly".into(), json!(self.readonly));
        m.insert("fallocate".into(), json!(self.fallocate));
        m.insert("uuid".into(), json!(self.disk.uuid.to_string()));
        m.insert("nowait".into(), json!(p.nowait.unwrap_or(false)));
        Some(json!({"method": "bdev_aio_create", "params": m}))
    }
}

/// Creates an aio bdev over `params.filename` (call on a bdevkit thread,
/// normally the app thread). Fails with the open error's errno, `EEXIST`
/// for a taken name, `EINVAL` for a bad block size or a size that is not
/// a multiple of it, `ENOTSUP` for `nowait` on a file.
pub fn create(mgr: &BdevManager, params: AioCreateParams) -> Result<Bdev> {
    let name = params.name.clone();
    let bdev = open(mgr, params)?;
    let (direct, g) = (bdev.disk.direct, bdev.disk.geometry);
    let b = bdevkit_kfile::register(mgr, MODULE, &name, PRODUCT_NAME, bdev)?;
    tracing::info!(bdev = %b.name(), direct, block_size = g.block_size, num_blocks = g.num_blocks, "aio bdev created");
    Ok(b)
}

/// The aio bdev [`create`] would register, not registered: for a module
/// that serves its own bdevs through this one's (xnvme's `libaio`
/// mechanism), which registers it under its own name
/// ([`KfileBdev::disk`] gives its properties). Its I/O uses the aio
/// module's per-thread contexts, shared with the aio bdevs.
///
/// # Errors
/// As [`create`].
pub fn open(mgr: &BdevManager, params: AioCreateParams) -> Result<AioBdev> {
    let module = mgr
        .module_as::<AioModule>(MODULE)
        .ok_or(Error::NotRegistered(MODULE))?;
    let readonly = params.readonly.unwrap_or(false);
    let backing = bdevkit_kfile::open_new(mgr, &params.name, &params.filename, readonly)?;
    let nowait = params.nowait.unwrap_or(false);
    if nowait && backing.kind != Kind::Block {
        return Err(Error::NowaitNotBlockDevice(params.filename));
    }
    let disk = backing.into_disk(&params.filename, params.block_size, params.uuid)?;
    Ok(AioBdev {
        fallocate: params.fallocate.unwrap_or(false),
        readonly,
        params,
        disk,
        rw_flags: if nowait { libc::RWF_NOWAIT } else { 0 },
        groups: module.groups.clone(),
    })
}

/// Deletes the aio bdev `name`; `done` gets the outcome on the calling
/// thread (at once with `ENODEV` when there is no such bdev). Every I/O in
/// flight completes before the bdev is destructed and its file closed.
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    bdevkit_kfile::delete(mgr, MODULE, name, done);
}

/// Re-reads the size of the aio bdev `name`'s file: a new size is
/// announced to descriptor holders (a resize event), size 0 hot-removes the
/// bdev. Shrinking while descriptors are open fails with `EBUSY` (as SPDK).
pub fn rescan(mgr: &BdevManager, name: &str) -> Result<()> {
    bdevkit_kfile::rescan::<AioBdev>(mgr, MODULE, name)
}
