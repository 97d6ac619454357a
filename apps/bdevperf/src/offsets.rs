//! Offset generators used only when a feature asks for them (`-F`, `-D`):
//! a Zipf sampler and a map of used slots; and the map of slots a verify
//! job has in flight. The default uniform and sequential offsets stay in
//! `job/` and never reach this code.

use std::cell::Cell;

/// xorshift64*.
#[inline]
pub(crate) fn next_rand(state: &Cell<u64>) -> u64 {
    let mut x = state.get();
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    state.set(x);
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// A uniform `f64` in `[0, 1)` from 52 random bits (no integer-to-float
/// cast: the bits become the mantissa of a number in `[1, 2)`).
#[inline]
fn unit(r: u64) -> f64 {
    f64::from_bits(0x3FF0_0000_0000_0000 | (r >> 12)) - 1.0
}

/// `ln(1 + x) / x`, continuous at 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, continuous at 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// Zipf-distributed ranks `1..=n` with `P(k) ∝ k^-theta`, by rejection
/// inversion (W. Hörmann, G. Derflinger, "Rejection-inversion to generate
/// variates from monotone discrete distributions", ACM TOMACS 6(3), 1996).
///
/// Setup is O(1) and a sample takes O(1) expected time (a few `exp`/`ln`
/// and rarely a second try) for any `theta > 0`, 1 included; no table, so
/// a bdev of 2^28 slots costs nothing more than one of 10.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: u64,
    theta: f64,
    /// `H(1.5) - h(1)`.
    h_x1: f64,
    /// `H(n + 0.5)`.
    h_n: f64,
    /// Squeeze: `2 - H⁻¹(H(2.5) - h(2))`; `k - x` at most this is accepted
    /// without evaluating `H`.
    s: f64,
}

impl Zipf {
    /// A sampler over `1..=n`; `theta` must be finite and above 0.
    pub fn new(n: u64, theta: f64) -> Zipf {
        debug_assert!(n >= 1 && theta > 0.0 && theta.is_finite());
        #[expect(clippy::cast_precision_loss, reason = "slot counts far below 2^53")]
        let n_f = n as f64;
        let mut z = Zipf {
            n,
            theta,
            h_x1: 0.0,
            h_n: 0.0,
            s: 0.0,
        };
        z.h_x1 = z.big_h(1.5) - 1.0;
        z.h_n = z.big_h(n_f + 0.5);
        z.s = 2.0 - z.big_h_inv(z.big_h(2.5) - z.h(2.0));
        z
    }

    /// `h(x) = x^-theta`.
    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// `H(x) = (x^(1-theta) - 1) / (1 - theta)` (`ln x` at theta = 1), an
    /// antiderivative of `h`.
    fn big_h(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.theta) * lx) * lx
    }

    /// The inverse of `H`.
    fn big_h_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.theta)).max(-1.0);
        (helper1(t) * y).exp()
    }

    /// One rank in `1..=n`; 1 is the most frequent.
    #[inline]
    pub fn sample(&self, rng: &Cell<u64>) -> u64 {
        loop {
            let u = self.h_n + unit(next_rand(rng)) * (self.h_x1 - self.h_n);
            let x = self.big_h_inv(u);
            // x lies in [0.5, n + 0.5] up to rounding: truncation is the
            // rounding to the nearest rank (and cheaper than `floor`, a
            // library call without SSE4.1); the clamp keeps k in range
            // whatever the float rounding did.
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a saturating cast of a positive number, clamped to [1, n]"
            )]
            let k = ((x + 0.5) as u64).clamp(1, self.n);
            #[expect(clippy::cast_precision_loss, reason = "k <= n, far below 2^53")]
            let kf = k as f64;
            if kf - x <= self.s || u >= self.big_h(kf + 0.5) - self.h(kf) {
                return k;
            }
        }
    }
}

/// Which slots of a job were used since the map was last cleared (`-D`):
/// a bitmap, plus summary levels in which a bit says "this word below is
/// full", so the next unused slot is found in a few word operations even
/// when almost every slot is taken. Allocated once, at job creation.
#[derive(Debug, Clone)]
pub struct SlotMap {
    /// `levels[0]` has a bit per slot; `levels[i + 1]` a bit per word of
    /// `levels[i]`. The last level is one word. Bits past the end of a
    /// level are kept set, so they never look free.
    levels: Vec<Vec<u64>>,
    /// Bits in use at each level.
    bits: Vec<usize>,
    slots: usize,
    used: usize,
}

impl SlotMap {
    /// A map of `slots` unused slots (`slots >= 1`).
    pub fn new(slots: usize) -> SlotMap {
        let slots = slots.max(1);
        let mut bits = Vec::new();
        let mut n = slots;
        loop {
            bits.push(n);
            let words = n.div_ceil(64);
            if words == 1 {
                break;
            }
            n = words;
        }
        let levels = bits.iter().map(|b| vec![0u64; b.div_ceil(64)]).collect();
        let mut m = SlotMap {
            levels,
            bits,
            slots,
            used: 0,
        };
        m.clear();
        m
    }

    /// Marks every slot unused.
    fn clear(&mut self) {
        for (level, bits) in self.levels.iter_mut().zip(&self.bits) {
            level.fill(0);
            let tail = bits % 64;
            if tail != 0 {
                if let Some(last) = level.last_mut() {
                    *last = u64::MAX << tail;
                }
            }
        }
        self.used = 0;
    }

    fn set(&mut self, slot: usize) {
        let mut i = slot;
        for level in &mut self.levels {
            let w = &mut level[i / 64];
            *w |= 1 << (i % 64);
            if *w != u64::MAX {
                break;
            }
            i /= 64;
        }
    }

    /// The first unused bit at `level` at or after `i`.
    fn find_from(&self, level: usize, i: usize) -> Option<usize> {
        let words = &self.levels[level];
        let w = i / 64;
        let word = *words.get(w)? | ((1u64 << (i % 64)) - 1);
        if word != u64::MAX {
            return Some(w * 64 + word.trailing_ones() as usize);
        }
        // Nothing left in this word: the level above names the next word
        // that is not full.
        if level + 1 == self.levels.len() {
            return None;
        }
        let next = self.find_from(level + 1, w + 1)?;
        Some(next * 64 + words[next].trailing_ones() as usize)
    }

    /// Takes `want` if it is unused, else the next unused slot after it
    /// (wrapping), as SPDK's `-D` does. Once every slot was taken the map
    /// starts over.
    pub fn take(&mut self, want: usize) -> usize {
        let want = want.min(self.slots - 1);
        let slot = self
            .find_from(0, want)
            .or_else(|| self.find_from(0, 0))
            .expect("invariant: a map that is not full has an unused slot");
        self.set(slot);
        self.used += 1;
        if self.used == self.slots {
            self.clear();
        }
        slot
    }
}

/// The slots of a verify job that a task owns: written and not yet read
/// back. Another task must not write there meanwhile, or the first one
/// reads the other's data and reports a miscompare the storage never made
/// (SPDK keeps the same map). A bit per slot, allocated once.
#[derive(Debug, Clone)]
pub struct BusySlots {
    words: Vec<u64>,
    slots: u64,
    busy: u64,
}

impl BusySlots {
    /// A map of `slots` free slots.
    pub fn new(slots: u64) -> anyhow::Result<BusySlots> {
        let words = usize::try_from(slots.div_ceil(64))
            .map_err(|_| anyhow::anyhow!("{slots} slots do not fit in memory"))?;
        Ok(BusySlots {
            words: vec![0; words],
            slots,
            busy: 0,
        })
    }

    /// Slots taken now.
    #[cfg(test)]
    pub fn busy(&self) -> u64 {
        self.busy
    }

    /// Takes the first free slot at or after `from`, wrapping; `None` when
    /// every slot is taken.
    pub fn take_from(&mut self, from: u64) -> Option<u64> {
        if self.busy >= self.slots {
            return None;
        }
        let from = if from < self.slots { from } else { 0 };
        let slot = self
            .free_in(from, self.slots)
            .or_else(|| self.free_in(0, from))
            .expect("invariant: a map with fewer busy slots than slots has a free one");
        self.words[word_of(slot)] |= 1 << (slot % 64);
        self.busy += 1;
        Some(slot)
    }

    /// Frees `slot` (a no-op when it is free).
    pub fn release(&mut self, slot: u64) {
        let Some(w) = self.words.get_mut(word_of(slot)) else {
            return;
        };
        let bit = 1u64 << (slot % 64);
        if *w & bit != 0 {
            *w &= !bit;
            self.busy -= 1;
        }
    }

    /// The first free slot in `from..to`, a word at a time.
    fn free_in(&self, from: u64, to: u64) -> Option<u64> {
        let mut at = from;
        while at < to {
            // Bits below `at` in its word count as taken.
            let word = self.words[word_of(at)] | ((1u64 << (at % 64)) - 1);
            if word != u64::MAX {
                let slot = at - at % 64 + u64::from(word.trailing_ones());
                return (slot < to).then_some(slot);
            }
            at = at - at % 64 + 64;
        }
        None
    }
}

/// The word of the map that holds `slot`.
fn word_of(slot: u64) -> usize {
    // The map has a word for every 64 slots and `new` checked that their
    // count fits a usize; saturating keeps an out-of-range slot out of range.
    usize::try_from(slot / 64).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(rng: &Cell<u64>, slots: usize) -> usize {
        usize::try_from(next_rand(rng) % slots as u64).unwrap()
    }

    fn counts(n: u64, theta: f64, samples: usize, seed: u64) -> Vec<u64> {
        let z = Zipf::new(n, theta);
        let rng = Cell::new(seed | 1);
        let mut c = vec![0u64; usize::try_from(n).unwrap() + 1];
        for _ in 0..samples {
            let k = z.sample(&rng);
            assert!((1..=n).contains(&k), "rank {k} outside 1..={n}");
            c[usize::try_from(k).unwrap()] += 1;
        }
        c
    }

    /// The empirical distribution over a small range follows `k^-theta`:
    /// a chi-square test over all ranks and at most 3% relative error on
    /// the top five (those with 20 000 expected samples or more), for
    /// exponents below, at and above 1.
    #[test]
    fn zipf_matches_power_law() {
        const N: u64 = 20;
        const SAMPLES: usize = 400_000;
        for (i, theta) in [0.3, 0.8, 1.0, 1.2, 2.0, 3.5].into_iter().enumerate() {
            let c = counts(N, theta, SAMPLES, 0x1234_5678 + i as u64);
            let weights: Vec<f64> = (1..=N).map(|k| (k as f64).powf(-theta)).collect();
            let norm: f64 = weights.iter().sum();
            let mut chi2 = 0.0;
            for (k, w) in (1..=N).zip(&weights) {
                let expect = w / norm * SAMPLES as f64;
                let got = c[usize::try_from(k).unwrap()] as f64;
                chi2 += (got - expect).powi(2) / expect;
                // Top ranks with enough samples that 3% is over 4 sigma.
                if k <= 5 && expect >= 20_000.0 {
                    let rel = (got - expect).abs() / expect;
                    assert!(
                        rel < 0.03,
                        "theta {theta}: rank {k} got {got}, expected {expect:.0}"
                    );
                }
            }
            // 19 degrees of freedom: P(chi2 > 43.8) = 0.001.
            assert!(chi2 < 43.8, "theta {theta}: chi-square {chi2:.1}");
        }
    }

    #[test]
    fn zipf_stays_in_range() {
        for n in [1u64, 2, 3, 1 << 28, u64::from(u32::MAX)] {
            for theta in [0.01, 0.5, 1.0, 1.5, 50.0] {
                let z = Zipf::new(n, theta);
                let rng = Cell::new(0x9e37_79b9_7f4a_7c15);
                for _ in 0..20_000 {
                    let k = z.sample(&rng);
                    assert!((1..=n).contains(&k), "n {n} theta {theta}: {k}");
                }
            }
        }
        // A steep law on a big range still prefers the first slots.
        let z = Zipf::new(1 << 28, 1.2);
        let rng = Cell::new(77);
        let ones = (0..10_000).filter(|_| z.sample(&rng) == 1).count();
        assert!(ones > 1_000, "{ones}");
    }

    /// Over exactly `slots` takes every slot is hit once, whatever was
    /// asked for; then the map starts over.
    #[test]
    fn slot_map_hits_every_slot_once_per_round() {
        for slots in [1usize, 2, 63, 64, 65, 127, 4095, 4096, 4097, 262_145] {
            let mut m = SlotMap::new(slots);
            let rng = Cell::new(0xabcd_ef01 + slots as u64);
            for round in 0..2 {
                let mut seen = vec![false; slots];
                for _ in 0..slots {
                    let want = pick(&rng, slots);
                    let got = m.take(want);
                    assert!(got < slots);
                    assert!(!seen[got], "slot {got} of {slots} twice in round {round}");
                    seen[got] = true;
                }
                assert!(seen.iter().all(|s| *s));
            }
        }
    }

    #[test]
    fn slot_map_takes_next_unused_wrapping() {
        let mut m = SlotMap::new(200);
        assert_eq!(m.take(5), 5);
        assert_eq!(m.take(5), 6);
        for i in 7..200 {
            assert_eq!(m.take(i), i);
        }
        // 199 is used: wraps to the first unused slot.
        assert_eq!(m.take(199), 0);
        assert_eq!(m.take(0), 1);
        // Slots 2..=4 are all that is left.
        assert_eq!(m.take(150), 2);
        assert_eq!(m.take(2), 3);
        assert_eq!(m.take(70), 4);
        // Full: it started over.
        assert_eq!(m.take(70), 70);
    }

    /// The summary levels agree with a plain scan on random fill states.
    #[test]
    fn slot_map_matches_linear_scan() {
        let slots = 70_000;
        let mut m = SlotMap::new(slots);
        let mut used = vec![false; slots];
        let rng = Cell::new(99);
        for _ in 0..slots - 1 {
            let want = pick(&rng, slots);
            let naive = (want..slots).chain(0..want).find(|i| !used[*i]).unwrap();
            assert_eq!(m.take(want), naive);
            used[naive] = true;
        }
    }

    /// Busy slots are skipped, released ones come back, and a full map
    /// gives nothing; checked against a plain scan on random operations.
    #[test]
    fn busy_slots_match_linear_scan() {
        for slots in [1u64, 2, 63, 64, 65, 200, 4097] {
            let mut m = BusySlots::new(slots).unwrap();
            let mut busy = vec![false; usize::try_from(slots).unwrap()];
            let rng = Cell::new(0x5151 + slots);
            for _ in 0..20_000 {
                let r = next_rand(&rng);
                let at = (r >> 8) % (slots + 3);
                if r.is_multiple_of(3) {
                    m.release(at);
                    if let Some(b) = busy.get_mut(usize::try_from(at).unwrap()) {
                        *b = false;
                    }
                } else {
                    let start = if at < slots { at } else { 0 };
                    let naive = (start..slots)
                        .chain(0..start)
                        .find(|s| !busy[usize::try_from(*s).unwrap()]);
                    assert_eq!(m.take_from(at), naive, "{slots} slots, from {at}");
                    if let Some(s) = naive {
                        busy[usize::try_from(s).unwrap()] = true;
                    }
                }
                let count = busy.iter().filter(|b| **b).count() as u64;
                assert_eq!(m.busy(), count);
            }
        }
    }

    #[test]
    fn busy_slots_fill_then_free() {
        let mut m = BusySlots::new(3).unwrap();
        assert_eq!(m.take_from(1), Some(1));
        assert_eq!(m.take_from(1), Some(2));
        assert_eq!(m.take_from(1), Some(0));
        assert_eq!(m.take_from(0), None);
        m.release(2);
        m.release(2);
        assert_eq!(m.busy(), 2);
        assert_eq!(m.take_from(0), Some(2));
    }
}
