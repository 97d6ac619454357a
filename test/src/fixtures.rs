//! Base bdevs for module tests: malloc bdevs (512-byte blocks) created and
//! deleted in one call; a bdev filled with a pattern, or read whole.

use bdevkit::bdev::BdevManager;
use bdevkit::dma::DmaBuf;
use bdevkit_malloc::MallocCreateParams;

use crate::env::wait_for;

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
