//! I/O over registered external memory (`dma::ExtMem`): zero-copy data
//! paths, segment checks, and the bdev layer's own copies (split
//! children, bounce buffers, module slice callbacks) over such memory.

use super::*;
use crate::dma::ExtMem;

/// Anonymous shared memory standing in for a guest's: mapped here,
/// unmapped by the `ExtMem`'s owner.
struct Mapping(usize, usize);

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped by `guest_mem` with this length; nothing uses
        // it once the `ExtMem` owning this is gone.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
    }
}

fn guest_mem(len: usize) -> (Arc<ExtMem>, usize) {
    // SAFETY: a fresh anonymous mapping; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let base = p as usize;
    // SAFETY: the owner keeps the mapping until the ExtMem is dropped; the
    // test touches it only through `poke`/`peek` (raw copies).
    let m = unsafe { ExtMem::new(&[(p.cast(), len)], Box::new(Mapping(base, len))) }.unwrap();
    (m, base)
}

fn poke(addr: usize, data: &[u8]) {
    // SAFETY: `addr..addr + data.len()` lies inside a live guest_mem
    // mapping (the callers' ranges), which no reference points into.
    unsafe { crate::dma::racy::copy(addr as *mut u8, data.as_ptr(), data.len()) };
}

fn peek(addr: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: as in `poke`.
    unsafe { crate::dma::racy::copy(v.as_mut_ptr(), addr as *const u8, len) };
    v
}

/// Submits `io` and waits for its completion on this thread.
async fn run_io(ch: &BdevChannel, mut io: BdevIo) -> IoStatus {
    let got: Rc<Cell<Option<IoStatus>>> = Rc::default();
    let g2 = Rc::clone(&got);
    io.on_done_closure(move |io| g2.set(Some(io.status())));
    ch.submit(io).unwrap();
    loop {
        if let Some(s) = got.get() {
            return s;
        }
        sleep_ms(1).await;
    }
}

/// Writes `data` from external memory at `addr` in segments of `seg`
/// bytes, then reads it back into external memory at `back`.
async fn roundtrip(ch: &BdevChannel, mem: &Arc<ExtMem>, addr: usize, back: usize, seg: usize) {
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 253) as u8).collect();
    poke(addr, &data);
    let mut io = ch.alloc_io().unwrap();
    io.write_ext(16, 16, mem);
    for k in (0..data.len()).step_by(seg) {
        io.push_ext_segment(addr + k, seg).unwrap();
    }
    assert_eq!(run_io(ch, io).await, IoStatus::Success);
    let mut io = ch.alloc_io().unwrap();
    io.read_ext(16, 16, mem);
    for k in (0..data.len()).step_by(seg) {
        io.push_ext_segment(back + k, seg).unwrap();
    }
    assert_eq!(run_io(ch, io).await, IoStatus::Success);
    assert_eq!(peek(back, data.len()), data);
}

#[test]
fn ext_memory_roundtrips_on_every_path() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (mem, base) = guest_mem(1 << 20);
        // Straight to the module (slice callbacks get stack pieces).
        disk(&mgr, BdevProps::new("plain", "Test", 512, 1024), ALL);
        // Split into children of at most 6 blocks.
        let mut p = BdevProps::new("split", "Test", 512, 1024);
        p.max_rw_size = 6;
        disk(&mgr, p, ALL);
        // Bounced: segments not 4 KiB aligned.
        let mut p = BdevProps::new("bounce", "Test", 512, 1024);
        p.required_alignment = 12;
        disk(&mgr, p, ALL);
        for (name, seg) in [
            ("plain", 8192),
            ("plain", 512),
            ("split", 1024),
            ("bounce", 512),
        ] {
            let d = mgr.open(name, true, |_| {}).unwrap();
            let ch = d.get_io_channel().unwrap();
            roundtrip(&ch, &mem, base + 512, base + 65536 + 512, seg).await;
        }
        // The memory stays registered while the I/Os and `mem` exist; the
        // last reference unmaps it.
        assert_eq!(Arc::strong_count(&mem), 1);
    });
}

#[test]
fn segments_outside_the_memory_are_refused() {
    let env = Env::new("0x1", BdevOptions::default());
    env.run(|mgr| async move {
        let (mem, base) = guest_mem(65536);
        let (other, obase) = guest_mem(65536);
        disk(&mgr, BdevProps::new("d", "Test", 512, 1024), ALL);
        let d = mgr.open("d", true, |_| {}).unwrap();
        let ch = d.get_io_channel().unwrap();
        let mut io = ch.alloc_io().unwrap();
        io.read_ext(0, 1, &mem);
        assert!(
            io.push_ext_segment(base + 65536 - 256, 512).is_err(),
            "crosses the end"
        );
        assert!(io.push_ext_segment(base - 512, 512).is_err(), "before");
        assert!(
            io.push_ext_segment(obase, 512).is_err(),
            "another region set"
        );
        assert!(io.push_ext_segment(base, 0).is_err(), "empty");
        assert!(io.push_ext_segment(usize::MAX - 10, 512).is_err(), "wraps");
        // An I/O built with owned buffers takes no external segment.
        let mut own = ch.alloc_io().unwrap();
        own.read(0, 1, DmaBuf::new(512).unwrap());
        assert!(own.push_ext_segment(base, 512).is_err());
        io.push_ext_segment(base, 512).unwrap();
        assert_eq!(run_io(&ch, io).await, IoStatus::Success);
        drop(other);
    });
}
