//! Writing workloads on a zoned bdev: each task owns one zone at a time and
//! writes it from its write pointer to its capacity, one I/O in flight, so
//! that no write ever lands anywhere but at the pointer (a device may
//! reorder two writes in flight to one zone, and ZNS then fails the second).
//!
//! A task's zone cycle: it takes a zone no other task owns (the next one in
//! the job's range, or a random one for `randwrite` and `randrw`), asks the
//! bdev for that zone's report (its capacity, state and write pointer),
//! resets it when it holds data, writes (or, with `--zone-append`, appends)
//! one I/O after the other, finishes the zone when the I/O size leaves a
//! tail below its capacity, and gives it back. Zones that are read-only or
//! offline are skipped. `verify` reads every write back before the next,
//! and checks that an append went where the write pointer was: with one
//! I/O in flight per zone, the device has no other place to put it. Zone
//! reports, resets and finishes are not counted as I/Os; mixes read
//! anywhere in the job's range, as `randread` does on a zoned bdev.

use bdevkit::bdev::{BdevIo, IoType, ZoneAction, ZoneGeometry, ZoneInfo, ZoneState, ZoneType};
use bdevkit::dma::DmaBuf;
use std::cell::{Cell, RefCell};

use super::{below, Job, JobConfig, Phase};
use crate::offsets::{next_rand, BusySlots};
use crate::pattern::{fill_pattern, pattern_key};

/// What a task is doing with its zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Step {
    /// It owns none: the next request takes one and asks for its report.
    #[default]
    Claim,
    /// The report is in flight.
    Report,
    /// The zone holds data: the next request resets it.
    Reset,
    /// The reset or finish is in flight.
    Managing,
    /// Writing at `wp`.
    Data,
}

/// A task's zone.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ZoneCursor {
    step: Step,
    /// The zone's first block.
    zone: u64,
    /// Where the next write goes.
    wp: u64,
    /// The zone's first block past its capacity.
    end: u64,
    /// Where the last write went (the verify read-back).
    last: u64,
    /// Written only at the write pointer (not a conventional zone).
    sequential: bool,
}

/// The job's zones.
#[derive(Debug)]
pub(super) struct Zoned {
    zone_size: u64,
    /// The job's first whole zone (an index).
    first_zone: u64,
    /// Zones the job writes.
    num_zones: u64,
    append: bool,
    /// Zones tasks own.
    owned: RefCell<BusySlots>,
    /// The next zone in sequence.
    next: Cell<u64>,
    /// Each task's zone, by tag (only zoned jobs pay for them).
    cursors: RefCell<Vec<ZoneCursor>>,
    /// Zones skipped in a row (read-only, offline or failing), so that a
    /// range with no writable zone stops the job instead of spinning.
    skipped: Cell<u64>,
}

impl Zoned {
    /// The zones of a writing job over `blocks` (the job's range) of a
    /// zoned bdev; caps the queue depth at the zones the job can write at
    /// once, one task per zone.
    pub(super) fn new(
        cfg: &mut JobConfig,
        g: &ZoneGeometry,
        blocks: (u64, u64),
        io_blocks: u64,
    ) -> anyhow::Result<Zoned> {
        let bdev = &cfg.bdev;
        let zs = g.zone_size;
        let (first_zone, end_zone) = (blocks.0.div_ceil(zs), (blocks.0 + blocks.1) / zs);
        if end_zone <= first_zone {
            anyhow::bail!(
                "the job's range of zoned bdev {bdev} holds no whole zone (zones of {zs} blocks)"
            );
        }
        if io_blocks > zs {
            anyhow::bail!(
                "I/O size {} is larger than a zone of bdev {bdev} ({zs} blocks)",
                cfg.io_size
            );
        }
        if cfg.zone_append && g.max_zone_append_size != 0 {
            let max = u64::from(g.max_zone_append_size);
            if io_blocks > max {
                anyhow::bail!(
                    "I/O size {} is above the largest zone append of bdev {bdev} ({max} blocks)",
                    cfg.io_size
                );
            }
        }
        let num_zones = end_zone - first_zone;
        // The device's open and active limits hold for all the jobs that
        // share it (`-C` splits one bdev between them).
        let share = if cfg.range_blocks.is_some() {
            1
        } else {
            cfg.slice.1.max(1)
        };
        let mut cap = num_zones;
        for (limit, what) in [(g.max_open_zones, "open"), (g.max_active_zones, "active")] {
            if limit != 0 && (u64::from(limit) / share).max(1) < cap {
                cap = (u64::from(limit) / share).max(1);
                eprintln!(
                    "warning: zoned bdev {bdev} allows {limit} {what} zones at once{}",
                    if share > 1 {
                        ", shared by the jobs on it"
                    } else {
                        ""
                    }
                );
            }
        }
        if u64::from(cfg.queue_depth) > cap {
            eprintln!(
                "warning: zoned bdev {bdev}: queue depth (-q) {} is above the {cap} zones the job can write at once (one write in flight per zone); using {cap}",
                cfg.queue_depth
            );
            cfg.queue_depth = u32::try_from(cap).expect("invariant: cap < queue_depth, a u32");
        }
        Ok(Zoned {
            zone_size: zs,
            first_zone,
            num_zones,
            append: cfg.zone_append,
            owned: RefCell::new(BusySlots::new(num_zones)?),
            next: Cell::new(0),
            cursors: RefCell::new(vec![ZoneCursor::default(); cfg.queue_depth as usize]),
            skipped: Cell::new(0),
        })
    }

    /// Takes a zone no task owns: the next in sequence, or one at random.
    fn claim(&self, random: Option<u64>) -> u64 {
        let from = random.map_or(self.next.get(), |r| below(r, self.num_zones));
        let rel = self
            .owned
            .borrow_mut()
            .take_from(from)
            .expect("invariant: a zoned job has at most as many tasks as zones");
        self.next.set(if rel + 1 == self.num_zones {
            0
        } else {
            rel + 1
        });
        (self.first_zone + rel) * self.zone_size
    }

    /// Gives `zone` (its first block) back.
    fn release(&self, zone: u64) {
        self.owned
            .borrow_mut()
            .release(zone / self.zone_size - self.first_zone);
    }
}

impl Job {
    /// A task stops (its submit failed): it gives its zone back.
    pub(super) fn release_zone(&self, tag: usize) {
        if let Some(z) = &self.zoned {
            let c = &mut z.cursors.borrow_mut()[tag];
            if c.step != Step::Claim {
                z.release(c.zone);
                c.step = Step::Claim;
            }
        }
    }

    /// Sets the next request of a task of a writing job on a zoned bdev.
    #[cold]
    pub(super) fn fill_zoned(&self, io: &mut BdevIo, tag: usize, buf: Option<DmaBuf>) {
        let z = self.zoned.as_ref().expect("invariant: a zoned job");
        let n = self.io_blocks;
        let mut tasks = self.tasks.borrow_mut();
        let t = &mut tasks[tag];
        let Some(mut buf) = buf.or_else(|| t.buf.take()) else {
            debug_assert!(false, "a zoned task owns its buffer");
            return;
        };
        let mut cursors = z.cursors.borrow_mut();
        let c = &mut cursors[tag];
        loop {
            match c.step {
                Step::Claim => {
                    let random = self.random.then(|| next_rand(&self.rng));
                    c.zone = z.claim(random);
                    c.step = Step::Report;
                    io.get_zone_info(c.zone, 1, buf);
                    return;
                }
                Step::Reset => {
                    c.step = Step::Managing;
                    t.buf = Some(buf);
                    io.zone_management(c.zone, ZoneAction::Reset);
                    return;
                }
                Step::Report | Step::Managing => {
                    debug_assert!(false, "a zoned task refilled with a request in flight");
                    c.step = Step::Claim;
                }
                Step::Data if t.phase == Phase::Read => {
                    if self.check_data {
                        buf.fill(0xA5);
                    }
                    io.read(c.last, n, buf);
                    return;
                }
                Step::Data
                    if self.cfg.workload.is_mixed()
                        && below(next_rand(&self.rng), 100) < u64::from(self.cfg.rw_percentage) =>
                {
                    io.read(self.next_slot() * n, n, buf);
                    return;
                }
                Step::Data if c.wp + n > c.end => {
                    if c.sequential && c.wp < c.end {
                        // A tail shorter than an I/O: close the zone out.
                        c.step = Step::Managing;
                        t.buf = Some(buf);
                        io.zone_management(c.zone, ZoneAction::Finish);
                        return;
                    }
                    z.release(c.zone);
                    c.step = Step::Claim;
                }
                Step::Data => {
                    c.last = c.wp;
                    if self.verify {
                        t.gen = if self.unique {
                            self.writes.set(self.writes.get() + 1);
                            self.writes.get()
                        } else {
                            t.gen + 1
                        };
                        if self.check_data {
                            fill_pattern(&mut buf, pattern_key(c.wp, self.cfg.seed, t.gen));
                        }
                    } else if self.unique {
                        self.stamp(&mut buf, c.wp);
                    }
                    if z.append {
                        io.zone_append(c.zone, n, buf);
                    } else {
                        io.write(c.wp, n, buf);
                    }
                    return;
                }
            }
        }
    }

    /// Accounts for a zoned task's completed request; returns whether it
    /// was a data I/O (counted in the statistics) and the task's buffer.
    #[cold]
    pub(super) fn zoned_done(
        &self,
        io: &BdevIo,
        tag: usize,
        ok: bool,
        buf: Option<DmaBuf>,
    ) -> (bool, Option<DmaBuf>) {
        let z = self.zoned.as_ref().expect("invariant: a zoned job");
        let n = self.io_blocks;
        let mut tasks = self.tasks.borrow_mut();
        let t = &mut tasks[tag];
        let buf = buf.or_else(|| t.buf.take());
        let mut cursors = z.cursors.borrow_mut();
        let c = &mut cursors[tag];
        let mut failure = None;
        let mut read_back = None;
        let data = match io.io_type() {
            IoType::GetZoneInfo => {
                if ok {
                    let info = buf
                        .as_ref()
                        .and_then(|b| ZoneInfo::decode(b.as_slice()))
                        .filter(|i| sane(i, c.zone, z.zone_size));
                    match info {
                        None => {
                            failure = Some(format!("zone report of zone {} is malformed", c.zone))
                        }
                        Some(i) => failure = self.opened(z, c, &i),
                    }
                } else {
                    z.release(c.zone);
                    c.step = Step::Claim;
                }
                false
            }
            IoType::ZoneManagement => {
                if ok && io.zone_action() == Some(ZoneAction::Reset) {
                    c.wp = c.zone;
                    c.step = Step::Data;
                } else {
                    // Finished (or failed): the next request takes another.
                    z.release(c.zone);
                    c.step = Step::Claim;
                }
                false
            }
            IoType::Read => {
                if t.phase == Phase::Read {
                    t.phase = Phase::Write;
                    if ok && self.check_data {
                        read_back = Some((c.last, t.gen));
                    }
                }
                true
            }
            _ => {
                if ok {
                    let at = io.zone_append_lba().unwrap_or(c.wp);
                    if at == c.wp {
                        c.wp += n;
                        if self.verify {
                            t.phase = Phase::Read;
                        }
                    } else {
                        failure = Some(format!(
                            "a zone append to zone {} wrote at block {at}, not at the write pointer {}",
                            c.zone, c.wp
                        ));
                    }
                } else {
                    z.release(c.zone);
                    c.step = Step::Claim;
                }
                true
            }
        };
        if failure.is_some() {
            z.release(c.zone);
            c.step = Step::Claim;
        }
        drop(cursors);
        drop(tasks);
        if let (Some((off, gen)), Some(b)) = (read_back, &buf) {
            self.check_read_back(b, off, gen);
        }
        if let Some(f) = failure {
            self.stats.borrow_mut().failed += 1;
            self.fail_job(&f);
        }
        (data, buf)
    }

    /// A task's zone report came back: where and whether to write.
    fn opened(&self, z: &Zoned, c: &mut ZoneCursor, i: &ZoneInfo) -> Option<String> {
        if matches!(i.state, ZoneState::ReadOnly | ZoneState::Offline) {
            z.release(c.zone);
            c.step = Step::Claim;
            let skipped = z.skipped.get() + 1;
            z.skipped.set(skipped);
            return (skipped >= z.num_zones).then(|| {
                format!(
                    "no writable zone in the job's range of bdev {} (zone {} is {})",
                    self.cfg.bdev,
                    c.zone,
                    i.state.name()
                )
            });
        }
        z.skipped.set(0);
        if i.capacity < self.io_blocks {
            return Some(format!(
                "zone {} of bdev {} holds {} blocks, less than one I/O of {}",
                c.zone, self.cfg.bdev, i.capacity, self.io_blocks
            ));
        }
        c.end = c.zone + i.capacity;
        c.sequential = i.zone_type != ZoneType::Conventional;
        c.wp = c.zone;
        c.step = if c.sequential && (i.state != ZoneState::Empty || i.write_pointer != c.zone) {
            Step::Reset
        } else {
            Step::Data
        };
        None
    }
}

/// Whether a report of `zone` is one a device could send: its own id, a
/// capacity within the zone, and a write pointer inside it (ZNS leaves the
/// pointer of a full, read-only or offline zone undefined).
fn sane(i: &ZoneInfo, zone: u64, zone_size: u64) -> bool {
    let pointless = matches!(
        i.state,
        ZoneState::Full | ZoneState::ReadOnly | ZoneState::Offline
    );
    i.zone_id == zone
        && i.capacity <= zone_size
        && (pointless || (i.write_pointer >= zone && i.write_pointer - zone <= i.capacity))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    fn cfg(queue_depth: u32, slice: (u64, u64)) -> JobConfig {
        JobConfig {
            bdev: "Z0".into(),
            queue_depth,
            slice,
            ..super::super::tests::cfg(Workload::Write)
        }
    }

    fn info(state: ZoneState, wp: u64, capacity: u64) -> ZoneInfo {
        ZoneInfo {
            zone_id: 1024,
            write_pointer: wp,
            capacity,
            state,
            zone_type: ZoneType::SequentialWriteRequired,
        }
    }

    #[test]
    fn a_report_is_trusted_only_when_a_device_could_send_it() {
        assert!(sane(&info(ZoneState::Empty, 1024, 1000), 1024, 1024));
        assert!(sane(&info(ZoneState::ImplicitOpen, 2024, 1000), 1024, 1024));
        // A full zone's pointer is undefined.
        assert!(sane(&info(ZoneState::Full, u64::MAX, 1000), 1024, 1024));
        // Another zone, a capacity past the zone, a pointer outside it.
        let mut other = info(ZoneState::Empty, 0, 1000);
        other.zone_id = 0;
        assert!(!sane(&other, 1024, 1024));
        assert!(!sane(&info(ZoneState::Empty, 1024, 1025), 1024, 1024));
        assert!(!sane(&info(ZoneState::Closed, 1000, 1000), 1024, 1024));
        assert!(!sane(&info(ZoneState::Closed, 2025, 1000), 1024, 1024));
    }

    #[test]
    fn a_job_gets_its_whole_zones_and_one_task_per_zone() {
        let g = ZoneGeometry::new(256);
        // Blocks 100..1100 hold zones 1, 2 and 3 whole.
        let mut c = cfg(8, (0, 1));
        let z = Zoned::new(&mut c, &g, (100, 1000), 1).unwrap();
        assert_eq!((z.first_zone, z.num_zones), (1, 3));
        assert_eq!(c.queue_depth, 3);
        let claimed: Vec<u64> = (0..3).map(|_| z.claim(None)).collect();
        assert_eq!(claimed, [256, 512, 768]);
        z.release(512);
        assert_eq!(z.claim(None), 512);
        // Open and active limits are shared by the -C jobs.
        let g = ZoneGeometry {
            max_open_zones: 4,
            ..ZoneGeometry::new(256)
        };
        let mut c = cfg(8, (0, 2));
        Zoned::new(&mut c, &g, (0, 4096), 1).unwrap();
        assert_eq!(c.queue_depth, 2);
        // No whole zone, an I/O larger than a zone, appends above the limit.
        assert!(Zoned::new(&mut cfg(1, (0, 1)), &g, (1, 300), 1).is_err());
        assert!(Zoned::new(&mut cfg(1, (0, 1)), &g, (0, 4096), 257).is_err());
        let g = ZoneGeometry {
            max_zone_append_size: 8,
            ..ZoneGeometry::new(256)
        };
        let mut c = cfg(1, (0, 1));
        c.zone_append = true;
        assert!(Zoned::new(&mut c, &g, (0, 4096), 16).is_err());
        assert!(Zoned::new(&mut c, &g, (0, 4096), 8).is_ok());
    }
}
