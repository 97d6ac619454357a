//! The connections of one transport poll group: a table of queue pairs
//! (an index per connection, reused after it goes, so a transport can use
//! it as its event token), the loop that services those with work, and
//! the core's operations on all of them ([`QpairSet`]). A transport's
//! poll group embeds one and adds how it learns which connections have
//! events.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Value};

use super::qpair::{Phase, QpTransport, Qpair};
use super::view::Env;
use crate::addr::ListenAddr;
use crate::ctrlr::Controller;
use crate::transport::QpairSet;

/// A poll group's connections of one transport.
#[derive(Debug)]
pub(crate) struct Conns<T: QpTransport> {
    /// By index; `None`: free.
    pub list: RefCell<Vec<Option<Rc<Qpair<T>>>>>,
    free: RefCell<Vec<usize>>,
}

impl<T: QpTransport> Default for Conns<T> {
    fn default() -> Self {
        Conns {
            list: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
        }
    }
}

impl<T: QpTransport> Conns<T> {
    /// An index for a new connection (put it there with [`Conns::set`],
    /// or give the index back with [`Conns::unreserve`]).
    pub fn reserve(&self) -> usize {
        self.free.borrow_mut().pop().unwrap_or_else(|| {
            let mut c = self.list.borrow_mut();
            c.push(None);
            c.len() - 1
        })
    }

    /// Gives back an index [`Conns::reserve`] handed out.
    pub fn unreserve(&self, i: usize) {
        self.free.borrow_mut().push(i);
    }

    /// Puts `q` at index `i`.
    pub fn set(&self, i: usize, q: Rc<Qpair<T>>) {
        if let Some(slot) = self.list.borrow_mut().get_mut(i) {
            *slot = Some(q);
        }
    }

    /// Services every connection with work; each that finished goes,
    /// after `gone` (the transport forgets its events).
    #[inline]
    pub fn service(&self, env: &Env, mut gone: impl FnMut(&Qpair<T>)) -> bool {
        let mut busy = false;
        let n = self.list.borrow().len();
        for i in 0..n {
            let q = self.list.borrow().get(i).cloned().flatten();
            let Some(q) = q else { continue };
            if q.wants_service() {
                busy |= q.service(env);
                if q.done.get() {
                    gone(&q);
                    if let Some(slot) = self.list.borrow_mut().get_mut(i) {
                        *slot = None;
                    }
                    self.free.borrow_mut().push(i);
                }
            }
        }
        busy
    }
}

impl<T: QpTransport> QpairSet for Conns<T> {
    fn housekeeping(&self, now: u64) {
        for q in self.list.borrow().iter().flatten() {
            q.housekeeping(now);
        }
    }

    fn disconnect_if(
        &self,
        pred: &dyn Fn(Option<&Controller>, &ListenAddr) -> bool,
        why: &'static str,
    ) {
        for q in self.list.borrow().iter().flatten() {
            let hit = match q.q.try_borrow() {
                Ok(inner) => pred(inner.conn.as_ref().map(|a| &*a.ctrlr), &inner.via),
                Err(_) => false,
            };
            if hit {
                q.disconnect(why);
            }
        }
    }

    fn qpairs_json(&self, id: u32, thread: &str, out: &mut Vec<Value>) {
        for q in self.list.borrow().iter().flatten() {
            let Ok(inner) = q.q.try_borrow() else {
                continue;
            };
            let Some(a) = &inner.conn else { continue };
            if a.ctrlr.subsys_id != id {
                continue;
            }
            let state = if matches!(inner.phase, Phase::Closing { .. }) {
                "deactivating"
            } else {
                "enabled"
            };
            out.push(json!({
                "cntlid": a.ctrlr.cntlid,
                "qid": a.qid,
                "state": state,
                "thread": thread,
                "hostnqn": a.ctrlr.hostnqn,
                "listen_address": inner.via.to_json(),
                "peer_address": inner.peer.to_json(),
            }));
        }
    }

    fn count(&self) -> usize {
        self.list.borrow().iter().flatten().count()
    }

    fn stop(&self) {
        for q in self.list.borrow().iter().flatten() {
            q.disconnect("target stopping");
        }
    }
}
