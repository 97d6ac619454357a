//! The control thread of a controller: it listens on the socket and
//! serves one frontend's vhost-user messages at a time (`session.rs`),
//! sleeping in poll(2) on the listener or the connection and a stop
//! eventfd.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use bdevkit::bdev::BdevDesc;
use bdevkit::thread::{CpuSet, IoDevice, ThreadHandle};
use parking_lot::{Condvar, Mutex};
use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use vhost::vhost_user::{BackendReqHandler, Error as VuError};

use crate::blk::BlkInfo;
use crate::ctrlr::{Control, Controller};
use crate::queue::{Coalescing, Queues};
use crate::session::Session;

/// What a controller is made of.
pub(crate) struct Parts {
    pub name: String,
    pub bdev_name: String,
    pub readonly: bool,
    pub cpumask: CpuSet,
    pub socket: PathBuf,
    pub info: Arc<BlkInfo>,
    pub desc: Arc<BdevDesc>,
    pub threads: Vec<ThreadHandle>,
    pub coalescing: Coalescing,
    pub interrupt: bool,
}

impl Controller {
    /// The controller of `p`, listening on its socket.
    pub(crate) fn start(p: Parts) -> std::io::Result<Arc<Controller>> {
        let _ = std::fs::remove_file(&p.socket);
        let listener = UnixListener::bind(&p.socket)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?);
        let c = Arc::new(Controller {
            queues: IoDevice::register(format!("vhost_blk.{}", p.name), || Ok(Queues::default())),
            name: p.name,
            bdev_name: p.bdev_name,
            readonly: p.readonly,
            cpumask: p.cpumask,
            socket: p.socket,
            info: p.info,
            desc: Mutex::new(Some(p.desc)),
            threads: p.threads,
            coalescing: Mutex::new(p.coalescing),
            interrupt: p.interrupt,
            session: Mutex::new(None),
            gone: Condvar::new(),
            next_session: AtomicU32::new(0),
            control: Mutex::new(None),
        });
        let (c2, stop2) = (Arc::clone(&c), Arc::clone(&stop));
        let join = std::thread::Builder::new()
            .name(format!("vhost-{}", c.name))
            .spawn(move || serve(&c2, &listener, &stop2))?;
        *c.control.lock() = Some(Control { stop, join });
        Ok(c)
    }
}

/// Whether `fd` (or the stop eventfd) is readable; blocks until one is.
/// Returns (fd readable, stop asked).
fn wait(fd: &impl AsFd, stop: &OwnedFd) -> (bool, bool) {
    let mut fds = [
        PollFd::new(fd, PollFlags::IN),
        PollFd::new(stop, PollFlags::IN),
    ];
    loop {
        match poll(&mut fds, None) {
            Ok(_) => break,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return (false, true),
        }
    }
    let hit = |f: &PollFd<'_>| !f.revents().is_empty();
    (hit(&fds[0]), hit(&fds[1]))
}

/// The control thread: accept a frontend, serve its messages until it
/// goes, again, until asked to stop.
fn serve(c: &Arc<Controller>, listener: &UnixListener, stop: &OwnedFd) {
    loop {
        let (ready, quit) = wait(listener, stop);
        if quit {
            return;
        }
        if !ready {
            continue;
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                tracing::error!(ctrlr = %c.name, error = %e, "vhost accept failed");
                continue;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        let info = c.new_session();
        tracing::info!(ctrlr = %c.name, vid = info.vid, "vhost frontend connected");
        c.set_session(Some(info));
        let Ok(watch) = stream.try_clone() else {
            c.set_session(None);
            continue;
        };
        let session = Arc::new(std::sync::Mutex::new(Session::new(Arc::clone(c))));
        let mut handler = BackendReqHandler::from_stream(stream, Arc::clone(&session));
        let quit = loop {
            let (ready, quit) = wait(&watch, stop);
            if quit {
                break true;
            }
            if !ready {
                continue;
            }
            match handler.handle_request() {
                Ok(()) => {}
                Err(e) if disconnected(&e) => break false,
                Err(e) => {
                    tracing::warn!(ctrlr = %c.name, error = %e, "vhost-user request failed");
                }
            }
        };
        drop(handler);
        if let Ok(mut s) = session.lock() {
            s.disconnect();
        }
        c.set_session(None);
        tracing::info!(ctrlr = %c.name, "vhost frontend disconnected");
        if quit {
            return;
        }
    }
}

/// Whether `e` means the connection is gone (else one message failed).
fn disconnected(e: &VuError) -> bool {
    matches!(
        e,
        VuError::Disconnected
            | VuError::SocketBroken(_)
            | VuError::SocketError(_)
            | VuError::PartialMessage
            | VuError::InvalidMessage
            | VuError::OversizedMsg
            | VuError::IncorrectFds
    )
}
