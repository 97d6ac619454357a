//! Helpers shared by the bdevperf end-to-end tests.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use bdevkit_jsonrpc::Client;
use serde_json::json;

/// bdevperf started with `-z` on a private socket, driven over RPC.
pub struct ZServer {
    child: Child,
    sock: PathBuf,
    dir: PathBuf,
}

impl ZServer {
    /// `bdevperf -z -r <sock> -c <config with these entries> <args>`.
    pub fn start(name: &str, entries: &str, args: &[&str]) -> ZServer {
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

    /// Its RPC socket.
    pub fn socket(&self) -> &std::path::Path {
        &self.sock
    }

    /// A client, once the socket answers.
    pub fn client(&self) -> Client {
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
    pub fn kill(self) -> (ExitStatus, String) {
        let out = self.kill_output();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Stops it with `spdk_kill_instance`; all it printed.
    pub fn kill_output(mut self) -> Output {
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
        out
    }
}
