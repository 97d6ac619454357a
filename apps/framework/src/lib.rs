//! # bdevkit-app
//!
//! The application framework that `bdev_tgt` and `bdevperf` embed: SPDK's
//! "app framework" (`spdk_app_start`), in Rust.
//!
//! An [`App`] owns, in start order:
//!
//! 1. the **runtime**: one reactor per core of the `-m` mask, the app thread
//!    on the first one; polling, or sleeping when idle with
//!    `--interrupt-mode`;
//! 2. the **bdev layer** ([`bdevkit::bdev::BdevManager`]) with the modules
//!    the app links ([`ModuleDef`], [`default_modules`]);
//! 3. the **method registry**: the framework methods (`spdk_get_version`,
//!    `framework_*`, `thread_*`, `spdk_kill_instance`), the generic bdev
//!    methods (`bdev_get_bdevs`, `bdev_get_iostat`, ...) and every module's
//!    methods, with SPDK's STARTUP/RUNTIME states;
//! 4. the **RPC server** on a unix socket (when one is given), polled from a
//!    poller on the app thread (or woken by its fd in interrupt mode);
//! 5. the **JSON config** (`--json`): the STARTUP pass before
//!    initialisation, the RUNTIME pass after it ([`config`]).
//!
//! Without `--wait-for-rpc` the app initialises at once and
//! [`App::start`] returns with the RPC state RUNTIME; with it, the app
//! serves STARTUP methods until `framework_start_init`. [`App::wait`]
//! blocks until SIGINT/SIGTERM, `spdk_kill_instance` or the
//! [`StopHandle`], then unregisters every bdev (top of each stack first),
//! runs module `fini`, stops the reactors and removes the socket.
//!
//! ```
//! use bdevkit_app::{default_modules, App, CommonArgs};
//! use bdevkit_jsonrpc::Responder;
//! use serde_json::json;
//!
//! let args = CommonArgs { interrupt_mode: true, ..CommonArgs::default() };
//! let app = App::start(&args, &default_modules())?;
//!
//! // Call a method in-process, as a client would over the socket.
//! let registry = app.registry().clone();
//! let answer = app.app_thread().run_sync(move || {
//!     let (resp, rx) = Responder::channel();
//!     let p = json!({"name": "Null0", "block_size": 512, "num_blocks": 1024});
//!     registry.dispatch("bdev_null_create", Some(p), resp);
//!     rx
//! })?.recv()?;
//! assert_eq!(answer, Ok(json!("Null0")));
//! assert_eq!(app.mgr().bdevs().len(), 1);
//!
//! app.shutdown()?; // unregisters Null0, stops the reactors
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod app;
mod args;
pub mod config;
mod error;
pub mod logging;
mod panic;
pub mod rpc;
mod shared;
mod subsystem;

pub use app::{App, AppOptions, ModuleDef, StopHandle, StopReason};
pub use args::{parse_size, CommonArgs};
/// The error-chain printer, re-exported for the apps (it lives in `bdevkit-jsonrpc`).
pub use bdevkit_jsonrpc::ErrorChain;
pub use config::{load_config, JsonConfig, LoadOptions};
pub use error::{Error, Result};
pub use panic::REACTOR_PANIC_EXIT;
pub use subsystem::{AppSubsystem, SubsystemCtx, SubsystemDef};

/// `bdev_tgt`'s default RPC socket.
pub const DEFAULT_RPC_SOCKET: &str = "/var/tmp/bdevkit.sock";

/// A subsystem of the framework, as `framework_get_subsystems` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subsystem {
    /// Its name: `framework_get_config NAME`, the `subsystem` of a config
    /// file's entry.
    pub name: &'static str,
    /// The subsystems it needs, initialised before it (SPDK's
    /// `SPDK_SUBSYSTEM_DEPEND`); only ones this list has.
    pub depends_on: &'static [&'static str],
}

/// The framework's own subsystem, which every app has.
pub const BDEV_SUBSYSTEM: &str = "bdev";

/// The framework's keyring (SPDK's `keyring` subsystem, with its
/// `keyring_file` keys), which every app has, before `bdev`: bdevs and the
/// NVMe-oF target name keys from it. Modules find it with
/// `mgr.service::<bdevkit_keyring::Keyring>()`.
pub const KEYRING_SUBSYSTEM: &str = "keyring";

/// Subsystems every app has: the framework's own.
pub const BUILTIN_SUBSYSTEMS: &[&str] = &[KEYRING_SUBSYSTEM, BDEV_SUBSYSTEM];

/// The subsystems this framework knows, in initialisation order (each
/// after those it depends on). `keyring` and `bdev` are the framework's own; an app links
/// each other one with a [`SubsystemDef`] of that name in
/// [`AppOptions::subsystems`] (bdev_tgt links `nvmf` and `vhost_blk`, bdevperf none). For
/// the subsystems an app has, in this order, `framework_get_subsystems`
/// lists them with these dependencies, `framework_get_config` answers their
/// config (`null` for one without a config writer, as SPDK), and config
/// file entries are replayed; entries of the others are skipped with a
/// notice, so a bdev_tgt config loads into bdevperf. A new subsystem is one
/// line here plus its [`SubsystemDef`].
pub const SUBSYSTEMS: &[Subsystem] = &[
    Subsystem {
        name: KEYRING_SUBSYSTEM,
        depends_on: &[],
    },
    Subsystem {
        name: BDEV_SUBSYSTEM,
        depends_on: &[KEYRING_SUBSYSTEM],
    },
    Subsystem {
        name: "nvmf",
        depends_on: &[BDEV_SUBSYSTEM, KEYRING_SUBSYSTEM],
    },
    Subsystem {
        name: "vhost_blk",
        depends_on: &[BDEV_SUBSYSTEM],
    },
];

include!(concat!(env!("OUT_DIR"), "/modules.rs"));

#[cfg(test)]
mod tests {
    use super::SUBSYSTEMS;

    #[test]
    fn subsystems_come_after_what_they_depend_on() {
        for (i, s) in SUBSYSTEMS.iter().enumerate() {
            assert!(
                SUBSYSTEMS[i + 1..].iter().all(|o| o.name != s.name),
                "{} listed twice",
                s.name
            );
            for d in s.depends_on {
                assert!(
                    SUBSYSTEMS[..i].iter().any(|o| o.name == *d),
                    "{} depends on {d}, which is not listed before it",
                    s.name
                );
            }
        }
        let builtin: Vec<&str> = SUBSYSTEMS[..super::BUILTIN_SUBSYSTEMS.len()]
            .iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(
            builtin,
            super::BUILTIN_SUBSYSTEMS,
            "the built-ins come first"
        );
    }

    /// Modules register (and `save_config` lists them) in the order
    /// `Cargo.toml` lists them, not alphabetically: null before malloc,
    /// as SPDK links them.
    #[test]
    fn default_modules_follow_the_manifest_order() {
        let manifest = include_str!("../Cargo.toml");
        let listed: Vec<String> = manifest
            .lines()
            .filter_map(|l| l.strip_prefix("bdevkit-"))
            .filter_map(|l| l.split(['.', ' ']).next())
            // Crate `bdevkit-zone-block` is module `zone_block`.
            .map(|n| n.replace('-', "_"))
            .collect();
        let names: Vec<&str> = super::default_modules().iter().map(|m| m.name).collect();
        let in_manifest: Vec<&str> = listed
            .iter()
            .map(String::as_str)
            .filter(|n| names.contains(n))
            .collect();
        assert_eq!(names, in_manifest);
        assert_eq!(&names[..2], ["null", "malloc"]);
    }
}
