//! NVMe/TCP tests: build → parse round trips for every PDU type, each
//! rejection with its FES/FEI, and arbitrary bytes never panicking the
//! parser.

use proptest::prelude::*;
use zerocopy::IntoBytes;

use super::*;
use crate::cmd::{Command, Sqe};
use crate::cpl::Cqe;
use crate::io::{BlockRange, Write};
use crate::status::Status;

fn ctrl(d: Digests, pda: u8) -> RecvConfig {
    RecvConfig {
        max_data_len: u32::MAX,
        ..RecvConfig::new(Role::Controller).connected(d, pda)
    }
}

fn host(d: Digests, pda: u8) -> RecvConfig {
    RecvConfig {
        max_data_len: u32::MAX,
        ..RecvConfig::new(Role::Host).connected(d, pda)
    }
}

fn tx(d: Digests, pda: u8) -> TxConfig {
    TxConfig { digests: d, pda }
}

const BOTH: Digests = Digests {
    header: true,
    data: true,
};

#[test]
fn ic_exchange() {
    let mut b = [0u8; 128];
    let want = Digests {
        header: true,
        data: false,
    };
    assert_eq!(build_ic_req(&mut b, 3, want, 0), Ok(128));
    assert_eq!(&b[..8], &[0, 0, 128, 0, 128, 0, 0, 0]);
    let (pdu, l) = parse_header(&b, &RecvConfig::new(Role::Controller)).unwrap();
    let Pdu::IcReq(r) = pdu else {
        panic!("not an icreq: {pdu:?}")
    };
    assert_eq!(
        (r.hpda, r.dgst, r.maxr2t.get()),
        (3, digest_bits::HEADER, 0)
    );
    assert_eq!((l.data_len, l.header_len()), (0, 128));

    assert_eq!(build_ic_resp(&mut b, 0, want, 131_072), Ok(128));
    let (pdu, _) = parse_header(&b, &RecvConfig::new(Role::Host)).unwrap();
    let Pdu::IcResp(r) = pdu else {
        panic!("not an icresp: {pdu:?}")
    };
    assert_eq!((r.cpda, r.dgst, r.maxh2cdata.get()), (0, 1, 131_072));

    // A second ICReq once connected: PDU sequence error.
    build_ic_req(&mut b, 0, want, 0).unwrap();
    let e = parse_header(&b, &ctrl(want, 0)).unwrap_err();
    assert_eq!((e.fes(), e.fei()), (Some(Fes::PduSequenceError), 0));
    // A command before the exchange: PDU sequence error too.
    let mut c = [0u8; 72];
    build_capsule_cmd(&mut c, &Sqe::new(6, 1, 0), 0, &TxConfig::default()).unwrap();
    let e = parse_header(&c, &RecvConfig::new(Role::Controller)).unwrap_err();
    assert_eq!(e.fes(), Some(Fes::PduSequenceError));
}

#[test]
fn ic_parameters_checked() {
    let mut b = [0u8; 128];
    let cfg = RecvConfig::new(Role::Controller);
    build_ic_req(&mut b, 0, Digests::default(), 0).unwrap();
    b[8] = 1; // PFV 1
    let e = parse_header(&b, &cfg).unwrap_err();
    assert_eq!((e.fes(), e.fei()), (Some(Fes::UnsupportedParameter), 8));
    build_ic_req(&mut b, 32, Digests::default(), 0).unwrap();
    let e = parse_header(&b, &cfg).unwrap_err();
    assert_eq!((e.fes(), e.fei()), (Some(Fes::InvalidHeaderField), 10));
    let hcfg = RecvConfig::new(Role::Host);
    build_ic_resp(&mut b, 0, Digests::default(), 4095).unwrap();
    assert_eq!(parse_header(&b, &hcfg).unwrap_err().fei(), 12);
    build_ic_resp(&mut b, 0, Digests::default(), 4098).unwrap();
    assert_eq!(parse_header(&b, &hcfg).unwrap_err().fei(), 12);
    build_ic_resp(&mut b, 40, Digests::default(), 4096).unwrap();
    assert_eq!(parse_header(&b, &hcfg).unwrap_err().fei(), 10);
    // ICReq with a digest flag: invalid flags (byte 1).
    build_ic_req(&mut b, 0, Digests::default(), 0).unwrap();
    b[1] = flags::HDGSTF;
    assert_eq!(parse_header(&b, &cfg).unwrap_err().fei(), 1);
    // PLEN other than 128.
    build_ic_req(&mut b, 0, Digests::default(), 0).unwrap();
    b[4] = 129;
    assert_eq!(parse_header(&b, &cfg).unwrap_err().fei(), 4);
}

#[test]
fn capsule_cmd_with_digests_and_alignment() {
    let w = Write::new(1, BlockRange::new(8, 8).unwrap());
    let sqe = w.to_sqe(0x42);
    let mut b = [0xeeu8; 256];
    // The controller asked for 32-byte alignment (CPDA 7).
    let n = build_capsule_cmd(&mut b, &sqe, 4096, &tx(BOTH, 7)).unwrap();
    assert_eq!(n, 96);
    assert!(b[76..96].iter().all(|&x| x == 0));
    assert_eq!(b[1], flags::HDGSTF | flags::DDGSTF);
    assert_eq!(b[3], 96);
    assert_eq!(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), 96 + 4096 + 4);
    let (pdu, l) = parse_header(&b, &ctrl(BOTH, 7)).unwrap();
    let Pdu::CapsuleCmd(c) = pdu else {
        panic!("not a command: {pdu:?}")
    };
    assert_eq!(c.sqe, sqe);
    assert_eq!(
        (l.data_offset, l.data_len, l.padding(), l.ddgst),
        (96, 4096, 20, true)
    );
    // A flipped header bit: header digest error.
    b[20] ^= 0x10;
    let e = parse_header(&b, &ctrl(BOTH, 7)).unwrap_err();
    assert_eq!(e.fes(), Some(Fes::HeaderDigestError));
    b[20] ^= 0x10;
    // Misaligned for a receiver that wants 64 bytes.
    let e = parse_header(&b, &ctrl(BOTH, 15)).unwrap_err();
    assert_eq!((e.fes(), e.fei()), (Some(Fes::InvalidHeaderField), 3));
    // Header digest negotiated but not present.
    let n = build_capsule_cmd(&mut b, &sqe, 0, &TxConfig::default()).unwrap();
    assert_eq!(n, 72);
    assert_eq!(parse_header(&b, &ctrl(BOTH, 0)).unwrap_err().fei(), 1);
    // Too much in-capsule data for this receiver.
    build_capsule_cmd(&mut b, &sqe, 8192, &TxConfig::default()).unwrap();
    let small = RecvConfig {
        max_data_len: 4096,
        ..ctrl(Digests::default(), 0)
    };
    let e = parse_header(&b, &small).unwrap_err();
    assert_eq!(
        e,
        PduError::DataLimitExceeded {
            len: 8192,
            max: 4096
        }
    );
    assert_eq!(e.fes(), Some(Fes::DataLimitExceeded));
    // The wrong direction: a controller never receives a response.
    let cqe = Cqe::new(1, Status::SUCCESS, 0);
    build_capsule_resp(&mut b, &cqe, &TxConfig::default()).unwrap();
    let e = parse_header(&b, &ctrl(Digests::default(), 0)).unwrap_err();
    assert_eq!((e.fes(), e.fei()), (Some(Fes::InvalidHeaderField), 0));
}

#[test]
fn data_pdus_and_r2t() {
    let mut b = [0u8; 64];
    let h = DataHeader {
        cccid: 7,
        ttag: 3,
        datao: 4096,
        datal: 8192,
        last: true,
        success: false,
    };
    let n = build_h2c_data(&mut b, &h, &tx(Digests::default(), 0)).unwrap();
    assert_eq!(n, 24);
    let (pdu, l) = parse_header(&b, &ctrl(Digests::default(), 0)).unwrap();
    let Pdu::H2CData(d) = pdu else {
        panic!("not h2c data: {pdu:?}")
    };
    assert_eq!(
        (d.cccid.get(), d.ttag.get(), d.datao.get(), d.datal.get()),
        (7, 3, 4096, 8192)
    );
    assert_eq!(d.ch.flags, flags::LAST_PDU);
    assert_eq!((l.data_offset, l.data_len), (24, 8192));
    // DATAL disagreeing with PLEN.
    b[16] = 1;
    let e = parse_header(&b, &ctrl(Digests::default(), 0)).unwrap_err();
    assert_eq!((e.fes(), e.fei()), (Some(Fes::InvalidHeaderField), 16));
    // C2HData SUCCESS without LAST_PDU.
    let bad = DataHeader {
        last: false,
        success: true,
        ..h
    };
    build_c2h_data(&mut b, &bad, &TxConfig::default()).unwrap();
    assert_eq!(
        parse_header(&b, &host(Digests::default(), 0))
            .unwrap_err()
            .fei(),
        1
    );
    // A zero-length R2T.
    build_r2t(&mut b, 1, 1, 0, 0, &TxConfig::default()).unwrap();
    assert_eq!(
        parse_header(&b, &host(Digests::default(), 0))
            .unwrap_err()
            .fei(),
        16
    );
    // A data PDU without data.
    build_h2c_data(&mut b, &DataHeader { datal: 0, ..h }, &TxConfig::default()).unwrap();
    assert_eq!(
        parse_header(&b, &ctrl(Digests::default(), 0))
            .unwrap_err()
            .fei(),
        4
    );
}

#[test]
fn term_req_carries_the_offending_header() {
    let mut bad = [0u8; 72];
    build_capsule_cmd(&mut bad, &Sqe::new(2, 1, 1), 0, &TxConfig::default()).unwrap();
    bad[2] = 71;
    let e = parse_header(&bad, &ctrl(Digests::default(), 0)).unwrap_err();
    assert_eq!((e.fes(), e.fei()), (Some(Fes::InvalidHeaderField), 2));
    let mut b = [0u8; 200];
    let fes = e.fes().unwrap();
    let n = build_term_req(&mut b, Role::Controller, fes, e.fei(), &bad).unwrap();
    assert_eq!(n, 24 + 72);
    let (pdu, l) = parse_header(&b, &host(BOTH, 0)).unwrap();
    let Pdu::C2HTermReq(t) = pdu else {
        panic!("not a term req: {pdu:?}")
    };
    assert_eq!((t.fes.get(), t.fei.get()), (1, 2));
    assert_eq!((l.data_offset, l.data_len), (24, 72));
    assert_eq!(&b[24..n], &bad[..]);
    // A host's TermReq is cut to 128 bytes of error data.
    let big = [0u8; 300];
    let n = build_term_req(&mut b, Role::Host, Fes::PduSequenceError, 0, &big).unwrap();
    assert_eq!(n, 152);
    assert!(parse_header(&b, &ctrl(Digests::default(), 0)).is_ok());
    let mut tiny = [0u8; 100];
    assert!(build_term_req(&mut tiny, Role::Host, Fes::PduSequenceError, 0, &big).is_err());
    // An unknown FES.
    b[8] = 9;
    assert_eq!(
        parse_header(&b, &ctrl(Digests::default(), 0))
            .unwrap_err()
            .fei(),
        8
    );
}

#[test]
fn short_buffers() {
    let cfg = RecvConfig::new(Role::Controller);
    assert_eq!(
        parse_common_header(&[0; 7], &cfg),
        Err(PduError::Incomplete { need: 8 })
    );
    let mut b = [0u8; 128];
    build_ic_req(&mut b, 0, Digests::default(), 0).unwrap();
    assert_eq!(
        parse_header(&b[..100], &cfg).unwrap_err(),
        PduError::Incomplete { need: 128 }
    );
    assert_eq!(PduError::Incomplete { need: 1 }.fes(), None);
    assert_eq!(PduError::Incomplete { need: 1 }.errno(), libc::EAGAIN);
    assert_eq!(PduError::DataOutOfRange.errno(), libc::EPROTO);
    let mut small = [0u8; 64];
    assert!(build_ic_req(&mut small, 0, Digests::default(), 0).is_err());
    let e = build_capsule_cmd(&mut small, &Sqe::default(), 0, &TxConfig::default()).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC);
    assert!(build_capsule_cmd(&mut b, &Sqe::default(), u32::MAX, &TxConfig::default()).is_err());
}

fn any_digests() -> impl Strategy<Value = Digests> {
    (any::<bool>(), any::<bool>()).prop_map(|(header, data)| Digests { header, data })
}

proptest! {
    #[test]
    fn capsules_round_trip(dw in proptest::array::uniform16(any::<u32>()), d in any_digests(), pda in 0u8..32, len in 0u32..100_000) {
        let sqe = Sqe::from_dwords(dw);
        let mut b = [0u8; 256];
        let n = build_capsule_cmd(&mut b, &sqe, len, &tx(d, pda)).unwrap();
        let (pdu, l) = parse_header(&b, &ctrl(d, pda)).unwrap();
        let Pdu::CapsuleCmd(c) = pdu else { return Err(TestCaseError::fail("not a command")) };
        prop_assert_eq!(c.sqe, sqe);
        prop_assert_eq!(l.data_len, len);
        prop_assert_eq!(l.ddgst, d.data && len > 0);
        if len > 0 {
            prop_assert_eq!(l.data_offset as usize, n);
        }
        prop_assert_eq!(u64::from(l.plen), n as u64 + u64::from(len) + if l.ddgst { 4 } else { 0 });

        let mut cqe: Cqe = zerocopy::FromBytes::read_from_bytes(&dw.as_bytes()[..16]).unwrap();
        cqe.set_phase(false);
        let n = build_capsule_resp(&mut b, &cqe, &tx(d, pda)).unwrap();
        prop_assert_eq!(n, 24 + if d.header { 4 } else { 0 });
        let (pdu, l) = parse_header(&b, &host(d, pda)).unwrap();
        let Pdu::CapsuleResp(r) = pdu else { return Err(TestCaseError::fail("not a response")) };
        prop_assert_eq!(r.cqe, cqe);
        prop_assert_eq!(l.data_len, 0);
    }

    #[test]
    fn data_pdus_round_trip(cccid: u16, ttag: u16, datao: u32, datal in 1u32..10_000_000, last: bool, success: bool, d in any_digests(), pda in 0u8..32) {
        let mut b = [0u8; 160];
        let h = DataHeader { cccid, ttag, datao, datal, last, success: false };
        build_h2c_data(&mut b, &h, &tx(d, pda)).unwrap();
        let (pdu, l) = parse_header(&b, &ctrl(d, pda)).unwrap();
        let Pdu::H2CData(p) = pdu else { return Err(TestCaseError::fail("not h2c")) };
        prop_assert_eq!((p.cccid.get(), p.ttag.get(), p.datao.get(), p.datal.get()), (cccid, ttag, datao, datal));
        prop_assert_eq!(p.ch.flags & flags::LAST_PDU != 0, last);
        prop_assert_eq!(l.data_len, datal);

        let h = DataHeader { success: success && last, ..h };
        build_c2h_data(&mut b, &h, &tx(d, pda)).unwrap();
        let (pdu, _) = parse_header(&b, &host(d, pda)).unwrap();
        let Pdu::C2HData(p) = pdu else { return Err(TestCaseError::fail("not c2h")) };
        prop_assert_eq!((p.cccid.get(), p.datao.get(), p.datal.get()), (cccid, datao, datal));
        prop_assert_eq!(p.ch.flags & flags::SUCCESS != 0, success && last);

        build_r2t(&mut b, cccid, ttag, datao, datal, &tx(d, pda)).unwrap();
        let (pdu, l) = parse_header(&b, &host(d, pda)).unwrap();
        let Pdu::R2T(p) = pdu else { return Err(TestCaseError::fail("not r2t")) };
        prop_assert_eq!((p.cccid.get(), p.ttag.get(), p.r2to.get(), p.r2tl.get()), (cccid, ttag, datao, datal));
        prop_assert_eq!(l.data_len, 0);
    }

    #[test]
    fn ic_and_term_round_trip(pda in 0u8..32, d in any_digests(), maxr2t: u32, maxh2c in 1024u32..1_000_000, fei: u32, fes in 1u16..7, data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut b = [0u8; 200];
        build_ic_req(&mut b, pda, d, maxr2t).unwrap();
        let (pdu, _) = parse_header(&b, &RecvConfig::new(Role::Controller)).unwrap();
        let Pdu::IcReq(r) = pdu else { return Err(TestCaseError::fail("not icreq")) };
        prop_assert_eq!((r.hpda, r.dgst, r.maxr2t.get()), (pda, u8::from(d.header) | u8::from(d.data) << 1, maxr2t));
        let maxh2cdata = maxh2c * 4;
        build_ic_resp(&mut b, pda, d, maxh2cdata).unwrap();
        let (pdu, _) = parse_header(&b, &RecvConfig::new(Role::Host)).unwrap();
        let Pdu::IcResp(r) = pdu else { return Err(TestCaseError::fail("not icresp")) };
        prop_assert_eq!((r.cpda, r.maxh2cdata.get()), (pda, maxh2cdata));

        let fes = Fes::from_u16(fes).unwrap();
        let n = build_term_req(&mut b, Role::Host, fes, fei, &data).unwrap();
        let (pdu, l) = parse_header(&b, &RecvConfig::new(Role::Controller)).unwrap();
        let Pdu::H2CTermReq(t) = pdu else { return Err(TestCaseError::fail("not termreq")) };
        prop_assert_eq!((t.fes.get(), t.fei.get()), (fes as u16, fei));
        let kept = data.len().min(128);
        prop_assert_eq!(n, 24 + kept);
        prop_assert_eq!(l.data_len as usize, kept);
        prop_assert_eq!(&b[24..n], &data[..kept]);
    }

    /// Arbitrary bytes, and valid PDUs with one byte changed, never panic
    /// the parser, and whatever it accepts is self-consistent. Cheap per
    /// case: CI runs it with PROPTEST_CASES=100000.
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..160),
            (0usize..5, any::<usize>(), any::<u8>()).prop_map(|(kind, at, v)| mutated_pdu(kind, at, v)),
        ],
        host_side: bool,
        connected: bool,
        d in any_digests(),
        pda in any::<u8>(),
        max_data_len: u32,
    ) {
        let role = if host_side { Role::Host } else { Role::Controller };
        let cfg = RecvConfig { role, connected, digests: d, pda, max_data_len };
        if let Ok(l) = parse_common_header(&bytes, &cfg) {
            prop_assert!(l.header_len() <= 132);
            prop_assert!(u64::from(l.data_offset) + u64::from(l.data_len) <= u64::from(l.plen));
            prop_assert!(l.data_len <= max_data_len || !l.pdu_type.carries_data());
        }
        if let Ok((pdu, l)) = parse_header(&bytes, &cfg) {
            prop_assert!(bytes.len() >= l.header_len());
            let t = match pdu {
                Pdu::IcReq(_) => PduType::IcReq,
                Pdu::IcResp(_) => PduType::IcResp,
                Pdu::H2CTermReq(_) => PduType::H2CTermReq,
                Pdu::C2HTermReq(_) => PduType::C2HTermReq,
                Pdu::CapsuleCmd(_) => PduType::CapsuleCmd,
                Pdu::CapsuleResp(_) => PduType::CapsuleResp,
                Pdu::H2CData(_) => PduType::H2CData,
                Pdu::C2HData(_) => PduType::C2HData,
                Pdu::R2T(_) => PduType::R2T,
            };
            prop_assert_eq!(t, l.pdu_type);
            prop_assert_eq!(t.from_host(), role == Role::Controller);
        }
    }
}

/// A valid PDU of one of five kinds with byte `at` set to `v`.
fn mutated_pdu(kind: usize, at: usize, v: u8) -> Vec<u8> {
    let mut b = vec![0u8; 160];
    let t = tx(BOTH, 0);
    let h = DataHeader {
        cccid: 1,
        datal: 512,
        last: true,
        ..DataHeader::default()
    };
    let n = match kind {
        0 => build_ic_req(&mut b, 0, BOTH, 0),
        1 => build_capsule_cmd(&mut b, &Sqe::new(1, 1, 1), 4096, &t),
        2 => build_h2c_data(&mut b, &h, &t),
        3 => build_c2h_data(&mut b, &h, &t),
        _ => build_r2t(&mut b, 1, 1, 0, 512, &t),
    }
    .expect("invariant: 160 bytes hold any header");
    b.truncate(n);
    let i = at % n;
    b[i] = v;
    b
}
