//! Small futures for the raid's control-path tasks (rebuild, superblock
//! writes, examine): a callback turned into a future, and a nap on a
//! timed poller. The bottom layer: it names no other file of the crate.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bdevkit::thread::{PollerStatus, Thread};
use parking_lot::Mutex;

/// Runs `f` with a completion callback and waits for its value.
pub(crate) fn callback<T: Send + 'static>(
    f: impl FnOnce(Box<dyn FnOnce(T) + Send>),
) -> impl Future<Output = T> {
    let shared: Arc<Mutex<Shared<T>>> = Arc::new(Mutex::new(Shared {
        value: None,
        waker: None,
    }));
    let s2 = Arc::clone(&shared);
    f(Box::new(move |v| {
        let waker = {
            let mut s = s2.lock();
            s.value = Some(v);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }));
    Wait { shared }
}

struct Shared<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

struct Wait<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

impl<T> Future for Wait<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.shared.lock();
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Sleeps `us` µs with a timed poller on the current thread.
pub(crate) fn sleep_us(us: u64) -> impl Future<Output = ()> {
    callback(move |done| {
        let Some(t) = Thread::current() else {
            return done(());
        };
        let mut done = Some(done);
        t.register_poller("raid_wait", us.max(1), move |p| {
            p.unregister();
            if let Some(d) = done.take() {
                d(());
            }
            PollerStatus::Busy
        });
    })
}
