//! A test runtime: reactors in interrupt mode (tests must not spin the
//! machine's cores) and a bdev manager with the modules a test asks for.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bdevkit::bdev::{BdevManager, BdevOptions};
use bdevkit::thread::{CpuSet, PollerStatus, Runtime, RuntimeOptions, Thread};

/// A running test runtime; shuts down on drop.
#[derive(Debug)]
pub struct TestEnv {
    rt: Option<Runtime>,
    mgr: BdevManager,
}

impl TestEnv {
    /// Reactors on `mask` (e.g. `"0x3"`), null and malloc registered.
    #[must_use]
    pub fn new(mask: &str) -> TestEnv {
        Self::with_modules(mask, &[bdevkit_null::register, bdevkit_malloc::register])
    }

    /// Reactors on `mask` with the given module registration functions.
    ///
    /// # Panics
    /// On a bad mask or when the runtime cannot start (test setup errors).
    #[must_use]
    pub fn with_modules(mask: &str, modules: &[fn(&BdevManager)]) -> TestEnv {
        let opts = RuntimeOptions {
            shutdown_grace: Duration::from_millis(500),
            ..RuntimeOptions::interrupt(mask.parse::<CpuSet>().expect("invariant: test mask"))
        };
        let rt = Runtime::start(opts).expect("invariant: test runtime starts");
        let mgr = BdevManager::new(BdevOptions::default());
        for m in modules {
            m(&mgr);
        }
        TestEnv { rt: Some(rt), mgr }
    }

    /// The bdev manager.
    #[must_use]
    pub fn mgr(&self) -> &BdevManager {
        &self.mgr
    }

    /// The runtime.
    ///
    /// # Panics
    /// Never after construction.
    #[must_use]
    pub fn runtime(&self) -> &Runtime {
        self.rt.as_ref().expect("invariant: runtime until drop")
    }

    /// Runs the future built by `f` on the app thread and returns its
    /// output.
    ///
    /// # Panics
    /// If the app thread is gone (the body panicked).
    pub fn run<R, Fut, F>(&self, f: F) -> R
    where
        R: Send + 'static,
        Fut: Future<Output = R> + 'static,
        F: FnOnce(BdevManager) -> Fut + Send + 'static,
    {
        let mgr = self.mgr.clone();
        self.runtime()
            .app_thread()
            .block_on(move || f(mgr))
            .expect("invariant: app thread alive")
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            let mgr = self.mgr.clone();
            // Remove every bdev first so modules release their resources.
            let _ = rt.app_thread().block_on(move || async move {
                let (tx, rx) = std::sync::mpsc::channel();
                mgr.unregister_all(move || {
                    let _ = tx.send(());
                });
                let deadline = Instant::now() + Duration::from_secs(10);
                while rx.try_recv().is_err() && Instant::now() < deadline {
                    sleep_ms(1).await;
                }
            });
            rt.shutdown();
        }
    }
}

/// A future that completes after `ms` milliseconds without blocking the
/// reactor (a timed poller wakes it).
pub fn sleep_ms(ms: u64) -> impl Future<Output = ()> {
    Sleep {
        until: Instant::now() + Duration::from_millis(ms),
        armed: false,
    }
}

struct Sleep {
    until: Instant,
    armed: bool,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.until {
            return Poll::Ready(());
        }
        if !self.armed {
            self.armed = true;
            let w = cx.waker().clone();
            let until = self.until;
            if let Some(t) = Thread::current() {
                t.register_poller("test_sleep", 500, move |p| {
                    if Instant::now() >= until {
                        p.unregister();
                        w.wake_by_ref();
                    }
                    PollerStatus::Idle
                });
            }
        }
        Poll::Pending
    }
}

/// Waits (on the reactor) until `f` is true or `secs` elapse; returns
/// whether it became true.
pub async fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        if Instant::now() > deadline {
            return false;
        }
        sleep_ms(1).await;
    }
    true
}
