//! Fuzzing the target's PDU handling: a connection over an in-memory pipe
//! (`bdevkit_nvmf::tcp::Connection`) gets random bytes, random PDU
//! headers and mutated valid PDUs, fed in random pieces, before and after
//! a valid ICReq and admin Connect. The target must never panic, and all
//! it sends must parse as valid controller PDUs (the spec crate's
//! host-side parser) up to the close.
//!
//! `NVMF_FUZZ_CASES` sets the number of cases (default 100 000, what CI
//! runs; `NVMF_FUZZ_CASES=2000000` for a longer run).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;

use bdevkit_nvme_spec::admin::Identify;
use bdevkit_nvme_spec::cmd::{Command, Psdt};
use bdevkit_nvme_spec::fabrics::{Connect, ConnectData, PropertySet, CNTLID_DYNAMIC};
use bdevkit_nvme_spec::io::{BlockRange, Read as NvmRead, Write as NvmWrite};
use bdevkit_nvme_spec::regs::{offset, Cc, PropertySize};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::{self, Digests, Pdu, PduType, RecvConfig, Role, TxConfig};
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::Sqe;
use bdevkit_nvmf::tcp::Connection;
use bdevkit_nvmf::Target;
use bdevkit_test::nvmf::{NvmfEnv, HOSTNQN, SUBNQN};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// An in-memory stream: the target reads `input` (WouldBlock when empty)
/// and writes into `output`.
#[derive(Debug, Default)]
struct Pipe {
    input: VecDeque<u8>,
    output: Vec<u8>,
    eof: bool,
}

impl Read for Pipe {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        if self.input.is_empty() {
            return if self.eof {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = b.len().min(self.input.len());
        for (d, s) in b.iter_mut().zip(self.input.drain(..n)) {
            *d = s;
        }
        Ok(n)
    }
}

impl Write for Pipe {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(b);
        Ok(b.len())
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut n = 0;
        for b in bufs {
            self.output.extend_from_slice(b);
            n += b.len();
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One fuzz case.
#[derive(Debug, Clone)]
struct Case {
    /// Send a valid ICReq first (with these digests).
    icreq: Option<Digests>,
    /// Then a valid admin Connect and CC.EN.
    connect: bool,
    /// Then these bytes.
    body: Vec<u8>,
    /// Fed in pieces of these sizes (cycled).
    cuts: Vec<usize>,
    /// Close the input at the end.
    eof: bool,
}

fn capsule(sqe: &Sqe, icd: &[u8], tx: &TxConfig) -> Vec<u8> {
    let mut s = *sqe;
    s.set_psdt(Psdt::SglContiguousMetadata);
    let mut b = vec![0u8; 256];
    let n = tcp::build_capsule_cmd(&mut b, &s, u32::try_from(icd.len()).unwrap(), tx).unwrap();
    b.truncate(n);
    b.extend_from_slice(icd);
    if tx.digests.data && !icd.is_empty() {
        b.extend_from_slice(&tcp::data_digest(icd).to_le_bytes());
    }
    b
}

fn prefix(c: &Case) -> (Vec<u8>, TxConfig) {
    let mut out = Vec::new();
    let Some(d) = c.icreq else {
        return (out, TxConfig::default());
    };
    let mut ic = [0u8; 128];
    let n = tcp::build_ic_req(&mut ic, 0, d, 0).unwrap();
    out.extend_from_slice(&ic[..n]);
    let tx = TxConfig { digests: d, pda: 0 };
    if c.connect {
        let mut s = Connect::new(0, 32, 0).to_sqe(1);
        s.set_sgl1(&SglDescriptor::offset_data_block(0, 1024));
        let data = ConnectData::new([1; 16], CNTLID_DYNAMIC, SUBNQN, HOSTNQN).unwrap();
        out.extend(capsule(&s, data.as_bytes(), &tx));
        let mut p =
            PropertySet::new(PropertySize::Four, offset::CC, u64::from(Cc::enabled(0).0)).to_sqe(2);
        p.set_sgl1(&SglDescriptor::transport_data_block(0));
        out.extend(capsule(&p, &[], &tx));
    }
    (out, tx)
}

/// Valid PDUs a mutation starts from.
fn seeds(tx: &TxConfig) -> Vec<Vec<u8>> {
    let mut id = Identify::controller().to_sqe(3);
    id.set_sgl1(&SglDescriptor::transport_data_block(4096));
    let mut r = NvmRead::new(1, BlockRange::new(0, 8).unwrap()).to_sqe(4);
    r.set_sgl1(&SglDescriptor::transport_data_block(4096));
    let mut w = NvmWrite::new(1, BlockRange::new(8, 1).unwrap()).to_sqe(5);
    w.set_sgl1(&SglDescriptor::offset_data_block(0, 512));
    let mut w2 = NvmWrite::new(1, BlockRange::new(8, 16).unwrap()).to_sqe(6);
    w2.set_sgl1(&SglDescriptor::transport_data_block(8192));
    let h = tcp::DataHeader {
        cccid: 6,
        ttag: 0,
        datao: 0,
        datal: 64,
        last: true,
        success: false,
    };
    let mut h2c = vec![0u8; 256];
    let n = tcp::build_h2c_data(&mut h2c, &h, tx).unwrap();
    h2c.truncate(n);
    h2c.extend_from_slice(&[7u8; 64]);
    if tx.digests.data {
        h2c.extend_from_slice(&tcp::data_digest(&[7u8; 64]).to_le_bytes());
    }
    vec![
        capsule(&id, &[], tx),
        capsule(&r, &[], tx),
        capsule(&w, &[0xab; 512], tx),
        capsule(&w2, &[], tx),
        h2c,
    ]
}

fn any_case() -> impl Strategy<Value = Case> {
    let digests = prop_oneof![
        Just(None),
        any::<(bool, bool)>().prop_map(|(h, d)| Some(Digests { header: h, data: d })),
    ];
    let random = proptest::collection::vec(any::<u8>(), 0..400);
    // A header with random fields, a type the host may send, random body.
    let header = (
        prop::sample::select(vec![0u8, 2, 4, 6, 1, 3, 5, 7, 9, 0x42]),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        0u32..600,
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(t, f, hl, pdo, plen, rest)| {
            let mut b = vec![t, f, hl, pdo];
            b.extend_from_slice(&plen.to_le_bytes());
            b.extend(rest);
            b
        });
    let mutations = (
        0usize..5,
        proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    );
    let body = prop_oneof![
        random.prop_map(|b| (b, None)),
        header.prop_map(|b| (b, None)),
        mutations.prop_map(|(seed, flips)| (Vec::new(), Some((seed, flips)))),
    ];
    (
        digests,
        any::<bool>(),
        body,
        proptest::collection::vec(1usize..200, 1..6),
        any::<bool>(),
    )
        .prop_map(|(icreq, connect, (body, mutate), cuts, eof)| {
            let mut c = Case {
                icreq,
                connect: connect && icreq.is_some(),
                body,
                cuts,
                eof,
            };
            if let Some((seed, flips)) = mutate {
                let tx = TxConfig {
                    digests: c.icreq.unwrap_or_default(),
                    pda: 0,
                };
                let mut b = seeds(&tx)[seed].clone();
                for (at, x) in flips {
                    let i = at % b.len();
                    b[i] ^= x | 1;
                }
                c.body = b;
            }
            c
        })
}

/// Checks the target's output: a sequence of valid controller PDUs,
/// ICResp first, nothing after a TermReq.
fn check_output(out: &[u8], digests: Option<Digests>) -> Result<(), String> {
    let mut cfg = RecvConfig {
        max_data_len: 1 << 24,
        ..RecvConfig::new(Role::Host)
    };
    let mut rest = out;
    let mut first = true;
    while !rest.is_empty() {
        tcp::parse_common_header(rest, &cfg).map_err(|e| format!("output: {e}"))?;
        let (pdu, l) = tcp::parse_header(rest, &cfg).map_err(|e| format!("output: {e}"))?;
        let total = l.plen as usize;
        if rest.len() < total {
            return Err(format!(
                "output: a partial PDU ({} of {total} bytes)",
                rest.len()
            ));
        }
        match pdu {
            Pdu::IcResp(_) if first => {
                cfg = cfg.connected(digests.unwrap_or_default(), 0);
            }
            Pdu::C2HTermReq(_) if rest.len() != total => {
                return Err("output after a C2HTermReq".into());
            }
            Pdu::C2HTermReq(_) => {}
            _ if first => return Err(format!("first PDU is {:?}", l.pdu_type)),
            _ => {}
        }
        if l.pdu_type == PduType::IcResp && !first {
            return Err("a second ICResp".into());
        }
        first = false;
        rest = &rest[total..];
    }
    Ok(())
}

fn run_case(target: &Target, via: SocketAddr, c: &Case) -> Result<(), String> {
    let peer: SocketAddr = "127.0.0.1:50000".parse().unwrap();
    let conn = Connection::new(target, Pipe::default(), peer, via).map_err(|e| e.to_string())?;
    let (mut bytes, _) = prefix(c);
    bytes.extend_from_slice(&c.body);
    let mut at = 0;
    let mut k = 0;
    while at < bytes.len() {
        let n = c.cuts[k % c.cuts.len()].min(bytes.len() - at);
        k += 1;
        conn.with_sock(|p| p.input.extend(&bytes[at..at + n]));
        at += n;
        for _ in 0..4 {
            if !conn.poll() {
                break;
            }
        }
        if conn.is_closed() {
            break;
        }
    }
    if c.eof {
        conn.with_sock(|p| p.eof = true);
    }
    for _ in 0..8 {
        conn.poll();
    }
    let out = conn.with_sock(|p| std::mem::take(&mut p.output));
    check_output(&out, c.icreq)
}

fn cases() -> u32 {
    std::env::var("NVMF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

#[test]
fn pdu_handling_survives_anything() {
    let env = NvmfEnv::start();
    let target = env.target.clone();
    let via = env.addr;
    let n = cases();
    // The whole run on the app thread: a connection must live on a
    // bdevkit thread, and one hop per case would cost more than the case.
    let r = env
        .env
        .runtime()
        .app_thread()
        .run_sync(move || {
            let mut runner = TestRunner::new(Config {
                cases: n,
                failure_persistence: None,
                ..Config::default()
            });
            runner
                .run(&any_case(), |c| {
                    std::panic::catch_unwind(AssertUnwindSafe(|| run_case(&target, via, &c)))
                        .unwrap_or_else(|p| Err(format!("panic: {p:?}")))
                        .map_err(TestCaseError::fail)
                })
                .map_err(|e| e.to_string())
        })
        .expect("invariant: app thread");
    if let Err(e) = r {
        panic!("{e}");
    }
}
