//! Power cuts at the lvol level: each lvol operation (create thick and
//! thin, resize up and down, delete, rename, set_read_only, rename the
//! store) is cut at every write unit of the blobstore's in-memory device
//! (a base that stops persisting after the N-th unit), and the image that
//! survived must: load as an lvol store; show the store in its state
//! before or after the operation (after, if it was acknowledged); keep the
//! data written before it; own every cluster once and leak none; and go on
//! working (create, write, clean unload, reload).
//!
//! `lib/blobstore/tests/crash.rs` cuts the blob operations underneath; this
//! adds what the lvol layer puts on them: names and UUIDs in xattrs, the
//! super blob, the listing `bdev_lvol_get_lvols` shows.

mod lvs;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use bdevkit_blobstore::{MemDevice, MemImage};
    use uuid::Uuid;

    use crate::lvs::{
        check_invariants, init, load, opts, pattern, read, run, state, write, Core, State, BLOCK,
        BLOCKS,
    };

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Op {
        CreateThick,
        CreateThin,
        GrowThick,
        ShrinkThick,
        GrowThin,
        ShrinkThin,
        DeleteThick,
        DeleteThin,
        Rename,
        SetReadOnly,
        RenameStore,
    }

    impl Op {
        /// The lvol whose data at clusters from this index on the
        /// operation may clear (freed clusters are cleared before the
        /// metadata that frees them is on disk).
        fn may_clear(self) -> Option<(&'static str, u64)> {
            match self {
                Op::ShrinkThick => Some(("thick", 3)),
                Op::ShrinkThin => Some(("thin", 100)),
                Op::DeleteThick => Some(("thick", 0)),
                Op::DeleteThin => Some(("thin", 0)),
                _ => None,
            }
        }
    }

    async fn apply(core: &Core, op: Op) -> bdevkit_lvol::Result<()> {
        let id = |n: &str| core.find(n).expect("setup lvol");
        match op {
            Op::CreateThick | Op::CreateThin => {
                let mut o = if op == Op::CreateThick {
                    opts("new", 5, false)
                } else {
                    opts("newthin", 1000, true)
                };
                // The same UUID in every run, so that runs compare.
                o.uuid = Some(Uuid::from_u128(0x5eed));
                core.create_lvol(&o).await.map(drop)
            }
            Op::GrowThick => core.resize_lvol(id("thick"), 20 * 65536).await,
            Op::ShrinkThick => core.resize_lvol(id("thick"), 3 * 65536).await,
            Op::GrowThin => core.resize_lvol(id("thin"), 1200 * 65536).await,
            Op::ShrinkThin => core.resize_lvol(id("thin"), 100 * 65536).await,
            Op::DeleteThick => core.delete_lvol(id("thick")).await,
            Op::DeleteThin => core.delete_lvol(id("thin")).await,
            Op::Rename => core.rename_lvol(id("thin"), "renamed").await,
            Op::SetReadOnly => core.set_read_only(id("thick")).await,
            Op::RenameStore => core.rename("lvs1").await,
        }
    }

    /// The data the setup wrote: (lvol, cluster) -> seed.
    fn written() -> Vec<(&'static str, u64, u64)> {
        let mut w: Vec<(&str, u64, u64)> = (0..8).map(|i| ("thick", i, 10 + i)).collect();
        w.extend([("thin", 1, 21), ("thin", 2, 22), ("thin", 550, 23)]);
        w.push(("other", 0, 30));
        w
    }

    /// The base store: a thick lvol of 8 clusters, a thin one of 600 with
    /// clusters in two extent pages, another thin one, all written.
    fn base(clean: bool) -> MemImage {
        let dev = Rc::new(MemDevice::new(BLOCK, BLOCKS));
        let core = init(&dev, "lvs0");
        run(async {
            for (n, c, thin) in [("thick", 8, false), ("thin", 600, true), ("other", 4, true)] {
                core.create_lvol(&opts(n, c, thin)).await.unwrap();
            }
            for (n, idx, seed) in written() {
                write(&core, core.find(n).unwrap(), idx, seed)
                    .await
                    .unwrap();
            }
            if clean {
                core.unload().await.unwrap();
            }
        });
        dev.image()
    }

    /// The data written before the operation is still there, wherever an
    /// lvol (found by UUID) keeps the same cluster.
    fn check_data(core: &Core, old: &State, got: &State, op: Op) {
        let by_uuid: BTreeMap<Option<Uuid>, &str> = got
            .lvols
            .iter()
            .map(|(n, l)| (l.uuid, n.as_str()))
            .collect();
        for (name, idx, seed) in written() {
            if op
                .may_clear()
                .is_some_and(|(n, from)| n == name && idx >= from)
            {
                continue;
            }
            let o = &old.lvols[name];
            let Some(&now) = by_uuid.get(&o.uuid) else {
                panic!("{op:?}: lvol {name} is gone");
            };
            let l = &got.lvols[now];
            assert_eq!(
                l.clusters.get(&idx),
                o.clusters.get(&idx),
                "{op:?}: {name} {idx} moved"
            );
            assert_eq!(
                read(core, l.id, idx).as_deref(),
                Some(&pattern(seed)[..]),
                "{op:?}: data of {name} cluster {idx}"
            );
        }
    }

    /// Work after the cut: must succeed without a cluster owned twice.
    fn exercise(core: &Core) {
        run(async {
            let id = core.create_lvol(&opts("after", 10, true)).await.unwrap();
            write(core, id, 0, 99).await.unwrap();
            write(core, id, 9, 98).await.unwrap();
            let thick = core
                .create_lvol(&opts("after-thick", 2, false))
                .await
                .unwrap();
            check_invariants(core);
            core.delete_lvol(thick).await.unwrap();
        });
    }

    /// Cuts `op` at every write unit, from a clean and a dirty base;
    /// returns the cut points tried.
    fn crash_test(op: Op) -> u64 {
        let mut total = 0;
        for clean in [true, false] {
            let image = base(clean);
            let fresh = || Rc::new(MemDevice::from_image(BLOCK, BLOCKS, image.clone()));
            // The reference run: the states before and after, the units.
            let dev = fresh();
            let core = load(&dev);
            let old = state(&core);
            dev.reset_stats();
            run(apply(&core, op)).unwrap_or_else(|e| panic!("{op:?}: reference run: {e}"));
            let units = dev.stats().write_units;
            assert!(units > 0, "{op:?}: wrote nothing");
            let new = state(&core);
            assert_eq!(
                new,
                state(&load(&Rc::new(MemDevice::from_image(
                    BLOCK,
                    BLOCKS,
                    dev.image()
                ))))
            );
            assert_ne!(new, old, "{op:?} changed nothing");
            for cut in 0..=units {
                let dev = fresh();
                let core = load(&dev);
                dev.cut_after(cut);
                let acked = run(apply(&core, op)).is_ok();
                drop(core);
                let after = Rc::new(MemDevice::from_image(BLOCK, BLOCKS, dev.image()));
                let core = load(&after);
                check_invariants(&core);
                let got = state(&core);
                assert!(
                    got == old || got == new,
                    "{op:?} (clean base {clean}) cut at {cut}: neither old nor new:\n{got:#?}"
                );
                if acked {
                    assert_eq!(got, new, "{op:?} cut at {cut}: acknowledged but lost");
                }
                check_data(&core, &old, &got, op);
                exercise(&core);
                run(core.unload()).unwrap();
                let again = load(&after);
                assert!(again.blobstore().info().clean_on_disk);
                check_invariants(&again);
                assert!(again.find("after").is_some());
                total += 1;
            }
            eprintln!(
                "lvs crash: {op:<12?} base {:<5} write units {units:>3}",
                if clean { "clean" } else { "dirty" }
            );
        }
        total
    }

    #[test]
    fn create_thick_and_thin() {
        assert!(crash_test(Op::CreateThick) > 2);
        assert!(crash_test(Op::CreateThin) > 2);
    }

    #[test]
    fn resize_up_and_down() {
        for op in [Op::GrowThick, Op::ShrinkThick, Op::GrowThin, Op::ShrinkThin] {
            assert!(crash_test(op) > 2);
        }
    }

    #[test]
    fn delete_thick_and_thin() {
        assert!(crash_test(Op::DeleteThick) > 2);
        assert!(crash_test(Op::DeleteThin) > 2);
    }

    #[test]
    fn rename_set_read_only_and_rename_store() {
        for op in [Op::Rename, Op::SetReadOnly, Op::RenameStore] {
            assert!(crash_test(op) > 2);
        }
    }
}
