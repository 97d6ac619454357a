//! Controller reset (SPDK's `bdev_nvme_reset_ctrlr`), with I/O in flight:
//!
//! 1. every channel holds new I/O back;
//! 2. the controller is disabled on a helper thread (CC.EN = 0 within
//!    CAP.TO): from then on it touches no host memory;
//! 3. every channel takes back what was in flight: each I/O is queued for
//!    a retry (up to `bdev_retry_count`, never after a DNR status) or
//!    fails;
//! 4. the controller is enabled and initialised again (helper thread),
//!    at the next failover address if its current one does not connect;
//! 5. every channel reconnects its queue pair and resubmits; a fabrics
//!    queue connects from its channel's poller, and the reset waits for
//!    it: one that does not connect fails the reset (then the reconnect
//!    policy retries later or gives up, as for a failed enable).
//!
//! One reset at a time per controller; a reset asked for meanwhile
//! completes with the running one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bdevkit::thread::ThreadHandle;
use parking_lot::Mutex;

use crate::channel::{ChannelOwner, Driver, ResetDone};
use crate::reconnect::{AfterFailure, Reconnect, ReconnectState};

/// A controller's reset bookkeeping.
#[derive(Default)]
pub(crate) struct ResetState {
    running: AtomicBool,
    waiters: Mutex<Vec<ResetDone>>,
}

impl ResetState {
    /// Whether a reset is running.
    pub(crate) fn running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }
}

/// What a reset needs from the controller (implemented above this file).
pub(crate) trait Resettable: ChannelOwner {
    /// Its reset bookkeeping.
    fn reset_state(&self) -> &ResetState;
    /// The thread the steps run on between helper threads (app thread).
    fn app(&self) -> &ThreadHandle;
    /// The driver's controller.
    fn driver(&self) -> &Driver;
    /// Its reconnect knobs and bookkeeping.
    fn reconnect(&self) -> (&Reconnect, &ReconnectState);
    /// The controller is given up (reset failed, no retry left): it is
    /// removed as if surprise-removed (I/O fails, bdevs hot-removed).
    fn give_up(&self);
    /// Runs `f` on the app thread after `delay`.
    fn after(&self, delay: std::time::Duration, f: Box<dyn FnOnce() + Send>);
    /// A reset succeeded (on the app thread).
    fn reset_succeeded(&self) {}
}

/// Starts a reset of `c` (from any thread); `done` gets its outcome.
pub(crate) fn start<C: Resettable>(c: &Arc<C>, done: Option<ResetDone>) {
    let st = c.reset_state();
    {
        // Under the waiters' lock: `finish` takes the waiters and clears
        // `running` under it too, so no waiter is left behind.
        let mut w = st.waiters.lock();
        if let Some(d) = done {
            w.push(d);
        }
        if st.running.swap(true, Ordering::AcqRel) {
            return;
        }
    }
    let c = Arc::clone(c);
    let app = c.app().clone();
    let _ = app.send_msg(move || run(c));
}

fn helper<C: Resettable>(
    c: Arc<C>,
    work: impl FnOnce(&C) -> Result<(), String> + Send + 'static,
    then: impl FnOnce(Arc<C>, Result<(), String>) + Send + 'static,
) {
    let spawned = std::thread::Builder::new()
        .name("nvme-reset".into())
        .spawn(move || {
            let r = work(&c);
            let app = c.app().clone();
            let _ = app.send_msg(move || then(c, r));
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the reset thread");
    }
}

fn run<C: Resettable>(c: Arc<C>) {
    tracing::info!(ctrlr = c.name(), "resetting controller");
    c.reconnect().1.started();
    c.driver().set_state(bdevkit_nvme_driver::State::Resetting);
    let c2 = Arc::clone(&c);
    c.device().for_each_channel(
        |ch| ch.inner.pause(),
        move || {
            helper(
                c2,
                |c| c.driver().disable().map_err(|e| e.to_string()),
                |c, r| {
                    let c2 = Arc::clone(&c);
                    c.device().for_each_channel(
                        |ch| ch.inner.fail_in_flight(),
                        move || {
                            helper(
                                c2,
                                move |c| {
                                    r?;
                                    enable_any_path(c.driver())
                                },
                                |c, r| {
                                    if r.is_err() && retry_later(&c) {
                                        finish(&*c, r);
                                        return;
                                    }
                                    if r.is_err() {
                                        c.driver().set_state(bdevkit_nvme_driver::State::Failed);
                                    }
                                    let ok = r.is_ok();
                                    let failed = Arc::new(AtomicBool::new(false));
                                    let f2 = Arc::clone(&failed);
                                    let c2 = Arc::clone(&c);
                                    c.device().for_each_channel_async(
                                        move |ch, step| ch.inner.reconnect(ok, step, &f2),
                                        move || connected(c2, r, &failed),
                                    );
                                },
                            );
                        },
                    );
                },
            );
        },
    );
}

/// Step 4: enables the controller at its current address, else at each
/// failover address in turn (`multipath: failover`); the one that
/// connects stays current.
fn enable_any_path(d: &Driver) -> Result<(), String> {
    let tcp = d.transport().tcp();
    let n = tcp.map_or(1, bdevkit_nvme_driver::TcpTransport::path_count);
    let mut r = Ok(());
    for i in 0..n {
        if i > 0 {
            // Drop what the failed try connected, then the next address.
            let _ = d.disable();
            if !tcp.is_some_and(bdevkit_nvme_driver::TcpTransport::failover) {
                break;
            }
        }
        r = d.enable().map_err(|e| e.to_string());
        if r.is_ok() {
            break;
        }
    }
    r
}

/// Step 5 done: every channel's queue connected, or one did not (the
/// reset failed after all).
fn connected<C: Resettable>(c: Arc<C>, r: Result<(), String>, failed: &AtomicBool) {
    if r.is_err() {
        return finish(&*c, r);
    }
    if !failed.load(Ordering::Acquire) {
        c.reconnect().1.succeeded();
        return finish(&*c, r);
    }
    let r = Err("an I/O queue did not connect".to_string());
    if retry_later(&c) {
        return finish(&*c, r);
    }
    // The admin queue is back but an I/O queue is not: nothing would
    // remove the controller later (its admin queue stays healthy), so it
    // goes now, as after a failed enable.
    c.driver().set_state(bdevkit_nvme_driver::State::Failed);
    finish(&*c, r);
    c.give_up();
}

/// A failed reset of a fabrics controller that may keep trying: the
/// channels stay paused (I/O waits, or fails once past
/// `fast_io_fail_timeout_sec`) and another reset starts after
/// `reconnect_delay_sec`. False: give up.
fn retry_later<C: Resettable>(c: &Arc<C>) -> bool {
    let (policy, st) = c.reconnect();
    let fabrics = bdevkit_nvme_driver::Transport::is_fabrics(c.driver().transport());
    let AfterFailure::Retry { delay, fail_io } = st.failed(policy, fabrics) else {
        return false;
    };
    tracing::warn!(
        ctrlr = c.name(),
        delay_s = delay.as_secs(),
        "reconnect failed: trying again later"
    );
    if fail_io {
        c.device()
            .for_each_channel(|ch| ch.inner.fail_fast(), || {});
    }
    let c2 = Arc::clone(c);
    c.after(delay, Box::new(move || start(&c2, None)));
    true
}

fn finish<C: Resettable>(c: &C, r: Result<(), String>) {
    match &r {
        Ok(()) => {
            tracing::info!(ctrlr = c.name(), "controller reset done");
            c.reset_succeeded();
        }
        Err(e) => tracing::error!(ctrlr = c.name(), error = %e, "controller reset failed"),
    }
    let st = c.reset_state();
    let waiters: Vec<ResetDone> = {
        let mut w = st.waiters.lock();
        st.running.store(false, Ordering::Release);
        std::mem::take(&mut *w)
    };
    for w in waiters {
        w(r.clone());
    }
}
