//! Load reads the metadata in few large reads: a store of 1000 blobs on a
//! (sparse) 1 TiB device loads clean in under 20 reads; a dirty load reads
//! the whole metadata region, 1 MiB at a time.

#[cfg(test)]
mod tests {
    use std::rc::Rc;
    use std::time::Instant;

    use bdevkit_blobstore::{bstype, BlobOptions, Blobstore, InitOptions, LoadOptions, MemDevice};

    fn run<F: std::future::Future>(f: F) -> F::Output {
        futures::executor::block_on(f)
    }

    #[test]
    fn a_thousand_blobs_on_a_terabyte_load_in_few_reads() {
        let dev = Rc::new(MemDevice::new(4096, (1u64 << 40) / 4096));
        let opts = InitOptions {
            cluster_size: 4 << 20,
            bstype: bstype("LVOLSTORE"),
            ..InitOptions::default()
        };
        let t = Instant::now();
        let bs = run(Blobstore::init(dev.clone(), &opts)).unwrap();
        let per_blob = bs.info().total_data_clusters / 1000;
        run(async {
            for i in 0..1000 {
                bs.create_blob(&BlobOptions {
                    num_clusters: per_blob,
                    xattrs: vec![
                        ("name".into(), format!("lvol{i}").into_bytes()),
                        ("uuid".into(), format!("{i:036}\0").into_bytes()),
                    ],
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            }
        });
        let md_len = u64::from(bs.info().md_len);
        eprintln!(
            "load: created 1000 blobs of {per_blob} clusters in {:?}",
            t.elapsed()
        );
        let dirty_image = dev.image();
        run(bs.unload()).unwrap();

        dev.reset_stats();
        let t = Instant::now();
        let bs = run(Blobstore::load(dev.clone(), &LoadOptions::default())).unwrap();
        let clean = (dev.stats(), t.elapsed());
        assert_eq!(bs.blob_ids().len(), 1000);
        assert_eq!(
            bs.info().free_clusters,
            bs.info().total_data_clusters - 1000 * per_blob
        );

        let ddev = Rc::new(MemDevice::from_image(
            4096,
            (1u64 << 40) / 4096,
            dirty_image,
        ));
        let t = Instant::now();
        let bs2 = run(Blobstore::load(ddev.clone(), &LoadOptions::default())).unwrap();
        let dirty = (ddev.stats(), t.elapsed());
        assert_eq!(bs2.blob_ids().len(), 1000);
        assert_eq!(bs2.info().free_clusters, bs.info().free_clusters);
        eprintln!(
            "load: clean {} reads ({} KiB) in {:?}; dirty {} reads ({} MiB) in {:?} (debug build)",
            clean.0.reads,
            clean.0.read_bytes >> 10,
            clean.1,
            dirty.0.reads,
            dirty.0.read_bytes >> 20,
            dirty.1
        );
        assert!(
            clean.0.reads < 20,
            "clean load took {} reads",
            clean.0.reads
        );
        // The super block, then the metadata region in 1 MiB reads.
        assert_eq!(dirty.0.reads, 1 + (md_len * 4096).div_ceil(1 << 20));
    }
}
