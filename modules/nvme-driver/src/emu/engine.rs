//! The emulated controller's thread: register state machine (enable,
//! disable, shutdown, fatal status), command fetch from the submission
//! queues the doorbells announce, completion posting with phase tags.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nvme_spec::cmd::Fuse;
use nvme_spec::identify::{IdentifyController, IdentifyNamespace};
use nvme_spec::log::AsyncEvent;
use nvme_spec::regs::{offset, Aqa, Cc, Csts};
use nvme_spec::zerocopy::{FromZeros, IntoBytes};
use nvme_spec::{Cqe, Sqe, Status};

use super::sys::{dma_read, dma_write, dma_write_u16_release};
use super::{EmuKind, EmuNamespace, EmuOptions, Shared, MAX_QUEUES};
use crate::error::Result;

/// Idle polls before the thread parks.
const IDLE_SPINS: u32 = 20_000;
/// Commands taken from one queue per pass (fairness between queues).
const PER_PASS: u32 = 256;

#[derive(Debug, Clone, Copy)]
pub(super) struct Sq {
    pub base: u64,
    pub entries: u16,
    pub head: u16,
    pub cqid: u16,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Cq {
    pub base: u64,
    pub entries: u16,
    pub tail: u16,
    pub phase: bool,
}

pub(super) struct Ns {
    pub cfg: EmuNamespace,
    pub data: Vec<u8>,
    pub id: Box<IdentifyNamespace>,
}

pub(super) struct Engine {
    pub sh: Arc<Shared>,
    pub opts: EmuOptions,
    pub enabled: bool,
    pub sqs: Vec<Option<Sq>>,
    pub cqs: Vec<Option<Cq>>,
    pub ns: Vec<Option<Ns>>,
    pub id: Box<IdentifyController>,
    pub aers: Vec<u16>,
    pub events: VecDeque<u32>,
    pub changed: Vec<u32>,
    pub dropped: Vec<(u16, u16)>,
    pub scratch: Box<[u8]>,
}

/// The namespace's NGUID: a hash of the controller's serial number and
/// the namespace id (FNV-1a, twice), so that it is the same every time
/// the same controller is started.
pub(super) fn nguid_of(serial: &str, nsid: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (half, chunk) in out.chunks_mut(8).enumerate() {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ half as u64;
        for b in serial.bytes().chain(nsid.to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        chunk.copy_from_slice(&h.to_be_bytes());
    }
    out
}

pub(super) fn build_ns(cfg: EmuNamespace, serial: &str) -> Ns {
    let lbads = u8::try_from(cfg.block_size.trailing_zeros()).unwrap_or(9);
    let mut id = Box::new(IdentifyNamespace::new_zeroed());
    id.nguid = nguid_of(serial, cfg.nsid);
    id.nsze.set(cfg.num_blocks);
    id.ncap.set(cfg.num_blocks);
    id.nuse.set(cfg.num_blocks);
    id.set_single_format(lbads, 0);
    let data = match cfg.kind {
        EmuKind::Ram => {
            let len = usize::try_from(cfg.num_blocks * u64::from(cfg.block_size))
                .expect("invariant: emulated namespaces fit in memory");
            vec![0u8; len]
        }
        EmuKind::Null => Vec::new(),
    };
    Ns { cfg, data, id }
}

impl Engine {
    pub(super) fn new(sh: Arc<Shared>, opts: &EmuOptions) -> Result<Engine> {
        let mut id = Box::new(IdentifyController::new_zeroed());
        id.vid.set(0x1b36);
        id.ssvid.set(0x1af4);
        let _ = id.set_serial(&opts.serial);
        let _ = id.set_model(&opts.model);
        let _ = id.set_firmware("1.0");
        let _ = id.set_subnqn(&format!("nqn.2024-01.io.bdevkit:emu:{}", opts.serial));
        id.mdts = opts.mdts;
        id.cntlid.set(1);
        id.ver.set(0x0001_0400);
        id.oaes.set(1 << 8);
        id.aerl = 3;
        id.sqes = 0x66;
        id.cqes = 0x44;
        id.maxcmd.set(0);
        id.oncs.set(0x1 | 0x4 | 0x8);
        id.fuses.set(u16::from(opts.fused));
        id.vwc = u8::from(opts.vwc);
        id.sgls.set(u32::from(opts.sgl));
        let max = opts.namespaces.iter().map(|n| n.nsid).max().unwrap_or(0);
        id.nn.set(max.max(32));
        let mut ns: Vec<Option<Ns>> = (0..=id.nn.get()).map(|_| None).collect();
        for n in &opts.namespaces {
            if n.nsid == 0 || n.nsid as usize >= ns.len() {
                continue;
            }
            ns[n.nsid as usize] = Some(build_ns(*n, &opts.serial));
        }
        // CAP: MQES 1023, CQR, TO 10 (5 s), DSTRD 0, CSS NVM, MPSMIN 0, MPSMAX 4.
        let cap: u64 = 1023 | (1 << 16) | (10 << 24) | (1 << 37) | (4 << 52);
        sh.set_reg(offset::CAP, (cap & 0xffff_ffff) as u32);
        sh.set_reg(offset::CAP + 4, (cap >> 32) as u32);
        sh.set_reg(offset::VS, 0x0001_0400);
        Ok(Engine {
            sh,
            opts: opts.clone(),
            enabled: false,
            sqs: vec![None; MAX_QUEUES],
            cqs: vec![None; MAX_QUEUES],
            ns,
            id,
            aers: Vec::with_capacity(8),
            events: VecDeque::with_capacity(8),
            changed: Vec::new(),
            dropped: Vec::with_capacity(64),
            scratch: vec![0u8; 4096].into_boxed_slice(),
        })
    }

    pub(super) fn run(&mut self, spin: bool) {
        let mut idle = 0u32;
        while !self.sh.stop.load(Ordering::Acquire) {
            if self.step() {
                idle = 0;
                continue;
            }
            idle = idle.saturating_add(1);
            if spin {
                std::hint::spin_loop();
                continue;
            }
            if idle < IDLE_SPINS {
                // Not pinned to a core of its own: let the driver's
                // thread run (on a busy or small machine the two often
                // share a core, and a spinning controller would only
                // delay the doorbell it waits for).
                std::thread::yield_now();
                continue;
            }
            self.sh.sleeping.store(true, Ordering::SeqCst);
            if !self.step() {
                std::thread::park_timeout(Duration::from_millis(20));
            }
            self.sh.sleeping.store(false, Ordering::SeqCst);
            idle = IDLE_SPINS - 64;
        }
    }

    fn csts(&self) -> Csts {
        Csts(self.sh.reg(offset::CSTS))
    }

    fn set_csts(&self, rdy: bool, cfs: bool, shst: u8) {
        self.sh.set_reg(offset::CSTS, Csts::new(rdy, cfs, shst).0);
    }

    /// One pass; true if it did anything.
    pub(super) fn step(&mut self) -> bool {
        if self.sh.removed.load(Ordering::Acquire) {
            return false;
        }
        let cc = Cc(self.sh.reg(offset::CC));
        let fatal = self.sh.fatal.load(Ordering::Acquire);
        if !cc.en() {
            if self.enabled || self.csts().0 != 0 {
                self.disable();
                return true;
            }
            return false;
        }
        if !self.enabled {
            if fatal {
                return false;
            }
            self.enable();
            return true;
        }
        if fatal {
            let c = self.csts();
            if !c.cfs() {
                self.set_csts(c.rdy(), true, c.shst());
            }
            return false;
        }
        if cc.shn() != Cc::SHN_NONE && self.csts().shst() != Csts::SHST_COMPLETE {
            self.set_csts(true, false, Csts::SHST_COMPLETE);
            return true;
        }
        let mut busy = false;
        if self.sh.ns_pending.swap(false, Ordering::AcqRel) {
            self.apply_ns_changes();
            busy = true;
        }
        busy |= self.deliver_events();
        for qid in 0..self.sqs.len() {
            if self.sqs[qid].is_some() {
                busy |= self.process_sq(qid);
            }
        }
        busy
    }

    fn enable(&mut self) {
        let aqa = Aqa(self.sh.reg(offset::AQA));
        let asq =
            u64::from(self.sh.reg(offset::ASQ)) | (u64::from(self.sh.reg(offset::ASQ + 4)) << 32);
        let acq =
            u64::from(self.sh.reg(offset::ACQ)) | (u64::from(self.sh.reg(offset::ACQ + 4)) << 32);
        for d in self.sh.doorbells.iter() {
            d.store(0, Ordering::Release);
        }
        self.sqs[0] = Some(Sq {
            base: asq,
            entries: aqa.asqs() + 1,
            head: 0,
            cqid: 0,
        });
        self.cqs[0] = Some(Cq {
            base: acq,
            entries: aqa.acqs() + 1,
            tail: 0,
            phase: true,
        });
        self.enabled = true;
        self.set_csts(true, false, Csts::SHST_NORMAL);
    }

    fn disable(&mut self) {
        self.sqs.iter_mut().for_each(|q| *q = None);
        self.cqs.iter_mut().for_each(|q| *q = None);
        self.aers.clear();
        self.dropped.clear();
        self.enabled = false;
        self.sh.fatal.store(false, Ordering::Release);
        self.set_csts(false, false, Csts::SHST_NORMAL);
    }

    fn apply_ns_changes(&mut self) {
        let changes: Vec<EmuNamespace> = std::mem::take(&mut *self.sh.ns_changes.lock());
        for c in changes {
            let i = c.nsid as usize;
            if i == 0 || i >= self.ns.len() {
                continue;
            }
            self.ns[i] = Some(build_ns(c, &self.opts.serial));
            if !self.changed.contains(&c.nsid) {
                self.changed.push(c.nsid);
            }
        }
        self.events.push_back(AsyncEvent::ns_changed().to_dword());
    }

    fn deliver_events(&mut self) -> bool {
        let mut any = false;
        while !self.events.is_empty() && !self.aers.is_empty() && !self.cq_full(0) {
            let ev = self.events.pop_front().expect("invariant: not empty");
            let cid = self.aers.pop().expect("invariant: not empty");
            self.post(0, cid, Status::SUCCESS, ev);
            any = true;
        }
        any
    }

    pub(super) fn cq_full(&self, cqid: usize) -> bool {
        let Some(cq) = self.cqs.get(cqid).copied().flatten() else {
            return true;
        };
        let head = self.sh.doorbell(2 * cqid + 1);
        let next = (u32::from(cq.tail) + 1) % u32::from(cq.entries);
        next == head
    }

    fn fetch(&mut self, qid: usize) -> Option<Sqe> {
        let sq = self.sqs[qid].as_mut()?;
        let mut sqe = Sqe::new_zeroed();
        dma_read(sq.base + u64::from(sq.head) * 64, sqe.as_mut_bytes());
        sq.head = (sq.head + 1) % sq.entries;
        Some(sqe)
    }

    fn process_sq(&mut self, qid: usize) -> bool {
        let Some(sq) = self.sqs[qid] else {
            return false;
        };
        let tail = self.sh.doorbell(2 * qid);
        if tail >= u32::from(sq.entries) {
            return false;
        }
        let tail = u16::try_from(tail).expect("invariant: below entries");
        let mut n = 0;
        while n < PER_PASS {
            let Some(sq) = self.sqs[qid] else { break };
            if sq.head == tail || self.cq_full(usize::from(sq.cqid)) {
                break;
            }
            let Some(sqe) = self.fetch(qid) else { break };
            n += 1;
            if sqe.fuse() == Fuse::First && qid != 0 {
                let ready = self.sqs[qid].is_some_and(|s| s.head != tail);
                if !ready {
                    // The second half is not there yet: take both later.
                    if let Some(s) = self.sqs[qid].as_mut() {
                        s.head = (s.head + s.entries - 1) % s.entries;
                    }
                    break;
                }
                let Some(second) = self.fetch(qid) else { break };
                self.fused(qid, &sqe, &second);
                continue;
            }
            self.sh.commands.fetch_add(1, Ordering::Relaxed);
            let r = if qid == 0 {
                self.admin(&sqe)
            } else {
                self.io(qid, &sqe)
            };
            if let Some((st, dw0)) = r {
                self.post(qid, sqe.cid.get(), st, dw0);
            }
        }
        n > 0
    }

    fn fused(&mut self, qid: usize, first: &Sqe, second: &Sqe) {
        self.sh.commands.fetch_add(2, Ordering::Relaxed);
        let ok_pair =
            first.opcode == 0x05 && second.opcode == 0x01 && second.fuse() == Fuse::Second;
        if !ok_pair {
            self.post(qid, first.cid.get(), Status::ABORTED_MISSING_FUSED, 0);
            self.post(qid, second.cid.get(), Status::ABORTED_MISSING_FUSED, 0);
            return;
        }
        let (st, dw) = self.io(qid, first).unwrap_or((Status::INTERNAL_ERROR, 0));
        self.post(qid, first.cid.get(), st, dw);
        if st.is_success() {
            let (st2, dw2) = self.io(qid, second).unwrap_or((Status::INTERNAL_ERROR, 0));
            self.post(qid, second.cid.get(), st2, dw2);
        } else {
            self.post(qid, second.cid.get(), Status::ABORTED_FAILED_FUSED, 0);
        }
    }

    /// Posts a completion for command `cid` of SQ `sqid`.
    pub(super) fn post(&mut self, sqid: usize, cid: u16, st: Status, dw0: u32) {
        let Some(sq) = self.sqs.get(sqid).copied().flatten() else {
            return;
        };
        let cqid = usize::from(sq.cqid);
        let Some(cq) = self.cqs[cqid].as_mut() else {
            return;
        };
        let mut c = Cqe::new(cid, st, dw0);
        c.sqhd.set(sq.head);
        c.sqid
            .set(u16::try_from(sqid).expect("invariant: queue ids fit u16"));
        c.set_phase(cq.phase);
        let at = cq.base + u64::from(cq.tail) * 16;
        let b = c.as_bytes();
        dma_write(at, &b[..14]);
        dma_write_u16_release(at + 14, c.status.get());
        cq.tail += 1;
        if cq.tail == cq.entries {
            cq.tail = 0;
            cq.phase = !cq.phase;
        }
    }
}
