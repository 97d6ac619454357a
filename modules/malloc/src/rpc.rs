//! The malloc module's RPCs: parameters (SPDK names and types) and handlers.

use bdevkit::bdev::BdevManager;
use bdevkit::Error;
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, RUNTIME};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `bdev_malloc_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MallocCreateParams {
    /// Bdev name (`Malloc<N>` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Data block size in bytes (a multiple of 512).
    pub block_size: u32,
    /// Number of blocks (> 0).
    pub num_blocks: u64,
    /// UUID (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    /// I/O boundary in blocks; non-zero also splits I/O on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimal_io_boundary: Option<u32>,
    /// Metadata bytes per block: 0, 8, 16, 32, 64 or 128.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub md_size: Option<u32>,
    /// Metadata interleaved with data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub md_interleave: Option<bool>,
    /// DIF type 0-3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dif_type: Option<i32>,
    /// DIF at the head of the metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dif_is_head_of_md: Option<bool>,
    /// Physical block size (0 = block size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_block_size: Option<u32>,
    /// DIF PI format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dif_pi_format: Option<u32>,
    /// NUMA node (-1 = any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_id: Option<i32>,
}

impl MallocCreateParams {
    /// Params with the required fields and defaults elsewhere.
    #[must_use]
    pub fn new(name: impl Into<String>, block_size: u32, num_blocks: u64) -> Self {
        MallocCreateParams {
            name: Some(name.into()),
            block_size,
            num_blocks,
            uuid: None,
            optimal_io_boundary: None,
            md_size: None,
            md_interleave: None,
            dif_type: None,
            dif_is_head_of_md: None,
            physical_block_size: None,
            dif_pi_format: None,
            numa_id: None,
        }
    }
}

/// `bdev_malloc_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MallocDeleteParams {
    /// Bdev name.
    pub name: String,
}

/// Registers `bdev_malloc_create` and `bdev_malloc_delete`. Handlers run on
/// the thread that polls the RPC server (the app thread).
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_malloc_create",
        RUNTIME,
        move |p: MallocCreateParams, resp| {
            let name = crate::create(&m, p).map(|b| b.name().to_string());
            resp.respond_errno(name, Error::errno);
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_malloc_delete",
        RUNTIME,
        move |p: MallocDeleteParams, resp| {
            crate::delete(&m, &p.name, move |r| {
                resp.respond_errno(r.map(|()| true), Error::errno);
            });
        },
    )?;
    Ok(())
}
