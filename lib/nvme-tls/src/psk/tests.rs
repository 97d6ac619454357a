//! Derivation vectors. The expected values come from OpenSSL 3's HKDF
//! (`openssl kdf ... HKDF`, an implementation independent of the
//! RustCrypto one used here), with the info bytes laid out as SPDK's
//! `nvme_tcp_derive_retained_psk` / `nvme_tcp_derive_tls_psk` lay them.
//! The configured key and NQNs are those of libnvme's `test/psk.c`; the
//! retained keys are checked against libnvme's published version 1
//! identities too (their digest is an HMAC under the retained PSK).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};

use super::*;

const K32: &str = "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03";
const K48_TAIL: &str = "ffc344bcf442e2dd6d8bc4870b5d5b03";
const HOST: &str = "nqn.psk-test-host";
const SUB: &str = "nqn.psk-test-subsys";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A configured PSK in the interchange format (`hh` its hash).
fn interchange(hh: &str, key: &[u8]) -> TlsPsk {
    let mut raw = key.to_vec();
    raw.extend_from_slice(&crc32(key).to_le_bytes());
    TlsPsk::parse(&format!("NVMeTLSkey-1:{hh}:{}:", STANDARD.encode(raw))).unwrap()
}

/// CRC-32 (IEEE), bitwise: the interchange format's checksum.
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

fn k48() -> Vec<u8> {
    unhex(&format!("{K32}{K48_TAIL}"))
}

#[test]
fn libnvme_interchange_keys_parse_to_the_same_bytes() {
    // libnvme's exported forms of the same configured keys.
    let p =
        TlsPsk::parse("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:").unwrap();
    assert_eq!(p.bytes(), unhex(K32));
    let p = TlsPsk::parse(
        "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:",
    )
    .unwrap();
    assert_eq!(p.bytes(), k48());
    assert_eq!(interchange("01", &unhex(K32)).bytes(), unhex(K32));
}

#[test]
fn identities_are_spdks() {
    let id = PskIdentity::new(Suite::Aes128GcmSha256, HOST, SUB).unwrap();
    assert_eq!(
        id.as_str(),
        "NVMe0R01 nqn.psk-test-host nqn.psk-test-subsys"
    );
    assert_eq!((id.hostnqn(), id.subnqn()), (HOST, SUB));
    let id2 = PskIdentity::new(Suite::Aes256GcmSha384, HOST, SUB).unwrap();
    assert_eq!(
        id2.as_str(),
        "NVMe0R02 nqn.psk-test-host nqn.psk-test-subsys"
    );
    assert_eq!(PskIdentity::parse(id2.as_str()).unwrap(), id2);
    assert_eq!(
        PskIdentity::parse(id.as_str()).unwrap().suite(),
        Suite::Aes128GcmSha256
    );
    for bad in [
        "",
        "NVMe0R01",
        "NVMe0R01 host",
        "NVMe0R03 host sub",
        "NVMe1R01 host sub digest",
        "NVMe0R01 host sub extra",
        "NVMe0R01  sub",
        "nvme0R01 host sub",
    ] {
        assert!(PskIdentity::parse(bad).is_err(), "{bad:?}");
    }
    let long = "n".repeat(NQN_MAX_LEN);
    // 9 + 223 + 1 + 223 > 255: the derivation's length byte forbids it.
    assert!(matches!(
        PskIdentity::new(Suite::Aes128GcmSha256, &long, &long),
        Err(Error::Identity(_))
    ));
    assert!(PskIdentity::new(Suite::Aes128GcmSha256, &long, "s").is_ok());
    assert!(PskIdentity::new(Suite::Aes128GcmSha256, &format!("{long}n"), "s").is_err());
}

#[test]
fn suite_follows_the_configured_psk_size() {
    assert_eq!(
        suite_of(&interchange("00", &unhex(K32))).unwrap(),
        Suite::Aes128GcmSha256
    );
    assert_eq!(
        suite_of(&interchange("01", &unhex(K32))).unwrap(),
        Suite::Aes128GcmSha256
    );
    assert_eq!(
        suite_of(&interchange("00", &k48())).unwrap(),
        Suite::Aes256GcmSha384
    );
    assert_eq!(
        suite_of(&interchange("02", &k48())).unwrap(),
        Suite::Aes256GcmSha384
    );
}

/// (interchange hash, configured key, retained, TLS PSK) for HOST/SUB.
fn vectors() -> Vec<(&'static str, Vec<u8>, &'static str, &'static str)> {
    vec![
        (
            "01",
            unhex(K32),
            "073311dec37e219ff3acd43f130130c5bdd443c066e1cc3424e49030234ff7d5",
            "05c6503551ad136e6ee32e6eeb3f6d500b69701d84ec71e328f65c7f51566f68",
        ),
        (
            "02",
            k48(),
            "73973a1b51a9acdde29a0610ac6a3ef852cf45936cca6830a661d18f68502f1a\
             4c7a8ecb37524e0b1f7087cb4d680ad9",
            "f42ba63824cdfe421914c582921f85b5b5b7e2d4df084caeedc9be20b212e8bb\
             0fe8a23e9d59a1c8fc6449da4970a78d",
        ),
        (
            "00",
            unhex(K32),
            K32,
            "ec85300ba827726bd3bc4fc07f3a34aec5fe7c8ccac05fefc2f021c74e0df9ef",
        ),
        (
            "00",
            k48(),
            "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03\
             ffc344bcf442e2dd6d8bc4870b5d5b03",
            "b5dd464067a9378ba2226d71f005d7ac90ed8696e4b2142084384365597201d3\
             3ba26f8aeeb529574d4267bd294a828e",
        ),
    ]
}

#[test]
fn derivations_match_openssl_hkdf() {
    for (hh, key, retained, tls) in vectors() {
        let r = RetainedPsk::derive(&interchange(hh, &key), HOST).unwrap();
        assert_eq!(hex(r.key().expose()), retained, "retained, hash {hh}");
        let id = PskIdentity::new(r.suite(), HOST, SUB).unwrap();
        assert_eq!(
            hex(r.tls_psk(&id).unwrap().expose()),
            tls,
            "TLS PSK, hash {hh}"
        );
    }
    // A UUID host NQN and SPDK's usual subsystem.
    let host = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
    let r = RetainedPsk::derive(&interchange("01", &unhex(K32)), host).unwrap();
    assert_eq!(
        hex(r.key().expose()),
        "f0af1bc718d4f23bdd7c1683a3d79bd953ea789d106a0f5207bb574bbe5446ce"
    );
    let id = PskIdentity::new(Suite::Aes128GcmSha256, host, "nqn.2016-06.io.spdk:cnode1").unwrap();
    assert_eq!(
        hex(r.tls_psk(&id).unwrap().expose()),
        "b976336237885ee79b7206085ec337726c89d594fc922cd17506a5fbdff9e5e3"
    );
}

#[test]
fn retained_keys_match_libnvme_identity_digests() {
    // libnvme's version 1 identity ends with base64(HMAC(retained,
    // hostnqn " " subnqn " NVMe-over-Fabrics")); its test publishes them.
    let msg = format!("{HOST} {SUB} NVMe-over-Fabrics");
    let r = RetainedPsk::derive(&interchange("01", &unhex(K32)), HOST).unwrap();
    let mut m = Hmac::<Sha256>::new_from_slice(r.key().expose()).unwrap();
    m.update(msg.as_bytes());
    assert_eq!(
        STANDARD.encode(m.finalize().into_bytes()),
        "iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU="
    );
    let r = RetainedPsk::derive(&interchange("02", &k48()), HOST).unwrap();
    let mut m = Hmac::<Sha384>::new_from_slice(r.key().expose()).unwrap();
    m.update(msg.as_bytes());
    assert_eq!(
        STANDARD.encode(m.finalize().into_bytes()),
        "QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a"
    );
}

#[test]
fn the_tls_psk_depends_on_every_input() {
    let r = RetainedPsk::derive(&interchange("01", &unhex(K32)), HOST).unwrap();
    let other_host = RetainedPsk::derive(&interchange("01", &unhex(K32)), "nqn.other").unwrap();
    assert_ne!(r.key().expose(), other_host.key().expose());
    let id = PskIdentity::new(Suite::Aes128GcmSha256, HOST, SUB).unwrap();
    let id2 = PskIdentity::new(Suite::Aes128GcmSha256, HOST, "nqn.other-subsys").unwrap();
    assert_ne!(
        r.tls_psk(&id).unwrap().expose(),
        r.tls_psk(&id2).unwrap().expose()
    );
    // The identity's suite must be the key's.
    let id384 = PskIdentity::new(Suite::Aes256GcmSha384, HOST, SUB).unwrap();
    let e = r.tls_psk(&id384).unwrap_err();
    assert!(matches!(e, Error::SuiteMismatch { .. }), "{e}");
}

#[test]
fn key_material_is_never_printed() {
    let r = RetainedPsk::derive(&interchange("01", &unhex(K32)), HOST).unwrap();
    let id = PskIdentity::new(Suite::Aes128GcmSha256, HOST, SUB).unwrap();
    let tls = r.tls_psk(&id).unwrap();
    for shown in [
        format!("{r:?}"),
        format!("{tls:?}"),
        format!("{:?}", r.key()),
    ] {
        for secret in [hex(r.key().expose()), hex(tls.expose()), K32.to_owned()] {
            assert!(!shown.contains(&secret[..16]), "{shown}");
        }
    }
}
