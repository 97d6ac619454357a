//! A bound on the copy-on-write copies a store runs at once.
//!
//! Every first write into a clone's cluster copies a whole cluster on the
//! store's thread. Started all at once (right after a snapshot, a queue of
//! writes lands on as many clusters as it holds), copies of large clusters
//! keep the device, and with a memory device the thread itself, busy for
//! as long as they take together, and everything else the store does
//! meanwhile (the next metadata write, the answer to the operation that
//! caused them) waits behind all of them. The budget lets
//! [`COPY_BYTES_IN_FLIGHT`] worth of clusters be copied at once (one at
//! least) and queues the others in order, so that other work waits for at
//! most that much copying.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use futures::channel::oneshot;

/// The bytes of cluster copies in flight at once, per store.
pub(crate) const COPY_BYTES_IN_FLIGHT: u64 = 8 << 20;

/// Copies in flight at most, whatever the cluster size.
const MAX_SLOTS: u64 = 64;

/// The copies a store may run at once.
#[derive(Debug)]
pub(crate) struct CopyBudget(Rc<Inner>);

#[derive(Debug)]
struct Inner {
    free: Cell<usize>,
    /// Copies waiting for a slot, in order.
    waiters: RefCell<VecDeque<oneshot::Sender<CopySlot>>>,
}

/// The right to copy one cluster; dropping it hands it to the next waiter.
#[derive(Debug)]
pub(crate) struct CopySlot(Option<Rc<Inner>>);

impl CopyBudget {
    /// The budget of a store of `cluster_size`-byte clusters.
    pub(crate) fn for_cluster_size(cluster_size: u32) -> Self {
        let slots = (COPY_BYTES_IN_FLIGHT / u64::from(cluster_size.max(1))).clamp(1, MAX_SLOTS);
        Self::with_slots(usize::try_from(slots).unwrap_or(1))
    }

    pub(crate) fn with_slots(slots: usize) -> Self {
        CopyBudget(Rc::new(Inner {
            free: Cell::new(slots.max(1)),
            waiters: RefCell::new(VecDeque::new()),
        }))
    }

    /// Waits for a slot (first come, first served).
    pub(crate) async fn take(&self) -> CopySlot {
        loop {
            let rx = {
                let mut waiters = self.0.waiters.borrow_mut();
                let free = self.0.free.get();
                if free > 0 && waiters.is_empty() {
                    self.0.free.set(free - 1);
                    return CopySlot(Some(Rc::clone(&self.0)));
                }
                let (tx, rx) = oneshot::channel();
                waiters.push_back(tx);
                rx
            };
            // The senders live as long as the budget, which outlives every
            // future borrowing its store: a cancel cannot happen, but a
            // retry is the answer if it did.
            if let Ok(slot) = rx.await {
                return slot;
            }
        }
    }

    /// Slots free now (tests).
    #[cfg(test)]
    fn free(&self) -> usize {
        self.0.free.get()
    }
}

impl Drop for CopySlot {
    fn drop(&mut self) {
        let Some(inner) = self.0.take() else { return };
        loop {
            let next = inner.waiters.borrow_mut().pop_front();
            let Some(tx) = next else { break };
            // A waiter whose future is gone gives the slot back.
            match tx.send(CopySlot(Some(Rc::clone(&inner)))) {
                Ok(()) => return,
                Err(mut back) => back.0 = None,
            }
        }
        inner.free.set(inner.free.get() + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn slots_follow_the_cluster_size() {
        assert_eq!(CopyBudget::for_cluster_size(4 << 20).free(), 2);
        assert_eq!(CopyBudget::for_cluster_size(16 << 20).free(), 1);
        assert_eq!(CopyBudget::for_cluster_size(16 << 10).free(), 64);
    }

    #[test]
    fn waiters_get_slots_in_order_and_a_dropped_waiter_passes_its_turn() {
        let b = CopyBudget::with_slots(1);
        let first = b.take().now_or_never().expect("a free slot");
        let mut second = Box::pin(b.take());
        let mut third = Box::pin(b.take());
        let mut fourth = Box::pin(b.take());
        assert!((&mut second).now_or_never().is_none());
        assert!((&mut third).now_or_never().is_none());
        assert!((&mut fourth).now_or_never().is_none());
        drop(third);
        drop(first);
        let s2 = (&mut second).now_or_never().expect("second is next");
        assert!((&mut fourth).now_or_never().is_none());
        drop(s2);
        let s4 = (&mut fourth).now_or_never().expect("then fourth");
        assert_eq!(b.free(), 0);
        drop(s4);
        assert_eq!(b.free(), 1);
    }

    #[test]
    fn a_slot_sent_to_a_waiter_that_then_goes_away_comes_back() {
        let b = CopyBudget::with_slots(1);
        let first = b.take().now_or_never().expect("a free slot");
        let mut second = Box::pin(b.take());
        assert!((&mut second).now_or_never().is_none());
        // The slot is sent, then the waiter is dropped before it polls.
        drop(first);
        drop(second);
        assert_eq!(b.free(), 1);
        assert!(b.take().now_or_never().is_some());
    }
}
