//! The aio module's RPCs (SPDK names, types and error codes): parameters
//! and handlers. Handlers run on the thread that polls the RPC server (the
//! app thread); they decode, call [`crate::create`] / [`crate::delete`] /
//! [`crate::rescan`] and encode.
//!
//! * `bdev_aio_create {name, filename, block_size?, readonly?, fallocate?,
//!   uuid?, nowait?}` → the name, answered after `bdev_wait_for_examine`
//!   would complete; failures are errno-style (`-2` no such file, `-17`
//!   duplicate name, `-22` bad block size or size, `-95` nowait on a file).
//! * `bdev_aio_delete {name}` → `true` once the bdev is gone; `-19` if there
//!   is no such aio bdev.
//! * `bdev_aio_rescan {name}` → `true`; `-19` if there is no such aio bdev.

use bdevkit::bdev::module::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, ErrorChain, MethodRegistry, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

/// `bdev_aio_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AioCreateParams {
    /// Bdev name.
    pub name: String,
    /// File or block device path.
    pub filename: String,
    /// Block size in bytes; absent or 0 = the device's (512 for files).
    /// Must be a power of two, >= 512 and >= the device's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// Open read-only; writes are refused (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readonly: Option<bool>,
    /// Serve unmap and write zeroes with `fallocate` (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallocate: Option<bool>,
    /// UUID (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    /// `RWF_NOWAIT` reads and writes; block devices only (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nowait: Option<bool>,
}

impl AioCreateParams {
    /// Params with the required fields and defaults elsewhere.
    #[must_use]
    pub fn new(name: impl Into<String>, filename: impl Into<String>) -> Self {
        AioCreateParams {
            name: name.into(),
            filename: filename.into(),
            block_size: None,
            readonly: None,
            fallocate: None,
            uuid: None,
            nowait: None,
        }
    }
}

/// Registers `bdev_aio_create`, `bdev_aio_delete` and `bdev_aio_rescan`.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_aio_create",
        RUNTIME,
        move |p: AioCreateParams, resp| {
            let filename = p.filename.clone();
            match crate::create(&m, p) {
                Ok(b) => {
                    let name = b.name().to_string();
                    m.wait_for_examine(move || resp.ok(json!(name)));
                }
                Err(e) => {
                    tracing::error!(filename, error = %ErrorChain(&e), "bdev_aio_create failed");
                    resp.err(RpcError::from_errno(e.errno()));
                }
            }
        },
    )?;
    bdevkit_kfile::rpc::register_delete_rescan::<crate::AioBdev>(reg, mgr, crate::MODULE)
}
