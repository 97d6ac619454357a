//! Logical volume stores across the two implementations.
//!
//! * Stores SPDK v26.05 made (`fixtures/spdk-v26.05-lvstore-*.img.gz`,
//!   made by `fixtures/make-spdk-lvstore.sh`: thick and thin lvols written
//!   by SPDK's spdk_dd; one unloaded cleanly, one left dirty by a
//!   SIGKILLed spdk_tgt) load in bdev_tgt with SPDK's names, UUIDs,
//!   cluster counts and `driver_specific.lvol`, and read back SPDK's bytes
//!   (zeros where a thin lvol was never written). Runs everywhere.
//! * A store bdev_tgt makes, written by bdev_dd, loads in `spdk_tgt` with
//!   the same lvols and reads back the same bytes through spdk_dd; what
//!   spdk_dd then writes into it (allocating clusters of a thin lvol) reads
//!   back in bdev_dd. Needs the reference build; says SKIPPED without it.
//! * A snapshot and clone bdev_tgt makes load in `spdk_tgt` with the same
//!   lineage and bytes (reference build too).
//! * SPDK's client answers the same from both daemons for a sequence of
//!   lvol RPCs with bad params (taken names, sizes, missing stores and
//!   lvols, bad clear methods): the same codes and messages. Needs the
//!   reference build too. (Not in the list: `md_page_size` other than
//!   4096, which SPDK takes and bdev_tgt refuses, -32602 "Operation not
//!   supported"; doc/lvol.md.)

use std::path::{Path, PathBuf};

use bdevkit_test::daemon::{bin, run, temp_dir, text, Daemon};
use bdevkit_test::spdk_rpc::spdk_rpc;
use serde_json::{json, Value};

use crate::ref_spdk::{program, Spdk};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/fixtures")
        .join(name)
}

fn fixture_json(name: &str) -> Value {
    let p = fixture(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{name}: {e}")))
        .unwrap()
}

/// `count` 512-byte units of `name`'s pattern from unit `first`, as
/// `make-spdk-lvstore.sh` writes it: the name padded to 8 bytes and the
/// unit's index (u64 LE), 32 times.
fn pattern(name: &str, first: u64, count: u64) -> Vec<u8> {
    let mut tag = [0u8; 8];
    tag[..name.len()].copy_from_slice(name.as_bytes());
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap() * 512);
    for u in first..first + count {
        for _ in 0..32 {
            out.extend_from_slice(&tag);
            out.extend_from_slice(&u.to_le_bytes());
        }
    }
    out
}

/// A config of one aio bdev `aio0` over `file`.
fn aio_config(dir: &Path, file: &Path, block_size: u32) -> PathBuf {
    let cfg = json!({"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_aio_create",
         "params": {"name": "aio0", "filename": file, "block_size": block_size}},
        {"method": "bdev_wait_for_examine"}
    ]}]});
    let p = dir.join(format!("aio-{block_size}.json"));
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

/// Runs a dd program (`bdev_dd` or SPDK's `spdk_dd`) with `config` and
/// `args`, panicking with its output when it fails.
fn dd(exe: &Path, config: &Path, args: &[&str]) {
    let spdk = exe.ends_with("spdk_dd");
    let mut all: Vec<&str> = if spdk {
        vec!["--no-huge", "-s", "1024", "--disable-cpumask-locks"]
    } else {
        vec!["--interrupt-mode"]
    };
    all.extend(["--json", config.to_str().unwrap(), "--bs", "65536"]);
    all.extend(args);
    let o = run(exe, &all, None);
    assert!(
        o.status.success(),
        "{} {all:?}: {}",
        exe.display(),
        text(&o)
    );
}

/// Reads lvol `bdev` whole into a file in `dir` and returns its bytes.
fn read_lvol(exe: &Path, config: &Path, dir: &Path, bdev: &str) -> Vec<u8> {
    let out = dir.join(format!("read-{}", bdev.replace('/', "-")));
    dd(exe, config, &["--ib", bdev, "--of", out.to_str().unwrap()]);
    std::fs::read(out).unwrap()
}

/// Writes `data` into lvol `bdev` at 64 KiB unit `seek`.
fn write_lvol(exe: &Path, config: &Path, dir: &Path, bdev: &str, data: &[u8], seek: u64) {
    let inp = dir.join(format!("write-{}", bdev.replace('/', "-")));
    std::fs::write(&inp, data).unwrap();
    let seek = seek.to_string();
    dd(
        exe,
        config,
        &["--if", inp.to_str().unwrap(), "--ob", bdev, "--seek", &seek],
    );
}

/// `v` (an array of objects) sorted by `key`.
fn sorted_by(v: &Value, key: &str) -> Value {
    let mut a = v.as_array().unwrap().clone();
    a.sort_by_key(|x| x[key].as_str().unwrap().to_string());
    Value::Array(a)
}

/// Lvol bdevs of `bdev_get_bdevs`, trimmed as make-spdk-lvstore.sh trims.
fn lvol_bdevs(all: &Value) -> Value {
    let keep = [
        "name",
        "aliases",
        "uuid",
        "block_size",
        "num_blocks",
        "product_name",
        "driver_specific",
    ];
    let out: Vec<Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["product_name"] == "Logical Volume")
        .map(|b| {
            Value::Object(
                keep.iter()
                    .filter_map(|k| b.get(*k).map(|v| ((*k).to_string(), v.clone())))
                    .collect(),
            )
        })
        .collect();
    sorted_by(&Value::Array(out), "name")
}

/// The entry of `lvols` (`bdev_lvol_get_lvols`) named `name`.
fn lvol<'a>(lvols: &'a Value, name: &str) -> &'a Value {
    lvols
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no lvol {name} in {lvols}"))
}

fn gunzip(from: &Path, to: &Path) {
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(from)
        .output()
        .unwrap();
    assert!(out.status.success(), "gzip -dc {}", from.display());
    std::fs::write(to, out.stdout).unwrap();
}

#[test]
fn spdk_made_lvstores_load_with_their_lvols_uuids_and_data() {
    for state in ["clean", "dirty"] {
        let prefix = format!("spdk-v26.05-lvstore-{state}");
        let dir = temp_dir();
        let img = dir.path().join("lvs.img");
        gunzip(&fixture(&format!("{prefix}.img.gz")), &img);
        let cfg = aio_config(dir.path(), &img, 512);
        let mut d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
        let _ = d.ok("bdev_wait_for_examine", None);
        assert_eq!(
            d.ok("bdev_lvol_get_lvstores", None),
            fixture_json(&format!("{prefix}-lvstores.json")),
            "{state}: the store as SPDK lists it"
        );
        assert_eq!(
            sorted_by(&d.ok("bdev_lvol_get_lvols", None), "name"),
            sorted_by(&fixture_json(&format!("{prefix}-lvols.json")), "name"),
            "{state}: the lvols as SPDK lists them"
        );
        assert_eq!(
            lvol_bdevs(&d.ok("bdev_get_bdevs", None)),
            sorted_by(&fixture_json(&format!("{prefix}-bdevs.json")), "name"),
            "{state}: the lvol bdevs as SPDK lists them"
        );
        assert!(d.terminate().success());

        let exe = bin("bdev_dd");
        let thick = read_lvol(&exe, &cfg, dir.path(), "lvs_spdk/thick");
        assert!(thick == pattern("thick", 0, 8192), "{state}: thick's bytes");
        let thin = read_lvol(&exe, &cfg, dir.path(), "lvs_spdk/thin");
        assert_eq!(thin.len(), 8 << 20);
        assert!(
            thin[..2 << 20].iter().all(|&b| b == 0),
            "{state}: thin head"
        );
        assert!(
            thin[2 << 20..4 << 20] == pattern("thin", 4096, 4096)[..],
            "{state}: thin's written MiB 2..4"
        );
        assert!(
            thin[4 << 20..].iter().all(|&b| b == 0),
            "{state}: thin tail"
        );
        let empty = read_lvol(&exe, &cfg, dir.path(), "lvs_spdk/empty");
        assert!(empty.len() == 4 << 20 && empty.iter().all(|&b| b == 0));
        if state == "dirty" {
            let late = read_lvol(&exe, &cfg, dir.path(), "lvs_spdk/late");
            assert_eq!(late.len(), 2 << 20, "the lvol of the dirty store");
        }
    }
}

#[test]
fn lvstores_cross_between_bdev_tgt_and_spdk_tgt() {
    let (Some(tgt), Some(spdk_dd)) = (program("bin/spdk_tgt"), program("bin/spdk_dd")) else {
        eprintln!(
            "SKIPPED lvstores_cross_between_bdev_tgt_and_spdk_tgt: reference SPDK build not \
             found (SPDK_REF_DIR or ~/.cache/bdevkit-ref-spdk/build/bin/spdk_tgt, spdk_dd)"
        );
        return;
    };
    let dir = temp_dir();
    let img = dir.path().join("lvs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let cfg = aio_config(dir.path(), &img, 4096);

    // Made by bdev_tgt: a thick and a thin lvol on 2 MiB clusters.
    let mut d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok(
        "bdev_lvol_create_lvstore",
        Some(json!({"bdev_name": "aio0", "lvs_name": "lvs_b", "cluster_sz": 2 << 20})),
    );
    for (name, mib, thin) in [("thick", 6, false), ("thin", 20, true)] {
        let _ = d.ok(
            "bdev_lvol_create",
            Some(
                json!({"lvs_name": "lvs_b", "lvol_name": name, "size_in_mib": mib,
                        "thin_provision": thin}),
            ),
        );
    }
    assert!(d.terminate().success());
    // Written by bdev_dd: thick whole, thin MiB 1..4 (two clusters).
    let ours = bin("bdev_dd");
    write_lvol(
        &ours,
        &cfg,
        dir.path(),
        "lvs_b/thick",
        &pattern("thick", 0, 12288),
        0,
    );
    let thin_a = pattern("thin", 2048, 6144);
    write_lvol(&ours, &cfg, dir.path(), "lvs_b/thin", &thin_a, 16);
    // One more lvol, then SIGKILL: the store is left dirty.
    let d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok("bdev_wait_for_examine", None);
    let _ = d.ok(
        "bdev_lvol_create",
        Some(json!({"lvs_name": "lvs_b", "lvol_name": "late", "size_in_mib": 2})),
    );
    let (lvstores, lvols) = (
        d.ok("bdev_lvol_get_lvstores", None),
        sorted_by(&d.ok("bdev_lvol_get_lvols", None), "name"),
    );
    let bdevs = lvol_bdevs(&d.ok("bdev_get_bdevs", None));
    drop(d);
    assert_eq!(
        lvol(&lvols, "thin")["num_allocated_clusters"],
        2,
        "MiB 1..4"
    );

    // Loaded by SPDK (recovering the dirty store): the same store, lvols
    // and bdevs.
    let s = Spdk::start(&tgt, dir.path(), "spdk", &cfg);
    let _ = s.ok("bdev_wait_for_examine", None);
    assert_eq!(
        s.ok("bdev_lvol_get_lvstores", None),
        lvstores,
        "SPDK's lvstores"
    );
    assert_eq!(
        sorted_by(&s.ok("bdev_lvol_get_lvols", None), "name"),
        lvols,
        "SPDK's lvols"
    );
    assert_eq!(
        lvol_bdevs(&s.ok("bdev_get_bdevs", None)),
        bdevs,
        "SPDK's bdevs"
    );
    s.stop();
    let thick = read_lvol(&spdk_dd, &cfg, dir.path(), "lvs_b/thick");
    assert!(thick == pattern("thick", 0, 12288), "thick read by SPDK");
    let thin = read_lvol(&spdk_dd, &cfg, dir.path(), "lvs_b/thin");
    assert!(thin[1 << 20..4 << 20] == thin_a[..], "thin read by SPDK");
    assert!(thin[..1 << 20]
        .iter()
        .chain(&thin[4 << 20..])
        .all(|&b| b == 0));

    // Written by SPDK: MiB 10..12 of thin (a cluster SPDK allocates).
    let thin_b = pattern("spdk", 20480, 4096);
    write_lvol(&spdk_dd, &cfg, dir.path(), "lvs_b/thin", &thin_b, 160);
    let thin = read_lvol(&ours, &cfg, dir.path(), "lvs_b/thin");
    assert!(thin[1 << 20..4 << 20] == thin_a[..], "ours, read back");
    assert!(thin[10 << 20..12 << 20] == thin_b[..], "SPDK's, read by us");
    assert!(thin[4 << 20..10 << 20].iter().all(|&b| b == 0));
    let d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok("bdev_wait_for_examine", None);
    let lvols = sorted_by(&d.ok("bdev_lvol_get_lvols", None), "name");
    assert_eq!(
        lvol(&lvols, "thin")["num_allocated_clusters"],
        3,
        "thin: SPDK's cluster too"
    );
}

/// A snapshot and a clone bdev_tgt makes, written around by bdev_dd
/// (copy-on-write in the clone, a new cluster in the volume after its
/// snapshot), load in `spdk_tgt` with the same lineage
/// (`bdev_lvol_get_lvols`, `driver_specific.lvol`) and read back the same
/// bytes through spdk_dd.
#[test]
fn a_lineage_bdev_tgt_makes_loads_in_spdk_tgt() {
    let (Some(tgt), Some(spdk_dd)) = (program("bin/spdk_tgt"), program("bin/spdk_dd")) else {
        eprintln!(
            "SKIPPED a_lineage_bdev_tgt_makes_loads_in_spdk_tgt: reference SPDK build not found"
        );
        return;
    };
    let dir = temp_dir();
    let img = dir.path().join("lineage.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let cfg = aio_config(dir.path(), &img, 4096);
    let ours = bin("bdev_dd");
    let mut d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok(
        "bdev_lvol_create_lvstore",
        Some(json!({"bdev_name": "aio0", "lvs_name": "lvs_l", "cluster_sz": 2 << 20})),
    );
    let _ = d.ok(
        "bdev_lvol_create",
        Some(json!({"lvs_name": "lvs_l", "lvol_name": "vol", "size_in_mib": 8})),
    );
    assert!(d.terminate().success());
    // The volume written whole, then snapshotted and cloned.
    let original = pattern("vol", 0, 16384);
    write_lvol(&ours, &cfg, dir.path(), "lvs_l/vol", &original, 0);
    let mut d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok("bdev_wait_for_examine", None);
    let _ = d.ok(
        "bdev_lvol_snapshot",
        Some(json!({"lvol_name": "lvs_l/vol", "snapshot_name": "snap"})),
    );
    let _ = d.ok(
        "bdev_lvol_clone",
        Some(json!({"snapshot_name": "lvs_l/snap", "clone_name": "cl"})),
    );
    assert!(d.terminate().success());
    // MiB 2..4 of the clone (a copy-on-write of its cluster 1) and MiB
    // 6..8 of the volume (now a clone of the snapshot too).
    let cl_part = pattern("cl", 4096, 4096);
    write_lvol(&ours, &cfg, dir.path(), "lvs_l/cl", &cl_part, 32);
    let vol_part = pattern("vol2", 12288, 4096);
    write_lvol(&ours, &cfg, dir.path(), "lvs_l/vol", &vol_part, 96);
    let mut d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok("bdev_wait_for_examine", None);
    let lvols = sorted_by(&d.ok("bdev_lvol_get_lvols", None), "name");
    let bdevs = lvol_bdevs(&d.ok("bdev_get_bdevs", None));
    assert!(d.terminate().success());
    assert_eq!(lvol(&lvols, "snap")["is_snapshot"], true, "{lvols}");
    assert_eq!(lvol(&lvols, "cl")["is_clone"], true, "{lvols}");
    assert_eq!(lvol(&lvols, "vol")["is_clone"], true, "{lvols}");
    assert_eq!(lvol(&lvols, "cl")["num_allocated_clusters"], 1, "{lvols}");

    let s = Spdk::start(&tgt, dir.path(), "spdk", &cfg);
    let _ = s.ok("bdev_wait_for_examine", None);
    assert_eq!(
        sorted_by(&s.ok("bdev_lvol_get_lvols", None), "name"),
        lvols,
        "SPDK's lvols"
    );
    assert_eq!(
        lvol_bdevs(&s.ok("bdev_get_bdevs", None)),
        bdevs,
        "SPDK's bdevs"
    );
    s.stop();
    let expect = |part: &[u8], at: usize| {
        let mut v = original.clone();
        v[at..at + part.len()].copy_from_slice(part);
        v
    };
    let snap = read_lvol(&spdk_dd, &cfg, dir.path(), "lvs_l/snap");
    assert!(snap == original, "the snapshot, read by SPDK");
    let cl = read_lvol(&spdk_dd, &cfg, dir.path(), "lvs_l/cl");
    assert!(cl == expect(&cl_part, 2 << 20), "the clone, read by SPDK");
    let vol = read_lvol(&spdk_dd, &cfg, dir.path(), "lvs_l/vol");
    assert!(
        vol == expect(&vol_part, 6 << 20),
        "the volume, read by SPDK"
    );
}

/// An external-snapshot tree made by bdev_tgt (`bdev_lvol_clone_bdev` of
/// an aio bdev with a fixed UUID, written, snapshotted, written again)
/// loads in spdk_tgt with the same lvols and bdevs, and SPDK reads the same
/// bytes through the clone and its snapshot (the external bdev under both).
#[test]
fn an_esnap_tree_bdev_tgt_makes_loads_in_spdk_tgt() {
    let (Some(tgt), Some(spdk_dd)) = (program("bin/spdk_tgt"), program("bin/spdk_dd")) else {
        eprintln!(
            "SKIPPED an_esnap_tree_bdev_tgt_makes_loads_in_spdk_tgt: reference SPDK build not found"
        );
        return;
    };
    let dir = temp_dir();
    let img = dir.path().join("esnap.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let ext_img = dir.path().join("ext.img");
    let ext = pattern("ext", 0, 8192);
    std::fs::write(&ext_img, &ext).unwrap();
    let ext_uuid = "3b0c8d2e-5a41-4f6e-8c7d-9e0f1a2b3c4d";
    let cfg = dir.path().join("esnap.json");
    let config = json!({"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_aio_create",
         "params": {"name": "ext", "filename": ext_img, "block_size": 4096, "uuid": ext_uuid}},
        {"method": "bdev_aio_create",
         "params": {"name": "aio0", "filename": img, "block_size": 4096}},
        {"method": "bdev_wait_for_examine"}
    ]}]});
    std::fs::write(&cfg, config.to_string()).unwrap();
    let ours = bin("bdev_dd");
    let mut d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok(
        "bdev_lvol_create_lvstore",
        Some(json!({"bdev_name": "aio0", "lvs_name": "lvs_e", "cluster_sz": 1 << 20})),
    );
    let _ = d.ok(
        "bdev_lvol_clone_bdev",
        Some(json!({"bdev": "ext", "lvs_name": "lvs_e", "clone_name": "ec"})),
    );
    assert!(d.terminate().success());
    // MiB 1 of the clone (a copy-on-write from the bdev), then a snapshot,
    // then MiB 3.
    let part1 = pattern("ec", 2048, 2048);
    write_lvol(&ours, &cfg, dir.path(), "lvs_e/ec", &part1, 16);
    let mut d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok("bdev_wait_for_examine", None);
    let _ = d.ok(
        "bdev_lvol_snapshot",
        Some(json!({"lvol_name": "lvs_e/ec", "snapshot_name": "es"})),
    );
    assert!(d.terminate().success());
    let part3 = pattern("ec3", 6144, 2048);
    write_lvol(&ours, &cfg, dir.path(), "lvs_e/ec", &part3, 48);
    let mut d = Daemon::start(&["--json", cfg.to_str().unwrap()]);
    let _ = d.ok("bdev_wait_for_examine", None);
    let lvols = sorted_by(&d.ok("bdev_lvol_get_lvols", None), "name");
    let bdevs = lvol_bdevs(&d.ok("bdev_get_bdevs", None));
    assert!(d.terminate().success());
    assert_eq!(lvol(&lvols, "es")["is_esnap_clone"], true, "{lvols}");
    assert_eq!(lvol(&lvols, "es")["is_snapshot"], true, "{lvols}");
    assert_eq!(lvol(&lvols, "ec")["is_clone"], true, "{lvols}");
    assert_eq!(lvol(&lvols, "ec")["is_degraded"], false, "{lvols}");

    let s = Spdk::start(&tgt, dir.path(), "spdk", &cfg);
    let _ = s.ok("bdev_wait_for_examine", None);
    assert_eq!(
        sorted_by(&s.ok("bdev_lvol_get_lvols", None), "name"),
        lvols,
        "SPDK's lvols"
    );
    assert_eq!(
        lvol_bdevs(&s.ok("bdev_get_bdevs", None)),
        bdevs,
        "SPDK's bdevs"
    );
    s.stop();
    let with = |parts: &[(&[u8], usize)]| {
        let mut v = ext.clone();
        for (p, at) in parts {
            v[*at..*at + p.len()].copy_from_slice(p);
        }
        v
    };
    let es = read_lvol(&spdk_dd, &cfg, dir.path(), "lvs_e/es");
    assert!(
        es == with(&[(&part1, 1 << 20)]),
        "the snapshot, read by SPDK"
    );
    let ec = read_lvol(&spdk_dd, &cfg, dir.path(), "lvs_e/ec");
    assert!(
        ec == with(&[(&part1, 1 << 20), (&part3, 3 << 20)]),
        "the clone, read by SPDK"
    );
}

/// Whether `s` is a UUID in its hyphenated form.
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

/// RPCs (spdk-rpc arguments) and whether their answer is a fresh UUID
/// (compared by shape only).
const CALLS: &[(&str, bool)] = &[
    ("bdev_lvol_create_lvstore m0 lvs0", true),
    ("bdev_lvol_create_lvstore m1 lvs0", false),
    ("bdev_lvol_create_lvstore m0 lvs1", false),
    ("bdev_lvol_create_lvstore nope lvs2", false),
    ("bdev_lvol_create_lvstore -c 1000 m1 lvs3", false),
    (
        "bdev_lvol_create_lvstore --clear-method bogus m1 lvs4",
        false,
    ),
    ("bdev_lvol_create -l lvs0 a 8", true),
    ("bdev_lvol_create -l lvs0 a 8", false),
    ("bdev_lvol_create -l lvs0 big 1000", false),
    ("bdev_lvol_create -l nolvs a 8", false),
    ("bdev_lvol_create -l lvs0 -c bogus c 8", false),
    ("bdev_lvol_create -l lvs0 -t thin 1000", true),
    ("bdev_lvol_clone_bdev m1 nolvs x", false),
    ("bdev_lvol_clone_bdev nope lvs0 x", false),
    ("bdev_lvol_clone_bdev lvs0/a lvs0 x", false),
    ("bdev_lvol_clone_bdev m1 lvs0 a", false),
    ("bdev_lvol_clone_bdev m1 lvs0 ec", true),
    ("bdev_lvol_set_parent_bdev lvs0/zz m1", false),
    ("bdev_lvol_set_parent_bdev lvs0/thin nope", false),
    ("bdev_lvol_set_parent_bdev lvs0/a m1", false),
    ("bdev_lvol_set_parent_bdev lvs0/thin m1", false),
    ("bdev_lvol_set_parent_bdev lvs0/thin m1", false),
    ("bdev_lvol_resize lvs0/a 4", false),
    ("bdev_lvol_resize lvs0/a 100000", false),
    ("bdev_lvol_resize lvs0/zz 4", false),
    ("bdev_lvol_rename lvs0/a thin", false),
    ("bdev_lvol_rename lvs0/a b", false),
    ("bdev_lvol_rename_lvstore lvs0 lvs0", false),
    ("bdev_lvol_rename_lvstore nolvs x", false),
    ("bdev_lvol_set_read_only lvs0/b", false),
    ("bdev_lvol_delete lvs0/zz", false),
    ("bdev_lvol_delete_lvstore -l nolvs", false),
    ("bdev_lvol_delete_lvstore", false),
    ("bdev_lvol_get_lvstores -l nolvs", false),
    ("bdev_lvol_get_lvols -l nolvs", false),
    ("bdev_lvol_grow_lvstore -l lvs0", false),
    ("bdev_lvol_delete lvs0/thin", false),
    ("bdev_lvol_delete_lvstore -l lvs0", false),
    ("bdev_lvol_get_lvstores", false),
];

#[test]
fn lvol_rpcs_answer_as_spdk_tgt_does() {
    let Some(tgt) = program("bin/spdk_tgt") else {
        eprintln!(
            "SKIPPED lvol_rpcs_answer_as_spdk_tgt_does: reference SPDK build not found \
             (SPDK_REF_DIR or ~/.cache/bdevkit-ref-spdk/build/bin/spdk_tgt)"
        );
        return;
    };
    let Some(client) = spdk_rpc() else { return };
    let dir = temp_dir();
    let cfg = json!({"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_malloc_create",
         "params": {"name": "m0", "num_blocks": 131072, "block_size": 512}},
        {"method": "bdev_malloc_create",
         "params": {"name": "m1", "num_blocks": 131072, "block_size": 512}}
    ]}]});
    let cfg_path = dir.path().join("malloc.json");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let s = Spdk::start(&tgt, dir.path(), "spdk", &cfg_path);
    let d = Daemon::start(&["--json", cfg_path.to_str().unwrap()]);
    let ask = |socket: &Path, call: &str| -> String {
        let mut args = vec!["-s", socket.to_str().unwrap()];
        args.extend(call.split(' '));
        let o = run(&client, &args, None);
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    for &(call, fresh_uuid) in CALLS {
        let theirs = ask(s.socket(), call);
        let ours = ask(&d.socket, call);
        if fresh_uuid {
            for a in [&theirs, &ours] {
                assert!(is_uuid(a.trim()), "{call}: {a}");
            }
        } else {
            assert_eq!(ours, theirs, "{call}");
        }
    }
}
