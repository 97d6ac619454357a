//! Answers on their way back: a handler's [`Responder`](crate::Responder) encodes the answer
//! on the answering thread and pushes it onto the queue the server shares, waking the server's
//! epoll fd when the answer comes from another thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};

use mio::Waker;
use parking_lot::Mutex;
use serde_json::Value;

use crate::message::{encode_raw_result, encode_response, Id};
use crate::registry::Reply;
use crate::RpcError;

/// One answer on its way to a connection.
pub(super) struct Completion {
    pub(super) conn: usize,
    pub(super) batch: Option<usize>,
    /// Encoded response (with `\n` unless a batch element); `None` for a notification's result.
    pub(super) body: Option<Vec<u8>>,
}

pub(super) struct Queue {
    pub(super) items: Vec<Completion>,
    /// The thread inside `poll` right now: its answers need no wake-up.
    pub(super) polling: Option<ThreadId>,
}

pub(super) struct Shared {
    pub(super) queue: Mutex<Queue>,
    pub(super) waker: Waker,
    /// Answers are queued: one relaxed load tells a polling owner to poll
    /// now rather than at its next period ([`Server::answers_pending`]).
    ///
    /// [`Server::answers_pending`]: super::Server::answers_pending
    pub(super) pending: AtomicBool,
}

impl Shared {
    pub(super) fn push(&self, c: Completion) {
        let mut q = self.queue.lock();
        let was_empty = q.items.is_empty();
        q.items.push(c);
        self.pending.store(true, Ordering::Release);
        let in_poll = q.polling == Some(thread::current().id());
        drop(q);
        if was_empty && !in_poll {
            self.wake();
        }
    }

    pub(super) fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            tracing::warn!(error = %e, "rpc server wake-up failed");
        }
    }
}

/// Where a request's answer goes.
pub(super) struct Route {
    pub(super) shared: Arc<Shared>,
    pub(super) conn: usize,
    pub(super) alive: Arc<AtomicBool>,
    pub(super) batch: Option<usize>,
    pub(super) id: Option<Id>,
}

impl Route {
    pub(super) fn deliver(self, r: Result<Value, RpcError>) {
        self.deliver_reply(Reply::Value(r));
    }

    pub(super) fn deliver_reply(self, reply: Reply) {
        if !self.alive.load(Ordering::Acquire) {
            return;
        }
        let is_ok = !matches!(reply, Reply::Value(Err(_)));
        // Notifications (no id, or id null) get no result, but errors are always sent.
        let body = if is_ok && self.id.is_none() {
            None
        } else {
            let mut b = match &reply {
                Reply::Value(r) => encode_response(self.id.as_ref(), r),
                Reply::Raw(raw) => encode_raw_result(self.id.as_ref(), raw),
            };
            if self.batch.is_none() {
                b.push(b'\n');
            }
            Some(b)
        };
        self.shared.push(Completion {
            conn: self.conn,
            batch: self.batch,
            body,
        });
    }
}
