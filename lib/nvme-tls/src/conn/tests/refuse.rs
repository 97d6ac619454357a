//! Every refusal, on both sides, with the error that says why; nothing
//! printed holds key material.

use openssl::ssl::{SslMethod, SslStream as RawStream, SslVersion};

use super::*;

/// A handshake that must fail on both sides: (client's, server's).
fn refused(client: &ClientConfig, server: &ServerConfig) -> (Error, Error) {
    let (a, b) = pipe(1 << 16);
    let mut c = TlsConn::connect(client, a).unwrap();
    let mut s = TlsConn::accept(server, b).unwrap();
    let (cr, sr) = handshake_pair(&mut c, &mut s);
    let (ce, se) = (cr.unwrap_err(), sr.unwrap_err());
    // Failed for good: later calls fail too, with the reason.
    let e = c.write(b"x").unwrap_err();
    assert_eq!(e.kind(), ce.kind());
    assert!(e.to_string().contains(&ce.to_string()), "{e}");
    assert!(s.read(&mut [0u8; 8]).is_err());
    (ce, se)
}

#[test]
fn a_wrong_psk_is_refused_on_both_sides() {
    let client = ClientConfig::new(&psk("01", 32, 1), HOST, SUB).unwrap();
    let server = server_for(&[(HOST, SUB, &psk("01", 32, 2))]);
    let (ce, se) = refused(&client, &server);
    assert!(
        matches!(&se, Error::WrongPsk(id) if id.contains(HOST)),
        "{se}"
    );
    assert!(matches!(ce, Error::PeerAlert { code: 51, .. }), "{ce}");
    assert!(ce.to_string().contains("keys differ"), "{ce}");
    assert!(ce.is_auth() && se.is_auth());
    assert_eq!(se.errno(), libc::EACCES);
    // The same configured key for another host derives another key.
    let server = server_for(&[(HOST, SUB, &psk("01", 32, 1))]);
    let other = ClientConfig::new(&psk("01", 32, 1), "nqn.other-host", SUB).unwrap();
    let (_, se) = refused(&other, &server);
    assert!(matches!(se, Error::UnknownIdentity(_)), "{se}");
}

#[test]
fn the_refusal_comes_through_read_and_write_too() {
    let client = ClientConfig::new(&psk("01", 32, 1), HOST, SUB).unwrap();
    let server = server_for(&[(HOST, SUB, &psk("01", 32, 2))]);
    let (a, b) = pipe(1 << 16);
    let mut c = TlsConn::connect(&client, a).unwrap();
    let mut s = TlsConn::accept(&server, b).unwrap();
    // As the transports use them: the initiator writes its ICReq, the
    // target reads.
    assert_eq!(
        c.write(&[0; 128]).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    let e = s.read(&mut [0u8; 512]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<Error>());
    assert!(matches!(inner, Some(Error::WrongPsk(_))), "{e}");
    let e = c.write(&[0; 128]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
}

#[test]
fn an_unknown_identity_is_refused() {
    let p = psk("01", 32, 3);
    let client = ClientConfig::new(&p, HOST, SUB).unwrap();
    let server = server_for(&[(HOST, "nqn.2016-06.io.bdevkit:other", &p)]);
    let (ce, se) = refused(&client, &server);
    assert!(
        matches!(&se, Error::UnknownIdentity(id) if id == client.identity().as_str()),
        "{se}"
    );
    assert!(ce.is_auth(), "{ce}");
    // No PSK at all on the server.
    let (ce, se) = refused(&client, &server_for(&[]));
    assert!(matches!(se, Error::UnknownIdentity(_)), "{se}");
    assert!(matches!(ce, Error::PeerAlert { .. }), "{ce}");
}

#[test]
fn mismatched_suites_are_refused() {
    // The host has a 32-byte PSK (SHA-256 suite), the target a 48-byte
    // one for it: the identity names the suite, and they differ.
    let client = ClientConfig::new(&psk("01", 32, 4), HOST, SUB).unwrap();
    let server = server_for(&[(HOST, SUB, &psk("02", 48, 4))]);
    let (ce, se) = refused(&client, &server);
    assert!(
        matches!(
            se,
            Error::SuiteMismatch {
                asked: Suite::Aes128GcmSha256,
                configured: Suite::Aes256GcmSha384,
                ..
            }
        ),
        "{se}"
    );
    assert!(se.to_string().contains("TLS_AES_256_GCM_SHA384"), "{se}");
    assert!(ce.is_auth(), "{ce}");
    let client = ClientConfig::new(&psk("02", 48, 4), HOST, SUB).unwrap();
    let server = server_for(&[(HOST, SUB, &psk("00", 32, 4))]);
    let (_, se) = refused(&client, &server);
    assert!(matches!(se, Error::SuiteMismatch { .. }), "{se}");
}

#[test]
fn a_plain_icreq_to_a_tls_listener_is_refused() {
    let (mut a, b) = pipe(1 << 16);
    let mut s = TlsConn::accept(&server_for(&[]), b).unwrap();
    // An ICReq: type 0, flags 0, hlen 128, pdo 0, plen 128, then 120
    // bytes of PFV, HPDA, digests, MAXR2T.
    let mut icreq = [0u8; 128];
    icreq[2] = 128;
    icreq[4] = 128;
    a.write_all(&icreq).unwrap();
    let e = s.handshake().unwrap_err();
    assert!(
        matches!(e, Error::NotTls { what } if what.contains("ICReq")),
        "{e}"
    );
    assert!(e.to_string().contains("does not use TLS"), "{e}");
    // What went back to the plain host, if anything, is a TLS alert.
    let mut back = [0u8; 64];
    if let Ok(n) = a.read(&mut back) {
        assert!(sniff(&back[..n]).is_tls() || n == 0);
    }
}

#[test]
fn a_tls_client_to_a_plain_listener_is_told_so() {
    let p = psk("01", 32, 5);
    let client = ClientConfig::new(&p, HOST, SUB).unwrap();
    // A plain target reads the ClientHello as its first PDU header: the
    // helper recognises it.
    let (a, mut b) = pipe(1 << 16);
    let mut c = TlsConn::connect(&client, a).unwrap();
    assert_eq!(c.handshake().unwrap(), Handshake::WouldBlock);
    let mut first = [0u8; 8];
    b.read_exact(&mut first).unwrap();
    assert_eq!(sniff(&first), Sniff::TlsHandshake);
    assert!(sniff(&first).describe().contains("uses TLS"));
    // It answers with a C2HTermReq (type 3, hlen 24, plen 24) and closes.
    b.write_all(&[
        3, 0, 24, 0, 24, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ])
    .unwrap();
    drop(b);
    let e = c.handshake().unwrap_err();
    assert!(
        matches!(e, Error::NotTls { what } if what.contains("C2HTermReq")),
        "{e}"
    );
    // Or it just closes.
    let (a, b) = pipe(1 << 16);
    let mut c = TlsConn::connect(&client, a).unwrap();
    assert_eq!(c.handshake().unwrap(), Handshake::WouldBlock);
    drop(b);
    let e = c.handshake().unwrap_err();
    assert!(matches!(e, Error::Closed), "{e}");
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

#[test]
fn a_client_without_psk_is_refused() {
    // A TLS 1.3 client that offers no PSK (it would want a certificate).
    let mut b = openssl::ssl::SslContext::builder(SslMethod::tls()).unwrap();
    b.set_min_proto_version(Some(SslVersion::TLS1_3)).unwrap();
    b.set_verify(openssl::ssl::SslVerifyMode::NONE);
    let mut ssl = Ssl::new(&b.build()).unwrap();
    ssl.set_connect_state();
    let (a, bside) = pipe(1 << 16);
    let mut raw = RawStream::new(ssl, a).unwrap();
    let mut s = TlsConn::accept(&server_for(&[]), bside).unwrap();
    let mut server_err = None;
    for _ in 0..20 {
        let _ = raw.do_handshake();
        match s.handshake() {
            Ok(Handshake::WouldBlock) => {}
            Ok(Handshake::Done) => panic!("a handshake without PSK succeeded"),
            Err(e) => {
                server_err = Some(e);
                break;
            }
        }
    }
    let e = server_err.expect("server stalled");
    assert!(matches!(e, Error::NoPsk), "{e}");
    assert!(raw.do_handshake().is_err(), "the client was told");
}

#[test]
fn configs_conns_and_errors_never_show_key_material() {
    let p = psk("01", 32, 6);
    let retained = RetainedPsk::derive(&p, HOST).unwrap();
    let id = PskIdentity::new(Suite::Aes128GcmSha256, HOST, SUB).unwrap();
    let tls = retained.tls_psk(&id).unwrap();
    let secrets: Vec<String> = [p.bytes(), retained.key().expose(), tls.expose()]
        .iter()
        .flat_map(|k| {
            let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
            [
                hex[..16].to_owned(),
                STANDARD.encode(&k[..12]),
                format!("{:?}", &k[..4]),
            ]
        })
        .collect();
    let client = ClientConfig::new(&p, HOST, SUB).unwrap();
    let server = server_for(&[(HOST, SUB, &psk("01", 32, 7))]);
    let (ce, se) = refused(&client, &server);
    let (c, s) = connected(4096, &p);
    let table = PskTable::new();
    table.insert(HOST, SUB, &p).unwrap();
    let shown = [
        format!("{client:?}"),
        format!("{server:?}"),
        format!("{ce} {ce:?} {se} {se:?}"),
        format!("{c:?} {s:?}"),
        format!("{retained:?} {tls:?} {id:?} {table:?}"),
    ];
    for text in &shown {
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()), "{text} shows {secret}");
        }
    }
    assert!(
        shown[0].contains(HOST),
        "the identity is shown: {}",
        shown[0]
    );
}
