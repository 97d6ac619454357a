//! The passthru module, its bdev, its channel and its I/O path.
//!
//! Read top to bottom: the module (configurations and examine), attaching
//! to a base, the bdev's operations, then the I/O path (`submit`).
//!
//! Everything comes from the bdev layer's module face,
//! [`bdevkit::bdev::module`]. What every virtual bdev does the same way
//! comes from its [`vbdev`] building blocks: the list of configurations
//! ([`VbdevConfigs`], made a module by [`VbdevModule`]), the open and
//! claimed base ([`BaseBdev`], its events handled by [`StackedBdev`]), and
//! forwarding an I/O to the base ([`vbdev::forward`]). Each use below says
//! what the helper does for us, so this file still shows everything a
//! virtual bdev owes.

use std::borrow::Cow;
use std::sync::Arc;

use bdevkit::bdev::module::vbdev::{self, BaseBdev, StackedBdev, VbdevConfig, VbdevModule};
use bdevkit::bdev::module::{
    Bdev, BdevChannel, BdevIo, BdevManager, BdevOps, BdevProps, BoxError, Done, Error, IoStatus,
    IoType, ModuleIo, Result,
};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::rpc::PassthruCreateParams;
use crate::{MODULE, NAMESPACE_UUID, PRODUCT_NAME};

// ---------------------------------------------------------------------------
// The module: configurations and examine
// ---------------------------------------------------------------------------

/// What the module needs to know about a configuration: its base, its
/// name, how a saved config recreates it, and how it attaches.
impl VbdevConfig for PassthruCreateParams {
    const MODULE: &'static str = MODULE;
    const CREATE_METHOD: &'static str = "bdev_passthru_create";
    type Attached = Bdev;

    /// Builds the passthru bdev on `base` (below).
    fn attach(&self, mgr: &BdevManager, base: &Bdev) -> Result<Bdev> {
        attach(mgr, self, base)
    }

    fn base_name(&self) -> &str {
        &self.base_bdev_name
    }

    /// One passthru bdev per configuration, with the configured name.
    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.name)
    }

    /// A saved config records the UUID the bdev got (generated or
    /// configured), so that a replay recreates the same bdev.
    fn uuid_mut(&mut self) -> Option<&mut Option<Uuid>> {
        Some(&mut self.uuid)
    }
}

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
    // `register_over` opens the base and claims it exclusive_write: we
    // become its only writer (EPERM if another module claimed it first;
    // closing the descriptor, `BaseBdev::close`, releases the claim). It
    // builds our bdev on it, has the base's events (on this thread) reach
    // it, registers it, and delivers a removal of the base that began
    // while we were being built.
    let bdev = BaseBdev::register_over(mgr, base, MODULE, props(cfg, base), |base_bdev| {
        Arc::new(PassthruBdev {
            name: cfg.name.clone(),
            base: base_bdev,
            mgr: mgr.clone(),
        })
    })?;
    tracing::info!(bdev = %cfg.name, base = %base.name(), "passthru bdev created");
    Ok(bdev)
}

/// The passthru bdev looks like its base: same geometry, metadata layout
/// and alignment needs (`props_over`), and since its blocks are the base's
/// blocks, the same I/O boundary.
fn props(cfg: &PassthruCreateParams, base: &Bdev) -> BdevProps {
    let mut p = vbdev::props_over(base, &cfg.name, PRODUCT_NAME, base.num_blocks());
    p.uuid = Some(
        cfg.uuid
            .unwrap_or_else(|| Uuid::new_v5(&NAMESPACE_UUID, base.uuid().as_bytes())),
    );
    p.optimal_io_boundary = base.props().optimal_io_boundary;
    p
}

// ---------------------------------------------------------------------------
// The bdev
// ---------------------------------------------------------------------------

/// One passthru bdev.
///
/// It holds a [`BdevManager`] to unregister itself when its base goes.
/// That is a reference cycle (the manager's registry holds this bdev) which
/// unregistration breaks: the registry drops the bdev when it is gone.
pub struct PassthruBdev {
    name: String,
    /// The open, claimed base: its descriptor (closed in `destruct`), the
    /// thread that opened it, and whether it is going away.
    base: BaseBdev,
    mgr: BdevManager,
}

impl std::fmt::Debug for PassthruBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassthruBdev")
            .field("name", &self.name)
            .field("base", &self.base.bdev().name())
            .finish_non_exhaustive()
    }
}

impl PassthruBdev {
    /// The base bdev.
    #[must_use]
    pub fn base(&self) -> &Bdev {
        self.base.bdev()
    }
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
    fn vbdev_name(&self) -> &str {
        &self.name
    }

    fn base(&self) -> &BaseBdev {
        &self.base
    }

    fn manager(&self) -> &BdevManager {
        &self.mgr
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
            base: self.base.channel()?,
        })
    }

    /// Forward `io` to the base as a child I/O.
    #[inline]
    fn submit(&self, ch: &PassthruChannel, io: BdevIo) {
        if self.base.is_removing() {
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
        self.base.bdev().supports(io_type)
    }

    /// Called once every opener closed and every channel is gone: close
    /// the base (releasing the claim) on the thread that opened it.
    fn destruct(&self, done: Done) {
        // If that thread is gone the message is dropped, which closes the
        // base and signals `done` too.
        self.base.close(move || done.done());
    }

    fn dump_info_json(&self) -> Value {
        json!({"passthru": {"name": self.name, "base_bdev_name": self.base.bdev().name()}})
    }
}
