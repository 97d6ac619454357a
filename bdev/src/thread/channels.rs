//! The map of I/O channels a thread holds, one per I/O device, and the
//! [`ChannelAny`] face the map sees them by.
//!
//! Below both `lwthread.rs` (whose thread owns the map) and
//! `io_channel.rs` (whose channels enter and leave it).

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};

/// What a thread's channel map holds: any channel, with its device's name
/// (for `thread_get_io_channels`).
pub(crate) trait ChannelAny: Any {
    fn device_name(&self) -> &str;
}

/// A thread's channels by device id. The map holds weak references: a
/// channel lives as long as its handles, and removes itself when the last
/// one drops.
#[derive(Default)]
pub(super) struct ChannelMap(RefCell<HashMap<u64, Weak<dyn ChannelAny>>>);

impl ChannelMap {
    /// The live channel of device `id`.
    pub(super) fn get(&self, id: u64) -> Option<Rc<dyn Any>> {
        self.0
            .borrow()
            .get(&id)
            .and_then(Weak::upgrade)
            .map(|rc| rc as Rc<dyn Any>)
    }

    pub(super) fn insert(&self, id: u64, ch: Weak<dyn ChannelAny>) {
        self.0.borrow_mut().insert(id, ch);
    }

    pub(super) fn remove(&self, id: u64) {
        self.0.borrow_mut().remove(&id);
    }

    /// Device names and reference counts of the live channels, by device
    /// id.
    pub(super) fn names_and_refs(&self) -> Vec<(String, usize)> {
        let mut v: Vec<(u64, String, usize)> = self
            .0
            .borrow()
            .iter()
            .filter_map(|(id, w)| {
                let n = w.strong_count();
                // `n` counts the map's own upgrade too, so read it first.
                w.upgrade().map(|c| (*id, c.device_name().to_string(), n))
            })
            .collect();
        v.sort_by_key(|(id, _, _)| *id);
        v.into_iter().map(|(_, name, n)| (name, n)).collect()
    }

    /// Device ids and reference counts of the live channels.
    pub(super) fn refs(&self) -> Vec<(u64, usize)> {
        self.0
            .borrow()
            .iter()
            .map(|(id, w)| (*id, w.strong_count()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Whether every channel has been released.
    pub(super) fn all_released(&self) -> bool {
        self.0.borrow().values().all(|w| w.strong_count() == 0)
    }
}
