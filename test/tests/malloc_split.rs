//! Data written through the bdev layer's splitting reads back identically:
//! a malloc bdev with an optimal I/O boundary (split on it), random offsets,
//! lengths and buffer cuts (proptest).

#[cfg(test)]
mod tests {
    use bdevkit::bdev::IoStatus;
    use bdevkit::dma::DmaBuf;
    use bdevkit_malloc::MallocCreateParams;
    use bdevkit_test::TestEnv;
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;

    const BLOCKS: u64 = 2048;
    const BS: usize = 512;

    #[derive(Debug, Clone)]
    struct Case {
        offset: u64,
        blocks: u64,
        /// Buffer sizes in blocks (sum = blocks), as the writer cuts them.
        write_cuts: Vec<u64>,
        /// Same for the reader.
        read_cuts: Vec<u64>,
        seed: u8,
    }

    fn cuts(total: u64) -> impl Strategy<Value = Vec<u64>> {
        proptest::collection::vec(1u64..7, 1..12).prop_map(move |mut v| {
            let mut sum = 0;
            let mut out = Vec::new();
            for x in v.drain(..) {
                if sum + x >= total {
                    break;
                }
                out.push(x);
                sum += x;
            }
            out.push(total - sum);
            out
        })
    }

    fn case() -> impl Strategy<Value = Case> {
        (1u64..96).prop_flat_map(|blocks| {
            (0..BLOCKS - blocks, cuts(blocks), cuts(blocks), any::<u8>()).prop_map(
                move |(offset, write_cuts, read_cuts, seed)| Case {
                    offset,
                    blocks,
                    write_cuts,
                    read_cuts,
                    seed,
                },
            )
        })
    }

    fn bufs(cuts: &[u64], seed: Option<u8>) -> Vec<DmaBuf> {
        let mut n = 0u8;
        cuts.iter()
            .map(|c| {
                let mut b = DmaBuf::new(usize::try_from(*c).unwrap() * BS).unwrap();
                if let Some(s) = seed {
                    for x in b.iter_mut() {
                        *x = s.wrapping_add(n);
                        n = n.wrapping_add(1);
                    }
                }
                b
            })
            .collect()
    }

    #[test]
    fn malloc_data_survives_splits() {
        let env = TestEnv::new("0x1");
        env.run(|mgr| async move {
            let mut p = MallocCreateParams::new("M", 512, BLOCKS);
            p.optimal_io_boundary = Some(8);
            let b = bdevkit_malloc::create(&mgr, p).unwrap();
            assert_eq!(b.props().optimal_io_boundary, 8);
            assert!(b.props().split_on_optimal_io_boundary);
        });
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64));
        let cases: Vec<Case> = (0..64)
            .map(|_| case().new_tree(&mut runner).unwrap().current())
            .collect();
        env.run(move |mgr| async move {
            let desc = mgr.open("M", true, |_| {}).unwrap();
            let ch = desc.get_io_channel().unwrap();
            for c in cases {
                let w = bufs(&c.write_cuts, Some(c.seed));
                let expect: Vec<u8> = w.iter().flat_map(|b| b.iter().copied()).collect();
                let mut io = ch.alloc_io_async().await;
                io.writev(c.offset, c.blocks, w);
                let done = ch.submit_async(io).unwrap().await;
                assert_eq!(done.status(), IoStatus::Success, "{c:?}");
                let mut io = ch.alloc_io_async().await;
                io.readv(c.offset, c.blocks, bufs(&c.read_cuts, None));
                let mut done = ch.submit_async(io).unwrap().await;
                assert_eq!(done.status(), IoStatus::Success, "{c:?}");
                let got: Vec<u8> = done
                    .take_bufs()
                    .iter()
                    .flat_map(|b| b.iter().copied())
                    .collect();
                assert_eq!(got, expect, "{c:?}");
            }
        });
    }
}
