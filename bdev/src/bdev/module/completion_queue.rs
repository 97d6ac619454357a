//! A per-channel queue of I/Os a module has finished synchronously, and
//! the active poller that completes them in the next loop iteration (the
//! completion contract forbids completing inside `submit`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;

use super::ModuleIo;
use crate::bdev::io::BdevIo;
use crate::bdev::types::IoStatus;
use crate::error::Result;
use crate::thread::{Poller, PollerStatus, Thread};

#[derive(Default)]
struct Queues {
    pending: RefCell<VecDeque<(BdevIo, IoStatus)>>,
}

/// Completes queued I/Os from a poller on the current thread. Create one
/// per module channel; it unregisters its poller when dropped.
pub struct CompletionQueue {
    q: Rc<Queues>,
    poller: Poller,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("pending", &self.q.pending.borrow().len())
            .finish()
    }
}

impl CompletionQueue {
    /// A queue whose poller (named `name`) runs on the current thread.
    pub fn new(name: &str) -> Result<Self> {
        let t = Thread::try_current()?;
        let q = Rc::new(Queues::default());
        let q2 = Rc::clone(&q);
        let poller = t.register_poller(name, 0, move |_| drain(&q2));
        Ok(CompletionQueue { q, poller })
    }

    /// Completes `io` with `status` in the next poll.
    #[inline]
    pub fn push(&self, io: BdevIo, status: IoStatus) {
        self.q.pending.borrow_mut().push_back((io, status));
    }

    /// Queued I/Os.
    #[must_use]
    pub fn len(&self) -> usize {
        self.q.pending.borrow().len()
    }

    /// Whether nothing is queued.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.q.pending.borrow().is_empty()
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        self.poller.unregister();
    }
}

/// Completes the I/Os queued before this poll; those that completions
/// submit again land behind them and wait for the next poll. No allocation
/// in steady state (the deque keeps its capacity).
fn drain(q: &Queues) -> PollerStatus {
    let n = q.pending.borrow().len();
    if n == 0 {
        return PollerStatus::Idle;
    }
    for _ in 0..n {
        let next = q.pending.borrow_mut().pop_front();
        match next {
            Some((io, status)) => io.complete(status),
            None => break,
        }
    }
    PollerStatus::Busy
}
