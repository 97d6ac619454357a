//! End-to-end harness: the real `bdev_tgt` binary on a private socket.
//!
//! # Where the binaries come from
//!
//! `env!("CARGO_BIN_EXE_...")` only exists inside the package that owns a
//! binary, so this crate finds `bdev_tgt` and `bdev_rpc` on disk instead:
//!
//! 1. `$BDEVKIT_BIN_DIR/<name>` when that variable is set;
//! 2. otherwise next to the running test executable's directory: tests run
//!    from `<target>/<profile>/deps/`, binaries live in `<target>/<profile>/`
//!    — whatever `CARGO_TARGET_DIR` and profile are in use.
//!
//! `cargo test --workspace` (and `cargo nextest run --workspace`) build
//! the binaries before running any test, because their own packages have
//! integration tests. When running this crate alone, build them first:
//! `cargo build -p bdevkit-bdev-tgt -p bdevkit-bdev-rpc -p bdevperf` (the
//! README test runs bdevperf too); a missing binary fails the test with
//! that hint.
//!
//! # `spdk-rpc`
//!
//! SPDK's Python client is found by [`crate::spdk_rpc::spdk_rpc`]
//! (`$SPDK_RPC`, the repository's `.venv`, `PATH`; a missing client fails
//! the test unless `BDEVKIT_SKIP_SPDK_RPC=1`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use bdevkit_jsonrpc::{Client, ClientError, RpcError};
use serde_json::Value;

/// Longest any single wait in this harness may take: reached only when
/// something is broken.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Path of a workspace binary (`bdev_tgt`, `bdev_rpc`, `bdevperf`); see the module docs.
///
/// # Panics
/// When the binary is not there, with the command that builds it.
#[must_use]
pub fn bin(name: &str) -> PathBuf {
    let dir = match std::env::var_os("BDEVKIT_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let exe = std::env::current_exe().expect("invariant: test executable path");
            let deps = exe.parent().expect("invariant: exe has a directory");
            if deps.ends_with("deps") {
                deps.parent().unwrap_or(deps).to_path_buf()
            } else {
                deps.to_path_buf()
            }
        }
    };
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} not found: build it first with \
         `cargo build -p bdevkit-bdev-tgt -p bdevkit-bdev-rpc -p bdevperf` \
         (cargo test --workspace does), or set BDEVKIT_BIN_DIR",
        p.display()
    );
    p
}

/// A fresh directory under /tmp (short: socket paths must fit 107 bytes).
///
/// # Panics
/// When /tmp is not writable.
#[must_use]
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("bdk-")
        .tempdir_in("/tmp")
        .expect("invariant: /tmp is writable")
}

/// A running `bdev_tgt` (or another RPC-serving program of the
/// workspace), killed (SIGKILL) on drop if still running.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    /// Its RPC socket.
    pub socket: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `bdev_tgt --interrupt-mode -r <private socket> <args>` and
    /// waits until it answers `spdk_get_version`.
    ///
    /// # Panics
    /// When it exits or does not answer in time (its log is included).
    #[must_use]
    pub fn start(args: &[&str]) -> Daemon {
        let dir = temp_dir();
        let socket = dir.path().join("tgt.sock");
        Self::start_at(dir, socket, args)
    }

    /// Like [`Daemon::start`] on a given socket path, keeping `dir` alive
    /// as long as the daemon.
    ///
    /// # Panics
    /// As [`Daemon::start`].
    #[must_use]
    pub fn start_at(dir: tempfile::TempDir, socket: PathBuf, args: &[&str]) -> Daemon {
        Self::start_program_at("bdev_tgt", dir, socket, args)
    }

    /// Like [`Daemon::start`] for another program of the workspace that
    /// serves RPC with `--interrupt-mode -r <socket>` (`bdevperf -z`).
    ///
    /// # Panics
    /// As [`Daemon::start`].
    #[must_use]
    pub fn start_program(program: &str, args: &[&str]) -> Daemon {
        let dir = temp_dir();
        let socket = dir.path().join("rpc.sock");
        Self::start_program_at(program, dir, socket, args)
    }

    fn start_program_at(
        program: &str,
        dir: tempfile::TempDir,
        socket: PathBuf,
        args: &[&str],
    ) -> Daemon {
        let (child, log) = spawn_program(program, dir.path(), &socket, args);
        let mut d = Daemon {
            child: Some(child),
            socket,
            log,
            _dir: dir,
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_wait() {
                panic!("bdev_tgt exited during start-up ({st}):\n{}", self.log());
            }
            if let Ok(mut c) = Client::connect_unix(&self.socket) {
                c.set_timeout(Some(TIMEOUT));
                if c.call("spdk_get_version", None).is_ok() {
                    return;
                }
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "bdev_tgt did not come up:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A new client connection.
    ///
    /// # Panics
    /// When the socket does not accept.
    #[must_use]
    pub fn client(&self) -> Client {
        let mut c = Client::connect_unix(&self.socket)
            .unwrap_or_else(|e| panic!("connect {}: {e}\n{}", self.socket.display(), self.log()));
        c.set_timeout(Some(TIMEOUT));
        c
    }

    /// Calls `method` on a new connection: the result or the error object.
    ///
    /// # Panics
    /// On transport failures (not on error replies).
    pub fn call(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        match self.client().call(method, params) {
            Ok(v) => Ok(v),
            Err(ClientError::Rpc(e)) => Err(e),
            Err(e) => panic!("{method}: transport error {e:?}\n{}", self.log()),
        }
    }

    /// Calls `method` and expects success.
    ///
    /// # Panics
    /// On an error reply.
    #[must_use]
    pub fn ok(&self, method: &str, params: Option<Value>) -> Value {
        self.call(method, params)
            .unwrap_or_else(|e| panic!("{method} failed: {e:?}"))
    }

    /// The daemon's stderr so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its exit status, if it exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends `signal` (a name such as `TERM`) with kill(1).
    ///
    /// # Panics
    /// When kill(1) cannot run.
    pub fn signal(&self, signal: &str) {
        if let Some(c) = &self.child {
            let st = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(c.id().to_string())
                .status()
                .expect("invariant: kill(1) runs");
            assert!(st.success(), "kill -{signal} failed");
        }
    }

    /// Waits for the daemon to exit.
    ///
    /// # Panics
    /// When it does not exit in time.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_wait() {
                self.child = None;
                return st;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "bdev_tgt did not exit:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then wait for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait_exit()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_tgt(dir: &Path, socket: &Path, args: &[&str]) -> (Child, PathBuf) {
    spawn_program("bdev_tgt", dir, socket, args)
}

fn spawn_program(program: &str, dir: &Path, socket: &Path, args: &[&str]) -> (Child, PathBuf) {
    let log = dir.join("tgt.log");
    let err = std::fs::File::create(&log).expect("invariant: log file in temp dir");
    let child = Command::new(bin(program))
        .arg("--interrupt-mode")
        .arg("-r")
        .arg(socket)
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("invariant: bdev_tgt starts");
    (child, log)
}

/// Runs `bdev_tgt` to completion (for start-up failures): exit status and
/// stderr.
///
/// # Panics
/// When it does not exit in time.
#[must_use]
pub fn run_tgt_to_exit(socket: &Path, args: &[&str]) -> (ExitStatus, String) {
    let dir = temp_dir();
    let (mut child, log) = spawn_tgt(dir.path(), socket, args);
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().ok().flatten() {
            return (st, std::fs::read_to_string(&log).unwrap_or_default());
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!(
                "bdev_tgt did not exit:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `<exe> <args>` with `stdin`, capturing its output.
///
/// # Panics
/// When the program cannot run.
#[must_use]
pub fn run(exe: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("invariant: piped stdin");
        w.write_all(input.as_bytes())
            .expect("invariant: child reads stdin");
    }
    child.wait_with_output().expect("invariant: child output")
}

/// stdout and stderr of `o`, for assertion messages.
#[must_use]
pub fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes raw bytes on a fresh connection, closes the write side, and
/// returns everything the server sent back before closing.
///
/// # Panics
/// When the socket does not accept.
#[must_use]
pub fn raw_exchange(socket: &Path, bytes: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(socket).expect("invariant: daemon socket accepts");
    s.set_read_timeout(Some(TIMEOUT)).ok();
    let mut w = s.try_clone().expect("invariant: clone unix stream");
    let data = bytes.to_vec();
    // Write from a thread: the server may stop reading (oversized
    // request) and close while we still write.
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&data);
        let _ = w.shutdown(std::net::Shutdown::Write);
    });
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let _ = writer.join();
    out
}

/// The first JSON value in `bytes`.
///
/// # Panics
/// When there is none.
#[must_use]
pub fn first_json(bytes: &[u8]) -> Value {
    let mut it = serde_json::Deserializer::from_slice(bytes).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => v,
        other => panic!(
            "no JSON value in {:?}: {other:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ),
    }
}
