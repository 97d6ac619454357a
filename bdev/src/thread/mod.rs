//! Reactors, lightweight threads, messages, pollers and I/O channels.
//!
//! * A [`Runtime`] starts one *reactor* (a pinned OS thread) per core of its
//!   core mask. Each reactor loops over the lightweight [`Thread`]s placed
//!   on it: drain a batch of messages, run active pollers, run due timed
//!   pollers. In interrupt mode an idle reactor sleeps in epoll until a
//!   message, a timer deadline or a registered fd wakes it.
//! * A [`Thread`] never moves between reactors, so state it owns may use
//!   `Rc`/`RefCell`. Other OS threads talk to it with
//!   [`ThreadHandle::send_msg`].
//! * An [`IoDevice`] gives each thread its own [`IoChannel`]: per-thread
//!   state reached without locks on the I/O path.
//! * An [`EmbeddedThread`] is a lightweight thread that an embedder's own
//!   OS thread hosts and polls (fio's job threads), instead of a reactor.
//!
//! ```
//! use bdevkit::thread::{Runtime, RuntimeOptions, CpuSet, Thread, PollerStatus};
//! let rt = Runtime::start(RuntimeOptions::interrupt(CpuSet::single(0))).unwrap();
//! let answer = rt.app_thread().run_sync(|| {
//!     let t = Thread::current().unwrap();
//!     t.name().to_string()
//! }).unwrap();
//! assert_eq!(answer, "app_thread");
//! rt.shutdown();
//! ```

// Layers, each file importing only from the ones listed before it:
// `cpuset`, `sys`; `reactor` (what a reactor shares with its threads);
// `shared` (what other OS threads see of a thread); `poller`, `executor`,
// `channels` (the sets a thread owns); `lwthread` (the thread, its poll
// loop and `ThreadHandle`); `io_channel`; `runtime` (reactors and their
// loop); `embedded` (threads an embedder polls on its own OS thread).
mod channels;
mod cpuset;
mod embedded;
mod executor;
mod io_channel;
mod lwthread;
mod poller;
mod reactor;
mod runtime;
mod shared;
mod sys;

pub use cpuset::{CpuSet, CpuSetParseError, MAX_CPUS};
pub use embedded::EmbeddedThread;
pub use io_channel::{ChannelStep, IoChannel, IoDevice};
pub use lwthread::{current_thread_id, InterruptFd, Thread, ThreadHandle};
pub use poller::{Poller, PollerInfo, PollerStatus};
pub use runtime::{
    thread_stats, ReactorStats, Runtime, RuntimeHandle, RuntimeOptions, ThreadStats,
};

#[cfg(test)]
mod tests;
