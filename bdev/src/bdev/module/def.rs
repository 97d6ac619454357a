//! [`ModuleDef`]: what an application links of a bdev module — its name,
//! how it joins the bdev layer, its RPC methods and its log flags — so
//! that a module is one crate that exports one constant, and an app lists
//! the constants of the modules it links.

use crate::bdev::manager::BdevManager;

/// A log flag a module answers to (SPDK's `log_set_flag` names): turning
/// it on shows the debug messages of its `tracing` targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFlag {
    /// The flag's name, as SPDK spells it where SPDK has the component
    /// (`bdev_malloc`, `vbdev_passthru`, `bdev_raid`).
    pub name: &'static str,
    /// The `tracing` targets it turns on (crate paths: `bdevkit_malloc`).
    pub targets: &'static [&'static str],
    /// Other names accepted for it (`bdev_passthru` for `vbdev_passthru`).
    pub aliases: &'static [&'static str],
}

/// A bdev module as an application links it. `R` is the application's
/// method registry and `E` what registering a method fails with (the
/// core knows no RPC crate; apps use `bdevkit_jsonrpc`'s). Each module
/// crate exports one of these (`MODULE_DEF`); the app lists them in one
/// place.
pub struct ModuleDef<R: 'static, E: 'static> {
    /// Module name (`null`, `malloc`, ...): its RPC infix.
    pub name: &'static str,
    /// Adds the module to a bdev layer (`register(&mgr)`).
    pub register: fn(&BdevManager),
    /// Registers the module's RPC methods on the app's registry.
    pub register_rpcs: fn(&R, &BdevManager) -> Result<(), E>,
    /// The log flags of its components.
    pub log_flags: &'static [LogFlag],
}

impl<R, E> Clone for ModuleDef<R, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R, E> Copy for ModuleDef<R, E> {}

impl<R, E> std::fmt::Debug for ModuleDef<R, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleDef")
            .field("name", &self.name)
            .field("log_flags", &self.log_flags)
            .finish_non_exhaustive()
    }
}
