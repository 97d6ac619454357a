//! Power-cut tests of the lineage operations: snapshot, clone, inflate,
//! decouple, set_parent, snapshot delete (plain and merged), and the first
//! writes to a clone (copy-on-write), external-snapshot clones (create,
//! set_external_parent, copy-on-write from the device, snapshot, inflate,
//! decouple, merge), each cut at every write unit. After
//! each cut the surviving image must load (finishing or undoing an
//! interrupted snapshot operation), own every cluster once and leak none,
//! show the old or the new lineage as a whole (never a mix), read the old
//! or the new bytes through every blob, keep an acknowledged operation,
//! and keep working through a clean unload and reload.

mod common;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use crate::common::{check_invariants, run, state, Store};
    use bdevkit_blobstore::{
        BlobId, BlobOptions, Blobstore, ClearMethod, DeviceError, Error, ExternalDevice,
        InitOptions, LoadOptions, MemDevice, MemImage, ReadFuture,
    };
    use futures::future::LocalBoxFuture;
    use futures::FutureExt;

    const BLOCK: u32 = 512;
    const BLOCKS: u64 = 32 << 11; // 32 MiB
    const CLUSTER: u32 = 64 << 10;
    const BPC: u64 = (CLUSTER / BLOCK) as u64;
    const N: u64 = 8; // clusters per volume

    /// The blobs of the base store.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Ctx {
        /// Snapshot of v, holding clusters 0, 1, 3; parent of s2 and c.
        s1: BlobId,
        /// Snapshot of v after s1, holding 1 and 4; parent of v.
        s2: BlobId,
        /// The volume: own clusters 4 and 6.
        v: BlobId,
        /// A clone of s1 with its own cluster 0.
        c: BlobId,
        /// A thin volume with no parent: clusters 2 and 5.
        w: BlobId,
        /// A thick volume.
        t: BlobId,
        /// An esnap clone of [`EXT`] with its own cluster 1.
        x: BlobId,
        /// A clone of snapshot `xs` (an esnap clone of [`EXT`] holding
        /// cluster 2), with its own cluster 5.
        e: BlobId,
        xs: BlobId,
    }

    /// The external snapshot's id, as SPDK's lvol forms one.
    const EXT: &[u8] = b"0f0e0d0c-0b0a-4908-8706-050403020100\0";

    /// The external snapshot: `N` clusters of a pattern, read-only.
    struct Ext;

    impl ExternalDevice for Ext {
        fn block_size(&self) -> u32 {
            BLOCK
        }
        fn num_blocks(&self) -> u64 {
            N * BPC
        }
        fn read<'a>(&'a self, offset_blocks: u64, buf: &'a mut [u8]) -> ReadFuture<'a> {
            async move {
                if offset_blocks + buf.len() as u64 / u64::from(BLOCK) > N * BPC {
                    return Err(DeviceError::io());
                }
                for (i, x) in (0u64..).zip(buf.iter_mut()) {
                    *x = ((offset_blocks * 3 + i / 512) % 253) as u8 | 0x80;
                }
                Ok(())
            }
            .boxed_local()
        }
    }

    fn attach(bs: &Store) {
        bs.attach_external(EXT, Rc::new(Ext)).unwrap();
    }

    type Op = fn(Store, Ctx) -> LocalBoxFuture<'static, Result<(), Error>>;

    fn put(bs: &Store, id: BlobId, idx: u64, byte: u8) {
        let b = bs.open_blob(id).unwrap();
        run(b.write(idx * BPC + 8, &[byte; 4096])).unwrap();
    }

    fn snapshot(bs: &Store, id: BlobId) -> BlobId {
        run(bs.create_snapshot(id, &[("name".into(), b"snap\0".to_vec())])).unwrap()
    }

    fn base(clean: bool) -> (MemImage, Ctx) {
        let dev = Rc::new(MemDevice::new(BLOCK, BLOCKS));
        let bs = run(Blobstore::init(
            dev.clone(),
            &InitOptions {
                cluster_size: CLUSTER,
                ..InitOptions::default()
            },
        ))
        .unwrap();
        let thin = |n| BlobOptions {
            num_clusters: n,
            thin_provision: true,
            ..BlobOptions::default()
        };
        let v = run(bs.create_blob(&thin(N))).unwrap();
        for idx in [0, 1, 3u8] {
            put(&bs, v, u64::from(idx), 0x10 + idx);
        }
        let s1 = snapshot(&bs, v);
        for idx in [1, 4u8] {
            put(&bs, v, u64::from(idx), 0x20 + idx);
        }
        let s2 = snapshot(&bs, v);
        for idx in [4, 6u8] {
            put(&bs, v, u64::from(idx), 0x30 + idx);
        }
        let c = run(bs.create_clone(s1, &[])).unwrap();
        put(&bs, c, 0, 0x40);
        let w = run(bs.create_blob(&thin(N))).unwrap();
        for idx in [2, 5u8] {
            put(&bs, w, u64::from(idx), 0x50 + idx);
        }
        let t = run(bs.create_blob(&BlobOptions {
            num_clusters: 3,
            ..BlobOptions::default()
        }))
        .unwrap();
        put(&bs, t, 1, 0x61);
        attach(&bs);
        let esnap = || run(bs.create_esnap_clone(EXT, N, &[], ClearMethod::Default)).unwrap();
        let x = esnap();
        put(&bs, x, 1, 0x71);
        let e = esnap();
        put(&bs, e, 2, 0x72);
        let xs = snapshot(&bs, e);
        put(&bs, e, 5, 0x75);
        if clean {
            run(bs.unload()).unwrap();
        }
        (
            dev.image(),
            Ctx {
                s1,
                s2,
                v,
                c,
                w,
                t,
                x,
                e,
                xs,
            },
        )
    }

    /// Everything but the cluster numbers: sizes, flags, xattrs and the
    /// internal ones (the lineage), per blob.
    fn lineage(bs: &Store) -> BTreeMap<BlobId, String> {
        state(bs)
            .blobs
            .into_iter()
            .map(|(id, mut b)| {
                b.clusters.clear();
                (id, format!("{b:?} parent {:?}", bs.parent(id)))
            })
            .collect()
    }

    /// Every blob's bytes (a hash of each cluster).
    fn data(bs: &Store) -> BTreeMap<BlobId, Vec<u64>> {
        use std::hash::{Hash, Hasher};
        bs.blob_ids()
            .into_iter()
            .map(|id| {
                let b = bs.open_blob(id).unwrap();
                let mut buf = vec![0u8; CLUSTER as usize];
                let hashes = (0..b.num_clusters())
                    .map(|i| {
                        run(b.read(i * BPC, &mut buf)).unwrap();
                        let mut h = std::collections::hash_map::DefaultHasher::new();
                        buf.hash(&mut h);
                        h.finish()
                    })
                    .collect();
                (id, hashes)
            })
            .collect()
    }

    /// Loads the store and attaches the external snapshot.
    fn load(dev: Rc<MemDevice>) -> Store {
        let bs = run(Blobstore::load(dev, &LoadOptions::default())).expect("the store must load");
        attach(&bs);
        bs
    }

    /// Work after recovery: a write through a clone, a snapshot, a delete.
    fn exercise(bs: &Store, ctx: Ctx) {
        let ids = bs.blob_ids();
        let v = if ids.contains(&ctx.v) { ctx.v } else { ctx.w };
        put(bs, v, 7, 0x77);
        let s = snapshot(bs, v);
        put(bs, v, 7, 0x78);
        check_invariants(bs);
        run(bs.delete_blob(s)).unwrap();
        check_invariants(bs);
    }

    fn crash_test(name: &str, op: Op) -> u64 {
        crash_test_after(name, None, op)
    }

    /// As `crash_test`, on the base changed by `prep` (not cut).
    fn crash_test_after(name: &str, prep: Option<Op>, op: Op) -> u64 {
        let mut total = 0;
        for clean in [true, false] {
            let (mut image, ctx) = base(clean);
            if let Some(prep) = prep {
                let dev = Rc::new(MemDevice::from_image(BLOCK, BLOCKS, image));
                let bs = load(dev.clone());
                run(prep(bs.clone(), ctx)).unwrap();
                if clean {
                    run(bs.unload()).unwrap();
                }
                image = dev.image();
            }
            let fresh = || Rc::new(MemDevice::from_image(BLOCK, BLOCKS, image.clone()));
            let dev = fresh();
            let bs = load(dev.clone());
            let (old_l, old_d) = (lineage(&bs), data(&bs));
            dev.reset_stats();
            run(op(bs.clone(), ctx)).unwrap_or_else(|e| panic!("{name}: reference run: {e}"));
            let units = dev.stats().write_units;
            assert!(units > 0, "{name}: wrote nothing");
            let (new_l, new_d) = {
                let bs2 = load(Rc::new(MemDevice::from_image(BLOCK, BLOCKS, dev.image())));
                (lineage(&bs2), data(&bs2))
            };
            assert_eq!(new_l, lineage(&bs), "{name}: reloaded lineage differs");
            assert_ne!(
                (&old_l, &old_d),
                (&new_l, &new_d),
                "{name}: changed nothing"
            );
            for cut in 0..=units {
                let dev = fresh();
                let bs = load(dev.clone());
                dev.cut_after(cut);
                let acked = run(op(bs.clone(), ctx)).is_ok();
                let after = Rc::new(MemDevice::from_image(BLOCK, BLOCKS, dev.image()));
                let bs2 = load(after.clone());
                check_invariants(&bs2);
                let report = bs2.verify().unwrap();
                assert_eq!(
                    report.leaked_clusters, 0,
                    "{name} cut {cut}: leaked clusters"
                );
                assert_eq!(report.leaked_pages, 0, "{name} cut {cut}: leaked pages");
                let (got_l, got_d) = (lineage(&bs2), data(&bs2));
                assert!(
                    got_l == old_l || got_l == new_l,
                    "{name} (clean {clean}) cut {cut}: neither the old nor the new lineage:\n\
                     {got_l:#?}\nold {old_l:#?}\nnew {new_l:#?}"
                );
                for (id, d) in &got_d {
                    assert!(
                        old_d.get(id) == Some(d) || new_d.get(id) == Some(d),
                        "{name} (clean {clean}) cut {cut}: blob {id:#x} reads other bytes"
                    );
                }
                if acked {
                    assert_eq!(got_l, new_l, "{name} cut {cut}: acknowledged but lost");
                    assert_eq!(got_d, new_d, "{name} cut {cut}: acknowledged bytes lost");
                }
                exercise(&bs2, ctx);
                run(bs2.unload()).unwrap();
                let bs3 = load(after);
                assert!(bs3.info().clean_on_disk);
                check_invariants(&bs3);
                total += 1;
            }
            eprintln!(
                "crash: {name:<36} base {:<5} write units {units:>3}",
                if clean { "clean" } else { "dirty" }
            );
        }
        total
    }

    macro_rules! op {
        (|$bs:ident, $c:ident| $body:expr) => {{
            fn f($bs: Store, $c: Ctx) -> LocalBoxFuture<'static, Result<(), Error>> {
                async move { $body }.boxed_local()
            }
            f as Op
        }};
    }

    #[test]
    fn snapshots() {
        crash_test(
            "snapshot of a clone (v)",
            op!(|bs, c| bs.create_snapshot(c.v, &[]).await.map(drop)),
        );
        crash_test(
            "snapshot of a thin volume (w)",
            op!(|bs, c| bs
                .create_snapshot(c.w, &[("name".into(), b"s\0".to_vec())])
                .await
                .map(drop)),
        );
        crash_test(
            "snapshot of a thick volume (t)",
            op!(|bs, c| bs.create_snapshot(c.t, &[]).await.map(drop)),
        );
    }

    #[test]
    fn clones() {
        crash_test(
            "clone of s2",
            op!(|bs, c| bs.create_clone(c.s2, &[]).await.map(drop)),
        );
    }

    #[test]
    fn inflate_and_decouple() {
        let n = crash_test("inflate v", op!(|bs, c| bs.inflate_blob(c.v).await));
        assert!(n > 20);
        crash_test("decouple v", op!(|bs, c| bs.decouple_parent(c.v).await));
        crash_test(
            "decouple c (to no parent)",
            op!(|bs, c| bs.decouple_parent(c.c).await),
        );
    }

    #[test]
    fn set_parent() {
        crash_test(
            "set_parent w -> s1",
            op!(|bs, c| bs.set_parent(c.w, c.s1).await),
        );
        crash_test(
            "set_parent c -> s2",
            op!(|bs, c| bs.set_parent(c.c, c.s2).await),
        );
    }

    #[test]
    fn snapshot_delete() {
        crash_test(
            "delete s2 (merged into v)",
            op!(|bs, c| bs.delete_blob(c.s2).await),
        );
        crash_test("delete c (a clone)", op!(|bs, c| bs.delete_blob(c.c).await));
        crash_test_after(
            "delete s1 (merged into s2) once c is gone",
            Some(op!(|bs, c| bs.delete_blob(c.c).await)),
            op!(|bs, c| bs.delete_blob(c.s1).await),
        );
    }

    #[test]
    fn copy_on_write() {
        crash_test(
            "first write to v's cluster 3 (from s1)",
            op!(|bs, c| bs.open_blob(c.v)?.write(3 * BPC + 16, &[0xAB; 4096]).await),
        );
        crash_test(
            "racing equal first writes to c's cluster 1",
            op!(|bs, c| {
                let b = bs.open_blob(c.c)?;
                let (x, y) = futures::join!(
                    b.write(BPC + 64, &[0xCD; 4096]),
                    b.write(BPC + 64, &[0xCD; 4096])
                );
                x?;
                y
            }),
        );
    }

    #[test]
    fn external_snapshot_clones() {
        crash_test(
            "esnap clone of EXT",
            op!(|bs, _c| bs
                .create_esnap_clone(EXT, N, &[], ClearMethod::Default)
                .await
                .map(drop)),
        );
        crash_test(
            "set_external_parent w -> EXT",
            op!(|bs, c| bs.set_external_parent(c.w, EXT).await),
        );
        crash_test(
            "set_external_parent c -> EXT (from s1)",
            op!(|bs, c| bs.set_external_parent(c.c, EXT).await),
        );
        crash_test(
            "first write to x's cluster 4 (from EXT)",
            op!(|bs, c| bs.open_blob(c.x)?.write(4 * BPC + 16, &[0xAB; 4096]).await),
        );
        crash_test(
            "first write to e's cluster 6 (from EXT under xs)",
            op!(|bs, c| bs.open_blob(c.e)?.write(6 * BPC, &[0xAC; 4096]).await),
        );
        crash_test(
            "snapshot of x (the esnap moves up)",
            op!(|bs, c| bs.create_snapshot(c.x, &[]).await.map(drop)),
        );
    }

    #[test]
    fn external_snapshot_lineage_changes() {
        crash_test("inflate x", op!(|bs, c| bs.inflate_blob(c.x).await));
        crash_test(
            "decouple e (to xs's external snapshot)",
            op!(|bs, c| bs.decouple_parent(c.e).await),
        );
        crash_test(
            "delete xs (merged into e)",
            op!(|bs, c| bs.delete_blob(c.xs).await),
        );
    }
}
