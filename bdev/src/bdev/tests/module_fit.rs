//! `module_checks_fit`: a module whose own fast path tests the fit gets
//! reads and writes untested and hands back, with `fit_to_limits`, what
//! its test refuses.

use std::sync::atomic::Ordering;

use super::*;

#[test]
fn a_module_that_checks_the_fit_gets_back_what_breaks_the_limits() {
    // `module_checks_fit`: reads and writes reach the module untested; it
    // hands those its own test refuses to `fit_to_limits`, which splits or
    // bounces what breaks the limits (the pieces come back through
    // `submit`) and returns what fits. The test disk asserts the limits on
    // everything it serves.
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let mut p = BdevProps::new("d12", "Test", 512, 4096);
        p.max_rw_size = 8;
        p.max_segment_size = 8192;
        p.max_num_segments = 3;
        p.required_alignment = 12;
        p.module_checks_fit = true;
        let (_b, knobs) = disk(&mgr, p, RW);
        let desc = mgr.open("d12", true, |_| {}).unwrap();
        let ch = desc.get_io_channel().unwrap();
        // One aligned block: the module's own test passes, nothing asked.
        let mut one = DmaBuf::alloc(512, 4096).unwrap();
        one.as_mut_slice().fill(9);
        ch.write(0, 1, one).await.unwrap();
        assert_eq!(knobs.fit_asked.load(Ordering::SeqCst), 0);
        // Within the limits but not the module's test: asked, comes back.
        ch.write(1, 8, DmaBuf::alloc(4096, 4096).unwrap())
            .await
            .unwrap();
        assert_eq!(knobs.fit_asked.load(Ordering::SeqCst), 1);
        assert_eq!(knobs.fit_taken.load(Ordering::SeqCst), 0);
        // Too large, too many segments, misaligned: split or bounced.
        let mut seed = 11u64;
        for round in 0..40u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = 8 + (seed >> 33) % 3000;
            let n = 1 + (seed >> 20) % 40;
            let mut bufs = Vec::new();
            let mut left = n;
            let mut k = 0u8;
            while left > 0 {
                let take = left.min(1 + u64::from(k % 3));
                let len = usize::try_from(take * 512).unwrap();
                let data = pattern(len, k.wrapping_add(u8::try_from(round).unwrap()));
                // Every third buffer starts off a page boundary.
                let b = if k % 3 == 2 {
                    let mut keep = Vec::new();
                    let mut b = DmaBuf::alloc(len, 512).unwrap();
                    while (b.as_ptr() as usize).is_multiple_of(4096) && keep.len() < 16 {
                        keep.push(b);
                        b = DmaBuf::alloc(len, 512).unwrap();
                    }
                    b.as_mut_slice().copy_from_slice(&data);
                    b
                } else {
                    data
                };
                bufs.push(b);
                left -= take;
                k += 1;
            }
            let expect: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let mut io = ch.alloc_io_async().await;
            io.writev(off, n, bufs);
            let done = ch.submit_async(io).unwrap().await;
            assert_eq!(done.status(), IoStatus::Success, "round {round}");
            let got = ch
                .read(off, n, pattern(usize::try_from(n * 512).unwrap(), 0))
                .await
                .unwrap();
            assert_eq!(&got[..], &expect[..], "round {round} off {off} n {n}");
        }
        assert!(knobs.max_children_blocks.load(Ordering::SeqCst) <= 8);
        assert!(knobs.fit_taken.load(Ordering::SeqCst) > 0);
        let got = ch.read(0, 1, DmaBuf::new(512).unwrap()).await.unwrap();
        assert!(got.iter().all(|x| *x == 9));
    });
}
