//! Command-line smoke tests. (Their presence also makes `cargo test
//! --workspace` build the `bdev_rpc` binary that the end-to-end suite in
//! `test/` runs.)

#[cfg(test)]
mod cli {
    use std::process::Command;

    fn rpc(args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_bdev_rpc"))
            .args(args)
            .output()
            .unwrap()
    }

    #[test]
    fn connection_errors_name_the_socket() {
        let o = rpc(&["-s", "/nonexistent/bdevkit.sock", "spdk_get_version"]);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("/nonexistent/bdevkit.sock"), "{err}");
    }

    #[test]
    fn bad_params_are_usage_errors() {
        let o = rpc(&["-s", "/nonexistent/x.sock", "m", "-p", "novalue"]);
        assert_eq!(o.status.code(), Some(2));
        let o = rpc(&["-s", "/nonexistent/x.sock", "m", "--json", "[1]"]);
        assert_eq!(o.status.code(), Some(2));
    }
}
