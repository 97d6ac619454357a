//! Start-up, `--wait-for-rpc`, `--json` configs, `--rpcs-allowed`,
//! shutdown by signal and by `spdk_kill_instance`, socket ownership, and
//! the `bdev_rpc` CLI.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;

use bdevkit_jsonrpc::{RpcError, RUNTIME_STATE_MESSAGE, STARTUP_STATE_MESSAGE};
use bdevkit_test::daemon::{bin, run, run_tgt_to_exit, temp_dir, text, Daemon};
use serde_json::{json, Value};

fn names(d: &Daemon) -> Vec<String> {
    d.ok("bdev_get_bdevs", None)
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect()
}

fn null(name: &str) -> Option<Value> {
    Some(json!({"name": name, "block_size": 512, "num_blocks": 64}))
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut d = Daemon::start(&[]);
    let sock = d.socket.clone();
    let lock = sock.with_extension("sock.lock");
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(lock.exists());
    for n in ["A", "B", "C"] {
        let _ = d.ok("bdev_null_create", null(n));
    }
    let st = d.terminate();
    assert!(st.success(), "{st}\n{}", d.log());
    assert!(!sock.exists() && !lock.exists());
    let log = d.log();
    // Top of the list first.
    let pos = |n: &str| log.find(&format!("unregistering bdev bdev={n}")).unwrap();
    assert!(pos("C") < pos("B") && pos("B") < pos("A"), "{log}");
    assert!(log.contains("bdev_tgt exited"), "{log}");
}

#[test]
fn sigint_and_kill_instance_shut_down() {
    let mut d = Daemon::start(&[]);
    d.signal("INT");
    assert!(d.wait_exit().success(), "{}", d.log());
    assert!(!d.socket.exists());

    let mut d = Daemon::start(&[]);
    let _ = d.ok("bdev_malloc_create", null("M"));
    assert_eq!(
        d.call("spdk_kill_instance", Some(json!({"sig_name": "SIGTERM"}))),
        Ok(json!(true))
    );
    assert!(d.wait_exit().success(), "{}", d.log());
    assert!(!d.socket.exists());
}

#[test]
fn socket_ownership() {
    // A second daemon on a live socket fails and names it.
    let d = Daemon::start(&[]);
    let (st, log) = run_tgt_to_exit(&d.socket, &[]);
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!(
            "RPC Unix domain socket path {} in use",
            d.socket.display()
        )),
        "{log}"
    );
    let _ = d.ok("spdk_get_version", None);

    // A stale socket file (no lock holder) is replaced.
    let dir = temp_dir();
    let stale = dir.path().join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let d2 = Daemon::start_at(dir, stale, &[]);
    let _ = d2.ok("spdk_get_version", None);

    // Something that is not a socket is left alone.
    let dir = temp_dir();
    let file = dir.path().join("file.sock");
    std::fs::write(&file, "x").unwrap();
    let (st, log) = run_tgt_to_exit(&file, &[]);
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(log.contains(&file.display().to_string()), "{log}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");

    // Bad command line: clap's usage error.
    let (st, log) = run_tgt_to_exit(&dir.path().join("x.sock"), &["-m", "zz"]);
    assert_eq!(st.code(), Some(2), "{log}");
    assert!(log.contains("invalid core mask"), "{log}");
}

#[test]
fn wait_for_rpc_flow() {
    let d = Daemon::start(&["--wait-for-rpc"]);
    let current = d.ok("rpc_get_methods", Some(json!({"current": true})));
    let has = |m: &str| current.as_array().unwrap().iter().any(|x| x == m);
    assert!(has("bdev_set_options") && has("framework_start_init"));
    assert!(!has("bdev_get_bdevs"));
    assert_eq!(
        d.call("bdev_get_bdevs", None),
        Err(RpcError::new(-1, STARTUP_STATE_MESSAGE))
    );
    assert_eq!(
        d.call(
            "bdev_set_options",
            Some(json!({"bdev_io_pool_size": 100, "bdev_io_cache_size": 256}))
        ),
        Err(RpcError::new(
            -32602,
            "Pool size 100 too small for cache size 256"
        ))
    );
    assert_eq!(
        d.call("bdev_set_options", Some(json!({"bogus": 1}))),
        Err(RpcError::new(-32602, "Invalid parameters"))
    );
    assert_eq!(
        d.call(
            "bdev_set_options",
            Some(json!({"bdev_io_pool_size": 2048, "bdev_io_cache_size": 16, "bdev_auto_examine": false}))
        ),
        Ok(json!(true))
    );
    // framework_wait_init answers once init is done.
    let sock = d.socket.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = bdevkit_jsonrpc::Client::connect_unix(&sock).unwrap();
        c.call("framework_wait_init", None)
    });
    assert_eq!(
        d.call("framework_start_init", Some(json!({"x": 1}))),
        Err(RpcError::new(
            -32602,
            "framework_start_init requires no parameters"
        ))
    );
    assert_eq!(d.call("framework_start_init", None), Ok(json!(true)));
    assert_eq!(waiter.join().unwrap().unwrap(), json!(true));
    assert_eq!(d.ok("framework_wait_init", None), json!(true));
    assert_eq!(
        d.call("bdev_set_options", Some(json!({"bdev_io_pool_size": 4096}))),
        Err(RpcError::new(-1, RUNTIME_STATE_MESSAGE))
    );
    let cfg = d.ok("framework_get_config", Some(json!({"name": "bdev"})));
    assert_eq!(
        cfg[0]["params"],
        json!({"bdev_io_pool_size": 2048, "bdev_io_cache_size": 16, "bdev_auto_examine": false,
               "iobuf_small_cache_size": 128, "iobuf_large_cache_size": 16})
    );
    // With auto-examine off, bdev_examine works (and is saved).
    assert_eq!(
        d.ok("bdev_examine", Some(json!({"name": "X0"}))),
        json!(true)
    );
    assert_eq!(
        d.call("bdev_examine", Some(json!({"name": "X0"}))),
        Err(RpcError::new(-17, "File exists"))
    );
    let cfg = d.ok("framework_get_config", Some(json!({"name": "bdev"})));
    assert_eq!(
        cfg[1],
        json!({"method": "bdev_examine", "params": {"name": "X0"}})
    );
    let _ = d.ok("bdev_null_create", null("N"));
    assert_eq!(names(&d), ["N"]);
}

const CONFIG: &str = r#"
// A config as an spdk_tgt would save it, trimmed, with comments.
{
  "subsystems": [
    /* not linked into bdev_tgt: skipped with a notice */
    { "subsystem": "nvmf", "config": [ { "method": "nvmf_create_transport", "params": {"trtype": "TCP"} } ] },
    { "subsystem": "accel", "config": null },
    {
      "subsystem": "bdev",
      "config": [
        { "method": "bdev_set_options", "params": { "bdev_io_pool_size": 8192, "bdev_io_cache_size": 64 } },
        [
          { "method": "bdev_malloc_create", "params": { "name": "M0", "num_blocks": 64, "block_size": 512 } },
          { "method": "bdev_null_create", "params": { "name": "N0", "num_blocks": 64, "block_size": 512 } }
        ],
        { "method": "bdev_null_create", "params": { "name": "N1", "num_blocks": 64, "block_size": 4096 } },
        { "method": "bdev_set_qos_limit", "params": { "name": "N1", "rw_mbytes_per_sec": 5 } },
        { "method": "bdev_wait_for_examine" }
      ]
    }
  ]
}
"#;

#[test]
fn json_config_at_start_up() {
    let dir = temp_dir();
    let cfg = dir.path().join("c.json");
    std::fs::write(&cfg, CONFIG).unwrap();
    let d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    assert_eq!(names(&d), ["M0", "N0", "N1"]);
    let saved = d.ok("framework_get_config", Some(json!({"name": "bdev"})));
    assert_eq!(saved[0]["params"]["bdev_io_pool_size"], 8192);
    let qos = saved
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["method"] == "bdev_set_qos_limit")
        .unwrap();
    assert_eq!(qos["params"], json!({"name": "N1", "rw_mbytes_per_sec": 5}));
    assert!(
        d.log().contains("subsystem not in this application"),
        "{}",
        d.log()
    );

    // with_batches groups the creates again.
    let batched = d.ok(
        "framework_get_config",
        Some(json!({"name": "bdev", "with_batches": true})),
    );
    let batches = batched
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.is_array())
        .count();
    assert_eq!(batches, 2, "{batched}");

    // --wait-for-rpc: the STARTUP pass runs at once, the rest after
    // framework_start_init.
    let d = Daemon::start(&["--wait-for-rpc", "-c", cfg.to_str().unwrap()]);
    assert_eq!(
        d.call("bdev_get_bdevs", None),
        Err(RpcError::new(-1, STARTUP_STATE_MESSAGE))
    );
    assert_eq!(d.ok("framework_start_init", None), json!(true));
    assert_eq!(names(&d), ["M0", "N0", "N1"]);
    let saved = d.ok("framework_get_config", Some(json!({"name": "bdev"})));
    assert_eq!(saved[0]["params"]["bdev_io_cache_size"], 64);
}

#[test]
fn json_config_failures() {
    let dir = temp_dir();
    let sock = dir.path().join("s.sock");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };

    let f = write("shape.json", "[1, 2]");
    let (st, log) = run_tgt_to_exit(&sock, &["--json", &f]);
    assert_eq!(st.code(), Some(1));
    assert!(
        log.contains("Invalid JSON configuration: not enclosed in {}."),
        "{log}"
    );

    let f = write("subs.json", r#"{"subsystems": {"bdev": []}}"#);
    let (st, log) = run_tgt_to_exit(&sock, &["--json", &f]);
    assert_eq!(st.code(), Some(1));
    assert!(log.contains("'subsystems' should be an array"), "{log}");

    let (st, log) = run_tgt_to_exit(&sock, &["--json", "/nonexistent/c.json"]);
    assert_eq!(st.code(), Some(1));
    assert!(log.contains("/nonexistent/c.json"), "{log}");

    let f = write(
        "unknown.json",
        r#"{"subsystems": [{"subsystem": "bdev", "config": [{"method": "bdev_bogus_create"}]}]}"#,
    );
    let (st, log) = run_tgt_to_exit(&sock, &["--json", &f]);
    assert_eq!(st.code(), Some(1));
    assert!(
        log.contains("Method 'bdev_bogus_create' was not found"),
        "{log}"
    );

    let dup = r#"{"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_null_create", "params": {"name": "D", "num_blocks": 8, "block_size": 512}},
        {"method": "bdev_null_create", "params": {"name": "D", "num_blocks": 8, "block_size": 512}},
        {"method": "bdev_null_create", "params": {"name": "E", "num_blocks": 8, "block_size": 512}}
    ]}]}"#;
    let f = write("dup.json", dup);
    let (st, log) = run_tgt_to_exit(&sock, &["--json", &f]);
    assert_eq!(st.code(), Some(1));
    assert!(log.contains("error response"), "{log}");
    assert!(log.contains("File exists"), "{log}");
    assert!(!sock.exists(), "socket left behind after a failed start");

    // Errors ignored: the rest loads.
    let d = Daemon::start(&["--json", &f, "--json-ignore-init-errors"]);
    assert_eq!(names(&d), ["D", "E"]);
    drop(d);

    // The options of a module this build lacks (SPDK's saved configs carry
    // bdev_iscsi_set_options): skipped with a notice, the rest loads.
    let other = write(
        "other.json",
        r#"{"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_iscsi_set_options", "params": {"timeout_sec": 30}},
        {"method": "bdev_null_create", "params": {"name": "F", "num_blocks": 8, "block_size": 512}}
    ]}]}"#,
    );
    let d = Daemon::start(&["--json", &other]);
    assert_eq!(names(&d), ["F"]);
    drop(d);
    // Any other unknown method fails the start, unless errors are ignored:
    // then it is skipped and the rest loads (SPDK's loader).
    let other = write(
        "other2.json",
        r#"{"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_iscsi_create", "params": {"name": "I"}},
        {"method": "bdev_null_create", "params": {"name": "G", "num_blocks": 8, "block_size": 512}}
    ]}]}"#,
    );
    let (st, log) = run_tgt_to_exit(&sock, &["--json", &other]);
    assert_eq!(st.code(), Some(1));
    assert!(
        log.contains("Method 'bdev_iscsi_create' was not found"),
        "{log}"
    );
    let d = Daemon::start(&["--json", &other, "--json-ignore-init-errors"]);
    assert_eq!(names(&d), ["G"]);

    // Batches must agree on a state.
    let f = write(
        "mixed.json",
        r#"{"subsystems": [{"subsystem": "bdev", "config": [[
            {"method": "bdev_set_options", "params": {}},
            {"method": "bdev_get_bdevs"}
        ]]}]}"#,
    );
    let (st, log) = run_tgt_to_exit(&sock, &["--json", &f]);
    assert_eq!(st.code(), Some(1));
    assert!(
        log.contains("Batch contains methods with incompatible state requirements"),
        "{log}"
    );
}

#[test]
fn rpcs_allowed_hides_other_methods() {
    let d = Daemon::start(&[
        "--rpcs-allowed",
        "spdk_get_version,bdev_get_bdevs,rpc_get_methods",
    ]);
    assert_eq!(
        d.ok("rpc_get_methods", None),
        json!(["rpc_get_methods", "spdk_get_version", "bdev_get_bdevs"])
    );
    assert_eq!(
        d.call("bdev_null_create", null("x")),
        Err(RpcError::method_not_found())
    );
    assert_eq!(d.ok("bdev_get_bdevs", None), json!([]));
}

#[test]
fn bdev_rpc_cli_round_trip() {
    let exe = bin("bdev_rpc");
    let d = Daemon::start(&[]);
    let sock = d.socket.to_str().unwrap().to_string();
    let rpc = |args: &[&str]| {
        let mut full = vec!["-s", sock.as_str()];
        full.extend_from_slice(args);
        run(&exe, &full, None)
    };

    let o = rpc(&[
        "bdev_malloc_create",
        "-p",
        "name=Cli0",
        "-p",
        "num_blocks=128",
        "-p",
        "block_size=512",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // A bare string result prints bare, as spdk-rpc prints it.
    assert_eq!(String::from_utf8_lossy(&o.stdout), "Cli0\n");
    let o = rpc(&[
        "bdev_null_create",
        "--json",
        r#"{"name": "Cli1", "num_blocks": 8}"#,
        "-p",
        "block_size=4096",
    ]);
    assert!(o.status.success(), "{}", text(&o));

    let o = rpc(&["bdev_get_bdevs", "-p", "name=Cli1"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["block_size"], 4096);

    // Error reply: code and message on stderr, exit 1.
    let o = rpc(&[
        "bdev_malloc_create",
        "-p",
        "name=Cli0",
        "-p",
        "num_blocks=8",
        "-p",
        "block_size=512",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("-17") && err.contains("File exists"), "{err}");

    // Connection failure names the socket.
    let o = run(
        &exe,
        &["-s", "/nonexistent/x.sock", "spdk_get_version"],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("/nonexistent/x.sock"),
        "{}",
        text(&o)
    );

    // save_config -o, then load_config into a fresh --wait-for-rpc daemon.
    let dir = temp_dir();
    let file = dir.path().join("saved.json");
    let o = rpc(&["save_config", "-o", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let d2 = Daemon::start(&["--wait-for-rpc"]);
    let o = run(
        &exe,
        &[
            "-s",
            d2.socket.to_str().unwrap(),
            "load_config",
            "-j",
            file.to_str().unwrap(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    // save_config lists bdevs module by module (null before malloc), as
    // SPDK does, so compare by name.
    let sorted = |v: Value| {
        let mut a = v.as_array().unwrap().clone();
        a.sort_by_key(|b| b["name"].as_str().unwrap().to_string());
        a
    };
    assert_eq!(
        sorted(d2.ok("bdev_get_bdevs", None)),
        sorted(d.ok("bdev_get_bdevs", None))
    );
}

/// spdk_tgt's own saved bdev section (bdev_set_options, bdev_raid_set_options,
/// bdev_iscsi_set_options, bdev_nvme_set_options, bdev_nvme_set_hotplug,
/// bdev_wait_for_examine) loads unchanged, and the nvme options come back
/// in save_config.
#[test]
fn spdk_tgts_saved_bdev_section_loads() {
    let f = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../modules/nvme/tests/fixtures/spdk_tgt_bdev_nvme.json"
    );
    let d = Daemon::start(&["--json", f]);
    let saved = d.ok("framework_get_config", Some(json!({"name": "bdev"})));
    let methods: Vec<&str> = saved
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["method"].as_str())
        .collect();
    for m in [
        "bdev_set_options",
        "bdev_nvme_set_options",
        "bdev_nvme_set_hotplug",
    ] {
        assert!(methods.contains(&m), "{m} missing from {methods:?}");
    }
}
