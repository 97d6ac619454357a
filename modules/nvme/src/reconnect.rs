//! Losing a fabrics controller (SPDK's I/O error resiliency): after a
//! reset that could not connect again, the controller retries every
//! `reconnect_delay_sec`; I/O waits meanwhile, or fails once the
//! controller has been lost for `fast_io_fail_timeout_sec`; after
//! `ctrlr_loss_timeout_sec` (-1: never) it gives up and is removed.
//! `ctrlr_loss_timeout_sec` 0 (the default) gives up at the first failed
//! reset. PCIe controllers always give up at once (a failed reset there
//! means a broken device).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// The three knobs, as `bdev_nvme_set_options` and
/// `bdev_nvme_attach_controller` take them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconnect {
    /// Give up after this long lost (-1: never; 0: at the first failure).
    pub ctrlr_loss_timeout_sec: i32,
    /// Between reconnect attempts.
    pub reconnect_delay_sec: u32,
    /// Fail waiting I/O after this long lost (0: I/O waits until giving up).
    pub fast_io_fail_timeout_sec: u32,
}

/// The three knobs as an RPC gives them, each optional: flattened into
/// the params of `bdev_nvme_attach_controller` and
/// `bdev_nvme_start_discovery` (`#[serde(flatten)]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconnectParams {
    /// [`Reconnect::ctrlr_loss_timeout_sec`].
    #[serde(default)]
    pub ctrlr_loss_timeout_sec: Option<i32>,
    /// [`Reconnect::reconnect_delay_sec`].
    #[serde(default)]
    pub reconnect_delay_sec: Option<u32>,
    /// [`Reconnect::fast_io_fail_timeout_sec`].
    #[serde(default)]
    pub fast_io_fail_timeout_sec: Option<u32>,
}

impl ReconnectParams {
    /// The knobs given (`None` each: from `defaults`), checked; `None`
    /// when none is given (the module options apply).
    ///
    /// # Errors
    /// SPDK's message for an inconsistent combination.
    pub fn over(&self, defaults: Reconnect) -> Result<Option<Reconnect>, String> {
        let (loss, delay, fast) = (
            self.ctrlr_loss_timeout_sec,
            self.reconnect_delay_sec,
            self.fast_io_fail_timeout_sec,
        );
        if loss.is_none() && delay.is_none() && fast.is_none() {
            return Ok(None);
        }
        let r = Reconnect {
            ctrlr_loss_timeout_sec: loss.unwrap_or(defaults.ctrlr_loss_timeout_sec),
            reconnect_delay_sec: delay.unwrap_or(defaults.reconnect_delay_sec),
            fast_io_fail_timeout_sec: fast.unwrap_or(defaults.fast_io_fail_timeout_sec),
        };
        r.validate()?;
        Ok(Some(r))
    }
}

impl Reconnect {
    /// SPDK's consistency rules for the three values.
    pub fn validate(&self) -> Result<(), String> {
        let (loss, delay, fast) = (
            self.ctrlr_loss_timeout_sec,
            self.reconnect_delay_sec,
            self.fast_io_fail_timeout_sec,
        );
        if loss < -1 {
            return Err("ctrlr_loss_timeout_sec can't be less than -1".into());
        }
        if loss == 0 {
            if delay != 0 || fast != 0 {
                return Err(
                    "reconnect_delay_sec and fast_io_fail_timeout_sec need ctrlr_loss_timeout_sec"
                        .into(),
                );
            }
            return Ok(());
        }
        if delay == 0 {
            return Err("reconnect_delay_sec can't be 0 if ctrlr_loss_timeout_sec is not 0".into());
        }
        let loss = u32::try_from(loss).ok();
        if loss.is_some_and(|l| delay > l) {
            return Err("reconnect_delay_sec can't be more than ctrlr_loss_timeout_sec".into());
        }
        if fast != 0 {
            if loss.is_some_and(|l| fast > l) {
                return Err(
                    "fast_io_fail_timeout_sec can't be more than ctrlr_loss_timeout_sec".into(),
                );
            }
            if fast < delay {
                return Err(
                    "fast_io_fail_timeout_sec can't be less than reconnect_delay_sec".into(),
                );
            }
        }
        Ok(())
    }
}

/// What to do after a failed reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Fail everything; the controller goes.
    GiveUp,
    /// Try again after `delay`; `fail_io`: waiting I/O fails now.
    Retry { delay: Duration, fail_io: bool },
}

/// A controller's reconnect bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct ReconnectState {
    lost_since: Mutex<Option<Instant>>,
    delayed: AtomicBool,
}

impl ReconnectState {
    /// A reset starts (the first one of a loss starts its clock).
    pub(crate) fn started(&self) {
        self.delayed.store(false, Ordering::Release);
        self.lost_since.lock().get_or_insert_with(Instant::now);
    }

    /// A reset succeeded: nothing is lost.
    pub(crate) fn succeeded(&self) {
        *self.lost_since.lock() = None;
        self.delayed.store(false, Ordering::Release);
    }

    /// A reset failed: give up, or retry later (then `is_delayed`).
    pub(crate) fn failed(&self, p: &Reconnect, fabrics: bool) -> AfterFailure {
        if !fabrics || p.ctrlr_loss_timeout_sec == 0 {
            return AfterFailure::GiveUp;
        }
        let lost = self
            .lost_since
            .lock()
            .map_or(Duration::ZERO, |t| t.elapsed());
        let loss = u64::try_from(p.ctrlr_loss_timeout_sec).ok();
        if loss.is_some_and(|l| lost >= Duration::from_secs(l)) {
            return AfterFailure::GiveUp;
        }
        self.delayed.store(true, Ordering::Release);
        let fast = u64::from(p.fast_io_fail_timeout_sec);
        AfterFailure::Retry {
            delay: Duration::from_secs(u64::from(p.reconnect_delay_sec)),
            fail_io: fast > 0 && lost >= Duration::from_secs(fast),
        }
    }

    /// A reconnect attempt is scheduled (`reconnect_is_delayed`).
    pub(crate) fn is_delayed(&self) -> bool {
        self.delayed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(l: i32, d: u32, f: u32) -> Reconnect {
        Reconnect {
            ctrlr_loss_timeout_sec: l,
            reconnect_delay_sec: d,
            fast_io_fail_timeout_sec: f,
        }
    }

    #[test]
    fn spdk_rules() {
        for ok in [
            r(0, 0, 0),
            r(-1, 1, 0),
            r(-1, 2, 5),
            r(10, 2, 0),
            r(10, 2, 5),
            r(10, 10, 10),
        ] {
            assert!(ok.validate().is_ok(), "{ok:?}");
        }
        for bad in [
            r(-2, 1, 0),
            r(0, 1, 0),
            r(0, 0, 1),
            r(-1, 0, 0),
            r(5, 6, 0),
            r(10, 2, 11),
            r(10, 3, 2),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn give_up_or_retry() {
        let s = ReconnectState::default();
        s.started();
        assert_eq!(s.failed(&r(0, 0, 0), true), AfterFailure::GiveUp);
        assert_eq!(s.failed(&r(-1, 1, 0), false), AfterFailure::GiveUp);
        let a = s.failed(&r(-1, 1, 0), true);
        assert_eq!(
            a,
            AfterFailure::Retry {
                delay: Duration::from_secs(1),
                fail_io: false
            }
        );
        assert!(s.is_delayed());
        s.succeeded();
        assert!(!s.is_delayed());
    }
}
