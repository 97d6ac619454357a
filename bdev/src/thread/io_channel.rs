//! I/O devices and per-thread I/O channels.
//!
//! Anything that needs per-thread state registers an [`IoDevice`] with a
//! constructor for that state. [`IoDevice::get_channel`] returns the calling
//! thread's [`IoChannel`], creating it on first use; clones share it, and it
//! is destroyed on its thread when the last clone drops.
//! [`IoDevice::for_each_channel`] visits every thread holding a channel, one
//! at a time, on that thread: the only way to change per-channel state.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::channels::ChannelAny;
use super::lwthread::{Thread, ThreadHandle, ThreadInner};
use crate::error::{BoxError, Error, Result};

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

type CreateFn<T> = dyn Fn() -> std::result::Result<T, BoxError> + Send + Sync;

/// What runs when the last channel of an unregistered device goes: a
/// closure and the thread to run it on (inline when `None`).
type OnUnregistered = (Option<ThreadHandle>, Box<dyn FnOnce() + Send>);

struct DeviceState {
    /// Threads holding a channel (one channel per thread).
    holders: Vec<ThreadHandle>,
    unregistering: bool,
    on_unregistered: Option<OnUnregistered>,
}

struct DeviceShared<T> {
    id: u64,
    name: String,
    create: Box<CreateFn<T>>,
    state: Mutex<DeviceState>,
    // Channels of T live on their threads; the device itself only holds the
    // constructor, so it is Send + Sync whatever T is.
    _t: PhantomData<fn() -> T>,
}

/// A registered I/O device whose per-thread context is `T`.
pub struct IoDevice<T: 'static> {
    shared: Arc<DeviceShared<T>>,
}

impl<T> Clone for IoDevice<T> {
    fn clone(&self) -> Self {
        IoDevice {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> fmt::Debug for IoDevice<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoDevice")
            .field("id", &self.shared.id)
            .field("name", &self.shared.name)
            .finish()
    }
}

struct ChannelInner<T: 'static> {
    value: T,
    device: Arc<DeviceShared<T>>,
    thread_id: u64,
    /// The owning thread (same OS thread: `Rc`-based channels cannot leave
    /// it), whose channel map holds this channel.
    owner: std::rc::Weak<ThreadInner>,
}

/// This thread's channel for an [`IoDevice`]: a reference-counted handle
/// to the per-thread context `T`. `!Send`.
pub struct IoChannel<T: 'static>(Rc<ChannelInner<T>>);

impl<T> Clone for IoChannel<T> {
    fn clone(&self) -> Self {
        IoChannel(Rc::clone(&self.0))
    }
}

impl<T> Deref for IoChannel<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0.value
    }
}

impl<T> fmt::Debug for IoChannel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoChannel")
            .field("device", &self.0.device.name)
            .field("thread_id", &self.0.thread_id)
            .field("refs", &Rc::strong_count(&self.0))
            .finish()
    }
}

impl<T> IoChannel<T> {
    /// Id of the thread that owns the channel.
    #[must_use]
    pub fn thread_id(&self) -> u64 {
        self.0.thread_id
    }

    /// Name of the device.
    #[must_use]
    pub fn device_name(&self) -> &str {
        &self.0.device.name
    }

    /// Whether two handles are the same channel.
    #[must_use]
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Rc::ptr_eq(&a.0, &b.0)
    }

    /// Number of handles to this channel.
    #[must_use]
    pub fn ref_count(&self) -> usize {
        Rc::strong_count(&self.0)
    }
}

impl<T: 'static> ChannelAny for ChannelInner<T> {
    fn device_name(&self) -> &str {
        &self.device.name
    }
}

impl<T: 'static> Drop for ChannelInner<T> {
    fn drop(&mut self) {
        if let Some(t) = self.owner.upgrade() {
            t.channels.remove(self.device.id);
        }
        let done = {
            let mut st = self.device.state.lock();
            if let Some(pos) = st.holders.iter().position(|h| h.id() == self.thread_id) {
                st.holders.swap_remove(pos);
            }
            if st.unregistering && st.holders.is_empty() {
                st.on_unregistered.take()
            } else {
                None
            }
        };
        if let Some((origin, done)) = done {
            run_on(origin.as_ref(), done);
        }
        // `value` drops after this, outside any borrow or lock.
    }
}

fn run_on(thread: Option<&ThreadHandle>, f: Box<dyn FnOnce() + Send>) {
    match thread {
        Some(t) => {
            if let Err(e) = t.send_boxed(f) {
                tracing::warn!(error = %e, "completion target thread is gone");
            }
        }
        None => f(),
    }
}

/// One step of a [`IoDevice::for_each_channel_async`] walk. Call
/// [`ChannelStep::next`] when this channel is done (possibly later, from a
/// poller or completion on the same thread); dropping it also moves on.
pub struct ChannelStep {
    walk: Option<ChannelWalk>,
}

impl fmt::Debug for ChannelStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelStep").finish_non_exhaustive()
    }
}

impl ChannelStep {
    /// Moves on to the next thread.
    pub fn next(mut self) {
        if let Some(w) = self.walk.take() {
            w.advance();
        }
    }
}

impl Drop for ChannelStep {
    fn drop(&mut self) {
        if let Some(w) = self.walk.take() {
            w.advance();
        }
    }
}

type VisitFn = Arc<dyn Fn(Rc<dyn Any>, ChannelStep) + Send + Sync>;

struct ChannelWalk {
    device_id: u64,
    holders: Arc<Vec<ThreadHandle>>,
    idx: usize,
    visit: VisitFn,
    origin: Option<ThreadHandle>,
    done: Option<Box<dyn FnOnce() + Send>>,
}

impl ChannelWalk {
    fn advance(mut self) {
        self.idx += 1;
        self.start();
    }

    /// Runs the walk from `self.idx`.
    fn start(mut self) {
        let Some(t) = self.holders.get(self.idx).cloned() else {
            if let Some(done) = self.done.take() {
                run_on(self.origin.as_ref(), done);
            }
            return;
        };
        let guard = WalkMsg(Some(self));
        let _ = t.send_msg(move || {
            let mut guard = guard;
            let Some(walk) = guard.0.take() else { return };
            let ch = Thread::current().and_then(|th| th.0.channels.get(walk.device_id));
            match ch {
                Some(ch) => {
                    let visit = Arc::clone(&walk.visit);
                    visit(ch, ChannelStep { walk: Some(walk) });
                }
                None => walk.advance(),
            }
        });
    }
}

/// Carries a walk inside a message; if the message is dropped unrun (the
/// thread exited), the walk skips that thread.
struct WalkMsg(Option<ChannelWalk>);

impl Drop for WalkMsg {
    fn drop(&mut self) {
        if let Some(w) = self.0.take() {
            w.advance();
        }
    }
}

impl<T: 'static> IoDevice<T> {
    /// Registers a device. `create` builds a thread's context the first
    /// time that thread asks for a channel; it runs on that thread.
    pub fn register<F>(name: impl Into<String>, create: F) -> IoDevice<T>
    where
        F: Fn() -> std::result::Result<T, BoxError> + Send + Sync + 'static,
    {
        IoDevice {
            shared: Arc::new(DeviceShared {
                id: NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed),
                name: name.into(),
                create: Box::new(create),
                state: Mutex::new(DeviceState {
                    holders: Vec::new(),
                    unregistering: false,
                    on_unregistered: None,
                }),
                _t: PhantomData,
            }),
        }
    }

    /// Device id (unique in the process).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Device name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The calling thread's channel, created on first use.
    pub fn get_channel(&self) -> Result<IoChannel<T>> {
        let th = Thread::try_current()?;
        if let Some(rc) = th.0.channels.get(self.shared.id) {
            let inner = rc
                .downcast::<ChannelInner<T>>()
                .map_err(|_| Error::ChannelType(self.shared.name.clone()))?;
            return Ok(IoChannel(inner));
        }
        if self.shared.state.lock().unregistering {
            return Err(Error::IoDeviceUnregistered(self.shared.name.clone()));
        }
        let value = (self.shared.create)().map_err(|source| Error::CreateChannel {
            name: self.shared.name.clone(),
            source,
        })?;
        {
            let mut st = self.shared.state.lock();
            if st.unregistering {
                drop(st);
                drop(value);
                return Err(Error::IoDeviceUnregistered(self.shared.name.clone()));
            }
            st.holders.push(th.handle());
        }
        let inner = Rc::new(ChannelInner {
            value,
            device: Arc::clone(&self.shared),
            thread_id: th.id(),
            owner: Rc::downgrade(&th.0),
        });
        let weak: std::rc::Weak<dyn ChannelAny> =
            Rc::downgrade(&(Rc::clone(&inner) as Rc<dyn ChannelAny>));
        th.0.channels.insert(self.shared.id, weak);
        Ok(IoChannel(inner))
    }

    /// Number of threads holding a channel right now.
    #[must_use]
    pub fn channel_count(&self) -> usize {
        self.shared.state.lock().holders.len()
    }

    /// Visits every thread holding a channel, one after another, on that
    /// thread; `f` calls [`ChannelStep::next`] when done with its channel
    /// (it may finish later, on the same thread). Then `done` runs on the
    /// calling thread (inline when called outside any thread).
    pub fn for_each_channel_async<F, D>(&self, f: F, done: D)
    where
        F: Fn(&IoChannel<T>, ChannelStep) + Send + Sync + 'static,
        D: FnOnce() + Send + 'static,
    {
        let holders = self.shared.state.lock().holders.clone();
        let visit: VisitFn = Arc::new(move |any: Rc<dyn Any>, step: ChannelStep| {
            // The map entry for this device id always holds ChannelInner<T>.
            match any.downcast::<ChannelInner<T>>() {
                Ok(inner) => f(&IoChannel(inner), step),
                Err(_) => step.next(),
            }
        });
        ChannelWalk {
            device_id: self.shared.id,
            holders: Arc::new(holders),
            idx: 0,
            visit,
            origin: Thread::current().map(|t| t.handle()),
            done: Some(Box::new(done)),
        }
        .start();
    }

    /// Like [`IoDevice::for_each_channel_async`] with a synchronous visit.
    pub fn for_each_channel<F, D>(&self, f: F, done: D)
    where
        F: Fn(&IoChannel<T>) + Send + Sync + 'static,
        D: FnOnce() + Send + 'static,
    {
        self.for_each_channel_async(
            move |ch, step| {
                f(ch);
                step.next();
            },
            done,
        );
    }

    /// Unregisters the device: no new channels; `done` runs on the calling
    /// thread (inline outside any thread) once every channel is released.
    pub fn unregister(&self, done: impl FnOnce() + Send + 'static) {
        let origin = Thread::current().map(|t| t.handle());
        let mut st = self.shared.state.lock();
        st.unregistering = true;
        if !st.holders.is_empty() {
            st.on_unregistered = Some((origin, Box::new(done)));
            return;
        }
        drop(st);
        run_on(origin.as_ref(), Box::new(done));
    }

    /// Whether [`IoDevice::unregister`] was called.
    #[must_use]
    pub fn is_unregistering(&self) -> bool {
        self.shared.state.lock().unregistering
    }
}
