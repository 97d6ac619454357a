//! The unix socket and its lock file, the TCP listener, connection limits.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use bdevkit_jsonrpc::{Client, Error, MethodRegistry, Server, ServerOptions};
use serde_json::json;

use crate::harness::{TempDir, TestServer};

fn opts(path: &std::path::Path) -> ServerOptions {
    ServerOptions {
        unix_path: Some(path.to_owned()),
        ..ServerOptions::default()
    }
}

#[test]
fn socket_mode_lock_file_and_cleanup() {
    let dir = TempDir::new();
    let path = dir.join("a.sock");
    let lock = dir.join("a.sock.lock");
    let server = Server::bind(opts(&path), MethodRegistry::new()).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(lock.exists());
    assert_eq!(server.unix_path(), Some(path.as_path()));
    drop(server);
    assert!(!path.exists());
    assert!(!lock.exists());
}

#[test]
fn stale_socket_file_is_replaced() {
    let dir = TempDir::new();
    let path = dir.join("stale.sock");
    // A socket file left behind by a dead process: bound, never unlinked.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    assert!(Client::connect_unix(&path).is_err());
    let mut server = Server::bind(opts(&path), MethodRegistry::new()).unwrap();
    let p2 = path.clone();
    let t = std::thread::spawn(move || {
        let mut c = Client::connect_unix(&p2).unwrap();
        c.call("rpc_get_methods", None).unwrap()
    });
    while !t.is_finished() {
        server.poll_timeout(Some(std::time::Duration::from_millis(10)));
    }
    assert_eq!(t.join().unwrap(), json!(["rpc_get_methods"]));
}

#[test]
fn live_server_lock_is_a_clear_error() {
    let dir = TempDir::new();
    let path = dir.join("busy.sock");
    let first = Server::bind(opts(&path), MethodRegistry::new()).unwrap();
    let err = Server::bind(opts(&path), MethodRegistry::new()).unwrap_err();
    assert!(matches!(err, Error::BindInUse { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("rpc socket {} is in use by another process", path.display())
    );
    assert_eq!(err.errno(), libc::EADDRINUSE);
    // The failed attempt left the live server's files alone.
    assert!(path.exists());
    assert!(dir.join("busy.sock.lock").exists());
    drop(first);
    // Free again.
    drop(Server::bind(opts(&path), MethodRegistry::new()).unwrap());
}

#[test]
fn path_too_long() {
    let dir = TempDir::new();
    let name = "x".repeat(110);
    let err = Server::bind(opts(&dir.join(&name)), MethodRegistry::new()).unwrap_err();
    assert!(matches!(err, Error::BindPathTooLong { .. }), "{err:?}");
    assert!(err.to_string().contains("too long"));
    // Nothing was created.
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
    // The socket path fits but `<path>.lock` does not.
    let base = dir.0.as_os_str().len() + 1;
    let name = "y".repeat(107 - base - 2);
    let err = Server::bind(opts(&dir.join(&name)), MethodRegistry::new()).unwrap_err();
    assert!(matches!(err, Error::BindPathTooLong { .. }), "{err:?}");
}

#[test]
fn refuses_to_remove_a_regular_file() {
    let dir = TempDir::new();
    let path = dir.join("file.sock");
    std::fs::write(&path, b"keep me").unwrap();
    let err = Server::bind(opts(&path), MethodRegistry::new()).unwrap_err();
    assert!(matches!(err, Error::BindNotSocket { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    assert!(!dir.join("file.sock.lock").exists());
}

#[test]
fn no_listener_is_an_error() {
    let err = Server::bind(ServerOptions::default(), MethodRegistry::new()).unwrap_err();
    assert!(matches!(err, Error::BindNoListener));
}

#[test]
fn tcp_listener() {
    let srv = TestServer::start_with(|o| o.tcp_addr = Some("127.0.0.1:0".parse().unwrap()));
    let addr = srv.tcp_addr.unwrap();
    let mut c = Client::connect_tcp(addr).unwrap();
    assert_eq!(
        c.call("echo", Some(json!({"tcp": true}))).unwrap(),
        json!({"tcp": true})
    );
    // The unix socket works at the same time.
    assert_eq!(srv.client().call("echo", None).unwrap(), json!(null));
}
