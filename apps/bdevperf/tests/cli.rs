//! End-to-end tests of the bdevperf binary.

#[cfg(test)]
mod common;

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::{Command, Output};

    fn bin() -> Command {
        Command::new(env!("CARGO_BIN_EXE_bdevperf"))
    }

    fn tmp(name: &str, content: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bdevperf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    fn config(entries: &str) -> String {
        format!(r#"{{"subsystems":[{{"subsystem":"bdev","config":[{entries}]}}]}}"#)
    }

    const NULL0: &str = r#"{"method":"bdev_null_create","params":{"name":"Null0","num_blocks":65536,"block_size":4096}}"#;
    const MALLOC0: &str = r#"{"method":"bdev_malloc_create","params":{"name":"Malloc0","num_blocks":16384,"block_size":4096}}"#;

    fn run(args: &[&str]) -> Output {
        bin().args(args).arg("--interrupt-mode").output().unwrap()
    }

    fn stdout(o: &Output) -> String {
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn stderr(o: &Output) -> String {
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// IOPS of the Total line.
    fn total_iops(out: &str) -> f64 {
        let line = out
            .lines()
            .find(|l| l.trim_start_matches('\r').trim_start().starts_with("Total"))
            .unwrap_or_else(|| panic!("no Total line in:\n{out}"));
        line.split(':')
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    fn ok(o: &Output) {
        assert!(
            o.status.success(),
            "bdevperf failed ({:?})\nstdout:\n{}\nstderr:\n{}",
            o.status,
            stdout(o),
            stderr(o)
        );
    }

    #[test]
    fn workloads_on_null_and_malloc() {
        let cfg = tmp("both.json", &config(&format!("{NULL0},{MALLOC0}")));
        let cfg = cfg.to_str().unwrap();
        for w in ["randread", "randwrite", "verify"] {
            let o = run(&["-c", cfg, "-q", "16", "-o", "4096", "-w", w, "-t", "1"]);
            ok(&o);
            let out = stdout(&o);
            assert!(
                out.contains(&format!(
                    "Job: Null0 (Core Mask 0x1, workload: {w}, depth: 16, IO size: 4096)"
                )),
                "{out}"
            );
            assert!(
                out.contains(&format!(
                    "Job: Malloc0 (Core Mask 0x1, workload: {w}, depth: 16, IO size: 4096)"
                )),
                "{out}"
            );
            assert!(total_iops(&out) > 0.0);
            if w == "verify" {
                assert!(
                    out.contains("\t Verification LBA range: start 0x0 length 0x"),
                    "{out}"
                );
            }
        }
    }

    #[test]
    fn table_layout_matches_spdk() {
        let cfg = tmp("null.json", &config(NULL0));
        let o = run(&[
            "-c",
            cfg.to_str().unwrap(),
            "-q",
            "8",
            "-o",
            "4k",
            "-w",
            "randread",
            "-t",
            "1",
        ]);
        ok(&o);
        let out = stdout(&o);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "Running I/O for 1 seconds...");
        assert!(
            out.contains(&format!("\n{}Latency(us)\n", " ".repeat(96))),
            "{out}"
        );
        assert!(out.contains(
            "\r Device Information          : runtime(s)       IOPS      MiB/s     Fail/s     TO/s    Average        min        max\n"
        ));
        assert!(out.contains(&format!("\r {}\n", "=".repeat(115))));
        let data = lines.iter().find(|l| l.starts_with("\t Null0")).unwrap();
        // "\t %-20s: %10.2f %10.2f %10.2f %10.2f %8.2f %10.2f %10.2f %10.2f"
        assert_eq!(data.len(), 2 + 20 + 2 + 7 * 10 + 8 + 7, "{data:?}");
        assert!(out.contains("Latency percentiles(us)"));
    }

    #[test]
    fn verify_on_malloc_two_cores_with_c() {
        let cfg = tmp("malloc.json", &config(MALLOC0));
        let o = run(&[
            "-c",
            cfg.to_str().unwrap(),
            "-m",
            "0x3",
            "-C",
            "-q",
            "32",
            "-o",
            "4096",
            "-w",
            "verify",
            "-t",
            "1",
        ]);
        ok(&o);
        let out = stdout(&o);
        assert!(
            out.contains("Job: Malloc0 (Core Mask 0x1, workload: verify"),
            "{out}"
        );
        assert!(
            out.contains("Job: Malloc0 (Core Mask 0x2, workload: verify"),
            "{out}"
        );
        // Each core verifies its own half of the slots.
        assert!(
            out.contains("Verification LBA range: start 0x0 length 0x2000"),
            "{out}"
        );
        assert!(
            out.contains("Verification LBA range: start 0x2000 length 0x2000"),
            "{out}"
        );
    }

    #[test]
    fn default_bdev_without_config() {
        let o = run(&["-q", "4", "-o", "4096", "-w", "randread", "-t", "1"]);
        ok(&o);
        let out = stdout(&o);
        assert!(
            out.contains("built-in 256 MiB malloc bdev Malloc0"),
            "{out}"
        );
        assert!(total_iops(&out) > 0.0);
    }

    #[test]
    fn json_result_matches_table() {
        let cfg = tmp("null-json.json", &config(NULL0));
        let json = std::env::temp_dir().join(format!("bdevperf-out-{}.json", std::process::id()));
        let o = run(&[
            "-c",
            cfg.to_str().unwrap(),
            "-q",
            "4",
            "-o",
            "4096",
            "-w",
            "randrw",
            "-M",
            "70",
            "-t",
            "1",
            "--output-json",
            json.to_str().unwrap(),
        ]);
        ok(&o);
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let r = &doc["results"][0];
        assert_eq!(r["job"], "Null0");
        assert_eq!(r["workload"], "randrw");
        assert_eq!(r["percentage"], 70);
        assert_eq!(r["status"], "finished");
        assert_eq!(r["queue_depth"], 4);
        assert_eq!(doc["core_count"], 1);
        let iops = r["iops"].as_f64().unwrap();
        let table = total_iops(&stdout(&o));
        assert!(
            (iops - table).abs() < 0.01 * table.max(1.0),
            "json {iops} vs table {table}"
        );
        assert!(r["p99_latency_us"].as_f64().unwrap() >= r["p50_latency_us"].as_f64().unwrap());
        assert!(stdout(&o).contains("workload: randrw, percentage: 70, depth: 4"));
        let _ = std::fs::remove_file(json);
    }

    #[test]
    fn periodic_tables_with_s() {
        let cfg = tmp("null-s.json", &config(NULL0));
        let o = run(&[
            "-c",
            cfg.to_str().unwrap(),
            "-q",
            "4",
            "-o",
            "4096",
            "-w",
            "read",
            "-t",
            "3",
            "-S",
            "1",
        ]);
        ok(&o);
        let out = stdout(&o);
        let totals = out
            .lines()
            .filter(|l| l.trim_start_matches('\r').trim_start().starts_with("Total"))
            .count();
        // At least two periodic tables plus the final one.
        assert!(totals >= 3, "{totals} tables:\n{out}");
    }

    fn fails_with(args: &[&str], msg: &str) {
        let o = run(args);
        assert_eq!(
            o.status.code(),
            Some(1),
            "expected exit 1 for {args:?}; stdout {}",
            stdout(&o)
        );
        let err = stderr(&o);
        assert!(err.contains(msg), "expected {msg:?} in stderr:\n{err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "one error line expected for {args:?}:\n{err}"
        );
        assert!(
            !stdout(&o).contains("Running I/O"),
            "ran I/O despite bad input {args:?}"
        );
    }

    /// A zoned bdev of 16 zones of 1024 blocks, `capacity` of them
    /// writable, over Malloc0, in a config.
    fn zoned_config(capacity: u64) -> PathBuf {
        let zb = format!(
            r#"{{"method":"bdev_zone_block_create","params":{{"name":"Z0","base_bdev":"Malloc0","zone_capacity":{capacity},"optimal_open_zones":1}}}}"#
        );
        tmp(
            &format!("zoned-{capacity}.json"),
            &config(&format!("{MALLOC0},{zb}")),
        )
    }

    /// No I/O failed: the Total line's Fail/s column is zero.
    fn no_failures(out: &str) {
        let total = out
            .lines()
            .find(|l| l.trim_start_matches('\r').trim_start().starts_with("Total"))
            .unwrap_or_else(|| panic!("no Total line in:\n{out}"));
        let fails: f64 = total
            .split(':')
            .nth(1)
            .and_then(|r| r.split_whitespace().nth(2))
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("no Fail/s in {total:?}"));
        assert!(fails == 0.0, "failures in:\n{out}");
    }

    #[test]
    fn zoned_bdev_is_written_zone_by_zone_and_verifies() {
        let cfg = zoned_config(1024);
        let cfg = cfg.to_str().unwrap();
        // 1001 writable blocks a zone: I/Os of 4 blocks leave one, and the
        // zone is finished before the task moves on.
        let tail = zoned_config(1001);
        for w in ["verify", "write"] {
            let o = run(&[
                "-c",
                tail.to_str().unwrap(),
                "-T",
                "Z0",
                "-q",
                "8",
                "-o",
                "16k",
                "-w",
                w,
                "-t",
                "1",
                "--zone-append",
            ]);
            ok(&o);
            no_failures(&stdout(&o));
        }
        // 16 zones of 1024 blocks: a second of writes fills each zone
        // several times, so zones are reset and rewritten.
        for extra in [
            &["-w", "write"][..],
            &["-w", "randwrite"],
            &["-w", "verify"],
            &["-w", "verify", "--zone-append"],
            &["-w", "randwrite", "--zone-append", "-U"],
            &["-w", "randrw", "-M", "50"],
            &["-w", "rw", "-M", "30", "--zone-append"],
        ] {
            let mut args = vec!["-c", cfg, "-T", "Z0", "-q", "8", "-o", "16k", "-t", "1"];
            args.extend_from_slice(extra);
            let o = run(&args);
            ok(&o);
            let out = stdout(&o);
            assert!(total_iops(&out) > 0.0, "{extra:?}:\n{out}");
            no_failures(&out);
            assert!(!stderr(&o).contains("warning"), "{extra:?}: {}", stderr(&o));
        }
        // More tasks than zones: one per zone, with a warning.
        let o = run(&[
            "-c", cfg, "-T", "Z0", "-q", "64", "-o", "4096", "-w", "verify", "-t", "1",
        ]);
        ok(&o);
        no_failures(&stdout(&o));
        assert!(
            stderr(&o).contains(
                "queue depth (-q) 64 is above the 16 zones the job can write at once (one write in flight per zone); using 16"
            ),
            "{}",
            stderr(&o)
        );
        // Two jobs on halves of the bdev (-C on two cores), 8 zones each.
        let o = run(&[
            "-c", cfg, "-T", "Z0", "-q", "8", "-o", "4096", "-w", "verify", "-t", "1", "-C", "-m",
            "0x3",
        ]);
        ok(&o);
        no_failures(&stdout(&o));
        // Reads run anywhere, as before.
        let o = run(&[
            "-c", cfg, "-T", "Z0", "-q", "4", "-o", "4096", "-w", "randread", "-t", "1",
        ]);
        ok(&o);
        assert!(total_iops(&stdout(&o)) > 0.0);
    }

    #[test]
    fn zoned_bdev_refuses_workloads_that_write_anywhere() {
        let cfg = zoned_config(1024);
        let cfg = cfg.to_str().unwrap();
        for w in ["unmap", "write_zeroes"] {
            fails_with(
                &["-c", cfg, "-T", "Z0", "-q", "4", "-o", "4096", "-w", w, "-t", "1"],
                &format!("bdev Z0 is zoned (written only at its zones' write pointers): workload {w} would write anywhere"),
            );
        }
        fails_with(
            &[
                "-c", cfg, "-T", "Z0", "-q", "4", "-o", "8m", "-w", "write", "-t", "1",
            ],
            "I/O size 8388608 is larger than a zone of bdev Z0 (1024 blocks)",
        );
        let plain = tmp("plain.json", &config(MALLOC0));
        fails_with(
            &[
                "-c",
                plain.to_str().unwrap(),
                "-T",
                "Malloc0",
                "-q",
                "4",
                "-o",
                "4096",
                "-w",
                "write",
                "-t",
                "1",
                "--zone-append",
            ],
            "--zone-append needs a zoned bdev, and bdev Malloc0 is not zoned",
        );
    }

    #[test]
    fn bad_input_is_one_clear_error() {
        let good = tmp("good.json", &config(NULL0));
        let good = good.to_str().unwrap();
        fails_with(
            &["-q", "1", "-o", "4096", "-w", "randomread", "-t", "1"],
            "unknown workload 'randomread'",
        );
        fails_with(
            &["-q", "0", "-o", "4096", "-w", "read", "-t", "1"],
            "queue depth (-q) must be at least 1",
        );
        fails_with(
            &["-o", "4096", "-w", "read", "-t", "1"],
            "missing queue depth (-q)",
        );
        fails_with(
            &["-q", "1", "-o", "4096", "-w", "rw", "-t", "1"],
            "needs a read percentage (-M 0-100)",
        );
        fails_with(
            &["-c", good, "-q", "1", "-o", "1000", "-w", "read", "-t", "1"],
            "is not a multiple of the block size 4096",
        );
        fails_with(
            &[
                "-c", good, "-q", "1", "-o", "4096", "-w", "read", "-t", "1", "-T", "Nope",
            ],
            "bdev Nope not found",
        );
        fails_with(
            &[
                "-c",
                "/nonexistent/conf.json",
                "-q",
                "1",
                "-o",
                "4096",
                "-w",
                "read",
                "-t",
                "1",
            ],
            "is not readable",
        );
        let bad = tmp("bad.json", "{ this is not json");
        fails_with(
            &[
                "-c",
                bad.to_str().unwrap(),
                "-q",
                "1",
                "-o",
                "4096",
                "-w",
                "read",
                "-t",
                "1",
            ],
            "Parsing JSON configuration failed",
        );
        let unknown = tmp(
            "unknown.json",
            &config(r#"{"method":"bdev_frobnicate_create","params":{}}"#),
        );
        fails_with(
            &[
                "-c",
                unknown.to_str().unwrap(),
                "-q",
                "1",
                "-o",
                "4096",
                "-w",
                "read",
                "-t",
                "1",
            ],
            "Method 'bdev_frobnicate_create' was not found",
        );
        let failing = tmp("dup.json", &config(&format!("{NULL0},{NULL0}")));
        fails_with(
            &[
                "-c",
                failing.to_str().unwrap(),
                "-q",
                "1",
                "-o",
                "4096",
                "-w",
                "read",
                "-t",
                "1",
            ],
            "config entry bdev_null_create of subsystem bdev failed",
        );
        fails_with(
            &[
                "-c", good, "-q", "1", "-o", "4096", "-w", "unmap", "-t", "1",
            ],
            "does not support unmap",
        );
    }
}

/// The SPDK options added on top of the basic ones: -F, -D, -U, -P, -E, -j.
#[cfg(test)]
mod spdk_options {
    use std::path::PathBuf;
    use std::process::{Command, Output};

    const NULL0: &str = r#"{"method":"bdev_null_create","params":{"name":"Null0","num_blocks":65536,"block_size":4096}}"#;
    const MALLOC0: &str = r#"{"method":"bdev_malloc_create","params":{"name":"Malloc0","num_blocks":16384,"block_size":4096}}"#;

    fn tmp(name: &str, content: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bdevperf-opts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// A config with these bdev entries, as a path string.
    fn conf(name: &str, entries: &[&str]) -> String {
        let body = format!(
            r#"{{"subsystems":[{{"subsystem":"bdev","config":[{}]}}]}}"#,
            entries.join(",")
        );
        tmp(name, &body).to_str().unwrap().to_string()
    }

    fn run(args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_bdevperf"))
            .args(args)
            .arg("--interrupt-mode")
            .output()
            .unwrap()
    }

    fn stdout(o: &Output) -> String {
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn stderr(o: &Output) -> String {
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// Runs and expects success; returns stdout.
    fn ok(args: &[&str]) -> (String, String) {
        let o = run(args);
        assert!(
            o.status.success(),
            "bdevperf {args:?} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
            o.status,
            stdout(&o),
            stderr(&o)
        );
        (stdout(&o), stderr(&o))
    }

    fn fails_with(args: &[&str], msg: &str) {
        let o = run(args);
        assert_eq!(o.status.code(), Some(1), "exit 1 expected for {args:?}");
        let err = stderr(&o);
        assert!(err.contains(msg), "expected {msg:?} in stderr:\n{err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "one line expected:\n{err}"
        );
        assert!(!stdout(&o).contains("Running I/O"), "ran I/O for {args:?}");
    }

    fn totals(out: &str) -> Vec<f64> {
        out.lines()
            .filter(|l| l.trim_start_matches('\r').trim_start().starts_with("Total"))
            .map(|l| {
                l.split(':')
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect()
    }

    /// The table without its numbers: job lines whole, row names.
    fn shape(out: &str) -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("Job:") || l.starts_with("\t ") || l.contains("Total"))
            .map(|l| {
                if l.starts_with("Job:") {
                    l.to_string()
                } else {
                    l.split(':').next().unwrap_or_default().to_string()
                }
            })
            .collect()
    }

    #[test]
    fn help_lists_the_options_and_unsupported_ones_fail() {
        let o = Command::new(env!("CARGO_BIN_EXE_bdevperf"))
            .arg("--help")
            .output()
            .unwrap();
        let help = stdout(&o);
        for flag in ["-F <THETA>", "-D ", "-U ", "-P <N>", "-E ", "-j <FILE>"] {
            assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
        }
        assert!(
            help.contains("-Z, -X, -J, -N and -H are not supported"),
            "{help}"
        );
        for flag in ["-Z", "-X", "-N", "-H"] {
            let o = run(&["-q", "1", "-o", "4096", "-w", "read", "-t", "1", flag]);
            assert!(!o.status.success(), "{flag} accepted");
            assert!(
                stderr(&o).contains(&format!("unexpected argument '{flag}'")),
                "{}",
                stderr(&o)
            );
        }
    }

    #[test]
    fn zipf_offsets() {
        let c = conf("zipf.json", &[NULL0]);
        let base = ["-c", &c, "-q", "8", "-o", "4096", "-t", "1"];
        let (out, _) = ok(&[&base[..], &["-w", "randread", "-F", "1.2"]].concat());
        assert!(totals(&out)[0] > 0.0, "{out}");
        let (out, _) = ok(&[&base[..], &["-w", "randrw", "-M", "30", "-F", "0.8"]].concat());
        assert!(totals(&out)[0] > 0.0, "{out}");
        for bad in ["0", "-1", "abc", "nan"] {
            fails_with(
                &[&base[..], &["-w", "randread", "-F", bad]].concat(),
                &format!("zipf theta (-F) must be a number greater than 0, got '{bad}'"),
            );
        }
        fails_with(
            &[&base[..], &["-w", "read", "-F", "1.2"]].concat(),
            "-F needs a random workload (randread, randwrite or randrw): zipf only shapes random offsets, and workload read is not random",
        );
    }

    #[test]
    fn random_map() {
        let c = conf("map.json", &[MALLOC0]);
        let base = ["-c", &c, "-q", "16", "-o", "4096", "-t", "1"];
        let (out, _) = ok(&[&base[..], &["-w", "randwrite", "-D"]].concat());
        assert!(totals(&out)[0] > 0.0, "{out}");
        let (_, err) = ok(&[&base[..], &["-w", "randread", "-D", "-F", "1"]].concat());
        assert!(err.contains("-D has no effect with -F"), "{err}");
        fails_with(
            &[&base[..], &["-w", "write", "-D"]].concat(),
            "-D needs a random workload (randread, randwrite or randrw)",
        );
    }

    #[test]
    fn unique_writes() {
        let c = conf("unique.json", &[MALLOC0]);
        let base = ["-c", &c, "-q", "16", "-o", "8k", "-t", "1"];
        let (out, _) = ok(&[&base[..], &["-w", "randrw", "-M", "50", "-U"]].concat());
        assert!(totals(&out)[0] > 0.0, "{out}");
        // Verify still reads back what it wrote with per-write data.
        let (out, _) = ok(&[&base[..], &["-w", "verify", "-U"]].concat());
        assert!(out.contains("Fail/s"), "{out}");
        assert!(out.contains("workload: verify"), "{out}");
        let (_, err) = ok(&[&base[..], &["-w", "randread", "-U"]].concat());
        assert!(
            err.contains("-U has no effect: workload randread writes no data"),
            "{err}"
        );
    }

    #[test]
    fn ema_periodic_tables() {
        let c = conf("ema.json", &[NULL0]);
        let base = [
            "-c", &c, "-q", "4", "-o", "4096", "-w", "randread", "-t", "3",
        ];
        let (out, _) = ok(&[&base[..], &["-S", "1", "-P", "2"]].concat());
        let t = totals(&out);
        // At least two periodic tables plus the final one.
        assert!(t.len() >= 3, "{t:?}\n{out}");
        assert!(t.iter().all(|v| *v > 0.0), "{t:?}");
        let (_, err) = ok(&[
            "-c", &c, "-q", "4", "-o", "4096", "-w", "randread", "-t", "1", "-P", "2",
        ]);
        assert!(err.contains("warning: -P is ignored without -S"), "{err}");
        fails_with(
            &[&base[..], &["-S", "1", "-P", "0"]].concat(),
            "(-P) must be at least 1",
        );
    }

    #[test]
    fn one_thread_per_core() {
        let c = conf("e.json", &[NULL0, MALLOC0]);
        let args = [
            "-c", &c, "-m", "0x1", "-q", "8", "-o", "4096", "-w", "randread", "-t", "1",
        ];
        let (plain, _) = ok(&args);
        let (shared, _) = ok(&[&args[..], &["-E"]].concat());
        assert!(
            shared.contains("Job: Null0 (Core Mask 0x1, workload: randread, depth: 8"),
            "{shared}"
        );
        assert!(
            shared.contains("Job: Malloc0 (Core Mask 0x1, workload: randread, depth: 8"),
            "{shared}"
        );
        assert_eq!(shape(&plain), shape(&shared));
        assert!(totals(&shared)[0] > 0.0);
        // With -C each core's thread runs a slice of both bdevs.
        let (out, _) = ok(&[
            "-c", &c, "-m", "0x3", "-C", "-E", "-q", "4", "-o", "4096", "-w", "verify", "-t", "1",
        ]);
        assert_eq!(out.matches("Verification LBA range").count(), 4, "{out}");
    }

    const JOBS: &str = "# two sections sharing the [global] defaults\n\
        [global]\n\
        bs=4096\n\
        iodepth=8\n\
        rw=randread\n\
        \n\
        [first]\n\
        filename=Null0\n\
        \n\
        [second]\n\
        filename=Malloc0\n\
        iodepth=4\n\
        bs=8k\n\
        rw=randwrite\n";

    #[test]
    fn job_file_sections() {
        let c = conf("jobs.json", &[NULL0, MALLOC0]);
        let j = tmp("two.job", JOBS);
        let j = j.to_str().unwrap();
        let (out, _) = ok(&["-c", &c, "-j", j, "-t", "1"]);
        assert!(out.starts_with("Using job config with 2 jobs\n"), "{out}");
        assert!(
            out.contains("Job: Null0 (Core Mask 0x1, workload: randread, depth: 8, IO size: 4096)"),
            "{out}"
        );
        assert!(
            out.contains(
                "Job: Malloc0 (Core Mask 0x1, workload: randwrite, depth: 4, IO size: 8192)"
            ),
            "{out}"
        );
        assert_eq!(
            out.matches("\t Null0 ").count() + out.matches("\t Malloc0 ").count(),
            4
        );
        assert!(totals(&out)[0] > 0.0);
        // -q overrides [global], not what a section sets.
        let (out, _) = ok(&["-c", &c, "-j", j, "-t", "1", "-q", "2"]);
        assert!(
            out.contains("Job: Null0 (Core Mask 0x1, workload: randread, depth: 2,"),
            "{out}"
        );
        assert!(
            out.contains("Job: Malloc0 (Core Mask 0x1, workload: randwrite, depth: 4,"),
            "{out}"
        );
    }

    #[test]
    fn job_file_ranges_masks_and_mixes() {
        let c = conf("jobs2.json", &[NULL0, MALLOC0]);
        let j = tmp(
            "ranges.job",
            "[v]\nfilename=Malloc0\nrw=verify\nbs=4096\niodepth=4\noffset=1024\nlength=2048\n\
             [m]\nfilename=Null0\nrw=randrw\nbs=4096\niodepth=2\ncpumask=0x2\n",
        );
        let (out, _) = ok(&["-c", &c, "-m", "0x3", "-j", j.to_str().unwrap(), "-t", "1"]);
        // offset/length are blocks: 4 KiB I/Os on 4 KiB blocks.
        assert!(
            out.contains("\t Verification LBA range: start 0x400 length 0x800"),
            "{out}"
        );
        // rwmixread defaults to 50; the section runs on its mask's core.
        assert!(
            out.contains("Job: Null0 (Core Mask 0x2, workload: randrw, percentage: 50, depth: 2, IO size: 4096)"),
            "{out}"
        );
    }

    #[test]
    fn bad_job_files_are_one_clear_error() {
        let c = conf("bad-jobs.json", &[NULL0]);
        let job = |name: &str, text: &str| tmp(name, text).to_str().unwrap().to_string();
        let good = "[a]\nfilename=Null0\nbs=4096\niodepth=1\nrw=read\n";
        let unknown = job("unknown.job", &format!("{good}numjobs=2\n"));
        fails_with(
            &["-c", &c, "-j", &unknown, "-t", "1"],
            "line 6: unknown key 'numjobs'",
        );
        let number = job("number.job", &good.replace("iodepth=1", "iodepth=deep"));
        fails_with(
            &["-c", &c, "-j", &number, "-t", "1"],
            "line 4: iodepth must be a whole number, got 'deep'",
        );
        let empty = job("empty.job", "[global]\nbs=4096\n");
        fails_with(&["-c", &c, "-j", &empty, "-t", "1"], "no job sections");
        let missing = job("missing.job", &good.replace("Null0", "Null9"));
        fails_with(
            &["-c", &c, "-j", &missing, "-t", "1"],
            "job file section [a]: bdev Null9 not found",
        );
        let no_bs = job("nobs.job", &good.replace("bs=4096\n", ""));
        fails_with(
            &["-c", &c, "-j", &no_bs, "-t", "1"],
            "section [a] has no 'bs'",
        );
        let mask = job("mask.job", &format!("{good}cpumask=0x4\n"));
        fails_with(
            &["-c", &c, "-j", &mask, "-t", "1"],
            "job file section [a]: cpumask 0x4 has no core in the core mask 0x1 (-m)",
        );
        let past = job("past.job", &format!("{good}offset=65000\nlength=1000\n"));
        fails_with(
            &["-c", &c, "-j", &past, "-t", "1"],
            "past the end of bdev Null0",
        );
        let ok_file = job("ok.job", good);
        fails_with(
            &["-c", &c, "-j", &ok_file, "-E", "-t", "1"],
            "-E cannot be used with -j",
        );
        fails_with(
            &["-c", &c, "-j", "/nonexistent/x.job", "-t", "1"],
            "read job file /nonexistent/x.job",
        );
    }
}

/// bdevperf started with `-z` on a private socket, driven over RPC.
#[cfg(test)]
mod rpc_driven {
    use std::process::Command;
    use std::time::{Duration, Instant};

    use bdevkit_jsonrpc::{Client, ClientError};
    use serde_json::json;

    use crate::common::ZServer;

    const NULL0: &str = r#"{"method":"bdev_null_create","params":{"name":"Null0","num_blocks":65536,"block_size":4096}}"#;

    #[test]
    fn z_waits_for_perform_tests_rpc() {
        let z = ZServer::start(
            "z",
            NULL0,
            &["-q", "4", "-o", "4096", "-w", "randread", "-t", "1"],
        );
        let mut client = z.client();
        let r = client
            .call(
                "perform_tests",
                Some(json!({"time_in_sec": 1, "queue_depth": 8, "unknown_key": 1})),
            )
            .unwrap();
        let res = &r["results"][0];
        assert_eq!(res["job"], "Null0");
        assert_eq!(res["queue_depth"], 8);
        assert_eq!(res["status"], "finished");
        assert!(res["iops"].as_f64().unwrap() > 0.0);
        // A second run with other parameters, and a bad one.
        let r = client
            .call(
                "perform_tests",
                Some(json!({"workload_type": "randrw", "rw_percentage": 50, "io_size": "8k"})),
            )
            .unwrap();
        assert_eq!(r["results"][0]["io_size"], 8192);
        assert_eq!(r["results"][0]["percentage"], 50);
        match client.call("perform_tests", Some(json!({"workload_type": "bogus"}))) {
            Err(ClientError::Rpc(e)) => assert_eq!(e.code, -32700),
            other => panic!("expected -32700, got {other:?}"),
        }
        let (status, stdout) = z.kill();
        assert!(status.success(), "{status:?}");
        assert!(
            stdout.contains("Job: Null0 (Core Mask 0x1, workload: randread, depth: 8"),
            "{stdout}"
        );
    }

    /// A second `-z` on a socket in use: one line saying to pick another.
    #[test]
    fn z_on_a_socket_in_use_says_to_pick_another() {
        let z = ZServer::start("busy", NULL0, &[]);
        drop(z.client());
        let o = Command::new(env!("CARGO_BIN_EXE_bdevperf"))
            .args(["-z", "--interrupt-mode", "-r"])
            .arg(z.socket())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("is in use by another process: pick another with -r"),
            "{err}"
        );
        let (status, _) = z.kill();
        assert!(status.success(), "{status:?}");
    }

    /// Latency histograms over a run, as SPDK users take them: enable,
    /// `perform_tests`, read. Every completed read is in the histogram.
    #[test]
    fn histogram_of_a_run() {
        let z = ZServer::start(
            "hist",
            NULL0,
            &["-q", "8", "-o", "4096", "-w", "randread", "-t", "1"],
        );
        let mut c = z.client();
        // Examine reads the new bdev (a superblock look) while the socket
        // already answers: let it finish, and count from here, or that read
        // is in the histogram or not depending on who came first.
        c.call("bdev_wait_for_examine", None).unwrap();
        let reads_before = c
            .call("bdev_get_iostat", Some(json!({"names": ["Null0"]})))
            .unwrap()["bdevs"][0]["num_read_ops"]
            .as_u64()
            .unwrap();
        c.call(
            "bdev_enable_histogram",
            Some(json!({"name": "Null0", "enable": true})),
        )
        .unwrap();
        c.call(
            "bdev_set_qd_sampling_period",
            Some(json!({"name": "Null0", "period": 1000})),
        )
        .unwrap();
        c.call("perform_tests", None).unwrap();
        let st = c
            .call("bdev_get_iostat", Some(json!({"names": ["Null0"]})))
            .unwrap();
        let st = &st["bdevs"][0];
        let reads = st["num_read_ops"].as_u64().unwrap() - reads_before;
        assert!(reads > 0);
        // Sampled every ms during a 1 s run at QD 8: busy, 8 deep.
        assert_eq!(st["queue_depth_polling_period"], 1000, "{st}");
        let io_time = st["io_time"].as_u64().unwrap();
        assert!(io_time > 0, "{st}");
        assert!(st["weighted_io_time"].as_u64().unwrap() >= io_time, "{st}");
        let h = c
            .call("bdev_get_histogram", Some(json!({"name": "Null0"})))
            .unwrap();
        assert_eq!(h["granularity"], 7);
        assert!(h["tsc_rate"].as_u64().unwrap() > 0);
        let ranges = h["max_range"].as_u64().unwrap() - h["min_range"].as_u64().unwrap() + 1;
        let bytes = ranges * 128 * 8;
        assert_eq!(
            h["histogram"].as_str().unwrap().len() as u64,
            bytes.div_ceil(3) * 4,
            "base64 of {ranges} ranges of 128 u64 counters"
        );
        // Borders in µs; the last count is every I/O.
        let b = c
            .call(
                "bdev_get_histogram_borders",
                Some(json!({"name": "Null0", "borders": [1, 1_000_000]})),
            )
            .unwrap();
        let counts = b["borders_count"].as_array().unwrap();
        assert_eq!(counts.len(), 3);
        assert_eq!(counts[2].as_u64().unwrap(), reads, "{b}");
        assert_eq!(counts[1].as_u64().unwrap(), reads, "no read took a second");
        c.call(
            "bdev_enable_histogram",
            Some(json!({"name": "Null0", "enable": false})),
        )
        .unwrap();
        match c.call("bdev_get_histogram", Some(json!({"name": "Null0"}))) {
            Err(ClientError::Rpc(e)) => {
                assert_eq!((e.code, e.message.as_str()), (-32603, "Bad address"));
            }
            other => panic!("expected an error, got {other:?}"),
        }
        // Its logging answers the log RPCs too.
        assert_eq!(
            c.call("log_get_print_level", None).unwrap(),
            json!("WARNING")
        );
        c.call("log_set_print_level", Some(json!({"level": "NOTICE"})))
            .unwrap();
        assert_eq!(
            c.call("log_get_print_level", None).unwrap(),
            json!("NOTICE")
        );
        let (status, _) = z.kill();
        assert!(status.success(), "{status:?}");
    }

    /// A bdev deleted over RPC while a test runs on it: the job stops,
    /// releases the bdev so the delete completes, and the run still reports.
    #[test]
    fn bdev_deleted_during_a_run() {
        let entries = r#"
            {"method":"bdev_malloc_create","params":{"name":"Gone","num_blocks":8192,"block_size":4096}},
            {"method":"bdev_null_create","params":{"name":"Stays","num_blocks":8192,"block_size":4096}}"#;
        let z = ZServer::start(
            "hr",
            entries,
            &["-q", "64", "-o", "4096", "-w", "randwrite", "-t", "5"],
        );
        let mut runner = z.client();
        let run = std::thread::spawn(move || runner.call("perform_tests", None));
        let mut admin = z.client();
        let writes = |c: &mut Client, name: &str| {
            c.call("bdev_get_iostat", Some(json!({"names": [name]})))
                .unwrap()["bdevs"][0]["num_write_ops"]
                .as_u64()
                .unwrap()
        };
        // The run is on once both jobs write (not after a fixed sleep).
        let start = Instant::now();
        while writes(&mut admin, "Gone") == 0 || writes(&mut admin, "Stays") == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the jobs never wrote"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        admin
            .call("bdev_malloc_delete", Some(json!({"name": "Gone"})))
            .unwrap();
        // The delete waited for the job to let go, not for the run's end:
        // the other job still writes after it returned.
        let w = writes(&mut admin, "Stays");
        let start = Instant::now();
        while writes(&mut admin, "Stays") == w {
            assert!(
                start.elapsed() < Duration::from_secs(30) && !run.is_finished(),
                "the delete returned only once the run was over"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let results = run.join().unwrap().unwrap();
        let jobs = results["results"].as_array().unwrap();
        let gone = jobs.iter().find(|j| j["job"] == "Gone").unwrap();
        let stays = jobs.iter().find(|j| j["job"] == "Stays").unwrap();
        assert_eq!(gone["status"], "failed");
        assert!(
            gone["runtime"].as_f64().unwrap() < stays["runtime"].as_f64().unwrap(),
            "the job on the deleted bdev stopped early: {results}"
        );
        assert_eq!(stays["status"], "finished");
        let bdevs = admin.call("bdev_get_bdevs", None).unwrap();
        assert_eq!(bdevs.as_array().unwrap().len(), 1);
        let (status, _) = z.kill();
        assert!(status.success() || status.code() == Some(1), "{status:?}");
    }
}
