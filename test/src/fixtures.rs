//! Base bdevs for module tests: malloc bdevs (512-byte blocks) created and
//! deleted in one call, the setup of a virtual bdev module tested over them
//! ([`OverMalloc`]), a read left in flight ([`read_in_background`]), a
//! base removed under one ([`remove_base_under_read`]), and a bdev filled
//! with a pattern ([`fill`]) or read whole ([`contents`]).

use std::cell::Cell;
use std::rc::Rc;

use bdevkit::bdev::module::ModuleDef;
use bdevkit::bdev::{BdevChannel, BdevManager, IoStatus};
use bdevkit::dma::DmaBuf;
use bdevkit_jsonrpc::MethodRegistry;
use bdevkit_malloc::MallocCreateParams;

use crate::env::wait_for;
use crate::rpc::{self, RegisterRpcs};
use crate::TestEnv;

/// A virtual bdev module tested over malloc bases (delay, error, split),
/// named by its `MODULE_DEF`: `OverMalloc(bdevkit_delay::MODULE_DEF)`.
#[derive(Debug, Clone, Copy)]
pub struct OverMalloc(pub ModuleDef<MethodRegistry, bdevkit_jsonrpc::Error>);

impl OverMalloc {
    /// A one-core environment with the malloc module and this one.
    #[must_use]
    pub fn env(&self) -> TestEnv {
        TestEnv::with_modules("0x1", &[bdevkit_malloc::register, self.0.register])
    }

    /// A registry with malloc's methods and this module's
    /// ([`rpc::registry`]).
    #[must_use]
    pub fn registry(&self, mgr: &BdevManager) -> MethodRegistry {
        let rpcs: [RegisterRpcs; 2] = [bdevkit_malloc::rpc::register_rpcs, self.0.register_rpcs];
        rpc::registry(mgr, &rpcs)
    }
}

/// Submits a one-block read of 512 bytes at `offset_blocks` with `tag` on
/// `ch`; its completion sets the returned cell.
///
/// # Panics
/// When no I/O can be allocated or the submission is refused.
pub fn read_in_background(
    ch: &BdevChannel,
    offset_blocks: u64,
    tag: u64,
) -> Rc<Cell<Option<IoStatus>>> {
    let got = Rc::new(Cell::new(None));
    let g = Rc::clone(&got);
    let mut io = ch.alloc_io().expect("an I/O from the pool");
    io.read(offset_blocks, 1, DmaBuf::new(512).expect("a buffer"))
        .set_tag(tag)
        .on_done_closure(move |io| g.set(Some(io.status())));
    if ch.submit(io).is_err() {
        panic!("read at {offset_blocks} refused");
    }
    got
}

/// Writes blocks `from..from + blocks` of the 512-byte-block bdev `name`
/// with [`crate::conformance::pattern`] (seeded by block ^ `seed`), in
/// chunks of 64 blocks.
///
/// # Panics
/// When the bdev cannot be opened or a write fails.
pub async fn fill(mgr: &BdevManager, name: &str, from: u64, blocks: u64, seed: u64) {
    let d = mgr
        .open(name, true, |_| {})
        .unwrap_or_else(|e| panic!("open {name}: {e}"));
    let ch = d
        .get_io_channel()
        .expect("invariant: a channel on this thread");
    let mut off = from;
    while off < from + blocks {
        let n = 64.min(from + blocks - off);
        let len = usize::try_from(n * 512).expect("invariant: small chunk");
        let data = crate::conformance::pattern(len, off ^ seed);
        ch.write(off, n, data)
            .await
            .unwrap_or_else(|e| panic!("write {name} at {off}: {}", e.error));
        off += n;
    }
}

/// The first `blocks` 512-byte blocks of `name` (opened read-only), read
/// in chunks of 64 blocks.
///
/// # Panics
/// When the bdev cannot be opened or a read fails.
pub async fn contents(mgr: &BdevManager, name: &str, blocks: u64) -> Vec<u8> {
    let d = mgr
        .open(name, false, |_| {})
        .unwrap_or_else(|e| panic!("open {name}: {e}"));
    let ch = d
        .get_io_channel()
        .expect("invariant: a channel on this thread");
    let mut out = Vec::new();
    let mut off = 0;
    while off < blocks {
        let n = 64.min(blocks - off);
        let len = usize::try_from(n * 512).expect("invariant: small chunk");
        let buf = DmaBuf::new(len).expect("invariant: small buffer");
        let b = ch
            .read(off, n, buf)
            .await
            .unwrap_or_else(|e| panic!("read {name} at {off}: {}", e.error));
        out.extend_from_slice(&b);
        off += n;
    }
    out
}

/// Creates the malloc bdev `name` of `blocks` 512-byte blocks (the malloc
/// module must be registered).
///
/// # Panics
/// When the bdev cannot be created (a test setup error).
pub fn malloc(mgr: &BdevManager, name: &str, blocks: u64) {
    bdevkit_malloc::create(mgr, MallocCreateParams::new(name, 512, blocks))
        .unwrap_or_else(|e| panic!("create malloc {name}: {e}"));
}

/// Deletes the malloc bdev `name` and waits (on the reactor) until it is
/// gone.
///
/// # Panics
/// When the delete fails or takes longer than 10 s.
pub async fn delete_malloc(mgr: &BdevManager, name: &str) {
    let (tx, rx) = std::sync::mpsc::channel();
    bdevkit_malloc::delete(mgr, name, move |r| {
        let _ = tx.send(r.is_ok());
    });
    assert!(
        wait_for(60, || rx.try_recv() == Ok(true)).await,
        "delete {name}"
    );
}

/// Deletes the malloc bdev `base` of the virtual bdev `vbdev` while a read
/// of `vbdev` is in flight, and checks the cascade: the read completes
/// with `expect`, and once the test's channel and descriptor are gone the
/// base's deletion finishes and `vbdev` is gone too. `arm` runs once the
/// channel exists, before the read (to have it held, say).
///
/// # Panics
/// When a step fails or takes longer than 60 s.
pub async fn remove_base_under_read(
    mgr: &BdevManager,
    vbdev: &str,
    base: &str,
    arm: impl FnOnce(),
    expect: IoStatus,
) {
    let desc = mgr
        .open(vbdev, true, |_| {})
        .unwrap_or_else(|e| panic!("open {vbdev}: {e}"));
    let ch = desc.get_io_channel().expect("a channel");
    arm();
    let read = read_in_background(&ch, 0, 1);
    let (tx, rx) = std::sync::mpsc::channel();
    bdevkit_malloc::delete(mgr, base, move |r| {
        let _ = tx.send(r.is_ok());
    });
    assert!(
        wait_for(60, || read.get() == Some(expect)).await,
        "read of {vbdev}: {:?}",
        read.get()
    );
    drop(ch);
    drop(desc);
    assert!(
        wait_for(60, || rx.try_recv() == Ok(true)).await,
        "delete {base}"
    );
    assert!(mgr.get(vbdev).is_none(), "{vbdev} still registered");
}
