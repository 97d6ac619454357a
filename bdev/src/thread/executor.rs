//! The slots of a thread's local task executor: the futures spawned with
//! [`Thread::spawn_local`](super::Thread::spawn_local), each under a key of
//! slot index and generation, so that a stale waker finds nothing.
//!
//! The waker and the poll itself need the running thread and are in
//! `lwthread.rs`.

use std::future::Future;
use std::pin::Pin;

/// A spawned local future.
pub(super) type LocalTask = Pin<Box<dyn Future<Output = ()>>>;

/// The task slots of one thread.
#[derive(Default)]
pub(super) struct Tasks {
    /// Generation and task (`None` while it is being polled or once done).
    slots: Vec<(u32, Option<LocalTask>)>,
    free: Vec<u32>,
    /// Spawned tasks not yet finished.
    pub(super) live: usize,
}

impl Tasks {
    /// Stores a new task; returns its key.
    pub(super) fn insert(&mut self, task: LocalTask) -> u64 {
        self.live += 1;
        if let Some(idx) = self.free.pop() {
            let slot = &mut self.slots[idx as usize];
            slot.0 = slot.0.wrapping_add(1);
            slot.1 = Some(task);
            (u64::from(slot.0) << 32) | u64::from(idx)
        } else {
            let idx = u32::try_from(self.slots.len()).expect("invariant: < 2^32 tasks");
            self.slots.push((0, Some(task)));
            u64::from(idx)
        }
    }

    /// Takes the task of `key` out for a poll; `None` when it is done (or
    /// being polled).
    pub(super) fn take(&mut self, key: u64) -> Option<LocalTask> {
        let (idx, gen) = split_key(key);
        match self.slots.get_mut(idx) {
            Some(slot) if slot.0 == gen => slot.1.take(),
            _ => None,
        }
    }

    /// After a poll: frees the slot of a finished task (the caller drops
    /// the future, outside this borrow).
    pub(super) fn finish(&mut self, key: u64) {
        let (idx, _) = split_key(key);
        self.live -= 1;
        self.free
            .push(u32::try_from(idx).expect("invariant: < 2^32 tasks"));
    }

    /// After a poll: puts a pending task back in its slot.
    pub(super) fn put_back(&mut self, key: u64, task: LocalTask) {
        let (idx, _) = split_key(key);
        if let Some(slot) = self.slots.get_mut(idx) {
            slot.1 = Some(task);
        }
    }
}

fn split_key(key: u64) -> (usize, u32) {
    ((key & 0xffff_ffff) as usize, (key >> 32) as u32)
}
