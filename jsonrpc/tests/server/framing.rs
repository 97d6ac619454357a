//! Stream framing on the wire: split requests, back-to-back requests, bad and oversized input.

use serde_json::json;

use crate::harness::TestServer;

const PARSE_ERROR: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;

#[test]
fn request_split_byte_by_byte() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    let req = serde_json::to_string_pretty(
        &json!({"jsonrpc": "2.0", "method": "echo", "id": 1, "params": {"a": [1, 2], "s": "x\"}"}}),
    )
    .unwrap();
    for b in req.as_bytes() {
        raw.send(std::slice::from_ref(b));
    }
    assert_eq!(
        raw.line(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"a":[1,2],"s":"x\"}"}}"#
    );
}

#[test]
fn request_split_in_chunks_across_polls() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    let req = br#"{"jsonrpc":"2.0","method":"echo","id":2,"params":{"k":"[{\\"}}"#;
    let (a, b) = req.split_at(20);
    raw.send(a);
    // A second connection is answered while the first request is incomplete.
    let mut other = srv.client();
    assert_eq!(other.call("echo", Some(json!([1]))).unwrap(), json!([1]));
    raw.send(b);
    assert_eq!(
        raw.line(),
        r#"{"jsonrpc":"2.0","id":2,"result":{"k":"[{\\"}}"#
    );
}

#[test]
fn several_requests_in_one_write() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(
        br#"{"jsonrpc":"2.0","method":"echo","id":1,"params":[1]}{"jsonrpc":"2.0","method":"echo","id":2,"params":[2]}
  {"jsonrpc":"2.0","method":"echo","id":3,"params":[3]}"#,
    );
    for i in 1..=3 {
        assert_eq!(
            raw.line(),
            format!(r#"{{"jsonrpc":"2.0","id":{i},"result":[{i}]}}"#)
        );
    }
}

#[test]
fn many_pipelined_requests() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    let mut all = Vec::new();
    for i in 0..500 {
        all.extend_from_slice(
            format!(r#"{{"jsonrpc":"2.0","method":"echo","id":{i},"params":{{"i":{i}}}}}"#)
                .as_bytes(),
        );
    }
    raw.send(&all);
    for i in 0..500 {
        assert_eq!(
            raw.line(),
            format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{"i":{i}}}}}"#)
        );
    }
}

#[test]
fn pretty_printed_without_newline() {
    // Exactly what spdk-rpc sends: json.dumps(req, indent=2), no trailing newline.
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(
        b"{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"rpc_get_methods\",\n  \"id\": 1,\n  \"params\": {\n    \"current\": false,\n    \"include_aliases\": false\n  }\n}",
    );
    let line = raw.line();
    assert!(
        line.starts_with(r#"{"jsonrpc":"2.0","id":1,"result":["rpc_get_methods","#),
        "{line}"
    );
}

#[test]
fn malformed_json_gets_parse_error_then_close() {
    let srv = TestServer::start();
    let mut bystander = srv.client();
    for bad in [
        &br#"{"jsonrpc":"2.0",,}"#[..],
        b"not json",
        b"\x00\x01\x02\xff",
        b"}",
        br#"{"a":1]"#,
    ] {
        let mut raw = srv.raw();
        raw.send(bad);
        assert_eq!(raw.line(), PARSE_ERROR, "input {bad:?}");
        raw.expect_closed();
        assert_eq!(
            bystander.call("echo", Some(json!([7]))).unwrap(),
            json!([7])
        );
    }
}

#[test]
fn answers_before_parse_error_are_sent_first() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(
        br#"{"jsonrpc":"2.0","method":"echo","id":1} {"jsonrpc":"2.0",,} {"method":"echo","id":2}"#,
    );
    assert_eq!(raw.line(), r#"{"jsonrpc":"2.0","id":1,"result":null}"#);
    assert_eq!(raw.line(), PARSE_ERROR);
    raw.expect_closed();
}

#[test]
fn oversized_request_is_rejected_and_closed() {
    let srv = TestServer::start_with(|o| o.max_request_bytes = 1024);
    let want = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request: request exceeds 1024 bytes"}}"#;

    // Complete but too large.
    let mut raw = srv.raw();
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","id":1,"params":["{}"]}}"#,
        "a".repeat(2000)
    );
    raw.send(big.as_bytes());
    assert_eq!(raw.line(), want);
    raw.expect_closed();

    // Still arriving, already too large: rejected without waiting for the end.
    let mut raw = srv.raw();
    raw.send(br#"{"jsonrpc":"2.0","method":"echo","params":[""#);
    raw.send("b".repeat(1100).as_bytes());
    assert_eq!(raw.line(), want);
    raw.expect_closed();

    // Right at the limit is fine.
    let mut c = srv.client();
    let pad = 1024 - r#"{"jsonrpc":"2.0","method":"echo","id":1,"params":[""]}"#.len();
    let v = c.call("echo", Some(json!(["c".repeat(pad)]))).unwrap();
    assert_eq!(v[0].as_str().unwrap().len(), pad);
}

#[test]
fn top_level_scalars_are_invalid_requests() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    let invalid =
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}}"#;
    raw.send(b"\"str\" 42\ntrue null ");
    for _ in 0..4 {
        assert_eq!(raw.line(), invalid);
    }
    // The connection stays usable.
    assert_eq!(raw.sync(), r#"{"jsonrpc":"2.0","id":"sync","result":null}"#);
}

#[test]
fn whitespace_only_and_peer_half_close() {
    let srv = TestServer::start();
    let mut raw = srv.raw();
    raw.send(b"\n\n   \t\r\n");
    raw.send(br#"{"jsonrpc":"2.0","method":"echo","id":5}"#);
    // Half-close: the answer still comes, then the server closes.
    raw.s.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(raw.line(), r#"{"jsonrpc":"2.0","id":5,"result":null}"#);
    raw.expect_closed();
}
