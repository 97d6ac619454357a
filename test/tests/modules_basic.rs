//! The null and malloc modules against the conformance suite and verify.

#[cfg(test)]
mod tests {
    use bdevkit_malloc::MallocCreateParams;
    use bdevkit_null::NullCreateParams;
    use bdevkit_test::{conformance, verify, TestEnv};

    #[test]
    fn malloc_conformance() {
        let env = TestEnv::new("0x1");
        env.run(|mgr| async move {
            bdevkit_malloc::create(&mgr, MallocCreateParams::new("M0", 512, 4096)).unwrap();
            conformance::run(&mgr, "M0", Some(bdevkit_malloc::delete)).await;
        });
    }

    #[test]
    fn null_conformance() {
        let env = TestEnv::new("0x1");
        env.run(|mgr| async move {
            // Null keeps no data: only the checks that do not read data back.
            let b = bdevkit_null::create(&mgr, NullCreateParams::new("N0", 4096, 1024)).unwrap();
            assert_eq!(b.product_name(), "Null disk");
            let desc = mgr.open("N0", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            let buf = ch.write(0, 1, conformance::pattern(4096, 1)).await.unwrap();
            ch.read(0, 1, buf).await.unwrap();
            ch.write_zeroes(0, 8).await.unwrap();
            ch.reset().await.unwrap();
            assert!(ch.flush(0, 1).await.is_err(), "null does not flush");
            drop(ch);
            drop(desc);
            bdevkit_null::resize(&mgr, "N0", 8).unwrap();
            assert_eq!(b.num_blocks(), 2048);
            assert!(
                bdevkit_null::resize(&mgr, "N0", 1).is_err(),
                "null only grows"
            );
        });
    }

    #[test]
    fn malloc_verify_on_two_cores() {
        let env = TestEnv::new("0x3");
        env.run(|mgr| async move {
            bdevkit_malloc::create(&mgr, MallocCreateParams::new("MV", 512, 8192)).unwrap();
        });
        let r = verify::run(&env, "MV", 8, 16, 50);
        assert_eq!(r.mismatches, 0);
        assert_eq!(r.errors, 0);
        assert_eq!(r.verified, 2 * 16 * 50);
    }

    #[test]
    fn malloc_create_errors() {
        let env = TestEnv::new("0x1");
        env.run(|mgr| async move {
            let e =
                bdevkit_malloc::create(&mgr, MallocCreateParams::new("E", 1000, 8)).unwrap_err();
            assert_eq!(e.errno(), 22);
            bdevkit_malloc::create(&mgr, MallocCreateParams::new("E", 512, 8)).unwrap();
            let e = bdevkit_malloc::create(&mgr, MallocCreateParams::new("E", 512, 8)).unwrap_err();
            assert_eq!(e.errno(), 17);
            let mut p = MallocCreateParams::new("x", 512, 8);
            p.name = None;
            let b = bdevkit_malloc::create(&mgr, p).unwrap();
            assert!(b.name().starts_with("Malloc"));
        });
    }
}
