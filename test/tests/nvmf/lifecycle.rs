//! Connections and controllers over time: keep alive expiry tears a dead
//! host's controller down, graceful (Disconnect) and abrupt (socket gone
//! with I/O in flight) ends, namespace changes delivered as asynchronous
//! events (add, remove, bdev hot-remove), AER limits and Abort.

use std::time::{Duration, Instant};

use bdevkit_nvme_spec::admin::{Abort, AsyncEventRequest, GetLogPage, Identify, KeepAlive};
use bdevkit_nvme_spec::cmd::Command;
use bdevkit_nvme_spec::fabrics::Disconnect;
use bdevkit_nvme_spec::identify::NamespaceList;
use bdevkit_nvme_spec::io::{BlockRange, Read};
use bdevkit_nvme_spec::log::{lid, AsyncEvent};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::Status;
use bdevkit_nvmf::params::NamespaceParams;
use bdevkit_nvmf::CreateTransportParams;
use bdevkit_test::nvmf::{tcp_transport, NvmfEnv, Reply, SUBNQN};
use serde_json::Value;

const OFF: Digests = Digests {
    header: false,
    data: false,
};

/// Polls `f` until it holds (a generous deadline: reached only when broken).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn controllers(env: &NvmfEnv) -> Vec<Value> {
    env.call(|t, tx| {
        let _ = tx.send(t.controllers_json(SUBNQN).unwrap());
    })
}

fn qpairs(env: &NvmfEnv) -> Vec<Value> {
    env.call(|t, tx| {
        t.qpairs_json(SUBNQN, move |r| {
            let _ = tx.send(r.unwrap());
        });
    })
}

/// Keep alive timeout of the host that keeps its controller alive.
const ALIVE_KATO_MS: u32 = 3000;

#[test]
fn keep_alive_timeout_tears_the_controller_down() {
    let tp = CreateTransportParams {
        kas: Some(1),
        min_kato: Some(1000),
        ..tcp_transport()
    };
    let env = NvmfEnv::start_with("0x1", tp);
    // A host that keeps its controller alive.
    let mut alive = env.host();
    alive.icreq(OFF).unwrap();
    // Its keep alive timeout is 3 s, the silent one's 1 s: the keep alives
    // sent every 100 ms keep it through a stall of nearly 3 s.
    let c = alive
        .connect(
            0,
            32,
            ALIVE_KATO_MS,
            0xffff,
            SUBNQN,
            bdevkit_test::nvmf::HOSTNQN,
        )
        .unwrap();
    assert!(c.status().is_success());
    alive.enable().unwrap();
    // A host that goes silent, with an I/O queue.
    let mut dead = env.host();
    dead.icreq(OFF).unwrap();
    let c = dead
        .connect(0, 32, 1000, 0xffff, SUBNQN, bdevkit_test::nvmf::HOSTNQN)
        .unwrap();
    let dead_id = bdevkit_nvme_spec::fabrics::ConnectResponse::from_dword(c.dw0.get()).cntlid;
    dead.enable().unwrap();
    let mut dead_io = env.io(dead_id, OFF);
    assert_eq!(controllers(&env).len(), 2);
    // Keep the live one alive until the silent one is gone and for longer
    // than the live one's own timeout (so only its keep alives kept it),
    // not for a fixed time that a loaded machine may not give either.
    let t0 = Instant::now();
    let mut sent = 0u32;
    while controllers(&env).len() == 2
        || t0.elapsed() < Duration::from_millis(2 * u64::from(ALIVE_KATO_MS))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the silent controller stayed"
        );
        let (c, _) = alive.exec(&KeepAlive, 0).unwrap();
        assert!(c.status().is_success());
        sent += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(sent > 0);
    // The silent host's queues were closed by the target.
    assert_eq!(dead.recv().unwrap(), Reply::Closed);
    assert_eq!(dead_io.recv().unwrap(), Reply::Closed);
    eventually("one controller left", || controllers(&env).len() == 1);
    let (c, _) = alive.exec(&Identify::controller(), 4096).unwrap();
    assert!(c.status().is_success());
}

#[test]
fn graceful_and_abrupt_disconnects() {
    let env = NvmfEnv::start();
    let (admin, cntlid) = env.admin(OFF);
    // Disconnect on an I/O queue: answered, then closed.
    let mut io = env.io(cntlid, OFF);
    let cid = io.next_cid();
    let mut s = Disconnect::default().to_sqe(cid);
    s.set_sgl1(&SglDescriptor::transport_data_block(0));
    io.send_capsule(&s, None).unwrap();
    match io.recv().unwrap() {
        Reply::Resp(c) => assert!(c.status().is_success()),
        r => panic!("{r:?}"),
    }
    assert_eq!(io.recv().unwrap(), Reply::Closed);
    // An I/O queue that vanishes with reads in flight: drained, gone.
    let mut io = env.io(cntlid, OFF);
    for i in 0..32u16 {
        let mut r = Read::new(1, BlockRange::new(u64::from(i) * 256, 256).unwrap()).to_sqe(i + 1);
        r.set_sgl1(&SglDescriptor::transport_data_block(131_072));
        io.send_capsule(&r, None).unwrap();
    }
    drop(io);
    eventually("only the admin queue left", || {
        let q = qpairs(&env);
        q.len() == 1 && q[0]["qid"] == 0
    });
    assert_eq!(controllers(&env)[0]["num_io_qpairs"], 0);
    // The same qid connects again.
    let mut io = env.io(cntlid, OFF);
    let (c, _) = io
        .exec(&Read::new(1, BlockRange::new(0, 1).unwrap()), 512)
        .unwrap();
    assert!(c.status().is_success());
    // The admin queue goes: the controller and its I/O queue go too.
    let _ = admin.sock.shutdown(std::net::Shutdown::Both);
    assert_eq!(io.recv().unwrap(), Reply::Closed);
    eventually("no controller", || controllers(&env).is_empty());
}

fn post_aer(h: &mut bdevkit_test::nvmf::Host<std::net::TcpStream>) -> u16 {
    let cid = h.next_cid();
    let mut s = AsyncEventRequest.to_sqe(cid);
    s.set_sgl1(&SglDescriptor::transport_data_block(0));
    h.send_capsule(&s, None).unwrap();
    cid
}

fn active_ns(h: &mut bdevkit_test::nvmf::Host<std::net::TcpStream>) -> Vec<u32> {
    let (c, d) = h.exec(&Identify::active_ns_list(0), 4096).unwrap();
    assert!(c.status().is_success());
    NamespaceList::read_from_bytes(&d).unwrap().iter().collect()
}

/// The changed namespace list (log page 04h, read with RAE clear).
fn changed_ns(h: &mut bdevkit_test::nvmf::Host<std::net::TcpStream>) -> Vec<u32> {
    let (c, d) = h
        .exec(
            &GetLogPage::new(lid::CHANGED_NS_LIST, 0xffff_ffff, 4096).unwrap(),
            4096,
        )
        .unwrap();
    assert!(c.status().is_success());
    NamespaceList::read_from_bytes(&d).unwrap().iter().collect()
}

#[test]
fn namespace_changes_arrive_as_events() {
    let env = NvmfEnv::start();
    let (mut admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    assert_eq!(active_ns(&mut admin), vec![1]);
    let aer = post_aer(&mut admin);
    // A namespace added by RPC.
    let mgr = env.mgr().clone();
    let nsid = env.call(move |t, tx| {
        bdevkit_malloc::create(
            &mgr,
            bdevkit_malloc::MallocCreateParams::new("Malloc1", 4096, 256),
        )
        .unwrap();
        let mut p = NamespaceParams::new("Malloc1");
        p.nsid = Some(5);
        t.add_ns(SUBNQN, &p, move |r| {
            let _ = tx.send(r.unwrap());
        });
    });
    assert_eq!(nsid, 5);
    match admin.recv().unwrap() {
        Reply::Resp(c) => {
            assert_eq!(c.cid.get(), aer);
            assert_eq!(c.dw0.get(), AsyncEvent::ns_changed().to_dword());
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(changed_ns(&mut admin), vec![5]);
    assert_eq!(active_ns(&mut admin), vec![1, 5]);
    let (c, _) = io
        .exec(&Read::new(5, BlockRange::new(0, 1).unwrap()), 4096)
        .unwrap();
    assert!(c.status().is_success());
    // The bdev is deleted under the connected host: hot-remove.
    let aer = post_aer(&mut admin);
    let mgr = env.mgr().clone();
    env.call(move |_, tx| {
        mgr.unregister_by_name("Malloc1", "malloc", move |r| {
            let _ = tx.send(r.is_ok());
        });
    });
    match admin.recv().unwrap() {
        Reply::Resp(c) => {
            assert_eq!(c.cid.get(), aer);
            assert_eq!(c.dw0.get(), AsyncEvent::ns_changed().to_dword());
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(active_ns(&mut admin), vec![1]);
    let (c, _) = io
        .exec(&Read::new(5, BlockRange::new(0, 1).unwrap()), 4096)
        .unwrap();
    assert!(c.status().is(Status::INVALID_NAMESPACE));
    // The notice stays masked until the host reads log 04h: read it (RAE
    // clear), then namespace 1 goes by RPC and its notice arrives.
    assert_eq!(changed_ns(&mut admin), vec![5]);
    let aer = post_aer(&mut admin);
    env.call(|t, tx| {
        t.remove_ns(SUBNQN, 1, move |r| {
            let _ = tx.send(r.is_ok());
        });
    });
    match admin.recv().unwrap() {
        Reply::Resp(c) => assert_eq!(c.cid.get(), aer),
        r => panic!("{r:?}"),
    }
    assert!(active_ns(&mut admin).is_empty());
}

#[test]
fn aer_limit_and_abort() {
    let env = NvmfEnv::start();
    let (mut admin, _) = env.admin(OFF);
    let cids: Vec<u16> = (0..4).map(|_| post_aer(&mut admin)).collect();
    let fifth = post_aer(&mut admin);
    match admin.recv().unwrap() {
        Reply::Resp(c) => {
            assert_eq!(c.cid.get(), fifth);
            assert!(c.status().is(Status::AER_LIMIT_EXCEEDED));
        }
        r => panic!("{r:?}"),
    }
    // Abort the first AER: it ends aborted, the Abort succeeds.
    let cid = admin.next_cid();
    let mut s = Abort {
        sqid: 0,
        cid: cids[0],
    }
    .to_sqe(cid);
    s.set_sgl1(&SglDescriptor::transport_data_block(0));
    admin.send_capsule(&s, None).unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        match admin.recv().unwrap() {
            Reply::Resp(c) => seen.push((c.cid.get(), c.status(), c.dw0.get())),
            r => panic!("{r:?}"),
        }
    }
    assert!(seen
        .iter()
        .any(|(c, s, _)| *c == cids[0] && s.is(Status::ABORTED_BY_REQUEST)));
    assert!(seen
        .iter()
        .any(|(c, s, d)| *c == cid && s.is_success() && *d == 0));
    // Aborting something unknown: success, "not aborted".
    let (c, _) = admin.exec(&Abort { sqid: 1, cid: 999 }, 0).unwrap();
    assert!(c.status().is_success());
    assert_eq!(c.dw0.get() & 1, 1);
}
