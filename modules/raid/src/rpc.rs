//! The raid module's RPCs, with SPDK's quirks: decode failures answer
//! **-32700** "spdk_json_decode_object failed", failures of
//! `bdev_raid_create` answer `{"code": -errno, "message": "Failed to
//! create RAID bdev <name>: <strerror>"}`.
//!
//! | Method | Result | Errors |
//! |---|---|---|
//! | `bdev_raid_create` | `true` | -32700; -22 "The base bdev name cannot be empty: Invalid argument"; `-errno` "Failed to create RAID bdev N: ..." |
//! | `bdev_raid_delete` | `true` | -32700; -19 "raid bdev N not found" |
//! | `bdev_raid_get_bdevs` | array of raid objects | -32700; -22 "Invalid argument" for an unknown category |
//! | `bdev_raid_add_base_bdev` | `true` once the member is in (a raid1 rebuild goes on in the background) | -32700; -19 "raid bdev R is not found in config"; `-errno` "Failed to add base bdev B to RAID bdev R: strerror" |
//! | `bdev_raid_remove_base_bdev` | `true` | -32700; -19 "Failed to remove base bdev from raid bdev" (no raid holds it) |
//! | `bdev_raid_set_options` | `true` | -32700; -22 for a zero window |

use bdevkit::bdev::module::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, decode_params, MethodRegistry, RpcError, RUNTIME, STARTUP};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::json;
use uuid::Uuid;

use crate::{RaidLevel, MAX_MEMBERS};

impl Serialize for RaidLevel {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for RaidLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        RaidLevel::parse(&s).ok_or_else(|| D::Error::custom(format!("unknown raid level {s}")))
    }
}

/// `bdev_raid_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidCreateParams {
    /// Raid name (at most 63 characters).
    pub name: String,
    /// Strip size in KiB: a power of two for raid0/concat, absent or 0 for
    /// raid1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_size_kb: Option<u32>,
    /// Level.
    pub raid_level: RaidLevel,
    /// Member bdev names, in order (they may not exist yet).
    pub base_bdevs: Vec<String>,
    /// UUID (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    /// Store the configuration on the members: not supported (only
    /// `false` is accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superblock: Option<bool>,
}

impl RaidCreateParams {
    /// Params for a raid without superblock.
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        raid_level: RaidLevel,
        strip_size_kb: u32,
        base_bdevs: &[&str],
    ) -> Self {
        RaidCreateParams {
            name: name.into(),
            strip_size_kb: (strip_size_kb != 0).then_some(strip_size_kb),
            raid_level,
            base_bdevs: base_bdevs.iter().map(|s| (*s).to_string()).collect(),
            uuid: None,
            superblock: None,
        }
    }
}

/// `bdev_raid_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidDeleteParams {
    /// Raid name.
    pub name: String,
    /// Wipe the superblock (no superblocks here: ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_sb: Option<bool>,
}

/// `bdev_raid_add_base_bdev` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidAddBaseBdevParams {
    /// The raid.
    pub raid_bdev: String,
    /// The bdev to add.
    pub base_bdev: String,
}

/// `bdev_raid_remove_base_bdev` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidRemoveBaseBdevParams {
    /// The member bdev to take out of its raid.
    pub name: String,
}

/// `bdev_raid_get_bdevs` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidGetBdevsParams {
    /// `all`, `online`, `configuring` or `offline`.
    pub category: String,
}

/// `bdev_raid_set_options` params (also what `save_config` emits).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidSetOptionsParams {
    /// Background process window in KiB (default 1024, not 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_window_size_kb: Option<u32>,
    /// Background process bandwidth cap in MiB/s (default 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_max_bandwidth_mb_sec: Option<u32>,
}

impl Default for RaidSetOptionsParams {
    fn default() -> Self {
        RaidSetOptionsParams {
            process_window_size_kb: Some(1024),
            process_max_bandwidth_mb_sec: Some(0),
        }
    }
}

fn decode_failed() -> RpcError {
    RpcError::new(RpcError::PARSE_ERROR, "spdk_json_decode_object failed")
}

/// Registers the raid module's methods.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register("bdev_raid_create", RUNTIME, move |params, resp| {
        let p = match decode_params::<RaidCreateParams>(params) {
            Ok(p) if p.base_bdevs.len() <= MAX_MEMBERS => p,
            _ => return resp.err(decode_failed()),
        };
        if p.base_bdevs.iter().any(String::is_empty) {
            return resp.err(RpcError::new(
                -libc::EINVAL,
                "The base bdev name cannot be empty: Invalid argument",
            ));
        }
        let name = p.name.clone();
        match crate::create(&m, p) {
            Ok(()) => resp.ok(json!(true)),
            Err(e) => {
                let e = RpcError::from_errno(e.errno());
                resp.err(RpcError::new(
                    e.code,
                    format!("Failed to create RAID bdev {name}: {}", e.message),
                ));
            }
        }
    })?;
    let m = mgr.clone();
    reg.register("bdev_raid_delete", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<RaidDeleteParams>(params) else {
            return resp.err(decode_failed());
        };
        let name = p.name.clone();
        crate::delete(&m, &p.name, move |r| match r {
            Ok(()) => resp.ok(json!(true)),
            Err(bdevkit::Error::NotFound(_)) => resp.err(RpcError::new(
                -libc::ENODEV,
                format!("raid bdev {name} not found"),
            )),
            Err(e) => resp.err(RpcError::internal_error(
                RpcError::from_errno(e.errno()).message,
            )),
        });
    })?;
    let m = mgr.clone();
    reg.register("bdev_raid_add_base_bdev", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<RaidAddBaseBdevParams>(params) else {
            return resp.err(decode_failed());
        };
        if crate::raid(&m, &p.raid_bdev).is_none() {
            return resp.err(RpcError::new(
                -libc::ENODEV,
                format!("raid bdev {} is not found in config", p.raid_bdev),
            ));
        }
        match crate::add_base_bdev(&m, &p.raid_bdev, &p.base_bdev) {
            Ok(()) => resp.ok(json!(true)),
            Err(e) => {
                let e = RpcError::from_errno(e.errno());
                resp.err(RpcError::new(
                    e.code,
                    format!(
                        "Failed to add base bdev {} to RAID bdev {}: {}",
                        p.base_bdev, p.raid_bdev, e.message
                    ),
                ));
            }
        }
    })?;
    let m = mgr.clone();
    reg.register(
        "bdev_raid_remove_base_bdev",
        RUNTIME,
        move |params, resp| {
            let Ok(p) = decode_params::<RaidRemoveBaseBdevParams>(params) else {
                return resp.err(decode_failed());
            };
            crate::remove_base_bdev(&m, &p.name, move |r| match r {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => resp.err(RpcError::new(
                    -e.errno(),
                    "Failed to remove base bdev from raid bdev",
                )),
            });
        },
    )?;
    let m = mgr.clone();
    reg.register("bdev_raid_get_bdevs", RUNTIME, move |params, resp| {
        let Ok(p) = decode_params::<RaidGetBdevsParams>(params) else {
            return resp.err(decode_failed());
        };
        resp.respond_errno(crate::get_bdevs(&m, &p.category), bdevkit::Error::errno);
    })?;
    let m = mgr.clone();
    reg.register(
        "bdev_raid_set_options",
        STARTUP | RUNTIME,
        move |params, resp| {
            let Ok(p) = decode_params::<RaidSetOptionsParams>(params) else {
                return resp.err(decode_failed());
            };
            let r = crate::set_options(&m, p);
            resp.respond_errno(r.map(|()| true), bdevkit::Error::errno);
        },
    )?;
    Ok(())
}
