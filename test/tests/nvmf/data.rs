//! The data paths, checked byte for byte against a malloc bdev: in-capsule
//! writes, writes pulled with R2T (the largest transfer included), reads
//! with the SUCCESS flag and without it, header and data digests, Write
//! Zeroes, Dataset Management, Compare, Flush, several queues at once.

use bdevkit_nvme_spec::cmd::Command;
use bdevkit_nvme_spec::io::{
    BlockRange, Compare, DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes,
};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::Status;
use bdevkit_nvmf::CreateTransportParams;
use bdevkit_test::nvmf::{tcp_transport, Host, NvmfEnv, Reply};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from((i * 31 + usize::from(seed) * 7) % 251).unwrap())
        .collect()
}

fn write(h: &mut Host<std::net::TcpStream>, slba: u64, data: &[u8]) {
    let n = u32::try_from(data.len() / 512).unwrap();
    let c = h
        .exec_out(
            &Write::new(1, BlockRange::new(slba, n).unwrap()),
            data,
            4096,
        )
        .unwrap();
    assert!(c.status().is_success(), "write {slba}+{n}: {}", c.status());
}

fn read(h: &mut Host<std::net::TcpStream>, slba: u64, blocks: u32) -> Vec<u8> {
    let (c, d) = h
        .exec(
            &Read::new(1, BlockRange::new(slba, blocks).unwrap()),
            blocks * 512,
        )
        .unwrap();
    assert!(
        c.status().is_success(),
        "read {slba}+{blocks}: {}",
        c.status()
    );
    d
}

fn round_trips(digests: Digests) {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(digests);
    let mut io = env.io(cntlid, digests);
    for (slba, len) in [
        (0u64, 512usize),
        (8, 4096),
        (100, 8192),
        (300, 65536),
        (1000, 131_072),
    ] {
        let d = pattern(u8::try_from(slba % 200).unwrap(), len);
        write(&mut io, slba, &d);
        assert_eq!(
            read(&mut io, slba, u32::try_from(len / 512).unwrap()),
            d,
            "{slba}+{len}"
        );
    }
}

#[test]
fn writes_and_reads_round_trip() {
    round_trips(Digests::default());
}

#[test]
fn writes_and_reads_round_trip_with_digests() {
    round_trips(Digests {
        header: true,
        data: true,
    });
}

#[test]
fn r2t_data_in_several_h2c_pdus() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(Digests::default());
    let mut io = env.io(cntlid, Digests::default());
    let d = pattern(9, 65536);
    let mut w = Write::new(1, BlockRange::new(2048, 128).unwrap()).to_sqe(77);
    w.set_sgl1(&SglDescriptor::transport_data_block(65536));
    io.send_capsule(&w, None).unwrap();
    let Reply::R2t { ttag, r2tl, .. } = io.recv().unwrap() else {
        panic!("expected an R2T")
    };
    assert_eq!(r2tl, 65536);
    for (i, chunk) in d.chunks(4096).enumerate() {
        let off = u32::try_from(i * 4096).unwrap();
        io.h2c(77, ttag, off, chunk, off + 4096 == 65536).unwrap();
    }
    match io.recv().unwrap() {
        Reply::Resp(c) => assert!(c.status().is_success()),
        r => panic!("{r:?}"),
    }
    assert_eq!(read(&mut io, 2048, 128), d);
}

#[test]
fn responses_follow_data_without_c2h_success() {
    let tp = CreateTransportParams {
        c2h_success: Some(false),
        ..tcp_transport()
    };
    let env = NvmfEnv::start_with("0x1", tp);
    let (_admin, cntlid) = env.admin(Digests::default());
    let mut io = env.io(cntlid, Digests::default());
    let mut r = Read::new(1, BlockRange::new(0, 8).unwrap()).to_sqe(5);
    r.set_sgl1(&SglDescriptor::transport_data_block(4096));
    io.send_capsule(&r, None).unwrap();
    match io.recv().unwrap() {
        Reply::Data { success, data, .. } => {
            assert!(!success);
            assert_eq!(data.len(), 4096);
        }
        x => panic!("{x:?}"),
    }
    match io.recv().unwrap() {
        Reply::Resp(c) => assert!(c.status().is_success() && c.cid.get() == 5),
        x => panic!("{x:?}"),
    }
}

#[test]
fn write_zeroes_dsm_compare_flush() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(Digests::default());
    let mut io = env.io(cntlid, Digests::default());
    let d = pattern(3, 16384);
    write(&mut io, 64, &d);
    // Compare: equal, then different.
    let c = io
        .exec_out(&Compare::new(1, BlockRange::new(64, 32).unwrap()), &d, 4096)
        .unwrap();
    assert!(c.status().is_success(), "{}", c.status());
    let mut other = d.clone();
    other[100] ^= 1;
    let c = io
        .exec_out(
            &Compare::new(1, BlockRange::new(64, 32).unwrap()),
            &other,
            4096,
        )
        .unwrap();
    assert!(c.status().is(Status::COMPARE_FAILURE), "{}", c.status());
    // Write Zeroes over the first 8 blocks.
    let (c, _) = io
        .exec(&WriteZeroes::new(1, BlockRange::new(64, 8).unwrap()), 0)
        .unwrap();
    assert!(c.status().is_success());
    let back = read(&mut io, 64, 32);
    assert!(back[..4096].iter().all(|b| *b == 0));
    assert_eq!(back[4096..], d[4096..]);
    // Deallocate two ranges (malloc zeroes them).
    let ranges = [DsmRange::new(72, 8), DsmRange::new(88, 8)];
    let c = io
        .exec_out(
            &DatasetManagement::deallocate(1, 2).unwrap(),
            ranges.as_bytes(),
            4096,
        )
        .unwrap();
    assert!(c.status().is_success(), "{}", c.status());
    let back = read(&mut io, 64, 32);
    assert!(back[4096..8192].iter().all(|b| *b == 0));
    assert_eq!(back[8192..12288], d[8192..12288]);
    assert!(back[12288..].iter().all(|b| *b == 0));
    // A range past the end.
    let bad = [DsmRange::new(16380, 8)];
    let c = io
        .exec_out(
            &DatasetManagement::deallocate(1, 1).unwrap(),
            bad.as_bytes(),
            4096,
        )
        .unwrap();
    assert!(c.status().is(Status::LBA_OUT_OF_RANGE));
    let (c, _) = io.exec(&Flush { nsid: 1 }, 0).unwrap();
    assert!(c.status().is_success());
}

#[test]
fn several_queues_and_hosts_at_once() {
    let env = NvmfEnv::start_with("0x3", tcp_transport());
    let (_admin, cntlid) = env.admin(Digests::default());
    let mut threads = Vec::new();
    for q in 1..=4u16 {
        let addr = env.addr;
        threads.push(std::thread::spawn(move || {
            let mut h = Host::tcp(addr);
            h.icreq(Digests::default()).unwrap();
            let c = h
                .connect(
                    q,
                    64,
                    0,
                    cntlid,
                    bdevkit_test::nvmf::SUBNQN,
                    bdevkit_test::nvmf::HOSTNQN,
                )
                .unwrap();
            assert!(c.status().is_success(), "queue {q}: {}", c.status());
            for i in 0..40u64 {
                let slba = u64::from(q) * 2048 + i * 16;
                let d = pattern(u8::try_from(i).unwrap(), 8192);
                write(&mut h, slba, &d);
                assert_eq!(read(&mut h, slba, 16), d);
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
}
