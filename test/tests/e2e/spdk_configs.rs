//! Saved configs across the two implementations.
//!
//! * SPDK v26.05's own `save_config` output (`fixtures/spdk-v26.05-*`,
//!   made by `fixtures/make-spdk-configs.sh` with the reference build)
//!   loads into bdev_tgt unchanged but for its paths and ports: an NVMe/TCP
//!   target (every nvmf option the script sets, referrals, the scheduler,
//!   sock, iobuf, accel and vmd sections bdev_tgt does not have),
//!   and one bdev of every module (nvme attached to that target over two
//!   paths, a raid1 with a superblock SPDK wrote on aio files). The bdevs
//!   come up with SPDK's names, UUIDs and sizes, the options that have an
//!   effect show (multipath policy, QoS, histograms, delays, read-only
//!   aio), `nvmf_get_subsystems` answers what SPDK answered, and saving
//!   again gives SPDK's sections back.
//! * bdev_tgt's `save_config` of the same setup loads into `spdk_tgt`
//!   when the reference build is here (else the test says SKIPPED and
//!   passes): the same bdevs, subsystems and, saved again by SPDK, the
//!   same config.

use std::path::{Path, PathBuf};
use std::process::Command;

use bdevkit_test::daemon::{temp_dir, Daemon};
use bdevkit_test::nvmf::free_port;
use serde_json::{json, Map, Value};

use crate::ref_spdk::{spdk_tgt, Spdk};

/// Where the fixtures' files were (`WORK` in make-spdk-configs.sh).
const WORK: &str = "/tmp/bdevkit-spdk-configs";
/// The fixtures' ports: cnode1's two paths (cnode2 shares the first), the
/// discovery listener.
const PORTS: [u16; 3] = [44310, 44311, 44312];
/// The host NQN the fixtures' nvme controller connects with.
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:0b5e0001-0000-4000-8000-000000000001";
/// SPDK v26.05 gives an error bdev its part UUID even when
/// `bdev_error_create` names one (it sets the UUID, then
/// `spdk_bdev_part_construct` overwrites it); bdev_tgt keeps the one given.
const EE_CONFIGURED_UUID: &str = "e5510000-0000-4000-8000-000000000000";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/fixtures")
        .join(name)
}

fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `text` with `from` ports replaced by `to` ones (as JSON strings).
fn move_ports(text: &str, from: &[u16], to: &[u16]) -> String {
    let mut t = text.to_string();
    for (a, b) in from.iter().zip(to) {
        t = t.replace(&format!("\"{a}\""), &format!("\"{b}\""));
    }
    t
}

/// A fixture with its paths under `dir` and its ports moved to `ports`.
fn rewritten(name: &str, dir: &Path, ports: &[u16]) -> String {
    let t = fixture_text(name).replace(WORK, dir.to_str().expect("invariant: utf-8 temp path"));
    move_ports(&t, &PORTS, ports)
}

fn write_json(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
    p
}

/// The `config` array of subsystem `name` (empty when absent or null).
fn section(cfg: &Value, name: &str) -> Vec<Value> {
    cfg["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == name)
        .and_then(|s| s["config"].as_array().cloned())
        .unwrap_or_default()
}

/// `v` with every object's keys sorted (a canonical text to compare).
fn canonical(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for k in keys {
                    out.insert(k.clone(), sort(&m[k]));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

/// The entries of a section as a sorted multiset (module order aside).
/// SPDK keeps a delay bdev's latencies in ticks and saves them converted
/// back, truncating: 100 us comes back as 99 where the tick rate is not a
/// whole number of ticks per microsecond. Takes ours for theirs where they
/// differ by that one.
fn undo_tick_rounding(theirs: &mut Value, ours: &[Value]) {
    let Some(list) = theirs.as_array_mut() else {
        return;
    };
    for e in list
        .iter_mut()
        .filter(|e| e["method"] == "bdev_delay_create")
    {
        let Some(o) = ours.iter().find(|o| {
            o["method"] == "bdev_delay_create" && o["params"]["name"] == e["params"]["name"]
        }) else {
            continue;
        };
        for key in [
            "avg_read_latency",
            "avg_write_latency",
            "p99_read_latency",
            "p99_write_latency",
        ] {
            let (t, w) = (e["params"][key].as_u64(), o["params"][key].as_u64());
            if let (Some(t), Some(w)) = (t, w) {
                if t + 1 == w {
                    e["params"][key] = json!(w);
                }
            }
        }
    }
}

fn entry_set(entries: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = entries.iter().map(canonical).collect();
    v.sort();
    v
}

/// `save_config` as SPDK's client does it: every subsystem's
/// `framework_get_config`.
fn save_config(call: &mut dyn FnMut(&str, Option<Value>) -> Value) -> Value {
    let subs = call("framework_get_subsystems", None);
    let list: Vec<Value> = subs
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let name = s["subsystem"].as_str().unwrap().to_string();
            let config = call("framework_get_config", Some(json!({"name": name})));
            json!({"subsystem": name, "config": config})
        })
        .collect();
    json!({"subsystems": list})
}

/// `bdev_get_bdevs` by name.
fn bdevs_by_name(list: &Value) -> Map<String, Value> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap().to_string(), b.clone()))
        .collect()
}

fn gunzip(from: &Path, to: &Path) {
    let out = Command::new("gzip").arg("-dc").arg(from).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", from.display());
    std::fs::write(to, out.stdout).unwrap();
}

/// The two fixtures loaded into two bdev_tgt daemons: the target first
/// (the nvme controller of the bdev one connects to it).
struct Loaded {
    dir: tempfile::TempDir,
    ports: [u16; 3],
    target: Daemon,
    bdev: Daemon,
    /// The fixtures as loaded (paths and ports rewritten).
    target_cfg: Value,
    bdev_cfg: Value,
}

fn load_spdk_fixtures() -> Loaded {
    let dir = temp_dir();
    let ports = [free_port(), free_port(), free_port()];
    // The aio files: an empty one, and the raid members SPDK wrote.
    std::fs::File::create(dir.path().join("aio0.img"))
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    // The TLS PSK of the target's keyring, owner-only as SPDK requires.
    let key = dir.path().join("key0");
    std::fs::write(
        &key,
        "NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:",
    )
    .unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    for i in 0..2 {
        gunzip(
            &fixture(&format!("spdk-v26.05-bdev-raidsb-m{i}.img.gz")),
            &dir.path().join(format!("raidsb-m{i}.img")),
        );
    }
    let target_cfg: Value = serde_json::from_str(&rewritten(
        "spdk-v26.05-target-saved-config.json",
        dir.path(),
        &ports,
    ))
    .unwrap();
    let bdev_cfg: Value = serde_json::from_str(&rewritten(
        "spdk-v26.05-bdev-saved-config.json",
        dir.path(),
        &ports,
    ))
    .unwrap();
    let tf = write_json(dir.path(), "spdk-target.json", &target_cfg);
    let bf = write_json(dir.path(), "spdk-bdev.json", &bdev_cfg);
    let target = Daemon::start(&["-m", "0x1", "--json", tf.to_str().unwrap()]);
    let bdev = Daemon::start(&["-m", "0x1", "--json", bf.to_str().unwrap()]);
    Loaded {
        dir,
        ports,
        target,
        bdev,
        target_cfg,
        bdev_cfg,
    }
}

/// SPDK v26.05's `bdev_get_bdevs` of the fixture (names, UUIDs, sizes).
fn spdk_bdevs(name: &str) -> Map<String, Value> {
    bdevs_by_name(&serde_json::from_str(&fixture_text(name)).unwrap())
}

fn assert_same_bdevs(ours: &Map<String, Value>, theirs: &Map<String, Value>, who: &str) {
    let mut a: Vec<&String> = ours.keys().collect();
    let mut b: Vec<&String> = theirs.keys().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "{who}: the same bdevs");
    for (name, t) in theirs {
        let o = &ours[name];
        for key in [
            "block_size",
            "num_blocks",
            "product_name",
            "assigned_rate_limits",
        ] {
            assert_eq!(o[key], t[key], "{who}: {name} {key}");
        }
        if name == "EE_Null0" {
            assert_eq!(
                o["uuid"], EE_CONFIGURED_UUID,
                "{who}: {name} keeps its UUID"
            );
        } else {
            assert_eq!(o["uuid"], t["uuid"], "{who}: {name} uuid");
        }
    }
}

#[test]
fn spdk_saved_configs_load_with_their_bdevs_uuids_and_options() {
    let l = load_spdk_fixtures();
    let (t, b) = (&l.target, &l.bdev);

    // The target: SPDK's bdevs and subsystems, its referrals.
    let ours = bdevs_by_name(&t.ok("bdev_get_bdevs", None));
    assert_same_bdevs(
        &ours,
        &spdk_bdevs("spdk-v26.05-target-bdevs.json"),
        "target",
    );
    let subs: Value = serde_json::from_str(&move_ports(
        &fixture_text("spdk-v26.05-target-subsystems.json"),
        &PORTS,
        &l.ports,
    ))
    .unwrap();
    assert_eq!(t.ok("nvmf_get_subsystems", None), subs, "SPDK's answer");
    let refs = t.ok("nvmf_discovery_get_referrals", None);
    assert_eq!(refs.as_array().unwrap().len(), 2, "{refs}");

    // Every bdev of every module, with SPDK's names, UUIDs and sizes.
    let ours = bdevs_by_name(&b.ok("bdev_get_bdevs", None));
    assert_same_bdevs(&ours, &spdk_bdevs("spdk-v26.05-bdev-bdevs.json"), "bdev");
    // The options that have an effect here.
    let nvme = &ours["Nvme0n1"]["driver_specific"];
    assert_eq!(nvme["mp_policy"], "active_active", "multipath_opts default");
    assert_eq!(nvme["selector"], "queue_depth");
    assert_eq!(nvme["nvme"].as_array().unwrap().len(), 2, "two paths");
    let c = b.ok("bdev_nvme_get_controllers", Some(json!({"name": "Nvme0"})));
    let ctrlrs = c[0]["ctrlrs"].as_array().unwrap();
    assert_eq!(ctrlrs.len(), 2);
    for (ct, port) in ctrlrs.iter().zip(&l.ports) {
        assert_eq!(ct["trid"]["trsvcid"], port.to_string());
        assert_eq!(ct["host"]["nqn"], HOST_A);
    }
    let delay = &ours["Delay0"]["driver_specific"]["delay"];
    assert_eq!(
        (&delay["avg_read_latency"], &delay["p99_write_latency"]),
        (&json!(100), &json!(400))
    );
    assert_eq!(ours["Aio1"]["driver_specific"]["aio"]["readonly"], true);
    for h in ["Malloc3", "Raid0"] {
        let hist = b.ok("bdev_get_histogram", Some(json!({"name": h})));
        assert_eq!(hist["granularity"], 7, "{h}: {hist}");
    }
    let raids = b.ok("bdev_raid_get_bdevs", Some(json!({"category": "online"})));
    let sb = raids
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "RaidSb")
        .expect("SPDK's superblock raid assembled");
    assert_eq!(sb["superblock"], true);
    assert_eq!(sb["num_base_bdevs_operational"], 2);

    // Saved again: SPDK's sections (bdev entries in our module order).
    for (d, cfg, names) in [
        (t, &l.target_cfg, ["keyring", "bdev", "nvmf"]),
        (b, &l.bdev_cfg, ["keyring", "bdev", "nvmf"]),
    ] {
        for name in names {
            let mine = d.ok("framework_get_config", Some(json!({"name": name})));
            assert_eq!(
                entry_set(mine.as_array().unwrap()),
                entry_set(&section(cfg, name)),
                "{name} saved back"
            );
        }
    }
    assert_eq!(
        t.ok("framework_get_config", Some(json!({"name": "nvmf"}))),
        Value::Array(section(&l.target_cfg, "nvmf")),
        "in SPDK's order too"
    );
    // The sections of subsystems bdev_tgt does not have were skipped, each
    // with a warning that names what it dropped.
    let log = t.log();
    for s in ["scheduler", "vmd", "sock", "iobuf", "accel"] {
        assert!(
            log.contains(&format!("its config is ignored subsystem={s}")),
            "{s}:\n{log}"
        );
    }
}

#[test]
fn bdevkit_saved_configs_load_into_spdk() {
    let Some(exe) = spdk_tgt() else {
        eprintln!(
            "SKIPPED bdevkit_saved_configs_load_into_spdk: reference SPDK build not found \
             (SPDK_REF_DIR or ~/.cache/bdevkit-ref-spdk/build/bin/spdk_tgt)"
        );
        return;
    };
    let mut l = load_spdk_fixtures();
    let ours_target = save_config(&mut |m, p| l.target.ok(m, p));
    let ours_bdev = save_config(&mut |m, p| l.bdev.ok(m, p));
    let target_bdevs = bdevs_by_name(&l.target.ok("bdev_get_bdevs", None));
    let bdev_bdevs = bdevs_by_name(&l.bdev.ok("bdev_get_bdevs", None));
    let subs = l.target.ok("nvmf_get_subsystems", None);
    // Stopped cleanly (the raid superblock is ours now), then SPDK gets
    // the same files on fresh ports.
    l.bdev.terminate();
    l.target.terminate();
    let ports = [free_port(), free_port(), free_port()];
    let moved = |v: &Value| -> Value {
        serde_json::from_str(&move_ports(&v.to_string(), &l.ports, &ports)).unwrap()
    };
    let (ours_target, ours_bdev) = (moved(&ours_target), moved(&ours_bdev));
    let dir = l.dir.path();
    let tf = write_json(dir, "ours-target.json", &ours_target);
    let bf = write_json(dir, "ours-bdev.json", &ours_bdev);
    let st = Spdk::start(&exe, dir, "spdk-target", &tf);
    let sb = Spdk::start(&exe, dir, "spdk-bdev", &bf);

    // The same bdevs (SPDK gives the error bdev its part UUID).
    let spdk_target = bdevs_by_name(&st.ok("bdev_get_bdevs", None));
    assert_same_bdevs(&target_bdevs, &spdk_target, "spdk target");
    let mut spdk_bdev = bdevs_by_name(&sb.ok("bdev_get_bdevs", None));
    assert_ne!(spdk_bdev["EE_Null0"]["uuid"], EE_CONFIGURED_UUID);
    spdk_bdev["EE_Null0"]["uuid"] = json!(EE_CONFIGURED_UUID);
    assert_same_bdevs(&bdev_bdevs, &spdk_bdev, "spdk bdev");
    // The same subsystems. (SPDK lists a subsystem's listeners newest
    // first and saves them in that order, so each reload reverses them.)
    let listeners_sorted = |v: Value| -> Value {
        let mut v = v;
        for s in v.as_array_mut().unwrap() {
            s["listen_addresses"]
                .as_array_mut()
                .unwrap()
                .sort_by_key(canonical);
        }
        v
    };
    assert_eq!(
        listeners_sorted(st.ok("nvmf_get_subsystems", None)),
        listeners_sorted(moved(&subs)),
        "the same subsystems"
    );
    // Saved by SPDK: what we saved.
    for (s, ours) in [(&st, &ours_target), (&sb, &ours_bdev)] {
        for name in ["keyring", "bdev", "nvmf"] {
            let mut theirs = s.ok("framework_get_config", Some(json!({"name": name})));
            undo_tick_rounding(&mut theirs, &section(ours, name));
            assert_eq!(
                entry_set(theirs.as_array().unwrap()),
                entry_set(&section(ours, name)),
                "{name} as SPDK saves it"
            );
        }
    }
}
