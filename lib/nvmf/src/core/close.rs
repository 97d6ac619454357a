//! A connection's end, transport-neutral: closing (no more input; what
//! waits for a `BdevIo`, a data buffer or its fused partner is released,
//! I/O in flight drains, queued PDUs go out within a linger), the end of
//! its association, and what goes back when the queue pair is dropped.

use super::qpair::{Phase, QpInner, QpTransport, LINGER_US};
use super::slot::SlotState;
use super::view::Env;
use bdevkit::clock;

impl<T: QpTransport> Drop for QpInner<T> {
    /// The queue goes: shared buffers it holds go back to the pool, its
    /// in-capsule buffers leave the accounting (and are freed with it).
    fn drop(&mut self) {
        for s in &mut self.slots {
            if let Some(b) = s.pool.take() {
                self.bufs.give_back(b);
            }
        }
        self.bufs.forget(&self.waiter);
        self.bufs.pool().account_icd(self.icd_bytes, false);
    }
}

impl<T: QpTransport> QpInner<T> {
    /// Starts closing: no more input; `linger` lets queued PDUs (a
    /// TermReq) go out first, within [`LINGER_US`].
    pub(crate) fn begin_close(&mut self, why: &'static str, linger: bool) {
        if matches!(self.phase, Phase::Closing { .. }) {
            return;
        }
        let deadline = if linger {
            clock::ticks() + clock::us_to_ticks(LINGER_US)
        } else {
            clock::ticks()
        };
        self.phase = Phase::Closing { deadline };
        self.close_reason = why;
        // AERs, commands waiting for a BdevIo or a data buffer end here;
        // I/O in flight drains.
        for s in std::mem::take(&mut self.aers) {
            self.release_slot(s);
        }
        while let Some(s) = self.io_wait.pop_front() {
            self.release_slot(s);
        }
        for i in 0..self.slots.len() {
            if matches!(self.slots[i].state, SlotState::BufWait | SlotState::Held) {
                self.release_slot(u16::try_from(i).unwrap_or(u16::MAX));
            }
        }
        self.fused_first = None;
        self.bufs.forget(&self.waiter);
    }

    /// Frees a slot without answering it; a shared buffer it holds goes
    /// back to the pool (one still in a bdev I/O goes when that completes).
    pub(crate) fn release_slot(&mut self, slot: u16) {
        if let Some(s) = self.slots.get_mut(usize::from(slot)) {
            if s.state != SlotState::Free {
                s.state = SlotState::Free;
                self.free.push(slot);
            }
            s.fuse = bdevkit_nvme_spec::cmd::Fuse::Normal;
            s.pair = None;
            if s.uses_pool {
                if let Some(b) = s.pool.take() {
                    s.uses_pool = false;
                    self.bufs.give_back(b);
                }
            }
        }
    }

    /// The connection is gone: the association ends (an admin queue takes
    /// its controller with it).
    pub(crate) fn finish(&mut self, env: &Env) {
        tracing::info!(
            peer = %self.peer,
            qid = self.conn.as_ref().map(|a| a.qid),
            reason = self.close_reason,
            "connection closed"
        );
        if let Some(a) = self.conn.take() {
            if a.qid == 0 {
                env.core.remove_ctrlr(&a.ctrlr);
            } else {
                a.ctrlr.release_qid(a.qid);
            }
        }
    }
}
