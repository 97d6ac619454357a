//! Method registry, dispatch with SPDK's state and allow-list checks, and the [`Responder`].

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Weak};

use parking_lot::RwLock;
use serde::de::{DeserializeOwned, Error as _, Unexpected};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::{Error, RpcError, RUNTIME, STARTUP};

/// Message for -1 when a RUNTIME-only method is called in STARTUP (SPDK's exact text).
pub const STARTUP_STATE_MESSAGE: &str =
    "Method may only be called after framework is initialized using framework_start_init RPC.";

/// Message for -1 when a STARTUP-only method is called in RUNTIME (SPDK's exact text).
pub const RUNTIME_STATE_MESSAGE: &str = "Method may only be called before framework is initialized. Use --wait-for-rpc command line parameter and then issue this RPC before the framework_start_init RPC.";

/// Decode a method's `params` into `T`.
///
/// Absent or `null` params decode as the empty object `{}`, so a struct whose fields are all
/// optional decodes and one with a required field fails. Params that are not an object (arrays
/// included, which serde would otherwise map onto struct fields by position) fail.
pub fn decode_params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, serde_json::Error> {
    match params {
        None | Some(Value::Null) => T::deserialize(Value::Object(serde_json::Map::new())),
        Some(v @ Value::Object(_)) => serde_json::from_value(v),
        Some(Value::Array(_)) => Err(serde_json::Error::invalid_type(
            Unexpected::Seq,
            &"an object",
        )),
        Some(other) => Err(serde_json::Error::invalid_type(
            unexpected(&other),
            &"an object",
        )),
    }
}

fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// What a handler answers: a result value, an already serialised result
/// ([`Responder::ok_raw`]), or an error.
pub(crate) enum Reply {
    Value(Result<Value, RpcError>),
    Raw(Box<RawValue>),
}

impl Reply {
    /// The answer as a `Value` (parsing a raw result).
    pub(crate) fn into_value(self) -> Result<Value, RpcError> {
        match self {
            Reply::Value(v) => v,
            Reply::Raw(raw) => serde_json::from_str(raw.get())
                .map_err(|_| RpcError::internal_error("Internal error")),
        }
    }
}

type Sink = Box<dyn FnOnce(Reply) + Send>;

/// The answer slot of one request: every request gets exactly one answer through it.
///
/// A handler receives a `Responder` and answers through it, immediately or later and from any OS
/// thread (it is `Send + 'static`). Dropping it without answering answers for you with
/// -32603 "Internal error" and logs a warning, so no client waits forever.
///
/// Outside the server, [`Responder::new`] and [`Responder::channel`] let code call handlers
/// in-process, e.g. to replay a JSON config file through [`MethodRegistry::dispatch`].
pub struct Responder {
    sink: Option<Sink>,
    method: Option<String>,
}

impl Responder {
    /// A responder that hands the answer to `f` (called exactly once, on the answering thread).
    pub fn new(f: impl FnOnce(Result<Value, RpcError>) + Send + 'static) -> Self {
        Responder {
            sink: Some(Box::new(move |reply: Reply| f(reply.into_value()))),
            method: None,
        }
    }

    /// A responder that receives raw replies as they are (the server's).
    pub(crate) fn with_reply_sink(f: impl FnOnce(Reply) + Send + 'static) -> Self {
        Responder {
            sink: Some(Box::new(f)),
            method: None,
        }
    }

    /// A responder whose answer arrives on the returned channel.
    pub fn channel() -> (Self, mpsc::Receiver<Result<Value, RpcError>>) {
        let (tx, rx) = mpsc::channel();
        let r = Responder::new(move |res| {
            // The receiver may be gone; then nobody wants the answer.
            let _ = tx.send(res);
        });
        (r, rx)
    }

    /// Answer with a result or an error.
    pub fn respond(mut self, r: Result<Value, RpcError>) {
        if let Some(sink) = self.sink.take() {
            sink(Reply::Value(r));
        }
    }

    /// Answer with a result that is already serialised JSON. For large
    /// results (`bdev_get_bdevs` over thousands of bdevs): the handler
    /// writes them piece by piece instead of building one big `Value` tree,
    /// which keeps the daemon's peak memory and heap fragmentation down.
    pub fn ok_raw(mut self, raw: Box<RawValue>) {
        if let Some(sink) = self.sink.take() {
            sink(Reply::Raw(raw));
        }
    }

    /// Answer with a result.
    pub fn ok(self, v: Value) {
        self.respond(Ok(v));
    }

    /// Answer with an error.
    pub fn err(self, e: RpcError) {
        self.respond(Err(e));
    }

    /// Answer with the outcome of a method's work, SPDK's way: the value as the result, or for a
    /// failure `-errno` with the `strerror` text ([`RpcError::from_errno`]). `errno` gives a
    /// failure's errno (positive or negative), e.g. the failure type's own `errno` method.
    ///
    /// ```
    /// # use bdevkit_jsonrpc::{Responder, RpcError};
    /// # use serde_json::json;
    /// let (resp, rx) = Responder::channel();
    /// resp.respond_errno(Err::<bool, i32>(libc::ENODEV), |e| *e);
    /// assert_eq!(rx.recv().unwrap(), Err(RpcError::new(-19, "No such device")));
    /// let (resp, rx) = Responder::channel();
    /// resp.respond_errno(Ok::<_, i32>("Malloc0"), |e| *e);
    /// assert_eq!(rx.recv().unwrap(), Ok(json!("Malloc0")));
    /// ```
    pub fn respond_errno<T: Serialize, E>(self, r: Result<T, E>, errno: impl FnOnce(&E) -> i32) {
        match r.map(serde_json::to_value) {
            Ok(Ok(v)) => self.ok(v),
            // A result that does not serialise (a map with non-string keys): a bug, not a failure
            // of the method.
            Ok(Err(_)) => self.err(RpcError::internal_error("Internal error")),
            Err(e) => self.err(RpcError::from_errno(errno(&e))),
        }
    }

    pub(crate) fn set_method(&mut self, method: &str) {
        self.method = Some(method.to_owned());
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            tracing::warn!(
                method = self.method.as_deref().unwrap_or("?"),
                "rpc handler dropped its responder without answering"
            );
            sink(Reply::Value(Err(RpcError::internal_error(
                "Internal error",
            ))));
        }
    }
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("method", &self.method)
            .field("answered", &self.sink.is_none())
            .finish()
    }
}

/// A method handler: receives the request's `params` (`None` when absent or `null`) and the
/// [`Responder`] to answer through. It runs on the thread that dispatches (the thread calling
/// [`Server::poll`](crate::Server::poll)) and must not block; slow work answers later.
pub type Handler = Arc<dyn Fn(Option<Value>, Responder) + Send + Sync>;

enum Entry {
    Method { state_mask: u32, handler: Handler },
    Alias { target: String },
}

#[derive(Default)]
struct Table {
    /// Names in registration order.
    order: Vec<String>,
    entries: HashMap<String, Entry>,
    allowed: Option<HashSet<String>>,
}

struct Inner {
    table: RwLock<Table>,
    state: AtomicU32,
}

/// The set of methods a server answers, with SPDK's RPC state and `--rpcs-allowed` allow-list.
///
/// A cheap-to-clone handle (an `Arc` inside): the app keeps one, the [`Server`](crate::Server)
/// another, and methods may be registered, and the state changed, at any time. `new()` registers
/// `rpc_get_methods` (STARTUP | RUNTIME), as SPDK does.
#[derive(Clone)]
pub struct MethodRegistry {
    inner: Arc<Inner>,
}

impl Default for MethodRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MethodRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.inner.table.read();
        f.debug_struct("MethodRegistry")
            .field("state", &self.state())
            .field("methods", &t.order)
            .field("allowed", &t.allowed)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetMethodsParams {
    #[serde(default)]
    current: bool,
    #[serde(default)]
    include_aliases: bool,
}

impl MethodRegistry {
    /// A registry in state [`STARTUP`] holding only `rpc_get_methods`.
    pub fn new() -> Self {
        let reg = MethodRegistry {
            inner: Arc::new(Inner {
                table: RwLock::new(Table::default()),
                state: AtomicU32::new(STARTUP),
            }),
        };
        // Weak: the handler lives inside the registry it lists.
        let weak: Weak<Inner> = Arc::downgrade(&reg.inner);
        let registered = reg.register("rpc_get_methods", STARTUP | RUNTIME, move |params, resp| {
            let Ok(p) = decode_params::<GetMethodsParams>(params) else {
                return resp.err(RpcError::invalid_params("Invalid parameters"));
            };
            match weak.upgrade() {
                Some(inner) => {
                    let names = MethodRegistry { inner }.method_names(p.current, p.include_aliases);
                    resp.ok(Value::from(names));
                }
                None => resp.err(RpcError::internal_error("Internal error")),
            }
        });
        debug_assert!(registered.is_ok(), "invariant: a new registry is empty");
        reg
    }

    /// Register `handler` as `name`, callable in the states in `state_mask` ([`STARTUP`],
    /// [`RUNTIME`] or both). Fails if the name is taken by a method or an alias.
    pub fn register(
        &self,
        name: &str,
        state_mask: u32,
        handler: impl Fn(Option<Value>, Responder) + Send + Sync + 'static,
    ) -> Result<(), Error> {
        let mut t = self.inner.table.write();
        if t.entries.contains_key(name) {
            return Err(Error::RegisterDuplicate { name: name.into() });
        }
        t.entries.insert(
            name.to_owned(),
            Entry::Method {
                state_mask,
                handler: Arc::new(handler),
            },
        );
        t.order.push(name.to_owned());
        Ok(())
    }

    /// Register `handler` as `name` for a method whose params decode into `P`
    /// ([`decode_params`]). Params that do not decode answer -32603 "spdk_json_decode_object
    /// failed" ([`RpcError::decode_failed`]), as most SPDK bdev methods do; a method that answers
    /// bad params otherwise decodes them itself in a handler given to [`MethodRegistry::register`].
    pub fn register_decoded<P: DeserializeOwned>(
        &self,
        name: &str,
        state_mask: u32,
        handler: impl Fn(P, Responder) + Send + Sync + 'static,
    ) -> Result<(), Error> {
        self.register(name, state_mask, move |params, resp| {
            match decode_params::<P>(params) {
                Ok(p) => handler(p, resp),
                Err(_) => resp.err(RpcError::decode_failed()),
            }
        })
    }

    /// Register `alias` as a deprecated name for the method `target` (which must already be
    /// registered, and not be an alias itself). Calls through the alias log a deprecation
    /// warning; `rpc_get_methods` lists aliases only with `include_aliases`.
    pub fn register_alias(&self, alias: &str, target: &str) -> Result<(), Error> {
        let mut t = self.inner.table.write();
        if t.entries.contains_key(alias) {
            return Err(Error::RegisterDuplicate { name: alias.into() });
        }
        if !matches!(t.entries.get(target), Some(Entry::Method { .. })) {
            return Err(Error::RegisterAliasTarget {
                alias: alias.into(),
                target: target.into(),
            });
        }
        t.entries.insert(
            alias.to_owned(),
            Entry::Alias {
                target: target.into(),
            },
        );
        t.order.push(alias.to_owned());
        Ok(())
    }

    /// Set the RPC state ([`STARTUP`] or [`RUNTIME`]).
    pub fn set_state(&self, mask: u32) {
        self.inner.state.store(mask, Ordering::SeqCst);
    }

    /// The current RPC state; [`STARTUP`] until changed.
    pub fn state(&self) -> u32 {
        self.inner.state.load(Ordering::SeqCst)
    }

    /// Install (`Some`) or remove (`None`) an allow-list (`--rpcs-allowed`): other methods answer
    /// -32601 "Method not found" and are hidden from `rpc_get_methods`.
    pub fn set_allowed(&self, names: Option<Vec<String>>) {
        self.inner.table.write().allowed = names.map(|v| v.into_iter().collect());
    }

    /// Method names in registration order, as `rpc_get_methods` lists them: with
    /// `current_only`, only those callable in the current state; aliases only with
    /// `include_aliases`; never names outside the allow-list.
    pub fn method_names(&self, current_only: bool, include_aliases: bool) -> Vec<String> {
        let state = self.state();
        let t = self.inner.table.read();
        t.order
            .iter()
            .filter(|name| t.allowed.as_ref().is_none_or(|a| a.contains(*name)))
            .filter(|name| {
                let (mask, is_alias) = match t.entries.get(*name) {
                    Some(Entry::Method { state_mask, .. }) => (*state_mask, false),
                    Some(Entry::Alias { target }) => match t.entries.get(target) {
                        Some(Entry::Method { state_mask, .. }) => (*state_mask, true),
                        _ => return false,
                    },
                    None => return false,
                };
                (include_aliases || !is_alias) && (!current_only || mask & state == state)
            })
            .cloned()
            .collect()
    }

    /// Whether `name` is registered (as a method or alias), ignoring state and allow-list.
    pub fn contains(&self, name: &str) -> bool {
        self.inner.table.read().entries.contains_key(name)
    }

    /// The state mask `name` was registered with (an alias answers its target's), ignoring the
    /// allow-list; `None` if no such method. SPDK's `spdk_rpc_get_method_state_mask`: the JSON
    /// config loader uses it to decide which entries run before and which after initialisation.
    pub fn state_mask(&self, name: &str) -> Option<u32> {
        let t = self.inner.table.read();
        match t.entries.get(name)? {
            Entry::Method { state_mask, .. } => Some(*state_mask),
            Entry::Alias { target } => match t.entries.get(target)? {
                Entry::Method { state_mask, .. } => Some(*state_mask),
                Entry::Alias { .. } => None,
            },
        }
    }

    /// Call `method` as the server would: allow-list and unknown names answer -32601, a method
    /// not allowed in the current state answers -1 with SPDK's message, otherwise the handler
    /// runs on this thread with `params` and `resp`.
    pub fn dispatch(&self, method: &str, params: Option<Value>, mut resp: Responder) {
        resp.set_method(method);
        let looked_up = {
            let t = self.inner.table.read();
            if t.allowed.as_ref().is_some_and(|a| !a.contains(method)) {
                None
            } else {
                match t.entries.get(method) {
                    Some(Entry::Method {
                        state_mask,
                        handler,
                    }) => Some((*state_mask, Arc::clone(handler))),
                    Some(Entry::Alias { target }) => match t.entries.get(target) {
                        Some(Entry::Method {
                            state_mask,
                            handler,
                        }) => {
                            tracing::warn!(
                                alias = method,
                                method = %target,
                                "deprecated rpc method alias called"
                            );
                            Some((*state_mask, Arc::clone(handler)))
                        }
                        _ => None,
                    },
                    None => None,
                }
            }
            // The lock is released here: handlers may register methods or change the state.
        };
        let Some((mask, handler)) = looked_up else {
            return resp.err(RpcError::method_not_found());
        };
        let state = self.state();
        if mask & state != state {
            let msg = if state == STARTUP {
                STARTUP_STATE_MESSAGE
            } else {
                RUNTIME_STATE_MESSAGE
            };
            return resp.err(RpcError::new(RpcError::INVALID_STATE, msg));
        }
        handler(params, resp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(reg: &MethodRegistry, m: &str, p: Option<Value>) -> Result<Value, RpcError> {
        let (r, rx) = Responder::channel();
        reg.dispatch(m, p, r);
        rx.recv().unwrap()
    }

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Opt {
        a: Option<u32>,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Req {
        a: u32,
    }

    #[test]
    fn decode_params_rules() {
        assert_eq!(decode_params::<Opt>(None).unwrap(), Opt { a: None });
        assert_eq!(
            decode_params::<Opt>(Some(Value::Null)).unwrap(),
            Opt { a: None }
        );
        assert!(decode_params::<Req>(None).is_err());
        assert_eq!(
            decode_params::<Req>(Some(json!({"a":1}))).unwrap(),
            Req { a: 1 }
        );
        assert!(decode_params::<Req>(Some(json!([1]))).is_err());
        assert!(decode_params::<Opt>(Some(json!([]))).is_err());
        assert!(decode_params::<Opt>(Some(json!("x"))).is_err());
        assert!(decode_params::<Opt>(Some(json!({"b":1}))).is_err());
        assert!(decode_params::<Req>(Some(json!({"a":-1}))).is_err());
    }

    #[test]
    fn state_checks_use_spdk_messages() {
        let reg = MethodRegistry::new();
        reg.register("run", RUNTIME, |_, r| r.ok(json!(1))).unwrap();
        reg.register("start", STARTUP, |_, r| r.ok(json!(2)))
            .unwrap();
        assert_eq!(
            call(&reg, "run", None),
            Err(RpcError::new(-1, STARTUP_STATE_MESSAGE))
        );
        assert_eq!(call(&reg, "start", None), Ok(json!(2)));
        reg.set_state(RUNTIME);
        assert_eq!(call(&reg, "run", None), Ok(json!(1)));
        assert_eq!(
            call(&reg, "start", None),
            Err(RpcError::new(-1, RUNTIME_STATE_MESSAGE))
        );
    }

    #[test]
    fn duplicates_aliases_and_allow_list() {
        let reg = MethodRegistry::new();
        reg.register("a", STARTUP | RUNTIME, |_, r| r.ok(json!("a")))
            .unwrap();
        assert!(matches!(
            reg.register("a", STARTUP, |_, r| r.ok(json!(0))),
            Err(Error::RegisterDuplicate { .. })
        ));
        assert!(reg.register_alias("rpc_get_methods", "a").is_err());
        assert!(reg.register_alias("x", "nope").is_err());
        reg.register_alias("old_a", "a").unwrap();
        assert!(reg.register_alias("older_a", "old_a").is_err());
        assert_eq!(call(&reg, "old_a", None), Ok(json!("a")));
        assert_eq!(reg.state_mask("a"), Some(STARTUP | RUNTIME));
        assert_eq!(reg.state_mask("old_a"), Some(STARTUP | RUNTIME));
        assert_eq!(reg.state_mask("nope"), None);
        assert_eq!(reg.method_names(false, false), vec!["rpc_get_methods", "a"]);
        assert_eq!(
            reg.method_names(false, true),
            vec!["rpc_get_methods", "a", "old_a"]
        );
        assert_eq!(call(&reg, "nope", None), Err(RpcError::method_not_found()));

        reg.set_allowed(Some(vec!["a".into()]));
        assert_eq!(reg.method_names(false, true), vec!["a"]);
        assert_eq!(
            call(&reg, "rpc_get_methods", None),
            Err(RpcError::method_not_found())
        );
        assert_eq!(call(&reg, "old_a", None), Err(RpcError::method_not_found()));
        assert_eq!(call(&reg, "a", None), Ok(json!("a")));
        reg.set_allowed(None);
        assert_eq!(call(&reg, "old_a", None), Ok(json!("a")));
    }

    #[test]
    fn rpc_get_methods_params() {
        let reg = MethodRegistry::new();
        reg.register("start_only", STARTUP, |_, r| r.ok(json!(0)))
            .unwrap();
        reg.register("run_only", RUNTIME, |_, r| r.ok(json!(0)))
            .unwrap();
        reg.register_alias("old_run", "run_only").unwrap();
        let get = |p| call(&reg, "rpc_get_methods", p);
        assert_eq!(
            get(None),
            Ok(json!(["rpc_get_methods", "start_only", "run_only"]))
        );
        assert_eq!(
            get(Some(json!({"current": true, "include_aliases": false}))),
            Ok(json!(["rpc_get_methods", "start_only"]))
        );
        assert_eq!(
            get(Some(json!({"current": false, "include_aliases": true}))),
            Ok(json!([
                "rpc_get_methods",
                "start_only",
                "run_only",
                "old_run"
            ]))
        );
        reg.set_state(RUNTIME);
        assert_eq!(
            get(Some(json!({"current": true, "include_aliases": true}))),
            Ok(json!(["rpc_get_methods", "run_only", "old_run"]))
        );
        let bad = Err(RpcError::invalid_params("Invalid parameters"));
        assert_eq!(get(Some(json!({"bogus": 1}))), bad);
        assert_eq!(get(Some(json!({"current": 1}))), bad);
        assert_eq!(get(Some(json!([true]))), bad);
    }

    #[test]
    fn decoded_methods_answer_spdk_decode_failures() {
        let reg = MethodRegistry::new();
        reg.register_decoded("add_one", STARTUP, |p: Req, r| r.ok(json!(p.a + 1)))
            .unwrap();
        assert_eq!(call(&reg, "add_one", Some(json!({"a": 1}))), Ok(json!(2)));
        let failed = Err(RpcError::decode_failed());
        assert_eq!(call(&reg, "add_one", None), failed);
        assert_eq!(call(&reg, "add_one", Some(json!({"a": 1, "b": 2}))), failed);
        assert_eq!(call(&reg, "add_one", Some(json!([1]))), failed);
    }

    #[test]
    fn respond_errno_answers_result_or_errno() {
        let answer = |r: Result<Value, i32>| {
            let (resp, rx) = Responder::channel();
            resp.respond_errno(r, |e| *e);
            rx.recv().unwrap()
        };
        assert_eq!(answer(Ok(json!(true))), Ok(json!(true)));
        assert_eq!(
            answer(Err(libc::EEXIST)),
            Err(RpcError::new(-17, "File exists"))
        );
        assert_eq!(
            answer(Err(-libc::EPERM)),
            Err(RpcError::new(-1, "Operation not permitted"))
        );
        let (resp, rx) = Responder::channel();
        let unserialisable: std::collections::HashMap<(u8, u8), u8> = [((1, 2), 3)].into();
        resp.respond_errno(Ok::<_, i32>(unserialisable), |e| *e);
        assert_eq!(
            rx.recv().unwrap(),
            Err(RpcError::internal_error("Internal error"))
        );
    }

    #[test]
    fn dropped_responder_answers_internal_error() {
        let reg = MethodRegistry::new();
        reg.register("lazy", STARTUP, |_, r| drop(r)).unwrap();
        assert_eq!(
            call(&reg, "lazy", None),
            Err(RpcError::internal_error("Internal error"))
        );
    }

    #[test]
    fn handler_may_reenter_registry() {
        let reg = MethodRegistry::new();
        let reg2 = reg.clone();
        reg.register("start", STARTUP, move |_, r| {
            reg2.set_state(RUNTIME);
            reg2.register("late", RUNTIME, |_, r| r.ok(json!("late")))
                .unwrap();
            r.ok(json!(true));
        })
        .unwrap();
        assert_eq!(call(&reg, "start", None), Ok(json!(true)));
        assert_eq!(call(&reg, "late", None), Ok(json!("late")));
    }
}
