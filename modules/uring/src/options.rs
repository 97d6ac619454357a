//! The uring module's options ([`UringOptions`]): configuration, so they
//! belong to the module instance of one `BdevManager` (two managers in one
//! process may differ), unlike the kernel capability probes in
//! `probe.rs`, which describe the kernel and are cached process-wide.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Default SQ entries of a thread's ring (SPDK's uring module uses 512).
pub const DEFAULT_SQ_ENTRIES: u32 = 512;
/// Default SQPOLL idle time before the kernel thread sleeps.
pub const DEFAULT_SQPOLL_IDLE_MS: u32 = 1000;

/// Options of the uring module (`bdev_uring_set_options`; a bdevkit
/// extension, SPDK has no such RPC), kept by the module instance of one
/// `BdevManager` ([`crate::options`], [`crate::set_options`]). They apply
/// to rings created after the change, i.e. to threads that get their first
/// uring channel of that manager later, and `iopoll` to bdevs created
/// later.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UringOptions {
    /// SQ entries (and in-flight requests) per thread ring: a power of two
    /// in 8..=4096.
    pub sq_entries: u32,
    /// A kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`):
    /// no system call to submit, at the cost of a busy kernel thread per
    /// ring. That thread inherits the reactor's CPU affinity, so it only
    /// pays when the reactor's core is not the only one it may use (on one
    /// core, tmpfs 4 KiB randread fell from ~400K to ~8K IOPS). Off by
    /// default.
    pub sqpoll: bool,
    /// How long the SQPOLL thread spins idle before sleeping.
    pub sqpoll_idle_ms: u32,
    /// Block devices opened with `O_DIRECT` whose driver serves polled I/O
    /// (NVMe with poll queues) use a second, `IORING_SETUP_IOPOLL` ring per
    /// thread; others keep the plain ring. Off by default.
    pub iopoll: bool,
    /// In poll mode, a thread's poller that finds nothing to do while
    /// requests to a file without non-blocking reads (tmpfs; probed per
    /// bdev with `preadv2(RWF_NOWAIT)`) are in the kernel yields the CPU
    /// (`sched_yield`, which returns at once when nothing else is runnable
    /// there). The kernel serves such files in io-wq worker threads that
    /// inherit the reactor's CPU; spinning would starve them. On by
    /// default.
    #[serde(default = "default_true")]
    pub idle_yield: bool,
}

fn default_true() -> bool {
    true
}

impl Default for UringOptions {
    fn default() -> Self {
        UringOptions {
            sq_entries: DEFAULT_SQ_ENTRIES,
            sqpoll: false,
            sqpoll_idle_ms: DEFAULT_SQPOLL_IDLE_MS,
            iopoll: false,
            idle_yield: true,
        }
    }
}

impl UringOptions {
    /// Checks the values.
    ///
    /// # Errors
    /// A description of the first invalid value.
    pub fn validate(&self) -> Result<(), String> {
        if !(8..=4096).contains(&self.sq_entries) || !self.sq_entries.is_power_of_two() {
            return Err(format!(
                "sq_entries {} is not a power of two in 8..=4096",
                self.sq_entries
            ));
        }
        Ok(())
    }
}

/// The options of one module instance, shared with the constructor of its
/// threads' groups (which reads them when it builds a ring).
pub(crate) type SharedOptions = Arc<Mutex<UringOptions>>;
