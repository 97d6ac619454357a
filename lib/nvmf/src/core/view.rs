//! What a poll group thread keeps per subsystem: a view of its namespaces
//! with this thread's bdev channels, shared by the group's I/O queue
//! pairs of that subsystem. The control plane changes a view only
//! through messages to the thread (`service/ns.rs` walks the groups), so the
//! I/O path reads it without locks.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use bdevkit::bdev::{Bdev, BdevChannel, IoType};
use bdevkit::thread::ThreadHandle;

use super::pool::{BufPool, GroupBufs};
use crate::subsystem::Namespace;
use crate::target::Core;

/// One namespace on this thread.
#[derive(Debug)]
pub(crate) struct NsChan {
    pub ch: BdevChannel,
    pub bdev: Bdev,
    /// log2 of the block size.
    pub shift: u32,
    pub flush: bool,
    pub compare: bool,
    pub unmap: bool,
    pub write_zeroes: bool,
    /// Atomic compare-and-write (fused Compare and Write).
    pub compare_and_write: bool,
}

impl NsChan {
    fn open(ns: &Namespace) -> Option<NsChan> {
        let ch = match ns.desc.get_io_channel() {
            Ok(ch) => ch,
            Err(e) => {
                tracing::warn!(bdev = %ns.bdev.name(), error = %e, "no channel for a namespace");
                return None;
            }
        };
        let b = ns.bdev.clone();
        Some(NsChan {
            ch,
            shift: b.block_size().trailing_zeros(),
            flush: b.supports(IoType::Flush),
            compare: b.supports(IoType::Compare),
            unmap: b.supports(IoType::Unmap),
            write_zeroes: b.supports(IoType::WriteZeroes),
            compare_and_write: b.supports(IoType::CompareAndWrite),
            bdev: b,
        })
    }
}

/// A subsystem's namespaces on this thread, indexed by nsid - 1.
#[derive(Debug)]
pub(crate) struct SubsysView {
    pub ns: RefCell<Vec<Option<NsChan>>>,
}

impl SubsysView {
    fn set(&self, nsid: u32, ns: Option<&Namespace>) {
        let Some(i) = usize::try_from(nsid).ok().and_then(|n| n.checked_sub(1)) else {
            return;
        };
        let entry = ns.and_then(NsChan::open);
        let mut v = self.ns.borrow_mut();
        if v.len() <= i {
            v.resize_with(i + 1, || None);
        }
        v[i] = entry;
    }
}

/// A poll group's environment, as its queue pairs see it.
#[derive(Debug)]
pub(crate) struct Env {
    pub core: Arc<Core>,
    pub thread: ThreadHandle,
    /// The group's thread name (`nvmf_tgt_poll_group_000`).
    pub name: String,
    views: RefCell<HashMap<u32, Rc<SubsysView>>>,
    /// This thread's side of each transport's buffer pool (made at the
    /// transport's first connection here).
    bufs: RefCell<Vec<Rc<GroupBufs>>>,
}

impl Env {
    pub fn new(core: Arc<Core>, thread: ThreadHandle, name: String) -> Env {
        Env {
            core,
            thread,
            name,
            views: RefCell::new(HashMap::new()),
            bufs: RefCell::new(Vec::new()),
        }
    }

    /// This thread's side of `pool`.
    pub fn group_bufs(&self, pool: &Arc<BufPool>) -> Rc<GroupBufs> {
        let mut b = self.bufs.borrow_mut();
        if let Some(g) = b.iter().find(|g| g.is_of(pool)) {
            return Rc::clone(g);
        }
        let g = GroupBufs::new(pool, self.thread.clone());
        b.push(Rc::clone(&g));
        g
    }

    /// Hands shared buffers to requests that wait for them (see
    /// [`GroupBufs::serve`]); whether it did anything.
    pub fn serve_bufs(&self) -> bool {
        let mut busy = false;
        let mut i = 0;
        // One at a time, outside the borrow: serving runs queue pairs.
        loop {
            let g = self.bufs.borrow().get(i).cloned();
            let Some(g) = g else { break };
            busy |= g.serve();
            i += 1;
        }
        busy
    }

    /// The view of subsystem `id`, created from `namespaces` (its
    /// namespaces when the queue connected) if this thread has none yet.
    pub fn view(&self, id: u32, namespaces: &[Arc<Namespace>]) -> Rc<SubsysView> {
        if let Some(v) = self.views.borrow().get(&id) {
            return Rc::clone(v);
        }
        let v = Rc::new(SubsysView {
            ns: RefCell::new(Vec::new()),
        });
        for n in namespaces {
            v.set(n.nsid, Some(n));
        }
        self.views.borrow_mut().insert(id, Rc::clone(&v));
        v
    }

    /// Namespace `nsid` of subsystem `id` is now `ns` (added) or gone
    /// (`None`); only threads that have the view change it.
    pub fn set_ns(&self, id: u32, nsid: u32, ns: Option<&Namespace>) {
        let v = self.views.borrow().get(&id).cloned();
        if let Some(v) = v {
            v.set(nsid, ns);
        }
    }

    /// Subsystem `id` is gone: its channels go with its view (queue pairs
    /// still holding it keep an empty one).
    pub fn drop_view(&self, id: u32) {
        let v = self.views.borrow_mut().remove(&id);
        if let Some(v) = v {
            v.ns.borrow_mut().clear();
        }
    }

    /// Drops every view and the buffer cache (target shutdown).
    pub fn drop_all(&self) {
        self.bufs.borrow_mut().clear();
        let all: Vec<Rc<SubsysView>> = self.views.borrow_mut().drain().map(|(_, v)| v).collect();
        for v in all {
            v.ns.borrow_mut().clear();
        }
    }
}
