//! QoS quotas (`bdev_set_qos_limit`), after SPDK 26.x: the limits of one
//! bdev and the shared quota every channel charges. Each limit has an
//! atomic balance refilled every 1 ms timeslice by a poller on the thread
//! that set the limits (a negative balance from overdraw carries over;
//! unlike SPDK, an unused positive balance carries over up to 10 slices, so
//! that a refill poller delayed by the scheduler does not lose quota).
//! What channels do with over-limit I/O is the QoS stage (`qos.rs`).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::types::IoType;
use crate::clock::Clock;

/// Timeslice length.
pub(crate) const TIMESLICE_US: u64 = 1_000;
/// Unused quota carries over up to this many timeslices (a token bucket
/// 10 ms deep): a refill poller delayed by scheduling loses nothing, so the
/// long-run rate stays on target, while bursts stay bounded.
const BURST_SLICES: i64 = 10;
const MIB: u64 = 1024 * 1024;

/// Shared quota state of one bdev's active limits.
#[derive(Debug)]
pub(crate) struct QosShared {
    /// Limits per second: IOPS, then bytes/s for rw, r, w.
    per_sec: [u64; 4],
    per_slice: [i64; 4],
    remaining: [AtomicI64; 4],
    /// Cleared when the limits are replaced: the refill poller stops.
    pub(crate) enabled: AtomicBool,
}

impl QosShared {
    pub(crate) fn new(limits: [u64; 4]) -> Arc<Self> {
        let per_sec = [limits[0], limits[1] * MIB, limits[2] * MIB, limits[3] * MIB];
        let mut per_slice = [0i64; 4];
        for k in 0..4 {
            if per_sec[k] != 0 {
                let min = if k == 0 { 1 } else { 512 };
                let v = (per_sec[k] * TIMESLICE_US / 1_000_000).max(min);
                per_slice[k] = i64::try_from(v).unwrap_or(i64::MAX);
            }
        }
        Arc::new(QosShared {
            per_sec,
            per_slice,
            remaining: std::array::from_fn(|k| AtomicI64::new(per_slice[k])),
            enabled: AtomicBool::new(true),
        })
    }

    fn amounts(io_type: IoType, bytes: u64) -> [i64; 4] {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        let is_read = io_type == IoType::Read;
        let is_write = matches!(io_type, IoType::Write | IoType::WriteZeroes);
        [
            1,
            if is_read || is_write { bytes } else { 0 },
            if is_read { bytes } else { 0 },
            if is_write { bytes } else { 0 },
        ]
    }

    /// Charges an I/O of `io_type` moving `bytes` against every applicable
    /// quota if all have some left.
    pub(crate) fn try_charge(&self, io_type: IoType, bytes: u64) -> bool {
        let amounts = Self::amounts(io_type, bytes);
        let applies = |k: usize| self.per_sec[k] != 0 && amounts[k] != 0;
        if (0..4).any(|k| applies(k) && self.remaining[k].load(Ordering::Acquire) <= 0) {
            return false;
        }
        for (k, amount) in amounts.iter().enumerate() {
            if applies(k) {
                self.remaining[k].fetch_sub(*amount, Ordering::AcqRel);
            }
        }
        true
    }

    /// Quota left of limit `k` (0: IOPS; 1..4: bytes).
    #[cfg(test)]
    pub(crate) fn remaining(&self, k: usize) -> i64 {
        self.remaining[k].load(Ordering::Acquire)
    }

    /// Adds `slices` timeslices of quota.
    pub(crate) fn refill(&self, slices: u64) {
        let slices = i64::try_from(slices).unwrap_or(i64::MAX);
        for k in 0..4 {
            if self.per_sec[k] == 0 {
                continue;
            }
            let add = self.per_slice[k].saturating_mul(slices);
            let cap = self.per_slice[k].saturating_mul(BURST_SLICES);
            let _ = self.remaining[k].fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                Some(r.saturating_add(add).min(cap))
            });
        }
    }
}

/// Per-bdev QoS configuration.
#[derive(Debug, Default)]
pub(crate) struct QosState {
    pub(crate) inner: Mutex<QosConfig>,
}

/// The limits, the quota they make, and whether a change is walking the
/// channels.
#[derive(Debug, Default)]
pub(crate) struct QosConfig {
    pub(crate) limits: [u64; 4],
    pub(crate) shared: Option<Arc<QosShared>>,
    pub(crate) changing: bool,
    /// What the timeslices are counted on (the tick counter unless a test
    /// set a manual clock: `Bdev::set_qos_clock`).
    pub(crate) clock: Clock,
}

impl QosState {
    pub(crate) fn limits(&self) -> [u64; 4] {
        self.inner.lock().limits
    }

    pub(crate) fn shared(&self) -> Option<Arc<QosShared>> {
        self.inner.lock().shared.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(q: &QosShared, t: IoType, bytes: u64) -> usize {
        (0..1000).take_while(|_| q.try_charge(t, bytes)).count()
    }

    #[test]
    fn a_fresh_quota_admits_one_timeslice_then_refuses() {
        let q = QosShared::new([5_000, 0, 0, 0]);
        // 5 000 IOPS is 5 I/Os per 1 ms timeslice.
        assert_eq!(admitted(&q, IoType::Read, 4096), 5);
        assert!(!q.try_charge(IoType::Write, 512));
    }

    #[test]
    fn refill_adds_whole_timeslices_up_to_the_burst_depth() {
        let q = QosShared::new([5_000, 0, 0, 0]);
        admitted(&q, IoType::Read, 512);
        q.refill(3);
        assert_eq!(admitted(&q, IoType::Read, 512), 15);
        // A refill poller that ran late gives back at most 10 slices.
        q.refill(1_000);
        assert_eq!(admitted(&q, IoType::Read, 512), 50);
    }

    #[test]
    fn a_byte_limit_charges_bytes_and_an_overdraw_carries_over() {
        // 1 MiB/s: 1 048 bytes per timeslice.
        let q = QosShared::new([0, 1, 0, 0]);
        assert!(
            q.try_charge(IoType::Read, 4096),
            "a positive balance admits one I/O"
        );
        assert!(
            !q.try_charge(IoType::Read, 512),
            "now 3 048 bytes overdrawn"
        );
        q.refill(2);
        assert!(!q.try_charge(IoType::Write, 512), "still 952 overdrawn");
        q.refill(1);
        assert!(q.try_charge(IoType::Write, 512));
        // A flush moves no data: the byte limit does not hold it back.
        assert!(q.try_charge(IoType::Flush, 0));
    }

    #[test]
    fn a_read_limit_leaves_writes_alone() {
        let q = QosShared::new([0, 0, 1, 0]);
        assert!(q.try_charge(IoType::Read, 4096));
        assert!(!q.try_charge(IoType::Read, 4096));
        assert_eq!(admitted(&q, IoType::Write, 1 << 20), 1000);
    }
}
