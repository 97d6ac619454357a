//! The operations end to end on an in-memory device.

mod common;

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::common::{check_invariants, run, state};
    use bdevkit_blobstore::{
        bstype, BlobOptions, Blobstore, ClearMethod, Error, InitOptions, LoadOptions, MemDevice,
    };

    fn opts() -> InitOptions {
        InitOptions {
            cluster_size: 64 << 10,
            bstype: bstype("TEST"),
            ..InitOptions::default()
        }
    }

    #[test]
    fn create_resize_allocate_reload_clean_and_dirty() {
        let dev = Rc::new(MemDevice::new(512, 64 << 11)); // 64 MiB
        run(async {
            let bs = Blobstore::init(dev.clone(), &opts()).await.unwrap();
            let info = bs.info();
            assert_eq!(info.total_clusters, 1024);
            assert_eq!(info.md_len, 1024);
            let thick = bs
                .create_blob(&BlobOptions {
                    num_clusters: 600,
                    xattrs: vec![("name".into(), b"thick\0".to_vec())],
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let thin = bs
                .create_blob(&BlobOptions {
                    num_clusters: 2000,
                    thin_provision: true,
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            assert_eq!(thick, 0x1_0000_0000);
            let b = bs.open_blob(thin).unwrap();
            assert_eq!(b.cluster_lba(5), None);
            let (a, c) = futures::join!(b.allocate_cluster(5), b.allocate_cluster(5));
            assert_eq!(a.unwrap(), c.unwrap());
            b.allocate_cluster(1500).await.unwrap();
            assert_eq!(b.num_allocated_clusters(), 2);
            assert!(b.release_cluster(5).await.unwrap());
            assert!(!b.release_cluster(5).await.unwrap());
            b.set_xattr("k", b"v").await.unwrap();
            drop(b);
            let t = bs.open_blob(thick).unwrap();
            t.resize(700).await.unwrap();
            t.resize(100).await.unwrap();
            assert_eq!(t.num_allocated_clusters(), 100);
            drop(t);
            bs.set_super_blob(Some(thick)).await.unwrap();
            check_invariants(&bs);
            let before = state(&bs);
            let free = bs.info().free_clusters;

            // Dirty: no unload.
            let bs2 = Blobstore::load(
                crate::common::device_from(&dev, dev.image()),
                &LoadOptions::default(),
            )
            .await
            .unwrap();
            assert_eq!(state(&bs2), before);
            assert_eq!(bs2.info().free_clusters, free);
            check_invariants(&bs2);

            bs.unload().await.unwrap();
            assert!(matches!(
                bs.create_blob(&BlobOptions::default()).await,
                Err(Error::Unloaded)
            ));
            let bs3 = Blobstore::load(dev.clone(), &LoadOptions::default())
                .await
                .unwrap();
            assert!(bs3.info().clean_on_disk);
            assert_eq!(state(&bs3), before);
            assert_eq!(bs3.info().free_clusters, free);
            check_invariants(&bs3);
            bs3.delete_blob(thick).await.unwrap();
            bs3.delete_blob(thin).await.unwrap();
            assert_eq!(bs3.info().free_clusters, bs3.info().total_data_clusters);
            assert_eq!(bs3.info().used_md_pages, 0);
            bs3.unload().await.unwrap();
            let bs4 = Blobstore::load(
                dev.clone(),
                &LoadOptions {
                    bstype: bstype("TEST"),
                    ..LoadOptions::default()
                },
            )
            .await
            .unwrap();
            assert!(bs4.blob_ids().is_empty());
            assert!(matches!(
                Blobstore::load(
                    dev.clone(),
                    &LoadOptions {
                        bstype: bstype("OTHER"),
                        ..LoadOptions::default()
                    }
                )
                .await,
                Err(Error::BstypeMismatch)
            ));
        });
    }

    #[test]
    fn read_only_and_busy_and_space() {
        let dev = Rc::new(MemDevice::new(4096, 1024)); // 4 MiB, 64 clusters
        run(async {
            let bs = Blobstore::init(dev.clone(), &opts()).await.unwrap();
            let id = bs
                .create_blob(&BlobOptions {
                    num_clusters: 10,
                    clear_method: ClearMethod::WriteZeroes,
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let b = bs.open_blob(id).unwrap();
            assert_eq!(b.clear_method(), ClearMethod::WriteZeroes);
            assert!(matches!(bs.delete_blob(id).await, Err(Error::Busy(_))));
            assert!(matches!(b.resize(1000).await, Err(Error::NoSpace)));
            b.set_read_only().await.unwrap();
            assert!(b.is_read_only());
            assert!(matches!(b.resize(1).await, Err(Error::ReadOnly(_))));
            assert!(matches!(
                b.set_xattr("a", b"b").await,
                Err(Error::ReadOnly(_))
            ));
            assert!(matches!(bs.unload().await, Err(Error::StoreBusy)));
            drop(b);
            bs.delete_blob(id).await.unwrap();
            assert!(matches!(bs.open_blob(id), Err(Error::NotFound(_))));
            check_invariants(&bs);
        });
    }

    #[test]
    fn concurrent_allocations_are_group_committed() {
        let dev = Rc::new(MemDevice::new(4096, 64 << 8)); // 64 MiB
        run(async {
            let bs = Blobstore::init(dev.clone(), &opts()).await.unwrap();
            let id = bs
                .create_blob(&BlobOptions {
                    num_clusters: 512,
                    thin_provision: true,
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let b = bs.open_blob(id).unwrap();
            b.allocate_cluster(0).await.unwrap(); // the extent page exists now
            dev.reset_stats();
            let lbas = futures::future::join_all((1..101).map(|i| b.allocate_cluster(i))).await;
            let lbas: Vec<u64> = lbas.into_iter().map(Result::unwrap).collect();
            let mut sorted = lbas.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 100, "one cluster each");
            // 100 allocations in one extent page: the first commits alone, the
            // other 99 queue behind it and go in one write.
            assert!(dev.stats().writes <= 2, "{} writes", dev.stats().writes);
            // A metadata sync of the blob waits for at most one commit.
            dev.reset_stats();
            let (a, x) = futures::join!(b.allocate_cluster(200), b.set_xattr("k", b"v"));
            a.unwrap();
            x.unwrap();
            assert_eq!(b.num_allocated_clusters(), 102);
            check_invariants(&bs);
        });
    }

    #[test]
    fn grow_within_the_mask_room() {
        // 16 MiB of 64 KiB clusters, 16 metadata pages: the used-cluster
        // mask has room for (4096 - 5) * 8 clusters (about 2 GiB).
        let dev = Rc::new(MemDevice::new(4096, 16 << 8));
        run(async {
            let o = InitOptions {
                num_md_pages: Some(16),
                ..opts()
            };
            let bs = Blobstore::init(dev.clone(), &o).await.unwrap();
            assert_eq!(bs.info().max_growable_size, (4096 - 5) * 8 * (64 << 10));
            assert!(!bs.grow().await.unwrap(), "the device did not grow");
            dev.set_num_blocks(64 << 8);
            assert!(bs.grow().await.unwrap());
            assert_eq!(bs.info().total_clusters, 1024);
            let id = bs
                .create_blob(&BlobOptions {
                    num_clusters: 900,
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            bs.unload().await.unwrap();
            dev.set_num_blocks(4 << 20); // 16 GiB: past the room
            let bs = Blobstore::load(dev.clone(), &LoadOptions::default())
                .await
                .unwrap();
            assert!(matches!(bs.grow().await, Err(Error::CannotGrow)));
            assert_eq!(bs.info().total_clusters, 1024);
            assert_eq!(bs.open_blob(id).unwrap().num_allocated_clusters(), 900);
            bs.unload().await.unwrap();
            dev.set_num_blocks(128 << 8);
            let bs = Blobstore::load(
                dev.clone(),
                &LoadOptions {
                    grow: true,
                    ..LoadOptions::default()
                },
            )
            .await
            .unwrap();
            assert_eq!(bs.info().total_clusters, 2048);
            check_invariants(&bs);
        });
    }
}
