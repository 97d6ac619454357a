//! Large batches and large responses.

use serde_json::json;

use crate::harness::TestServer;

#[test]
fn batch_of_10000_round_trip() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let pad = "p".repeat(140);
    let calls: Vec<(String, Option<serde_json::Value>)> = (0..10_000)
        .map(|i| {
            let m = if i % 1000 == 999 {
                "fail_errno"
            } else {
                "echo"
            };
            (m.to_owned(), Some(json!({"i": i, "pad": pad})))
        })
        .collect();
    let results = c.call_batch(&calls).unwrap();
    assert_eq!(results.len(), 10_000);
    for (i, r) in results.into_iter().enumerate() {
        if i % 1000 == 999 {
            assert_eq!(r.unwrap_err().code, -19);
        } else {
            assert_eq!(r.unwrap(), json!({"i": i, "pad": pad}));
        }
    }
    // The connection goes on.
    assert_eq!(c.call("echo", Some(json!([1]))).unwrap(), json!([1]));
}

#[test]
fn response_of_15_megabytes() {
    let srv = TestServer::start();
    let mut c = srv.client();
    let v = c.call("big", Some(json!({"count": 10_000}))).unwrap();
    let a = v.as_array().unwrap();
    assert_eq!(a.len(), 10_000);
    assert_eq!(a[9_999]["name"], "Malloc9999");
    let bytes = serde_json::to_vec(&v).unwrap().len();
    assert!(bytes > 14_000_000, "{bytes}");
    // Twice in a row on one connection, and a small call after it.
    let v = c.call("big", Some(json!({"count": 10_000}))).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 10_000);
    assert_eq!(c.call("echo", None).unwrap(), json!(null));
}
