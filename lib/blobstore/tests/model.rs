//! A model test: random sequences of create / resize / write (allocate) /
//! unmap (release) / delete / set xattr / reload clean or dirty, checked
//! after every step against an in-memory model of what the store must hold.
//! A second one (`lineage`) runs snapshot / clone / write through a clone
//! / inflate / decouple / set_parent / delete / reload against a model of
//! the lineage and of the bytes every blob reads.

mod common;
mod model_lineage;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use crate::common::{check_invariants, run, Store};
    use bdevkit_blobstore::{
        BlobId, BlobOptions, Blobstore, Error, InitOptions, LoadOptions, MemDevice,
    };
    use proptest::prelude::*;

    const BLOCKS: u64 = 16 << 11; // 16 MiB of 512-byte blocks: 256 clusters of 64 KiB

    #[derive(Debug, Clone)]
    enum Op {
        Create {
            thin: bool,
            clusters: u64,
            rle: bool,
        },
        Resize {
            blob: usize,
            clusters: u64,
        },
        Write {
            blob: usize,
            idx: u64,
        },
        Unmap {
            blob: usize,
            idx: u64,
        },
        Delete {
            blob: usize,
        },
        SetXattr {
            blob: usize,
            name: u8,
            len: usize,
        },
        Reload {
            clean: bool,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<bool>(), 0u64..40, prop::bool::weighted(0.2)).prop_map(
                |(thin, clusters, rle)| {
                    Op::Create {
                        thin,
                        clusters,
                        rle,
                    }
                }
            ),
            (any::<usize>(), 0u64..1100).prop_map(|(blob, clusters)| Op::Resize {
                blob,
                clusters: if clusters > 80 {
                    clusters
                } else {
                    clusters % 40
                }
            }),
            (any::<usize>(), any::<u64>()).prop_map(|(blob, idx)| Op::Write { blob, idx }),
            (any::<usize>(), any::<u64>()).prop_map(|(blob, idx)| Op::Write { blob, idx }),
            (any::<usize>(), any::<u64>()).prop_map(|(blob, idx)| Op::Unmap { blob, idx }),
            any::<usize>().prop_map(|blob| Op::Delete { blob }),
            (any::<usize>(), 0u8..3, 0usize..4000).prop_map(|(blob, name, len)| Op::SetXattr {
                blob,
                name,
                len
            }),
            any::<bool>().prop_map(|clean| Op::Reload { clean }),
        ]
    }

    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct ModelBlob {
        thin: bool,
        num_clusters: u64,
        /// Allocated blob clusters and their device clusters (once seen).
        clusters: BTreeMap<u64, Option<u32>>,
        xattrs: BTreeMap<String, Vec<u8>>,
    }

    struct Model {
        blobs: BTreeMap<BlobId, ModelBlob>,
        data_clusters: u64,
    }

    impl Model {
        fn used(&self) -> u64 {
            self.blobs.values().map(|b| b.clusters.len() as u64).sum()
        }
        fn free(&self) -> u64 {
            self.data_clusters - self.used()
        }
        fn pick(&self, i: usize) -> Option<BlobId> {
            (!self.blobs.is_empty()).then(|| *self.blobs.keys().nth(i % self.blobs.len()).unwrap())
        }
    }

    fn check(bs: &Store, m: &mut Model) {
        check_invariants(bs);
        assert_eq!(bs.blob_ids(), m.blobs.keys().copied().collect::<Vec<_>>());
        assert_eq!(bs.info().free_clusters, m.free(), "free clusters");
        for (&id, mb) in m.blobs.iter_mut() {
            let b = bs.open_blob(id).unwrap();
            assert_eq!(b.num_clusters(), mb.num_clusters);
            assert_eq!(b.is_thin(), mb.thin);
            let got: BTreeMap<u64, u32> = b.allocated_clusters().into_iter().collect();
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                mb.clusters.keys().collect::<Vec<_>>(),
                "blob {id:#x} allocation"
            );
            for (idx, c) in mb.clusters.iter_mut() {
                match c {
                    Some(c) => assert_eq!(got[idx], *c, "blob {id:#x} cluster {idx} moved"),
                    None => *c = Some(got[idx]),
                }
            }
            let xs: BTreeMap<String, Vec<u8>> = b
                .xattr_names()
                .into_iter()
                .map(|n| (n.clone(), b.xattr(&n).unwrap()))
                .collect();
            assert_eq!(xs, mb.xattrs);
        }
    }

    fn apply(bs: &mut Store, dev: &mut Rc<MemDevice>, m: &mut Model, op: &Op) {
        run(async {
            match *op {
                Op::Create {
                    thin,
                    clusters,
                    rle,
                } => {
                    let r = bs
                        .create_blob(&BlobOptions {
                            num_clusters: clusters,
                            thin_provision: thin,
                            use_extent_table: !rle,
                            ..BlobOptions::default()
                        })
                        .await;
                    match r {
                        Ok(id) => {
                            let mut mb = ModelBlob {
                                thin,
                                num_clusters: clusters,
                                ..ModelBlob::default()
                            };
                            if !thin {
                                mb.clusters = (0..clusters).map(|i| (i, None)).collect();
                            }
                            assert!(m.blobs.insert(id, mb).is_none());
                        }
                        Err(Error::NoSpace) => assert!(!thin && m.free() < clusters),
                        Err(e) => panic!("create: {e}"),
                    }
                }
                Op::Resize { blob, clusters } => {
                    let Some(id) = m.pick(blob) else { return };
                    let r = bs.open_blob(id).unwrap().resize(clusters).await;
                    let mb = m.blobs.get(&id).unwrap().clone();
                    match r {
                        Ok(()) => {
                            let mb = m.blobs.get_mut(&id).unwrap();
                            mb.clusters.retain(|&i, _| i < clusters);
                            if !mb.thin {
                                for i in mb.num_clusters..clusters {
                                    mb.clusters.insert(i, None);
                                }
                            }
                            mb.num_clusters = clusters;
                        }
                        Err(Error::NoSpace) => {
                            assert!(!mb.thin && m.free() < clusters - mb.num_clusters)
                        }
                        Err(e) => panic!("resize: {e}"),
                    }
                }
                Op::Write { blob, idx } => {
                    let Some(id) = m.pick(blob) else { return };
                    let mb = m.blobs.get(&id).unwrap().clone();
                    if mb.num_clusters == 0 {
                        return;
                    }
                    let idx = idx % mb.num_clusters;
                    let free = m.free();
                    match bs.open_blob(id).unwrap().allocate_cluster(idx).await {
                        Ok(_) => {
                            m.blobs
                                .get_mut(&id)
                                .unwrap()
                                .clusters
                                .entry(idx)
                                .or_insert(None);
                        }
                        Err(Error::NoSpace) => {
                            assert!(free == 0 && !mb.clusters.contains_key(&idx))
                        }
                        Err(e) => panic!("allocate: {e}"),
                    }
                }
                Op::Unmap { blob, idx } => {
                    let Some(id) = m.pick(blob) else { return };
                    let mb = m.blobs.get_mut(&id).unwrap();
                    if mb.num_clusters == 0 {
                        return;
                    }
                    let idx = idx % mb.num_clusters;
                    let released = bs
                        .open_blob(id)
                        .unwrap()
                        .release_cluster(idx)
                        .await
                        .unwrap();
                    assert_eq!(released, mb.thin && mb.clusters.contains_key(&idx));
                    if released {
                        mb.clusters.remove(&idx);
                    }
                }
                Op::Delete { blob } => {
                    let Some(id) = m.pick(blob) else { return };
                    bs.delete_blob(id).await.unwrap();
                    m.blobs.remove(&id);
                }
                Op::SetXattr { blob, name, len } => {
                    let Some(id) = m.pick(blob) else { return };
                    let (n, v) = (
                        format!("attr{name}"),
                        vec![name.wrapping_add(len.to_le_bytes()[0]); len],
                    );
                    bs.open_blob(id).unwrap().set_xattr(&n, &v).await.unwrap();
                    m.blobs.get_mut(&id).unwrap().xattrs.insert(n, v);
                }
                Op::Reload { clean } => {
                    if clean {
                        bs.unload().await.unwrap();
                    }
                    let next = Rc::new(MemDevice::from_image(512, BLOCKS, dev.image()));
                    *bs = Blobstore::load(next.clone(), &LoadOptions::default())
                        .await
                        .unwrap();
                    assert!(!clean || bs.info().clean_on_disk);
                    *dev = next;
                }
            }
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::WithSource("regressions"))),
            ..ProptestConfig::default()
        })]

        #[test]
        fn store_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
            let mut dev = Rc::new(MemDevice::new(512, BLOCKS));
            let mut bs = run(Blobstore::init(dev.clone(), &InitOptions { cluster_size: 64 << 10, ..InitOptions::default() })).unwrap();
            let mut m = Model { blobs: BTreeMap::new(), data_clusters: bs.info().total_data_clusters };
            for op in &ops {
                apply(&mut bs, &mut dev, &mut m, op);
                check(&bs, &mut m);
            }
            // Both ways of loading the final image agree with the model.
            let image = dev.image();
            let bs2 = run(Blobstore::load(Rc::new(MemDevice::from_image(512, BLOCKS, image.clone())), &LoadOptions { force_recover: true, ..LoadOptions::default() })).unwrap();
            check(&bs2, &mut m);
            run(bs.unload()).unwrap();
            let bs3 = run(Blobstore::load(dev.clone(), &LoadOptions::default())).unwrap();
            check(&bs3, &mut m);
        }
    }
}
