//! The emulated controller's commands: the admin set the driver uses
//! (Identify, features, queues, log pages, abort, asynchronous events,
//! keep alive) and the NVM I/O set (read, write, flush, write zeroes,
//! dataset management, compare), with data moved through PRPs or SGLs.

use bdevkit_nvme_spec::admin::{cns, csi, AdminCommand};
use bdevkit_nvme_spec::features::{fid, NumberOfQueues};
use bdevkit_nvme_spec::identify::{write_ns_id_descriptors, NamespaceList, NsIdDescriptor};
use bdevkit_nvme_spec::io::{DsmRange, IoCommand};
use bdevkit_nvme_spec::log::{copy_log_page, lid};
use bdevkit_nvme_spec::sgl::{SglDescriptor, SglType};
use bdevkit_nvme_spec::zerocopy::{FromBytes, IntoBytes};
use bdevkit_nvme_spec::{Sqe, Status};

use super::engine::{cq_base_ok, Cq, Engine, Sq};
use super::sys::{dma_read, dma_write};
use super::{EmuKind, FaultAction};
use crate::prp::walk_prps;

type Outcome = Option<(Status, u32)>;

/// The data chunks of a command moving `len` bytes (PRPs or SGL). An
/// address in the first page is never memory of the process: as an
/// IOMMU would fault it, the transfer stops there with "data transfer
/// error" (the driver sends a command without data with a zero data
/// pointer, so such a command that moves data anyway ends here).
fn chunks(sqe: &Sqe, len: usize, mut f: impl FnMut(u64, usize)) -> Result<(), Status> {
    let mut fault = false;
    let mut g = |a: u64, l: usize| {
        if a < UNMAPPED || fault {
            fault = true;
        } else {
            f(a, l);
        }
    };
    let r = walk(sqe, len, &mut g);
    match r {
        Ok(()) if fault => Err(Status::DATA_TRANSFER_ERROR),
        r => r,
    }
}

/// Host addresses below this are never mapped (Linux's `mmap_min_addr`
/// is at least a page).
const UNMAPPED: u64 = 4096;

/// Reads `dst.len()` bytes of a descriptor or list at `a`, unless `a` is
/// unmapped (then `dst` stays zeroed and the walk fails on its own).
fn read_meta(a: u64, dst: &mut [u8]) -> bool {
    if a < UNMAPPED {
        return false;
    }
    dma_read(a, dst);
    true
}

fn walk(sqe: &Sqe, len: usize, f: &mut dyn FnMut(u64, usize)) -> Result<(), Status> {
    if sqe.psdt().is_sgl() {
        let d = sqe.sgl1();
        let mut left = len;
        let mut take = |addr: u64, l: usize, f: &mut dyn FnMut(u64, usize)| {
            let n = l.min(left);
            if n > 0 {
                f(addr, n);
            }
            left -= n;
        };
        match d.kind() {
            SglType::DataBlock => take(d.address.get(), d.length() as usize, f),
            SglType::LastSegment | SglType::Segment => {
                let count = d.length() as usize / 16;
                for i in 0..count {
                    let mut e = SglDescriptor::default();
                    if !read_meta(d.address.get() + i as u64 * 16, e.as_mut_bytes()) {
                        return Err(Status::DATA_TRANSFER_ERROR);
                    }
                    if e.kind() != SglType::DataBlock {
                        return Err(Status::SGL_DESCRIPTOR_TYPE_INVALID);
                    }
                    take(e.address.get(), e.length() as usize, f);
                }
            }
            _ => return Err(Status::SGL_DESCRIPTOR_TYPE_INVALID),
        }
        return if left == 0 {
            Ok(())
        } else {
            Err(Status::DATA_SGL_LENGTH_INVALID)
        };
    }
    let mut list_fault = false;
    let r = walk_prps(
        sqe.prp1.get(),
        sqe.prp2.get(),
        len,
        |a| {
            let mut b = [0u8; 8];
            list_fault |= !read_meta(a, &mut b);
            u64::from_le_bytes(b)
        },
        f,
    );
    match r {
        Ok(()) if list_fault => Err(Status::DATA_TRANSFER_ERROR),
        r => r,
    }
}

impl Engine {
    fn to_host(&self, sqe: &Sqe, src: &[u8]) -> Status {
        let mut off = 0;
        match chunks(sqe, src.len(), |a, l| {
            dma_write(a, &src[off..off + l]);
            off += l;
        }) {
            Ok(()) => Status::SUCCESS,
            Err(s) => s,
        }
    }

    pub(super) fn admin(&mut self, sqe: &Sqe) -> Option<(Status, u32)> {
        if let Some(a) = self.sh.fault(true, sqe.opcode) {
            return self.faulted(0, sqe, a);
        }
        match AdminCommand::decode(sqe) {
            AdminCommand::Identify(id) => {
                self.scratch.fill(0);
                let ok = match (id.cns, id.csi) {
                    (cns::CONTROLLER, _) => {
                        self.scratch.copy_from_slice(self.id.as_bytes());
                        true
                    }
                    (cns::NAMESPACE, _) => {
                        match self.ns.get(id.nsid as usize).and_then(Option::as_ref) {
                            Some(n) => {
                                self.scratch.copy_from_slice(n.id.as_bytes());
                                true
                            }
                            None => id.nsid != 0 && (id.nsid as usize) < self.ns.len(),
                        }
                    }
                    (cns::ACTIVE_NS_LIST, _) => {
                        let ids = self
                            .ns
                            .iter()
                            .enumerate()
                            .filter_map(|(i, n)| n.as_ref().and(u32::try_from(i).ok()))
                            .filter(|i| *i > id.nsid);
                        let l = NamespaceList::from_ids(ids);
                        self.scratch.copy_from_slice(l.as_bytes());
                        true
                    }
                    (cns::NS_ID_DESCRIPTORS, _) => {
                        match self.ns.get(id.nsid as usize).and_then(Option::as_ref) {
                            Some(n) => {
                                let descs = [
                                    NsIdDescriptor::Nguid(n.id.nguid),
                                    NsIdDescriptor::Csi(csi::NVM),
                                ];
                                write_ns_id_descriptors(&descs, &mut self.scratch).is_ok()
                            }
                            None => false,
                        }
                    }
                    (cns::CS_CONTROLLER, csi::NVM) => true,
                    _ => false,
                };
                if !ok {
                    return Some((Status::INVALID_FIELD.with_dnr(), 0));
                }
                let data = std::mem::take(&mut self.scratch);
                let st = self.to_host(sqe, &data);
                self.scratch = data;
                Some((st, 0))
            }
            AdminCommand::SetFeatures(f) => match f.fid {
                fid::NUMBER_OF_QUEUES => {
                    let max = u16::try_from(super::MAX_QUEUES - 1).unwrap_or(u16::MAX);
                    let n = self.opts.io_queues.clamp(1, max);
                    let got = NumberOfQueues::from_counts(u32::from(n), u32::from(n))
                        .map_or(0, |q| bdevkit_nvme_spec::features::Feature::to_dword(&q));
                    Some((Status::SUCCESS, got))
                }
                fid::VOLATILE_WRITE_CACHE
                | fid::ASYNC_EVENT_CONFIG
                | fid::KEEP_ALIVE_TIMER
                | fid::ARBITRATION
                | fid::POWER_MANAGEMENT => Some((Status::SUCCESS, 0)),
                _ => Some((Status::INVALID_FIELD.with_dnr(), 0)),
            },
            AdminCommand::GetFeatures(f) => match f.fid {
                fid::VOLATILE_WRITE_CACHE => Some((Status::SUCCESS, u32::from(self.opts.vwc))),
                fid::NUMBER_OF_QUEUES => {
                    let n = u32::from(self.opts.io_queues) - 1;
                    Some((Status::SUCCESS, n | (n << 16)))
                }
                _ => Some((Status::SUCCESS, 0)),
            },
            AdminCommand::CreateIoCq(c) => {
                let q = usize::from(c.qid);
                if q == 0 || q >= self.cqs.len() || self.cqs[q].is_some() {
                    return Some((Status::new(1, 0x01).with_dnr(), 0));
                }
                if !c.pc || c.qsize == 0 {
                    return Some((Status::new(1, 0x02).with_dnr(), 0));
                }
                if !cq_base_ok(c.prp1) {
                    return Some((Status::PRP_OFFSET_INVALID.with_dnr(), 0));
                }
                self.sh.doorbells[2 * q + 1]
                    .0
                    .store(0, std::sync::atomic::Ordering::Release);
                self.cqs[q] = Some(Cq::new(c.prp1, c.qsize + 1));
                Some((Status::SUCCESS, 0))
            }
            AdminCommand::CreateIoSq(c) => {
                let q = usize::from(c.qid);
                if q == 0 || q >= self.sqs.len() || self.sqs[q].is_some() {
                    return Some((Status::new(1, 0x01).with_dnr(), 0));
                }
                if self
                    .cqs
                    .get(usize::from(c.cqid))
                    .copied()
                    .flatten()
                    .is_none()
                    || c.cqid == 0
                {
                    return Some((Status::COMPLETION_QUEUE_INVALID.with_dnr(), 0));
                }
                self.sh.doorbells[2 * q]
                    .0
                    .store(0, std::sync::atomic::Ordering::Release);
                self.set_sq(
                    q,
                    Some(Sq {
                        base: c.prp1,
                        entries: c.qsize + 1,
                        head: 0,
                        cqid: c.cqid,
                    }),
                );
                Some((Status::SUCCESS, 0))
            }
            AdminCommand::DeleteIoSq(c) => {
                let q = usize::from(c.qid);
                match self.sqs.get(q) {
                    Some(Some(_)) if q != 0 => {
                        self.set_sq(q, None);
                        self.dropped.retain(|d| usize::from(d.0) != q);
                        Some((Status::SUCCESS, 0))
                    }
                    _ => Some((Status::new(1, 0x01).with_dnr(), 0)),
                }
            }
            AdminCommand::DeleteIoCq(c) => {
                let q = usize::from(c.qid);
                match self.cqs.get_mut(q) {
                    Some(s @ Some(_)) if q != 0 => {
                        *s = None;
                        Some((Status::SUCCESS, 0))
                    }
                    _ => Some((Status::new(1, 0x01).with_dnr(), 0)),
                }
            }
            AdminCommand::GetLogPage(g) => {
                self.scratch.fill(0);
                match g.lid {
                    lid::CHANGED_NS_LIST => {
                        let l = NamespaceList::from_ids(self.changed.drain(..));
                        self.scratch.copy_from_slice(l.as_bytes());
                    }
                    lid::ERROR | lid::SMART | lid::FIRMWARE_SLOT => {}
                    _ => return Some((Status::new(1, 0x09).with_dnr(), 0)),
                }
                let len = usize::try_from(g.len_bytes()).unwrap_or(0).min(4096);
                let mut out = [0u8; 4096];
                copy_log_page(&self.scratch, g.offset, &mut out[..len]);
                Some((self.to_host(sqe, &out[..len]), 0))
            }
            AdminCommand::Abort(a) => {
                let hit = self.dropped.iter().position(|d| *d == (a.sqid, a.cid));
                match hit {
                    Some(i) => {
                        self.dropped.swap_remove(i);
                        let q = usize::from(a.sqid);
                        self.post(q, a.cid, Status::ABORTED_BY_REQUEST, 0);
                        Some((Status::SUCCESS, 0))
                    }
                    None => Some((Status::SUCCESS, 1)),
                }
            }
            AdminCommand::AsyncEventRequest => {
                if self.aers.len() > usize::from(self.id.aerl) {
                    return Some((Status::new(1, 0x05), 0));
                }
                self.aers.push(sqe.cid.get());
                None
            }
            AdminCommand::KeepAlive => Some((Status::SUCCESS, 0)),
            _ => Some((Status::INVALID_OPCODE.with_dnr(), 0)),
        }
    }

    fn faulted(&mut self, qid: usize, sqe: &Sqe, a: FaultAction) -> Outcome {
        match a {
            FaultAction::Status(s) => Some((s, 0)),
            FaultAction::Drop => {
                self.dropped
                    .push((u16::try_from(qid).unwrap_or(0), sqe.cid.get()));
                None
            }
        }
    }

    pub(super) fn io(&mut self, qid: usize, sqe: &Sqe) -> Outcome {
        if let Some(a) = self.sh.fault(false, sqe.opcode) {
            return self.faulted(qid, sqe, a);
        }
        let nsid = sqe.nsid.get() as usize;
        let max_bytes = self.max_bytes;
        let Some(ns) = self.ns.get_mut(nsid).and_then(Option::as_mut) else {
            return Some((Status::INVALID_NAMESPACE.with_dnr(), 0));
        };
        let bs = ns.cfg.block_size as usize;
        let nblocks = ns.cfg.num_blocks;
        let null = ns.cfg.kind == EmuKind::Null;
        let cmd = IoCommand::decode(sqe);
        if let Some(r) = cmd.range() {
            if !r.within(nblocks) {
                return Some((Status::LBA_OUT_OF_RANGE.with_dnr(), 0));
            }
        }
        let span = |slba: u64, n: u32| {
            let off = usize::try_from(slba)
                .unwrap_or(usize::MAX)
                .saturating_mul(bs);
            (off, n as usize * bs)
        };
        let st = match cmd {
            IoCommand::Read(c) => {
                let (off, len) = span(c.range.slba(), c.range.num_blocks());
                if len > max_bytes {
                    Status::INVALID_FIELD.with_dnr()
                } else if null {
                    Status::SUCCESS
                } else {
                    let data = &ns.data;
                    let mut at = off;
                    match chunks(sqe, len, |a, l| {
                        dma_write(a, &data[at..at + l]);
                        at += l;
                    }) {
                        Ok(()) => Status::SUCCESS,
                        Err(s) => s,
                    }
                }
            }
            IoCommand::Write(c) => {
                let (off, len) = span(c.range.slba(), c.range.num_blocks());
                if len > max_bytes {
                    Status::INVALID_FIELD.with_dnr()
                } else if null {
                    Status::SUCCESS
                } else {
                    let data = &mut ns.data;
                    let mut at = off;
                    match chunks(sqe, len, |a, l| {
                        dma_read(a, &mut data[at..at + l]);
                        at += l;
                    }) {
                        Ok(()) => Status::SUCCESS,
                        Err(s) => s,
                    }
                }
            }
            IoCommand::Compare(c) => {
                let (off, len) = span(c.range.slba(), c.range.num_blocks());
                if null {
                    Status::SUCCESS
                } else {
                    let data = &ns.data;
                    let mut at = off;
                    let mut same = true;
                    let mut tmp = [0u8; 512];
                    let r = chunks(sqe, len, |a, l| {
                        let mut done = 0;
                        while done < l {
                            let n = (l - done).min(tmp.len());
                            dma_read(a + done as u64, &mut tmp[..n]);
                            same &= tmp[..n] == data[at..at + n];
                            at += n;
                            done += n;
                        }
                    });
                    match r {
                        Err(s) => s,
                        Ok(()) if same => Status::SUCCESS,
                        Ok(()) => Status::COMPARE_FAILURE,
                    }
                }
            }
            IoCommand::WriteZeroes(c) => {
                let (off, len) = span(c.range.slba(), c.range.num_blocks());
                if !null {
                    ns.data[off..off + len].fill(0);
                }
                Status::SUCCESS
            }
            IoCommand::Flush(_) => Status::SUCCESS,
            IoCommand::DatasetManagement(d) => {
                let n = d.num_ranges();
                let mut buf = [0u8; 4096];
                let len = n * 16;
                let mut at = 0;
                if let Err(s) = chunks(sqe, len, |a, l| {
                    dma_read(a, &mut buf[at..at + l]);
                    at += l;
                }) {
                    return Some((s, 0));
                }
                for i in 0..n {
                    let Ok(r) = DsmRange::read_from_bytes(&buf[i * 16..i * 16 + 16]) else {
                        continue;
                    };
                    let (slba, nlb) = (r.slba.get(), r.nlb.get());
                    if slba.checked_add(u64::from(nlb)).is_none_or(|e| e > nblocks) {
                        return Some((Status::LBA_OUT_OF_RANGE.with_dnr(), 0));
                    }
                    if d.attributes.ad && !null {
                        let (off, l) = span(slba, nlb);
                        ns.data[off..off + l].fill(0);
                    }
                }
                Status::SUCCESS
            }
            _ => Status::INVALID_OPCODE.with_dnr(),
        };
        Some((st, 0))
    }
}
