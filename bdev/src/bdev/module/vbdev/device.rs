//! A stacked bdev with per-thread state of its own that the control path
//! reaches (delay: the I/O it holds back; error: the I/O it holds, its
//! counts): its channel on a thread is the channel of an io_device of its
//! own, so `for_each_channel` visits them. [`StackedWithDevice`] is that
//! bdev, written once: its [`Stacked`] parts, the io_device, and the
//! module's own part `X` ([`DeviceOps`]: the per-thread state and the I/O
//! path); its [`BdevOps`] and [`StackedBdev`] come with it.

use std::cell::RefCell;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Weak};

use serde_json::Value;

use super::stacked::{Stacked, StackedBdev};
use crate::bdev::bdev::Bdev;
use crate::bdev::io::BdevIo;
use crate::bdev::manager::BdevManager;
use crate::bdev::module::ops::{BdevOps, Done};
use crate::bdev::module::serve::ModuleIo;
use crate::bdev::types::{BdevProps, IoStatus, IoType};
use crate::error::{BoxError, Result};
use crate::thread::{IoChannel, IoDevice};

/// The module's part of a [`StackedWithDevice`]: its per-thread state and
/// its I/O path (and what else the bdev holds: the module's fields, which
/// the bdev derefs to).
pub trait DeviceOps: Send + Sync + Sized + 'static {
    /// The per-thread state, built on each thread by the constructor given
    /// to [`StackedWithDevice::register`].
    type State: 'static;

    /// Required. Serves `io` on this thread's state `ch` (what
    /// [`BdevOps::submit`] owes: complete exactly once, never inside the
    /// call). New I/O never gets here once the base is going away: the
    /// bdev fails it with `Aborted` itself.
    fn dispatch(bdev: &StackedWithDevice<Self>, ch: &Self::State, io: BdevIo);

    /// Optional. `driver_specific` of `bdev_get_bdevs`. Default: `{}`.
    fn info_json(_bdev: &StackedWithDevice<Self>) -> Value {
        Value::Object(serde_json::Map::new())
    }

    /// Optional. The base is going away ([`StackedBdev::base_going`]):
    /// e.g. fail I/O held back, which would keep the channels alive.
    fn base_going(_bdev: &StackedWithDevice<Self>) {}
}

/// A thread's channel of a [`StackedWithDevice`]: the module's state
/// (which it derefs to), and where an I/O waits for a walk over every
/// channel ([`StackedWithDevice::visit_then`]).
pub struct DeviceChannel<S> {
    state: S,
    parked: RefCell<Option<BdevIo>>,
}

impl<S: fmt::Debug> fmt::Debug for DeviceChannel<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceChannel")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<S> Deref for DeviceChannel<S> {
    type Target = S;
    #[inline]
    fn deref(&self) -> &S {
        &self.state
    }
}

/// A bdev covering its whole base whose channels are those of an io_device
/// of its own (delay, error): its [`Stacked`] parts, that io_device, and
/// the module's part `X` (which it derefs to). Its [`BdevOps`]:
///
/// * `create_channel`: this thread's channel of the io_device (the
///   module's state, built by the constructor given to
///   [`StackedWithDevice::register`]);
/// * `submit`: `Aborted` once the base is going away, else
///   [`DeviceOps::dispatch`] on the channel's state (no indirection beyond
///   the channel's own);
/// * `io_type_supported`: what the base serves;
/// * `destruct`: closes the base, then unregisters the io_device, on the
///   thread that opened the base ([`super::BaseBdev::close_with_device`]);
/// * `dump_info_json`: [`DeviceOps::info_json`].
///
/// Its base's events are [`StackedBdev`]'s.
pub struct StackedWithDevice<X: DeviceOps> {
    stacked: Stacked,
    device: IoDevice<DeviceChannel<X::State>>,
    part: X,
}

impl<X: DeviceOps + fmt::Debug> fmt::Debug for StackedWithDevice<X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackedWithDevice")
            .field("stacked", &self.stacked)
            .field("part", &self.part)
            .finish_non_exhaustive()
    }
}

impl<X: DeviceOps> Deref for StackedWithDevice<X> {
    type Target = X;
    #[inline]
    fn deref(&self) -> &X {
        &self.part
    }
}

impl<X: DeviceOps> StackedWithDevice<X> {
    /// Registers the bdev over `base` for `module`, with `props` (as
    /// [`Stacked::register`]): `part` is the module's part, and `channel`
    /// builds a thread's state when the bdev gets its first channel there
    /// (given the bdev). Its io_device is named `<module>_<name>`.
    pub fn register(
        mgr: &BdevManager,
        base: &Bdev,
        module: &'static str,
        props: BdevProps,
        part: X,
        channel: impl Fn(Arc<Self>) -> std::result::Result<X::State, BoxError> + Send + Sync + 'static,
    ) -> Result<Bdev> {
        let device_name = format!("{module}_{}", props.name);
        Stacked::register(mgr, base, module, props, |stacked| {
            Arc::new_cyclic(|weak: &Weak<Self>| {
                let w = weak.clone();
                let device = IoDevice::register(device_name, move || {
                    let bdev = w.upgrade().ok_or("virtual bdev is gone")?;
                    Ok(DeviceChannel {
                        state: channel(bdev)?,
                        parked: RefCell::new(None),
                    })
                });
                StackedWithDevice {
                    stacked,
                    device,
                    part,
                }
            })
        })
    }

    /// The bdev's io_device: its channels, for `for_each_channel`.
    #[must_use]
    pub fn device(&self) -> &IoDevice<DeviceChannel<X::State>> {
        &self.device
    }

    /// Runs `each` on every thread's state, on its thread, then `then`
    /// with `io` and this thread's state, back on this thread: a reset
    /// that first aborts what every thread holds back (delay, error).
    /// `io` waits meanwhile in this thread's channel (an I/O never leaves
    /// its thread). Call it from [`DeviceOps::dispatch`].
    pub fn visit_then(
        &self,
        io: BdevIo,
        each: impl Fn(&X::State) + Send + Sync + 'static,
        then: impl FnOnce(&X::State, BdevIo) + Send + 'static,
    ) {
        let here = match self.device.get_channel() {
            Ok(ch) => ch,
            Err(e) => {
                tracing::error!(bdev = %self.stacked.name(), error = %e, "no channel for the walk");
                return io.complete_deferred(IoStatus::Failed);
            }
        };
        *here.parked.borrow_mut() = Some(io);
        let device = self.device.clone();
        self.device.for_each_channel(
            move |c| each(c),
            move || {
                if let Ok(c) = device.get_channel() {
                    let io = c.parked.borrow_mut().take();
                    if let Some(io) = io {
                        then(&c, io);
                    }
                }
            },
        );
    }
}

impl<X: DeviceOps> StackedBdev for StackedWithDevice<X> {
    fn stacked(&self) -> &Stacked {
        &self.stacked
    }

    fn base_going(&self) {
        X::base_going(self);
    }
}

impl<X: DeviceOps> BdevOps for StackedWithDevice<X> {
    type Channel = IoChannel<DeviceChannel<X::State>>;

    fn create_channel(&self) -> std::result::Result<Self::Channel, BoxError> {
        Ok(self.device.get_channel()?)
    }

    #[inline]
    fn submit(&self, ch: &Self::Channel, io: BdevIo) {
        if self.stacked.base().is_removing() {
            return io.complete_deferred(IoStatus::Aborted);
        }
        X::dispatch(self, &ch.state, io);
    }

    fn io_type_supported(&self, io_type: IoType) -> bool {
        self.stacked.supports(io_type)
    }

    fn destruct(&self, done: Done) {
        self.stacked
            .base()
            .close_with_device(self.device.clone(), done);
    }

    fn dump_info_json(&self) -> Value {
        X::info_json(self)
    }
}
