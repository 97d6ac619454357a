//! The error module's RPCs (SPDK's names, types and codes).
//!
//! | Method | Result | Errors |
//! |---|---|---|
//! | `bdev_error_create` | `true` | decode: -32603; -17 config exists; `-errno` |
//! | `bdev_error_delete` | `true` | decode: -32603; -19 |
//! | `bdev_error_inject_error` | `true` | decode: **-32602** "spdk_json_decode_object failed"; -22 "nvme_sct or nvme_sc should be specified for NVMe error injection"; -22 zero `corrupt_value`; -19 not an error bdev |
//! | `bdev_error_resume_pending` | `true` | decode: -32603; -19 |

use bdevkit::bdev::module::{BdevManager, Error, Result};
use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `bdev_error_create` params (also what `save_config` emits).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ErrorCreateParams {
    /// The base bdev; the error bdev is `EE_<base_name>`.
    pub base_name: String,
    /// UUID of the error bdev (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
}

impl ErrorCreateParams {
    /// Params for an error bdev on `base_name`.
    #[must_use]
    pub fn new(base_name: impl Into<String>) -> Self {
        ErrorCreateParams {
            base_name: base_name.into(),
            uuid: None,
        }
    }
}

/// `bdev_error_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ErrorDeleteParams {
    /// The error bdev (`EE_...`).
    pub name: String,
}

/// Which I/Os an injection applies to.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InjectIoType {
    /// Disarm every injection.
    Clear,
    /// Reads.
    Read,
    /// Writes.
    Write,
    /// Unmaps.
    Unmap,
    /// Flushes.
    Flush,
    /// Reads, writes, unmaps and flushes.
    All,
}

/// What an injection does.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InjectErrorType {
    /// Complete as failed.
    Failure,
    /// Complete with the NVMe status `nvme_sct`/`nvme_sc`.
    NvmeFailure,
    /// Hold until `bdev_error_resume_pending` or a reset.
    Pending,
    /// XOR one data byte (writes before, reads after the base).
    CorruptData,
    /// Complete with NOMEM (the bdev layer retries).
    Nomem,
}

/// `bdev_error_inject_error` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ErrorInjectParams {
    /// The error bdev (`EE_...`).
    pub name: String,
    /// Which I/Os.
    pub io_type: InjectIoType,
    /// What to do to them.
    pub error_type: InjectErrorType,
    /// NVMe status code type (`nvme_failure` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme_sct: Option<u32>,
    /// NVMe status code (`nvme_failure` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme_sc: Option<u32>,
    /// How many I/Os to affect (default 1; 0 disarms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num: Option<u32>,
    /// Inject only while at least this many I/Os are in flight on the
    /// channel (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<u64>,
    /// Byte offset in the I/O's data to corrupt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt_offset: Option<u64>,
    /// XOR value for `corrupt_data` (1-255).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt_value: Option<u8>,
}

impl ErrorInjectParams {
    /// An injection of `error_type` on the next I/O of `io_type` of `name`.
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        io_type: InjectIoType,
        error_type: InjectErrorType,
    ) -> Self {
        ErrorInjectParams {
            name: name.into(),
            io_type,
            error_type,
            nvme_sct: None,
            nvme_sc: None,
            num: None,
            queue_depth: None,
            corrupt_offset: None,
            corrupt_value: None,
        }
    }
}

/// `bdev_error_resume_pending` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ErrorResumeParams {
    /// The error bdev (`EE_...`).
    pub name: String,
}

/// SPDK's message for NVMe status params that do not fit the error type.
const NVME_STATUS_MESSAGE: &str =
    "nvme_sct or nvme_sc should be specified for NVMe error injection";

/// Whether the NVMe status params fit the error type: at least one set
/// for `nvme_failure`, none for the others.
fn nvme_status_consistent(p: &ErrorInjectParams) -> bool {
    let any = p.nvme_sct.unwrap_or(0) != 0 || p.nvme_sc.unwrap_or(0) != 0;
    (p.error_type == InjectErrorType::NvmeFailure) == any
}

/// Checks an injection's params (`EINVAL`).
pub(crate) fn validate_inject(p: &ErrorInjectParams) -> Result<()> {
    if !nvme_status_consistent(p) {
        return Err(Error::InvalidArg(NVME_STATUS_MESSAGE.into()));
    }
    if p.error_type == InjectErrorType::CorruptData && p.corrupt_value.unwrap_or(0) == 0 {
        return Err(Error::InvalidArg(
            "corrupt_value must be non-zero for corrupt_data".into(),
        ));
    }
    Ok(())
}

/// Registers the error module's four methods.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_error_create",
        RUNTIME,
        move |p: ErrorCreateParams, resp| {
            resp.respond_errno(crate::create(&m, p).map(|()| true), Error::errno);
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_error_delete",
        RUNTIME,
        move |p: ErrorDeleteParams, resp| {
            crate::delete(&m, &p.name, move |r| {
                resp.respond_errno(r.map(|()| true), Error::errno);
            });
        },
    )?;
    let m = mgr.clone();
    reg.register("bdev_error_inject_error", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<ErrorInjectParams>(params) else {
            return resp.err(RpcError::invalid_params("spdk_json_decode_object failed"));
        };
        if !nvme_status_consistent(&p) {
            return resp.err(RpcError::new(-libc::EINVAL, NVME_STATUS_MESSAGE));
        }
        resp.respond_errno(crate::inject_error(&m, &p).map(|()| true), Error::errno);
    })?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_error_resume_pending",
        RUNTIME,
        move |p: ErrorResumeParams, resp| {
            resp.respond_errno(
                crate::resume_pending(&m, &p.name).map(|()| true),
                Error::errno,
            );
        },
    )?;
    Ok(())
}
