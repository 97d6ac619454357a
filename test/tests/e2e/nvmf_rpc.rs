//! SPDK's client (`spdk-rpc`) driving bdev_tgt's nvmf target: every nvmf
//! method with SPDK's CLI arguments, result shapes and error codes;
//! `save_config` replayed by a fresh daemon; SPDK v26.05's own saved
//! config (with its `nvmf` section) loaded; `framework_get_subsystems`
//! listing `nvmf` after `bdev`.

use std::path::Path;

use crate::spdk_rpc::rpc_ok as ok;
use bdevkit_test::daemon::{run, temp_dir, text, Daemon};
use bdevkit_test::nvmf::free_port;
use bdevkit_test::spdk_rpc::spdk_rpc;
use serde_json::{json, Value};

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

fn rpc(exe: &Path, d: &Daemon, args: &[&str]) -> (bool, String) {
    let sock = d.socket.to_str().expect("invariant: utf-8 temp path");
    let mut full = vec!["-s", sock];
    full.extend_from_slice(args);
    let o = run(exe, &full, None);
    (o.status.success(), text(&o))
}

/// The error object `spdk-rpc` printed for a failed call.
pub(crate) fn err(exe: &Path, d: &Daemon, args: &[&str]) -> Value {
    let (good, out) = rpc(exe, d, args);
    assert!(!good, "spdk-rpc {args:?} should fail: {out}");
    let i = out
        .find("response:")
        .unwrap_or_else(|| panic!("no error response: {out}"));
    let rest = &out[i + "response:".len()..];
    let start = rest.find('{').expect("invariant: error object");
    let end = rest.find('}').expect("invariant: error object");
    serde_json::from_str(&rest[start..=end]).expect("error json")
}

#[test]
fn nvmf_methods_with_spdks_client() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&["-m", "0x1"]);
    let port = free_port().to_string();
    assert_eq!(ok(&exe, &d, &["nvmf_get_transports"]), json!([]));
    assert_eq!(
        ok(
            &exe,
            &d,
            &[
                "nvmf_create_transport",
                "-t",
                "TCP",
                "-q",
                "64",
                "-c",
                "8192"
            ]
        ),
        Value::Null
    );
    let e = err(&exe, &d, &["nvmf_create_transport", "-t", "tcp"]);
    assert_eq!(
        e,
        json!({"code": -32603, "message": "Transport type 'TCP' already exists"})
    );
    let e = err(&exe, &d, &["nvmf_create_transport", "-t", "RDMA"]);
    assert_eq!(
        e,
        json!({"code": -32602, "message": "Invalid transport type 'RDMA'"})
    );
    let t = ok(&exe, &d, &["nvmf_get_transports"]);
    let keys: Vec<&str> = t[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "trtype",
            "max_queue_depth",
            "max_io_qpairs_per_ctrlr",
            "in_capsule_data_size",
            "max_io_size",
            "max_aq_depth",
            "iobuf_small_cache_size",
            "iobuf_large_cache_size",
            "dif_insert_or_strip",
            "zcopy",
            "c2h_success",
            "sock_priority",
            "abort_timeout_sec",
            "ack_timeout",
            "data_wr_pool_size",
            "disable_command_passthru",
            "kas",
            "min_kato"
        ]
    );
    assert_eq!(t[0]["in_capsule_data_size"], 8192);
    assert_eq!(t[0]["max_io_size"], 131_072);
    assert_eq!(t[0]["max_queue_depth"], 64);
    let e = err(&exe, &d, &["nvmf_get_transports", "--trtype", "RDMA"]);
    assert_eq!(e["code"], -19);

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
        &[
            "nvmf_create_subsystem",
            NQN,
            "-s",
            "SPDK00000000000001",
            "-d",
            "bdevkit test",
            "-m",
            "8",
        ],
    );
    let e = err(&exe, &d, &["nvmf_create_subsystem", NQN]);
    assert_eq!(
        e,
        json!({"code": -32603, "message": format!("Unable to create subsystem {NQN}")})
    );
    let e = err(&exe, &d, &["nvmf_create_subsystem", "not-an-nqn"]);
    assert_eq!(e["code"], -32603);
    let e = err(
        &exe,
        &d,
        &[
            "nvmf_create_subsystem",
            "nqn.2016-06.io.spdk:x",
            "-i",
            "10",
            "-I",
            "5",
        ],
    );
    assert_eq!(
        e,
        json!({"code": -32602, "message": "Invalid cntlid range [10-5]"})
    );
    // spdk-rpc prints nothing for add_ns; the result is the nsid.
    ok(&exe, &d, &["nvmf_subsystem_add_ns", NQN, "Malloc0"]);
    ok(
        &exe,
        &d,
        &[
            "nvmf_subsystem_add_ns",
            "-n",
            "4",
            "-e",
            "0011223344556677",
            NQN,
            "Malloc1",
        ],
    );
    ok(&exe, &d, &["bdev_null_create", "Null0", "8", "4096"]);
    let r = d.call(
        "nvmf_subsystem_add_ns",
        Some(json!({"nqn": NQN, "namespace": {"bdev_name": "Null0", "no_auto_visible": false}})),
    );
    assert_eq!(r, Ok(json!(2)));
    ok(&exe, &d, &["nvmf_subsystem_remove_ns", NQN, "2"]);
    let e = err(&exe, &d, &["nvmf_subsystem_add_ns", NQN, "NoSuchBdev"]);
    assert_eq!(e, json!({"code": -32602, "message": "Invalid parameters"}));
    // The namespace's claim shows in bdev_get_bdevs.
    let b = ok(&exe, &d, &["bdev_get_bdevs", "-b", "Malloc0"]);
    assert_eq!(b[0]["claimed"], true);
    assert_eq!(b[0]["claim_type"], "exclusive_write");
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
            "-s",
            &port,
        ],
    );
    let e = err(
        &exe,
        &d,
        &[
            "nvmf_subsystem_add_listener",
            NQN,
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
        ],
    );
    assert_eq!(e["code"], -32602);
    let e = err(
        &exe,
        &d,
        &[
            "nvmf_subsystem_add_listener",
            "nqn.2016-06.io.spdk:none",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            "1",
        ],
    );
    assert_eq!(e["code"], -32602);
    ok(
        &exe,
        &d,
        &[
            "nvmf_subsystem_add_listener",
            "discovery",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
        ],
    );
    ok(&exe, &d, &["nvmf_subsystem_add_host", NQN, HOST]);
    let e = err(&exe, &d, &["nvmf_subsystem_add_host", NQN, HOST]);
    assert_eq!(e, json!({"code": -32603, "message": "Internal error"}));

    let s = ok(&exe, &d, &["nvmf_get_subsystems", NQN]);
    assert_eq!(s.as_array().unwrap().len(), 1);
    let s = &s[0];
    let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "nqn",
            "subtype",
            "listen_addresses",
            "allow_any_host",
            "hosts",
            "serial_number",
            "model_number",
            "max_namespaces",
            "passthrough",
            "min_cntlid",
            "max_cntlid",
            "dmrsl",
            "wzsl",
            "namespaces"
        ]
    );
    assert_eq!(s["subtype"], "NVMe");
    assert_eq!(s["model_number"], "bdevkit test");
    assert_eq!(s["max_namespaces"], 8);
    assert_eq!(s["hosts"], json!([{"nqn": HOST}]));
    assert_eq!(
        s["listen_addresses"],
        json!([{"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": port}])
    );
    assert_eq!(s["namespaces"][0]["nsid"], 1);
    assert_eq!(s["namespaces"][0]["bdev_name"], "Malloc0");
    assert_eq!(s["namespaces"][1]["eui64"], "0011223344556677");
    let all = ok(&exe, &d, &["nvmf_get_subsystems"]);
    assert_eq!(all[0]["subtype"], "Discovery");
    assert_eq!(all[0]["listen_addresses"][0]["trsvcid"], port);
    let e = err(
        &exe,
        &d,
        &["nvmf_get_subsystems", "nqn.2016-06.io.spdk:none"],
    );
    assert_eq!(e, json!({"code": -19, "message": "No such device"}));

    assert_eq!(
        ok(&exe, &d, &["nvmf_subsystem_get_controllers", NQN]),
        json!([])
    );
    assert_eq!(ok(&exe, &d, &["nvmf_subsystem_get_qpairs", NQN]), json!([]));
    let l = ok(&exe, &d, &["nvmf_subsystem_get_listeners", NQN]);
    assert_eq!(l[0]["address"]["trsvcid"], port);
    let e = err(
        &exe,
        &d,
        &["nvmf_subsystem_get_controllers", "nqn.2016-06.io.spdk:none"],
    );
    assert_eq!(e["code"], -32602);

    ok(
        &exe,
        &d,
        &["nvmf_subsystem_allow_any_host", "--allow-any-host", NQN],
    );
    assert_eq!(
        ok(&exe, &d, &["nvmf_get_subsystems", NQN])[0]["allow_any_host"],
        true
    );
    ok(
        &exe,
        &d,
        &["nvmf_subsystem_allow_any_host", "--no-allow-any-host", NQN],
    );
    ok(&exe, &d, &["nvmf_subsystem_remove_host", NQN, HOST]);
    let e = err(&exe, &d, &["nvmf_subsystem_remove_host", NQN, HOST]);
    assert_eq!(e["code"], -32603);
    ok(&exe, &d, &["nvmf_subsystem_remove_ns", NQN, "4"]);
    let e = err(&exe, &d, &["nvmf_subsystem_remove_ns", NQN, "4"]);
    assert_eq!(e["code"], -32602);
    assert_eq!(
        ok(&exe, &d, &["bdev_get_bdevs", "-b", "Malloc1"])[0]["claimed"],
        false
    );
    ok(
        &exe,
        &d,
        &[
            "nvmf_subsystem_remove_listener",
            NQN,
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
        ],
    );
    let e = err(
        &exe,
        &d,
        &[
            "nvmf_subsystem_remove_listener",
            NQN,
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
        ],
    );
    assert_eq!(e["code"], -32602);
    // STARTUP-only methods at RUNTIME: SPDK's state error.
    let e = err(&exe, &d, &["nvmf_set_max_subsystems", "-x", "10"]);
    assert_eq!(e["code"], -1);
    let e = err(&exe, &d, &["nvmf_set_crdt", "-t1", "1"]);
    assert_eq!(e["code"], -1);
    ok(&exe, &d, &["nvmf_delete_subsystem", NQN]);
    let e = err(&exe, &d, &["nvmf_delete_subsystem", NQN]);
    assert_eq!(e, json!({"code": -32602, "message": "Invalid parameters"}));
    assert_eq!(
        ok(&exe, &d, &["bdev_get_bdevs", "-b", "Malloc0"])[0]["claimed"],
        false
    );
    let subs = ok(&exe, &d, &["framework_get_subsystems"]);
    assert_eq!(
        subs,
        json!([
            {"subsystem": "keyring", "depends_on": []},
            {"subsystem": "bdev", "depends_on": ["keyring"]},
            {"subsystem": "nvmf", "depends_on": ["bdev", "keyring"]}
        ])
    );
}

/// What a daemon reports of its target: subsystems without UUID-free noise.
fn state(exe: &Path, d: &Daemon) -> (Value, Value) {
    (
        ok(exe, d, &["nvmf_get_subsystems"]),
        ok(exe, d, &["nvmf_get_transports"]),
    )
}

#[test]
fn save_config_replays_and_spdks_saved_config_loads() {
    let Some(exe) = spdk_rpc() else { return };
    let d = Daemon::start(&["-m", "0x1"]);
    let port = free_port().to_string();
    ok(&exe, &d, &["nvmf_create_transport", "-t", "TCP"]);
    ok(
        &exe,
        &d,
        &["bdev_malloc_create", "-b", "Malloc0", "8", "512"],
    );
    ok(&exe, &d, &["nvmf_create_subsystem", NQN, "-a", "-s", "SN1"]);
    ok(
        &exe,
        &d,
        &[
            "nvmf_create_subsystem",
            "nqn.2016-06.io.spdk:cnode2",
            "-i",
            "5",
            "-I",
            "9",
        ],
    );
    ok(
        &exe,
        &d,
        &[
            "nvmf_subsystem_add_host",
            "nqn.2016-06.io.spdk:cnode2",
            HOST,
        ],
    );
    ok(&exe, &d, &["nvmf_subsystem_add_ns", NQN, "Malloc0"]);
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
            "-s",
            &port,
        ],
    );
    ok(
        &exe,
        &d,
        &[
            "nvmf_subsystem_add_listener",
            "discovery",
            "-t",
            "tcp",
            "-a",
            "127.0.0.1",
            "-s",
            &port,
        ],
    );
    let saved = ok(&exe, &d, &["save_config"]);
    let nvmf = saved["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "nvmf")
        .expect("an nvmf section");
    let methods: Vec<&str> = nvmf["config"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "nvmf_set_config",
            "nvmf_set_max_subsystems",
            "nvmf_set_crdt",
            "nvmf_create_transport",
            "nvmf_create_subsystem",
            "nvmf_create_subsystem",
            "nvmf_subsystem_add_host",
            "nvmf_subsystem_add_ns",
            "nvmf_subsystem_add_listener",
            "nvmf_subsystem_add_listener"
        ]
    );
    let before = state(&exe, &d);
    drop(d);
    // A fresh daemon replays the file at start-up.
    let dir = temp_dir();
    let file = dir.path().join("saved.json");
    std::fs::write(&file, serde_json::to_string_pretty(&saved).unwrap()).unwrap();
    let d2 = Daemon::start(&["-m", "0x1", "--json", file.to_str().unwrap()]);
    assert_eq!(state(&exe, &d2), before);
    drop(d2);

    // SPDK v26.05's own saved config (nvmf_tgt + rpc.py save_config),
    // its ports moved to free ones, as it is (its bdev_nvme_set_options
    // has multipath_opts; spdk_configs.rs loads more of them).
    let text = include_str!("fixtures/spdk-v26.05-nvmf-saved-config.json")
        .replace("\"44201\"", &format!("\"{}\"", free_port()))
        .replace("\"44202\"", &format!("\"{}\"", free_port()));
    let cfg: Value = serde_json::from_str(&text).unwrap();
    let file = dir.path().join("spdk.json");
    std::fs::write(&file, cfg.to_string()).unwrap();
    let d3 = Daemon::start(&["-m", "0x1", "--json", file.to_str().unwrap()]);
    let (subs, transports) = state(&exe, &d3);
    assert_eq!(transports[0]["trtype"], "TCP");
    assert_eq!(subs.as_array().unwrap().len(), 3);
    let c1 = &subs[1];
    assert_eq!(c1["nqn"], NQN);
    assert_eq!(c1["model_number"], "SPDK Test Ctrl");
    assert_eq!(c1["hosts"], json!([{"nqn": HOST}]));
    assert_eq!(c1["namespaces"][1]["nsid"], 3);
    assert_eq!(
        c1["namespaces"][1]["uuid"],
        "6a2c6c39-6a1f-4b1e-9bd9-4a1c8f1e7d01"
    );
    assert_eq!(
        c1["namespaces"][1]["nguid"],
        "DEE2C6845F2E43A2A5F45E4E00A97855"
    );
    assert_eq!(subs[0]["listen_addresses"].as_array().unwrap().len(), 1);
    // And saving it again gives SPDK's nvmf section back (ports aside).
    let again = ok(&exe, &d3, &["save_config", "-s", "nvmf"]);
    let mine = again["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "nvmf")
        .unwrap();
    let theirs = cfg["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "nvmf")
        .unwrap();
    assert_eq!(mine, theirs);
}
