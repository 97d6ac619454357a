//! Base bdevs for module tests: malloc bdevs (512-byte blocks) created and
//! deleted in one call.

use bdevkit::bdev::BdevManager;
use bdevkit_malloc::MallocCreateParams;

use crate::env::wait_for;

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
