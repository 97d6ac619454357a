//! End-to-end tests of the bdevperf binary.

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

/// bdevperf started with `-z` on a private socket, driven over RPC.
#[cfg(test)]
mod rpc_driven {
    use std::path::PathBuf;
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::time::{Duration, Instant};

    use bdevkit_jsonrpc::{Client, ClientError};
    use serde_json::json;

    struct ZServer {
        child: Child,
        sock: PathBuf,
        dir: PathBuf,
    }

    impl ZServer {
        /// `bdevperf -z -r <sock> -c <config with these entries> <args>`.
        fn start(name: &str, entries: &str, args: &[&str]) -> ZServer {
            let dir = std::env::temp_dir().join(format!("bdevperf-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let sock = dir.join("perf.sock");
            let cfg = dir.join("conf.json");
            std::fs::write(
                &cfg,
                format!(r#"{{"subsystems":[{{"subsystem":"bdev","config":[{entries}]}}]}}"#),
            )
            .unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_bdevperf"))
                .args([
                    "-z",
                    "-r",
                    sock.to_str().unwrap(),
                    "-c",
                    cfg.to_str().unwrap(),
                ])
                .args(args)
                .arg("--interrupt-mode")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            ZServer { child, sock, dir }
        }

        /// A client, once the socket answers.
        fn client(&self) -> Client {
            let start = Instant::now();
            loop {
                match Client::connect_unix(&self.sock) {
                    Ok(mut c) => {
                        c.set_timeout(Some(Duration::from_secs(60)));
                        return c;
                    }
                    Err(_) if start.elapsed() < Duration::from_secs(20) => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => panic!("bdevperf -z never listened: {e}"),
                }
            }
        }

        /// Stops it with `spdk_kill_instance`; its exit status and stdout.
        fn kill(mut self) -> (ExitStatus, String) {
            let _ = self
                .client()
                .call("spdk_kill_instance", Some(json!({"sig_name": "SIGTERM"})));
            let start = Instant::now();
            while self.child.try_wait().unwrap().is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "bdevperf did not exit"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            let out = self.child.wait_with_output().unwrap();
            assert!(!self.sock.exists(), "socket left behind");
            let _ = std::fs::remove_dir_all(&self.dir);
            (
                out.status,
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        }
    }

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
        let reads = st["num_read_ops"].as_u64().unwrap();
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
            &["-q", "64", "-o", "4096", "-w", "randwrite", "-t", "3"],
        );
        let mut runner = z.client();
        let run = std::thread::spawn(move || runner.call("perform_tests", None));
        std::thread::sleep(Duration::from_millis(500));
        let mut admin = z.client();
        let t = Instant::now();
        admin
            .call("bdev_malloc_delete", Some(json!({"name": "Gone"})))
            .unwrap();
        // The delete waited for the job to let go, not for the run's end.
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "delete took {:?}",
            t.elapsed()
        );
        let results = run.join().unwrap().unwrap();
        let jobs = results["results"].as_array().unwrap();
        let gone = jobs.iter().find(|j| j["job"] == "Gone").unwrap();
        let stays = jobs.iter().find(|j| j["job"] == "Stays").unwrap();
        assert_eq!(gone["status"], "failed");
        assert!(gone["runtime"].as_f64().unwrap() < 2.5);
        assert_eq!(stays["status"], "finished");
        let bdevs = admin.call("bdev_get_bdevs", None).unwrap();
        assert_eq!(bdevs.as_array().unwrap().len(), 1);
        let (status, _) = z.kill();
        assert!(status.success() || status.code() == Some(1), "{status:?}");
    }
}
