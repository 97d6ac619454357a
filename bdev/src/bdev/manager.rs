//! [`BdevManager`]: the bdev layer of one application — its modules (and
//! the [`BdevModule`] trait they implement), options, the `BdevIo` pool,
//! and the registry's state. Registering, finding, opening and
//! unregistering bdevs is `registry.rs`.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde_json::Value;

use super::bdev::{Bdev, Callback};
use super::io::MgmtChannel;
use super::module::ops::Done;
use super::pool::{IoPool, PoolShared};
use crate::error::{BoxError, Error as BdevError};
use crate::thread::IoDevice;

/// Options of the bdev layer (`bdev_set_options`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BdevOptions {
    /// Most `BdevIo`s in use at once, all threads together.
    pub bdev_io_pool_size: u32,
    /// Free `BdevIo`s each thread keeps cached.
    pub bdev_io_cache_size: u32,
    /// Offer every new bdev to every module's examine.
    pub bdev_auto_examine: bool,
    /// Kept for `save_config` compatibility (no iobuf pools here).
    pub iobuf_small_cache_size: u32,
    /// Kept for `save_config` compatibility.
    pub iobuf_large_cache_size: u32,
}

impl Default for BdevOptions {
    fn default() -> Self {
        BdevOptions {
            bdev_io_pool_size: 65535,
            bdev_io_cache_size: 256,
            bdev_auto_examine: true,
            iobuf_small_cache_size: 128,
            iobuf_large_cache_size: 16,
        }
    }
}

/// A bdev module (SPDK's `spdk_bdev_module`).
///
/// `Any` is a supertrait so that a module's own code (its RPC handlers, its
/// `create`/`delete` functions) can reach its state through
/// [`BdevManager::module_as`].
pub trait BdevModule: Any + Send + Sync + 'static {
    /// Module name: also the RPC infix (`bdev_<name>_create`). Required.
    fn name(&self) -> &'static str;

    /// Optional. Called once by [`BdevManager::init_modules`], on the app
    /// thread, before any bdev of the module exists.
    fn init(&self, _mgr: &BdevManager) -> Result<(), BoxError> {
        Ok(())
    }

    /// Optional. Called once at shutdown, after every bdev is unregistered.
    fn fini(&self, _mgr: &BdevManager) {}

    /// Optional. Whether the module examines new bdevs (virtual bdev
    /// modules do). Such modules come first in module order, so that their
    /// module-level config is emitted before the bdevs they stack on.
    fn has_examine(&self) -> bool {
        false
    }

    /// Optional. Offered every new bdev, synchronously, on the registering
    /// thread: a virtual bdev whose configuration names this bdev as its
    /// base opens and claims it here and registers itself.
    fn examine_config(&self, _mgr: &BdevManager, _bdev: &Bdev) {}

    /// Optional. Offered every new bdev after `examine_config` (only to the
    /// claiming module if the bdev got an exclusive claim), for examination
    /// that needs I/O. Signal completion with `done` (dropping it counts).
    fn examine_disk(&self, _mgr: &BdevManager, _bdev: &Bdev, done: Done) {
        done.done();
    }

    /// Optional. Module-level entries of the `bdev` subsystem config
    /// (`framework_get_config bdev`), each `{"method", "params"}`. Modules
    /// whose bdevs SPDK emits at module level (malloc, null, passthru,
    /// split, delay, error) list them here; others use
    /// [`super::module::BdevOps::write_config_json`].
    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        Vec::new()
    }

    /// Optional. Entries that must replay after every bdev's own entry
    /// (before `bdev_wait_for_examine`): a step that needs bdevs created
    /// later than the module's own, such as a raid member to rebuild.
    fn config_json_after_bdevs(&self, _mgr: &BdevManager) -> Vec<Value> {
        Vec::new()
    }
}

/// The bdevs of a manager: in registration order, and by name or alias.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) bdevs: Vec<Bdev>,
    pub(crate) names: HashMap<String, Bdev>,
}

#[derive(Default)]
pub(crate) struct ExamineState {
    pub(crate) pending: usize,
    pub(crate) waiters: Vec<Callback>,
    pub(crate) allow: Vec<String>,
}

pub(crate) struct MgrShared {
    pub(crate) reg: Mutex<Registry>,
    modules: RwLock<Vec<Arc<dyn BdevModule>>>,
    pub(crate) opts: Mutex<BdevOptions>,
    pub(crate) pool: Arc<PoolShared>,
    pub(crate) mgmt: IoDevice<MgmtChannel>,
    pub(crate) examine: Mutex<ExamineState>,
    services: RwLock<Vec<Arc<dyn Any + Send + Sync>>>,
}

/// The bdev layer of one application: module list, registry, options and
/// the `BdevIo` pool. Cheap to clone.
#[derive(Clone)]
pub struct BdevManager(pub(crate) Arc<MgrShared>);

impl fmt::Debug for BdevManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BdevManager")
            .field("bdevs", &self.0.reg.lock().bdevs.len())
            .finish()
    }
}

impl Default for BdevManager {
    fn default() -> Self {
        Self::new(BdevOptions::default())
    }
}

impl BdevManager {
    /// A manager with no modules.
    #[must_use]
    pub fn new(opts: BdevOptions) -> Self {
        let pool = PoolShared::new(
            opts.bdev_io_pool_size as usize,
            opts.bdev_io_cache_size as usize,
        );
        let pool2 = Arc::clone(&pool);
        let mgmt = IoDevice::register("bdev_mgmt", move || {
            Ok(MgmtChannel {
                pool: IoPool::new(Arc::clone(&pool2)),
            })
        });
        BdevManager(Arc::new(MgrShared {
            reg: Mutex::new(Registry::default()),
            modules: RwLock::new(Vec::new()),
            opts: Mutex::new(opts),
            pool,
            mgmt,
            examine: Mutex::new(ExamineState::default()),
            services: RwLock::new(Vec::new()),
        }))
    }

    /// Makes `service` available to every module and consumer of this
    /// manager by its type (the app gives its keyring this way; the bdev
    /// layer knows nothing of it). A second service of the same type
    /// replaces the first.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use bdevkit::bdev::BdevManager;
    /// struct Keys(u32);
    /// let mgr = BdevManager::default();
    /// assert!(mgr.service::<Keys>().is_none());
    /// mgr.provide(Arc::new(Keys(1)));
    /// mgr.provide(Arc::new(Keys(2)));
    /// assert_eq!(mgr.service::<Keys>().unwrap().0, 2);
    /// ```
    pub fn provide<T: Any + Send + Sync>(&self, service: Arc<T>) {
        let mut s = self.0.services.write();
        s.retain(|x| !x.is::<T>());
        s.push(service);
    }

    /// The service of type `T` given by [`BdevManager::provide`].
    #[must_use]
    pub fn service<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let s = self.0.services.read();
        let x = s.iter().find(|x| x.is::<T>())?;
        Arc::clone(x).downcast::<T>().ok()
    }

    /// Adds a module. Modules that examine go before those that do not.
    pub fn register_module(&self, module: Arc<dyn BdevModule>) {
        let mut mods = self.0.modules.write();
        if mods.iter().any(|m| m.name() == module.name()) {
            tracing::warn!(module = module.name(), "module registered twice; ignored");
            return;
        }
        if module.has_examine() {
            let pos = mods
                .iter()
                .position(|m| !m.has_examine())
                .unwrap_or(mods.len());
            mods.insert(pos, module);
        } else {
            mods.push(module);
        }
    }

    /// Registered modules, in module order.
    #[must_use]
    pub fn modules(&self) -> Vec<Arc<dyn BdevModule>> {
        self.0.modules.read().clone()
    }

    /// The module called `name`.
    #[must_use]
    pub fn module(&self, name: &str) -> Option<Arc<dyn BdevModule>> {
        self.0
            .modules
            .read()
            .iter()
            .find(|m| m.name() == name)
            .map(Arc::clone)
    }

    /// The module called `name`, if it is a `T` (how a module's RPC
    /// handlers find the module's own state, e.g. the configurations a
    /// virtual bdev module keeps for bases that do not exist yet).
    #[must_use]
    pub fn module_as<T: BdevModule>(&self, name: &str) -> Option<Arc<T>> {
        let m = self.module(name)?;
        let any: Arc<dyn Any + Send + Sync> = m;
        any.downcast::<T>().ok()
    }

    /// Runs every module's `init`.
    pub fn init_modules(&self) -> Result<(), BdevError> {
        for m in self.modules() {
            m.init(self).map_err(|source| BdevError::ModuleInit {
                module: m.name().to_string(),
                source,
            })?;
        }
        Ok(())
    }

    /// Current options.
    #[must_use]
    pub fn options(&self) -> BdevOptions {
        self.0.opts.lock().clone()
    }

    /// Changes options (`bdev_set_options`). The pool must hold at least
    /// `cache × (threads + 1)` I/Os, as SPDK checks.
    pub fn set_options(&self, opts: BdevOptions, thread_count: usize) -> Result<(), BdevError> {
        let min = u64::from(opts.bdev_io_cache_size) * (thread_count as u64 + 1);
        if u64::from(opts.bdev_io_pool_size) < min {
            return Err(BdevError::PoolTooSmall {
                pool: opts.bdev_io_pool_size,
                cache: opts.bdev_io_cache_size,
            });
        }
        self.0.pool.resize(
            opts.bdev_io_pool_size as usize,
            opts.bdev_io_cache_size as usize,
        );
        *self.0.opts.lock() = opts;
        Ok(())
    }

    /// `BdevIo`s not in use or cached anywhere (for leak checks: equals the
    /// pool size minus what threads cache once all I/O completed).
    #[must_use]
    pub fn io_pool_available(&self) -> usize {
        self.0
            .pool
            .available
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Free `BdevIo`s cached on the calling thread.
    #[must_use]
    pub fn io_cached_on_this_thread(&self) -> usize {
        self.0
            .mgmt
            .get_channel()
            .map(|m| m.pool.cached())
            .unwrap_or(0)
    }
}
