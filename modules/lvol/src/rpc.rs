//! The lvol RPCs, with SPDK's parameter names, results and error codes.
//! Handlers decode, start the operation on the app thread and answer
//! when it is done.
//!
//! | Method | Result | Errors (as SPDK answers them) |
//! |---|---|---|
//! | `bdev_lvol_create_lvstore` | store uuid | -32603 decode; -22 "Invalid clear_method parameter"; checks: `-errno` (-22 name/cluster size, -17 name taken, -19 no bdev, -1 claimed); later: -32602 + strerror |
//! | `bdev_lvol_rename_lvstore` | `true` | -2 "Lvol store NAME not found"; -32602 + strerror (-17 name taken) |
//! | `bdev_lvol_delete_lvstore`, `bdev_lvol_grow_lvstore` | `true` | -32603 no params; -22 uuid and lvs_name both or neither; -19 no store; -32602 + strerror |
//! | `bdev_lvol_get_lvstores` | array | -22, -19 as above |
//! | `bdev_lvol_create` | lvol uuid (bdev name) | -22, -19 store; -22 "Invalid clean_method option"; -22 name, -17 taken; -32602 + strerror (ENOSPC) |
//! | `bdev_lvol_delete` | `true` | -19 no lvol; -32603 + strerror |
//! | `bdev_lvol_resize`, `bdev_lvol_rename`, `bdev_lvol_set_read_only` | `true` | -19 no lvol; -32602 + strerror |
//! | `bdev_lvol_get_lvols` | array | -22, -19 store |
//! | `bdev_lvol_snapshot`, `bdev_lvol_clone` | new lvol's uuid (bdev name) | -19 no lvol; -32602 + strerror (-22 read-only origin or writable parent, -17 name taken, -16 busy) |
//! | `bdev_lvol_inflate`, `bdev_lvol_decouple_parent` | `true` | -19 no lvol; -32602 + strerror (-22 no parent to decouple, -28 no space, -16 busy) |
//! | `bdev_lvol_set_parent` | `true` | -19 no lvol or parent; -32602 + strerror (-22 not thin, not a snapshot, other size; -17 already the parent) |
//! | `bdev_lvol_clone_bdev` | new lvol's uuid | -32602 "lvs does not exist", "bdev does not exist", "bdev is an lvol in same lvs as clone; use bdev_lvol_clone instead"; -32602 + strerror (-22 size not a whole number of clusters or another block size, -17 name taken, -1 bdev claimed by a writer) |
//! | `bdev_lvol_set_parent_bdev` | `true` | -19 no lvol; -32602 + strerror (-19 no such bdev, -22 not thin, own UUID, size; -17 already the parent) |
//! | `bdev_lvol_start_shallow_copy` | `{"operation_id": N}` at once | -32603 decode; -19 no lvol; -32602 + strerror (-19 no dst bdev, -1 dst claimed or open for writing); later, in the check: "error" with strerror (-1 lvol not read-only, -22 dst too small or block size not dividing, -16 busy) |
//! | `bdev_lvol_check_shallow_copy` | `{"state", "copied_clusters", "total_clusters"[, "error"]}` | -32603 decode; -19 no such operation (also once reported complete or error) |
//!
//! `bdev_lvol_delete` of a snapshot with one clone merges it into the
//! clone; with more it answers -32603 "Device or resource busy" (EBUSY).

use bdevkit::bdev::module::BdevManager;
use bdevkit::thread::Thread;
use bdevkit_blobstore::ClearMethod;
use bdevkit_jsonrpc::{self as jsonrpc, strerror, MethodRegistry, Responder, RpcError, RUNTIME};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::LvolError;
use crate::lvs::{LvolOptions, LvsOptions};
use crate::module::{self, store_clear_method, CreateLvstore, LvsRef};

mod shallow;
pub use shallow::{CheckShallowCopyParams, StartShallowCopyParams};

/// `bdev_lvol_create_lvstore` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CreateLvstoreParams {
    /// The base bdev.
    pub bdev_name: String,
    /// The store's name.
    pub lvs_name: String,
    /// Cluster size in bytes (default 4 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_sz: Option<u32>,
    /// `none`, `unmap` (default) or `write_zeroes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_method: Option<String>,
    /// Metadata pages per cluster, in percent (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_md_pages_per_cluster_ratio: Option<u32>,
    /// Metadata page size (4096 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub md_page_size: Option<u32>,
}

/// `bdev_lvol_rename_lvstore` and `bdev_lvol_rename` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RenameParams {
    /// The current name (for an lvol: its bdev name or alias).
    pub old_name: String,
    /// The new name.
    pub new_name: String,
}

/// A store by `uuid` or `lvs_name` (delete, grow, get_lvstores).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LvsParams {
    /// The store's UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The store's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvs_name: Option<String>,
}

/// `bdev_lvol_get_lvols` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GetLvolsParams {
    /// The store's UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvs_uuid: Option<String>,
    /// The store's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvs_name: Option<String>,
}

/// `bdev_lvol_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CreateLvolParams {
    /// The store's UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The store's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvs_name: Option<String>,
    /// The lvol's name.
    pub lvol_name: String,
    /// Size in MiB (rounded up to clusters).
    pub size_in_mib: u64,
    /// Thin provisioned.
    #[serde(default)]
    pub thin_provision: bool,
    /// `none`, `unmap` or `write_zeroes` (default: the store's default, unmap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_method: Option<String>,
}

/// `bdev_lvol_delete` and `bdev_lvol_set_read_only` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NameParams {
    /// The lvol's bdev name or alias.
    pub name: String,
}

/// `bdev_lvol_resize` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ResizeParams {
    /// The lvol's bdev name or alias.
    pub name: String,
    /// The new size in MiB.
    pub size_in_mib: u64,
}

/// `bdev_lvol_snapshot` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SnapshotParams {
    /// The lvol to snapshot (bdev name or alias).
    pub lvol_name: String,
    /// The snapshot's name in the store.
    pub snapshot_name: String,
}

/// `bdev_lvol_clone` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CloneParams {
    /// The snapshot to clone (bdev name or alias).
    pub snapshot_name: String,
    /// The clone's name in the store.
    pub clone_name: String,
}

/// `bdev_lvol_set_parent` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SetParentParams {
    /// The thin lvol whose parent changes (bdev name or alias).
    pub lvol_name: String,
    /// The snapshot that becomes its parent (bdev name or alias).
    pub parent_name: String,
}

/// `bdev_lvol_clone_bdev`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CloneBdevParams {
    /// The bdev to clone (name or alias), read-only from now on.
    pub bdev: String,
    /// The store the clone is made in.
    pub lvs_name: String,
    /// The clone's lvol name.
    pub clone_name: String,
}

const MIB: u64 = 1 << 20;

/// A failure found by a check answers `-errno`; a later one `code` with
/// the `strerror` text.
fn answer(e: &LvolError, code: i32) -> RpcError {
    if e.is_check() {
        RpcError::from_errno(e.errno())
    } else {
        RpcError::new(code, strerror(e.errno()))
    }
}

/// Lookups answer `-errno` (ENODEV); everything after them `code`.
fn after_lookup(e: &LvolError, code: i32) -> RpcError {
    match e {
        LvolError::NotFound(_) => RpcError::from_errno(libc::ENODEV),
        LvolError::Refused(msg) => RpcError::new(RpcError::INVALID_PARAMS, *msg),
        e => RpcError::new(code, strerror(e.errno())),
    }
}

/// Runs `fut` on this (the app) thread and answers with its output.
fn spawn_answer(
    resp: Responder,
    fut: impl std::future::Future<Output = Result<Value, RpcError>> + 'static,
) {
    match Thread::current() {
        Some(t) => t.spawn_local(async move { resp.respond(fut.await) }),
        None => resp.err(RpcError::internal_error("not on a bdevkit thread")),
    }
}

fn lvol_clear_method(name: Option<&str>) -> Result<ClearMethod, RpcError> {
    match name.map(str::to_ascii_lowercase).as_deref() {
        None => Ok(ClearMethod::Default),
        Some("none") => Ok(ClearMethod::None),
        Some("unmap") => Ok(ClearMethod::Unmap),
        Some("write_zeroes") => Ok(ClearMethod::WriteZeroes),
        Some(_) => Err(RpcError::new(-libc::EINVAL, "Invalid clean_method option")),
    }
}

fn size_bytes(mib: u64) -> Result<u64, LvolError> {
    mib.checked_mul(MIB)
        .ok_or_else(|| LvolError::invalid(format!("{mib} MiB is too large")))
}

fn register_stores(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_create_lvstore",
        RUNTIME,
        move |p: CreateLvstoreParams, resp| {
            let clear_method = match p.clear_method.as_deref().map(store_clear_method) {
                None => bdevkit_blobstore::StoreClearMethod::Unmap,
                Some(Some(c)) => c,
                Some(None) => {
                    return resp.err(RpcError::new(
                        -libc::EINVAL,
                        "Invalid clear_method parameter",
                    ))
                }
            };
            let args = CreateLvstore {
                bdev_name: p.bdev_name,
                opts: LvsOptions {
                    cluster_size: p.cluster_sz.unwrap_or(0),
                    clear_method,
                    md_pages_per_cluster_ratio: p.num_md_pages_per_cluster_ratio.unwrap_or(0),
                    ..LvsOptions::new(p.lvs_name)
                },
                md_page_size: p.md_page_size.unwrap_or(0),
            };
            let m = m.clone();
            spawn_answer(resp, async move {
                module::create_lvstore(&m, args)
                    .await
                    .map(|u| json!(u.to_string()))
                    .map_err(|e| answer(&e, RpcError::INVALID_PARAMS))
            });
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_rename_lvstore",
        RUNTIME,
        move |p: RenameParams, resp| {
            let m = m.clone();
            spawn_answer(resp, async move {
                if module::LvolModule::of(&m)
                    .and_then(|md| md.find(&LvsRef::Name(p.old_name.clone())))
                    .is_err()
                {
                    return Err(RpcError::new(
                        -libc::ENOENT,
                        format!("Lvol store {} not found", p.old_name),
                    ));
                }
                module::rename_lvstore(&m, &p.old_name, &p.new_name)
                    .await
                    .map(|()| json!(true))
                    .map_err(|e| RpcError::new(RpcError::INVALID_PARAMS, strerror(e.errno())))
            });
        },
    )?;
    for method in ["bdev_lvol_delete_lvstore", "bdev_lvol_grow_lvstore"] {
        let m = mgr.clone();
        // SPDK decodes these params with no defaults for a missing object:
        // no params at all is a decode failure, `{}` is EINVAL below.
        reg.register(method, RUNTIME, move |params, resp| {
            let p = match params {
                None | Some(Value::Null) => Err(()),
                some => jsonrpc::decode_params::<LvsParams>(some).map_err(drop),
            };
            let Ok(p) = p else {
                return resp.err(RpcError::decode_failed());
            };
            let r = match LvsRef::from_params(p.uuid, p.lvs_name) {
                Ok(r) => r,
                Err(e) => return resp.err(RpcError::from_errno(e.errno())),
            };
            let m = m.clone();
            spawn_answer(resp, async move {
                let out = if method == "bdev_lvol_delete_lvstore" {
                    module::delete_lvstore(&m, &r).await
                } else {
                    module::grow_lvstore(&m, &r).await
                };
                out.map(|()| json!(true))
                    .map_err(|e| answer(&e, RpcError::INVALID_PARAMS))
            });
        })?;
    }
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_get_lvstores",
        RUNTIME,
        move |p: LvsParams, resp| {
            let r = match (&p.uuid, &p.lvs_name) {
                (None, None) => None,
                _ => match LvsRef::from_params(p.uuid, p.lvs_name) {
                    Ok(r) => Some(r),
                    Err(e) => return resp.err(RpcError::from_errno(e.errno())),
                },
            };
            let m = m.clone();
            spawn_answer(resp, async move {
                module::get_lvstores(&m, r.as_ref())
                    .await
                    .map(Value::Array)
                    .map_err(|e| RpcError::from_errno(e.errno()))
            });
        },
    )?;
    Ok(())
}

fn register_lvols(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_create",
        RUNTIME,
        move |p: CreateLvolParams, resp| {
            let r = match LvsRef::from_params(p.uuid, p.lvs_name) {
                Ok(r) => r,
                Err(e) => return resp.err(RpcError::from_errno(e.errno())),
            };
            let m = m.clone();
            spawn_answer(resp, async move {
                module::LvolModule::of(&m)
                    .and_then(|md| md.find(&r))
                    .map_err(|e| RpcError::from_errno(e.errno()))?;
                let clear_method = lvol_clear_method(p.clear_method.as_deref())?;
                let o = LvolOptions {
                    name: p.lvol_name,
                    size_bytes: size_bytes(p.size_in_mib).map_err(|e| answer(&e, 0))?,
                    thin: p.thin_provision,
                    clear_method,
                    uuid: None,
                };
                module::create_lvol(&m, &r, o)
                    .await
                    .map(Value::String)
                    .map_err(|e| answer(&e, RpcError::INVALID_PARAMS))
            });
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded("bdev_lvol_delete", RUNTIME, move |p: NameParams, resp| {
        let m = m.clone();
        spawn_answer(resp, async move {
            module::delete_lvol(&m, &p.name)
                .await
                .map(|()| json!(true))
                .map_err(|e| after_lookup(&e, RpcError::INTERNAL_ERROR))
        });
    })?;
    let m = mgr.clone();
    reg.register_decoded("bdev_lvol_resize", RUNTIME, move |p: ResizeParams, resp| {
        let m = m.clone();
        spawn_answer(resp, async move {
            let size = size_bytes(p.size_in_mib)
                .map_err(|e| RpcError::new(RpcError::INVALID_PARAMS, strerror(e.errno())))?;
            module::resize_lvol(&m, &p.name, size)
                .await
                .map(|()| json!(true))
                .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
        });
    })?;
    let m = mgr.clone();
    reg.register_decoded("bdev_lvol_rename", RUNTIME, move |p: RenameParams, resp| {
        let m = m.clone();
        spawn_answer(resp, async move {
            module::rename_lvol(&m, &p.old_name, &p.new_name)
                .await
                .map(|()| json!(true))
                .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
        });
    })?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_set_read_only",
        RUNTIME,
        move |p: NameParams, resp| {
            let m = m.clone();
            spawn_answer(resp, async move {
                module::set_read_only(&m, &p.name)
                    .await
                    .map(|()| json!(true))
                    .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
            });
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_get_lvols",
        RUNTIME,
        move |p: GetLvolsParams, resp| {
            let r = match (&p.lvs_uuid, &p.lvs_name) {
                (None, None) => None,
                _ => match LvsRef::from_params(p.lvs_uuid, p.lvs_name) {
                    Ok(r) => Some(r),
                    Err(e) => return resp.err(RpcError::from_errno(e.errno())),
                },
            };
            let m = m.clone();
            spawn_answer(resp, async move {
                module::get_lvols(&m, r.as_ref())
                    .await
                    .map(Value::Array)
                    .map_err(|e| RpcError::from_errno(e.errno()))
            });
        },
    )?;
    Ok(())
}

fn register_lineage(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_snapshot",
        RUNTIME,
        move |p: SnapshotParams, resp| {
            let m = m.clone();
            spawn_answer(resp, async move {
                module::snapshot_lvol(&m, &p.lvol_name, &p.snapshot_name)
                    .await
                    .map(Value::String)
                    .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
            });
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded("bdev_lvol_clone", RUNTIME, move |p: CloneParams, resp| {
        let m = m.clone();
        spawn_answer(resp, async move {
            module::clone_lvol(&m, &p.snapshot_name, &p.clone_name)
                .await
                .map(Value::String)
                .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
        });
    })?;
    for method in ["bdev_lvol_inflate", "bdev_lvol_decouple_parent"] {
        let m = mgr.clone();
        reg.register_decoded(method, RUNTIME, move |p: NameParams, resp| {
            let m = m.clone();
            spawn_answer(resp, async move {
                let r = if method == "bdev_lvol_inflate" {
                    module::inflate_lvol(&m, &p.name).await
                } else {
                    module::decouple_parent(&m, &p.name).await
                };
                r.map(|()| json!(true))
                    .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
            });
        })?;
    }
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_set_parent",
        RUNTIME,
        move |p: SetParentParams, resp| {
            let m = m.clone();
            spawn_answer(resp, async move {
                module::set_parent(&m, &p.lvol_name, &p.parent_name)
                    .await
                    .map(|()| json!(true))
                    .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
            });
        },
    )?;
    Ok(())
}

fn register_esnap(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_clone_bdev",
        RUNTIME,
        move |p: CloneBdevParams, resp| {
            let m = m.clone();
            spawn_answer(resp, async move {
                module::clone_bdev(&m, &p.bdev, &p.lvs_name, &p.clone_name)
                    .await
                    .map(Value::String)
                    .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
            });
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_lvol_set_parent_bdev",
        RUNTIME,
        move |p: SetParentParams, resp| {
            let m = m.clone();
            spawn_answer(resp, async move {
                module::set_parent_bdev(&m, &p.lvol_name, &p.parent_name)
                    .await
                    .map(|()| json!(true))
                    .map_err(|e| after_lookup(&e, RpcError::INVALID_PARAMS))
            });
        },
    )?;
    Ok(())
}

/// Registers the lvol RPCs.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    register_stores(reg, mgr)?;
    register_lvols(reg, mgr)?;
    register_lineage(reg, mgr)?;
    register_esnap(reg, mgr)?;
    shallow::register(reg, mgr)
}
