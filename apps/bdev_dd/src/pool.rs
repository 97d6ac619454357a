//! File I/O off the reactor: a few helper OS threads run `pread`/`pwrite`
//! and hand the buffer back to the reactor's future through its waker
//! (which posts a message to the reactor thread). Reactors never make a
//! blocking file call.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use bdevkit::dma::DmaBuf;
use parking_lot::Mutex;

/// A read or a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `pread` until `len` bytes or the end of the file.
    Read,
    /// `pwrite` all `len` bytes.
    Write,
}

/// What a finished request gives back: the buffer, and the bytes moved.
pub type Done = (DmaBuf, io::Result<usize>);

#[derive(Default)]
struct Slot {
    done: Option<Done>,
    waker: Option<Waker>,
}

struct Request {
    file: Arc<File>,
    op: Op,
    offset: u64,
    len: usize,
    buf: DmaBuf,
    slot: Arc<Mutex<Slot>>,
}

/// Submits requests to the helper threads; cheap to clone, `Send`.
#[derive(Debug, Clone)]
pub struct PoolHandle {
    tx: mpsc::Sender<Request>,
}

/// The helper threads. They exit once every [`PoolHandle`] is gone;
/// [`Pool::join`] waits for that.
#[derive(Debug)]
pub struct Pool {
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts `n` (at least one) helper threads.
    ///
    /// # Errors
    /// When a thread cannot be spawned.
    pub fn start(n: usize) -> io::Result<(Pool, PoolHandle)> {
        let (tx, rx) = mpsc::channel::<Request>();
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            let rx = Arc::clone(&rx);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("dd_file_{i}"))
                    .spawn(move || serve(&rx))?,
            );
        }
        Ok((Pool { threads }, PoolHandle { tx }))
    }

    /// Waits for the threads to exit (after every handle was dropped).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn serve(rx: &Mutex<mpsc::Receiver<Request>>) {
    loop {
        let req = {
            let rx = rx.lock();
            match rx.recv() {
                Ok(r) => r,
                Err(_) => return,
            }
        };
        let Request {
            file,
            op,
            offset,
            len,
            mut buf,
            slot,
        } = req;
        let r = match op {
            Op::Read => read_full(&file, &mut buf.as_mut_slice()[..len], offset),
            Op::Write => file
                .write_all_at(&buf.as_slice()[..len], offset)
                .map(|()| len),
        };
        let waker = {
            let mut s = slot.lock();
            s.done = Some((buf, r));
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl PoolHandle {
    /// Reads or writes `len` bytes (`<= buf.len()`) of `buf` at `offset`
    /// of `file` on a helper thread.
    pub fn submit(&self, file: &Arc<File>, op: Op, offset: u64, len: usize, buf: DmaBuf) -> FileIo {
        let slot = Arc::new(Mutex::new(Slot::default()));
        let len = len.min(buf.len());
        let req = Request {
            file: Arc::clone(file),
            op,
            offset,
            len,
            buf,
            slot: Arc::clone(&slot),
        };
        if let Err(mpsc::SendError(req)) = self.tx.send(req) {
            // The helpers are gone (only at shutdown): fail at once.
            slot.lock().done = Some((
                req.buf,
                Err(io::Error::other("file helper threads stopped")),
            ));
        }
        FileIo { slot }
    }
}

/// A submitted file request; resolves on the thread that polls it.
pub struct FileIo {
    slot: Arc<Mutex<Slot>>,
}

impl std::fmt::Debug for FileIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileIo").finish_non_exhaustive()
    }
}

impl Future for FileIo {
    type Output = Done;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Done> {
        let mut s = self.slot.lock();
        match s.done.take() {
            Some(d) => Poll::Ready(d),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Polls `fut` until ready, sleeping between polls (a test thread,
    /// not a reactor).
    fn block_on(mut fut: FileIo) -> Done {
        let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
        let w = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&w);
        loop {
            if let Poll::Ready(d) = Pin::new(&mut fut).poll(&mut cx) {
                return d;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn write_then_read_back_on_helpers() {
        let path = std::env::temp_dir().join(format!("bdev_dd-pool-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        let f = Arc::new(f);
        let (pool, h) = Pool::start(2).unwrap();
        let mut buf = DmaBuf::new(4096).unwrap();
        buf.as_mut_slice().fill(0x5a);
        let (buf, r) = block_on(h.submit(&f, Op::Write, 1000, 3000, buf));
        assert_eq!(r.unwrap(), 3000);
        let mut buf = buf;
        buf.as_mut_slice().fill(0);
        // Asks for 4096 at 0: the file has 4000 bytes.
        let (buf, r) = block_on(h.submit(&f, Op::Read, 0, 4096, buf));
        assert_eq!(r.unwrap(), 4000);
        assert!(buf.as_slice()[..1000].iter().all(|b| *b == 0));
        assert!(buf.as_slice()[1000..4000].iter().all(|b| *b == 0x5a));
        drop(h);
        pool.join();
    }
}
