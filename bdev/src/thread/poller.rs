//! Pollers: functions a thread runs every loop iteration (active) or every
//! period (timed), and the set a thread keeps them in.
//!
//! A poller reaches the thread it runs on only through [`PollerHost`]: the
//! thread's [`Pollers`] set and its shared counters. So this file sits
//! below `lwthread.rs`, which owns the set and runs the poll loop over it.

use std::cell::{Cell, RefCell};
use std::collections::BinaryHeap;
use std::fmt;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;

use super::shared::ThreadShared;
use crate::clock;

/// What a poller reports after a run: whether it found work. Feeds the
/// busy/idle tick counters and lets an idle reactor sleep in interrupt mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollerStatus {
    /// The poller did work.
    Busy,
    /// Nothing to do.
    Idle,
}

impl From<bool> for PollerStatus {
    fn from(busy: bool) -> Self {
        if busy {
            PollerStatus::Busy
        } else {
            PollerStatus::Idle
        }
    }
}

/// Poller lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PollerState {
    Running,
    Paused,
    Unregistered,
}

pub(super) type PollerFn = Box<dyn FnMut(&Poller) -> PollerStatus>;

/// What a poller reaches of the thread that owns it.
pub(super) trait PollerHost {
    /// The thread's poller set.
    fn pollers(&self) -> &RefCell<Pollers>;
    /// The thread's shared state, for the poller counters.
    fn shared(&self) -> &ThreadShared;
}

pub(super) struct PollerEntry {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) period_ticks: u64,
    pub(super) period_us: u64,
    pub(super) state: Cell<PollerState>,
    pub(super) f: RefCell<Option<PollerFn>>,
    pub(super) run_count: Cell<u64>,
    pub(super) busy_count: Cell<u64>,
    pub(super) in_heap: Cell<bool>,
    pub(super) thread: Weak<dyn PollerHost>,
}

/// A registered poller. Cloning the handle does not duplicate the poller;
/// dropping every handle does **not** unregister it (as in SPDK): call
/// [`Poller::unregister`], also from inside the poller itself.
#[derive(Clone)]
pub struct Poller(pub(super) Rc<PollerEntry>);

impl fmt::Debug for Poller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Poller")
            .field("id", &self.0.id)
            .field("name", &self.0.name)
            .field("state", &self.0.state.get())
            .finish()
    }
}

/// A snapshot of one poller, for `thread_get_pollers`.
#[derive(Debug, Clone)]
pub struct PollerInfo {
    /// Poller name.
    pub name: String,
    /// Poller id (unique per thread).
    pub id: u64,
    /// `"running"`, `"paused"` or `"waiting"` (timed and not due).
    pub state: &'static str,
    /// Times it ran.
    pub run_count: u64,
    /// Times it reported busy.
    pub busy_count: u64,
    /// Period in microseconds (0 = active).
    pub period_us: u64,
}

impl Poller {
    /// Stops and removes the poller. Idempotent. The closure is dropped now,
    /// or right after it returns when called from inside it.
    pub fn unregister(&self) {
        let e = &self.0;
        if e.state.get() == PollerState::Unregistered {
            return;
        }
        let was_paused = e.state.get() == PollerState::Paused;
        e.state.set(PollerState::Unregistered);
        if let Some(t) = e.thread.upgrade() {
            poller_removed(&*t, e.period_ticks > 0, was_paused);
        }
        // If the closure is running, `try_borrow_mut` fails and the poll loop
        // drops it when the call returns.
        let f = e.f.try_borrow_mut().ok().and_then(|mut f| f.take());
        drop(f);
    }

    /// Pauses the poller (it stays registered).
    pub fn pause(&self) {
        if self.0.state.get() == PollerState::Running {
            self.0.state.set(PollerState::Paused);
            if let Some(t) = self.0.thread.upgrade() {
                t.shared().paused_pollers.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Resumes a paused poller.
    pub fn resume(&self) {
        if self.0.state.get() == PollerState::Paused {
            self.0.state.set(PollerState::Running);
            if let Some(t) = self.0.thread.upgrade() {
                t.shared().paused_pollers.fetch_sub(1, Ordering::Relaxed);
                if self.0.period_ticks > 0 && !self.0.in_heap.get() {
                    schedule_timed(t.pollers(), &self.0, clock::ticks());
                }
            }
        }
    }

    /// Whether the poller is still registered.
    #[must_use]
    pub fn is_registered(&self) -> bool {
        self.0.state.get() != PollerState::Unregistered
    }

    /// Whether the poller is paused.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        self.0.state.get() == PollerState::Paused
    }

    /// The poller's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// How many times the poller ran.
    #[must_use]
    pub fn run_count(&self) -> u64 {
        self.0.run_count.get()
    }
}

/// A timed poller's place in the deadline heap (min-heap by deadline).
pub(super) struct TimedSlot {
    pub(super) deadline: u64,
    seq: u64,
    pub(super) entry: Rc<PollerEntry>,
}

impl PartialEq for TimedSlot {
    fn eq(&self, o: &Self) -> bool {
        self.deadline == o.deadline && self.seq == o.seq
    }
}
impl Eq for TimedSlot {}
impl PartialOrd for TimedSlot {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for TimedSlot {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap.
        (o.deadline, o.seq).cmp(&(self.deadline, self.seq))
    }
}

/// A thread's pollers: the active list, run every iteration, and the heap
/// of timed pollers by deadline.
#[derive(Default)]
pub(super) struct Pollers {
    pub(super) active: Vec<Rc<PollerEntry>>,
    pub(super) timed: BinaryHeap<TimedSlot>,
    /// Registered (not yet unregistered) pollers, active and timed.
    pub(super) live: usize,
    next_id: u64,
    next_seq: u64,
    /// A poller was unregistered: the poll loop drops it from the list and
    /// the heap.
    pub(super) dirty: bool,
}

impl Pollers {
    /// Snapshots of the registered pollers, by id.
    pub(super) fn infos(&self) -> Vec<PollerInfo> {
        let mut out: Vec<PollerInfo> = self
            .active
            .iter()
            .chain(self.timed.iter().map(|s| &s.entry))
            .filter(|e| e.state.get() != PollerState::Unregistered)
            .map(|e| PollerInfo {
                name: e.name.clone(),
                id: e.id,
                state: match e.state.get() {
                    PollerState::Paused => "paused",
                    _ if e.period_ticks > 0 => "waiting",
                    _ => "running",
                },
                run_count: e.run_count.get(),
                busy_count: e.busy_count.get(),
                period_us: e.period_us,
            })
            .collect();
        out.sort_by_key(|p| p.id);
        out.dedup_by_key(|p| p.id);
        out
    }
}

/// Registers a poller on `host` (see `Thread::register_poller`).
pub(super) fn register<H: PollerHost + 'static>(
    host: &Rc<H>,
    name: String,
    period_us: u64,
    f: PollerFn,
) -> Poller {
    let period_ticks = if period_us == 0 {
        0
    } else {
        clock::us_to_ticks(period_us).max(1)
    };
    let mut ps = host.pollers().borrow_mut();
    ps.next_id += 1;
    let thread: Weak<dyn PollerHost> = Rc::<H>::downgrade(host);
    let entry = Rc::new(PollerEntry {
        id: ps.next_id,
        name,
        period_ticks,
        period_us,
        state: Cell::new(PollerState::Running),
        f: RefCell::new(Some(f)),
        run_count: Cell::new(0),
        busy_count: Cell::new(0),
        in_heap: Cell::new(false),
        thread,
    });
    ps.live += 1;
    if period_ticks == 0 {
        ps.active.push(Rc::clone(&entry));
        host.shared().active_pollers.fetch_add(1, Ordering::Relaxed);
    } else {
        host.shared().timed_pollers.fetch_add(1, Ordering::Relaxed);
    }
    drop(ps);
    if period_ticks > 0 {
        schedule_timed(host.pollers(), &entry, clock::ticks());
    }
    Poller(entry)
}

/// Puts a timed poller in the heap, due one period after `now`.
pub(super) fn schedule_timed(pollers: &RefCell<Pollers>, e: &Rc<PollerEntry>, now: u64) {
    let mut ps = pollers.borrow_mut();
    ps.next_seq += 1;
    let seq = ps.next_seq;
    ps.timed.push(TimedSlot {
        deadline: now.saturating_add(e.period_ticks),
        seq,
        entry: Rc::clone(e),
    });
    e.in_heap.set(true);
}

/// Unregisters every poller of the set (a thread going away).
pub(super) fn unregister_all(pollers: &RefCell<Pollers>) {
    let (active, timed) = {
        let mut ps = pollers.borrow_mut();
        (
            std::mem::take(&mut ps.active),
            std::mem::take(&mut ps.timed),
        )
    };
    for e in active.iter().chain(timed.iter().map(|s| &s.entry)) {
        Poller(Rc::clone(e)).unregister();
    }
    drop((active, timed));
}

fn poller_removed(host: &dyn PollerHost, timed: bool, was_paused: bool) {
    let mut ps = host.pollers().borrow_mut();
    ps.live = ps.live.saturating_sub(1);
    ps.dirty = true;
    drop(ps);
    let shared = host.shared();
    if timed {
        shared.timed_pollers.fetch_sub(1, Ordering::Relaxed);
    } else {
        shared.active_pollers.fetch_sub(1, Ordering::Relaxed);
    }
    if was_paused {
        shared.paused_pollers.fetch_sub(1, Ordering::Relaxed);
    }
}
