//! The lineage model test (part of `model`): random snapshot / clone /
//! write (through the parent chain, copy-on-write) / inflate / decouple /
//! set_parent / delete / reload sequences, with external-snapshot clones
//! (create, set_external_parent; their chains read an external device),
//! checked after every step
//! against a model of each blob's parent, flags, own clusters and the
//! bytes it reads, and of the errors SPDK answers.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::rc::Rc;

    use crate::common::{check_invariants, run, Store};
    use bdevkit_blobstore::{
        BlobId, BlobOptions, Blobstore, ClearMethod, DeviceError, Error, ExternalDevice,
        InitOptions, LoadOptions, MemDevice, ReadFuture,
    };
    use futures::FutureExt;
    use proptest::prelude::*;

    const BLOCKS: u64 = 16 << 11; // 16 MiB: 256 clusters of 64 KiB
    const CLUSTER: u64 = 64 << 10;
    const CLUSTER_BYTES: usize = 64 << 10;
    const BPC: u64 = CLUSTER / 512;
    /// 4 KiB pieces per cluster.
    const PIECES: usize = 16;
    /// The external snapshot: 8 clusters (blobs have at most 5).
    const EXT: &[u8] = b"ext\0";
    const EXT_CLUSTERS: u64 = 8;

    /// What the external snapshot holds in piece `piece` of cluster `idx`.
    fn ext_val(idx: u64, piece: usize) -> u8 {
        0x80 | u8::try_from((idx * PIECES as u64 + piece as u64) % 127).unwrap()
    }

    struct Ext;

    impl ExternalDevice for Ext {
        fn block_size(&self) -> u32 {
            512
        }
        fn num_blocks(&self) -> u64 {
            EXT_CLUSTERS * BPC
        }
        fn read<'a>(&'a self, offset_blocks: u64, buf: &'a mut [u8]) -> ReadFuture<'a> {
            async move {
                if offset_blocks + buf.len() as u64 / 512 > EXT_CLUSTERS * BPC {
                    return Err(DeviceError::io());
                }
                // Pieces are 4 KiB-aligned and so are the store's reads.
                for (at, chunk) in (offset_blocks * 512..)
                    .step_by(4096)
                    .zip(buf.chunks_mut(4096))
                {
                    let piece = usize::try_from(at % CLUSTER / 4096).unwrap();
                    chunk.fill(ext_val(at / CLUSTER, piece));
                }
                Ok(())
            }
            .boxed_local()
        }
    }

    fn attach(bs: &Store) {
        bs.attach_external(EXT, Rc::new(Ext)).unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Create {
            thin: bool,
            clusters: u64,
        },
        Write {
            blob: usize,
            idx: u64,
            piece: usize,
            val: u8,
        },
        Snapshot {
            blob: usize,
        },
        Clone {
            blob: usize,
        },
        Inflate {
            blob: usize,
        },
        Decouple {
            blob: usize,
        },
        SetParent {
            blob: usize,
            parent: usize,
        },
        Delete {
            blob: usize,
        },
        Reload {
            clean: bool,
        },
        EsnapClone {
            clusters: u64,
        },
        SetExternal {
            blob: usize,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<bool>(), 1u64..6).prop_map(|(thin, clusters)| Op::Create { thin, clusters }),
            (any::<usize>(), any::<u64>(), 0..PIECES, 1u8..255).prop_map(
                |(blob, idx, piece, val)| Op::Write {
                    blob,
                    idx,
                    piece,
                    val
                }
            ),
            (any::<usize>(), any::<u64>(), 0..PIECES, 1u8..255).prop_map(
                |(blob, idx, piece, val)| Op::Write {
                    blob,
                    idx,
                    piece,
                    val
                }
            ),
            any::<usize>().prop_map(|blob| Op::Snapshot { blob }),
            any::<usize>().prop_map(|blob| Op::Clone { blob }),
            any::<usize>().prop_map(|blob| Op::Inflate { blob }),
            any::<usize>().prop_map(|blob| Op::Decouple { blob }),
            (any::<usize>(), any::<usize>())
                .prop_map(|(blob, parent)| Op::SetParent { blob, parent }),
            any::<usize>().prop_map(|blob| Op::Delete { blob }),
            any::<bool>().prop_map(|clean| Op::Reload { clean }),
            (1u64..6).prop_map(|clusters| Op::EsnapClone { clusters }),
            any::<usize>().prop_map(|blob| Op::SetExternal { blob }),
        ]
    }

    type Cluster = [u8; PIECES];

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct MBlob {
        num_clusters: u64,
        thin: bool,
        read_only: bool,
        parent: Option<BlobId>,
        /// An esnap clone: its parent is the external snapshot.
        esnap: bool,
        /// The clusters the blob holds and what they hold.
        own: BTreeMap<u64, Cluster>,
    }

    struct Model {
        blobs: BTreeMap<BlobId, MBlob>,
        /// SPDK's snapshot list: blobs that have been a parent since load.
        snapshots: BTreeSet<BlobId>,
        data_clusters: u64,
    }

    impl Model {
        fn free(&self) -> u64 {
            self.data_clusters - self.blobs.values().map(|b| b.own.len() as u64).sum::<u64>()
        }
        fn pick(&self, i: usize) -> Option<BlobId> {
            (!self.blobs.is_empty()).then(|| *self.blobs.keys().nth(i % self.blobs.len()).unwrap())
        }
        /// What blob `id` reads at cluster `idx`.
        fn read(&self, id: BlobId, idx: u64) -> Cluster {
            let mut at = Some(id);
            while let Some(b) = at.and_then(|a| self.blobs.get(&a)) {
                if let Some(c) = b.own.get(&idx) {
                    return *c;
                }
                if idx >= b.num_clusters {
                    break;
                }
                if b.esnap {
                    return std::array::from_fn(|p| ext_val(idx, p));
                }
                at = b.parent;
            }
            [0; PIECES]
        }
        fn clones(&self, id: BlobId) -> Vec<BlobId> {
            self.blobs
                .iter()
                .filter(|(_, b)| b.parent == Some(id))
                .map(|(&c, _)| c)
                .collect()
        }
    }

    fn check(bs: &Store, m: &Model) {
        check_invariants(bs);
        assert_eq!(bs.blob_ids(), m.blobs.keys().copied().collect::<Vec<_>>());
        assert_eq!(bs.info().free_clusters, m.free(), "free clusters");
        for (&id, mb) in &m.blobs {
            let b = bs.open_blob(id).unwrap();
            assert_eq!(b.num_clusters(), mb.num_clusters);
            assert_eq!(b.is_thin(), mb.thin, "blob {id:#x} thin");
            assert_eq!(b.is_read_only(), mb.read_only, "blob {id:#x} read-only");
            assert_eq!(bs.parent(id), mb.parent, "blob {id:#x} parent");
            assert_eq!(bs.esnap_id(id).is_some(), mb.esnap, "blob {id:#x} esnap");
            assert!(!bs.is_degraded(id));
            assert_eq!(
                bs.is_snapshot(id),
                m.snapshots.contains(&id),
                "blob {id:#x} snapshot"
            );
            assert_eq!(
                b.num_allocated_clusters(),
                mb.own.len() as u64,
                "blob {id:#x} allocated"
            );
            let mut buf = vec![0u8; CLUSTER_BYTES];
            for idx in 0..mb.num_clusters {
                run(b.read(idx * BPC, &mut buf)).unwrap();
                let got: Vec<u8> = buf
                    .chunks(4096)
                    .map(|c| {
                        assert!(
                            c.iter().all(|&x| x == c[0]),
                            "blob {id:#x} cluster {idx}: mixed piece"
                        );
                        c[0]
                    })
                    .collect();
                assert_eq!(got, m.read(id, idx), "blob {id:#x} cluster {idx} bytes");
            }
        }
    }

    fn errno<T: std::fmt::Debug>(r: Result<T, Error>) -> i32 {
        r.map(|_| ()).map_or_else(|e| e.errno(), |()| 0)
    }

    fn apply(bs: &mut Store, dev: &mut Rc<MemDevice>, m: &mut Model, op: &Op) {
        run(async {
            match *op {
                Op::Create { thin, clusters } => {
                    if !thin && m.free() < clusters {
                        return;
                    }
                    let id = bs
                        .create_blob(&BlobOptions {
                            num_clusters: clusters,
                            thin_provision: thin,
                            ..BlobOptions::default()
                        })
                        .await
                        .unwrap();
                    // A thick blob's clusters are not cleared: write zeros
                    // so that the model's bytes hold.
                    let own = if thin {
                        BTreeMap::new()
                    } else {
                        let b = bs.open_blob(id).unwrap();
                        for idx in 0..clusters {
                            b.write(idx * BPC, &vec![0; CLUSTER_BYTES]).await.unwrap();
                        }
                        (0..clusters).map(|i| (i, [0; PIECES])).collect()
                    };
                    m.blobs.insert(
                        id,
                        MBlob {
                            num_clusters: clusters,
                            thin,
                            read_only: false,
                            parent: None,
                            esnap: false,
                            own,
                        },
                    );
                }
                Op::Write {
                    blob,
                    idx,
                    piece,
                    val,
                } => {
                    let Some(id) = m.pick(blob) else { return };
                    let mb = m.blobs[&id].clone();
                    let idx = idx % mb.num_clusters;
                    let r = bs
                        .open_blob(id)
                        .unwrap()
                        .write(idx * BPC + piece as u64 * 8, &[val; 4096])
                        .await;
                    if mb.read_only {
                        assert_eq!(errno(r), libc::EPERM);
                    } else if !mb.own.contains_key(&idx) && m.free() == 0 {
                        assert_eq!(errno(r), libc::ENOSPC);
                    } else {
                        r.unwrap();
                        let mut c = m.read(id, idx);
                        c[piece] = val;
                        m.blobs.get_mut(&id).unwrap().own.insert(idx, c);
                    }
                }
                Op::Snapshot { blob } => {
                    let Some(id) = m.pick(blob) else { return };
                    let r = bs.create_snapshot(id, &[]).await;
                    let mb = m.blobs[&id].clone();
                    if mb.read_only {
                        assert_eq!(errno(r), libc::EINVAL);
                        return;
                    }
                    let s = r.unwrap();
                    m.blobs.insert(
                        s,
                        MBlob {
                            read_only: true,
                            ..mb.clone()
                        },
                    );
                    let b = m.blobs.get_mut(&id).unwrap();
                    b.own.clear();
                    b.thin = true;
                    b.parent = Some(s);
                    b.esnap = false;
                    m.snapshots.insert(s);
                }
                Op::Clone { blob } => {
                    let Some(id) = m.pick(blob) else { return };
                    let r = bs.create_clone(id, &[]).await;
                    let mb = m.blobs[&id].clone();
                    if !mb.read_only {
                        assert_eq!(errno(r), libc::EINVAL);
                        return;
                    }
                    m.blobs.insert(
                        r.unwrap(),
                        MBlob {
                            num_clusters: mb.num_clusters,
                            thin: true,
                            read_only: false,
                            parent: Some(id),
                            esnap: false,
                            own: BTreeMap::new(),
                        },
                    );
                    m.snapshots.insert(id);
                }
                Op::Inflate { blob } | Op::Decouple { blob } => {
                    let all = matches!(op, Op::Inflate { .. });
                    let Some(id) = m.pick(blob) else { return };
                    let r = if all {
                        bs.inflate_blob(id).await
                    } else {
                        bs.decouple_parent(id).await
                    };
                    let mb = m.blobs[&id].clone();
                    // Decouple of an esnap clone is inflate (SPDK's).
                    let all = all || mb.esnap;
                    if mb.parent.is_none() && !all {
                        assert_eq!(errno(r), libc::EINVAL);
                        return;
                    }
                    if !mb.thin {
                        r.unwrap();
                        return;
                    }
                    if mb.read_only {
                        assert_eq!(errno(r), libc::EPERM);
                        return;
                    }
                    let parent = mb.parent.map(|p| m.blobs[&p].clone());
                    let needed: Vec<u64> = (0..mb.num_clusters)
                        .filter(|i| !mb.own.contains_key(i))
                        .filter(|i| all || parent.as_ref().is_some_and(|p| p.own.contains_key(i)))
                        .collect();
                    if needed.len() as u64 > m.free() {
                        assert_eq!(errno(r), libc::ENOSPC);
                        return;
                    }
                    r.unwrap();
                    let copies: Vec<(u64, Cluster)> =
                        needed.iter().map(|&i| (i, m.read(id, i))).collect();
                    let b = m.blobs.get_mut(&id).unwrap();
                    b.own.extend(copies);
                    if all {
                        b.thin = false;
                        b.parent = None;
                        b.esnap = false;
                    } else {
                        b.parent = parent.as_ref().and_then(|p| p.parent);
                        b.esnap = parent.is_some_and(|p| p.esnap);
                    }
                }
                Op::SetParent { blob, parent } => {
                    let (Some(id), Some(p)) = (m.pick(blob), m.pick(parent)) else {
                        return;
                    };
                    let r = bs.set_parent(id, p).await;
                    let (b, pb) = (m.blobs[&id].clone(), m.blobs[&p].clone());
                    let mut up = Some(p);
                    let mut cycle = false;
                    while let Some(u) = up {
                        cycle |= u == id;
                        up = m.blobs[&u].parent;
                    }
                    let want = if id == p {
                        libc::EINVAL
                    } else if b.parent == Some(p) {
                        libc::EEXIST
                    } else if !b.thin
                        || !m.snapshots.contains(&p)
                        || b.num_clusters != pb.num_clusters
                        || cycle
                    {
                        libc::EINVAL
                    } else {
                        0
                    };
                    assert_eq!(errno(r), want, "set_parent {id:#x} -> {p:#x}");
                    if want == 0 {
                        let b = m.blobs.get_mut(&id).unwrap();
                        b.parent = Some(p);
                        b.esnap = false;
                    }
                }
                Op::Delete { blob } => {
                    let Some(id) = m.pick(blob) else { return };
                    let r = bs.delete_blob(id).await;
                    let clones = m.clones(id);
                    if clones.len() > 1 {
                        assert_eq!(errno(r), libc::EBUSY);
                        return;
                    }
                    r.unwrap();
                    let s = m.blobs.remove(&id).unwrap();
                    m.snapshots.remove(&id);
                    if let Some(&c) = clones.first() {
                        let cb = m.blobs.get_mut(&c).unwrap();
                        for (i, data) in s.own {
                            if i < cb.num_clusters {
                                cb.own.entry(i).or_insert(data);
                            }
                        }
                        cb.parent = s.parent;
                        cb.esnap = s.esnap;
                    }
                }
                Op::Reload { clean } => {
                    if clean {
                        bs.unload().await.unwrap();
                    }
                    let next = Rc::new(MemDevice::from_image(512, BLOCKS, dev.image()));
                    *bs = Blobstore::load(next.clone(), &LoadOptions::default())
                        .await
                        .unwrap();
                    *dev = next;
                    attach(bs);
                    m.snapshots = m.blobs.values().filter_map(|b| b.parent).collect();
                }
                Op::EsnapClone { clusters } => {
                    let id = bs
                        .create_esnap_clone(EXT, clusters, &[], ClearMethod::Default)
                        .await
                        .unwrap();
                    m.blobs.insert(
                        id,
                        MBlob {
                            num_clusters: clusters,
                            thin: true,
                            read_only: false,
                            parent: None,
                            esnap: true,
                            own: BTreeMap::new(),
                        },
                    );
                }
                Op::SetExternal { blob } => {
                    let Some(id) = m.pick(blob) else { return };
                    let r = bs.set_external_parent(id, EXT).await;
                    let b = m.blobs[&id].clone();
                    let want = if b.esnap {
                        libc::EEXIST
                    } else if !b.thin {
                        libc::EINVAL
                    } else {
                        0
                    };
                    assert_eq!(errno(r), want, "set_external_parent {id:#x}");
                    if want == 0 {
                        let b = m.blobs.get_mut(&id).unwrap();
                        b.parent = None;
                        b.esnap = true;
                    }
                }
            }
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 128,
            failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::WithSource("regressions"))),
            ..ProptestConfig::default()
        })]

        #[test]
        fn lineage_matches_the_model(ops in proptest::collection::vec(op(), 1..50)) {
            let mut dev = Rc::new(MemDevice::new(512, BLOCKS));
            let mut bs = run(Blobstore::init(dev.clone(), &InitOptions { cluster_size: 64 << 10, ..InitOptions::default() })).unwrap();
            attach(&bs);
            let mut m = Model { blobs: BTreeMap::new(), snapshots: BTreeSet::new(), data_clusters: bs.info().total_data_clusters };
            for op in &ops {
                apply(&mut bs, &mut dev, &mut m, op);
                check(&bs, &m);
            }
            let bs2 = run(Blobstore::load(Rc::new(MemDevice::from_image(512, BLOCKS, dev.image())), &LoadOptions { force_recover: true, ..LoadOptions::default() })).unwrap();
            attach(&bs2);
            m.snapshots = m.blobs.values().filter_map(|b| b.parent).collect();
            check(&bs2, &m);
        }
    }
}
