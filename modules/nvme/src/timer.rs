//! One-shot timers on a thread (a timed poller that unregisters itself).

use std::time::Duration;

use bdevkit::thread::{PollerStatus, Thread, ThreadHandle};

/// Runs `f` on `app` after `delay`, as a poller named `name`.
pub(crate) fn after(
    app: &ThreadHandle,
    name: &'static str,
    delay: Duration,
    f: impl FnOnce() + Send + 'static,
) {
    let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX).max(1);
    let mut f = Some(f);
    let _ = app.send_msg(move || {
        if let Ok(t) = Thread::try_current() {
            t.register_poller(name, us, move |p| {
                p.unregister();
                if let Some(f) = f.take() {
                    f();
                }
                PollerStatus::Busy
            });
        }
    });
}
