//! Async answers, dropped responders, disconnecting clients, many clients, fd readiness.

use std::sync::Arc;

use bdevkit_jsonrpc::{
    Client, ClientError, MethodRegistry, RpcError, Server, ServerOptions, STARTUP,
};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use parking_lot::Mutex;
use serde_json::json;

use crate::harness::{TempDir, TestServer, TIMEOUT};

#[test]
fn async_handler_answers_from_another_thread() {
    let srv = TestServer::start();
    let mut c = srv.client();
    assert_eq!(
        c.call("delayed", Some(json!({"ms": 30}))).unwrap(),
        json!({"slept_ms": 30})
    );
}

#[test]
fn responses_in_completion_order() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(
        br#"{"jsonrpc":"2.0","method":"park","id":1}{"jsonrpc":"2.0","method":"echo","id":2}"#,
    );
    assert_eq!(raw.line(), r#"{"jsonrpc":"2.0","id":2,"result":null}"#);
    let parked = srv.take_parked(1);
    std::thread::spawn(move || {
        for r in parked {
            r.ok(json!("from another thread"));
        }
    })
    .join()
    .unwrap();
    assert_eq!(
        raw.line(),
        r#"{"jsonrpc":"2.0","id":1,"result":"from another thread"}"#
    );
}

#[test]
fn dropped_responder_answers_internal_error() {
    let srv = TestServer::start();
    let mut c = srv.client();
    match c.call("drop_responder", None) {
        Err(ClientError::Rpc(e)) => assert_eq!(e, RpcError::internal_error("Internal error")),
        other => panic!("{other:?}"),
    }
    // Also when it is dropped later, on another thread.
    let mut raw = srv.raw();
    raw.send(br#"{"jsonrpc":"2.0","method":"park","id":4}"#);
    let parked = srv.take_parked(1);
    std::thread::spawn(move || drop(parked)).join().unwrap();
    assert_eq!(
        raw.line(),
        r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32603,"message":"Internal error"}}"#
    );
}

#[test]
fn client_disconnects_mid_request() {
    let srv = TestServer::start();
    let mut keep = srv.client();
    assert_eq!(keep.call("echo", None).unwrap(), json!(null));
    {
        let mut raw = srv.raw();
        raw.send(br#"{"jsonrpc":"2.0","method":"echo","params":{"half"#);
        srv.wait_connections(2);
    }
    srv.wait_connections(1);
    assert_eq!(keep.call("echo", Some(json!([1]))).unwrap(), json!([1]));
}

#[test]
fn client_disconnects_before_async_answer() {
    let srv = TestServer::start();
    let mut keep = srv.client();
    assert_eq!(keep.call("echo", None).unwrap(), json!(null));

    let mut gone = srv.raw();
    gone.send(br#"{"jsonrpc":"2.0","method":"park","id":"orphan"}"#);
    // Half of a second request too, so the server holds buffered input for it.
    gone.send(br#"{"jsonrpc":"2.0","method":"pa"#);
    let orphan = srv.take_parked(1).pop().unwrap();
    drop(gone);
    srv.wait_connections(1);

    // A late answer for the closed connection, from another thread: silently dropped.
    std::thread::spawn(move || orphan.ok(json!("nobody listens")))
        .join()
        .unwrap();

    // Nobody else is disturbed.
    assert_eq!(keep.call("echo", Some(json!([2]))).unwrap(), json!([2]));
    let mut live = srv.raw();
    live.send(br#"{"jsonrpc":"2.0","method":"park","id":"live"}"#);
    srv.take_parked(1).pop().unwrap().ok(json!("live"));
    assert_eq!(
        live.line(),
        r#"{"jsonrpc":"2.0","id":"live","result":"live"}"#
    );
    srv.wait_connections(2);
}

#[test]
fn many_clients_in_parallel() {
    let srv = Arc::new(TestServer::start());
    let threads: Vec<_> = (0..32)
        .map(|t| {
            let srv = Arc::clone(&srv);
            std::thread::spawn(move || {
                let mut c = srv.client();
                for i in 0..200 {
                    if i % 50 == 49 {
                        // Now and then an answer that comes from another thread.
                        let v = c.call("delayed", Some(json!({"ms": 1}))).unwrap();
                        assert_eq!(v, json!({"slept_ms": 1}));
                    } else {
                        let p = json!({"t": t, "i": i});
                        assert_eq!(c.call("echo", Some(p.clone())).unwrap(), p);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// A server on `path` whose `park` method keeps its responders.
fn parking_server(path: &std::path::Path) -> (Server, Arc<Mutex<Vec<bdevkit_jsonrpc::Responder>>>) {
    let reg = MethodRegistry::new();
    let parked = Arc::new(Mutex::new(Vec::new()));
    let p2 = Arc::clone(&parked);
    reg.register("park", STARTUP, move |_, r| p2.lock().push(r))
        .unwrap();
    let opts = ServerOptions {
        unix_path: Some(path.to_path_buf()),
        ..ServerOptions::default()
    };
    (Server::bind(opts, reg).unwrap(), parked)
}

#[test]
fn fd_becomes_readable_when_there_is_work() {
    let dir = TempDir::new();
    let path = dir.join("fd.sock");
    let (mut server, parked) = parking_server(&path);

    // The owner waits on the server's fd with its own epoll, as a reactor would.
    let mut outer = Poll::new().unwrap();
    let fd = server.as_raw_fd();
    outer
        .registry()
        .register(&mut SourceFd(&fd), Token(0), Interest::READABLE)
        .unwrap();
    let mut events = Events::with_capacity(4);

    let client = std::thread::spawn(move || {
        let mut c = Client::connect_unix(&path).unwrap();
        c.set_timeout(Some(TIMEOUT));
        c.call("park", None)
    });
    // Drive the server only when its fd says so, until the handler has run.
    while parked.lock().is_empty() {
        outer.poll(&mut events, Some(TIMEOUT)).unwrap();
        assert!(!events.is_empty(), "server fd never became readable");
        server.poll();
    }
    // Quiesce, then answer from another thread while nobody polls the server: the answer alone
    // must make the fd readable.
    while server.poll() {}
    assert!(!server.answers_pending());
    let r = parked.lock().pop().unwrap();
    std::thread::spawn(move || r.ok(json!("woken")))
        .join()
        .unwrap();
    // An owner polling on a period sees the answer at once, too.
    assert!(server.answers_pending());
    outer.poll(&mut events, Some(TIMEOUT)).unwrap();
    assert!(!events.is_empty(), "answer did not wake the server fd");
    while server.poll() {}
    assert!(!server.answers_pending());
    assert_eq!(client.join().unwrap().unwrap(), json!("woken"));
}

#[test]
fn a_request_sent_with_the_connect_is_read_in_the_poll_that_accepts() {
    let dir = TempDir::new();
    let path = dir.join("one.sock");
    let (mut server, parked) = parking_server(&path);
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    std::io::Write::write_all(&mut s, br#"{"jsonrpc":"2.0","method":"park","id":1}"#).unwrap();
    // Both are queued in the kernel before the server looks: one poll
    // accepts the connection and dispatches the request.
    server.poll();
    assert_eq!(
        parked.lock().len(),
        1,
        "the request waited for a second poll"
    );
    drop(parked.lock().pop());
}
