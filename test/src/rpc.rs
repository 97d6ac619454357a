//! In-process RPC calls for module tests: a registry holding the methods a
//! test needs, a call that waits for the answer on the reactor (or, from
//! the test's own thread, blocking), and a saved config's entries picked
//! and replayed.

use std::time::Duration;

use bdevkit::bdev::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, Responder, RpcError, RUNTIME};
use serde_json::Value;

use crate::{sleep_ms, TestEnv};

/// A module's `rpc::register_rpcs`.
pub type RegisterRpcs = fn(&MethodRegistry, &BdevManager) -> Result<(), jsonrpc::Error>;

/// A registry in the `RUNTIME` state with the methods of `modules` (e.g.
/// `&[bdevkit_malloc::rpc::register_rpcs, bdevkit_delay::rpc::register_rpcs]`).
///
/// # Panics
/// When two modules register the same method (a test setup error).
#[must_use]
pub fn registry(mgr: &BdevManager, modules: &[RegisterRpcs]) -> MethodRegistry {
    let reg = MethodRegistry::new();
    for register in modules {
        register(&reg, mgr).unwrap_or_else(|e| panic!("register rpcs: {e}"));
    }
    reg.set_state(RUNTIME);
    reg
}

/// Calls `method` with `params` in-process on `env`'s app thread, with a
/// registry of `modules`' methods, and waits (blocking the calling thread,
/// which must not be a reactor) up to 30 s for the answer.
///
/// # Panics
/// When two modules register the same method, the app thread is gone or
/// no answer comes in time.
pub fn call_blocking(
    env: &TestEnv,
    modules: &[RegisterRpcs],
    method: &str,
    params: Value,
) -> Result<Value, RpcError> {
    let reg = registry(env.mgr(), modules);
    let (resp, rx) = Responder::channel();
    let method = method.to_string();
    env.runtime()
        .app_thread()
        .send_msg(move || reg.dispatch(&method, Some(params), resp))
        .expect("invariant: app thread alive");
    rx.recv_timeout(Duration::from_secs(30))
        .expect("an answer within 30 s")
}

/// Calls `method` with `params` in-process, as the server would, and waits
/// (on the reactor, without blocking it) for the answer.
///
/// # Panics
/// When the handler's responder goes away without answering.
pub async fn call(reg: &MethodRegistry, method: &str, params: Value) -> Result<Value, RpcError> {
    let (resp, rx) = Responder::channel();
    reg.dispatch(method, Some(params), resp);
    loop {
        match rx.try_recv() {
            Ok(r) => return r,
            Err(std::sync::mpsc::TryRecvError::Empty) => sleep_ms(1).await,
            Err(e) => panic!("no answer to {method}: {e}"),
        }
    }
}

/// The entries of `mgr`'s saved config (`BdevManager::config_json`) whose
/// method is one of `methods`, in their order.
#[must_use]
pub fn saved_entries(mgr: &BdevManager, methods: &[&str]) -> Vec<Value> {
    mgr.config_json()
        .into_iter()
        .filter(|e| methods.iter().any(|m| e["method"] == *m))
        .collect()
}

/// Calls every saved-config entry of `entries` through `reg`, the last
/// first (a virtual bdev before its base: examine makes the order
/// irrelevant, which this shows).
///
/// # Panics
/// When an entry has no method or its call fails.
pub async fn replay(reg: &MethodRegistry, entries: &[Value]) {
    for e in entries.iter().rev() {
        let method = e["method"].as_str().expect("an entry has a method");
        if let Err(err) = call(reg, method, e["params"].clone()).await {
            panic!("replay {e}: {err:?}");
        }
    }
}
