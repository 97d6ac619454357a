//! Handshakes and data between our client and our server, over an
//! in-memory pipe (of a chosen, small capacity: partial writes and reads
//! happen at every step, deterministically), a socketpair and TCP
//! loopback; every refusal; garbage; what is printed.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::rc::Rc;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bdevkit_nvme_auth::TlsPsk;

use super::*;
use crate::config::PskTable;
use crate::{sniff, PskIdentity, RetainedPsk, Sniff, Stream};

mod fuzz;
mod interop;
mod refuse;

pub(super) const HOST: &str =
    "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
pub(super) const SUB: &str = "nqn.2016-06.io.bdevkit:cnode1";

/// CRC-32 (IEEE) of the interchange format.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A configured PSK of `len` bytes filled from `seed`, hash `hh`.
pub(super) fn psk(hh: &str, len: usize, seed: u8) -> TlsPsk {
    let key: Vec<u8> = (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(u8::try_from(i).unwrap()))
        .collect();
    let mut raw = key.clone();
    raw.extend_from_slice(&crc32(&key).to_le_bytes());
    TlsPsk::parse(&format!("NVMeTLSkey-1:{hh}:{}:", STANDARD.encode(raw))).unwrap()
}

pub(super) fn server_for(entries: &[(&str, &str, &TlsPsk)]) -> ServerConfig {
    let t = PskTable::new();
    for (h, s, p) in entries {
        t.insert(h, s, p).unwrap();
    }
    ServerConfig::new(Arc::new(t)).unwrap()
}

/// Both directions of an in-memory pipe.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// [0] carries a→b, [1] b→a.
    q: [VecDeque<u8>; 2],
    /// Everything that ever went each way.
    pub log: [Vec<u8>; 2],
    closed: [bool; 2],
    cap: usize,
}

/// One end of the pipe (`dir` 0: a, 1: b). Dropping it closes its
/// direction (the peer then reads end of file).
#[derive(Debug)]
pub(super) struct End {
    pub sh: Rc<RefCell<Shared>>,
    dir: usize,
}

pub(super) fn pipe(cap: usize) -> (End, End) {
    let sh = Rc::new(RefCell::new(Shared {
        cap,
        ..Shared::default()
    }));
    (
        End {
            sh: sh.clone(),
            dir: 0,
        },
        End { sh, dir: 1 },
    )
}

impl End {
    /// Closes the sending direction (as a TCP FIN).
    pub fn close(&self) {
        self.sh.borrow_mut().closed[self.dir] = true;
    }
}

impl Drop for End {
    fn drop(&mut self) {
        self.close();
    }
}

impl Read for End {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut sh = self.sh.borrow_mut();
        let from = 1 - self.dir;
        if sh.q[from].is_empty() {
            return if sh.closed[from] {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(sh.q[from].len());
        for (d, s) in buf.iter_mut().zip(sh.q[from].drain(..n)) {
            *d = s;
        }
        Ok(n)
    }
}

impl Write for End {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut sh = self.sh.borrow_mut();
        let d = self.dir;
        if sh.closed[d] {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let room = sh.cap - sh.q[d].len();
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = room.min(buf.len());
        sh.q[d].extend(&buf[..n]);
        sh.log[d].extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Steps both handshakes until both ended (bounded: a stall fails).
pub(super) fn handshake_pair<A: Read + Write, B: Read + Write>(
    c: &mut TlsConn<A>,
    s: &mut TlsConn<B>,
) -> (Result<(), Error>, Result<(), Error>) {
    fn ended(r: Result<Handshake, Error>) -> Option<Result<(), Error>> {
        match r {
            Ok(Handshake::Done) => Some(Ok(())),
            Ok(Handshake::WouldBlock) => None,
            Err(e) => Some(Err(e)),
        }
    }
    let mut cr = None;
    let mut sr = None;
    for _ in 0..200 {
        if cr.is_none() {
            cr = ended(c.handshake());
        }
        if sr.is_none() {
            sr = ended(s.handshake());
        }
        if cr.is_some() && sr.is_some() {
            break;
        }
    }
    (
        cr.expect("client handshake stalled"),
        sr.expect("server handshake stalled"),
    )
}

fn connected(cap: usize, client_psk: &TlsPsk) -> (TlsConn<End>, TlsConn<End>) {
    let (a, b) = pipe(cap);
    let ccfg = ClientConfig::new(client_psk, HOST, SUB).unwrap();
    let scfg = server_for(&[(HOST, SUB, client_psk)]);
    let mut c = TlsConn::connect(&ccfg, a).unwrap();
    let mut s = TlsConn::accept(&scfg, b).unwrap();
    let (cr, sr) = handshake_pair(&mut c, &mut s);
    cr.unwrap();
    sr.unwrap();
    (c, s)
}

/// A send queue as the transports keep one: gathers up to 64 slices
/// from its first unsent byte, re-offering what was not taken.
struct Sender {
    pieces: Vec<Vec<u8>>,
    idx: usize,
    off: usize,
}

impl Sender {
    fn new(pieces: Vec<Vec<u8>>) -> Sender {
        Sender {
            pieces,
            idx: 0,
            off: 0,
        }
    }

    fn done(&self) -> bool {
        self.idx == self.pieces.len()
    }

    fn total(&self) -> Vec<u8> {
        self.pieces.concat()
    }

    fn step<W: Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.done() {
            return Ok(());
        }
        let mut iov = Vec::with_capacity(64);
        iov.push(IoSlice::new(&self.pieces[self.idx][self.off..]));
        for p in self.pieces[self.idx + 1..].iter().take(63) {
            iov.push(IoSlice::new(p));
        }
        let mut n = match w.write_vectored(&iov) {
            Ok(0) => panic!("write returned 0"),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        };
        while n > 0 {
            let left = self.pieces[self.idx].len() - self.off;
            if n >= left {
                n -= left;
                self.idx += 1;
                self.off = 0;
            } else {
                self.off += n;
                n = 0;
            }
        }
        // Skip empty pieces.
        while !self.done() && self.pieces[self.idx].is_empty() {
            self.idx += 1;
        }
        Ok(())
    }
}

/// Reads what is there in a rotating pattern: a small buffer, a large
/// one, a `readv` of a "request buffer" and a receive buffer.
struct Receiver {
    got: Vec<u8>,
    turn: usize,
    eof: bool,
}

impl Receiver {
    fn new() -> Receiver {
        Receiver {
            got: Vec::new(),
            turn: 0,
            eof: false,
        }
    }

    fn step<R: Read>(&mut self, r: &mut R) -> io::Result<()> {
        self.turn += 1;
        let mut small = [0u8; 7];
        let mut big = vec![0u8; 70_000];
        let mut dest = [0u8; 1000];
        let mut rbuf = [0u8; 512];
        let res = match self.turn % 3 {
            0 => r
                .read(&mut small)
                .map(|n| self.got.extend_from_slice(&small[..n])),
            1 => r.read(&mut big).map(|n| {
                self.got.extend_from_slice(&big[..n]);
                if n == 0 {
                    self.eof = true;
                }
            }),
            _ => {
                let mut iov = [IoSliceMut::new(&mut dest), IoSliceMut::new(&mut rbuf)];
                r.read_vectored(&mut iov).map(|n| {
                    let a = n.min(1000);
                    self.got.extend_from_slice(&dest[..a]);
                    self.got.extend_from_slice(&rbuf[..n - a]);
                })
            }
        };
        match res {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r,
        }
    }
}

/// PDU-like pieces: headers, data of many sizes, digests.
fn pieces(seed: u8, count: usize) -> Vec<Vec<u8>> {
    let sizes = [
        24, 72, 4096, 4, 8, 131_072, 1, 0, 16_384, 16_383, 16_385, 512, 300_000,
    ];
    (0..count)
        .map(|i| {
            let len = sizes[i % sizes.len()];
            (0..len)
                .map(|j| u8::try_from((i * 7 + j + usize::from(seed)) % 251).unwrap())
                .collect()
        })
        .collect()
}

/// Both directions at once until everything arrived (bounded).
fn transfer<A: Read + Write, B: Read + Write>(
    c: &mut TlsConn<A>,
    s: &mut TlsConn<B>,
    up: Vec<Vec<u8>>,
    down: Vec<Vec<u8>>,
) {
    let mut cs = Sender::new(up);
    let mut ss = Sender::new(down);
    let (want_up, want_down) = (cs.total(), ss.total());
    let mut cr = Receiver::new();
    let mut sr = Receiver::new();
    for _ in 0..200_000 {
        cs.step(c).unwrap();
        ss.step(s).unwrap();
        sr.step(s).unwrap();
        cr.step(c).unwrap();
        if cs.done()
            && ss.done()
            && sr.got.len() >= want_up.len()
            && cr.got.len() >= want_down.len()
        {
            break;
        }
    }
    assert!(cs.done() && ss.done(), "senders stalled");
    assert_eq!(sr.got.len(), want_up.len());
    assert!(sr.got == want_up, "client→server bytes differ");
    assert!(cr.got == want_down, "server→client bytes differ");
}

#[test]
fn handshake_and_data_both_ways_with_either_suite() {
    for (p, suite) in [
        (psk("01", 32, 1), Suite::Aes128GcmSha256),
        (psk("02", 48, 2), Suite::Aes256GcmSha384),
        (psk("00", 32, 3), Suite::Aes128GcmSha256),
        (psk("00", 48, 4), Suite::Aes256GcmSha384),
    ] {
        let (mut c, mut s) = connected(64 * 1024, &p);
        assert_eq!((c.suite(), s.suite()), (Some(suite), Some(suite)));
        let id = s.identity().unwrap();
        assert_eq!((id.hostnqn(), id.subnqn(), id.suite()), (HOST, SUB, suite));
        assert_eq!(c.identity().unwrap(), id);
        assert!(c.is_established() && s.is_established());
        transfer(&mut c, &mut s, pieces(1, 20), pieces(2, 20));
    }
}

#[test]
fn a_tiny_socket_buffer_splits_every_write_and_read() {
    // 1000 bytes of pipe: every batch leaves in many partial writes,
    // every record arrives in pieces.
    let (mut c, mut s) = connected(1000, &psk("01", 32, 5));
    transfer(&mut c, &mut s, pieces(3, 40), pieces(4, 30));
}

#[test]
fn small_pdus_share_records_and_large_ones_fill_them() {
    let (mut c, mut s) = connected(1 << 22, &psk("01", 32, 6));
    let sh = c.get_ref().sh.clone();
    let count_records = |from: usize| {
        let log = &sh.borrow().log[0];
        let (mut at, mut n, mut sizes) = (from, 0, Vec::new());
        while at + 5 <= log.len() {
            assert_eq!(log[at], 23, "application data records only");
            let len = usize::from(u16::from_be_bytes([log[at + 3], log[at + 4]]));
            sizes.push(len);
            at += 5 + len;
            n += 1;
        }
        assert_eq!(at, log.len());
        (n, sizes)
    };
    let start = sh.borrow().log[0].len();
    // 64 small PDUs in one vectored write: one record.
    let small: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 24]).collect();
    let iov: Vec<IoSlice<'_>> = small.iter().map(|p| IoSlice::new(p)).collect();
    assert_eq!(c.write_vectored(&iov).unwrap(), 64 * 24);
    assert_eq!(count_records(start).0, 1);
    // A C2HData-like PDU: 24-byte header, 128 KiB, digest: 9 records,
    // all but the last full (16 KiB of plaintext + 17 of overhead).
    let start = sh.borrow().log[0].len();
    let data = vec![7u8; 128 * 1024];
    let iov = [
        IoSlice::new(&[1; 24]),
        IoSlice::new(&data),
        IoSlice::new(&[2; 4]),
    ];
    assert_eq!(c.write_vectored(&iov).unwrap(), 24 + 128 * 1024 + 4);
    let (n, sizes) = count_records(start);
    assert_eq!(n, 9, "{sizes:?}");
    assert!(sizes[..8].iter().all(|&l| l == 16 * 1024 + 17), "{sizes:?}");
    let mut got = vec![0u8; 64 * 24 + 24 + 128 * 1024 + 4];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got[..24], &[0; 24]);
    assert_eq!(got[64 * 24 + 24 + 5], 7);
}

#[test]
fn buffered_plaintext_is_seen_without_the_socket() {
    let (mut c, mut s) = connected(1 << 20, &psk("01", 32, 7));
    c.write_all(&[9u8; 3000]).unwrap();
    let mut b = [0u8; 100];
    assert_eq!(s.read(&mut b).unwrap(), 100);
    // The whole record came in one socket read; the pipe is empty now.
    assert!(s.get_ref().sh.borrow().q[0].is_empty());
    assert!(s.has_buffered_input());
    let mut rest = [0u8; 4000];
    assert_eq!(
        s.read(&mut rest).unwrap(),
        2900,
        "fewer than offered: drained"
    );
    assert!(!s.has_buffered_input());
    assert_eq!(
        s.read(&mut rest).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

#[test]
fn data_sent_with_the_finished_message_is_read_at_once() {
    // The client's Finished and its first PDU arrive together; the
    // server's handshake takes both in, and the first read returns the
    // PDU without any new socket bytes.
    let (a, b) = pipe(1 << 20);
    let p = psk("01", 32, 8);
    let mut c = TlsConn::connect(&ClientConfig::new(&p, HOST, SUB).unwrap(), a).unwrap();
    let mut s = TlsConn::accept(&server_for(&[(HOST, SUB, &p)]), b).unwrap();
    assert_eq!(c.handshake().unwrap(), Handshake::WouldBlock);
    assert_eq!(s.handshake().unwrap(), Handshake::WouldBlock);
    // Client: handshake done, ICReq written in the same turn.
    assert_eq!(c.write(&[0u8; 128]).unwrap(), 128);
    assert_eq!(s.handshake().unwrap(), Handshake::Done);
    assert!(s.has_buffered_input());
    let mut icreq = [1u8; 128];
    assert_eq!(s.read(&mut icreq).unwrap(), 128);
    assert_eq!(icreq, [0u8; 128]);
}

#[test]
fn unix_socketpair_and_tcp_loopback_carry_megabytes() {
    let p = psk("02", 48, 9);
    let (ccfg, scfg) = (
        ClientConfig::new(&p, HOST, SUB).unwrap(),
        server_for(&[(HOST, SUB, &p)]),
    );
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let mut c = TlsConn::connect(&ccfg, a).unwrap();
    let mut s = TlsConn::accept(&scfg, b).unwrap();
    let (cr, sr) = handshake_pair(&mut c, &mut s);
    cr.unwrap();
    sr.unwrap();
    transfer(&mut c, &mut s, pieces(5, 60), pieces(6, 60));

    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    for t in [&a, &b] {
        t.set_nonblocking(true).unwrap();
        t.set_nodelay(true).unwrap();
    }
    let mut c = TlsConn::connect(&ccfg, a).unwrap();
    let mut s = TlsConn::accept(&scfg, b).unwrap();
    assert!(c.as_raw_fd() >= 0);
    let (cr, sr) = handshake_pair(&mut c, &mut s);
    cr.unwrap();
    sr.unwrap();
    transfer(&mut c, &mut s, pieces(7, 60), pieces(8, 60));
}

#[test]
fn close_notify_and_truncation_are_told_apart() {
    let (mut c, mut s) = connected(1 << 16, &psk("01", 32, 10));
    c.write_all(b"last PDU").unwrap();
    assert!(c.shutdown().unwrap());
    assert!(!c.wants_write());
    let mut b = [0u8; 64];
    assert_eq!(s.read(&mut b).unwrap(), 8);
    assert_eq!(s.read(&mut b).unwrap(), 0);
    assert_eq!(s.peer_closed(), Some(PeerClose::CloseNotify));
    assert_eq!(s.read(&mut b).unwrap(), 0, "end of stream stays");
    // The other direction still works (TLS 1.3 half close).
    s.write_all(b"reply").unwrap();
    assert_eq!(c.read(&mut b).unwrap(), 5);

    let (c, mut s) = connected(1 << 16, &psk("01", 32, 11));
    drop(c); // TCP closed without close_notify.
    assert_eq!(s.read(&mut b).unwrap(), 0);
    assert_eq!(s.peer_closed(), Some(PeerClose::Truncated));
}

#[test]
fn a_write_must_offer_again_what_was_not_taken() {
    let (mut c, _s) = connected(2000, &psk("01", 32, 12));
    let data = vec![5u8; 100_000];
    // The pipe takes 2000 bytes: the first record is not all out.
    let n = match c.write(&data) {
        Ok(n) => n,
        Err(e) => {
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            0
        }
    };
    assert!(n < data.len());
    assert!(c.wants_write());
    let e = c.write(&data[n..n + 10]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    // Offering it again is fine (the pipe is still full: WouldBlock).
    assert_eq!(
        c.write(&data[n..]).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
}

#[test]
fn stream_wraps_plain_and_tls_alike() {
    let (a, b) = pipe(1 << 16);
    let mut pa = Stream::Plain(a);
    let mut pb = Stream::Plain(b);
    pa.write_all(b"plain").unwrap();
    let mut buf = [0u8; 5];
    pb.read_exact(&mut buf).unwrap();
    assert!(!pb.has_buffered_input() && pb.tls().is_none() && pa.close_notify().unwrap());
    let (c, s) = connected(1 << 16, &psk("01", 32, 13));
    let (mut tc, mut ts) = (Stream::Tls(Box::new(c)), Stream::Tls(Box::new(s)));
    tc.write_all(b"tls!!").unwrap();
    ts.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"tls!!");
    assert!(ts.tls().unwrap().is_established());
}
