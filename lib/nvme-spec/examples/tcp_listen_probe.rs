//! `tcp_listen_probe ADDR:PORT SUBNQN HOSTNQN [--digests]`: the
//! controller side of [`tcp_probe`](./tcp_probe.rs). It accepts one
//! connection from a real host (the Linux kernel's nvme-tcp, in the VM
//! harness: `tests/vm/nvme-tcp-host-probe.sh`), parses its ICReq and its
//! admin Connect capsule with this crate's controller-side parser, checks
//! the Connect data, and refuses the host with Connect Invalid Host (DNR):
//! the host's log line about it proves the response capsule and status
//! encoding. With `--digests` it expects, and checks, header and data
//! digests on everything the host sends.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::process::ExitCode;

use bdevkit_nvme_spec::fabrics::{validate_nqn, ConnectData, FabricsCommand, ADMIN_QID};
use bdevkit_nvme_spec::sgl::{SglType, SGL_SUBTYPE_OFFSET};
use bdevkit_nvme_spec::tcp::{self, Digests, Pdu, RecvConfig, Role, TxConfig};
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::{Cqe, Status};

type Res<T> = Result<T, String>;

fn read_exact(s: &mut impl std::io::Read, n: usize) -> Res<Vec<u8>> {
    let mut v = vec![0u8; n];
    s.read_exact(&mut v)
        .map_err(|e| format!("recv {n} bytes: {e}"))?;
    Ok(v)
}

fn check(cond: bool, what: &str) -> Res<()> {
    if cond {
        println!("ok: {what}");
        Ok(())
    } else {
        Err(format!("failed: {what}"))
    }
}

fn run(addr: &str, subnqn: &str, hostnqn: &str, digests: Digests) -> Res<()> {
    let listener = TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    println!("listening on {addr}");
    let (mut s, peer) = listener.accept().map_err(|e| format!("accept: {e}"))?;
    println!("host connected from {peer}");
    let mut rx = RecvConfig::new(Role::Controller);

    // ICReq.
    let mut hdr = read_exact(&mut s, 8)?;
    let l = tcp::parse_common_header(&hdr, &rx).map_err(|e| format!("icreq: {e}"))?;
    hdr.extend(read_exact(&mut s, l.header_len() - 8)?);
    let (pdu, _) = tcp::parse_header(&hdr, &rx).map_err(|e| format!("icreq: {e}"))?;
    let Pdu::IcReq(req) = pdu else {
        return Err(format!("expected ICReq, got {pdu:?}"));
    };
    let asked = Digests {
        header: req.dgst & tcp::digest_bits::HEADER != 0,
        data: req.dgst & tcp::digest_bits::DATA != 0,
    };
    println!(
        "icreq: hpda {} maxr2t {} digests {asked:?}",
        req.hpda,
        req.maxr2t.get()
    );
    check(asked == digests, "the host asks for the expected digests")?;
    let mut b = [0u8; 256];
    let n = tcp::build_ic_resp(&mut b, 0, asked, 131_072).map_err(|e| e.to_string())?;
    s.write_all(&b[..n]).map_err(|e| e.to_string())?;
    rx = RecvConfig {
        max_data_len: 8192,
        ..rx.connected(asked, 0)
    };
    let tx = TxConfig {
        digests: asked,
        pda: req.hpda,
    };

    // The admin Connect capsule with its in-capsule data.
    let mut hdr = read_exact(&mut s, 8)?;
    let l = tcp::parse_common_header(&hdr, &rx)
        .map_err(|e| format!("connect: {e} (fes {:?} fei {})", e.fes(), e.fei()))?;
    hdr.extend(read_exact(&mut s, l.header_len() - 8)?);
    let (pdu, l) = tcp::parse_header(&hdr, &rx).map_err(|e| format!("connect: {e}"))?;
    check(
        l.hdgst == asked.header,
        "header digest present as negotiated, and it matches",
    )?;
    let Pdu::CapsuleCmd(cmd) = pdu else {
        return Err(format!("expected a command capsule, got {pdu:?}"));
    };
    let sqe = cmd.sqe;
    read_exact(&mut s, l.padding())?;
    let data = read_exact(&mut s, l.data_len as usize)?;
    if l.ddgst {
        let d = read_exact(&mut s, 4)?;
        tcp::verify_data_digest(&data, [d[0], d[1], d[2], d[3]]).map_err(|e| e.to_string())?;
        println!("ok: data digest of the connect data matches");
    }
    check(l.ddgst == asked.data, "data digest present as negotiated")?;
    let Some(FabricsCommand::Connect(c)) = FabricsCommand::decode(&sqe) else {
        return Err(format!("expected Connect, got {sqe:?}"));
    };
    println!(
        "connect: qid {} sqsize {} kato {} ms cattr {:#x}",
        c.qid, c.sqsize, c.kato_ms, c.cattr
    );
    check(
        c.qid == ADMIN_QID && c.sq_entries() >= 32,
        "admin queue Connect of at least 32 entries",
    )?;
    let sgl = sqe.sgl1();
    check(
        sgl.kind() == SglType::DataBlock
            && sgl.subtype() == SGL_SUBTYPE_OFFSET
            && sgl.length() == 1024,
        "SGL1 is a 1024-byte offset data block (in-capsule Connect data)",
    )?;
    let cd = ConnectData::read_from_bytes(&data)
        .map_err(|_| format!("connect data is {} bytes", data.len()))?;
    println!(
        "connect data: cntlid {:#x} subnqn '{}' hostnqn '{}'",
        cd.cntlid.get(),
        cd.subnqn(),
        cd.hostnqn()
    );
    check(
        cd.subnqn() == subnqn && validate_nqn(&cd.subnqn()).is_ok(),
        "subnqn",
    )?;
    check(
        cd.hostnqn() == hostnqn && validate_nqn(&cd.hostnqn()).is_ok(),
        "hostnqn",
    )?;
    check(cd.cntlid.get() == 0xffff, "dynamic controller requested")?;

    // Refuse the host.
    let cqe = Cqe::new(sqe.cid.get(), Status::CONNECT_INVALID_HOST.with_dnr(), 0);
    let n = tcp::build_capsule_resp(&mut b, &cqe, &tx).map_err(|e| e.to_string())?;
    s.write_all(&b[..n]).map_err(|e| e.to_string())?;
    println!("sent: {}", cqe.status().fabrics_name().unwrap_or("?"));
    // The host closes the connection after reading the response.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    check(rest.is_empty(), "the host sent nothing more and closed")?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(addr), Some(subnqn), Some(hostnqn)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: tcp_listen_probe ADDR:PORT SUBNQN HOSTNQN [--digests]");
        return ExitCode::from(2);
    };
    let on = args.iter().any(|a| a == "--digests");
    match run(
        addr,
        subnqn,
        hostnqn,
        Digests {
            header: on,
            data: on,
        },
    ) {
        Ok(()) => {
            println!("tcp_listen_probe: all checks passed (digests {on})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tcp_listen_probe: {e}");
            ExitCode::FAILURE
        }
    }
}
