//! `bdev_nvme_set_hotplug`: a timed poller on the app thread that attaches
//! NVMe functions bound to vfio-pci as they appear (named `HotInNvme<N>`,
//! as SPDK names hot-inserted controllers). Removal needs no poller: the
//! admin poller of each controller sees its registers read all ones.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use bdevkit::bdev::BdevManager;
use bdevkit::thread::{PollerStatus, Thread};
use parking_lot::Mutex;

use crate::ctrlr::{self, AttachArgs};
use crate::options::HotplugParams;

static PARAMS: Mutex<HotplugParams> = Mutex::new(HotplugParams {
    enable: false,
    period_us: 100_000,
});
static POLLER: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicU32 = AtomicU32::new(0);
static PROBING: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The current settings.
pub fn params() -> HotplugParams {
    *PARAMS.lock()
}

/// Applies `p` (on a bdevkit thread: the poller lives there).
pub fn set(mgr: &BdevManager, p: HotplugParams) {
    *PARAMS.lock() = p;
    if !p.enable || POLLER.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(t) = Thread::try_current() else { return };
    let mgr = mgr.clone();
    t.register_poller("bdev_nvme_hotplug", p.period_us.max(1000), move |_| {
        if params().enable {
            probe(&mgr);
        }
        PollerStatus::Idle
    });
}

fn probe(mgr: &BdevManager) {
    let attached: Vec<String> = ctrlr::all()
        .iter()
        .map(|c| c.traddr().to_string())
        .collect();
    for bdf in nvme_driver::vfio::nvme_devices() {
        if attached.contains(&bdf) || PROBING.lock().contains(&bdf) {
            continue;
        }
        PROBING.lock().push(bdf.clone());
        let name = format!("HotInNvme{}", NEXT.fetch_add(1, Ordering::Relaxed));
        tracing::info!(%bdf, %name, "hotplug: attaching");
        let b2 = bdf.clone();
        ctrlr::attach(
            mgr,
            AttachArgs {
                name,
                traddr: bdf,
                num_io_queues: None,
            },
            Box::new(move |r| {
                PROBING.lock().retain(|x| *x != b2);
                if let Err(e) = r {
                    tracing::warn!(bdf = %b2, error = %e, "hotplug attach failed");
                }
            }),
        );
    }
}
