//! The `malloc` bdev module: RAM-backed bdevs. The memory is allocated and
//! touched at creation (no page faults during I/O) and shared by every
//! thread's channel; data moves with plain memory copies and completes
//! from the channel's poller.
//!
//! RPCs: `bdev_malloc_create`, `bdev_malloc_delete` (see [`rpc`]).
//! Supported I/O: read, write, write_zeroes, unmap, flush, reset, compare,
//! compare_and_write, copy, abort.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod rpc;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bdevkit::bdev::module::{
    Backend, BackendModule, Bdev, BdevIo, BdevManager, BdevOps, BdevProps, CompletionQueue,
    Geometry, IoStatus, IoType, ModuleIo, Poller, PollerStatus, Thread,
};
use bdevkit::dma::SharedMem;
use bdevkit::error::BoxError;
use bdevkit::{Error, Result};
use serde_json::{json, Value};

pub use rpc::MallocCreateParams;

/// Module name.
pub const MODULE: &str = "malloc";
/// `product_name` of malloc bdevs.
pub const PRODUCT_NAME: &str = "Malloc disk";

/// The malloc module: nothing to examine; its saved config is one
/// `bdev_malloc_create` per bdev ([`MallocBdev`]'s [`Backend`]).
pub type MallocModule = BackendModule<MallocBdev>;

/// What an app links of this module: [`register`], the RPC methods of
/// [`rpc`] and its log flags (`log_set_flag`).
pub const MODULE_DEF: bdevkit::bdev::module::ModuleDef<
    bdevkit_jsonrpc::MethodRegistry,
    bdevkit_jsonrpc::Error,
> = bdevkit::bdev::module::ModuleDef {
    name: MODULE,
    register,
    register_rpcs: rpc::register_rpcs,
    log_flags: &[bdevkit::bdev::module::LogFlag {
        name: "bdev_malloc",
        targets: &["bdevkit_malloc"],
        aliases: &[],
    }],
};

/// Adds the malloc module to `mgr`.
pub fn register(mgr: &BdevManager) {
    MallocModule::register(mgr);
}

/// One malloc bdev.
#[derive(Debug)]
pub struct MallocBdev {
    params: MallocCreateParams,
    mem: Arc<SharedMem>,
    block_size: u64,
}

/// A saved config recreates a malloc bdev with SPDK's `bdev_malloc_create`
/// entry: its geometry, then its I/O boundary and NUMA node.
impl Backend for MallocBdev {
    const MODULE: &'static str = MODULE;

    fn config_params(&self, _bdev: &Bdev) -> Value {
        let p = &self.params;
        let boundary = p.optimal_io_boundary.unwrap_or(0);
        json!({"optimal_io_boundary": boundary, "numa_id": p.numa_id.unwrap_or(-1)})
    }
}

impl MallocBdev {
    fn byte_range(&self, offset_blocks: u64, num_blocks: u64) -> Option<(usize, usize)> {
        let off = usize::try_from(offset_blocks.checked_mul(self.block_size)?).ok()?;
        let len = usize::try_from(num_blocks.checked_mul(self.block_size)?).ok()?;
        Some((off, len))
    }

    /// Serves `io` synchronously; returns its status.
    fn execute(&self, io: &mut BdevIo) -> IoStatus {
        let Some((off, len)) = self.byte_range(io.offset_blocks(), io.num_blocks()) else {
            return IoStatus::Errno(libc::EINVAL);
        };
        let ok = |b: bool| {
            if b {
                IoStatus::Success
            } else {
                IoStatus::Errno(libc::EINVAL)
            }
        };
        match io.io_type() {
            IoType::Read => ok(read_into(&self.mem, io, off)),
            IoType::Write => ok(io.write_to_shared(&self.mem, off)),
            IoType::Unmap | IoType::WriteZeroes => ok(self.mem.fill(off, len, 0)),
            IoType::Flush | IoType::Reset => IoStatus::Success,
            IoType::Compare => {
                if self.segments_equal(io, off) {
                    IoStatus::Success
                } else {
                    IoStatus::Miscompare
                }
            }
            IoType::CompareAndWrite => {
                if !self.segments_equal(io, off) {
                    return IoStatus::Miscompare;
                }
                let mut data = vec![0u8; len];
                io.copy_from_aux_iovs(&mut data);
                ok(self.mem.write(off, &data))
            }
            IoType::Copy => {
                let Some((src, _)) = self.byte_range(io.src_offset_blocks(), io.num_blocks())
                else {
                    return IoStatus::Errno(libc::EINVAL);
                };
                ok(self.mem.copy_within(src, off, len))
            }
            // Every I/O completes before the next poll: nothing to abort.
            IoType::Abort => IoStatus::Failed,
            _ => IoStatus::Errno(libc::ENOTSUP),
        }
    }

    fn segments_equal(&self, io: &BdevIo, off: usize) -> bool {
        let mut pos = off;
        let mut equal = true;
        io.for_each_segment(|seg| {
            equal &= self.mem.equals(pos, seg);
            pos += seg.len();
        });
        equal
    }
}

/// Per-thread channel: finished I/Os wait for the next poll.
#[derive(Debug)]
pub struct MallocChannel {
    q: CompletionQueue,
    /// Reads whose data is copied by the poller: the source was prefetched
    /// at submission, so the copy finds it in cache one poll later instead
    /// of stalling on memory inside `submit`.
    reads: Rc<RefCell<VecDeque<(BdevIo, usize)>>>,
    poller: Poller,
}

impl Drop for MallocChannel {
    fn drop(&mut self) {
        self.poller.unregister();
    }
}

/// Copies the bytes at `off` into `io`'s segments (racy copies on both
/// sides: guest memory of a VM is read into directly).
fn read_into(mem: &SharedMem, io: &mut BdevIo, off: usize) -> bool {
    // A read's data is always writable; false would mean nothing was read.
    io.read_from_shared(mem, off)
}

impl BdevOps for MallocBdev {
    type Channel = MallocChannel;

    fn create_channel(&self) -> std::result::Result<MallocChannel, BoxError> {
        let t = Thread::try_current()?;
        let reads: Rc<RefCell<VecDeque<(BdevIo, usize)>>> = Rc::default();
        let (r2, mem) = (Rc::clone(&reads), Arc::clone(&self.mem));
        let poller = t.register_poller("malloc_read", 0, move |_| {
            let n = r2.borrow().len();
            for _ in 0..n {
                let next = r2.borrow_mut().pop_front();
                let Some((mut io, off)) = next else { break };
                let status = if read_into(&mem, &mut io, off) {
                    IoStatus::Success
                } else {
                    IoStatus::Errno(libc::EINVAL)
                };
                io.complete(status);
            }
            PollerStatus::from(n > 0)
        });
        Ok(MallocChannel {
            q: CompletionQueue::new("malloc_io")?,
            reads,
            poller,
        })
    }

    #[inline]
    fn submit(&self, ch: &MallocChannel, mut io: BdevIo) {
        if io.io_type() == IoType::Read {
            if let Some((off, len)) = self.byte_range(io.offset_blocks(), io.num_blocks()) {
                self.mem.prefetch(off, len);
                ch.reads.borrow_mut().push_back((io, off));
                return;
            }
        }
        let status = self.execute(&mut io);
        ch.q.push(io, status);
    }

    fn io_type_supported(&self, io_type: IoType) -> bool {
        io_type.is_block_io()
    }
}

fn props(name: &str, p: &MallocCreateParams) -> Result<BdevProps> {
    let mut props = Geometry::of(p)?.props(name, PRODUCT_NAME)?;
    if props.md_size != 0 && !p.md_interleave.unwrap_or(false) {
        return Err(Error::InvalidArg(
            "separate metadata is not supported; use md_interleave".into(),
        ));
    }
    if let Some(n) = p.numa_id {
        if n != -1 && n != 0 {
            return Err(Error::InvalidArg(format!("numa_id {n} does not exist")));
        }
    }
    props.uuid = p.uuid;
    props.numa_id = Some(p.numa_id.unwrap_or(-1));
    props.write_cache = false;
    let boundary = p.optimal_io_boundary.unwrap_or(0);
    props.optimal_io_boundary = boundary;
    props.split_on_optimal_io_boundary = boundary != 0;
    Ok(props)
}

/// Creates a malloc bdev (call on a bdevkit thread). Without a name it is
/// called `Malloc<N>`.
pub fn create(mgr: &BdevManager, mut params: MallocCreateParams) -> Result<Bdev> {
    let name = match &params.name {
        Some(n) if !n.is_empty() => n.clone(),
        Some(_) => return Err(Error::InvalidArg("name must not be empty".into())),
        None => next_name(mgr),
    };
    let props = props(&name, &params)?;
    let bytes = params
        .num_blocks
        .checked_mul(u64::from(props.block_size))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| Error::InvalidArg("bdev too large".into()))?;
    if mgr.get(&name).is_some() {
        return Err(Error::Exists(name));
    }
    let mem = Arc::new(SharedMem::new(bytes).map_err(|_| Error::NoMem)?);
    params.name = Some(name);
    let bdev = MallocBdev {
        block_size: u64::from(props.block_size),
        params,
        mem,
    };
    mgr.register_bdev(MODULE, props, Arc::new(bdev))
}

/// Counter for generated names (process-wide, as SPDK's).
static NEXT_MALLOC: AtomicU64 = AtomicU64::new(0);

fn next_name(mgr: &BdevManager) -> String {
    loop {
        let n = NEXT_MALLOC.fetch_add(1, Ordering::Relaxed);
        let name = format!("Malloc{n}");
        if mgr.get(&name).is_none() {
            return name;
        }
    }
}

/// Deletes the malloc bdev `name`; `done` gets the outcome on the calling
/// thread (at once when there is no such bdev).
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    mgr.unregister_by_name(name, MODULE, done);
}
