//! The seam proven: the target serves a host over the loopback transport
//! with no TCP code involved: `nvmf_create_transport -t LOOP`, a listener
//! of that type, Connect (admin and I/O queue), Property Set, Identify,
//! writes (in the capsule and fetched) and reads, the queue pairs listed,
//! and a host that goes away.

use std::sync::mpsc;

use bdevkit::bdev::BdevManager;
use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};
use bdevkit_nvme_spec::admin::Identify;
use bdevkit_nvme_spec::cmd::{Command, Psdt};
use bdevkit_nvme_spec::fabrics::{Connect, ConnectData, PropertySet, CNTLID_DYNAMIC};
use bdevkit_nvme_spec::io::{BlockRange, Read as NvmRead, Write as NvmWrite};
use bdevkit_nvme_spec::regs::{offset, Cc, PropertySize};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::{Sqe, Status};

use super::{LoopHost, TRTYPE_LOOP};
use crate::addr::{ListenAddr, ListenAddressParams};
use crate::opts::CreateTransportParams;
use crate::params::{CreateSubsystemParams, ListenerParams, NamespaceParams};
use crate::service::Target;

const SUBNQN: &str = "nqn.2016-06.io.bdevkit:loop";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
const BLOCK: usize = 512;

fn listen_address() -> ListenAddressParams {
    ListenAddressParams {
        trtype: "loop".into(),
        adrfam: Some("IPv4".into()),
        traddr: "127.0.0.1".into(),
        trsvcid: Some("4420".into()),
    }
}

/// NVMe-oF commands carry SGLs.
fn sgl(mut sqe: Sqe, d: &SglDescriptor) -> Sqe {
    sqe.set_psdt(Psdt::SglContiguousMetadata);
    sqe.set_sgl1(d);
    sqe
}

/// Connect on queue `qid` (of controller `cntlid`); the controller id.
fn connect(h: &LoopHost, qid: u16, cntlid: u16) -> u16 {
    let data = ConnectData::new([1; 16], cntlid, SUBNQN, HOSTNQN).unwrap();
    let s = sgl(
        Connect::new(qid, 31, 0).to_sqe(1),
        &SglDescriptor::offset_data_block(0, 1024),
    );
    let c = h.call(s, data.as_bytes(), &[]);
    assert!(c.cqe.status().is_success(), "Connect: {:?}", c.cqe.status());
    u16::try_from(c.cqe.dw0.get() & 0xffff).unwrap()
}

fn rw(write: bool, cid: u16, slba: u64, blocks: u32, d: &SglDescriptor) -> Sqe {
    let r = BlockRange::new(slba, blocks).unwrap();
    let s = if write {
        NvmWrite::new(1, r).to_sqe(cid)
    } else {
        NvmRead::new(1, r).to_sqe(cid)
    };
    sgl(s, d)
}

/// Runs `f` on the app thread and waits for it.
fn on_app<R: Send + 'static>(rt: &Runtime, f: impl FnOnce() -> R + Send + 'static) -> R {
    rt.app_thread().run_sync(f).unwrap()
}

#[test]
fn a_second_transport_serves_connect_identify_and_io_through_the_core() {
    let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0))).unwrap();
    let mgr = BdevManager::default();
    bdevkit_malloc::register(&mgr);
    let target = Target::new(rt.handle(), mgr.clone());
    let (tx, rx) = mpsc::channel();
    let t = target.clone();
    rt.app_thread()
        .send_msg(move || {
            t.start().unwrap();
            t.create_transport(&CreateTransportParams {
                trtype: "Loop".into(),
                ..CreateTransportParams::default()
            })
            .unwrap();
            bdevkit_malloc::create(&mgr, bdevkit_malloc::MallocCreateParams::new("M0", 512, 64))
                .unwrap();
            let mut p = CreateSubsystemParams::new(SUBNQN);
            p.allow_any_host = Some(true);
            t.create_subsystem(&p).unwrap();
            t.add_listener(&ListenerParams {
                nqn: SUBNQN.into(),
                listen_address: listen_address(),
                ..ListenerParams::default()
            })
            .unwrap();
            t.add_ns(SUBNQN, &NamespaceParams::new("M0"), move |r| {
                tx.send(r.map(|_| ()).map_err(|e| e.to_string())).unwrap();
            });
        })
        .unwrap();
    rx.recv_timeout(std::time::Duration::from_secs(30))
        .unwrap()
        .unwrap();
    let via = ListenAddr::from_params(&listen_address()).unwrap();
    assert_eq!(via.trtype, TRTYPE_LOOP);

    // The admin queue: Connect, CC.EN, Identify Controller.
    let admin = LoopHost::connect(&via);
    let cntlid = connect(&admin, 0, CNTLID_DYNAMIC);
    let cc = PropertySet::new(PropertySize::Four, offset::CC, u64::from(Cc::enabled(0).0));
    let c = admin.call(
        sgl(cc.to_sqe(2), &SglDescriptor::transport_data_block(0)),
        &[],
        &[],
    );
    assert!(c.cqe.status().is_success());
    let id = sgl(
        Identify::controller().to_sqe(3),
        &SglDescriptor::transport_data_block(4096),
    );
    let c = admin.call(id, &[], &[]);
    assert!(c.cqe.status().is_success());
    assert_eq!(c.data.len(), 4096);
    // CNTLID (bytes 79:78) and SUBNQN (bytes 1023:768).
    assert_eq!(u16::from_le_bytes([c.data[78], c.data[79]]), cntlid);
    assert!(c.data[768..].starts_with(SUBNQN.as_bytes()));

    // An I/O queue: a write in the capsule, one fetched, both read back.
    let io = LoopHost::connect(&via);
    assert_eq!(connect(&io, 1, cntlid), cntlid);
    let a = vec![0xa5u8; BLOCK];
    let b: Vec<u8> = (0..4 * BLOCK)
        .map(|i| u8::try_from(i % 251).unwrap())
        .collect();
    let len = |d: &[u8]| u32::try_from(d.len()).unwrap();
    let w = rw(true, 1, 0, 1, &SglDescriptor::offset_data_block(0, len(&a)));
    assert!(io.call(w, &a, &[]).cqe.status().is_success());
    let w = rw(true, 2, 8, 4, &SglDescriptor::transport_data_block(len(&b)));
    assert!(io.call(w, &[], &b).cqe.status().is_success());
    let r = rw(
        false,
        3,
        0,
        1,
        &SglDescriptor::transport_data_block(len(&a)),
    );
    let c = io.call(r, &[], &[]);
    assert!(c.cqe.status().is_success());
    assert_eq!((c.cqe.cid.get(), c.cqe.sqid.get()), (3, 1));
    assert_eq!(c.data, a);
    let r = rw(
        false,
        4,
        8,
        4,
        &SglDescriptor::transport_data_block(len(&b)),
    );
    assert_eq!(io.call(r, &[], &[]).data, b);
    // The core's checks hold for any transport: past the namespace's end.
    let r = rw(false, 5, 63, 2, &SglDescriptor::transport_data_block(1024));
    assert_eq!(
        io.call(r, &[], &[]).cqe.status(),
        Status::LBA_OUT_OF_RANGE.with_dnr()
    );
    // A fetch the host cannot fill fails that command, not the queue.
    let w = rw(true, 6, 0, 1, &SglDescriptor::transport_data_block(512));
    assert_eq!(
        io.call(w, &[], &[0; 16]).cqe.status(),
        Status::TRANSIENT_TRANSPORT_ERROR
    );

    // Both queue pairs are listed with the transport's address.
    let t = target.clone();
    let (tx, rx) = mpsc::channel();
    on_app(&rt, move || {
        t.qpairs_json(SUBNQN, move |r| tx.send(r).unwrap());
    });
    let qpairs = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap()
        .unwrap();
    assert_eq!(qpairs.len(), 2);
    assert!(qpairs
        .iter()
        .all(|q| q["listen_address"]["trtype"] == TRTYPE_LOOP));

    // The host goes: its queues close and the controller with them.
    drop(io);
    drop(admin);
    let (tx, rx) = mpsc::channel();
    let t = target.clone();
    on_app(&rt, move || {
        t.shutdown(move || tx.send(()).unwrap());
    });
    rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
}
