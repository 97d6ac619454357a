//! Module options and kernel feature probes, each done once per process and
//! cached: which ring setup flags the kernel takes, and whether SQPOLL and
//! IOPOLL work. Every fallback is logged once at `info`.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::sys::{Ring, RingSetup};

/// Default SQ entries of a thread's ring (SPDK's uring module uses 512).
pub const DEFAULT_SQ_ENTRIES: u32 = 512;
/// Default SQPOLL idle time before the kernel thread sleeps.
pub const DEFAULT_SQPOLL_IDLE_MS: u32 = 1000;

/// Options of the uring module (`bdev_uring_set_options`; a bdevkit
/// extension, SPDK has no such RPC). They apply to rings created after the
/// change, i.e. to threads that get their first uring channel later, and
/// `iopoll` to bdevs created later.
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

static OPTIONS: Mutex<UringOptions> = Mutex::new(UringOptions {
    sq_entries: DEFAULT_SQ_ENTRIES,
    sqpoll: false,
    sqpoll_idle_ms: DEFAULT_SQPOLL_IDLE_MS,
    iopoll: false,
    idle_yield: true,
});

/// The current options.
#[must_use]
pub fn options() -> UringOptions {
    *OPTIONS.lock()
}

/// Replaces the options (validated).
pub fn set_options(o: UringOptions) -> Result<(), String> {
    o.validate()?;
    *OPTIONS.lock() = o;
    Ok(())
}

static BASE: OnceLock<Result<RingSetup, String>> = OnceLock::new();
static NO_SQPOLL: AtomicBool = AtomicBool::new(false);

/// The best setup flags this kernel takes, probed once: `SINGLE_ISSUER |
/// DEFER_TASKRUN | SUBMIT_ALL | TASKRUN_FLAG` (6.1+), else `COOP_TASKRUN |
/// SUBMIT_ALL | TASKRUN_FLAG`, else none. An error when io_uring cannot be used at all.
pub fn base_setup() -> Result<RingSetup, String> {
    BASE.get_or_init(|| {
        let tiers = [
            RingSetup {
                entries: 8,
                defer_taskrun: true,
                submit_all: true,
                taskrun_flag: true,
                ..RingSetup::default()
            },
            RingSetup {
                entries: 8,
                coop_taskrun: true,
                submit_all: true,
                taskrun_flag: true,
                ..RingSetup::default()
            },
            RingSetup {
                entries: 8,
                ..RingSetup::default()
            },
        ];
        let mut last = None;
        for (i, t) in tiers.iter().enumerate() {
            match Ring::build(*t) {
                Ok(_) => {
                    if i > 0 {
                        tracing::info!(setup = ?t, "io_uring: newer setup flags not supported; using fewer");
                    }
                    return Ok(*t);
                }
                Err(e) => last = Some(e),
            }
        }
        let e = last.map_or_else(|| "unknown".to_string(), |e| e.to_string());
        tracing::info!(error = %e, "io_uring is not available");
        Err(e)
    })
    .clone()
}

/// Builds a thread's ring from the current options: the plain ring
/// (`polled == false`, with SQPOLL if asked and supported) or the IOPOLL
/// ring.
pub(crate) fn build_ring(polled: bool) -> io::Result<Ring> {
    let base = base_setup().map_err(|e| io::Error::other(format!("io_uring unavailable: {e}")))?;
    let o = options();
    let mut setup = base;
    setup.entries = o.sq_entries;
    if polled {
        setup.iopoll = true;
        return Ring::build(setup);
    }
    if o.sqpoll && !NO_SQPOLL.load(Ordering::Relaxed) {
        let mut sq = setup;
        // SQPOLL rings are driven by a kernel thread: no DEFER_TASKRUN.
        sq.defer_taskrun = false;
        sq.coop_taskrun = false;
        sq.taskrun_flag = false;
        sq.sqpoll_idle_ms = Some(o.sqpoll_idle_ms);
        match Ring::build(sq) {
            Ok(r) => return Ok(r),
            Err(e) => {
                if !NO_SQPOLL.swap(true, Ordering::Relaxed) {
                    tracing::info!(error = %e, "io_uring: SQPOLL not available; using a plain ring");
                }
            }
        }
    }
    Ring::build(setup)
}
