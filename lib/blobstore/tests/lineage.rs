//! Snapshots, clones, copy-on-write, inflate, decouple, set_parent and
//! snapshot delete: what each does to the bytes every blob reads, to the
//! lineage, and the errors SPDK answers.

mod common;

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::common::{check_invariants, run, Store};
    use bdevkit_blobstore::{
        BlobDevice, BlobId, BlobOptions, Blobstore, Error, InitOptions, LoadOptions, MemDevice,
    };

    const BLOCK: u32 = 512;
    const CLUSTER: u32 = 64 << 10;
    const BPC: u64 = (CLUSTER / BLOCK) as u64;

    fn store() -> (Rc<MemDevice>, Store) {
        let dev = Rc::new(MemDevice::new(BLOCK, 32 << 11));
        let bs = run(Blobstore::init(
            dev.clone(),
            &InitOptions {
                cluster_size: CLUSTER,
                ..InitOptions::default()
            },
        ))
        .unwrap();
        (dev, bs)
    }

    fn blob(bs: &Store, clusters: u64, thin: bool) -> BlobId {
        run(bs.create_blob(&BlobOptions {
            num_clusters: clusters,
            thin_provision: thin,
            ..BlobOptions::default()
        }))
        .unwrap()
    }

    /// Writes 4 KiB of `byte` at block `lba` of blob `id`.
    fn put(bs: &Store, id: BlobId, lba: u64, byte: u8) {
        let b = bs.open_blob(id).unwrap();
        run(b.write(lba, &[byte; 4096])).unwrap();
    }

    /// The first byte of each 4 KiB of blob `id`, checking each 4 KiB is uniform.
    fn bytes(bs: &Store, id: BlobId) -> Vec<u8> {
        let b = bs.open_blob(id).unwrap();
        let mut buf = vec![0u8; usize::try_from(b.num_blocks() * u64::from(BLOCK)).unwrap()];
        run(b.read(0, &mut buf)).unwrap();
        buf.chunks(4096)
            .map(|c| {
                assert!(c.iter().all(|&x| x == c[0]), "mixed 4 KiB");
                c[0]
            })
            .collect()
    }

    fn reload(dev: &Rc<MemDevice>, bs: Store, clean: bool) -> Store {
        if clean {
            run(bs.unload()).unwrap();
        }
        drop(bs);
        let dev = Rc::new(MemDevice::from_image(BLOCK, dev.num_blocks(), dev.image()));
        run(Blobstore::load(dev, &LoadOptions::default())).unwrap()
    }

    #[test]
    fn a_snapshot_takes_the_clusters_and_the_volume_becomes_its_clone() {
        let (dev, bs) = store();
        let v = blob(&bs, 4, true);
        put(&bs, v, 0, 1);
        put(&bs, v, 2 * BPC, 2);
        let before = bytes(&bs, v);
        let s = run(bs.create_snapshot(v, &[("name".into(), b"snap\0".to_vec())])).unwrap();
        assert_eq!(bs.parent(v), Some(s));
        assert_eq!(bs.clones(s), vec![v]);
        assert!(bs.is_snapshot(s));
        let sb = bs.open_blob(s).unwrap();
        assert!(sb.is_read_only() && sb.is_thin());
        assert_eq!(sb.num_allocated_clusters(), 2);
        assert_eq!(sb.xattr("name").as_deref(), Some(&b"snap\0"[..]));
        assert!(sb.internal_xattr("SNAPTMP").is_none());
        drop(sb);
        let vb = bs.open_blob(v).unwrap();
        assert!(vb.is_clone() && vb.is_thin());
        assert_eq!(vb.num_allocated_clusters(), 0);
        assert_eq!(vb.internal_xattr("SNAP"), Some(s.to_le_bytes().to_vec()));
        drop(vb);
        assert_eq!(bytes(&bs, v), before);
        assert_eq!(bytes(&bs, s), before);
        check_invariants(&bs);

        // Copy-on-write: the first write to a cluster keeps the rest of it.
        put(&bs, v, 8, 9);
        let mut want = before.clone();
        want[1] = 9;
        assert_eq!(bytes(&bs, v), want);
        assert_eq!(bytes(&bs, s), before, "the snapshot does not change");
        assert_eq!(bs.open_blob(v).unwrap().num_allocated_clusters(), 1);
        assert!(matches!(
            run(bs.open_blob(s).unwrap().write(0, &[0; 4096])),
            Err(Error::ReadOnly(_))
        ));

        for clean in [true, false] {
            let bs2 = reload(&dev, bs.clone(), clean);
            assert_eq!(bs2.parent(v), Some(s));
            assert!(bs2.is_snapshot(s));
            assert_eq!(bytes(&bs2, v), want);
            assert_eq!(bytes(&bs2, s), before);
            check_invariants(&bs2);
            if clean {
                return;
            }
        }
    }

    #[test]
    fn a_thick_volume_becomes_a_thin_clone_of_a_thick_snapshot() {
        let (_dev, bs) = store();
        let v = blob(&bs, 3, false);
        put(&bs, v, BPC, 5);
        let s = run(bs.create_snapshot(v, &[])).unwrap();
        let sb = bs.open_blob(s).unwrap();
        assert!(!sb.is_thin());
        assert_eq!(sb.num_allocated_clusters(), 3);
        drop(sb);
        assert!(bs.open_blob(v).unwrap().is_thin());
        assert_eq!(bytes(&bs, v)[16], 5);
        check_invariants(&bs);
    }

    #[test]
    fn racing_first_writes_to_one_cluster_allocate_and_copy_once() {
        let (dev, bs) = store();
        let v = blob(&bs, 2, true);
        put(&bs, v, 0, 1);
        let s = run(bs.create_snapshot(v, &[])).unwrap();
        let b = bs.open_blob(v).unwrap();
        let free = bs.info().free_clusters;
        dev.reset_stats();
        let (a, c) = futures::executor::block_on(async {
            futures::join!(b.write(8, &[2; 4096]), b.write(16, &[3; 4096]))
        });
        a.unwrap();
        c.unwrap();
        assert_eq!(bs.info().free_clusters, free - 1);
        assert_eq!(b.num_allocated_clusters(), 1);
        let got = bytes(&bs, v);
        assert_eq!(&got[..5], &[1, 2, 3, 0, 0]);
        assert_eq!(bytes(&bs, s)[..5], [1, 0, 0, 0, 0]);
        check_invariants(&bs);
    }

    #[test]
    fn a_snapshot_taken_while_first_writes_copy_does_not_make_them_copy_again() {
        let (dev, bs) = store();
        let v = blob(&bs, 2, true);
        put(&bs, v, 0, 1);
        put(&bs, v, BPC, 2);
        let s1 = run(bs.create_snapshot(v, &[])).unwrap();
        let b = bs.open_blob(v).unwrap();
        dev.reset_stats();
        // Both first writes copy their cluster (the device yields at every
        // command) while the snapshot runs.
        let (w0, w1, s2) = futures::executor::block_on(async {
            futures::join!(
                b.write(8, &[3; 4096]),
                b.write(BPC + 8, &[4; 4096]),
                bs.create_snapshot(v, &[])
            )
        });
        w0.unwrap();
        w1.unwrap();
        let s2 = s2.unwrap();
        // Each cluster was read once: no copy started over.
        assert_eq!(dev.stats().read_bytes, 2 * u64::from(CLUSTER));
        let got = bytes(&bs, v);
        let per = usize::try_from(BPC / 8).unwrap();
        assert_eq!(&got[..2], &[1, 3]);
        assert_eq!(&got[per..per + 2], &[2, 4]);
        assert_eq!(bytes(&bs, s1)[..2], [1, 0]);
        // The snapshot holds each write or not, whole.
        let snap = bytes(&bs, s2);
        assert!(snap[1] == 0 || snap[1] == 3, "{:?}", &snap[..2]);
        assert!(snap[per + 1] == 0 || snap[per + 1] == 4);
        check_invariants(&bs);
        drop(b);
        let bs = reload(&dev, bs, true);
        assert_eq!(&bytes(&bs, v)[..2], &[1, 3]);
        check_invariants(&bs);
    }

    #[test]
    fn clones_of_a_snapshot_and_chains_read_through_their_parents() {
        let (_dev, bs) = store();
        let v = blob(&bs, 3, true);
        put(&bs, v, 0, 1);
        let s1 = run(bs.create_snapshot(v, &[])).unwrap();
        put(&bs, v, BPC, 2);
        let s2 = run(bs.create_snapshot(v, &[])).unwrap();
        assert_eq!(bs.parent(s2), Some(s1));
        assert_eq!(bs.parent(v), Some(s2));
        let c = run(bs.create_clone(s2, &[])).unwrap();
        assert_eq!(bs.parent(c), Some(s2));
        assert_eq!(bs.clones(s2), vec![v, c]);
        assert_eq!(bytes(&bs, c)[..17], bytes(&bs, v)[..17]);
        assert_eq!(bytes(&bs, c)[0], 1);
        assert_eq!(bytes(&bs, c)[16], 2);
        // A clone of a writable blob is refused.
        assert!(matches!(
            run(bs.create_clone(v, &[])),
            Err(Error::InvalidArgument(_))
        ));
        // A snapshot of a snapshot (read-only) is refused.
        assert!(matches!(
            run(bs.create_snapshot(s1, &[])),
            Err(Error::InvalidArgument(_))
        ));
        check_invariants(&bs);
    }

    #[test]
    fn deleting_snapshots_as_spdk_does() {
        let (dev, bs) = store();
        let v = blob(&bs, 3, true);
        put(&bs, v, 0, 1);
        put(&bs, v, BPC, 2);
        let s = run(bs.create_snapshot(v, &[])).unwrap();
        put(&bs, v, BPC, 3); // v now has its own cluster 1
        let want = bytes(&bs, v);
        let c = run(bs.create_clone(s, &[])).unwrap();
        // Two clones: EBUSY.
        let e = run(bs.delete_blob(s)).unwrap_err();
        assert!(matches!(e, Error::HasClones(_)));
        assert_eq!(e.errno(), libc::EBUSY);
        // No clones: a plain delete.
        run(bs.delete_blob(c)).unwrap();
        assert_eq!(bs.clones(s), vec![v]);
        // One clone: merged into it; the snapshot's cluster 1 is freed.
        let free = bs.info().free_clusters;
        run(bs.delete_blob(s)).unwrap();
        assert!(matches!(bs.open_blob(s), Err(Error::NotFound(_))));
        assert_eq!(bs.parent(v), None);
        assert_eq!(bytes(&bs, v), want);
        assert_eq!(bs.open_blob(v).unwrap().num_allocated_clusters(), 2);
        assert_eq!(bs.info().free_clusters, free + 1);
        check_invariants(&bs);
        let bs2 = reload(&dev, bs, false);
        assert_eq!(bytes(&bs2, v), want);
        assert_eq!(bs2.verify().unwrap().leaked_clusters, 0);
    }

    #[test]
    fn deleting_a_middle_snapshot_gives_its_clone_the_grandparent() {
        let (_dev, bs) = store();
        let v = blob(&bs, 2, true);
        put(&bs, v, 0, 1);
        let s1 = run(bs.create_snapshot(v, &[])).unwrap();
        put(&bs, v, BPC, 2);
        let s2 = run(bs.create_snapshot(v, &[])).unwrap();
        let want = bytes(&bs, v);
        run(bs.delete_blob(s2)).unwrap();
        assert_eq!(bs.parent(v), Some(s1));
        assert_eq!(bs.clones(s1), vec![v]);
        assert_eq!(bytes(&bs, v), want);
        check_invariants(&bs);
    }

    #[test]
    fn inflate_and_decouple() {
        let (_dev, bs) = store();
        let v = blob(&bs, 4, true);
        put(&bs, v, 0, 1);
        let s1 = run(bs.create_snapshot(v, &[])).unwrap();
        put(&bs, v, BPC, 2);
        let s2 = run(bs.create_snapshot(v, &[])).unwrap();
        put(&bs, v, 2 * BPC, 3);
        let want = bytes(&bs, v);
        let c = run(bs.create_clone(s2, &[])).unwrap();

        // Decouple: only what the parent holds (cluster 1) is copied; the
        // parent becomes the grandparent.
        run(bs.decouple_parent(v)).unwrap();
        assert_eq!(bs.parent(v), Some(s1));
        assert_eq!(bs.open_blob(v).unwrap().num_allocated_clusters(), 2);
        assert!(bs.open_blob(v).unwrap().is_thin());
        assert_eq!(bytes(&bs, v), want);
        run(bs.decouple_parent(v)).unwrap();
        assert_eq!(bs.parent(v), None);
        assert_eq!(bytes(&bs, v), want);
        assert!(matches!(
            run(bs.decouple_parent(v)),
            Err(Error::InvalidArgument(_))
        ));

        // Inflate: every cluster, thick, no parent; zeros stay zeros.
        let want_c = bytes(&bs, c);
        run(bs.inflate_blob(c)).unwrap();
        let cb = bs.open_blob(c).unwrap();
        assert!(!cb.is_thin());
        assert_eq!(cb.num_allocated_clusters(), 4);
        assert_eq!(bs.parent(c), None);
        drop(cb);
        assert_eq!(bytes(&bs, c), want_c);
        assert_eq!(want_c[3 * 16], 0);
        // Inflating a thick blob: nothing to do.
        run(bs.inflate_blob(c)).unwrap();
        check_invariants(&bs);
        // The snapshots lost their clones: plain deletes.
        run(bs.delete_blob(s2)).unwrap();
        run(bs.delete_blob(s1)).unwrap();
        assert_eq!(bytes(&bs, v), want);
        check_invariants(&bs);
    }

    #[test]
    fn inflate_without_room_is_refused_first() {
        let (_dev, bs) = store();
        let v = blob(&bs, 4, true);
        put(&bs, v, 0, 1);
        let _s = run(bs.create_snapshot(v, &[])).unwrap();
        let free = bs.info().free_clusters;
        let hog = blob(&bs, free - 2, false);
        let e = run(bs.inflate_blob(v)).unwrap_err();
        assert_eq!(e.errno(), libc::ENOSPC);
        assert_eq!(bs.open_blob(v).unwrap().num_allocated_clusters(), 0);
        run(bs.delete_blob(hog)).unwrap();
        run(bs.inflate_blob(v)).unwrap();
        check_invariants(&bs);
    }

    #[test]
    fn set_parent_checks_and_effect() {
        let (dev, bs) = store();
        let a = blob(&bs, 2, true);
        put(&bs, a, 0, 7);
        let s = run(bs.create_snapshot(a, &[])).unwrap();
        let t = blob(&bs, 2, true);
        put(&bs, t, BPC, 4);
        let thick = blob(&bs, 2, false);
        let other = blob(&bs, 3, true);
        let e = |r: Result<(), Error>| r.unwrap_err().errno();
        assert_eq!(e(run(bs.set_parent(t, t))), libc::EINVAL);
        assert_eq!(e(run(bs.set_parent(a, s))), libc::EEXIST);
        assert_eq!(e(run(bs.set_parent(thick, s))), libc::EINVAL);
        assert_eq!(e(run(bs.set_parent(other, s))), libc::EINVAL);
        assert_eq!(e(run(bs.set_parent(t, a))), libc::EINVAL, "not a snapshot");
        assert_eq!(e(run(bs.set_parent(t, 0x1_0000_0fff))), libc::ENOENT);
        run(bs.set_parent(t, s)).unwrap();
        assert_eq!(bs.parent(t), Some(s));
        assert_eq!(
            bytes(&bs, t)[..17],
            {
                let mut w = vec![7u8; 1];
                w.extend(vec![0u8; 15]);
                w.push(4);
                w
            }[..]
        );
        assert_eq!(bs.clones(s), vec![a, t]);
        check_invariants(&bs);
        let bs2 = reload(&dev, bs, true);
        assert_eq!(bs2.parent(t), Some(s));
    }

    #[test]
    fn a_busy_or_open_snapshot_is_not_deleted_and_stays_listed() {
        let (_dev, bs) = store();
        let v = blob(&bs, 2, true);
        put(&bs, v, 0, 1);
        let s = run(bs.create_snapshot(v, &[])).unwrap();
        let h = bs.open_blob(s).unwrap();
        assert_eq!(run(bs.delete_blob(s)).unwrap_err().errno(), libc::EBUSY);
        assert!(bs.blob_ids().contains(&s));
        drop(h);
        run(bs.delete_blob(s)).unwrap();
        assert_eq!(bytes(&bs, v)[0], 1);
    }
}
