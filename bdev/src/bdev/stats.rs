//! I/O statistics (`bdev_get_iostat`), kept per channel and folded into the
//! bdev when a channel goes away.

use serde_json::{json, Map, Value};

use super::types::{IoStatus, IoType};

/// Latency accumulator for one I/O category.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    /// Sum of latencies, in ticks.
    pub total: u64,
    /// Largest latency.
    pub max: u64,
    /// Smallest latency (`u64::MAX` = none yet, reported as 0).
    pub min: u64,
}

impl Latency {
    const EMPTY: Latency = Latency {
        total: 0,
        max: 0,
        min: u64::MAX,
    };

    #[inline]
    fn add(&mut self, ticks: u64) {
        self.total += ticks;
        self.max = self.max.max(ticks);
        self.min = self.min.min(ticks);
    }

    fn merge(&mut self, o: &Latency) {
        self.total += o.total;
        self.max = self.max.max(o.max);
        self.min = self.min.min(o.min);
    }

    fn min_or_zero(&self) -> u64 {
        if self.min == u64::MAX {
            0
        } else {
            self.min
        }
    }
}

/// Error counters (`io_error` of `bdev_get_iostat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts {
    /// Generic failures.
    pub failed: u64,
    /// NVMe status failures.
    pub nvme_error: u64,
    /// SCSI failures.
    pub scsi_error: u64,
    /// Out-of-resource completions.
    pub nomem: u64,
    /// Compare mismatches.
    pub miscompare: u64,
    /// Fused failures.
    pub first_fused_failed: u64,
    /// Aborted.
    pub aborted: u64,
    /// errno failures.
    pub aio_error: u64,
}

/// Counters of one channel or one bdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoStat {
    /// Bytes read.
    pub bytes_read: u64,
    /// Reads completed.
    pub num_read_ops: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Writes completed.
    pub num_write_ops: u64,
    /// Bytes unmapped.
    pub bytes_unmapped: u64,
    /// Unmaps completed.
    pub num_unmap_ops: u64,
    /// Bytes copied.
    pub bytes_copied: u64,
    /// Copies completed.
    pub num_copy_ops: u64,
    /// Read latency.
    pub read_latency: Latency,
    /// Write latency.
    pub write_latency: Latency,
    /// Unmap latency.
    pub unmap_latency: Latency,
    /// Copy latency.
    pub copy_latency: Latency,
    /// Failures by kind.
    pub errors: ErrorCounts,
}

impl Default for IoStat {
    fn default() -> Self {
        IoStat {
            bytes_read: 0,
            num_read_ops: 0,
            bytes_written: 0,
            num_write_ops: 0,
            bytes_unmapped: 0,
            num_unmap_ops: 0,
            bytes_copied: 0,
            num_copy_ops: 0,
            read_latency: Latency::EMPTY,
            write_latency: Latency::EMPTY,
            unmap_latency: Latency::EMPTY,
            copy_latency: Latency::EMPTY,
            errors: ErrorCounts::default(),
        }
    }
}

/// What `bdev_reset_iostat` clears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetMode {
    /// Everything.
    All,
    /// Only max/min latencies.
    MaxMin,
    /// Only error counters.
    Error,
    /// Nothing.
    None,
}

impl IoStat {
    /// Accounts one completed I/O.
    #[inline(always)]
    pub fn record(&mut self, io_type: IoType, bytes: u64, status: IoStatus, latency_ticks: u64) {
        match status {
            IoStatus::Success => match io_type {
                IoType::Read => {
                    self.bytes_read += bytes;
                    self.num_read_ops += 1;
                    self.read_latency.add(latency_ticks);
                }
                IoType::Write | IoType::WriteZeroes => {
                    self.bytes_written += bytes;
                    self.num_write_ops += 1;
                    self.write_latency.add(latency_ticks);
                }
                IoType::Unmap => {
                    self.bytes_unmapped += bytes;
                    self.num_unmap_ops += 1;
                    self.unmap_latency.add(latency_ticks);
                }
                IoType::Copy => {
                    self.bytes_copied += bytes;
                    self.num_copy_ops += 1;
                    self.copy_latency.add(latency_ticks);
                }
                _ => {}
            },
            IoStatus::Pending => {}
            IoStatus::Failed => self.errors.failed += 1,
            IoStatus::Errno(_) => self.errors.aio_error += 1,
            IoStatus::Nvme { .. } => self.errors.nvme_error += 1,
            IoStatus::NoMem => self.errors.nomem += 1,
            IoStatus::Miscompare => self.errors.miscompare += 1,
            IoStatus::Aborted => self.errors.aborted += 1,
            IoStatus::FirstFusedFailed => self.errors.first_fused_failed += 1,
        }
    }

    /// Adds another stat into this one.
    pub fn merge(&mut self, o: &IoStat) {
        self.bytes_read += o.bytes_read;
        self.num_read_ops += o.num_read_ops;
        self.bytes_written += o.bytes_written;
        self.num_write_ops += o.num_write_ops;
        self.bytes_unmapped += o.bytes_unmapped;
        self.num_unmap_ops += o.num_unmap_ops;
        self.bytes_copied += o.bytes_copied;
        self.num_copy_ops += o.num_copy_ops;
        self.read_latency.merge(&o.read_latency);
        self.write_latency.merge(&o.write_latency);
        self.unmap_latency.merge(&o.unmap_latency);
        self.copy_latency.merge(&o.copy_latency);
        let e = &mut self.errors;
        let f = &o.errors;
        e.failed += f.failed;
        e.nvme_error += f.nvme_error;
        e.scsi_error += f.scsi_error;
        e.nomem += f.nomem;
        e.miscompare += f.miscompare;
        e.first_fused_failed += f.first_fused_failed;
        e.aborted += f.aborted;
        e.aio_error += f.aio_error;
    }

    /// Clears according to `mode`.
    pub fn reset(&mut self, mode: ResetMode) {
        match mode {
            ResetMode::All => *self = IoStat::default(),
            ResetMode::MaxMin => {
                for l in [
                    &mut self.read_latency,
                    &mut self.write_latency,
                    &mut self.unmap_latency,
                    &mut self.copy_latency,
                ] {
                    l.max = 0;
                    l.min = u64::MAX;
                }
            }
            ResetMode::Error => self.errors = ErrorCounts::default(),
            ResetMode::None => {}
        }
    }

    /// The counters as SPDK's JSON object members, in SPDK's order
    /// (`bytes_read` ... `io_error`).
    #[must_use]
    pub fn to_json_members(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let mut put = |k: &str, v: u64| {
            m.insert(k.to_string(), json!(v));
        };
        put("bytes_read", self.bytes_read);
        put("num_read_ops", self.num_read_ops);
        put("bytes_written", self.bytes_written);
        put("num_write_ops", self.num_write_ops);
        put("bytes_unmapped", self.bytes_unmapped);
        put("num_unmap_ops", self.num_unmap_ops);
        put("bytes_copied", self.bytes_copied);
        put("num_copy_ops", self.num_copy_ops);
        for (name, l) in [
            ("read", &self.read_latency),
            ("write", &self.write_latency),
            ("unmap", &self.unmap_latency),
            ("copy", &self.copy_latency),
        ] {
            put(&format!("{name}_latency_ticks"), l.total);
            put(&format!("max_{name}_latency_ticks"), l.max);
            put(&format!("min_{name}_latency_ticks"), l.min_or_zero());
        }
        let e = &self.errors;
        let mut errs = Map::new();
        for (k, v) in [
            ("failed", e.failed),
            ("nvme_error", e.nvme_error),
            ("scsi_error", e.scsi_error),
            ("nomem", e.nomem),
            ("miscompare", e.miscompare),
            ("first_fused_failed", e.first_fused_failed),
            ("aborted", e.aborted),
            ("aio_error", e.aio_error),
        ] {
            if v != 0 {
                errs.insert(k.to_string(), json!(v));
            }
        }
        m.insert("io_error".to_string(), Value::Object(errs));
        m
    }
}

/// Queue-depth sampling (`bdev_set_qd_sampling_period`) of one bdev: what
/// the last sample saw and the time the bdev was busy.
#[derive(Debug, Default)]
pub(crate) struct QdSampling {
    /// µs between samples; 0 = off.
    pub(crate) period_us: u64,
    /// Bumped on every change: a sampling poller of an older generation
    /// stops itself.
    pub(crate) generation: u64,
    /// A channel walk is counting.
    pub(crate) in_progress: bool,
    pub(crate) queue_depth: u64,
    pub(crate) io_time: u64,
    pub(crate) weighted_io_time: u64,
}

/// Queue-depth figures of `bdev_get_iostat`, while sampling is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepthStats {
    /// µs between samples.
    pub period_us: u64,
    /// I/Os outstanding at the last sample (summed over the channels).
    pub queue_depth: u64,
    /// µs during which a sample saw I/O outstanding.
    pub io_time: u64,
    /// Sum of queue depth × sampling period (µs).
    pub weighted_io_time: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_merge_reset() {
        let mut a = IoStat::default();
        a.record(IoType::Read, 4096, IoStatus::Success, 100);
        a.record(IoType::Read, 4096, IoStatus::Success, 50);
        a.record(IoType::Write, 512, IoStatus::Errno(5), 10);
        let mut b = IoStat::default();
        b.record(IoType::Unmap, 8192, IoStatus::Success, 7);
        b.merge(&a);
        assert_eq!(b.num_read_ops, 2);
        assert_eq!(b.bytes_read, 8192);
        assert_eq!(b.read_latency.min, 50);
        assert_eq!(b.read_latency.max, 100);
        assert_eq!(b.errors.aio_error, 1);
        let j = b.to_json_members();
        let keys: Vec<&String> = j.keys().collect();
        assert_eq!(keys[0], "bytes_read");
        assert_eq!(keys.last().unwrap().as_str(), "io_error");
        assert_eq!(j["min_write_latency_ticks"], 0);
        assert_eq!(j["io_error"], json!({"aio_error": 1}));
        b.reset(ResetMode::MaxMin);
        assert_eq!(b.read_latency.max, 0);
        assert_eq!(b.num_read_ops, 2);
        b.reset(ResetMode::All);
        assert_eq!(b, IoStat::default());
    }
}
