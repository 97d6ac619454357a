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
//! RPCs: see [`rpc`]. `doc/nvme.md` has the whole picture.
#![warn(missing_docs)]

mod bdev;
pub mod channel;
pub mod ctrlr;
pub mod hotplug;
pub mod options;
mod reset;
pub mod rpc;

use std::sync::{Arc, OnceLock};

use bdevkit::bdev::module::{add_registrar, BdevManager, BdevModule, MemoryRegistrar};
use serde_json::{json, Value};

pub use bdev::{NvmeBdev, NvmeChannel};
pub use options::{NvmeOptions, TimeoutAction};
pub use rpc::register_rpcs;

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
    /// The driver failed.
    #[error("nvme driver")]
    Driver(#[source] nvme_driver::Error),
}

impl Error {
    /// errno for RPC answers.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::InvalidArg(_) => libc::EINVAL,
            Error::Exists(_) => libc::EALREADY,
            Error::NotFound(_) => libc::ENODEV,
            Error::Driver(e) => e.errno(),
        }
    }
}

/// Module result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The nvme module.
#[derive(Debug, Default)]
pub struct NvmeModule;

impl BdevModule for NvmeModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    /// SPDK's order: options, one attach per controller, hotplug last.
    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        let mut v = vec![options::config_entry()];
        v.extend(ctrlr::all().iter().map(|c| c.config_json()));
        let h = hotplug::params();
        v.push(json!({"method": "bdev_nvme_set_hotplug", "params": {"period_us": h.period_us, "enable": h.enable}}));
        v
    }
}

struct VfioRegistrar;

impl MemoryRegistrar for VfioRegistrar {
    fn register(&self, addr: usize, len: usize) {
        nvme_driver::vfio::register_memory(addr, len);
    }
    fn unregister(&self, addr: usize, len: usize) {
        nvme_driver::vfio::unregister_memory(addr, len);
    }
}

/// The registrar, installed once per process and never removed.
static REGISTRAR: OnceLock<bdevkit::bdev::module::RegistrarId> = OnceLock::new();

/// Adds the nvme module to `mgr` and (once per process) the DMA
/// registration hook for VFIO devices.
pub fn register(mgr: &BdevManager) {
    REGISTRAR.get_or_init(|| add_registrar(Arc::new(VfioRegistrar)));
    mgr.register_module(Arc::new(NvmeModule));
}
