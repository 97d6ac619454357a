//! [`BdevOps`]: what one bdev of a module implements, and how the core
//! holds it (object-safe, with the module's channel type erased).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::bdev::io::{BdevIo, ModuleChannelDyn};
use crate::bdev::types::IoType;
use crate::error::BoxError;

/// Completes an asynchronous step (examine, destruct) when called or
/// dropped, whichever comes first.
pub struct Done(Option<Box<dyn FnOnce() + Send>>);

impl fmt::Debug for Done {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Done")
    }
}

impl Done {
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Done(Some(Box::new(f)))
    }

    /// Signals completion.
    pub fn done(mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// One bdev's implementation (SPDK's `spdk_bdev_fn_table`).
pub trait BdevOps: Send + Sync + 'static {
    /// Per-thread state (a kernel ring, a base bdev's channel, ...). Lives
    /// on one thread; may use `Rc`/`RefCell`.
    type Channel: 'static;

    /// Required. Builds this thread's channel; called on that thread the
    /// first time a consumer there asks for an I/O channel.
    fn create_channel(&self) -> Result<Self::Channel, BoxError>;

    /// Required. Serves `io` on `ch`'s thread. The bdev layer has checked
    /// the range, type and limits. The module owes exactly one
    /// [`super::ModuleIo::complete`], never from inside this call (defer
    /// with a poller or [`super::ModuleIo::complete_deferred`]). Completing
    /// with [`crate::bdev::IoStatus::NoMem`] makes the bdev layer retry
    /// later.
    fn submit(&self, ch: &Self::Channel, io: BdevIo);

    /// Required. Whether the bdev serves this I/O type. Sampled once at
    /// registration.
    fn io_type_supported(&self, io_type: IoType) -> bool;

    /// Optional. Called once after unregistration, when every descriptor
    /// is closed and every channel destroyed, on the thread that released
    /// the last of them. Signal completion with `done`.
    fn destruct(&self, done: Done) {
        done.done();
    }

    /// Optional. `driver_specific` of `bdev_get_bdevs`.
    fn dump_info_json(&self) -> Value {
        Value::Object(serde_json::Map::new())
    }

    /// Optional. The `{"method", "params"}` entry that recreates this bdev
    /// in a saved config, for modules that emit per-bdev entries (aio,
    /// uring, raid).
    fn write_config_json(&self) -> Option<Value> {
        None
    }

    /// Optional. Called when the bdev's size changed through
    /// [`crate::bdev::Bdev::notify_resize`].
    fn resized(&self, _num_blocks: u64) {}
}

/// Object-safe view of a [`BdevOps`] used by the core.
pub(crate) trait BdevOpsDyn: Send + Sync {
    fn create_channel(&self) -> Result<Box<dyn ModuleChannelDyn>, BoxError>;
    fn io_type_supported(&self, io_type: IoType) -> bool;
    fn destruct(&self, done: Done);
    fn dump_info_json(&self) -> Value;
    fn write_config_json(&self) -> Option<Value>;
    fn resized(&self, num_blocks: u64);
    fn as_any(&self) -> Arc<dyn Any + Send + Sync>;
}

pub(crate) struct OpsBox<B: BdevOps>(pub(crate) Arc<B>);

struct ModuleChannel<B: BdevOps> {
    bdev: Arc<B>,
    ch: B::Channel,
}

impl<B: BdevOps> ModuleChannelDyn for ModuleChannel<B> {
    #[inline]
    fn submit(&self, io: BdevIo) {
        self.bdev.submit(&self.ch, io);
    }
}

impl<B: BdevOps> BdevOpsDyn for OpsBox<B> {
    fn create_channel(&self) -> Result<Box<dyn ModuleChannelDyn>, BoxError> {
        let ch = self.0.create_channel()?;
        Ok(Box::new(ModuleChannel {
            bdev: Arc::clone(&self.0),
            ch,
        }))
    }
    fn io_type_supported(&self, io_type: IoType) -> bool {
        self.0.io_type_supported(io_type)
    }
    fn destruct(&self, done: Done) {
        self.0.destruct(done);
    }
    fn dump_info_json(&self) -> Value {
        self.0.dump_info_json()
    }
    fn write_config_json(&self) -> Option<Value> {
        self.0.write_config_json()
    }
    fn resized(&self, num_blocks: u64) {
        self.0.resized(num_blocks);
    }
    fn as_any(&self) -> Arc<dyn Any + Send + Sync> {
        Arc::clone(&self.0) as Arc<dyn Any + Send + Sync>
    }
}
