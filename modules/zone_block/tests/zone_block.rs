//! zone_block on malloc: the zone API end to end through the bdev layer —
//! geometry and `bdev_get_bdevs`, zone reports, writes at the write
//! pointer, appends from two threads, management, the ZNS statuses of
//! refused I/O, the bdev layer's checks, forwarding through passthru, raid
//! refusing it, the RPCs with SPDK's answers and config replay.

#[cfg(test)]
mod tests {
    use bdevkit::bdev::{
        BdevChannel, BdevDesc, IoType, ZoneAction, ZoneError, ZoneInfo, ZoneState, ZoneType,
    };
    use bdevkit::dma::DmaBuf;
    use bdevkit::thread::{CpuSet, Thread};
    use bdevkit::Error;
    use bdevkit_jsonrpc::RpcError;
    use bdevkit_passthru::PassthruCreateParams;
    use bdevkit_test::rpc::{self, call, RegisterRpcs};
    use bdevkit_test::{malloc, TestEnv};
    use bdevkit_zone_block::ZoneBlockCreateParams;
    use serde_json::json;

    fn env() -> TestEnv {
        TestEnv::with_modules(
            "0x3",
            &[
                bdevkit_malloc::register,
                bdevkit_passthru::register,
                bdevkit_zone_block::register,
            ],
        )
    }

    const RPCS: &[RegisterRpcs] = &[
        bdevkit_malloc::rpc::register_rpcs,
        bdevkit_zone_block::rpc::register_rpcs,
    ];

    /// A zoned bdev `Z0` over 4096 blocks of malloc: zones of 256 blocks
    /// (capacity 200), 16 zones; a writable channel to it.
    fn zoned(mgr: &bdevkit::bdev::BdevManager) -> (BdevDesc, BdevChannel) {
        malloc(mgr, "M0", 4096);
        let mut p = ZoneBlockCreateParams::new("Z0", "M0", 200);
        p.optimal_open_zones = 4;
        bdevkit_zone_block::create(mgr, p).unwrap();
        let desc = mgr.open("Z0", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        (desc, ch)
    }

    fn buf(byte: u8, blocks: usize) -> DmaBuf {
        let mut b = DmaBuf::new(512 * blocks).unwrap();
        b.fill(byte);
        b
    }

    fn zns(e: &Error, want: ZoneError) -> bool {
        matches!(e, Error::Io(s) if *s == want.status())
    }

    #[test]
    fn geometry_and_bdev_get_bdevs() {
        env().run(|mgr| async move {
            let _z = zoned(&mgr);
            let z = mgr.get("Z0").unwrap();
            assert_eq!(z.num_blocks(), 4096);
            let geo = z.props().zoned.unwrap();
            assert_eq!((geo.zone_size, geo.optimal_open_zones), (256, 4));
            let j = z.info_json();
            assert_eq!(j["zoned"], true);
            assert_eq!(j["zone_size"], 256);
            assert_eq!(j["max_open_zones"], 0);
            assert_eq!(j["optimal_open_zones"], 4);
            assert_eq!(j["product_name"], "zone_block");
            let io = &j["supported_io_types"];
            for t in [
                "read",
                "write",
                "zone_append",
                "get_zone_info",
                "zone_management",
            ] {
                assert_eq!(io[t], true, "{t}");
            }
            assert_eq!(io["unmap"], false);
            assert_eq!(
                j["driver_specific"],
                json!({"zoned_block": {"name": "Z0", "base_bdev": "M0",
                    "zone_capacity": 200, "optimal_open_zones": 4}})
            );
            assert_eq!(mgr.get("M0").unwrap().info_json()["zoned"], false);
            let uuid = uuid::Uuid::new_v5(
                &bdevkit_zone_block::NAMESPACE_UUID,
                mgr.get("M0").unwrap().uuid().as_bytes(),
            );
            assert_eq!(z.uuid(), uuid);
        });
    }

    #[test]
    fn write_at_the_pointer_read_back_and_report() {
        env().run(|mgr| async move {
            let (_d, ch) = zoned(&mgr);
            // Zones start full, as SPDK's.
            let r = ch.get_zone_info(0, 16).await.unwrap();
            assert_eq!(r.len(), 16);
            assert!(r
                .iter()
                .enumerate()
                .all(|(n, z)| z.zone_id == n as u64 * 256
                    && z.state == ZoneState::Full
                    && z.capacity == 200
                    && z.write_pointer == z.zone_id + 200
                    && z.zone_type == ZoneType::SequentialWriteRequired));
            let e = ch.write(256, 1, buf(1, 1)).await.unwrap_err().error;
            assert!(zns(&e, ZoneError::Full), "{e:?}");
            ch.zone_management(256, ZoneAction::Reset).await.unwrap();
            ch.write(256, 8, buf(0xa5, 8)).await.unwrap();
            let e = ch.write(256, 1, buf(1, 1)).await.unwrap_err().error;
            assert!(zns(&e, ZoneError::InvalidWrite), "{e:?}");
            ch.write(264, 2, buf(0x5a, 2)).await.unwrap();
            let z = ch.get_zone_info(256, 1).await.unwrap()[0];
            assert_eq!((z.state, z.write_pointer), (ZoneState::ImplicitOpen, 266));
            let back = ch.read(256, 10, DmaBuf::new(5120).unwrap()).await.unwrap();
            assert!(back[..4096].iter().all(|b| *b == 0xa5));
            assert!(back[4096..].iter().all(|b| *b == 0x5a));
            // Past the capacity, and across it.
            let e = ch.write(266, 191, buf(1, 191)).await.unwrap_err().error;
            assert!(zns(&e, ZoneError::Boundary), "{e:?}");
            let e = ch
                .read(456, 1, DmaBuf::new(512).unwrap())
                .await
                .unwrap_err()
                .error;
            assert!(zns(&e, ZoneError::Boundary), "{e:?}");
            // Filling the zone makes it full.
            ch.write(266, 190, buf(2, 190)).await.unwrap();
            let z = ch.get_zone_info(256, 1).await.unwrap()[0];
            assert_eq!((z.state, z.write_pointer), (ZoneState::Full, 456));
        });
    }

    #[test]
    fn management_and_its_refusals() {
        env().run(|mgr| async move {
            let (_d, ch) = zoned(&mgr);
            let state = |r: Vec<ZoneInfo>| (r[0].state, r[0].write_pointer);
            ch.zone_management(512, ZoneAction::Reset).await.unwrap();
            let e = ch
                .zone_management(512, ZoneAction::Close)
                .await
                .unwrap_err();
            assert!(zns(&e, ZoneError::InvalidTransition), "{e:?}");
            ch.zone_management(512, ZoneAction::Open).await.unwrap();
            assert_eq!(
                state(ch.get_zone_info(512, 1).await.unwrap()),
                (ZoneState::ExplicitOpen, 512)
            );
            ch.write(512, 4, buf(3, 4)).await.unwrap();
            ch.zone_management(512, ZoneAction::Close).await.unwrap();
            assert_eq!(
                state(ch.get_zone_info(512, 1).await.unwrap()),
                (ZoneState::Closed, 516)
            );
            ch.zone_management(512, ZoneAction::Finish).await.unwrap();
            assert_eq!(
                state(ch.get_zone_info(512, 1).await.unwrap()),
                (ZoneState::Full, 712)
            );
            let e = ch
                .zone_management(512, ZoneAction::Offline)
                .await
                .unwrap_err();
            assert!(zns(&e, ZoneError::InvalidTransition), "{e:?}");
            // The bdev layer's checks: not a zone start, a report past the
            // end, a report buffer too small.
            let e = ch
                .zone_management(513, ZoneAction::Reset)
                .await
                .unwrap_err();
            assert!(matches!(e, Error::InvalidArg(_)), "{e:?}");
            let e = ch.get_zone_info(256 * 15, 2).await.unwrap_err();
            assert!(matches!(e, Error::InvalidArg(_)), "{e:?}");
            let mut io = ch.alloc_io().unwrap();
            io.get_zone_info(0, 2, DmaBuf::new(32).unwrap());
            let e = ch.submit(io).unwrap_err().error;
            assert!(matches!(e, Error::BufferTooSmall { .. }), "{e:?}");
            let mut io = ch.alloc_io().unwrap();
            io.zone_append(0, 257, DmaBuf::new(512 * 257).unwrap());
            let e = ch.submit(io).unwrap_err().error;
            assert!(matches!(e, Error::InvalidArg(_)), "{e:?}");
        });
    }

    #[test]
    fn appends_from_two_threads_get_distinct_blocks_and_land_there() {
        let env = env();
        let mgr = env.mgr().clone();
        env.run({
            let mgr = mgr.clone();
            move |_| async move {
                let (_d, ch) = zoned(&mgr);
                ch.zone_management(0, ZoneAction::Reset).await.unwrap();
            }
        });
        // 100 one-block appends from a thread on each of the two
        // reactors, each block tagged with its thread and number.
        let handle = env.runtime().handle();
        let cores = handle.cores();
        let results: Vec<std::sync::mpsc::Receiver<Vec<(u64, u8, u8)>>> = (0..2u8)
            .map(|t| {
                let th = handle
                    .spawn_thread(
                        format!("app{t}"),
                        Some(&CpuSet::single(cores[usize::from(t)])),
                    )
                    .unwrap();
                let (tx, rx) = std::sync::mpsc::channel();
                let mgr = mgr.clone();
                th.send_msg(move || {
                    Thread::current().unwrap().spawn_local(async move {
                        let desc = mgr.open("Z0", true, |_| {}).unwrap();
                        let ch = desc.get_io_channel().unwrap();
                        let mut got = Vec::new();
                        for n in 0..100u8 {
                            let mut b = DmaBuf::new(512).unwrap();
                            b[0] = t;
                            b[1] = n;
                            let (lba, _) = ch.zone_append(0, 1, b).await.unwrap();
                            got.push((lba, t, n));
                        }
                        drop(ch);
                        drop(desc);
                        let _ = tx.send(got);
                    });
                })
                .unwrap();
                rx
            })
            .collect();
        let mut all: Vec<(u64, u8, u8)> = results.iter().flat_map(|r| r.recv().unwrap()).collect();
        all.sort_unstable();
        let lbas: Vec<u64> = all.iter().map(|a| a.0).collect();
        assert_eq!(lbas, (0..200).collect::<Vec<_>>(), "distinct, dense blocks");
        env.run(move |mgr| async move {
            let desc = mgr.open("Z0", false, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let back = ch
                .read(0, 200, DmaBuf::new(512 * 200).unwrap())
                .await
                .unwrap();
            for (lba, t, n) in all {
                let at = usize::try_from(lba).unwrap() * 512;
                assert_eq!((back[at], back[at + 1]), (t, n), "block {lba}");
            }
            let z = ch.get_zone_info(0, 1).await.unwrap()[0];
            assert_eq!(z.state, ZoneState::Full);
        });
    }

    #[test]
    fn passthru_forwards_zones_and_appends() {
        env().run(|mgr| async move {
            let _z = zoned(&mgr);
            bdevkit_passthru::create(&mgr, PassthruCreateParams::new("Z0", "PZ")).unwrap();
            let pz = mgr.get("PZ").unwrap();
            assert_eq!(pz.props().zoned, mgr.get("Z0").unwrap().props().zoned);
            assert!(pz.supports(IoType::ZoneAppend) && pz.supports(IoType::GetZoneInfo));
            assert_eq!(pz.info_json()["zone_size"], 256);
            let desc = mgr.open("PZ", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            ch.zone_management(768, ZoneAction::Reset).await.unwrap();
            let (lba, _) = ch.zone_append(768, 3, buf(7, 3)).await.unwrap();
            let (lba2, _) = ch.zone_append(768, 1, buf(8, 1)).await.unwrap();
            assert_eq!((lba, lba2), (768, 771));
            let e = ch.write(768, 1, buf(1, 1)).await.unwrap_err().error;
            assert!(
                zns(&e, ZoneError::InvalidWrite),
                "the status passes through: {e:?}"
            );
            let z = ch.get_zone_info(768, 1).await.unwrap()[0];
            assert_eq!(z.write_pointer, 772);
        });
    }

    #[test]
    fn zone_io_on_a_conventional_bdev_is_not_supported() {
        env().run(|mgr| async move {
            malloc(&mgr, "M1", 1024);
            let m = mgr.get("M1").unwrap();
            assert!(!m.supports(IoType::ZoneAppend) && !m.supports(IoType::GetZoneInfo));
            let desc = mgr.open("M1", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let e = ch.zone_management(0, ZoneAction::Reset).await.unwrap_err();
            assert!(
                matches!(e, Error::NotSupported(IoType::ZoneManagement)),
                "{e:?}"
            );
            // A zone_block over a zoned bdev is refused.
            let _z = zoned(&mgr);
            let e = bdevkit_zone_block::create(&mgr, ZoneBlockCreateParams::new("ZZ", "Z0", 64));
            assert!(matches!(e, Err(Error::InvalidArg(_))), "{e:?}");
            assert!(mgr.get("ZZ").is_none());
        });
    }

    #[test]
    fn rpcs_answer_as_spdk_and_the_config_replays() {
        env().run(|mgr| async move {
            let reg = rpc::registry(&mgr, RPCS);
            call(&reg, "bdev_malloc_create", json!({"name": "M0", "num_blocks": 2048, "block_size": 512}))
                .await
                .unwrap();
            let p = json!({"name": "Z0", "base_bdev": "M0", "zone_capacity": 100, "optimal_open_zones": 2});
            assert_eq!(call(&reg, "bdev_zone_block_create", p.clone()).await.unwrap(), json!("Z0"));
            assert_eq!(mgr.get("Z0").unwrap().num_blocks(), 2048);
            assert_eq!(
                call(&reg, "bdev_zone_block_create", json!({"name": "Z1", "base_bdev": "M0"})).await,
                Err(RpcError::new(-32602, "Invalid parameters"))
            );
            assert_eq!(
                call(&reg, "bdev_zone_block_create",
                    json!({"name": "Z1", "base_bdev": "M0", "zone_capacity": 0, "optimal_open_zones": 1})).await,
                Err(RpcError::new(-32603, "Failed to create block zoned vbdev: Invalid argument"))
            );
            let saved = rpc::saved_entries(&mgr, &["bdev_zone_block_create"]);
            assert_eq!(saved.len(), 1);
            assert_eq!(saved[0]["params"]["base_bdev"], "M0");
            assert_eq!(saved[0]["params"]["zone_capacity"], 100);
            assert_eq!(call(&reg, "bdev_zone_block_delete", json!({"name": "Z0"})).await, Ok(json!(true)));
            assert_eq!(
                call(&reg, "bdev_zone_block_delete", json!({"name": "Z0"})).await,
                Err(RpcError::new(-19, "No such device"))
            );
            rpc::replay(&reg, &saved).await;
            assert_eq!(mgr.get("Z0").unwrap().props().zoned.unwrap().zone_size, 128);
        });
    }
}
