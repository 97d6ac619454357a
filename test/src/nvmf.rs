//! NVMe/TCP test support: an in-process target ([`NvmfEnv`]: a runtime,
//! malloc/null bdevs and a started `bdevkit_nvmf::Target` listening on a
//! free loopback port) and a small PDU-level host ([`Host`]) built from the
//! spec crate, which can send well-formed or broken PDUs and report what
//! the target answered: a response, data, a C2HTermReq, or a close.
//!
//! The host is blocking with a read timeout ([`HOST_TIMEOUT`]), one
//! command at a time unless the test pipelines by hand.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use bdevkit::bdev::BdevManager;
use bdevkit_nvme_spec::cmd::{Command, Psdt};
use bdevkit_nvme_spec::fabrics::{
    Connect, ConnectData, ConnectResponse, PropertySet, CNTLID_DYNAMIC,
};
use bdevkit_nvme_spec::regs::{offset, Cc, PropertySize};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::{self, flags, Digests, Fes, Pdu, RecvConfig, Role, TxConfig};
use bdevkit_nvme_spec::zerocopy::{FromBytes, IntoBytes};
use bdevkit_nvme_spec::{Cqe, Sqe, Status};
use bdevkit_nvmf::params::NamespaceParams;
use bdevkit_nvmf::{
    CreateSubsystemParams, CreateTransportParams, ListenAddressParams, ListenerParams, Target,
};

use crate::TestEnv;

/// Longest a host waits for one PDU.
pub const HOST_TIMEOUT: Duration = Duration::from_secs(15);
/// The subsystem every [`NvmfEnv`] has.
pub const SUBNQN: &str = "nqn.2016-06.io.bdevkit:test";
/// The host NQN [`NvmfEnv`] allows.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
/// A host NQN no subsystem allows.
pub const STRANGER: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";

/// A free loopback port (bound, then released: a small race other tests
/// are unlikely to win).
#[must_use]
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("invariant: loopback bind");
    l.local_addr().expect("invariant: bound").port()
}

/// An in-process target: `Malloc0` (8 MiB of 512-byte blocks) as
/// namespace 1 of [`SUBNQN`], which allows [`HOSTNQN`] only, listening
/// on `addr`.
pub struct NvmfEnv {
    /// The runtime and bdev layer.
    pub env: TestEnv,
    /// The target.
    pub target: Target,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl std::fmt::Debug for NvmfEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmfEnv").field("addr", &self.addr).finish()
    }
}

impl NvmfEnv {
    /// Starts the target on `mask` with the transport options `tp`.
    ///
    /// # Panics
    /// When any set-up step fails.
    #[must_use]
    pub fn start_with(mask: &str, tp: CreateTransportParams) -> NvmfEnv {
        let env = TestEnv::with_modules(mask, &[bdevkit_malloc::register, bdevkit_null::register]);
        let target = Target::new(env.runtime().handle(), env.mgr().clone());
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}")
            .parse()
            .expect("invariant: address");
        let t = target.clone();
        let mgr = env.mgr().clone();
        let (tx, rx) = mpsc::channel();
        env.runtime()
            .app_thread()
            .send_msg(move || {
                let r = (|| -> Result<(), String> {
                    t.start().map_err(|e| e.to_string())?;
                    t.create_transport(&tp).map_err(|e| e.to_string())?;
                    bdevkit_malloc::create(
                        &mgr,
                        bdevkit_malloc::MallocCreateParams::new("Malloc0", 512, 16384),
                    )
                    .map_err(|e| e.to_string())?;
                    let mut p = CreateSubsystemParams::new(SUBNQN);
                    p.serial_number = Some("BDEVKITTEST".into());
                    t.create_subsystem(&p).map_err(|e| e.to_string())?;
                    t.add_host(SUBNQN, HOSTNQN, None)
                        .map_err(|e| e.to_string())?;
                    t.add_listener(&listener(SUBNQN, port))
                        .map_err(|e| e.to_string())?;
                    Ok(())
                })();
                let tx2 = tx.clone();
                match r {
                    Ok(()) => t.add_ns(SUBNQN, &NamespaceParams::new("Malloc0"), move |r| {
                        let _ = tx2.send(r.map(|_| ()).map_err(|e| e.to_string()));
                    }),
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .expect("invariant: app thread");
        rx.recv()
            .expect("invariant: set-up answers")
            .expect("target set-up");
        NvmfEnv { env, target, addr }
    }

    /// [`NvmfEnv::start_with`] on core 0 with SPDK's default transport.
    #[must_use]
    pub fn start() -> NvmfEnv {
        Self::start_with("0x1", tcp_transport())
    }

    /// The bdev layer.
    #[must_use]
    pub fn mgr(&self) -> &BdevManager {
        self.env.mgr()
    }

    /// Runs `f(target)` on the app thread and waits for the value it
    /// sends back through its callback.
    ///
    /// # Panics
    /// When the app thread is gone or never answers.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Target, mpsc::Sender<R>) + Send + 'static,
    ) -> R {
        let (tx, rx) = mpsc::channel();
        let t = self.target.clone();
        self.env
            .runtime()
            .app_thread()
            .send_msg(move || f(&t, tx))
            .expect("invariant: app thread");
        rx.recv_timeout(HOST_TIMEOUT).expect("target answers")
    }

    /// A host connected by TCP (no ICReq yet).
    #[must_use]
    pub fn host(&self) -> Host<TcpStream> {
        Host::tcp(self.addr)
    }

    /// A host with ICReq done and an admin queue connected and enabled as
    /// [`HOSTNQN`]; returns it and its controller id.
    ///
    /// # Panics
    /// When any step fails.
    #[must_use]
    pub fn admin(&self, digests: Digests) -> (Host<TcpStream>, u16) {
        let mut h = self.host();
        h.icreq(digests).expect("icreq");
        let cqe = h
            .connect(0, 32, 0, CNTLID_DYNAMIC, SUBNQN, HOSTNQN)
            .expect("connect");
        assert!(cqe.status().is_success(), "admin connect: {}", cqe.status());
        let cntlid = ConnectResponse::from_dword(cqe.dw0.get()).cntlid;
        h.enable().expect("enable");
        (h, cntlid)
    }

    /// A host with an I/O queue (qid 1, 128 entries) of controller `cntlid`.
    ///
    /// # Panics
    /// When any step fails.
    #[must_use]
    pub fn io(&self, cntlid: u16, digests: Digests) -> Host<TcpStream> {
        let mut h = self.host();
        h.icreq(digests).expect("icreq");
        let cqe = h
            .connect(1, 128, 0, cntlid, SUBNQN, HOSTNQN)
            .expect("io connect");
        assert!(cqe.status().is_success(), "io connect: {}", cqe.status());
        h
    }
}

impl Drop for NvmfEnv {
    fn drop(&mut self) {
        let t = self.target.clone();
        let (tx, rx) = mpsc::channel();
        let _ = self.env.runtime().app_thread().send_msg(move || {
            t.shutdown(move || {
                let _ = tx.send(());
            });
        });
        let _ = rx.recv_timeout(HOST_TIMEOUT);
    }
}

/// SPDK's default TCP transport params.
#[must_use]
pub fn tcp_transport() -> CreateTransportParams {
    CreateTransportParams {
        trtype: "TCP".into(),
        ..CreateTransportParams::default()
    }
}

/// A TCP listener on 127.0.0.1:`port` for `nqn`.
#[must_use]
pub fn listener(nqn: &str, port: u16) -> ListenerParams {
    ListenerParams {
        nqn: nqn.into(),
        listen_address: ListenAddressParams {
            trtype: "tcp".into(),
            adrfam: Some("ipv4".into()),
            traddr: "127.0.0.1".into(),
            trsvcid: Some(port.to_string()),
        },
        ..ListenerParams::default()
    }
}

/// What the target sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A response capsule.
    Resp(Cqe),
    /// C2HData: command id, offset, data, SUCCESS flag.
    Data {
        /// Command id.
        cid: u16,
        /// Offset.
        datao: u32,
        /// The bytes.
        data: Vec<u8>,
        /// SUCCESS: no response follows.
        success: bool,
    },
    /// R2T: command id, tag, offset, length.
    R2t {
        /// Command id.
        cid: u16,
        /// Transfer tag.
        ttag: u16,
        /// Offset.
        r2to: u32,
        /// Length.
        r2tl: u32,
    },
    /// ICResp (maxh2cdata).
    IcResp(u32),
    /// C2HTermReq: fatal error status and information.
    Term(Fes, u32),
    /// The connection closed.
    Closed,
}

/// A PDU-level NVMe/TCP host.
#[derive(Debug)]
pub struct Host<S: Read + Write> {
    /// The stream.
    pub sock: S,
    /// Receive side.
    pub rx: RecvConfig,
    /// Send side.
    pub tx: TxConfig,
    cid: u16,
}

impl Host<TcpStream> {
    /// A TCP connection to `addr` with a read timeout.
    ///
    /// # Panics
    /// When the connection fails.
    #[must_use]
    pub fn tcp(addr: SocketAddr) -> Host<TcpStream> {
        let s = TcpStream::connect(addr).expect("connect to the target");
        s.set_read_timeout(Some(HOST_TIMEOUT))
            .expect("invariant: timeout");
        s.set_nodelay(true).expect("invariant: nodelay");
        Host::new(s)
    }
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl<S: Read + Write> Host<S> {
    /// A host over `sock`.
    pub fn new(sock: S) -> Host<S> {
        Host {
            sock,
            rx: RecvConfig {
                max_data_len: 1 << 24,
                ..RecvConfig::new(Role::Host)
            },
            tx: TxConfig::default(),
            cid: 0,
        }
    }

    /// A fresh command id.
    pub fn next_cid(&mut self) -> u16 {
        self.cid = self.cid.wrapping_add(1);
        self.cid
    }

    /// Sends raw bytes.
    ///
    /// # Errors
    /// When the stream fails.
    pub fn send_raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.sock.write_all(b)
    }

    /// ICReq with `digests`; returns MAXH2CDATA.
    ///
    /// # Errors
    /// When the answer is not an ICResp.
    pub fn icreq(&mut self, digests: Digests) -> io::Result<u32> {
        let mut b = [0u8; 128];
        let n = tcp::build_ic_req(&mut b, 0, digests, 0).map_err(other)?;
        self.send_raw(&b[..n])?;
        match self.recv()? {
            Reply::IcResp(m) => {
                self.rx = self.rx.connected(digests, 0);
                self.tx = TxConfig { digests, pda: 0 };
                Ok(m)
            }
            r => Err(other(format!("expected ICResp, got {r:?}"))),
        }
    }

    /// Receives one PDU (or the close).
    ///
    /// # Errors
    /// On a stream error other than EOF, or a malformed PDU.
    pub fn recv(&mut self) -> io::Result<Reply> {
        let mut hdr = vec![0u8; 8];
        match self.sock.read_exact(&mut hdr) {
            Ok(()) => {}
            Err(e)
                if e.kind() == io::ErrorKind::UnexpectedEof
                    || e.kind() == io::ErrorKind::ConnectionReset =>
            {
                return Ok(Reply::Closed);
            }
            Err(e) => return Err(e),
        }
        let l = tcp::parse_common_header(&hdr, &self.rx).map_err(other)?;
        hdr.resize(l.header_len(), 0);
        self.sock.read_exact(&mut hdr[8..])?;
        let (pdu, l) = tcp::parse_header(&hdr, &self.rx).map_err(other)?;
        let mut pad = vec![0u8; l.padding()];
        self.sock.read_exact(&mut pad)?;
        let mut data = vec![0u8; l.data_len as usize];
        self.sock.read_exact(&mut data)?;
        if l.ddgst {
            let mut d = [0u8; 4];
            self.sock.read_exact(&mut d)?;
            tcp::verify_data_digest(&data, d).map_err(other)?;
        }
        Ok(match pdu {
            Pdu::IcResp(r) => Reply::IcResp(r.maxh2cdata.get()),
            Pdu::C2HTermReq(t) => Reply::Term(
                Fes::from_u16(t.fes.get()).ok_or_else(|| other("fes"))?,
                t.fei.get(),
            ),
            Pdu::CapsuleResp(r) => Reply::Resp(r.cqe),
            Pdu::C2HData(d) => Reply::Data {
                cid: d.cccid.get(),
                datao: d.datao.get(),
                data,
                success: d.ch.flags & flags::SUCCESS != 0,
            },
            Pdu::R2T(r) => Reply::R2t {
                cid: r.cccid.get(),
                ttag: r.ttag.get(),
                r2to: r.r2to.get(),
                r2tl: r.r2tl.get(),
            },
            p => return Err(other(format!("unexpected pdu {p:?}"))),
        })
    }

    /// Sends `sqe` as a capsule; `icd` goes in-capsule (its SGL is set to
    /// describe it), otherwise the SGL is left as the caller set it.
    ///
    /// # Errors
    /// When the stream fails.
    pub fn send_capsule(&mut self, sqe: &Sqe, icd: Option<&[u8]>) -> io::Result<()> {
        let mut s = *sqe;
        s.set_psdt(Psdt::SglContiguousMetadata);
        let len = icd.map_or(0, <[u8]>::len);
        let len32 = u32::try_from(len).map_err(other)?;
        if icd.is_some() {
            s.set_sgl1(&SglDescriptor::offset_data_block(0, len32));
        }
        let mut b = vec![0u8; 256];
        let n = tcp::build_capsule_cmd(&mut b, &s, len32, &self.tx).map_err(other)?;
        b.truncate(n);
        if let Some(d) = icd {
            b.extend_from_slice(d);
            if self.tx.digests.data && !d.is_empty() {
                b.extend_from_slice(&tcp::data_digest(d).to_le_bytes());
            }
        }
        self.send_raw(&b)
    }

    /// Sends `sqe` as a capsule carrying `icd` as its in-capsule data,
    /// with the SGL exactly as the caller set it (an offset into the data,
    /// a length that does not match, ...).
    ///
    /// # Errors
    /// When the stream fails.
    pub fn send_capsule_sgl(&mut self, sqe: &Sqe, icd: &[u8]) -> io::Result<()> {
        let mut s = *sqe;
        s.set_psdt(Psdt::SglContiguousMetadata);
        let len32 = u32::try_from(icd.len()).map_err(other)?;
        let mut b = vec![0u8; 256];
        let n = tcp::build_capsule_cmd(&mut b, &s, len32, &self.tx).map_err(other)?;
        b.truncate(n);
        b.extend_from_slice(icd);
        if self.tx.digests.data && !icd.is_empty() {
            b.extend_from_slice(&tcp::data_digest(icd).to_le_bytes());
        }
        self.send_raw(&b)
    }

    /// Receives the next response capsule, answering nothing else.
    ///
    /// # Errors
    /// When something other than a response comes (or the close).
    pub fn recv_resp(&mut self) -> io::Result<Cqe> {
        match self.recv()? {
            Reply::Resp(c) => Ok(c),
            r => Err(other(format!("expected a response, got {r:?}"))),
        }
    }

    /// Runs one command to its end: sends `out` in-capsule when it fits
    /// `icd_max`, else as H2CData after the R2T; collects C2H data.
    /// Returns the completion and the data read.
    ///
    /// # Errors
    /// When the target sends something unexpected or closes.
    pub fn run(
        &mut self,
        sqe: &Sqe,
        out: Option<&[u8]>,
        in_len: u32,
        icd_max: usize,
    ) -> io::Result<(Cqe, Vec<u8>)> {
        let mut s = *sqe;
        match out {
            Some(d) if d.len() <= icd_max => self.send_capsule(&s, Some(d))?,
            Some(d) => {
                s.set_sgl1(&SglDescriptor::transport_data_block(
                    u32::try_from(d.len()).map_err(other)?,
                ));
                self.send_capsule(&s, None)?;
            }
            None => {
                s.set_sgl1(&SglDescriptor::transport_data_block(in_len));
                self.send_capsule(&s, None)?;
            }
        }
        let mut data = Vec::new();
        loop {
            match self.recv()? {
                Reply::Resp(c) => return Ok((c, data)),
                Reply::Data {
                    data: d, success, ..
                } => {
                    data.extend_from_slice(&d);
                    if success {
                        return Ok((Cqe::new(s.cid.get(), Status::SUCCESS, 0), data));
                    }
                }
                Reply::R2t {
                    ttag, r2to, r2tl, ..
                } => {
                    let d = out.ok_or_else(|| other("R2T for a command without data"))?;
                    let start = r2to as usize;
                    let piece = d
                        .get(start..start + r2tl as usize)
                        .ok_or_else(|| other("R2T range"))?;
                    self.h2c(s.cid.get(), ttag, r2to, piece, true)?;
                }
                r => return Err(other(format!("unexpected reply {r:?}"))),
            }
        }
    }

    /// Sends one H2CData PDU.
    ///
    /// # Errors
    /// When the stream fails.
    pub fn h2c(
        &mut self,
        cid: u16,
        ttag: u16,
        datao: u32,
        data: &[u8],
        last: bool,
    ) -> io::Result<()> {
        let h = tcp::DataHeader {
            cccid: cid,
            ttag,
            datao,
            datal: u32::try_from(data.len()).map_err(other)?,
            last,
            success: false,
        };
        let mut b = vec![0u8; 256];
        let n = tcp::build_h2c_data(&mut b, &h, &self.tx).map_err(other)?;
        b.truncate(n);
        b.extend_from_slice(data);
        if self.tx.digests.data {
            b.extend_from_slice(&tcp::data_digest(data).to_le_bytes());
        }
        self.send_raw(&b)
    }

    /// Fabrics Connect of queue `qid` with `entries` entries.
    ///
    /// # Errors
    /// When the exchange fails.
    pub fn connect(
        &mut self,
        qid: u16,
        entries: u32,
        kato_ms: u32,
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
    ) -> io::Result<Cqe> {
        let cid = self.next_cid();
        let sqe = Connect::new(qid, entries, kato_ms).to_sqe(cid);
        let data = ConnectData::new([0x5a; 16], cntlid, subnqn, hostnqn).map_err(other)?;
        let (c, _) = self.run(&sqe, Some(data.as_bytes()), 0, 8192)?;
        Ok(c)
    }

    /// CC.EN = 1.
    ///
    /// # Errors
    /// When the exchange fails or the status is not success.
    pub fn enable(&mut self) -> io::Result<()> {
        let cid = self.next_cid();
        let sqe = PropertySet::new(PropertySize::Four, offset::CC, u64::from(Cc::enabled(0).0))
            .to_sqe(cid);
        let (c, _) = self.run(&sqe, None, 0, 0)?;
        if c.status().is_success() {
            Ok(())
        } else {
            Err(other(c.status()))
        }
    }

    /// Runs `cmd` (no data out) reading `in_len` bytes.
    ///
    /// # Errors
    /// When the exchange fails.
    pub fn exec<C: Command>(&mut self, cmd: &C, in_len: u32) -> io::Result<(Cqe, Vec<u8>)> {
        let cid = self.next_cid();
        self.run(&cmd.to_sqe(cid), None, in_len, 0)
    }

    /// Runs `cmd` with `data` to the target.
    ///
    /// # Errors
    /// When the exchange fails.
    pub fn exec_out<C: Command>(
        &mut self,
        cmd: &C,
        data: &[u8],
        icd_max: usize,
    ) -> io::Result<Cqe> {
        let cid = self.next_cid();
        self.run(&cmd.to_sqe(cid), Some(data), 0, icd_max)
            .map(|(c, _)| c)
    }

    /// Waits for a C2HTermReq followed by the close; returns its FES/FEI.
    ///
    /// # Errors
    /// When something else comes.
    pub fn expect_term(&mut self) -> io::Result<(Fes, u32)> {
        loop {
            match self.recv()? {
                Reply::Term(f, i) => {
                    let after = self.recv()?;
                    if after != Reply::Closed {
                        return Err(other(format!("after TermReq: {after:?}")));
                    }
                    return Ok((f, i));
                }
                Reply::Resp(_) | Reply::Data { .. } => continue,
                r => return Err(other(format!("expected TermReq, got {r:?}"))),
            }
        }
    }
}

/// A command entry with an NSID and raw dwords 10-12 (for malformed commands).
#[must_use]
pub fn raw_sqe(opcode: u8, nsid: u32, cdw10: u32, cdw11: u32, cdw12: u32) -> Sqe {
    let mut s = Sqe::new(opcode, 0, nsid);
    s.cdw10.set(cdw10);
    s.cdw11.set(cdw11);
    s.cdw12.set(cdw12);
    s
}

/// The bytes of `sqe` viewed from a capsule (for hand-made PDUs).
#[must_use]
pub fn sqe_from(bytes: &[u8]) -> Option<Sqe> {
    Sqe::read_from_bytes(bytes).ok()
}
