//! The paths of a controller name (SPDK's `nvme_bdev_ctrlr`): a second
//! attach under an existing name (`multipath` disable / failover /
//! multipath), detaching one path by its transport id, and the JSON of
//! `bdev_nvme_get_controllers` and `save_config` over every path.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::ctrlr::{AttachArgs, MultipathMode, NvmeCtrlr, Registry};
use crate::{Error, Result};

/// What to do with an attach under a name.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// Attach it (a new name, or another multipath path).
    Attach(Box<AttachArgs>),
    /// Done: an alternate address of the name's controller (failover);
    /// its bdev names.
    Added(Vec<String>),
}

/// SPDK's checks of an attach under name `args.name` against its paths,
/// and a failover address added at once.
pub(crate) fn prepare(reg: &Registry, mut args: AttachArgs) -> Result<Prepared> {
    let paths = reg.paths(&args.name);
    let Some(first) = paths.first() else {
        return Ok(Prepared::Attach(Box::new(args)));
    };
    let name = args.name.clone();
    let mode = args.multipath.unwrap_or_default();
    if mode == MultipathMode::Disable {
        return Err(Error::Exists(format!(
            "A controller named {name} already exists and multipath is disabled"
        )));
    }
    let key = args.path_key();
    if reg.all().iter().any(|c| c.path_keys().contains(&key)) {
        return Err(Error::Exists(format!(
            "A controller named {name} already exists with the specified network path"
        )));
    }
    let (Some(o), Some(t)) = (args.tcp.as_mut(), first.driver().transport().tcp()) else {
        return Err(Error::InvalidArg(format!(
            "controller {name}: more paths need NVMe/TCP"
        )));
    };
    if o.subnqn != t.options().subnqn {
        return Err(Error::InvalidArg(format!(
            "controller {name}: subnqn {} differs from its other paths'",
            o.subnqn
        )));
    }
    match &o.hostnqn {
        Some(h) if h != t.hostnqn() => {
            return Err(Error::InvalidArg(format!(
                "controller {name}: hostnqn {h} differs from its other paths'"
            )))
        }
        Some(_) => {}
        None => o.hostnqn = Some(t.hostnqn().to_string()),
    }
    if mode == MultipathMode::Failover {
        t.add_path(&o.traddr, &o.trsvcid).map_err(Error::Driver)?;
        tracing::info!(ctrlr = %name, traddr = %o.traddr, trsvcid = %o.trsvcid, "failover address added");
        return Ok(Prepared::Added(first.bdev_names()));
    }
    Ok(Prepared::Attach(Box::new(args)))
}

/// A transport id to match paths with (`bdev_nvme_detach_controller`'s
/// optional keys; what is not given matches everything).
#[derive(Debug, Clone, Default)]
pub struct PathSelector {
    /// `PCIe` or `TCP` (case-insensitive).
    pub trtype: Option<String>,
    /// Address.
    pub traddr: Option<String>,
    /// `IPv4` / `IPv6` (case-insensitive).
    pub adrfam: Option<String>,
    /// Port.
    pub trsvcid: Option<String>,
    /// Subsystem NQN.
    pub subnqn: Option<String>,
    /// Host address (never set here: it matches only when empty).
    pub hostaddr: Option<String>,
    /// Host port (as `hostaddr`).
    pub hostsvcid: Option<String>,
}

impl PathSelector {
    /// Whether nothing is given (the whole controller).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        [
            &self.trtype,
            &self.traddr,
            &self.adrfam,
            &self.trsvcid,
            &self.subnqn,
            &self.hostaddr,
            &self.hostsvcid,
        ]
        .iter()
        .all(|x| x.is_none())
    }

    /// Whether trid `t` (a `trid` JSON object) matches.
    fn matches(&self, t: &Value) -> bool {
        let field = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("");
        let eq = |want: &Option<String>, k: &str, ci: bool| {
            want.as_deref().is_none_or(|w| {
                if ci {
                    w.eq_ignore_ascii_case(field(k))
                } else {
                    w == field(k)
                }
            })
        };
        eq(&self.trtype, "trtype", true)
            && eq(&self.traddr, "traddr", false)
            && eq(&self.adrfam, "adrfam", true)
            && eq(&self.trsvcid, "trsvcid", false)
            && eq(&self.subnqn, "subnqn", false)
            && self.hostaddr.as_deref().is_none_or(str::is_empty)
            && self.hostsvcid.as_deref().is_none_or(str::is_empty)
    }
}

/// The trids of path `c`: every address (current first).
fn trids(c: &NvmeCtrlr) -> Vec<Value> {
    let info = c.path_info_json();
    let mut v = vec![info["trid"].clone()];
    if let Some(Value::Array(a)) = info.get("alternate_trids") {
        v.extend(a.iter().cloned());
    }
    v
}

/// Detaches the paths of controller `name` that `sel` matches (all of
/// them when `sel` is empty): an alternate address goes from its
/// controller (the current one: the controller moves to the next one),
/// a path goes with its queues (its I/O moves to the other paths), and
/// the last path takes the bdevs with it. `done` runs on the calling
/// thread.
pub(crate) fn detach(
    reg: &Arc<Registry>,
    name: &str,
    sel: &PathSelector,
    done: Box<dyn FnOnce(Result<()>) + Send>,
) {
    let paths = reg.paths(name);
    if paths.is_empty() {
        return done(Err(Error::NotFound(name.to_string())));
    }
    let mut whole = Vec::new();
    let mut matched = false;
    for c in &paths {
        let t = trids(c);
        let hits: Vec<&Value> = t.iter().filter(|x| sel.matches(x)).collect();
        if hits.is_empty() {
            continue;
        }
        matched = true;
        if hits.len() == t.len() {
            whole.push(Arc::clone(c));
            continue;
        }
        // Some addresses of a failover controller.
        if let Some(tcp) = c.driver().transport().tcp() {
            let mut moved = false;
            for h in hits {
                let (a, s) = (h["traddr"].as_str(), h["trsvcid"].as_str());
                if let (Some(a), Some(s)) = (a, s) {
                    moved |= tcp.remove_path(a, s).unwrap_or(false);
                }
            }
            if moved {
                c.reset(Box::new(|r| {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "reset to the next address failed");
                    }
                }));
            }
        }
    }
    if !matched {
        return done(Err(Error::NotFound(format!("{name}: no such path"))));
    }
    let left = Arc::new(AtomicUsize::new(whole.len() + 1));
    let finish = Arc::new(Mutex::new(Some(done)));
    let step = Arc::new(move || {
        if left.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(d) = finish.lock().take() {
                d(Ok(()));
            }
        }
    });
    for c in whole {
        let s = Arc::clone(&step);
        detach_path(reg, c, move || s());
    }
    step();
}

/// Detaches path `c`: I/O in flight moves to the other paths (when every
/// bdev of it has one), it leaves its bdevs, its queues go, and the
/// controller is shut down.
fn detach_path(reg: &Registry, c: Arc<NvmeCtrlr>, done: impl FnOnce() + Send + 'static) {
    reg.remove_path(c.path_id());
    c.detached.store(true, Ordering::Release);
    let c2 = Arc::clone(&c);
    let leave = move || {
        let c3 = Arc::clone(&c2);
        c2.leave_bdevs(move || {
            let c4 = Arc::clone(&c3);
            c3.device.unregister(move || c4.shutdown(done));
        });
    };
    if c.has_other_paths() {
        c.device.for_each_channel(|ch| ch.inner.kill(), leave);
    } else {
        leave();
    }
}

/// `bdev_nvme_get_controllers` entry of name `name`: every path.
pub(crate) fn info_json(reg: &Registry, name: &str) -> Option<Value> {
    let paths = reg.paths(name);
    if paths.is_empty() {
        return None;
    }
    let ctrlrs: Vec<Value> = paths.iter().map(|c| c.path_info_json()).collect();
    Some(json!({"name": name, "ctrlrs": ctrlrs}))
}

/// Every name's entry, in attach order.
pub(crate) fn all_info_json(reg: &Registry) -> Vec<Value> {
    names(reg)
        .iter()
        .filter_map(|n| info_json(reg, n))
        .collect()
}

fn names(reg: &Registry) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for c in reg.all() {
        if !names.iter().any(|n| *n == c.name) {
            names.push(c.name.clone());
        }
    }
    names
}

/// `save_config`: one attach per path and address (`multipath` says how
/// the ones after the first join), then each bdev's policy when it is
/// not the default. Names for which `skip` is true (a discovery
/// service's controllers) are left out.
pub(crate) fn config_json(reg: &Registry, skip: impl Fn(&str) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    let mut policies = Vec::new();
    for name in names(reg).into_iter().filter(|n| !skip(n)) {
        let paths = reg.paths(&name);
        let many = paths.len() > 1;
        for c in &paths {
            let base = c.config_json();
            let t = trids(c);
            for (i, trid) in t.iter().enumerate() {
                let mut e = base.clone();
                if let (Some(a), Some(s)) = (trid["traddr"].as_str(), trid["trsvcid"].as_str()) {
                    e["params"]["traddr"] = json!(a);
                    e["params"]["trsvcid"] = json!(s);
                }
                if i > 0 {
                    e["params"]["multipath"] = json!("failover");
                } else if many {
                    e["params"]["multipath"] = json!("multipath");
                }
                out.push(e);
            }
        }
        if let Some(c) = paths.first() {
            for (_, bdev, p) in c.bdevs.lock().iter() {
                let pol = p.policy();
                if pol != crate::multipath::Policy::default() {
                    // SPDK's shape: `selector` only for active_active
                    // (SPDK refuses it otherwise), `rr_min_io` only for
                    // round_robin there.
                    let o = crate::options::MultipathOpts::of(&pol);
                    let mut params = json!({"name": bdev, "policy": o.policy});
                    if let Some(s) = o.selector {
                        params["selector"] = json!(s);
                    }
                    if let Some(n) = o.min_io {
                        params["rr_min_io"] = json!(n);
                    }
                    policies.push(json!({
                        "method": "bdev_nvme_set_multipath_policy",
                        "params": params,
                    }));
                }
            }
        }
    }
    out.extend(policies);
    out
}
