//! Attached controllers: the registry (one per module instance), attach
//! (bring-up on a helper thread, then bdevs per namespace on the app
//! thread), the admin poller (completions, CSTS.CFS → reset, all-ones
//! registers → hot remove), namespace changes, detach, and the JSON of
//! `bdev_nvme_get_controllers` and `driver_specific.nvme`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bdevkit::bdev::module::BdevManager;
use bdevkit::thread::{IoDevice, PollerStatus, Thread, ThreadHandle};
use bdevkit_nvme_driver::bus::PciFunction;
use bdevkit_nvme_driver::emu::EmuController;
use bdevkit_nvme_driver::vfio::VfioFunction;
use bdevkit_nvme_driver::{
    AnyTransport, Controller, ControllerOptions, Health, PcieTransport, TcpOptions, TcpTransport,
    Transport,
};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::channel::{ChannelOwner, CtrlrChannel, Driver, ResetDone};
use crate::multipath::{NsPaths, PathOwner, Policy};
use crate::options::Applied;
use crate::reconnect::{Reconnect, ReconnectState};
use crate::reset::{self, ResetState, Resettable};
use crate::wake;
use crate::{Error, Result};

/// Called with an attach's bdev names (or its error), on the app thread.
pub type AttachDone = Box<dyn FnOnce(Result<Vec<String>>) + Send>;

/// How a second attach under an existing name is taken
/// (`bdev_nvme_attach_controller` `multipath`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MultipathMode {
    /// Refused.
    Disable,
    /// An alternate address of the same controller: one connection at a
    /// time, the next address after a connection loss.
    Failover,
    /// Another controller path: its namespaces join the bdevs of the
    /// name's first controller (SPDK's default).
    #[default]
    Multipath,
}

impl MultipathMode {
    /// From SPDK's names.
    pub fn parse(s: &str) -> Option<MultipathMode> {
        match s {
            "disable" => Some(MultipathMode::Disable),
            "failover" => Some(MultipathMode::Failover),
            "multipath" => Some(MultipathMode::Multipath),
            _ => None,
        }
    }
}

/// Path ids, unique in the process.
static NEXT_PATH_ID: AtomicU64 = AtomicU64::new(1);

/// One attached controller: one path of the bdevs of its name.
pub struct NvmeCtrlr {
    pub(crate) name: String,
    pub(crate) id: u64,
    driver: Driver,
    pub(crate) device: IoDevice<CtrlrChannel>,
    opts: Applied,
    pub(crate) mgr: BdevManager,
    app: ThreadHandle,
    /// Its namespaces' bdevs: namespace id, bdev name, the bdev's paths.
    pub(crate) bdevs: Mutex<Vec<(u32, String, Arc<NsPaths>)>>,
    /// The policy its new bdevs get (attach `multipath_opts`).
    pub(crate) policy: Policy,
    /// The module's controllers (to find the other paths of its name).
    pub(crate) reg: Weak<Registry>,
    reset: ResetState,
    reconnect: ReconnectState,
    pub(crate) removed: AtomicBool,
    pub(crate) detached: AtomicBool,
    me: Weak<NvmeCtrlr>,
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
    /// The attached controller `name` (its first path).
    pub fn get(&self, name: &str) -> Option<Arc<NvmeCtrlr>> {
        self.0
            .lock()
            .ctrlrs
            .iter()
            .find(|c| c.name == name)
            .cloned()
    }

    /// Every attached controller (every path), in attach order.
    pub fn all(&self) -> Vec<Arc<NvmeCtrlr>> {
        self.0.lock().ctrlrs.clone()
    }

    /// The paths of controller `name`, in attach order.
    pub fn paths(&self, name: &str) -> Vec<Arc<NvmeCtrlr>> {
        let r = self.0.lock();
        r.ctrlrs
            .iter()
            .filter(|c| c.name == name)
            .cloned()
            .collect()
    }

    /// Whether a controller is attached (or being attached).
    pub fn is_empty(&self) -> bool {
        let r = self.0.lock();
        r.ctrlrs.is_empty() && r.pending.is_empty()
    }

    /// Reserves `name` and path `key` for an attach; with `multipath`
    /// the name may have paths already (the caller checked them).
    fn reserve(&self, name: &str, key: &str, multipath: bool) -> Result<()> {
        let mut r = self.0.lock();
        if r.pending.iter().any(|p| p.0 == name) {
            return Err(Error::Exists(format!(
                "A controller named {name} is being attached"
            )));
        }
        if !multipath && r.ctrlrs.iter().any(|c| c.name == name) {
            return Err(Error::Exists(format!(
                "A controller named {name} already exists and multipath is disabled"
            )));
        }
        if r.ctrlrs
            .iter()
            .any(|c| c.path_keys().iter().any(|k| k == key))
            || r.pending.iter().any(|p| p.1 == key)
        {
            return Err(Error::Exists(format!(
                "A controller named {name} already exists with the specified network path"
            )));
        }
        r.pending.push((name.to_string(), key.to_string()));
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

    /// Forgets path `id`.
    pub(crate) fn remove_path(&self, id: u64) -> Option<Arc<NvmeCtrlr>> {
        let mut r = self.0.lock();
        let i = r.ctrlrs.iter().position(|c| c.id == id)?;
        Some(r.ctrlrs.remove(i))
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
    /// Channels of its bdevs made while it was down lack it: they get it.
    fn reset_succeeded(&self) {
        for (_, _, paths) in self.bdevs.lock().iter() {
            paths.rejoin(self.id);
        }
    }
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
        crate::timer::after(&self.app, "bdev_nvme_reconnect", delay, f);
    }
}

impl PathOwner for NvmeCtrlr {
    fn path_json(&self, nsid: u32, can_share: bool) -> Value {
        NvmeCtrlr::path_json(self, nsid, can_share)
    }
    fn cntlid(&self) -> u16 {
        self.driver.identify().cntlid.get()
    }
    fn trid(&self) -> Value {
        NvmeCtrlr::trid(self)
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

    /// What identifies its paths for duplicate checks: the PCI address, or
    /// `IP:port:subnqn` for each TCP address (failover alternates too).
    pub fn path_keys(&self) -> Vec<String> {
        match self.driver.transport().tcp() {
            Some(t) => t
                .paths()
                .iter()
                .map(|p| tcp_key(&p.traddr, &p.trsvcid, &t.options().subnqn))
                .collect(),
            None => vec![self.traddr().to_string()],
        }
    }

    /// Path id (unique in the process).
    pub fn path_id(&self) -> u64 {
        self.id
    }

    /// Its bdevs' names.
    pub fn bdev_names(&self) -> Vec<String> {
        self.bdevs.lock().iter().map(|b| b.1.clone()).collect()
    }

    /// The TCP trids of its addresses, the current one first.
    fn tcp_trids(&self) -> Vec<Value> {
        let Some(t) = self.driver.transport().tcp() else {
            return Vec::new();
        };
        let subnqn = &t.options().subnqn;
        t.paths()
            .iter()
            .map(|p| {
                json!({
                    "trtype": "TCP",
                    "adrfam": if p.addr.is_ipv6() { "IPv6" } else { "IPv4" },
                    "traddr": p.traddr,
                    "trsvcid": p.trsvcid,
                    "subnqn": subnqn,
                })
            })
            .collect()
    }

    /// Its transport id (the current address).
    pub(crate) fn trid(&self) -> Value {
        match self.tcp_trids().into_iter().next() {
            Some(t) => t,
            None => json!({"trtype": "PCIe", "traddr": self.traddr()}),
        }
    }

    fn host_json(&self) -> Value {
        let nqn = self.driver.transport().tcp().map_or("", |t| t.hostnqn());
        json!({"nqn": nqn, "addr": "", "svcid": "", "no_shn_notification": false})
    }

    /// Its element of the `ctrlrs` array of `bdev_nvme_get_controllers`.
    pub fn path_info_json(&self) -> Value {
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
        let mut trids = self.tcp_trids();
        let mut out = json!({"state": state, "trid": self.trid()});
        if trids.len() > 1 {
            out["alternate_trids"] = Value::Array(trids.split_off(1));
        }
        out["cntlid"] = json!(self.driver.identify().cntlid.get());
        out["host"] = self.host_json();
        out
    }

    /// `bdev_nvme_get_controllers` entry of this path alone (see
    /// `paths::info_json` for every path of a name).
    pub fn info_json(&self) -> Value {
        json!({"name": self.name, "ctrlrs": [self.path_info_json()]})
    }

    /// Its entry of namespace `nsid`'s bdev's `driver_specific.nvme`.
    pub fn path_json(&self, nsid: u32, can_share: bool) -> Value {
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
        Value::Object(nvme)
    }

    /// The saved-config entry that attaches it again (its first address;
    /// see `paths::config_json` for every path).
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
            if let Some((name, _)) = o.psk.as_deref() {
                p["psk"] = json!(name);
            }
            if let Some(d) = t.dhchap() {
                p["dhchap_key"] = json!(d.key.0);
                if let Some((name, _)) = &d.ctrlr_key {
                    p["dhchap_ctrlr_key"] = json!(name);
                }
            }
            p["hdgst"] = json!(o.digests.header);
            p["ddgst"] = json!(o.digests.data);
            p["fabrics_connect_timeout_us"] =
                json!(u64::try_from(o.connect_timeout.as_micros()).unwrap_or(u64::MAX));
        }
        p["num_io_queues"] = json!(self.driver.options().num_io_queues);
        p["multipath_opts"] = json!(crate::options::MultipathOpts::of(&self.policy));
        json!({"method": "bdev_nvme_attach_controller", "params": p})
    }

    /// The device is gone: fail all I/O, hot-remove the bdevs.
    fn surprise_removed(self: &Arc<Self>) {
        if self.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(ctrlr = %self.name, "controller removed (gone, or its connection lost for good)");
        if self.driver.transport().uses_dma() {
            // Whatever is left of it stops touching host memory before
            // its queues' requests go back to their owners (quick: a
            // removed device answers all ones).
            let _ = self.driver.disable();
        }
        self.driver.set_state(bdevkit_nvme_driver::State::Removed);
        let me = Arc::clone(self);
        // I/O in flight moves to the other paths of its bdev, if any;
        // once it left its bdevs (the last path takes them with it), it
        // leaves the registry as `bdev_nvme_detach_controller` would: a
        // later attach may take its name and address again.
        self.device.for_each_channel(
            |ch| ch.inner.kill(),
            move || {
                let me2 = Arc::clone(&me);
                me.leave_bdevs(move || {
                    // Not there: detached (or the module finished) meanwhile,
                    // and that shuts it down.
                    let reg = me2.reg.upgrade();
                    if reg.and_then(|r| r.remove_path(me2.id)).is_none() {
                        return;
                    }
                    tracing::info!(ctrlr = %me2.name, "removed controller forgotten");
                    me2.detached.store(true, Ordering::Release);
                    let me3 = Arc::clone(&me2);
                    me2.device.unregister(move || me3.shutdown(|| {}));
                });
            },
        );
    }

    fn admin_poll(self: &Arc<Self>) -> PollerStatus {
        if self.removed.load(Ordering::Acquire) {
            return PollerStatus::Idle;
        }
        match self.driver.poll_admin() {
            Health::Ok => {}
            Health::Fatal
                if self.driver.transport().is_fabrics()
                    && self.driver.state() == bdevkit_nvme_driver::State::Failed
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
    /// What an existing name means (`None`: SPDK's default, multipath).
    pub multipath: Option<MultipathMode>,
    /// The policy of its bdevs (attach `multipath_opts`).
    pub policy: Option<Policy>,
}

/// The duplicate-path key of a TCP address.
fn tcp_key(traddr: &str, trsvcid: &str, subnqn: &str) -> String {
    format!("{traddr}:{trsvcid}:{subnqn}")
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
            multipath: None,
            policy: None,
        }
    }

    pub(crate) fn path_key(&self) -> String {
        match &self.tcp {
            Some(o) => tcp_key(&o.traddr, &o.trsvcid, &o.subnqn),
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

fn open_transport(target: Target) -> bdevkit_nvme_driver::Result<Opened> {
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
    let multipath = args.multipath.unwrap_or_default() == MultipathMode::Multipath;
    if let Err(e) = reg.reserve(&args.name, &args.path_key(), multipath) {
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
                    let policy = args.policy.unwrap_or_default();
                    let ctx = NewCtrlr {
                        mgr: &mgr,
                        reg: Arc::downgrade(&reg),
                        policy,
                        emu: e,
                        opts: applied,
                        app: app2,
                    };
                    let c = new_ctrlr(ctx, args.name, driver);
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

/// What a new controller is made with besides its name and driver.
struct NewCtrlr<'a> {
    mgr: &'a BdevManager,
    reg: Weak<Registry>,
    policy: Policy,
    emu: Option<Arc<EmuController>>,
    opts: Applied,
    app: ThreadHandle,
}

fn new_ctrlr(ctx: NewCtrlr<'_>, name: String, driver: Driver) -> Arc<NvmeCtrlr> {
    let NewCtrlr {
        mgr,
        reg,
        policy,
        emu,
        opts,
        app,
    } = ctx;
    Arc::new_cyclic(|me: &Weak<NvmeCtrlr>| {
        let w = me.clone();
        let d = Arc::clone(&driver);
        let device = IoDevice::register(format!("nvme_ctrlr_{name}"), move || {
            let c = w.upgrade().ok_or("controller gone")?;
            CtrlrChannel::create(c as Arc<dyn ChannelOwner>, Arc::clone(&d), opts)
        });
        NvmeCtrlr {
            name,
            id: NEXT_PATH_ID.fetch_add(1, Ordering::Relaxed),
            driver,
            device,
            opts,
            mgr: mgr.clone(),
            app,
            bdevs: Mutex::new(Vec::new()),
            policy,
            reg,
            reset: ResetState::default(),
            reconnect: ReconnectState::default(),
            removed: AtomicBool::new(false),
            detached: AtomicBool::new(false),
            me: me.clone(),
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
    pub(crate) fn shutdown(self: Arc<Self>, done: impl FnOnce() + Send + 'static) {
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
