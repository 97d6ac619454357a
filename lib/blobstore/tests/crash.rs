//! Power-cut tests: every metadata-changing operation is cut at every write
//! unit (4 KiB of a write, or one unmap/write-zeroes), the device image that
//! survived is loaded, and the store must: load; own every cluster once and
//! leak none; show each blob in its old or new state; keep the operation if
//! it was acknowledged; and keep working (more operations, then a clean
//! unload and reload) without handing out a cluster twice.

mod common;

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::common::{check_invariants, run, state, Store, StoreState};
    use bdevkit_blobstore::{
        BlobId, BlobOptions, Blobstore, Error, InitOptions, LoadOptions, MemDevice,
    };
    use futures::future::LocalBoxFuture;
    use futures::FutureExt;

    const BLOCK: u32 = 512;
    const STORE_BLOCKS: u64 = 128 << 11; // 128 MiB
    const DEVICE_BLOCKS: u64 = 192 << 11; // room for the grow test

    /// Ids of the blobs the setup made.
    #[derive(Debug, Clone, Copy)]
    struct Ctx {
        thick: BlobId,
        thin: BlobId,
        rle: BlobId,
    }

    type Op = fn(Store, Ctx) -> LocalBoxFuture<'static, Result<(), Error>>;

    fn load(dev: Rc<MemDevice>) -> Store {
        run(Blobstore::load(dev, &LoadOptions::default())).expect("the store must load")
    }

    /// The base store: a thick blob of 600 clusters (two extent pages) with a
    /// chain of several pages, a thin blob with clusters in two extent pages,
    /// and a thin RLE blob.
    fn base(clean: bool) -> bdevkit_blobstore::MemImage {
        let dev = Rc::new(MemDevice::new(BLOCK, STORE_BLOCKS));
        run(async {
            let bs = Blobstore::init(
                dev.clone(),
                &InitOptions {
                    cluster_size: 64 << 10,
                    ..InitOptions::default()
                },
            )
            .await
            .unwrap();
            let thick = bs
                .create_blob(&BlobOptions {
                    num_clusters: 600,
                    xattrs: (0..3).map(|i| (format!("x{i}"), vec![i; 3000])).collect(),
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let thin = bs
                .create_blob(&BlobOptions {
                    num_clusters: 2000,
                    thin_provision: true,
                    xattrs: vec![("name".into(), b"thin\0".to_vec())],
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let b = bs.open_blob(thin).unwrap();
            for idx in [1, 2, 700] {
                b.allocate_cluster(idx).await.unwrap();
            }
            drop(b);
            let rle = bs
                .create_blob(&BlobOptions {
                    num_clusters: 50,
                    thin_provision: true,
                    use_extent_table: false,
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let b = bs.open_blob(rle).unwrap();
            b.allocate_cluster(3).await.unwrap();
            drop(b);
            bs.set_super_blob(Some(thick)).await.unwrap();
            assert_eq!((thick, thin, rle), CTX_IDS);
            if clean {
                bs.unload().await.unwrap();
            }
        });
        dev.image()
    }

    const CTX_IDS: (BlobId, BlobId, BlobId) = (0x1_0000_0000, 0x1_0000_0005, 0x1_0000_0008);

    fn ctx() -> Ctx {
        Ctx {
            thick: CTX_IDS.0,
            thin: CTX_IDS.1,
            rle: CTX_IDS.2,
        }
    }

    /// Whether `got` is `old` or `new`, allowing, for the blobs in `per_cluster`,
    /// any mix of old and new cluster mappings (independent allocations).
    fn old_or_new(
        got: &StoreState,
        old: &StoreState,
        new: &StoreState,
        per_cluster: &[BlobId],
    ) -> bool {
        if got == old || got == new {
            return true;
        }
        // Concurrent operations: each blob on its own is old or new (a blob
        // in `per_cluster` may mix old and new cluster mappings).
        if got.super_blob != old.super_blob && got.super_blob != new.super_blob {
            return false;
        }
        let ids: std::collections::BTreeSet<&BlobId> = got
            .blobs
            .keys()
            .chain(old.blobs.keys())
            .chain(new.blobs.keys())
            .collect();
        ids.into_iter().all(|id| {
            let (g, o, n) = (got.blobs.get(id), old.blobs.get(id), new.blobs.get(id));
            if g == o || g == n {
                return true;
            }
            let (Some(g), Some(o), Some(n)) = (g, o, n) else {
                return false;
            };
            if !per_cluster.contains(id) {
                return false;
            }
            let mut g2 = g.clone();
            g2.clusters.clear();
            let mut n2 = n.clone();
            n2.clusters.clear();
            g2 == n2
                && g.clusters
                    .iter()
                    .all(|(i, c)| o.clusters.get(i) == Some(c) || n.clusters.get(i) == Some(c))
                && o.clusters.keys().all(|i| g.clusters.contains_key(i))
        })
    }

    /// Work after recovery: must succeed and never double-allocate.
    fn exercise(bs: &Store) {
        run(async {
            let id = bs
                .create_blob(&BlobOptions {
                    num_clusters: 3,
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let t = bs
                .create_blob(&BlobOptions {
                    num_clusters: 600,
                    thin_provision: true,
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let b = bs.open_blob(t).unwrap();
            b.allocate_cluster(0).await.unwrap();
            b.allocate_cluster(599).await.unwrap();
            drop(b);
            check_invariants(bs);
            bs.delete_blob(id).await.unwrap();
        });
    }

    /// Cuts `op` at every write unit, from a clean and from a dirty base.
    /// Returns the number of cut points tried.
    fn crash_test(name: &str, op: Op, per_cluster: &[BlobId], grow_device: bool) -> u64 {
        let mut total = 0;
        for clean in [true, false] {
            let image = base(clean);
            let blocks = if grow_device {
                DEVICE_BLOCKS
            } else {
                STORE_BLOCKS
            };
            let fresh = || Rc::new(MemDevice::from_image(BLOCK, blocks, image.clone()));
            // The reference run: the old and new states, and how many units.
            let dev = fresh();
            let bs = load(dev.clone());
            let old = state(&bs);
            dev.reset_stats();
            run(op(bs.clone(), ctx()))
                .unwrap_or_else(|e| panic!("{name}: reference run failed: {e}"));
            let units = dev.stats().write_units;
            let new = {
                let bs2 = load(Rc::new(MemDevice::from_image(BLOCK, blocks, dev.image())));
                state(&bs2)
            };
            if !matches!(bs.open_blob(CTX_IDS.0), Err(Error::Unloaded)) {
                assert_eq!(
                    new,
                    state(&bs),
                    "{name}: reloaded state differs from the live one"
                );
            }
            assert!(
                units > 0 || name == "unload (already clean)",
                "{name}: wrote nothing"
            );
            for cut in 0..=units {
                let dev = fresh();
                let bs = load(dev.clone());
                dev.cut_after(cut);
                let acked = run(op(bs.clone(), ctx())).is_ok();
                let after = Rc::new(MemDevice::from_image(BLOCK, blocks, dev.image()));
                let bs2 = load(after.clone());
                check_invariants(&bs2);
                let report = bs2.verify().unwrap();
                assert_eq!(
                    report.leaked_clusters, 0,
                    "{name} cut {cut}: leaked clusters"
                );
                assert_eq!(report.leaked_pages, 0, "{name} cut {cut}: leaked pages");
                let got = state(&bs2);
                assert!(
                    old_or_new(&got, &old, &new, per_cluster),
                    "{name} (clean base {clean}) cut at {cut}: neither old nor new state:\n{got:#?}"
                );
                if acked {
                    assert!(
                        got == new || old_or_new(&got, &new, &new, &[]),
                        "{name} cut {cut}: acknowledged but lost"
                    );
                }
                exercise(&bs2);
                run(bs2.unload()).unwrap();
                let bs3 = load(after);
                assert!(bs3.info().clean_on_disk);
                check_invariants(&bs3);
                total += 1;
            }
            eprintln!(
                "crash: {name:<32} base {:<5} write units {units:>3}",
                if clean { "clean" } else { "dirty" }
            );
        }
        total
    }

    macro_rules! op {
        (|$bs:ident, $c:ident| $body:expr) => {{
            fn f($bs: Store, $c: Ctx) -> LocalBoxFuture<'static, Result<(), Error>> {
                let _ = &$c;
                async move { $body }.boxed_local()
            }
            f as Op
        }};
    }

    #[test]
    fn create_thick_thin_and_multi_page() {
        let n = crash_test(
            "create thick",
            op!(|bs, c| bs
                .create_blob(&BlobOptions {
                    num_clusters: 700,
                    ..BlobOptions::default()
                })
                .await
                .map(drop)),
            &[],
            false,
        );
        let n2 = crash_test(
            "create thin, xattrs over 3 pages",
            op!(|bs, c| bs
                .create_blob(&BlobOptions {
                    num_clusters: 10_000,
                    thin_provision: true,
                    xattrs: (0..3).map(|i| (format!("k{i}"), vec![7; 3500])).collect(),
                    internal_xattrs: vec![("SNAP".into(), 5u64.to_le_bytes().to_vec())],
                    ..BlobOptions::default()
                })
                .await
                .map(drop)),
            &[],
            false,
        );
        assert!(n > 2 && n2 > 2);
    }

    #[test]
    fn resize_grow_and_shrink() {
        crash_test(
            "resize thick 600 -> 1100",
            op!(|bs, c| bs.open_blob(c.thick)?.resize(1100).await),
            &[],
            false,
        );
        crash_test(
            "resize thick 600 -> 100",
            op!(|bs, c| bs.open_blob(c.thick)?.resize(100).await),
            &[],
            false,
        );
        crash_test(
            "resize thin 2000 -> 600",
            op!(|bs, c| bs.open_blob(c.thin)?.resize(600).await),
            &[],
            false,
        );
        crash_test(
            "resize thin 2000 -> 5000",
            op!(|bs, c| bs.open_blob(c.thin)?.resize(5000).await),
            &[],
            false,
        );
        crash_test(
            "resize rle 50 -> 2",
            op!(|bs, c| bs.open_blob(c.rle)?.resize(2).await),
            &[],
            false,
        );
    }

    #[test]
    fn delete() {
        crash_test(
            "delete thick",
            op!(|bs, c| bs.delete_blob(c.thick).await),
            &[],
            false,
        );
        crash_test(
            "delete thin",
            op!(|bs, c| bs.delete_blob(c.thin).await),
            &[],
            false,
        );
        crash_test(
            "delete rle",
            op!(|bs, c| bs.delete_blob(c.rle).await),
            &[],
            false,
        );
    }

    #[test]
    fn xattrs_and_flags() {
        crash_test(
            "set xattr (multi-page chain)",
            op!(|bs, c| bs.open_blob(c.thick)?.set_xattr("x1", &[9; 3900]).await),
            &[],
            false,
        );
        crash_test(
            "remove xattr",
            op!(|bs, c| bs.open_blob(c.thick)?.remove_xattr("x0").await),
            &[],
            false,
        );
        crash_test(
            "set internal xattr",
            op!(|bs, c| bs
                .open_blob(c.thin)?
                .set_internal_xattr("EXTSNAP", b"u\0")
                .await),
            &[],
            false,
        );
        crash_test(
            "set read-only",
            op!(|bs, c| bs.open_blob(c.thin)?.set_read_only().await),
            &[],
            false,
        );
        crash_test(
            "set super blob",
            op!(|bs, c| bs.set_super_blob(Some(c.thin)).await),
            &[],
            false,
        );
    }

    #[test]
    fn thin_allocation_and_release() {
        crash_test(
            "allocate in an extent page",
            op!(|bs, c| bs.open_blob(c.thin)?.allocate_cluster(3).await.map(drop)),
            &[],
            false,
        );
        crash_test(
            "allocate with a new extent page",
            op!(|bs, c| bs.open_blob(c.thin)?.allocate_cluster(1999).await.map(drop)),
            &[],
            false,
        );
        crash_test(
            "allocate rle",
            op!(|bs, c| bs.open_blob(c.rle)?.allocate_cluster(40).await.map(drop)),
            &[],
            false,
        );
        crash_test(
            "allocate 4 concurrently",
            op!(|bs, c| {
                let b = bs.open_blob(c.thin)?;
                let (r1, r2, r3, r4) = futures::join!(
                    b.allocate_cluster(10),
                    b.allocate_cluster(11),
                    b.allocate_cluster(1200),
                    b.allocate_cluster(10)
                );
                r1?;
                r2?;
                r3?;
                r4?;
                Ok(())
            }),
            &[CTX_IDS.1],
            false,
        );
        crash_test(
            "release a cluster",
            op!(|bs, c| bs.open_blob(c.thin)?.release_cluster(2).await.map(drop)),
            &[],
            false,
        );
        crash_test(
            "release rle",
            op!(|bs, c| bs.open_blob(c.rle)?.release_cluster(3).await.map(drop)),
            &[],
            false,
        );
    }

    #[test]
    fn grow_and_unload() {
        crash_test(
            "grow the store 128 -> 192 MiB",
            op!(|bs, c| bs.grow().await.map(drop)),
            &[],
            true,
        );
        crash_test(
            "grow, then resize thick to 2600",
            op!(|bs, c| {
                bs.grow().await?;
                bs.open_blob(c.thick)?.resize(2600).await
            }),
            &[],
            true,
        );
        crash_test(
            "unload",
            op!(|bs, c| {
                bs.open_blob(c.thin)?.allocate_cluster(5).await?;
                bs.unload().await
            }),
            &[],
            false,
        );
    }

    #[test]
    fn concurrent_operations_on_several_blobs() {
        crash_test(
            "create + resize + xattr + allocate at once",
            op!(|bs, c| {
                let thick = bs.open_blob(c.thick)?;
                let rle = bs.open_blob(c.rle)?;
                let thin = bs.open_blob(c.thin)?;
                let big = BlobOptions {
                    num_clusters: 30,
                    ..BlobOptions::default()
                };
                let (a, b, x, y) = futures::join!(
                    bs.create_blob(&big),
                    thick.resize(650),
                    rle.set_xattr("name", b"renamed\0"),
                    thin.allocate_cluster(1300),
                );
                a?;
                b?;
                x?;
                y?;
                Ok(())
            }),
            &[CTX_IDS.1],
            false,
        );
    }
}
