//! The module instance ([`NvmeModule`], one per bdev manager): its
//! controllers, options, hotplug state and emulated controllers, and the
//! public surface that the RPC handlers and tests both call. Nothing of
//! this is process-wide: two managers in one process are independent.

use std::sync::Arc;

use bdevkit::bdev::module::{BdevManager, BdevModule};
use bdevkit_nvme_driver::emu::{EmuController, EmuOptions};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::ctrlr::{self, AttachArgs, AttachDone, NvmeCtrlr, Registry, Target};
use crate::discovery::Discoveries;
use crate::emu::{EmuCreateParams, EmuRegistry};
use crate::hotplug::Hotplug;
use crate::multipath::{NsPaths, Policy};
use crate::options::{self, HotplugParams, NvmeOptions};
use crate::paths::{self, PathSelector, Prepared};
use crate::{Error, Result, MODULE};

/// The nvme module: registered with a manager by [`crate::register`].
#[derive(Debug, Default)]
pub struct NvmeModule {
    ctrlrs: Arc<Registry>,
    options: Mutex<NvmeOptions>,
    hotplug: Arc<Hotplug>,
    emus: EmuRegistry,
    discoveries: Arc<Discoveries>,
}

impl BdevModule for NvmeModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    /// SPDK's order: options, one attach per controller path (but those
    /// of discovery services), the multipath policies, the discovery
    /// services, hotplug last.
    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        let mut v = vec![options::config_entry(&self.options.lock())];
        let d = &self.discoveries;
        v.extend(paths::config_json(&self.ctrlrs, |name| d.owns(name)));
        v.extend(d.config_json());
        let h = self.hotplug.params();
        v.push(json!({"method": "bdev_nvme_set_hotplug",
            "params": {"period_us": h.period_us, "enable": h.enable}}));
        v
    }

    /// Every bdev is gone: hotplug stops attaching, the controllers are
    /// shut down, the emulated controllers stopped.
    fn fini(&self, _mgr: &BdevManager) {
        self.hotplug.stop();
        self.discoveries.shutdown_all();
        ctrlr::shutdown_all(&self.ctrlrs);
        self.emus.clear();
    }
}

impl NvmeModule {
    /// Its discovery services.
    pub(crate) fn discoveries(&self) -> &Arc<Discoveries> {
        &self.discoveries
    }

    /// The options a controller attached now gets.
    pub(crate) fn applied(&self) -> options::Applied {
        self.options.lock().applied()
    }
}

/// The nvme module registered with `mgr`.
///
/// # Errors
/// [`Error::NotRegistered`] when [`crate::register`] was not called for
/// `mgr`.
pub fn module(mgr: &BdevManager) -> Result<Arc<NvmeModule>> {
    mgr.module_as::<NvmeModule>(MODULE)
        .ok_or(Error::NotRegistered)
}

/// Attaches the controller at `args.traddr` (a PCI address, or `emu:NAME`
/// for an emulated controller of this manager) with the current options;
/// `done` gets the bdev names on the calling thread (an app thread).
/// Under an existing name it is another path (`args.multipath`).
pub fn attach(mgr: &BdevManager, args: AttachArgs, done: AttachDone) {
    let m = match module(mgr) {
        Ok(m) => m,
        Err(e) => return done(Err(e)),
    };
    let args = match paths::prepare(&m.ctrlrs, args) {
        Ok(Prepared::Attach(a)) => *a,
        Ok(Prepared::Added(names)) => return done(Ok(names)),
        Err(e) => return done(Err(e)),
    };
    let mut applied = m.options.lock().applied();
    if let Some(r) = args.reconnect {
        if let Err(e) = r.validate() {
            return done(Err(Error::InvalidArg(e)));
        }
        applied.reconnect = r;
    }
    let target = if let Some(o) = &args.tcp {
        let mut o = o.clone();
        o.keep_alive_timeout_ms = applied.keep_alive_timeout_ms;
        Target::Tcp(o)
    } else if args.traddr.starts_with("emu:") {
        match m.emus.lookup(&args.traddr) {
            Some(e) => Target::Emu(e),
            None => {
                return done(Err(Error::Driver(bdevkit_nvme_driver::Error::NoDevice(
                    args.traddr.clone(),
                ))))
            }
        }
    } else {
        Target::Pci(args.traddr.clone())
    };
    ctrlr::attach(&m.ctrlrs, mgr, args, target, applied, done);
}

/// Detaches controller `name`; `done` runs on the calling thread.
pub fn detach(mgr: &BdevManager, name: &str, done: Box<dyn FnOnce(Result<()>) + Send>) {
    detach_paths(mgr, name, &PathSelector::default(), done);
}

/// Detaches the paths of controller `name` that `sel` matches (every
/// path when it is empty); `done` runs on the calling thread.
pub fn detach_paths(
    mgr: &BdevManager,
    name: &str,
    sel: &PathSelector,
    done: Box<dyn FnOnce(Result<()>) + Send>,
) {
    match module(mgr) {
        Ok(m) => paths::detach(&m.ctrlrs, name, sel, done),
        Err(e) => done(Err(e)),
    }
}

/// `bdev_nvme_get_controllers` entries: controller `name`'s (`None`
/// when there is none), or every controller's.
#[must_use]
pub fn controllers_json(mgr: &BdevManager, name: Option<&str>) -> Option<Vec<Value>> {
    let m = module(mgr).ok()?;
    match name {
        Some(n) => paths::info_json(&m.ctrlrs, n).map(|v| vec![v]),
        None => Some(paths::all_info_json(&m.ctrlrs)),
    }
}

/// The paths of NVMe bdev `bdev`.
fn ns_paths(mgr: &BdevManager, bdev: &str) -> Option<Arc<NsPaths>> {
    let m = module(mgr).ok()?;
    m.ctrlrs.all().iter().find_map(|c| {
        c.bdevs
            .lock()
            .iter()
            .find(|b| b.1 == bdev)
            .map(|b| Arc::clone(&b.2))
    })
}

/// Every NVMe bdev name with its paths, in attach order.
fn all_ns_paths(mgr: &BdevManager) -> Vec<(String, Arc<NsPaths>)> {
    let mut out: Vec<(String, Arc<NsPaths>)> = Vec::new();
    for c in controllers(mgr) {
        for b in c.bdevs.lock().iter() {
            if !out.iter().any(|x| x.0 == b.1) {
                out.push((b.1.clone(), Arc::clone(&b.2)));
            }
        }
    }
    out
}

/// `bdev_nvme_set_multipath_policy`: bdev `bdev`'s policy; `done` once
/// every channel uses it.
///
/// # Errors
/// [`Error::NotFound`] for no such NVMe bdev.
pub fn set_multipath_policy(
    mgr: &BdevManager,
    bdev: &str,
    p: Policy,
    done: impl FnOnce() + Send + 'static,
) -> Result<()> {
    let paths = ns_paths(mgr, bdev).ok_or_else(|| Error::NotFound(bdev.to_string()))?;
    paths.set_policy(p, done);
    Ok(())
}

/// Bdev `bdev`'s multipath policy.
#[must_use]
pub fn multipath_policy(mgr: &BdevManager, bdev: &str) -> Option<Policy> {
    ns_paths(mgr, bdev).map(|p| p.policy())
}

/// `bdev_nvme_get_io_paths`: per thread, the paths of bdev `bdev` (every
/// NVMe bdev when `None`); `done` gets `{"poll_groups": [...]}` on the
/// calling thread.
///
/// # Errors
/// [`Error::NotFound`] for no such NVMe bdev.
pub fn io_paths_json(
    mgr: &BdevManager,
    bdev: Option<&str>,
    done: impl FnOnce(Value) + Send + 'static,
) -> Result<()> {
    let list = match bdev {
        Some(b) => vec![(
            b.to_string(),
            ns_paths(mgr, b).ok_or_else(|| Error::NotFound(b.to_string()))?,
        )],
        None => all_ns_paths(mgr),
    };
    let acc: Groups = Arc::new(Mutex::new(Vec::new()));
    walk_io_paths(list, acc, Box::new(done));
    Ok(())
}

type Groups = Arc<Mutex<Vec<(String, Vec<Value>)>>>;

fn walk_io_paths(
    mut list: Vec<(String, Arc<NsPaths>)>,
    acc: Groups,
    done: Box<dyn FnOnce(Value) + Send>,
) {
    let Some((name, p)) = list.pop() else {
        let groups: Vec<Value> = std::mem::take(&mut *acc.lock())
            .into_iter()
            .map(|(t, paths)| json!({"thread": t, "io_paths": paths}))
            .collect();
        return done(json!({"poll_groups": groups}));
    };
    let (a2, p2) = (Arc::clone(&acc), Arc::clone(&p));
    p.device().for_each_channel(
        move |ch| {
            let v = p2.io_paths_json(&name, ch);
            let t = NsPaths::thread_name();
            let mut a = a2.lock();
            match a.iter_mut().find(|g| g.0 == t) {
                Some(g) => g.1.extend(v),
                None => a.push((t, v)),
            }
        },
        move || walk_io_paths(list, acc, done),
    );
}

/// I/Os each path of bdev `bdev` was sent, as (path id, count), summed
/// over the threads (tests, diagnostics); `done` on the calling thread.
///
/// # Errors
/// [`Error::NotFound`] for no such NVMe bdev.
pub fn path_io_counts(
    mgr: &BdevManager,
    bdev: &str,
    done: impl FnOnce(Vec<(u64, u64)>) + Send + 'static,
) -> Result<()> {
    let paths = ns_paths(mgr, bdev).ok_or_else(|| Error::NotFound(bdev.to_string()))?;
    paths.submitted(done);
    Ok(())
}

/// Every path of controller `name`, in attach order.
#[must_use]
pub fn controller_paths(mgr: &BdevManager, name: &str) -> Vec<Arc<NvmeCtrlr>> {
    module(mgr)
        .map(|m| m.ctrlrs.paths(name))
        .unwrap_or_default()
}

/// The attached controller `name` (its first path).
#[must_use]
pub fn controller(mgr: &BdevManager, name: &str) -> Option<Arc<NvmeCtrlr>> {
    module(mgr).ok()?.ctrlrs.get(name)
}

/// Every attached controller path, in attach order.
#[must_use]
pub fn controllers(mgr: &BdevManager) -> Vec<Arc<NvmeCtrlr>> {
    module(mgr).map(|m| m.ctrlrs.all()).unwrap_or_default()
}

/// The current `bdev_nvme_set_options` values.
///
/// # Errors
/// [`Error::NotRegistered`].
pub fn options(mgr: &BdevManager) -> Result<NvmeOptions> {
    Ok(module(mgr)?.options.lock().clone())
}

/// Replaces the options (applied by controllers attached afterwards).
///
/// # Errors
/// [`Error::NotPermitted`] while controllers are attached (as SPDK),
/// [`Error::InvalidArg`] for values SPDK refuses.
pub fn set_options(mgr: &BdevManager, o: NvmeOptions) -> Result<()> {
    let m = module(mgr)?;
    if !m.ctrlrs.is_empty() {
        return Err(Error::NotPermitted("controllers are attached".into()));
    }
    o.validate().map_err(Error::InvalidArg)?;
    let mut o = o;
    // Saved as SPDK writes it (a `selector` only for active_active, ...).
    o.multipath_opts = options::MultipathOpts::of(&o.default_policy());
    *m.options.lock() = o;
    Ok(())
}

/// `bdev_nvme_set_hotplug` (on a bdevkit thread: the poller lives there).
///
/// # Errors
/// [`Error::NotRegistered`].
pub fn set_hotplug(mgr: &BdevManager, p: HotplugParams) -> Result<()> {
    let m = module(mgr)?;
    m.hotplug.set(mgr, &m.ctrlrs, p, attach);
    Ok(())
}

/// Starts emulated controller `name` with a thread of its own (attach it
/// at `emu:NAME`).
///
/// # Errors
/// [`Error::Exists`] for a name in use, [`Error::Driver`] when its thread
/// cannot start.
pub fn emu_start(mgr: &BdevManager, name: &str, opts: EmuOptions) -> Result<Arc<EmuController>> {
    module(mgr)?.emus.create(name, opts, false)
}

/// Starts emulated controller `name` without a thread: it runs inside the
/// driver's register and doorbell writes, so that nothing is handed
/// between threads (quick and steady tests on a busy machine).
///
/// # Errors
/// As [`emu_start`].
pub fn emu_start_inline(
    mgr: &BdevManager,
    name: &str,
    opts: EmuOptions,
) -> Result<Arc<EmuController>> {
    module(mgr)?.emus.create(name, opts, true)
}

/// `bdev_nvme_emu_create`: checks `p`, then [`emu_start`] (or
/// [`emu_start_inline`]).
///
/// # Errors
/// As [`emu_start`], and [`Error::InvalidArg`] for bad params.
pub fn emu_create(mgr: &BdevManager, p: &EmuCreateParams) -> Result<Arc<EmuController>> {
    module(mgr)?.emus.create(&p.name, p.to_options()?, p.inline)
}

/// The emulated controller `name` (`NAME` or `emu:NAME`), for fault
/// injection.
#[must_use]
pub fn emu(mgr: &BdevManager, name: &str) -> Option<Arc<EmuController>> {
    module(mgr).ok()?.emus.lookup(name)
}

/// `bdev_nvme_emu_delete`: forgets emulated controller `name`; it stops
/// once no attached controller uses it.
///
/// # Errors
/// [`Error::NotFound`].
pub fn emu_delete(mgr: &BdevManager, name: &str) -> Result<()> {
    if module(mgr)?.emus.destroy(name) {
        Ok(())
    } else {
        Err(Error::NotFound(name.to_string()))
    }
}
