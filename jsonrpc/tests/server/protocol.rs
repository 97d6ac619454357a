//! Request validation, ids, notifications, batches, states and `rpc_get_methods` (spec 1.3-1.7).

use bdevkit_jsonrpc::{ClientError, RpcError, RUNTIME_STATE_MESSAGE, STARTUP_STATE_MESSAGE};
use serde_json::{json, Value};

use crate::harness::TestServer;

const INVALID: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}}"#;

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

#[test]
fn batch_normal() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(
        br#"[{"jsonrpc":"2.0","method":"echo","id":1,"params":[1]},
             {"jsonrpc":"2.0","method":"fail_errno","id":2},
             {"jsonrpc":"2.0","method":"echo","id":"three","params":{"x":3}}]"#,
    );
    // Synchronous handlers complete in request order.
    assert_eq!(
        raw.line(),
        r#"[{"jsonrpc":"2.0","id":1,"result":[1]},{"jsonrpc":"2.0","id":2,"error":{"code":-19,"message":"No such device"}},{"jsonrpc":"2.0","id":"three","result":{"x":3}}]"#
    );
}

#[test]
fn batch_empty() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(b"[]");
    assert_eq!(raw.line(), INVALID);
    raw.send(b"[ \n ]");
    assert_eq!(raw.line(), INVALID);
}

#[test]
fn batch_with_non_object_elements() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(br#"[1,{"jsonrpc":"2.0","method":"echo","id":1},"x",[]]"#);
    let v = parse(&raw.line());
    let a = v.as_array().unwrap();
    assert_eq!(a.len(), 4);
    assert_eq!(a[0], parse(INVALID));
    assert_eq!(a[1], json!({"jsonrpc":"2.0","id":1,"result":null}));
    assert_eq!(a[2], parse(INVALID));
    assert_eq!(a[3], parse(INVALID));
}

#[test]
fn batch_all_notifications_sends_nothing() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(br#"[{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","method":"echo","id":null}]"#);
    // Nothing came for the batch: the next line is the probe's answer.
    assert_eq!(raw.sync(), r#"{"jsonrpc":"2.0","id":"sync","result":null}"#);
}

#[test]
fn batch_notification_errors_are_included() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(br#"[{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","method":"nope"}]"#);
    assert_eq!(
        raw.line(),
        r#"[{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}]"#
    );
}

#[test]
fn batch_elements_in_completion_order() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(
        br#"[{"jsonrpc":"2.0","method":"park","id":1},{"jsonrpc":"2.0","method":"echo","id":2}]"#,
    );
    let parked = srv.take_parked(1);
    for r in parked {
        r.ok(json!("late"));
    }
    assert_eq!(
        raw.line(),
        r#"[{"jsonrpc":"2.0","id":2,"result":null},{"jsonrpc":"2.0","id":1,"result":"late"}]"#
    );
}

#[test]
fn notification_success_is_silent_error_is_sent() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(br#"{"jsonrpc":"2.0","method":"echo","params":[1]}"#);
    raw.send(br#"{"jsonrpc":"2.0","method":"echo","id":null}"#);
    raw.send(br#"{"jsonrpc":"2.0","method":"fail_errno"}"#);
    assert_eq!(
        raw.line(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-19,"message":"No such device"}}"#
    );
    raw.send(br#"{"jsonrpc":"2.0","method":"no_such_method","id":null}"#);
    assert_eq!(
        raw.line(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}"#
    );
    assert_eq!(raw.sync(), r#"{"jsonrpc":"2.0","id":"sync","result":null}"#);
}

#[test]
fn id_types() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    for (id, echoed) in [
        (r#""abc""#, r#""abc""#),
        (r#""a\u0062""#, r#""a\u0062""#),
        ("7", "7"),
        ("-3", "-3"),
        ("1.50", "1.50"),
        ("18446744073709551615", "18446744073709551615"),
    ] {
        raw.send(
            format!(r#"{{"jsonrpc":"2.0","method":"echo","id":{id},"params":[0]}}"#).as_bytes(),
        );
        assert_eq!(
            raw.line(),
            format!(r#"{{"jsonrpc":"2.0","id":{echoed},"result":[0]}}"#)
        );
    }
    for bad in [r#"{"a":1}"#, "[1]", "true"] {
        raw.send(format!(r#"{{"jsonrpc":"2.0","method":"echo","id":{bad}}}"#).as_bytes());
        assert_eq!(raw.line(), INVALID, "id {bad}");
    }
}

#[test]
fn jsonrpc_member() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(br#"{"jsonrpc":"1.0","method":"echo","id":1}"#);
    assert_eq!(raw.line(), INVALID);
    raw.send(br#"{"jsonrpc":2,"method":"echo","id":1}"#);
    assert_eq!(raw.line(), INVALID);
    // Optional, as in SPDK.
    raw.send(br#"{"method":"echo","id":1}"#);
    assert_eq!(raw.line(), r#"{"jsonrpc":"2.0","id":1,"result":null}"#);
}

#[test]
fn malformed_request_objects() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    for bad in [
        &br#"{"jsonrpc":"2.0","id":1}"#[..],
        br#"{"jsonrpc":"2.0","method":["echo"],"id":1}"#,
        br#"{"jsonrpc":"2.0","method":"echo","id":1,"extra":true}"#,
        br#"{"jsonrpc":"2.0","method":"echo","method":"echo","id":1}"#,
        b"{}",
    ] {
        raw.send(bad);
        assert_eq!(raw.line(), INVALID, "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn params_of_wrong_type() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    // As in SPDK, the id was accepted before params were checked, so it is echoed.
    for p in ["5", r#""str""#, "true"] {
        raw.send(format!(r#"{{"jsonrpc":"2.0","method":"echo","id":9,"params":{p}}}"#).as_bytes());
        assert_eq!(
            raw.line(),
            r#"{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"Invalid request"}}"#
        );
    }
    // null params are absent params.
    raw.send(br#"{"jsonrpc":"2.0","method":"echo","id":10,"params":null}"#);
    assert_eq!(raw.line(), r#"{"jsonrpc":"2.0","id":10,"result":null}"#);
}

#[test]
fn unknown_method() {
    let srv = TestServer::start();
    let mut c = srv.client();
    match c.call("no_such_method", None) {
        Err(ClientError::Rpc(e)) => assert_eq!(e, RpcError::method_not_found()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn typed_params_decode() {
    let srv = TestServer::start();
    let mut c = srv.client();
    assert_eq!(
        c.call("typed", Some(json!({"name": "n", "size": 4})))
            .unwrap(),
        json!({"name": "n", "size": 4})
    );
    for p in [
        None,
        Some(json!({})),
        Some(json!(["n"])),
        Some(json!({"name": "n", "x": 1})),
    ] {
        match c.call("typed", p.clone()) {
            Err(ClientError::Rpc(e)) => assert_eq!(e, RpcError::decode_failed(), "{p:?}"),
            other => panic!("{p:?}: {other:?}"),
        }
    }
}

fn names(v: Value) -> Vec<String> {
    serde_json::from_value(v).unwrap()
}

#[test]
fn state_masks_and_rpc_get_methods_current() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let rpc_err = |r: Result<Value, ClientError>| match r {
        Err(ClientError::Rpc(e)) => e,
        other => panic!("{other:?}"),
    };

    assert_eq!(
        rpc_err(c.call("runtime_only", None)),
        RpcError::new(-1, STARTUP_STATE_MESSAGE)
    );
    assert_eq!(
        STARTUP_STATE_MESSAGE,
        "Method may only be called after framework is initialized using framework_start_init RPC."
    );
    let current = names(
        c.call(
            "rpc_get_methods",
            Some(json!({"current": true, "include_aliases": false})),
        )
        .unwrap(),
    );
    assert!(current.contains(&"startup_only".to_owned()));
    assert!(current.contains(&"framework_start_init".to_owned()));
    assert!(current.contains(&"echo".to_owned()));
    assert!(!current.contains(&"runtime_only".to_owned()));
    let all = names(c.call("rpc_get_methods", None).unwrap());
    assert!(all.contains(&"runtime_only".to_owned()));

    assert_eq!(c.call("framework_start_init", None).unwrap(), json!(true));

    assert_eq!(c.call("runtime_only", None).unwrap(), json!(true));
    assert_eq!(
        rpc_err(c.call("startup_only", None)),
        RpcError::new(-1, RUNTIME_STATE_MESSAGE)
    );
    assert_eq!(
        RUNTIME_STATE_MESSAGE,
        "Method may only be called before framework is initialized. Use --wait-for-rpc command line parameter and then issue this RPC before the framework_start_init RPC."
    );
    let current = names(
        c.call(
            "rpc_get_methods",
            Some(json!({"current": true, "include_aliases": false})),
        )
        .unwrap(),
    );
    assert!(!current.contains(&"startup_only".to_owned()));
    assert!(!current.contains(&"framework_start_init".to_owned()));
    assert!(current.contains(&"runtime_only".to_owned()));
    assert!(current.contains(&"rpc_get_methods".to_owned()));
}

#[test]
fn rpc_get_methods_rejects_bad_params() {
    let srv = TestServer::start();
    let mut c = srv.client();
    for p in [
        json!({"bogus": true}),
        json!({"current": "yes"}),
        json!([true]),
    ] {
        match c.call("rpc_get_methods", Some(p)) {
            Err(ClientError::Rpc(e)) => {
                assert_eq!(e, RpcError::new(-32602, "Invalid parameters"))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn methods_and_aliases_registered_while_running() {
    let srv = TestServer::start();
    let mut c = srv.client();
    srv.registry
        .register("late", bdevkit_jsonrpc::STARTUP, |_, r| r.ok(json!("late")))
        .unwrap();
    srv.registry
        .register_alias("late_old_name", "late")
        .unwrap();
    assert_eq!(c.call("late", None).unwrap(), json!("late"));
    assert_eq!(c.call("late_old_name", None).unwrap(), json!("late"));
    let plain = names(c.call("rpc_get_methods", None).unwrap());
    assert!(plain.contains(&"late".to_owned()));
    assert!(!plain.contains(&"late_old_name".to_owned()));
    let with_aliases = names(
        c.call("rpc_get_methods", Some(json!({"include_aliases": true})))
            .unwrap(),
    );
    assert!(with_aliases.contains(&"late_old_name".to_owned()));
}

#[test]
fn allow_list() {
    let srv = TestServer::start();
    let mut c = srv.client();
    srv.registry
        .set_allowed(Some(vec!["rpc_get_methods".into(), "echo".into()]));
    assert_eq!(
        names(c.call("rpc_get_methods", None).unwrap()),
        vec!["rpc_get_methods", "echo"]
    );
    match c.call("fail_errno", None) {
        Err(ClientError::Rpc(e)) => assert_eq!(e, RpcError::method_not_found()),
        other => panic!("{other:?}"),
    }
}
