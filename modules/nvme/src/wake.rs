//! Interrupt mode for a channel's fabrics queue: the thread sleeps on the
//! queue's socket instead of spinning while commands are outstanding.
//!
//! The channel keeps an epoll set of its own (a `mio::Poll`) holding its
//! queue's socket, and registers that set with its thread
//! ([`Thread::register_interrupt_fd`]): data arriving on the socket wakes
//! the sleeping reactor, which runs the channel's poller. The set follows
//! the socket: a reconnect makes a new one (maybe with the old number),
//! told apart by [`QueueTransport::wake_fd`]'s id. A closed socket leaves
//! the set by itself (the kernel drops it), so a number reused by someone
//! else's descriptor is never touched in the reactor's set.
//!
//! The reactor's set is edge-triggered; before the poller reports idle,
//! [`QueueWake::may_sleep`] drains this set: readiness that came after the
//! queue's last read means "poll again", and draining re-arms the edge
//! for the next arrival. What readability does not announce (unsent bytes,
//! a reap cut short, a connect's deadline) keeps the poller going, the
//! deadline through a slow tick while the queue connects.
//!
//! The admin queue of a fabrics controller gets one too, on the app
//! thread: an active poller that polls the admin queue whenever the
//! thread wakes (its socket among the reasons), beside the timed admin
//! poller (keep alive, health). So admin completions and events arrive
//! at once however long `nvme_adminq_poll_period_us` is.

use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use bdevkit::thread::{InterruptFd, Poller, PollerStatus, Thread};
use bdevkit_nvme_driver::QueueTransport;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

/// How often a sleeping channel wakes while its queue connects (the
/// connect's deadline is checked by its polls).
const CONNECT_TICK_US: u64 = 100_000;

/// A channel's wake-up source in interrupt mode.
pub(crate) struct QueueWake {
    poll: Poll,
    events: Events,
    /// The socket in the set (descriptor, id).
    watched: Option<(RawFd, u64)>,
    /// Wakes the thread now and then while the queue connects.
    tick: Option<Poller>,
    thread: Thread,
    _irq: InterruptFd,
}

impl std::fmt::Debug for QueueWake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueWake")
            .field("watched", &self.watched)
            .finish()
    }
}

impl QueueWake {
    /// A wake-up source for a channel on `thread`: `None` unless its
    /// runtime is in interrupt mode (a polling reactor polls anyway), or
    /// when the set cannot be made (then the channel polls).
    pub(crate) fn new(thread: &Thread) -> Option<QueueWake> {
        if !thread.runtime().is_ok_and(|rt| rt.interrupt_mode()) {
            return None;
        }
        let made = Poll::new().and_then(|poll| {
            let irq = thread
                .register_interrupt_fd(poll.as_raw_fd())
                .map_err(std::io::Error::other)?;
            Ok((poll, irq))
        });
        match made {
            Ok((poll, irq)) => Some(QueueWake {
                poll,
                events: Events::with_capacity(4),
                watched: None,
                tick: None,
                thread: thread.clone(),
                _irq: irq,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "NVMe/TCP channel: polling its socket instead");
                None
            }
        }
    }

    /// Called when the channel's poll found nothing to complete: watches
    /// the queue's current socket and says whether the thread may sleep
    /// until it turns readable (false: poll again).
    pub(crate) fn may_sleep(&mut self, q: &impl QueueTransport) -> bool {
        self.may_sleep_on(q.wake_fd(), q.needs_poll(), q.is_connecting())
    }

    /// [`QueueWake::may_sleep`] from what a queue says: its descriptor
    /// ([`QueueTransport::wake_fd`]), whether it needs polling anyway
    /// ([`QueueTransport::needs_poll`]) and whether it connects.
    pub(crate) fn may_sleep_on(
        &mut self,
        cur: Option<(RawFd, u64)>,
        needs_poll: bool,
        connecting: bool,
    ) -> bool {
        if cur != self.watched {
            if let Some((fd, _)) = self.watched.take() {
                // Gone already when the socket was closed (the usual case).
                let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
            }
            if let Some((fd, id)) = cur {
                let r =
                    self.poll
                        .registry()
                        .register(&mut SourceFd(&fd), Token(0), Interest::READABLE);
                if let Err(e) = r {
                    tracing::warn!(error = %e, "cannot watch an NVMe/TCP socket: polling it");
                    return false;
                }
                self.watched = Some((fd, id));
            }
        }
        self.set_tick(connecting);
        if needs_poll {
            return false;
        }
        match self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            Ok(()) => self.events.is_empty(),
            Err(_) => false,
        }
    }

    fn set_tick(&mut self, on: bool) {
        match (&self.tick, on) {
            (None, true) => {
                let p =
                    self.thread
                        .register_poller("bdev_nvme_connect_tick", CONNECT_TICK_US, |_| {
                            PollerStatus::Idle
                        });
                self.tick = Some(p);
            }
            (Some(p), false) => {
                p.unregister();
                self.tick = None;
            }
            _ => {}
        }
    }
}

impl Drop for QueueWake {
    fn drop(&mut self) {
        if let Some(p) = self.tick.take() {
            p.unregister();
        }
    }
}

/// What an admin poll says: `None`, the controller is gone (the poller
/// ends); else what [`bdevkit_nvme_driver::Controller::admin_wake`] says.
type AdminPolled = Option<Option<(Option<(RawFd, u64)>, bool)>>;

/// In interrupt mode, registers on `thread` an active poller that runs
/// `poll` (an admin poll) whenever the thread wakes, the admin queue's
/// socket among the reasons; nothing in polling mode (the timed admin
/// poller does).
pub(crate) fn admin_poller(thread: &Thread, mut poll: impl FnMut() -> AdminPolled + 'static) {
    let Some(mut wake) = QueueWake::new(thread) else {
        return;
    };
    thread.register_poller("bdev_nvme_adminq_wake", 0, move |p| match poll() {
        Some(state) => {
            let sleeps = state.is_none_or(|(fd, busy)| wake.may_sleep_on(fd, busy, false));
            if sleeps {
                PollerStatus::Idle
            } else {
                PollerStatus::Busy
            }
        }
        None => {
            p.unregister();
            PollerStatus::Idle
        }
    });
}
