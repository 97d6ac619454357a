//! How the core answers a command and moves its data, in its own terms:
//! the completion entry (status, dwords, SQ head, queue id), the data to
//! send to the host or to fetch from it, and the slot's state; its
//! transport puts them on the wire ([`QpTransport::respond`],
//! [`QpTransport::send_data`], [`QpTransport::fetch_data`]) and frees the
//! slot once its answer has gone.

use bdevkit_nvme_spec::cmd::Fuse;
use bdevkit_nvme_spec::{Cqe, Status};

use super::qpair::{QpInner, QpTransport, Sent};
use super::slot::SlotState;

impl<T: QpTransport> QpInner<T> {
    fn next_sqhd(&mut self) -> u16 {
        self.sqhd = if self.sqhd + 1 >= self.sq_entries {
            0
        } else {
            self.sqhd + 1
        };
        self.sqhd
    }

    /// Answers `slot` with `status` and completion dwords 0 and 1 (a fused
    /// half answered on its own takes its other half with it: `fused.rs`).
    pub(crate) fn respond(&mut self, slot: u16, status: Status, dw0: u32, dw1: u32) {
        if self
            .slots
            .get(usize::from(slot))
            .is_some_and(|s| s.fuse != Fuse::Normal)
        {
            self.fused_answered(slot);
        }
        let sqhd = self.next_sqhd();
        let qid = self.conn.as_ref().map_or(0, |a| a.qid);
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        let mut cqe = Cqe::new(s.cid(), status, dw0);
        cqe.dw1.set(dw1);
        cqe.sqhd.set(sqhd);
        cqe.sqid.set(qid);
        if self.tp.respond(s, slot, &cqe) {
            s.state = SlotState::Tx;
        }
    }

    /// Sends the first `len` bytes of the slot's buffer to the host, then
    /// the response (dword 0 `dw0`) unless the data answered already.
    pub(crate) fn send_data(&mut self, slot: u16, len: u32, dw0: u32) {
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        match self.tp.send_data(s, slot, len, dw0) {
            Sent::Failed => {}
            Sent::Answered => s.state = SlotState::Tx,
            Sent::NeedsResponse => {
                s.state = SlotState::Tx;
                self.respond(slot, Status::SUCCESS, dw0, 0);
            }
        }
    }

    /// Asks the host for the slot's data (all of `xfer`); the command goes
    /// on when it is in (`on_data_received`).
    pub(crate) fn fetch_data(&mut self, slot: u16) {
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        if self.tp.fetch_data(s, slot) {
            s.state = SlotState::AwaitData;
        }
    }
}
