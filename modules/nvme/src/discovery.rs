//! NVMe-oF discovery services (SPDK's `bdev_nvme_start_discovery`): a
//! connection to a discovery controller (NQN
//! `nqn.2014-08.org.nvmexpress.discovery`, no I/O queues, no namespaces)
//! whose discovery log page says which NVM subsystems to attach.
//!
//! * **Start.** A helper thread connects (the driver's TCP transport,
//!   [`ControllerOptions::discovery`]) and reads the log
//!   ([`bdevkit_nvme_driver::discovery::read_log`]); the app thread then attaches
//!   every NVM subsystem entry (subtype 2) over TCP as controller
//!   `<name><N>` (N counts from 0 per service, as SPDK's), its bdevs
//!   `<name><N>n<nsid>`. A second path to a subsystem already attached by
//!   the service is left alone (multipath through discovery: not here).
//! * **Changes.** The discovery controller stays connected (admin poller:
//!   completions, keep alive); a Discovery Log Change event (notice F0h,
//!   asked for with Set Features Asynchronous Event Configuration bit 31)
//!   reads the log again on the driver's event thread: new entries are
//!   attached, vanished ones detached. Discovery entries (subtypes 1 and 3)
//!   are the service's `referrals`.
//! * **Connection loss.** The discovery controller connects again every
//!   second (and reads the log again); the attached controllers keep their
//!   own reconnect rules (`ctrlr_loss_timeout_sec` ...), and one gone for
//!   good (or detached by hand) is attached again, under a new name, when
//!   a later log still lists it.
//! * **Stop.** Every controller the service attached is detached, then the
//!   discovery controller is shut down.
//!
//! Threads: all but connecting and reading runs on the app thread; the
//! state's mutex is never held across a callback.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bdevkit::bdev::module::BdevManager;
use bdevkit::thread::{PollerStatus, Thread, ThreadHandle};
use bdevkit_nvme_driver::discovery::{read_log, DiscoveryLogPage};
use bdevkit_nvme_driver::{Controller, ControllerOptions, Health, TcpOptions, TcpTransport};
use bdevkit_nvme_spec::discovery::{subtype, trtype, DiscoveryLogEntry};
use bdevkit_nvme_spec::fabrics::DISCOVERY_NQN;
use bdevkit_nvme_spec::log::lid;
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::ctrlr::{AttachArgs, AttachDone, MultipathMode};
pub use crate::discovery_types::DiscoveryArgs;
use crate::discovery_types::{entry_trid, same_path};
use crate::options::Applied;
use crate::paths::PathSelector;
use crate::timer::after;
use crate::{Error, Result};

/// Attaches a controller (the module's `attach`).
pub(crate) type AttachFn = fn(&BdevManager, AttachArgs, AttachDone);
/// Detaches a controller (the module's `detach`).
pub(crate) type DetachFn =
    fn(&BdevManager, &str, &PathSelector, Box<dyn FnOnce(Result<()>) + Send>);
/// Whether a controller is attached (the module's registry).
pub(crate) type ExistsFn = fn(&BdevManager, &str) -> bool;
/// Gets the outcome of a start or a stop, on the app thread.
pub type Done = Box<dyn FnOnce(Result<()>) + Send>;

/// Between attempts to connect the discovery controller.
const RETRY: Duration = Duration::from_secs(1);

type Driver = Arc<Controller<TcpTransport>>;

/// What the service needs from the module.
#[derive(Clone, Copy)]
pub(crate) struct Ops {
    pub attach: AttachFn,
    pub detach: DetachFn,
    pub exists: ExistsFn,
    pub applied: Applied,
}

/// A subsystem path the service attached (or is attaching).
#[derive(Debug, Clone)]
struct Path {
    entry: DiscoveryLogEntry,
    name: String,
    attached: bool,
    /// Gone from the log while attaching: detached once attached.
    gone: bool,
    /// Another path of the same subsystem (same controller name) is
    /// attaching: this one's attach starts when that one's ends (one
    /// attach at a time per name).
    waiting: bool,
}

#[derive(Default)]
struct State {
    driver: Option<Driver>,
    paths: Vec<Path>,
    referrals: Vec<DiscoveryLogEntry>,
    next_index: u32,
    /// Sequence number of the last log applied.
    applied_seq: u64,
    log_applied: bool,
    attaching: usize,
    detaching: usize,
    start_done: Option<Done>,
    stopping: bool,
    stop_done: Option<Done>,
    /// Bumped at each connection: a stale admin poller stops.
    generation: u64,
}

/// One discovery service.
pub struct Discovery {
    args: DiscoveryArgs,
    ipv6: bool,
    mgr: BdevManager,
    app: ThreadHandle,
    ops: Ops,
    me: Weak<Discovery>,
    st: Mutex<State>,
    /// Serialises log reads, so that sequence order is read order.
    reading: Mutex<()>,
    seq: AtomicU64,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("name", &self.args.name)
            .field("traddr", &self.args.tcp.traddr)
            .field("trsvcid", &self.args.tcp.trsvcid)
            .finish()
    }
}

impl Discovery {
    fn adrfam(&self) -> &'static str {
        if self.ipv6 {
            "IPv6"
        } else {
            "IPv4"
        }
    }

    /// `trid` of the discovery controller.
    fn trid(&self) -> Value {
        json!({
            "trtype": "TCP",
            "adrfam": self.adrfam(),
            "traddr": self.args.tcp.traddr,
            "trsvcid": self.args.tcp.trsvcid,
            "subnqn": DISCOVERY_NQN,
        })
    }

    /// `bdev_nvme_get_discovery_info` entry.
    pub fn info_json(&self) -> Value {
        let referrals: Vec<Value> = self
            .st
            .lock()
            .referrals
            .iter()
            .map(|e| json!({"trid": entry_trid(e)}))
            .collect();
        json!({"name": self.args.name, "trid": self.trid(), "referrals": referrals})
    }

    /// The saved-config entry that starts it again (SPDK's keys).
    pub fn config_json(&self) -> Value {
        let r = self.args.reconnect.unwrap_or(self.ops.applied.reconnect);
        let mut p = json!({"name": self.args.name});
        if self.args.hostnqn_given {
            if let Some(h) = &self.args.tcp.hostnqn {
                p["hostnqn"] = json!(h);
            }
        }
        p["trtype"] = json!("TCP");
        p["adrfam"] = json!(self.adrfam());
        p["traddr"] = json!(self.args.tcp.traddr);
        p["trsvcid"] = json!(self.args.tcp.trsvcid);
        p["wait_for_attach"] = json!(self.args.wait_for_attach);
        p["ctrlr_loss_timeout_sec"] = json!(r.ctrlr_loss_timeout_sec);
        p["reconnect_delay_sec"] = json!(r.reconnect_delay_sec);
        p["fast_io_fail_timeout_sec"] = json!(r.fast_io_fail_timeout_sec);
        json!({"method": "bdev_nvme_start_discovery", "params": p})
    }

    fn stopping(&self) -> bool {
        self.st.lock().stopping
    }

    /// Reads the log of `c` (blocks: a helper thread); with its sequence
    /// number.
    fn read(&self, c: &Driver) -> bdevkit_nvme_driver::Result<(u64, DiscoveryLogPage)> {
        let _g = self.reading.lock();
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        read_log(c).map(|log| (seq, log))
    }

    /// Connects the discovery controller on a helper thread, reads the
    /// log, and carries on on the app thread.
    fn connect(self: &Arc<Self>) {
        if self.stopping() {
            return;
        }
        let d = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("nvme-discovery".into())
            .spawn(move || {
                let r = d.connect_blocking();
                let d2 = Arc::clone(&d);
                let sent = d.app.send_msg(move || match r {
                    Ok((c, seq, log)) => d2.connected(c, seq, log),
                    Err(e) => d2.connect_failed(e),
                });
                if sent.is_err() {
                    tracing::warn!("app thread gone before discovery connected");
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the discovery thread");
        }
    }

    fn connect_blocking(
        self: &Arc<Self>,
    ) -> bdevkit_nvme_driver::Result<(Driver, u64, DiscoveryLogPage)> {
        let a = &self.ops.applied;
        let mut o = self.args.tcp.clone();
        o.keep_alive_timeout_ms = a.keep_alive_timeout_ms;
        let copts = ControllerOptions {
            keep_alive_timeout_ms: a.keep_alive_timeout_ms,
            admin_timeout: if a.timeout_admin_us > 0 {
                Duration::from_micros(a.timeout_admin_us)
            } else {
                Duration::from_secs(30)
            },
            discovery: true,
            ..ControllerOptions::default()
        };
        let c = Controller::attach(TcpTransport::new(o)?, copts)?;
        // Events first, so that a change after the read below is seen.
        let w = Arc::downgrade(self);
        let wc = Arc::downgrade(&c);
        c.set_event_handler(Box::new(move |ev| {
            if ev.lid != lid::DISCOVERY {
                return;
            }
            if let (Some(d), Some(c)) = (w.upgrade(), wc.upgrade()) {
                d.log_changed(&c);
            }
        }));
        let (seq, log) = match self.read(&c) {
            Ok(x) => x,
            Err(e) => {
                let _ = c.shutdown();
                return Err(e);
            }
        };
        Ok((c, seq, log))
    }

    /// A Discovery Log Change event (on the driver's event thread).
    fn log_changed(self: &Arc<Self>, c: &Driver) {
        if self.stopping() {
            return;
        }
        tracing::info!(discovery = %self.args.name, "discovery log changed");
        match self.read(c) {
            Ok((seq, log)) => {
                let d = Arc::clone(self);
                let _ = self.app.send_msg(move || d.apply(seq, &log));
            }
            // The admin poller notices a lost connection.
            Err(e) => {
                tracing::warn!(discovery = %self.args.name, error = %e, "discovery log read failed");
            }
        }
    }

    /// The discovery controller is up (app thread).
    fn connected(self: &Arc<Self>, c: Driver, seq: u64, log: DiscoveryLogPage) {
        let gen = {
            let mut st = self.st.lock();
            if st.stopping {
                drop(st);
                shutdown_driver(c);
                return;
            }
            st.generation += 1;
            st.driver = Some(c);
            st.generation
        };
        tracing::info!(discovery = %self.args.name, records = log.entries.len(), "discovery controller connected");
        if let Ok(t) = Thread::try_current() {
            let w = self.me.clone();
            t.register_poller(
                "bdev_nvme_discovery_adminq",
                self.ops.applied.adminq_poll_period_us,
                move |p| {
                    let keep = w.upgrade().is_some_and(|d| d.poll(gen));
                    if !keep {
                        p.unregister();
                    }
                    PollerStatus::Idle
                },
            );
        }
        self.apply(seq, &log);
    }

    /// Admin poll of connection `gen`; false once it is over.
    fn poll(self: &Arc<Self>, gen: u64) -> bool {
        let c = {
            let st = self.st.lock();
            match &st.driver {
                Some(c) if st.generation == gen && !st.stopping => Arc::clone(c),
                _ => return false,
            }
        };
        if c.poll_admin() == Health::Ok {
            return true;
        }
        tracing::warn!(discovery = %self.args.name, "discovery controller connection lost: connecting again");
        self.st.lock().driver = None;
        let d = Arc::clone(self);
        after(&self.app, "bdev_nvme_discovery_timer", RETRY, move || {
            d.connect()
        });
        false
    }

    /// Connecting failed (app thread): try again, or fail the start.
    fn connect_failed(self: &Arc<Self>, e: bdevkit_nvme_driver::Error) {
        let give_up = {
            let st = self.st.lock();
            if st.stopping {
                return;
            }
            st.start_done.is_some() && self.args.wait_for_attach && self.args.attach_timeout_ms == 0
        };
        if give_up {
            tracing::error!(discovery = %self.args.name, error = %e, "cannot connect the discovery controller");
            let done = self.st.lock().start_done.take();
            self.stop(None);
            if let Some(d) = done {
                d(Err(Error::Driver(e)));
            }
            return;
        }
        tracing::warn!(discovery = %self.args.name, error = %e, "cannot connect the discovery controller: trying again");
        let d = Arc::clone(self);
        after(&self.app, "bdev_nvme_discovery_timer", RETRY, move || {
            d.connect()
        });
    }

    /// Applies log `seq` (app thread): attaches new NVM subsystem paths,
    /// detaches vanished ones.
    fn apply(self: &Arc<Self>, seq: u64, log: &DiscoveryLogPage) {
        let mut to_attach = Vec::new();
        let mut to_detach = Vec::new();
        {
            let mut st = self.st.lock();
            if st.stopping || seq <= st.applied_seq {
                return;
            }
            st.applied_seq = seq;
            st.log_applied = true;
            // A controller gone meanwhile (lost for good, or detached by
            // hand) is attached again if the log still lists it.
            let (mgr, exists) = (&self.mgr, self.ops.exists);
            st.paths.retain(|p| !p.attached || exists(mgr, &p.name));
            st.referrals = log
                .entries
                .iter()
                .filter(|e| {
                    e.subtype == subtype::DISCOVERY_REFERRAL
                        || e.subtype == subtype::CURRENT_DISCOVERY
                })
                .cloned()
                .collect();
            let nvm: Vec<&DiscoveryLogEntry> = log
                .entries
                .iter()
                .filter(|e| e.subtype == subtype::NVME)
                .collect();
            let mut kept = Vec::new();
            for mut p in std::mem::take(&mut st.paths) {
                let listed = nvm.iter().any(|e| same_path(e, &p.entry));
                if listed {
                    p.gone = false;
                    kept.push(p);
                } else if p.attached {
                    to_detach.push((p.name, p.entry));
                } else {
                    p.gone = true;
                    kept.push(p);
                }
            }
            st.paths = kept;
            for e in nvm {
                if st.paths.iter().any(|p| same_path(&p.entry, e)) {
                    continue;
                }
                if e.trtype != trtype::TCP {
                    tracing::debug!(subnqn = %e.subnqn(), trtype = e.trtype, "not an NVMe/TCP entry: skipped");
                    continue;
                }
                // Another path of a subsystem it has: the same controller
                // name, attached as a multipath path (as SPDK does).
                let (name, waiting) = match st.paths.iter().find(|p| p.entry.subnqn() == e.subnqn())
                {
                    Some(p) => {
                        let name = p.name.clone();
                        let busy = st.paths.iter().any(|q| q.name == name && !q.attached);
                        (name, busy)
                    }
                    None => {
                        let name = format!("{}{}", self.args.name, st.next_index);
                        st.next_index += 1;
                        (name, false)
                    }
                };
                st.paths.push(Path {
                    entry: e.clone(),
                    name: name.clone(),
                    attached: false,
                    gone: false,
                    waiting,
                });
                if !waiting {
                    to_attach.push((name, e.clone()));
                }
            }
            st.attaching += to_attach.len();
            st.detaching += to_detach.len();
        }
        for (name, entry) in to_detach {
            tracing::info!(discovery = %self.args.name, ctrlr = %name, traddr = %entry.traddr(),
                trsvcid = %entry.trsvcid(), "subsystem path left the discovery log: detaching");
            self.detach(&name, &entry);
        }
        for (name, e) in to_attach {
            self.attach(name, &e);
        }
        self.check_done();
    }

    fn attach(self: &Arc<Self>, name: String, e: &DiscoveryLogEntry) {
        let mut o = TcpOptions::new(&e.traddr(), &e.trsvcid(), &e.subnqn());
        o.hostnqn.clone_from(&self.args.tcp.hostnqn);
        o.connect_timeout = self.args.tcp.connect_timeout;
        let args = AttachArgs {
            name: name.clone(),
            traddr: o.traddr.clone(),
            num_io_queues: None,
            tcp: Some(o),
            reconnect: self.args.reconnect,
            multipath: Some(MultipathMode::Multipath),
            policy: None,
        };
        tracing::info!(discovery = %self.args.name, ctrlr = %name, subnqn = %e.subnqn(),
            traddr = %e.traddr(), trsvcid = %e.trsvcid(), "attaching a discovered subsystem");
        let d = Arc::clone(self);
        let entry = e.clone();
        (self.ops.attach)(
            &self.mgr,
            args,
            Box::new(move |r| d.attached(&name, &entry, r)),
        );
    }

    /// An attach finished (app thread); the next path of the same name
    /// waiting for it starts.
    fn attached(self: &Arc<Self>, name: &str, entry: &DiscoveryLogEntry, r: Result<Vec<String>>) {
        let (detach, next) = {
            let mut st = self.st.lock();
            st.attaching = st.attaching.saturating_sub(1);
            let stopping = st.stopping;
            let i = st
                .paths
                .iter()
                .position(|p| p.name == name && same_path(&p.entry, entry));
            let detach = match (r, i) {
                (Ok(bdevs), Some(i)) => {
                    tracing::info!(discovery = %self.args.name, ctrlr = %name, bdevs = ?bdevs, "discovered subsystem attached");
                    if stopping || st.paths[i].gone {
                        st.paths.remove(i);
                        st.detaching += 1;
                        true
                    } else {
                        st.paths[i].attached = true;
                        false
                    }
                }
                (Ok(_), None) => {
                    st.detaching += 1;
                    true
                }
                (Err(e), i) => {
                    tracing::error!(discovery = %self.args.name, ctrlr = %name, error = %e, "cannot attach a discovered subsystem");
                    if let Some(i) = i {
                        st.paths.remove(i);
                    }
                    false
                }
            };
            let next = if stopping {
                None
            } else {
                st.paths
                    .iter_mut()
                    .find(|p| p.name == name && p.waiting)
                    .map(|p| {
                        p.waiting = false;
                        p.entry.clone()
                    })
            };
            if next.is_some() {
                st.attaching += 1;
            }
            (detach, next)
        };
        if detach {
            self.detach(name, entry);
        }
        if let Some(e) = next {
            self.attach(name.to_string(), &e);
        }
        self.check_done();
    }

    /// Detaches the path `entry` of controller `name` (its `detaching`
    /// count is taken); the last path takes the controller with it.
    fn detach(self: &Arc<Self>, name: &str, entry: &DiscoveryLogEntry) {
        let d = Arc::clone(self);
        let n = name.to_string();
        let sel = PathSelector {
            traddr: Some(entry.traddr().into_owned()),
            trsvcid: Some(entry.trsvcid().into_owned()),
            subnqn: Some(entry.subnqn().into_owned()),
            ..PathSelector::default()
        };
        (self.ops.detach)(
            &self.mgr,
            name,
            &sel,
            Box::new(move |r| {
                if let Err(e) = r {
                    tracing::warn!(ctrlr = %n, error = %e, "detach of a discovered controller failed");
                }
                {
                    let mut st = d.st.lock();
                    st.detaching = st.detaching.saturating_sub(1);
                }
                d.check_done();
            }),
        );
    }

    /// Answers a waiting start (first log applied, its attaches done) or
    /// stop (every attach and detach done).
    fn check_done(&self) {
        let (start, stop) = {
            let mut st = self.st.lock();
            let quiet = st.attaching == 0;
            let start = if quiet && st.log_applied && !st.stopping {
                st.start_done.take()
            } else {
                None
            };
            let stop = if quiet && st.detaching == 0 && st.stopping {
                st.stop_done.take()
            } else {
                None
            };
            (start, stop)
        };
        if let Some(d) = start {
            d(Ok(()));
        }
        if let Some(d) = stop {
            d(Ok(()));
        }
    }

    /// The start did not finish in time (app thread).
    fn timed_out(self: &Arc<Self>) {
        let Some(done) = self.st.lock().start_done.take() else {
            return;
        };
        tracing::error!(discovery = %self.args.name, "discovery did not attach in time");
        self.stop(None);
        done(Err(Error::Driver(bdevkit_nvme_driver::Error::Timeout(
            "the discovery service to attach",
        ))));
    }

    /// Stops the service (app thread): detaches what it attached, shuts the
    /// discovery controller down; `done` once every detach finished.
    fn stop(self: &Arc<Self>, done: Option<Done>) {
        let (driver, names, start) = {
            let mut st = self.st.lock();
            st.stopping = true;
            st.stop_done = done;
            let names: Vec<(String, DiscoveryLogEntry)> = st
                .paths
                .iter()
                .filter(|p| p.attached)
                .map(|p| (p.name.clone(), p.entry.clone()))
                .collect();
            // Attaches in flight detach when they end; waiting ones never start.
            st.paths.retain(|p| !p.attached && !p.waiting);
            st.detaching += names.len();
            (st.driver.take(), names, st.start_done.take())
        };
        if let Some(d) = start {
            d(Err(Error::NotPermitted("discovery stopped".into())));
        }
        for (n, e) in names {
            self.detach(&n, &e);
        }
        if let Some(c) = driver {
            shutdown_driver(c);
        }
        self.check_done();
    }
}

/// Shuts a discovery controller down on a helper thread.
fn shutdown_driver(c: Driver) {
    let spawned = std::thread::Builder::new()
        .name("nvme-discovery".into())
        .spawn(move || {
            if let Err(e) = c.shutdown() {
                tracing::debug!(error = %e, "discovery controller shutdown");
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the discovery shutdown thread");
    }
}

/// The discovery services of one module instance.
#[derive(Default)]
pub struct Discoveries(Mutex<Vec<Arc<Discovery>>>);

impl std::fmt::Debug for Discoveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.0.lock().iter().map(|d| d.args.name.clone()).collect();
        f.debug_struct("Discoveries")
            .field("names", &names)
            .finish()
    }
}

impl Discoveries {
    /// Starts service `args` (on the app thread); `done` gets its outcome
    /// there: at once, or with `wait_for_attach` once the first log's
    /// subsystems are attached.
    ///
    /// # Errors
    /// Through `done`: [`Error::Exists`] for a name or a discovery
    /// address in use, [`Error::Driver`] when connecting fails (with
    /// `wait_for_attach`) or times out (`attach_timeout_ms`).
    pub(crate) fn start(
        self: &Arc<Self>,
        mgr: &BdevManager,
        args: DiscoveryArgs,
        ops: Ops,
        done: Done,
    ) {
        let Ok(app) = Thread::try_current() else {
            return done(Err(Error::InvalidArg(
                "discovery outside a bdevkit thread".into(),
            )));
        };
        let ipv6 = args.tcp.traddr.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6());
        let d = {
            let mut list = self.0.lock();
            // Failed starts stopped themselves: forget them.
            list.retain(|d| !d.stopping());
            if list.iter().any(|d| d.args.name == args.name) {
                return done(Err(Error::Exists(format!(
                    "discovery service {} already exists",
                    args.name
                ))));
            }
            if list.iter().any(|d| {
                d.args.tcp.traddr == args.tcp.traddr && d.args.tcp.trsvcid == args.tcp.trsvcid
            }) {
                return done(Err(Error::Exists(format!(
                    "a discovery service of {}:{} already exists",
                    args.tcp.traddr, args.tcp.trsvcid
                ))));
            }
            let wait = args.wait_for_attach || args.attach_timeout_ms > 0;
            let mut args = args;
            args.wait_for_attach = wait;
            let d = Arc::new_cyclic(|me| Discovery {
                args,
                ipv6,
                mgr: mgr.clone(),
                app: app.handle(),
                ops,
                me: me.clone(),
                st: Mutex::new(State::default()),
                reading: Mutex::new(()),
                seq: AtomicU64::new(0),
            });
            list.push(Arc::clone(&d));
            d
        };
        if d.args.wait_for_attach {
            d.st.lock().start_done = Some(done);
            if d.args.attach_timeout_ms > 0 {
                let d2 = Arc::clone(&d);
                after(
                    &d.app,
                    "bdev_nvme_discovery_timer",
                    Duration::from_millis(d.args.attach_timeout_ms),
                    move || d2.timed_out(),
                );
            }
        } else {
            done(Ok(()));
        }
        d.connect();
    }

    /// Stops service `name` (app thread); `done` once its controllers are
    /// detached.
    ///
    /// # Errors
    /// Through `done`: [`Error::NotFound`] for an unknown name.
    pub fn stop(&self, name: &str, done: Done) {
        match self.remove(name) {
            Some(d) => d.stop(Some(done)),
            None => done(Err(Error::NotFound(name.to_string()))),
        }
    }

    fn remove(&self, name: &str) -> Option<Arc<Discovery>> {
        let mut list = self.0.lock();
        list.retain(|d| !d.stopping());
        let i = list.iter().position(|d| d.args.name == name)?;
        Some(list.remove(i))
    }

    /// `bdev_nvme_get_discovery_info`.
    pub fn info_json(&self) -> Value {
        Value::Array(self.all().iter().map(|d| d.info_json()).collect())
    }

    /// One `bdev_nvme_start_discovery` per service.
    pub fn config_json(&self) -> Vec<Value> {
        self.all().iter().map(|d| d.config_json()).collect()
    }

    /// Whether controller `name` was attached by a discovery service
    /// (saved configs leave it to the service).
    pub fn owns(&self, ctrlr: &str) -> bool {
        let by = |d: &Arc<Discovery>| d.st.lock().paths.iter().any(|p| p.name == ctrlr);
        self.all().iter().any(by)
    }

    fn all(&self) -> Vec<Arc<Discovery>> {
        let mut list = self.0.lock();
        list.retain(|d| !d.stopping());
        list.clone()
    }

    /// Module fini: every service forgets its controllers (the module shuts
    /// those down) and shuts its discovery controller down, waiting.
    pub fn shutdown_all(&self) {
        for d in std::mem::take(&mut *self.0.lock()) {
            let c = {
                let mut st = d.st.lock();
                st.stopping = true;
                st.paths.clear();
                st.driver.take()
            };
            if let Some(c) = c {
                if let Err(e) = c.shutdown() {
                    tracing::debug!(error = %e, "discovery controller shutdown");
                }
            }
        }
    }
}
