//! Bad input: each gets SPDK's error code (and text), and the daemon keeps
//! serving afterwards.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use bdevkit_jsonrpc::{RpcError, RUNTIME_STATE_MESSAGE};
use bdevkit_test::daemon::{first_json, raw_exchange, Daemon};
use serde_json::{json, Value};

fn still_serving(d: &Daemon) {
    let v = d.ok("spdk_get_version", None);
    assert!(v["version"].as_str().unwrap().starts_with("SPDK v"));
}

fn err(code: i32, msg: &str) -> Result<Value, RpcError> {
    Err(RpcError::new(code, msg))
}

#[test]
fn protocol_errors() {
    let d = Daemon::start(&[]);

    // Malformed JSON: -32700 with id null, then the connection closes.
    let out = raw_exchange(&d.socket, br#"{"jsonrpc":"2.0",,}"#);
    let v = first_json(&out);
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert_eq!(v["id"], Value::Null);
    still_serving(&d);

    // Binary garbage.
    let out = raw_exchange(&d.socket, &[0xff, 0xfe, 0x00, 0x01]);
    assert_eq!(first_json(&out)["error"]["code"], -32700);
    still_serving(&d);

    // A value that is not a request object (a number needs a delimiter to
    // be complete).
    let out = raw_exchange(&d.socket, b"42\n");
    let v = first_json(&out);
    assert_eq!(
        v["error"],
        json!({"code": -32600, "message": "Invalid request"})
    );
    still_serving(&d);

    // Empty batch.
    let out = raw_exchange(&d.socket, b"[]");
    assert_eq!(first_json(&out)["error"]["code"], -32600);

    // Unknown method.
    assert_eq!(
        d.call("bdev_bogus_create", None),
        err(-32601, "Method not found")
    );
    still_serving(&d);
}

#[test]
fn parameter_errors() {
    let d = Daemon::start(&[]);
    let decode = || err(-32603, "spdk_json_decode_object failed");

    // Wrong types, missing required, unknown keys, non-object params.
    assert_eq!(
        d.call(
            "bdev_null_create",
            Some(json!({"name": "n", "block_size": "512", "num_blocks": 8}))
        ),
        decode()
    );
    assert_eq!(
        d.call("bdev_null_create", Some(json!({"name": "n"}))),
        decode()
    );
    assert_eq!(d.call("bdev_malloc_delete", None), decode());
    assert_eq!(
        d.call("bdev_malloc_delete", Some(json!({"name": "n", "bogus": 1}))),
        decode()
    );
    assert_eq!(
        d.call(
            "bdev_null_create",
            Some(json!({"name": "n", "block_size": -512, "num_blocks": 8}))
        ),
        decode()
    );
    assert_eq!(d.call("bdev_get_bdevs", Some(json!(["x"]))), decode());
    assert_eq!(d.call("bdev_get_bdevs", Some(json!({"name": 7}))), decode());
    assert_eq!(
        d.call("bdev_get_iostat", Some(json!({"names": "x"}))),
        decode()
    );
    assert_eq!(
        d.call("bdev_reset_iostat", Some(json!({"mode": "sometimes"}))),
        decode()
    );
    assert_eq!(d.call("bdev_set_qos_limit", Some(json!({}))), decode());

    // Methods that take no params.
    assert_eq!(
        d.call("spdk_get_version", Some(json!({"x": 1}))),
        err(-32602, "spdk_get_version method requires no parameters")
    );
    assert_eq!(
        d.call("framework_get_reactors", Some(json!({}))),
        err(-32602, "`framework_get_reactors` requires no arguments")
    );
    assert_eq!(
        d.call("thread_get_stats", Some(json!({}))),
        err(-32602, "'thread_get_stats' requires no arguments")
    );
    assert_eq!(
        d.call("framework_get_subsystems", Some(json!({}))),
        err(-32602, "'framework_get_subsystems' requires no arguments")
    );
    assert_eq!(
        d.call("bdev_wait_for_examine", Some(json!({}))),
        err(-32602, "bdev_wait_for_examine requires no parameters")
    );
    // params: null counts as absent.
    assert!(d.call("spdk_get_version", Some(Value::Null)).is_ok());

    // framework_get_config.
    assert_eq!(
        d.call("framework_get_config", None),
        err(-32602, "Invalid arguments")
    );
    assert_eq!(
        d.call("framework_get_config", Some(json!({"name": "iscsi"}))),
        err(-32602, "Subsystem 'iscsi' not found")
    );
    assert_eq!(
        d.call("spdk_kill_instance", Some(json!({"sig_name": "SIGSEGV"}))),
        err(-32602, "Invalid parameters")
    );

    // State: STARTUP-only methods in RUNTIME.
    assert_eq!(
        d.call("bdev_set_options", Some(json!({"bdev_io_pool_size": 1024}))),
        err(-1, RUNTIME_STATE_MESSAGE)
    );
    assert_eq!(
        d.call("framework_start_init", None),
        err(-1, RUNTIME_STATE_MESSAGE)
    );
    still_serving(&d);
}

#[test]
fn bdev_errors() {
    let d = Daemon::start(&[]);
    let null = |name: &str| json!({"name": name, "block_size": 512, "num_blocks": 64});
    assert_eq!(d.ok("bdev_null_create", Some(null("N0"))), json!("N0"));

    // Duplicate name, also against another module.
    assert_eq!(
        d.call("bdev_null_create", Some(null("N0"))),
        err(-17, "File exists")
    );
    assert_eq!(
        d.call(
            "bdev_malloc_create",
            Some(json!({"name": "N0", "block_size": 512, "num_blocks": 64}))
        ),
        err(-17, "File exists")
    );
    // Bad geometry.
    assert_eq!(
        d.call(
            "bdev_null_create",
            Some(json!({"name": "N1", "block_size": 500, "num_blocks": 64}))
        ),
        err(-22, "Invalid argument")
    );
    // Missing bdevs.
    assert_eq!(
        d.call("bdev_null_delete", Some(json!({"name": "nope"}))),
        err(-19, "No such device")
    );
    assert_eq!(
        d.call("bdev_get_bdevs", Some(json!({"name": "nope"}))),
        err(-19, "No such device")
    );
    assert_eq!(
        d.call(
            "bdev_get_bdevs",
            Some(json!({"name": "nope", "timeout": 120}))
        ),
        err(-110, "Connection timed out")
    );
    assert_eq!(
        d.call("bdev_get_iostat", Some(json!({"names": ["nope"]}))),
        err(-19, "No such device")
    );
    assert_eq!(
        d.call("bdev_reset_iostat", Some(json!({"name": "nope"}))),
        err(-19, "No such device")
    );
    assert_eq!(
        d.call(
            "bdev_set_qos_limit",
            Some(json!({"name": "nope", "rw_ios_per_sec": 1000}))
        ),
        err(-19, "No such device")
    );
    // Semantic checks.
    assert_eq!(
        d.call("bdev_set_qos_limit", Some(json!({"name": "N0"}))),
        err(-22, "No rate limits specified")
    );
    assert_eq!(
        d.call("bdev_get_iostat", Some(json!({"per_channel": true}))),
        err(-22, "Invalid argument")
    );
    assert_eq!(
        d.call(
            "bdev_get_iostat",
            Some(json!({"name": "N0", "names": ["N0"]}))
        ),
        err(-22, "Invalid argument")
    );
    assert_eq!(
        d.call("bdev_examine", Some(json!({"name": "N0"}))),
        err(-22, "Invalid argument")
    );
    // bdev_get_bdevs waits for a bdev that appears meanwhile.
    let sock = d.socket.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = bdevkit_jsonrpc::Client::connect_unix(&sock).unwrap();
        c.call(
            "bdev_get_bdevs",
            Some(json!({"name": "Late", "timeout": 20000.0})),
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(150));
    let late = json!({"name": "Late", "block_size": 512, "num_blocks": 64});
    assert_eq!(d.ok("bdev_malloc_create", Some(late)), json!("Late"));
    let got = waiter.join().unwrap().unwrap();
    assert_eq!(got[0]["name"], "Late");
    still_serving(&d);
}

#[test]
fn oversized_request_and_disconnects() {
    let d = Daemon::start(&[]);

    // A request beyond the server's limit (64 MiB): -32600, connection closed.
    let mut big = Vec::with_capacity(65 << 20);
    big.extend_from_slice(
        br#"{"jsonrpc":"2.0","id":1,"method":"bdev_get_bdevs","params":{"name":""#,
    );
    big.resize(big.len() + (65 << 20), b'a');
    big.extend_from_slice(br#""}}"#);
    let out = raw_exchange(&d.socket, &big);
    let v = first_json(&out);
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("exceeds"));
    still_serving(&d);

    // Clients that disconnect mid-request, or right after a request.
    for _ in 0..10 {
        let mut s = UnixStream::connect(&d.socket).unwrap();
        s.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"bdev_get_bd"#)
            .unwrap();
        drop(s);
        let mut s = UnixStream::connect(&d.socket).unwrap();
        s.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"bdev_get_bdevs"}"#)
            .unwrap();
        drop(s);
    }
    still_serving(&d);
}

#[test]
fn concurrent_clients_create_and_delete() {
    const CLIENTS: usize = 32;
    const ROUNDS: usize = 15;
    let d = Arc::new(Daemon::start(&[]));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let d = Arc::clone(&d);
            std::thread::spawn(move || {
                let mut c = d.client();
                for i in 0..ROUNDS {
                    let name = format!("c{t}_{i}");
                    let (method, del) = if (t + i) % 2 == 0 {
                        ("bdev_null_create", "bdev_null_delete")
                    } else {
                        ("bdev_malloc_create", "bdev_malloc_delete")
                    };
                    let p = json!({"name": name, "block_size": 512, "num_blocks": 128});
                    assert_eq!(c.call(method, Some(p)).unwrap(), json!(name));
                    let got = c
                        .call("bdev_get_bdevs", Some(json!({"name": name})))
                        .unwrap();
                    assert_eq!(got[0]["name"], json!(name));
                    assert_eq!(
                        c.call(del, Some(json!({"name": name}))).unwrap(),
                        json!(true)
                    );
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(d.ok("bdev_get_bdevs", None), json!([]));
    still_serving(&d);
}
