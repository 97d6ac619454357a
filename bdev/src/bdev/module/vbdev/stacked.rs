//! A virtual bdev that covers its whole base (passthru, delay, error),
//! written once: what it keeps ([`Stacked`]: its name, its base, its
//! manager), the base's events that follow from it ([`StackedBdev`]), its
//! properties ([`props_mirroring`]), and the configuration of one
//! ([`stacked_config!`](crate::stacked_config)). One whose channels are
//! those of an io_device of its own is a
//! [`StackedWithDevice`](super::StackedWithDevice).

use std::fmt;
use std::sync::Arc;

use uuid::Uuid;

use super::base::{props_over, resize_own, unregister_own, BaseBdev, BaseEvents};
use crate::bdev::bdev::Bdev;
use crate::bdev::manager::BdevManager;
use crate::bdev::module::ops::{BdevOps, Done};
use crate::bdev::types::{BdevProps, IoType};
use crate::error::Result;

/// What every bdev covering its whole base keeps: the name it registered
/// with, its open and claimed base, and the manager it is registered with
/// (to unregister itself when the base goes: a reference cycle through the
/// manager's registry, which unregistration breaks).
pub struct Stacked {
    name: String,
    base: BaseBdev,
    mgr: BdevManager,
}

impl fmt::Debug for Stacked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stacked")
            .field("name", &self.name)
            .field("base", &self.base.bdev().name())
            .finish_non_exhaustive()
    }
}

impl Stacked {
    /// The parts of the bdev `name` over `base`, registered with `mgr`.
    #[must_use]
    pub fn new(name: impl Into<String>, base: BaseBdev, mgr: &BdevManager) -> Stacked {
        Stacked {
            name: name.into(),
            base,
            mgr: mgr.clone(),
        }
    }

    /// A stacked bdev's whole attach in one call: opens and claims `base`
    /// for `module` (as [`BaseBdev::open`]), builds the bdev on it with
    /// `make` (given its [`Stacked`], named `props.name`), has the base's
    /// events reach it, registers it with `props` and delivers a removal
    /// of the base that began meanwhile. Returns the registered bdev. On
    /// failure nothing is left: the bdev `make` built is dropped with its
    /// base, which closes it.
    pub fn register<T: BaseEvents + BdevOps>(
        mgr: &BdevManager,
        base: &Bdev,
        module: &'static str,
        props: BdevProps,
        make: impl FnOnce(Stacked) -> Arc<T>,
    ) -> Result<Bdev> {
        let (base_bdev, link) = BaseBdev::open::<T>(mgr, base, module)?;
        let t = make(Stacked::new(props.name.clone(), base_bdev, mgr));
        link.bind(&t);
        let bdev = mgr.register_bdev(module, props, Arc::clone(&t))?;
        link.catch_up();
        Ok(bdev)
    }

    /// The name the bdev registered with.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The open, claimed base.
    #[must_use]
    pub fn base(&self) -> &BaseBdev {
        &self.base
    }

    /// The base bdev.
    #[must_use]
    pub fn base_bdev(&self) -> &Bdev {
        self.base.bdev()
    }

    /// The manager the bdev is registered with.
    #[must_use]
    pub fn manager(&self) -> &BdevManager {
        &self.mgr
    }

    /// The registered bdev whose implementation is `ops`, while it is
    /// registered ([`super::own_bdev`]).
    #[must_use]
    pub fn own_bdev<B: BdevOps>(&self, ops: &B) -> Option<Bdev> {
        super::own_bdev(&self.mgr, &self.name, ops)
    }

    /// What the bdev serves: whatever the base serves (write zeroes
    /// included: the base's layer emulates it if its module lacks it).
    #[must_use]
    pub fn supports(&self, io_type: IoType) -> bool {
        self.base.bdev().supports(io_type)
    }

    /// `destruct`: closes the base (releasing the claim) on the thread
    /// that opened it, then signals `done` ([`BaseBdev::close`]).
    pub fn close(&self, done: Done) {
        self.base.close(move || done.done());
    }
}

/// A virtual bdev that covers its whole base (passthru, delay, error).
/// Implement it (the one accessor, [`StackedBdev::stacked`]), and its
/// [`BaseEvents`] come with it: when the base goes away the bdev
/// unregisters itself (its openers get a remove event, and `destruct`
/// follows once they closed); when the base is resized, so is the bdev.
pub trait StackedBdev: Send + Sync + 'static {
    /// Required. Its name, base and manager.
    fn stacked(&self) -> &Stacked;

    /// Optional. Called when the base goes away, before the bdev
    /// unregisters (e.g. to fail I/O it holds back, which would keep its
    /// channels alive).
    fn base_going(&self) {}
}

impl<T: StackedBdev + BdevOps> BaseEvents for T {
    fn base_bdev(&self) -> &BaseBdev {
        &self.stacked().base
    }

    fn base_removed(&self) {
        let s = self.stacked();
        tracing::info!(bdev = %s.name, base = %s.base.bdev().name(),
            "base bdev removed; unregistering");
        self.base_going();
        unregister_own(&s.mgr, &s.name, self);
    }

    fn base_resized(&self) {
        let s = self.stacked();
        resize_own(&s.mgr, &s.name, self, s.base.bdev().num_blocks());
    }
}

/// Properties of a bdev called `name` that mirrors its whole `base` block
/// for block (passthru, delay): [`props_over`] the whole base, the base's
/// `optimal_io_boundary` too, and UUID `uuid`, or where none is configured
/// one derived from the base's in the module's UUID `namespace` (so that
/// the bdev rebuilt on the same base gets the same UUID).
#[must_use]
pub fn props_mirroring(
    base: &Bdev,
    name: &str,
    product_name: &str,
    uuid: Option<Uuid>,
    namespace: &Uuid,
) -> BdevProps {
    let mut p = props_over(base, name, product_name, base.num_blocks());
    p.uuid = Some(uuid.unwrap_or_else(|| Uuid::new_v5(namespace, base.uuid().as_bytes())));
    p.optimal_io_boundary = base.props().optimal_io_boundary;
    // The same blocks, so the same zones: zone I/O forwards unchanged.
    p.zoned = base.props().zoned;
    p
}

/// The [`VbdevConfig`](super::VbdevConfig) of the configuration of one
/// stacked bdev in SPDK's shape (passthru, delay): named by its `name`
/// field, over the base its `base_bdev_name` field names, saved with the
/// UUID the bdev got in its `uuid` field (`Option<Uuid>`), attached by a
/// function of the module:
///
/// ```ignore
/// vbdev::stacked_config!(PassthruCreateParams, MODULE, "bdev_passthru_create", attach);
/// ```
///
/// is `impl VbdevConfig for PassthruCreateParams` with `MODULE`, that
/// `CREATE_METHOD`, `type Attached = Bdev`, `attach` calling
/// `attach(mgr, self, base)` (a `fn(&BdevManager, &Self, &Bdev) ->
/// Result<Bdev>`), and `base_name`, `name` and `uuid_mut` over those
/// fields. A configuration of another shape (error's, split's) implements
/// the trait itself.
#[macro_export]
macro_rules! stacked_config {
    ($params:ty, $module:expr, $method:expr, $attach:path) => {
        impl $crate::bdev::module::vbdev::VbdevConfig for $params {
            const MODULE: &'static str = $module;
            const CREATE_METHOD: &'static str = $method;
            type Attached = $crate::bdev::Bdev;

            fn attach(
                &self,
                mgr: &$crate::bdev::BdevManager,
                base: &$crate::bdev::Bdev,
            ) -> $crate::Result<$crate::bdev::Bdev> {
                $attach(mgr, self, base)
            }

            fn base_name(&self) -> &str {
                &self.base_bdev_name
            }

            fn name(&self) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed(&self.name)
            }

            fn uuid_mut(
                &mut self,
            ) -> ::std::option::Option<
                &mut ::std::option::Option<$crate::bdev::module::vbdev::Uuid>,
            > {
                ::std::option::Option::Some(&mut self.uuid)
            }
        }
    };
}
