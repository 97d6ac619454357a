//! Dataset Management (deallocate) takes its range list from where the
//! command's SGL says: an in-capsule data block at an offset into the
//! capsule's data, or the data pulled with R2T. A range list longer than
//! the data is refused with an NVMe status (issue 31, point 3: the target
//! used to read the ranges at offset 0 of the capsule's data whatever the
//! SGL said, and so unmapped a decoy range).

use std::net::TcpStream;

use bdevkit_nvme_spec::cmd::Command;
use bdevkit_nvme_spec::io::{BlockRange, DatasetManagement, DsmRange, Read, Write};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::Status;
use bdevkit_test::nvmf::{Host, NvmfEnv, Reply};

const OFF: Digests = Digests {
    header: false,
    data: false,
};

fn write(h: &mut Host<TcpStream>, slba: u64, data: &[u8]) {
    let n = u32::try_from(data.len() / 512).unwrap();
    let c = h
        .exec_out(&Write::new(1, BlockRange::new(slba, n).unwrap()), data, 0)
        .unwrap();
    assert!(c.status().is_success(), "write {slba}+{n}: {}", c.status());
}

fn read(h: &mut Host<TcpStream>, slba: u64, blocks: u32) -> Vec<u8> {
    let (c, d) = h
        .exec(
            &Read::new(1, BlockRange::new(slba, blocks).unwrap()),
            blocks * 512,
        )
        .unwrap();
    assert!(c.status().is_success(), "read {slba}: {}", c.status());
    d
}

/// A DSM deallocate of `nr` ranges whose SGL is an in-capsule data block
/// of `len` bytes at `offset`, carrying `icd` in the capsule.
fn dsm_in_capsule(h: &mut Host<TcpStream>, nr: usize, offset: u64, len: u32, icd: &[u8]) -> Status {
    let cid = h.next_cid();
    let mut s = DatasetManagement::deallocate(1, nr).unwrap().to_sqe(cid);
    s.set_sgl1(&SglDescriptor::offset_data_block(offset, len));
    h.send_capsule_sgl(&s, icd).unwrap();
    let c = h.recv_resp().unwrap();
    assert_eq!(c.cid.get(), cid);
    c.status()
}

fn ranges(r: &[DsmRange]) -> Vec<u8> {
    r.as_bytes().to_vec()
}

#[test]
fn dsm_reads_its_ranges_at_the_sgl_offset() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    let decoy = vec![0xd1; 4096];
    let real = vec![0x7e; 4096];
    write(&mut io, 100, &decoy);
    write(&mut io, 200, &real);
    // Offset 0 of the capsule's data holds a decoy range; the SGL points
    // at the real one, 16 bytes in.
    let icd = ranges(&[DsmRange::new(100, 8), DsmRange::new(200, 8)]);
    let st = dsm_in_capsule(&mut io, 1, 16, 16, &icd);
    assert!(st.is_success(), "{st}");
    assert!(
        read(&mut io, 100, 8) == decoy,
        "the decoy range was deallocated"
    );
    assert!(
        read(&mut io, 200, 8).iter().all(|b| *b == 0),
        "the range the SGL describes was not deallocated"
    );
    // Two ranges at offset 32 of 64 bytes: the last two.
    write(&mut io, 300, &real);
    write(&mut io, 400, &real);
    let icd = ranges(&[
        DsmRange::new(100, 8),
        DsmRange::new(100, 8),
        DsmRange::new(300, 8),
        DsmRange::new(400, 8),
    ]);
    let st = dsm_in_capsule(&mut io, 2, 32, 32, &icd);
    assert!(st.is_success(), "{st}");
    assert!(
        read(&mut io, 100, 8) == decoy,
        "the decoy range was deallocated"
    );
    assert!(read(&mut io, 300, 8).iter().all(|b| *b == 0));
    assert!(read(&mut io, 400, 8).iter().all(|b| *b == 0));
}

#[test]
fn dsm_with_its_ranges_pulled_by_r2t() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    let keep = vec![0x11; 4096];
    write(&mut io, 500, &keep);
    write(&mut io, 600, &keep);
    write(&mut io, 700, &keep);
    let r = ranges(&[DsmRange::new(500, 8), DsmRange::new(700, 8)]);
    // icd_max 0: the ranges go as H2CData after the R2T.
    let c = io
        .exec_out(&DatasetManagement::deallocate(1, 2).unwrap(), &r, 0)
        .unwrap();
    assert!(c.status().is_success(), "{}", c.status());
    assert!(read(&mut io, 500, 8).iter().all(|b| *b == 0));
    assert!(
        read(&mut io, 600, 8) == keep,
        "a range not listed was deallocated"
    );
    assert!(read(&mut io, 700, 8).iter().all(|b| *b == 0));
}

#[test]
fn dsm_range_lists_past_the_data_are_refused() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    let keep = vec![0x42; 4096];
    write(&mut io, 100, &keep);
    let icd = ranges(&[DsmRange::new(100, 8), DsmRange::new(100, 8)]);
    // Two ranges asked for, one described (the second would be read past
    // the SGL's data).
    let st = dsm_in_capsule(&mut io, 2, 16, 16, &icd);
    assert!(st.is(Status::DATA_SGL_LENGTH_INVALID), "{st}");
    // The SGL reaches past the capsule's data.
    let st = dsm_in_capsule(&mut io, 1, 24, 16, &icd);
    assert!(st.is(Status::DATA_SGL_LENGTH_INVALID), "{st}");
    // The offset lies past the capsule's data.
    let st = dsm_in_capsule(&mut io, 1, 48, 16, &icd);
    assert!(st.is(Status::SGL_OFFSET_INVALID), "{st}");
    // 256 ranges asked for, 4 KiB pulled by R2T short of it.
    let cid = io.next_cid();
    let mut s = DatasetManagement::deallocate(1, 256).unwrap().to_sqe(cid);
    s.set_sgl1(&SglDescriptor::transport_data_block(4080));
    io.send_capsule(&s, None).unwrap();
    match io.recv().unwrap() {
        Reply::Resp(c) => assert!(
            c.status().is(Status::DATA_SGL_LENGTH_INVALID),
            "{}",
            c.status()
        ),
        r => panic!("{r:?}"),
    }
    // Nothing was deallocated and the queue still works.
    assert!(read(&mut io, 100, 8) == keep, "a refused DSM deallocated");
}
