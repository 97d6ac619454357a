//! Stores made by SPDK v26.05 (tests/fixtures/make-fixtures.sh) load here:
//! names and uuids from the xattrs, blob ids, sizes, thin/thick flags,
//! cluster maps, and the data spdk_dd wrote into a thin lvol.

mod common;

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::rc::Rc;

    use bdevkit_blobstore::{
        bstype, BlobDevice, BlobId, Blobstore, DeviceError, ExternalDevice, LoadOptions, MemDevice,
        ReadFuture,
    };
    use futures::FutureExt;

    use crate::common::{check_invariants, run, state};

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

    fn image(name: &str) -> Vec<u8> {
        let f = std::fs::File::open(format!("{FIXTURES}/{name}")).expect("fixture");
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(f)
            .read_to_end(&mut out)
            .expect("gunzip");
        out
    }

    fn device(bytes: &[u8], block_size: u32) -> Rc<MemDevice> {
        let d = Rc::new(MemDevice::new(
            block_size,
            bytes.len() as u64 / u64::from(block_size),
        ));
        d.poke(0, bytes);
        d
    }

    fn uuids() -> serde_json::Value {
        let s =
            std::fs::read_to_string(format!("{FIXTURES}/fixtures.json")).expect("fixtures.json");
        serde_json::from_str(&s).expect("json")
    }

    /// A NUL-terminated (and maybe zero-padded) string xattr.
    fn cstr(v: &[u8]) -> String {
        let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
        String::from_utf8_lossy(&v[..end]).into_owned()
    }

    fn by_name(bs: &Blobstore<Rc<MemDevice>>) -> std::collections::BTreeMap<String, BlobId> {
        let sb = bs.super_blob();
        bs.blob_ids()
            .into_iter()
            .filter(|id| Some(*id) != sb)
            .map(|id| (cstr(&bs.open_blob(id).unwrap().xattr("name").unwrap()), id))
            .collect()
    }

    fn lvs(bs: &Blobstore<Rc<MemDevice>>) -> (String, String) {
        let sb = bs.open_blob(bs.super_blob().expect("super blob")).unwrap();
        let uuid = sb.xattr("uuid").unwrap();
        assert_eq!(uuid.len(), 37, "uuid: 36 characters and a NUL");
        (cstr(&sb.xattr("name").unwrap()), cstr(&uuid))
    }

    /// The pattern make-fixtures.sh writes: each 4 KiB block holds its index.
    fn check_pattern(dev: &MemDevice, lba: u64, first_block: u32, mib: u32) {
        let mut buf = vec![0u8; (mib as usize) << 20];
        run(dev.read(lba, &mut buf)).unwrap();
        for (i, blk) in buf.chunks(4096).enumerate() {
            let want = (first_block + u32::try_from(i).unwrap()).to_le_bytes();
            assert!(
                blk.chunks(4).all(|w| w == want),
                "block {i} of the pattern at lba {lba}"
            );
        }
    }

    #[test]
    fn clean_spdk_lvstore_loads() {
        let img = image("spdk-clean.img.gz");
        let dev = device(&img, 4096);
        let u = &uuids()["clean"];
        let bs = run(Blobstore::load(
            dev.clone(),
            &LoadOptions {
                bstype: bstype("LVOLSTORE"),
                ..LoadOptions::default()
            },
        ))
        .unwrap();
        let info = bs.info();
        assert!(info.clean_on_disk);
        assert_eq!(
            (info.cluster_size, info.io_unit_size, info.total_clusters),
            (1 << 20, 4096, 64)
        );
        assert_eq!(
            lvs(&bs),
            (
                "lvs0".to_string(),
                u["lvs_uuid"].as_str().unwrap().to_string()
            )
        );
        assert_eq!(bs.super_blob(), Some(0x1_0000_0000));
        let names = by_name(&bs);
        assert_eq!(
            names.keys().collect::<Vec<_>>(),
            ["small", "thick0", "thin0"]
        );
        for (name, &id) in &names {
            let b = bs.open_blob(id).unwrap();
            assert_eq!(
                cstr(&b.xattr("uuid").unwrap()),
                u[name].as_str().unwrap(),
                "{name}"
            );
            assert_eq!(
                b.xattr("name").unwrap().len(),
                64,
                "lvol names are stored 64 bytes long"
            );
            assert!(b.uses_extent_table());
        }
        let thick = bs.open_blob(names["thick0"]).unwrap();
        assert!(!thick.is_thin());
        assert_eq!(
            (thick.num_clusters(), thick.num_allocated_clusters()),
            (8, 8)
        );
        let thin = bs.open_blob(names["thin0"]).unwrap();
        assert!(thin.is_thin());
        assert_eq!(thin.num_clusters(), 16);
        let alloc: Vec<u64> = thin.allocated_clusters().iter().map(|&(i, _)| i).collect();
        assert_eq!(alloc, [0, 9]);
        check_pattern(&dev, thin.cluster_lba(0).unwrap(), 0, 1);
        check_pattern(&dev, thin.cluster_lba(9).unwrap(), 2304, 1);
        let small = bs.open_blob(names["small"]).unwrap();
        assert_eq!(
            (
                small.num_clusters(),
                small.num_allocated_clusters(),
                small.is_thin()
            ),
            (1, 0, true)
        );
        check_invariants(&bs);
        assert_eq!(bs.info().free_clusters, bs.info().total_data_clusters - 10);

        // Recovery from the same image finds the same thing.
        let again = run(Blobstore::load(
            device(&img, 4096),
            &LoadOptions {
                force_recover: true,
                ..LoadOptions::default()
            },
        ))
        .unwrap();
        assert_eq!(state(&again), state(&bs));
        assert_eq!(again.info().free_clusters, bs.info().free_clusters);

        // And the library can go on with it.
        drop((thick, thin, small));
        run(async {
            let b = bs.open_blob(names["small"]).unwrap();
            b.allocate_cluster(0).await.unwrap();
            drop(b);
            bs.unload().await.unwrap();
        });
        let bs = run(Blobstore::load(dev, &LoadOptions::default())).unwrap();
        check_invariants(&bs);
        assert_eq!(
            bs.open_blob(names["small"])
                .unwrap()
                .num_allocated_clusters(),
            1
        );
    }

    #[test]
    fn dirty_spdk_lvstore_recovers() {
        let img = image("spdk-dirty.img.gz");
        let dev = device(&img, 512);
        let u = &uuids()["dirty"];
        let bs = run(Blobstore::load(
            dev.clone(),
            &LoadOptions {
                bstype: bstype("LVOLSTORE"),
                ..LoadOptions::default()
            },
        ))
        .unwrap();
        let info = bs.info();
        assert!(!info.clean_on_disk, "killed with SIGKILL: dirty");
        assert_eq!(
            (info.cluster_size, info.io_unit_size, info.total_clusters),
            (4 << 20, 512, 16)
        );
        assert_eq!(
            lvs(&bs),
            (
                "lvs1".to_string(),
                u["lvs_uuid"].as_str().unwrap().to_string()
            )
        );
        let names = by_name(&bs);
        assert_eq!(names.keys().collect::<Vec<_>>(), ["a2", "b", "c", "snap"]);
        for (name, &id) in &names {
            assert_eq!(
                cstr(&bs.open_blob(id).unwrap().xattr("uuid").unwrap()),
                u[name].as_str().unwrap(),
                "{name}"
            );
        }
        let a = bs.open_blob(names["a2"]).unwrap();
        assert_eq!(
            (a.num_clusters(), a.num_allocated_clusters(), a.is_thin()),
            (3, 3, false)
        );
        let c = bs.open_blob(names["c"]).unwrap();
        assert_eq!(
            (c.num_clusters(), c.num_allocated_clusters(), c.is_thin()),
            (1, 1, false)
        );
        // The snapshot took b's clusters; b is its thin clone.
        let snap = bs.open_blob(names["snap"]).unwrap();
        assert!(snap.is_read_only());
        assert_eq!(snap.num_clusters(), 10);
        let alloc: Vec<u64> = snap.allocated_clusters().iter().map(|&(i, _)| i).collect();
        assert_eq!(alloc, [1]);
        check_pattern(&dev, snap.cluster_lba(1).unwrap(), 1024, 2);
        let b = bs.open_blob(names["b"]).unwrap();
        assert!(b.is_thin());
        assert_eq!((b.num_clusters(), b.num_allocated_clusters()), (10, 0));
        assert_eq!(
            b.internal_xattr("SNAP"),
            Some(names["snap"].to_le_bytes().to_vec())
        );
        check_invariants(&bs);
        assert_eq!(bs.info().free_clusters, bs.info().total_data_clusters - 5);
    }

    /// What 4 KiB block `blk` of a blob reads: `Some(n)` when it holds the
    /// pattern of block index n, `None` when all zeros.
    fn block_of(b: &bdevkit_blobstore::Blob<Rc<MemDevice>>, blk: u64) -> Option<u32> {
        let mut buf = vec![0u8; 4096];
        run(b.read(blk, &mut buf)).unwrap();
        if buf.iter().all(|&x| x == 0) {
            return None;
        }
        let n = u32::from_le_bytes(buf[..4].try_into().unwrap());
        assert!(
            buf.chunks(4).all(|c| c == n.to_le_bytes()),
            "block {blk}: not a pattern block"
        );
        Some(n)
    }

    #[test]
    fn spdk_snapshot_and_clone_tree_loads_with_its_lineage_and_bytes() {
        // make-lineage-fixture.sh: s1 <- s2 <- v, s1 <- c; 4096-byte blocks.
        let dev = device(&image("spdk-lineage.img.gz"), 4096);
        let bs = run(Blobstore::load(dev, &LoadOptions::default())).unwrap();
        check_invariants(&bs);
        let n = by_name(&bs);
        let (v, s1, s2, c) = (n["v"], n["s1"], n["s2"], n["c"]);
        assert_eq!(bs.parent(v), Some(s2));
        assert_eq!(bs.parent(s2), Some(s1));
        assert_eq!(bs.parent(c), Some(s1));
        assert_eq!(bs.parent(s1), None);
        assert!(bs.is_snapshot(s1) && bs.is_snapshot(s2) && !bs.is_snapshot(v));
        assert_eq!(bs.clones(s1), {
            let mut x = vec![s2, c];
            x.sort_unstable();
            x
        });
        let ids = std::fs::read_to_string(format!("{FIXTURES}/lineage.json")).unwrap();
        let ids: serde_json::Value = serde_json::from_str(&ids).unwrap();
        for (name, id) in [("v", v), ("s1", s1), ("s2", s2), ("c", c)] {
            let b = bs.open_blob(id).unwrap();
            assert_eq!(cstr(&b.xattr("uuid").unwrap()), ids[name].as_str().unwrap());
            assert_eq!(b.is_read_only(), name.starts_with('s'), "{name}");
            assert!(b.internal_xattr("SNAPTMP").is_none());
        }
        let alloc = |id| bs.open_blob(id).unwrap().num_allocated_clusters();
        assert_eq!((alloc(s1), alloc(s2), alloc(v), alloc(c)), (1, 1, 0, 1));
        // Bytes through every chain (1 MiB clusters: 256 blocks each).
        let want = |blk: u64, written: &[u64]| {
            written
                .contains(&(blk / 256))
                .then(|| u32::try_from(blk).unwrap())
        };
        for (id, written) in [(s1, &[0][..]), (s2, &[0, 2]), (v, &[0, 2]), (c, &[0, 1])] {
            let b = bs.open_blob(id).unwrap();
            for blk in [1u64, 255, 256, 300, 511, 512, 700, 767, 768, 1023] {
                assert_eq!(
                    block_of(&b, blk),
                    want(blk, written),
                    "blob {id:#x} block {blk}"
                );
            }
        }
        // Our copy-on-write and merge work on SPDK's tree.
        let vb = bs.open_blob(v).unwrap();
        run(vb.write(10, &[0xEE; 4096])).unwrap();
        assert_eq!(block_of(&vb, 11), Some(11));
        drop(vb);
        run(bs.delete_blob(s2)).unwrap();
        assert_eq!(bs.parent(v), Some(s1));
        let vb = bs.open_blob(v).unwrap();
        assert_eq!(block_of(&vb, 600), Some(600));
        assert_eq!(block_of(&vb, 5), Some(5));
        check_invariants(&bs);
    }

    /// make-lineage-fixture.sh's external bdev: 4 MiB, 4 KiB block b holds
    /// 4096 + b.
    struct Ext;

    impl ExternalDevice for Ext {
        fn block_size(&self) -> u32 {
            4096
        }
        fn num_blocks(&self) -> u64 {
            1024
        }
        fn read<'a>(&'a self, offset_blocks: u64, buf: &'a mut [u8]) -> ReadFuture<'a> {
            async move {
                if offset_blocks + buf.len() as u64 / 4096 > 1024 {
                    return Err(DeviceError::io());
                }
                for (blk, chunk) in (offset_blocks..).zip(buf.chunks_mut(4096)) {
                    let n = u32::try_from(4096 + blk).unwrap().to_le_bytes();
                    for w in chunk.chunks_mut(4) {
                        w.copy_from_slice(&n);
                    }
                }
                Ok(())
            }
            .boxed_local()
        }
    }

    #[test]
    fn spdk_esnap_clone_tree_loads_degraded_then_reads_its_external_snapshot() {
        // make-lineage-fixture.sh: ext <- es <- e.
        let dev = device(&image("spdk-lineage.img.gz"), 4096);
        let bs = run(Blobstore::load(dev, &LoadOptions::default())).unwrap();
        check_invariants(&bs);
        let ids = std::fs::read_to_string(format!("{FIXTURES}/lineage.json")).unwrap();
        let ids: serde_json::Value = serde_json::from_str(&ids).unwrap();
        let ext_id = format!("{}\0", ids["ext_uuid"].as_str().unwrap()).into_bytes();
        let n = by_name(&bs);
        let (e, es) = (n["e"], n["es"]);
        assert_eq!(bs.parent(e), Some(es));
        assert!(bs.is_snapshot(es));
        assert_eq!(
            bs.esnap_id(es),
            Some(ext_id.clone()),
            "SPDK's EXTSNAP: the UUID and its NUL"
        );
        assert_eq!(bs.esnap_id(e), None);
        assert_eq!(bs.esnap_of_chain(e), Some(ext_id.clone()));
        assert_eq!(bs.external_ids(), vec![ext_id.clone()]);
        assert!(bs.open_blob(es).unwrap().is_esnap_clone());
        assert!(
            bs.is_degraded(e) && bs.is_degraded(es),
            "no device attached yet"
        );
        assert!(!bs.is_degraded(n["v"]));
        for (name, id) in [("e", e), ("es", es)] {
            let b = bs.open_blob(id).unwrap();
            assert_eq!(cstr(&b.xattr("uuid").unwrap()), ids[name].as_str().unwrap());
        }
        bs.attach_external(&ext_id, Rc::new(Ext)).unwrap();
        assert!(!bs.is_degraded(e));
        let alloc = |id| bs.open_blob(id).unwrap().num_allocated_clusters();
        assert_eq!((alloc(es), alloc(e)), (1, 1));
        // 4 MiB, 1 MiB clusters: MiB 1 written before the snapshot, MiB 3
        // after; the rest reads the external bdev.
        let want = |blk: u64, own: &[(u64, u32)]| {
            let mib = blk / 256;
            own.iter()
                .find(|(m, _)| *m == mib)
                .map_or(4096 + blk, |(_, first)| u64::from(*first) + blk % 256)
        };
        for (id, own) in [(es, &[(1, 8192)][..]), (e, &[(1, 8192), (3, 9216)])] {
            let b = bs.open_blob(id).unwrap();
            for blk in [0u64, 255, 256, 400, 511, 512, 700, 768, 900, 1023] {
                assert_eq!(
                    block_of(&b, blk).map(u64::from),
                    Some(want(blk, own)),
                    "blob {id:#x} block {blk}"
                );
            }
        }
        // Our copy-on-write from SPDK's external snapshot.
        let eb = bs.open_blob(e).unwrap();
        run(eb.write(2 * 256 + 10, &[0xEE; 4096])).unwrap();
        assert_eq!(block_of(&eb, 2 * 256 + 11), Some(4096 + 2 * 256 + 11));
        check_invariants(&bs);
    }
}
