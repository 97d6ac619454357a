//! The `xnvme` bdev module: one bdev type over three kernel I/O
//! mechanisms, behind SPDK's `bdev_xnvme_create` / `bdev_xnvme_delete`.
//!
//! # Mechanisms
//!
//! * **`io_uring_cmd`** on an NVMe namespace's generic char device
//!   (`/dev/ngXnY`): NVMe commands through the kernel's io_uring
//!   passthrough (`IORING_OP_URING_CMD` with `NVME_URING_CMD_IO`), built
//!   from the `bdevkit_nvme_spec` crate. One ring per lightweight thread with
//!   128-byte SQEs and 32-byte CQEs, shared by this module's bdevs on the
//!   thread; the SQE's `user_data` is the index of the slot (the in-flight
//!   table of `bdevkit_kfile`) that owns the I/O until its completion is
//!   reaped. Geometry from Identify (block size, size, MDTS →
//!   `max_rw_size`, DMRL/DMRSL → `max_unmap`, VWC → write cache, ONCS →
//!   Write Zeroes / Dataset Management / Compare). Serves read, write,
//!   write zeroes, unmap (Dataset Management deallocate), flush (NVMe
//!   Flush where the namespace has a volatile write cache, success at once
//!   where not), compare, and the `nvme_io` (sent to the bdev's
//!   namespace) and `nvme_admin` (on the controller's char device,
//!   `/dev/nvmeX`, through `NVME_URING_CMD_ADMIN`) passthrough types. A
//!   completion's `cqe.res` is its status: 0 success, a positive NVMe
//!   status kept as [`IoStatus::Nvme`](bdevkit::bdev::module::IoStatus)
//!   (so the caller sees the controller's answer), a negative errno;
//!   completion dword 0 comes from the big CQE.
//! * **`io_uring`** and **`libaio`** on a block device (`/dev/nvmeXnY`) or
//!   a file: the bdevs of the `uring` and `aio` modules, unchanged
//!   (their rings and AIO contexts, shared with those modules' bdevs on a
//!   thread), registered as xnvme bdevs.
//!
//! # `conserve_cpu`
//!
//! False (the default) polls: an `io_uring_cmd` bdev uses the thread's
//! `IOPOLL` ring where the namespace has poll queues (probed at creation
//! with a polled read; without them it falls back to the plain ring,
//! where SPDK's bdev_xnvme fails the I/O), and its I/O in flight keeps the
//! poller busy so that an interrupt-mode reactor does not sleep. True
//! completes by interrupt: the plain ring signals the group's eventfd,
//! which is in the reactor's wake-up set, and the reactor sleeps.
//!
//! # Cost per I/O
//!
//! `submit` builds the command and pushes one SQE; the poller makes one
//! `io_uring_enter` per ring per iteration for everything pushed since the
//! last, then reaps the completion queue and completes the batch. No
//! allocation and no lock per I/O. Registered (fixed) buffers are not used:
//! bdev buffers are arbitrary memory, and the emulated device we measure
//! on cannot show the difference (`doc/xnvme.md`).
//!
//! # Example
//!
//! ```no_run
//! use bdevkit::bdev::{BdevManager, BdevOptions};
//! use bdevkit_xnvme::XnvmeCreateParams;
//!
//! let mgr = BdevManager::new(BdevOptions::default());
//! bdevkit_xnvme::register(&mgr);
//! // On a bdevkit thread:
//! let p = XnvmeCreateParams::new("nvme0", "/dev/ng0n1", "io_uring_cmd");
//! let bdev = bdevkit_xnvme::create(&mgr, p)?;
//! assert_eq!(bdev.product_name(), "xNVMe bdev");
//! # Ok::<(), bdevkit_xnvme::Error>(())
//! ```
#![warn(missing_docs)]
// Unsafe code lives in `sys` only (which allows it).
#![deny(unsafe_code)]

mod bdev;
mod cmd;
mod error;
pub mod rpc;
mod sys;

use std::sync::{Arc, OnceLock};

use bdevkit::bdev::module::{Bdev, BdevManager, BdevModule, BdevOps, BdevProps};
use bdevkit::thread::IoDevice;
use bdevkit_aio::AioCreateParams;
use bdevkit_kfile::KfileBdev;
use bdevkit_uring::UringCreateParams;
use serde_json::Map;

pub use bdev::XnvmeBdev;
pub use cmd::{CmdBdev, CmdChannel};
pub use error::{Error, Result};
pub use rpc::XnvmeCreateParams;

use cmd::engine::{self, CmdGroup};

/// Module name.
pub const MODULE: &str = "xnvme";
/// `product_name` of xnvme bdevs (SPDK's).
pub const PRODUCT_NAME: &str = "xNVMe bdev";

/// An I/O mechanism (`io_mechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// NVMe passthrough through io_uring on `/dev/ngXnY`.
    IoUringCmd,
    /// io_uring reads and writes (the uring module's bdev).
    IoUring,
    /// Linux AIO (the aio module's bdev).
    Libaio,
}

impl Mechanism {
    /// The mechanism named `s`.
    ///
    /// # Errors
    /// [`Error::UnknownMechanism`].
    pub fn parse(s: &str) -> Result<Mechanism> {
        match s {
            "io_uring_cmd" => Ok(Mechanism::IoUringCmd),
            "io_uring" => Ok(Mechanism::IoUring),
            "libaio" => Ok(Mechanism::Libaio),
            other => Err(Error::UnknownMechanism(other.to_string())),
        }
    }

    /// Its `io_mechanism` name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::IoUringCmd => "io_uring_cmd",
            Mechanism::IoUring => "io_uring",
            Mechanism::Libaio => "libaio",
        }
    }
}

/// The xnvme module, one per [`BdevManager`]: the io_device whose
/// per-thread channel is the thread's `io_uring_cmd` ring group.
#[derive(Debug)]
pub struct XnvmeModule {
    groups: IoDevice<CmdGroup>,
}

impl BdevModule for XnvmeModule {
    fn name(&self) -> &'static str {
        MODULE
    }
}

/// Adds the xnvme module to `mgr`. Its `io_uring` and `libaio` bdevs are
/// the uring and aio modules' bdevs: register those modules too to use
/// those mechanisms.
pub fn register(mgr: &BdevManager) {
    mgr.register_module(Arc::new(XnvmeModule {
        groups: IoDevice::register("bdev_xnvme_group", engine::create),
    }));
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
        name: "bdev_xnvme",
        targets: &["bdevkit_xnvme"],
        aliases: &[],
    }],
};

fn module(mgr: &BdevManager) -> Result<Arc<XnvmeModule>> {
    mgr.module_as::<XnvmeModule>(MODULE)
        .ok_or(Error::NotRegistered)
}

/// Whether this kernel builds io_uring_cmd rings (128-byte SQEs, 32-byte
/// CQEs: Linux 5.19), probed once; the reason when not. Tests use it to
/// skip.
pub fn cmd_available() -> std::result::Result<(), String> {
    static PROBE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            engine::new_ring(2, false)
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .clone()
}

/// Creates an xnvme bdev (call on a bdevkit thread, normally the app
/// thread; creation blocks on the device's Identify). Nothing is
/// registered unless every step succeeds.
///
/// # Errors
/// An empty or taken name, an unknown mechanism, what opening and
/// identifying the device reports (a missing device, a block device or
/// file given to `io_uring_cmd`, ...), `ENOSYS` where this kernel has no
/// io_uring_cmd rings (before Linux 5.19), and what the uring and aio
/// modules report for their mechanisms.
pub fn create(mgr: &BdevManager, params: XnvmeCreateParams) -> Result<Bdev> {
    let module = module(mgr)?;
    bdevkit_kfile::check_name(mgr, &params.name)?;
    let mechanism = Mechanism::parse(&params.io_mechanism)?;
    let name = params.name.clone();
    let b = match mechanism {
        Mechanism::IoUringCmd => {
            cmd_available().map_err(|reason| bdevkit_kfile::Error::Unavailable {
                interface: "io_uring_cmd",
                reason,
            })?;
            let cmd = CmdBdev::open(&params.filename, params.conserve_cpu, module.groups.clone())?;
            let props = cmd.props(&name, PRODUCT_NAME);
            let details = cmd.details();
            register_bdev(mgr, props, XnvmeBdev::new(params, cmd, details))?
        }
        Mechanism::IoUring => {
            let u = bdevkit_uring::open(mgr, UringCreateParams::new(&name, &params.filename))?;
            let props = u.disk().props(&name, PRODUCT_NAME);
            register_bdev(mgr, props, XnvmeBdev::new(params, u, Map::new()))?
        }
        Mechanism::Libaio => {
            let a = bdevkit_aio::open(mgr, AioCreateParams::new(&name, &params.filename))?;
            let props = a.disk().props(&name, PRODUCT_NAME);
            register_bdev(mgr, props, XnvmeBdev::new(params, a, Map::new()))?
        }
    };
    tracing::info!(bdev = %b.name(), block_size = b.block_size(), num_blocks = b.num_blocks(), info = %info(&b).unwrap_or_default(), "xnvme bdev created");
    Ok(b)
}

fn register_bdev<B: BdevOps>(mgr: &BdevManager, props: BdevProps, ops: B) -> Result<Bdev> {
    mgr.register_bdev(MODULE, props, Arc::new(ops))
        .map_err(|e| match e {
            bdevkit::Error::Exists(n) => bdevkit_kfile::Error::Exists(n).into(),
            e => bdevkit_kfile::Error::Register(e).into(),
        })
}

/// [`XnvmeBdev::info`] of `bdev`, whatever its mechanism; `None` when it
/// is not an xnvme bdev.
#[must_use]
pub fn info(bdev: &Bdev) -> Option<serde_json::Value> {
    if let Some(b) = bdev.ops_as::<XnvmeBdev<CmdBdev>>() {
        return Some(b.info());
    }
    if let Some(b) = bdev.ops_as::<XnvmeBdev<bdevkit_uring::UringBdev>>() {
        return Some(b.info());
    }
    bdev.ops_as::<XnvmeBdev<bdevkit_aio::AioBdev>>()
        .map(|b| b.info())
}

/// Deletes the xnvme bdev `name`; `done` gets the outcome on the calling
/// thread (at once with `ENODEV` when there is no such bdev). Every I/O in
/// flight completes before the bdev is destructed and its files closed.
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    bdevkit_kfile::delete(mgr, MODULE, name, move |r| done(r.map_err(Error::from)));
}
