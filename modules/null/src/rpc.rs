//! The null module's RPCs: parameters (SPDK names and types) and handlers.

use bdevkit::bdev::BdevManager;
use bdevkit::Error;
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, RUNTIME};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `bdev_null_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NullCreateParams {
    /// Bdev name.
    pub name: String,
    /// Data block size in bytes (a multiple of 512).
    pub block_size: u32,
    /// Number of blocks (> 0).
    pub num_blocks: u64,
    /// UUID (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    /// Physical block size (0 = block size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_block_size: Option<u32>,
    /// Interleaved metadata bytes per block: 0, 8, 16, 32, 64 or 128.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub md_size: Option<u32>,
    /// DIF type 0-3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dif_type: Option<i32>,
    /// DIF PI format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dif_pi_format: Option<u32>,
    /// DIF at the head of the metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dif_is_head_of_md: Option<bool>,
    /// Preferred write alignment (blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_write_alignment: Option<u32>,
    /// Preferred write granularity (blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_write_granularity: Option<u32>,
    /// Optimal write size (blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimal_write_size: Option<u32>,
    /// Preferred unmap alignment (blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_unmap_alignment: Option<u32>,
    /// Preferred unmap granularity (blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_unmap_granularity: Option<u32>,
}

impl NullCreateParams {
    /// Params with the required fields and defaults elsewhere.
    #[must_use]
    pub fn new(name: impl Into<String>, block_size: u32, num_blocks: u64) -> Self {
        NullCreateParams {
            name: name.into(),
            block_size,
            num_blocks,
            uuid: None,
            physical_block_size: None,
            md_size: None,
            dif_type: None,
            dif_pi_format: None,
            dif_is_head_of_md: None,
            preferred_write_alignment: None,
            preferred_write_granularity: None,
            optimal_write_size: None,
            preferred_unmap_alignment: None,
            preferred_unmap_granularity: None,
        }
    }
}

/// `bdev_null_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NullDeleteParams {
    /// Bdev name.
    pub name: String,
}

/// `bdev_null_resize` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NullResizeParams {
    /// Bdev name.
    pub name: String,
    /// New size in MiB (may only grow).
    pub new_size: u64,
}

/// Registers `bdev_null_create`, `bdev_null_delete` and `bdev_null_resize`.
/// Handlers run on the thread that polls the RPC server (the app thread).
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_null_create",
        RUNTIME,
        move |p: NullCreateParams, resp| {
            let name = crate::create(&m, p).map(|b| b.name().to_string());
            resp.respond_errno(name, Error::errno);
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_null_delete",
        RUNTIME,
        move |p: NullDeleteParams, resp| {
            crate::delete(&m, &p.name, move |r| {
                resp.respond_errno(r.map(|()| true), Error::errno);
            });
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_null_resize",
        RUNTIME,
        move |p: NullResizeParams, resp| {
            let r = crate::resize(&m, &p.name, p.new_size);
            resp.respond_errno(r.map(|()| true), Error::errno);
        },
    )?;
    Ok(())
}
