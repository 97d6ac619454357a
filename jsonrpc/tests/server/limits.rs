//! Connection limits: idle and stalled connections never lock new clients out, busy ones are
//! never dropped to make room, and a request or an answer that stops moving is dropped after
//! the stall timeout.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bdevkit_jsonrpc::Client;
use serde_json::json;

use crate::harness::{wait_until, TestServer, TIMEOUT};

const HALF_REQUEST: &[u8] = br#"{"jsonrpc":"2.0","method":"echo","params":{"half"#;

/// 300 connections that send nothing or half a request (with the default options: 256
/// connections, 30 s stall timeout), then a new client: it is answered at once, and the
/// server holds no more connections than its limit.
#[test]
fn idle_and_stalled_connections_do_not_lock_clients_out() {
    let srv = TestServer::start();
    let mut held = Vec::new();
    for i in 0..300 {
        let mut s = UnixStream::connect(&srv.path).unwrap();
        if i % 2 == 1 {
            s.write_all(HALF_REQUEST).unwrap();
        }
        held.push(s);
    }
    let mut c = Client::connect_unix(&srv.path).unwrap();
    c.set_timeout(Some(TIMEOUT));
    assert_eq!(
        c.call("echo", Some(json!(["served"]))).unwrap(),
        json!(["served"])
    );
    assert!(srv.connections.load(Ordering::Acquire) <= 256);
    // The oldest idle ones made room: the first connection was closed.
    let mut first = held.swap_remove(0);
    first.set_read_timeout(Some(TIMEOUT)).unwrap();
    assert_eq!(first.read(&mut [0u8; 16]).unwrap(), 0);
}

/// At the limit, the connection idle for longest makes room; one with a request in flight is
/// never closed for it, and when every connection is busy the new client waits in the backlog
/// until one of them is idle.
#[test]
fn only_idle_connections_make_room() {
    let srv = TestServer::start_with(|o| o.max_connections = 2);
    let mut a = srv.raw();
    a.send(br#"{"jsonrpc":"2.0","method":"park","id":"a"}"#);
    let mut parked = srv.take_parked(1);
    let mut b = srv.raw();
    srv.wait_connections(2);
    // A third client: idle `b` goes, busy `a` stays.
    let mut c = srv.raw();
    c.send(br#"{"jsonrpc":"2.0","method":"park","id":"c"}"#);
    b.expect_closed();
    parked.extend(srv.take_parked(1));
    // Both busy: a fourth client waits.
    let path = srv.path.clone();
    let d = std::thread::spawn(move || {
        let mut d = Client::connect_unix(&path).unwrap();
        d.set_timeout(Some(TIMEOUT));
        d.call("echo", Some(json!(["d"]))).unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!d.is_finished(), "a busy connection was closed for it");
    assert_eq!(srv.connections.load(Ordering::Acquire), 2);
    // Once answered, `a` is idle: it gets its answer, then makes room.
    parked.remove(0).ok(json!("done"));
    assert_eq!(a.line(), r#"{"jsonrpc":"2.0","id":"a","result":"done"}"#);
    assert_eq!(d.join().unwrap(), json!(["d"]));
    a.expect_closed();
    parked.remove(0).ok(json!("late"));
    assert_eq!(c.line(), r#"{"jsonrpc":"2.0","id":"c","result":"late"}"#);
}

/// A request that stops half-way is answered -32600 and closed after the stall timeout; a
/// connection that sends nothing at all is left open.
#[test]
fn stalled_request_is_dropped() {
    let srv = TestServer::start_with(|o| o.stall_timeout = Some(Duration::from_millis(100)));
    let mut quiet = srv.client();
    let mut stalled = srv.raw();
    stalled.send(HALF_REQUEST);
    assert_eq!(
        stalled.line(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request: incomplete request, nothing received for 100ms"}}"#
    );
    stalled.expect_closed();
    // Open for longer than the timeout, but it had nothing half-sent.
    assert_eq!(quiet.call("echo", Some(json!([1]))).unwrap(), json!([1]));
}

/// A client that asks for a large answer and never reads it is closed after the stall
/// timeout instead of holding its output (and its place) for ever.
#[test]
fn unread_answer_is_dropped() {
    let srv = TestServer::start_with(|o| o.stall_timeout = Some(Duration::from_millis(100)));
    let mut reader = srv.client();
    let mut s = UnixStream::connect(&srv.path).unwrap();
    // About 3 MB of answer, far more than the socket buffers hold.
    s.write_all(br#"{"jsonrpc":"2.0","method":"big","params":{"count":2000},"id":1}"#)
        .unwrap();
    srv.wait_connections(2);
    wait_until(|| srv.connections.load(Ordering::Acquire) == 1);
    assert_eq!(reader.call("echo", Some(json!([2]))).unwrap(), json!([2]));
}
