//! Every bad-input case, answered as the NVMe/TCP and NVMe-oF
//! specifications say: a C2HTermReq and a close for transport errors, an
//! error status for command errors; never a crash, and the target keeps
//! serving other hosts.

use bdevkit_nvme_spec::admin::Identify;
use bdevkit_nvme_spec::cmd::{Command, Psdt};
use bdevkit_nvme_spec::fabrics::{ConnectInvalidParameter, CNTLID_DYNAMIC};
use bdevkit_nvme_spec::io::{BlockRange, Read, Write};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::{self, Digests, Fes, TxConfig};
use bdevkit_nvme_spec::{Sqe, Status};
use bdevkit_test::nvmf::{raw_sqe, Host, NvmfEnv, Reply, HOSTNQN, STRANGER, SUBNQN};

const ON: Digests = Digests {
    header: true,
    data: true,
};
const OFF: Digests = Digests {
    header: false,
    data: false,
};

/// The target still serves a fresh host.
fn still_serves(env: &NvmfEnv) {
    let (mut h, _) = env.admin(OFF);
    let (c, d) = h.exec(&Identify::controller(), 4096).unwrap();
    assert!(c.status().is_success());
    assert_eq!(d.len(), 4096);
}

fn capsule_bytes(tx: &TxConfig, sqe: &Sqe, icd: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 256];
    let n = tcp::build_capsule_cmd(&mut b, sqe, u32::try_from(icd.len()).unwrap(), tx).unwrap();
    b.truncate(n);
    b.extend_from_slice(icd);
    b
}

#[test]
fn malformed_headers_get_a_term_req_and_a_close() {
    let env = NvmfEnv::start();
    // (what, bytes after ICReq, FES, FEI)
    let mut bad_type = [0u8; 8];
    bad_type[0] = 0xee;
    bad_type[2] = 8;
    bad_type[4] = 8;
    let mut h = env.host();
    h.icreq(OFF).unwrap();
    let sqe = Identify::controller().to_sqe(1);
    let good = capsule_bytes(&h.tx, &sqe, &[]);
    let mut bad_hlen = good.clone();
    bad_hlen[2] = 71;
    let mut bad_plen = good.clone();
    bad_plen[4] = 60;
    let mut c2h_from_host = good.clone();
    c2h_from_host[0] = 0x07;
    let mut digest_flag = good.clone();
    digest_flag[1] = tcp::flags::HDGSTF;
    let cases: [(&str, Vec<u8>, Fes, u32); 5] = [
        (
            "unknown pdu type",
            bad_type.to_vec(),
            Fes::InvalidHeaderField,
            0,
        ),
        ("capsule hlen 71", bad_hlen, Fes::InvalidHeaderField, 2),
        (
            "plen shorter than the header",
            bad_plen,
            Fes::InvalidHeaderField,
            4,
        ),
        (
            "a controller pdu from the host",
            c2h_from_host,
            Fes::InvalidHeaderField,
            0,
        ),
        (
            "a header digest not negotiated",
            digest_flag,
            Fes::InvalidHeaderField,
            1,
        ),
    ];
    for (what, bytes, fes, fei) in cases {
        let mut h = env.host();
        h.icreq(OFF).unwrap();
        h.send_raw(&bytes).unwrap();
        assert_eq!(h.expect_term().unwrap(), (fes, fei), "{what}");
    }
    still_serves(&env);
}

#[test]
fn pdus_out_of_sequence() {
    let env = NvmfEnv::start();
    // A capsule before ICReq.
    let mut h = env.host();
    let sqe = Identify::controller().to_sqe(1);
    let b = capsule_bytes(&h.tx, &sqe, &[]);
    h.send_raw(&b).unwrap();
    assert_eq!(h.expect_term().unwrap().0, Fes::PduSequenceError);
    // ICReq twice.
    let mut h = env.host();
    h.icreq(OFF).unwrap();
    let mut ic = [0u8; 128];
    let n = tcp::build_ic_req(&mut ic, 0, OFF, 0).unwrap();
    h.send_raw(&ic[..n]).unwrap();
    assert_eq!(h.expect_term().unwrap().0, Fes::PduSequenceError);
    // ICReq with an unsupported format version.
    let mut h = env.host();
    let mut ic = [0u8; 128];
    tcp::build_ic_req(&mut ic, 0, OFF, 0).unwrap();
    ic[8] = 1;
    h.send_raw(&ic).unwrap();
    assert_eq!(h.expect_term().unwrap(), (Fes::UnsupportedParameter, 8));
    still_serves(&env);
}

#[test]
fn digest_mismatches() {
    let env = NvmfEnv::start();
    let (mut a, cntlid) = env.admin(OFF);
    // A bad header digest is fatal.
    let mut h = env.host();
    h.icreq(ON).unwrap();
    let sqe = Identify::controller().to_sqe(1);
    let mut b = capsule_bytes(&h.tx, &sqe, &[]);
    b[72] ^= 0xff;
    h.send_raw(&b).unwrap();
    assert_eq!(h.expect_term().unwrap().0, Fes::HeaderDigestError);
    // A bad data digest fails the command with Transient Transport Error
    // and the queue goes on.
    let mut io = env.io(cntlid, ON);
    let cid = io.next_cid();
    let mut w = Write::new(1, BlockRange::new(0, 8).unwrap()).to_sqe(cid);
    w.set_psdt(Psdt::SglContiguousMetadata);
    w.set_sgl1(&SglDescriptor::offset_data_block(0, 4096));
    let data = vec![0x5au8; 4096];
    let mut p = vec![0u8; 256];
    let n = tcp::build_capsule_cmd(&mut p, &w, 4096, &io.tx).unwrap();
    p.truncate(n);
    p.extend_from_slice(&data);
    p.extend_from_slice(&(tcp::data_digest(&data) ^ 1).to_le_bytes());
    io.send_raw(&p).unwrap();
    match io.recv().unwrap() {
        Reply::Resp(c) => {
            assert!(
                c.status().is(Status::TRANSIENT_TRANSPORT_ERROR),
                "{}",
                c.status()
            );
            assert!(!c.status().dnr);
        }
        r => panic!("expected a response, got {r:?}"),
    }
    let c = io
        .exec_out(&Write::new(1, BlockRange::new(0, 8).unwrap()), &data, 4096)
        .unwrap();
    assert!(c.status().is_success());
    // Digests negotiated but a capsule without its header digest.
    let mut h = env.host();
    h.icreq(ON).unwrap();
    let b = capsule_bytes(&TxConfig::default(), &sqe, &[]);
    h.send_raw(&b).unwrap();
    assert_eq!(h.expect_term().unwrap(), (Fes::InvalidHeaderField, 1));
    let (c, _) = a.exec(&Identify::controller(), 4096).unwrap();
    assert!(c.status().is_success());
}

#[test]
fn data_length_and_transfer_errors() {
    let env = NvmfEnv::start();
    let (_a, cntlid) = env.admin(OFF);
    // In-capsule data above the I/O queue's 4096 bytes.
    let mut io = env.io(cntlid, OFF);
    let w = Write::new(1, BlockRange::new(0, 16).unwrap()).to_sqe(1);
    io.send_capsule(&w, Some(&vec![0u8; 8192])).unwrap();
    assert_eq!(io.expect_term().unwrap().0, Fes::DataLimitExceeded);
    // H2CData for a transfer tag that asked for nothing.
    let mut io = env.io(cntlid, OFF);
    io.h2c(1, 7, 0, &[0u8; 512], true).unwrap();
    assert_eq!(io.expect_term().unwrap(), (Fes::InvalidHeaderField, 10));
    // H2CData at the wrong offset of a real R2T.
    let mut io = env.io(cntlid, OFF);
    let mut w = Write::new(1, BlockRange::new(0, 64).unwrap()).to_sqe(9);
    w.set_sgl1(&SglDescriptor::transport_data_block(32768));
    io.send_capsule(&w, None).unwrap();
    let Reply::R2t { ttag, r2tl, .. } = io.recv().unwrap() else {
        panic!("expected an R2T")
    };
    assert_eq!(r2tl, 32768);
    io.h2c(9, ttag, 512, &[0u8; 512], false).unwrap();
    assert_eq!(io.expect_term().unwrap().0, Fes::DataOutOfRange);
    // The right tag, a wrong command id.
    let mut io = env.io(cntlid, OFF);
    let mut w = Write::new(1, BlockRange::new(0, 64).unwrap()).to_sqe(9);
    w.set_sgl1(&SglDescriptor::transport_data_block(32768));
    io.send_capsule(&w, None).unwrap();
    let Reply::R2t { ttag, .. } = io.recv().unwrap() else {
        panic!("expected an R2T")
    };
    io.h2c(10, ttag, 0, &[0u8; 512], false).unwrap();
    assert_eq!(io.expect_term().unwrap(), (Fes::InvalidHeaderField, 8));
    // An SGL length that does not match the blocks: a status, not fatal.
    let mut io = env.io(cntlid, OFF);
    let mut r = Read::new(1, BlockRange::new(0, 8).unwrap()).to_sqe(3);
    r.set_sgl1(&SglDescriptor::transport_data_block(512));
    io.send_capsule(&r, None).unwrap();
    match io.recv().unwrap() {
        Reply::Resp(c) => assert!(c.status().is(Status::DATA_SGL_LENGTH_INVALID)),
        x => panic!("{x:?}"),
    }
    // A PRP data pointer.
    let mut s = Read::new(1, BlockRange::new(0, 1).unwrap()).to_sqe(4);
    s.set_sgl1(&SglDescriptor::transport_data_block(512));
    let mut b = capsule_bytes(&io.tx, &s, &[]);
    b[9] = 0; // flags byte of the entry: PSDT = PRP
    io.send_raw(&b).unwrap();
    match io.recv().unwrap() {
        Reply::Resp(c) => assert!(c.status().is(Status::INVALID_FIELD), "{}", c.status()),
        x => panic!("{x:?}"),
    }
    still_serves(&env);
}

#[test]
fn unknown_opcodes_and_namespaces() {
    let env = NvmfEnv::start();
    let (mut a, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    let status = |h: &mut Host<std::net::TcpStream>, s: Sqe| {
        let cid = h.next_cid();
        let mut s = s;
        s.cid.set(cid);
        h.run(&s, None, 0, 0).unwrap().0.status()
    };
    assert!(status(&mut a, raw_sqe(0x99, 0, 0, 0, 0)).is(Status::INVALID_OPCODE));
    assert!(status(&mut a, raw_sqe(0x05, 0, 0, 0, 0)).is(Status::INVALID_OPCODE)); // Create I/O CQ
    assert!(status(&mut io, raw_sqe(0x7e, 1, 0, 0, 0)).is(Status::INVALID_OPCODE));
    let mut fab = raw_sqe(0x7f, 0, 0, 0, 0);
    fab.nsid.set(0x42); // fctype 0x42
    assert!(status(&mut a, fab).is(Status::INVALID_OPCODE));
    // Beyond the namespace (16384 blocks) and an unknown namespace.
    let (c, _) = io
        .exec(&Read::new(1, BlockRange::new(16380, 8).unwrap()), 4096)
        .unwrap();
    assert!(c.status().is(Status::LBA_OUT_OF_RANGE) && c.status().dnr);
    let (c, _) = io
        .exec(&Read::new(7, BlockRange::new(0, 1).unwrap()), 512)
        .unwrap();
    assert!(c.status().is(Status::INVALID_NAMESPACE));
    let (c, _) = a.exec(&Identify::namespace(99), 4096).unwrap();
    assert!(c.status().is(Status::INVALID_NAMESPACE));
    let mut id = Identify::controller();
    id.cns = 0x42;
    let (c, _) = a.exec(&id, 4096).unwrap();
    assert!(c.status().is(Status::INVALID_FIELD));
    let c = a
        .exec(
            &bdevkit_nvme_spec::admin::GetLogPage::new(0x55, 0xffff_ffff, 512).unwrap(),
            512,
        )
        .unwrap()
        .0;
    assert!(c.status().is(Status::INVALID_LOG_PAGE));
    // The queues still work.
    let (c, d) = io
        .exec(&Read::new(1, BlockRange::new(0, 8).unwrap()), 4096)
        .unwrap();
    assert!(c.status().is_success());
    assert_eq!(d.len(), 4096);
}

#[test]
fn connect_refusals() {
    let env = NvmfEnv::start();
    // A host not on the allow-list.
    let mut h = env.host();
    h.icreq(OFF).unwrap();
    let c = h
        .connect(0, 32, 0, CNTLID_DYNAMIC, SUBNQN, STRANGER)
        .unwrap();
    assert!(
        c.status().is(Status::CONNECT_INVALID_HOST),
        "{}",
        c.status()
    );
    // An unknown subsystem NQN: Invalid Parameters pointing at SUBNQN.
    let c = h
        .connect(
            0,
            32,
            0,
            CNTLID_DYNAMIC,
            "nqn.2016-06.io.bdevkit:nosuch",
            HOSTNQN,
        )
        .unwrap();
    assert!(c.status().is(Status::CONNECT_INVALID_PARAMETERS));
    let ip = ConnectInvalidParameter::from_dword(c.dw0.get());
    assert!(ip.in_data);
    assert_eq!(ip.offset, 256);
    // An I/O queue of a controller that does not exist.
    let c = h.connect(1, 32, 0, 77, SUBNQN, HOSTNQN).unwrap();
    assert!(c.status().is(Status::CONNECT_INVALID_PARAMETERS));
    // A command before any Connect.
    let (c, _) = h.exec(&Identify::controller(), 4096).unwrap();
    assert!(c.status().is(Status::COMMAND_SEQUENCE_ERROR));
    // Admin commands before CC.EN.
    let mut h = env.host();
    h.icreq(OFF).unwrap();
    let c = h
        .connect(0, 32, 0, CNTLID_DYNAMIC, SUBNQN, HOSTNQN)
        .unwrap();
    assert!(c.status().is_success());
    let (c, _) = h.exec(&Identify::controller(), 4096).unwrap();
    assert!(c.status().is(Status::COMMAND_SEQUENCE_ERROR));
    // Connect data shorter than 1024 bytes.
    let mut h = env.host();
    h.icreq(OFF).unwrap();
    let cid = h.next_cid();
    let sqe = bdevkit_nvme_spec::fabrics::Connect::new(0, 32, 0).to_sqe(cid);
    let (c, _) = h.run(&sqe, Some(&[0u8; 100]), 0, 8192).unwrap();
    assert!(c.status().is(Status::INVALID_FIELD));
}

#[test]
fn a_silent_host_stalls_nobody() {
    let env = NvmfEnv::start();
    // Half a capsule, then silence.
    let mut silent = env.host();
    silent.icreq(OFF).unwrap();
    let sqe = Identify::controller().to_sqe(1);
    let b = capsule_bytes(&silent.tx, &sqe, &[]);
    silent.send_raw(&b[..40]).unwrap();
    // A host that connects and never sends ICReq.
    let _mute = env.host();
    // A host that floods one queue.
    let (_a, cntlid) = env.admin(OFF);
    let mut flood = env.io(cntlid, OFF);
    for i in 0..64u16 {
        let mut r = Read::new(1, BlockRange::new(u64::from(i), 1).unwrap()).to_sqe(100 + i);
        r.set_sgl1(&SglDescriptor::transport_data_block(512));
        flood.send_capsule(&r, None).unwrap();
    }
    // Another host works meanwhile.
    let (_a2, cntlid2) = env.admin(OFF);
    let mut io = env.io(cntlid2, OFF);
    for i in 0..50u64 {
        let d = vec![u8::try_from(i).unwrap(); 4096];
        let c = io
            .exec_out(&Write::new(1, BlockRange::new(i * 8, 8).unwrap()), &d, 4096)
            .unwrap();
        assert!(c.status().is_success());
        let (c, back) = io
            .exec(&Read::new(1, BlockRange::new(i * 8, 8).unwrap()), 4096)
            .unwrap();
        assert!(c.status().is_success());
        assert_eq!(back, d);
    }
    drop(silent);
    // The flood's answers all came (64 reads of one block).
    let mut n = 0;
    while n < 64 {
        match flood.recv().unwrap() {
            Reply::Data { success: true, .. } | Reply::Resp(_) => n += 1,
            Reply::Data { .. } => {}
            r => panic!("{r:?}"),
        }
    }
}
