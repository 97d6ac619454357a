//! The stall timer: a `timerfd` in the server's epoll set, armed for the earliest moment a
//! connection can have stalled. An owner that waits on the server's fd (or in
//! [`Server::poll_timeout`](super::Server::poll_timeout)) is then woken to drop a stalled
//! connection even when nothing else happens on the socket.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};

/// A one-shot monotonic timer the server's epoll instance watches.
pub(super) struct StallTimer {
    fd: OwnedFd,
    /// When it fires, if armed.
    armed: Option<Instant>,
}

impl StallTimer {
    /// A disarmed timer, registered with `registry` under `token`.
    pub(super) fn new(registry: &Registry, token: Token) -> io::Result<StallTimer> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(StallTimer { fd, armed: None })
    }

    /// Makes sure the timer fires no later than `at` (`None`: nothing to wait for). An earlier
    /// armed time is kept: it costs one spurious wake-up, and saves a system call on every poll
    /// while the earliest deadline keeps moving later.
    pub(super) fn arm(&mut self, at: Option<Instant>, now: Instant) {
        let want = match (at, self.armed) {
            (None, None) => return,
            (Some(at), Some(armed)) if armed <= at => return,
            (at, _) => at,
        };
        // A zero it_value disarms: wait at least a nanosecond.
        let value = want.map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(now)
                .max(Duration::from_nanos(1))
        });
        let spec = Itimerspec {
            it_interval: timespec(Duration::ZERO),
            it_value: timespec(value),
        };
        match timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec) {
            Ok(_) => self.armed = want,
            Err(e) => tracing::warn!(error = %e, "rpc stall timer: timerfd_settime failed"),
        }
    }

    /// Whether it is set to fire.
    pub(super) fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// The timer fired: consume the expiry so the fd stops being readable.
    pub(super) fn fired(&mut self) {
        self.armed = None;
        let mut buf = [0u8; 8];
        match rustix::io::read(&self.fd, &mut buf) {
            Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
            Err(e) => tracing::debug!(error = %e, "rpc stall timer: read failed"),
        }
    }
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Poll};

    /// Waits up to `limit` for the timer's token; whether it came.
    fn fires(poll: &mut Poll, limit: Duration) -> bool {
        let mut events = Events::with_capacity(4);
        poll.poll(&mut events, Some(limit)).unwrap();
        events.iter().any(|e| e.token() == Token(7))
    }

    #[test]
    fn fires_once_at_the_earliest_deadline_and_disarms() {
        let mut poll = Poll::new().unwrap();
        let mut t = StallTimer::new(poll.registry(), Token(7)).unwrap();
        assert!(!t.is_armed());
        let now = Instant::now();
        // A deadline already past still fires (a zero value would disarm instead).
        t.arm(Some(now), now);
        assert!(t.is_armed());
        assert!(fires(&mut poll, Duration::from_secs(20)));
        t.fired();
        assert!(!t.is_armed());
        // One event per expiry.
        assert!(!fires(&mut poll, Duration::from_millis(20)));

        // A later deadline keeps the earlier one; `None` disarms.
        let now = Instant::now();
        t.arm(Some(now + Duration::from_secs(3600)), now);
        t.arm(Some(now + Duration::from_secs(7200)), now);
        assert_eq!(t.armed, Some(now + Duration::from_secs(3600)));
        t.arm(Some(now + Duration::from_millis(1)), now);
        assert_eq!(t.armed, Some(now + Duration::from_millis(1)));
        t.arm(None, now);
        assert!(!t.is_armed());
        assert!(!fires(&mut poll, Duration::from_millis(30)));
    }
}
