//! Test support for the bdev modules over kernel files (`aio`, `uring`):
//! a [`Backend`] describing the module under test, the files and devices
//! the tests need ([`TempFile`], [`LoopDevice`], [`SmallTmpfs`]), the
//! scenarios every such module runs (conformance, verify, durability of
//! flush, delete with I/O in flight, rescan, end of file inside the bdev,
//! an unlinked file, `ENOSPC`, the shared delete/rescan handlers, a loop
//! device, zero allocations per I/O, a permission error), and the per-I/O
//! bench driver ([`qd_bench`]).
//!
//! A module's tests define its `Backend` once (in `tests/common/mod.rs`)
//! and get the `#[test]` functions of the shared scenarios from
//! [`kernel_tests!`](crate::kernel_tests) (and
//! [`kernel_alloc_free_test!`](crate::kernel_alloc_free_test), in a
//! binary of its own); each scenario first skips, with the reason, where
//! the module cannot run ([`Backend::available`]).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bdevkit::bdev::{Bdev, BdevEvent, BdevManager, IoStatus};
use bdevkit::dma::DmaBuf;
use bdevkit_jsonrpc::RpcError;
use serde_json::{json, Value};

use crate::conformance::{self, pattern, DeleteFn};
use crate::env::wait_for;
use crate::rpc::{self, RegisterRpcs};
use crate::steady::{self, MEASURED};
use crate::{sleep_ms, verify, TestEnv};

mod bench;
mod files;

pub use bench::{env_u64, qd_bench};
pub use files::{LoopDevice, SmallTmpfs, TempFile};

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
    /// The backend of module `name`: always available (else set
    /// `available`), deleting through the bdev layer ([`delete_bdev`]).
    #[must_use]
    pub const fn new(
        name: &'static str,
        register: fn(&BdevManager),
        register_rpcs: RegisterRpcs,
        create: CreateFn,
    ) -> Backend {
        Backend {
            name,
            available: always_available,
            register,
            register_rpcs,
            create,
            delete: delete_bdev,
        }
    }

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

    /// Creates bdev `name` over `path` through `bdev_<module>_create`, with
    /// the params `extra` besides name and filename (an object: `{}` for
    /// none); checks that the answer is the name and returns the bdev.
    ///
    /// # Panics
    /// When the create fails.
    pub fn rpc_create(&self, env: &TestEnv, name: &str, path: &str, extra: Value) -> Bdev {
        let mut params = json!({"filename": path, "name": name});
        if let (Some(p), Some(x)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(x.clone());
        }
        let method = format!("bdev_{}_create", self.name);
        assert_eq!(self.rpc(env, &method, params), Ok(json!(name)));
        env.mgr().get(name).expect("the created bdev")
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

fn always_available() -> Result<(), String> {
    Ok(())
}

/// Deletes bdev `name`, whatever its module, the way every kernel-file
/// module's `delete` does (`bdevkit_kfile::delete`: unregister it by name
/// for its module); `NotFound` when there is no such bdev.
pub fn delete_bdev(
    mgr: &BdevManager,
    name: &str,
    done: Box<dyn FnOnce(bdevkit::Result<()>) + Send>,
) {
    match mgr.get(name) {
        Some(b) => mgr.unregister_by_name(name, b.module_name(), done),
        None => done(Err(bdevkit::Error::NotFound(name.to_string()))),
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
        assert!(wait_for(60, || removed.load(Ordering::SeqCst) > 0).await);
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
        env.run(move |_| async move { wait_for(60, || resized.load(Ordering::SeqCst) == 1).await })
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
    assert!(env.run(move |_| async move { wait_for(60, || mgr.get("kf_rs").is_none()).await }));
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

/// The shared `bdev_<name>_delete` and `bdev_<name>_rescan` handlers on
/// names that are not bdevs of the module answer `-19` "No such device"
/// (SPDK's codes), and params that do not decode SPDK's -32603.
pub fn delete_and_rescan_of_unknown_bdevs(b: &Backend) {
    if b.skip() {
        return;
    }
    let env = b.env("0x1");
    for verb in ["delete", "rescan"] {
        let method = format!("bdev_{}_{verb}", b.name);
        assert_eq!(
            b.rpc(&env, &method, json!({"name": "nope"})),
            Err(RpcError::new(-19, "No such device")),
            "{method}"
        );
        for bad in [json!({}), json!({"name": "nope", "bogus": 1})] {
            assert_eq!(
                b.rpc(&env, &method, bad),
                Err(RpcError::decode_failed()),
                "{method}"
            );
        }
    }
}

/// On a loop device with 4 KiB logical sectors over a tmpfs file (needs
/// root and the loop driver; skips with the reason otherwise): the
/// geometry comes from the device (`BLKSSZGET`, `BLKGETSIZE64`), a
/// smaller block size is refused through the create handler (its answer
/// ends with "Invalid argument"), `required_alignment` follows the block
/// size, the module's own `check` passes on the bdev, and so does the
/// conformance suite. `b` may create with module-specific params and
/// register with module options.
pub fn loop_device_with_4k_sectors(b: &Backend, check: fn(&Bdev)) {
    if b.skip() {
        return;
    }
    let lo = match LoopDevice::new(b.name, 8 << 20, 4096) {
        Ok(l) => l,
        Err(e) => {
            println!("skipped: no loop device: {e}");
            return;
        }
    };
    let env = b.env("0x1");
    let small = json!({"name": "lo_small", "filename": lo.dev, "block_size": 512});
    let r = b.rpc(&env, &format!("bdev_{}_create", b.name), small);
    assert!(
        r.as_ref()
            .is_err_and(|e| e.message.ends_with("Invalid argument")),
        "{r:?}"
    );
    let (dev, create, delete) = (lo.dev.clone(), b.create, b.delete);
    env.run(move |mgr| async move {
        let bdev = create(&mgr, "lo", &dev, None);
        assert_eq!(
            (bdev.block_size(), bdev.num_blocks()),
            (4096, 2048),
            "geometry from the device"
        );
        assert_eq!(bdev.props().required_alignment, 12);
        check(&bdev);
        conformance::run(&mgr, "lo", Some(delete)).await;
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

/// `bdev_<name>_create` over a file the daemon may not read (run through
/// [`as_nobody`] as test `test`) answers `expect`.
///
/// # Panics
/// When the answer differs.
pub fn create_without_permission(b: &Backend, test: &str, expect: RpcError) {
    let b = *b;
    as_nobody(&b, test, move |path| {
        let env = b.env("0x1");
        let r = b.rpc(
            &env,
            &format!("bdev_{}_create", b.name),
            json!({"filename": path, "name": "np"}),
        );
        assert_eq!(r, Err(expect));
    });
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
/// `read_past_end_of_shrunk_file_fails_cleanly`,
/// `file_unlinked_under_the_bdev_keeps_working`,
/// `enospc_reaches_the_io_status` and
/// `delete_and_rescan_of_unknown_bdevs` (each the function of that name in
/// [`kernel`](crate::kernel), except the two conformance runs).
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

        #[test]
        fn enospc_reaches_the_io_status() {
            $crate::kernel::enospc_reaches_the_io_status(&$backend);
        }

        #[test]
        fn delete_and_rescan_of_unknown_bdevs() {
            $crate::kernel::delete_and_rescan_of_unknown_bdevs(&$backend);
        }
    };
}

/// The zero-allocation test of a kernel-file module for the [`Backend`]
/// `$backend`: installs [`CountingAlloc`](crate::steady::CountingAlloc)
/// as the global allocator, so invoke it in a test binary of its own,
/// inside its `#[cfg(test)] mod tests`. It defines
/// `steady_state_io_allocates_nothing` ([`steady_state_io_allocates_nothing`]).
#[macro_export]
macro_rules! kernel_alloc_free_test {
    ($backend:path) => {
        #[global_allocator]
        static GLOBAL: $crate::steady::CountingAlloc = $crate::steady::CountingAlloc;

        #[test]
        fn steady_state_io_allocates_nothing() {
            $crate::kernel::steady_state_io_allocates_nothing(&$backend);
        }
    };
}
