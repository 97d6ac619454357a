//! Command-line smoke tests. (Their presence also makes `cargo test
//! --workspace` build the `bdev_tgt` binary that the end-to-end suite in
//! `test/` runs.)

#[cfg(test)]
mod cli {
    use std::process::Command;

    fn tgt(args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_bdev_tgt"))
            .args(args)
            .output()
            .unwrap()
    }

    #[test]
    fn help_lists_the_common_options() {
        let o = tgt(&["--help"]);
        assert!(o.status.success());
        let help = String::from_utf8_lossy(&o.stdout);
        for opt in [
            "--cpumask",
            "--rpc-socket",
            "--json",
            "--wait-for-rpc",
            "--interrupt-mode",
            "--logflag",
            "--json-ignore-init-errors",
            "--rpcs-allowed",
            "--rpc-stall-timeout",
        ] {
            assert!(help.contains(opt), "{opt} missing:\n{help}");
        }
        assert!(
            help.contains("[default: /var/tmp/bdevkit.sock]"),
            "default socket missing:\n{help}"
        );
    }

    #[test]
    fn bad_options_exit_2() {
        let o = tgt(&["-m", "[3-1]"]);
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains("invalid core mask"));
        let o = tgt(&["--log-level", "loud", "-r", "/nonexistent/dir/x.sock"]);
        assert_eq!(o.status.code(), Some(1));
    }

    /// A 1 GiB config file fails at once with one line, before anything
    /// is read (it used to be read whole: 2.1 GB RSS, 5 s).
    #[test]
    fn oversized_config_is_one_error() {
        let dir = std::env::temp_dir().join(format!("bdev_tgt-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("huge.json");
        std::fs::File::create(&cfg)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let sock = dir.join("t.sock");
        let o = tgt(&[
            "--json",
            cfg.to_str().unwrap(),
            "-r",
            sock.to_str().unwrap(),
            "--log-level",
            "off",
        ]);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            err.trim_end(),
            format!(
                "bdev_tgt: JSON config file {} is larger than 67108864 bytes (the RPC request limit)",
                cfg.display()
            )
        );
    }

    /// `--rpc-stall-timeout` reaches the server, and in interrupt mode
    /// (the reactor sleeps on the server's fd) the stall timer wakes it: a
    /// half-sent request is answered -32600 and closed while nothing else
    /// happens.
    #[test]
    fn stalled_request_is_dropped_in_interrupt_mode() {
        use std::io::{Read, Write};
        use std::os::unix::net::UnixStream;
        use std::time::{Duration, Instant};

        let dir = std::env::temp_dir().join(format!("bdev_tgt-stall-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("t.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_bdev_tgt"))
            .args(["--interrupt-mode", "--rpc-stall-timeout", "1", "-r"])
            .arg(&sock)
            .args(["--log-level", "off"])
            .spawn()
            .unwrap();
        let start = Instant::now();
        let mut s = loop {
            match UnixStream::connect(&sock) {
                Ok(s) => break s,
                Err(_) if start.elapsed() < Duration::from_secs(20) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("bdev_tgt never listened: {e}"),
            }
        };
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(br#"{"jsonrpc":"2.0","method":"spdk_get_version","id":1"#)
            .unwrap();
        let mut got = String::new();
        let r = s.read_to_string(&mut got);
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        r.unwrap();
        assert_eq!(
            got,
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid request: incomplete request, nothing received for 1s\"}}\n"
        );
    }
}
