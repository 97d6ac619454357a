//! `bdev_lvol_start_shallow_copy` and `bdev_lvol_check_shallow_copy`, with
//! SPDK's params, results and errors (`vbdev_lvol_rpc.c`).
//!
//! As SPDK's, the operations live in the RPC layer: each start that gets
//! past the lvol lookup takes the next operation id (from 1, also when the
//! start then fails); a check that reports `complete` or `error` forgets
//! the operation, so the next check of its id answers -19.

use std::collections::BTreeMap;
use std::sync::Arc;

use bdevkit::bdev::module::BdevManager;
use bdevkit::thread::Thread;
use bdevkit_jsonrpc::{self as jsonrpc, strerror, MethodRegistry, Responder, RpcError, RUNTIME};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::LvolError;
use crate::module;
use crate::shallow::{CopyState, ShallowCopy};

/// `bdev_lvol_start_shallow_copy` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StartShallowCopyParams {
    /// The read-only lvol to copy (bdev name or alias).
    pub src_lvol_name: String,
    /// The bdev written with the lvol's clusters.
    pub dst_bdev_name: String,
}

/// `bdev_lvol_check_shallow_copy` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CheckShallowCopyParams {
    /// What `bdev_lvol_start_shallow_copy` answered.
    pub operation_id: u32,
}

/// The copies started and not yet reported finished.
#[derive(Debug, Default)]
struct Operations {
    last_id: u32,
    running: BTreeMap<u32, ShallowCopy>,
}

impl Operations {
    fn next_id(&mut self) -> u32 {
        self.last_id = self.last_id.wrapping_add(1);
        self.last_id
    }
}

/// What a check answers for `copy`, and whether it is over.
fn check_answer(copy: &ShallowCopy) -> (Value, bool) {
    let s = copy.status();
    let mut v = json!({
        "copied_clusters": s.copied_clusters,
        "total_clusters": s.total_clusters,
    });
    let (state, over) = match s.state {
        CopyState::InProgress => ("in progress", false),
        CopyState::Complete => ("complete", true),
        CopyState::Failed(errno) => {
            v["error"] = json!(strerror(errno));
            ("error", true)
        }
    };
    v["state"] = json!(state);
    (v, over)
}

/// Runs `fut` on this (the app) thread and answers with its output (as
/// `rpc.rs` does; repeated so that this file does not import its parent).
fn spawn_answer(
    resp: Responder,
    fut: impl std::future::Future<Output = Result<Value, RpcError>> + 'static,
) {
    match Thread::current() {
        Some(t) => t.spawn_local(async move { resp.respond(fut.await) }),
        None => resp.err(RpcError::internal_error("not on a bdevkit thread")),
    }
}

/// Registers the two methods, which share one list of operations.
pub(super) fn register(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let ops = Arc::new(Mutex::new(Operations::default()));
    let (m, o) = (mgr.clone(), Arc::clone(&ops));
    reg.register_decoded(
        "bdev_lvol_start_shallow_copy",
        RUNTIME,
        move |p: StartShallowCopyParams, resp| {
            let (m, o) = (m.clone(), Arc::clone(&o));
            spawn_answer(resp, async move {
                match module::start_shallow_copy(&m, &p.src_lvol_name, &p.dst_bdev_name).await {
                    Ok(copy) => {
                        let mut ops = o.lock();
                        let id = ops.next_id();
                        ops.running.insert(id, copy);
                        Ok(json!({ "operation_id": id }))
                    }
                    Err(LvolError::NotFound(_)) => Err(RpcError::from_errno(libc::ENODEV)),
                    Err(e) => {
                        o.lock().next_id();
                        Err(RpcError::new(RpcError::INVALID_PARAMS, strerror(e.errno())))
                    }
                }
            });
        },
    )?;
    reg.register_decoded(
        "bdev_lvol_check_shallow_copy",
        RUNTIME,
        move |p: CheckShallowCopyParams, resp| {
            let mut ops = ops.lock();
            let Some(copy) = ops.running.get(&p.operation_id) else {
                drop(ops);
                return resp.err(RpcError::from_errno(libc::ENODEV));
            };
            let (answer, over) = check_answer(copy);
            if over {
                ops.running.remove(&p.operation_id);
            }
            drop(ops);
            resp.ok(answer);
        },
    )
}
