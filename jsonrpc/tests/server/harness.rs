//! Test harness: a server with a set of test methods, polled by a thread of its own, in a
//! unique temporary directory under /tmp.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bdevkit_jsonrpc::{
    decode_params, Client, MethodRegistry, Responder, RpcError, Server, ServerOptions, RUNTIME,
    STARTUP,
};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};

/// Generous: only reached when something is broken.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A fresh directory under /tmp, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let p = PathBuf::from(format!(
            "/tmp/bdevkit-jsonrpc-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&p).unwrap();
        TempDir(p)
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TypedParams {
    name: String,
    size: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DelayParams {
    ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BigParams {
    count: usize,
}

/// Register the test methods; returns the list where `park` leaves its responders.
pub fn register_test_methods(reg: &MethodRegistry) -> Arc<Mutex<Vec<Responder>>> {
    let both = STARTUP | RUNTIME;
    reg.register("echo", both, |p, r| r.ok(p.unwrap_or(Value::Null)))
        .unwrap();
    reg.register("fail_errno", both, |_, r| {
        r.err(RpcError::from_errno(libc::ENODEV))
    })
    .unwrap();
    reg.register("typed", both, |p, r| {
        match decode_params::<TypedParams>(p) {
            Ok(t) => r.ok(json!({"name": t.name, "size": t.size})),
            Err(_) => r.err(RpcError::decode_failed()),
        }
    })
    .unwrap();
    reg.register("delayed", both, |p, r| {
        let Ok(d) = decode_params::<DelayParams>(p) else {
            return r.err(RpcError::decode_failed());
        };
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(d.ms));
            r.ok(json!({"slept_ms": d.ms}));
        });
    })
    .unwrap();
    reg.register("drop_responder", both, |_, r| drop(r))
        .unwrap();
    reg.register("startup_only", STARTUP, |_, r| r.ok(json!(true)))
        .unwrap();
    reg.register("runtime_only", RUNTIME, |_, r| r.ok(json!(true)))
        .unwrap();
    let reg2 = reg.clone();
    reg.register("framework_start_init", STARTUP, move |_, r| {
        reg2.set_state(RUNTIME);
        r.ok(json!(true));
    })
    .unwrap();
    reg.register("big", both, |p, r| {
        let Ok(b) = decode_params::<BigParams>(p) else {
            return r.err(RpcError::decode_failed());
        };
        let pad = "x".repeat(1400);
        let v: Vec<Value> = (0..b.count)
            .map(|i| json!({"name": format!("Malloc{i}"), "pad": pad}))
            .collect();
        r.ok(Value::Array(v));
    })
    .unwrap();
    reg.register("spdk_get_version", both, |_, r| {
        r.ok(json!({"version": "bdevkit test", "fields": {"major": 0, "minor": 1, "patch": 0, "suffix": ""}}))
    })
    .unwrap();
    reg.register("bdev_get_bdevs", RUNTIME, |p, r| {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct P {
            name: Option<String>,
            #[expect(dead_code, reason = "accepted as SPDK does, unused by the fake")]
            timeout: Option<u64>,
        }
        match decode_params::<P>(p) {
            Ok(P { name: None, .. }) => r.ok(json!([])),
            Ok(P { name: Some(_), .. }) => r.err(RpcError::from_errno(libc::ENODEV)),
            Err(_) => r.err(RpcError::decode_failed()),
        }
    })
    .unwrap();
    let parked = Arc::new(Mutex::new(Vec::new()));
    let p2 = Arc::clone(&parked);
    reg.register("park", both, move |_, r| p2.lock().push(r))
        .unwrap();
    parked
}

/// A server on a unique unix socket, polled by its own thread until dropped.
pub struct TestServer {
    pub path: PathBuf,
    pub registry: MethodRegistry,
    pub parked: Arc<Mutex<Vec<Responder>>>,
    pub connections: Arc<AtomicUsize>,
    pub tcp_addr: Option<std::net::SocketAddr>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _dir: TempDir,
}

impl TestServer {
    pub fn start() -> Self {
        Self::start_with(|_| {})
    }

    pub fn start_with(f: impl FnOnce(&mut ServerOptions)) -> Self {
        let dir = TempDir::new();
        let path = dir.join("rpc.sock");
        let mut opts = ServerOptions {
            unix_path: Some(path.clone()),
            ..ServerOptions::default()
        };
        f(&mut opts);
        let registry = MethodRegistry::new();
        let parked = register_test_methods(&registry);
        let mut server = Server::bind(opts, registry.clone()).unwrap();
        let tcp_addr = server.tcp_local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(AtomicUsize::new(0));
        let (stop2, conns2) = (Arc::clone(&stop), Arc::clone(&connections));
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                server.poll_timeout(Some(Duration::from_millis(20)));
                conns2.store(server.connection_count(), Ordering::Release);
            }
        });
        TestServer {
            path,
            registry,
            parked,
            connections,
            tcp_addr,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub fn client(&self) -> Client {
        let mut c = Client::connect_unix(&self.path).unwrap();
        c.set_timeout(Some(TIMEOUT));
        c
    }

    pub fn raw(&self) -> RawConn {
        RawConn::connect(&self.path)
    }

    /// Wait until the server reports `n` open connections.
    pub fn wait_connections(&self, n: usize) {
        wait_until(|| self.connections.load(Ordering::Acquire) == n);
    }

    /// Wait until `n` responders are parked and take them.
    pub fn take_parked(&self, n: usize) -> Vec<Responder> {
        wait_until(|| self.parked.lock().len() >= n);
        std::mem::take(&mut *self.parked.lock())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Poll `cond` until it holds; panic after [`TIMEOUT`].
pub fn wait_until(mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < TIMEOUT, "condition not reached in time");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A bare socket, to check exact bytes on the wire.
pub struct RawConn {
    pub s: UnixStream,
    buf: Vec<u8>,
}

impl RawConn {
    pub fn connect(path: &Path) -> Self {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        RawConn { s, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// Read until a full line (ending in `\n`) is buffered and return it without the `\n`.
    pub fn line(&mut self) -> String {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return String::from_utf8(line[..i].to_vec()).unwrap();
            }
            let mut chunk = [0u8; 65536];
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed, buffered: {:?}", self.buf);
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Assert the server closes the connection with nothing more sent.
    pub fn expect_closed(&mut self) {
        let mut chunk = [0u8; 1024];
        let n = self.s.read(&mut chunk).unwrap();
        assert_eq!(n, 0, "expected close, got {:?}", &chunk[..n]);
        assert!(self.buf.is_empty());
    }

    /// Send a probe call and return its response line: proves everything sent before it was
    /// answered (responses to earlier sync requests come first).
    pub fn sync(&mut self) -> String {
        self.send(br#"{"jsonrpc":"2.0","method":"echo","id":"sync"}"#);
        self.line()
    }
}
