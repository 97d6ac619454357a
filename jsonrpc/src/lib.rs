//! JSON-RPC 2.0 server and client, wire compatible with SPDK's, so that SPDK's own `spdk-rpc`
//! client drives a server built on it unchanged.
//!
//! # Model
//!
//! The crate knows nothing about bdevs. Other crates register methods in a [`MethodRegistry`];
//! the [`Server`] listens on a unix socket (and optionally TCP), and the application drives it by
//! calling [`Server::poll`] from a poller (or whenever [`Server::as_raw_fd`] is readable). `poll`
//! never blocks: it accepts connections, reads bytes, finds complete requests, dispatches them to
//! their handlers **on the calling thread**, and writes the answers that are ready.
//!
//! A handler gets the request's `params` and a [`Responder`]. It may answer at once, or hand the
//! responder to another thread and answer later; the server picks the answer up on a later poll
//! (the waiting server is woken through its fd). A responder dropped without an answer answers
//! -32603 "Internal error", so a client never hangs.
//!
//! Wire behaviour follows SPDK (`lib/jsonrpc`, `lib/rpc`):
//!
//! * framing: requests are bare JSON values back to back, no length prefix or delimiter
//!   ([`framing`]); malformed JSON gets a -32700 reply (SPDK just closes) and the connection is
//!   closed; responses are compact JSON plus one `\n`;
//! * requests are validated as SPDK does ([`message`]); notifications get no result but do get
//!   errors; batches are answered as one array in completion order;
//! * every method has an RPC state mask ([`STARTUP`], [`RUNTIME`]); calling it in the wrong state
//!   answers -1 with SPDK's exact text; `rpc_get_methods` is built in;
//! * method failures answer `-errno` with the `strerror` text ([`RpcError::from_errno`],
//!   [`Responder::respond_errno`]); params that do not decode answer -32603
//!   "spdk_json_decode_object failed" for most methods ([`MethodRegistry::register_decoded`]).
//!
//! The blocking [`Client`] reads responses the way `spdk-rpc` does and is what our tools and
//! tests use.
//!
//! # Example
//!
//! ```
//! use bdevkit_jsonrpc::{
//!     decode_params, Client, MethodRegistry, RpcError, Server, ServerOptions, RUNTIME, STARTUP,
//! };
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! #[derive(Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct AddParams {
//!     a: i64,
//!     b: i64,
//! }
//!
//! let registry = MethodRegistry::new();
//! registry.register("add", STARTUP | RUNTIME, |params, resp| {
//!     match decode_params::<AddParams>(params) {
//!         Ok(p) => resp.ok(json!(p.a + p.b)),
//!         Err(_) => resp.err(RpcError::decode_failed()),
//!     }
//! })?;
//!
//! let path = std::env::temp_dir().join(format!("bdevkit-doc-{}.sock", std::process::id()));
//! let opts = ServerOptions { unix_path: Some(path.clone()), ..ServerOptions::default() };
//! let mut server = Server::bind(opts, registry)?;
//!
//! // The application would poll from its reactor; here a thread stands in for it.
//! let client = std::thread::spawn(move || {
//!     let mut c = Client::connect_unix(&path).unwrap();
//!     c.call("add", Some(json!({"a": 2, "b": 3}))).unwrap()
//! });
//! while !client.is_finished() {
//!     server.poll_timeout(Some(std::time::Duration::from_millis(10)));
//! }
//! assert_eq!(client.join().unwrap(), json!(5));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod error;
pub mod framing;
pub mod message;
mod registry;
mod server;

pub use client::Client;
pub use error::{strerror, ClientError, Error, ErrorChain, Result, RpcError};
pub use registry::{
    decode_params, Handler, MethodRegistry, Responder, RUNTIME_STATE_MESSAGE, STARTUP_STATE_MESSAGE,
};
pub use server::{
    Server, ServerOptions, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_STALL_TIMEOUT,
};

/// RPC state mask: before subsystem initialisation (SPDK's `SPDK_RPC_STARTUP`).
pub const STARTUP: u32 = 0x1;
/// RPC state mask: after subsystem initialisation (SPDK's `SPDK_RPC_RUNTIME`).
pub const RUNTIME: u32 = 0x2;

#[cfg(test)]
mod tests {
    use super::*;

    fn send_static<T: Send + 'static>() {}
    fn shared<T: Send + Sync + Clone + 'static>() {}

    #[test]
    fn thread_safety_of_public_types() {
        // A Responder may be answered from any OS thread, later.
        send_static::<Responder>();
        // The registry is shared between the app and the server.
        shared::<MethodRegistry>();
        shared::<Handler>();
        // The server may be moved to the thread that polls it.
        send_static::<Server>();
        send_static::<Client>();
    }
}
