//! Against an independent TLS 1.3 peer: the system's `openssl s_server`
//! and `s_client`, given the identity and the TLS PSK we derive (their
//! `-psk` path does TLS 1.3 with the SHA-256 suite). Skipped, loudly,
//! without the `openssl` binary — unless `BDEVKIT_REQUIRE_OPENSSL_CLI`
//! is set (`scripts/test.sh` sets it), then that fails.
//!
//! The sockets are blocking with a read timeout: each side waits for the
//! other process's bytes without polling, and a peer that never answers
//! fails the test instead of hanging it.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::*;

const GUARD: Duration = Duration::from_secs(20);

fn have_openssl() -> bool {
    let ok = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("BDEVKIT_REQUIRE_OPENSSL_CLI").is_none(),
            "BDEVKIT_REQUIRE_OPENSSL_CLI is set but there is no `openssl` binary"
        );
        eprintln!("SKIPPED: no `openssl` binary: the TLS interop test did not run");
    }
    ok
}

fn tls_psk_hex(p: &TlsPsk) -> (String, String) {
    let r = RetainedPsk::derive(p, HOST).unwrap();
    let id = PskIdentity::new(r.suite(), HOST, SUB).unwrap();
    let key = r.tls_psk(&id).unwrap();
    let hex = key.expose().iter().map(|b| format!("{b:02x}")).collect();
    (id.as_str().to_owned(), hex)
}

/// Kills the child when the test ends, however it ends.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn blocking(t: &TcpStream) {
    t.set_read_timeout(Some(GUARD)).unwrap();
    t.set_write_timeout(Some(GUARD)).unwrap();
    t.set_nodelay(true).unwrap();
}

/// Runs the handshake on a blocking socket (each call waits for bytes).
fn finish<S: Read + Write>(c: &mut TlsConn<S>) -> Result<(), Error> {
    for _ in 0..50 {
        if c.handshake()? == Handshake::Done {
            return Ok(());
        }
    }
    panic!("handshake did not end (peer silent past the guard timeout)");
}

/// `openssl s_server -rev` with `hex`/`identity`; returns it and its port.
fn s_server(identity: &str, hex: &str) -> (Reap, u16) {
    let mut child = Command::new("openssl")
        .args([
            "s_server",
            "-accept",
            "127.0.0.1:0",
            "-naccept",
            "1",
            "-rev",
        ])
        .args([
            "-tls1_3",
            "-ciphersuites",
            "TLS_AES_128_GCM_SHA256",
            "-nocert",
        ])
        .args(["-psk_identity", identity, "-psk", hex])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let reap = Reap(child);
    // It prints "ACCEPT 127.0.0.1:<port>" once listening.
    let mut lines = BufReader::new(out).lines();
    let port = loop {
        let line = lines
            .next()
            .expect("s_server exited before listening")
            .unwrap();
        if let Some(addr) = line.strip_prefix("ACCEPT ") {
            break addr.rsplit(':').next().unwrap().parse().unwrap();
        }
    };
    // Keep draining its output so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (reap, port)
}

#[test]
fn our_client_with_openssl_s_server() {
    if !have_openssl() {
        return;
    }
    let p = psk("01", 32, 21);
    let (identity, hex) = tls_psk_hex(&p);
    let t0 = std::time::Instant::now();
    let (_server, port) = s_server(&identity, &hex);
    eprintln!("DBG listening {:?}", t0.elapsed());
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    blocking(&sock);
    let mut c = TlsConn::connect(&ClientConfig::new(&p, HOST, SUB).unwrap(), sock).unwrap();
    finish(&mut c).unwrap();
    eprintln!("DBG handshake {:?}", t0.elapsed());
    assert_eq!(c.suite(), Some(Suite::Aes128GcmSha256));
    // s_server -rev answers each line reversed.
    c.write_all(b"NVMe/TCP over TLS 1.3\n").unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 64];
    while !line.ends_with(b"\n") {
        let n = c.read(&mut b).unwrap();
        assert!(n > 0, "s_server closed");
        line.extend_from_slice(&b[..n]);
    }
    assert_eq!(line, b"3.1 SLT revo PCT/eMVN\n");
    eprintln!("DBG echo {:?}", t0.elapsed());
    assert!(c.shutdown().unwrap());

    // A wrong key: s_server refuses, and we say our PSK is not its.
    let (_server, port) = s_server(&identity, &hex);
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    blocking(&sock);
    let wrong = psk("01", 32, 22);
    let mut c = TlsConn::connect(&ClientConfig::new(&wrong, HOST, SUB).unwrap(), sock).unwrap();
    eprintln!("DBG second connect {:?}", t0.elapsed());
    let e = finish(&mut c).unwrap_err();
    eprintln!("DBG second fail {:?} {e}", t0.elapsed());
    assert!(e.is_auth(), "{e}");
}

#[test]
fn openssl_s_client_with_our_server() {
    if !have_openssl() {
        return;
    }
    let p = psk("01", 32, 23);
    let (identity, hex) = tls_psk_hex(&p);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let child = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args([
            "-tls1_3",
            "-ciphersuites",
            "TLS_AES_128_GCM_SHA256",
            "-quiet",
            "-no_ign_eof",
        ])
        .args(["-psk_identity", &identity, "-psk", &hex])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Reap(child);
    let (sock, _) = l.accept().unwrap();
    blocking(&sock);
    let mut s = TlsConn::accept(&server_for(&[(HOST, SUB, &p)]), sock).unwrap();
    let mut stdin = child.0.stdin.take().unwrap();
    stdin.write_all(b"ICReq from s_client\n").unwrap();
    finish(&mut s).unwrap();
    assert_eq!(s.identity().unwrap().as_str(), identity);
    let mut got = Vec::new();
    let mut b = [0u8; 64];
    while !got.ends_with(b"\n") {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "s_client closed");
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(got, b"ICReq from s_client\n");
    s.write_all(b"ICResp from bdevkit\n").unwrap();
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ICResp from bdevkit\n");
    // End of its input: s_client sends close_notify.
    drop(stdin);
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(s.peer_closed(), Some(PeerClose::CloseNotify));
}
