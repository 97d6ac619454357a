//! Attached controllers: the registry, attach (bring-up on a helper
//! thread, then bdevs per namespace on the app thread), the admin poller
//! (completions, CSTS.CFS → reset, all-ones registers → hot remove),
//! namespace changes, detach, and the JSON of `bdev_nvme_get_controllers`
//! and `driver_specific.nvme`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bdevkit::bdev::module::{BdevManager, BdevProps};
use bdevkit::thread::{IoDevice, PollerStatus, Thread, ThreadHandle};
use nvme_driver::bus::PciFunction;
use nvme_driver::emu::{self, EmuController};
use nvme_driver::vfio::VfioFunction;
use nvme_driver::{Controller, ControllerOptions, Health, Namespace, PcieTransport};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::bdev::NvmeBdev;
use crate::channel::CtrlrChannel;
use crate::options::{self, Applied};
use crate::{Error, Result, MODULE};

/// Called with an attach's bdev names (or its error), on the app thread.
pub type AttachDone = Box<dyn FnOnce(Result<Vec<String>>) + Send>;

/// One attached controller.
pub struct NvmeCtrlr {
    name: String,
    driver: Arc<Controller<PcieTransport>>,
    device: IoDevice<CtrlrChannel>,
    opts: Applied,
    pub(crate) mgr: BdevManager,
    pub(crate) app: ThreadHandle,
    bdevs: Mutex<Vec<(u32, String)>>,
    pub(crate) resetting: AtomicBool,
    pub(crate) reset_waiters: Mutex<Vec<crate::reset::ResetDone>>,
    removed: AtomicBool,
    detached: AtomicBool,
    _emu: Option<Arc<EmuController>>,
}

impl std::fmt::Debug for NvmeCtrlr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeCtrlr")
            .field("name", &self.name)
            .finish()
    }
}

static CTRLRS: Mutex<Vec<Arc<NvmeCtrlr>>> = Mutex::new(Vec::new());

/// The attached controller `name`.
pub fn get(name: &str) -> Option<Arc<NvmeCtrlr>> {
    CTRLRS.lock().iter().find(|c| c.name == name).cloned()
}

/// Every attached controller, in attach order.
pub fn all() -> Vec<Arc<NvmeCtrlr>> {
    CTRLRS.lock().clone()
}

impl NvmeCtrlr {
    /// Controller name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver's controller.
    pub fn driver(&self) -> &Arc<Controller<PcieTransport>> {
        &self.driver
    }

    /// The io_device of its per-thread queue pairs.
    pub fn device(&self) -> &IoDevice<CtrlrChannel> {
        &self.device
    }

    /// Options applied to it.
    pub fn options(&self) -> &Applied {
        &self.opts
    }

    /// PCI address (or `emu:NAME`).
    pub fn traddr(&self) -> &str {
        self.driver.transport().function().address()
    }

    /// Its bdevs' names.
    pub fn bdev_names(&self) -> Vec<String> {
        self.bdevs.lock().iter().map(|b| b.1.clone()).collect()
    }

    fn trid(&self) -> Value {
        json!({"trtype": "PCIe", "traddr": self.traddr()})
    }

    /// `bdev_nvme_get_controllers` entry.
    pub fn info_json(&self) -> Value {
        let state = if self.removed.load(Ordering::Acquire) || self.detached.load(Ordering::Acquire)
        {
            "deleting"
        } else {
            self.driver.state().name()
        };
        json!({
            "name": self.name,
            "ctrlrs": [{
                "state": state,
                "trid": self.trid(),
                "cntlid": self.driver.identify().cntlid.get(),
                "host": {"nqn": "", "addr": "", "svcid": "", "no_shn_notification": false},
            }]
        })
    }

    /// `driver_specific` of namespace `nsid`'s bdev.
    pub fn bdev_json(&self, nsid: u32, can_share: bool) -> Value {
        let id = self.driver.identify();
        let oacs = id.oacs.get();
        let vs = self.driver.version();
        json!({
            "nvme": [{
                "pci_address": self.traddr(),
                "trid": self.trid(),
                "ctrlr_data": {
                    "cntlid": id.cntlid.get(),
                    "vendor_id": format!("0x{:04x}", id.vid.get()),
                    "model_number": id.model(),
                    "serial_number": id.serial(),
                    "firmware_revision": id.firmware(),
                    "subnqn": id.subnqn(),
                    "oacs": {
                        "security": u8::from(oacs & 1 != 0),
                        "format": u8::from(oacs & 2 != 0),
                        "firmware": u8::from(oacs & 4 != 0),
                        "ns_manage": u8::from(oacs & 8 != 0),
                    },
                    "multi_ctrlr": id.cmic & 2 != 0,
                    "ana_reporting": id.cmic & 8 != 0,
                },
                "vs": {"nvme_version": format!("{}.{}", vs.major(), vs.minor())},
                "ns_data": {"id": nsid, "can_share": can_share},
            }],
            "mp_policy": "active_passive",
        })
    }

    /// The saved-config entry that attaches it again.
    pub fn config_json(&self) -> Value {
        json!({
            "method": "bdev_nvme_attach_controller",
            "params": {
                "name": self.name,
                "trtype": "PCIe",
                "traddr": self.traddr(),
                "prchk_reftag": false,
                "prchk_guard": false,
                "ctrlr_loss_timeout_sec": 0,
                "reconnect_delay_sec": 0,
                "fast_io_fail_timeout_sec": 0,
            }
        })
    }

    /// Registers a bdev for each namespace that has none yet (on the app
    /// thread); returns the new names.
    fn add_bdevs(self: &Arc<Self>, namespaces: &[Namespace]) -> Vec<String> {
        let id = self.driver.identify();
        let max_bytes = self.driver.max_transfer_bytes();
        let mut names = Vec::new();
        for ns in namespaces {
            if self.bdevs.lock().iter().any(|b| b.0 == ns.id) {
                continue;
            }
            let name = format!("{}n{}", self.name, ns.id);
            let mut p = BdevProps::new(&name, "NVMe disk", ns.block_size, ns.num_blocks);
            let bs = usize::try_from(ns.block_size).unwrap_or(512);
            p.max_rw_size = u32::try_from((max_bytes / bs).min(65536)).unwrap_or(65536);
            p.required_alignment = 2;
            p.write_cache = id.volatile_write_cache();
            p.max_write_zeroes = 65536;
            p.max_unmap = u32::MAX;
            let bdev = NvmeBdev::new(Arc::clone(self), ns, &id);
            match self.mgr.register_bdev(MODULE, p, Arc::new(bdev)) {
                Ok(_) => {
                    self.bdevs.lock().push((ns.id, name.clone()));
                    names.push(name);
                }
                Err(e) => tracing::error!(bdev = %name, error = %e, "cannot register NVMe bdev"),
            }
        }
        names
    }

    /// Namespaces changed: new ones get bdevs, vanished ones go.
    fn namespaces_changed(self: &Arc<Self>) {
        let ns = self.driver.namespaces();
        self.add_bdevs(&ns);
        let gone: Vec<(u32, String)> = self
            .bdevs
            .lock()
            .iter()
            .filter(|b| !ns.iter().any(|n| n.id == b.0))
            .cloned()
            .collect();
        for (nsid, name) in gone {
            self.bdevs.lock().retain(|b| b.0 != nsid);
            if let Some(b) = self.mgr.get(&name) {
                self.mgr.unregister(&b, || {});
            }
        }
    }

    /// The device is gone: fail all I/O, hot-remove the bdevs.
    fn surprise_removed(self: &Arc<Self>) {
        if self.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(ctrlr = %self.name, "controller removed (registers read all ones)");
        self.driver.set_state(nvme_driver::State::Removed);
        let me = Arc::clone(self);
        self.device.for_each_channel(
            |ch| ch.inner.kill(),
            move || {
                for name in me.bdev_names() {
                    if let Some(b) = me.mgr.get(&name) {
                        me.mgr.unregister(&b, || {});
                    }
                }
            },
        );
    }

    fn admin_poll(self: &Arc<Self>) -> PollerStatus {
        if self.removed.load(Ordering::Acquire) {
            return PollerStatus::Idle;
        }
        match self.driver.poll_admin() {
            Health::Ok => {}
            Health::Fatal => {
                if !self.resetting.load(Ordering::Acquire) {
                    tracing::warn!(ctrlr = %self.name, "controller fatal status: resetting");
                    crate::reset::start(self, None);
                }
            }
            Health::Removed => self.surprise_removed(),
        }
        PollerStatus::Idle
    }
}

/// Attach parameters this module needs (decoded from the RPC).
#[derive(Debug, Clone)]
pub struct AttachArgs {
    /// Controller name (bdev prefix).
    pub name: String,
    /// PCI address, or `emu:NAME` for an emulated controller.
    pub traddr: String,
    /// I/O queues to ask for.
    pub num_io_queues: Option<u32>,
}

/// A PCI function and, for an emulated one, its controller (kept alive).
type Opened = (Arc<dyn PciFunction>, Option<Arc<EmuController>>);

fn open_function(traddr: &str) -> nvme_driver::Result<Opened> {
    if traddr.starts_with("emu:") {
        let e =
            emu::lookup(traddr).ok_or_else(|| nvme_driver::Error::NoDevice(traddr.to_string()))?;
        Ok((e.function() as Arc<dyn PciFunction>, Some(e)))
    } else {
        Ok((VfioFunction::open(traddr)? as Arc<dyn PciFunction>, None))
    }
}

/// Attaches the controller at `args.traddr` as `args.name`; `done` gets
/// the bdev names on the calling (app) thread. The bring-up runs on a
/// helper thread.
pub fn attach(mgr: &BdevManager, args: AttachArgs, done: AttachDone) {
    let Ok(app) = Thread::try_current() else {
        done(Err(Error::InvalidArg(
            "attach outside a bdevkit thread".into(),
        )));
        return;
    };
    {
        let c = CTRLRS.lock();
        if c.iter().any(|c| c.name == args.name) {
            done(Err(Error::Exists(format!(
                "A controller named {} already exists and multipath is disabled",
                args.name
            ))));
            return;
        }
        if c.iter().any(|c| c.traddr() == args.traddr) {
            done(Err(Error::Exists(format!(
                "{} is attached already",
                args.traddr
            ))));
            return;
        }
    }
    let applied = options::options().applied();
    let app = app.handle();
    let mgr = mgr.clone();
    let spawned = std::thread::Builder::new()
        .name("nvme-attach".into())
        .spawn(move || {
            let r = open_function(&args.traddr).and_then(|(f, e)| {
                let t = PcieTransport::new(f)?;
                let copts = ControllerOptions {
                    io_entries: applied.io_entries,
                    num_io_queues: args.num_io_queues.unwrap_or(64),
                    keep_alive_timeout_ms: applied.keep_alive_timeout_ms,
                    admin_timeout: if applied.timeout_admin_us > 0 {
                        Duration::from_micros(applied.timeout_admin_us)
                    } else {
                        Duration::from_secs(30)
                    },
                    ..ControllerOptions::default()
                };
                Ok((Controller::attach(t, copts)?, e))
            });
            let app2 = app.clone();
            let sent = app.send_msg(move || match r {
                Ok((driver, e)) => finish_attach(&mgr, args.name, driver, e, applied, app2, done),
                Err(err) => done(Err(Error::Driver(err))),
            });
            if sent.is_err() {
                tracing::warn!("app thread gone before the attach finished");
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the attach thread");
    }
}

fn finish_attach(
    mgr: &BdevManager,
    name: String,
    driver: Arc<Controller<PcieTransport>>,
    emu: Option<Arc<EmuController>>,
    opts: Applied,
    app: ThreadHandle,
    done: AttachDone,
) {
    let ctrlr = Arc::new_cyclic(|me: &Weak<NvmeCtrlr>| {
        let w = me.clone();
        let device = IoDevice::register(format!("nvme_ctrlr_{name}"), move || {
            let c = w.upgrade().ok_or("controller gone")?;
            CtrlrChannel::create(c)
        });
        NvmeCtrlr {
            name,
            driver,
            device,
            opts,
            mgr: mgr.clone(),
            app,
            bdevs: Mutex::new(Vec::new()),
            resetting: AtomicBool::new(false),
            reset_waiters: Mutex::new(Vec::new()),
            removed: AtomicBool::new(false),
            detached: AtomicBool::new(false),
            _emu: emu,
        }
    });
    CTRLRS.lock().push(Arc::clone(&ctrlr));
    let w = Arc::downgrade(&ctrlr);
    let app = ctrlr.app.clone();
    ctrlr.driver.set_event_handler(Box::new(move |_ev| {
        let w = w.clone();
        let _ = app.send_msg(move || {
            if let Some(c) = w.upgrade() {
                c.namespaces_changed();
            }
        });
    }));
    if let Ok(t) = Thread::try_current() {
        let w = Arc::downgrade(&ctrlr);
        t.register_poller(
            "bdev_nvme_adminq",
            opts.adminq_poll_period_us,
            move |p| match w.upgrade() {
                Some(c) if !c.detached.load(Ordering::Acquire) => c.admin_poll(),
                _ => {
                    p.unregister();
                    PollerStatus::Idle
                }
            },
        );
    }
    let ns = ctrlr.driver.namespaces();
    let names = ctrlr.add_bdevs(&ns);
    tracing::info!(ctrlr = %ctrlr.name, bdevs = ?names, "NVMe controller attached");
    mgr.wait_for_examine(move || done(Ok(names)));
}

/// Detaches controller `name`: its bdevs are unregistered, its queues
/// deleted, and the controller shut down; `done` runs on the calling
/// thread.
pub fn detach(name: &str, done: Box<dyn FnOnce(Result<()>) + Send>) {
    let Some(c) = get(name) else {
        done(Err(Error::NotFound(name.to_string())));
        return;
    };
    CTRLRS.lock().retain(|x| x.name != name);
    c.detached.store(true, Ordering::Release);
    let names = c.bdev_names();
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(names.len() + 1));
    let c2 = Arc::clone(&c);
    let finish = Arc::new(Mutex::new(Some(done)));
    let step = move || {
        if left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let c3 = Arc::clone(&c2);
        let finish = Arc::clone(&finish);
        c2.device.unregister(move || {
            let removed = c3.removed.load(Ordering::Acquire);
            let c4 = Arc::clone(&c3);
            let app = c3.app.clone();
            let _ = std::thread::Builder::new()
                .name("nvme-detach".into())
                .spawn(move || {
                    if !removed {
                        if let Err(e) = c4.driver.shutdown() {
                            tracing::warn!(ctrlr = %c4.name, error = %e, "shutdown failed");
                        }
                    }
                    drop(c4);
                    let _ = app.send_msg(move || {
                        if let Some(d) = finish.lock().take() {
                            d(Ok(()));
                        }
                    });
                });
        });
    };
    let step = Arc::new(step);
    for n in names {
        let s = Arc::clone(&step);
        match c.mgr.get(&n) {
            Some(b) => c.mgr.unregister(&b, move || s()),
            None => s(),
        }
    }
    step();
}
