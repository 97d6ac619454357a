//! Fixed-count I/O loop on one bdev, one core, polling:
//! `io_path [null|malloc|passthru|error|lvol|lvol-thin|uring|nvme|nvme-spin] [QD] [COUNT] [read|write]`. Prints
//! ns per I/O. Run it under callgrind with two counts and divide the
//! difference in instructions by the difference in I/Os for a repeatable
//! per-I/O cost (`bench/callgrind_io_path.sh`).
//!
//! Kinds: `null` and `malloc` bdevs; `passthru` and `error`, those virtual
//! bdevs over a null bdev (what the stacking costs: the difference to
//! `null`); `lvol` and `lvol-thin`, a thick or thin lvol (4 MiB clusters)
//! on a malloc bdev (the lvol's cost: the difference to `malloc`);
//! `uring`, a uring bdev over a file in
//! `/dev/shm` (`IO_PATH_FILE` names another; the kernel's share of the
//! work is not counted by callgrind, so the count is the module's ring
//! code, the bdev layer and the loop); `nvme`, the nvme module over an
//! emulated controller with a null namespace that runs inline (inside the
//! driver's doorbell writes, on the reactor's core: deterministic, and
//! callgrind can leave the device's share out by toggling collection in
//! the emulator's `run_inline`); `nvme-spin`, the same over a controller
//! thread that spins on a core of its own (`IO_PATH_EMU_CPU`, default 1)
//! while the reactor runs on core 0: the IOPS figure.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bdevkit::bdev::{BdevChannel, BdevIo, BdevManager, IoCompletion};
use bdevkit::dma::DmaBuf;
use bdevkit::thread::{Runtime, RuntimeOptions, ThreadHandle};
use bdevkit_nvme_driver::emu::{EmuKind, EmuNamespace, EmuOptions};

struct Loop {
    ch: BdevChannel,
    me: RefCell<Option<Rc<dyn IoCompletion>>>,
    left: Cell<u64>,
    inflight: Cell<u64>,
    write: bool,
    rng: Cell<u64>,
    blocks: u64,
    done: RefCell<Option<mpsc::Sender<()>>>,
}

impl Loop {
    fn issue(&self, buf: DmaBuf) {
        let io = self.ch.alloc_io().expect("pool sized for the queue depth");
        self.reissue(io, buf);
    }

    /// Fills `io` (new or just completed) and submits it.
    fn reissue(&self, mut io: BdevIo, buf: DmaBuf) {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        let off = u64::try_from((u128::from(x) * u128::from(self.blocks)) >> 64).unwrap_or(0);
        if self.write {
            io.write(off, 1, buf);
        } else {
            io.read(off, 1, buf);
        }
        if let Some(h) = self.me.borrow().as_ref() {
            io.on_done(Rc::clone(h));
        }
        if self.ch.submit(io).is_err() {
            panic!("submit failed");
        }
    }
}

impl IoCompletion for Loop {
    fn io_done(&self, mut io: BdevIo) {
        let buf = io.take_buf().expect("buffer back");
        if self.left.get() > 0 {
            self.left.set(self.left.get() - 1);
            // Reuse the completed I/O: no trip through the pool.
            self.reissue(io, buf);
        } else {
            drop(io);
            self.inflight.set(self.inflight.get() - 1);
            if self.inflight.get() == 0 {
                if let Some(tx) = self.done.borrow_mut().take() {
                    let _ = tx.send(());
                }
                self.me.borrow_mut().take();
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map_or("null", String::as_str).to_string();
    let qd: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(128);
    let count: u64 = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let write = args.get(4).is_some_and(|s| s == "write");
    // Interrupt mode keeps idle spinning out of callgrind's counts.
    let interrupt_mode = std::env::var_os("IO_PATH_INTERRUPT").is_some();
    let rt = Runtime::start(RuntimeOptions {
        interrupt_mode,
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let mgr = BdevManager::default();
    bdevkit_null::register(&mgr);
    bdevkit_malloc::register(&mgr);
    bdevkit_passthru::register(&mgr);
    bdevkit_error::register(&mgr);
    bdevkit_uring::register(&mgr);
    bdevkit_nvme::register(&mgr);
    bdevkit_lvol::register(&mgr);
    let blocks = 65536;
    let (name, temp) = create(&rt.app_thread(), &mgr, &kind, blocks);
    let (tx, rx) = mpsc::channel();
    let m = mgr.clone();
    let start = rt
        .app_thread()
        .run_sync(move || {
            let desc = m.open(&name, true, |_| {}).expect("open");
            let ch = desc.get_io_channel().expect("channel");
            std::mem::forget(desc);
            let l = Rc::new(Loop {
                ch,
                me: RefCell::new(None),
                left: Cell::new(count.saturating_sub(qd)),
                inflight: Cell::new(qd),
                write,
                rng: Cell::new(0x1234_5678_9abc_def1),
                blocks,
                done: RefCell::new(Some(tx)),
            });
            *l.me.borrow_mut() = Some(Rc::clone(&l) as Rc<dyn IoCompletion>);
            let start = Instant::now();
            for _ in 0..qd {
                l.issue(DmaBuf::new(4096).expect("buf"));
            }
            start
        })
        .expect("app thread");
    rx.recv().expect("done");
    let el = start.elapsed();
    if let Some(f) = temp {
        let _ = std::fs::remove_file(f);
    }
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let ns = el.as_nanos() as f64 / count as f64;
    println!(
        "{count} I/Os at QD {qd}: {ns:.1} ns per I/O, {:.2} M IOPS",
        1e3 / ns
    );
    drop(rt);
}

/// Creates the bdev of `kind` with `blocks` 4 KiB blocks; its name, and
/// the file made for it (to remove at the end).
fn create(
    app: &ThreadHandle,
    mgr: &BdevManager,
    kind: &str,
    blocks: u64,
) -> (String, Option<String>) {
    let m = mgr.clone();
    if kind == "uring" {
        let (path, temp) = match std::env::var("IO_PATH_FILE") {
            Ok(p) => (p, None),
            Err(_) => {
                let p = format!("/dev/shm/io_path-{}.img", std::process::id());
                let f = std::fs::File::create(&p).expect("file in /dev/shm");
                f.set_len(blocks * 4096).expect("file size");
                (p.clone(), Some(p))
            }
        };
        let p = path.clone();
        app.run_sync(move || {
            let mut params = bdevkit_uring::UringCreateParams::new("B", p);
            params.block_size = Some(4096);
            bdevkit_uring::create(&m, params).expect("uring");
        })
        .expect("app thread");
        return ("B".into(), temp);
    }
    if matches!(kind, "lvol" | "lvol-thin") {
        let thin = kind == "lvol-thin";
        // A malloc base with room for the store's metadata cluster, 4 MiB
        // clusters, one lvol of exactly `blocks` blocks (thick: every
        // cluster allocated; thin: allocated by a first write of each).
        return app
            .block_on(move || async move {
                let p = bdevkit_malloc::MallocCreateParams::new("B", 4096, blocks + 4096);
                bdevkit_malloc::create(&m, p).expect("malloc");
                let args = bdevkit_lvol::CreateLvstore {
                    bdev_name: "B".into(),
                    opts: bdevkit_lvol::LvsOptions {
                        cluster_size: 4 << 20,
                        ..bdevkit_lvol::LvsOptions::new("lvs")
                    },
                    md_page_size: 0,
                };
                bdevkit_lvol::create_lvstore(&m, args)
                    .await
                    .expect("lvstore");
                let o = bdevkit_lvol::LvolOptions {
                    name: "lv".into(),
                    size_bytes: blocks * 4096,
                    thin,
                    clear_method: bdevkit_blobstore::ClearMethod::Default,
                    uuid: None,
                };
                let name =
                    bdevkit_lvol::create_lvol(&m, &bdevkit_lvol::LvsRef::Name("lvs".into()), o)
                        .await
                        .expect("lvol");
                (name, None)
            })
            .expect("app thread");
    }
    if matches!(kind, "null" | "malloc" | "passthru" | "error") {
        let k = kind.to_string();
        let name = app
            .run_sync(move || match k.as_str() {
                "malloc" => {
                    let p = bdevkit_malloc::MallocCreateParams::new("B", 4096, blocks);
                    bdevkit_malloc::create(&m, p).expect("malloc");
                    "B".to_string()
                }
                other => {
                    let p = bdevkit_null::NullCreateParams::new("B", 4096, blocks);
                    bdevkit_null::create(&m, p).expect("null");
                    match other {
                        "passthru" => {
                            let p = bdevkit_passthru::PassthruCreateParams::new("B", "P");
                            bdevkit_passthru::create(&m, p).expect("passthru")
                        }
                        "error" => {
                            let p = bdevkit_error::ErrorCreateParams::new("B");
                            bdevkit_error::create(&m, p).expect("error");
                            "EE_B".to_string()
                        }
                        _ => "B".to_string(),
                    }
                }
            })
            .expect("app thread");
        return (name, None);
    }
    let spin = match kind {
        "nvme" => false,
        "nvme-spin" => true,
        k => panic!("unknown kind {k}: null, malloc, passthru, error, uring, nvme or nvme-spin"),
    };
    let cpu = std::env::var("IO_PATH_EMU_CPU")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let opts = EmuOptions {
        namespaces: vec![EmuNamespace {
            nsid: 1,
            kind: EmuKind::Null,
            block_size: 4096,
            num_blocks: blocks,
        }],
        spin,
        cpu: spin.then_some(cpu),
        ..EmuOptions::default()
    };
    let (tx, rx) = mpsc::channel();
    app.run_sync(move || {
        if spin {
            bdevkit_nvme::emu_start(&m, "emu", opts).expect("emulated controller");
        } else {
            bdevkit_nvme::emu_start_inline(&m, "emu", opts).expect("emulated controller");
        }
        let args = bdevkit_nvme::AttachArgs::pcie("Nvme0", "emu:emu");
        bdevkit_nvme::attach(
            &m,
            args,
            Box::new(move |r| {
                let _ = tx.send(r.map_err(|e| e.to_string()));
            }),
        );
    })
    .expect("app thread");
    let names = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("attach finished")
        .expect("attach");
    (names.into_iter().next().expect("a namespace bdev"), None)
}
