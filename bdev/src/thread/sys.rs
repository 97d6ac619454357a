//! The few Linux syscalls the reactors need: eventfd, timerfd, epoll,
//! CPU affinity and thread ids. Every `unsafe` block of the `thread` module
//! lives here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was just returned by a successful syscall that creates a
    // new descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads, and so resets, the 8-byte counter of an eventfd or timerfd.
/// Errors are ignored: EAGAIN means the counter is already zero.
fn drain_counter(fd: &OwnedFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a valid u64 from an fd we own.
    unsafe {
        libc::read(
            fd.as_raw_fd(),
            std::ptr::from_mut(&mut v).cast::<libc::c_void>(),
            8,
        );
    }
}

/// A non-blocking eventfd used to wake a sleeping reactor.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes plain integer arguments.
        owned(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) }).map(Self)
    }

    /// Adds one to the counter, making the fd readable.
    pub(crate) fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an fd we own. A full
        // counter (EAGAIN) already means "readable", so errors are ignored.
        unsafe {
            libc::write(
                self.0.as_raw_fd(),
                std::ptr::from_ref(&one).cast::<libc::c_void>(),
                8,
            );
        }
    }

    /// Resets the counter.
    pub(crate) fn drain(&self) {
        drain_counter(&self.0);
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A non-blocking monotonic timerfd armed to the next timed-poller deadline.
#[derive(Debug)]
pub(crate) struct TimerFd(OwnedFd);

impl TimerFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create takes plain integer arguments.
        owned(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })
        .map(Self)
    }

    /// Arms the timer to fire once after `after` (a zero duration is rounded
    /// up to 1 ns, since zero would disarm it).
    pub(crate) fn arm(&self, after: Duration) {
        let ns = after.as_nanos().clamp(1, 1_000_000_000u128 * 3600);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(ns / 1_000_000_000).unwrap_or(3600),
                tv_nsec: libc::c_long::try_from(ns % 1_000_000_000).unwrap_or(0),
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the old-value pointer may be null.
        unsafe {
            libc::timerfd_settime(self.0.as_raw_fd(), 0, &raw const spec, std::ptr::null_mut());
        }
    }

    /// Consumes the expirations.
    pub(crate) fn drain(&self) {
        drain_counter(&self.0);
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An epoll instance. Registered fds are edge triggered: a wake-up only
/// means "run the loop", every poller checks its own source.
#[derive(Debug)]
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 takes a plain flag argument.
        owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }).map(Self)
    }

    pub(crate) fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET).cast_unsigned(),
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event; the kernel validates `fd`.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &raw mut ev) })
            .map(drop)
    }

    pub(crate) fn delete(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add`; the event argument is ignored for DEL.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &raw mut ev) })
            .map(drop)
    }

    /// Waits for events; `None` blocks until one arrives. Returns the tokens
    /// of the ready fds through `tokens`.
    pub(crate) fn wait(&self, tokens: &mut Vec<u64>, timeout_ms: i32) -> io::Result<()> {
        const MAX: usize = 32;
        const MAX_C: libc::c_int = 32;
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        // SAFETY: `evs` is a valid array of MAX events and we pass its length.
        let n =
            unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), MAX_C, timeout_ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(err);
        }
        tokens.clear();
        for ev in evs.iter().take(usize::try_from(n).unwrap_or(0)) {
            let token = ev.u64;
            tokens.push(token);
        }
        Ok(())
    }
}

/// Pins the calling OS thread to one CPU.
pub(crate) fn pin_current_thread(cpu: u32) -> io::Result<()> {
    let cpu = usize::try_from(cpu).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: cpu_set_t is a plain bitmap; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size we pass; pid 0 = caller.
    cvt(unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set)
    })
    .map(drop)
}

/// The CPUs this process may run on.
pub(crate) fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is a plain bitmap; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size we pass.
    cvt(unsafe {
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut set)
    })?;
    let mut cpus = Vec::new();
    for cpu in 0..libc::CPU_SETSIZE as usize {
        // SAFETY: `cpu` is below CPU_SETSIZE.
        if unsafe { libc::CPU_ISSET(cpu, &set) } {
            cpus.push(u32::try_from(cpu).unwrap_or(u32::MAX));
        }
    }
    Ok(cpus)
}

/// The kernel thread id of the caller.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}
