//! SPDK's own Python client (`pip install spdk==26.9`, command `spdk-rpc`) against our server.
//! The client is found by `bdevkit_test::spdk_rpc` (`$SPDK_RPC`, the repository's `.venv`,
//! `PATH`); a missing client fails these tests unless `BDEVKIT_SKIP_SPDK_RPC=1`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::harness::TestServer;

fn spdk_rpc(exe: &Path, srv: &TestServer, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.arg("-s").arg(&srv.path).args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn spdk_rpc_drives_the_server() {
    let Some(exe) = bdevkit_test::spdk_rpc::spdk_rpc() else {
        return;
    };
    let srv = TestServer::start();

    let o = spdk_rpc(&exe, &srv, &["rpc_get_methods"], None);
    assert!(o.status.success(), "{}", text(&o));
    let names: Vec<String> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(names.contains(&"echo".to_owned()));

    let o = spdk_rpc(&exe, &srv, &["spdk_get_version"], None);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("bdevkit test"));

    // RUNTIME-only method in STARTUP: the -1 error is printed and the exit code is 1.
    let o = spdk_rpc(&exe, &srv, &["bdev_get_bdevs"], None);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("Method may only be called after framework is initialized"));

    // Script mode: one connection, several requests.
    let o = spdk_rpc(
        &exe,
        &srv,
        &[],
        Some("spdk_get_version\n# a comment\nrpc_get_methods -c\nframework_start_init\nbdev_get_bdevs\n"),
    );
    assert!(o.status.success(), "{}", text(&o));

    // Batch mode: one JSON-RPC batch.
    let o = spdk_rpc(
        &exe,
        &srv,
        &["-b"],
        Some("spdk_get_version\nbdev_get_bdevs\n"),
    );
    assert!(o.status.success(), "{}", text(&o));

    // errno-style error.
    let o = spdk_rpc(&exe, &srv, &["bdev_get_bdevs", "-b", "Malloc0"], None);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("No such device"), "{}", text(&o));
}

#[test]
fn spdk_rpc_load_config_follows_current_methods() {
    let Some(exe) = bdevkit_test::spdk_rpc::spdk_rpc() else {
        return;
    };
    let srv = TestServer::start();
    // One STARTUP-only and one RUNTIME-only method: load_config must call the first, then
    // framework_start_init, then the second, guided by `rpc_get_methods current=true`.
    let config = r#"{"subsystems":[{"subsystem":"test","config":[
        {"method":"runtime_only"},
        {"method":"startup_only"}
    ]}]}"#;
    let o = spdk_rpc(&exe, &srv, &["load_config"], Some(config));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(srv.registry.state(), bdevkit_jsonrpc::RUNTIME);
    assert!(!text(&o).contains("skipped"), "{}", text(&o));
}
