//! The I/O queues' command loop, the emulated controller's hot path: per
//! pass it reads a queue's tail doorbell once, takes the commands up to it
//! in batches as large as the completion queue has room for (whose head
//! doorbell it reads only when the room it last saw runs out), reads of
//! each entry only the words it decides on, completes a null namespace's
//! Read or Write after one check and posts each completion with one store
//! sequence. Everything else (a fault armed, a RAM namespace, other
//! opcodes, errors) goes through [`Engine::io`]; a fused command hands
//! the queue to the one-at-a-time loop ([`Engine::process_sq`]).

use std::sync::atomic::Ordering;

use bdevkit_nvme_spec::cmd::Fuse;
use bdevkit_nvme_spec::io::BlockRange;
use bdevkit_nvme_spec::Status;

use super::engine::{cq_room, ring_dist, Cq, Engine, Step, PER_PASS};
use super::sys::{read_sqe, read_sqe_head, SqeHead};

/// NVM opcodes of the fast path.
const WRITE: u8 = 0x01;
const READ: u8 = 0x02;

impl Engine {
    /// One pass over I/O SQ `qid`: the commands up to its tail, at most
    /// [`PER_PASS`].
    pub(super) fn process_io_sq(&mut self, qid: usize) -> Step {
        let Some(mut sq) = self.sqs[qid] else {
            return Step::Idle;
        };
        let tail = self.sh.doorbell(2 * qid);
        if tail == u32::from(sq.head) || tail >= u32::from(sq.entries) {
            return Step::Idle;
        }
        let tail = u16::try_from(tail).expect("invariant: below entries");
        let cqid = usize::from(sq.cqid);
        let Some(mut cq) = self.cqs.get(cqid).copied().flatten() else {
            return Step::Idle;
        };
        let sqid = u16::try_from(qid).expect("invariant: queue ids fit u16");
        // Read after the tail: a fault injected before the commands up to
        // that tail were submitted is seen (the doorbell's acquire).
        let faults = self.sh.faults_on.load(Ordering::Relaxed);
        let mut left = PER_PASS;
        let mut fused = false;
        'pass: while sq.head != tail && left > 0 {
            let want = ring_dist(sq.head, tail, sq.entries).min(left);
            // An I/O command posts at most one completion.
            let n = cq_room(&self.sh, cqid, &mut cq, want).min(want);
            if n == 0 {
                break;
            }
            // Counted before any of their completions is posted.
            self.count(u64::from(n));
            for i in 0..n {
                let at = sq.base + u64::from(sq.head) * 64;
                let h = read_sqe_head(at);
                if h.flags() & 3 == Fuse::First.code() {
                    // Left to the one-at-a-time loop, which counts them.
                    self.uncount(u64::from(n - i));
                    fused = true;
                    break 'pass;
                }
                sq.head += 1;
                if sq.head == sq.entries {
                    sq.head = 0;
                }
                left -= 1;
                if !faults && self.null_rw_ok(h) {
                    cq.post(sqid, sq.head, h.cid(), Status::SUCCESS, 0);
                } else {
                    self.io_posted(qid, at, &mut cq, sq.head, h.cid());
                }
            }
        }
        let took = left < PER_PASS;
        self.sqs[qid] = Some(sq);
        self.cqs[cqid] = Some(cq);
        let st = if left == 0 {
            Step::More
        } else if took {
            Step::Drained
        } else {
            Step::Idle
        };
        if fused {
            return st.max(self.process_sq(qid, left));
        }
        st
    }

    /// [`Engine::io`] for the entry at `at` of SQ `qid` (whose head is
    /// now `sqhd`), and its completion if it has one: the general path,
    /// out of line so that the fast one keeps its registers.
    #[cold]
    #[inline(never)]
    fn io_posted(&mut self, qid: usize, at: u64, cq: &mut Cq, sqhd: u16, cid: u16) {
        if let Some((st, dw0)) = self.io(qid, &read_sqe(at)) {
            let sqid = u16::try_from(qid).expect("invariant: queue ids fit u16");
            cq.post(sqid, sqhd, cid, st, dw0);
        }
    }

    /// Whether the command `h` is a Read or Write of a null namespace
    /// that succeeds as it is (with no fault armed): the namespace exists,
    /// the range lies inside it and the length is within MDTS (what
    /// [`Engine::io`] would find before answering success without moving
    /// data).
    #[inline]
    fn null_rw_ok(&self, h: SqeHead) -> bool {
        if !matches!(h.opcode(), READ | WRITE) {
            return false;
        }
        let Some(ns) = self.null.get(h.nsid as usize) else {
            return false;
        };
        let nlb = h.cdw12 & 0xffff;
        nlb < ns.max_blocks && BlockRange::from_raw(h.slba, nlb as u16).within(ns.nsze)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bdevkit_nvme_spec::admin::{CreateIoCq, CreateIoSq};
    use bdevkit_nvme_spec::io::{Read, Write};
    use bdevkit_nvme_spec::regs::{offset, Aqa, Cc, Csts};
    use bdevkit_nvme_spec::{Command, Cqe, Sqe, Status};
    use proptest::prelude::*;

    use super::super::{
        EmuController, EmuFunction, EmuKind, EmuNamespace, EmuOptions, Fault, FaultAction,
    };
    use crate::bus::PciFunction;
    use crate::sys::DmaMem;

    /// A queue in test memory, driven by hand through the registers and
    /// doorbells (an inline controller: every doorbell write runs it).
    struct HostQueue {
        mem: DmaMem,
        qid: u16,
        entries: u16,
        cq_entries: u16,
        sq_tail: u16,
        cq_head: u16,
        phase: bool,
    }

    impl HostQueue {
        fn new(qid: u16, entries: u16, cq_entries: u16) -> HostQueue {
            let cq_off = (usize::from(entries) * 64).next_multiple_of(4096);
            HostQueue {
                mem: DmaMem::alloc(cq_off + usize::from(cq_entries) * 16, false).unwrap(),
                qid,
                entries,
                cq_entries,
                sq_tail: 0,
                cq_head: 0,
                phase: true,
            }
        }
        fn cq_off(&self) -> usize {
            (usize::from(self.entries) * 64).next_multiple_of(4096)
        }
        fn sq_iova(&self) -> u64 {
            self.mem.iova()
        }
        fn cq_iova(&self) -> u64 {
            self.mem.iova() + self.cq_off() as u64
        }
        fn push(&mut self, f: &EmuFunction, sqe: &Sqe, ring: bool) {
            self.mem.write_sqe(usize::from(self.sq_tail) * 64, sqe);
            self.sq_tail = (self.sq_tail + 1) % self.entries;
            if ring {
                self.ring_sq(f);
            }
        }
        fn ring_sq(&self, f: &EmuFunction) {
            f.write32(0x1000 + 8 * u32::from(self.qid), u32::from(self.sq_tail));
        }
        /// The new completions, without ringing the head doorbell.
        fn reap(&mut self) -> Vec<Cqe> {
            let mut out = Vec::new();
            loop {
                let at = self.cq_off() + usize::from(self.cq_head) * 16;
                let Some(c) = self.mem.new_cqe(at, self.phase) else {
                    return out;
                };
                out.push(c);
                self.cq_head += 1;
                if self.cq_head == self.cq_entries {
                    self.cq_head = 0;
                    self.phase = !self.phase;
                }
            }
        }
        fn ring_cq(&self, f: &EmuFunction) {
            f.write32(0x1004 + 8 * u32::from(self.qid), u32::from(self.cq_head));
        }
        /// Polls until `n` new completions arrived (or 60 s), ringing the
        /// head doorbell after each reap.
        fn wait(&mut self, f: &EmuFunction, n: usize) -> Vec<Cqe> {
            let start = std::time::Instant::now();
            let mut out = Vec::new();
            while out.len() < n && start.elapsed() < std::time::Duration::from_secs(60) {
                let got = self.reap();
                if got.is_empty() {
                    std::thread::yield_now();
                    continue;
                }
                out.extend(got);
                self.ring_cq(f);
            }
            out
        }
    }

    struct Rig {
        emu: EmuController,
        f: Arc<EmuFunction>,
        admin: HostQueue,
        io: HostQueue,
    }

    impl Rig {
        fn admin(&mut self, sqe: &Sqe) -> Status {
            self.admin.push(&self.f, sqe, true);
            let c = self.admin.wait(&self.f, 1);
            assert_eq!(c.len(), 1);
            c[0].status()
        }
    }

    fn null_ns() -> EmuNamespace {
        EmuNamespace {
            nsid: 1,
            kind: EmuKind::Null,
            block_size: 512,
            num_blocks: 1000,
        }
    }

    /// An enabled inline controller with I/O queue 1 (`sq` entries
    /// posting to a CQ of `cq` entries).
    fn rig(sq: u16, cq: u16) -> Rig {
        rig_of(sq, cq, None)
    }

    /// [`rig`], with a controller thread (`Some(spin)`) or inline.
    fn rig_of(sq: u16, cq: u16, thread: Option<bool>) -> Rig {
        let opts = EmuOptions {
            mdts: 1,
            namespaces: vec![null_ns()],
            spin: thread == Some(true),
            ..EmuOptions::default()
        };
        let emu = match thread {
            None => EmuController::start_inline("ioq-test", opts),
            Some(_) => EmuController::start("ioq-test", opts),
        }
        .unwrap();
        let f = emu.function();
        let admin = HostQueue::new(0, 8, 8);
        f.write32(offset::AQA, Aqa::new(7, 7).0);
        let (asq, acq) = (admin.sq_iova().to_le_bytes(), admin.cq_iova().to_le_bytes());
        let half = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap());
        f.write32(offset::ASQ, half(&asq[..4]));
        f.write32(offset::ASQ + 4, half(&asq[4..]));
        f.write32(offset::ACQ, half(&acq[..4]));
        f.write32(offset::ACQ + 4, half(&acq[4..]));
        f.write32(offset::CC, Cc::enabled(0).0);
        let start = std::time::Instant::now();
        while !Csts(f.read32(offset::CSTS)).rdy() {
            assert!(start.elapsed() < std::time::Duration::from_secs(60));
            std::thread::yield_now();
        }
        let io = HostQueue::new(1, sq, cq);
        let mut r = Rig { emu, f, admin, io };
        let c = CreateIoCq {
            qid: 1,
            qsize: cq - 1,
            prp1: r.io.cq_iova(),
            pc: true,
            ien: false,
            iv: 0,
        };
        assert_eq!(r.admin(&c.to_sqe(1)), Status::SUCCESS);
        let s = CreateIoSq {
            qid: 1,
            qsize: sq - 1,
            prp1: r.io.sq_iova(),
            pc: true,
            qprio: 0,
            cqid: 1,
            nvmsetid: 0,
        };
        assert_eq!(r.admin(&s.to_sqe(2)), Status::SUCCESS);
        r
    }

    fn rw(write: bool, nsid: u32, slba: u64, nlb: u16, cid: u16) -> Sqe {
        let mut s = if write {
            Sqe::new(Write::OPCODE, cid, nsid)
        } else {
            Sqe::new(Read::OPCODE, cid, nsid)
        };
        let b = slba.to_le_bytes();
        s.cdw10.set(u32::from_le_bytes(b[..4].try_into().unwrap()));
        s.cdw11.set(u32::from_le_bytes(b[4..].try_into().unwrap()));
        s.cdw12.set(u32::from(nlb));
        s
    }

    #[test]
    fn a_full_cq_holds_commands_until_its_head_doorbell() {
        // 7 commands on an SQ of 8 posting to a CQ of 4 (3 usable slots).
        let mut r = rig(8, 4);
        for cid in 0u16..7 {
            r.io.push(
                &r.f,
                &rw(cid.is_multiple_of(2), 1, u64::from(cid), 0, cid),
                false,
            );
        }
        r.io.ring_sq(&r.f);
        let mut got = r.io.reap();
        assert_eq!(got.len(), 3);
        // Reaped but not yet told: the controller still waits (a doorbell
        // write that changes nothing runs it).
        r.admin.ring_sq(&r.f);
        assert!(r.io.reap().is_empty());
        while got.len() < 7 {
            r.io.ring_cq(&r.f);
            let more = r.io.reap();
            assert!(!more.is_empty(), "the head doorbell runs the controller");
            got.extend(more);
        }
        for (i, c) in (0u16..).zip(&got) {
            assert_eq!(c.cid.get(), i);
            assert_eq!(c.status(), Status::SUCCESS);
            assert_eq!(c.sqid.get(), 1);
            assert_eq!(c.sqhd.get(), (i + 1) % 8);
        }
        assert_eq!(r.emu.commands(), 2 + 7);
    }

    /// Many commands through a small queue pair, the controller on a
    /// thread of its own: spinning (a doorbell write only stores), and
    /// parking when idle (a write wakes it).
    #[test]
    fn a_controller_thread_takes_batches_up_to_the_tail() {
        for spin in [true, false] {
            let mut r = rig_of(16, 8, Some(spin));
            let mut done = 0u16;
            let mut cid = 0u16;
            while done < 300 {
                while cid < 300 && cid - done < 7 {
                    r.io.push(
                        &r.f,
                        &rw(cid.is_multiple_of(3), 1, u64::from(cid), 0, cid),
                        false,
                    );
                    cid += 1;
                }
                r.io.ring_sq(&r.f);
                let c = r.io.wait(&r.f, 1);
                assert!(!c.is_empty(), "spin {spin}: stuck at {done}");
                for e in c {
                    assert_eq!(e.cid.get(), done);
                    assert_eq!(e.status(), Status::SUCCESS);
                    done += 1;
                }
            }
            assert_eq!(r.emu.commands(), 2 + 300);
        }
    }

    #[test]
    fn completions_wrap_with_the_phase_tag() {
        let mut r = rig(4, 4);
        for round in 0..20u16 {
            r.io.push(&r.f, &rw(false, 1, 0, 0, round), true);
            let c = r.io.reap();
            r.io.ring_cq(&r.f);
            assert_eq!(c.len(), 1);
            assert_eq!(c[0].cid.get(), round);
            assert_eq!(c[0].phase(), (round / 4) % 2 == 0);
        }
    }

    #[test]
    fn an_armed_fault_still_hits_null_reads() {
        let mut r = rig(8, 8);
        let st = Status::new(2, 0x81);
        r.emu.inject(Fault {
            admin: false,
            opcode: Some(Read::OPCODE),
            count: 1,
            action: FaultAction::Status(st),
        });
        r.io.push(&r.f, &rw(false, 1, 0, 0, 5), false);
        r.io.push(&r.f, &rw(false, 1, 0, 0, 6), true);
        let c = r.io.reap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].status(), st);
        assert_eq!(c[1].status(), Status::SUCCESS);
    }

    /// What a null namespace of [`null_ns`] (MDTS 1: 16 blocks) answers.
    fn model(nsid: u32, slba: u64, nlb: u16) -> Status {
        if nsid != 1 {
            Status::INVALID_NAMESPACE.with_dnr()
        } else if slba >= 1000 || 1000 - slba <= u64::from(nlb) {
            Status::LBA_OUT_OF_RANGE.with_dnr()
        } else if u32::from(nlb) + 1 > 16 {
            Status::INVALID_FIELD.with_dnr()
        } else {
            Status::SUCCESS
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The fast path and the general one ([`Engine::io`], taken while
        /// a fault that matches nothing is armed) answer as the model.
        #[test]
        fn fast_and_general_paths_agree(
            cmds in proptest::collection::vec(
                (any::<bool>(), 0u32..3, prop_oneof![0u64..1100, any::<u64>()], 0u16..40),
                1..30,
            ),
        ) {
            let mut r = rig(64, 64);
            for general in [false, true] {
                if general {
                    r.emu.inject(Fault {
                        admin: true,
                        opcode: Some(0x7f),
                        count: 1,
                        action: FaultAction::Drop,
                    });
                }
                for (i, (write, nsid, slba, nlb)) in cmds.iter().enumerate() {
                    let cid = u16::try_from(i).unwrap();
                    r.io.push(&r.f, &rw(*write, *nsid, *slba, *nlb, cid), false);
                }
                r.io.ring_sq(&r.f);
                let got = r.io.reap();
                r.io.ring_cq(&r.f);
                prop_assert_eq!(got.len(), cmds.len());
                for (c, (_, nsid, slba, nlb)) in got.iter().zip(&cmds) {
                    prop_assert_eq!(c.status(), model(*nsid, *slba, *nlb));
                }
            }
        }
    }
}
