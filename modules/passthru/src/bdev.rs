//! The passthru module, its bdev, its channel and its I/O path.
//!
//! Read top to bottom: the module (configurations and examine), attaching
//! to a base, the bdev's operations, then the I/O path (`submit`).
//!
//! Everything comes from the bdev layer's module face,
//! [`bdevkit::bdev::module`]. What every virtual bdev does the same way
//! comes from its [`vbdev`] building blocks: the list of configurations
//! ([`VbdevConfigs`](vbdev::VbdevConfigs), made a module by
//! [`VbdevModule`]), the open and claimed base and what a bdev covering it
//! keeps ([`Stacked`], its events handled by [`StackedBdev`]), and
//! forwarding an I/O to the base ([`vbdev::forward`]). Each use below says
//! what the helper does for us, so this file still shows everything a
//! virtual bdev owes.

use std::sync::Arc;

use bdevkit::bdev::module::vbdev::{self, Stacked, StackedBdev, VbdevModule};
use bdevkit::bdev::module::{
    Bdev, BdevChannel, BdevIo, BdevManager, BdevOps, BoxError, Done, Error, IoStatus, IoType,
    ModuleIo, Result,
};
use serde_json::{json, Value};

use crate::rpc::PassthruCreateParams;
use crate::{MODULE, NAMESPACE_UUID, PRODUCT_NAME};

// ---------------------------------------------------------------------------
// The module: configurations and examine
// ---------------------------------------------------------------------------

// What the module needs to know about a configuration (its
// `VbdevConfig`): it is the configuration of one bdev in SPDK's shape,
// named by its `name`, over the base `base_bdev_name` names, recreated by
// `bdev_passthru_create`, attached by `attach` below; a saved config
// records the UUID the bdev got (generated or configured), so that a
// replay recreates the same bdev. (A configuration of another shape
// implements `VbdevConfig` itself: see `modules/error`.)
vbdev::stacked_config!(PassthruCreateParams, MODULE, "bdev_passthru_create", attach);

/// The passthru module: its configurations (`bdev_passthru_create` calls
/// still in force), whether or not their base exists yet, in a
/// [`VbdevModule`], whose `BdevModule` does the rest: it examines (every
/// new bdev is offered to the configurations waiting for it, by name or
/// alias, so a passthru configured before its base attaches when the base
/// registers), and its saved config is one `bdev_passthru_create` per
/// configuration, attached or waiting, so that a replay recreates all of
/// them in any order.
///
/// The module never stores the [`BdevManager`]: the manager owns the
/// module, so that would be a reference cycle. Every hook gets the manager
/// as an argument instead. The configurations' lock is never held while a
/// bdev registers: registration examines the new bdev, which may call back
/// into this module.
pub type PassthruModule = VbdevModule<PassthruCreateParams>;

/// `bdev_passthru_create`: records the configuration, then attaches at once
/// if the base exists (`configure`). A base that is missing, or going
/// away, leaves the configuration waiting for examine; any other failure
/// forgets it again.
pub(crate) fn create(mgr: &BdevManager, params: PassthruCreateParams) -> Result<String> {
    if params.name.is_empty() || params.base_bdev_name.is_empty() {
        return Err(Error::InvalidArg("names must not be empty".into()));
    }
    let name = params.name.clone();
    PassthruModule::of(mgr)?.configure(mgr, params)?;
    Ok(name)
}

// ---------------------------------------------------------------------------
// Attaching to a base
// ---------------------------------------------------------------------------

/// Opens and claims `base`, then registers the passthru bdev on it.
fn attach(mgr: &BdevManager, cfg: &PassthruCreateParams, base: &Bdev) -> Result<Bdev> {
    // The passthru bdev looks like its base: same geometry, metadata
    // layout and alignment needs, and since its blocks are the base's
    // blocks, the same I/O boundary (`props_mirroring`); its UUID is the
    // configured one or derived from the base's.
    let props = vbdev::props_mirroring(base, &cfg.name, PRODUCT_NAME, cfg.uuid, &NAMESPACE_UUID);
    // `Stacked::register` opens the base and claims it exclusive_write: we
    // become its only writer (EPERM if another module claimed it first;
    // closing the descriptor, in `destruct`, releases the claim). It
    // builds our bdev on it, has the base's events (on this thread) reach
    // it, registers it, and delivers a removal of the base that began
    // while we were being built.
    let bdev = Stacked::register(mgr, base, MODULE, props, |stacked| {
        Arc::new(PassthruBdev { stacked })
    })?;
    tracing::info!(bdev = %cfg.name, base = %base.name(), "passthru bdev created");
    Ok(bdev)
}

// ---------------------------------------------------------------------------
// The bdev
// ---------------------------------------------------------------------------

/// One passthru bdev.
#[derive(Debug)]
pub struct PassthruBdev {
    /// Its name, the open and claimed base (its descriptor, closed in
    /// `destruct`; the thread that opened it; whether it is going away),
    /// and the [`BdevManager`] it unregisters itself from when the base
    /// goes. That is a reference cycle (the manager's registry holds this
    /// bdev) which unregistration breaks: the registry drops the bdev when
    /// it is gone.
    stacked: Stacked,
}

/// Events of the base, on the thread that opened it, are what
/// [`StackedBdev`] does for a bdev covering its whole base: a removal
/// (delivered once; from then on `submit` fails new I/O through
/// `BaseBdev::is_removing`) unregisters this bdev if it still is (the name
/// could belong to a newer passthru by now) — our openers get a remove
/// event, and once they close and our channels are gone, `destruct` closes
/// the base; a resize of the base resizes this bdev (our openers get a
/// resize event).
impl StackedBdev for PassthruBdev {
    fn stacked(&self) -> &Stacked {
        &self.stacked
    }
}

/// Per-thread state: this thread's channel to the base.
#[derive(Debug)]
pub struct PassthruChannel {
    base: BdevChannel,
}

impl BdevOps for PassthruBdev {
    type Channel = PassthruChannel;

    /// Called on each thread that first uses the bdev: take this thread's
    /// channel to the base. It is released (on this thread) when our
    /// channel is destroyed.
    fn create_channel(&self) -> std::result::Result<PassthruChannel, BoxError> {
        Ok(PassthruChannel {
            base: self.stacked.base().channel()?,
        })
    }

    /// Forward `io` to the base as a child I/O.
    #[inline]
    fn submit(&self, ch: &PassthruChannel, io: BdevIo) {
        if self.stacked.base().is_removing() {
            // The base is going away: fail new I/O, later (never complete
            // inside `submit`).
            return io.complete_deferred(IoStatus::Aborted);
        }
        // `forward` takes a child from this thread's pool (none left: the
        // parent completes with NoMem and the bdev layer retries it), gives
        // it the same request (type, range, data segments, NVMe command)
        // and tag (so an abort forwarded below finds its target) together
        // with the parent itself (it owns the data buffers the child's
        // segments describe, and rides with the child until it completes)
        // and submits it; a child the base rejects fails the parent, later.
        // We only choose the completion: `complete_parent`, a plain
        // function that completes the parent with the child's status. No
        // allocation, no lock.
        vbdev::forward(&ch.base, io, |child| {
            child.on_done_fn(vbdev::complete_parent);
        });
    }

    /// Whatever the base serves (write zeroes included: the base's layer
    /// emulates it if its module lacks it).
    fn io_type_supported(&self, io_type: IoType) -> bool {
        self.stacked.supports(io_type)
    }

    /// Called once every opener closed and every channel is gone: close
    /// the base (releasing the claim) on the thread that opened it.
    fn destruct(&self, done: Done) {
        // If that thread is gone the message is dropped, which closes the
        // base and signals `done` too.
        self.stacked.close(done);
    }

    fn dump_info_json(&self) -> Value {
        let s = &self.stacked;
        json!({"passthru": {"name": s.name(), "base_bdev_name": s.base_bdev().name()}})
    }
}
