//! The configurations of a virtual bdev module: [`VbdevConfig`] (what one
//! configuration must tell), [`VbdevConfigs`] (the `bdev_<module>_create`
//! calls in force, attached or waiting for their base), and
//! [`VbdevModule`], the module made of them, whose [`BdevModule`]
//! (examine, saved config) comes with it.

use std::borrow::Cow;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::bdev::bdev::Bdev;
use crate::bdev::manager::{BdevManager, BdevModule};
use crate::error::{Error, Result};

/// A virtual bdev's configuration: the params of `bdev_<module>_create`,
/// as [`VbdevConfigs`] keeps them.
pub trait VbdevConfig: Clone + Serialize + Send + 'static {
    /// The module ([`crate::bdev::module::BdevModule::name`]) whose bdevs the
    /// configurations build.
    const MODULE: &'static str;

    /// The method that recreates a configuration in a saved config
    /// (`bdev_passthru_create`).
    const CREATE_METHOD: &'static str;

    /// What [`VbdevConfig::attach`] returns (the bdev, or the names of
    /// several).
    type Attached;

    /// Required. Opens and claims `base` and registers the bdev(s) of this
    /// configuration on it, on the calling thread (see
    /// [`super::BaseBdev::open`]).
    fn attach(&self, mgr: &BdevManager, base: &Bdev) -> Result<Self::Attached>;

    /// Required. The base bdev, by name or alias, as configured.
    fn base_name(&self) -> &str;

    /// Required. The configuration's name, unique among the module's
    /// configurations: the name of the bdev it builds (passthru, delay,
    /// error), or what names the configuration of a module that builds
    /// several bdevs from one (split: its base).
    fn name(&self) -> Cow<'_, str>;

    /// Optional. Whether the configuration's bdevs are registered, so that
    /// examine leaves it alone. Default: a bdev called [`name`](Self::name)
    /// exists.
    fn is_attached(&self, mgr: &BdevManager) -> bool {
        mgr.get(&self.name()).is_some()
    }

    /// Optional. What a second configuration with the same name fails
    /// with. Default: [`Error::Exists`] with the name.
    fn duplicate_error(&self) -> Error {
        Error::Exists(self.name().into_owned())
    }

    /// Optional. Where a saved config records the UUID the bdev got
    /// (generated or configured), so that a replay recreates it with the
    /// same UUID. Default `None`: the configuration is saved as it was
    /// given.
    fn uuid_mut(&mut self) -> Option<&mut Option<Uuid>> {
        None
    }

    /// Optional. The `params` of the saved-config entry. Default: the
    /// configuration, serialised.
    fn saved_params(&self) -> Value {
        json!(self)
    }
}

/// The configurations of one virtual bdev module (the
/// `bdev_<module>_create` calls still in force), whether or not their
/// base exists yet.
///
/// A configuration is recorded first and attached when its base is there:
/// at once by [`VbdevConfigs::create`], or later when the base registers,
/// from the module's `examine_config` through [`VbdevConfigs::waiting_for`].
/// Creation order does not matter, so a saved config replays in any order,
/// and a base that is removed and comes back gets its virtual bdev back.
///
/// The lock inside is never held while a bdev registers: registration
/// examines the new bdev, which may call back into the module.
#[derive(Debug)]
pub struct VbdevConfigs<P> {
    list: Mutex<Vec<P>>,
}

impl<P> Default for VbdevConfigs<P> {
    fn default() -> Self {
        VbdevConfigs {
            list: Mutex::new(Vec::new()),
        }
    }
}

impl<P: VbdevConfig> VbdevConfigs<P> {
    /// `bdev_<module>_create`, after the module's own checks: records
    /// `params`, and if the base exists calls `attach(&params, &base)` (on
    /// this thread, without the lock held).
    ///
    /// Returns `Some` with what `attach` returned, or `None` when the
    /// configuration waits for its base: the base is missing, or `attach`
    /// found it going away (`NotFound`).
    ///
    /// Errors: [`VbdevConfig::duplicate_error`] when a configuration has
    /// that name; any other error of `attach`, after which the
    /// configuration is forgotten again.
    pub fn create<T>(
        &self,
        mgr: &BdevManager,
        params: P,
        attach: impl FnOnce(&P, &Bdev) -> Result<T>,
    ) -> Result<Option<T>> {
        {
            let mut list = self.list.lock();
            let name = params.name();
            if list.iter().any(|c| c.name() == name) {
                return Err(params.duplicate_error());
            }
            list.push(params.clone());
        }
        let Some(base) = mgr.get(params.base_name()) else {
            return Ok(None);
        };
        match attach(&params, &base) {
            Ok(t) => Ok(Some(t)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => {
                self.remove(&params.name());
                Err(e)
            }
        }
    }

    /// The configurations waiting for `bdev` (for `examine_config`): those
    /// whose base is `bdev` (by name or alias) and whose bdevs are not
    /// registered. Copies, so that the caller attaches them without the
    /// lock held.
    #[must_use]
    pub fn waiting_for(&self, mgr: &BdevManager, bdev: &Bdev) -> Vec<P> {
        self.list
            .lock()
            .iter()
            .filter(|c| bdev.has_name(c.base_name()) && !c.is_attached(mgr))
            .cloned()
            .collect()
    }

    /// Forgets the configuration called `name`; returns whether there was
    /// one.
    pub fn remove(&self, name: &str) -> bool {
        let mut list = self.list.lock();
        let before = list.len();
        list.retain(|c| c.name() != name);
        list.len() != before
    }

    /// Changes the configuration called `name` with `f` (a setting changed
    /// at run time, so that a re-attach or a saved config keeps it);
    /// returns whether there is one.
    pub fn update(&self, name: &str, f: impl FnOnce(&mut P)) -> bool {
        match self.list.lock().iter_mut().find(|c| c.name() == name) {
            Some(c) => {
                f(c);
                true
            }
            None => false,
        }
    }

    /// `bdev_<module>_delete` for a module that builds one bdev per
    /// configuration: forgets the configuration `name` and unregisters the
    /// module's bdev of that name. `done` gets `Ok` on the calling thread
    /// once the bdev is gone, `Ok` at once when there was only a
    /// configuration waiting for its base, and `NotFound` when there was
    /// neither.
    pub fn delete(
        &self,
        mgr: &BdevManager,
        name: &str,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        let had_config = self.remove(name);
        let name2 = name.to_string();
        mgr.unregister_by_name(name, P::MODULE, move |r| match r {
            // A configuration still waiting for its base has no bdev.
            Err(Error::NotFound(_)) if had_config => done(Ok(())),
            Err(_) => done(Err(Error::NotFound(name2))),
            Ok(()) => done(Ok(())),
        });
    }

    /// `BdevModule::config_json`: one
    /// `{"method": CREATE_METHOD, "params"}` per configuration, attached or
    /// waiting, in creation order, with the UUID the bdev got where
    /// [`VbdevConfig::uuid_mut`] says.
    #[must_use]
    pub fn config_json(&self, mgr: &BdevManager) -> Vec<Value> {
        self.list
            .lock()
            .iter()
            .map(|c| {
                let mut p = c.clone();
                if let Some(uuid) = p.uuid_mut() {
                    if let Some(b) = mgr.get(&c.name()).filter(|b| b.module_name() == P::MODULE) {
                        *uuid = Some(b.uuid());
                    }
                }
                json!({"method": P::CREATE_METHOD, "params": p.saved_params()})
            })
            .collect()
    }
}

/// A virtual bdev module made of its configurations (`P`, which knows
/// how one attaches, [`VbdevConfig::attach`]). Its [`BdevModule`] comes
/// with it: it examines (every new bdev is offered to the configurations
/// waiting for it, by name or alias, so a configuration made before its
/// base attaches when the base registers), and its saved config is one
/// create call per configuration, attached or waiting, so a replay
/// recreates all of them in any order. A module crate names it
/// (`pub type PassthruModule = VbdevModule<PassthruCreateParams>;`) and
/// adds its own methods as functions over it.
#[derive(Debug)]
pub struct VbdevModule<P> {
    configs: VbdevConfigs<P>,
}

impl<P> Default for VbdevModule<P> {
    fn default() -> Self {
        VbdevModule {
            configs: VbdevConfigs::default(),
        }
    }
}

impl<P: VbdevConfig> VbdevModule<P> {
    /// Adds the module to `mgr`.
    pub fn register(mgr: &BdevManager) {
        mgr.register_module(Arc::new(Self::default()));
    }

    /// The module registered with `mgr` (`InvalidArg` when it is not).
    pub fn of(mgr: &BdevManager) -> Result<Arc<Self>> {
        mgr.module_as::<Self>(P::MODULE)
            .ok_or_else(|| Error::InvalidArg(format!("the {} module is not registered", P::MODULE)))
    }

    /// The configurations.
    pub fn configs(&self) -> &VbdevConfigs<P> {
        &self.configs
    }

    /// `bdev_<module>_delete` of a module that keeps nothing else: forgets
    /// the configuration `name` and unregisters its bdev in the module
    /// registered with `mgr` ([`VbdevConfigs::delete`]); `done` gets the
    /// outcome on the calling thread.
    pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
        match Self::of(mgr) {
            Ok(m) => m.configs.delete(mgr, name, done),
            Err(e) => done(Err(e)),
        }
    }

    /// Records `params` and attaches at once when the base exists: `None`
    /// when it waits for its base (see [`VbdevConfigs::create`]). Call it
    /// from `bdev_<module>_create` after the module's own checks.
    pub fn configure(&self, mgr: &BdevManager, params: P) -> Result<Option<P::Attached>> {
        let (name, base) = (params.name().into_owned(), params.base_name().to_string());
        let attached = self
            .configs
            .create(mgr, params, |cfg, base| cfg.attach(mgr, base))?;
        if attached.is_none() {
            tracing::info!(module = P::MODULE, config = %name, base = %base,
                "creation deferred until the base bdev appears");
        }
        Ok(attached)
    }
}

impl<P: VbdevConfig> BdevModule for VbdevModule<P> {
    fn name(&self) -> &'static str {
        P::MODULE
    }

    fn has_examine(&self) -> bool {
        true
    }

    /// Attaches every configuration waiting for `bdev` (by name or alias),
    /// on the registering thread, without the configurations' lock held.
    fn examine_config(&self, mgr: &BdevManager, bdev: &Bdev) {
        for cfg in self.configs.waiting_for(mgr, bdev) {
            if let Err(e) = cfg.attach(mgr, bdev) {
                tracing::error!(module = P::MODULE, config = %cfg.name(),
                    base = %bdev.name(), error = %e, "cannot attach to base bdev");
            }
        }
    }

    fn config_json(&self, mgr: &BdevManager) -> Vec<Value> {
        self.configs.config_json(mgr)
    }
}
