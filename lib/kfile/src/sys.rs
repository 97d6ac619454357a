//! The only unsafe code of the crate: the io_uring ring ([`ring`]), and
//! the few file and eventfd system calls std does not wrap (block device
//! ioctls, `fcntl`, `fallocate`, `fdatasync`, `lseek` with
//! `SEEK_DATA`/`SEEK_HOLE`, `preadv2(RWF_NOWAIT)`, eventfd,
//! `sched_yield`). Each of those takes plain integers or pointers to live
//! locals; none keeps a pointer past the call.

pub(crate) mod ring;

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `BLKGETSIZE64`: `_IOR(0x12, 114, size_t)`.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `BLKSSZGET`: `_IO(0x12, 104)`.
const BLKSSZGET: libc::c_ulong = 0x1268;

/// Size in bytes and logical block size of a block device.
///
/// # Errors
/// What the `BLKGETSIZE64` or `BLKSSZGET` ioctl reports.
pub fn blockdev_geometry(f: &File) -> io::Result<(u64, u32)> {
    let mut size: u64 = 0;
    let mut bs: libc::c_int = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer, a live local.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64, &raw mut size) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: BLKSSZGET writes one int to the pointer, a live local.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKSSZGET, &raw mut bs) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((size, u32::try_from(bs).unwrap_or(0)))
}

/// Clears `O_NONBLOCK` (files are opened with it so that opening a FIFO
/// cannot block the reactor; it must not stay on for regular I/O).
///
/// # Errors
/// What `fcntl` reports.
pub fn clear_nonblock(f: &File) -> io::Result<()> {
    let fd = f.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on an fd we own take and return plain ints.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `fallocate(fd, mode, offset, len)` (blocking: call it off the reactor).
///
/// # Errors
/// `EINVAL` when `offset` or `len` do not fit `off_t`, else what
/// `fallocate` reports.
pub fn fallocate(fd: RawFd, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: fallocate takes plain integers; a stale fd yields EBADF.
    if unsafe { libc::fallocate(fd, mode, off, len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fdatasync(fd)` (blocking: call it off the reactor).
///
/// # Errors
/// What `fdatasync` reports.
pub fn fdatasync(fd: RawFd) -> io::Result<()> {
    // SAFETY: fdatasync takes a plain fd; a stale fd yields EBADF.
    if unsafe { libc::fdatasync(fd) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `lseek(fd, offset, SEEK_DATA)`: the first byte at or after `offset`
/// that holds data, or `None` when only a hole (or the end of the file)
/// follows (`ENXIO`). Moves the file position, which positioned I/O
/// (`pread`/`pwrite`) does not use.
///
/// # Errors
/// `EINVAL` when `offset` does not fit `off_t`, else what `lseek` reports
/// (`EINVAL` also where the file system or file type cannot tell).
pub fn seek_data(f: &File, offset: u64) -> io::Result<Option<u64>> {
    match lseek(f, offset, libc::SEEK_DATA) {
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
        r => r.map(Some),
    }
}

/// `lseek(fd, offset, SEEK_HOLE)`: the first byte at or after `offset`
/// in a hole; the end of the file counts as one. See [`seek_data`].
///
/// # Errors
/// As [`seek_data`]; `ENXIO` when `offset` is at or past the end.
pub fn seek_hole(f: &File, offset: u64) -> io::Result<u64> {
    lseek(f, offset, libc::SEEK_HOLE)
}

fn lseek(f: &File, offset: u64, whence: libc::c_int) -> io::Result<u64> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: lseek takes plain integers on an fd `f` keeps open.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    u64::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// A non-blocking eventfd.
///
/// # Errors
/// What `eventfd` reports.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd returns a new fd or -1; nothing else is touched.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a freshly created descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Resets an eventfd's counter (non-blocking read).
pub fn eventfd_drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live local; EAGAIN when the count is 0.
    let _ = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
}

/// Adds one to an eventfd's counter (wakes a reactor sleeping on it).
pub fn eventfd_signal(fd: RawFd) {
    let v: u64 = 1;
    // SAFETY: writes 8 bytes from a live local.
    let _ = unsafe { libc::write(fd, (&raw const v).cast(), 8) };
}

/// Whether the kernel can read `fd` without blocking (`FMODE_NOWAIT`):
/// one `preadv2(RWF_NOWAIT)` of a block at offset 0, which never blocks
/// (it fails with `EAGAIN` instead). io_uring serves files without it
/// (tmpfs, for one) in io-wq worker threads.
#[must_use]
pub fn supports_nowait(fd: RawFd, block_size: u32) -> bool {
    let len = block_size as usize;
    let Ok(mut buf) = bdevkit::dma::DmaBuf::alloc(len, len.max(4096)) else {
        return true;
    };
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    // SAFETY: one iovec over `buf`, which outlives this synchronous call.
    let r = unsafe { libc::preadv2(fd, &raw const iov, 1, 0, libc::RWF_NOWAIT) };
    !(r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP))
}

/// Gives the CPU to another runnable task on this CPU, if any (returns at
/// once otherwise).
pub fn yield_cpu() {
    // SAFETY: sched_yield takes no arguments and cannot fail.
    unsafe { libc::sched_yield() };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file with data at [0, 4 KiB) and [1 MiB, 1 MiB + 4 KiB) and a
    /// hole between; file systems that cannot tell report it all as data.
    #[test]
    fn seek_data_and_hole() {
        use std::os::unix::fs::FileExt;
        let path = std::env::temp_dir().join(format!("kfile-seek-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        f.write_all_at(&[1u8; 4096], 0).unwrap();
        f.write_all_at(&[2u8; 4096], 1 << 20).unwrap();
        let end = (1 << 20) + 4096;
        assert_eq!(seek_data(&f, 0).unwrap(), Some(0));
        let hole = seek_hole(&f, 0).unwrap();
        if hole == end {
            println!("file system reports no holes; only the end is checked");
        } else {
            assert_eq!(hole, 4096);
            assert_eq!(seek_data(&f, 4096).unwrap(), Some(1 << 20));
        }
        assert_eq!(seek_hole(&f, 1 << 20).unwrap(), end);
        assert_eq!(seek_data(&f, end).unwrap(), None);
        assert!(seek_data(&f, u64::MAX).is_err());
    }

    #[test]
    fn eventfd_signal_and_drain() {
        let efd = eventfd().unwrap();
        let fd = efd.as_raw_fd();
        let mut v: u64 = 0;
        eventfd_signal(fd);
        eventfd_signal(fd);
        // SAFETY: reads 8 bytes into a live local.
        let n = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
        assert_eq!((n, v), (8, 2));
        eventfd_signal(fd);
        eventfd_drain(fd);
        // SAFETY: as above; the counter is 0, so EAGAIN.
        let n = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
        assert_eq!(n, -1);
    }
}
