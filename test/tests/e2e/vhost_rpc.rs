//! SPDK's client (`spdk-rpc`) driving bdev_tgt's vhost-blk target: the
//! four vhost methods with SPDK's CLI arguments, `vhost_get_controllers`
//! in SPDK's shape, SPDK's error codes and messages (v26.05's
//! `lib/vhost/vhost_rpc.c`: -32602 with the errno's text, -32603 for
//! `vhost_get_controllers`), sockets in the `-S` directory, and the
//! `vhost_blk` section of `save_config` replayed by a fresh daemon.

use crate::nvmf_rpc::err;
use crate::spdk_rpc::rpc_ok as ok;
use bdevkit_test::daemon::{temp_dir, Daemon};
use bdevkit_test::spdk_rpc::spdk_rpc;
use serde_json::{json, Value};

#[test]
fn vhost_methods_with_spdks_client() {
    let Some(exe) = spdk_rpc() else { return };
    let socks = temp_dir();
    let dir = socks.path().to_str().unwrap();
    let d = Daemon::start(&["-m", "0x3", "-S", dir]);
    ok(
        &exe,
        &d,
        &["bdev_malloc_create", "-b", "Malloc0", "8", "512"],
    );
    ok(
        &exe,
        &d,
        &["bdev_malloc_create", "-b", "Malloc1", "8", "4096"],
    );
    ok(
        &exe,
        &d,
        &["vhost_create_blk_controller", "vhost.0", "Malloc0"],
    );
    ok(
        &exe,
        &d,
        &[
            "vhost_create_blk_controller",
            "--cpumask",
            "0x2",
            "-r",
            "vhost.1",
            "Malloc1",
        ],
    );
    let s0 = format!("{dir}/vhost.0");
    assert!(std::path::Path::new(&s0).exists(), "socket in the -S dir");

    // Errors as SPDK answers them.
    let cases: [(&[&str], i64, &str); 7] = [
        (
            &["vhost_create_blk_controller", "vhost.0", "Malloc1"],
            -32602,
            "File exists",
        ),
        (
            &["vhost_create_blk_controller", "vhost.9", "Nope"],
            -32602,
            "No such device",
        ),
        (
            &[
                "vhost_create_blk_controller",
                "--cpumask",
                "0x4",
                "vhost.9",
                "Malloc0",
            ],
            -32602,
            "Invalid argument",
        ),
        (
            &[
                "vhost_create_blk_controller",
                "--transport",
                "vfio_user_virtio_blk",
                "vhost.9",
                "Malloc0",
            ],
            -32602,
            "Invalid argument",
        ),
        (
            &["vhost_get_controllers", "-n", "vhost.9"],
            -32603,
            "No such device",
        ),
        (
            &["vhost_delete_controller", "vhost.9"],
            -32602,
            "No such device",
        ),
        (
            &["vhost_controller_set_coalescing", "vhost.9", "10", "1000"],
            -32602,
            "No such device",
        ),
    ];
    for (args, code, msg) in cases {
        assert_eq!(
            err(&exe, &d, args),
            json!({"code": code, "message": msg}),
            "{args:?}"
        );
    }
    // Packed rings are not served: refused with what is missing.
    let e = err(
        &exe,
        &d,
        &["vhost_create_blk_controller", "-p", "vhost.9", "Malloc0"],
    );
    assert_eq!(e["code"], -32602);
    assert!(
        e["message"].as_str().unwrap().contains("packed_ring"),
        "{e}"
    );
    // The threshold under 100 IOPS is refused, as SPDK.
    let e = err(
        &exe,
        &d,
        &["vhost_controller_set_coalescing", "vhost.0", "10", "50"],
    );
    assert_eq!(e, json!({"code": -32602, "message": "Invalid argument"}));
    ok(
        &exe,
        &d,
        &["vhost_controller_set_coalescing", "vhost.0", "20", "80000"],
    );

    // SPDK's result shape.
    let got = ok(&exe, &d, &["vhost_get_controllers"]);
    assert_eq!(
        got,
        json!([
            {
                "ctrlr": "vhost.0", "cpumask": "0x3", "delay_base_us": 20,
                "iops_threshold": 80000, "socket": s0, "sessions": [],
                "backend_specific": {"block": {"readonly": false, "bdev": "Malloc0", "transport": "vhost_user_blk"}}
            },
            {
                "ctrlr": "vhost.1", "cpumask": "0x2", "delay_base_us": 0,
                "iops_threshold": 60000, "socket": format!("{dir}/vhost.1"), "sessions": [],
                "backend_specific": {"block": {"readonly": true, "bdev": "Malloc1", "transport": "vhost_user_blk"}}
            }
        ])
    );
    assert_eq!(
        ok(&exe, &d, &["vhost_get_controllers", "-n", "vhost.1"]),
        json!([got[1]])
    );

    // save_config: SPDK's vhost_blk entries, replayed by a fresh daemon.
    let saved = ok(&exe, &d, &["save_config"]);
    let section: &Value = saved["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "vhost_blk")
        .expect("a vhost_blk section");
    assert_eq!(
        section["config"],
        json!([
            {"method": "vhost_create_blk_controller", "params": {
                "ctrlr": "vhost.0", "dev_name": "Malloc0", "cpumask": "3", "readonly": false, "transport": "vhost_user_blk"}},
            {"method": "vhost_controller_set_coalescing", "params": {
                "ctrlr": "vhost.0", "delay_base_us": 20, "iops_threshold": 80000}},
            {"method": "vhost_create_blk_controller", "params": {
                "ctrlr": "vhost.1", "dev_name": "Malloc1", "cpumask": "2", "readonly": true, "transport": "vhost_user_blk"}}
        ])
    );
    ok(&exe, &d, &["vhost_delete_controller", "vhost.0"]);
    assert!(!std::path::Path::new(&s0).exists(), "socket removed");
    assert_eq!(
        ok(&exe, &d, &["vhost_get_controllers"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    drop(d);

    let cfgdir = temp_dir();
    let file = cfgdir.path().join("saved.json");
    std::fs::write(&file, saved.to_string()).unwrap();
    let socks2 = temp_dir();
    let dir2 = socks2.path().to_str().unwrap();
    let d2 = Daemon::start(&["-m", "0x3", "-S", dir2, "--json", file.to_str().unwrap()]);
    let again = ok(&exe, &d2, &["vhost_get_controllers"]);
    assert_eq!(again.as_array().unwrap().len(), 2);
    assert_eq!(again[0]["delay_base_us"], 20);
    assert_eq!(again[1]["backend_specific"]["block"]["readonly"], true);
    assert_eq!(again[1]["socket"], format!("{dir2}/vhost.1"));
    let resaved = ok(&exe, &d2, &["save_config", "-s", "vhost_blk"]);
    let sec2 = resaved["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "vhost_blk")
        .unwrap();
    assert_eq!(sec2["config"], section["config"]);
}
