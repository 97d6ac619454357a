//! A per-channel queue of I/Os a module has finished synchronously, and
//! the active poller that completes them in the next loop iteration (the
//! completion contract forbids completing inside `submit`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;

use super::io::BdevIo;
use super::types::IoStatus;
use crate::error::Result;
use crate::thread::{Poller, PollerStatus, Thread};

#[derive(Default)]
struct Queues {
    pending: RefCell<VecDeque<(BdevIo, IoStatus)>>,
    spare: RefCell<VecDeque<(BdevIo, IoStatus)>>,
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

/// Completes the whole batch. The queue is swapped with a spare so that
/// completions which submit again go to the other queue, and no
/// allocation happens in steady state.
fn drain(q: &Queues) -> PollerStatus {
    if q.pending.borrow().is_empty() {
        return PollerStatus::Idle;
    }
    let mut batch = std::mem::take(&mut *q.spare.borrow_mut());
    std::mem::swap(&mut batch, &mut *q.pending.borrow_mut());
    for (io, status) in batch.drain(..) {
        io.complete(status);
    }
    *q.spare.borrow_mut() = batch;
    PollerStatus::Busy
}
