//! The `nvme` bdev module (SPDK's bdev_nvme): NVMe controllers driven from
//! user space by `bdevkit-nvme-driver` (PCIe over VFIO, or the in-process
//! emulated controller), one bdev per active namespace, `<name>n<nsid>`.
//!
//! * **Threads.** Attach, reset and detach wait for the controller on
//!   helper threads; everything else runs on reactor threads. Each
//!   lightweight thread with a channel on a controller has its own I/O
//!   queue pair ([`channel`]), polled, shared by that controller's bdevs on
//!   the thread; the admin queue is polled by a timed poller on the app
//!   thread (`nvme_adminq_poll_period_us`).
//! * **I/O types.** read, write, write_zeroes, unmap (Dataset Management),
//!   flush (with a volatile write cache, or `enable_flush`), compare,
//!   compare-and-write (fused, when the controller has it), reset
//!   (controller reset), abort, `nvme_io` and `nvme_admin` passthrough.
//!   NVMe statuses reach the caller through `IoStatus::from_nvme`.
//! * **Errors.** Timeouts by ageing (`timeout_us`, `action_on_timeout`
//!   none/abort/reset); failed I/O retried up to `bdev_retry_count`, never
//!   after DNR; CSTS.CFS → reset; surprise removal → every I/O fails and
//!   the bdevs are hot-removed.
//! * **DMA.** [`register`] installs the bdev layer's memory registration
//!   hook, so that every `DmaBuf` is mapped for VFIO devices once, at
//!   allocation (IOVA = virtual address).
//!
//! * **Discovery.** `bdev_nvme_start_discovery` connects to an NVMe-oF
//!   discovery controller and attaches the subsystems its log lists, and
//!   follows the log's changes ([`discovery`]).
//!
//! RPCs: see [`rpc`]. `doc/nvme.md` has the whole picture.
#![warn(missing_docs)]

mod auth_rpc;
mod bdev;
pub mod channel;
pub mod ctrlr;
pub mod discovery;
mod discovery_rpc;
mod discovery_types;
pub mod emu;
pub mod hotplug;
mod module;
mod mp_rpc;
pub mod multipath;
mod nsbdevs;
mod nvme_io;
pub mod options;
pub mod paths;
pub mod policy;
mod reconnect;
mod reset;
pub mod rpc;
mod timer;
mod trid;
mod wake;

use std::sync::{Arc, OnceLock};

use bdevkit::bdev::module::{add_registrar, BdevManager, MemoryRegistrar, RegistrarId};

pub use bdev::{NvmeBdev, NvmeChannel};
pub use ctrlr::{AttachArgs, AttachDone, MultipathMode, NvmeCtrlr};
pub use discovery::DiscoveryArgs;
pub use discovery_rpc::{
    discovery_info, start_discovery, stop_discovery, StartDiscoveryParams, StopDiscoveryParams,
};
pub use emu::{EmuCreateParams, EmuNsParams};
pub use module::{
    attach, controller, controller_paths, controllers, controllers_json, detach, detach_paths, emu,
    emu_create, emu_delete, emu_start, emu_start_inline, io_paths_json, module, multipath_policy,
    options, path_io_counts, set_hotplug, set_multipath_policy, set_options, NvmeModule,
};
pub use multipath::{PathPolicy, Policy, Selector};
pub use options::{HotplugParams, NvmeOptions, TimeoutAction};
pub use paths::PathSelector;
pub use reconnect::{Reconnect, ReconnectParams};
pub use rpc::register_rpcs;
pub use trid::TridParams;

/// Module name.
pub const MODULE: &str = "nvme";

/// Module errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad argument.
    #[error("invalid argument: {0}")]
    InvalidArg(String),
    /// Name or address in use.
    #[error("{0}")]
    Exists(String),
    /// No such controller.
    #[error("no controller {0}")]
    NotFound(String),
    /// Not allowed now.
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// The nvme module is not registered with this bdev manager.
    #[error("the nvme module is not registered")]
    NotRegistered,
    /// The driver failed.
    #[error("nvme driver")]
    Driver(#[source] bdevkit_nvme_driver::Error),
}

impl Error {
    /// errno for RPC answers.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::InvalidArg(_) | Error::NotRegistered => libc::EINVAL,
            Error::Exists(_) => libc::EALREADY,
            Error::NotFound(_) => libc::ENODEV,
            Error::NotPermitted(_) => libc::EPERM,
            Error::Driver(e) => e.errno(),
        }
    }
}

/// Module result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The DMA registration hook for VFIO devices: maps every `DmaBuf` of the
/// bdev layer for the process's VFIO container.
struct VfioRegistrar;

impl MemoryRegistrar for VfioRegistrar {
    fn register(&self, addr: usize, len: usize) {
        bdevkit_nvme_driver::vfio::register_memory(addr, len);
    }
    fn unregister(&self, addr: usize, len: usize) {
        bdevkit_nvme_driver::vfio::unregister_memory(addr, len);
    }
}

/// The registrar is process-wide by nature, not module state: `DmaBuf`s
/// belong to the process (any manager's I/O may use any buffer), and a
/// process has one VFIO container (the kernel's model: an IOMMU group
/// joins one container), whose mappings every controller of every
/// manager shares. Installed once, never removed.
static REGISTRAR: OnceLock<RegistrarId> = OnceLock::new();

/// Adds the nvme module to `mgr` and (once per process) the DMA
/// registration hook for VFIO devices.
pub fn register(mgr: &BdevManager) {
    REGISTRAR.get_or_init(|| add_registrar(Arc::new(VfioRegistrar)));
    mgr.register_module(Arc::new(NvmeModule::default()));
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
    log_flags: &[
        bdevkit::bdev::module::LogFlag {
            name: "bdev_nvme",
            targets: &["bdevkit_nvme"],
            aliases: &[],
        },
        bdevkit::bdev::module::LogFlag {
            name: "nvme",
            targets: &["bdevkit_nvme_driver"],
            aliases: &[],
        },
    ],
};
