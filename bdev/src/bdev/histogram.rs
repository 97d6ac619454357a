//! Latency histograms in SPDK's layout (`bdev_enable_histogram`,
//! `bdev_get_histogram`), so that SPDK's tools read ours unchanged.
//!
//! Values (latencies in ticks) fall into *ranges* by their highest set
//! bit, each range split into `2^granularity` buckets of equal width:
//! range 0 and 1 have buckets one value wide, range `r > 1` buckets
//! `2^(r-1)` wide, so the relative resolution is the same everywhere
//! (1/128 at the default granularity 7). Only the ranges between the
//! configured minimum and maximum are kept; values outside go to the first
//! or last bucket. The bucket array, little-endian `u64`s range by range,
//! is what `bdev_get_histogram` sends (base64) with `granularity`,
//! `min_range`, `max_range` and `tsc_rate`.

use super::types::IoType;
use crate::clock;

/// Default buckets per range, as log2 (SPDK's default).
pub const DEFAULT_GRANULARITY: u8 = 7;
/// Largest granularity accepted: 4096 buckets per range, at most 1.7 MiB
/// of counters per channel.
pub const MAX_GRANULARITY: u8 = 12;

/// A latency histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    granularity: u32,
    min_range: u32,
    max_range: u32,
    buckets: Box<[u64]>,
}

impl Histogram {
    /// A histogram with `2^granularity` buckets per range that keeps
    /// values in `[min_val, max_val)` apart. `None` when `min_val >=
    /// max_val` or the granularity exceeds [`MAX_GRANULARITY`].
    #[must_use]
    pub fn new(granularity: u8, min_val: u64, max_val: u64) -> Option<Histogram> {
        if min_val >= max_val || granularity > MAX_GRANULARITY {
            return None;
        }
        let granularity = u32::from(granularity);
        let min_range = range_of(granularity, min_val);
        let max_range = range_of(granularity, max_val - 1);
        let n = ((max_range - min_range + 1) as usize) << granularity;
        Some(Histogram {
            granularity,
            min_range,
            max_range,
            buckets: vec![0; n].into_boxed_slice(),
        })
    }

    /// log2 of the buckets per range.
    #[must_use]
    pub fn granularity(&self) -> u32 {
        self.granularity
    }

    /// First range kept.
    #[must_use]
    pub fn min_range(&self) -> u32 {
        self.min_range
    }

    /// Last range kept.
    #[must_use]
    pub fn max_range(&self) -> u32 {
        self.max_range
    }

    /// The bucket counters, range by range.
    #[must_use]
    pub fn buckets(&self) -> &[u64] {
        &self.buckets
    }

    /// Whether `other` has the same bucket layout (and can be merged).
    #[must_use]
    pub fn same_layout(&self, other: &Histogram) -> bool {
        self.granularity == other.granularity
            && self.min_range == other.min_range
            && self.max_range == other.max_range
    }

    /// Counts one value.
    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "index < 2^MAX_GRANULARITY: it fits any usize"
    )]
    pub fn tally(&mut self, value: u64) {
        let range = range_of(self.granularity, value);
        let per_range = 1u64 << self.granularity;
        let (range, index) = if range < self.min_range {
            (self.min_range, 0)
        } else if range > self.max_range {
            (self.max_range, per_range - 1)
        } else {
            let shift = range.saturating_sub(1);
            (range, (value >> shift) & (per_range - 1))
        };
        let at = (((range - self.min_range) as usize) << self.granularity) + index as usize;
        if let Some(c) = self.buckets.get_mut(at) {
            *c += 1;
        }
    }

    /// Adds `other`'s counts; `false` (and nothing added) when the layouts
    /// differ.
    pub fn merge(&mut self, other: &Histogram) -> bool {
        if !self.same_layout(other) {
            return false;
        }
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        true
    }

    /// Every count back to zero.
    pub fn clear(&mut self) {
        self.buckets.fill(0);
    }

    /// Values counted.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The buckets in order as `(start, end, count)`: values in `[start,
    /// end)` (the first bucket also holds everything below the minimum,
    /// the last everything above the maximum, whose end saturates).
    #[expect(
        clippy::cast_possible_truncation,
        reason = "at most 65 ranges: the range number fits a u32"
    )]
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let per_range = 1u64 << self.granularity;
        let mut start = 0u64;
        self.buckets.iter().enumerate().map(move |(at, &count)| {
            let range = self.min_range + (at >> self.granularity) as u32;
            let index = at as u64 & (per_range - 1);
            let end = bucket_end(self.granularity, range, index);
            let item = (start, end, count);
            start = end;
            item
        })
    }

    /// For each border (ascending), the values counted in the buckets up
    /// to and including the one holding the border; then the total. Counts
    /// are exact to a bucket: `bdev_get_histogram_borders`.
    #[must_use]
    pub fn borders_count(&self, borders: &[u64]) -> Vec<u64> {
        let mut out = Vec::with_capacity(borders.len() + 1);
        let mut so_far = 0u64;
        let mut next = 0usize;
        for (start, _end, count) in self.iter() {
            while next < borders.len() && start > borders[next] {
                out.push(so_far);
                next += 1;
            }
            so_far += count;
        }
        while out.len() < borders.len() {
            out.push(so_far);
        }
        out.push(so_far);
        out
    }

    /// The counters as little-endian bytes (what SPDK base64-encodes).
    #[must_use]
    pub fn to_le_bytes(&self) -> Vec<u8> {
        self.buckets.iter().flat_map(|c| c.to_le_bytes()).collect()
    }
}

/// What `bdev_enable_histogram` sets for a bdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramOptions {
    /// log2 of the buckets per range (at most [`MAX_GRANULARITY`]).
    pub granularity: u8,
    /// Latencies below this (ns) share the first bucket.
    pub min_nsec: u64,
    /// Latencies from this (ns) up share the last bucket.
    pub max_nsec: u64,
    /// Count only this I/O type (`None`: all).
    pub io_type: Option<IoType>,
}

impl Default for HistogramOptions {
    /// SPDK's defaults: granularity 7, 1 µs to 120 s, every I/O type.
    fn default() -> Self {
        HistogramOptions {
            granularity: DEFAULT_GRANULARITY,
            min_nsec: 1_000,
            max_nsec: 120_000_000_000,
            io_type: None,
        }
    }
}

/// A bdev's histogram configuration, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HistConfig {
    granularity: u8,
    min_ticks: u64,
    max_ticks: u64,
    /// I/O type bits counted.
    types: u32,
    /// As given (`save_config`).
    pub(crate) opts: HistogramOptions,
}

impl HistConfig {
    /// Checks `o` (an empty tick range or too fine a granularity is
    /// refused).
    pub(crate) fn new(o: &HistogramOptions) -> crate::Result<HistConfig> {
        let cfg = HistConfig {
            granularity: o.granularity,
            min_ticks: clock::ns_to_ticks(o.min_nsec),
            max_ticks: clock::ns_to_ticks(o.max_nsec),
            types: o.io_type.map_or(u32::MAX, IoType::bit),
            opts: *o,
        };
        if o.granularity > MAX_GRANULARITY {
            return Err(crate::Error::InvalidArg(format!(
                "histogram granularity {} is more than {MAX_GRANULARITY}",
                o.granularity
            )));
        }
        if cfg.min_ticks >= cfg.max_ticks {
            return Err(crate::Error::InvalidArg(format!(
                "histogram min_nsec {} is not below max_nsec {}",
                o.min_nsec, o.max_nsec
            )));
        }
        Ok(cfg)
    }

    pub(crate) fn histogram(&self) -> Histogram {
        Histogram::new(self.granularity, self.min_ticks, self.max_ticks)
            .expect("invariant: checked by HistConfig::new")
    }
}

/// A bdev's histogram state: its configuration while enabled, and the
/// counts of channels that went away.
#[derive(Debug, Default)]
pub(crate) struct HistState {
    pub(crate) config: Option<HistConfig>,
    pub(crate) folded: Option<Histogram>,
    /// An enable/disable walks the channels.
    pub(crate) busy: bool,
}

/// One channel's histogram.
#[derive(Debug)]
pub(crate) struct ChannelHist {
    pub(crate) data: Histogram,
    types: u32,
}

impl ChannelHist {
    pub(crate) fn new(cfg: &HistConfig) -> Box<ChannelHist> {
        Box::new(ChannelHist {
            data: cfg.histogram(),
            types: cfg.types,
        })
    }

    #[inline]
    pub(crate) fn tally(&mut self, io_type: IoType, ticks: u64) {
        if self.types & io_type.bit() != 0 {
            self.data.tally(ticks);
        }
    }
}

/// The range of `value`: 0 for values below `2^(granularity+1)`, else one
/// more per extra significant bit.
#[inline]
fn range_of(granularity: u32, value: u64) -> u32 {
    let lsb = 64 - granularity;
    let clz = value.leading_zeros();
    lsb.saturating_sub(clz)
}

/// End (exclusive) of bucket `index` of `range` (wrapping past the top,
/// as SPDK's does; only the very last bucket can).
fn bucket_end(granularity: u32, range: u32, index: u64) -> u64 {
    let index = index + 1;
    if range == 0 {
        index
    } else {
        (1u64 << (range + granularity - 1)).wrapping_add(index << (range - 1))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn bucket_layout_matches_spdk() {
        let h = Histogram::new(7, 0, u64::MAX).unwrap();
        assert_eq!((h.min_range(), h.max_range()), (0, 57));
        assert_eq!(h.buckets().len(), 58 * 128);
        let mut h = h;
        // 1000: range 3 (512..1023, buckets 4 wide), bucket [1000, 1004).
        h.tally(1000);
        let hit: Vec<_> = h.iter().filter(|b| b.2 != 0).collect();
        assert_eq!(hit, [(1000, 1004, 1)]);
        assert_eq!(h.to_le_bytes().len(), 58 * 128 * 8);
    }

    #[test]
    fn borders_count_as_spdk() {
        // SPDK's own unit test: 0..65536 once, 1000..10000 once more.
        let mut h = Histogram::new(DEFAULT_GRANULARITY, 0, u64::MAX).unwrap();
        for v in 0..1u64 << 16 {
            h.tally(v);
        }
        for v in 1000..10_000 {
            h.tally(v);
        }
        let c = h.borders_count(&[1000, 10_000, 10_011, 30_000]);
        assert_eq!(
            c,
            [1008, 10_048 + 9000, 10_048 + 9000, 30_080 + 9000, h.total()]
        );
        assert_eq!(h.total(), 65_536 + 9000);
        assert_eq!(h.borders_count(&[]), [h.total()]);
    }

    #[test]
    fn out_of_range_values_go_to_the_ends() {
        let mut h = Histogram::new(7, 1000, 100_000).unwrap();
        h.tally(3);
        h.tally(u64::MAX);
        let b = h.buckets();
        assert_eq!((b[0], b[b.len() - 1]), (1, 1));
        assert!(Histogram::new(7, 5, 5).is_none());
        assert!(Histogram::new(MAX_GRANULARITY + 1, 0, 10).is_none());
        let mut other = Histogram::new(6, 1000, 100_000).unwrap();
        assert!(!other.merge(&h));
        let mut same = Histogram::new(7, 1000, 100_000).unwrap();
        assert!(same.merge(&h));
        assert_eq!(same.total(), 2);
    }

    proptest! {
        /// Every value in range lands in the bucket whose bounds hold it;
        /// the buckets tile `[0, 2^64)` in order.
        #[test]
        fn values_land_in_their_bucket(
            g in 0u8..=MAX_GRANULARITY,
            v in any::<u64>(),
            shift in 0u32..64,
        ) {
            let v = v >> shift;
            let mut h = Histogram::new(g, 0, u64::MAX).unwrap();
            h.tally(v);
            let mut prev_end = 0u64;
            let mut found = false;
            let last = h.buckets().len() - 1;
            for (i, (start, end, count)) in h.iter().enumerate() {
                prop_assert_eq!(start, prev_end);
                if i < last {
                    prop_assert!(end > start);
                }
                if count == 1 {
                    found = true;
                    prop_assert!(start <= v && (v < end || i == last), "{} not in [{}, {})", v, start, end);
                }
                prev_end = end;
            }
            prop_assert!(found);
        }
    }
}
