//! Test support for the bdev modules over kernel files (`aio`, `uring`):
//! a [`Backend`] describing the module under test, the files and devices
//! the tests need ([`TempFile`], [`LoopDevice`], [`SmallTmpfs`]), the
//! scenarios every such module runs (conformance, verify, durability of
//! flush, delete with I/O in flight, rescan, end of file inside the bdev,
//! an unlinked file, `ENOSPC`, zero allocations per I/O, a permission
//! error), and the per-I/O bench driver ([`qd_bench`]).
//!
//! A module's tests define its `Backend` once (in `tests/common/mod.rs`)
//! and get the `#[test]` functions of the shared scenarios from
//! [`kernel_tests!`](crate::kernel_tests); each scenario first skips, with
//! the reason, where the module cannot run ([`Backend::available`]).

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdevkit::bdev::{
    Bdev, BdevChannel, BdevEvent, BdevIo, BdevManager, BdevOptions, IoCompletion, IoStatus,
};
use bdevkit::dma::DmaBuf;
use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};
use bdevkit_jsonrpc::RpcError;
use serde_json::{json, Value};

use crate::conformance::{self, pattern, DeleteFn};
use crate::env::wait_for;
use crate::rpc::{self, RegisterRpcs};
use crate::steady::{self, MEASURED};
use crate::{sleep_ms, verify, TestEnv};

/// Creates bdev `name` over the file `path` with the module's defaults
/// (block size: the given one, else the default); panics on failure.
pub type CreateFn = fn(mgr: &BdevManager, name: &str, path: &str, block_size: Option<u32>) -> Bdev;

/// A kernel-file bdev module under test.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    /// Module name (`aio`): RPC names `bdev_<name>_*`, temporary file names.
    pub name: &'static str,
    /// Whether the module can run in this process; the reason when not.
    pub available: fn() -> Result<(), String>,
    /// The module's `register`.
    pub register: fn(&BdevManager),
    /// The module's `rpc::register_rpcs`.
    pub register_rpcs: RegisterRpcs,
    /// Creates a bdev.
    pub create: CreateFn,
    /// Deletes a bdev (for the conformance suite).
    pub delete: DeleteFn,
}

impl Backend {
    /// Whether a test must skip; prints the reason when it must.
    #[must_use]
    pub fn skip(&self) -> bool {
        match (self.available)() {
            Ok(()) => false,
            Err(e) => {
                println!("skipped: {} not available: {e}", self.name);
                true
            }
        }
    }

    /// A test runtime on `mask` with this module registered.
    #[must_use]
    pub fn env(&self, mask: &str) -> TestEnv {
        TestEnv::with_modules(mask, &[self.register])
    }

    /// Calls one of the module's RPC handlers in-process on `env`'s app
    /// thread; returns its answer.
    pub fn rpc(&self, env: &TestEnv, method: &str, params: Value) -> Result<Value, RpcError> {
        rpc::call_blocking(env, &[self.register_rpcs], method, params)
    }

    /// A zero-filled file of `size` bytes in `dir`, named after the module.
    #[must_use]
    pub fn temp_file(&self, dir: &str, size: u64) -> TempFile {
        TempFile::new(dir, self.name, size)
    }

    /// Checks bdev `name`'s saved config entry: `bdev_<module>_create`
    /// with exactly the params `keys`, in that order, and the bdev's UUID.
    /// Then the entry recreates the bdev: deleted with
    /// `bdev_<module>_delete` and created again from the saved params
    /// through the same handler, it has the same UUID.
    ///
    /// # Panics
    /// When a check fails.
    pub fn recreate_from_config(&self, env: &TestEnv, name: &str, keys: &[&str]) {
        let b = env.mgr().get(name).expect("the bdev");
        let cfg = b.write_config_json().expect("a config entry");
        let create = format!("bdev_{}_create", self.name);
        assert_eq!(cfg["method"], create.as_str());
        let saved: Vec<&str> = cfg["params"]
            .as_object()
            .expect("params")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(saved, keys);
        assert_eq!(cfg["params"]["uuid"], json!(b.uuid().to_string()));
        let delete = format!("bdev_{}_delete", self.name);
        assert_eq!(
            self.rpc(env, &delete, json!({"name": name})),
            Ok(json!(true))
        );
        assert!(env.mgr().get(name).is_none());
        assert_eq!(
            self.rpc(env, &create, cfg["params"].clone()),
            Ok(json!(name))
        );
        assert_eq!(env.mgr().get(name).expect("recreated").uuid(), b.uuid());
    }

    /// Creates bdev `name` over a fresh `size`-byte file in `dir` and runs
    /// the body built by `f` on the app thread of a one-core runtime.
    fn with_bdev<R, Fut, F>(&self, dir: &str, size: u64, name: &'static str, f: F) -> R
    where
        R: Send + 'static,
        Fut: std::future::Future<Output = R> + 'static,
        F: FnOnce(BdevManager, Bdev, String) -> Fut + Send + 'static,
    {
        let file = self.temp_file(dir, size);
        let env = self.env("0x1");
        let path = file.path();
        let create = self.create;
        env.run(move |mgr| async move {
            let b = create(&mgr, name, &path, None);
            f(mgr, b, path).await
        })
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A zero-filled file, removed on drop.
#[derive(Debug)]
pub struct TempFile(pub PathBuf);

impl TempFile {
    /// A file of `size` bytes in `dir`, named `bdevkit-<tag>-<pid>-<n>`.
    ///
    /// # Panics
    /// When the file cannot be created.
    #[must_use]
    pub fn new(dir: &str, tag: &str, size: u64) -> TempFile {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = PathBuf::from(dir).join(format!("bdevkit-{tag}-{}-{n}", std::process::id()));
        File::create(&p)
            .and_then(|f| f.set_len(size))
            .unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
        TempFile(p)
    }

    /// The path as a string.
    #[must_use]
    pub fn path(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }

    /// Sets the file's length (grows with zeroes or truncates).
    ///
    /// # Panics
    /// When the file cannot be opened or resized.
    pub fn set_len(&self, size: u64) {
        OpenOptions::new()
            .write(true)
            .open(&self.0)
            .and_then(|f| f.set_len(size))
            .unwrap_or_else(|e| panic!("resize {}: {e}", self.0.display()));
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// A loop device over a fresh tmpfs file; detached and removed on drop.
#[derive(Debug)]
pub struct LoopDevice {
    /// The device path (`/dev/loopN`).
    pub dev: String,
    file: PathBuf,
}

impl LoopDevice {
    /// A `size`-byte loop device with `sector`-byte logical sectors over a
    /// file named after `tag` (needs root and the loop driver).
    ///
    /// # Errors
    /// Why there is none (for the skip message).
    pub fn new(tag: &str, size: u64, sector: u32) -> Result<LoopDevice, String> {
        let file = PathBuf::from(format!(
            "/dev/shm/bdevkit-{tag}-loop-{}",
            std::process::id()
        ));
        File::create(&file)
            .and_then(|f| f.set_len(size))
            .map_err(|e| e.to_string())?;
        let out = Command::new("losetup")
            .args(["-f", "--show", "--sector-size", &sector.to_string()])
            .arg(&file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            let _ = fs::remove_file(&file);
            return Err(format!(
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(LoopDevice { dev, file })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = fs::remove_file(&self.file);
    }
}

/// A 64 KiB tmpfs mounted on a fresh directory; unmounted on drop.
#[derive(Debug)]
pub struct SmallTmpfs(pub PathBuf);

impl SmallTmpfs {
    /// Mounts it, the directory named after `tag` (needs root).
    ///
    /// # Errors
    /// Why it cannot be mounted (for the skip message).
    pub fn new(tag: &str) -> Result<SmallTmpfs, String> {
        let dir = std::env::temp_dir().join(format!("bdevkit-{tag}-enospc-{}", std::process::id()));
        fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            let _ = fs::remove_dir(&dir);
            return Err(format!(
                "mount: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallTmpfs(dir))
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = fs::remove_dir(&self.0);
    }
}

/// Creates bdev `name` over a fresh 4 MiB file in `dir` (tmpfs or a disk
/// file system), runs the module's own `check` on it, then the
/// conformance suite, deleting the bdev at the end.
pub fn conformance(b: &Backend, dir: &str, name: &'static str, check: fn(&Bdev)) {
    if b.skip() {
        return;
    }
    let delete = b.delete;
    b.with_bdev(dir, 4 << 20, name, move |mgr, bdev, _| async move {
        check(&bdev);
        conformance::run(&mgr, name, Some(delete)).await;
    });
}

/// Write/read/compare from two reactors on a bdev with 4 KiB blocks.
pub fn verify_on_two_cores(b: &Backend) {
    if b.skip() {
        return;
    }
    let f = b.temp_file("/dev/shm", 8 << 20);
    let env = b.env("0x3");
    let (path, create) = (f.path(), b.create);
    env.run(move |mgr| async move {
        create(&mgr, "kf_v", &path, Some(4096));
    });
    let r = verify::run(&env, "kf_v", 2, 16, 40);
    assert_eq!(r.mismatches, 0);
    assert_eq!(r.errors, 0);
    assert_eq!(r.verified, 2 * 16 * 40);
}

/// Data written and flushed through the bdev is in the file, read back
/// through a plain file handle (on the root disk, not tmpfs).
pub fn flushed_data_is_in_the_file(b: &Backend) {
    if b.skip() {
        return;
    }
    let f = b.temp_file("/var/tmp", 1 << 20);
    let env = b.env("0x1");
    let (path, create) = (f.path(), b.create);
    let expect = env.run(move |mgr| async move {
        create(&mgr, "kf_dur", &path, None);
        let desc = mgr.open("kf_dur", true, |_| {}).expect("open");
        let ch = desc.get_io_channel().expect("channel");
        let data = pattern(64 * 512, 42);
        let expect = data.to_vec();
        ch.write(100, 64, data).await.expect("write");
        ch.flush(0, 2048).await.expect("flush");
        expect
    });
    let mut got = vec![0u8; expect.len()];
    let mut file = File::open(&f.0).expect("open the file");
    file.seek(SeekFrom::Start(100 * 512)).expect("seek");
    file.read_exact(&mut got).expect("read the file");
    assert_eq!(got, expect, "flushed data read through a plain file handle");
}

/// Deleting a bdev with 64 writes in flight: every I/O completes before
/// the bdev is destructed, and the delete finishes once the last
/// descriptor is closed.
pub fn delete_while_io_runs(b: &Backend) {
    if b.skip() {
        return;
    }
    let delete = b.delete;
    b.with_bdev("/var/tmp", 8 << 20, "kf_del", move |mgr, _, _| async move {
        let removed = Arc::new(AtomicU32::new(0));
        let r2 = Arc::clone(&removed);
        let desc = mgr
            .open("kf_del", true, move |e| {
                if e == BdevEvent::Remove {
                    r2.fetch_add(1, Ordering::SeqCst);
                }
            })
            .expect("open");
        let ch = desc.get_io_channel().expect("channel");
        let finished = Arc::new(AtomicU32::new(0));
        for i in 0..64u64 {
            let mut io = ch.alloc_io_async().await;
            let fin = Arc::clone(&finished);
            io.write(i * 128, 128, pattern(128 * 512, i))
                .on_done_closure(move |io| {
                    assert_ne!(io.status(), IoStatus::Pending);
                    fin.fetch_add(1, Ordering::SeqCst);
                });
            ch.submit(io).expect("submit");
        }
        let (tx, rx) = std::sync::mpsc::channel();
        delete(
            &mgr,
            "kf_del",
            Box::new(move |r| {
                let _ = tx.send(r.is_ok());
            }),
        );
        assert!(wait_for(10, || removed.load(Ordering::SeqCst) > 0).await);
        drop(ch);
        drop(desc);
        let mut deleted = None;
        for _ in 0..10_000 {
            if let Ok(ok) = rx.try_recv() {
                deleted = Some(ok);
                break;
            }
            sleep_ms(1).await;
        }
        assert_eq!(deleted, Some(true), "delete finished");
        assert_eq!(
            finished.load(Ordering::SeqCst),
            64,
            "every I/O completed before destruct"
        );
        assert!(mgr.get("kf_del").is_none());
    });
}

/// `bdev_<name>_rescan` after the file grew (a resize event), shrank
/// under an open descriptor (`-EBUSY`, as SPDK) and became empty (the
/// bdev is hot-removed).
pub fn rescan_after_growing_and_emptying_the_file(b: &Backend) {
    if b.skip() {
        return;
    }
    let f = b.temp_file("/dev/shm", 1 << 20);
    let env = b.env("0x1");
    let resized = Arc::new(AtomicU32::new(0));
    let r2 = Arc::clone(&resized);
    let (path, create) = (f.path(), b.create);
    let desc = env.run(move |mgr| async move {
        create(&mgr, "kf_rs", &path, None);
        mgr.open("kf_rs", false, move |e| {
            if e == BdevEvent::Resize {
                r2.fetch_add(1, Ordering::SeqCst);
            }
        })
        .expect("open")
    });
    let rescan = format!("bdev_{}_rescan", b.name);
    f.set_len(3 << 20);
    assert_eq!(
        b.rpc(&env, &rescan, json!({"name": "kf_rs"})),
        Ok(json!(true))
    );
    assert_eq!(env.mgr().get("kf_rs").expect("bdev").num_blocks(), 6144);
    let mgr = env.mgr().clone();
    assert!(
        env.run(move |_| async move { wait_for(10, || resized.load(Ordering::SeqCst) == 1).await })
    );
    // Shrinking under an open descriptor is refused (SPDK: -EBUSY).
    f.set_len(1 << 20);
    assert_eq!(
        b.rpc(&env, &rescan, json!({"name": "kf_rs"})),
        Err(RpcError::new(-16, "Device or resource busy"))
    );
    drop(desc);
    // Size 0 hot-removes the bdev.
    f.set_len(0);
    assert_eq!(
        b.rpc(&env, &rescan, json!({"name": "kf_rs"})),
        Ok(json!(true))
    );
    assert!(env.run(move |_| async move { wait_for(10, || mgr.get("kf_rs").is_none()).await }));
}

/// The file shrinks under the bdev: a read that straddles the new end
/// gets a short transfer, is resubmitted for the rest, hits end of file
/// and fails cleanly with `EIO`; I/O inside the file still works.
pub fn read_past_end_of_shrunk_file_fails_cleanly(b: &Backend) {
    if b.skip() {
        return;
    }
    b.with_bdev("/dev/shm", 1 << 20, "kf_eof", |mgr, _, path| async move {
        let desc = mgr.open("kf_eof", true, |_| {}).expect("open");
        let ch = desc.get_io_channel().expect("channel");
        OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len((1 << 20) - 1536))
            .expect("shrink the file");
        let e = ch
            .read(2044, 4, DmaBuf::new(2048).expect("buf"))
            .await
            .expect_err("a read past the end of the file fails");
        assert!(
            matches!(e.error, bdevkit::Error::Io(IoStatus::Errno(libc::EIO))),
            "{e:?}"
        );
        ch.read(0, 8, DmaBuf::new(4096).expect("buf"))
            .await
            .expect("read inside the file");
    });
}

/// The file is unlinked after the bdev opened it: the bdev keeps reading,
/// writing and flushing the open file.
pub fn file_unlinked_under_the_bdev_keeps_working(b: &Backend) {
    if b.skip() {
        return;
    }
    b.with_bdev("/dev/shm", 1 << 20, "kf_unl", |mgr, _, path| async move {
        fs::remove_file(&path).expect("unlink");
        let desc = mgr.open("kf_unl", true, |_| {}).expect("open");
        let ch = desc.get_io_channel().expect("channel");
        let buf = ch.write(5, 2, pattern(1024, 3)).await.expect("write");
        let got = ch
            .read(5, 2, DmaBuf::new(1024).expect("buf"))
            .await
            .expect("read");
        assert_eq!(got[..], buf[..]);
        ch.flush(0, 1).await.expect("flush");
    });
}

/// A real kernel error reaches the I/O: a sparse file on a 64 KiB tmpfs
/// (needs root; skips with the reason otherwise) runs out of space, and
/// writes past that fail with `ENOSPC` in `IoStatus::Errno` while reads,
/// flushes and the bdev itself keep working.
pub fn enospc_reaches_the_io_status(b: &Backend) {
    if b.skip() {
        return;
    }
    let small = match SmallTmpfs::new(b.name) {
        Ok(s) => s,
        Err(e) => {
            println!("skipped: cannot mount a small tmpfs: {e}");
            return;
        }
    };
    let file = small.0.join("disk");
    // 1 MiB of address space, 64 KiB of room.
    File::create(&file)
        .and_then(|f| f.set_len(1 << 20))
        .expect("create the file");
    let env = b.env("0x1");
    let (path, create) = (file.to_string_lossy().into_owned(), b.create);
    env.run(move |mgr| async move {
        create(&mgr, "full", &path, None);
        let desc = mgr.open("full", true, |_| {}).expect("open");
        let ch = desc.get_io_channel().expect("channel");
        let mut status = IoStatus::Success;
        for i in 0..32u64 {
            if let Err(e) = ch.write(i * 64, 64, pattern(32 << 10, i)).await {
                status = match e.error {
                    bdevkit::Error::Io(s) => s,
                    other => panic!("unexpected {other:?}"),
                };
                break;
            }
        }
        assert_eq!(status, IoStatus::Errno(libc::ENOSPC));
        // The bdev still serves what it can.
        ch.read(0, 64, DmaBuf::new(32 << 10).expect("buf"))
            .await
            .expect("read");
        ch.flush(0, 1).await.expect("flush");
    });
}

/// After warm-up, [`MEASURED`] reads and writes at queue depth 32 on a
/// bdev over a tmpfs file cause zero heap allocations: the module's
/// submission, kernel round trip, reaping and batch completion allocate
/// nothing per I/O in steady state. The test binary must install
/// [`CountingAlloc`](crate::steady::CountingAlloc) as its global
/// allocator.
pub fn steady_state_io_allocates_nothing(b: &Backend) {
    if b.skip() {
        return;
    }
    let f = b.temp_file("/dev/shm", 4 << 20);
    let env = b.env("0x1");
    let (path, create) = (f.path(), b.create);
    let r = steady::measure(&env, "kf_steady", move |mgr| {
        create(mgr, "kf_steady", &path, Some(4096));
    });
    assert_eq!(r.failures, 0);
    assert_eq!(
        r.allocs, 0,
        "{} heap allocations during {MEASURED} steady-state I/Os",
        r.allocs
    );
}

/// Set in the child process of [`as_nobody`]: the file it must fail on.
const NOBODY_FILE: &str = "BDEVKIT_NOPERM_FILE";

/// Root ignores file mode bits, so a permission check runs in a child
/// process (this test binary again, running only test `test`) started as
/// uid/gid 65534, against a root-owned 0600 file: opening it there fails
/// with `EACCES` exactly as for an unprivileged daemon. Call it as the
/// whole body of test `test`: in the child it runs `child` with the
/// file's path (which asserts what the module answers); in the parent it
/// starts the child and checks that `child` passed. Skips where the child
/// cannot run.
///
/// # Panics
/// When `child` fails.
pub fn as_nobody(b: &Backend, test: &str, child: impl FnOnce(&str)) {
    if b.skip() {
        return;
    }
    if let Ok(path) = std::env::var(NOBODY_FILE) {
        child(&path);
        println!("NOPERM-CHILD-OK");
        return;
    }
    let f = b.temp_file("/dev/shm", 1 << 20);
    fs::set_permissions(&f.0, fs::Permissions::from_mode(0o600)).expect("chmod 0600");
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new(exe)
        .args(["--exact", test, "--nocapture"])
        .env(NOBODY_FILE, f.path())
        .uid(65534)
        .gid(65534)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            println!("skipped: cannot start the test binary as uid 65534: {e}");
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() && stdout.contains("Permission denied (os error 13)") {
        println!("skipped: uid 65534 cannot run the test binary here");
        return;
    }
    assert!(
        out.status.success() && (stdout.contains("NOPERM-CHILD-OK") || stdout.contains("skipped")),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `u64` from the environment variable `key`, else `default`.
#[must_use]
pub fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Bytes per bench I/O.
const IO_BYTES: usize = 4096;

/// Keeps `qd` random 4 KiB reads or writes in flight on one bdev.
struct BenchDriver {
    me: Weak<BenchDriver>,
    ch: BdevChannel,
    write: bool,
    slots: u64,
    rng: Cell<u64>,
    done: Cell<u64>,
    errors: Cell<u64>,
    inflight: Cell<u64>,
    stop: Cell<bool>,
}

impl BenchDriver {
    fn next_slot(&self) -> u64 {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x % self.slots
    }

    fn issue(&self, buf: DmaBuf) {
        let Some(mut io) = self.ch.alloc_io() else {
            self.inflight.set(self.inflight.get() - 1);
            return;
        };
        let blocks = (IO_BYTES / 512) as u64;
        let off = self.next_slot() * blocks;
        if self.write {
            io.write(off, blocks, buf);
        } else {
            io.read(off, blocks, buf);
        }
        io.on_done(self.me.upgrade().expect("driver alive"));
        if self.ch.submit(io).is_err() {
            self.inflight.set(self.inflight.get() - 1);
        }
    }
}

impl IoCompletion for BenchDriver {
    fn io_done(&self, mut io: BdevIo) {
        if io.status() == IoStatus::Success {
            self.done.set(self.done.get() + 1);
        } else {
            self.errors.set(self.errors.get() + 1);
        }
        let buf = io.take_buf();
        drop(io);
        match buf {
            Some(buf) if !self.stop.get() => self.issue(buf),
            _ => self.inflight.set(self.inflight.get() - 1),
        }
    }
}

/// User + system CPU seconds of this process so far.
fn cpu_secs() -> f64 {
    let s = fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = s
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Per-I/O cost of a module through the bdev API on one polling reactor,
/// to compare with fio on the same file: `BENCH_QD` (32) random 4 KiB
/// `BENCH_RW` (`randread`, or `randwrite`) I/Os in flight for
/// `BENCH_SECS` (5) on core `BENCH_CORE` (0), over the existing file
/// `BENCH_FILE` (skips without it). Prints one line:
/// `<module> <rw> qd=<n> iops=<x> cpu=<percent> errors=<n>`.
///
/// # Panics
/// When the runtime cannot start or the bdev cannot be created.
pub fn qd_bench(b: &Backend) {
    let Ok(file) = std::env::var("BENCH_FILE") else {
        println!("skipped: set BENCH_FILE");
        return;
    };
    if b.skip() {
        return;
    }
    let qd = env_u64("BENCH_QD", 32);
    let secs = env_u64("BENCH_SECS", 5);
    let core = u32::try_from(env_u64("BENCH_CORE", 0)).unwrap_or(0);
    let rw = std::env::var("BENCH_RW").unwrap_or_else(|_| "randread".into());
    let write = rw == "randwrite";
    let rt = Runtime::start(RuntimeOptions {
        cpumask: CpuSet::single(core),
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let mgr = BdevManager::new(BdevOptions::default());
    (b.register)(&mgr);
    let create = b.create;
    let (iops, errors, cpu) = rt
        .app_thread()
        .block_on(move || async move {
            create(&mgr, "bench", &file, None);
            let desc = mgr.open("bench", true, |_| {}).expect("open");
            let ch = desc.get_io_channel().expect("channel");
            let slots = ch.bdev().num_blocks() / (IO_BYTES / 512) as u64;
            let d = Rc::new_cyclic(|me| BenchDriver {
                me: me.clone(),
                ch,
                write,
                slots,
                rng: Cell::new(0x9e37_79b9_7f4a_7c15),
                done: Cell::new(0),
                errors: Cell::new(0),
                inflight: Cell::new(0),
                stop: Cell::new(false),
            });
            let cpu0 = cpu_secs();
            let t0 = Instant::now();
            for _ in 0..qd {
                d.inflight.set(d.inflight.get() + 1);
                d.issue(DmaBuf::new(IO_BYTES).expect("buf"));
            }
            wait_for(secs + 5, || t0.elapsed() >= Duration::from_secs(secs)).await;
            let n = d.done.get();
            let el = t0.elapsed().as_secs_f64();
            let cpu = (cpu_secs() - cpu0) / el * 100.0;
            d.stop.set(true);
            wait_for(10, || d.inflight.get() == 0).await;
            (n as f64 / el, d.errors.get(), cpu)
        })
        .expect("app thread");
    println!(
        "{} {rw} qd={qd} iops={iops:.0} cpu={cpu:.0} errors={errors}",
        b.name
    );
    rt.shutdown();
}

/// The `#[test]` functions of the scenarios every kernel-file module runs
/// alike, for the [`Backend`] `$backend`; `$on_tmpfs` (a `fn(&Bdev)`) is
/// the module's own check of a fresh bdev on tmpfs before the conformance
/// suite runs on it. Invoke it inside the test binary's
/// `#[cfg(test)] mod tests`:
///
/// ```ignore
/// bdevkit_test::kernel_tests!(AIO, on_tmpfs);
/// ```
///
/// It defines `conformance_on_tmpfs`, `conformance_on_root_disk`,
/// `verify_on_two_cores`, `flushed_data_is_in_the_file`,
/// `delete_while_io_runs`, `rescan_after_growing_and_emptying_the_file`,
/// `read_past_end_of_shrunk_file_fails_cleanly` and
/// `file_unlinked_under_the_bdev_keeps_working` (each the function of that
/// name in [`kernel`](crate::kernel), except the two conformance runs).
#[macro_export]
macro_rules! kernel_tests {
    ($backend:path, $on_tmpfs:expr) => {
        #[test]
        fn conformance_on_tmpfs() {
            $crate::kernel::conformance(&$backend, "/dev/shm", "kf_shm", $on_tmpfs);
        }

        #[test]
        fn conformance_on_root_disk() {
            $crate::kernel::conformance(&$backend, "/var/tmp", "kf_disk", |_| {});
        }

        #[test]
        fn verify_on_two_cores() {
            $crate::kernel::verify_on_two_cores(&$backend);
        }

        #[test]
        fn flushed_data_is_in_the_file() {
            $crate::kernel::flushed_data_is_in_the_file(&$backend);
        }

        #[test]
        fn delete_while_io_runs() {
            $crate::kernel::delete_while_io_runs(&$backend);
        }

        #[test]
        fn rescan_after_growing_and_emptying_the_file() {
            $crate::kernel::rescan_after_growing_and_emptying_the_file(&$backend);
        }

        #[test]
        fn read_past_end_of_shrunk_file_fails_cleanly() {
            $crate::kernel::read_past_end_of_shrunk_file_fails_cleanly(&$backend);
        }

        #[test]
        fn file_unlinked_under_the_bdev_keeps_working() {
            $crate::kernel::file_unlinked_under_the_bdev_keeps_working(&$backend);
        }
    };
}
