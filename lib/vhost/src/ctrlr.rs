//! A vhost-user-blk controller: a bdev opened for the guest, the
//! lightweight threads its queues run on (one per core of its cpumask),
//! and its unix socket, served by a control thread (`control.rs`).
//!
//! The control thread is the control plane only (the vhost-user
//! messages: features, memory table, ring set-up; SPDK's DPDK runs one
//! thread for all sockets). It sleeps in poll(2) on the listener or the
//! connection and on a stop eventfd, and handles one message at a time;
//! it may block on the queues' threads (a ring's stop waits for its
//! requests), never the other way round. One connection at a time: when
//! the frontend goes (QEMU killed), the session's queues stop and the
//! memory goes when their last I/O does, and the next frontend (QEMU
//! restarted) connects to the same socket.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bdevkit::bdev::BdevDesc;
use bdevkit::thread::{CpuSet, IoDevice, ThreadHandle};
use parking_lot::{Condvar, Mutex};

use crate::blk::BlkInfo;
use crate::queue::{Coalescing, Queues};

/// What `vhost_get_controllers` shows of the connected frontend.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionInfo {
    /// Process-wide connection number (SPDK's `vid`).
    pub vid: u32,
    /// Connection number of this controller.
    pub id: u32,
    /// A ring is running.
    pub started: bool,
    /// Rings set up by the frontend.
    pub max_queues: u32,
    /// Requests in flight, per ring.
    pub in_flight: Vec<Arc<AtomicU32>>,
}

/// Process-wide connection counter (SPDK's `vid`).
static NEXT_VID: AtomicU32 = AtomicU32::new(0);

/// One controller.
pub(crate) struct Controller {
    pub name: String,
    pub bdev_name: String,
    pub readonly: bool,
    pub cpumask: CpuSet,
    pub socket: PathBuf,
    pub info: Arc<BlkInfo>,
    /// The bdev; `None` once it was hot-removed.
    pub desc: Mutex<Option<Arc<BdevDesc>>>,
    /// The threads the queues run on: queue `i` on `threads[i % len]`.
    pub threads: Vec<ThreadHandle>,
    pub queues: IoDevice<Queues>,
    pub coalescing: Mutex<Coalescing>,
    pub interrupt: bool,
    pub session: Mutex<Option<SessionInfo>>,
    /// Signalled when the frontend goes.
    pub(crate) gone: Condvar,
    pub(crate) next_session: AtomicU32,
    pub(crate) control: Mutex<Option<Control>>,
}

/// The control thread and how to stop it.
pub(crate) struct Control {
    pub(crate) stop: Arc<OwnedFd>,
    pub(crate) join: std::thread::JoinHandle<()>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("bdev", &self.bdev_name)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// Blocks until no frontend is connected.
    pub(crate) fn wait_disconnected(&self) {
        let mut s = self.session.lock();
        while s.is_some() {
            self.gone.wait(&mut s);
        }
    }

    pub(crate) fn set_session(&self, s: Option<SessionInfo>) {
        let gone = s.is_none();
        *self.session.lock() = s;
        if gone {
            self.gone.notify_all();
        }
    }

    /// Stops the control thread (a connected frontend is disconnected and
    /// its queues stopped first), removes the socket and lets the threads
    /// exit. Blocks: call from outside the reactors.
    pub(crate) fn shutdown(&self) {
        if let Some(c) = self.control.lock().take() {
            let _ = rustix::io::write(&*c.stop, &1u64.to_ne_bytes());
            let _ = c.join.join();
        }
        let _ = std::fs::remove_file(&self.socket);
        self.desc.lock().take();
        for t in &self.threads {
            let _ = t.send_msg(|| {
                if let Some(t) = bdevkit::thread::Thread::current() {
                    t.exit();
                }
            });
        }
    }

    pub(crate) fn new_session(&self) -> SessionInfo {
        SessionInfo {
            vid: NEXT_VID.fetch_add(1, Ordering::Relaxed),
            id: self.next_session.fetch_add(1, Ordering::Relaxed),
            ..SessionInfo::default()
        }
    }
}
