//! Fixed-count virtio-blk reads through a vhost-user-blk controller on
//! one core, the guest played by this process (no VM): one split ring,
//! QD requests of one 4 KiB block each at random offsets, kept in flight,
//! the guest sleeping on the call eventfd and reposting whole batches.
//! `vhost_path [null|malloc] [QD] [COUNT]`. Run under callgrind with two
//! counts (`bench/callgrind_vhost_path.sh`): the difference in
//! instructions, less the guest's own (`guest_driver`, inclusive), over
//! the difference in requests is the target's cost per request (vhost
//! ring, request parsing, bdev layer, module), next to
//! `bench/callgrind_io_path.sh` on the same bdev.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use bdevkit::bdev::BdevManager;
use bdevkit::thread::{CpuSet, Runtime, RuntimeOptions};
use bdevkit_vhost::{BlkControllerOpts, VhostTarget};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    GuestRegionMmap, MemoryRegionAddress,
};
use vmm_sys_util::eventfd::EventFd;

const RAM: u64 = 16 << 20;
const QSIZE: u16 = 256;
const DESC: u64 = 0;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
const HDRS: u64 = 0x10_0000;
const DATA: u64 = 0x20_0000;
const EVENT_IDX: u64 = 1 << 29;

struct Guest {
    mem: GuestMemoryMmap,
    kick: EventFd,
    call: EventFd,
    avail_idx: u16,
    used_seen: u16,
    rng: u64,
    blocks: u64,
}

impl Guest {
    fn put_desc(&self, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = DESC + u64::from(i) * 16;
        let m = &self.mem;
        m.write_obj(addr, GuestAddress(at))
            .expect("guest memory and eventfds");
        m.write_obj(len, GuestAddress(at + 8))
            .expect("guest memory and eventfds");
        m.write_obj(flags, GuestAddress(at + 12))
            .expect("guest memory and eventfds");
        m.write_obj(next, GuestAddress(at + 14))
            .expect("guest memory and eventfds");
    }

    /// Request `slot`: a read of one 4 KiB block at a random sector;
    /// its head goes on the available ring (published by `publish`).
    fn post(&mut self, slot: u16) {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        let block = u64::try_from((u128::from(x) * u128::from(self.blocks)) >> 64).unwrap_or(0);
        let hdr = HDRS + u64::from(slot) * 32;
        self.mem
            .write_obj(block * 8, GuestAddress(hdr + 8))
            .expect("guest memory and eventfds");
        let at = AVAIL + 4 + u64::from(self.avail_idx % QSIZE) * 2;
        self.mem
            .write_obj(slot * 3, GuestAddress(at))
            .expect("guest memory and eventfds");
        self.avail_idx = self.avail_idx.wrapping_add(1);
    }

    fn publish(&self) {
        self.mem
            .store(self.avail_idx, GuestAddress(AVAIL + 2), Ordering::Release)
            .expect("guest memory and eventfds");
        self.kick.write(1).expect("guest memory and eventfds");
    }
}

/// The guest's side of `count` requests at depth `qd` (kept apart so
/// that callgrind can take its share out).
#[inline(never)]
fn guest_driver(g: &mut Guest, qd: u16, count: u64) {
    for s in 0..qd {
        let (hdr, status) = (HDRS + u64::from(s) * 32, HDRS + u64::from(s) * 32 + 16);
        g.mem
            .write_obj(0u32, GuestAddress(hdr))
            .expect("guest memory and eventfds");
        let i = s * 3;
        g.put_desc(i, hdr, 16, 1, i + 1);
        g.put_desc(i + 1, DATA + u64::from(s) * 4096, 4096, 1 | 2, i + 2);
        g.put_desc(i + 2, status, 1, 2, 0);
        g.post(s);
    }
    g.publish();
    let mut posted = u64::from(qd);
    let mut done = 0u64;
    while done < count {
        g.call.read().expect("guest memory and eventfds");
        let idx: u16 = g
            .mem
            .load(GuestAddress(USED + 2), Ordering::Acquire)
            .expect("guest memory and eventfds");
        let mut any = false;
        while g.used_seen != idx {
            let at = USED + 4 + u64::from(g.used_seen % QSIZE) * 8;
            let id: u32 = g
                .mem
                .read_obj(GuestAddress(at))
                .expect("guest memory and eventfds");
            g.used_seen = g.used_seen.wrapping_add(1);
            let st: u8 = g
                .mem
                .read_obj(GuestAddress(HDRS + u64::from(id / 3) * 32 + 16))
                .expect("guest memory and eventfds");
            assert_eq!(st, 0, "request failed");
            done += 1;
            if posted < count {
                g.post(u16::try_from(id / 3).expect("guest memory and eventfds"));
                posted += 1;
                any = true;
            }
        }
        if any {
            g.publish();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map_or("null", String::as_str).to_string();
    let qd: u16 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32);
    let count: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    assert!(qd * 3 <= QSIZE, "QD at most {}", QSIZE / 3);
    let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0))).expect("runtime");
    let mgr = BdevManager::default();
    bdevkit_null::register(&mgr);
    bdevkit_malloc::register(&mgr);
    let blocks = 65536;
    let dir = tempfile::tempdir().expect("test set-up");
    let target = VhostTarget::new(rt.handle(), mgr.clone());
    target.set_socket_dir(dir.path());
    let (t, m) = (target.clone(), mgr.clone());
    rt.app_thread()
        .run_sync(move || {
            if kind == "malloc" {
                let p = bdevkit_malloc::MallocCreateParams::new("B", 512, blocks * 8);
                bdevkit_malloc::create(&m, p).expect("malloc");
            } else {
                let p = bdevkit_null::NullCreateParams::new("B", 512, blocks * 8);
                bdevkit_null::create(&m, p).expect("null");
            }
            let o = BlkControllerOpts {
                ctrlr: "vhost.0".into(),
                dev_name: "B".into(),
                ..BlkControllerOpts::default()
            };
            t.create_blk(&o).expect("controller");
        })
        .expect("app thread");

    // Guest memory shared through a file, as QEMU's memfd.
    let file = tempfile::tempfile().expect("test set-up");
    file.set_len(RAM).expect("test set-up");
    let region = GuestRegionMmap::from_range(
        GuestAddress(0),
        usize::try_from(RAM).expect("test set-up"),
        Some(FileOffset::new(file.try_clone().expect("test set-up"), 0)),
    )
    .expect("test set-up");
    let mem = GuestMemoryMmap::from_regions(vec![region]).expect("test set-up");
    let va = mem
        .find_region(GuestAddress(0))
        .expect("test set-up")
        .get_host_address(MemoryRegionAddress(0))
        .expect("test set-up") as u64;
    let mut front = Frontend::connect(dir.path().join("vhost.0"), 1).expect("test set-up");
    front.set_owner().expect("test set-up");
    // No EVENT_IDX: a call per batch of completions.
    let features = front.get_features().expect("test set-up") & !EVENT_IDX;
    front.set_features(features).expect("test set-up");
    let pf = front.get_protocol_features().expect("test set-up");
    front
        .set_protocol_features(
            pf & (VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ),
        )
        .expect("test set-up");
    front
        .set_mem_table(&[VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: RAM,
            userspace_addr: va,
            mmap_offset: 0,
            mmap_handle: file.as_raw_fd(),
        }])
        .expect("test set-up");
    let g = Guest {
        mem,
        kick: EventFd::new(0).expect("test set-up"),
        call: EventFd::new(0).expect("test set-up"),
        avail_idx: 0,
        used_seen: 0,
        rng: 0x1234_5678_9abc_def1,
        blocks,
    };
    front.set_vring_num(0, QSIZE).expect("test set-up");
    front.set_vring_base(0, 0).expect("test set-up");
    front
        .set_vring_addr(
            0,
            &VringConfigData {
                queue_max_size: QSIZE,
                queue_size: QSIZE,
                flags: 0,
                desc_table_addr: va + DESC,
                used_ring_addr: va + USED,
                avail_ring_addr: va + AVAIL,
                log_addr: None,
            },
        )
        .expect("test set-up");
    front.set_vring_call(0, &g.call).expect("test set-up");
    front.set_vring_kick(0, &g.kick).expect("test set-up");
    front.set_vring_enable(0, true).expect("test set-up");
    let mut g = g;
    let start = std::time::Instant::now();
    guest_driver(&mut g, qd, count);
    let el = start.elapsed();
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let ns = el.as_nanos() as f64 / count as f64;
    println!("{count} requests at QD {qd}: {ns:.1} ns per request (guest included)");
    drop(front);
    let (tx, rx) = std::sync::mpsc::channel();
    target.shutdown(move || tx.send(()).expect("test set-up"));
    rx.recv().expect("test set-up");
    rt.shutdown();
}
