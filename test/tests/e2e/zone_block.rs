//! `bdev_zone_block` through the real daemon, driven by SPDK's client:
//! create, `bdev_get_bdevs`, errors, save_config, delete; and, where the
//! reference SPDK build is present, the same calls on `spdk_tgt` give the
//! same zoned bdev (keys, geometry, UUID, `driver_specific`, I/O types).

use std::path::Path;

use bdevkit_test::daemon::{run, text, Daemon};
use bdevkit_test::spdk_rpc::spdk_rpc;
use serde_json::{json, Value};

use crate::ref_spdk::{spdk_tgt, Spdk};

const BASE_UUID: &str = "4a1e3b5c-7d2f-4e80-9b1a-0c6d5e4f3a21";

/// spdk-rpc: (success, stdout, everything for messages).
fn call3(exe: &Path, socket: &Path, args: &[&str]) -> (bool, String, String) {
    let sock = socket.to_str().expect("invariant: utf-8 temp path");
    let mut full = vec!["-s", sock];
    full.extend_from_slice(args);
    let o = run(exe, &full, None);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        text(&o),
    )
}

fn call(exe: &Path, socket: &Path, args: &[&str]) -> (bool, String) {
    let (good, _, all) = call3(exe, socket, args);
    (good, all)
}

fn ok(exe: &Path, socket: &Path, args: &[&str]) -> Value {
    let (good, out, all) = call3(exe, socket, args);
    assert!(good, "spdk-rpc {args:?}: {all}");
    serde_json::from_str(out.trim()).unwrap_or(Value::String(out.trim().to_string()))
}

/// The malloc base (fixed UUID) and the zoned bdev over it.
fn make(exe: &Path, socket: &Path) -> Value {
    ok(
        exe,
        socket,
        &[
            "bdev_malloc_create",
            "-b",
            "M0",
            "-u",
            BASE_UUID,
            "8",
            "512",
        ],
    );
    assert_eq!(
        ok(
            exe,
            socket,
            &[
                "bdev_zone_block_create",
                "-b",
                "Z0",
                "-n",
                "M0",
                "-z",
                "1000",
                "-o",
                "4"
            ]
        ),
        json!("Z0")
    );
    ok(exe, socket, &["bdev_get_bdevs", "-b", "Z0"])[0].clone()
}

#[test]
fn zone_block_through_spdk_rpc_and_as_spdk_has_it() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);
    let z = make(&exe, &d.socket);
    assert_eq!(z["zoned"], true);
    assert_eq!(z["zone_size"], 1024);
    assert_eq!(z["optimal_open_zones"], 4);
    assert_eq!(z["num_blocks"], 16 * 1024);
    assert_eq!(z["product_name"], "zone_block");
    assert_eq!(
        z["driver_specific"],
        json!({"zoned_block": {"name": "Z0", "base_bdev": "M0",
            "zone_capacity": 1000, "optimal_open_zones": 4}})
    );
    let (good, out) = call(
        &exe,
        &d.socket,
        &[
            "bdev_zone_block_create",
            "-b",
            "Z1",
            "-n",
            "M0",
            "-z",
            "0",
            "-o",
            "1",
        ],
    );
    assert!(
        !good && out.contains("Failed to create block zoned vbdev: Invalid argument"),
        "{out}"
    );
    let cfg = d.ok("framework_get_config", Some(json!({"name": "bdev"})));
    let saved: Vec<&Value> = cfg
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["method"] == "bdev_zone_block_create")
        .collect();
    assert_eq!(saved.len(), 1, "{cfg}");
    assert_eq!(saved[0]["params"]["base_bdev"], "M0");

    if let Some(tgt) = spdk_tgt() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("empty.json");
        std::fs::write(&cfg, r#"{"subsystems": []}"#).unwrap();
        let s = Spdk::start(&tgt, dir.path(), "spdk", &cfg);
        let mut theirs = make(&exe, s.socket());
        // The one difference, on purpose (doc/zoned.md): SPDK's zone_block
        // serves zone reports but reports `get_zone_info: false`.
        assert_eq!(theirs["supported_io_types"]["get_zone_info"], false);
        theirs["supported_io_types"]["get_zone_info"] = json!(true);
        for key in [
            "name",
            "block_size",
            "num_blocks",
            "uuid",
            "product_name",
            "zoned",
            "zone_size",
            "max_open_zones",
            "optimal_open_zones",
            "supported_io_types",
            "driver_specific",
        ] {
            assert_eq!(z[key], theirs[key], "{key}: ours {z} SPDK's {theirs}");
        }
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&z), keys(&theirs), "the same keys in the same order");
        s.stop();
    } else {
        eprintln!("zone_block vs spdk_tgt skipped: reference SPDK build not found");
    }

    ok(&exe, &d.socket, &["bdev_zone_block_delete", "Z0"]);
    assert!(
        d.call("bdev_get_bdevs", Some(json!({"name": "Z0"})))
            .is_err(),
        "Z0 gone"
    );
    let (good, out) = call(&exe, &d.socket, &["bdev_zone_block_delete", "Z0"]);
    assert!(!good && out.contains("No such device"), "{out}");
}
