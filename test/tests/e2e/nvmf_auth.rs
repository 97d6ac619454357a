//! DH-HMAC-CHAP across processes: `bdev_tgt` with host keys
//! (`nvmf_subsystem_add_host` `dhchap_key` / `dhchap_ctrlr_key`, keyring
//! keys), our initiator (`bdevperf -z` and `bdev_tgt`'s
//! `bdev_nvme_attach_controller` with the same key names) verifying
//! through it, a wrong key refused, re-keying on both sides
//! (`nvmf_subsystem_set_keys`, `bdev_nvme_set_keys`); and interop with
//! the reference SPDK build (its bdevperf against our target, our
//! initiator against its nvmf_tgt), skipped loudly when it is absent.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use bdevkit_nvme_auth::{HashFn, Secret};
use bdevkit_test::daemon::{temp_dir, Daemon};
use bdevkit_test::nvmf::free_port;
use serde_json::{json, Value};

use crate::nvmf_loss::{assert_clean, perform_tests, start_bdevperf};
use crate::ref_spdk::{spdk_bdevperf_verifies, NvmfTgt};

const NQN: &str = "nqn.2016-06.io.bdevkit:auth1";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0d6f4ae2-7dec-11d0-a765-00a0c91e6bf6";

/// The keys of a run: files (mode 0600) named as their keyring keys.
struct Keys {
    dir: tempfile::TempDir,
    /// `key0`: the host's; `ckey0`: the controller's; `key1`: the next
    /// host key; `bad`: one nobody configured.
    secrets: Vec<(&'static str, String)>,
}

impl Keys {
    fn new() -> Keys {
        let dir = temp_dir();
        let secrets = vec![
            ("key0", Secret::generate(32, Some(HashFn::Sha256))),
            ("ckey0", Secret::generate(48, None)),
            ("key1", Secret::generate(64, Some(HashFn::Sha512))),
            ("bad", Secret::generate(32, None)),
        ]
        .into_iter()
        .map(|(n, s)| (n, s.unwrap().to_interchange()))
        .collect::<Vec<_>>();
        for (n, s) in &secrets {
            let p = dir.path().join(n);
            std::fs::write(&p, s).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        Keys { dir, secrets }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn keyring(&self, names: &[&str]) -> Value {
        let calls: Vec<Value> = names
            .iter()
            .map(|n| {
                json!({"method": "keyring_file_add_key",
                    "params": {"name": n, "path": self.path(n)}})
            })
            .collect();
        json!({"subsystem": "keyring", "config": calls})
    }

    /// No key material in `text`.
    fn assert_absent(&self, text: &str, what: &str) {
        for (n, s) in &self.secrets {
            let body = s.split(':').nth(2).unwrap();
            assert!(!text.contains(body), "{what}: material of {n} shown");
        }
    }
}

/// A target config (ours and SPDK's alike): a 64 MiB malloc bdev as
/// namespace 1 of [`NQN`], which allows [`HOST`] with `key0` (and
/// `ckey0` as the controller key), on `port`; digests and groups kept to
/// the cheaper ones (debug builds).
fn target_config(keys: &Keys, port: u16) -> PathBuf {
    let nvmf = vec![
        json!({"method": "nvmf_set_config", "params": {
            "dhchap_digests": ["sha256", "sha384", "sha512"],
            "dhchap_dhgroups": ["null", "ffdhe2048"]}}),
        json!({"method": "nvmf_create_transport", "params": {"trtype": "TCP"}}),
        json!({"method": "nvmf_create_subsystem",
            "params": {"nqn": NQN, "serial_number": "BDKAUTH001", "allow_any_host": false}}),
        json!({"method": "nvmf_subsystem_add_ns",
            "params": {"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}}),
        json!({"method": "nvmf_subsystem_add_host", "params": {"nqn": NQN, "host": HOST,
            "dhchap_key": "key0", "dhchap_ctrlr_key": "ckey0"}}),
        json!({"method": "nvmf_subsystem_add_listener", "params": {"nqn": NQN,
            "listen_address": {"trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1",
                               "trsvcid": port.to_string()}}}),
    ];
    let cfg = json!({"subsystems": [
        keys.keyring(&["key0", "ckey0", "key1"]),
        {"subsystem": "bdev", "config": [{"method": "bdev_malloc_create",
            "params": {"name": "Malloc0", "num_blocks": 131_072, "block_size": 512}}]},
        {"subsystem": "nvmf", "config": nvmf},
    ]});
    let p = keys.dir.path().join("tgt.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

fn attach(port: u16, key: &str, ctrlr_key: Option<&str>) -> Value {
    let mut p = json!({"name": "Nvme0", "trtype": "tcp", "adrfam": "ipv4",
        "traddr": "127.0.0.1", "trsvcid": port.to_string(), "subnqn": NQN, "hostnqn": HOST,
        "dhchap_key": key});
    if let Some(c) = ctrlr_key {
        p["dhchap_ctrlr_key"] = json!(c);
    }
    p
}

/// An initiator config: the keys, then the controller attached with them.
fn host_config(keys: &Keys, port: u16, bidi: bool) -> PathBuf {
    let cfg = json!({"subsystems": [
        keys.keyring(&["key0", "ckey0"]),
        {"subsystem": "bdev", "config": [{"method": "bdev_nvme_attach_controller",
            "params": attach(port, "key0", bidi.then_some("ckey0"))}]},
    ]});
    let p = keys.dir.path().join(format!("host-{bidi}.json"));
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

fn verify_with_our_initiator(host_cfg: &Path, what: &str) {
    let bp = start_bdevperf(host_cfg, "Nvme0n1");
    let r = perform_tests(&bp, 1).join().unwrap();
    assert_clean(
        &r.unwrap_or_else(|e| panic!("{what}: {e:?}\n{}", bp.log())),
        what,
    );
}

/// `bdev_tgt` as an initiator with every key in its keyring.
fn host_daemon(keys: &Keys) -> Daemon {
    let cfg = json!({"subsystems": [keys.keyring(&["key0", "ckey0", "key1", "bad"])]});
    let p = keys.dir.path().join("host-daemon.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    Daemon::start(&["-m", "0x1", "--json", p.to_str().unwrap()])
}

fn has_bdev(d: &Daemon, name: &str) -> bool {
    d.call("bdev_get_bdevs", Some(json!({"name": name})))
        .is_ok()
}

#[test]
fn our_initiator_authenticates_to_our_target_and_rekeys() {
    let keys = Keys::new();
    let port = free_port();
    let tgt = Daemon::start(&[
        "-m",
        "0x1",
        "--json",
        target_config(&keys, port).to_str().unwrap(),
    ]);
    // bdevperf, unidirectional and bidirectional.
    verify_with_our_initiator(&host_config(&keys, port, false), "unidirectional");
    verify_with_our_initiator(&host_config(&keys, port, true), "bidirectional");

    let host = host_daemon(&keys);
    // A wrong host key, a wrong controller key: refused, no bdev.
    for (k, c, what) in [
        ("bad", None, "wrong host key"),
        ("key0", Some("bad"), "wrong controller key"),
    ] {
        let e = host
            .call("bdev_nvme_attach_controller", Some(attach(port, k, c)))
            .expect_err(what);
        keys.assert_absent(&format!("{e:?}"), what);
        assert!(!has_bdev(&host, "Nvme0n1"), "{what}: a bdev appeared");
    }
    // SPDK's -ENOKEY for a key name the keyring lacks.
    let e = host
        .call(
            "bdev_nvme_attach_controller",
            Some(attach(port, "nokey", None)),
        )
        .unwrap_err();
    assert_eq!(e.code, -libc::ENOKEY, "{e:?}");

    // The right keys attach; the saved config names them.
    let names = host.ok(
        "bdev_nvme_attach_controller",
        Some(attach(port, "key0", Some("ckey0"))),
    );
    assert_eq!(names, json!(["Nvme0n1"]));
    assert!(has_bdev(&host, "Nvme0n1"));
    let saved = host.ok("framework_get_config", Some(json!({"name": "bdev"})));
    let a = saved
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["method"] == "bdev_nvme_attach_controller")
        .unwrap();
    assert_eq!(a["params"]["dhchap_key"], "key0", "{a}");
    assert_eq!(a["params"]["dhchap_ctrlr_key"], "ckey0", "{a}");
    keys.assert_absent(&saved.to_string(), "host save_config");

    // Re-keying: the target first, then the host (its queues
    // authenticate again with the new key).
    assert_eq!(
        tgt.ok(
            "nvmf_subsystem_set_keys",
            Some(json!({"nqn": NQN, "host": HOST, "dhchap_key": "key1"})),
        ),
        true
    );
    assert_eq!(
        host.ok(
            "bdev_nvme_set_keys",
            Some(json!({"name": "Nvme0", "dhchap_key": "key1"})),
        ),
        true
    );
    assert!(has_bdev(&host, "Nvme0n1"));
    let c = host.ok("bdev_nvme_get_controllers", Some(json!({"name": "Nvme0"})));
    assert_eq!(c[0]["ctrlrs"][0]["state"], "enabled", "{c}");
    // SPDK's errors: no such controller, no such key.
    let e = host
        .call(
            "bdev_nvme_set_keys",
            Some(json!({"name": "Nope", "dhchap_key": "key1"})),
        )
        .unwrap_err();
    assert_eq!(e.code, -libc::ENODEV, "{e:?}");
    let e = host
        .call(
            "bdev_nvme_set_keys",
            Some(json!({"name": "Nvme0", "dhchap_key": "nokey"})),
        )
        .unwrap_err();
    assert_eq!(e.code, -libc::ENOKEY, "{e:?}");
    // The old key no longer authenticates.
    let e = host
        .call(
            "bdev_nvme_set_keys",
            Some(json!({"name": "Nvme0", "dhchap_key": "key0"})),
        )
        .unwrap_err();
    keys.assert_absent(&format!("{e:?}"), "set_keys refused");

    // The target's view: names only, never material.
    let subs = tgt.ok("nvmf_get_subsystems", None);
    let sub = subs
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["nqn"] == NQN)
        .unwrap();
    assert_eq!(sub["hosts"], json!([{"nqn": HOST, "dhchap_key": "key1"}]));
    let nvmf = tgt.ok("framework_get_config", Some(json!({"name": "nvmf"})));
    keys.assert_absent(&nvmf.to_string(), "target save_config");
    keys.assert_absent(&tgt.log(), "target log");
    keys.assert_absent(&host.log(), "host log");
}

/// The reference SPDK build's directory (`bin` and `examples` under it),
/// if `need` is built there.
fn spdk_ref(need: &str) -> Option<PathBuf> {
    crate::ref_spdk::build_dir(&[need])
}

#[test]
fn spdk_bdevperf_authenticates_to_our_target() {
    let Some(spdk) = spdk_ref("examples/bdevperf") else {
        eprintln!(
            "SKIPPED spdk_bdevperf_authenticates_to_our_target: reference SPDK bdevperf not \
             found (SPDK_REF_DIR or ~/.cache/bdevkit-ref-spdk/build/examples/bdevperf)"
        );
        return;
    };
    let keys = Keys::new();
    let port = free_port();
    let _tgt = Daemon::start(&[
        "-m",
        "0x1",
        "--json",
        target_config(&keys, port).to_str().unwrap(),
    ]);
    for bidi in [false, true] {
        let cfg = host_config(&keys, port, bidi);
        spdk_bdevperf_verifies(
            &spdk,
            &cfg,
            &format!("(bidirectional {bidi}) against our target"),
        );
    }
}

#[test]
fn our_initiator_authenticates_to_spdk_nvmf_tgt() {
    let Some(spdk) = spdk_ref("bin/nvmf_tgt") else {
        eprintln!(
            "SKIPPED our_initiator_authenticates_to_spdk_nvmf_tgt: reference SPDK nvmf_tgt not \
             found (SPDK_REF_DIR or ~/.cache/bdevkit-ref-spdk/build/bin/nvmf_tgt)"
        );
        return;
    };
    let keys = Keys::new();
    let port = free_port();
    let cfg = target_config(&keys, port);
    let _tgt = NvmfTgt::start(&spdk.join("bin/nvmf_tgt"), keys.dir.path(), &cfg, port);
    verify_with_our_initiator(&host_config(&keys, port, false), "to SPDK, unidirectional");
    verify_with_our_initiator(&host_config(&keys, port, true), "to SPDK, bidirectional");
    // A wrong key is refused by SPDK.
    let host = host_daemon(&keys);
    host.call(
        "bdev_nvme_attach_controller",
        Some(attach(port, "bad", None)),
    )
    .expect_err("SPDK took a wrong key");
}
