//! NVMe/TCP with TLS 1.3 and a PSK, across processes: `bdev_tgt` with a
//! `secure_channel` listener and a host PSK (a keyring key), our
//! initiator (`bdevperf -z`, `bdev_nvme_attach_controller psk`) verifying
//! through it; every bad TLS input refused (the connection closed or the
//! handshake failed) without harm to the target or to the good host; TLS
//! and DH-HMAC-CHAP together on one connection; and interop with the
//! reference SPDK build (its bdevperf against our target, with a PSK and
//! with a PSK and a DH-HMAC-CHAP key; our initiator against its
//! nvmf_tgt), skipped loudly when it is absent.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bdevkit_nvme_auth::TlsPsk;
use bdevkit_nvme_spec::tcp::{build_ic_req, Digests};
use bdevkit_nvme_spec::Status;
use bdevkit_nvme_tls::{ClientConfig, Handshake, TlsConn};
use bdevkit_test::daemon::{temp_dir, Daemon};
use bdevkit_test::nvmf::{free_port, Host};
use serde_json::{json, Value};

use crate::nvmf_loss::{assert_clean, perform_tests, start_bdevperf};
use crate::ref_spdk::{spdk_bdevperf_verifies, NvmfTgt};

const NQN: &str = "nqn.2016-06.io.bdevkit:tls1";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
/// A second allowed host, without a PSK.
const HOST2: &str = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf7";
/// The configured PSK (SPDK's test key, SHA-256 retained-PSK hash).
const KEY: &str = "NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:";
/// Another valid key, for the wrong-PSK cases.
const OTHER_KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
const GUARD: Duration = Duration::from_secs(10);

/// A key file as the keyring wants it (not readable by others).
fn key_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn keyring(name: &str, path: &Path) -> Value {
    json!({"subsystem": "keyring", "config": [
        {"method": "keyring_file_add_key", "params": {"name": name, "path": path}}]})
}

fn listener(port: u16, secure: bool) -> Value {
    json!({"method": "nvmf_subsystem_add_listener", "params": {"nqn": NQN,
        "listen_address": {"trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1",
                           "trsvcid": port.to_string()},
        "secure_channel": secure}})
}

/// A target config (ours and SPDK's alike): a 64 MiB malloc bdev as
/// namespace 1 of [`NQN`], which allows [`HOST`] with PSK `key0`, a
/// secure listener on `secure` and a plain one on `plain`.
fn target_config(dir: &Path, key: &Path, secure: u16, plain: Option<u16>) -> PathBuf {
    let mut nvmf = vec![
        json!({"method": "nvmf_create_transport", "params": {"trtype": "TCP"}}),
        json!({"method": "nvmf_create_subsystem",
            "params": {"nqn": NQN, "serial_number": "BDKTLS0001", "allow_any_host": false}}),
        json!({"method": "nvmf_subsystem_add_ns",
            "params": {"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}}),
        json!({"method": "nvmf_subsystem_add_host",
            "params": {"nqn": NQN, "host": HOST, "psk": "key0"}}),
        json!({"method": "nvmf_subsystem_add_host", "params": {"nqn": NQN, "host": HOST2}}),
        listener(secure, true),
    ];
    nvmf.extend(plain.map(|p| listener(p, false)));
    let cfg = json!({"subsystems": [
        keyring("key0", key),
        {"subsystem": "bdev", "config": [{"method": "bdev_malloc_create",
            "params": {"name": "Malloc0", "num_blocks": 131_072, "block_size": 512}}]},
        {"subsystem": "nvmf", "config": nvmf},
    ]});
    let p = dir.join("tgt.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

/// An initiator config: the key, then the controller attached with it.
fn host_config(dir: &Path, key: &Path, port: u16) -> PathBuf {
    let cfg = json!({"subsystems": [
        keyring("key0", key),
        {"subsystem": "bdev", "config": [{"method": "bdev_nvme_attach_controller", "params": {
            "name": "Nvme0", "trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1",
            "trsvcid": port.to_string(), "subnqn": NQN, "hostnqn": HOST, "psk": "key0"}}]},
    ]});
    let p = dir.join("host.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

/// Our bdevperf verifies `Nvme0n1` for a second through `host_cfg`.
fn verify_with_our_initiator(host_cfg: &Path, what: &str) {
    let bp = start_bdevperf(host_cfg, "Nvme0n1");
    let r = perform_tests(&bp, 1).join().unwrap();
    assert_clean(
        &r.unwrap_or_else(|e| panic!("{what}: {e:?}\n{}", bp.log())),
        what,
    );
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// Reads until the peer closes (`true`) or [`GUARD`] passes (`false`).
fn closed_by_peer(s: &mut TcpStream) -> bool {
    let end = Instant::now() + GUARD;
    let mut b = [0u8; 4096];
    while Instant::now() < end {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

/// A TLS handshake as `hostnqn` with `key` on `port`: the connection,
/// or the error's text.
fn tls(port: u16, key: &str, hostnqn: &str) -> Result<TlsConn<TcpStream>, String> {
    let cfg = ClientConfig::new(&TlsPsk::parse(key).unwrap(), hostnqn, NQN).unwrap();
    let mut c = TlsConn::connect(&cfg, connect(port)).unwrap();
    let end = Instant::now() + GUARD;
    loop {
        match c.handshake() {
            Ok(Handshake::Done) => return Ok(c),
            Ok(Handshake::WouldBlock) => {
                assert!(Instant::now() < end, "handshake with our target hung");
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// [`tls`]'s error text, `None` when the handshake succeeded.
fn handshake(port: u16, key: &str, hostnqn: &str) -> Option<String> {
    tls(port, key, hostnqn).err()
}

/// Over a TLS connection as [`HOST`]: ICReq, then an admin Connect as
/// `hostnqn`; its status.
fn connect_over_tls(port: u16, hostnqn: &str) -> Status {
    let mut h = Host::new(tls(port, KEY, HOST).unwrap());
    h.icreq(Digests::default()).unwrap();
    h.connect(0, 32, 0, 0xffff, NQN, hostnqn).unwrap().status()
}

fn icreq() -> Vec<u8> {
    let mut b = [0u8; 128];
    let n = build_ic_req(&mut b, 0, Digests::default(), 0).unwrap();
    b[..n].to_vec()
}

#[test]
fn our_initiator_verifies_through_our_target_over_tls_and_bad_tls_is_refused() {
    let dir = temp_dir();
    let d = dir.path();
    let key = key_file(d, "key0", KEY);
    let (secure, plain) = (free_port(), free_port());
    let tgt = Daemon::start(&[
        "-m",
        "0x1",
        "--json",
        target_config(d, &key, secure, Some(plain))
            .to_str()
            .unwrap(),
    ]);
    let host_cfg = host_config(d, &key, secure);
    verify_with_our_initiator(&host_cfg, "TLS verify");

    // Garbage where the ClientHello goes.
    let mut s = connect(secure);
    s.write_all(&[0x5a; 600]).unwrap();
    assert!(closed_by_peer(&mut s), "garbage on the secure listener");
    // A damaged ClientHello: a TLS record header, then nonsense.
    let mut s = connect(secure);
    s.write_all(&[0x16, 0x03, 0x01, 0x00, 0x40]).unwrap();
    s.write_all(&[0xff; 64]).unwrap();
    assert!(closed_by_peer(&mut s), "damaged ClientHello");
    // A plain host (ICReq) on the secure listener.
    let mut s = connect(secure);
    s.write_all(&icreq()).unwrap();
    assert!(closed_by_peer(&mut s), "plain ICReq on the secure listener");
    // A wrong PSK, an identity the target has no PSK for.
    let e = handshake(secure, OTHER_KEY, HOST).expect("a wrong PSK is refused");
    assert!(
        !e.contains("MDAx") && !e.contains("VRLb"),
        "no key material: {e}"
    );
    let stranger = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
    handshake(secure, KEY, stranger).expect("an unknown identity is refused");
    // A TLS host on the plain listener.
    handshake(plain, KEY, HOST).expect("TLS on a plain listener is refused");
    // The right key does the handshake.
    assert_eq!(handshake(secure, KEY, HOST), None);
    // The Connect must name the identity's host: another allowed host
    // is refused over HOST's channel, HOST itself connects.
    assert!(connect_over_tls(secure, HOST2).is(Status::CONNECT_INVALID_HOST));
    assert!(connect_over_tls(secure, HOST).is(Status::SUCCESS));

    // The target lives on, the good host is unaffected.
    verify_with_our_initiator(&host_cfg, "TLS verify after the bad hosts");

    // The saved config as SPDK's (save_config is the client's loop over
    // framework_get_config): the host's psk by name, the listener secure.
    let nvmf = tgt.ok("framework_get_config", Some(json!({"name": "nvmf"})));
    let calls = nvmf.as_array().unwrap();
    let host = calls
        .iter()
        .find(|c| c["method"] == "nvmf_subsystem_add_host")
        .unwrap();
    assert_eq!(host["params"]["psk"], "key0", "{host}");
    let secures: Vec<bool> = calls
        .iter()
        .filter(|c| c["method"] == "nvmf_subsystem_add_listener")
        .map(|c| c["params"]["secure_channel"].as_bool().unwrap())
        .collect();
    assert_eq!(secures, [true, false]);
    let keys = tgt.ok("framework_get_config", Some(json!({"name": "keyring"})));
    for saved in [&nvmf, &keys] {
        assert!(!saved.to_string().contains("MDAx"), "no key material saved");
    }
}

#[test]
fn secure_listener_and_psk_refusals_are_spdks() {
    let dir = temp_dir();
    let d = dir.path();
    let key = key_file(d, "key0", KEY);
    let cfg = json!({"subsystems": [keyring("key0", &key)]});
    let p = d.join("keys.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    let tgt = Daemon::start(&["-m", "0x1", "--json", p.to_str().unwrap()]);
    assert_eq!(
        tgt.ok("nvmf_create_transport", Some(json!({"trtype": "TCP"}))),
        true
    );
    assert_eq!(
        tgt.ok(
            "nvmf_create_subsystem",
            Some(json!({"nqn": NQN, "allow_any_host": true})),
        ),
        true
    );
    let port = free_port();
    let addr = json!({"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": port.to_string()});
    let e = tgt
        .call(
            "nvmf_subsystem_add_listener",
            Some(json!({"nqn": NQN, "listen_address": addr, "secure_channel": true})),
        )
        .unwrap_err();
    assert_eq!(e.code, -32603, "{e:?}");
    assert!(e.message.contains("allow_any_host"), "{e:?}");
    // An unknown key name, a key that is no TLS PSK: Internal error.
    let e = tgt
        .call(
            "nvmf_subsystem_add_host",
            Some(json!({"nqn": NQN, "host": HOST, "psk": "nokey"})),
        )
        .unwrap_err();
    assert_eq!(e.code, -32603, "{e:?}");
    // A valid DH-HMAC-CHAP secret (its CRC right): refused for its type.
    let dh = key_file(d, "dh", DH_KEY);
    assert_eq!(
        tgt.ok(
            "keyring_file_add_key",
            Some(json!({"name": "dh", "path": dh})),
        ),
        true
    );
    let e = tgt
        .call(
            "nvmf_subsystem_add_host",
            Some(json!({"nqn": NQN, "host": HOST, "psk": "dh"})),
        )
        .unwrap_err();
    assert_eq!(e.code, -32603, "{e:?}");
    // Nothing half-added: the host is not there, a good add works.
    let subs = tgt.ok("nvmf_get_subsystems", None);
    let sub = subs
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["nqn"] == NQN)
        .unwrap();
    assert_eq!(sub["hosts"], json!([]));
    assert_eq!(
        tgt.ok(
            "nvmf_subsystem_add_host",
            Some(json!({"nqn": NQN, "host": HOST, "psk": "key0"})),
        ),
        true
    );
    let subs = tgt.ok("nvmf_get_subsystems", None);
    let sub = subs
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["nqn"] == NQN)
        .unwrap();
    assert_eq!(sub["hosts"], json!([{"nqn": HOST, "psk": "key0"}]));
}

/// A DH-HMAC-CHAP key for [`HOST`], and one nobody configured (both
/// valid: doc/nvmf.md's examples).
const DH_KEY: &str = "DHHC-1:00:itFl7sDByOGeaZtm1BbVH6BCWyy7SG1Zq/sjL8tH2Os8mDv2:";
const OTHER_DH_KEY: &str = "DHHC-1:00:8zMQyDpT+M6sPp+TgGm7LFpxK2RYR9yEg32Zvy9D5pQ+2whu:";

/// The keyring with every key of `keys` (name, file).
fn keyring_of(keys: &[(&str, &Path)]) -> Value {
    let calls: Vec<Value> = keys
        .iter()
        .map(|(n, p)| json!({"method": "keyring_file_add_key", "params": {"name": n, "path": p}}))
        .collect();
    json!({"subsystem": "keyring", "config": calls})
}

/// The key files of the TLS + DH-HMAC-CHAP tests: `key0` (the PSK),
/// `dh0` (HOST's DH-HMAC-CHAP key), `dhbad` (a key nobody configured).
fn both_keys(dir: &Path) -> Value {
    let psk = key_file(dir, "key0", KEY);
    let dh = key_file(dir, "dh0", DH_KEY);
    let bad = key_file(dir, "dhbad", OTHER_DH_KEY);
    keyring_of(&[("key0", &psk), ("dh0", &dh), ("dhbad", &bad)])
}

/// A target config (ours and SPDK's alike) whose [`HOST`] has both a PSK
/// (`key0`) and a DH-HMAC-CHAP key (`dh0`), on a secure listener only;
/// groups kept to the cheaper ones (debug builds).
fn both_target_config(dir: &Path, port: u16) -> PathBuf {
    let cfg = json!({"subsystems": [
        both_keys(dir),
        {"subsystem": "bdev", "config": [{"method": "bdev_malloc_create",
            "params": {"name": "Malloc0", "num_blocks": 131_072, "block_size": 512}}]},
        {"subsystem": "nvmf", "config": [
            {"method": "nvmf_set_config", "params": {
                "dhchap_digests": ["sha256", "sha384", "sha512"],
                "dhchap_dhgroups": ["null", "ffdhe2048"]}},
            {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
            {"method": "nvmf_create_subsystem",
                "params": {"nqn": NQN, "serial_number": "BDKTLS0002", "allow_any_host": false}},
            {"method": "nvmf_subsystem_add_ns",
                "params": {"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}},
            {"method": "nvmf_subsystem_add_host",
                "params": {"nqn": NQN, "host": HOST, "psk": "key0", "dhchap_key": "dh0"}},
            listener(port, true),
        ]},
    ]});
    let p = dir.join("tgt-both.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

/// `bdev_nvme_attach_controller`'s params for [`HOST`] on `port`: the PSK,
/// and the DH-HMAC-CHAP key `dh` if any.
fn both_attach(port: u16, dh: Option<&str>) -> Value {
    let mut p = json!({"name": "Nvme0", "trtype": "tcp", "adrfam": "ipv4",
        "traddr": "127.0.0.1", "trsvcid": port.to_string(), "subnqn": NQN, "hostnqn": HOST,
        "psk": "key0"});
    if let Some(k) = dh {
        p["dhchap_key"] = json!(k);
    }
    p
}

/// An initiator config with both keys (ours and SPDK's bdevperf alike).
fn both_host_config(dir: &Path, port: u16) -> PathBuf {
    let cfg = json!({"subsystems": [
        both_keys(dir),
        {"subsystem": "bdev", "config": [{"method": "bdev_nvme_attach_controller",
            "params": both_attach(port, Some("dh0"))}]},
    ]});
    let p = dir.join("host-both.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

/// TLS and DH-HMAC-CHAP on one connection: each queue does the TLS
/// handshake, then its Connect and DH-HMAC-CHAP inside the TLS channel
/// (no secure channel concatenation). Our initiator with both keys
/// verifies; with the PSK alone (the target asks for authentication) or
/// with a wrong DH-HMAC-CHAP key the attach is refused, and the target
/// goes on serving the good host.
#[test]
fn tls_and_dhchap_on_one_connection() {
    let dir = temp_dir();
    let d = dir.path();
    let port = free_port();
    let tgt = Daemon::start(&[
        "-m",
        "0x1",
        "--json",
        both_target_config(d, port).to_str().unwrap(),
    ]);
    let host_cfg = both_host_config(d, port);
    verify_with_our_initiator(&host_cfg, "TLS + DH-HMAC-CHAP verify");

    let keys = json!({"subsystems": [both_keys(d)]});
    let p = d.join("host-keys.json");
    std::fs::write(&p, keys.to_string()).unwrap();
    let host = Daemon::start(&["-m", "0x1", "--json", p.to_str().unwrap()]);
    for (dh, what) in [
        (None, "PSK without the DH-HMAC-CHAP key"),
        (Some("dhbad"), "PSK with a wrong DH-HMAC-CHAP key"),
    ] {
        let e = host
            .call("bdev_nvme_attach_controller", Some(both_attach(port, dh)))
            .expect_err(what);
        assert_eq!(e.code, -libc::EACCES, "{what}: {e:?}");
        let bdevs = host.ok("bdev_get_bdevs", None);
        assert_eq!(bdevs, json!([]), "{what}: a bdev appeared");
    }
    let names = host.ok(
        "bdev_nvme_attach_controller",
        Some(both_attach(port, Some("dh0"))),
    );
    assert_eq!(names, json!(["Nvme0n1"]));
    let c = host.ok("bdev_nvme_get_controllers", Some(json!({"name": "Nvme0"})));
    assert_eq!(c[0]["ctrlrs"][0]["state"], "enabled", "{c}");

    verify_with_our_initiator(&host_cfg, "TLS + DH-HMAC-CHAP verify after the refusals");
    for (who, log) in [("target", tgt.log()), ("host", host.log())] {
        for body in [KEY, DH_KEY, OTHER_DH_KEY] {
            let material = body.split(':').nth(2).unwrap();
            assert!(!log.contains(material), "{who} log shows key material");
        }
    }
}

/// The reference SPDK build's directory, if it is built.
fn spdk_ref() -> Option<PathBuf> {
    crate::ref_spdk::build_dir(&["bin/nvmf_tgt", "examples/bdevperf"])
}

#[test]
fn spdk_bdevperf_verifies_through_our_target_over_tls() {
    let Some(spdk) = spdk_ref() else {
        eprintln!(
            "SKIPPED spdk_bdevperf_verifies_through_our_target_over_tls: reference SPDK \
             build not found (SPDK_REF_DIR or ~/.cache/bdevkit-ref-spdk/build)"
        );
        return;
    };
    let dir = temp_dir();
    let d = dir.path();
    let key = key_file(d, "key0", KEY);
    let port = free_port();
    let _tgt = Daemon::start(&[
        "-m",
        "0x1",
        "--json",
        target_config(d, &key, port, None).to_str().unwrap(),
    ]);
    let host_cfg = host_config(d, &key, port);
    spdk_bdevperf_verifies(&spdk, &host_cfg, "over TLS against our target");
}

#[test]
fn our_initiator_verifies_through_spdk_nvmf_tgt_over_tls() {
    let Some(spdk) = spdk_ref() else {
        eprintln!(
            "SKIPPED our_initiator_verifies_through_spdk_nvmf_tgt_over_tls: reference SPDK \
             build not found (SPDK_REF_DIR or ~/.cache/bdevkit-ref-spdk/build)"
        );
        return;
    };
    let dir = temp_dir();
    let d = dir.path();
    let key = key_file(d, "key0", KEY);
    let port = free_port();
    let cfg = target_config(d, &key, port, None);
    let _tgt = NvmfTgt::start(&spdk.join("bin/nvmf_tgt"), d, &cfg, port);
    verify_with_our_initiator(
        &host_config(d, &key, port),
        "our initiator over TLS to SPDK",
    );
}

/// SPDK's bdevperf with a PSK and a DH-HMAC-CHAP key on one connection
/// verifies through our target (TLS, then DH-HMAC-CHAP inside it).
#[test]
fn spdk_bdevperf_verifies_through_our_target_over_tls_with_dhchap() {
    let Some(spdk) = spdk_ref() else {
        eprintln!(
            "SKIPPED spdk_bdevperf_verifies_through_our_target_over_tls_with_dhchap: reference \
             SPDK build not found (SPDK_REF_DIR or ~/.cache/bdevkit-ref-spdk/build)"
        );
        return;
    };
    let dir = temp_dir();
    let d = dir.path();
    let port = free_port();
    let _tgt = Daemon::start(&[
        "-m",
        "0x1",
        "--json",
        both_target_config(d, port).to_str().unwrap(),
    ]);
    let host_cfg = both_host_config(d, port);
    spdk_bdevperf_verifies(
        &spdk,
        &host_cfg,
        "over TLS + DH-HMAC-CHAP against our target",
    );
}
