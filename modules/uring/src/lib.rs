//! The `uring` bdev module: files and block devices through io_uring.
//!
//! # Design
//!
//! * **One ring per thread**, shared by every uring bdev with a channel on
//!   that thread (SPDK's group channel): an io_device whose per-thread
//!   channel owns the ring, its in-flight table and one active poller; each
//!   bdev channel holds the group's channel and its file's index in the
//!   ring's **registered file table** (no file lookup per request).
//! * **One `io_uring_enter` per poll**: `submit` only pushes an SQE; the
//!   poller's single `io_uring_enter` submits everything pushed since the
//!   last poll and runs the kernel's completion work (`GETEVENTS`,
//!   `min_complete` 0: it never waits), then the poller reaps the
//!   completion queue and completes the batch. Exception, measured: SQEs
//!   for device-backed files (block devices, files on disk file systems)
//!   get an enter each, since a batch waits in the block layer's plug
//!   until it is complete and single submissions kept our disk busier
//!   (numbers in `doc/aio-uring.md`). Rings are set up with
//!   `SINGLE_ISSUER | DEFER_TASKRUN` where the kernel has them (6.1+), so
//!   completion work never interrupts the reactor and runs inside that one
//!   enter; older kernels get `COOP_TASKRUN` or plain rings (probed once).
//! * **No allocation and no lock per I/O**: slots are preallocated, the
//!   SQE's `user_data` is the slot index (never a pointer), single-segment
//!   I/O uses `READ`/`WRITE` (no iovec import), and the slot owns the
//!   `BdevIo` (its buffers and iovec array) until the completion is reaped.
//!   I/Os that find every slot busy wait in a FIFO.
//! * **Errors and partial transfers**: short transfers are pushed again for
//!   the rest, `EAGAIN`/`EINTR` completions are retried, real errors reach
//!   the I/O as [`IoStatus::Errno`](bdevkit::bdev::IoStatus::Errno); end of
//!   file inside the bdev (the file shrank) fails with `EIO`.
//! * **Flush** is an `IORING_OP_FSYNC` with `DATASYNC`: a real, async
//!   `fdatasync`. (SPDK's uring bdev reports no flush support; we do, so
//!   `supported_io_types.flush` is `true`.)
//! * **Idle polls are cheap**: with `TASKRUN_FLAG` a poll with nothing to
//!   submit enters the kernel only when it flagged completion work. Files
//!   without non-blocking reads (tmpfs; probed per bdev) are served by
//!   io-wq workers on the reactor's core, so for them an idle poll yields
//!   the CPU instead of spinning against the worker
//!   ([`UringOptions::idle_yield`]).
//! * **Fixed buffers are not used**: user buffers are arbitrary `DmaBuf`s,
//!   and mapping an address to a registered buffer index would need a
//!   shared lookup per I/O; fio gained 3-14% from them on tmpfs and nothing
//!   on our disk.
//! * **Options** ([`UringOptions`], RPC `bdev_uring_set_options`): ring
//!   size, SQPOLL (a kernel thread submits; no system call per poll) and
//!   IOPOLL (a second, polled ring per thread for `O_DIRECT` block devices
//!   whose driver polls; probed per bdev at creation). Unsupported options
//!   fall back with an `info!` line.
//! * **Interrupt mode**: the rings signal the group's eventfd
//!   (`register_eventfd`), which is in the reactor's wake-up set.
//!
//! RPCs (SPDK's): `bdev_uring_create`, `bdev_uring_delete`,
//! `bdev_uring_rescan`, plus `bdev_uring_set_options` (see [`rpc`]).
//! Supported I/O: read, write, flush (write zeroes emulated by the bdev
//! layer).
//!
//! # Example
//!
//! ```no_run
//! use bdevkit::bdev::{BdevManager, BdevOptions};
//! use bdevkit_uring::UringCreateParams;
//!
//! let mgr = BdevManager::new(BdevOptions::default());
//! bdevkit_uring::register(&mgr);
//! // On a bdevkit thread:
//! let bdev = bdevkit_uring::create(&mgr, UringCreateParams::new("u0", "/dev/shm/disk"))?;
//! assert_eq!(bdev.product_name(), "URING bdev");
//! # Ok::<(), bdevkit_uring::Error>(())
//! ```
#![warn(missing_docs)]

mod error;
mod group;
mod probe;
pub mod rpc;
mod sys;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use bdevkit::bdev::module::{Bdev, BdevIo, BdevManager, BdevModule, BdevOps, BoxError, IoType};
use bdevkit::thread::IoChannel;
use serde_json::{json, Value};
use uuid::Uuid;

pub use error::{Error, Result};
pub use probe::{options, set_options, UringOptions};
pub use rpc::UringCreateParams;

use bdevkit_kfile::Kind;
use group::{Target, UringGroup};

/// Module name.
pub const MODULE: &str = "uring";
/// `product_name` of uring bdevs.
pub const PRODUCT_NAME: &str = "URING bdev";

/// The uring module.
#[derive(Debug, Default)]
pub struct UringModule;

impl BdevModule for UringModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    /// `bdev_uring_set_options`, only when the options differ from the
    /// defaults (SPDK has no such method; a default config stays loadable
    /// by SPDK).
    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        let o = options();
        if o == UringOptions::default() {
            return Vec::new();
        }
        vec![json!({"method": "bdev_uring_set_options", "params": o})]
    }
}

/// Adds the uring module to `mgr`.
pub fn register(mgr: &BdevManager) {
    mgr.register_module(Arc::new(UringModule));
}

/// Whether io_uring can be used in this process (probed once); the reason
/// when not. Tests use it to skip.
pub fn available() -> std::result::Result<(), String> {
    probe::base_setup().map(|_| ())
}

/// One uring bdev.
#[derive(Debug)]
pub struct UringBdev {
    params: UringCreateParams,
    file: File,
    kind: Kind,
    direct: bool,
    block_size: u32,
    block_shift: u32,
    uuid: Uuid,
    polled: bool,
    punts: bool,
    device_backed: bool,
}

impl UringBdev {
    /// The backing file's path.
    #[must_use]
    pub fn filename(&self) -> &str {
        &self.params.filename
    }

    /// Whether the file was opened with `O_DIRECT`.
    #[must_use]
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Whether the bdev uses the threads' IOPOLL rings.
    #[must_use]
    pub fn is_polled(&self) -> bool {
        self.polled
    }
}

/// Per-thread channel of one uring bdev: the thread's ring group and the
/// file's place in it.
#[derive(Debug)]
pub struct UringChannel {
    group: IoChannel<UringGroup>,
    target: Target,
}

impl Drop for UringChannel {
    fn drop(&mut self) {
        self.group.detach(&self.target);
    }
}

impl BdevOps for UringBdev {
    type Channel = UringChannel;

    fn create_channel(&self) -> std::result::Result<UringChannel, BoxError> {
        let group = group::device().get_channel()?;
        let target = group.attach(
            self.file.as_raw_fd(),
            self.polled,
            self.block_shift,
            self.punts,
            self.device_backed,
        )?;
        Ok(UringChannel { group, target })
    }

    #[inline]
    fn submit(&self, ch: &UringChannel, io: BdevIo) {
        ch.group.submit(io, ch.target);
    }

    fn io_type_supported(&self, io_type: IoType) -> bool {
        matches!(io_type, IoType::Read | IoType::Write | IoType::Flush)
    }

    fn dump_info_json(&self) -> Value {
        json!({"uring": {"filename": self.params.filename}})
    }

    /// SPDK's `bdev_uring_create` entry.
    fn write_config_json(&self) -> Option<Value> {
        Some(json!({
            "method": "bdev_uring_create",
            "params": {
                "name": self.params.name,
                "block_size": self.block_size,
                "filename": self.params.filename,
                "uuid": self.uuid.to_string(),
            }
        }))
    }
}

/// Creates a uring bdev over `params.filename` (call on a bdevkit thread,
/// normally the app thread).
pub fn create(mgr: &BdevManager, params: UringCreateParams) -> Result<Bdev> {
    if params.name.is_empty() {
        return Err(Error::EmptyName);
    }
    if mgr.get(&params.name).is_some() {
        return Err(Error::Exists(params.name));
    }
    let base = probe::base_setup().map_err(Error::Unavailable)?;
    let backing = bdevkit_kfile::open(&params.filename, false)?;
    let geometry = backing.geometry(&params.filename, params.block_size.unwrap_or(0))?;
    let (block_size, block_shift, num_blocks) = (
        geometry.block_size,
        geometry.block_shift,
        geometry.num_blocks,
    );
    let polled = options().iopoll
        && backing.kind == Kind::Block
        && backing.direct
        && match sys::probe_iopoll(backing.file.as_raw_fd(), block_size, base) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!(path = params.filename, error = %e, "polled I/O not supported; using the plain ring");
                false
            }
        };
    let punts = !sys::supports_nowait(backing.file.as_raw_fd(), block_size);
    let uuid = params.uuid.unwrap_or_else(Uuid::new_v4);
    let mut props = bdevkit_kfile::props(&params.name, PRODUCT_NAME, geometry);
    props.uuid = Some(uuid);
    let bdev = UringBdev {
        params,
        file: backing.file,
        kind: backing.kind,
        direct: backing.direct,
        block_size,
        block_shift,
        uuid,
        polled,
        punts,
        device_backed: backing.device_backed,
    };
    let b = mgr
        .register_bdev(MODULE, props, Arc::new(bdev))
        .map_err(|e| match e {
            bdevkit::Error::Exists(n) => Error::Exists(n),
            e => Error::Register(e),
        })?;
    tracing::info!(bdev = %b.name(), direct = backing.direct, polled, io_wq = punts, block_size, num_blocks, "uring bdev created");
    Ok(b)
}

fn find(mgr: &BdevManager, name: &str) -> Result<(Bdev, Arc<UringBdev>)> {
    let b = mgr
        .get(name)
        .filter(|b| b.module_name() == MODULE && !b.is_removing())
        .ok_or_else(|| Error::NotFound(name.to_string()))?;
    let u = b
        .ops_as::<UringBdev>()
        .ok_or_else(|| Error::NotFound(name.to_string()))?;
    Ok((b, u))
}

/// Deletes the uring bdev `name`; `done` gets the outcome on the calling
/// thread (at once with `ENODEV` when there is no such bdev). Every I/O in
/// flight completes before the bdev is destructed and its file closed.
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    let n = name.to_string();
    mgr.unregister_by_name(name, MODULE, move |r| {
        done(r.map_err(|_| Error::NotFound(n)));
    });
}

/// Re-reads the size of the uring bdev `name`'s file: a new size is
/// announced to descriptor holders (a resize event), size 0 hot-removes the
/// bdev. Shrinking while descriptors are open fails with `EBUSY` (as SPDK).
pub fn rescan(mgr: &BdevManager, name: &str) -> Result<()> {
    let (b, u) = find(mgr, name)?;
    bdevkit_kfile::rescan(
        mgr,
        name,
        &b,
        &u.file,
        u.kind,
        &u.params.filename,
        u.block_size,
    )?;
    Ok(())
}
