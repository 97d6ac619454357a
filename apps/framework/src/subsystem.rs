//! Framework subsystems above the bdev layer (SPDK's `spdk_subsystem`):
//! the NVMe-oF target is one. A subsystem is created when the app starts
//! (so that its STARTUP-time RPCs answer from the first request),
//! initialised with the framework (`framework_start_init`, after the bdev
//! modules), listed by `framework_get_subsystems` after `bdev` with its
//! dependencies, saved by `framework_get_config NAME`, and finished at
//! shutdown before the bdevs are unregistered (reverse order).
//!
//! [`crate::SUBSYSTEMS`] names every subsystem and its dependencies; an
//! app links the implementations it wants as [`SubsystemDef`]s in
//! [`crate::AppOptions::subsystems`] (bdev_tgt passes nvmf), so a test or
//! bdevperf builds an app without them.

use std::sync::Arc;

use bdevkit::bdev::BdevManager;
use bdevkit::error::BoxError;
use bdevkit::thread::{RuntimeHandle, ThreadHandle};
use bdevkit_jsonrpc::MethodRegistry;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::Subsystem;

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

/// A subsystem an app links: its name and constructor (its dependencies
/// are in [`crate::SUBSYSTEMS`]).
#[derive(Clone, Copy)]
pub struct SubsystemDef {
    /// Name (`nvmf`), one of [`crate::SUBSYSTEMS`] other than `bdev`.
    pub name: &'static str,
    /// Creates the subsystem and registers its RPCs (at app start).
    pub create: fn(&SubsystemCtx<'_>) -> Result<Arc<dyn AppSubsystem>, BoxError>,
}

impl std::fmt::Debug for SubsystemDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubsystemDef")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A created subsystem with its table entry.
#[derive(Clone)]
pub(crate) struct Running {
    pub info: &'static Subsystem,
    pub sub: Arc<dyn AppSubsystem>,
}

/// Creates the subsystems of `defs` in [`crate::SUBSYSTEMS`]' order
/// (initialisation order). A name the table lacks, `bdev` (the
/// framework's own), a name given twice, or a subsystem whose dependency
/// the app does not link, fails.
pub(crate) fn create_subsystems(
    defs: &[SubsystemDef],
    ctx: &SubsystemCtx<'_>,
) -> Result<Vec<Running>> {
    let mut picked: Vec<(usize, &SubsystemDef)> = Vec::with_capacity(defs.len());
    for def in defs {
        let pos = crate::SUBSYSTEMS
            .iter()
            .position(|s| s.name == def.name)
            .filter(|_| !crate::BUILTIN_SUBSYSTEMS.contains(&def.name))
            .ok_or_else(|| Error::UnknownSubsystem(def.name.to_string()))?;
        if picked.iter().any(|(p, _)| *p == pos) {
            return Err(Error::UnknownSubsystem(def.name.to_string()));
        }
        picked.push((pos, def));
    }
    picked.sort_by_key(|(p, _)| *p);
    let mut out: Vec<Running> = Vec::with_capacity(picked.len());
    for (pos, def) in picked {
        let info = &crate::SUBSYSTEMS[pos];
        if let Some(missing) = info.depends_on.iter().find(|d| {
            !crate::BUILTIN_SUBSYSTEMS.contains(d) && !out.iter().any(|r| r.info.name == **d)
        }) {
            return Err(Error::SubsystemDependency {
                name: def.name.to_string(),
                missing: (*missing).to_string(),
            });
        }
        let sub = (def.create)(ctx).map_err(|source| Error::InitSubsystem {
            name: def.name.to_string(),
            source,
        })?;
        out.push(Running { info, sub });
    }
    Ok(out)
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
    tracing::info!(subsystem = r.info.name, "finishing subsystem");
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
