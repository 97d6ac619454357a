//! Fused Compare and Write (NVMe base specification, "Fused
//! Operations"; SPDK's `nvmf_tcp_check_fused_ordering` and
//! `nvmf_ctrlr_process_io_fused_cmd`): a Compare with FUSE 01b directly
//! followed, on the same queue, by a Write with FUSE 10b over the same
//! range runs as one atomic compare-and-write on the bdev. If the
//! Compare miscompares the data stays as it was and the Write ends with
//! Aborted due to Failed Fused Command.
//!
//! * Pairing follows the submission order, at each capsule's arrival; the
//!   halves run once both have their data (either may need an R2T first):
//!   the one ready first is held. Each half must fit in its slot's
//!   in-capsule buffer (`in_capsule_data_size`, which Identify reports as
//!   ACWU): a held half never waits for a shared buffer while holding
//!   one, so pairs can never deadlock the pool; a larger half is refused
//!   with Invalid Field.
//! * Refused as the specification and SPDK do: FUSE 11b and fused
//!   commands where compare-and-write is not supported (the namespace's
//!   bdev lacks it, or `masked_fuses` hides it) with Invalid Field; a
//!   second half with no first, and a first half not followed by its
//!   second, with Aborted due to Missing Fused Command; halves over
//!   different ranges with Invalid Field (first) and Aborted due to
//!   Failed Fused Command (second); a first half that is not a Compare
//!   or a second that is not a Write with Invalid Opcode. When one half
//!   fails, the other ends with Aborted due to Failed Fused Command.

use std::rc::Rc;

use bdevkit::bdev::{IoStatus, SubmitError};
use bdevkit::dma::DmaBuf;
use bdevkit_nvme_spec::cmd::Fuse;
use bdevkit_nvme_spec::io::IoCommand;
use bdevkit_nvme_spec::opcode::NvmOpcode;
use bdevkit_nvme_spec::Status;

use super::qpair::{Phase, QpInner, QpTransport, Qpair};
use super::slot::SlotState;
use super::view::SubsysView;
use crate::opts::FUSES_COMPARE_AND_WRITE;

/// The statuses of the two halves after the bdev's compare-and-write
/// (SPDK's `spdk_bdev_io_get_nvme_fused_status`).
fn fused_statuses(st: IoStatus) -> (Status, Status) {
    let failed_fused = Status::ABORTED_FAILED_FUSED;
    match st {
        IoStatus::Success => (Status::SUCCESS, Status::SUCCESS),
        IoStatus::Miscompare => (Status::COMPARE_FAILURE.with_dnr(), failed_fused),
        IoStatus::Nvme { sct, sc } => {
            let s = Status::new(sct, sc);
            if s.is(Status::COMPARE_FAILURE) {
                (s, failed_fused)
            } else {
                (Status::SUCCESS, s)
            }
        }
        IoStatus::Aborted => (Status::ABORTED_BY_REQUEST, Status::ABORTED_BY_REQUEST),
        IoStatus::FirstFusedFailed
        | IoStatus::NoMem
        | IoStatus::Pending
        | IoStatus::Failed
        | IoStatus::Errno(_) => (Status::INTERNAL_ERROR, failed_fused),
    }
}

/// `(slba, blocks)` of a Compare or Write.
fn rw_range(cmd: &IoCommand) -> Option<(u64, u32)> {
    match cmd {
        IoCommand::Compare(c) => Some((c.range.slba(), c.range.num_blocks())),
        IoCommand::Write(c) => Some((c.range.slba(), c.range.num_blocks())),
        _ => None,
    }
}

impl<T: QpTransport> QpInner<T> {
    /// A capsule arrived in `slot` while fused state is pending or it is
    /// fused itself: settles the pairing in submission order. `true` when
    /// the command was answered here.
    pub(crate) fn fused_arrival(&mut self, slot: u16, view: &SubsysView) -> bool {
        let i = usize::from(slot);
        let sqe = self.slots[i].sqe;
        let fuse = sqe.fuse();
        self.slots[i].fuse = fuse;
        // Not supported: no atomic compare-and-write on the namespace's
        // bdev, hidden by `masked_fuses`, or not even one block fits in
        // the in-capsule buffer (a missing namespace fails later).
        let icd = self.icd_limit;
        let supported = fuse != Fuse::Reserved
            && self.opts.masked_fuses & FUSES_COMPARE_AND_WRITE == 0
            && usize::try_from(sqe.nsid.get())
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|n| {
                    view.ns.borrow().get(n).map(|ns| {
                        ns.as_ref()
                            .is_none_or(|ns| ns.compare_and_write && icd >> ns.shift > 0)
                    })
                })
                .unwrap_or(true);
        let first_failed = std::mem::take(&mut self.fused_first_failed);
        if let Some(f) = self.fused_first.take() {
            if fuse == Fuse::Second && supported {
                return self.pair_up(f, slot);
            }
            // The first half is not followed by its second.
            self.fused_abort(f, Status::ABORTED_MISSING_FUSED);
        }
        let answer = match fuse {
            Fuse::Normal => None,
            Fuse::Reserved => Some(Status::INVALID_FIELD.with_dnr()),
            _ if !supported => Some(Status::INVALID_FIELD.with_dnr()),
            Fuse::First if sqe.opcode != NvmOpcode::Compare as u8 => {
                Some(Status::INVALID_OPCODE.with_dnr())
            }
            Fuse::First => {
                self.fused_first = Some(slot);
                None
            }
            Fuse::Second if first_failed => Some(Status::ABORTED_FAILED_FUSED),
            Fuse::Second => Some(Status::ABORTED_MISSING_FUSED),
        };
        match answer {
            Some(st) => {
                self.slots[i].fuse = Fuse::Normal;
                self.respond(slot, st, 0, 0);
                true
            }
            None => false,
        }
    }

    /// `second` follows the pending first half `first`: checks that they
    /// make a compare-and-write and links them.
    fn pair_up(&mut self, first: u16, second: u16) -> bool {
        let (f, s) = (
            IoCommand::decode(&self.slots[usize::from(first)].sqe),
            IoCommand::decode(&self.slots[usize::from(second)].sqe),
        );
        if !matches!(s, IoCommand::Write(_)) {
            self.fused_abort(first, Status::ABORTED_MISSING_FUSED);
            self.slots[usize::from(second)].fuse = Fuse::Normal;
            self.respond(second, Status::INVALID_OPCODE.with_dnr(), 0, 0);
            return true;
        }
        self.slots[usize::from(first)].pair = Some(second);
        self.slots[usize::from(second)].pair = Some(first);
        let same_ns = self.slots[usize::from(first)].sqe.nsid.get()
            == self.slots[usize::from(second)].sqe.nsid.get();
        if !same_ns || rw_range(&f) != rw_range(&s) {
            // SPDK: the pair fails with the Write's Invalid Field, which
            // goes to the first half; the second is aborted with it.
            self.fused_abort(first, Status::INVALID_FIELD.with_dnr());
            self.respond(second, Status::ABORTED_FAILED_FUSED, 0, 0);
            return true;
        }
        false
    }

    /// `slot` (a fused half) must fail with `st` when it would run: now,
    /// if it is held.
    pub(crate) fn fused_abort(&mut self, slot: u16, st: Status) {
        let s = &mut self.slots[usize::from(slot)];
        if s.fused_abort.is_none() {
            s.fused_abort = Some(st);
        }
        if s.state == SlotState::Held {
            let st = s.fused_abort.unwrap_or(st);
            self.respond(slot, st, 0, 0);
        }
    }

    /// `slot`, a fused half, is being answered outside the pair's own
    /// completion: the other half fails with it, and a first half still
    /// waiting for its second leaves that to fail too.
    pub(crate) fn fused_answered(&mut self, slot: u16) {
        let s = &mut self.slots[usize::from(slot)];
        s.fuse = Fuse::Normal;
        let pair = s.pair.take();
        if self.fused_first == Some(slot) {
            self.fused_first = None;
            self.fused_first_failed = true;
        }
        if let Some(p) = pair {
            self.slots[usize::from(p)].pair = None;
            self.fused_abort(p, Status::ABORTED_FAILED_FUSED);
        }
    }

    /// `slot`, a fused half, has its data: held until the other half has
    /// its own, then both run as one compare-and-write.
    pub(crate) fn fused_exec(&mut self, me: &Rc<Qpair<T>>, slot: u16) {
        let i = usize::from(slot);
        if let Some(st) = self.slots[i].fused_abort {
            return self.respond(slot, st, 0, 0);
        }
        let pair = self.slots[i].pair;
        let ready = pair.is_some_and(|p| self.slots[usize::from(p)].state == SlotState::Held);
        let Some(p) = pair.filter(|_| ready) else {
            self.slots[i].state = SlotState::Held;
            return;
        };
        let (first, second) = if self.slots[i].fuse == Fuse::First {
            (slot, p)
        } else {
            (p, slot)
        };
        self.submit_caw(me, first, second);
    }

    fn submit_caw(&mut self, me: &Rc<Qpair<T>>, first: u16, second: u16) {
        let Some(view) = self.conn.as_ref().and_then(|a| a.view.clone()) else {
            return self.fused_fail(first, second, Status::INTERNAL_ERROR);
        };
        let nss = view.ns.borrow();
        let nsid = self.slots[usize::from(second)].sqe.nsid.get();
        let Some(ns) = usize::try_from(nsid)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|n| nss.get(n))
            .and_then(Option::as_ref)
        else {
            drop(nss);
            return self.fused_fail(first, second, Status::INVALID_NAMESPACE.with_dnr());
        };
        let Some((slba, n)) = rw_range(&IoCommand::decode(&self.slots[usize::from(second)].sqe))
        else {
            drop(nss);
            return self.fused_fail(first, second, Status::INTERNAL_ERROR);
        };
        let Some(mut io) = ns.ch.alloc_io() else {
            // The second half waits for a BdevIo; the first stays held.
            self.slots[usize::from(first)].state = SlotState::Held;
            self.slots[usize::from(second)].state = SlotState::Exec;
            self.wait_for_io(me, second, ns);
            return;
        };
        let mut bufs: [Option<DmaBuf>; 2] = [None, None];
        for (k, h) in [first, second].into_iter().enumerate() {
            let s = &mut self.slots[usize::from(h)];
            if s.icd_off > 0 {
                let (off, len) = (s.icd_off as usize, s.xfer as usize);
                s.data_mut().copy_within(off..off + len, 0);
                s.icd_off = 0;
            }
            s.state = SlotState::Exec;
            bufs[k] = s.take_data_buf();
        }
        let [Some(cmp), Some(data)] = bufs else {
            for (k, h) in [first, second].into_iter().enumerate() {
                if let Some(b) = bufs[k].take() {
                    self.slots[usize::from(h)].restore_data_buf(b);
                }
            }
            drop(io);
            drop(nss);
            return self.fused_fail(first, second, Status::INTERNAL_ERROR);
        };
        io.compare_and_write(slba, u64::from(n), cmp, data);
        io.set_tag(u64::from(second));
        io.on_done(me.handler());
        match ns.ch.submit(io) {
            Ok(()) => self.inflight += 1,
            Err(e) => {
                let SubmitError { error, mut io } = *e;
                if let Some(b) = io.take_buf() {
                    self.slots[usize::from(first)].restore_data_buf(b);
                }
                if let Some(b) = io.take_aux_buf() {
                    self.slots[usize::from(second)].restore_data_buf(b);
                }
                drop(io);
                drop(nss);
                tracing::trace!(error = %error, "bdev refused a compare-and-write");
                self.fused_fail(first, second, super::exec_io::status_of_rejection(&error));
            }
        }
    }

    /// The pair fails before it ran: the first half with `st`, the second
    /// aborted with it.
    fn fused_fail(&mut self, first: u16, second: u16, st: Status) {
        self.fused_unpair(first, second);
        self.respond(first, st, 0, 0);
        self.respond(second, Status::ABORTED_FAILED_FUSED, 0, 0);
    }

    fn fused_unpair(&mut self, first: u16, second: u16) {
        for h in [first, second] {
            let s = &mut self.slots[usize::from(h)];
            s.pair = None;
            s.fuse = Fuse::Normal;
        }
    }

    /// The compare-and-write of the pair whose second half is `second`
    /// completed: both halves are answered, the first first.
    pub(crate) fn caw_completed(
        &mut self,
        second: u16,
        st: IoStatus,
        cmp: Option<DmaBuf>,
        data: Option<DmaBuf>,
    ) {
        let Some(first) = self.slots[usize::from(second)].pair else {
            return;
        };
        if let Some(b) = cmp {
            self.slots[usize::from(first)].restore_data_buf(b);
        }
        if let Some(b) = data {
            self.slots[usize::from(second)].restore_data_buf(b);
        }
        self.fused_unpair(first, second);
        if matches!(self.phase, Phase::Closing { .. }) {
            self.release_slot(first);
            self.release_slot(second);
            return;
        }
        let (a, b) = fused_statuses(st);
        self.respond(first, a, 0, 0);
        self.respond(second, b, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_of_a_compare_and_write() {
        let (a, b) = fused_statuses(IoStatus::Miscompare);
        assert!(a.is(Status::COMPARE_FAILURE) && b.is(Status::ABORTED_FAILED_FUSED));
        let (a, b) = fused_statuses(IoStatus::Success);
        assert!(a.is_success() && b.is_success());
        let (a, b) = fused_statuses(IoStatus::Nvme { sct: 2, sc: 0x85 });
        assert!(a.is(Status::COMPARE_FAILURE) && b.is(Status::ABORTED_FAILED_FUSED));
        let (a, b) = fused_statuses(IoStatus::Nvme { sct: 2, sc: 0x80 });
        assert!(a.is_success() && !b.is_success());
        let (a, b) = fused_statuses(IoStatus::Failed);
        assert!(a.is(Status::INTERNAL_ERROR) && b.is(Status::ABORTED_FAILED_FUSED));
    }
}
