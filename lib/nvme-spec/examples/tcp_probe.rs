//! `tcp_probe ADDR:PORT SUBNQN [--digests]`: a minimal NVMe/TCP host built
//! only from this crate's PDU builders, parser, commands and Identify
//! structures, run against a real target (the Linux kernel's nvmet, in the
//! VM harness: `tests/vm/nvmet-tcp-probe.sh`). It proves the wire formats
//! against an implementation nobody here wrote: the ICReq/ICResp exchange,
//! an admin queue (Connect, Property Get/Set bring-up, Identify through
//! C2HData, Set Features), an I/O queue (in-capsule writes, writes pulled by
//! R2T/H2CData, reads, Write Zeroes, Dataset Management, Flush) and the
//! status of failing commands, with or without header and data digests.
//!
//! Blocking std sockets, one command at a time: a probe, not an initiator.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::ExitCode;

use bdevkit_nvme_spec::admin::Identify;
use bdevkit_nvme_spec::cmd::Command;
use bdevkit_nvme_spec::fabrics::{
    uuid_nqn, Connect, ConnectData, ConnectResponse, PropertyGet, PropertySet, ADMIN_QID,
    CNTLID_DYNAMIC,
};
use bdevkit_nvme_spec::features::{KeepAliveTimer, NumberOfQueues};
use bdevkit_nvme_spec::identify::{IdentifyController, IdentifyNamespace};
use bdevkit_nvme_spec::io::{
    BlockRange, DatasetManagement, DsmRange, Flush, Read, Write, WriteZeroes,
};
use bdevkit_nvme_spec::regs::{offset, Cap, Cc, Csts, PropertySize, Vs};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::{self, flags, Digests, Pdu, PduLayout, RecvConfig, Role, TxConfig};
use bdevkit_nvme_spec::zerocopy::{FromBytes, IntoBytes};
use bdevkit_nvme_spec::{Cqe, Sqe, Status};

type Res<T> = Result<T, String>;

/// One NVMe/TCP connection (one queue).
struct Conn {
    sock: TcpStream,
    rx: RecvConfig,
    tx: TxConfig,
    maxh2cdata: u32,
    cid: u16,
}

impl Conn {
    /// Connects and runs ICReq/ICResp.
    fn open(addr: &str, digests: Digests) -> Res<Conn> {
        let sock = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        let mut c = Conn {
            sock,
            rx: RecvConfig {
                max_data_len: 1 << 24,
                ..RecvConfig::new(Role::Host)
            },
            tx: TxConfig::default(),
            maxh2cdata: 0,
            cid: 0,
        };
        let mut b = [0u8; 128];
        let n = tcp::build_ic_req(&mut b, 0, digests, 0).map_err(|e| e.to_string())?;
        c.send(&b[..n])?;
        let (hdr, _, _) = c.recv()?;
        let (pdu, _) = tcp::parse_header(&hdr, &c.rx).map_err(|e| format!("icresp: {e}"))?;
        let Pdu::IcResp(r) = pdu else {
            return Err(format!("expected ICResp, got {pdu:?}"));
        };
        let got = Digests {
            header: r.dgst & tcp::digest_bits::HEADER != 0,
            data: r.dgst & tcp::digest_bits::DATA != 0,
        };
        if got != digests {
            return Err(format!("asked for digests {digests:?}, got {got:?}"));
        }
        c.maxh2cdata = r.maxh2cdata.get();
        c.tx = TxConfig {
            digests: got,
            pda: r.cpda,
        };
        c.rx = c.rx.connected(got, 0);
        println!(
            "icresp: cpda {} maxh2cdata {} digests {got:?}",
            r.cpda, c.maxh2cdata
        );
        Ok(c)
    }

    fn send(&mut self, b: &[u8]) -> Res<()> {
        self.sock.write_all(b).map_err(|e| format!("send: {e}"))
    }

    fn read_exact(&mut self, n: usize) -> Res<Vec<u8>> {
        let mut v = vec![0u8; n];
        self.sock
            .read_exact(&mut v)
            .map_err(|e| format!("recv {n} bytes: {e}"))?;
        Ok(v)
    }

    /// Receives one PDU: its header (with digest), layout and data (the
    /// data digest checked).
    fn recv(&mut self) -> Res<(Vec<u8>, PduLayout, Vec<u8>)> {
        let mut hdr = self.read_exact(8)?;
        let l = tcp::parse_common_header(&hdr, &self.rx).map_err(|e| {
            format!(
                "common header {hdr:02x?}: {e} (fes {:?} fei {})",
                e.fes(),
                e.fei()
            )
        })?;
        hdr.extend(self.read_exact(l.header_len() - 8)?);
        tcp::parse_header(&hdr, &self.rx).map_err(|e| format!("header: {e}"))?;
        self.read_exact(l.padding())?;
        let data = self.read_exact(l.data_len as usize)?;
        if l.ddgst {
            let d = self.read_exact(4)?;
            tcp::verify_data_digest(&data, [d[0], d[1], d[2], d[3]]).map_err(|e| e.to_string())?;
        }
        Ok((hdr, l, data))
    }

    /// Runs one command: `write` data goes in the capsule when `in_capsule`,
    /// otherwise on R2T; `read_len` bytes come back in C2HData.
    fn exec(
        &mut self,
        mut sqe: Sqe,
        write: &[u8],
        in_capsule: bool,
        read_len: usize,
    ) -> Res<(Cqe, Vec<u8>)> {
        self.cid = self.cid.wrapping_add(1);
        sqe.cid.set(self.cid);
        let wlen = u32::try_from(write.len()).map_err(|e| e.to_string())?;
        let sgl = if in_capsule && !write.is_empty() {
            SglDescriptor::offset_data_block(0, wlen)
        } else {
            let len = if write.is_empty() {
                read_len
            } else {
                write.len()
            };
            SglDescriptor::transport_data_block(u32::try_from(len).map_err(|e| e.to_string())?)
        };
        sqe.set_sgl1(&sgl);
        let icd = if in_capsule { write } else { &[][..] };
        let mut b = [0u8; 256];
        let n = tcp::build_capsule_cmd(
            &mut b,
            &sqe,
            u32::try_from(icd.len()).map_err(|e| e.to_string())?,
            &self.tx,
        )
        .map_err(|e| e.to_string())?;
        let mut out = b[..n].to_vec();
        out.extend_from_slice(icd);
        if self.tx.digests.data && !icd.is_empty() {
            out.extend_from_slice(&tcp::data_digest(icd).to_le_bytes());
        }
        self.send(&out)?;
        let mut data = vec![0u8; read_len];
        loop {
            let (hdr, _, pdata) = self.recv()?;
            let (pdu, _) = tcp::parse_header(&hdr, &self.rx).map_err(|e| e.to_string())?;
            match pdu {
                Pdu::CapsuleResp(r) => {
                    if r.cqe.cid.get() != self.cid {
                        return Err(format!(
                            "response for cid {}, expected {}",
                            r.cqe.cid.get(),
                            self.cid
                        ));
                    }
                    return Ok((r.cqe, data));
                }
                Pdu::C2HData(d) => {
                    if d.cccid.get() != self.cid {
                        return Err(format!("c2h data for cid {}", d.cccid.get()));
                    }
                    let o = d.datao.get() as usize;
                    let end = o + pdata.len();
                    if end > data.len() {
                        return Err(format!("c2h data {o}..{end} past {}", data.len()));
                    }
                    data[o..end].copy_from_slice(&pdata);
                    if d.ch.flags & flags::SUCCESS != 0 {
                        return Ok((Cqe::new(self.cid, Status::SUCCESS, 0), data));
                    }
                }
                Pdu::R2T(r) => {
                    let (ttag, mut off) = (r.ttag.get(), r.r2to.get());
                    let end = off + r.r2tl.get();
                    while off < end {
                        let chunk = (end - off).min(self.maxh2cdata);
                        let h = tcp::DataHeader {
                            cccid: self.cid,
                            ttag,
                            datao: off,
                            datal: chunk,
                            last: off + chunk == end,
                            success: false,
                        };
                        let n =
                            tcp::build_h2c_data(&mut b, &h, &self.tx).map_err(|e| e.to_string())?;
                        let piece = &write[off as usize..(off + chunk) as usize];
                        let mut out = b[..n].to_vec();
                        out.extend_from_slice(piece);
                        if self.tx.digests.data {
                            out.extend_from_slice(&tcp::data_digest(piece).to_le_bytes());
                        }
                        self.send(&out)?;
                        off += chunk;
                    }
                }
                other => return Err(format!("unexpected pdu {other:?}")),
            }
        }
    }

    /// Runs a command that must succeed.
    fn ok(
        &mut self,
        what: &str,
        sqe: Sqe,
        write: &[u8],
        in_capsule: bool,
        read_len: usize,
    ) -> Res<(Cqe, Vec<u8>)> {
        let (cqe, data) = self.exec(sqe, write, in_capsule, read_len)?;
        if !cqe.status().is_success() {
            return Err(format!("{what}: {}", cqe.status()));
        }
        println!("ok: {what}");
        Ok((cqe, data))
    }

    fn connect(&mut self, qid: u16, cntlid: u16, subnqn: &str, kato_ms: u32) -> Res<u16> {
        let hostid = [
            0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x55, 0x55, 0x55, 0x55,
            0x55, 0x55,
        ];
        let data = ConnectData::new(hostid, cntlid, subnqn, &uuid_nqn(&hostid))
            .map_err(|e| e.to_string())?;
        let (cqe, _) = self.ok(
            "connect",
            Connect::new(qid, 32, kato_ms).to_sqe(0),
            data.as_bytes(),
            true,
            0,
        )?;
        Ok(ConnectResponse::from_dword(cqe.dw0.get()).cntlid)
    }

    fn prop_get(&mut self, size: PropertySize, off: u32) -> Res<u64> {
        let (cqe, _) = self.ok(
            "property get",
            PropertyGet::new(size, off).to_sqe(0),
            &[],
            false,
            0,
        )?;
        Ok(cqe.dw01())
    }
}

fn check(cond: bool, what: &str) -> Res<()> {
    if cond {
        println!("ok: {what}");
        Ok(())
    } else {
        Err(format!("failed: {what}"))
    }
}

fn run(addr: &str, subnqn: &str, digests: Digests) -> Res<()> {
    // Admin queue.
    let mut a = Conn::open(addr, digests)?;
    let cntlid = a.connect(ADMIN_QID, CNTLID_DYNAMIC, subnqn, 30_000)?;
    println!("admin connect: cntlid {cntlid}");
    let cap = Cap(a.prop_get(PropertySize::Eight, offset::CAP)?);
    let vs = Vs(
        u32::try_from(a.prop_get(PropertySize::Four, offset::VS)? & 0xffff_ffff)
            .map_err(|e| e.to_string())?,
    );
    println!(
        "cap {:#x} (mqes {}, to {} ms), vs {vs}",
        cap.0,
        cap.mqes(),
        cap.timeout_ms()
    );
    check(vs >= Vs::V1_2, "fabrics controller reports NVMe >= 1.2")?;
    let cc = Cc::enabled(0);
    a.ok(
        "property set cc",
        PropertySet::new(PropertySize::Four, offset::CC, cc.0.into()).to_sqe(0),
        &[],
        false,
        0,
    )?;
    let mut ready = false;
    for _ in 0..1000 {
        let csts = Csts(
            u32::try_from(a.prop_get(PropertySize::Four, offset::CSTS)? & 0xffff_ffff)
                .map_err(|e| e.to_string())?,
        );
        if csts.rdy() {
            ready = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    check(ready, "CSTS.RDY after CC.EN")?;
    let (_, id) = a.ok(
        "identify controller",
        Identify::controller().to_sqe(0),
        &[],
        false,
        4096,
    )?;
    let ctrl = IdentifyController::read_from_bytes(&id).map_err(|_| "identify size")?;
    println!(
        "identify: sn '{}' mn '{}' fr '{}' subnqn '{}'",
        ctrl.serial(),
        ctrl.model(),
        ctrl.firmware(),
        ctrl.subnqn()
    );
    check(
        ctrl.subnqn() == subnqn,
        "Identify Controller names the subsystem",
    )?;
    check(
        ctrl.cntlid.get() == cntlid,
        "Identify Controller has the connected cntlid",
    )?;
    let icd = ctrl.in_capsule_data_bytes() as usize;
    let (_, ns) = a.ok(
        "identify namespace",
        Identify::namespace(1).to_sqe(0),
        &[],
        false,
        4096,
    )?;
    let ns = IdentifyNamespace::read_from_bytes(&ns).map_err(|_| "identify size")?;
    let bs = ns.lba_size().ok_or("no lba size")? as usize;
    println!(
        "namespace 1: {} blocks of {bs} bytes; in-capsule data {icd}",
        ns.nsze.get()
    );
    let (cqe, _) = a.ok(
        "set features nq",
        bdevkit_nvme_spec::admin::SetFeatures::of(&NumberOfQueues { nsqr: 0, ncqr: 0 }).to_sqe(0),
        &[],
        false,
        0,
    )?;
    let nq = <NumberOfQueues as bdevkit_nvme_spec::features::Feature>::from_dword(cqe.dw0.get());
    check(nq.sq_count() >= 1, "Set Features Number of Queues")?;
    a.ok(
        "set features kato",
        bdevkit_nvme_spec::admin::SetFeatures::of(&KeepAliveTimer { kato_ms: 30_000 }).to_sqe(0),
        &[],
        false,
        0,
    )?;
    a.ok(
        "keep alive",
        bdevkit_nvme_spec::admin::KeepAlive.to_sqe(0),
        &[],
        false,
        0,
    )?;
    let (cqe, _) = a.exec(Sqe::new(0xc5, 0, 0), &[], false, 0)?;
    check(
        cqe.status().is(Status::INVALID_OPCODE) && cqe.status().dnr,
        &format!("unknown admin opcode: {}", cqe.status()),
    )?;

    // I/O queue.
    let mut q = Conn::open(addr, digests)?;
    q.connect(1, cntlid, subnqn, 0)?;
    let small: Vec<u8> = (0..8 * bs)
        .map(|i| u8::try_from(i % 251).unwrap_or(0))
        .collect();
    let big: Vec<u8> = (0..64 * bs)
        .map(|i| u8::try_from(i % 241).unwrap_or(0) ^ 0x5a)
        .collect();
    let w = Write::new(1, BlockRange::new(100, 8).map_err(|e| e.to_string())?);
    q.ok(
        "in-capsule write",
        w.to_sqe(0),
        &small,
        small.len() <= icd,
        0,
    )?;
    let w = Write::new(1, BlockRange::new(200, 64).map_err(|e| e.to_string())?);
    q.ok("r2t write", w.to_sqe(0), &big, false, 0)?;
    let r = Read::new(1, BlockRange::new(100, 8).map_err(|e| e.to_string())?);
    let (_, got) = q.ok("read", r.to_sqe(0), &[], false, small.len())?;
    check(got == small, "read returns the in-capsule write")?;
    let r = Read::new(1, BlockRange::new(200, 64).map_err(|e| e.to_string())?);
    let (_, got) = q.ok("read", r.to_sqe(0), &[], false, big.len())?;
    check(got == big, "read returns the R2T write")?;
    q.ok("flush", Flush { nsid: 1 }.to_sqe(0), &[], false, 0)?;
    if ctrl.supports_write_zeroes() {
        let z = WriteZeroes::new(1, BlockRange::new(100, 8).map_err(|e| e.to_string())?);
        q.ok("write zeroes", z.to_sqe(0), &[], false, 0)?;
        let r = Read::new(1, BlockRange::new(100, 8).map_err(|e| e.to_string())?);
        let (_, got) = q.ok("read", r.to_sqe(0), &[], false, small.len())?;
        check(
            got.iter().all(|&b| b == 0),
            "write zeroes reads back zeroes",
        )?;
    }
    if ctrl.supports_dsm() {
        let ranges = [DsmRange::new(200, 64)];
        let d = DatasetManagement::deallocate(1, ranges.len()).map_err(|e| e.to_string())?;
        q.ok(
            "dataset management",
            d.to_sqe(0),
            ranges.as_bytes(),
            true,
            0,
        )?;
    }
    let past = Read::new(
        1,
        BlockRange::new(ns.nsze.get(), 1).map_err(|e| e.to_string())?,
    );
    let (cqe, _) = q.exec(past.to_sqe(0), &[], false, bs)?;
    // nvmet's block device backend answers Internal Error rather than LBA
    // Out of Range: the block layer fails a bio past the end with EIO.
    check(
        !cqe.status().is_success() && !cqe.status().is_retryable(),
        &format!("read past the end fails for good: {}", cqe.status()),
    )?;
    let (cqe, _) = q.exec(Sqe::new(0x7e, 0, 1), &[], false, 0)?;
    check(
        cqe.status().is(Status::INVALID_OPCODE),
        &format!("unknown I/O opcode: {}", cqe.status()),
    )?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(addr), Some(nqn)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: tcp_probe ADDR:PORT SUBNQN [--digests]");
        return ExitCode::from(2);
    };
    let on = args.iter().any(|a| a == "--digests");
    let digests = Digests {
        header: on,
        data: on,
    };
    match run(addr, nqn, digests) {
        Ok(()) => {
            println!("tcp_probe: all checks passed (digests {on})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tcp_probe: {e}");
            ExitCode::FAILURE
        }
    }
}
