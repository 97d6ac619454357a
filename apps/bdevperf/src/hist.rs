//! Log-linear latency histogram: exact below 64 ticks, then 32 buckets per
//! power of two (about 3% resolution), fixed size, so recording is a few
//! instructions and never allocates.

/// Sub-buckets per power of two, as a shift.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
const HALF: u64 = SUB / 2;
/// Covers up to 2^50 ticks (days at GHz rates).
const MAX_BUCKET: u32 = 50 - SUB_BITS + 1;
/// Number of counters: `(MAX_BUCKET + 1) * HALF + HALF`.
pub const LEN: usize = (MAX_BUCKET as usize + 2) << (SUB_BITS - 1);

/// Counts of latencies (in ticks).
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; LEN]>,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total())
            .finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; LEN]),
        }
    }
}

#[inline]
fn index(v: u64) -> usize {
    if v < SUB {
        return usize::try_from(v).unwrap_or(0);
    }
    let msb = 63 - v.leading_zeros();
    let bucket = (msb + 1 - SUB_BITS).min(MAX_BUCKET);
    let sub = (v >> bucket).min(SUB - 1);
    usize::try_from(u64::from(bucket) * HALF + sub).unwrap_or(LEN - 1)
}

/// `[lo, hi)` of counter `idx`.
fn bounds(idx: usize) -> (u64, u64) {
    let idx = idx as u64;
    if idx < SUB {
        return (idx, idx + 1);
    }
    let bucket = idx / HALF - 1;
    let sub = idx - bucket * HALF;
    (sub << bucket, (sub + 1) << bucket)
}

impl Histogram {
    /// Records one latency.
    #[inline]
    pub fn record(&mut self, ticks: u64) {
        let i = index(ticks);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
    }

    /// Number of recorded values.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The value at quantile `q` (0..=1): the upper bound of the bucket
    /// holding it, in ticks.
    #[must_use]
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.total();
        if total == 0 {
            return 0;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "rank is a non-negative count no larger than total"
        )]
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bounds(i).1 - 1;
            }
        }
        bounds(LEN - 1).1
    }

    /// Non-empty buckets: `(lo, hi, count)` in ticks.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c != 0)
            .map(|(i, c)| {
                let (lo, hi) = bounds(i);
                (lo, hi, *c)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_and_bounds_agree() {
        let mut prev = 0;
        for v in (0..100_000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX / 2]) {
            let i = index(v);
            assert!(i >= prev || v > 100_000, "monotonic");
            prev = i;
            let (lo, hi) = bounds(i);
            if v < 1 << 50 {
                assert!(lo <= v && v < hi, "{v} not in [{lo},{hi}) of bucket {i}");
                assert!(hi - lo <= (lo / 32).max(1), "resolution at {v}");
            }
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 100);
        }
        let p50 = h.quantile(0.5);
        assert!((48_000..=52_000).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99);
        assert!((97_000..=101_000).contains(&p99), "{p99}");
        assert_eq!(h.total(), 1000);
    }
}
