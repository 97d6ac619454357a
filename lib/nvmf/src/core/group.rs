//! A poll group: one lightweight thread's share of the target. It holds
//! the thread's environment (namespace views, buffer caches: `view.rs`)
//! and one transport poll group per transport that has connections here
//! (made at the first), polls them from one poller, serves the requests
//! waiting for data buffers, and runs the keep alive checks from a timer.
//! In interrupt mode each transport poll group's fd is in the thread's
//! wake-up set, so an idle reactor sleeps until one of them has work.
//!
//! The group is the per-thread context of the target's I/O device
//! (`service/mod.rs`), so the control plane reaches every group with a
//! channel walk.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use bdevkit::clock;
use bdevkit::thread::{InterruptFd, IoChannel, Poller, PollerStatus, Thread};
use serde_json::Value;

use super::pool::BufPool;
use super::view::Env;
use crate::addr::ListenAddr;
use crate::ctrlr::Controller;
use crate::opts::TransportOpts;
use crate::target::Core;
use crate::transport::{Accepted, Transport, TransportPollGroup};

/// Housekeeping period (keep alive checks), µs.
const HOUSEKEEPING_US: u64 = 100_000;

/// One transport's side of this group.
#[derive(Debug)]
struct TGroup {
    trtype: &'static str,
    g: Box<dyn TransportPollGroup>,
    /// Its fd in the thread's wake-up set (interrupt mode).
    irq: Option<InterruptFd>,
}

/// One poll group.
#[derive(Debug)]
pub(crate) struct PollGroup {
    pub env: Env,
    tgroups: RefCell<Vec<TGroup>>,
    pollers: RefCell<Vec<Poller>>,
    interrupt: Cell<bool>,
    stopping: Cell<bool>,
}

impl PollGroup {
    /// A group for the current thread.
    pub fn new(core: Arc<Core>) -> std::io::Result<PollGroup> {
        let t =
            Thread::current().ok_or_else(|| std::io::Error::other("not on a bdevkit thread"))?;
        Ok(PollGroup {
            env: Env::new(core, t.handle(), t.name().to_string()),
            tgroups: RefCell::new(Vec::new()),
            pollers: RefCell::new(Vec::new()),
            interrupt: Cell::new(false),
            stopping: Cell::new(false),
        })
    }

    /// Starts the group's pollers on its thread (`ch` is its channel,
    /// which the pollers keep alive until the group stops).
    pub fn start(ch: &IoChannel<PollGroup>, interrupt_mode: bool) {
        let Some(t) = Thread::current() else { return };
        ch.interrupt.set(interrupt_mode);
        let g = ch.clone();
        let main = t.register_poller("nvmf_poll_group_poll", 0, move |_| {
            PollerStatus::from(g.poll_once())
        });
        let g = ch.clone();
        let hk = t.register_poller("nvmf_poll_group_housekeeping", HOUSEKEEPING_US, move |_| {
            g.housekeeping();
            PollerStatus::Idle
        });
        ch.pollers.borrow_mut().extend([main, hk]);
    }

    /// Takes a new connection of transport `t` (`trtype`), sent from the
    /// accept poller, with the transport's options and buffer pool.
    pub fn add_qpair(
        &self,
        t: &Arc<dyn Transport>,
        trtype: &'static str,
        q: Accepted,
        opts: &TransportOpts,
        pool: &Arc<BufPool>,
    ) {
        if self.stopping.get() {
            return;
        }
        let known = self.tgroups.borrow().iter().any(|g| g.trtype == trtype);
        if !known {
            let g = match t.poll_group_create() {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!(error = %e, trtype, "cannot serve a new connection");
                    return;
                }
            };
            let irq = match (self.interrupt.get(), g.interrupt_fd(), Thread::current()) {
                (true, Some(fd), Some(t)) => match t.register_interrupt_fd(fd) {
                    Ok(irq) => Some(irq),
                    Err(e) => {
                        tracing::warn!(error = %e, "poll group: polling its connections instead");
                        None
                    }
                },
                _ => None,
            };
            self.tgroups.borrow_mut().push(TGroup { trtype, g, irq });
        }
        let bufs = self.env.group_bufs(pool);
        let tgroups = self.tgroups.borrow();
        if let Some(g) = tgroups.iter().find(|g| g.trtype == trtype) {
            g.g.add_qpair(q, &self.env, opts, bufs);
        }
    }

    /// One poll: every transport's connections, then the requests waiting
    /// for data buffers.
    fn poll_once(&self) -> bool {
        let mut busy = false;
        for g in self.tgroups.borrow().iter() {
            busy |= g.g.poll(&self.env);
        }
        // Buffers that came back go to the requests waiting for them.
        busy |= self.env.serve_bufs();
        if self.stopping.get() && self.connections() == 0 {
            self.finish_stop();
        }
        busy
    }

    fn housekeeping(&self) {
        let now = clock::ticks();
        for g in self.tgroups.borrow().iter() {
            g.g.qpairs().housekeeping(now);
        }
    }

    /// Closes the connections whose controller (or, unconnected, whose
    /// listener) matches.
    pub fn disconnect_if(
        &self,
        pred: &dyn Fn(Option<&Controller>, &ListenAddr) -> bool,
        why: &'static str,
    ) {
        for g in self.tgroups.borrow().iter() {
            g.g.qpairs().disconnect_if(pred, why);
        }
    }

    /// `nvmf_subsystem_get_qpairs` objects of subsystem `id` on this group.
    pub fn qpairs_json(&self, id: u32) -> Vec<Value> {
        let mut out = Vec::new();
        for g in self.tgroups.borrow().iter() {
            g.g.qpairs().qpairs_json(id, &self.env.name, &mut out);
        }
        out
    }

    /// Number of connections.
    pub fn connections(&self) -> usize {
        self.tgroups
            .borrow()
            .iter()
            .map(|g| g.g.qpairs().count())
            .sum()
    }

    /// Stops the group: every connection closes (draining its I/O), then
    /// the pollers go and the thread exits.
    pub fn stop(&self) {
        self.stopping.set(true);
        for g in self.tgroups.borrow().iter() {
            g.g.qpairs().stop();
        }
    }

    fn finish_stop(&self) {
        let pollers = std::mem::take(&mut *self.pollers.borrow_mut());
        if pollers.is_empty() {
            return;
        }
        for g in self.tgroups.borrow_mut().iter_mut() {
            g.irq.take();
        }
        self.env.drop_all();
        for p in &pollers {
            p.unregister();
        }
        if let Some(t) = Thread::current() {
            t.exit();
        }
        tracing::debug!(group = %self.env.name, "poll group stopped");
    }
}
