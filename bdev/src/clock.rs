//! Monotonic tick source for the I/O path and the reactors.
//!
//! On x86-64 the time-stamp counter is read directly (`rdtsc`, invariant on
//! every CPU we run on: `constant_tsc`/`nonstop_tsc`); its rate is measured
//! once per process against the monotonic clock. Elsewhere ticks are
//! nanoseconds of `CLOCK_MONOTONIC`. Ticks are what `framework_get_reactors`,
//! `thread_get_stats` and `bdev_get_iostat` report, with [`tick_rate`].
//!
//! A policy that acts on elapsed time (QoS timeslices) reads its ticks
//! through a [`Clock`]: the tick counter, or a [`ManualClock`] that a test
//! or a simulation advances, so that what the policy allows in a given
//! time is checked exactly rather than measured on a busy machine.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Current tick count. Cheap (a few ns): safe to call per I/O.
#[inline]
#[must_use]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions on x86-64 (it is available on
        // every x86-64 CPU and only reads the counter).
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

thread_local! {
    static POLL_TICKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Ticks at the start of the poller or message running on this reactor
/// thread: one counter reading per poll instead of one per call. The I/O
/// path stamps submissions and completions with it; since both ends of an
/// I/O are stamped the same way, latencies stay accurate to within the
/// running time of one poller invocation. Outside a reactor it reads the
/// counter.
#[inline]
#[must_use]
pub fn poll_ticks() -> u64 {
    let t = POLL_TICKS.with(std::cell::Cell::get);
    if t == 0 {
        ticks()
    } else {
        t
    }
}

/// Reads the counter and makes it the current [`poll_ticks`] value
/// (the reactor calls this before each poller and message batch).
#[inline]
pub fn refresh_poll_ticks() -> u64 {
    let t = ticks();
    POLL_TICKS.with(|c| c.set(t));
    t
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

#[cfg(not(target_arch = "x86_64"))]
fn monotonic_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Ticks per second. The first call measures the counter for about 20 ms.
#[must_use]
pub fn tick_rate() -> u64 {
    static RATE: OnceLock<u64> = OnceLock::new();
    *RATE.get_or_init(measure_rate)
}

fn measure_rate() -> u64 {
    #[cfg(not(target_arch = "x86_64"))]
    {
        1_000_000_000
    }
    #[cfg(target_arch = "x86_64")]
    {
        let _ = epoch();
        let t0 = Instant::now();
        let c0 = ticks();
        std::thread::sleep(Duration::from_millis(20));
        let c1 = ticks();
        let elapsed_ns = t0.elapsed().as_nanos().max(1);
        let rate = u128::from(c1.wrapping_sub(c0)) * 1_000_000_000 / elapsed_ns;
        // Round to 100 kHz so repeated measurements agree in their output.
        let rate = u64::try_from(rate).unwrap_or(u64::MAX);
        (rate + 50_000) / 100_000 * 100_000
    }
}

/// Converts microseconds to ticks (saturating).
#[must_use]
pub fn us_to_ticks(us: u64) -> u64 {
    u64::try_from(u128::from(us) * u128::from(tick_rate()) / 1_000_000).unwrap_or(u64::MAX)
}

/// Converts nanoseconds to ticks (saturating).
#[must_use]
pub fn ns_to_ticks(ns: u64) -> u64 {
    u64::try_from(u128::from(ns) * u128::from(tick_rate()) / 1_000_000_000).unwrap_or(u64::MAX)
}

/// Converts ticks to nanoseconds (saturating).
#[must_use]
pub fn ticks_to_ns(ticks: u64) -> u64 {
    u64::try_from(u128::from(ticks) * 1_000_000_000 / u128::from(tick_rate().max(1)))
        .unwrap_or(u64::MAX)
}

/// Converts a tick count to a [`Duration`].
#[must_use]
pub fn ticks_to_duration(ticks: u64) -> Duration {
    Duration::from_nanos(ticks_to_ns(ticks))
}

/// A source of ticks for a time-driven policy: the tick counter
/// ([`ticks`], the default) or a [`ManualClock`]. Cheap to clone; read
/// off the I/O path (a QoS timeslice poller, not each I/O).
#[derive(Clone, Default)]
pub struct Clock(Option<Arc<AtomicU64>>);

impl Clock {
    /// The tick counter.
    #[must_use]
    pub fn system() -> Clock {
        Clock(None)
    }

    /// Ticks now: [`ticks`], or the manual clock's count.
    #[must_use]
    pub fn now(&self) -> u64 {
        match &self.0 {
            None => ticks(),
            Some(t) => t.load(Ordering::Acquire),
        }
    }

    /// Whether this is a [`ManualClock`]'s.
    #[must_use]
    pub fn is_manual(&self) -> bool {
        self.0.is_some()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("Clock::system"),
            Some(t) => write!(f, "Clock::manual({})", t.load(Ordering::Relaxed)),
        }
    }
}

/// A clock that moves only when told to: it starts at 0 and
/// [`ManualClock::advance`] adds ticks (in [`tick_rate`] units, so
/// [`us_to_ticks`] converts). Hand [`ManualClock::clock`] to what should
/// run on it.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock at tick 0.
    #[must_use]
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// The [`Clock`] that reads this one.
    #[must_use]
    pub fn clock(&self) -> Clock {
        Clock(Some(Arc::clone(&self.0)))
    }

    /// Moves the clock `ticks` forward.
    pub fn advance(&self, ticks: u64) {
        self.0.fetch_add(ticks, Ordering::AcqRel);
    }

    /// Moves the clock `us` microseconds forward.
    pub fn advance_us(&self, us: u64) {
        self.advance(us_to_ticks(us));
    }

    /// Its ticks now.
    #[must_use]
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let m = ManualClock::new();
        let c = m.clock();
        assert!(c.is_manual() && !Clock::system().is_manual());
        assert_eq!(c.now(), 0);
        m.advance(5);
        m.advance_us(1_000);
        assert_eq!(c.now(), 5 + us_to_ticks(1_000));
        assert_eq!(c.clone().now(), m.now());
    }

    #[test]
    fn ticks_advance_and_rate_is_sane() {
        let a = ticks();
        std::thread::sleep(Duration::from_millis(2));
        let b = ticks();
        assert!(b > a);
        let rate = tick_rate();
        assert!(rate >= 1_000_000, "tick rate {rate}");
        let us = ticks_to_ns(us_to_ticks(1000)) / 1000;
        assert!((990..=1010).contains(&us), "{us}");
    }
}
