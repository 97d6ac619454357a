//! [`Target`]: the NVMe-oF target an application embeds. It owns the
//! target's state (`target.rs`), the poll groups (one lightweight thread
//! per core of the app's mask, the per-thread contexts of the target's
//! I/O device), and the transports it created (`transport/`), whose new
//! connections an accept poller per transport takes on the app thread
//! and hands to the poll groups, round robin.
//!
//! Control operations run on the app thread (RPC handlers, config
//! replay); those that touch the poll groups (namespaces, subsystem
//! removal, disconnects, queue pair listings) walk the groups with
//! messages and finish on the app thread. The files below split the
//! operations: `subsys.rs` (transports, subsystems, hosts, listeners),
//! `ns.rs` (namespaces, hot remove and resize), `referral.rs` (discovery
//! referrals), `json.rs` (queries and `save_config`).

mod json;
mod ns;
mod referral;
mod subsys;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bdevkit::bdev::BdevManager;
use bdevkit::thread::{CpuSet, IoDevice, PollerStatus, RuntimeHandle, Thread, ThreadHandle};
use parking_lot::Mutex;

use crate::core::group::PollGroup;
use crate::core::pool::BufPool;
use crate::ctrlr::DeathCause;
use crate::error::{Error, Result};
use crate::opts::TransportOpts;
use crate::target::Core;
use crate::transport::{Accepted, Transport};

/// The I/O device name of the target (its per-thread contexts are the
/// poll groups).
const DEVICE_NAME: &str = "nvmf_tgt";

/// A created transport, as the service drives it (its options and buffer
/// pool are also in the target's state, for the Connect rules and RPCs).
#[derive(Debug, Clone)]
pub(crate) struct Live {
    pub trtype: &'static str,
    pub t: Arc<dyn Transport>,
    pub opts: TransportOpts,
    pub pool: Arc<BufPool>,
}

pub(crate) struct Inner {
    pub core: Arc<Core>,
    pub runtime: RuntimeHandle,
    pub device: IoDevice<PollGroup>,
    pub groups: Mutex<Vec<ThreadHandle>>,
    /// The transports created, in creation order.
    pub transports: Mutex<Vec<Live>>,
    next_group: AtomicUsize,
    running: AtomicBool,
    stopping: AtomicBool,
}

/// The NVMe-oF target of one application. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Target(pub(crate) Arc<Inner>);

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("running", &self.is_running())
            .field("groups", &self.0.groups.lock().len())
            .finish()
    }
}

impl Target {
    /// A target serving bdevs of `mgr` on `runtime`'s reactors. It
    /// accepts configuration at once; connections once [`Target::start`]ed.
    #[must_use]
    pub fn new(runtime: RuntimeHandle, mgr: BdevManager) -> Target {
        let core = Arc::new(Core::new(mgr));
        let c = Arc::clone(&core);
        let device = IoDevice::register(DEVICE_NAME, move || {
            PollGroup::new(Arc::clone(&c)).map_err(|e| Box::new(e) as bdevkit::error::BoxError)
        });
        Target(Arc::new(Inner {
            core,
            runtime,
            device,
            groups: Mutex::new(Vec::new()),
            transports: Mutex::new(Vec::new()),
            next_group: AtomicUsize::new(0),
            running: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
        }))
    }

    /// Whether [`Target::start`] ran and the target is not stopping.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.0.running.load(Ordering::Acquire) && !self.0.stopping.load(Ordering::Acquire)
    }

    /// Starts the poll groups (one thread per core of the app's mask, or
    /// of `poll_groups_mask`) and the transports' accept pollers. Call on
    /// the app thread (SPDK's nvmf subsystem init).
    pub fn start(&self) -> Result<()> {
        if self.0.running.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let thread = Thread::current().ok_or(Error::NotRunning)?;
        let rt = &self.0.runtime;
        let mask = self.0.core.state.lock().conf.poll_groups_mask.clone();
        let cores: Vec<u32> = match mask.and_then(|m| m.parse::<CpuSet>().ok()) {
            Some(m) => rt.cores().into_iter().filter(|c| m.contains(*c)).collect(),
            None => rt.cores(),
        };
        let cores = if cores.is_empty() { rt.cores() } else { cores };
        let interrupt = rt.interrupt_mode();
        let mut groups = Vec::with_capacity(cores.len());
        for (i, core) in cores.iter().enumerate() {
            let h = rt
                .spawn_thread(
                    format!("nvmf_tgt_poll_group_{i:03}"),
                    Some(&CpuSet::single(*core)),
                )
                .map_err(Error::PollGroups)?;
            let dev = self.0.device.clone();
            let _ = h.send_msg(move || match dev.get_channel() {
                Ok(ch) => PollGroup::start(&ch, interrupt),
                Err(e) => tracing::error!(error = %e, "poll group failed to start"),
            });
            groups.push(h);
        }
        tracing::info!(groups = groups.len(), "nvmf target started");
        *self.0.groups.lock() = groups;
        let live = self.0.transports.lock().clone();
        for l in live {
            self.start_accepting(&thread, l);
        }
        Ok(())
    }

    /// The accept poller of transport `l` on `thread` (the app thread):
    /// woken by the transport's fd in interrupt mode, else every
    /// `acceptor_poll_rate`.
    pub(crate) fn start_accepting(&self, thread: &Thread, l: Live) {
        let irq = if self.0.runtime.interrupt_mode() {
            l.t.accept_fd()
                .and_then(|fd| thread.register_interrupt_fd(fd).ok())
        } else {
            None
        };
        let period = if irq.is_some() {
            0
        } else {
            u64::from(l.opts.acceptor_poll_rate)
        };
        let weak = Arc::downgrade(&self.0);
        let mut irq = irq;
        thread.register_poller("nvmf_tgt_accept", period, move |p| {
            let Some(inner) = weak.upgrade() else {
                irq.take();
                p.unregister();
                return PollerStatus::Idle;
            };
            if inner.stopping.load(Ordering::Acquire) {
                irq.take();
                p.unregister();
                return PollerStatus::Idle;
            }
            let target = Target(inner);
            let n = l.t.accept(&mut |q| target.dispatch(&l, q));
            PollerStatus::from(n > 0)
        });
    }

    /// Hands a new connection of transport `l` to the next poll group.
    fn dispatch(&self, l: &Live, q: Accepted) {
        let groups = self.0.groups.lock();
        if groups.is_empty() || self.0.stopping.load(Ordering::Acquire) {
            return;
        }
        let i = self.0.next_group.fetch_add(1, Ordering::Relaxed) % groups.len();
        let l = l.clone();
        let dev = self.0.device.clone();
        let _ = groups[i].send_msg(move || {
            if dev.is_unregistering() {
                return;
            }
            if let Ok(ch) = dev.get_channel() {
                ch.add_qpair(&l.t, l.trtype, q, &l.opts, &l.pool);
            }
        });
    }

    /// The created transport `trtype` names (any case).
    pub(crate) fn live(&self, trtype: &str) -> Option<Live> {
        self.0
            .transports
            .lock()
            .iter()
            .find(|l| l.trtype.eq_ignore_ascii_case(trtype))
            .cloned()
    }

    /// The data buffer accounting of the first transport created (`None`:
    /// no transport yet).
    #[must_use]
    pub fn buffer_stats(&self) -> Option<crate::BufferStats> {
        let st = self.0.core.state.lock();
        st.transports.first().map(|t| t.pool.stats())
    }

    /// How many poll groups there are (or will be, before the start: one
    /// per core of the app).
    pub(crate) fn group_count(&self) -> usize {
        match self.0.groups.lock().len() {
            0 => self.0.runtime.cores().len().max(1),
            n => n,
        }
    }

    /// Runs `f` on every poll group, one after another, then `done` on the
    /// calling thread.
    pub(crate) fn for_each_group(
        &self,
        f: impl Fn(&PollGroup) + Send + Sync + 'static,
        done: impl FnOnce() + Send + 'static,
    ) {
        self.0.device.for_each_channel(move |ch| f(ch), done);
    }

    /// Stops the target: no more connections, every connection closes
    /// (in-flight I/O drains), the poll group threads exit, the
    /// namespaces release their bdevs; then `done` runs on the calling
    /// thread. Call before the bdevs go (SPDK finishes nvmf before bdev).
    pub fn shutdown(&self, done: impl FnOnce() + Send + 'static) {
        if self.0.stopping.swap(true, Ordering::AcqRel) {
            return done();
        }
        let live = self.0.transports.lock().clone();
        for l in &live {
            l.t.shutdown();
        }
        let ctrlrs: Vec<_> = {
            let st = self.0.core.state.lock();
            st.subsystems
                .iter()
                .flat_map(|s| s.ctrlrs.clone())
                .collect()
        };
        for c in ctrlrs {
            c.kill(DeathCause::Removed);
        }
        let inner = Arc::clone(&self.0);
        self.0.device.for_each_channel(
            |g| g.stop(),
            move || {
                let core = Arc::clone(&inner.core);
                inner.device.unregister(move || {
                    // Namespaces close their descriptors: the bdevs can go.
                    let namespaces: Vec<_> = {
                        let mut st = core.state.lock();
                        st.subsystems
                            .iter_mut()
                            .flat_map(|s| std::mem::take(&mut s.namespaces).into_values())
                            .collect()
                    };
                    drop(namespaces);
                    tracing::info!("nvmf target stopped");
                    done();
                });
            },
        );
    }

    /// Connections open now, over all poll groups (tests).
    pub fn connection_count(&self, done: impl FnOnce(usize) + Send + 'static) {
        let n = Arc::new(AtomicUsize::new(0));
        let n2 = Arc::clone(&n);
        self.for_each_group(
            move |g| {
                n2.fetch_add(g.connections(), Ordering::Relaxed);
            },
            move || done(n.load(Ordering::Relaxed)),
        );
    }
}
