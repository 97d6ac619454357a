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
        ] {
            assert!(help.contains(opt), "{opt} missing:\n{help}");
        }
    }

    #[test]
    fn bad_options_exit_2() {
        let o = tgt(&["-m", "[3-1]"]);
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains("invalid core mask"));
        let o = tgt(&["--log-level", "loud", "-r", "/nonexistent/dir/x.sock"]);
        assert_eq!(o.status.code(), Some(1));
    }
}
