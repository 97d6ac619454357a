//! The `uring` bdev module: files and block devices through io_uring.
//!
//! # Design
//!
//! * **One ring per thread**, shared by every uring bdev with a channel on
//!   that thread (SPDK's group channel): an io_device of the module
//!   instance whose per-thread
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
//!   fall back with an `info!` line. The options belong to the module
//!   instance of one [`BdevManager`], and so do
//!   the threads' rings: two managers in one process keep their own.
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
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod group;
mod options;
mod probe;
pub mod rpc;

use std::sync::Arc;

use bdevkit::bdev::module::{Bdev, BdevIo, BdevManager, BdevModule, BdevOps, BoxError, IoType};
use bdevkit::thread::{IoChannel, IoDevice};
use bdevkit_kfile::{Disk, Kind};
use parking_lot::Mutex;
use serde_json::{json, Value};

pub use bdevkit_kfile::{Error, KfileBdev, Result};
pub use options::{UringOptions, DEFAULT_SQPOLL_IDLE_MS, DEFAULT_SQ_ENTRIES};
pub use rpc::UringCreateParams;

use group::{Target, UringGroup};
use options::SharedOptions;

/// Module name.
pub const MODULE: &str = "uring";
/// `product_name` of uring bdevs.
pub const PRODUCT_NAME: &str = "URING bdev";

/// The uring module, one per [`BdevManager`]: its options and the
/// io_device whose per-thread channel is the thread's ring group, so two
/// managers in one process keep their own options and rings.
#[derive(Debug)]
pub struct UringModule {
    options: SharedOptions,
    groups: IoDevice<UringGroup>,
}

impl UringModule {
    fn new() -> UringModule {
        let options = Arc::new(Mutex::new(UringOptions::default()));
        let o = Arc::clone(&options);
        UringModule {
            groups: IoDevice::register("bdev_uring_group", move || group::create(Arc::clone(&o))),
            options,
        }
    }

    /// The current options.
    #[must_use]
    pub fn options(&self) -> UringOptions {
        *self.options.lock()
    }

    /// Replaces the options (validated). Rings built from now on use them.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`].
    pub fn set_options(&self, o: UringOptions) -> Result<()> {
        o.validate().map_err(Error::InvalidOptions)?;
        *self.options.lock() = o;
        Ok(())
    }
}

impl BdevModule for UringModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    /// `bdev_uring_set_options`, only when the options differ from the
    /// defaults (SPDK has no such method; a default config stays loadable
    /// by SPDK).
    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        let o = self.options();
        if o == UringOptions::default() {
            return Vec::new();
        }
        vec![json!({"method": "bdev_uring_set_options", "params": o})]
    }
}

/// Adds the uring module to `mgr`.
pub fn register(mgr: &BdevManager) {
    mgr.register_module(Arc::new(UringModule::new()));
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
        name: "uring",
        targets: &["bdevkit_uring", "bdevkit_kfile"],
        aliases: &["bdev_uring"],
    }],
};

/// The uring module registered with `mgr`.
fn module(mgr: &BdevManager) -> Result<Arc<UringModule>> {
    mgr.module_as::<UringModule>(MODULE)
        .ok_or(Error::NotRegistered(MODULE))
}

/// The options of `mgr`'s uring module.
///
/// # Errors
/// When the module is not registered with `mgr` (`EINVAL`).
pub fn options(mgr: &BdevManager) -> Result<UringOptions> {
    Ok(module(mgr)?.options())
}

/// Replaces the options of `mgr`'s uring module
/// ([`UringModule::set_options`]).
///
/// # Errors
/// [`Error::InvalidOptions`], or the module is not registered with `mgr`
/// (both `EINVAL`).
pub fn set_options(mgr: &BdevManager, o: UringOptions) -> Result<()> {
    module(mgr)?.set_options(o)
}

/// Whether io_uring can be used in this process (probed once: a property
/// of the kernel); the reason when not. Tests use it to skip.
pub fn available() -> std::result::Result<(), String> {
    probe::base_setup().map(|_| ())
}

/// One uring bdev.
#[derive(Debug)]
pub struct UringBdev {
    params: UringCreateParams,
    disk: Disk,
    polled: bool,
    punts: bool,
    groups: IoDevice<UringGroup>,
}

impl UringBdev {
    /// Whether the bdev uses the threads' IOPOLL rings.
    #[must_use]
    pub fn is_polled(&self) -> bool {
        self.polled
    }
}

impl KfileBdev for UringBdev {
    fn disk(&self) -> &Disk {
        &self.disk
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
        group::detach(&self.group, &self.target);
    }
}

impl BdevOps for UringBdev {
    type Channel = UringChannel;

    fn create_channel(&self) -> std::result::Result<UringChannel, BoxError> {
        let group = self.groups.get_channel()?;
        let target = group::attach(
            &group,
            self.disk.fd(),
            self.polled,
            self.disk.geometry.block_shift,
            self.punts,
            self.disk.device_backed,
        )?;
        Ok(UringChannel { group, target })
    }

    #[inline]
    fn submit(&self, ch: &UringChannel, io: BdevIo) {
        group::submit(&ch.group, io, ch.target);
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
                "block_size": self.disk.geometry.block_size,
                "filename": self.params.filename,
                "uuid": self.disk.uuid.to_string(),
            }
        }))
    }
}

/// Creates a uring bdev over `params.filename` (call on a bdevkit thread,
/// normally the app thread). Fails with the open error's errno, `EEXIST`
/// for a taken name, `EINVAL` for a bad block size or a size that is not
/// a multiple of it, `ENOSYS` where io_uring cannot be used.
pub fn create(mgr: &BdevManager, params: UringCreateParams) -> Result<Bdev> {
    let name = params.name.clone();
    let bdev = open(mgr, params)?;
    let (direct, polled, punts, g) = (
        bdev.disk.direct,
        bdev.polled,
        bdev.punts,
        bdev.disk.geometry,
    );
    let b = bdevkit_kfile::register(mgr, MODULE, &name, PRODUCT_NAME, bdev)?;
    tracing::info!(bdev = %b.name(), direct, polled, io_wq = punts, block_size = g.block_size, num_blocks = g.num_blocks, "uring bdev created");
    Ok(b)
}

/// The uring bdev [`create`] would register, not registered: for a
/// module that serves its own bdevs through this one's (xnvme's
/// `io_uring` mechanism), which registers it under its own name
/// ([`KfileBdev::disk`] gives its properties). Its I/O uses the uring
/// module's per-thread rings and options, shared with the uring bdevs.
///
/// # Errors
/// As [`create`].
pub fn open(mgr: &BdevManager, params: UringCreateParams) -> Result<UringBdev> {
    let module = module(mgr)?;
    bdevkit_kfile::check_name(mgr, &params.name)?;
    let base = probe::base_setup().map_err(|reason| Error::Unavailable {
        interface: "io_uring",
        reason,
    })?;
    let disk = bdevkit_kfile::open(&params.filename, false)?.into_disk(
        &params.filename,
        params.block_size,
        params.uuid,
    )?;
    let g = disk.geometry;
    let polled = module.options().iopoll
        && disk.kind == Kind::Block
        && disk.direct
        && match bdevkit_kfile::ring::probe_iopoll_file(disk.fd(), g.block_size, base) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!(path = params.filename, error = %e, "polled I/O not supported; using the plain ring");
                false
            }
        };
    let punts = !bdevkit_kfile::supports_nowait(disk.fd(), g.block_size);
    Ok(UringBdev {
        params,
        disk,
        polled,
        punts,
        groups: module.groups.clone(),
    })
}

/// Deletes the uring bdev `name`; `done` gets the outcome on the calling
/// thread (at once with `ENODEV` when there is no such bdev). Every I/O in
/// flight completes before the bdev is destructed and its file closed.
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    bdevkit_kfile::delete(mgr, MODULE, name, done);
}

/// Re-reads the size of the uring bdev `name`'s file: a new size is
/// announced to descriptor holders (a resize event), size 0 hot-removes the
/// bdev. Shrinking while descriptors are open fails with `EBUSY` (as SPDK).
pub fn rescan(mgr: &BdevManager, name: &str) -> Result<()> {
    bdevkit_kfile::rescan::<UringBdev>(mgr, MODULE, name)
}

#[cfg(test)]
mod tests {
    use bdevkit::bdev::BdevOptions;

    use super::*;

    /// Two managers on one thread: each module instance has its own group
    /// on the thread, whose ring is built from that instance's options.
    #[test]
    fn two_managers_on_one_thread_have_their_own_rings() {
        if let Err(e) = available() {
            println!("skipped: io_uring not available: {e}");
            return;
        }
        let env = bdevkit_test::TestEnv::with_modules("0x1", &[register]);
        let entries = env.run(|a| async move {
            let b = BdevManager::new(BdevOptions::default());
            register(&b);
            let with = |sq_entries| UringOptions {
                sq_entries,
                ..UringOptions::default()
            };
            set_options(&a, with(16)).unwrap();
            set_options(&b, with(64)).unwrap();
            let ring = |m: &BdevManager| {
                let g = module(m).unwrap().groups.get_channel().unwrap();
                g.with(|e| e.plain_entries())
            };
            (ring(&a), ring(&b))
        });
        assert_eq!(entries, (Some(16), Some(64)));
    }
}
