//! The raid superblock end to end, on aio bdevs over files:
//!
//! * arrays SPDK v26.05 made with `bdev_raid_create -s` (fixtures from
//!   `fixtures/raid-sb/make.sh`, a raid1 and a raid0) assemble in bdevkit
//!   by examine alone and read back SPDK's data;
//! * `kill -9` of `bdev_tgt` in the middle of a rebuild: restarted with no
//!   raid config, the array reassembles, the rebuild runs again and the
//!   members end byte-identical;
//! * with the reference SPDK build present, an array bdevkit made
//!   assembles in SPDK's `spdk_dd` and reads back (skipped, loudly, when
//!   it is not built).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bdevkit_test::daemon::{bin, run, temp_dir, Daemon};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// The fixtures' pattern (`fixtures/raid-sb/pattern.py`).
fn pattern(level: &str, blocks: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(usize::try_from(blocks * 512).unwrap());
    for n in 0..blocks {
        let line = format!("{level}-block-{n:08}|");
        let block: Vec<u8> = line.bytes().cycle().take(512).collect();
        out.extend_from_slice(&block);
    }
    out
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/fixtures/raid-sb")
        .join(name)
}

fn gunzip(from: &Path, to: &Path) {
    let out = Command::new("gzip").arg("-dc").arg(from).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", from.display());
    std::fs::write(to, out.stdout).unwrap();
}

fn member_uuid(i: usize) -> String {
    format!("b0de0000-0000-0000-0000-00000000000{i}")
}

fn aio_entry(name: &str, file: &Path, i: usize) -> Value {
    json!({"method": "bdev_aio_create", "params": {"name": name,
        "filename": file.to_str().unwrap(), "block_size": 512, "uuid": member_uuid(i)}})
}

fn config(dir: &Path, name: &str, entries: Vec<Value>) -> PathBuf {
    let mut entries = entries;
    entries.push(json!({"method": "bdev_wait_for_examine"}));
    let cfg = json!({"subsystems": [{"subsystem": "bdev", "config": entries}]});
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    p
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Reads `bdev` whole into `out` with bdev_dd over config `cfg`.
fn dd_read(cfg: &Path, bdev: &str, out: &Path, count_64k: u64) {
    let o = run(
        &bin("bdev_dd"),
        &[
            "--interrupt-mode",
            "--json",
            cfg.to_str().unwrap(),
            "--ib",
            bdev,
            "--of",
            out.to_str().unwrap(),
            "--bs",
            "65536",
            "--count",
            &count_64k.to_string(),
        ],
        None,
    );
    assert!(o.status.success(), "bdev_dd --ib {bdev}: {}", text(&o));
}

#[test]
fn arrays_spdk_made_with_a_superblock_assemble_and_read_back() {
    let d = temp_dir();
    for (level, blocks) in [("raid1", 6144u64), ("raid0", 12288)] {
        let m: Vec<PathBuf> = (0..2)
            .map(|i| {
                let p = d.path().join(format!("{level}-m{i}"));
                gunzip(&fixture(&format!("{level}-m{i}.img.gz")), &p);
                p
            })
            .collect();
        // Members in reverse order: examine does not care.
        let cfg = config(
            d.path(),
            &format!("{level}.json"),
            vec![aio_entry("A1", &m[1], 1), aio_entry("A0", &m[0], 0)],
        );
        let out = d.path().join(format!("{level}.out"));
        dd_read(&cfg, &format!("spdk_{level}"), &out, blocks * 512 / 65536);
        assert!(
            std::fs::read(&out).unwrap() == pattern(level, blocks),
            "{level}: SPDK's data does not read back"
        );
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn raid_info(tgt: &Daemon) -> Option<Value> {
    let v = tgt.ok("bdev_raid_get_bdevs", Some(json!({"category": "all"})));
    v.as_array().and_then(|a| a.first().cloned())
}

fn aio_rpc(tgt: &Daemon, name: &str, file: &Path, i: usize) {
    let e = aio_entry(name, file, i);
    let _ = tgt.ok("bdev_aio_create", Some(e["params"].clone()));
}

/// `n` member files of `size` bytes in `dir`.
fn member_files(dir: &Path, n: usize, size: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("m{i}"));
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            p
        })
        .collect()
}

/// Creates raid1 `name` with a superblock over aio bdevs `A0`, `A1` on
/// `files[0..2]` and writes `blocks` blocks of `pattern(label, ..)` into
/// it, with bdev_dd (which exits, cleanly, when done).
fn make_array(dir: &Path, files: &[PathBuf], name: &str, label: &str, blocks: u64) {
    let data = dir.join("data.bin");
    std::fs::write(&data, pattern(label, blocks)).unwrap();
    let create = json!({"method": "bdev_raid_create", "params": {"name": name,
        "raid_level": "raid1", "base_bdevs": ["A0", "A1"], "superblock": true}});
    let cfg = config(
        dir,
        "make.json",
        vec![
            aio_entry("A0", &files[0], 0),
            aio_entry("A1", &files[1], 1),
            create,
        ],
    );
    let o = run(
        &bin("bdev_dd"),
        &[
            "--interrupt-mode",
            "--json",
            cfg.to_str().unwrap(),
            "--if",
            data.to_str().unwrap(),
            "--ob",
            name,
            "--bs",
            "65536",
        ],
        None,
    );
    assert!(o.status.success(), "bdev_dd writing {name}: {}", text(&o));
}

#[test]
fn kill_9_mid_rebuild_reassembles_and_finishes_with_identical_members() {
    let d = temp_dir();
    let files = member_files(d.path(), 3, 8 * MIB);
    // 7 MiB of data (8 MiB members, 1 MiB superblock area).
    let blocks = 7 * MIB / 512;
    make_array(d.path(), &files, "r1", "kill9", blocks);

    // bdev_tgt finds the array by examine; A1 out, A2 in, rebuilt slowly.
    let mut tgt = Daemon::start(&["-m", "0x1"]);
    for (i, f) in files.iter().enumerate() {
        aio_rpc(&tgt, &format!("A{i}"), f, i);
    }
    let _ = tgt.ok("bdev_wait_for_examine", None);
    let info = raid_info(&tgt).expect("the array assembled");
    assert_eq!(info["state"], "online", "{info}");
    assert_eq!(info["superblock"], true);
    let _ = tgt.ok("bdev_raid_remove_base_bdev", Some(json!({"name": "A1"})));
    let _ = tgt.ok(
        "bdev_raid_set_options",
        Some(json!({"process_window_size_kb": 64, "process_max_bandwidth_mb_sec": 1})),
    );
    let _ = tgt.ok(
        "bdev_raid_add_base_bdev",
        Some(json!({"raid_bdev": "r1", "base_bdev": "A2"})),
    );
    wait_until("the rebuild under way", || {
        raid_info(&tgt)
            .and_then(|i| i["process"]["progress"]["blocks"].as_u64())
            .is_some_and(|b| b > 0)
    });
    tgt.signal("KILL");
    tgt.wait_exit();
    assert!(
        std::fs::read(&files[2]).unwrap() != std::fs::read(&files[0]).unwrap(),
        "the rebuild was cut short"
    );

    // Restart with no raid config: the target first, then the source.
    let mut tgt = Daemon::start(&["-m", "0x1"]);
    aio_rpc(&tgt, "A2", &files[2], 2);
    aio_rpc(&tgt, "A0", &files[0], 0);
    let _ = tgt.ok("bdev_wait_for_examine", None);
    wait_until("the rebuild to finish", || {
        raid_info(&tgt).is_some_and(|i| {
            i["state"] == "online"
                && i.get("process").is_none()
                && i["num_base_bdevs_operational"] == 2
        })
    });
    tgt.terminate();
    let a0 = std::fs::read(&files[0]).unwrap();
    assert!(
        a0 == std::fs::read(&files[2]).unwrap(),
        "members differ after the rebuild"
    );
    let start = usize::try_from(MIB).unwrap();
    assert!(
        a0[start..] == pattern("kill9", blocks)[..],
        "the data survived"
    );
}

/// Where the reference SPDK build keeps `spdk_dd`, if it is built.
fn spdk_dd() -> Option<PathBuf> {
    let root = std::env::var_os("SPDK_REF_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/bdevkit-ref-spdk"))
        })?;
    let p = root.join("build/bin/spdk_dd");
    p.is_file().then_some(p)
}

#[test]
fn arrays_bdevkit_made_assemble_in_spdk() {
    let Some(spdk_dd) = spdk_dd() else {
        eprintln!(
            "SKIPPED arrays_bdevkit_made_assemble_in_spdk: the reference SPDK build \
             (../shared/ref-spdk/build.sh) is not here"
        );
        return;
    };
    let d = temp_dir();
    let files = member_files(d.path(), 2, 4 * MIB);
    let blocks = 3 * MIB / 512;
    make_array(d.path(), &files, "ours", "bdevkit", blocks);
    // SPDK assembles it from the members alone.
    let cfg = config(
        d.path(),
        "spdk.json",
        vec![aio_entry("A1", &files[1], 1), aio_entry("A0", &files[0], 0)],
    );
    let out = d.path().join("spdk.out");
    let o = run(
        &spdk_dd,
        &[
            "--no-huge",
            "-s",
            "512",
            // Other tests run SPDK programs at the same time, on core 0 too:
            // without this the second one to start exits (core 0's lock).
            "--disable-cpumask-locks",
            "--json",
            cfg.to_str().unwrap(),
            "--ib",
            "ours",
            "--of",
            out.to_str().unwrap(),
            "--bs",
            "65536",
        ],
        None,
    );
    assert!(o.status.success(), "spdk_dd: {}", text(&o));
    assert!(
        std::fs::read(&out).unwrap() == pattern("bdevkit", blocks),
        "SPDK does not read back what bdevkit wrote"
    );
}
