//! The transport's data buffers are bounded by its options, not by what
//! hosts connect (issue 31, point 5: every I/O queue used to preallocate
//! `max_queue_depth × max_io_size`, 16 MiB a queue at the defaults, with
//! no bound over queues). Transfers larger than `in_capsule_data_size`
//! take a buffer of `max_io_size` from a shared pool of
//! `num_shared_buffers`; a request that finds it empty waits, in order,
//! and resumes when one comes back. The per-queue in-capsule buffers and
//! the pool's loans are given back when the queues close.
//!
//! The counts come from the transport's own accounting
//! (`Target::buffer_stats`). Queues are closed with a Disconnect (I/O) or
//! by shutting the host's side (admin) and the host waits for the
//! target's close: the target closes a socket when it drops the queue
//! pair, after giving its buffers back.

use std::net::{Shutdown, TcpStream};

use bdevkit_nvme_spec::cmd::Command;
use bdevkit_nvme_spec::fabrics::Disconnect;
use bdevkit_nvme_spec::io::{BlockRange, Read, Write};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvmf::{BufferStats, CreateTransportParams};
use bdevkit_test::nvmf::{tcp_transport, Host, NvmfEnv, Reply, HOSTNQN, SUBNQN};

const OFF: Digests = Digests {
    header: false,
    data: false,
};
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

fn stats(env: &NvmfEnv) -> BufferStats {
    env.target.buffer_stats().expect("a transport")
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| u8::try_from((i * 131 + seed * 17 + i / 512) % 251).unwrap())
        .collect()
}

/// VmRSS of this process (the target runs in it), for the log only.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// I/O queue `qid` (`entries` deep) of controller `cntlid`.
fn io_queue(env: &NvmfEnv, cntlid: u16, qid: u16, entries: u32) -> Host<TcpStream> {
    let mut h = env.host();
    h.icreq(OFF).unwrap();
    let c = h.connect(qid, entries, 0, cntlid, SUBNQN, HOSTNQN).unwrap();
    assert!(c.status().is_success(), "queue {qid}: {}", c.status());
    h
}

/// A write pulled by R2T, then the read back, verified.
fn write_read(h: &mut Host<TcpStream>, slba: u64, data: &[u8]) {
    let n = u32::try_from(data.len() / 512).unwrap();
    let c = h
        .exec_out(&Write::new(1, BlockRange::new(slba, n).unwrap()), data, 0)
        .unwrap();
    assert!(c.status().is_success(), "write {slba}: {}", c.status());
    let (c, back) = h
        .exec(&Read::new(1, BlockRange::new(slba, n).unwrap()), n * 512)
        .unwrap();
    assert!(c.status().is_success(), "read {slba}: {}", c.status());
    assert!(back == data, "data read back at {slba} differs");
}

/// Disconnect on an I/O queue, then the target's close.
fn disconnect_io(mut h: Host<TcpStream>) {
    let cid = h.next_cid();
    let mut s = Disconnect::default().to_sqe(cid);
    s.set_sgl1(&SglDescriptor::transport_data_block(0));
    h.send_capsule(&s, None).unwrap();
    match h.recv().unwrap() {
        Reply::Resp(c) => assert!(c.status().is_success(), "{}", c.status()),
        r => panic!("{r:?}"),
    }
    assert_eq!(h.recv().unwrap(), Reply::Closed);
}

/// The host's side of an admin queue shut, then the target's close.
fn close_admin(mut h: Host<TcpStream>) {
    h.sock.shutdown(Shutdown::Write).unwrap();
    assert_eq!(h.recv().unwrap(), Reply::Closed);
}

#[test]
fn memory_is_bounded_by_the_transport_options_not_the_queues() {
    let env = NvmfEnv::start_with("0x3", tcp_transport());
    let s0 = stats(&env);
    assert_eq!(s0.shared_limit, 511, "SPDK's TCP num_shared_buffers");
    assert_eq!(s0.buf_size, 131_072);
    let rss0 = rss_kib();
    let (ctrls, queues, depth) = (3u64, 32u16, 128u32);
    let mut admins = Vec::new();
    let mut ios = Vec::new();
    for c in 0..ctrls {
        let (a, cntlid) = env.admin(OFF);
        admins.push(a);
        for q in 1..=queues {
            let mut h = io_queue(&env, cntlid, q, depth);
            let slba = ((c * u64::from(queues) + u64::from(q)) % 64) * 256;
            write_read(&mut h, slba, &pattern(slba, 131_072));
            ios.push(h);
        }
    }
    let s = stats(&env);
    let nq = ctrls * u64::from(queues);
    let icd = 4096u64;
    eprintln!(
        "96 queues of 128: {s:?}, {} MiB accounted; RSS {} MiB -> {} MiB",
        s.allocated_bytes() / MIB,
        rss0 / 1024,
        rss_kib() / 1024
    );
    assert_eq!(
        s.in_capsule_bytes,
        nq * u64::from(depth) * icd,
        "in-capsule buffers: one per slot of in_capsule_data_size"
    );
    assert!(s.shared_allocated <= s.shared_limit, "{s:?}");
    let bound = u64::from(s.shared_limit) * u64::from(s.buf_size) + nq * u64::from(depth) * icd;
    assert!(
        s.allocated_bytes() <= bound,
        "{} MiB of buffers for {nq} queues, more than the options allow ({} MiB)",
        s.allocated_bytes() / MIB,
        bound / MIB
    );
    // Every queue closes: what the queues had is given back.
    for h in ios {
        disconnect_io(h);
    }
    for a in admins {
        close_admin(a);
    }
    let s = stats(&env);
    eprintln!("after the disconnects: {s:?}; RSS {} MiB", rss_kib() / 1024);
    assert_eq!(s.in_capsule_bytes, 0, "{s:?}");
    assert_eq!(s.shared_in_use, 0, "{s:?}");
    assert_eq!(s.waiting, 0, "{s:?}");
    assert!(s.shared_allocated <= s.shared_limit);
}

#[test]
fn requests_wait_in_order_for_a_nearly_empty_pool() {
    let tp = CreateTransportParams {
        num_shared_buffers: Some(4),
        buf_cache_size: Some(1),
        ..tcp_transport()
    };
    let env = NvmfEnv::start_with("0x1", tp);
    let (admin, cntlid) = env.admin(OFF);
    let mut io = io_queue(&env, cntlid, 1, 64);
    let n = 32u16;
    let len = 65_536usize;
    let data: Vec<Vec<u8>> = (0..n).map(|i| pattern(u64::from(i), len)).collect();
    // 32 writes pulled by R2T at once: 4 get a buffer and an R2T, 28
    // wait. The host sends no data before every capsule is out, so the 28
    // wait for sure.
    for i in 0..n {
        let mut w = Write::new(1, BlockRange::new(u64::from(i) * 128, 128).unwrap()).to_sqe(i + 1);
        w.set_sgl1(&SglDescriptor::transport_data_block(65_536));
        io.send_capsule(&w, None).unwrap();
    }
    let mut r2ts = 0;
    let mut done = vec![false; usize::from(n)];
    while done.iter().any(|d| !d) {
        match io.recv().unwrap() {
            Reply::R2t {
                cid,
                ttag,
                r2to,
                r2tl,
            } => {
                r2ts += 1;
                let d = &data[usize::from(cid - 1)];
                let (a, b) = (r2to as usize, (r2to + r2tl) as usize);
                io.h2c(cid, ttag, r2to, &d[a..b], true).unwrap();
            }
            Reply::Resp(c) => {
                assert!(
                    c.status().is_success(),
                    "write {}: {}",
                    c.cid.get(),
                    c.status()
                );
                done[usize::from(c.cid.get() - 1)] = true;
            }
            r => panic!("{r:?}"),
        }
    }
    assert_eq!(r2ts, 32);
    let s = stats(&env);
    assert_eq!(s.waits, 28, "{s:?}");
    assert!(s.shared_allocated <= 4, "{s:?}");
    // 32 reads at once, through the same 4 buffers; every byte checked.
    for i in 0..n {
        let mut r = Read::new(1, BlockRange::new(u64::from(i) * 128, 128).unwrap()).to_sqe(i + 1);
        r.set_sgl1(&SglDescriptor::transport_data_block(65_536));
        io.send_capsule(&r, None).unwrap();
    }
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); usize::from(n)];
    let mut finished = 0;
    while finished < n {
        match io.recv().unwrap() {
            Reply::Data {
                cid,
                datao,
                data: d,
                success,
            } => {
                let g = &mut got[usize::from(cid - 1)];
                assert_eq!(datao as usize, g.len());
                g.extend_from_slice(&d);
                if success {
                    finished += 1;
                }
            }
            Reply::Resp(c) => {
                assert!(
                    c.status().is_success(),
                    "read {}: {}",
                    c.cid.get(),
                    c.status()
                );
                finished += 1;
            }
            r => panic!("{r:?}"),
        }
    }
    for (i, g) in got.iter().enumerate() {
        assert!(*g == data[i], "read {i} differs from what was written");
    }
    disconnect_io(io);
    close_admin(admin);
    let s = stats(&env);
    assert!(s.waits >= 28, "{s:?}");
    assert_eq!((s.shared_in_use, s.waiting), (0, 0), "{s:?}");
    assert!(s.shared_allocated <= 4, "{s:?}");
}

#[test]
fn queues_on_two_poll_groups_share_a_small_pool() {
    let tp = CreateTransportParams {
        num_shared_buffers: Some(3),
        buf_cache_size: Some(1),
        ..tcp_transport()
    };
    let env = NvmfEnv::start_with("0x3", tp);
    let (admin, cntlid) = env.admin(OFF);
    let queues: Vec<Host<TcpStream>> = (1..=8).map(|q| io_queue(&env, cntlid, q, 32)).collect();
    std::thread::scope(|sc| {
        for (q, mut h) in queues.into_iter().enumerate() {
            sc.spawn(move || {
                for i in 0..8u64 {
                    let slba = (q as u64 * 8 + i) * 256;
                    write_read(&mut h, slba, &pattern(slba + 1, 131_072));
                }
                disconnect_io(h);
            });
        }
    });
    close_admin(admin);
    let s = stats(&env);
    eprintln!("8 queues on 2 poll groups, 3 buffers: {s:?}");
    assert_eq!((s.shared_in_use, s.waiting), (0, 0), "{s:?}");
    assert!(s.shared_allocated <= 3, "{s:?}");
    assert_eq!(s.in_capsule_bytes, 0, "{s:?}");
}
