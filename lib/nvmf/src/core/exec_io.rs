//! I/O commands on bdevs, transport-neutral: Read, Write, Compare, Flush,
//! Write Zeroes and Dataset Management (deallocate), checked (namespace,
//! LBA range, data length) before any data is fetched, then given a data
//! buffer (the slot's in-capsule one when the transfer fits, else a
//! shared one from the transport's pool, waiting for one in order when
//! none is left) and submitted as bdev I/O on this thread's channel; the
//! completion turns the bdev status into an NVMe status and queues the
//! answer. No allocation and no lock on this path.

use std::rc::Rc;

use bdevkit::bdev::{IoStatus, SubmitError};
use bdevkit::dma::DmaBuf;
use bdevkit_nvme_spec::cmd::Fuse;
use bdevkit_nvme_spec::io::{DsmRange, IoCommand};
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::Status;

use super::pool::{BufWaiter, Ready, Take};
use super::qpair::{Phase, QpInner, QpTransport, Qpair, Xfer};
use super::slot::{Slot, SlotState};
use super::view::NsChan;

/// The NVMe status of a bdev completion (SPDK's mapping back).
pub(crate) fn status_of(s: IoStatus) -> Status {
    match s {
        IoStatus::Success => Status::SUCCESS,
        IoStatus::Nvme { sct, sc } => Status::new(sct, sc),
        IoStatus::Miscompare => Status::COMPARE_FAILURE.with_dnr(),
        IoStatus::Aborted => Status::ABORTED_BY_REQUEST,
        IoStatus::FirstFusedFailed => Status::ABORTED_FAILED_FUSED,
        IoStatus::NoMem => Status::COMMAND_INTERRUPTED,
        IoStatus::Pending | IoStatus::Failed | IoStatus::Errno(_) => Status::INTERNAL_ERROR,
    }
}

/// The NVMe status of a submission the bdev layer refused.
pub(crate) fn status_of_rejection(e: &bdevkit::Error) -> Status {
    match e {
        bdevkit::Error::OutOfRange { .. } => Status::LBA_OUT_OF_RANGE.with_dnr(),
        bdevkit::Error::NotSupported(_) => Status::INVALID_OPCODE.with_dnr(),
        bdevkit::Error::ReadOnly(_) => Status::NAMESPACE_WRITE_PROTECTED.with_dnr(),
        _ => Status::INTERNAL_ERROR,
    }
}

/// Range `i` of a Dataset Management command's range list: in the
/// command's data as its SGL describes it (an in-capsule data block at
/// `icd_off`, or the data pulled with R2T at 0), never past `xfer`.
fn dsm_range<R>(s: &Slot<R>, i: usize) -> Option<DsmRange> {
    let len = size_of::<DsmRange>();
    let at = i.checked_mul(len)?;
    if at.checked_add(len)? > s.xfer as usize {
        return None;
    }
    let start = (s.icd_off as usize).checked_add(at)?;
    let bytes = s.data().get(start..start + len)?;
    DsmRange::read_from_bytes(bytes).ok()
}

/// Whether `slba`..+`n` lies in a namespace of `blocks` blocks.
fn in_range(slba: u64, n: u64, blocks: u64) -> bool {
    slba.checked_add(n).is_some_and(|e| e <= blocks)
}

/// Checks a command against its namespace before data moves: `Ok` with
/// the data length the command must carry (0: none).
/// `fused`: the first half of a fused pair (a Compare that runs as part
/// of a compare-and-write, which needs no Compare of its own).
fn check(cmd: &IoCommand, ns: Option<&NsChan>, fused: bool) -> Result<u32, Status> {
    let invalid_ns = Status::INVALID_NAMESPACE.with_dnr();
    let ns = match cmd {
        IoCommand::Other(_) | IoCommand::WriteUncorrectable(_) => {
            return Err(Status::INVALID_OPCODE.with_dnr())
        }
        _ => ns.ok_or(invalid_ns)?,
    };
    let blocks = ns.bdev.num_blocks();
    let rw = |slba: u64, n: u32| -> Result<u32, Status> {
        if !in_range(slba, u64::from(n), blocks) {
            return Err(Status::LBA_OUT_OF_RANGE.with_dnr());
        }
        u32::try_from(u64::from(n) << ns.shift)
            .map_err(|_| Status::DATA_SGL_LENGTH_INVALID.with_dnr())
    };
    match cmd {
        IoCommand::Read(c) => rw(c.range.slba(), c.range.num_blocks()),
        IoCommand::Write(c) => rw(c.range.slba(), c.range.num_blocks()),
        IoCommand::Compare(c) => {
            if !ns.compare && !fused {
                return Err(Status::INVALID_OPCODE.with_dnr());
            }
            rw(c.range.slba(), c.range.num_blocks())
        }
        IoCommand::WriteZeroes(c) => {
            if !ns.write_zeroes {
                return Err(Status::INVALID_OPCODE.with_dnr());
            }
            rw(c.range.slba(), c.range.num_blocks()).map(|_| 0)
        }
        IoCommand::Flush(_) => Ok(0),
        IoCommand::DatasetManagement(d) => {
            if d.attributes.ad && !ns.unmap {
                return Err(Status::INVALID_OPCODE.with_dnr());
            }
            Ok(u32::try_from(d.data_len()).unwrap_or(u32::MAX))
        }
        IoCommand::Other(_) | IoCommand::WriteUncorrectable(_) => {
            Err(Status::INVALID_OPCODE.with_dnr())
        }
    }
}

impl<T: QpTransport> QpInner<T> {
    fn ns_index(nsid: u32) -> Option<usize> {
        usize::try_from(nsid).ok()?.checked_sub(1)
    }

    /// An I/O command arrived: checks, then its data fetched, or submission.
    pub(crate) fn io(&mut self, me: &Rc<Qpair<T>>, slot: u16) {
        let max = self.opts.max_io_size;
        let Some(view) = self.conn.as_ref().and_then(|a| a.view.clone()) else {
            return self.respond(slot, Status::INTERNAL_ERROR, 0, 0);
        };
        if (self.fused_first.is_some()
            || self.fused_first_failed
            || self.slots[usize::from(slot)].sqe.fuse() != Fuse::Normal)
            && self.fused_arrival(slot, &view)
        {
            return;
        }
        let s = &mut self.slots[usize::from(slot)];
        let fused = s.fuse == Fuse::First;
        let x = match T::setup_xfer(s, max) {
            Ok(x) => x,
            Err(st) => return self.respond(slot, st, 0, 0),
        };
        let cmd = IoCommand::decode(&s.sqe);
        let need = {
            let nss = view.ns.borrow();
            let ns = Self::ns_index(s.sqe.nsid.get())
                .and_then(|i| nss.get(i))
                .and_then(Option::as_ref);
            check(&cmd, ns, fused)
        };
        let need = match need {
            Ok(n) => n,
            Err(st) => return self.respond(slot, st, 0, 0),
        };
        let data_ok = match cmd {
            IoCommand::Read(_) => x == Xfer::Send && s.xfer == need,
            IoCommand::Write(_) | IoCommand::Compare(_) => {
                matches!(x, Xfer::InCapsule | Xfer::Fetch) && s.xfer == need
            }
            IoCommand::DatasetManagement(_) => {
                matches!(x, Xfer::InCapsule | Xfer::Fetch) && s.xfer >= need
            }
            _ => true,
        };
        if !data_ok {
            return self.respond(slot, Status::DATA_SGL_LENGTH_INVALID.with_dnr(), 0, 0);
        }
        if s.fuse != Fuse::Normal && !s.fits_icd(s.xfer) {
            // Over ACWU: a fused half runs from its own in-capsule buffer.
            return self.respond(slot, Status::INVALID_FIELD.with_dnr(), 0, 0);
        }
        if matches!(x, Xfer::Fetch | Xfer::Send) && !s.fits_icd(s.xfer) {
            // Too large for the slot's own buffer: a shared one.
            match self.bufs.take() {
                Take::Buf(b) => {
                    s.pool = Some(b);
                    s.uses_pool = true;
                }
                Take::Wait => {
                    s.state = SlotState::BufWait;
                    s.fetch_after_buf = x == Xfer::Fetch;
                    self.bufs.wait(self.waiter.clone(), slot);
                    return;
                }
                Take::NoMem => return self.respond(slot, Status::INTERNAL_ERROR, 0, 0),
            }
        }
        if x == Xfer::Fetch {
            return self.fetch_data(slot);
        }
        s.state = SlotState::Exec;
        self.io_submit(me, slot);
    }

    /// A shared buffer for `slot`, which waited for one: its data is
    /// fetched or its read submitted now.
    fn buf_arrived(&mut self, me: &Rc<Qpair<T>>, slot: u16, buf: Option<DmaBuf>) -> Ready {
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            return Ready::Unused(buf);
        };
        if s.state != SlotState::BufWait {
            return Ready::Unused(buf);
        }
        let Some(b) = buf else {
            s.state = SlotState::Exec;
            self.respond(slot, Status::INTERNAL_ERROR, 0, 0);
            return Ready::Taken;
        };
        s.pool = Some(b);
        s.uses_pool = true;
        if s.fetch_after_buf {
            self.fetch_data(slot);
        } else {
            s.state = SlotState::Exec;
            self.io_submit(me, slot);
        }
        Ready::Taken
    }

    /// Submits the slot's command (its data is in the slot's buffer).
    pub(crate) fn io_submit(&mut self, me: &Rc<Qpair<T>>, slot: u16) {
        if self.slots[usize::from(slot)].fuse != Fuse::Normal {
            return self.fused_exec(me, slot);
        }
        let Some(view) = self.conn.as_ref().and_then(|a| a.view.clone()) else {
            return self.respond(slot, Status::INTERNAL_ERROR, 0, 0);
        };
        let nss = view.ns.borrow();
        let s = &mut self.slots[usize::from(slot)];
        let Some(ns) = Self::ns_index(s.sqe.nsid.get())
            .and_then(|i| nss.get(i))
            .and_then(Option::as_ref)
        else {
            // The namespace went away while its data was coming.
            drop(nss);
            return self.respond(slot, Status::INVALID_NAMESPACE.with_dnr(), 0, 0);
        };
        let cmd = IoCommand::decode(&s.sqe);
        if let IoCommand::DatasetManagement(d) = cmd {
            let n = d.num_ranges();
            if !d.attributes.ad {
                drop(nss);
                return self.respond(slot, Status::SUCCESS, 0, 0);
            }
            return self.dsm(me, slot, ns, n);
        }
        if matches!(cmd, IoCommand::Flush(_)) && !ns.flush {
            drop(nss);
            return self.respond(slot, Status::SUCCESS, 0, 0);
        }
        let Some(mut io) = ns.ch.alloc_io() else {
            self.wait_for_io(me, slot, ns);
            return;
        };
        match cmd {
            IoCommand::Read(c) => {
                let Some(b) = s.take_data_buf() else {
                    drop(nss);
                    return self.respond(slot, Status::INTERNAL_ERROR, 0, 0);
                };
                io.read(c.range.slba(), u64::from(c.range.num_blocks()), b);
            }
            IoCommand::Write(_) | IoCommand::Compare(_) => {
                let (slba, n) = match cmd {
                    IoCommand::Write(c) => (c.range.slba(), c.range.num_blocks()),
                    IoCommand::Compare(c) => (c.range.slba(), c.range.num_blocks()),
                    _ => (0, 0),
                };
                if s.icd_off > 0 {
                    let (off, len) = (s.icd_off as usize, s.xfer as usize);
                    s.data_mut().copy_within(off..off + len, 0);
                    s.icd_off = 0;
                }
                let Some(b) = s.take_data_buf() else {
                    drop(nss);
                    return self.respond(slot, Status::INTERNAL_ERROR, 0, 0);
                };
                if matches!(cmd, IoCommand::Write(_)) {
                    io.write(slba, u64::from(n), b);
                } else {
                    io.compare(slba, u64::from(n), b);
                }
            }
            IoCommand::WriteZeroes(c) => {
                io.write_zeroes(c.range.slba(), u64::from(c.range.num_blocks()));
            }
            IoCommand::Flush(_) => {
                io.flush(0, ns.bdev.num_blocks());
            }
            _ => {}
        }
        io.set_tag(u64::from(slot));
        io.on_done(me.handler());
        s.state = SlotState::Exec;
        match ns.ch.submit(io) {
            Ok(()) => self.inflight += 1,
            Err(e) => {
                let SubmitError { error, mut io } = *e;
                if let Some(b) = io.take_buf() {
                    s.restore_data_buf(b);
                }
                drop(io);
                drop(nss);
                tracing::trace!(error = %error, "bdev refused an I/O");
                self.respond(slot, status_of_rejection(&error), 0, 0);
            }
        }
    }

    /// Dataset Management: one unmap per non-empty range.
    fn dsm(&mut self, me: &Rc<Qpair<T>>, slot: u16, ns: &NsChan, n: usize) {
        let blocks = ns.bdev.num_blocks();
        let s = &mut self.slots[usize::from(slot)];
        let mut count = 0u32;
        for i in 0..n {
            let Some(r) = dsm_range(s, i) else {
                return self.respond(slot, Status::DATA_SGL_LENGTH_INVALID.with_dnr(), 0, 0);
            };
            let nlb = u64::from(r.nlb.get());
            if nlb == 0 {
                continue;
            }
            if !in_range(r.slba.get(), nlb, blocks) {
                return self.respond(slot, Status::LBA_OUT_OF_RANGE.with_dnr(), 0, 0);
            }
            count += 1;
        }
        if count == 0 {
            return self.respond(slot, Status::SUCCESS, 0, 0);
        }
        s.children = count;
        s.status = Status::SUCCESS;
        s.state = SlotState::Exec;
        let handler = me.handler();
        let mut submitted = 0u32;
        for i in 0..n {
            let s = &mut self.slots[usize::from(slot)];
            let Some(r) = dsm_range(s, i) else {
                break;
            };
            let nlb = u64::from(r.nlb.get());
            if nlb == 0 {
                continue;
            }
            let Some(mut io) = ns.ch.alloc_io() else {
                s.status = Status::COMMAND_INTERRUPTED;
                break;
            };
            io.unmap(r.slba.get(), nlb);
            io.set_tag(u64::from(slot));
            io.on_done(Rc::clone(&handler));
            match ns.ch.submit(io) {
                Ok(()) => {
                    submitted += 1;
                    self.inflight += 1;
                }
                Err(e) => {
                    s.status = status_of_rejection(&e.error);
                    break;
                }
            }
        }
        let s = &mut self.slots[usize::from(slot)];
        if submitted == 0 {
            s.children = 0;
            let st = s.status;
            return self.respond(slot, st, 0, 0);
        }
        s.children = submitted;
    }

    /// No `BdevIo` free: the slot waits, and the pool calls back.
    pub(crate) fn wait_for_io(&mut self, me: &Rc<Qpair<T>>, slot: u16, ns: &NsChan) {
        self.io_wait.push_back(slot);
        if !me.wait_armed.get() {
            me.wait_armed.set(true);
            let w = me.weak();
            ns.ch.queue_io_wait(move || {
                if let Some(q) = w.upgrade() {
                    q.wait_armed.set(false);
                    q.kick.set(true);
                }
            });
        }
    }

    /// Resubmits the slots that waited for a `BdevIo`.
    pub(crate) fn retry_io_wait(&mut self, me: &Rc<Qpair<T>>) -> bool {
        let n = self.io_wait.len();
        for _ in 0..n {
            let Some(slot) = self.io_wait.pop_front() else {
                break;
            };
            self.io_submit(me, slot);
            if me.wait_armed.get() {
                break;
            }
        }
        n > 0
    }

    /// A bdev I/O of `tag` (a slot) completed; `aux` is a
    /// compare-and-write's write data.
    pub(crate) fn io_completed(
        &mut self,
        tag: u64,
        st: IoStatus,
        buf: Option<DmaBuf>,
        aux: Option<DmaBuf>,
    ) {
        self.inflight = self.inflight.saturating_sub(1);
        let Some(slot) = u16::try_from(tag)
            .ok()
            .filter(|&t| usize::from(t) < self.slots.len())
        else {
            return;
        };
        let s = &self.slots[usize::from(slot)];
        if aux.is_some() || (s.fuse == Fuse::Second && s.pair.is_some()) {
            return self.caw_completed(slot, st, buf, aux);
        }
        let status = status_of(st);
        let s = &mut self.slots[usize::from(slot)];
        if let Some(b) = buf {
            s.restore_data_buf(b);
            if s.state == SlotState::Free {
                // Released while the I/O ran (cannot happen): the shared
                // buffer goes back now.
                self.release_slot(slot);
            }
        }
        let s = &mut self.slots[usize::from(slot)];
        if s.children > 1 {
            s.children -= 1;
            if !status.is_success() && s.status.is_success() {
                s.status = status;
            }
            return;
        }
        let status = if s.children == 1 {
            s.children = 0;
            if s.status.is_success() {
                status
            } else {
                s.status
            }
        } else {
            status
        };
        if matches!(self.phase, Phase::Closing { .. }) {
            self.release_slot(slot);
            return;
        }
        let is_read = s.sqe.opcode == u8::from(bdevkit_nvme_spec::opcode::NvmOpcode::Read);
        if is_read && status.is_success() {
            let len = s.xfer;
            self.send_data(slot, len, 0);
        } else {
            self.respond(slot, status, 0, 0);
        }
    }
}

impl<T: QpTransport> BufWaiter for Qpair<T> {
    fn buf_ready(&self, slot: u16, buf: Option<DmaBuf>) -> Ready {
        let Ok(mut q) = self.q.try_borrow_mut() else {
            return Ready::Busy(buf);
        };
        let Some(me) = self.weak().upgrade() else {
            return Ready::Unused(buf);
        };
        let r = q.buf_arrived(&me, slot, buf);
        // Its data request (or, later, its data) goes out at the next
        // service.
        self.kick.set(true);
        r
    }
}
