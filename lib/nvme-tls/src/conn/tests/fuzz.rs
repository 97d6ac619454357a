//! Garbage and damaged handshakes never panic and never complete
//! (`scripts/test.sh` runs these with many cases:
//! `conn::tests::fuzz`).

use std::sync::OnceLock;

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

fn server() -> &'static ServerConfig {
    static S: OnceLock<ServerConfig> = OnceLock::new();
    S.get_or_init(|| server_for(&[(HOST, SUB, &psk("01", 32, 1))]))
}

fn client() -> &'static ClientConfig {
    static C: OnceLock<ClientConfig> = OnceLock::new();
    C.get_or_init(|| ClientConfig::new(&psk("01", 32, 1), HOST, SUB).unwrap())
}

/// A real ClientHello for `client()`.
fn client_hello() -> Vec<u8> {
    let (a, _b) = pipe(1 << 16);
    let mut c = TlsConn::connect(client(), a).unwrap();
    assert_eq!(c.handshake().unwrap(), Handshake::WouldBlock);
    let hello = c.get_ref().sh.borrow().log[0].clone();
    hello
}

/// Feeds `bytes` in `chunk`-sized pieces to `conn`'s peer end, stepping
/// the handshake after each, then closes: the handshake must fail (it
/// can never complete without the other side's keys), and cleanly.
fn feed<S: Read + Write>(conn: &mut TlsConn<S>, peer: &mut End, bytes: &[u8], chunk: usize) {
    for piece in bytes.chunks(chunk.max(1)) {
        if peer.write_all(piece).is_err() {
            break;
        }
        match conn.handshake() {
            Ok(Handshake::WouldBlock) => {}
            Ok(Handshake::Done) => panic!("garbage completed a handshake"),
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        }
    }
    peer.close();
    match conn.handshake() {
        Ok(Handshake::Done) => panic!("garbage completed a handshake"),
        Ok(Handshake::WouldBlock) => panic!("end of file left the handshake waiting"),
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // Failed for good, and reads and writes say so.
    assert!(conn.read(&mut [0u8; 64]).is_err());
    assert!(conn.write(b"x").is_err());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in vec(any::<u8>(), 0..3000),
        chunk in 1usize..700,
        as_client in any::<bool>(),
    ) {
        let (a, mut b) = pipe(1 << 16);
        if as_client {
            let mut c = TlsConn::connect(client(), a).unwrap();
            prop_assert_eq!(c.handshake().unwrap(), Handshake::WouldBlock);
            feed(&mut c, &mut b, &bytes, chunk);
        } else {
            let mut a = a;
            let mut s = TlsConn::accept(server(), b).unwrap();
            feed(&mut s, &mut a, &bytes, chunk);
        }
    }

    #[test]
    fn damaged_client_hellos_never_panic(
        flips in vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
        tail in vec(any::<u8>(), 0..64),
        chunk in 1usize..400,
    ) {
        let mut hello = client_hello();
        let len = hello.len();
        for (at, x) in flips {
            hello[at % len] ^= x;
        }
        hello.truncate(cut % (len + 1));
        hello.extend_from_slice(&tail);
        let (mut a, b) = pipe(1 << 16);
        let mut s = TlsConn::accept(server(), b).unwrap();
        feed(&mut s, &mut a, &hello, chunk);
    }
}
