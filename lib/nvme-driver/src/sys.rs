//! The driver's unsafe layer (VFIO's ioctls apart, in `vfio/sys.rs`):
//! DMA memory the device reads and writes ([`DmaMem`]), the mapped
//! register window of a PCI function ([`Mmio`]) and doorbells
//! ([`Doorbell`]), and a TCP connect that does not wait for the handshake
//! ([`tcp_connect_nonblocking`]). Everything above this file is safe code.
//!
//! Rules (STYLE.md §6): no `&`/`&mut` into device-writable memory while
//! it is mapped — every access here is a raw or volatile copy; a mapping
//! is owned by a type whose `Drop` unmaps it.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use bdevkit_nvme_spec::zerocopy::{FromZeros, IntoBytes};
use bdevkit_nvme_spec::{Cqe, Sqe};

/// 2 MiB: the huge page size tried for DMA memory.
pub const HUGE_PAGE: usize = 2 << 20;
/// The memory page size the driver uses with the controller (CC.MPS 0).
pub const PAGE: usize = 4096;

/// Undoes a device mapping of a [`DmaMem`] (VFIO unmap); called once, by
/// `Drop`, before the memory is returned to the system.
pub type Unmapper = Box<dyn FnOnce(u64, usize) + Send + Sync>;

/// Page-aligned memory shared with the device: queue rings, PRP lists,
/// bounce buffers, admin data. Anonymous memory, on 2 MiB huge pages when
/// the system has them free (`try_huge`), else ordinary pages.
pub struct DmaMem {
    ptr: NonNull<u8>,
    len: usize,
    iova: u64,
    huge: bool,
    unmap: Option<Unmapper>,
}

// SAFETY: DmaMem owns its mapping exclusively; all access goes through the
// methods below (raw/volatile copies with bounds checks), which are sound
// from any thread: concurrent users (a queue pair and the device) agree on
// who writes which range through the NVMe protocol, as with hardware.
unsafe impl Send for DmaMem {}
// SAFETY: as above; `&DmaMem` gives only copying access, never references.
unsafe impl Sync for DmaMem {}

impl fmt::Debug for DmaMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaMem")
            .field("vaddr", &self.ptr)
            .field("len", &self.len)
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("huge", &self.huge)
            .finish()
    }
}

impl DmaMem {
    /// `len` bytes (rounded up to a page, or to 2 MiB on huge pages) of
    /// zeroed, page-aligned anonymous memory, touched so that no page fault
    /// happens later. Its IOVA is its virtual address until
    /// [`DmaMem::set_mapping`] says otherwise.
    pub fn alloc(len: usize, try_huge: bool) -> io::Result<DmaMem> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        if try_huge {
            let hlen = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
            if let Ok(m) = Self::mmap(hlen, true) {
                return Ok(m);
            }
        }
        Self::mmap(len.div_ceil(PAGE) * PAGE, false)
    }

    fn mmap(len: usize, huge: bool) -> io::Result<DmaMem> {
        let flags = libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS
            | libc::MAP_POPULATE
            | if huge { libc::MAP_HUGETLB } else { 0 };
        // SAFETY: an anonymous private mapping at an address the kernel
        // chooses; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(DmaMem {
            ptr,
            len,
            iova: ptr.as_ptr() as u64,
            huge,
            unmap: None,
        })
    }

    /// Records the device mapping: the IOVA the device uses and how to
    /// undo it when the memory goes.
    pub fn set_mapping(&mut self, iova: u64, unmap: Unmapper) {
        self.iova = iova;
        self.unmap = Some(unmap);
    }

    /// Virtual address.
    #[must_use]
    pub fn vaddr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of byte 0.
    #[inline]
    #[must_use]
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Whether the memory sits on huge pages.
    #[must_use]
    pub fn is_huge(&self) -> bool {
        self.huge
    }

    /// [`DmaMem::check`] for an access of at most a page (queue entries),
    /// in one comparison: a `DmaMem` is always a whole number of pages,
    /// at least one (`alloc` rounds up and refuses 0), so `self.len - len`
    /// cannot wrap.
    #[inline(always)]
    fn check_entry(&self, off: usize, len: usize) {
        debug_assert!(len <= PAGE && self.len >= PAGE);
        if off > self.len - len {
            out_of_bounds(off, len, self.len);
        }
    }

    #[inline(always)]
    fn check(&self, off: usize, len: usize) {
        if off.checked_add(len).is_none_or(|e| e > self.len) {
            out_of_bounds(off, len, self.len);
        }
    }

    /// Copies `src` to `off`.
    #[inline]
    pub fn write_bytes(&self, off: usize, src: &[u8]) {
        self.check(off, src.len());
        // SAFETY: in bounds (checked); raw copy into memory we own, from a
        // slice that cannot alias it (callers never hold references into
        // DmaMem).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len());
        }
    }

    /// Copies `dst.len()` bytes at `off` into `dst`.
    #[inline]
    pub fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len());
        // SAFETY: as in write_bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len());
        }
    }

    /// Fills `len` bytes at `off` with `byte`.
    pub fn fill(&self, off: usize, len: usize, byte: u8) {
        self.check(off, len);
        // SAFETY: in bounds (checked).
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), byte, len) };
    }

    /// Writes a little-endian u64 at `off` (8-byte aligned: a PRP entry).
    #[inline]
    pub fn write_u64(&self, off: usize, v: u64) {
        self.check(off, 8);
        debug_assert!(off.is_multiple_of(8));
        // SAFETY: in bounds and aligned (the memory is page aligned).
        unsafe {
            std::ptr::write_volatile(self.ptr.as_ptr().add(off).cast::<u64>(), v.to_le());
        }
    }

    /// Reads a little-endian u64 at `off`.
    #[inline]
    #[must_use]
    pub fn read_u64(&self, off: usize) -> u64 {
        self.check(off, 8);
        // SAFETY: in bounds and aligned.
        u64::from_le(unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(off).cast::<u64>()) })
    }

    /// Writes a submission entry at `off` (64-byte aligned): one typed
    /// store, so that a command built in registers goes straight to the
    /// queue.
    #[inline]
    pub fn write_sqe(&self, off: usize, sqe: &Sqe) {
        self.check_entry(off, std::mem::size_of::<Sqe>());
        // SAFETY: in bounds (checked); `Sqe` is plain bytes (alignment 1,
        // unaligned store), written into memory we own that no reference
        // points into (callers never hold references into DmaMem).
        unsafe {
            std::ptr::write_unaligned(self.ptr.as_ptr().add(off).cast::<Sqe>(), *sqe);
        }
    }

    /// The completion entry at `off` (16-byte aligned) if its phase tag
    /// is `phase`, i.e. it is new: the status word is read first, alone,
    /// and the rest after an acquire fence (ordered after the tag).
    #[inline]
    #[must_use]
    pub fn new_cqe(&self, off: usize, phase: bool) -> Option<Cqe> {
        self.check_entry(off, 16);
        // SAFETY: in bounds (checked); 2-byte aligned (entries are 16-byte
        // aligned in page-aligned memory).
        let word = u16::from_le(unsafe {
            std::ptr::read_volatile(self.ptr.as_ptr().add(off + 14).cast::<u16>())
        });
        if (word & 1 != 0) != phase {
            return None;
        }
        fence(Ordering::Acquire);
        let mut c = Cqe::new_zeroed();
        let dst = c.as_mut_bytes();
        // SAFETY: 16 bytes in bounds (checked) into the 16 bytes of `c`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), 16);
        }
        // The status word as first read (the device does not change an
        // entry it has posted): no second load.
        c.status.set(word);
        Some(c)
    }

    /// Writes a completion entry whose status word goes last, after a
    /// release fence (what a device does: the emulated controller).
    pub fn post_cqe(&self, off: usize, cqe: &Cqe) {
        let b = cqe.as_bytes();
        self.write_bytes(off, &b[..14]);
        fence(Ordering::Release);
        self.check(off, 16);
        let word = u16::from_le_bytes([b[14], b[15]]);
        // SAFETY: in bounds, 2-byte aligned.
        unsafe {
            std::ptr::write_volatile(self.ptr.as_ptr().add(off + 14).cast::<u16>(), word.to_le());
        }
    }
}

/// The panic of [`DmaMem`]'s bounds check, out of line (its arguments by
/// value: nothing set up for it on the access path).
#[cold]
#[inline(never)]
fn out_of_bounds(off: usize, len: usize, size: usize) -> ! {
    panic!("DmaMem access {off}+{len} outside {size} bytes");
}

impl Drop for DmaMem {
    fn drop(&mut self) {
        if let Some(u) = self.unmap.take() {
            u(self.iova, self.len);
        }
        // SAFETY: the mapping was created by mmap with this length and is
        // unmapped once, here, after the device lost access to it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Where a doorbell write goes.
pub trait DoorbellSink: Send + Sync {
    /// Doorbell `index` (2 * qid for an SQ tail, 2 * qid + 1 for a CQ head)
    /// now holds `value`.
    fn ring(&self, index: u32, value: u32);
}

enum DbInner {
    Mmio {
        ptr: NonNull<u32>,
        _bar: Arc<Mmio>,
    },
    Sink {
        sink: Arc<dyn DoorbellSink>,
        index: u32,
    },
}

/// One doorbell register: a volatile 32-bit store into BAR0 (VFIO), or a
/// store into an in-process device ([`DoorbellSink`]).
pub struct Doorbell(DbInner);

// SAFETY: the MMIO pointer stays valid while `_bar` keeps the mapping;
// stores to a device register from any thread are what hardware expects.
unsafe impl Send for Doorbell {}
// SAFETY: as above; ringing needs only `&self`.
unsafe impl Sync for Doorbell {}

impl fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            DbInner::Mmio { ptr, .. } => write!(f, "Doorbell(mmio {ptr:?})"),
            DbInner::Sink { index, .. } => write!(f, "Doorbell(sink {index})"),
        }
    }
}

impl Doorbell {
    /// A doorbell that reports to `sink`.
    #[must_use]
    pub fn sink(sink: Arc<dyn DoorbellSink>, index: u32) -> Doorbell {
        Doorbell(DbInner::Sink { sink, index })
    }

    /// Writes `value`. Earlier stores to queue memory are ordered before
    /// it (release fence).
    #[inline]
    pub fn ring(&self, value: u32) {
        fence(Ordering::Release);
        match &self.0 {
            // SAFETY: ptr is a 4-byte aligned register inside the live
            // BAR0 mapping `_bar` (checked when the doorbell was made).
            DbInner::Mmio { ptr, .. } => unsafe { std::ptr::write_volatile(ptr.as_ptr(), value) },
            DbInner::Sink { sink, index } => sink.ring(*index, value),
        }
    }
}

/// A mapped register window (BAR0 of a VFIO device): volatile 32-bit
/// accesses with bounds checks; unmapped on drop.
pub struct Mmio {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: register accesses are volatile loads/stores that hardware
// serialises; the mapping lives as long as the value.
unsafe impl Send for Mmio {}
// SAFETY: as above.
unsafe impl Sync for Mmio {}

impl fmt::Debug for Mmio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mmio").field("len", &self.len).finish()
    }
}

impl Mmio {
    /// Maps `len` bytes at `offset` of `fd` (a VFIO device fd's BAR0 region).
    pub fn map(fd: libc::c_int, offset: u64, len: usize) -> io::Result<Mmio> {
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a shared mapping of a device region the kernel validates;
        // no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Mmio { ptr, len })
    }

    fn reg(&self, off: u32) -> *mut u32 {
        let o = off as usize;
        assert!(
            o.is_multiple_of(4) && o + 4 <= self.len,
            "register {off:#x} outside BAR0"
        );
        // SAFETY: in bounds (checked above).
        unsafe { self.ptr.as_ptr().add(o).cast::<u32>() }
    }

    /// Reads the 32-bit register at `off`.
    #[must_use]
    pub fn read32(&self, off: u32) -> u32 {
        // SAFETY: an aligned register inside the mapping (checked in reg).
        unsafe { std::ptr::read_volatile(self.reg(off)) }
    }

    /// Writes the 32-bit register at `off`.
    pub fn write32(&self, off: u32, v: u32) {
        // SAFETY: as in read32.
        unsafe { std::ptr::write_volatile(self.reg(off), v) }
    }

    /// A doorbell for the register at `off`.
    #[must_use]
    pub fn doorbell(self: &Arc<Self>, off: u32) -> Doorbell {
        let ptr = NonNull::new(self.reg(off)).expect("invariant: inside a non-null mapping");
        Doorbell(DbInner::Mmio {
            ptr,
            _bar: Arc::clone(self),
        })
    }
}

impl Drop for Mmio {
    fn drop(&mut self) {
        // SAFETY: mapped by Mmio::map with this length; unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Pins the calling thread to `cpu` (best effort: a failure is logged).
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return;
    }
    // SAFETY: `cpu` is inside the set (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the
    // size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        tracing::warn!(cpu, error = %io::Error::last_os_error(), "cannot pin thread");
    }
}

/// Starts a TCP connection to `addr` without waiting for the handshake
/// (a nonblocking socket whose `connect` answers `EINPROGRESS`): the
/// kernel finishes it. Until then the socket's reads and writes would
/// block; a refused or failed handshake is the error of its next one.
pub fn tcp_connect_nonblocking(addr: &SocketAddr) -> io::Result<TcpStream> {
    let (family, sa, len) = sockaddr(addr);
    let ty = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: a plain syscall without pointers.
    let fd = unsafe { libc::socket(family, ty, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket just made and owned by nothing else;
    // `OwnedFd` closes it on every path from here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `sa` holds a socket address of `len` bytes and lives across
    // the call; `connect` only reads it.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            std::ptr::addr_of!(sa).cast::<libc::sockaddr>(),
            len,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(TcpStream::from(fd))
}

/// `addr` as the C socket address `connect` takes: family, storage, length.
fn sockaddr(addr: &SocketAddr) -> (libc::c_int, libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len =
        |n: usize| libc::socklen_t::try_from(n).expect("invariant: a socket address is small");
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::sa_family_t::try_from(libc::AF_INET)
                    .expect("invariant: AF_INET fits sa_family_t"),
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and
            // aligned for every socket address type.
            unsafe { std::ptr::write(std::ptr::addr_of_mut!(ss).cast(), sin) };
            (
                libc::AF_INET,
                ss,
                len(std::mem::size_of::<libc::sockaddr_in>()),
            )
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::sa_family_t::try_from(libc::AF_INET6)
                    .expect("invariant: AF_INET6 fits sa_family_t"),
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write(std::ptr::addr_of_mut!(ss).cast(), sin6) };
            (
                libc::AF_INET6,
                ss,
                len(std::mem::size_of::<libc::sockaddr_in6>()),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdevkit_nvme_spec::Status;

    #[test]
    fn tcp_connect_nonblocking_connects_and_refuses() {
        use std::io::{Read, Write};
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = std::net::TcpListener::bind(bind) else {
                continue; // no IPv6 loopback here
            };
            let addr = l.local_addr().unwrap();
            let mut s = tcp_connect_nonblocking(&addr).unwrap();
            let (mut peer, _) = l.accept().unwrap();
            s.set_nonblocking(false).unwrap();
            s.write_all(b"ping").unwrap();
            let mut b = [0u8; 4];
            peer.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"ping");
            drop(l);
            drop(peer);
            // Nothing listens there now: refused, at connect or at the
            // first I/O.
            let r = tcp_connect_nonblocking(&addr).and_then(|mut s| {
                s.set_nonblocking(false)?;
                s.read(&mut b)
            });
            assert_eq!(
                r.unwrap_err().raw_os_error(),
                Some(libc::ECONNREFUSED),
                "{bind}"
            );
        }
    }

    #[test]
    fn dma_mem_roundtrips_and_posts_cqes() {
        let m = DmaMem::alloc(10_000, false).unwrap();
        assert_eq!(m.len(), 12_288);
        assert_eq!(m.vaddr() % PAGE, 0);
        assert_eq!(m.iova(), m.vaddr() as u64);
        m.write_u64(8, 0x1122_3344_5566_7788);
        assert_eq!(m.read_u64(8), 0x1122_3344_5566_7788);
        let mut c = Cqe::new(7, Status::INVALID_FIELD, 9);
        c.set_phase(true);
        m.post_cqe(64, &c);
        assert_eq!(m.new_cqe(64, false), None);
        assert_eq!(m.new_cqe(64, true), Some(c));
        let mut b = [0u8; 3];
        m.write_bytes(100, &[1, 2, 3]);
        m.read_bytes(100, &mut b);
        assert_eq!(b, [1, 2, 3]);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_panics() {
        let m = DmaMem::alloc(4096, false).unwrap();
        m.write_u64(4096, 1);
    }
}
