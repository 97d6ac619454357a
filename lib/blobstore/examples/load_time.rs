//! Measures load times of a large store: 1000 thick blobs with lvol-like
//! xattrs, 4 MiB clusters, on a sparse in-memory device of 1 TiB (only
//! written 4 KiB chunks take memory). Prints reads and times of a clean and
//! a dirty load. `cargo run --release -p bdevkit-blobstore --example load_time`

use std::rc::Rc;
use std::time::Instant;

use bdevkit_blobstore::{bstype, BlobOptions, Blobstore, InitOptions, LoadOptions, MemDevice};

fn main() {
    let blocks = (1u64 << 40) / 4096;
    let dev = Rc::new(MemDevice::new(4096, blocks));
    let opts = InitOptions {
        cluster_size: 4 << 20,
        bstype: bstype("LVOLSTORE"),
        ..InitOptions::default()
    };
    futures::executor::block_on(async {
        let bs = Blobstore::init(dev.clone(), &opts).await.expect("init");
        let per_blob = bs.info().total_data_clusters / 1000;
        let t = Instant::now();
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
            .expect("create");
        }
        println!(
            "created 1000 blobs x {per_blob} clusters in {:?}; md region {} pages",
            t.elapsed(),
            bs.info().md_len
        );
        let dirty_image = dev.image();
        bs.unload().await.expect("unload");
        for round in 0..3 {
            dev.reset_stats();
            let t = Instant::now();
            let b = Blobstore::load(dev.clone(), &LoadOptions::default())
                .await
                .expect("load");
            let el = t.elapsed();
            let s = dev.stats();
            assert_eq!(b.blob_ids().len(), 1000);
            println!(
                "clean load #{round}: {} reads, {} KiB, {:?}",
                s.reads,
                s.read_bytes >> 10,
                el
            );
        }
        for round in 0..3 {
            let d = Rc::new(MemDevice::from_image(4096, blocks, dirty_image.clone()));
            let t = Instant::now();
            let b = Blobstore::load(d.clone(), &LoadOptions::default())
                .await
                .expect("load");
            let el = t.elapsed();
            let s = d.stats();
            assert_eq!(b.blob_ids().len(), 1000);
            println!(
                "dirty load #{round}: {} reads, {} MiB, {:?}",
                s.reads,
                s.read_bytes >> 20,
                el
            );
        }
    });
}
