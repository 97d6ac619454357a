//! The delay module's RPCs (SPDK's names, types and codes).
//!
//! | Method | Result | Errors |
//! |---|---|---|
//! | `bdev_delay_create` | the name | decode: -32603 "spdk_json_decode_object failed"; -22 p99 below average; -17; -1 base claimed |
//! | `bdev_delay_delete` | `true` | decode: -32603; -19 |
//! | `bdev_delay_update_latency` | `true` | decode: -32603; -32602 "The requested bdev does not exist." (also for a bdev that is not a delay bdev, as SPDK) |

use bdevkit::bdev::module::{BdevManager, Error};
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

/// `bdev_delay_create` params (also what `save_config` emits). Latencies
/// are in microseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DelayCreateParams {
    /// Name of the delay bdev.
    pub name: String,
    /// The base bdev (name or alias); it may not exist yet.
    pub base_bdev_name: String,
    /// UUID (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    /// Average read latency (µs).
    pub avg_read_latency: u64,
    /// p99 read latency (µs), at least the average.
    pub p99_read_latency: u64,
    /// Average write latency (µs).
    pub avg_write_latency: u64,
    /// p99 write latency (µs), at least the average.
    pub p99_write_latency: u64,
}

impl DelayCreateParams {
    /// Params for `name` on `base_bdev_name` with the same average and p99
    /// latency `us` for reads and writes.
    #[must_use]
    pub fn new(name: impl Into<String>, base_bdev_name: impl Into<String>, us: u64) -> Self {
        DelayCreateParams {
            name: name.into(),
            base_bdev_name: base_bdev_name.into(),
            uuid: None,
            avg_read_latency: us,
            p99_read_latency: us,
            avg_write_latency: us,
            p99_write_latency: us,
        }
    }

    pub(crate) fn latency_mut(&mut self, t: LatencyType) -> &mut u64 {
        match t {
            LatencyType::AvgRead => &mut self.avg_read_latency,
            LatencyType::P99Read => &mut self.p99_read_latency,
            LatencyType::AvgWrite => &mut self.avg_write_latency,
            LatencyType::P99Write => &mut self.p99_write_latency,
        }
    }
}

/// `bdev_delay_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DelayDeleteParams {
    /// Name of the delay bdev.
    pub name: String,
}

/// Which latency `bdev_delay_update_latency` sets.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LatencyType {
    /// Average read latency.
    AvgRead,
    /// Average write latency.
    AvgWrite,
    /// p99 read latency.
    P99Read,
    /// p99 write latency.
    P99Write,
}

/// `bdev_delay_update_latency` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DelayUpdateParams {
    /// Name of the delay bdev.
    pub delay_bdev_name: String,
    /// Which latency.
    pub latency_type: LatencyType,
    /// New value (µs).
    pub latency_us: u64,
}

/// Registers `bdev_delay_create`, `bdev_delay_delete` and
/// `bdev_delay_update_latency`.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_delay_create",
        RUNTIME,
        move |p: DelayCreateParams, resp| {
            resp.respond_errno(crate::create(&m, p), Error::errno);
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_delay_delete",
        RUNTIME,
        move |p: DelayDeleteParams, resp| {
            crate::delete(&m, &p.name, move |r| {
                resp.respond_errno(r.map(|()| true), Error::errno);
            });
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_delay_update_latency",
        RUNTIME,
        move |p: DelayUpdateParams, resp| match crate::update_latency(
            &m,
            &p.delay_bdev_name,
            p.latency_type,
            p.latency_us,
        ) {
            Ok(()) => resp.ok(json!(true)),
            Err(_) => resp.err(RpcError::invalid_params(
                "The requested bdev does not exist.",
            )),
        },
    )?;
    Ok(())
}
