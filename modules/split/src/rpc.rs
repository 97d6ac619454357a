//! The split module's RPCs (SPDK's names, types and quirks).
//!
//! | Method | Result | Errors |
//! |---|---|---|
//! | `bdev_split_create` | array of part names (empty while the base is missing) | decode: -32602 "Invalid parameters"; failures: -32602 "Failed to create N split bdevs from 'BASE': strerror" |
//! | `bdev_split_delete` | `true` (parts go away asynchronously) | decode: -32602 "Invalid parameters"; unknown base: -32602 "No such file or directory" |

use bdevkit::bdev::module::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// `bdev_split_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SplitCreateParams {
    /// The bdev to split (name or alias); it may not exist yet.
    pub base_bdev: String,
    /// Number of parts (> 0).
    pub split_count: u32,
    /// Size of each part in MiB; 0 or absent divides the base evenly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_size_mb: Option<u64>,
}

impl SplitCreateParams {
    /// Params splitting `base_bdev` evenly into `split_count` parts.
    #[must_use]
    pub fn new(base_bdev: impl Into<String>, split_count: u32) -> Self {
        SplitCreateParams {
            base_bdev: base_bdev.into(),
            split_count,
            split_size_mb: None,
        }
    }
}

/// `bdev_split_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SplitDeleteParams {
    /// The base bdev whose split configuration to delete.
    pub base_bdev: String,
}

fn invalid_params() -> RpcError {
    RpcError::invalid_params("Invalid parameters")
}

/// Registers `bdev_split_create` and `bdev_split_delete`. Handlers run on
/// the thread that polls the RPC server (the app thread).
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register("bdev_split_create", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<SplitCreateParams>(params) else {
            return resp.err(invalid_params());
        };
        let (count, base) = (p.split_count, p.base_bdev.clone());
        match crate::create(&m, p) {
            Ok(names) => resp.ok(json!(names)),
            Err(e) => {
                let text = jsonrpc::strerror(e.errno());
                resp.err(RpcError::invalid_params(format!(
                    "Failed to create {count} split bdevs from '{base}': {text}"
                )));
            }
        }
    })?;
    let m = mgr.clone();
    reg.register("bdev_split_delete", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<SplitDeleteParams>(params) else {
            return resp.err(invalid_params());
        };
        // SPDK answers at once; the parts leave as their openers close.
        match crate::delete(&m, &p.base_bdev, || {}) {
            Ok(()) => resp.ok(json!(true)),
            Err(_) => resp.err(RpcError::invalid_params(jsonrpc::strerror(libc::ENOENT))),
        }
    })?;
    Ok(())
}
