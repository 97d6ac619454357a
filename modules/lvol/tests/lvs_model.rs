//! A model test at the lvol level: random sequences of create / resize /
//! write / unmap / delete (a snapshot: merged, or EBUSY) / rename /
//! set_read_only / snapshot / clone / reload (clean or
//! dirty) over lvols of a store on the blobstore's in-memory device,
//! checked after every step against an in-memory model of the lvols (name,
//! UUID, thin, read-only, size, which clusters hold which data) and the
//! store's invariants.
//!
//! `lib/blobstore/tests/model.rs` does the same for blobs; this one drives
//! the lvol store core (`LvsCore`), so names (unique, renamed), UUIDs and
//! read-only lvols are in the model too.

mod lvs;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use bdevkit_blobstore::{BlobId, MemDevice};
    use bdevkit_lvol::LvolError;
    use proptest::prelude::*;
    use uuid::Uuid;

    use crate::lvs::{
        check_invariants, init, load, opts, pattern, read, run, write, Core, BLOCK, BLOCKS,
    };

    #[derive(Debug, Clone)]
    enum Op {
        Create { name: u8, thin: bool, clusters: u64 },
        Resize { lvol: usize, clusters: u64 },
        Write { lvol: usize, idx: u64, seed: u64 },
        Unmap { lvol: usize, idx: u64 },
        Delete { lvol: usize },
        Rename { lvol: usize, name: u8 },
        SetReadOnly { lvol: usize },
        Snapshot { lvol: usize, name: u8 },
        Clone { lvol: usize, name: u8 },
        Reload { clean: bool },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..6, any::<bool>(), 0u64..40).prop_map(|(name, thin, clusters)| Op::Create { name, thin, clusters }),
            2 => (0usize..8, 0u64..60).prop_map(|(lvol, clusters)| Op::Resize { lvol, clusters }),
            5 => (0usize..8, 0u64..64, any::<u64>()).prop_map(|(lvol, idx, seed)| Op::Write { lvol, idx, seed }),
            2 => (0usize..8, 0u64..64).prop_map(|(lvol, idx)| Op::Unmap { lvol, idx }),
            1 => (0usize..8).prop_map(|lvol| Op::Delete { lvol }),
            1 => (0usize..8, 0u8..6).prop_map(|(lvol, name)| Op::Rename { lvol, name }),
            1 => (0usize..8).prop_map(|lvol| Op::SetReadOnly { lvol }),
            1 => any::<bool>().prop_map(|clean| Op::Reload { clean }),
            2 => (0usize..8, 0u8..9).prop_map(|(lvol, name)| Op::Snapshot { lvol, name }),
            1 => (0usize..8, 0u8..9).prop_map(|(lvol, name)| Op::Clone { lvol, name }),
        ]
    }

    /// What the model knows of one lvol.
    #[derive(Debug, Clone)]
    struct MLvol {
        name: String,
        uuid: Uuid,
        thin: bool,
        read_only: bool,
        clusters: u64,
        /// Clusters a thin lvol has (all of them, for a thick one).
        allocated: std::collections::BTreeSet<u64>,
        /// The 4 KiB pattern written at the start of a cluster it holds.
        data: BTreeMap<u64, u64>,
        /// Its parent snapshot (a clone).
        parent: Option<BlobId>,
    }

    /// The pattern lvol `id` reads at the start of cluster `idx`: its own,
    /// else its parent chain's (None: unknown or nothing written).
    fn visible(model: &BTreeMap<BlobId, MLvol>, id: BlobId, idx: u64) -> Option<u64> {
        let mut at = Some(id);
        while let Some(m) = at.and_then(|a| model.get(&a)) {
            if idx >= m.clusters {
                return None;
            }
            if let Some(&s) = m.data.get(&idx) {
                return Some(s);
            }
            if m.allocated.contains(&idx) {
                return None;
            }
            at = m.parent;
        }
        None
    }

    fn name(n: u8) -> String {
        format!("vol{n}")
    }

    /// The store against the model: the lvols, their flags, clusters and
    /// data, and the invariants.
    fn check(core: &Core, model: &BTreeMap<BlobId, MLvol>) {
        check_invariants(core);
        let lvols = core.lvols();
        assert_eq!(
            lvols.iter().map(|l| l.id).collect::<Vec<_>>(),
            model.keys().copied().collect::<Vec<_>>()
        );
        for l in lvols {
            let m = &model[&l.id];
            assert_eq!(
                (&l.name, l.uuid, l.thin, l.read_only, l.num_clusters),
                (&m.name, Some(m.uuid), m.thin, m.read_only, m.clusters),
                "lvol {:#x}",
                l.id
            );
            assert_eq!(core.find(&m.name), Some(l.id));
            let b = core.blobstore().open_blob(l.id).unwrap();
            let got: std::collections::BTreeSet<u64> =
                b.allocated_clusters().into_iter().map(|(i, _)| i).collect();
            assert_eq!(got, m.allocated, "allocated clusters of {}", m.name);
            assert_eq!(
                core.blobstore().parent(l.id),
                m.parent,
                "parent of {}",
                m.name
            );
            for idx in 0..m.clusters {
                if let Some(seed) = visible(model, l.id, idx) {
                    assert_eq!(
                        read(core, l.id, idx).as_deref(),
                        Some(&pattern(seed)[..]),
                        "data of {} cluster {idx}",
                        m.name
                    );
                }
            }
        }
    }

    /// The lvol the op means: the `i`-th (mod count) in blob-id order.
    fn pick(model: &BTreeMap<BlobId, MLvol>, i: usize) -> Option<BlobId> {
        if model.is_empty() {
            return None;
        }
        model.keys().nth(i % model.len()).copied()
    }

    fn read_only<T: std::fmt::Debug>(r: bdevkit_lvol::Result<T>) {
        assert!(
            matches!(
                r,
                Err(LvolError::Blob(bdevkit_blobstore::Error::ReadOnly(_)))
            ),
            "a read-only lvol refuses: {r:?}"
        );
    }

    fn step(
        core: &mut Core,
        dev: &mut Rc<MemDevice>,
        model: &mut BTreeMap<BlobId, MLvol>,
        op: &Op,
    ) {
        let free = core.blobstore().info().free_clusters;
        match *op {
            Op::Create {
                name: n,
                thin,
                clusters,
            } => {
                let taken = model.values().any(|m| m.name == name(n));
                let mut o = opts(&name(n), clusters, thin);
                let uuid = Uuid::new_v4();
                o.uuid = Some(uuid);
                let r = run(core.create_lvol(&o));
                if taken {
                    assert!(matches!(r, Err(LvolError::Exists(_))), "{r:?}");
                } else if !thin && clusters > free {
                    assert!(r.is_err(), "no room for a thick lvol");
                } else {
                    let id = r.unwrap();
                    let allocated = if thin {
                        Default::default()
                    } else {
                        (0..clusters).collect()
                    };
                    model.insert(
                        id,
                        MLvol {
                            name: name(n),
                            uuid,
                            thin,
                            read_only: false,
                            clusters,
                            allocated,
                            data: BTreeMap::new(),
                            parent: None,
                        },
                    );
                }
            }
            Op::Resize { lvol, clusters } => {
                let Some(id) = pick(model, lvol) else { return };
                let m = model.get_mut(&id).unwrap();
                let r = run(core.resize_lvol(id, clusters * 65536));
                if m.read_only {
                    return read_only(r);
                }
                if !m.thin && clusters > m.clusters && clusters - m.clusters > free {
                    assert!(r.is_err(), "no room to grow a thick lvol");
                    return;
                }
                r.unwrap();
                m.clusters = clusters;
                m.allocated.retain(|&i| i < clusters);
                m.data.retain(|&i, _| i < clusters);
                if !m.thin {
                    m.allocated = (0..clusters).collect();
                }
            }
            Op::Write { lvol, idx, seed } => {
                let Some(id) = pick(model, lvol) else { return };
                let m = model.get_mut(&id).unwrap();
                if m.clusters == 0 {
                    return;
                }
                let idx = idx % m.clusters;
                let r = run(write(core, id, idx, seed));
                if m.read_only && m.thin && !m.allocated.contains(&idx) {
                    return read_only(r);
                }
                if m.read_only {
                    // The I/O path refuses writes to read-only lvols; this
                    // layer has no data path of its own to refuse them.
                    r.unwrap();
                    m.data.insert(idx, seed);
                    return;
                }
                if m.thin && !m.allocated.contains(&idx) && free == 0 {
                    assert!(r.is_err(), "no room to allocate");
                    return;
                }
                r.unwrap();
                m.allocated.insert(idx);
                m.data.insert(idx, seed);
            }
            Op::Unmap { lvol, idx } => {
                // What the I/O path does with an unmap of a whole cluster
                // of a thin lvol: give it back.
                let Some(id) = pick(model, lvol) else { return };
                let m = model.get_mut(&id).unwrap();
                if m.clusters == 0 {
                    return;
                }
                let idx = idx % m.clusters;
                let b = core.blobstore().open_blob(id).unwrap();
                let r = run(b.release_cluster(idx));
                drop(b);
                if m.read_only {
                    return read_only(r.map_err(LvolError::from));
                }
                let released = r.unwrap();
                assert_eq!(released, m.thin && m.allocated.contains(&idx));
                if released {
                    m.allocated.remove(&idx);
                    m.data.remove(&idx);
                    if m.parent.is_none() {
                        assert_eq!(read(core, id, idx), None, "reads zeros: no cluster");
                    }
                }
            }
            Op::Delete { lvol } => {
                let Some(id) = pick(model, lvol) else { return };
                let clones: Vec<BlobId> = model
                    .iter()
                    .filter(|(_, m)| m.parent == Some(id))
                    .map(|(&c, _)| c)
                    .collect();
                let r = run(core.delete_lvol(id));
                if clones.len() > 1 {
                    assert_eq!(r.map_err(|e| e.errno()), Err(libc::EBUSY));
                    return;
                }
                r.unwrap();
                let s = model.remove(&id).unwrap();
                if let Some(&c) = clones.first() {
                    // Merged: the clone takes what it lacks, and the parent.
                    let cm = model.get_mut(&c).unwrap();
                    for i in s.allocated.iter().copied().filter(|&i| i < cm.clusters) {
                        if cm.allocated.insert(i) {
                            if let Some(&d) = s.data.get(&i) {
                                cm.data.insert(i, d);
                            }
                        }
                    }
                    cm.parent = s.parent;
                }
            }
            Op::Snapshot { lvol, name: n } => {
                let Some(id) = pick(model, lvol) else { return };
                let new = name(n);
                let r = run(core.snapshot_lvol(id, &new));
                let m = model[&id].clone();
                if model.values().any(|o| o.name == new) {
                    assert!(matches!(r, Err(LvolError::Exists(_))), "{r:?}");
                    return;
                }
                if m.read_only {
                    assert_eq!(r.map_err(|e| e.errno()), Err(libc::EINVAL));
                    return;
                }
                let s = r.unwrap();
                let uuid = core.lvol(s).unwrap().uuid.unwrap();
                model.insert(
                    s,
                    MLvol {
                        name: new,
                        uuid,
                        read_only: true,
                        ..m.clone()
                    },
                );
                let v = model.get_mut(&id).unwrap();
                v.thin = true;
                v.allocated.clear();
                v.data.clear();
                v.parent = Some(s);
            }
            Op::Clone { lvol, name: n } => {
                let Some(id) = pick(model, lvol) else { return };
                let new = name(n);
                let r = run(core.clone_lvol(id, &new));
                let m = model[&id].clone();
                if model.values().any(|o| o.name == new) {
                    assert!(matches!(r, Err(LvolError::Exists(_))), "{r:?}");
                    return;
                }
                if !m.read_only {
                    assert_eq!(r.map_err(|e| e.errno()), Err(libc::EINVAL));
                    return;
                }
                let c = r.unwrap();
                let uuid = core.lvol(c).unwrap().uuid.unwrap();
                model.insert(
                    c,
                    MLvol {
                        name: new,
                        uuid,
                        thin: true,
                        read_only: false,
                        clusters: m.clusters,
                        allocated: Default::default(),
                        data: BTreeMap::new(),
                        parent: Some(id),
                    },
                );
            }
            Op::Rename { lvol, name: n } => {
                let Some(id) = pick(model, lvol) else { return };
                let new = name(n);
                let r = run(core.rename_lvol(id, &new));
                let m = &model[&id];
                if m.name == new {
                    r.unwrap();
                } else if model.values().any(|o| o.name == new) {
                    assert!(matches!(r, Err(LvolError::Exists(_))), "{r:?}");
                } else if m.read_only {
                    read_only(r);
                } else {
                    r.unwrap();
                    model.get_mut(&id).unwrap().name = new;
                }
            }
            Op::SetReadOnly { lvol } => {
                let Some(id) = pick(model, lvol) else { return };
                run(core.set_read_only(id)).unwrap();
                model.get_mut(&id).unwrap().read_only = true;
            }
            Op::Reload { clean } => {
                if clean {
                    run(core.unload()).unwrap();
                }
                // A dirty reload: the image as a power cut leaves it.
                let image = dev.image();
                *dev = Rc::new(MemDevice::from_image(BLOCK, BLOCKS, image));
                *core = load(dev);
                if clean {
                    assert!(core.blobstore().info().clean_on_disk);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn lvols_match_the_model(ops in proptest::collection::vec(op(), 1..40)) {
            let mut dev = Rc::new(MemDevice::new(BLOCK, BLOCKS));
            let mut core = init(&dev, "lvs0");
            let uuid = core.uuid();
            let mut model = BTreeMap::new();
            for op in &ops {
                step(&mut core, &mut dev, &mut model, op);
                check(&core, &model);
                prop_assert_eq!(core.uuid(), uuid);
                prop_assert_eq!(core.name(), "lvs0");
            }
            // Whatever happened, a clean unload and reload keeps it all.
            step(&mut core, &mut dev, &mut model, &Op::Reload { clean: true });
            check(&core, &model);
        }
    }
}
