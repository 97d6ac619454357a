//! `spdk-rpc` drives the virtual bdev modules through the real daemon:
//! create, get, delete for passthru, split, raid, delay and error, their
//! error replies, and a saved stack replayed into a fresh daemon.

use std::path::Path;

use bdevkit_test::daemon::{run, text, Daemon};
use bdevkit_test::spdk_rpc::spdk_rpc;
use serde_json::Value;

/// Runs spdk-rpc: (success, stdout, everything for messages).
fn rpc(exe: &Path, d: &Daemon, args: &[&str]) -> (bool, String, String) {
    let sock = d.socket.to_str().expect("invariant: utf-8 temp path");
    let mut full = vec!["-s", sock];
    full.extend_from_slice(args);
    let o = run(exe, &full, None);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        text(&o),
    )
}

fn ok(exe: &Path, d: &Daemon, args: &[&str]) -> String {
    let (good, stdout, all) = rpc(exe, d, args);
    assert!(good, "spdk-rpc {args:?} failed:\n{all}");
    stdout
}

fn fails(exe: &Path, d: &Daemon, args: &[&str], needle: &str) {
    let (good, _, out) = rpc(exe, d, args);
    assert!(!good, "spdk-rpc {args:?} should fail:\n{out}");
    assert!(out.contains(needle), "expected {needle:?} in:\n{out}");
}

fn names(d: &Daemon) -> Vec<String> {
    let v = d.ok("bdev_get_bdevs", None);
    let mut n: Vec<String> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|b| b["name"].as_str().unwrap_or("").to_string())
        .collect();
    n.sort();
    n
}

#[test]
fn every_vbdev_method() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);
    for m in ["M0", "M1", "M2", "M3"] {
        ok(&exe, &d, &["bdev_malloc_create", "-b", m, "16", "512"]);
    }

    // passthru
    assert_eq!(
        ok(&exe, &d, &["bdev_passthru_create", "-b", "M0", "-p", "PT0"]).trim(),
        "PT0"
    );
    let pt = d.ok("bdev_get_bdevs", Some(serde_json::json!({"name": "PT0"})));
    assert_eq!(pt[0]["driver_specific"]["passthru"]["base_bdev_name"], "M0");
    let m0 = d.ok("bdev_get_bdevs", Some(serde_json::json!({"name": "M0"})));
    assert_eq!(m0[0]["claimed"], true);
    assert_eq!(m0[0]["claim_type"], "exclusive_write");
    fails(
        &exe,
        &d,
        &["bdev_passthru_create", "-b", "M0", "-p", "PT0"],
        "File exists",
    );

    // split
    assert_eq!(
        ok(&exe, &d, &["bdev_split_create", "M1", "2"]).trim(),
        "M1p0 M1p1"
    );
    let p1 = d.ok("bdev_get_bdevs", Some(serde_json::json!({"name": "M1p1"})));
    assert_eq!(p1[0]["product_name"], "Split Disk");
    assert_eq!(p1[0]["driver_specific"]["split"]["offset_blocks"], 16384);

    // raid
    ok(
        &exe,
        &d,
        &[
            "bdev_raid_create",
            "-n",
            "R0",
            "-z",
            "64",
            "-r",
            "raid0",
            "-b",
            "M2 M3",
        ],
    );
    let raids: Value =
        serde_json::from_str(&ok(&exe, &d, &["bdev_raid_get_bdevs", "online"])).expect("json");
    assert_eq!(raids[0]["name"], "R0");
    assert_eq!(raids[0]["raid_level"], "raid0");
    assert_eq!(raids[0]["num_base_bdevs_discovered"], 2);
    fails(
        &exe,
        &d,
        &["bdev_raid_create", "-n", "R1", "-r", "raid1", "-b", "M2"],
        "Failed to create RAID bdev R1",
    );
    fails(
        &exe,
        &d,
        &["bdev_raid_delete", "nope"],
        "raid bdev nope not found",
    );

    // delay on a split part
    ok(
        &exe,
        &d,
        &[
            "bdev_delay_create",
            "-b",
            "M1p0",
            "-d",
            "D0",
            "-r",
            "10",
            "-t",
            "20",
            "-w",
            "30",
            "-n",
            "40",
        ],
    );
    assert_eq!(
        ok(
            &exe,
            &d,
            &["bdev_delay_update_latency", "D0", "p99_write", "50"]
        )
        .trim(),
        "true"
    );
    let dl = d.ok("bdev_get_bdevs", Some(serde_json::json!({"name": "D0"})));
    assert_eq!(dl[0]["driver_specific"]["delay"]["p99_write_latency"], 50);
    fails(
        &exe,
        &d,
        &[
            "bdev_delay_create",
            "-b",
            "M1p1",
            "-d",
            "D1",
            "-r",
            "20",
            "-t",
            "10",
            "-w",
            "1",
            "-n",
            "2",
        ],
        "Invalid argument",
    );

    // error on the delay bdev
    assert_eq!(ok(&exe, &d, &["bdev_error_create", "D0"]).trim(), "true");
    ok(
        &exe,
        &d,
        &[
            "bdev_error_inject_error",
            "EE_D0",
            "read",
            "failure",
            "-n",
            "3",
        ],
    );
    fails(
        &exe,
        &d,
        &["bdev_error_inject_error", "EE_D0", "all", "nvme_failure"],
        "nvme_sct or nvme_sc",
    );

    assert_eq!(
        names(&d),
        ["D0", "EE_D0", "M0", "M1", "M1p0", "M1p1", "M2", "M3", "PT0", "R0"]
    );

    // A saved stack replays into a fresh daemon with the same bdevs.
    let saved = ok(&exe, &d, &["save_config"]);
    let d2 = Daemon::start(&[]);
    let sock2 = d2.socket.to_str().expect("utf-8");
    let o = run(&exe, &["-s", sock2, "load_config"], Some(&saved));
    assert!(o.status.success(), "load_config: {}", text(&o));
    assert_eq!(names(&d2), names(&d));

    // Deleting a base cascades up its stack.
    ok(&exe, &d, &["bdev_error_delete", "EE_D0"]);
    ok(&exe, &d, &["bdev_delay_delete", "D0"]);
    ok(&exe, &d, &["bdev_split_delete", "M1"]);
    ok(&exe, &d, &["bdev_passthru_delete", "PT0"]);
    ok(&exe, &d, &["bdev_raid_delete", "R0"]);
    assert_eq!(names(&d), ["M0", "M1", "M2", "M3"]);
    // A member taken out of a raid1: degraded (reported online, one
    // operational member), the member released.
    ok(
        &exe,
        &d,
        &["bdev_raid_create", "-n", "R1", "-r", "raid1", "-b", "M2 M3"],
    );
    assert_eq!(
        ok(&exe, &d, &["bdev_raid_remove_base_bdev", "M3"]).trim(),
        ""
    );
    let raids: Value =
        serde_json::from_str(&ok(&exe, &d, &["bdev_raid_get_bdevs", "all"])).expect("json");
    assert_eq!(raids[0]["state"], "online");
    assert_eq!(raids[0]["num_base_bdevs_operational"], 1);
    assert_eq!(raids[0]["base_bdevs_list"][1]["name"], Value::Null);
    let m3 = d.ok("bdev_get_bdevs", Some(serde_json::json!({"name": "M3"})));
    assert_eq!(m3[0]["claimed"], false);
    fails(
        &exe,
        &d,
        &["bdev_raid_remove_base_bdev", "M3"],
        "Failed to remove base bdev from raid bdev",
    );
    // ... and put back: rebuilt from M2, online again.
    ok(&exe, &d, &["bdev_raid_add_base_bdev", "R1", "M3"]);
    let start = std::time::Instant::now();
    loop {
        let raids: Value =
            serde_json::from_str(&ok(&exe, &d, &["bdev_raid_get_bdevs", "all"])).expect("json");
        if raids[0]["num_base_bdevs_operational"] == 2 {
            assert!(raids[0].get("process").is_none(), "{raids}");
            break;
        }
        assert!(
            start.elapsed().as_secs() < 20,
            "rebuild did not finish: {raids}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    fails(
        &exe,
        &d,
        &["bdev_raid_add_base_bdev", "R1", "M0"],
        "Failed to add base bdev M0 to RAID bdev R1",
    );
    ok(&exe, &d, &["bdev_raid_delete", "R1"]);
    ok(&exe, &d, &["bdev_malloc_delete", "M2"]);
    // d2: delete the base of the passthru and of the raid; stacks go away.
    ok(&exe, &d2, &["bdev_malloc_delete", "M0"]);
    ok(&exe, &d2, &["bdev_malloc_delete", "M1"]);
    let left = names(&d2);
    assert!(
        !left
            .iter()
            .any(|n| n == "PT0" || n.starts_with("M1p") || n == "D0" || n == "EE_D0"),
        "{left:?}"
    );
}
