//! Kernel feature probes, each done once per process and cached: which
//! ring setup flags the kernel takes, and whether SQPOLL works. They
//! describe the kernel, not configuration, so unlike the module's options
//! ([`crate::UringOptions`], per module instance) they may be process-wide:
//! every manager in the process runs on the same kernel. Every fallback is
//! logged once at `info`.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::options::UringOptions;
use bdevkit_kfile::ring::{FileRing, RingSetup};

static BASE: OnceLock<Result<RingSetup, String>> = OnceLock::new();
static NO_SQPOLL: AtomicBool = AtomicBool::new(false);

/// The best setup flags this kernel takes, probed once: `SINGLE_ISSUER |
/// DEFER_TASKRUN | SUBMIT_ALL | TASKRUN_FLAG` (6.1+), else `COOP_TASKRUN |
/// SUBMIT_ALL | TASKRUN_FLAG`, else none. An error when io_uring cannot be used at all.
pub(crate) fn base_setup() -> Result<RingSetup, String> {
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
            match FileRing::build(*t) {
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

/// Builds a thread's ring with options `o`: the plain ring (`polled ==
/// false`, with SQPOLL if asked and supported) or the IOPOLL ring.
pub(crate) fn build_ring(polled: bool, o: &UringOptions) -> io::Result<FileRing> {
    let base = base_setup().map_err(|e| io::Error::other(format!("io_uring unavailable: {e}")))?;
    let mut setup = base;
    setup.entries = o.sq_entries;
    if polled {
        setup.iopoll = true;
        return FileRing::build(setup);
    }
    if o.sqpoll && !NO_SQPOLL.load(Ordering::Relaxed) {
        let mut sq = setup;
        // SQPOLL rings are driven by a kernel thread: no DEFER_TASKRUN.
        sq.defer_taskrun = false;
        sq.coop_taskrun = false;
        sq.taskrun_flag = false;
        sq.sqpoll_idle_ms = Some(o.sqpoll_idle_ms);
        match FileRing::build(sq) {
            Ok(r) => return Ok(r),
            Err(e) => {
                if !NO_SQPOLL.swap(true, Ordering::Relaxed) {
                    tracing::info!(error = %e, "io_uring: SQPOLL not available; using a plain ring");
                }
            }
        }
    }
    FileRing::build(setup)
}
