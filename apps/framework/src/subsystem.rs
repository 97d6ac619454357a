//! Framework subsystems above the bdev layer (SPDK's `spdk_subsystem`):
//! the NVMe-oF target is one. A subsystem is created when the app starts
//! (so that its STARTUP-time RPCs answer from the first request),
//! initialised with the framework (`framework_start_init`, after the bdev
//! modules), listed by `framework_get_subsystems` after `bdev` with its
//! dependencies, saved by `framework_get_config NAME`, and finished at
//! shutdown before the bdevs are unregistered (reverse order).
//!
//! The framework knows no subsystem: an app passes their
//! [`SubsystemDef`]s in [`crate::AppOptions::subsystems`] (bdev_tgt passes
//! nvmf), so a test or bdevperf builds an app without them.

use std::sync::Arc;

use bdevkit::bdev::BdevManager;
use bdevkit::error::BoxError;
use bdevkit::thread::{RuntimeHandle, ThreadHandle};
use bdevkit_jsonrpc::MethodRegistry;
use serde_json::Value;

/// What a subsystem is created with.
#[derive(Debug)]
pub struct SubsystemCtx<'a> {
    /// The method registry: register the subsystem's RPCs here.
    pub registry: &'a MethodRegistry,
    /// The bdev layer.
    pub mgr: &'a BdevManager,
    /// The reactors.
    pub runtime: &'a RuntimeHandle,
}

/// A running subsystem.
pub trait AppSubsystem: Send + Sync {
    /// Required. Called once by `framework_start_init` (or at start
    /// without `--wait-for-rpc`), on the app thread, after the bdev
    /// modules' init and before the RUNTIME part of the config.
    fn init(&self) -> Result<(), BoxError>;

    /// Required. The subsystem's `save_config` entries
    /// (`framework_get_config NAME`), each `{"method", "params"}` in an
    /// order that replays; `None` writes `"config": null`.
    fn config_json(&self) -> Option<Vec<Value>>;

    /// Required. Called once at shutdown on the app thread, after the RPC
    /// server closed and before the bdevs are unregistered; `done` must be
    /// called (from any thread) when the subsystem has let go of them.
    fn fini(&self, done: Box<dyn FnOnce() + Send>);
}

/// A subsystem an app links: its name, dependencies and constructor.
#[derive(Clone, Copy)]
pub struct SubsystemDef {
    /// Name (`nvmf`): `framework_get_subsystems`, config file sections.
    pub name: &'static str,
    /// Subsystems it needs initialised first (`["bdev"]`).
    pub depends_on: &'static [&'static str],
    /// Creates the subsystem and registers its RPCs (at app start).
    pub create: fn(&SubsystemCtx<'_>) -> Result<Arc<dyn AppSubsystem>, BoxError>,
}

impl std::fmt::Debug for SubsystemDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubsystemDef")
            .field("name", &self.name)
            .field("depends_on", &self.depends_on)
            .finish()
    }
}

/// A created subsystem with its definition.
#[derive(Clone)]
pub(crate) struct Running {
    pub def: SubsystemDef,
    pub sub: Arc<dyn AppSubsystem>,
}

/// Finishes `subs` one after another (SPDK: reverse initialisation
/// order), then runs `then` on `thread` (the app thread).
pub(crate) fn fini_subsystems(
    mut subs: Vec<Running>,
    thread: Option<ThreadHandle>,
    then: impl FnOnce() + Send + 'static,
) {
    if subs.is_empty() {
        return then();
    }
    let r = subs.remove(0);
    tracing::info!(subsystem = r.def.name, "finishing subsystem");
    r.sub.fini(Box::new(move || {
        let t = thread.clone();
        let next = move || fini_subsystems(subs, thread, then);
        match t {
            Some(t) => {
                if t.send_msg(next).is_err() {
                    tracing::warn!("app thread gone while finishing subsystems");
                }
            }
            None => next(),
        }
    }));
}
