//! Multipath (SPDK's `nvme_bdev` with several `nvme_io_path`s): one bdev
//! per namespace, served by every controller of its name that has that
//! namespace (the same namespace id and identifiers: a second path to
//! the same subsystem).
//!
//! * `NsPaths` is the namespace's side of the control plane: its
//!   paths (one per controller) and its policy. Each bdev has its own
//!   io_device whose channel (`MpChannel`, one per thread) holds this
//!   thread's queue-pair channel of every path in a small array; adding
//!   or removing a path, or changing the policy, visits those channels.
//! * **Path choice, per I/O**: an index into that array, no lock and no
//!   allocation. `active_passive` keeps to the first path that takes I/O
//!   (in attach order) and moves to the next one when it stops taking it
//!   (resetting, failed, gone); `active_active` spreads over every path
//!   that takes I/O: `round_robin` moves on after `rr_min_io` I/Os,
//!   `queue_depth` picks the one with the fewest commands in flight.
//!   When no path takes I/O now, the first one not gone gets it (it
//!   waits there for a reconnect).
//! * **Moving I/O between paths**: a queue-pair channel that cannot
//!   serve an I/O (its connection dropped and it resets, it failed, its
//!   path is being removed) hands it back here (`Reroute`) and another
//!   path serves it; its connection is closed first, so nothing of that
//!   I/O can still arrive on the old path.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use bdevkit::bdev::module::{BdevIo, BoxError, IoStatus, ModuleIo};
use bdevkit::thread::{IoChannel, IoDevice, Thread};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use crate::channel::{ChInner, CtrlrChannel, Reroute};

pub use crate::policy::{PathPolicy, Policy, Selector};

/// What a namespace bdev needs from each controller that serves it
/// (implemented by the controller, above this file).
pub(crate) trait PathOwner: Send + Sync + fmt::Debug + 'static {
    /// Its entry of the bdev's `driver_specific.nvme` array.
    fn path_json(&self, nsid: u32, can_share: bool) -> Value;
    /// Controller id (`bdev_nvme_get_io_paths`).
    fn cntlid(&self) -> u16;
    /// Its current transport id (`bdev_nvme_get_io_paths`).
    fn trid(&self) -> Value;
}

/// One path of a namespace: a controller and its queue pairs' io_device.
#[derive(Clone)]
struct PathEntry {
    id: u64,
    owner: Arc<dyn PathOwner>,
    device: IoDevice<CtrlrChannel>,
}

struct Inner {
    paths: Vec<PathEntry>,
    policy: Policy,
}

/// A namespace bdev's paths and policy (the control plane's side).
pub(crate) struct NsPaths {
    nsid: u32,
    device: IoDevice<MpChannel>,
    inner: Arc<Mutex<Inner>>,
}

impl fmt::Debug for NsPaths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NsPaths")
            .field("nsid", &self.nsid)
            .field("paths", &self.inner.lock().paths.len())
            .finish()
    }
}

/// This thread's channel of one path.
struct PathCh {
    id: u64,
    ch: IoChannel<CtrlrChannel>,
    /// I/Os this thread sent down this path.
    submitted: Cell<u64>,
}

pub(crate) struct MpInner {
    nsid: u32,
    paths: RefCell<Vec<PathCh>>,
    /// The path in use (active_passive, round_robin).
    cur: Cell<usize>,
    /// I/Os sent to `cur` in this turn (round_robin).
    turn: Cell<u32>,
    policy: Cell<Policy>,
}

/// A bdev channel's path array (the per-bdev io_device's channel).
pub(crate) struct MpChannel {
    inner: Rc<MpInner>,
}

impl fmt::Debug for MpChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpChannel")
            .field("nsid", &self.inner.nsid)
            .field("paths", &self.inner.paths.borrow().len())
            .finish()
    }
}

impl MpInner {
    fn add(self: &Rc<Self>, e: &PathEntry) -> Result<(), BoxError> {
        if self.paths.borrow().iter().any(|p| p.id == e.id) {
            return Ok(());
        }
        let ch = e.device.get_channel()?;
        let w: Weak<dyn Reroute> = Rc::downgrade(self) as Weak<dyn Reroute>;
        ch.inner.hook(self.nsid, w);
        self.paths.borrow_mut().push(PathCh {
            id: e.id,
            ch,
            submitted: Cell::new(0),
        });
        Ok(())
    }

    fn remove(&self, id: u64) {
        let gone = {
            let mut p = self.paths.borrow_mut();
            let i = p.iter().position(|x| x.id == id);
            i.map(|i| p.remove(i))
        };
        self.cur.set(0);
        self.turn.set(0);
        // Dropped outside the borrow: the queue pair may go with it.
        drop(gone);
    }

    /// The path for the next I/O: one that takes I/O now, chosen by the
    /// policy (never `exclude`); else, unless `strict`, the first that is
    /// not gone.
    #[inline(never)]
    fn select(&self, paths: &[PathCh], exclude: Option<&ChInner>, strict: bool) -> Option<usize> {
        let n = paths.len();
        if n == 1 && exclude.is_none() {
            return Some(0);
        }
        let ok = |i: usize| {
            let c: &ChInner = &paths[i].ch.inner;
            exclude.is_none_or(|x| !std::ptr::eq(x, c)) && c.usable()
        };
        let pol = self.policy.get();
        let cur = self.cur.get();
        let found = match (pol.policy, pol.selector) {
            (PathPolicy::ActivePassive, _) => {
                if cur < n && ok(cur) {
                    Some(cur)
                } else {
                    (0..n).find(|&i| ok(i))
                }
            }
            (PathPolicy::ActiveActive, Selector::RoundRobin) => {
                if cur < n && ok(cur) && self.turn.get() < pol.rr_min_io {
                    self.turn.set(self.turn.get() + 1);
                    return Some(cur);
                }
                let next = (1..=n).map(|k| (cur + k) % n).find(|&i| ok(i));
                if next.is_some() {
                    self.turn.set(1);
                }
                next
            }
            (PathPolicy::ActiveActive, Selector::QueueDepth) => (0..n)
                .filter(|&i| ok(i))
                .min_by_key(|&i| paths[i].ch.inner.queue_depth()),
        };
        if let Some(i) = found {
            self.cur.set(i);
            return Some(i);
        }
        if strict {
            return None;
        }
        (0..n).find(|&i| {
            let c: &ChInner = &paths[i].ch.inner;
            exclude.is_none_or(|x| !std::ptr::eq(x, c)) && !c.is_dead()
        })
    }

    /// Serves `io` on the path the policy picks.
    #[inline]
    pub(crate) fn submit(&self, io: BdevIo) {
        let paths = self.paths.borrow();
        // One path (the usual case) needs no policy.
        let p = match paths.as_slice() {
            [p] => p,
            all => match self.select(all, None, false) {
                Some(i) => &all[i],
                None => return io.complete_deferred(IoStatus::Errno(libc::ENXIO)),
            },
        };
        p.submitted.set(p.submitted.get() + 1);
        p.ch.inner.submit(self.nsid, io);
    }
}

impl Reroute for MpInner {
    fn reroute(&self, io: BdevIo, from: &ChInner, strict: bool) -> Option<BdevIo> {
        let paths = self.paths.borrow();
        match self.select(&paths, Some(from), strict) {
            Some(i) => {
                paths[i].ch.inner.dispatch(io);
                None
            }
            None => Some(io),
        }
    }
}

impl MpChannel {
    /// Serves `io`.
    #[inline]
    pub(crate) fn submit(&self, io: BdevIo) {
        self.inner.submit(io);
    }
}

impl NsPaths {
    /// The paths of namespace `nsid`'s bdev `bdev_name`, none yet.
    pub(crate) fn new(bdev_name: &str, nsid: u32, policy: Policy) -> NsPaths {
        let inner = Arc::new(Mutex::new(Inner {
            paths: Vec::new(),
            policy,
        }));
        let i2 = Arc::clone(&inner);
        let device = IoDevice::register(format!("nvme_bdev_{bdev_name}"), move || {
            let (paths, policy) = {
                let g = i2.lock();
                (g.paths.clone(), g.policy)
            };
            let mp = Rc::new(MpInner {
                nsid,
                paths: RefCell::new(Vec::with_capacity(paths.len().max(2))),
                cur: Cell::new(0),
                turn: Cell::new(0),
                policy: Cell::new(policy),
            });
            // A path whose queue cannot be made now (its controller
            // resets) joins after its reset; the channel needs one path.
            let mut first_err = None;
            for e in &paths {
                if let Err(err) = mp.add(e) {
                    tracing::debug!(error = %err, "NVMe path left out of a new channel for now");
                    first_err.get_or_insert(err);
                }
            }
            match first_err {
                Some(err) if mp.paths.borrow().is_empty() => Err(err),
                _ => Ok(MpChannel { inner: mp }),
            }
        });
        NsPaths {
            nsid,
            device,
            inner,
        }
    }

    /// The io_device of the bdev's channels.
    pub(crate) fn device(&self) -> &IoDevice<MpChannel> {
        &self.device
    }

    /// Adds controller `owner`'s queue pairs (`device`) as path `id`;
    /// `done` once every channel has it.
    pub(crate) fn add(
        &self,
        id: u64,
        owner: Arc<dyn PathOwner>,
        device: IoDevice<CtrlrChannel>,
        done: impl FnOnce() + Send + 'static,
    ) {
        let e = PathEntry { id, owner, device };
        self.inner.lock().paths.push(e.clone());
        self.device.for_each_channel(
            move |ch| {
                if let Err(err) = ch.inner.add(&e) {
                    tracing::warn!(error = %err, "NVMe path not added to a channel");
                }
            },
            done,
        );
    }

    /// Adds path `id` to the channels that lack it (made while its
    /// controller was down), keeping the attach order of the paths.
    pub(crate) fn rejoin(&self, id: u64) {
        let (e, order) = {
            let g = self.inner.lock();
            let order: Vec<u64> = g.paths.iter().map(|p| p.id).collect();
            (g.paths.iter().find(|p| p.id == id).cloned(), order)
        };
        let Some(e) = e else { return };
        self.device.for_each_channel(
            move |ch| {
                if ch.inner.paths.borrow().iter().any(|p| p.id == id) {
                    return;
                }
                if ch.inner.add(&e).is_ok() {
                    ch.inner
                        .paths
                        .borrow_mut()
                        .sort_by_key(|p| order.iter().position(|x| *x == p.id));
                }
            },
            || {},
        );
    }

    /// Removes path `id`; `done` gets how many paths are left, once no
    /// channel uses it.
    pub(crate) fn remove(&self, id: u64, done: impl FnOnce(usize) + Send + 'static) {
        let left = {
            let mut g = self.inner.lock();
            g.paths.retain(|p| p.id != id);
            g.paths.len()
        };
        self.device
            .for_each_channel(move |ch| ch.inner.remove(id), move || done(left));
    }

    /// How many paths it has.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().paths.len()
    }

    /// The policy.
    pub(crate) fn policy(&self) -> Policy {
        self.inner.lock().policy
    }

    /// Sets the policy; `done` once every channel uses it.
    pub(crate) fn set_policy(&self, p: Policy, done: impl FnOnce() + Send + 'static) {
        self.inner.lock().policy = p;
        self.device.for_each_channel(
            move |ch| {
                ch.inner.policy.set(p);
                ch.inner.cur.set(0);
                ch.inner.turn.set(0);
            },
            done,
        );
    }

    /// `driver_specific`: one `nvme` entry per path, and the policy.
    pub(crate) fn info_json(&self, can_share: bool) -> Value {
        let g = self.inner.lock();
        let nvme: Vec<Value> = g
            .paths
            .iter()
            .map(|p| p.owner.path_json(self.nsid, can_share))
            .collect();
        let mut out = Map::new();
        out.insert("nvme".into(), Value::Array(nvme));
        g.policy.add_json(&mut out);
        Value::Object(out)
    }

    /// This thread's `io_paths` of bdev `bdev_name` (for
    /// `bdev_nvme_get_io_paths`), from a visit of its channels.
    pub(crate) fn io_paths_json(&self, bdev_name: &str, ch: &MpChannel) -> Vec<Value> {
        let owners: Vec<(u64, Arc<dyn PathOwner>)> = self
            .inner
            .lock()
            .paths
            .iter()
            .map(|p| (p.id, Arc::clone(&p.owner)))
            .collect();
        let mp = &ch.inner;
        let paths = mp.paths.borrow();
        // Which one the next I/O takes, as `current` (not counted as
        // an I/O of the turn).
        let (cur, turn) = (mp.cur.get(), mp.turn.get());
        let current = mp.select(&paths, None, true);
        mp.cur.set(cur);
        mp.turn.set(turn);
        let all_active = mp.policy.get().policy == PathPolicy::ActiveActive;
        paths
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let (_, owner) = owners.iter().find(|(id, _)| *id == p.id)?;
                let c: &ChInner = &p.ch.inner;
                let usable = c.usable();
                Some(json!({
                    "bdev_name": bdev_name,
                    "cntlid": owner.cntlid(),
                    "current": if all_active { usable } else { current == Some(i) },
                    "connected": !c.is_dead() && usable,
                    "accessible": !c.is_dead(),
                    "transport": owner.trid(),
                }))
            })
            .collect()
    }

    /// I/Os sent down each path, by path id, summed over the channels;
    /// `done` gets them on the calling thread.
    pub(crate) fn submitted(&self, done: impl FnOnce(Vec<(u64, u64)>) + Send + 'static) {
        let acc = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
        let a2 = Arc::clone(&acc);
        self.device.for_each_channel(
            move |ch| {
                let mut a = a2.lock();
                for p in ch.inner.paths.borrow().iter() {
                    match a.iter_mut().find(|x| x.0 == p.id) {
                        Some(x) => x.1 += p.submitted.get(),
                        None => a.push((p.id, p.submitted.get())),
                    }
                }
            },
            move || done(std::mem::take(&mut *acc.lock())),
        );
    }

    /// The thread name `bdev_nvme_get_io_paths` groups by.
    pub(crate) fn thread_name() -> String {
        Thread::try_current().map_or_else(|_| String::new(), |t| t.name().to_string())
    }
}
