//! The PCIe transport: submission and completion rings in DMA memory,
//! doorbells, PRP lists / SGLs per slot, bounce buffers; over any
//! [`PciFunction`] (VFIO or the emulated controller).
//!
//! One allocation per queue holds everything the queue needs: the SQ, the
//! CQ, one page per slot (its PRP list, SGL segment or DSM ranges) and the
//! bounce buffers, so that the I/O path never allocates and a queue needs
//! one mapping.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use bdevkit_nvme_spec::admin::{CreateIoCq, CreateIoSq, DeleteIoCq, DeleteIoSq};
use bdevkit_nvme_spec::identify::SglSupport;
use bdevkit_nvme_spec::regs::{self, Aqa, Cap};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::{Command, Cqe, Sqe};

use crate::bus::PciFunction;
use crate::error::{Error, Result};
use crate::prp::{self, LayoutError, PRP_LIST_ENTRIES};
use crate::sys::{DmaMem, Doorbell, PAGE};
use crate::transport::{
    AdminExec, Data, Dir, QueueTransport, Release, Request, SubmitError, Transport,
};

/// Largest transfer one slot's PRP list describes: PRP1's page plus one
/// list page of entries (the first page may be partial, so one less).
pub const MAX_PRP_BYTES: usize = PRP_LIST_ENTRIES * PAGE;
/// Bounce buffers per I/O queue.
pub const BOUNCE_BUFFERS: usize = 4;
const NO_BOUNCE: u8 = u8::MAX;

const SGL_NONE: u8 = 0;
const SGL_ANY: u8 = 1;
const SGL_DWORD: u8 = 2;

/// NVMe over PCIe, on one PCI function.
#[derive(Debug)]
pub struct PcieTransport {
    func: Arc<dyn PciFunction>,
    dstrd: u8,
    sgl: AtomicU8,
    max_data: usize,
}

impl PcieTransport {
    /// The transport of `func` (reads CAP for the doorbell stride).
    pub fn new(func: Arc<dyn PciFunction>) -> Result<PcieTransport> {
        let cap = Cap(func.read64(regs::offset::CAP));
        if cap.0 == u64::MAX {
            return Err(Error::Removed);
        }
        Ok(PcieTransport {
            dstrd: cap.dstrd(),
            func,
            sgl: AtomicU8::new(SGL_NONE),
            max_data: MAX_PRP_BYTES,
        })
    }

    /// The PCI function.
    #[must_use]
    pub fn function(&self) -> &Arc<dyn PciFunction> {
        &self.func
    }

    fn doorbell(&self, qid: u16, cq: bool) -> Doorbell {
        let off = regs::doorbell_offset(qid, cq, self.dstrd);
        self.func
            .doorbell(u32::try_from(off).expect("invariant: doorbells lie in BAR0"))
    }

    fn new_queue(&self, qid: u16, entries: u16, bounce: usize) -> Result<PcieQueue> {
        if entries < 2 {
            return Err(Error::InvalidArg(format!("queue of {entries} entries")));
        }
        let n = usize::from(entries);
        let depth = n - 1;
        let sq_bytes = (n * 64).div_ceil(PAGE) * PAGE;
        let cq_bytes = (n * 16).div_ceil(PAGE) * PAGE;
        let slots_off = sq_bytes + cq_bytes;
        let bounce_off = slots_off + depth * PAGE;
        let total = bounce_off + bounce * self.max_data;
        let mem = self.func.alloc_dma(total)?;
        Ok(PcieQueue {
            qid,
            entries,
            sq_db: self.doorbell(qid, false),
            cq_db: self.doorbell(qid, true),
            cq_off: sq_bytes,
            slots_off,
            bounce_off,
            bounce_len: self.max_data,
            bounce_free: if bounce == 0 { 0 } else { (1u32 << bounce) - 1 },
            slot_bounce: vec![NO_BOUNCE; depth].into_boxed_slice(),
            slot_bounce_read: vec![false; depth].into_boxed_slice(),
            sq_tail: 0,
            sq_rung: 0,
            cq_rung: 0,
            cq_head: 0,
            phase: true,
            sgl: self.sgl.load(Ordering::Relaxed),
            reach_gate: self.func.reach_gate().unwrap_or(&ALWAYS_ASK),
            func: Arc::clone(&self.func),
            mem,
        })
    }
}

fn check(c: &Cqe, opcode: u8) -> Result<()> {
    let s = c.status();
    if s.is_success() {
        Ok(())
    } else {
        Err(Error::Command { opcode, status: s })
    }
}

impl Transport for PcieTransport {
    type Queue = PcieQueue;

    fn trtype(&self) -> &'static str {
        "PCIe"
    }

    fn traddr(&self) -> &str {
        self.func.address()
    }

    fn read_reg32(&self, off: u32) -> Result<u32> {
        Ok(self.func.read32(off))
    }

    fn read_reg64(&self, off: u32) -> Result<u64> {
        Ok(self.func.read64(off))
    }

    fn write_reg32(&self, off: u32, v: u32) -> Result<()> {
        self.func.write32(off, v);
        Ok(())
    }

    fn write_reg64(&self, off: u32, v: u64) -> Result<()> {
        self.func.write64(off, v);
        Ok(())
    }

    fn admin_queue(&self, entries: u16) -> Result<PcieQueue> {
        let q = self.new_queue(0, entries, 0)?;
        self.func
            .write32(regs::offset::AQA, Aqa::new(entries - 1, entries - 1).0);
        self.func.write64(regs::offset::ASQ, q.sq_iova());
        self.func.write64(regs::offset::ACQ, q.cq_iova());
        Ok(q)
    }

    fn connect_io_queue(
        &self,
        qid: u16,
        entries: u16,
        admin: &mut dyn AdminExec,
    ) -> Result<PcieQueue> {
        let mut q = self.new_queue(qid, entries, BOUNCE_BUFFERS)?;
        self.reconnect_io_queue(&mut q, admin)?;
        Ok(q)
    }

    fn reconnect_io_queue(&self, q: &mut PcieQueue, admin: &mut dyn AdminExec) -> Result<()> {
        q.clear();
        q.sgl = self.sgl.load(Ordering::Relaxed);
        let cq = CreateIoCq {
            qid: q.qid,
            qsize: q.entries - 1,
            prp1: q.cq_iova(),
            pc: true,
            ien: false,
            iv: 0,
        };
        check(&admin.exec(cq.to_sqe(0))?, CreateIoCq::OPCODE)?;
        let sq = CreateIoSq {
            qid: q.qid,
            qsize: q.entries - 1,
            prp1: q.sq_iova(),
            pc: true,
            qprio: 0,
            cqid: q.qid,
            nvmsetid: 0,
        };
        if let Err(e) = admin
            .exec(sq.to_sqe(0))
            .and_then(|c| check(&c, CreateIoSq::OPCODE))
        {
            let _ = admin.exec(DeleteIoCq { qid: q.qid }.to_sqe(0));
            return Err(e);
        }
        Ok(())
    }

    fn disconnect_io_queue(&self, q: &mut PcieQueue, admin: &mut dyn AdminExec) -> Result<()> {
        let sq = admin.exec(DeleteIoSq { qid: q.qid }.to_sqe(0));
        let cq = admin.exec(DeleteIoCq { qid: q.qid }.to_sqe(0));
        q.clear();
        check(&sq?, DeleteIoSq::OPCODE)?;
        check(&cq?, DeleteIoCq::OPCODE)
    }

    fn alloc_buffer(&self, len: usize) -> Result<DmaMem> {
        self.func.alloc_dma(len)
    }

    fn needs_keep_alive(&self) -> bool {
        false
    }

    fn max_data_bytes(&self) -> usize {
        self.max_data
    }

    fn set_sgl_support(&self, sgl: SglSupport) {
        let v = match sgl {
            SglSupport::Supported => SGL_ANY,
            SglSupport::DwordAligned => SGL_DWORD,
            SglSupport::None | SglSupport::Reserved => SGL_NONE,
        };
        self.sgl.store(v, Ordering::Relaxed);
    }

    fn vendor_id(&self) -> u16 {
        self.func.vendor_id()
    }

    fn set_dma(&self, on: bool) {
        self.func.set_bus_master(on);
    }

    fn uses_dma(&self) -> bool {
        true
    }
}

/// One PCIe queue pair's rings and per-slot resources.
#[derive(Debug)]
pub struct PcieQueue {
    qid: u16,
    entries: u16,
    // Doorbells before `mem`: nothing rings after the memory is gone.
    sq_db: Doorbell,
    cq_db: Doorbell,
    cq_off: usize,
    slots_off: usize,
    bounce_off: usize,
    bounce_len: usize,
    bounce_free: u32,
    slot_bounce: Box<[u8]>,
    slot_bounce_read: Box<[bool]>,
    sq_tail: u16,
    /// The SQ tail its doorbell was last written with. Between two
    /// flushes fewer than `entries` commands are queued (each holds one
    /// of the `entries - 1` slots until the controller, which sees only
    /// what a doorbell announced, completes it): the tail has moved iff
    /// it differs, with no flag to set per command.
    sq_rung: u16,
    cq_head: u16,
    /// The CQ head its doorbell was last written with (a pass reaps at
    /// most `entries - 1`: the head has moved iff it differs; no flag to
    /// set per completion).
    cq_rung: u16,
    phase: bool,
    sgl: u8,
    /// `func.reach_gate()`, or [`ALWAYS_ASK`] for a function without one
    /// (one load and a test per I/O either way).
    reach_gate: &'static AtomicUsize,
    func: Arc<dyn PciFunction>,
    mem: DmaMem,
}

/// What an I/O command may not carry from its submitter: a metadata
/// pointer, a data pointer of its own (a command without data gets none),
/// a vendor specific opcode.
#[inline(always)]
fn scrub(sqe: &mut Sqe, data: Data) -> std::result::Result<(), SubmitError> {
    if sqe.opcode >= bdevkit_nvme_spec::opcode::NVM_VENDOR_SPECIFIC_START {
        return Err(SubmitError::Invalid);
    }
    sqe.mptr.set(0);
    if data == Data::None {
        sqe.set_prps(0, 0);
    }
    Ok(())
}

/// The reach gate of a function that has none: never 0, so that every
/// I/O asks [`PciFunction::reaches`].
static ALWAYS_ASK: AtomicUsize = AtomicUsize::new(1);

impl PcieQueue {
    fn sq_iova(&self) -> u64 {
        self.mem.iova()
    }

    fn cq_iova(&self) -> u64 {
        self.mem.iova() + self.cq_off as u64
    }

    #[inline]
    fn slot_page(&self, slot: u16) -> usize {
        self.slots_off + usize::from(slot) * PAGE
    }

    #[inline(always)]
    fn push(&mut self, sqe: &Sqe) {
        let off = usize::from(self.sq_tail) * 64;
        self.mem.write_sqe(off, sqe);
        self.sq_tail += 1;
        if self.sq_tail == self.entries {
            self.sq_tail = 0;
        }
    }

    /// PRP1/PRP2 for one segment of the request's own memory within two
    /// pages (most I/O), if that is what `data` is; everything else goes
    /// to [`PcieQueue::submit_list`].
    #[inline]
    fn short(&self, req: &dyn Request, data: Data) -> Option<(u64, u64)> {
        let (a, l) = req.single_segment(data)?;
        let prps = prp::short_prps(a as u64, l)?;
        let all = self.reach_gate.load(Ordering::Relaxed) == 0;
        (all || self.func.reaches(a, l)).then_some(prps)
    }

    /// [`QueueTransport::submit`] for data that [`PcieQueue::short`] does
    /// not describe: a PRP list or an SGL in the slot's page, or a bounce
    /// buffer. Out of line, so that the common path keeps the command in
    /// registers.
    #[inline(never)]
    fn submit_list(
        &mut self,
        slot: u16,
        mut sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<Release, SubmitError> {
        let release = if self.describe_list(slot, &mut sqe, req, data)? {
            Release::NotNeeded
        } else {
            self.bounce(slot, &mut sqe, req, data, dir)?;
            Release::Needed
        };
        self.push(&sqe);
        Ok(release)
    }

    /// PRPs (or an SGL) for several segments or more than two pages of
    /// the request's own memory, in the slot's page; `Ok(false)` when it
    /// must be bounced.
    fn describe_list(
        &mut self,
        slot: u16,
        sqe: &mut Sqe,
        req: &dyn Request,
        data: Data,
    ) -> std::result::Result<bool, SubmitError> {
        let n = req.segment_count(data);
        for i in 0..n {
            let (a, l) = req.segment(data, i);
            if !self.func.reaches(a, l) {
                return Ok(false);
            }
        }
        let page = self.slot_page(slot);
        let mem = &self.mem;
        let segs = (0..n).map(|i| {
            let (a, l) = req.segment(data, i);
            (a as u64, l)
        });
        match prp::build_prps(segs, |i, e| mem.write_u64(page + i * 8, e)) {
            Ok((prp1, entries)) => {
                let prp2 = match entries {
                    0 | 1 => 0,
                    2 => mem.read_u64(page),
                    _ => mem.iova() + page as u64,
                };
                sqe.set_prps(prp1, prp2);
                return Ok(true);
            }
            Err(LayoutError::NotPrpShaped) if self.sgl != SGL_NONE => {}
            Err(LayoutError::NotPrpShaped) => return Ok(false),
            Err(LayoutError::Misaligned | LayoutError::TooLong) => {
                return Err(SubmitError::Invalid)
            }
        }
        let segs = (0..n).map(|i| {
            let (a, l) = req.segment(data, i);
            (a as u64, l)
        });
        let dword = self.sgl == SGL_DWORD;
        match prp::build_sgl(segs, dword, |i, d| {
            mem.write_bytes(page + i * 16, d.as_bytes())
        }) {
            Ok(count) => {
                let len = u32::try_from(count * 16).expect("invariant: one page of descriptors");
                sqe.set_sgl1(&SglDescriptor::last_segment(mem.iova() + page as u64, len));
                Ok(true)
            }
            Err(LayoutError::NotPrpShaped) => Ok(false),
            Err(_) => Err(SubmitError::Invalid),
        }
    }

    #[cold]
    fn bounce(
        &mut self,
        slot: u16,
        sqe: &mut Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<(), SubmitError> {
        let total: usize = (0..req.segment_count(data))
            .map(|i| req.segment(data, i).1)
            .sum();
        if total > self.bounce_len {
            return Err(SubmitError::Invalid);
        }
        if self.bounce_free == 0 {
            return Err(SubmitError::Busy);
        }
        let b = self.bounce_free.trailing_zeros();
        self.bounce_free &= !(1 << b);
        let off = self.bounce_off + b as usize * self.bounce_len;
        if dir == Dir::ToDevice {
            let mut at = off;
            let mem = &self.mem;
            req.for_each_segment(data, &mut |s| {
                mem.write_bytes(at, s);
                at += s.len();
            });
        }
        let iova = self.mem.iova() + off as u64;
        let page = self.slot_page(slot);
        let mem = &self.mem;
        let (prp1, entries) = prp::build_prps(std::iter::once((iova, total)), |i, e| {
            mem.write_u64(page + i * 8, e)
        })
        .map_err(|_| SubmitError::Invalid)?;
        let prp2 = match entries {
            0 | 1 => 0,
            2 => mem.read_u64(page),
            _ => mem.iova() + page as u64,
        };
        sqe.set_prps(prp1, prp2);
        let s = usize::from(slot);
        self.slot_bounce[s] = u8::try_from(b).expect("invariant: at most 32 bounce buffers");
        self.slot_bounce_read[s] = dir == Dir::FromDevice;
        Ok(())
    }
}

impl QueueTransport for PcieQueue {
    fn qid(&self) -> u16 {
        self.qid
    }

    fn depth(&self) -> u16 {
        self.entries - 1
    }

    /// Queues `sqe`. On an I/O queue, the command can point the controller
    /// only at the request's data: the data pointer is the driver's (set
    /// from the segments, or cleared for a command without data), the
    /// metadata pointer is cleared, and vendor specific commands, whose
    /// fields the driver cannot vet, are refused ([`SubmitError::Invalid`]).
    /// The admin queue's commands are the driver's own, vetted by
    /// [`crate::Controller::submit_admin`].
    #[inline(always)]
    fn submit(
        &mut self,
        slot: u16,
        mut sqe: Sqe,
        req: &dyn Request,
        data: Data,
        dir: Dir,
    ) -> std::result::Result<Release, SubmitError> {
        if self.qid != 0 {
            scrub(&mut sqe, data)?;
        }
        if data != Data::None {
            let Some((prp1, prp2)) = self.short(req, data) else {
                // A fresh copy (see AnyQueue::submit).
                return self.submit_list(slot, Sqe::from_dwords(sqe.to_dwords()), req, data, dir);
            };
            sqe.set_prps(prp1, prp2);
        }
        self.push(&sqe);
        Ok(Release::NotNeeded)
    }

    /// As [`PcieQueue::submit`] (always vetted: only I/O queues take
    /// this path).
    #[inline(always)]
    fn submit_short(
        &mut self,
        _slot: u16,
        mut sqe: Sqe,
        req: &dyn Request,
        data: Data,
        _dir: Dir,
    ) -> std::result::Result<(), SubmitError> {
        scrub(&mut sqe, data)?;
        if data != Data::None {
            let (prp1, prp2) = self.short(req, data).ok_or(SubmitError::Long)?;
            sqe.set_prps(prp1, prp2);
        }
        self.push(&sqe);
        Ok(())
    }

    fn short_release(&self) -> Release {
        Release::NotNeeded
    }

    fn submit_with_page(
        &mut self,
        slot: u16,
        sqe: &mut Sqe,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> std::result::Result<(), SubmitError> {
        if len > PAGE {
            return Err(SubmitError::Invalid);
        }
        let mut buf = [0u8; PAGE];
        fill(&mut buf[..len]);
        sqe.mptr.set(0);
        let page = self.slot_page(slot);
        self.mem.write_bytes(page, &buf[..len]);
        sqe.set_prps(self.mem.iova() + page as u64, 0);
        self.push(sqe);
        Ok(())
    }

    #[inline]
    fn flush(&mut self) {
        if self.sq_tail != self.sq_rung {
            self.sq_rung = self.sq_tail;
            self.sq_db.ring(u32::from(self.sq_tail));
        }
    }

    #[inline]
    fn next_cqe(&mut self) -> Option<Cqe> {
        let head = self.cq_head;
        let off = self.cq_off + usize::from(head) * 16;
        let c = self.mem.new_cqe(off, self.phase)?;
        if head + 1 == self.entries {
            self.cq_head = 0;
            self.phase = !self.phase;
        } else {
            self.cq_head = head + 1;
        }
        Some(c)
    }

    #[inline]
    fn reap_end(&mut self) -> bool {
        let moved = self.cq_head != self.cq_rung;
        if moved {
            self.cq_rung = self.cq_head;
            self.cq_db.ring(u32::from(self.cq_head));
        }
        moved
    }

    #[inline]
    fn release(&mut self, slot: u16, req: Option<&mut dyn Request>) {
        let s = usize::from(slot);
        let Some(&b) = self.slot_bounce.get(s) else {
            return;
        };
        if b == NO_BOUNCE {
            return;
        }
        let off = self.bounce_off + usize::from(b) * self.bounce_len;
        if self.slot_bounce_read[s] {
            if let Some(req) = req {
                let mut at = off;
                let mem = &self.mem;
                let data = Data::Main;
                req.for_each_segment_mut(data, &mut |seg| {
                    mem.read_bytes(at, seg);
                    at += seg.len();
                });
            }
        }
        self.slot_bounce[s] = NO_BOUNCE;
        self.bounce_free |= 1 << b;
    }

    fn clear(&mut self) {
        self.sq_tail = 0;
        self.sq_rung = 0;
        self.cq_head = 0;
        self.cq_rung = 0;
        self.phase = true;
        let cq_len = (usize::from(self.entries) * 16).div_ceil(PAGE) * PAGE;
        self.mem.fill(self.cq_off, cq_len, 0);
        for s in 0..self.slot_bounce.len() {
            if self.slot_bounce[s] != NO_BOUNCE {
                self.bounce_free |= 1 << self.slot_bounce[s];
                self.slot_bounce[s] = NO_BOUNCE;
            }
        }
    }
}
