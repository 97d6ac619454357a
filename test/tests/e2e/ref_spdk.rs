//! The reference SPDK build, for tests that check against it: where its
//! programs are, and a running `spdk_tgt`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bdevkit_jsonrpc::{Client, ClientError};
use serde_json::Value;

/// The reference build's program `build/<rel>` (`bin/spdk_tgt`,
/// `bin/spdk_dd`), if it is built (SPDK_REF_DIR, else
/// `~/.cache/bdevkit-ref-spdk`).
pub fn program(rel: &str) -> Option<PathBuf> {
    build_dir(&[rel]).map(|b| b.join(rel))
}

/// The reference build's `build/` folder, if every program of `need`
/// (paths below it: `bin/nvmf_tgt`, `examples/bdevperf`) is built.
pub fn build_dir(need: &[&str]) -> Option<PathBuf> {
    let root = std::env::var_os("SPDK_REF_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/bdevkit-ref-spdk"))
        })?;
    let b = root.join("build");
    need.iter().all(|rel| b.join(rel).is_file()).then_some(b)
}

/// Where the reference SPDK build keeps `spdk_tgt`, if it is built.
pub fn spdk_tgt() -> Option<PathBuf> {
    program("bin/spdk_tgt")
}

/// A running `spdk_tgt`, killed (SIGKILL) on drop.
pub struct Spdk {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Spdk {
    /// `spdk_tgt --json config` on a socket in `dir`; waits until it
    /// answers (SPDK answers only once the config is loaded).
    pub fn start(exe: &Path, dir: &Path, name: &str, config: &Path) -> Spdk {
        let socket = dir.join(format!("{name}.sock"));
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(exe)
            .current_dir(dir)
            .args([
                "--no-huge",
                "-s",
                "1024",
                "-m",
                "0x1",
                "--disable-cpumask-locks",
                "-r",
            ])
            .arg(&socket)
            .arg("--json")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spdk_tgt starts");
        let mut s = Spdk { child, socket, log };
        let start = Instant::now();
        loop {
            if let Some(st) = s.child.try_wait().unwrap() {
                panic!(
                    "spdk_tgt {name} exited ({st}) loading our config:\n{}",
                    s.log()
                );
            }
            if let Ok(mut c) = Client::connect_unix(&s.socket) {
                c.set_timeout(Some(Duration::from_secs(30)));
                if c.call("spdk_get_version", None).is_ok() {
                    return s;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "spdk_tgt {name} did not come up:\n{}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its RPC socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Calls `method`, panicking (with the log) on an error.
    pub fn ok(&self, method: &str, params: Option<Value>) -> Value {
        let mut c = Client::connect_unix(&self.socket).unwrap();
        c.set_timeout(Some(Duration::from_secs(30)));
        match c.call(method, params) {
            Ok(v) => v,
            Err(ClientError::Rpc(e)) => panic!("spdk_tgt {method}: {e:?}\n{}", self.log()),
            Err(e) => panic!("spdk_tgt {method}: {e:?}\n{}", self.log()),
        }
    }

    /// SIGINT (SPDK's clean shutdown), then wait for the exit.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-INT")
            .arg(self.child.id().to_string())
            .status();
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "spdk_tgt did not stop:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Spdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `nvmf_tgt` of the reference build, loaded with a config
/// whose TCP listener is `port`; killed (SIGKILL) on drop, which prints its
/// log when the test is failing.
pub struct NvmfTgt {
    child: Child,
    log: PathBuf,
}

impl NvmfTgt {
    /// `nvmf_tgt --json config` on core 0, without hugepages, its RPC
    /// socket and log in `dir`; waits until it listens on `port`.
    pub fn start(exe: &Path, dir: &Path, config: &Path, port: u16) -> NvmfTgt {
        let log = dir.join("nvmf_tgt.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(exe)
            .args([
                "--no-huge",
                "-s",
                "2048",
                "-m",
                "0x1",
                "--disable-cpumask-locks",
                "-r",
            ])
            .arg(dir.join("nvmf_tgt.sock"))
            .arg("--json")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("nvmf_tgt starts");
        let mut t = NvmfTgt { child, log };
        let end = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let gone = t.child.try_wait().unwrap();
            assert!(gone.is_none(), "nvmf_tgt exited:\n{}", t.log());
            assert!(
                Instant::now() < end,
                "nvmf_tgt did not listen:\n{}",
                t.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        t
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NvmfTgt {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("nvmf_tgt log:\n{}", self.log());
        }
    }
}

/// Runs `exe args` to its end (killed after `timeout`): whether it
/// succeeded, and its stdout and stderr.
pub fn run(exe: &Path, args: &[&str], timeout: Duration) -> (bool, String) {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("SPDK binary starts");
    let end = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// SPDK's bdevperf (`build/examples/bdevperf` of the build folder `spdk`)
/// on core 1 with `config`: 2 s of 4 KiB verify at QD 16. Panics, saying
/// `what`, unless it succeeds on `Nvme0n1`.
pub fn spdk_bdevperf_verifies(spdk: &Path, config: &Path, what: &str) {
    let (ok, out) = run(
        &spdk.join("examples/bdevperf"),
        &[
            "--no-huge",
            "-s",
            "2048",
            "-m",
            "0x2",
            "--disable-cpumask-locks",
            "--json",
            config.to_str().unwrap(),
            "-q",
            "16",
            "-o",
            "4096",
            "-w",
            "verify",
            "-t",
            "2",
        ],
        Duration::from_secs(60),
    );
    assert!(
        ok && out.contains("Nvme0n1"),
        "SPDK bdevperf {what}:\n{out}"
    );
}
