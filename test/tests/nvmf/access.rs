//! Revoking access disconnects every controller that lost it, whatever
//! changed: `allow_any_host` switched off (issue 31, point 6: hosts not
//! on the list used to keep their queues and go on reading and writing),
//! a host removed from the list, a listener removed (the queues that came
//! through it, and the controllers whose admin queue did), the subsystem
//! deleted. Those that keep access go on working.
//!
//! Each check sends a command after the change and expects the close in
//! its place: the change completes (the RPC returns) before the command
//! is sent, and a queue pair looks at its controller before it reads.

use std::net::{SocketAddr, TcpStream};

use bdevkit_nvme_spec::admin::Identify;
use bdevkit_nvme_spec::cmd::Command;
use bdevkit_nvme_spec::fabrics::{ConnectResponse, CNTLID_DYNAMIC};
use bdevkit_nvme_spec::io::{BlockRange, Read};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvme_spec::Status;
use bdevkit_test::nvmf::{listener, Host, NvmfEnv, Reply, HOSTNQN, STRANGER, SUBNQN};

const OFF: Digests = Digests {
    header: false,
    data: false,
};

/// An enabled admin queue of `host` through `addr`, and its cntlid.
fn admin(addr: SocketAddr, host: &str) -> (Host<TcpStream>, u16) {
    let mut h = Host::tcp(addr);
    h.icreq(OFF).unwrap();
    let c = h.connect(0, 32, 0, CNTLID_DYNAMIC, SUBNQN, host).unwrap();
    assert!(c.status().is_success(), "admin connect: {}", c.status());
    let cntlid = ConnectResponse::from_dword(c.dw0.get()).cntlid;
    h.enable().unwrap();
    (h, cntlid)
}

/// I/O queue `qid` of controller `cntlid` through `addr`.
fn io(addr: SocketAddr, host: &str, cntlid: u16, qid: u16) -> Host<TcpStream> {
    let mut h = Host::tcp(addr);
    h.icreq(OFF).unwrap();
    let c = h.connect(qid, 128, 0, cntlid, SUBNQN, host).unwrap();
    assert!(c.status().is_success(), "io connect: {}", c.status());
    h
}

/// One read of block 0 works.
fn reads(h: &mut Host<TcpStream>) {
    let (c, d) = h
        .exec(&Read::new(1, BlockRange::new(0, 1).unwrap()), 512)
        .unwrap();
    assert!(c.status().is_success(), "read: {}", c.status());
    assert_eq!(d.len(), 512);
}

/// Identify Controller works.
fn identifies(h: &mut Host<TcpStream>) {
    let (c, _) = h.exec(&Identify::controller(), 4096).unwrap();
    assert!(c.status().is_success(), "identify: {}", c.status());
}

/// A read goes out and the target answers with the close, not data.
fn read_meets_close(h: &mut Host<TcpStream>, what: &str) {
    let cid = h.next_cid();
    let mut r = Read::new(1, BlockRange::new(0, 1).unwrap()).to_sqe(cid);
    r.set_sgl1(&SglDescriptor::transport_data_block(512));
    // The send may already fail (the target closed first).
    if h.send_capsule(&r, None).is_err() {
        return;
    }
    match h.recv() {
        Ok(Reply::Closed) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("{what}: the queue still works after access was revoked: {other:?}"),
    }
}

/// An admin command goes out and the target answers with the close.
fn admin_meets_close(h: &mut Host<TcpStream>, what: &str) {
    let cid = h.next_cid();
    let mut s = Identify::controller().to_sqe(cid);
    s.set_sgl1(&SglDescriptor::transport_data_block(4096));
    if h.send_capsule(&s, None).is_err() {
        return;
    }
    match h.recv() {
        Ok(Reply::Closed) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("{what}: the admin queue still works after access was revoked: {other:?}"),
    }
}

fn set_allow_any_host(env: &NvmfEnv, allow: bool) {
    env.call(move |t, tx| {
        let _ = tx.send(t.allow_any_host(SUBNQN, allow).map_err(|e| e.to_string()));
    })
    .unwrap();
}

#[test]
fn allow_any_host_off_disconnects_hosts_not_listed() {
    let env = NvmfEnv::start();
    set_allow_any_host(&env, true);
    let (mut s_admin, s_id) = admin(env.addr, STRANGER);
    let mut s_io = io(env.addr, STRANGER, s_id, 1);
    reads(&mut s_io);
    let (mut l_admin, l_id) = admin(env.addr, HOSTNQN);
    let mut l_io = io(env.addr, HOSTNQN, l_id, 1);
    reads(&mut l_io);
    set_allow_any_host(&env, false);
    read_meets_close(&mut s_io, "stranger's I/O queue");
    admin_meets_close(&mut s_admin, "stranger's admin queue");
    // The listed host goes on; the stranger may not come back.
    reads(&mut l_io);
    identifies(&mut l_admin);
    let mut h = Host::tcp(env.addr);
    h.icreq(OFF).unwrap();
    let c = h
        .connect(0, 32, 0, CNTLID_DYNAMIC, SUBNQN, STRANGER)
        .unwrap();
    assert!(
        c.status().is(Status::CONNECT_INVALID_HOST),
        "{}",
        c.status()
    );
    // Switching it on and off again with only the listed host connected
    // leaves it alone.
    set_allow_any_host(&env, true);
    set_allow_any_host(&env, false);
    reads(&mut l_io);
}

#[test]
fn removing_a_host_disconnects_it_unless_any_host_may_connect() {
    let env = NvmfEnv::start();
    let (mut admin_q, id) = admin(env.addr, HOSTNQN);
    let mut io_q = io(env.addr, HOSTNQN, id, 1);
    // With allow_any_host on the host keeps access when it leaves the list...
    set_allow_any_host(&env, true);
    env.call(|t, tx| {
        let _ = tx.send(t.remove_host(SUBNQN, HOSTNQN).map_err(|e| e.to_string()));
    })
    .unwrap();
    reads(&mut io_q);
    identifies(&mut admin_q);
    // ... and loses it when allow_any_host goes off.
    set_allow_any_host(&env, false);
    read_meets_close(&mut io_q, "removed host's I/O queue");
    admin_meets_close(&mut admin_q, "removed host's admin queue");
}

#[test]
fn removing_a_listener_disconnects_what_came_through_it() {
    let env = NvmfEnv::start();
    let port2 = bdevkit_test::nvmf::free_port();
    env.call(move |t, tx| {
        let _ = tx.send(
            t.add_listener(&listener(SUBNQN, port2))
                .map_err(|e| e.to_string()),
        );
    })
    .unwrap();
    let addr2: SocketAddr = format!("127.0.0.1:{port2}").parse().unwrap();
    // A: admin and queue 1 through the first listener, queue 2 through
    // the second. B: everything through the second. C: admin through the
    // second, its I/O queue through the first.
    let (mut a_admin, a) = admin(env.addr, HOSTNQN);
    let mut a_q1 = io(env.addr, HOSTNQN, a, 1);
    let mut a_q2 = io(addr2, HOSTNQN, a, 2);
    let (mut b_admin, b) = admin(addr2, HOSTNQN);
    let mut b_q1 = io(addr2, HOSTNQN, b, 1);
    let (mut c_admin, c) = admin(addr2, HOSTNQN);
    let mut c_q1 = io(env.addr, HOSTNQN, c, 1);
    for q in [&mut a_q1, &mut a_q2, &mut b_q1, &mut c_q1] {
        reads(q);
    }
    env.call(move |t, tx| {
        t.remove_listener(&listener(SUBNQN, port2), move |r| {
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
    })
    .unwrap();
    read_meets_close(&mut a_q2, "A's queue through the removed listener");
    read_meets_close(&mut b_q1, "B's queue");
    admin_meets_close(&mut b_admin, "B's admin queue");
    read_meets_close(
        &mut c_q1,
        "C's queue (its controller came through the removed listener)",
    );
    admin_meets_close(&mut c_admin, "C's admin queue");
    reads(&mut a_q1);
    identifies(&mut a_admin);
}

#[test]
fn deleting_the_subsystem_disconnects_its_hosts() {
    let env = NvmfEnv::start();
    let (mut admin_q, id) = admin(env.addr, HOSTNQN);
    let mut io_q = io(env.addr, HOSTNQN, id, 1);
    reads(&mut io_q);
    env.call(|t, tx| {
        t.delete_subsystem(SUBNQN, move |r| {
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
    })
    .unwrap();
    read_meets_close(&mut io_q, "I/O queue of a deleted subsystem");
    admin_meets_close(&mut admin_q, "admin queue of a deleted subsystem");
}
