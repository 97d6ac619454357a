//! The verify cycle of a task: take a free slot, write a fresh pattern
//! there, read it back, compare, give the slot back.
//!
//! A task owns its slot from the write until the read-back completes (or
//! the write fails), and the next write of any task skips owned slots, as
//! SPDK's bdevperf does. So a slow I/O, or a queue depth as large as the
//! job's slots, never lets a second task overwrite a slot before its
//! owner has checked it: a miscompare means the storage returned other
//! data than was written, never that the tool raced itself. The queue
//! depth is capped at the slot count (`Job::new`) so that a free slot
//! always exists.

use bdevkit::bdev::BdevIo;
use bdevkit::dma::DmaBuf;

use super::{Job, Phase};
use crate::pattern::{check_pattern, fill_pattern, pattern_key};

impl Job {
    /// Sets the next request of a verify task: write a fresh pattern to a
    /// slot no other task owns, or read it back into a poisoned buffer.
    #[cold]
    pub(super) fn fill_verify(&self, io: &mut BdevIo, tag: usize, buf: Option<DmaBuf>) {
        let n = self.io_blocks;
        let mut tasks = self.tasks.borrow_mut();
        let t = &mut tasks[tag];
        let mut buf = buf.expect("invariant: verify tasks own a buffer");
        match t.phase {
            Phase::Write => {
                t.slot = self.take_verify_slot();
                t.gen = if self.unique {
                    // -U: a generation no other write of the job has.
                    let w = self.writes.get() + 1;
                    self.writes.set(w);
                    w
                } else {
                    t.gen + 1
                };
                if self.check_data {
                    fill_pattern(&mut buf, pattern_key(t.slot * n, self.cfg.seed, t.gen));
                }
                io.write(t.slot * n, n, buf);
            }
            Phase::Read => {
                if self.check_data {
                    buf.fill(0xA5);
                }
                io.read(t.slot * n, n, buf);
            }
        }
    }

    /// The next slot in sequence that no task owns, now owned by the
    /// caller. The caller owns none (it gave its last one back), and the
    /// queue depth is at most the slot count, so one is always free.
    pub(super) fn take_verify_slot(&self) -> u64 {
        let Some(busy) = &self.busy else {
            return self.next_slot();
        };
        let mut busy = busy.borrow_mut();
        let rel = busy
            .take_from(self.seq.get())
            .expect("invariant: a verify job has fewer tasks than slots");
        self.seq.set(if rel + 1 == self.num_slots {
            0
        } else {
            rel + 1
        });
        self.first_slot + rel
    }

    /// Gives `slot` back (a verify job's slot, absolute).
    pub(super) fn release_verify_slot(&self, slot: u64) {
        if let Some(busy) = &self.busy {
            busy.borrow_mut().release(slot - self.first_slot);
        }
    }

    /// Accounts for a verify task's completed I/O: a written slot is read
    /// back next; a read-back is compared, and the slot is given back.
    pub(super) fn verify_done(&self, tag: usize, ok: bool, buf: Option<DmaBuf>) -> Option<DmaBuf> {
        let mut tasks = self.tasks.borrow_mut();
        let t = &mut tasks[tag];
        let slot = t.slot;
        match t.phase {
            Phase::Write => {
                if ok {
                    t.phase = Phase::Read;
                } else {
                    // The next write goes to a fresh slot.
                    drop(tasks);
                    self.release_verify_slot(slot);
                }
            }
            Phase::Read => {
                t.phase = Phase::Write;
                let gen = t.gen;
                drop(tasks);
                self.release_verify_slot(slot);
                if ok && self.check_data {
                    if let Some(b) = &buf {
                        self.check_read_back(b, slot * self.io_blocks, gen);
                    }
                }
            }
        }
        buf
    }

    /// Compares a successful read-back of block `off` with the pattern of
    /// write generation `gen`; a miscompare counts as a failed I/O.
    pub(super) fn check_read_back(&self, b: &DmaBuf, off: u64, gen: u64) {
        let key = pattern_key(off, self.cfg.seed, gen);
        if let Some((i, want, got)) = check_pattern(b, key) {
            let byte = off * self.block_size + i as u64;
            eprintln!(
                "bdevperf: {}: miscompare at offset {byte} (block {}, byte {i} of the I/O): expected 0x{want:02x}, got 0x{got:02x}",
                self.cfg.bdev,
                byte / self.block_size,
            );
            let mut s = self.stats.borrow_mut();
            s.ios -= 1;
            s.failed += 1;
            drop(s);
            self.fail_job("verify failed");
        }
    }
}
