//! SPDK's own client (`spdk-rpc`, PyPI `spdk==26.9`) driving the real
//! `bdev_tgt`. The client is found by `bdevkit_test::spdk_rpc` (the
//! repository's `.venv` among others); a missing client fails each test
//! unless `BDEVKIT_SKIP_SPDK_RPC=1`.

use std::path::Path;

use bdevkit_test::daemon::{run, temp_dir, text, Daemon};
use bdevkit_test::spdk_rpc::spdk_rpc;
use serde_json::{json, Value};

/// `spdk-rpc -s <daemon> <args>`; asserts success and parses stdout as
/// JSON when there is any.
pub(crate) fn rpc_ok(exe: &Path, d: &Daemon, args: &[&str]) -> Value {
    let sock = d.socket.to_str().expect("invariant: utf-8 temp path");
    let mut full = vec!["-s", sock];
    full.extend_from_slice(args);
    let o = run(exe, &full, None);
    assert!(o.status.success(), "spdk-rpc {args:?}: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    if out.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&out).unwrap_or_else(|_| Value::String(out.trim().to_string()))
    }
}

/// The entries of subsystem `name` in a saved config.
fn section<'a>(cfg: &'a Value, name: &str) -> &'a Vec<Value> {
    cfg["subsystems"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["subsystem"] == name))
        .and_then(|s| s["config"].as_array())
        .unwrap_or_else(|| panic!("no {name} section in {cfg}"))
}

fn rpc_err(exe: &Path, d: &Daemon, args: &[&str]) -> String {
    let sock = d.socket.to_str().expect("invariant: utf-8 temp path");
    let mut full = vec!["-s", sock];
    full.extend_from_slice(args);
    let o = run(exe, &full, None);
    assert_eq!(o.status.code(), Some(1), "spdk-rpc {args:?}: {}", text(&o));
    text(&o)
}

#[test]
fn create_get_resize_delete_and_field_types() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);

    assert_eq!(
        rpc_ok(&exe, &d, &["bdev_null_create", "Null0", "100", "4096"]),
        json!("Null0")
    );
    assert_eq!(
        rpc_ok(
            &exe,
            &d,
            &["bdev_malloc_create", "-b", "Malloc0", "8", "512"]
        ),
        json!("Malloc0")
    );
    // Auto-generated malloc name.
    let auto = rpc_ok(&exe, &d, &["bdev_malloc_create", "1", "4096"]);
    assert!(
        auto.as_str().is_some_and(|n| n.starts_with("Malloc")),
        "{auto}"
    );

    let all = rpc_ok(&exe, &d, &["bdev_get_bdevs"]);
    assert_eq!(all.as_array().map(Vec::len), Some(3));

    // Spec 2.2 table: keys, order and JSON types.
    let null = &rpc_ok(&exe, &d, &["bdev_get_bdevs", "-b", "Null0"])[0];
    let keys: Vec<&str> = null
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expect = crate::bdev_keys::LEADING_KEYS.to_vec();
    expect.extend([
        "assigned_rate_limits",
        "claimed",
        "zoned",
        "supported_io_types",
        "driver_specific",
    ]);
    assert_eq!(keys, expect);
    assert!(null["name"].is_string());
    assert!(null["aliases"]
        .as_array()
        .unwrap()
        .iter()
        .all(Value::is_string));
    assert_eq!(null["aliases"][0], null["uuid"]);
    assert_eq!(null["product_name"], "Null disk");
    assert_eq!(null["block_size"], 4096);
    assert_eq!(null["num_blocks"], 25600);
    for k in [
        "preferred_write_alignment",
        "preferred_write_granularity",
        "optimal_write_size",
        "preferred_unmap_alignment",
        "preferred_unmap_granularity",
    ] {
        assert!(null[k].is_u64(), "{k}");
    }
    let uuid = null["uuid"].as_str().unwrap();
    assert_eq!(uuid.len(), 36);
    assert_eq!(uuid, uuid.to_lowercase());
    for k in [
        "rw_ios_per_sec",
        "rw_mbytes_per_sec",
        "r_mbytes_per_sec",
        "w_mbytes_per_sec",
    ] {
        assert_eq!(null["assigned_rate_limits"][k], 0, "{k}");
    }
    assert_eq!(null["claimed"], false);
    assert_eq!(null["zoned"], false);
    let io = null["supported_io_types"].as_object().unwrap();
    assert_eq!(io.len(), 22);
    assert!(io.values().all(Value::is_boolean));
    assert_eq!(io["read"], true);
    assert_eq!(io["write_zeroes"], true);
    assert_eq!(io["unmap"], false);
    assert_eq!(null["driver_specific"], json!({}));

    let malloc = &rpc_ok(&exe, &d, &["bdev_get_bdevs", "-b", "Malloc0"])[0];
    assert_eq!(malloc["product_name"], "Malloc disk");
    assert_eq!(malloc["num_blocks"], 16384);
    assert!(malloc["numa_id"].is_i64());
    assert_eq!(malloc["supported_io_types"]["unmap"], true);

    // Lookup by UUID alias, and -t waiting (a float is accepted too).
    let by_uuid = rpc_ok(&exe, &d, &["bdev_get_bdevs", "-b", uuid]);
    assert_eq!(by_uuid[0]["name"], "Null0");
    let e = rpc_err(&exe, &d, &["bdev_get_bdevs", "-b", "Nope", "-t", "150"]);
    assert!(
        e.contains("-110") && e.contains("Connection timed out"),
        "{e}"
    );

    // Resize grows; shrinking is refused.
    rpc_ok(&exe, &d, &["bdev_null_resize", "Null0", "200"]);
    assert_eq!(
        rpc_ok(&exe, &d, &["bdev_get_bdevs", "-b", "Null0"])[0]["num_blocks"],
        51200
    );
    let e = rpc_err(&exe, &d, &["bdev_null_resize", "Null0", "1"]);
    assert!(e.contains("-22"), "{e}");

    // iostat, qos, examine.
    let st = rpc_ok(&exe, &d, &["bdev_get_iostat"]);
    assert!(st["tick_rate"].is_u64() && st["ticks"].is_u64());
    assert_eq!(st["bdevs"].as_array().map(Vec::len), Some(3));
    assert_eq!(st["bdevs"][0]["io_error"], json!({}));
    let st = rpc_ok(&exe, &d, &["bdev_get_iostat", "-c", "--names", "Malloc0"]);
    assert_eq!(st["name"], "Malloc0");
    assert!(st["channels"].is_array());
    rpc_ok(
        &exe,
        &d,
        &["bdev_reset_iostat", "-b", "Malloc0", "-m", "maxmin"],
    );
    rpc_ok(
        &exe,
        &d,
        &["bdev_set_qos_limit", "Malloc0", "--rw-ios-per-sec", "20000"],
    );
    assert_eq!(
        rpc_ok(&exe, &d, &["bdev_get_bdevs", "-b", "Malloc0"])[0]["assigned_rate_limits"]
            ["rw_ios_per_sec"],
        20000
    );
    assert_eq!(d.ok("bdev_wait_for_examine", None), json!(true));
    rpc_ok(&exe, &d, &["bdev_wait_for_examine"]);
    let e = rpc_err(&exe, &d, &["bdev_examine", "-b", "Malloc0"]);
    assert!(e.contains("-22"), "auto-examine is on: {e}");

    // Framework methods.
    let v = rpc_ok(&exe, &d, &["spdk_get_version"]);
    assert!(v["version"].as_str().unwrap().starts_with("SPDK v26.09"));
    assert_eq!(v["fields"]["major"], 26);
    let subs = rpc_ok(&exe, &d, &["framework_get_subsystems"]);
    assert_eq!(
        subs,
        json!([
            {"subsystem": "keyring", "depends_on": []},
            {"subsystem": "bdev", "depends_on": ["keyring"]},
            {"subsystem": "nvmf", "depends_on": ["bdev", "keyring"]}
        ])
    );
    let r = rpc_ok(&exe, &d, &["framework_get_reactors"]);
    assert!(r["tick_rate"].is_u64() && r["pid"].is_u64());
    assert_eq!(r["reactors"][0]["lcore"], 0);
    assert_eq!(r["reactors"][0]["in_interrupt"], true);
    assert_eq!(r["reactors"][0]["lw_threads"][0]["name"], "app_thread");
    let t = rpc_ok(&exe, &d, &["thread_get_stats"]);
    assert_eq!(t["threads"][0]["name"], "app_thread");
    let p = rpc_ok(&exe, &d, &["thread_get_pollers"]);
    assert!(p["threads"][0]["active_pollers"].is_array());
    let c = rpc_ok(&exe, &d, &["thread_get_io_channels"]);
    assert!(c["threads"][0]["io_channels"].is_array());

    // Deletes, including a bdev of the wrong module.
    let e = rpc_err(&exe, &d, &["bdev_malloc_delete", "Null0"]);
    assert!(e.contains("-19") && e.contains("No such device"), "{e}");
    rpc_ok(&exe, &d, &["bdev_null_delete", "Null0"]);
    rpc_ok(&exe, &d, &["bdev_malloc_delete", "Malloc0"]);
    rpc_ok(&exe, &d, &["bdev_malloc_delete", auto.as_str().unwrap()]);
    assert_eq!(rpc_ok(&exe, &d, &["bdev_get_bdevs"]), json!([]));
}

#[test]
fn histograms_and_queue_depth_sampling() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);
    rpc_ok(&exe, &d, &["bdev_malloc_create", "-b", "M0", "8", "512"]);
    let e = rpc_err(&exe, &d, &["bdev_get_histogram", "M0"]);
    assert!(e.contains("-32603") && e.contains("Bad address"), "{e}");
    rpc_ok(
        &exe,
        &d,
        &[
            "bdev_enable_histogram",
            "--histogram",
            "-o",
            "read",
            "--granularity",
            "5",
            "M0",
        ],
    );
    let h = rpc_ok(&exe, &d, &["bdev_get_histogram", "M0"]);
    assert_eq!(h["granularity"], 5);
    assert!(h["histogram"].is_string() && h["tsc_rate"].is_u64(), "{h}");
    assert!(h["min_range"].as_u64() < h["max_range"].as_u64(), "{h}");
    let b = rpc_ok(
        &exe,
        &d,
        &["bdev_get_histogram_borders", "M0", "--borders", "10,100"],
    );
    assert_eq!(b, json!({"borders_count": [0, 0, 0]}));
    let e = rpc_err(
        &exe,
        &d,
        &["bdev_enable_histogram", "--histogram", "-o", "fly", "M0"],
    );
    assert!(e.contains("Invalid Io type"), "{e}");
    let e = rpc_err(&exe, &d, &["bdev_enable_histogram", "--histogram", "Nope"]);
    assert!(e.contains("-19"), "{e}");
    let e = rpc_err(
        &exe,
        &d,
        &[
            "bdev_enable_histogram",
            "--histogram",
            "--min-nsec",
            "5",
            "--max-nsec",
            "5",
            "M0",
        ],
    );
    assert!(e.contains("-22"), "{e}");
    rpc_ok(&exe, &d, &["bdev_enable_histogram", "--no-histogram", "M0"]);
    // Queue-depth sampling adds four fields to bdev_get_iostat.
    rpc_ok(&exe, &d, &["bdev_set_qd_sampling_period", "M0", "1000"]);
    let st = rpc_ok(&exe, &d, &["bdev_get_iostat", "--names", "M0"]);
    let m0 = &st["bdevs"][0];
    assert_eq!(m0["queue_depth_polling_period"], 1000, "{st}");
    assert!(m0["queue_depth"].is_u64() && m0["io_time"].is_u64(), "{st}");
    assert!(m0["weighted_io_time"].is_u64(), "{st}");
    rpc_ok(&exe, &d, &["bdev_set_qd_sampling_period", "M0", "0"]);
    let st = rpc_ok(&exe, &d, &["bdev_get_iostat", "--names", "M0"]);
    assert!(st["bdevs"][0].get("queue_depth").is_none(), "{st}");
    let e = rpc_err(&exe, &d, &["bdev_set_qd_sampling_period", "Nope", "10"]);
    assert!(e.contains("-19"), "{e}");
    let e = rpc_err(
        &exe,
        &d,
        &["bdev_get_histogram_borders", "M0", "--borders", "1"],
    );
    assert!(e.contains("Bad address"), "{e}");
}

#[test]
fn log_levels_and_flags_at_run_time() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);
    assert_eq!(rpc_ok(&exe, &d, &["log_get_print_level"]), json!("NOTICE"));
    let flags = rpc_ok(&exe, &d, &["log_get_flags"]);
    assert_eq!(flags["bdev"], false, "{flags}");
    assert_eq!(flags["bdev_raid"], false, "{flags}");
    // "bdev claimed" is a debug message of the bdev layer.
    rpc_ok(&exe, &d, &["bdev_malloc_create", "-b", "M0", "8", "512"]);
    rpc_ok(&exe, &d, &["bdev_passthru_create", "-b", "M0", "-p", "P0"]);
    assert!(!d.log().contains("bdev claimed"), "{}", d.log());
    rpc_ok(&exe, &d, &["log_set_flag", "bdev"]);
    rpc_ok(&exe, &d, &["log_set_print_level", "DEBUG"]);
    assert_eq!(rpc_ok(&exe, &d, &["log_get_print_level"]), json!("DEBUG"));
    assert_eq!(rpc_ok(&exe, &d, &["log_get_flags"])["bdev"], true);
    rpc_ok(&exe, &d, &["bdev_malloc_create", "-b", "M1", "8", "512"]);
    rpc_ok(&exe, &d, &["bdev_passthru_create", "-b", "M1", "-p", "P1"]);
    let start = std::time::Instant::now();
    while !d.log().contains("bdev claimed") {
        assert!(start.elapsed().as_secs() < 60, "{}", d.log());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Back to quiet.
    rpc_ok(&exe, &d, &["log_clear_flag", "all"]);
    assert_eq!(rpc_ok(&exe, &d, &["log_get_flags"])["bdev"], false);
    let e = rpc_err(&exe, &d, &["log_set_flag", "warp_drive"]);
    assert!(e.contains("tried to set invalid log flag"), "{e}");
    let e = d
        .call("log_set_print_level", Some(json!({"level": "LOUD"})))
        .unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (-32602, "invalid log level"));
    let e = d.call("log_get_flags", Some(json!({"x": 1}))).unwrap_err();
    assert_eq!(e.code, -32602);
}

#[test]
fn rpc_get_methods_and_current() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);
    let all = rpc_ok(&exe, &d, &["rpc_get_methods"]);
    let cur = rpc_ok(&exe, &d, &["rpc_get_methods", "-c"]);
    let has = |v: &Value, m: &str| v.as_array().unwrap().iter().any(|x| x == m);
    for m in [
        "rpc_get_methods",
        "spdk_get_version",
        "framework_start_init",
        "framework_get_config",
        "bdev_set_options",
        "bdev_get_bdevs",
        "bdev_null_create",
        "bdev_malloc_delete",
        "spdk_kill_instance",
    ] {
        assert!(has(&all, m), "{m} missing from {all}");
    }
    // RUNTIME: STARTUP-only methods are not current.
    assert!(has(&cur, "bdev_get_bdevs"));
    assert!(!has(&cur, "bdev_set_options"));
    assert!(!has(&cur, "framework_start_init"));
}

#[test]
fn scripts_and_batches() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);
    let sock = d.socket.to_str().unwrap();

    // Script mode: one connection, several requests.
    let script = "# comment\nbdev_null_create S0 1 512\nbdev_null_create S1 1 512\n\
                  bdev_get_bdevs -b S1\nbdev_null_delete S0\n";
    let o = run(&exe, &["-s", sock], Some(script));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("S0") && out.contains("\"name\": \"S1\""),
        "{out}"
    );

    // A failing line stops the script with exit 1.
    let o = run(
        &exe,
        &["-s", sock],
        Some("bdev_null_create S1 1 512\nbdev_null_create S2 1 512\n"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(d
        .call("bdev_get_bdevs", Some(json!({"name": "S2"})))
        .is_err());

    // Batch mode: one JSON-RPC batch.
    let batch = "bdev_null_create B0 1 512\nbdev_malloc_create -b B1 1 512\nbdev_get_bdevs\n";
    let o = run(&exe, &["-s", sock, "-b"], Some(batch));
    assert!(o.status.success(), "{}", text(&o));
    let names: Vec<String> = d
        .ok("bdev_get_bdevs", None)
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["S1", "B0", "B1"]);
}

fn populate(exe: &Path, d: &Daemon) {
    rpc_ok(exe, d, &["bdev_null_create", "Null0", "64", "512"]);
    // (No metadata here: the null module saves block_size with md_size
    // included, which its create then rejects.)
    rpc_ok(
        exe,
        d,
        &[
            "bdev_null_create",
            "Null1",
            "16",
            "4096",
            "-u",
            "0b7e1d7e-13b4-4c1e-9d2b-0d1f1d9b2a11",
        ],
    );
    rpc_ok(exe, d, &["bdev_malloc_create", "-b", "Malloc0", "4", "512"]);
    rpc_ok(
        exe,
        d,
        &[
            "bdev_malloc_create",
            "-b",
            "Malloc1",
            "2",
            "4096",
            "-o",
            "8",
        ],
    );
    rpc_ok(
        exe,
        d,
        &[
            "bdev_set_qos_limit",
            "Malloc1",
            "--rw-ios-per-sec",
            "3000",
            "--w-mbytes-per-sec",
            "10",
        ],
    );
}

#[test]
fn save_config_replays_into_a_fresh_daemon() {
    let Some(exe) = spdk_rpc() else { return };
    let d1 = Daemon::start(&[]);
    populate(&exe, &d1);
    let before = d1.ok("bdev_get_bdevs", None);

    let sock1 = d1.socket.to_str().unwrap();
    let o = run(&exe, &["-s", sock1, "save_config"], None);
    assert!(o.status.success(), "{}", text(&o));
    let saved = String::from_utf8(o.stdout).unwrap();
    let cfg: Value = serde_json::from_str(&saved).unwrap();
    let entries = section(&cfg, "bdev");
    assert_eq!(entries[0]["method"], "bdev_set_options");
    assert_eq!(entries.last().unwrap()["method"], "bdev_wait_for_examine");

    // 1. spdk-rpc load_config into a running daemon.
    let d2 = Daemon::start(&[]);
    let sock2 = d2.socket.to_str().unwrap();
    let o = run(&exe, &["-s", sock2, "load_config"], Some(&saved));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(d2.ok("bdev_get_bdevs", None), before);

    // 2. bdev_tgt --json at start-up.
    let dir = temp_dir();
    let file = dir.path().join("saved.json");
    std::fs::write(&file, &saved).unwrap();
    let d3 = Daemon::start(&["--json", file.to_str().unwrap()]);
    assert_eq!(d3.ok("bdev_get_bdevs", None), before);
    // And its own save_config is the same document.
    let o = run(
        &exe,
        &["-s", d3.socket.to_str().unwrap(), "save_config"],
        None,
    );
    assert_eq!(String::from_utf8(o.stdout).unwrap(), saved);

    // 3. load_config into a --wait-for-rpc daemon: bdev_set_options runs
    // before framework_start_init.
    let d4 = Daemon::start(&["--wait-for-rpc"]);
    let custom = saved.replace(
        "\"bdev_io_pool_size\": 65535",
        "\"bdev_io_pool_size\": 4096",
    );
    let o = run(
        &exe,
        &["-s", d4.socket.to_str().unwrap(), "load_config"],
        Some(&custom),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(d4.ok("bdev_get_bdevs", None), before);
    let cfg = d4.ok("framework_get_config", Some(json!({"name": "bdev"})));
    assert_eq!(cfg[0]["params"]["bdev_io_pool_size"], 4096);
}

/// `spdk-rpc bdev_xnvme_create [-c] FILENAME NAME IO_MECHANISM` and
/// `bdev_xnvme_delete NAME` against the daemon, with the libaio mechanism
/// on a regular file (io_uring_cmd needs an NVMe device: the VM lane
/// covers it): the name, SPDK's product name, the saved entry, SPDK's
/// error for a failed create, -19 for an unknown bdev.
#[test]
fn xnvme_create_save_delete() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&[]);
    let dir = temp_dir();
    let path = dir.path().join("xnvme.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let file = path.to_str().unwrap();
    assert_eq!(
        rpc_ok(&exe, &d, &["bdev_xnvme_create", "-c", file, "X0", "libaio"]),
        json!("X0")
    );
    let b = rpc_ok(&exe, &d, &["bdev_get_bdevs", "-b", "X0"]);
    assert_eq!(b[0]["product_name"], "xNVMe bdev");
    assert_eq!(
        (b[0]["block_size"].as_u64(), b[0]["num_blocks"].as_u64()),
        (Some(512), Some(2048))
    );
    assert_eq!(b[0]["driver_specific"], json!({}));
    let cfg = rpc_ok(&exe, &d, &["save_config"]);
    let entries = section(&cfg, "bdev");
    let saved: Vec<&Value> = entries
        .iter()
        .filter(|e| e["method"] == "bdev_xnvme_create")
        .collect();
    assert_eq!(
        saved,
        [&json!({"method": "bdev_xnvme_create", "params": {
            "name": "X0", "filename": file, "io_mechanism": "libaio", "conserve_cpu": true}})]
    );
    // Failures: SPDK's code and sentence (ours adds the cause).
    for args in [
        ["bdev_xnvme_create", "/nonexistent/x", "X1", "io_uring_cmd"],
        ["bdev_xnvme_create", file, "X1", "spdk"],
        ["bdev_xnvme_create", file, "X0", "libaio"],
    ] {
        let e = rpc_err(&exe, &d, &args);
        assert!(
            e.contains("-32603") && e.contains("Unable to create xNVMe bdev."),
            "{args:?}: {e}"
        );
    }
    assert_eq!(
        rpc_ok(&exe, &d, &["bdev_get_bdevs"])
            .as_array()
            .map(Vec::len),
        Some(1),
        "nothing registered by the failed creates"
    );
    // spdk-rpc prints nothing for a delete that answered true.
    assert_eq!(rpc_ok(&exe, &d, &["bdev_xnvme_delete", "X0"]), Value::Null);
    assert_eq!(rpc_ok(&exe, &d, &["bdev_get_bdevs"]), json!([]));
    let e = rpc_err(&exe, &d, &["bdev_xnvme_delete", "X0"]);
    assert!(e.contains("-19") && e.contains("No such device"), "{e}");
}

/// The keyring through SPDK's client: keys added from 0600 files, listed
/// without their material, saved first in `save_config` (before `bdev`,
/// as SPDK), loaded again by a fresh daemon, removed; SPDK's errors.
#[test]
fn keyring_file_keys() {
    use std::os::unix::fs::PermissionsExt;
    let Some(exe) = spdk_rpc() else { return };
    let dir = temp_dir();
    let secret = "DHHC-1:00:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWbKhAm/:";
    let key = dir.path().join("key0");
    std::fs::write(&key, secret).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = dir.path().join("open");
    std::fs::write(&open, secret).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (key_s, open_s) = (key.to_str().unwrap(), open.to_str().unwrap());

    let d = Daemon::start(&[]);
    // spdk-rpc prints nothing for these methods' `true`.
    assert_eq!(
        rpc_ok(&exe, &d, &["keyring_file_add_key", "key0", key_s]),
        Value::Null
    );
    let e = rpc_err(&exe, &d, &["keyring_file_add_key", "key0", key_s]);
    assert!(e.contains("-17") && e.contains("File exists"), "{e}");
    let e = rpc_err(&exe, &d, &["keyring_file_add_key", "key1", open_s]);
    assert!(
        e.contains("-1") && e.contains("Operation not permitted"),
        "{e}"
    );
    let e = rpc_err(&exe, &d, &["keyring_file_add_key", "key1", "key0"]);
    assert!(e.contains("-1"), "{e}");
    let keys = rpc_ok(&exe, &d, &["keyring_get_keys"]);
    assert_eq!(
        keys,
        json!([{"name": "key0", "module": "keyring_file", "removed": false,
                "probed": false, "refcnt": 1, "path": key_s}])
    );
    let saved = rpc_ok(&exe, &d, &["save_config"]);
    assert!(!saved.to_string().contains("MDEy"), "key material saved");
    assert_eq!(saved["subsystems"][0]["subsystem"], "keyring");
    assert_eq!(
        saved["subsystems"][0]["config"],
        json!([{"method": "keyring_file_add_key", "params": {"name": "key0", "path": key_s}}])
    );
    assert_eq!(saved["subsystems"][1]["subsystem"], "bdev");
    let cfg = dir.path().join("saved.json");
    std::fs::write(&cfg, saved.to_string()).unwrap();
    drop(d);

    let d = Daemon::start(&["-c", cfg.to_str().unwrap()]);
    assert_eq!(rpc_ok(&exe, &d, &["keyring_get_keys"])[0]["name"], "key0");
    let e = rpc_err(&exe, &d, &["keyring_file_remove_key", "nokey"]);
    assert!(e.contains("-126"), "{e}");
    assert_eq!(
        rpc_ok(&exe, &d, &["keyring_file_remove_key", "key0"]),
        Value::Null
    );
    assert_eq!(rpc_ok(&exe, &d, &["keyring_get_keys"]), json!([]));
}
