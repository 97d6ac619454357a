//! The part of a lightweight thread that other OS threads see
//! ([`ThreadShared`]): its identity, its message queue, the counters that
//! statistics read, and its reactor.
//!
//! Below everything that runs a thread. The `Send + Sync` handle around it,
//! [`ThreadHandle`](super::ThreadHandle), is defined in `lwthread.rs`: in
//! release builds the methods of a type are compiled in the codegen unit of
//! the module that defines the type, and `send_boxed` must share one with
//! the poll loop, where `SegQueue::push` is compiled, to have it inlined
//! (defined here, `ThreadHandle` cost +16 instructions per message).

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crossbeam_queue::SegQueue;

use super::cpuset::CpuSet;
use super::reactor::ReactorShared;
use crate::clock;

/// A message: a closure run once on the target thread.
pub(crate) type Msg = Box<dyn FnOnce() + Send>;

static NEXT_THREAD_ID: AtomicU64 = AtomicU64::new(1);

/// A reactor, as its threads see it: its queue of incoming threads holds
/// their shared state.
pub(crate) type Reactor = ReactorShared<Arc<ThreadShared>>;

/// The part of a thread that other OS threads can see.
pub(crate) struct ThreadShared {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) cpumask: CpuSet,
    pub(super) msgs: SegQueue<Msg>,
    /// Messages pushed / popped so far: an idle thread's poll checks for
    /// messages with one load instead of probing the queue.
    pub(super) pushed: AtomicU64,
    pub(super) popped: AtomicU64,
    pub(crate) reactor: Arc<Reactor>,
    /// The runtime's shared state (`runtime::RuntimeShared`), erased so
    /// that this layer does not depend on the runtime above it;
    /// [`Thread::runtime`](super::Thread::runtime) downcasts it.
    pub(crate) runtime: Weak<dyn Any + Send + Sync>,
    pub(super) exited: AtomicBool,
    pub(crate) busy_ticks: AtomicU64,
    pub(crate) idle_ticks: AtomicU64,
    pub(crate) active_pollers: AtomicU32,
    pub(crate) timed_pollers: AtomicU32,
    pub(crate) paused_pollers: AtomicU32,
    pub(crate) created_ticks: u64,
}

impl ThreadShared {
    pub(crate) fn new(
        name: String,
        cpumask: CpuSet,
        reactor: Arc<Reactor>,
        runtime: Weak<dyn Any + Send + Sync>,
    ) -> Arc<Self> {
        Arc::new(ThreadShared {
            id: NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed),
            name,
            cpumask,
            msgs: SegQueue::new(),
            pushed: AtomicU64::new(0),
            popped: AtomicU64::new(0),
            reactor,
            runtime,
            exited: AtomicBool::new(false),
            busy_ticks: AtomicU64::new(0),
            idle_ticks: AtomicU64::new(0),
            active_pollers: AtomicU32::new(0),
            timed_pollers: AtomicU32::new(0),
            paused_pollers: AtomicU32::new(0),
            created_ticks: clock::ticks(),
        })
    }

    #[inline]
    pub(crate) fn has_msgs(&self) -> bool {
        self.pushed.load(Ordering::SeqCst) != self.popped.load(Ordering::Relaxed)
    }
}
