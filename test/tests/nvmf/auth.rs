//! DH-HMAC-CHAP on the target (issue 26, point 2 and its bad input): a
//! PDU-level host runs `bdevkit_nvme_auth::Host` over Authentication Send
//! / Receive. Unidirectional and bidirectional, sha256 + ffdhe2048 and
//! sha512 + null; a wrong key (Failure1, Failed), a wrong controller key
//! (the host refuses), commands before authentication (Authentication
//! Required), an I/O queue that skips it, replayed, truncated and
//! out-of-sequence messages, re-keying with `set_keys`, the digests of
//! `nvmf_set_config`; and other hosts keep being served.

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use bdevkit_keyring::Keyring;
use bdevkit_nvme_auth::{DhGroup, HashFn, HostConfig, HostStep, Message, Reason, Secret};
use bdevkit_nvme_spec::admin::{Identify, KeepAlive};
use bdevkit_nvme_spec::cmd::Command;
use bdevkit_nvme_spec::fabrics::{Auth, ConnectResponse, CNTLID_DYNAMIC};
use bdevkit_nvme_spec::io::{BlockRange, Read};
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvme_spec::{Cqe, Status};
use bdevkit_nvmf::SetConfigParams;
use bdevkit_test::nvmf::{tcp_transport, Host, NvmfEnv, Reply, HOSTNQN, STRANGER, SUBNQN};

const OFF: Digests = Digests {
    header: false,
    data: false,
};

type Pdu = Host<TcpStream>;

/// A target whose [`HOSTNQN`] has key `key0` (and `ckey0` as the
/// controller key when `bidi`), [`STRANGER`] allowed without a key.
struct Env {
    t: NvmfEnv,
    ring: Arc<Keyring>,
    dir: tempfile::TempDir,
    key: Secret,
    ckey: Secret,
}

fn write_key(dir: &Path, name: &str, s: &Secret) -> std::path::PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&p)
        .unwrap();
    f.write_all(s.to_interchange().as_bytes()).unwrap();
    p
}

impl Env {
    fn new(bidi: bool) -> Env {
        Env::with(tcp_transport(), bidi)
    }

    fn with(tp: bdevkit_nvmf::CreateTransportParams, bidi: bool) -> Env {
        let t = NvmfEnv::start_with("0x1", tp);
        let ring = Arc::new(Keyring::new());
        t.mgr().provide(Arc::clone(&ring));
        let dir = tempfile::tempdir().unwrap();
        let key = Secret::generate(32, None).unwrap();
        let ckey = Secret::generate(48, Some(HashFn::Sha384)).unwrap();
        let e = Env {
            t,
            ring,
            dir,
            key,
            ckey,
        };
        e.add_key("key0", &e.key.clone());
        e.add_key("ckey0", &e.ckey.clone());
        e.set_keys(HOSTNQN, Some("key0"), bidi.then_some("ckey0"))
            .unwrap();
        e.t.call(|t, tx| tx.send(t.add_host(SUBNQN, STRANGER, None)).unwrap())
            .unwrap();
        e
    }

    fn add_key(&self, name: &str, s: &Secret) {
        let p = write_key(self.dir.path(), name, s);
        self.ring.add_file_key(name, &p).unwrap();
    }

    fn set_keys(
        &self,
        host: &str,
        key: Option<&str>,
        ckey: Option<&str>,
    ) -> bdevkit_nvmf::Result<()> {
        let (h, k, c) = (
            host.to_string(),
            key.map(String::from),
            ckey.map(String::from),
        );
        self.t.call(move |t, tx| {
            tx.send(t.set_keys(SUBNQN, &h, k.as_deref(), c.as_deref()))
                .unwrap();
        })
    }

    /// What the host authenticates with: our key, the controller's key
    /// when `bidi`.
    fn host_cfg(&self, bidi: bool, hash: HashFn, group: DhGroup) -> HostConfig {
        HostConfig {
            hostnqn: HOSTNQN.into(),
            subnqn: SUBNQN.into(),
            key: self.key.clone(),
            ctrl_key: bidi.then(|| self.ckey.clone()),
            hashes: vec![hash],
            groups: vec![group],
        }
    }

    /// Queue `qid` of `cntlid` connected as `host`; the Connect's
    /// response.
    fn connect(&self, qid: u16, cntlid: u16, host: &str) -> (Pdu, ConnectResponse) {
        self.connect_kato(qid, cntlid, host, 0)
    }

    /// As [`Env::connect`], with a keep alive timeout (admin queue).
    fn connect_kato(
        &self,
        qid: u16,
        cntlid: u16,
        host: &str,
        kato_ms: u32,
    ) -> (Pdu, ConnectResponse) {
        let mut h = self.t.host();
        h.icreq(OFF).unwrap();
        let c = h.connect(qid, 32, kato_ms, cntlid, SUBNQN, host).unwrap();
        assert!(c.status().is_success(), "connect: {}", c.status());
        (h, ConnectResponse::from_dword(c.dw0.get()))
    }
}

fn send(h: &mut Pdu, msg: &[u8]) -> Cqe {
    let cid = h.next_cid();
    let sqe = Auth::send(u32::try_from(msg.len()).unwrap()).to_sqe(cid);
    h.run(&sqe, Some(msg), 0, 4096).unwrap().0
}

fn receive(h: &mut Pdu) -> Vec<u8> {
    let cid = h.next_cid();
    let (c, d) = h
        .run(&Auth::receive(4096).to_sqe(cid), None, 4096, 0)
        .unwrap();
    assert!(c.status().is_success(), "auth receive: {}", c.status());
    d
}

/// The Failure1 in `d`, its reason.
fn failure1(d: &[u8]) -> Reason {
    match Message::decode(d) {
        Ok(Message::Failure {
            which: 1, reason, ..
        }) => reason,
        other => panic!("expected Failure1, got {other:?}"),
    }
}

/// Runs a whole transaction; `Err` with the reason of its failure (and
/// what the host sent last).
fn authenticate(h: &mut Pdu, cfg: HostConfig) -> Result<(), Reason> {
    let mut a = bdevkit_nvme_auth::Host::new(cfg, 1, bdevkit_nvme_auth::random_seqnum().unwrap());
    assert!(send(h, &a.negotiate()).status().is_success());
    loop {
        let d = receive(h);
        match a.on_message(&d) {
            Ok(HostStep::SendThenReceive(m)) => {
                assert!(send(h, &m).status().is_success());
            }
            Ok(HostStep::SendAndFinish(m)) => {
                assert!(send(h, &m).status().is_success());
                return Ok(());
            }
            Ok(HostStep::Finished) => return Ok(()),
            Err(f) => {
                if let Some(m) = f.failure2 {
                    let _ = send(h, &m);
                }
                return Err(f.reason);
            }
        }
    }
}

fn identify(h: &mut Pdu) -> Status {
    h.exec(&Identify::controller(), 4096).unwrap().0.status()
}

fn read(h: &mut Pdu) -> Status {
    h.exec(&Read::new(1, BlockRange::new(0, 1).unwrap()), 512)
        .unwrap()
        .0
        .status()
}

/// The target closes the queue (after what it still had to send).
fn closes(h: &mut Pdu, what: &str) {
    loop {
        match h.recv() {
            Ok(Reply::Closed) => return,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Ok(Reply::Resp(_)) => {}
            other => panic!("{what}: the queue stays open: {other:?}"),
        }
    }
}

/// A host without a key still connects and works beside the others.
fn stranger_works(e: &Env) {
    let (mut h, r) = e.connect(0, CNTLID_DYNAMIC, STRANGER);
    assert!(!r.auth_required());
    h.enable().unwrap();
    assert!(identify(&mut h).is_success());
}

fn admin_authenticated(e: &Env, bidi: bool, hash: HashFn, group: DhGroup) -> (Pdu, u16) {
    let (mut h, r) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    assert!(r.auth_required(), "no AUTHREQ.ATR for a host with a key");
    authenticate(&mut h, e.host_cfg(bidi, hash, group)).expect("authentication");
    h.enable().unwrap();
    (h, r.cntlid)
}

#[test]
fn unidirectional_sha256_ffdhe2048() {
    let e = Env::new(false);
    let (mut h, r) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    assert!(r.auth_required());
    // Nothing but authentication before it: the property, the identify.
    assert_eq!(
        identify(&mut h),
        Status::AUTHENTICATION_REQUIRED,
        "identify before authentication"
    );
    assert!(h.enable().is_err(), "Property Set before authentication");
    authenticate(
        &mut h,
        e.host_cfg(false, HashFn::Sha256, DhGroup::Ffdhe2048),
    )
    .unwrap();
    h.enable().unwrap();
    assert!(identify(&mut h).is_success());
    // Every I/O queue authenticates too.
    let (mut io, ir) = e.connect(1, r.cntlid, HOSTNQN);
    assert!(ir.auth_required(), "I/O queue without ATR");
    assert_eq!(read(&mut io), Status::AUTHENTICATION_REQUIRED);
    authenticate(
        &mut io,
        e.host_cfg(false, HashFn::Sha256, DhGroup::Ffdhe2048),
    )
    .unwrap();
    assert!(read(&mut io).is_success());
    stranger_works(&e);
}

#[test]
fn bidirectional_sha512_null() {
    let e = Env::new(true);
    let (mut h, cntlid) = admin_authenticated(&e, true, HashFn::Sha512, DhGroup::Null);
    assert!(identify(&mut h).is_success());
    let (mut io, _) = e.connect(1, cntlid, HOSTNQN);
    authenticate(&mut io, e.host_cfg(true, HashFn::Sha512, DhGroup::Null)).unwrap();
    assert!(read(&mut io).is_success());
    // Bidirectional with a DH group as well.
    let (mut h2, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    authenticate(
        &mut h2,
        e.host_cfg(true, HashFn::Sha384, DhGroup::Ffdhe3072),
    )
    .unwrap();
    h2.enable().unwrap();
    assert!(identify(&mut h2).is_success());
}

#[test]
fn wrong_host_key_is_refused_with_failure1() {
    let e = Env::new(false);
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut cfg = e.host_cfg(false, HashFn::Sha256, DhGroup::Ffdhe2048);
    cfg.key = Secret::generate(32, None).unwrap();
    assert_eq!(authenticate(&mut h, cfg), Err(Reason::Failed));
    closes(&mut h, "after Failure1");
    // The target goes on serving: the right key, and a host without one.
    let (mut good, _) = admin_authenticated(&e, false, HashFn::Sha256, DhGroup::Null);
    assert!(identify(&mut good).is_success());
    stranger_works(&e);
}

#[test]
fn wrong_controller_key_is_refused_by_the_host() {
    let e = Env::new(true);
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut cfg = e.host_cfg(true, HashFn::Sha256, DhGroup::Null);
    cfg.ctrl_key = Some(Secret::generate(48, None).unwrap());
    assert_eq!(authenticate(&mut h, cfg), Err(Reason::Failed));
    // The host sent Failure2: the target ends the queue.
    closes(&mut h, "after Failure2");
    stranger_works(&e);
}

#[test]
fn a_host_asking_for_a_controller_key_the_target_lacks_is_refused() {
    let e = Env::new(false);
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    assert_eq!(
        authenticate(&mut h, e.host_cfg(true, HashFn::Sha256, DhGroup::Null)),
        Err(Reason::Failed)
    );
    closes(&mut h, "bidirectional without a controller key");
}

#[test]
fn io_queue_that_skips_authentication_is_refused() {
    let e = Env::new(false);
    let (mut admin, cntlid) = admin_authenticated(&e, false, HashFn::Sha256, DhGroup::Null);
    let (mut io, r) = e.connect(1, cntlid, HOSTNQN);
    assert!(r.auth_required());
    for _ in 0..3 {
        assert_eq!(read(&mut io), Status::AUTHENTICATION_REQUIRED);
    }
    // The admin queue is unaffected.
    assert!(identify(&mut admin).is_success());
}

#[test]
fn out_of_sequence_messages_get_failure1() {
    let e = Env::new(false);
    // A Receive before any Negotiate.
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    assert_eq!(failure1(&receive(&mut h)), Reason::IncorrectProtocolMessage);
    closes(&mut h, "receive first");
    // Success2 first.
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    assert!(send(&mut h, &Message::Success2 { tid: 1 }.encode())
        .status()
        .is_success());
    assert_eq!(failure1(&receive(&mut h)), Reason::IncorrectProtocolMessage);
    closes(&mut h, "success2 first");
    // Two Negotiates.
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut a =
        bdevkit_nvme_auth::Host::new(e.host_cfg(false, HashFn::Sha256, DhGroup::Null), 3, 9);
    let n = a.negotiate();
    assert!(send(&mut h, &n).status().is_success());
    assert!(send(&mut h, &n).status().is_success());
    assert_eq!(failure1(&receive(&mut h)), Reason::IncorrectProtocolMessage);
    closes(&mut h, "negotiate twice");
    stranger_works(&e);
}

#[test]
fn truncated_and_garbage_messages_get_failure1() {
    let e = Env::new(false);
    let mut a =
        bdevkit_nvme_auth::Host::new(e.host_cfg(false, HashFn::Sha256, DhGroup::Null), 1, 1);
    let n = a.negotiate();
    for bad in [&n[..n.len() - 1], &n[..3], &[0xff; 40][..]] {
        let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
        assert!(send(&mut h, bad).status().is_success());
        let r = failure1(&receive(&mut h));
        assert!(
            matches!(
                r,
                Reason::IncorrectPayload | Reason::IncorrectProtocolMessage
            ),
            "{r:?}"
        );
        closes(&mut h, "bad negotiate");
    }
    // A truncated reply, in its place in the sequence.
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut a =
        bdevkit_nvme_auth::Host::new(e.host_cfg(false, HashFn::Sha256, DhGroup::Ffdhe2048), 1, 1);
    assert!(send(&mut h, &a.negotiate()).status().is_success());
    let Ok(HostStep::SendThenReceive(reply)) = a.on_message(&receive(&mut h)) else {
        panic!("no reply");
    };
    assert!(send(&mut h, &reply[..reply.len() / 2])
        .status()
        .is_success());
    assert_eq!(failure1(&receive(&mut h)), Reason::IncorrectPayload);
    closes(&mut h, "truncated reply");
    stranger_works(&e);
}

#[test]
fn a_replayed_reply_is_refused() {
    let e = Env::new(false);
    let cfg = e.host_cfg(false, HashFn::Sha256, DhGroup::Null);
    // A good transaction, its reply kept.
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut a = bdevkit_nvme_auth::Host::new(cfg.clone(), 1, 1);
    assert!(send(&mut h, &a.negotiate()).status().is_success());
    let Ok(HostStep::SendThenReceive(reply)) = a.on_message(&receive(&mut h)) else {
        panic!("no reply");
    };
    assert!(send(&mut h, &reply).status().is_success());
    assert!(matches!(
        Message::decode(&receive(&mut h)),
        Ok(Message::Success1 { .. })
    ));
    h.enable().unwrap();
    // On another queue the reply answers a challenge it was not made for.
    let (mut other, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut b = bdevkit_nvme_auth::Host::new(cfg, 1, 1);
    assert!(send(&mut other, &b.negotiate()).status().is_success());
    let _challenge = receive(&mut other);
    assert!(send(&mut other, &reply).status().is_success());
    assert_eq!(failure1(&receive(&mut other)), Reason::Failed);
    closes(&mut other, "replayed reply");
    // The first queue still works.
    assert!(identify(&mut h).is_success());
}

#[test]
fn bad_command_fields_are_invalid_field() {
    let e = Env::new(false);
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut a =
        bdevkit_nvme_auth::Host::new(e.host_cfg(false, HashFn::Sha256, DhGroup::Null), 1, 1);
    let n = a.negotiate();
    let mut wrong = Auth::send(u32::try_from(n.len()).unwrap());
    wrong.secp = 0x01;
    let cid = h.next_cid();
    let (c, _) = h.run(&wrong.to_sqe(cid), Some(&n), 0, 4096).unwrap();
    assert_eq!(c.status(), Status::INVALID_FIELD.with_dnr());
    // TL that is not the data's length.
    let cid = h.next_cid();
    let (c, _) = h
        .run(&Auth::send(7).to_sqe(cid), Some(&n), 0, 4096)
        .unwrap();
    assert_eq!(c.status(), Status::INVALID_FIELD.with_dnr());
    // The queue can still authenticate.
    authenticate(&mut h, e.host_cfg(false, HashFn::Sha256, DhGroup::Null)).unwrap();
}

#[test]
fn set_keys_rekeys_new_queues_and_reauthentication() {
    let e = Env::new(false);
    let (mut h, _) = admin_authenticated(&e, false, HashFn::Sha256, DhGroup::Null);
    let new = Secret::generate(64, Some(HashFn::Sha512)).unwrap();
    e.add_key("key1", &new);
    e.set_keys(HOSTNQN, Some("key1"), None).unwrap();
    // The queue that authenticated keeps working.
    assert!(identify(&mut h).is_success());
    // It re-authenticates with the new key; the old one is refused.
    let mut cfg = e.host_cfg(false, HashFn::Sha256, DhGroup::Null);
    cfg.key = new.clone();
    authenticate(&mut h, cfg.clone()).unwrap();
    assert!(identify(&mut h).is_success());
    let (mut old, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    assert_eq!(
        authenticate(&mut old, e.host_cfg(false, HashFn::Sha256, DhGroup::Null)),
        Err(Reason::Failed)
    );
    let (mut fresh, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    authenticate(&mut fresh, cfg).unwrap();
    // Keys cleared: no authentication asked any more.
    e.set_keys(HOSTNQN, None, None).unwrap();
    let (mut plain, r) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    assert!(!r.auth_required());
    plain.enable().unwrap();
    // SPDK's refusals: no such key, a controller key alone, no such host.
    assert!(matches!(
        e.set_keys(HOSTNQN, Some("nokey"), None),
        Err(bdevkit_nvmf::Error::NoKey(_))
    ));
    assert!(e.set_keys(HOSTNQN, None, Some("ckey0")).is_err());
    assert!(matches!(
        e.set_keys("nqn.2014-08.org.nvmexpress:uuid:99", Some("key0"), None),
        Err(bdevkit_nvmf::Error::NoHost(_))
    ));
}

#[test]
fn configured_digests_and_groups_are_applied() {
    let e = Env::new(false);
    e.t.call(|t, tx| {
        let p = SetConfigParams {
            dhchap_digests: Some(vec!["sha384".into()]),
            dhchap_dhgroups: Some(vec!["ffdhe3072".into()]),
            ..SetConfigParams::default()
        };
        tx.send(t.set_config(&p)).unwrap();
    })
    .unwrap();
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut a =
        bdevkit_nvme_auth::Host::new(e.host_cfg(false, HashFn::Sha256, DhGroup::Null), 1, 1);
    assert!(send(&mut h, &a.negotiate()).status().is_success());
    assert_eq!(failure1(&receive(&mut h)), Reason::HashUnusable);
    closes(&mut h, "digest not allowed");
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    let mut a =
        bdevkit_nvme_auth::Host::new(e.host_cfg(false, HashFn::Sha384, DhGroup::Null), 1, 1);
    assert!(send(&mut h, &a.negotiate()).status().is_success());
    assert_eq!(failure1(&receive(&mut h)), Reason::DhGroupUnusable);
    closes(&mut h, "group not allowed");
    let (mut h, _) = e.connect(0, CNTLID_DYNAMIC, HOSTNQN);
    authenticate(
        &mut h,
        e.host_cfg(false, HashFn::Sha384, DhGroup::Ffdhe3072),
    )
    .unwrap();
}

#[test]
fn key_names_in_json_never_material() {
    let e = Env::new(true);
    let subs =
        e.t.call(|t, tx| tx.send(t.subsystems_json(Some(SUBNQN))).unwrap())
            .unwrap();
    let hosts = &subs[0]["hosts"];
    let me = hosts
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["nqn"] == HOSTNQN)
        .unwrap();
    assert_eq!(me["dhchap_key"], "key0");
    assert_eq!(me["dhchap_ctrlr_key"], "ckey0");
    let cfg = e.t.call(|t, tx| tx.send(t.config_json()).unwrap());
    let add = cfg
        .iter()
        .find(|m| m["method"] == "nvmf_subsystem_add_host" && m["params"]["host"] == HOSTNQN)
        .expect("add_host in save_config");
    assert_eq!(add["params"]["dhchap_key"], "key0");
    assert_eq!(add["params"]["dhchap_ctrlr_key"], "ckey0");
    let all = serde_json::to_string(&(subs, cfg)).unwrap();
    for secret in [e.key.to_interchange(), e.ckey.to_interchange()] {
        assert!(!all.contains(&secret), "key material in JSON");
        assert!(!all.contains(secret.split(':').nth(2).unwrap()));
    }
}

#[test]
fn an_io_queue_that_never_authenticates_closes_at_the_keep_alive_timeout() {
    // A 1 s keep alive timeout (SPDK rounds min_kato up to kas units).
    let mut tp = tcp_transport();
    tp.kas = Some(10);
    tp.min_kato = Some(1000);
    let e = Env::with(tp, false);
    let (mut admin, r) = e.connect_kato(0, CNTLID_DYNAMIC, HOSTNQN, 1000);
    authenticate(&mut admin, e.host_cfg(false, HashFn::Sha256, DhGroup::Null)).unwrap();
    admin.enable().unwrap();
    let (mut io, ir) = e.connect(1, r.cntlid, HOSTNQN);
    assert!(ir.auth_required());
    // The admin queue keeps its controller alive meanwhile.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let keeper = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::Acquire) {
            let (c, _) = admin.exec(&KeepAlive, 0).unwrap();
            assert!(c.status().is_success(), "keep alive: {}", c.status());
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        admin
    });
    closes(&mut io, "an I/O queue that never authenticated");
    stop.store(true, std::sync::atomic::Ordering::Release);
    let mut admin = keeper.join().unwrap();
    // The controller lived on: the close was the queue's own timeout.
    assert!(identify(&mut admin).is_success());
}
