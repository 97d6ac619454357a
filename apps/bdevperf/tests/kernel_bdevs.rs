//! bdevperf on aio and uring bdevs created from an SPDK-format config:
//! the config replays through the modules' RPC handlers and a verify
//! workload (write, read back, compare) runs clean on a tmpfs file.

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;

    struct Files(Vec<PathBuf>);

    impl Drop for Files {
        fn drop(&mut self) {
            for f in &self.0 {
                let _ = std::fs::remove_file(f);
            }
        }
    }

    fn verify(method: &str, extra: &str) {
        let pid = std::process::id();
        let disk = PathBuf::from(format!("/dev/shm/bdevperf-{method}-{pid}.img"));
        let conf = std::env::temp_dir().join(format!("bdevperf-{method}-{pid}.json"));
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
        let out = Command::new(env!("CARGO_BIN_EXE_bdevperf"))
            .arg("--json")
            .arg(&conf)
            .args([
                "-m", "0x1", "-q", "16", "-o", "4096", "-w", "verify", "-t", "1",
            ])
            .arg("--interrupt-mode")
            .output()
            .unwrap();
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
}
