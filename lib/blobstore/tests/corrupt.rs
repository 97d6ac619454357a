//! Corrupt and unusual metadata: clear errors, never a panic, never a write
//! at load; unknown flags handled as SPDK does; a device error fails the
//! store rather than leaving memory and disk apart.

mod common;

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use bdevkit_blobstore::{
        BlobId, BlobOptions, Blobstore, Corruption, Error, InitOptions, LoadOptions, MemDevice,
        MemImage,
    };
    use proptest::prelude::*;

    use crate::common::{check_invariants, run, Store};

    const BLOCKS: u64 = 8 << 11; // 8 MiB, 512-byte blocks, 128 clusters of 64 KiB

    struct Made {
        image: MemImage,
        md_start: u64,
        thick: BlobId,
        thin: BlobId,
        pages: Vec<u32>,
    }

    fn make(clean: bool) -> Made {
        let dev = Rc::new(MemDevice::new(512, BLOCKS));
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
                    num_clusters: 20,
                    xattrs: vec![("a".into(), vec![1; 3000]), ("b".into(), vec![2; 3000])],
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let thin = bs
                .create_blob(&BlobOptions {
                    num_clusters: 600,
                    thin_provision: true,
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let b = bs.open_blob(thin).unwrap();
            b.allocate_cluster(1).await.unwrap();
            b.allocate_cluster(599).await.unwrap();
            let mut pages = b.metadata_pages();
            pages.extend(bs.open_blob(thick).unwrap().metadata_pages());
            drop(b);
            let md_start = bs.info().md_start;
            if clean {
                bs.unload().await.unwrap();
            }
            Made {
                image: dev.image(),
                md_start,
                thick,
                thin,
                pages,
            }
        })
    }

    fn dev(image: &MemImage) -> Rc<MemDevice> {
        Rc::new(MemDevice::from_image(512, BLOCKS, image.clone()))
    }

    fn load(d: &Rc<MemDevice>, force_recover: bool) -> Result<Store, Error> {
        run(Blobstore::load(
            d.clone(),
            &LoadOptions {
                force_recover,
                ..LoadOptions::default()
            },
        ))
    }

    /// Edits metadata page `page` (of the metadata region) and fixes its CRC.
    fn edit(d: &MemDevice, md_start: u64, page: u32, f: impl FnOnce(&mut [u8; 4096])) {
        let off = (md_start + u64::from(page)) * 4096;
        let mut p = [0u8; 4096];
        d.peek(off, &mut p);
        f(&mut p);
        let crc = crc32c::crc32c(&p[..4092]);
        p[4092..].copy_from_slice(&crc.to_le_bytes());
        d.poke(off, &p);
    }

    fn root(id: BlobId) -> u32 {
        u32::try_from(id & 0xFFFF_FFFF).unwrap()
    }

    #[test]
    fn unknown_flags_are_handled_as_spdk_does() {
        for clean in [true, false] {
            let m = make(clean);
            let d = dev(&m.image);
            let free = load(&d, false).unwrap().info().free_clusters;
            // An unknown invalid flag: loads, its clusters stay reserved, cannot open.
            edit(&d, m.md_start, root(m.thick), |p| p[21 + 1] |= 0x80);
            let bs = load(&d, false).unwrap();
            assert_eq!(bs.info().free_clusters, free);
            assert!(matches!(
                bs.open_blob(m.thick),
                Err(Error::UnknownFlags { .. })
            ));
            assert!(matches!(
                run(bs.delete_blob(m.thick)),
                Err(Error::UnknownFlags { .. })
            ));
            check_invariants_except(&bs, m.thick);
            // Unknown data-ro bit: read-only. Unknown md-ro bit: metadata read-only.
            let d = dev(&m.image);
            edit(&d, m.md_start, root(m.thin), |p| p[29 + 2] |= 1);
            let bs = load(&d, false).unwrap();
            let b = bs.open_blob(m.thin).unwrap();
            assert!(b.is_read_only() && b.is_md_read_only());
            assert!(matches!(
                run(b.allocate_cluster(7)),
                Err(Error::ReadOnly(_))
            ));
            let d = dev(&m.image);
            edit(&d, m.md_start, root(m.thin), |p| p[37 + 1] |= 1);
            let bs = load(&d, false).unwrap();
            let b = bs.open_blob(m.thin).unwrap();
            assert!(!b.is_read_only() && b.is_md_read_only());
            assert!(matches!(
                run(b.set_xattr("x", b"y")),
                Err(Error::ReadOnly(_))
            ));
            run(b.allocate_cluster(7)).unwrap();
        }
    }

    /// Invariants of the blobs that open.
    fn check_invariants_except(bs: &Store, skip: BlobId) {
        bs.verify().unwrap();
        for id in bs.blob_ids().into_iter().filter(|&id| id != skip) {
            bs.open_blob(id).unwrap();
        }
    }

    #[test]
    fn corruptions_fail_the_load_with_a_reason() {
        let m = make(false);
        // A cluster beyond the device in the thin blob's extent page.
        let d = dev(&m.image);
        let ep = m.pages[1];
        edit(&d, m.md_start, ep, |p| {
            p[16 + 5 + 4 + 4..16 + 5 + 4 + 8].copy_from_slice(&9999u32.to_le_bytes())
        });
        match load(&d, false) {
            Err(Error::CorruptBlob {
                blob,
                page,
                reason: Corruption::ClusterOutOfRange(9999),
            }) => {
                assert_eq!((blob, page), (m.thin, ep));
            }
            other => panic!("{other:?}"),
        }
        // The thick blob's last chain page points back at its root.
        let d = dev(&m.image);
        // Its pages: the chain (root first), then its one extent page.
        let thick_pages: Vec<u32> = m.pages[3..].to_vec();
        let last_chain = thick_pages[thick_pages.len() - 2];
        assert_ne!(last_chain, root(m.thick));
        edit(&d, m.md_start, last_chain, |p| {
            p[4088..4092].copy_from_slice(&root(m.thick).to_le_bytes())
        });
        assert!(matches!(
            load(&d, false),
            Err(Error::CorruptBlob {
                reason: Corruption::ChainCycle(_),
                ..
            })
        ));
        // Two blobs claim one cluster.
        let d = dev(&m.image);
        let b = load(&dev(&m.image), false).unwrap();
        let thick_first = b.open_blob(m.thick).unwrap().allocated_clusters()[0].1;
        edit(&d, m.md_start, ep, |p| {
            p[16 + 5 + 4 + 4..16 + 5 + 4 + 8].copy_from_slice(&thick_first.to_le_bytes())
        });
        assert!(matches!(
            load(&d, false),
            Err(Error::ClaimedTwice {
                what: "cluster",
                ..
            })
        ));
        // A bad super block CRC.
        let d = dev(&m.image);
        d.poke(100, &[0xFF]);
        assert!(matches!(
            load(&d, false),
            Err(Error::BadSuper(Corruption::BadCrc))
        ));
        // A clean store whose used-cluster mask misses a blob's cluster.
        let mc = make(true);
        let d = dev(&mc.image);
        let bs = load(&d, false).unwrap();
        let c = bs.open_blob(mc.thin).unwrap().allocated_clusters()[0].1;
        drop(bs);
        let info_mask_start = 2u64; // the used-cluster mask follows the one-page used-page mask
        let byte = info_mask_start * 4096 + 5 + u64::from(c) / 8;
        let mut v = [0u8];
        d.peek(byte, &mut v);
        d.poke(byte, &[v[0] & !(1 << (c % 8))]);
        assert!(matches!(
            load(&d, false),
            Err(Error::CorruptBlob {
                reason: Corruption::ClusterNotMarked(_),
                ..
            })
        ));
        assert_eq!(
            d.stats().writes + d.stats().clears,
            0,
            "a load never writes"
        );
    }

    /// Sets the super block's u32 at `off` and fixes its CRC.
    fn edit_super(d: &MemDevice, off: usize, v: u32) {
        let mut p = [0u8; 4096];
        d.peek(0, &mut p);
        p[off..off + 4].copy_from_slice(&v.to_le_bytes());
        let crc = crc32c::crc32c(&p[..4092]);
        p[4092..].copy_from_slice(&crc.to_le_bytes());
        d.poke(0, &p);
    }

    #[test]
    fn unsupported_super_block_fields_are_refused_before_any_write() {
        const IO_UNIT: usize = 88;
        const MD_PAGE: usize = 92;
        for clean in [true, false] {
            let m = make(clean);
            // md_page_size: SPDK v26.05 makes 8 KiB to 64 KiB pages; refused.
            for v in [8192, 65536, 1000] {
                let d = dev(&m.image);
                edit_super(&d, MD_PAGE, v);
                for recover in [false, true] {
                    match load(&d, recover) {
                        Err(e @ Error::Unsupported(_)) => {
                            assert_eq!(e.errno(), libc::ENOTSUP);
                            assert!(e.to_string().contains("metadata page size"), "{e}");
                        }
                        other => panic!("md_page_size {v}: {other:?}"),
                    }
                }
                assert_eq!(d.stats().writes + d.stats().clears, 0, "never written");
            }
            // 0 means 4096, as SPDK reads it.
            let d = dev(&m.image);
            edit_super(&d, MD_PAGE, 0);
            load(&d, false).unwrap();
            // io_unit_size: impossible values, and one other than the
            // device's block size (SPDK would serve the blobs in 4 KiB
            // units on this 512-byte device; 0 means 4096 too).
            for v in [3000, 256, 8192] {
                let d = dev(&m.image);
                edit_super(&d, IO_UNIT, v);
                assert!(
                    matches!(
                        load(&d, false),
                        Err(Error::BadSuper(Corruption::Impossible {
                            field: "io_unit_size",
                            ..
                        }))
                    ),
                    "io_unit_size {v}"
                );
            }
            for v in [4096, 1024, 0] {
                let d = dev(&m.image);
                edit_super(&d, IO_UNIT, v);
                match load(&d, false) {
                    Err(e @ Error::Unsupported(_)) => {
                        assert!(e.to_string().contains("io unit size"), "{e}");
                    }
                    other => panic!("io_unit_size {v}: {other:?}"),
                }
                assert_eq!(d.stats().writes + d.stats().clears, 0, "never written");
            }
        }
    }

    #[test]
    fn a_device_error_fails_the_store() {
        let m = make(false);
        let d = dev(&m.image);
        let bs = load(&d, false).unwrap();
        d.cut_after(0);
        let b = bs.open_blob(m.thin).unwrap();
        assert!(matches!(
            run(b.allocate_cluster(9)),
            Err(Error::Device { .. })
        ));
        assert!(matches!(run(b.allocate_cluster(10)), Err(Error::Failed)));
        assert!(matches!(
            run(bs.create_blob(&BlobOptions::default())),
            Err(Error::Failed)
        ));
        drop(b);
        assert!(matches!(run(bs.unload()), Err(Error::Failed)));
        assert_eq!(Error::Failed.errno(), libc::EIO);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// Random byte damage to metadata pages, the masks or the super block
        /// (with or without a fixed CRC): load errors or loads a consistent
        /// store; never panics, never writes.
        #[test]
        fn damaged_stores_never_panic(
            clean in any::<bool>(),
            recover in any::<bool>(),
            hits in proptest::collection::vec((0usize..16, 0usize..4092, any::<u8>(), any::<bool>()), 1..8),
        ) {
            let m = make(clean);
            let d = dev(&m.image);
            for (which, off, val, fix) in hits {
                // Pages of the blobs, the masks (device pages 1-3) and the super block.
                let dev_page = match which {
                    0 => 0,
                    1..=3 => which as u64,
                    _ => m.md_start + u64::from(m.pages[which % m.pages.len()]),
                };
                let at = dev_page * 4096;
                let mut p = [0u8; 4096];
                d.peek(at, &mut p);
                p[off] = val;
                if fix {
                    let crc = crc32c::crc32c(&p[..4092]);
                    p[4092..].copy_from_slice(&crc.to_le_bytes());
                }
                d.poke(at, &p);
            }
            if let Ok(bs) = load(&d, recover) {
                bs.verify().unwrap();
                let ids = bs.blob_ids();
                if ids.iter().all(|&id| bs.open_blob(id).is_ok()) {
                    check_invariants(&bs);
                }
            }
            prop_assert_eq!(d.stats().writes + d.stats().clears, 0);
        }
    }
}
