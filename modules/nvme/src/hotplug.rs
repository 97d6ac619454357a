//! `bdev_nvme_set_hotplug`: a timed poller on the app thread that attaches
//! NVMe functions bound to vfio-pci as they appear (named `HotInNvme<N>`,
//! as SPDK names hot-inserted controllers). Removal needs no poller: the
//! admin poller of each controller sees its registers read all ones.
//! The state is the module instance's (one per bdev manager).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use bdevkit::bdev::BdevManager;
use bdevkit::thread::{PollerStatus, Thread};
use parking_lot::Mutex;

use crate::ctrlr::{AttachArgs, AttachDone, Registry};
use crate::options::HotplugParams;

/// How the poller attaches a device it found (the module's attach, which
/// applies the module's options).
pub(crate) type AttachFn = fn(&BdevManager, AttachArgs, AttachDone);

/// The hotplug settings and poller of one module instance.
#[derive(Debug, Default)]
pub(crate) struct Hotplug {
    params: Mutex<HotplugParams>,
    poller: AtomicBool,
    /// The module is finishing: attach nothing more.
    stopped: AtomicBool,
    next: AtomicU32,
    probing: Mutex<Vec<String>>,
}

impl Hotplug {
    /// The current settings.
    pub(crate) fn params(&self) -> HotplugParams {
        *self.params.lock()
    }

    /// Applies `p` (on a bdevkit thread: the poller lives there); the
    /// poller attaches new devices into `reg` with `attach`.
    pub(crate) fn set(
        self: &Arc<Self>,
        mgr: &BdevManager,
        reg: &Arc<Registry>,
        p: HotplugParams,
        attach: AttachFn,
    ) {
        *self.params.lock() = p;
        if !p.enable || self.poller.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(t) = Thread::try_current() else { return };
        let mgr = mgr.clone();
        let me = Arc::clone(self);
        let reg = Arc::clone(reg);
        t.register_poller("bdev_nvme_hotplug", p.period_us.max(1000), move |_| {
            if me.params().enable && !me.stopped.load(Ordering::Acquire) {
                me.probe(&mgr, &reg, attach);
            }
            PollerStatus::Idle
        });
    }

    /// The module is finishing (its controllers are being shut down):
    /// from now on the poller attaches nothing, so that a controller just
    /// shut down is not attached again.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    fn probe(self: &Arc<Self>, mgr: &BdevManager, reg: &Registry, attach: AttachFn) {
        let attached: Vec<String> = reg.all().iter().map(|c| c.traddr().to_string()).collect();
        for bdf in bdevkit_nvme_driver::vfio::nvme_devices() {
            if attached.contains(&bdf) || self.probing.lock().contains(&bdf) {
                continue;
            }
            self.probing.lock().push(bdf.clone());
            let name = format!("HotInNvme{}", self.next.fetch_add(1, Ordering::Relaxed));
            tracing::info!(%bdf, %name, "hotplug: attaching");
            let b2 = bdf.clone();
            let me = Arc::clone(self);
            attach(
                mgr,
                AttachArgs::pcie(name, bdf),
                Box::new(move |r| {
                    me.probing.lock().retain(|x| *x != b2);
                    if let Err(e) = r {
                        tracing::warn!(bdf = %b2, error = %e, "hotplug attach failed");
                    }
                }),
            );
        }
    }
}
