//! bdevperf on aio and uring bdevs created from an SPDK-format config:
//! the config replays through the modules' RPC handlers and a verify
//! workload (write, read back, compare) runs clean on a tmpfs file; a
//! write workload on a read-only one fails with one error line.

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::{Command, Output};

    struct Files(Vec<PathBuf>);

    impl Drop for Files {
        fn drop(&mut self) {
            for f in &self.0 {
                let _ = std::fs::remove_file(f);
            }
        }
    }

    /// bdevperf with `args` on bdev `K0` of `method` over a 16 MiB tmpfs
    /// file.
    fn run(method: &str, extra: &str, args: &[&str]) -> Output {
        let pid = std::process::id();
        let disk = PathBuf::from(format!(
            "/dev/shm/bdevperf-{method}-{pid}-{}.img",
            args.join("")
        ));
        let conf = disk.with_extension("json");
        let _cleanup = Files(vec![disk.clone(), conf.clone()]);
        std::fs::File::create(&disk)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        let config = format!(
            r#"{{"subsystems":[{{"subsystem":"bdev","config":[{{"method":"{method}","params":{{"name":"K0","filename":"{}"{extra}}}}}]}}]}}"#,
            disk.display()
        );
        std::fs::write(&conf, config).unwrap();
        Command::new(env!("CARGO_BIN_EXE_bdevperf"))
            .arg("--json")
            .arg(&conf)
            .args(args)
            .arg("--interrupt-mode")
            .output()
            .unwrap()
    }

    fn verify(method: &str, extra: &str) {
        let out = run(
            method,
            extra,
            &[
                "-m", "0x1", "-q", "16", "-o", "4096", "-w", "verify", "-t", "1",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "bdevperf failed\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let job = stdout
            .lines()
            .find(|l| l.trim_start().starts_with("K0 "))
            .unwrap_or_else(|| panic!("no job line in:\n{stdout}"));
        let fail_per_s: f64 = job
            .split(':')
            .nth(1)
            .and_then(|r| r.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0);
        assert!(fail_per_s == 0.0, "failures in:\n{stdout}");
    }

    #[test]
    fn verify_on_aio() {
        verify(
            "bdev_aio_create",
            r#","readonly":false,"fallocate":false,"nowait":false"#,
        );
    }

    #[test]
    fn verify_on_uring() {
        if let Err(e) = bdevkit_uring::available() {
            println!("skipped: io_uring not available: {e}");
            return;
        }
        verify("bdev_uring_create", "");
    }

    /// Every task of a write job on a read-only bdev fails to submit, the
    /// same way: one error line and one count, not one line per task.
    #[test]
    fn write_on_read_only_aio_logs_once() {
        for continue_on_failure in [false, true] {
            let mut args = vec!["-q", "32", "-o", "4096", "-w", "randwrite", "-t", "1"];
            if continue_on_failure {
                args.push("-f");
            }
            let out = run("bdev_aio_create", r#","readonly":true"#, &args);
            let err = String::from_utf8_lossy(&out.stderr);
            // -f: failures do not fail the run.
            let code = if continue_on_failure { 0 } else { 1 };
            assert_eq!(out.status.code(), Some(code), "{err}");
            let lines: Vec<&str> = err.lines().filter(|l| l.contains("submit")).collect();
            assert!(
                lines[0].contains("submit failed") && lines[0].contains("write not supported"),
                "{err}"
            );
            if continue_on_failure {
                // -f: every task tried once.
                assert_eq!(lines.len(), 2, "{err}");
                assert!(
                    lines[1].contains("the last submit error repeated")
                        && lines[1].contains("repeats=31"),
                    "{err}"
                );
            } else {
                // The first failure stops the job before the others try.
                assert_eq!(lines.len(), 1, "{err}");
            }
        }
    }
}
