//! The copy itself, on one reactor thread: `qd` workers (local futures),
//! each with one I/O-unit buffer, take the next unit of the plan, read it
//! from the input and write it to the output, until none is left, an I/O
//! fails or a stop is asked for. Bdevs go through their channels' async
//! surface; files through the helper threads ([`crate::pool`]).
//!
//! The main thread reads [`Progress`] for the progress line and gets the
//! outcome from the channel given to [`start`], sent once every worker has
//! finished and the bdevs are closed.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use anyhow::Result;
use bdevkit::bdev::{BdevChannel, BdevDesc, BdevEvent, BdevManager};
use bdevkit::dma::DmaBuf;
use bdevkit::thread::Thread;
use parking_lot::Mutex;

use crate::file::strerror;
use crate::plan::{DataMap, Plan, Unit};
use crate::pool::{Op, PoolHandle};

/// Counters the main thread reads while the copy runs.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes done: copied, or skipped by `--sparse`.
    pub done: AtomicU64,
    /// Bytes of those not written (`--sparse`).
    pub skipped: AtomicU64,
    /// No new unit is started once set (a signal, a failure).
    pub stop: AtomicBool,
    /// Set when a bdev of the copy was hot-removed.
    pub removed: Mutex<Option<String>>,
}

/// One side of the copy, as the reactor gets it.
#[derive(Debug)]
pub enum SideSpec {
    /// An open file (its path for messages).
    File(Arc<File>, String),
    /// A bdev, opened on the reactor.
    Bdev(String),
}

/// Everything the reactor needs (`Send`).
#[derive(Debug)]
pub struct Setup {
    /// The checked copy.
    pub plan: Plan,
    /// Where to read.
    pub input: SideSpec,
    /// Where to write.
    pub output: SideSpec,
    /// `--sparse`: do not write units in a hole of the input or that read
    /// back as zeroes.
    pub sparse: bool,
    /// The input file's data ranges (`--sparse`, when the file tells).
    pub data_map: Option<DataMap>,
    /// The file helpers (when a side is a file).
    pub pool: Option<PoolHandle>,
    /// Shared counters.
    pub progress: Arc<Progress>,
}

/// An I/O failure, with the buffer back when the I/O returned it.
type Failure = (String, Option<DmaBuf>);

enum Io {
    File {
        file: Arc<File>,
        path: String,
        pool: PoolHandle,
    },
    Bdev {
        ch: BdevChannel,
        name: String,
        block_size: u64,
    },
}

impl Io {
    /// Reads `len` bytes at `off` into `buf`; the bytes read (a file may
    /// end sooner; a bdev reads all or fails).
    async fn read(&self, off: u64, len: u64, buf: DmaBuf) -> Result<(DmaBuf, u64), Failure> {
        match self {
            Io::File { file, path, pool } => {
                let n = usize::try_from(len).unwrap_or(usize::MAX);
                match pool.submit(file, Op::Read, off, n, buf).await {
                    (buf, Ok(got)) => Ok((buf, got as u64)),
                    (buf, Err(e)) => Err((
                        format!("read of {path} at offset {off} failed: {}", strerror(&e)),
                        Some(buf),
                    )),
                }
            }
            Io::Bdev {
                ch,
                name,
                block_size,
            } => {
                let (block, n) = (off / block_size, len / block_size);
                match ch.read(block, n, buf).await {
                    Ok(buf) => Ok((buf, len)),
                    Err(f) => Err((
                        format!(
                            "read of {n} blocks at block {block} of bdev {name} failed: {}",
                            f.error
                        ),
                        f.buf,
                    )),
                }
            }
        }
    }

    /// Writes `len` bytes of `buf` at `off`.
    async fn write(&self, off: u64, len: u64, buf: DmaBuf) -> Result<DmaBuf, Failure> {
        match self {
            Io::File { file, path, pool } => {
                let n = usize::try_from(len).unwrap_or(usize::MAX);
                match pool.submit(file, Op::Write, off, n, buf).await {
                    (buf, Ok(_)) => Ok(buf),
                    (buf, Err(e)) => Err((
                        format!("write to {path} at offset {off} failed: {}", strerror(&e)),
                        Some(buf),
                    )),
                }
            }
            Io::Bdev {
                ch,
                name,
                block_size,
            } => {
                let (block, n) = (off / block_size, len / block_size);
                ch.write(block, n, buf).await.map_err(|f| {
                    (
                        format!(
                            "write of {n} blocks at block {block} of bdev {name} failed: {}",
                            f.error
                        ),
                        f.buf,
                    )
                })
            }
        }
    }

    fn name(&self) -> &str {
        match self {
            Io::File { path, .. } => path,
            Io::Bdev { name, .. } => name,
        }
    }
}

/// Sends the outcome when dropped: after everything declared before it
/// in [`Engine`].
struct Finish {
    tx: mpsc::Sender<Result<(), String>>,
    error: RefCell<Option<String>>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        let r = match self.error.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        let _ = self.tx.send(r);
    }
}

// Field order is drop order: the channels (in `input`/`output`) before
// the descriptors, and the outcome last, once the bdevs are closed.
struct Engine {
    input: Io,
    output: Io,
    _descs: Vec<BdevDesc>,
    plan: Plan,
    sparse: bool,
    data_map: Option<DataMap>,
    next: Cell<u64>,
    progress: Arc<Progress>,
    finish: Finish,
}

/// Whether every byte is zero.
fn is_zero(b: &[u8]) -> bool {
    // Folds into wide ORs; no early exit needed at these sizes.
    b.iter().fold(0u8, |acc, x| acc | x) == 0
}

impl Engine {
    /// The next unit to copy, or `None` when done or stopping. Units
    /// wholly in a hole of the input file are counted and passed over.
    fn claim(&self) -> Option<Unit> {
        loop {
            if self.progress.stop.load(Ordering::Acquire) || self.finish.error.borrow().is_some() {
                return None;
            }
            let i = self.next.get();
            if i >= self.plan.units {
                return None;
            }
            self.next.set(i + 1);
            let u = self.plan.unit(i);
            let hole = self
                .data_map
                .as_ref()
                .is_some_and(|m| !m.has_data(u.in_off, u.in_off + u.len));
            if !hole {
                return Some(u);
            }
            self.skipped(u.len);
        }
    }

    fn skipped(&self, len: u64) {
        self.progress.skipped.fetch_add(len, Ordering::Relaxed);
        self.progress.done.fetch_add(len, Ordering::Relaxed);
    }

    fn fail(&self, msg: String) {
        let mut e = self.finish.error.borrow_mut();
        if e.is_none() {
            *e = Some(msg);
        }
    }

    async fn copy_unit(&self, u: Unit, buf: DmaBuf) -> Result<DmaBuf, Failure> {
        let (mut buf, got) = self.input.read(u.in_off, u.read_len, buf).await?;
        if got < u.len {
            return Err((
                format!(
                    "{}: unexpected end of input at offset {} ({} bytes short)",
                    self.input.name(),
                    u.in_off + got,
                    u.len - got
                ),
                Some(buf),
            ));
        }
        let len = usize::try_from(u.len).expect("invariant: len <= bs, a buffer length");
        if self.sparse && is_zero(&buf.as_slice()[..len]) {
            self.skipped(u.len);
            return Ok(buf);
        }
        if u.write_len > u.len {
            // The last unit ends inside an output block: keep the rest of
            // that block as the output has it.
            let wlen = usize::try_from(u.write_len).expect("invariant: write_len <= bs");
            let old = match DmaBuf::new(wlen) {
                Ok(b) => b,
                Err(e) => return Err((format!("I/O buffer: {e}"), Some(buf))),
            };
            // A file may end sooner: past its end the block reads as zeroes.
            let (old, _) = match self.output.read(u.out_off, u.write_len, old).await {
                Ok(r) => r,
                Err((msg, _)) => return Err((msg, Some(buf))),
            };
            buf.as_mut_slice()[len..wlen].copy_from_slice(&old.as_slice()[len..wlen]);
        }
        let buf = self.output.write(u.out_off, u.write_len, buf).await?;
        self.progress.done.fetch_add(u.len, Ordering::Relaxed);
        Ok(buf)
    }
}

async fn worker(e: Rc<Engine>, mut buf: DmaBuf) {
    while let Some(u) = e.claim() {
        match e.copy_unit(u, buf).await {
            Ok(b) => buf = b,
            Err((msg, _)) => {
                e.fail(msg);
                return;
            }
        }
    }
}

fn open_bdev(
    mgr: &BdevManager,
    name: &str,
    write: bool,
    progress: &Arc<Progress>,
) -> Result<(Io, BdevDesc)> {
    let p = Arc::clone(progress);
    let who = name.to_string();
    let desc = mgr
        .open(name, write, move |ev| {
            if ev == BdevEvent::Remove {
                *p.removed.lock() = Some(format!("bdev {who} was removed during the copy"));
                p.stop.store(true, Ordering::Release);
            }
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "Could not open bdev {name}: {}",
                strerror(&std::io::Error::from_raw_os_error(e.errno()))
            )
        })?;
    let ch = desc.get_io_channel().map_err(|e| {
        anyhow::anyhow!(
            "Could not get I/O channel: {}",
            strerror(&std::io::Error::from_raw_os_error(e.errno()))
        )
    })?;
    let block_size = u64::from(desc.bdev().block_size());
    Ok((
        Io::Bdev {
            ch,
            name: name.to_string(),
            block_size,
        },
        desc,
    ))
}

fn side_io(
    spec: SideSpec,
    write: bool,
    mgr: &BdevManager,
    pool: Option<&PoolHandle>,
    progress: &Arc<Progress>,
    descs: &mut Vec<BdevDesc>,
) -> Result<Io> {
    match spec {
        SideSpec::File(file, path) => Ok(Io::File {
            file,
            path,
            pool: pool
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("internal: a file side without helper threads"))?,
        }),
        SideSpec::Bdev(name) => {
            let (io, desc) = open_bdev(mgr, &name, write, progress)?;
            descs.push(desc);
            Ok(io)
        }
    }
}

/// Opens the bdevs and starts the workers on the current (reactor)
/// thread. The outcome arrives on `done` once all of them have finished
/// and the bdevs are closed again; nothing arrives when this fails.
///
/// # Errors
/// spdk_dd's "Could not open bdev NAME: REASON", an I/O buffer that cannot
/// be allocated, or no current thread.
pub fn start(
    mgr: &BdevManager,
    setup: Setup,
    done: mpsc::Sender<Result<(), String>>,
) -> Result<()> {
    let thread = Thread::try_current()?;
    let mut descs = Vec::new();
    let pool = setup.pool.as_ref();
    let input = side_io(setup.input, false, mgr, pool, &setup.progress, &mut descs)?;
    let output = side_io(setup.output, true, mgr, pool, &setup.progress, &mut descs)?;
    let bs = usize::try_from(setup.plan.bs)?;
    let mut bufs = Vec::new();
    for _ in 0..setup.plan.qd {
        bufs.push(
            DmaBuf::new(bs).map_err(|e| anyhow::anyhow!("{e} - try smaller block size value"))?,
        );
    }
    let engine = Rc::new(Engine {
        input,
        output,
        _descs: descs,
        plan: setup.plan,
        sparse: setup.sparse,
        data_map: setup.data_map,
        next: Cell::new(0),
        progress: setup.progress,
        finish: Finish {
            tx: done,
            error: RefCell::new(None),
        },
    });
    for buf in bufs {
        thread.spawn_local(worker(Rc::clone(&engine), buf));
    }
    // With no unit to copy the last reference goes here, and the outcome
    // is sent at once.
    drop(engine);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_detection() {
        assert!(is_zero(&[0; 4096]));
        let mut b = vec![0u8; 4096];
        b[4095] = 1;
        assert!(!is_zero(&b));
        assert!(is_zero(&[]));
    }
}
