//! The framework's own RPC methods (`spdk_get_version`, `framework_*`,
//! `thread_*`, `spdk_kill_instance`) and the generic bdev-layer methods
//! (`bdev_get_bdevs`, `bdev_get_iostat`, ...) and SPDK's `log_*` methods.
//! Module methods
//! (`bdev_null_create`, ...) live in the module crates.
//!
//! Handlers run on the app thread (where the server is polled), hold only a
//! weak reference to the app, and answer through their `Responder`, later
//! when the work is asynchronous. Parameters, result shapes, error codes and
//! messages follow SPDK (`shared/spec/spdk-interface-facts.md`, sections 1
//! and 2.1-2.2).

mod bdev;
mod framework;
mod log;

use std::sync::{Arc, Weak};

use bdevkit_jsonrpc::{Responder, RpcError};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::shared::AppShared;

pub use framework::{version_string, VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH};

/// Registers the framework and bdev-layer methods.
pub(crate) fn register(shared: &Arc<AppShared>) -> Result<()> {
    framework::register(shared).map_err(|source| Error::RegisterRpc {
        what: "framework".into(),
        source,
    })?;
    bdev::register(shared).map_err(|source| Error::RegisterRpc {
        what: "bdev".into(),
        source,
    })?;
    log::register(&shared.registry).map_err(|source| Error::RegisterRpc {
        what: "log".into(),
        source,
    })
}

/// Whether a request carried params (`null` counts as absent, as in SPDK).
fn has_params(params: Option<&Value>) -> bool {
    !matches!(params, None | Some(Value::Null))
}

/// Upgrades the handler's weak app reference, or answers that the app is
/// shutting down.
fn upgrade(weak: &Weak<AppShared>, resp: Responder) -> Option<(Arc<AppShared>, Responder)> {
    match weak.upgrade() {
        Some(s) => Some((s, resp)),
        None => {
            resp.err(RpcError::from_errno(libc::ESHUTDOWN));
            None
        }
    }
}

/// `-errno` with `strerror` text.
fn errno(e: i32) -> RpcError {
    RpcError::from_errno(e)
}
