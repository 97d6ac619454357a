//! The emulated controller's thread: register state machine (enable,
//! disable, shutdown, fatal status), command fetch from the submission
//! queues the doorbells announce, completion posting with phase tags.
//! The admin queue (and an I/O queue from a fused command on) takes one
//! command at a time here; the I/O queues' batched loop is in `ioq`.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bdevkit_nvme_spec::cmd::Fuse;
use bdevkit_nvme_spec::identify::{IdentifyController, IdentifyNamespace};
use bdevkit_nvme_spec::log::AsyncEvent;
use bdevkit_nvme_spec::regs::{offset, Aqa, Cc, Csts};
use bdevkit_nvme_spec::zerocopy::FromZeros;
use bdevkit_nvme_spec::{Sqe, Status};

use super::sys::{read_sqe, write_cqe};
use super::{EmuKind, EmuNamespace, EmuOptions, Shared, MAX_QUEUES};
use crate::error::Result;

/// Idle polls before the thread parks.
const IDLE_SPINS: u32 = 20_000;
/// Commands taken from one queue per pass (fairness between queues).
pub(super) const PER_PASS: u16 = 256;

/// What a pass of the engine (or of one queue) found. Ordered: a pass
/// over several queues reports the largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Step {
    /// Nothing to do.
    Idle,
    /// Did work and took all there was: only a doorbell or register
    /// write brings more (an inline controller stops here).
    Drained,
    /// Did work and may find more without a new write (a state change, an
    /// admin command, a queue that used up its share of the pass).
    More,
}

impl Step {
    /// It did something.
    pub(super) fn busy(self) -> bool {
        self != Step::Idle
    }
}

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
    /// The head doorbell's value when last read (the driver has consumed
    /// the entries before it): read again only when the free slots it
    /// leaves run short, so posting does not read the driver's doorbell
    /// line for every entry.
    pub head: u16,
}

impl Cq {
    /// A new, empty completion queue.
    pub(super) fn new(base: u64, entries: u16) -> Cq {
        Cq {
            base,
            entries,
            tail: 0,
            phase: true,
            head: 0,
        }
    }

    /// Free slots by the cached head (one slot always stays empty).
    pub(super) fn free(&self) -> u16 {
        self.entries - 1 - ring_dist(self.head, self.tail, self.entries)
    }

    /// Writes a completion for command `cid` of SQ `sqid` (whose head is
    /// now `sqhd`) and advances the tail: one two-store sequence.
    #[inline]
    pub(super) fn post(&mut self, sqid: u16, sqhd: u16, cid: u16, st: Status, dw0: u32) {
        let word = st.to_cqe_word(self.phase);
        let hi = u64::from(sqhd)
            | (u64::from(sqid) << 16)
            | (u64::from(cid) << 32)
            | (u64::from(word) << 48);
        write_cqe(self.base + u64::from(self.tail) * 16, u64::from(dw0), hi);
        self.tail += 1;
        if self.tail == self.entries {
            self.tail = 0;
            self.phase = !self.phase;
        }
    }
}

/// Entries from `from` up to `to` (not included) on a ring of `entries`
/// (both below `entries`).
pub(super) fn ring_dist(from: u16, to: u16, entries: u16) -> u16 {
    if to >= from {
        to - from
    } else {
        entries - from + to
    }
}

/// A completion queue base the engine accepts: 16-byte aligned, so that
/// an entry's status word lands in one aligned store with the rest of its
/// second half (`super::sys::write_cqe`). Drivers give page-aligned ones.
pub(super) fn cq_base_ok(base: u64) -> bool {
    base.is_multiple_of(16)
}

/// The free slots of completion queue `cqid` (`cq`), reading its head
/// doorbell again when the cached head leaves fewer than `want`. When
/// none is free it asks the driver's next head doorbell write to run the
/// engine ([`Shared::cq_wait`]), then reads the doorbell once more: a
/// write in between is seen either here or by the writer.
pub(super) fn cq_room(sh: &Shared, cqid: usize, cq: &mut Cq, want: u16) -> u16 {
    let free = cq.free();
    if free >= want {
        return free;
    }
    let read = |cq: &mut Cq, order| {
        let h = sh.doorbells[2 * cqid + 1].0.load(order);
        // A head past the end (a driver bug) counts as "all consumed".
        cq.head = u16::try_from(h)
            .ok()
            .filter(|h| *h < cq.entries)
            .unwrap_or(cq.tail);
    };
    read(cq, Ordering::Acquire);
    if cq.free() > 0 {
        return cq.free();
    }
    sh.cq_wait.store(true, Ordering::SeqCst);
    read(cq, Ordering::SeqCst);
    cq.free()
}

pub(super) struct Ns {
    pub cfg: EmuNamespace,
    pub data: Vec<u8>,
    pub id: Box<IdentifyNamespace>,
}

/// What the I/O fast path needs to know of a namespace ([`Engine::null`]):
/// for a null namespace its size and the most blocks one command may move
/// (MDTS); all zero for any other, which the fast path then leaves to
/// [`Engine::io`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct NullNs {
    pub nsze: u64,
    pub max_blocks: u32,
}

impl NullNs {
    pub(super) fn of(ns: Option<&Ns>, max_bytes: usize) -> NullNs {
        match ns {
            Some(n) if n.cfg.kind == EmuKind::Null && n.cfg.block_size > 0 => NullNs {
                nsze: n.cfg.num_blocks,
                max_blocks: u32::try_from(max_bytes / n.cfg.block_size as usize)
                    .unwrap_or(u32::MAX)
                    .min(bdevkit_nvme_spec::io::MAX_BLOCKS_PER_COMMAND),
            },
            _ => NullNs::default(),
        }
    }
}

pub(super) struct Engine {
    pub sh: Arc<Shared>,
    pub opts: EmuOptions,
    pub enabled: bool,
    pub sqs: Vec<Option<Sq>>,
    pub cqs: Vec<Option<Cq>>,
    pub ns: Vec<Option<Ns>>,
    /// [`NullNs`] of each entry of `ns` (kept with it).
    pub null: Vec<NullNs>,
    pub id: Box<IdentifyController>,
    pub aers: Vec<u16>,
    pub events: VecDeque<u32>,
    pub changed: Vec<u32>,
    pub dropped: Vec<(u16, u16)>,
    pub scratch: Box<[u8]>,
    /// Bit `q` set: SQ `q` exists (the pass visits only those).
    pub sq_mask: u128,
    /// The most bytes one command moves (MDTS).
    pub max_bytes: usize,
    /// Commands executed (published to [`Shared::commands`]).
    pub commands: u64,
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
        let max_bytes = if opts.mdts == 0 {
            usize::MAX
        } else {
            4096usize << opts.mdts
        };
        Ok(Engine {
            sh,
            opts: opts.clone(),
            enabled: false,
            sqs: vec![None; MAX_QUEUES],
            cqs: vec![None; MAX_QUEUES],
            null: ns
                .iter()
                .map(|n| NullNs::of(n.as_ref(), max_bytes))
                .collect(),
            ns,
            id,
            aers: Vec::with_capacity(8),
            events: VecDeque::with_capacity(8),
            changed: Vec::new(),
            dropped: Vec::with_capacity(64),
            scratch: vec![0u8; 4096].into_boxed_slice(),
            sq_mask: 0,
            max_bytes,
            commands: 0,
        })
    }

    pub(super) fn run(&mut self, spin: bool) {
        let mut idle = 0u32;
        while !self.sh.stop.load(Ordering::Acquire) {
            if self.step().busy() {
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
            if !self.step().busy() {
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

    /// One pass over the registers, events and submission queues, unless
    /// the function lost its bus mastering (then it touches no host
    /// memory; see `EmuFunction::set_bus_master`).
    pub(super) fn step(&mut self) -> Step {
        self.sh.stepping.store(true, Ordering::SeqCst);
        // Both read after `stepping` is raised, both SeqCst: whoever sets
        // one of them and then sees `stepping` low knows no pass runs.
        let r = if self.sh.bus_master_off.load(Ordering::SeqCst)
            || self.sh.removed.load(Ordering::SeqCst)
        {
            Step::Idle
        } else {
            self.pass()
        };
        self.sh.stepping.store(false, Ordering::Release);
        r
    }

    fn pass(&mut self) -> Step {
        let cc = Cc(self.sh.reg(offset::CC));
        let fatal = self.sh.fatal.load(Ordering::Acquire);
        if !cc.en() {
            if self.enabled || self.csts().0 != 0 {
                self.disable();
                return Step::More;
            }
            return Step::Idle;
        }
        if !self.enabled {
            if fatal {
                return Step::Idle;
            }
            self.enable();
            return Step::More;
        }
        if fatal {
            let c = self.csts();
            if !c.cfs() {
                self.set_csts(c.rdy(), true, c.shst());
            }
            return Step::Idle;
        }
        if cc.shn() != Cc::SHN_NONE && self.csts().shst() != Csts::SHST_COMPLETE {
            self.set_csts(true, false, Csts::SHST_COMPLETE);
            return Step::More;
        }
        // Set again below by every completion queue still full.
        if self.sh.cq_wait.load(Ordering::Relaxed) {
            self.sh.cq_wait.store(false, Ordering::Relaxed);
        }
        let mut st = Step::Idle;
        if self.sh.ns_pending.load(Ordering::Relaxed)
            && self.sh.ns_pending.swap(false, Ordering::AcqRel)
        {
            self.apply_ns_changes();
            st = Step::More;
        }
        if !self.events.is_empty() && self.deliver_events() {
            st = Step::More;
        }
        let mut mask = self.sq_mask;
        while mask != 0 {
            let qid = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let q = if qid == 0 {
                self.process_sq(0, PER_PASS)
            } else {
                self.process_io_sq(qid)
            };
            st = st.max(q);
        }
        st
    }

    /// Creates (`Some`) or deletes SQ `qid`.
    pub(super) fn set_sq(&mut self, qid: usize, sq: Option<Sq>) {
        self.sqs[qid] = sq;
        if sq.is_some() {
            self.sq_mask |= 1 << qid;
        } else {
            self.sq_mask &= !(1 << qid);
        }
    }

    /// Counts `n` commands executed (or about to be, a batch counted
    /// before its completions are posted).
    #[inline]
    pub(super) fn count(&mut self, n: u64) {
        self.commands += n;
        self.sh.commands.0.store(self.commands, Ordering::Relaxed);
    }

    /// Takes back `n` of a batch's count (those it left to another loop).
    pub(super) fn uncount(&mut self, n: u64) {
        self.commands -= n;
        self.sh.commands.0.store(self.commands, Ordering::Relaxed);
    }

    fn enable(&mut self) {
        let aqa = Aqa(self.sh.reg(offset::AQA));
        let asq =
            u64::from(self.sh.reg(offset::ASQ)) | (u64::from(self.sh.reg(offset::ASQ + 4)) << 32);
        let acq =
            u64::from(self.sh.reg(offset::ACQ)) | (u64::from(self.sh.reg(offset::ACQ + 4)) << 32);
        for d in self.sh.doorbells.iter() {
            d.0.store(0, Ordering::Release);
        }
        // ASQB and ACQB are bits 63:12 (the low 12 are reserved).
        self.set_sq(
            0,
            Some(Sq {
                base: asq & !0xfff,
                entries: aqa.asqs() + 1,
                head: 0,
                cqid: 0,
            }),
        );
        self.cqs[0] = Some(Cq::new(acq & !0xfff, aqa.acqs() + 1));
        self.enabled = true;
        self.set_csts(true, false, Csts::SHST_NORMAL);
    }

    fn disable(&mut self) {
        self.sqs.iter_mut().for_each(|q| *q = None);
        self.sq_mask = 0;
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
            self.null[i] = NullNs::of(self.ns[i].as_ref(), self.max_bytes);
            if !self.changed.contains(&c.nsid) {
                self.changed.push(c.nsid);
            }
        }
        self.events.push_back(AsyncEvent::ns_changed().to_dword());
    }

    fn deliver_events(&mut self) -> bool {
        let mut any = false;
        while !self.events.is_empty() && !self.aers.is_empty() && self.cq_room(0, 1) > 0 {
            let ev = self.events.pop_front().expect("invariant: not empty");
            let cid = self.aers.pop().expect("invariant: not empty");
            self.post(0, cid, Status::SUCCESS, ev);
            any = true;
        }
        any
    }

    /// [`cq_room`] of completion queue `cqid` (0 if there is none).
    pub(super) fn cq_room(&mut self, cqid: usize, want: u16) -> u16 {
        match self.cqs.get_mut(cqid).and_then(Option::as_mut) {
            Some(cq) => cq_room(&self.sh, cqid, cq, want),
            None => 0,
        }
    }

    fn fetch(&mut self, qid: usize) -> Option<Sqe> {
        let sq = self.sqs[qid].as_mut()?;
        let sqe = read_sqe(sq.base + u64::from(sq.head) * 64);
        sq.head = (sq.head + 1) % sq.entries;
        Some(sqe)
    }

    /// Takes up to `budget` commands of SQ `qid` one at a time, checking
    /// for room in its completion queue before each: the admin queue, and
    /// an I/O queue from a fused command on (the batched loop hands over).
    pub(super) fn process_sq(&mut self, qid: usize, budget: u16) -> Step {
        let Some(sq) = self.sqs[qid] else {
            return Step::Idle;
        };
        let tail = self.sh.doorbell(2 * qid);
        if tail >= u32::from(sq.entries) {
            return Step::Idle;
        }
        let tail = u16::try_from(tail).expect("invariant: below entries");
        let mut n = 0;
        while n < budget {
            let Some(sq) = self.sqs[qid] else { break };
            if sq.head == tail || self.cq_room(usize::from(sq.cqid), 1) == 0 {
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
            self.count(1);
            let r = if qid == 0 {
                self.admin(&sqe)
            } else {
                self.io(qid, &sqe)
            };
            if let Some((st, dw0)) = r {
                self.post(qid, sqe.cid.get(), st, dw0);
            }
        }
        if n == 0 {
            Step::Idle
        } else if qid == 0 || n == budget {
            Step::More
        } else {
            Step::Drained
        }
    }

    fn fused(&mut self, qid: usize, first: &Sqe, second: &Sqe) {
        self.count(2);
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
        let Some(cq) = self.cqs[usize::from(sq.cqid)].as_mut() else {
            return;
        };
        let sqid = u16::try_from(sqid).expect("invariant: queue ids fit u16");
        cq.post(sqid, sq.head, cid, st, dw0);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{ring_dist, Cq};

    proptest! {
        #[test]
        fn ring_distance_and_free_slots(entries in 2u16..=4096, a in any::<u16>(), b in any::<u16>()) {
            let (from, to) = (a % entries, b % entries);
            let d = ring_dist(from, to, entries);
            let want = (u32::from(to) + u32::from(entries) - u32::from(from)) % u32::from(entries);
            prop_assert_eq!(u32::from(d), want);
            let cq = Cq { head: from, tail: to, ..Cq::new(0, entries) };
            prop_assert_eq!(cq.free(), entries - 1 - d);
        }
    }
}
