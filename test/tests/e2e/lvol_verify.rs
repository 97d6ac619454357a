//! Thin lvols under data verification, across processes:
//!
//! * `bdevperf -w verify -C` on two cores over one thin lvol on malloc,
//!   and on the emulated NVMe controller (`bdev_nvme_emu_create`, a RAM
//!   namespace, through our driver): both cores allocate clusters of one
//!   lvol at once, every read compares;
//! * a thin lvol exported over NVMe/TCP by `bdev_tgt`, verified by
//!   `bdevperf` through our initiator (the nvme module).

use serde_json::{json, Value};

use bdevkit_test::daemon::{temp_dir, Daemon};
use bdevkit_test::nvmf::free_port;

use crate::nvmf_loss::{assert_clean, perform_tests};

const NQN: &str = "nqn.2016-06.io.bdevkit:lvol-verify";

fn config(dir: &std::path::Path, name: &str, bdev: &[Value], nvmf: &[Value]) -> std::path::PathBuf {
    let mut subsystems = vec![json!({"subsystem": "bdev", "config": bdev})];
    if !nvmf.is_empty() {
        subsystems.push(json!({"subsystem": "nvmf", "config": nvmf}));
    }
    let p = dir.join(format!("{name}.json"));
    std::fs::write(&p, json!({ "subsystems": subsystems }).to_string()).unwrap();
    p
}

/// A store `lvs0` (1 MiB clusters) on `base` and a thin lvol `t` of
/// `mib` MiB in it, by RPC; returns the lvol's bdev name.
fn thin_lvol(d: &Daemon, base: &str, mib: u64) -> String {
    let uuid = d.ok(
        "bdev_lvol_create_lvstore",
        Some(json!({"bdev_name": base, "lvs_name": "lvs0", "cluster_sz": 1 << 20})),
    );
    assert!(uuid.as_str().is_some_and(|u| u.len() == 36), "{uuid}");
    let r = d.ok(
        "bdev_lvol_create",
        Some(json!({"lvol_name": "t", "size_in_mib": mib, "thin_provision": true, "lvs_name": "lvs0"})),
    );
    r.as_str().unwrap().to_string()
}

fn allocated(d: &Daemon) -> u64 {
    let l = d.ok("bdev_lvol_get_lvols", Some(json!({"lvs_name": "lvs0"})));
    l[0]["num_allocated_clusters"].as_u64().unwrap()
}

fn bdevperf(cfg: &std::path::Path, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "-z",
        "-m",
        "0x3",
        "--json",
        cfg.to_str().unwrap(),
        "-q",
        "32",
        "-o",
        "4096",
        "-w",
        "verify",
        "-t",
        "1",
    ];
    args.extend_from_slice(extra);
    Daemon::start_program("bdevperf", &args)
}

/// bdevperf (`-C`, 2 cores) on a fresh thin lvol of 48 clusters over
/// `base`: verify is clean, each core runs a job on the lvol, and the
/// writes allocated some of its clusters (none before).
fn verify_thin_lvol_on_two_cores(cfg: &std::path::Path, base: &str, what: &str) {
    let bp = bdevperf(cfg, &["-C"]);
    let lvol = thin_lvol(&bp, base, 48);
    assert_eq!(allocated(&bp), 0);
    let r = perform_tests(&bp, 2)
        .join()
        .unwrap()
        .expect("perform_tests");
    assert_clean(&r, what);
    let jobs = r["results"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "one job per core on the lvol: {r}");
    for j in jobs {
        assert_eq!(
            j["job"].as_str().map(|s| s.contains(&lvol)),
            Some(true),
            "{j}"
        );
    }
    let n = allocated(&bp);
    assert!(n > 0 && n <= 48, "clusters allocated by the writes: {n}");
}

#[test]
fn bdevperf_verifies_a_thin_lvol_over_malloc_on_two_cores() {
    let dir = temp_dir();
    let cfg = config(
        dir.path(),
        "bp",
        &[json!({"method": "bdev_malloc_create",
            "params": {"name": "M0", "num_blocks": 131072, "block_size": 512}})],
        &[],
    );
    verify_thin_lvol_on_two_cores(&cfg, "M0", "verify on a thin lvol");
}

#[test]
fn bdevperf_verifies_a_thin_lvol_over_the_emulated_nvme_controller_on_two_cores() {
    let dir = temp_dir();
    let cfg = config(
        dir.path(),
        "bp",
        &[
            json!({"method": "bdev_nvme_emu_create", "params": {"name": "emu0",
                "namespaces": [{"nsid": 1, "kind": "ram", "block_size": 512, "num_blocks": 131072}]}}),
            json!({"method": "bdev_nvme_attach_controller",
                "params": {"name": "Nvme0", "trtype": "PCIe", "traddr": "emu:emu0"}}),
        ],
        &[],
    );
    verify_thin_lvol_on_two_cores(
        &cfg,
        "Nvme0n1",
        "verify on a thin lvol over the emulated controller",
    );
}

#[test]
fn a_thin_lvol_exported_over_nvme_tcp_verifies_through_our_initiator() {
    let dir = temp_dir();
    let port = free_port();
    let listener = json!({"trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1",
                          "trsvcid": port.to_string()});
    let tcfg = config(
        dir.path(),
        "tgt",
        &[json!({"method": "bdev_malloc_create",
            "params": {"name": "M0", "num_blocks": 131072, "block_size": 512}})],
        &[
            json!({"method": "nvmf_create_transport", "params": {"trtype": "TCP"}}),
            json!({"method": "nvmf_create_subsystem",
                "params": {"nqn": NQN, "serial_number": "BDKLVOL1", "allow_any_host": true}}),
            json!({"method": "nvmf_subsystem_add_listener",
                "params": {"nqn": NQN, "listen_address": listener}}),
        ],
    );
    let tgt = Daemon::start(&["-m", "0x1", "--json", tcfg.to_str().unwrap()]);
    let lvol = thin_lvol(&tgt, "M0", 48);
    let nsid = tgt.ok(
        "nvmf_subsystem_add_ns",
        Some(json!({"nqn": NQN, "namespace": {"bdev_name": "lvs0/t"}})),
    );
    assert_eq!(nsid, 1);
    let hcfg = config(
        dir.path(),
        "host",
        &[json!({"method": "bdev_nvme_attach_controller", "params": {
            "name": "N0", "trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1",
            "trsvcid": port.to_string(), "subnqn": NQN}})],
        &[],
    );
    let bp = bdevperf(&hcfg, &["-C", "-T", "N0n1"]);
    let r = perform_tests(&bp, 2)
        .join()
        .unwrap()
        .expect("perform_tests");
    assert_clean(&r, "verify of a thin lvol over NVMe/TCP");
    let n = allocated(&tgt);
    assert!(n > 0 && n <= 48, "clusters allocated by the writes: {n}");
    let b = tgt.ok("bdev_get_bdevs", Some(json!({"name": lvol})));
    assert_eq!(b[0]["driver_specific"]["lvol"]["thin_provision"], true);
}

/// `bdevperf -w verify -C` on two cores over a clone (of a snapshot of a
/// thick lvol) while the clone is snapshotted three times, each once its
/// writes are seen going: every read compares, no I/O fails, and the clone
/// ends with the chain of its snapshots.
#[test]
fn bdevperf_verifies_a_clone_on_two_cores_while_its_snapshots_are_taken() {
    use crate::nvmf_loss::{wait_until, writes};
    let dir = temp_dir();
    let cfg = config(
        dir.path(),
        "bp",
        &[
            json!({"method": "bdev_malloc_create",
                "params": {"name": "M0", "num_blocks": 131072, "block_size": 512}}),
            json!({"method": "bdev_lvol_create_lvstore",
                "params": {"bdev_name": "M0", "lvs_name": "lvs0", "cluster_sz": 1 << 20}}),
            json!({"method": "bdev_lvol_create",
                "params": {"lvs_name": "lvs0", "lvol_name": "v", "size_in_mib": 24}}),
            json!({"method": "bdev_lvol_snapshot",
                "params": {"lvol_name": "lvs0/v", "snapshot_name": "s0"}}),
            json!({"method": "bdev_lvol_clone",
                "params": {"snapshot_name": "lvs0/s0", "clone_name": "c"}}),
        ],
        &[],
    );
    let bp = bdevperf(&cfg, &["-C", "-T", "lvs0/c"]);
    let run = perform_tests(&bp, 4);
    let mut seen = 0;
    for i in 1..=3 {
        wait_until("the clone's writes go on", || {
            let n = writes(&bp, "lvs0/c");
            (n > seen).then(|| seen = n).is_some()
        });
        let id = bp.ok(
            "bdev_lvol_snapshot",
            Some(json!({"lvol_name": "lvs0/c", "snapshot_name": format!("cs{i}")})),
        );
        assert!(id.as_str().is_some_and(|u| u.len() == 36), "{id}");
    }
    let r = run.join().unwrap().expect("perform_tests");
    assert_clean(&r, "verify on a clone while it is snapshotted");
    let jobs = r["results"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "one job per core on the clone: {r}");
    let lvols = bp.ok("bdev_lvol_get_lvols", Some(json!({"lvs_name": "lvs0"})));
    let by_name = |n: &str| {
        lvols
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {lvols}"))
            .clone()
    };
    let c = by_name("c");
    assert_eq!(c["is_clone"], true, "{c}");
    for i in 1..=3 {
        let s = by_name(&format!("cs{i}"));
        assert_eq!(s["is_snapshot"], true, "{s}");
    }
    let b = bp.ok("bdev_get_bdevs", Some(json!({"name": "lvs0/c"})));
    assert_eq!(
        b[0]["driver_specific"]["lvol"]["base_snapshot"], "cs3",
        "{b}"
    );
}
