//! Verify never reports a miscompare that the storage did not make: not
//! with a queue deeper than the job's slots, and not while one I/O is
//! held back for a long time and the other tasks wrap around the slots.

#[cfg(test)]
#[allow(dead_code, reason = "each test crate uses part of the helpers")]
mod common;

#[cfg(test)]
mod tests {
    use std::process::Output;
    use std::time::{Duration, Instant};

    use serde_json::json;

    use crate::common::ZServer;

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    fn assert_clean(o: &Output) {
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert!(
            o.status.success() && !err.contains("miscompare"),
            "verify failed ({:?})\nstdout:\n{out}\nstderr:\n{err}",
            o.status
        );
    }

    /// A malloc bdev `Malloc0` of `blocks` 4 KiB blocks.
    fn malloc(blocks: u64) -> String {
        format!(
            r#"{{"method":"bdev_malloc_create","params":{{"name":"Malloc0","num_blocks":{blocks},"block_size":4096}}}}"#
        )
    }

    fn run_on(name: &str, entries: &str, args: &[&str]) -> Output {
        let dir = std::env::temp_dir().join(format!("bdevperf-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("conf.json");
        std::fs::write(
            &cfg,
            format!(r#"{{"subsystems":[{{"subsystem":"bdev","config":[{entries}]}}]}}"#),
        )
        .unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_bdevperf"))
            .arg("-c")
            .arg(&cfg)
            .args(args)
            .arg("--interrupt-mode")
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        o
    }

    /// A queue one deeper than the 16 slots of the bdev (the second I/O
    /// on a slot overwrote the first before it was read back), and three
    /// I/Os on two slots (as `-q 3 -o 128m` on the default 256 MiB bdev):
    /// the depth is lowered to the slot count with a warning, and verify
    /// is clean.
    #[test]
    fn queue_deeper_than_the_slots_is_lowered() {
        for (blocks, io, q, slots) in [(16, "4096", "17", 16), (8, "16k", "3", 2)] {
            let o = run_on(
                "qslots",
                &malloc(blocks),
                &["-q", q, "-o", io, "-w", "verify", "-t", "2"],
            );
            assert_clean(&o);
            let (out, err) = (text(&o.stdout), text(&o.stderr));
            assert!(
                out.contains(&format!("workload: verify, depth: {slots}, IO size:")),
                "{out}"
            );
            assert!(
                err.contains(&format!(
                    "queue depth (-q) {q} is above the {slots} I/Os of"
                )),
                "{err}"
            );
        }
    }

    /// An error bdev holds the job's first read-back while the other
    /// tasks go round the 16 slots several times; once it is released,
    /// the read must still find what its task wrote: the others skipped
    /// the slot it owned.
    #[test]
    fn held_read_back_is_not_overwritten() {
        let entries = format!(
            r#"{},{{"method":"bdev_error_create","params":{{"base_name":"Malloc0"}}}}"#,
            malloc(16)
        );
        let z = ZServer::start("held", &entries, &[]);
        let mut c = z.client();
        c.call(
            "bdev_error_inject_error",
            Some(
                json!({"name": "EE_Malloc0", "io_type": "read", "error_type": "pending", "num": 1}),
            ),
        )
        .unwrap();
        let mut runner = z.client();
        let run = std::thread::spawn(move || {
            runner.call(
                "perform_tests",
                Some(json!({"time_in_sec": 3, "queue_depth": 4, "workload_type": "verify", "io_size": "4096"})),
            )
        });
        // The first read-back is held from the first write on: once the
        // base saw four rounds of writes, the others have wrapped around
        // its slot.
        let start = Instant::now();
        loop {
            let st = c
                .call("bdev_get_iostat", Some(json!({"name": "Malloc0"})))
                .unwrap();
            if st["bdevs"][0]["num_write_ops"].as_u64().unwrap() >= 64 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30) && !run.is_finished(),
                "the job did not get going: {st}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        c.call(
            "bdev_error_resume_pending",
            Some(json!({"name": "EE_Malloc0"})),
        )
        .unwrap();
        let r = run.join().unwrap().unwrap();
        let res = &r["results"][0];
        assert_eq!(res["job"], "EE_Malloc0", "{r}");
        assert_eq!(res["io_failed"], 0, "{r}");
        assert_eq!(res["status"], "finished", "{r}");
        assert_clean(&z.kill_output());
    }

    /// Issue 25: `-w verify` on a clone from two cores while snapshots of
    /// it are taken, one after another: each snapshot freezes the clone's
    /// writes, drains those in flight and turns the clone into a clone of
    /// the new snapshot, whose first writes then copy their clusters; no
    /// read-back may find other data than its write put there.
    #[test]
    fn verify_on_a_clone_while_its_snapshot_is_taken_again() {
        // 256 MiB: room for the volume's 16 clusters in each of the four
        // snapshots and in the clone.
        let entries = [
            malloc(65536),
            r#"{"method":"bdev_lvol_create_lvstore","params":{"bdev_name":"Malloc0","lvs_name":"lvs","cluster_sz":1048576}}"#.to_string(),
            r#"{"method":"bdev_lvol_create","params":{"lvs_name":"lvs","lvol_name":"lv","size_in_mib":16}}"#.to_string(),
            r#"{"method":"bdev_lvol_snapshot","params":{"lvol_name":"lvs/lv","snapshot_name":"snap0"}}"#.to_string(),
            r#"{"method":"bdev_lvol_clone","params":{"snapshot_name":"lvs/snap0","clone_name":"cl"}}"#.to_string(),
        ]
        .join(",");
        let z = ZServer::start(
            "snapverify",
            &entries,
            &[
                "-m", "0x3", "-C", "-T", "lvs/cl", "-q", "16", "-o", "4096", "-w", "verify", "-t",
                "15",
            ],
        );
        let mut c = z.client();
        let mut runner = z.client();
        let run = std::thread::spawn(move || runner.call("perform_tests", None));
        let writes = |c: &mut bdevkit_jsonrpc::Client| {
            let st = c
                .call("bdev_get_iostat", Some(json!({"name": "lvs/cl"})))
                .unwrap();
            st["bdevs"][0]["num_write_ops"].as_u64().unwrap()
        };
        // A snapshot each time the clone took another 300 writes (events,
        // not time: 900 writes in the 15 s run is 60 writes a second,
        // orders of magnitude below what a loaded machine does).
        for n in 1..=3 {
            let start = Instant::now();
            let from = writes(&mut c);
            while writes(&mut c) < from + 300 {
                assert!(
                    start.elapsed() < Duration::from_secs(30) && !run.is_finished(),
                    "the job did not get going"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            c.call(
                "bdev_lvol_snapshot",
                Some(json!({"lvol_name": "lvs/cl", "snapshot_name": format!("s{n}")})),
            )
            .unwrap();
        }
        let r = run.join().unwrap().unwrap();
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "a job per core: {r}");
        for res in results {
            assert_eq!(res["io_failed"], 0, "{r}");
            assert_eq!(res["status"], "finished", "{r}");
        }
        let lvols = c.call("bdev_lvol_get_lvols", None).unwrap();
        let names: Vec<&str> = lvols
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert!(
            ["s1", "s2", "s3"].iter().all(|s| names.contains(s)),
            "{lvols}"
        );
        assert_clean(&z.kill_output());
    }

    /// Issue 17, bug 1: a pool smaller than the queue needs (128 I/Os, 32
    /// cached per thread) under a raid1, whose writes take two children
    /// each: submissions wait for free I/Os (io_wait) instead of panicking
    /// the reactor, and verify is clean.
    #[test]
    fn a_tiny_io_pool_under_raid1_verify_waits_instead_of_panicking() {
        let entries = [
            r#"{"method":"bdev_set_options","params":{"bdev_io_pool_size":128,"bdev_io_cache_size":32}}"#.to_string(),
            r#"{"method":"bdev_malloc_create","params":{"name":"M0","num_blocks":4096,"block_size":4096}}"#.to_string(),
            r#"{"method":"bdev_malloc_create","params":{"name":"M1","num_blocks":4096,"block_size":4096}}"#.to_string(),
            r#"{"method":"bdev_raid_create","params":{"name":"R1","raid_level":"raid1","strip_size_kb":0,"base_bdevs":["M0","M1"]}}"#.to_string(),
        ]
        .join(",");
        let o = run_on(
            "tinypool",
            &entries,
            &["-q", "64", "-o", "4096", "-w", "verify", "-t", "2"],
        );
        assert_clean(&o);
        assert!(text(&o.stdout).contains("R1"), "{}", text(&o.stdout));
    }

    /// The same with the default pool and a queue deeper than it.
    #[test]
    fn a_queue_deeper_than_the_pool_waits_instead_of_panicking() {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_bdevperf"))
            .args([
                "-q",
                "65536",
                "-o",
                "4096",
                "-w",
                "randread",
                "-t",
                "1",
                "--interrupt-mode",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    }
}
