//! The conformance suite every bdev module runs against one of its bdevs.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bdevkit::bdev::{BdevChannel, BdevEvent, BdevManager, IoStatus, IoType};
use bdevkit::dma::DmaBuf;
use bdevkit::Error;

use crate::env::wait_for;

/// A module's delete function, e.g. `bdevkit_malloc::delete`.
pub type DeleteFn = fn(&BdevManager, &str, Box<dyn FnOnce(bdevkit::Result<()>) + Send>);

/// Fills a buffer with a pattern derived from `seed`.
///
/// # Panics
/// If the buffer cannot be allocated.
#[must_use]
pub fn pattern(len: usize, seed: u64) -> DmaBuf {
    let mut b = DmaBuf::new(len).expect("invariant: test buffer");
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in b.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    b
}

fn lcg(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *state >> 33
}

fn len_of(blocks: u64, bs: u32) -> usize {
    usize::try_from(blocks * u64::from(bs)).expect("invariant: test sizes fit usize")
}

/// Runs every check against the bdev `name` (writable, at least 64 blocks),
/// then, with `delete`, deletes it while a descriptor is open. Panics on
/// the first failed check, naming it.
///
/// # Panics
/// When a check fails.
pub async fn run(mgr: &BdevManager, name: &str, delete: Option<DeleteFn>) {
    let bdev = mgr
        .get(name)
        .unwrap_or_else(|| panic!("bdev {name} not found"));
    let bs = bdev.block_size();
    let blocks = bdev.num_blocks();
    assert!(blocks >= 64, "conformance needs at least 64 blocks");
    let info = bdev.info_json();
    assert_eq!(info["name"], name);
    assert!(info["supported_io_types"]["read"]
        .as_bool()
        .unwrap_or(false));

    let desc = mgr.open(name, true, |_| {}).expect("open read-write");
    let ch = desc.get_io_channel().expect("io channel");

    read_after_write(&ch, bs, blocks).await;
    range_checks(&ch, bs, blocks).await;
    if bdev.supports(IoType::WriteZeroes) {
        let buf = ch
            .write(3, 4, pattern(len_of(4, bs), 77))
            .await
            .expect("write before write_zeroes");
        ch.write_zeroes(3, 4).await.expect("write_zeroes");
        let got = ch.read(3, 4, buf).await.expect("read after write_zeroes");
        assert!(got.iter().all(|b| *b == 0), "write_zeroes left data");
    }
    if bdev.supports(IoType::Flush) {
        ch.flush(0, blocks).await.expect("flush");
    }
    if bdev.supports(IoType::Unmap) {
        ch.unmap(8, 8).await.expect("unmap");
    }
    if bdev.supports(IoType::Reset) {
        reset_with_io_in_flight(&ch, bs, blocks).await;
    }
    let config = serde_json::to_string(&mgr.config_json()).unwrap_or_default();
    assert!(
        config.contains(&format!("\"{name}\""))
            || bdev.write_config_json().is_some()
            || !bdev.aliases().is_empty(),
        "saved config does not mention {name}"
    );
    drop(ch);
    drop(desc);
    if let Some(delete) = delete {
        delete_with_open_descriptor(mgr, name, delete).await;
    }
}

async fn read_after_write(ch: &BdevChannel, bs: u32, blocks: u64) {
    let mut rng = 0x5eed_u64;
    for round in 0..24u64 {
        let n = 1 + lcg(&mut rng) % 8.min(blocks);
        let off = lcg(&mut rng) % (blocks - n + 1);
        let data = pattern(len_of(n, bs), round);
        let expect = data.to_vec();
        ch.write(off, n, data).await.expect("write");
        let got = ch
            .read(off, n, DmaBuf::new(len_of(n, bs)).expect("buf"))
            .await
            .expect("read");
        assert_eq!(&got[..], &expect[..], "read after write at {off}+{n}");
    }
    // Scattered buffers: two segments for one I/O.
    let mut io = ch.alloc_io_async().await;
    let (a, b) = (pattern(len_of(1, bs), 1001), pattern(len_of(2, bs), 1002));
    let mut expect = a.to_vec();
    expect.extend_from_slice(&b);
    io.writev(blocks - 3, 3, vec![a, b]);
    let done = ch.submit_async(io).expect("writev submit").await;
    assert_eq!(done.status(), IoStatus::Success, "writev");
    let got = ch
        .read(blocks - 3, 3, DmaBuf::new(len_of(3, bs)).expect("buf"))
        .await
        .expect("read after writev");
    assert_eq!(
        &got[..],
        &expect[..],
        "read after writev at the end of the bdev"
    );
}

async fn range_checks(ch: &BdevChannel, bs: u32, blocks: u64) {
    let mut io = ch.alloc_io_async().await;
    io.read(blocks, 1, DmaBuf::new(len_of(1, bs)).expect("buf"));
    let e = ch
        .submit(io)
        .expect_err("read past the end must be rejected");
    assert!(matches!(e.error, Error::OutOfRange { .. }), "{}", e.error);
    let mut io = e.io;
    io.write(blocks - 1, 2, DmaBuf::new(len_of(2, bs)).expect("buf"));
    assert!(
        ch.submit(io).is_err(),
        "write across the end must be rejected"
    );
    let mut io = ch.alloc_io_async().await;
    io.read(0, 2, DmaBuf::new(len_of(1, bs)).expect("buf"));
    assert!(
        matches!(
            ch.submit(io).map_err(|e| e.error),
            Err(Error::BufferTooSmall { .. })
        ),
        "short buffer must be rejected"
    );
}

async fn reset_with_io_in_flight(ch: &BdevChannel, bs: u32, blocks: u64) {
    let order = Rc::new(RefCell::new(Vec::new()));
    for i in 0..16u64 {
        let mut io = ch.alloc_io_async().await;
        let o = Rc::clone(&order);
        io.read(i % blocks, 1, DmaBuf::new(len_of(1, bs)).expect("buf"))
            .on_done_closure(move |io| {
                o.borrow_mut().push(io.status() == IoStatus::Success);
            });
        ch.submit(io).expect("read before reset");
    }
    let reset = ch.reset();
    reset.await.expect("reset");
    let reads = order.borrow().len();
    assert_eq!(reads, 16, "reset completed before the I/O in flight");
    // I/O flows after the reset.
    ch.read(0, 1, DmaBuf::new(len_of(1, bs)).expect("buf"))
        .await
        .expect("read after reset");
}

async fn delete_with_open_descriptor(mgr: &BdevManager, name: &str, delete: DeleteFn) {
    let removed = Arc::new(AtomicUsize::new(0));
    let r2 = Arc::clone(&removed);
    let desc = mgr
        .open(name, false, move |e| {
            if e == BdevEvent::Remove {
                r2.fetch_add(1, Ordering::SeqCst);
            }
        })
        .expect("open for delete");
    let done = Arc::new(AtomicBool::new(false));
    let result = Arc::new(Mutex::new(None));
    let (d2, res2) = (Arc::clone(&done), Arc::clone(&result));
    delete(
        mgr,
        name,
        Box::new(move |r| {
            *res2.lock().expect("lock") = Some(r.is_ok());
            d2.store(true, Ordering::SeqCst);
        }),
    );
    assert!(
        wait_for(60, || removed.load(Ordering::SeqCst) > 0).await,
        "no remove event for an open descriptor"
    );
    assert!(
        !done.load(Ordering::SeqCst),
        "delete finished with a descriptor open"
    );
    drop(desc);
    assert!(
        wait_for(60, || done.load(Ordering::SeqCst)).await,
        "delete never finished"
    );
    assert_eq!(*result.lock().expect("lock"), Some(true), "delete failed");
    assert!(
        mgr.get(name).is_none(),
        "bdev still registered after delete"
    );
}
