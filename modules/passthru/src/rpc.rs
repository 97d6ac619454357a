//! The passthru module's RPCs: parameters (SPDK's names and types) and
//! handlers. Handlers only decode, call [`crate::create`] /
//! [`crate::delete`] and encode; they run on the thread that polls the RPC
//! server (the app thread).
//!
//! | Method | Result | Errors |
//! |---|---|---|
//! | `bdev_passthru_create` | the name | decode: -32603 "spdk_json_decode_object failed"; `-errno` + `strerror` (-17 duplicate, -1 base claimed) |
//! | `bdev_passthru_delete` | `true` | decode: -32603; -19 "No such device" |

use bdevkit::bdev::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

/// `bdev_passthru_create` params (also what `save_config` emits).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PassthruCreateParams {
    /// The base bdev (name or alias); it may not exist yet.
    pub base_bdev_name: String,
    /// Name of the passthru bdev.
    pub name: String,
    /// UUID; when absent, derived from the base bdev's UUID (v5, SHA-1,
    /// namespace [`crate::NAMESPACE_UUID`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
}

impl PassthruCreateParams {
    /// Params for a passthru `name` on `base_bdev_name` with a derived UUID.
    #[must_use]
    pub fn new(base_bdev_name: impl Into<String>, name: impl Into<String>) -> Self {
        PassthruCreateParams {
            base_bdev_name: base_bdev_name.into(),
            name: name.into(),
            uuid: None,
        }
    }
}

/// `bdev_passthru_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PassthruDeleteParams {
    /// Name of the passthru bdev.
    pub name: String,
}

/// Registers `bdev_passthru_create` and `bdev_passthru_delete`.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register("bdev_passthru_create", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<PassthruCreateParams>(params) else {
            return resp.err(RpcError::decode_failed());
        };
        match crate::create(&m, p) {
            Ok(name) => resp.ok(json!(name)),
            Err(e) => resp.err(RpcError::from_errno(e.errno())),
        }
    })?;
    let m = mgr.clone();
    reg.register("bdev_passthru_delete", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<PassthruDeleteParams>(params) else {
            return resp.err(RpcError::decode_failed());
        };
        crate::delete(&m, &p.name, move |r| match r {
            Ok(()) => resp.ok(json!(true)),
            Err(e) => resp.err(RpcError::from_errno(e.errno())),
        });
    })?;
    Ok(())
}
