//! The lvol module over bases that misbehave on purpose: a store whose
//! super block has a field this library does not support is not loaded at
//! all (nothing claimed, registered or written), and a thin cluster
//! allocation whose metadata write the base holds (an error bdev with a
//! `pending` injection) stalls only the writes to that cluster.
//!
//! Everything here waits on events and counts (the injection taken, I/Os
//! completed, clusters allocated), never on elapsed time.

#[cfg(test)]
mod common;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use bdevkit::bdev::{BdevManager, IoType};
    use bdevkit::dma::DmaBuf;
    use bdevkit::thread::{CpuSet, Thread, ThreadHandle};
    use bdevkit_error::{ErrorBdev, ErrorCreateParams, ErrorInjectParams};
    use bdevkit_error::{InjectErrorType, InjectIoType};
    use bdevkit_passthru::PassthruCreateParams;
    use bdevkit_test::env::wait_for;
    use bdevkit_test::{contents, malloc, TestEnv};
    use serde_json::Value;

    use crate::common::{lvol, store, MIB};

    /// Blocks (512 bytes) per 1 MiB cluster.
    const CL: u64 = MIB / 512;

    fn env(mask: &str) -> TestEnv {
        TestEnv::with_modules(
            mask,
            &[
                bdevkit_malloc::register,
                bdevkit_passthru::register,
                bdevkit_error::register,
                bdevkit_lvol::register,
            ],
        )
    }

    fn pattern(len: usize, seed: u64) -> DmaBuf {
        let mut b = DmaBuf::new(len).unwrap();
        for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
            *x = ((i as u64 * 7 + seed) % 251) as u8;
        }
        b
    }

    async fn stores(mgr: &BdevManager) -> Vec<Value> {
        bdevkit_lvol::get_lvstores(mgr, None).await.unwrap()
    }

    async fn allocated(mgr: &BdevManager, lvol: &str) -> u64 {
        mgr.get(lvol).unwrap().dump_info_json()["lvol"]["num_allocated_clusters"]
            .as_u64()
            .unwrap()
    }

    async fn examined(mgr: &BdevManager) {
        let (tx, rx) = std::sync::mpsc::channel();
        mgr.wait_for_examine(move || tx.send(()).unwrap());
        assert!(wait_for(60, || rx.try_recv().is_ok()).await);
    }

    async fn delete_passthru(mgr: &BdevManager, name: &str) {
        let (tx, rx) = std::sync::mpsc::channel();
        bdevkit_passthru::delete(mgr, name, move |r| tx.send(r.is_ok()).unwrap());
        assert!(wait_for(60, || rx.try_recv() == Ok(true)).await);
    }

    /// Sets the u32 at byte `off` of the super block on `bdev` (512-byte
    /// blocks, not claimed) and fixes the block's CRC-32C.
    async fn edit_super(mgr: &BdevManager, bdev: &str, off: usize, v: u32) {
        let d = mgr.open(bdev, true, |_| {}).unwrap();
        let ch = d.get_io_channel().unwrap();
        let mut b = ch.read(0, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
        let p = b.as_mut_slice();
        p[off..off + 4].copy_from_slice(&v.to_le_bytes());
        let crc = crc32c::crc32c(&p[..4092]);
        p[4092..].copy_from_slice(&crc.to_le_bytes());
        ch.write(0, 8, b).await.unwrap();
    }

    #[test]
    fn a_store_with_an_unsupported_super_block_field_is_not_loaded_at_all() {
        const IO_UNIT: usize = 88;
        const MD_PAGE: usize = 92;
        env("0x1").run(|mgr| async move {
            malloc(&mgr, "M0", 32 * MIB / 512);
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
            let uuid = store(&mgr, "PT0", "lvs0", 1 << 20).await;
            let vol = lvol(&mgr, "lvs0", "v", 4, false).await;
            {
                let d = mgr.open(&vol, true, |_| {}).unwrap();
                let ch = d.get_io_channel().unwrap();
                ch.write(64, 8, pattern(4096, 3)).await.unwrap();
            }
            // Unloaded cleanly with its base.
            delete_passthru(&mgr, "PT0").await;
            assert!(mgr.get(&vol).is_none());
            for (off, bad, good) in [(MD_PAGE, 8192, 4096), (IO_UNIT, 4096, 512)] {
                edit_super(&mgr, "M0", off, bad).await;
                let before = contents(&mgr, "M0", 32 * MIB / 512).await;
                bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
                examined(&mgr).await;
                // Not half-loaded: no store, no lvol, the base not claimed
                // (examine let it go), not a byte written.
                assert!(stores(&mgr).await.is_empty(), "field at {off} = {bad}");
                assert!(mgr.get(&vol).is_none() && mgr.get("lvs0/v").is_none());
                assert!(mgr.get("PT0").unwrap().claim().is_none());
                drop(mgr.open("PT0", true, |_| {}).unwrap());
                assert!(contents(&mgr, "M0", 32 * MIB / 512).await == before);
                delete_passthru(&mgr, "PT0").await;
                // With the field as this library writes it, the same store
                // loads with its lvol and data.
                edit_super(&mgr, "M0", off, good).await;
                bdevkit_passthru::create(&mgr, PassthruCreateParams::new("M0", "PT0")).unwrap();
                examined(&mgr).await;
                let s = stores(&mgr).await;
                assert_eq!(s.len(), 1);
                assert_eq!(s[0]["uuid"], uuid.as_str());
                let d = mgr.open("lvs0/v", false, |_| {}).unwrap();
                let ch = d.get_io_channel().unwrap();
                let got = ch.read(64, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
                assert_eq!(got.as_slice(), pattern(4096, 3).as_slice());
                drop((ch, d));
                delete_passthru(&mgr, "PT0").await;
            }
        });
    }

    /// The `pending` injection of `EE_M0` has taken the write it was armed
    /// for: that write is held.
    fn write_held(mgr: &BdevManager) -> bool {
        let eb = mgr.get("EE_M0").unwrap().ops_as::<ErrorBdev>().unwrap();
        eb.remaining(IoType::Write) == 0
    }

    fn hold_next_write(mgr: &BdevManager) {
        let mut p = ErrorInjectParams::new("EE_M0", InjectIoType::Write, InjectErrorType::Pending);
        p.num = Some(1);
        bdevkit_error::inject_error(mgr, &p).unwrap();
    }

    /// Writes `seed`'s pattern at `lba` of `lvol` from thread `t` (its own
    /// channel); `done` counts the successful completion.
    fn write_on(
        t: &ThreadHandle,
        mgr: &BdevManager,
        lvol: &str,
        lba: u64,
        seed: u64,
        done: &Arc<AtomicUsize>,
    ) {
        let (mgr, lvol, done) = (mgr.clone(), lvol.to_string(), Arc::clone(done));
        t.send_msg(move || {
            let t = Thread::current().expect("on a thread");
            t.spawn_local(async move {
                let d = mgr.open(&lvol, true, |_| {}).unwrap();
                let ch = d.get_io_channel().unwrap();
                ch.write(lba, 8, pattern(4096, seed)).await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            });
        })
        .unwrap();
    }

    async fn base_writes(mgr: &BdevManager) -> u64 {
        let (tx, rx) = futures::channel::oneshot::channel();
        mgr.get("M0")
            .unwrap()
            .get_iostat(move |s| tx.send(s.num_write_ops).unwrap());
        rx.await.unwrap()
    }

    #[test]
    fn a_held_cluster_allocation_stalls_only_the_writes_to_that_cluster() {
        let env = env("0x3");
        let cores = env.runtime().handle().cores();
        let other = env
            .runtime()
            .handle()
            .spawn_thread("other", Some(&CpuSet::single(cores[1])))
            .unwrap();
        let app = env.run(|_| async { Thread::current().unwrap().handle() });
        let on_other = other.clone();
        env.run(move |mgr| async move {
            let other = on_other;
            malloc(&mgr, "M0", 64 * MIB / 512);
            bdevkit_error::create(&mgr, ErrorCreateParams::new("M0")).unwrap();
            store(&mgr, "EE_M0", "lvs0", 1 << 20).await;
            let t = lvol(&mgr, "lvs0", "t", 16, true).await;
            let u = lvol(&mgr, "lvs0", "u", 16, true).await;
            let d = mgr.open(&t, true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            // Cluster 0 (and the extent page that maps clusters 0..512).
            ch.write(0, 8, pattern(4096, 1)).await.unwrap();
            assert_eq!(allocated(&mgr, &t).await, 1);
            let free0 = stores(&mgr).await[0]["free_clusters"].as_u64().unwrap();
            let w0 = base_writes(&mgr).await;

            // Hold the next base write: the metadata write that maps
            // cluster 5 of `t`, asked for by two channels on two reactors.
            hold_next_write(&mgr);
            let racing = Arc::new(AtomicUsize::new(0));
            write_on(&app, &mgr, &t, 5 * CL, 50, &racing);
            write_on(&other, &mgr, &t, 5 * CL + 8, 51, &racing);
            assert!(wait_for(60, || write_held(&mgr)).await);

            // While it is held: reads and writes of allocated clusters,
            // from both reactors, complete; so does an allocation in
            // another lvol (its own metadata).
            let others = Arc::new(AtomicUsize::new(0));
            for i in 0..16 {
                write_on(&app, &mgr, &t, 8 * i, 100 + i, &others);
                write_on(&other, &mgr, &t, 8 * i + 512, 200 + i, &others);
            }
            assert!(wait_for(60, || others.load(Ordering::SeqCst) == 32).await);
            for i in 0..16 {
                let got = ch.read(8 * i, 8, DmaBuf::new(4096).unwrap()).await.unwrap();
                assert_eq!(got.as_slice(), pattern(4096, 100 + i).as_slice());
            }
            let du = mgr.open(&u, true, |_| {}).unwrap();
            let chu = du.get_io_channel().unwrap();
            chu.write(2 * CL, 8, pattern(4096, 7)).await.unwrap();
            assert_eq!(allocated(&mgr, &u).await, 1);
            // The racing writes wait, and cluster 5 is not mapped yet.
            assert_eq!(racing.load(Ordering::SeqCst), 0);
            assert_eq!(allocated(&mgr, &t).await, 1);
            let zeros = ch
                .read(5 * CL, 16, DmaBuf::new(8192).unwrap())
                .await
                .unwrap();
            assert!(zeros.as_slice().iter().all(|&b| b == 0));

            // Released: both writes land in one cluster, allocated once.
            bdevkit_error::resume_pending(&mgr, "EE_M0").unwrap();
            assert!(wait_for(60, || racing.load(Ordering::SeqCst) == 2).await);
            assert_eq!(allocated(&mgr, &t).await, 2);
            let free1 = stores(&mgr).await[0]["free_clusters"].as_u64().unwrap();
            assert_eq!(
                free0 - free1,
                2,
                "cluster 5 of t and cluster 2 of u, once each"
            );
            for (off, seed) in [(0, 50), (8, 51)] {
                let got = ch
                    .read(5 * CL + off, 8, DmaBuf::new(4096).unwrap())
                    .await
                    .unwrap();
                assert_eq!(got.as_slice(), pattern(4096, seed).as_slice());
            }
            // Base writes since: the 32 data writes, u's extent page (a new
            // one: its first cluster) and root page, u's data write, t's one
            // extent-page rewrite for cluster 5 and the 2 racing data writes.
            let n = base_writes(&mgr).await - w0;
            assert_eq!(n, 32 + 3 + 1 + 2, "one metadata write maps cluster 5");
        });
        other
            .send_msg(|| {
                if let Some(t) = Thread::current() {
                    t.exit();
                }
            })
            .ok();
    }
}
