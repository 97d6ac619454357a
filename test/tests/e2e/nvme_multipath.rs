//! SPDK's client (`spdk-rpc`) driving NVMe/TCP multipath in bdev_tgt: the
//! daemon's own nvmf target (one subsystem, two listeners) attached back
//! as two paths of one bdev (`-x multipath` with `--policy/--selector/
//! --min-io`), as a failover controller (`-x failover`), `-x disable`
//! refused, `bdev_nvme_get_io_paths`, detach of one path by `-s`, and
//! `save_config` with one attach per path and the policy.

use crate::nvmf_rpc::err;
use crate::spdk_rpc::rpc_ok as ok;
use bdevkit_test::daemon::Daemon;
use bdevkit_test::nvmf::free_port;
use bdevkit_test::spdk_rpc::spdk_rpc;
use serde_json::{json, Value};

const NQN: &str = "nqn.2016-06.io.spdk:mp1";

fn attach<'a>(name: &'a str, port: &'a str, mode: &'a str) -> Vec<&'a str> {
    vec![
        "bdev_nvme_attach_controller",
        "-b",
        name,
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-f",
        "ipv4",
        "-s",
        port,
        "-n",
        NQN,
        "-x",
        mode,
    ]
}

#[test]
fn multipath_and_failover_with_spdks_client() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);
    let (p1, p2) = (free_port().to_string(), free_port().to_string());
    ok(
        &exe,
        &d,
        &["bdev_malloc_create", "-b", "Malloc0", "8", "512"],
    );
    ok(&exe, &d, &["nvmf_create_transport", "-t", "tcp"]);
    ok(&exe, &d, &["nvmf_create_subsystem", NQN, "-a"]);
    // Its own NGUID (the host's bdev UUID, as SPDK's) and UUID: the
    // host's bdev of it lives in the same daemon as Malloc0, and bdev
    // UUIDs are unique (the NGUID defaults to the bdev's UUID).
    ok(
        &exe,
        &d,
        &[
            "nvmf_subsystem_add_ns",
            NQN,
            "Malloc0",
            "-g",
            "8C0E3B0C54D64A55A4C71E6A2E0C9D11",
            "-u",
            "8c0e3b0c-54d6-4a55-a4c7-1e6a2e0c9d11",
        ],
    );
    for p in [&p1, &p2] {
        ok(
            &exe,
            &d,
            &[
                "nvmf_subsystem_add_listener",
                NQN,
                "-t",
                "tcp",
                "-a",
                "127.0.0.1",
                "-f",
                "ipv4",
                "-s",
                p,
            ],
        );
    }

    // Two paths of one bdev, active_active round_robin every 2 I/Os.
    let mut a = attach("Nvme0", &p1, "multipath");
    a.extend([
        "--policy",
        "active_active",
        "--selector",
        "round_robin",
        "--min-io",
        "2",
    ]);
    assert_eq!(ok(&exe, &d, &a), json!("Nvme0n1"));
    assert_eq!(
        ok(&exe, &d, &attach("Nvme0", &p2, "multipath")),
        json!("Nvme0n1")
    );
    let e = err(&exe, &d, &attach("Nvme0", &p2, "multipath"));
    assert_eq!(e["code"], -114, "{e}");
    let e = err(&exe, &d, &attach("Nvme0", &p2, "disable"));
    assert_eq!(e["code"], -114, "{e}");
    let c = ok(&exe, &d, &["bdev_nvme_get_controllers", "-n", "Nvme0"]);
    assert_eq!(c[0]["ctrlrs"].as_array().map(Vec::len), Some(2), "{c}");
    let b = &ok(&exe, &d, &["bdev_get_bdevs", "-b", "Nvme0n1"])[0];
    let ds = &b["driver_specific"];
    assert_eq!(ds["nvme"].as_array().map(Vec::len), Some(2), "{ds}");
    assert_eq!(
        (&ds["mp_policy"], &ds["selector"], &ds["rr_min_io"]),
        (&json!("active_active"), &json!("round_robin"), &json!(2))
    );
    // Nobody has a channel on it: no poll group.
    let p = ok(&exe, &d, &["bdev_nvme_get_io_paths", "-n", "Nvme0n1"]);
    assert_eq!(p, json!({"poll_groups": []}));

    let cfg = ok(&exe, &d, &["save_config"]);
    let bdev = cfg["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "bdev")
        .unwrap();
    let entries = bdev["config"].as_array().unwrap();
    let attaches: Vec<&Value> = entries
        .iter()
        .filter(|e| e["method"] == "bdev_nvme_attach_controller")
        .collect();
    assert_eq!(attaches.len(), 2, "{bdev}");
    assert!(attaches
        .iter()
        .all(|e| e["params"]["multipath"] == "multipath"));
    assert!(entries
        .iter()
        .any(|e| e["method"] == "bdev_nvme_set_multipath_policy"
            && e["params"]["name"] == "Nvme0n1"
            && e["params"]["policy"] == "active_active"));

    // One path by its port; then the last one takes the bdev.
    ok(
        &exe,
        &d,
        &["bdev_nvme_detach_controller", "-s", &p1, "Nvme0"],
    );
    let c = ok(&exe, &d, &["bdev_nvme_get_controllers", "-n", "Nvme0"]);
    assert_eq!(c[0]["ctrlrs"][0]["trid"]["trsvcid"], json!(p2), "{c}");
    ok(&exe, &d, &["bdev_nvme_detach_controller", "Nvme0"]);
    let e = err(&exe, &d, &["bdev_get_bdevs", "-b", "Nvme0n1"]);
    assert_eq!(e["code"], -19, "{e}");

    // Failover: one controller, an alternate address.
    assert_eq!(
        ok(&exe, &d, &attach("Nvme1", &p1, "failover")),
        json!("Nvme1n1")
    );
    assert_eq!(
        ok(&exe, &d, &attach("Nvme1", &p2, "failover")),
        json!("Nvme1n1")
    );
    let c = ok(&exe, &d, &["bdev_nvme_get_controllers", "-n", "Nvme1"]);
    let ctrlrs = c[0]["ctrlrs"].as_array().unwrap();
    assert_eq!(ctrlrs.len(), 1, "{c}");
    assert_eq!(ctrlrs[0]["alternate_trids"][0]["trsvcid"], json!(p2));
    assert_eq!(ctrlrs[0]["alternate_trids"][0]["adrfam"], json!("IPv4"));
    ok(&exe, &d, &["bdev_nvme_detach_controller", "Nvme1"]);
}
