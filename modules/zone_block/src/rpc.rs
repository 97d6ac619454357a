//! The zone_block module's RPCs, with SPDK's params and answers.
//!
//! | Method | Result | Errors |
//! |---|---|---|
//! | `bdev_zone_block_create` | the name | decode: -32602 "Invalid parameters"; otherwise -32603 "Failed to create block zoned vbdev: " + `strerror` (EINVAL, EEXIST, EPERM) |
//! | `bdev_zone_block_delete` | `true` | decode: -32602 "Invalid parameters"; `-errno` + `strerror` (-19 "No such device") |

use bdevkit::bdev::module::{BdevManager, Error};
use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `bdev_zone_block_create` params (also what `save_config` emits).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ZoneBlockCreateParams {
    /// Name of the zoned bdev.
    pub name: String,
    /// The conventional base bdev (name or alias); it may not exist yet.
    #[serde(rename = "base_bdev")]
    pub base_bdev_name: String,
    /// Writable blocks per zone; the zone size is the next power of two.
    pub zone_capacity: u64,
    /// Zones the bdev serves best open at once (reported, not enforced).
    pub optimal_open_zones: u64,
    /// UUID (a bdevkit extension); when absent, derived from the base
    /// bdev's UUID (v5, SHA-1, namespace [`crate::NAMESPACE_UUID`]), as SPDK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
}

impl ZoneBlockCreateParams {
    /// Params for the zoned bdev `name` over `base_bdev` with zones of
    /// `zone_capacity` writable blocks and one optimal open zone.
    #[must_use]
    pub fn new(name: impl Into<String>, base_bdev: impl Into<String>, zone_capacity: u64) -> Self {
        ZoneBlockCreateParams {
            name: name.into(),
            base_bdev_name: base_bdev.into(),
            zone_capacity,
            optimal_open_zones: 1,
            uuid: None,
        }
    }
}

/// `bdev_zone_block_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ZoneBlockDeleteParams {
    /// Name of the zoned bdev.
    pub name: String,
}

/// SPDK's answer to params that do not decode.
fn invalid() -> RpcError {
    RpcError::invalid_params("Invalid parameters")
}

/// Registers `bdev_zone_block_create` and `bdev_zone_block_delete`.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register("bdev_zone_block_create", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<ZoneBlockCreateParams>(params) else {
            return resp.err(invalid());
        };
        match crate::create(&m, p) {
            Ok(name) => resp.ok(name.into()),
            Err(e) => resp.err(RpcError::internal_with_cause(
                "Failed to create block zoned vbdev:",
                e.errno(),
            )),
        }
    })?;
    let m = mgr.clone();
    reg.register("bdev_zone_block_delete", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<ZoneBlockDeleteParams>(params) else {
            return resp.err(invalid());
        };
        crate::delete(&m, &p.name, move |r| {
            resp.respond_errno(r.map(|()| true), Error::errno);
        });
    })?;
    Ok(())
}
