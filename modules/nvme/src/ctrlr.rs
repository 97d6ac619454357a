//! Attached controllers: the registry (one per module instance), attach
//! (bring-up on a helper thread, then bdevs per namespace on the app
//! thread), the admin poller (completions, CSTS.CFS → reset, all-ones
//! registers → hot remove), namespace changes, detach, and the JSON of
//! `bdev_nvme_get_controllers` and `driver_specific.nvme`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bdevkit::bdev::module::{BdevManager, BdevProps};
use bdevkit::thread::{IoDevice, PollerStatus, Thread, ThreadHandle};
use nvme_driver::bus::PciFunction;
use nvme_driver::emu::EmuController;
use nvme_driver::vfio::VfioFunction;
use nvme_driver::{
    AnyTransport, Controller, ControllerOptions, Health, Namespace, PcieTransport, TcpOptions,
    TcpTransport, Transport,
};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::bdev::{ns_uuid, NsOwner, NvmeBdev};
use crate::channel::{ChannelOwner, CtrlrChannel, Driver, ResetDone};
use crate::options::Applied;
use crate::reconnect::{Reconnect, ReconnectState};
use crate::reset::{self, ResetState, Resettable};
use crate::wake;
use crate::{Error, Result, MODULE};

/// Called with an attach's bdev names (or its error), on the app thread.
pub type AttachDone = Box<dyn FnOnce(Result<Vec<String>>) + Send>;

/// One attached controller.
pub struct NvmeCtrlr {
    name: String,
    driver: Driver,
    device: IoDevice<CtrlrChannel>,
    opts: Applied,
    mgr: BdevManager,
    app: ThreadHandle,
    bdevs: Mutex<Vec<(u32, String)>>,
    reset: ResetState,
    reconnect: ReconnectState,
    removed: AtomicBool,
    detached: AtomicBool,
    me: Weak<NvmeCtrlr>,
    /// The registry it is in (a lost controller leaves it by itself).
    reg: Weak<Registry>,
    _emu: Option<Arc<EmuController>>,
}

impl std::fmt::Debug for NvmeCtrlr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmeCtrlr")
            .field("name", &self.name)
            .finish()
    }
}

#[derive(Default)]
struct RegInner {
    ctrlrs: Vec<Arc<NvmeCtrlr>>,
    /// Attaches under way: (name, traddr), reserved until they finish.
    pending: Vec<(String, String)>,
}

/// The controllers of one module instance.
#[derive(Default)]
pub struct Registry(Mutex<RegInner>);

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.all().iter().map(|c| c.name.clone()).collect();
        f.debug_struct("Registry").field("ctrlrs", &names).finish()
    }
}

impl Registry {
    /// The attached controller `name`.
    pub fn get(&self, name: &str) -> Option<Arc<NvmeCtrlr>> {
        self.0
            .lock()
            .ctrlrs
            .iter()
            .find(|c| c.name == name)
            .cloned()
    }

    /// Every attached controller, in attach order.
    pub fn all(&self) -> Vec<Arc<NvmeCtrlr>> {
        self.0.lock().ctrlrs.clone()
    }

    /// Whether a controller is attached (or being attached).
    pub fn is_empty(&self) -> bool {
        let r = self.0.lock();
        r.ctrlrs.is_empty() && r.pending.is_empty()
    }

    /// Reserves `name` and `traddr` for an attach.
    fn reserve(&self, name: &str, traddr: &str) -> Result<()> {
        let mut r = self.0.lock();
        if r.ctrlrs.iter().any(|c| c.name == name) || r.pending.iter().any(|p| p.0 == name) {
            return Err(Error::Exists(format!(
                "A controller named {name} already exists and multipath is disabled"
            )));
        }
        if r.ctrlrs.iter().any(|c| c.path_key() == traddr)
            || r.pending.iter().any(|p| p.1 == traddr)
        {
            return Err(Error::Exists(format!("{traddr} is attached already")));
        }
        r.pending.push((name.to_string(), traddr.to_string()));
        Ok(())
    }

    /// Ends the reservation of `name`, adding the controller if it came up.
    fn settle(&self, name: &str, ctrlr: Option<Arc<NvmeCtrlr>>) {
        let mut r = self.0.lock();
        r.pending.retain(|p| p.0 != name);
        if let Some(c) = ctrlr {
            r.ctrlrs.push(c);
        }
    }

    fn remove(&self, name: &str) -> Option<Arc<NvmeCtrlr>> {
        let mut r = self.0.lock();
        let i = r.ctrlrs.iter().position(|c| c.name == name)?;
        Some(r.ctrlrs.remove(i))
    }

    /// Removes `c` itself (not another controller attached since under
    /// its name); whether it was there.
    fn remove_exact(&self, c: &Arc<NvmeCtrlr>) -> bool {
        let mut r = self.0.lock();
        let before = r.ctrlrs.len();
        r.ctrlrs.retain(|x| !Arc::ptr_eq(x, c));
        r.ctrlrs.len() != before
    }

    fn take_all(&self) -> Vec<Arc<NvmeCtrlr>> {
        std::mem::take(&mut self.0.lock().ctrlrs)
    }
}

impl ChannelOwner for NvmeCtrlr {
    fn name(&self) -> &str {
        &self.name
    }
    fn device(&self) -> &IoDevice<CtrlrChannel> {
        &self.device
    }
    fn start_reset(&self, done: Option<ResetDone>) {
        match self.me.upgrade() {
            Some(c) => reset::start(&c, done),
            None => {
                if let Some(d) = done {
                    d(Err("controller gone".into()));
                }
            }
        }
    }
}

impl Resettable for NvmeCtrlr {
    fn reset_state(&self) -> &ResetState {
        &self.reset
    }
    fn app(&self) -> &ThreadHandle {
        &self.app
    }
    fn driver(&self) -> &Driver {
        &self.driver
    }
    fn reconnect(&self) -> (&Reconnect, &ReconnectState) {
        (&self.opts.reconnect, &self.reconnect)
    }
    fn give_up(&self) {
        if let Some(c) = self.me.upgrade() {
            c.surprise_removed();
        }
    }
    fn after(&self, delay: Duration, f: Box<dyn FnOnce() + Send>) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX).max(1);
        let mut f = Some(f);
        let _ = self.app.send_msg(move || {
            if let Ok(t) = Thread::try_current() {
                t.register_poller("bdev_nvme_reconnect", us, move |p| {
                    p.unregister();
                    if let Some(f) = f.take() {
                        f();
                    }
                    PollerStatus::Busy
                });
            }
        });
    }
}

impl NsOwner for NvmeCtrlr {
    fn bdev_json(&self, nsid: u32, can_share: bool) -> Value {
        NvmeCtrlr::bdev_json(self, nsid, can_share)
    }
}

impl NvmeCtrlr {
    /// Controller name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver's controller.
    pub fn driver(&self) -> &Arc<Controller<AnyTransport>> {
        &self.driver
    }

    /// Starts a controller reset (`bdev_nvme_reset_controller`); `done`
    /// gets its outcome on the app thread.
    pub fn reset(self: &Arc<Self>, done: ResetDone) {
        reset::start(self, Some(done));
    }

    /// Options applied to it.
    pub fn options(&self) -> &Applied {
        &self.opts
    }

    /// PCI address (or `emu:NAME`), or the IP address of a TCP controller.
    pub fn traddr(&self) -> &str {
        self.driver.transport().traddr()
    }

    /// What identifies its path for duplicate checks: the PCI address, or
    /// `IP:port:subnqn` for TCP.
    pub fn path_key(&self) -> String {
        match self.driver.transport().tcp() {
            Some(t) => tcp_key(t.options()),
            None => self.traddr().to_string(),
        }
    }

    /// Its bdevs' names.
    pub fn bdev_names(&self) -> Vec<String> {
        self.bdevs.lock().iter().map(|b| b.1.clone()).collect()
    }

    fn trid(&self) -> Value {
        match self.driver.transport().tcp() {
            Some(t) => {
                let o = t.options();
                json!({
                    "trtype": "TCP",
                    "adrfam": if t.addr().is_ipv6() { "IPv6" } else { "IPv4" },
                    "traddr": o.traddr,
                    "trsvcid": o.trsvcid,
                    "subnqn": o.subnqn,
                })
            }
            None => json!({"trtype": "PCIe", "traddr": self.traddr()}),
        }
    }

    fn host_json(&self) -> Value {
        let nqn = self.driver.transport().tcp().map_or("", |t| t.hostnqn());
        json!({"nqn": nqn, "addr": "", "svcid": "", "no_shn_notification": false})
    }

    /// `bdev_nvme_get_controllers` entry.
    pub fn info_json(&self) -> Value {
        let state = if self.removed.load(Ordering::Acquire) || self.detached.load(Ordering::Acquire)
        {
            "deleting"
        } else if self.reconnect.is_delayed() {
            "reconnect_is_delayed"
        } else if self.reset.running() {
            // Until every channel has reconnected (SPDK's `resetting`).
            "resetting"
        } else {
            self.driver.state().name()
        };
        json!({
            "name": self.name,
            "ctrlrs": [{
                "state": state,
                "trid": self.trid(),
                "cntlid": self.driver.identify().cntlid.get(),
                "host": self.host_json(),
            }]
        })
    }

    /// `driver_specific` of namespace `nsid`'s bdev.
    pub fn bdev_json(&self, nsid: u32, can_share: bool) -> Value {
        let id = self.driver.identify();
        let oacs = id.oacs.get();
        let vs = self.driver.version();
        // SPDK's order: pci_address (PCIe only) first.
        let mut nvme = serde_json::Map::new();
        if self.driver.transport().pcie().is_some() {
            nvme.insert("pci_address".into(), json!(self.traddr()));
        }
        let rest = json!({
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
        });
        if let Value::Object(m) = rest {
            nvme.extend(m);
        }
        json!({"nvme": [nvme], "mp_policy": "active_passive"})
    }

    /// The saved-config entry that attaches it again.
    pub fn config_json(&self) -> Value {
        let mut p = json!({
            "name": self.name,
            "trtype": self.driver.transport().trtype(),
            "traddr": self.traddr(),
            "prchk_reftag": false,
            "prchk_guard": false,
            "ctrlr_loss_timeout_sec": self.opts.reconnect.ctrlr_loss_timeout_sec,
            "reconnect_delay_sec": self.opts.reconnect.reconnect_delay_sec,
            "fast_io_fail_timeout_sec": self.opts.reconnect.fast_io_fail_timeout_sec,
        });
        if let Some(t) = self.driver.transport().tcp() {
            let o = t.options();
            p["adrfam"] = json!(if t.addr().is_ipv6() { "IPv6" } else { "IPv4" });
            p["trsvcid"] = json!(o.trsvcid);
            p["subnqn"] = json!(o.subnqn);
            p["hostnqn"] = json!(t.hostnqn());
            p["hdgst"] = json!(o.digests.header);
            p["ddgst"] = json!(o.digests.data);
        }
        json!({"method": "bdev_nvme_attach_controller", "params": p})
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
            p.uuid = ns_uuid(ns, &id.serial(), self.opts.generate_uuids);
            let owner: Arc<dyn NsOwner> = Arc::clone(self) as Arc<dyn NsOwner>;
            let bdev = NvmeBdev::new(owner, self.device.clone(), ns, &id, self.opts.enable_flush);
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
        tracing::warn!(ctrlr = %self.name, "controller removed (gone, or its connection lost for good)");
        self.driver.set_state(nvme_driver::State::Removed);
        let me = Arc::clone(self);
        self.device.for_each_channel(
            |ch| ch.inner.kill(),
            move || {
                // Once its bdevs are gone, it leaves the registry (as
                // `bdev_nvme_detach_controller` would): a later attach may
                // take its name and path again.
                let names = me.bdev_names();
                let left = Arc::new(AtomicUsize::new(names.len() + 1));
                let me2 = Arc::clone(&me);
                let step = Arc::new(move || {
                    if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                        me2.forget();
                    }
                });
                for name in names {
                    let s = Arc::clone(&step);
                    match me.mgr.get(&name) {
                        Some(b) => me.mgr.unregister(&b, move || s()),
                        None => s(),
                    }
                }
                step();
            },
        );
    }

    /// A removed controller whose bdevs are gone leaves its registry.
    fn forget(self: &Arc<Self>) {
        let Some(reg) = self.reg.upgrade() else {
            return;
        };
        if reg.remove_exact(self) {
            tracing::info!(ctrlr = %self.name, "removed controller forgotten");
            detach_ctrlr(Arc::clone(self), Box::new(|_| {}));
        }
    }

    fn admin_poll(self: &Arc<Self>) -> PollerStatus {
        if self.removed.load(Ordering::Acquire) {
            return PollerStatus::Idle;
        }
        match self.driver.poll_admin() {
            Health::Ok => {}
            Health::Fatal
                if self.driver.transport().is_fabrics()
                    && self.driver.state() == nvme_driver::State::Failed
                    && !self.reset.running() =>
            {
                // The connection is gone and reconnecting failed
                // (ctrlr_loss_timeout_sec 0): the controller goes.
                self.surprise_removed();
            }
            Health::Fatal => {
                if !self.reset.running() && !self.reconnect.is_delayed() {
                    tracing::warn!(ctrlr = %self.name, "controller fatal status: resetting");
                    reset::start(self, None);
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
    /// PCI address, or `emu:NAME` for an emulated controller (TCP: the
    /// IP address, as in `tcp`).
    pub traddr: String,
    /// I/O queues to ask for.
    pub num_io_queues: Option<u32>,
    /// NVMe/TCP: where and how to connect (`None`: PCIe).
    pub tcp: Option<TcpOptions>,
    /// Reconnect knobs of this controller (`None`: the module options').
    pub reconnect: Option<Reconnect>,
}

/// The duplicate-path key of a TCP controller.
fn tcp_key(o: &TcpOptions) -> String {
    format!("{}:{}:{}", o.traddr, o.trsvcid, o.subnqn)
}

impl AttachArgs {
    /// A PCIe (or emulated, `emu:NAME`) controller at `traddr` with the
    /// module's defaults.
    pub fn pcie(name: impl Into<String>, traddr: impl Into<String>) -> Self {
        AttachArgs {
            name: name.into(),
            traddr: traddr.into(),
            num_io_queues: None,
            tcp: None,
            reconnect: None,
        }
    }

    fn path_key(&self) -> String {
        match &self.tcp {
            Some(o) => tcp_key(o),
            None => self.traddr.clone(),
        }
    }
}

/// What an attach opens: a PCI function through VFIO, or an emulated
/// controller of the module instance.
#[derive(Debug, Clone)]
pub enum Target {
    /// A PCI NVMe function bound to vfio-pci, by address.
    Pci(String),
    /// An emulated controller.
    Emu(Arc<EmuController>),
    /// An NVMe/TCP controller.
    Tcp(TcpOptions),
}

/// The transport to `target` and, for an emulated controller, the
/// controller (kept alive).
type Opened = (AnyTransport, Option<Arc<EmuController>>);

fn open_transport(target: Target) -> nvme_driver::Result<Opened> {
    match target {
        Target::Emu(e) => {
            let f = e.function() as Arc<dyn PciFunction>;
            Ok((AnyTransport::Pcie(PcieTransport::new(f)?), Some(e)))
        }
        Target::Pci(bdf) => {
            let f = VfioFunction::open(&bdf)? as Arc<dyn PciFunction>;
            Ok((AnyTransport::Pcie(PcieTransport::new(f)?), None))
        }
        Target::Tcp(o) => Ok((AnyTransport::Tcp(TcpTransport::new(o)?), None)),
    }
}

/// Attaches the controller at `target` as `args.name` into `reg`, with
/// options `applied`; `done` gets the bdev names on the calling (app)
/// thread. The bring-up runs on a helper thread.
pub fn attach(
    reg: &Arc<Registry>,
    mgr: &BdevManager,
    args: AttachArgs,
    target: Target,
    applied: Applied,
    done: AttachDone,
) {
    let Ok(app) = Thread::try_current() else {
        done(Err(Error::InvalidArg(
            "attach outside a bdevkit thread".into(),
        )));
        return;
    };
    if let Err(e) = reg.reserve(&args.name, &args.path_key()) {
        done(Err(e));
        return;
    }
    let app = app.handle();
    let mgr = mgr.clone();
    let reg = Arc::clone(reg);
    let reg2 = Arc::clone(&reg);
    let name = args.name.clone();
    let spawned = std::thread::Builder::new()
        .name("nvme-attach".into())
        .spawn(move || {
            let r = open_transport(target).and_then(|(t, e)| {
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
                Ok((driver, e)) => {
                    let c = new_ctrlr(&reg, &mgr, args.name, driver, e, applied, app2);
                    reg.settle(&c.name, Some(Arc::clone(&c)));
                    c.start(done);
                }
                Err(err) => {
                    reg.settle(&args.name, None);
                    done(Err(Error::Driver(err)));
                }
            });
            if sent.is_err() {
                tracing::warn!("app thread gone before the attach finished");
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the attach thread");
        reg2.settle(&name, None);
    }
}

fn new_ctrlr(
    reg: &Arc<Registry>,
    mgr: &BdevManager,
    name: String,
    driver: Driver,
    emu: Option<Arc<EmuController>>,
    opts: Applied,
    app: ThreadHandle,
) -> Arc<NvmeCtrlr> {
    Arc::new_cyclic(|me: &Weak<NvmeCtrlr>| {
        let w = me.clone();
        let d = Arc::clone(&driver);
        let device = IoDevice::register(format!("nvme_ctrlr_{name}"), move || {
            let c = w.upgrade().ok_or("controller gone")?;
            CtrlrChannel::create(c as Arc<dyn ChannelOwner>, Arc::clone(&d), opts)
        });
        NvmeCtrlr {
            name,
            driver,
            device,
            opts,
            mgr: mgr.clone(),
            app,
            bdevs: Mutex::new(Vec::new()),
            reset: ResetState::default(),
            reconnect: ReconnectState::default(),
            removed: AtomicBool::new(false),
            detached: AtomicBool::new(false),
            me: me.clone(),
            reg: Arc::downgrade(reg),
            _emu: emu,
        }
    })
}

impl NvmeCtrlr {
    /// After bring-up, on the app thread: event handler, admin poller,
    /// bdevs; `done` once they are examined.
    fn start(self: &Arc<Self>, done: AttachDone) {
        let w = Arc::downgrade(self);
        let app = self.app.clone();
        self.driver.set_event_handler(Box::new(move |_ev| {
            let w = w.clone();
            let _ = app.send_msg(move || {
                if let Some(c) = w.upgrade() {
                    c.namespaces_changed();
                }
            });
        }));
        if let Ok(t) = Thread::try_current() {
            let w = Arc::downgrade(self);
            t.register_poller(
                "bdev_nvme_adminq",
                self.opts.adminq_poll_period_us,
                move |p| match w.upgrade() {
                    Some(c) if !c.detached.load(Ordering::Acquire) => c.admin_poll(),
                    _ => {
                        p.unregister();
                        PollerStatus::Idle
                    }
                },
            );
            if self.driver.transport().is_fabrics() {
                // Interrupt mode: the admin queue's socket wakes the thread.
                let w = Arc::downgrade(self);
                wake::admin_poller(&t, move || {
                    let c = w
                        .upgrade()
                        .filter(|c| !c.detached.load(Ordering::Acquire))?;
                    c.admin_poll();
                    Some(c.driver.admin_wake())
                });
            }
        }
        let ns = self.driver.namespaces();
        let names = self.add_bdevs(&ns);
        tracing::info!(ctrlr = %self.name, bdevs = ?names, "NVMe controller attached");
        self.mgr.wait_for_examine(move || done(Ok(names)));
    }

    /// Shuts the controller down on a helper thread (unless it is gone),
    /// then runs `done` on the app thread.
    fn shutdown(self: Arc<Self>, done: impl FnOnce() + Send + 'static) {
        let removed = self.removed.load(Ordering::Acquire);
        let app = self.app.clone();
        let spawned = std::thread::Builder::new()
            .name("nvme-detach".into())
            .spawn(move || {
                if !removed {
                    if let Err(e) = self.driver.shutdown() {
                        tracing::warn!(ctrlr = %self.name, error = %e, "shutdown failed");
                    }
                }
                drop(self);
                let _ = app.send_msg(done);
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the detach thread");
        }
    }
}

/// Detaches controller `name` of `reg`: its bdevs are unregistered, its
/// queues deleted, and the controller shut down; `done` runs on the
/// calling thread.
pub fn detach(reg: &Registry, name: &str, done: Box<dyn FnOnce(Result<()>) + Send>) {
    let Some(c) = reg.remove(name) else {
        done(Err(Error::NotFound(name.to_string())));
        return;
    };
    detach_ctrlr(c, done);
}

/// Detaches `c`, which left its registry already.
fn detach_ctrlr(c: Arc<NvmeCtrlr>, done: Box<dyn FnOnce(Result<()>) + Send>) {
    c.detached.store(true, Ordering::Release);
    let names = c.bdev_names();
    let left = Arc::new(AtomicUsize::new(names.len() + 1));
    let c2 = Arc::clone(&c);
    let finish = Arc::new(Mutex::new(Some(done)));
    let step = move || {
        if left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let c3 = Arc::clone(&c2);
        let finish = Arc::clone(&finish);
        c2.device.unregister(move || {
            c3.shutdown(move || {
                if let Some(d) = finish.lock().take() {
                    d(Ok(()));
                }
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

/// Module fini (every bdev is gone): forgets every controller of `reg`
/// and shuts each down, waiting for it (bounded by CAP.TO: the process is
/// exiting, and the devices should be quiet when it does).
pub fn shutdown_all(reg: &Registry) {
    for c in reg.take_all() {
        c.detached.store(true, Ordering::Release);
        if c.removed.load(Ordering::Acquire) {
            continue;
        }
        if let Err(e) = c.driver.shutdown() {
            tracing::warn!(ctrlr = %c.name, error = %e, "shutdown failed");
        }
    }
}
