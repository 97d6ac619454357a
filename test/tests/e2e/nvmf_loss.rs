//! Losing an NVMe-oF/TCP target process, across processes: `bdev_tgt`
//! targets exporting file-backed (aio) namespaces, our initiator in
//! `bdevperf -z` and `bdev_dd` (the nvme module with reconnect knobs),
//! the target SIGKILLed under load and started again on the same port
//! with the same config.
//!
//! * A target killed under `-w verify` and a known-pattern write comes
//!   back: the initiators reconnect, verify finishes with no failed I/O,
//!   the write finishes, and the pattern is in the target's file and reads
//!   back through the initiator: no acknowledged write is lost.
//! * A raid1 over namespaces of two targets: one target killed, verify
//!   keeps running clean on the other member; the lost controller is
//!   given up after `ctrlr_loss_timeout_sec` (bdev hot-removed, raid
//!   degraded); a config saved once the target is back does not list the
//!   stale member; the target restarted, the controller attached again and
//!   added back with `bdev_raid_add_base_bdev`, the rebuild completes under
//!   verify, and the two targets' files hold the same bytes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bdevkit_jsonrpc::RpcError;
use bdevkit_test::daemon::{bin, temp_dir, text, Daemon, TIMEOUT};
use bdevkit_test::nvmf::free_port;
use serde_json::{json, Value};

const NQN_V: &str = "nqn.2016-06.io.bdevkit:loss-verify";
const NQN_P: &str = "nqn.2016-06.io.bdevkit:loss-pattern";
const MIB: u64 = 1024 * 1024;

/// A sparse file of `len` bytes.
fn backing_file(path: &Path, len: u64) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(len).unwrap();
}

/// A target config: for each (nqn, file), an aio bdev on the file
/// exported as namespace 1 of its own subsystem, listening on `port`.
fn target_config(dir: &Path, name: &str, port: u16, exports: &[(&str, &Path)]) -> PathBuf {
    let mut bdevs = Vec::new();
    let mut nvmf = vec![json!({"method": "nvmf_create_transport", "params": {"trtype": "TCP"}})];
    for (i, (nqn, file)) in exports.iter().enumerate() {
        let bdev = format!("Aio{i}");
        bdevs.push(json!({"method": "bdev_aio_create",
            "params": {"name": bdev, "filename": file, "block_size": 512}}));
        nvmf.push(json!({"method": "nvmf_create_subsystem",
            "params": {"nqn": nqn, "serial_number": format!("BDKLOSS{i}"), "allow_any_host": true}}));
        nvmf.push(json!({"method": "nvmf_subsystem_add_ns",
            "params": {"nqn": nqn, "namespace": {"bdev_name": bdev}}}));
        nvmf.push(json!({"method": "nvmf_subsystem_add_listener",
            "params": {"nqn": nqn, "listen_address": {"trtype": "tcp", "adrfam": "ipv4",
                       "traddr": "127.0.0.1", "trsvcid": port.to_string()}}}));
    }
    let cfg = json!({"subsystems": [
        {"subsystem": "bdev", "config": bdevs},
        {"subsystem": "nvmf", "config": nvmf},
    ]});
    let p = dir.join(format!("{name}.json"));
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

/// `bdev_nvme_attach_controller` of `nqn` at `port` as `name`, losing it
/// after `loss` seconds (reconnecting every second; 0: at the first
/// failure), failing waiting I/O after `fast` seconds.
fn attach(name: &str, port: u16, nqn: &str, loss: i32, fast: u32) -> Value {
    json!({"method": "bdev_nvme_attach_controller", "params": {
        "name": name, "trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1",
        "trsvcid": port.to_string(), "subnqn": nqn,
        "ctrlr_loss_timeout_sec": loss, "reconnect_delay_sec": u32::from(loss != 0),
        "fast_io_fail_timeout_sec": fast}})
}

fn host_config(dir: &Path, name: &str, calls: &[Value]) -> PathBuf {
    let cfg = json!({"subsystems": [{"subsystem": "bdev", "config": calls}]});
    let p = dir.join(format!("{name}.json"));
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

fn start_target(cfg: &Path) -> Daemon {
    Daemon::start(&["-m", "0x1", "--json", cfg.to_str().unwrap()])
}

/// `bdevperf -z` with `cfg`, verify at QD 8 of 4 KiB by default, on
/// bdev `only` (not on whatever else is unclaimed when a test starts).
pub(crate) fn start_bdevperf(cfg: &Path, only: &str) -> Daemon {
    Daemon::start_program(
        "bdevperf",
        &[
            "-z",
            "-T",
            only,
            "-m",
            "0x1",
            "--json",
            cfg.to_str().unwrap(),
            "-q",
            "8",
            "-o",
            "4096",
            "-w",
            "verify",
            "-t",
            "1",
        ],
    )
}

/// Runs `perform_tests` for `secs` on a thread of its own.
pub(crate) fn perform_tests(bp: &Daemon, secs: u64) -> JoinHandle<Result<Value, RpcError>> {
    let mut c = bp.client();
    c.set_timeout(Some(TIMEOUT * 2));
    std::thread::spawn(move || {
        c.call("perform_tests", Some(json!({"time_in_sec": secs})))
            .map_err(|e| match e {
                bdevkit_jsonrpc::ClientError::Rpc(e) => e,
                other => panic!("perform_tests: {other:?}"),
            })
    })
}

/// Every job of a `perform_tests` answer finished with no failed I/O.
pub(crate) fn assert_clean(r: &Value, what: &str) {
    let jobs = r["results"].as_array().unwrap();
    assert!(!jobs.is_empty(), "{what}: {r}");
    for j in jobs {
        assert_eq!(j["status"], "finished", "{what}: {j}");
        assert_eq!(j["io_failed"], 0, "{what}: {j}");
        assert!(j["iops"].as_f64().unwrap() > 0.0, "{what}: {j}");
    }
}

/// Waits until `f` holds.
pub(crate) fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes completed by `bdev` of `d`.
pub(crate) fn writes(d: &Daemon, bdev: &str) -> u64 {
    let s = d.ok("bdev_get_iostat", Some(json!({"name": bdev})));
    s["bdevs"][0]["num_write_ops"].as_u64().unwrap_or(0)
}

fn read_range(path: &Path, len: u64) -> Vec<u8> {
    let mut b = std::fs::read(path).unwrap();
    b.resize(usize::try_from(len).unwrap(), 0);
    b
}

/// SIGKILL, then wait for the exit.
fn kill(d: &mut Daemon) {
    d.signal("KILL");
    d.wait_exit();
}

#[test]
fn target_killed_under_verify_and_restarted_loses_no_write() {
    let dir = temp_dir();
    let d = dir.path();
    let (v_img, p_img) = (d.join("v.img"), d.join("p.img"));
    backing_file(&v_img, 32 * MIB);
    backing_file(&p_img, 8 * MIB);
    let port = free_port();
    let tcfg = target_config(d, "tgt", port, &[(NQN_V, &v_img), (NQN_P, &p_img)]);
    let mut tgt = start_target(&tcfg);

    // The known pattern: 4 MiB, written at 4 ms a unit (a delay bdev on
    // the initiator side), so that the write spans the outage.
    let pattern: Vec<u8> = (0..4 * MIB)
        .map(|i| u8::try_from((i * 7 + i / 4093) % 251).unwrap())
        .collect();
    let pattern_file = d.join("pattern.bin");
    std::fs::write(&pattern_file, &pattern).unwrap();
    let dd_cfg = host_config(
        d,
        "dd",
        &[
            attach("NvmeP", port, NQN_P, 20, 0),
            json!({"method": "bdev_delay_create", "params": {"name": "DelayP",
                "base_bdev_name": "NvmePn1", "avg_read_latency": 0, "p99_read_latency": 0,
                "avg_write_latency": 4000, "p99_write_latency": 4000}}),
        ],
    );
    let bp_cfg = host_config(d, "bp", &[attach("NvmeV", port, NQN_V, 20, 0)]);

    let bp = start_bdevperf(&bp_cfg, "NvmeVn1");
    let verify = perform_tests(&bp, 6);
    let dd = Command::new(bin("bdev_dd"))
        .args(["--interrupt-mode", "--json"])
        .arg(&dd_cfg)
        .arg("--if")
        .arg(&pattern_file)
        .args(["--ob", "DelayP", "--bs", "4096", "--qd", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Both write through the target; then it dies.
    wait_until("writes on both namespaces", || {
        writes(&tgt, "Aio0") > 0 && writes(&tgt, "Aio1") > 0
    });
    kill(&mut tgt);
    // The initiators retry (refused) meanwhile.
    std::thread::sleep(Duration::from_millis(1500));
    let tgt = start_target(&tcfg);

    let r = verify.join().unwrap().expect("perform_tests");
    assert_clean(&r, "verify across the restart");
    let o = dd.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "bdev_dd across the restart: {}",
        text(&o)
    );
    let c = bp.ok("bdev_nvme_get_controllers", Some(json!({"name": "NvmeV"})));
    assert_eq!(c[0]["ctrlrs"][0]["state"], "enabled", "{c}");

    // Every acknowledged write is in the target's file ...
    assert!(
        read_range(&p_img, 4 * MIB) == pattern,
        "the pattern is not in the target's file"
    );
    // ... and reads back through the initiator.
    let back = d.join("back.bin");
    let rd_cfg = host_config(d, "rd", &[attach("NvmeP", port, NQN_P, 0, 0)]);
    let o = bdevkit_test::daemon::run(
        &bin("bdev_dd"),
        &[
            "--interrupt-mode",
            "--json",
            rd_cfg.to_str().unwrap(),
            "--ib",
            "NvmePn1",
            "--of",
            back.to_str().unwrap(),
            "--bs",
            "65536",
            "--count",
            "64",
        ],
        None,
    );
    assert!(o.status.success(), "read back: {}", text(&o));
    assert!(
        std::fs::read(&back).unwrap() == pattern,
        "the pattern does not read back"
    );
    drop(bp);
    drop(tgt);
}

/// `R1` of `bdev_raid_get_bdevs`.
fn raid(bp: &Daemon) -> Value {
    let all = bp.ok("bdev_raid_get_bdevs", Some(json!({"category": "all"})));
    all.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "R1")
        .cloned()
        .unwrap_or(Value::Null)
}

/// The `base_bdevs` that `save_config` (the client asks each subsystem
/// with `framework_get_config`) records for `R1`.
fn saved_raid_members(bp: &Daemon) -> Value {
    let bdev = bp.ok("framework_get_config", Some(json!({"name": "bdev"})));
    bdev.as_array()
        .unwrap()
        .iter()
        .find(|e| e["method"] == "bdev_raid_create" && e["params"]["name"] == "R1")
        .map(|e| e["params"]["base_bdevs"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn raid1_across_two_targets_member_given_up_then_rebuilt() {
    raid1_across_two_targets(true);
}

#[test]
fn raid1_across_two_targets_member_reconnected_then_rebuilt() {
    raid1_across_two_targets(false);
}

/// B's target dies under verify: B's I/O fails after 1 s lost (the raid
/// degrades). With `given_up`, B is given up after 2 s (its bdev
/// hot-removed, the slot emptied), attached again once its target is
/// back; else B reconnects by itself once its target is back and its
/// failed member is taken out by `bdev_raid_remove_base_bdev`. Either
/// way it is added back and rebuilt.
fn raid1_across_two_targets(given_up: bool) {
    let dir = temp_dir();
    let d = dir.path();
    let (a_img, b_img) = (d.join("a.img"), d.join("b.img"));
    backing_file(&a_img, 8 * MIB);
    backing_file(&b_img, 8 * MIB);
    let (pa, pb) = (free_port(), free_port());
    let (nqn_a, nqn_b) = (
        "nqn.2016-06.io.bdevkit:mirror-a",
        "nqn.2016-06.io.bdevkit:mirror-b",
    );
    let ta = start_target(&target_config(d, "ta", pa, &[(nqn_a, &a_img)]));
    let tb_cfg = target_config(d, "tb", pb, &[(nqn_b, &b_img)]);
    let mut tb = start_target(&tb_cfg);
    let attach_b = attach("NvmeB", pb, nqn_b, if given_up { 2 } else { 30 }, 1);
    let bp = start_bdevperf(
        &host_config(
            d,
            "bp",
            &[
                attach("NvmeA", pa, nqn_a, 0, 0),
                attach_b.clone(),
                json!({"method": "bdev_raid_create", "params": {"name": "R1",
                "raid_level": "raid1", "base_bdevs": ["NvmeAn1", "NvmeBn1"]}}),
            ],
        ),
        "R1",
    );
    assert_eq!(raid(&bp)["num_base_bdevs_operational"], 2);

    // Verify runs; B's target dies under it.
    let verify = perform_tests(&bp, 4);
    wait_until("writes on B", || writes(&tb, "Aio0") > 0);
    kill(&mut tb);
    wait_until("raid degraded", || {
        raid(&bp)["num_base_bdevs_operational"] == 1
    });
    let r = raid(&bp);
    assert_eq!(r["state"], "online", "{r}");
    let b_listed = || {
        let c = bp.ok("bdev_nvme_get_controllers", None);
        c.as_array().unwrap().iter().any(|c| c["name"] == "NvmeB")
    };
    if given_up {
        wait_until("B removed from the raid", || {
            let r = raid(&bp);
            r["num_base_bdevs_discovered"] == 1 && r["base_bdevs_list"][1]["is_configured"] == false
        });
        // The controller was given up: gone, with its bdev.
        assert!(!b_listed());
        assert!(bp
            .call("bdev_get_bdevs", Some(json!({"name": "NvmeBn1"})))
            .is_err());
    } else {
        // Failed, still a member; the controller keeps reconnecting.
        assert_eq!(r["base_bdevs_list"][1]["is_configured"], true, "{r}");
        assert!(b_listed());
    }
    let r = verify.join().unwrap().expect("perform_tests");
    assert_clean(&r, "verify while B was lost");

    // B comes back and is added back; it rebuilds under verify.
    let tb = start_target(&tb_cfg);
    if given_up {
        let names = bp.ok(
            "bdev_nvme_attach_controller",
            Some(attach_b["params"].clone()),
        );
        assert_eq!(names, json!(["NvmeBn1"]));
    } else {
        wait_until("B reconnected", || {
            let c = bp.ok("bdev_nvme_get_controllers", Some(json!({"name": "NvmeB"})));
            c[0]["ctrlrs"][0]["state"] == "enabled"
        });
        // Issue 31, point 2: B is back but missed writes; a config saved
        // now must not describe it as an in-sync member.
        let members = saved_raid_members(&bp);
        assert_eq!(members, json!(["NvmeAn1", "removed_base_bdev_1"]));
        let _ = bp.ok(
            "bdev_raid_remove_base_bdev",
            Some(json!({"name": "NvmeBn1"})),
        );
        wait_until("failed member out", || {
            raid(&bp)["base_bdevs_list"][1]["is_configured"] == false
        });
    }
    let verify = perform_tests(&bp, 2);
    let _ = bp.ok(
        "bdev_raid_add_base_bdev",
        Some(json!({"raid_bdev": "R1", "base_bdev": "NvmeBn1"})),
    );
    wait_until("rebuild done", || {
        let r = raid(&bp);
        r["num_base_bdevs_operational"] == 2 && r.get("process").is_none()
    });
    let r = verify.join().unwrap().expect("perform_tests");
    assert_clean(&r, "verify during the rebuild");
    let r = perform_tests(&bp, 1)
        .join()
        .unwrap()
        .expect("perform_tests");
    assert_clean(&r, "verify after the rebuild");

    // No writer left: the rebuilt member holds what the other one does.
    let size = raid(&bp)["base_bdevs_list"][0]["data_size"]
        .as_u64()
        .unwrap()
        * 512;
    drop(bp);
    assert!(
        read_range(&a_img, size) == read_range(&b_img, size),
        "the rebuilt member differs from the other one"
    );
    drop(tb);
    drop(ta);
}
