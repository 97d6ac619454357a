//! A test frontend that plays QEMU: guest memory in a file shared with the
//! target, rust-vmm's vhost-user frontend on the controller's socket, and
//! a split-ring driver that writes descriptors and reads the used ring.
//! Waits count events with long timeouts, never assert on time.
#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bdevkit::bdev::BdevManager;
use bdevkit_test::TestEnv;
use bdevkit_vhost::{BlkControllerOpts, VhostTarget};
use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserProtocolFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    GuestRegionMmap, MemoryRegionAddress,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Guest memory size.
pub const RAM: u64 = 16 << 20;
/// Ring size.
pub const QSIZE: u16 = 128;
/// Where data buffers start.
pub const DATA: u64 = 0x10_0000;

pub const T_IN: u32 = 0;
pub const T_OUT: u32 = 1;
pub const T_FLUSH: u32 = 4;
pub const T_GET_ID: u32 = 8;
pub const T_DISCARD: u32 = 11;
pub const T_WRITE_ZEROES: u32 = 13;
pub const S_OK: u8 = 0;
pub const S_IOERR: u8 = 1;
pub const S_UNSUPP: u8 = 2;

pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_INDIRECT: u16 = 4;

/// Long enough for a loaded 2-core machine; only failures wait it out.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// A target with a runtime and bdevs, sockets in a temp dir.
pub struct Rig {
    pub env: TestEnv,
    pub target: VhostTarget,
    pub dir: tempfile::TempDir,
}

impl Rig {
    pub fn new(mask: &str) -> Rig {
        let env = TestEnv::new(mask);
        let target = VhostTarget::new(env.runtime().handle(), env.mgr().clone());
        let dir = tempfile::tempdir().unwrap();
        target.set_socket_dir(dir.path());
        Rig { env, target, dir }
    }

    pub fn malloc(&self, name: &str, blocks: u64, bs: u32) {
        let name = name.to_string();
        self.env.run(move |mgr: BdevManager| async move {
            let p = bdevkit_malloc::MallocCreateParams::new(&name, bs, blocks);
            bdevkit_malloc::create(&mgr, p).unwrap();
        });
    }

    pub fn create(&self, o: BlkControllerOpts) -> bdevkit_vhost::Result<()> {
        let t = self.target.clone();
        self.env.run(move |_| async move { t.create_blk(&o) })
    }

    pub fn ctrlr(&self, name: &str, bdev: &str, readonly: bool) {
        self.create(BlkControllerOpts {
            ctrlr: name.into(),
            dev_name: bdev.into(),
            readonly,
            ..BlkControllerOpts::default()
        })
        .unwrap();
    }

    pub fn sock(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    pub fn delete_bdev(&self, name: &str) {
        let name = name.to_string();
        self.env.run(move |mgr: BdevManager| async move {
            let b = mgr.get(&name).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            mgr.unregister(&b, move || tx.send(()).unwrap());
            let deadline = Instant::now() + TIMEOUT;
            while rx.try_recv().is_err() {
                assert!(Instant::now() < deadline, "bdev removal did not finish");
                bdevkit_test::sleep_ms(1).await;
            }
        });
    }

    pub fn get(&self, name: Option<&str>) -> serde_json::Value {
        self.target.get_controllers(name).unwrap()
    }

    /// Stops the target (before the env unregisters the bdevs).
    pub fn finish(self) {
        let (tx, rx) = std::sync::mpsc::channel();
        self.target.shutdown(move || tx.send(()).unwrap());
        rx.recv_timeout(TIMEOUT).unwrap();
    }
}

/// The guest's memory as the test sees it.
pub struct Ram {
    pub mem: GuestMemoryMmap,
    pub file: File,
    pub va: u64,
}

impl Ram {
    pub fn new() -> Ram {
        let file = tempfile::tempfile().unwrap();
        file.set_len(RAM).unwrap();
        let region = GuestRegionMmap::from_range(
            GuestAddress(0),
            usize::try_from(RAM).unwrap(),
            Some(FileOffset::new(file.try_clone().unwrap(), 0)),
        )
        .unwrap();
        let mem = GuestMemoryMmap::from_regions(vec![region]).unwrap();
        let va = mem
            .find_region(GuestAddress(0))
            .unwrap()
            .get_host_address(MemoryRegionAddress(0))
            .unwrap() as u64;
        Ram { mem, file, va }
    }
}

/// One split ring the test drives.
pub struct Ring {
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    next_desc: u16,
    avail_idx: u16,
    used_seen: u16,
    pub kick: EventFd,
    pub call: EventFd,
    pub err: EventFd,
}

/// A connected test VM.
pub struct Vm {
    pub front: Frontend,
    pub ram: Ram,
    pub rings: Vec<Ring>,
}

pub fn ring_base(q: usize) -> u64 {
    q as u64 * 0x4000
}

impl Vm {
    /// Connects to `sock` and sets up `queues` rings of the memory
    /// `ram` (a fresh one when `None`), as QEMU does.
    pub fn connect(sock: &Path, queues: usize, ram: Option<Ram>) -> Vm {
        Self::connect_full(sock, queues, queues as u64, ram)
    }

    /// As [`Vm::connect`], with a frontend that says it has `max` rings.
    pub fn connect_max(sock: &Path, queues: usize, max: u64) -> Vm {
        Self::connect_full(sock, queues, max, None)
    }

    fn connect_full(sock: &Path, queues: usize, max: u64, ram: Option<Ram>) -> Vm {
        let mut front = Frontend::connect(sock, max).unwrap();
        let ram = ram.unwrap_or_else(Ram::new);
        front.set_owner().unwrap();
        let features = front.get_features().unwrap();
        front.set_features(features).unwrap();
        let pf = front.get_protocol_features().unwrap();
        assert!(pf.contains(VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ));
        front
            .set_protocol_features(pf | VhostUserProtocolFeatures::REPLY_ACK)
            .unwrap();
        // Every message waits for its ack: the target has done it when a
        // call returns, and a refusal is an error here.
        front.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        assert!(front.get_queue_num().unwrap() >= queues as u64);
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: RAM,
            userspace_addr: ram.va,
            mmap_offset: 0,
            mmap_handle: ram.file.as_raw_fd(),
        };
        front.set_mem_table(&[region]).unwrap();
        let mut vm = Vm {
            front,
            ram,
            rings: Vec::new(),
        };
        for q in 0..queues {
            vm.add_ring(q, 0);
        }
        vm
    }

    /// Sets up ring `q` starting at available index `base`.
    pub fn add_ring(&mut self, q: usize, base: u16) {
        let b = ring_base(q);
        let ring = Ring {
            desc: b,
            avail: b + 0x1000,
            used: b + 0x2000,
            next_desc: 0,
            avail_idx: base,
            used_seen: base,
            kick: EventFd::new(EFD_NONBLOCK).unwrap(),
            call: EventFd::new(EFD_NONBLOCK).unwrap(),
            err: EventFd::new(EFD_NONBLOCK).unwrap(),
        };
        let m = &self.ram.mem;
        m.write_obj(base.to_le(), GuestAddress(ring.avail + 2))
            .unwrap();
        m.write_obj(base.to_le(), GuestAddress(ring.used + 2))
            .unwrap();
        let f = &mut self.front;
        f.set_vring_num(q, QSIZE).unwrap();
        f.set_vring_base(q, base).unwrap();
        let va = self.ram.va;
        f.set_vring_addr(
            q,
            &VringConfigData {
                queue_max_size: QSIZE,
                queue_size: QSIZE,
                flags: 0,
                desc_table_addr: va + ring.desc,
                used_ring_addr: va + ring.used,
                avail_ring_addr: va + ring.avail,
                log_addr: None,
            },
        )
        .unwrap();
        f.set_vring_call(q, &ring.call).unwrap();
        f.set_vring_err(q, &ring.err).unwrap();
        f.set_vring_kick(q, &ring.kick).unwrap();
        f.set_vring_enable(q, true).unwrap();
        if self.rings.len() <= q {
            self.rings.push(ring);
        } else {
            self.rings[q] = ring;
        }
    }

    pub fn config(&mut self) -> Vec<u8> {
        let (_, buf) = self
            .front
            .get_config(0, 60, VhostUserConfigFlags::empty(), &[0u8; 60])
            .unwrap();
        buf
    }

    /// Writes descriptor `i` of ring `q`'s table (raw: for bad chains).
    pub fn put_desc(&self, q: usize, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = self.rings[q].desc + u64::from(i) * 16;
        let m = &self.ram.mem;
        m.write_obj(addr.to_le(), GuestAddress(at)).unwrap();
        m.write_obj(len.to_le(), GuestAddress(at + 8)).unwrap();
        m.write_obj(flags.to_le(), GuestAddress(at + 12)).unwrap();
        m.write_obj(next.to_le(), GuestAddress(at + 14)).unwrap();
    }

    /// Makes `head` available on ring `q` and kicks.
    pub fn avail(&mut self, q: usize, head: u16) {
        let r = &mut self.rings[q];
        let m = &self.ram.mem;
        let slot = r.avail + 4 + u64::from(r.avail_idx % QSIZE) * 2;
        m.write_obj(head.to_le(), GuestAddress(slot)).unwrap();
        r.avail_idx = r.avail_idx.wrapping_add(1);
        m.store(
            r.avail_idx.to_le(),
            GuestAddress(r.avail + 2),
            Ordering::Release,
        )
        .unwrap();
        r.kick.write(1).unwrap();
    }

    /// Sets the available index (raw: for a driver that lies about it).
    pub fn set_avail_idx(&mut self, q: usize, idx: u16) {
        let r = &mut self.rings[q];
        r.avail_idx = idx;
        self.ram
            .mem
            .store(idx.to_le(), GuestAddress(r.avail + 2), Ordering::Release)
            .unwrap();
        r.kick.write(1).unwrap();
    }

    /// Puts `bufs` (addr, len, device-writable) as a chain on ring `q`;
    /// returns its head.
    pub fn chain(&mut self, q: usize, bufs: &[(u64, u32, bool)]) -> u16 {
        let head = self.rings[q].next_desc;
        for (k, &(addr, len, w)) in bufs.iter().enumerate() {
            let i = (head + u16::try_from(k).unwrap()) % QSIZE;
            let last = k + 1 == bufs.len();
            let flags = if w { F_WRITE } else { 0 } | if last { 0 } else { F_NEXT };
            self.put_desc(q, i, addr, len, flags, (i + 1) % QSIZE);
        }
        self.rings[q].next_desc = (head + u16::try_from(bufs.len()).unwrap()) % QSIZE;
        self.avail(q, head);
        head
    }

    /// A virtio-blk request on ring `q`: header at `hdr`, data buffers,
    /// status at `status`. Returns the head.
    pub fn blk(&mut self, q: usize, slot: u64, kind: u32, sector: u64, data: &[(u64, u32)]) -> u16 {
        let (hdr, status) = Self::hdr_status(slot);
        let m = &self.ram.mem;
        m.write_obj(kind.to_le(), GuestAddress(hdr)).unwrap();
        m.write_obj(0u32, GuestAddress(hdr + 4)).unwrap();
        m.write_obj(sector.to_le(), GuestAddress(hdr + 8)).unwrap();
        m.write_obj(0xffu8, GuestAddress(status)).unwrap();
        let w = kind == T_IN || kind == T_GET_ID;
        let mut bufs = vec![(hdr, 16, false)];
        bufs.extend(data.iter().map(|&(a, l)| (a, l, w)));
        bufs.push((status, 1, true));
        self.chain(q, &bufs)
    }

    /// Header and status addresses of request slot `slot` (0..64).
    pub fn hdr_status(slot: u64) -> (u64, u64) {
        (0xF_0000 + slot * 32, 0xF_0000 + slot * 32 + 16)
    }

    pub fn status(&self, slot: u64) -> u8 {
        self.ram
            .mem
            .read_obj(GuestAddress(Self::hdr_status(slot).1))
            .unwrap()
    }

    /// Waits for `n` more used entries on ring `q`: their (id, len).
    pub fn wait_used(&mut self, q: usize, n: u16) -> Vec<(u32, u32)> {
        let deadline = Instant::now() + TIMEOUT;
        let r = &mut self.rings[q];
        let m = &self.ram.mem;
        loop {
            let idx: u16 = m.load(GuestAddress(r.used + 2), Ordering::Acquire).unwrap();
            if idx.wrapping_sub(r.used_seen) >= n {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ring {q}: {n} completions did not come"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut out = Vec::new();
        for _ in 0..n {
            let at = r.used + 4 + u64::from(r.used_seen % QSIZE) * 8;
            let id: u32 = m.read_obj(GuestAddress(at)).unwrap();
            let len: u32 = m.read_obj(GuestAddress(at + 4)).unwrap();
            out.push((id, len));
            r.used_seen = r.used_seen.wrapping_add(1);
        }
        out
    }

    /// Whether ring `q`'s error eventfd fired (waiting for it).
    pub fn wait_broken(&self, q: usize) {
        let deadline = Instant::now() + TIMEOUT;
        while self.rings[q].err.read().is_err() {
            assert!(Instant::now() < deadline, "ring {q} was not marked broken");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Nothing more came on ring `q` (used index unchanged).
    pub fn used_idx(&self, q: usize) -> u16 {
        self.ram
            .mem
            .load(GuestAddress(self.rings[q].used + 2), Ordering::Acquire)
            .unwrap()
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        self.ram.mem.write_slice(data, GuestAddress(addr)).unwrap();
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.ram.mem.read_slice(&mut v, GuestAddress(addr)).unwrap();
        v
    }

    /// Stops ring `q` as QEMU does (its requests finish): the base.
    pub fn stop(&mut self, q: usize) -> u32 {
        self.front.get_vring_base(q).unwrap()
    }
}

/// A deterministic pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from(i % 251).unwrap() ^ seed.wrapping_mul(37))
        .collect()
}
