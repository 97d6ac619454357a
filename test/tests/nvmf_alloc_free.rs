//! After warm-up, 100 000 NVMe/TCP commands (4 KiB reads and in-capsule
//! writes alternating, 32 in flight, on a null bdev) cause zero heap
//! allocations in the whole process: the target's receive, dispatch,
//! bdev submission, completion and send paths allocate nothing per
//! command, with and without digests. The same with 64 KiB reads, which
//! borrow the transport's shared buffers (poll group cache and shared
//! queue) instead of the slots' in-capsule ones. The host side here is a raw socket
//! with prebuilt capsules and a fixed receive buffer, so that it
//! allocates nothing either.

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use bdevkit_nvme_spec::cmd::{Command, Psdt};
    use bdevkit_nvme_spec::io::{BlockRange, Read, Write};
    use bdevkit_nvme_spec::sgl::SglDescriptor;
    use bdevkit_nvme_spec::tcp::{self, Digests, Pdu};
    use bdevkit_nvmf::params::NamespaceParams;
    use bdevkit_test::nvmf::{NvmfEnv, SUBNQN};
    use bdevkit_test::steady::{self, CountingAlloc};

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    const QD: usize = 32;
    const WARMUP: u64 = 20_000;
    const MEASURED: u64 = 100_000;

    /// Capsules for command id `cid`: a read of `read_blocks` 4 KiB blocks
    /// and an in-capsule write of one block, at block `cid`.
    fn capsules(cid: u16, tx: &tcp::TxConfig, read_blocks: u32) -> (Vec<u8>, Vec<u8>) {
        let build = |mut s: bdevkit_nvme_spec::Sqe, data: &[u8]| {
            s.set_psdt(Psdt::SglContiguousMetadata);
            let mut b = vec![0u8; 256];
            let n =
                tcp::build_capsule_cmd(&mut b, &s, u32::try_from(data.len()).unwrap(), tx).unwrap();
            b.truncate(n);
            b.extend_from_slice(data);
            if tx.digests.data && !data.is_empty() {
                b.extend_from_slice(&tcp::data_digest(data).to_le_bytes());
            }
            b
        };
        let slba = u64::from(cid) * u64::from(read_blocks);
        let mut r = Read::new(2, BlockRange::new(slba, read_blocks).unwrap()).to_sqe(cid);
        r.set_sgl1(&SglDescriptor::transport_data_block(read_blocks * 4096));
        let mut w = Write::new(2, BlockRange::new(u64::from(cid), 1).unwrap()).to_sqe(cid);
        w.set_sgl1(&SglDescriptor::offset_data_block(0, 4096));
        (build(r, &[]), build(w, &[0x5a; 4096]))
    }

    /// Runs the workload on one I/O queue; returns the allocations counted.
    fn run(env: &NvmfEnv, digests: Digests, read_blocks: u32) -> u64 {
        let (_admin, cntlid) = env.admin(digests);
        let host = env.io(cntlid, digests);
        let (rx_cfg, tx_cfg) = (host.rx, host.tx);
        let mut sock = host.sock;
        let cmds: Vec<(Vec<u8>, Vec<u8>)> = (0..QD)
            .map(|i| capsules(u16::try_from(i).unwrap(), &tx_cfg, read_blocks))
            .collect();
        let mut out: Vec<u8> = Vec::with_capacity(QD * 5000);
        let mut buf = vec![0u8; 1 << 20];
        let (mut have, mut done, mut sent) = (0usize, 0u64, 0u64);
        let submit = |out: &mut Vec<u8>, cid: usize, n: u64| {
            let (r, w) = &cmds[cid];
            out.extend_from_slice(if n.is_multiple_of(2) { r } else { w });
        };
        for cid in 0..QD {
            submit(&mut out, cid, sent);
            sent += 1;
        }
        sock.write_all(&out).unwrap();
        out.clear();
        let mut counted = None;
        while done < WARMUP + MEASURED {
            let n = sock.read(&mut buf[have..]).unwrap();
            assert!(n > 0, "the target closed the connection");
            have += n;
            let mut at = 0;
            loop {
                let rest = &buf[at..have];
                let Ok(l) = tcp::parse_common_header(rest, &rx_cfg) else {
                    break;
                };
                let plen = l.plen as usize;
                if rest.len() < plen {
                    break;
                }
                let cid = match tcp::parse_header(rest, &rx_cfg).unwrap().0 {
                    Pdu::C2HData(d) => {
                        assert!(d.ch.flags & tcp::flags::SUCCESS != 0);
                        d.cccid.get()
                    }
                    Pdu::CapsuleResp(r) => {
                        assert!(r.cqe.status().is_success(), "{}", r.cqe.status());
                        r.cqe.cid.get()
                    }
                    p => panic!("unexpected {p:?}"),
                };
                at += plen;
                done += 1;
                if done == WARMUP {
                    steady::start_counting();
                }
                if done == WARMUP + MEASURED {
                    counted = Some(steady::stop_counting());
                }
                if sent < WARMUP + MEASURED + QD as u64 {
                    submit(&mut out, usize::from(cid), sent);
                    sent += 1;
                }
            }
            buf.copy_within(at..have, 0);
            have -= at;
            if !out.is_empty() {
                sock.write_all(&out).unwrap();
                out.clear();
            }
        }
        // Let the last commands finish before the queue goes.
        while done < sent {
            let n = sock.read(&mut buf[have..]).unwrap();
            assert!(n > 0);
            have += n;
            let mut at = 0;
            while let Ok(l) = tcp::parse_common_header(&buf[at..have], &rx_cfg) {
                let plen = l.plen as usize;
                if have - at < plen {
                    break;
                }
                at += plen;
                done += 1;
            }
            buf.copy_within(at..have, 0);
            have -= at;
        }
        counted.expect("invariant: the measured window ended")
    }

    #[test]
    fn steady_state_nvmf_tcp_io_allocates_nothing() {
        let env = NvmfEnv::start();
        let mgr = env.mgr().clone();
        let nsid = env.call(move |t, tx| {
            bdevkit_null::create(
                &mgr,
                bdevkit_null::NullCreateParams::new("Null0", 4096, 65536),
            )
            .unwrap();
            let mut p = NamespaceParams::new("Null0");
            p.nsid = Some(2);
            t.add_ns(SUBNQN, &p, move |r| {
                let _ = tx.send(r.unwrap());
            });
        });
        assert_eq!(nsid, 2);
        let on = Digests {
            header: true,
            data: true,
        };
        for (digests, read_blocks) in [(Digests::default(), 1), (on, 1), (Digests::default(), 16)] {
            let allocs = run(&env, digests, read_blocks);
            assert_eq!(
                allocs, 0,
                "{allocs} heap allocations during {MEASURED} steady-state NVMe/TCP commands (digests {digests:?}, reads of {read_blocks} blocks)"
            );
        }
        let s = env.target.buffer_stats().unwrap();
        assert!(s.shared_allocated > 0 && s.shared_allocated <= 32, "{s:?}");
    }
}
