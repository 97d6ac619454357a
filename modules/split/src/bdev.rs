//! The split module, the shared base, the part bdevs and their I/O path.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use bdevkit::bdev::{
    Bdev, BdevChannel, BdevDesc, BdevEvent, BdevIo, BdevManager, BdevModule, BdevOps, BdevProps,
    ClaimType, Done, IoStatus, IoType,
};
use bdevkit::error::BoxError;
use bdevkit::thread::{Thread, ThreadHandle};
use bdevkit::{Error, Result};
use parking_lot::Mutex;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::rpc::SplitCreateParams;
use crate::{MODULE, PRODUCT_NAME};

const MIB: u64 = 1024 * 1024;

/// The split module: one configuration per base bdev.
#[derive(Debug, Default)]
pub struct SplitModule {
    configs: Mutex<Vec<SplitCreateParams>>,
}

impl BdevModule for SplitModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    fn has_examine(&self) -> bool {
        true
    }

    fn examine_config(&self, mgr: &BdevManager, bdev: &Bdev) {
        let matches: Vec<SplitCreateParams> = self
            .configs
            .lock()
            .iter()
            .filter(|c| names_bdev(bdev, &c.base_bdev) && parts_of(mgr, &c.base_bdev).is_empty())
            .cloned()
            .collect();
        for cfg in matches {
            if let Err(e) = attach(mgr, &cfg, bdev) {
                tracing::error!(base = %bdev.name(), error = %e, "cannot split bdev");
            }
        }
    }

    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        self.configs
            .lock()
            .iter()
            .map(|c| {
                json!({"method": "bdev_split_create", "params": {
                    "base_bdev": c.base_bdev,
                    "split_count": c.split_count,
                    "split_size_mb": c.split_size_mb.unwrap_or(0),
                }})
            })
            .collect()
    }
}

impl SplitModule {
    pub(crate) fn create(
        &self,
        mgr: &BdevManager,
        params: SplitCreateParams,
    ) -> Result<Vec<String>> {
        if params.split_count == 0 {
            return Err(Error::InvalidArg("split_count must not be 0".into()));
        }
        if params.base_bdev.is_empty() {
            return Err(Error::InvalidArg("base_bdev must not be empty".into()));
        }
        {
            let mut configs = self.configs.lock();
            if configs.iter().any(|c| c.base_bdev == params.base_bdev) {
                return Err(Error::Exists(format!(
                    "split configuration for {}",
                    params.base_bdev
                )));
            }
            configs.push(params.clone());
        }
        let Some(base) = mgr.get(&params.base_bdev) else {
            tracing::info!(base = %params.base_bdev, "split deferred until the base bdev appears");
            return Ok(Vec::new());
        };
        match attach(mgr, &params, &base) {
            Ok(names) => Ok(names),
            Err(Error::NotFound(_)) => Ok(Vec::new()),
            Err(e) => {
                self.configs
                    .lock()
                    .retain(|c| c.base_bdev != params.base_bdev);
                Err(e)
            }
        }
    }

    pub(crate) fn delete(
        &self,
        mgr: &BdevManager,
        base_bdev: &str,
        done: impl FnOnce() + Send + 'static,
    ) -> Result<()> {
        {
            let mut configs = self.configs.lock();
            let before = configs.len();
            configs.retain(|c| c.base_bdev != base_bdev);
            if configs.len() == before {
                return Err(Error::NotFound(format!(
                    "split configuration for {base_bdev}"
                )));
            }
        }
        unregister_parts(mgr, parts_of(mgr, base_bdev), done);
        Ok(())
    }
}

fn names_bdev(bdev: &Bdev, name: &str) -> bool {
    bdev.name() == name || bdev.aliases().iter().any(|a| a == name)
}

/// The registered parts of the configuration for `base_bdev`.
fn parts_of(mgr: &BdevManager, base_bdev: &str) -> Vec<Bdev> {
    mgr.bdevs()
        .into_iter()
        .filter(|b| b.module_name() == MODULE && !b.is_removing())
        .filter(|b| {
            b.ops_as::<SplitBdev>()
                .is_some_and(|p| p.base.config_base == base_bdev)
        })
        .collect()
}

/// Unregisters `parts`; `done` runs once all are gone.
fn unregister_parts(mgr: &BdevManager, parts: Vec<Bdev>, done: impl FnOnce() + Send + 'static) {
    let left = Arc::new(AtomicUsize::new(parts.len()));
    let done = Arc::new(Mutex::new(Some(Box::new(done) as Box<dyn FnOnce() + Send>)));
    if parts.is_empty() {
        if let Some(d) = done.lock().take() {
            d();
        }
        return;
    }
    for p in parts {
        let (left, done) = (Arc::clone(&left), Arc::clone(&done));
        mgr.unregister(&p, move || {
            if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                if let Some(d) = done.lock().take() {
                    d();
                }
            }
        });
    }
}

/// Part size in blocks and the number of parts that fit, as SPDK computes
/// them.
fn geometry(cfg: &SplitCreateParams, block_size: u32, base_blocks: u64) -> Result<(u64, u64)> {
    let bs = u64::from(block_size);
    let part_blocks = match cfg.split_size_mb {
        Some(mb) if mb != 0 => {
            let bytes = mb
                .checked_mul(MIB)
                .ok_or_else(|| Error::InvalidArg(format!("split size {mb} MB is too large")))?;
            if bytes % bs != 0 {
                return Err(Error::InvalidArg(format!(
                    "split size {mb} MB is not a multiple of block size {block_size}"
                )));
            }
            bytes / bs
        }
        _ => base_blocks / u64::from(cfg.split_count),
    };
    if part_blocks == 0 || part_blocks > base_blocks {
        return Err(Error::InvalidArg(format!(
            "{} parts do not fit in {base_blocks} blocks",
            cfg.split_count
        )));
    }
    let count = u64::from(cfg.split_count).min(base_blocks / part_blocks);
    if count < u64::from(cfg.split_count) {
        tracing::warn!(base = %cfg.base_bdev, requested = cfg.split_count, count,
            "split count clamped to what fits");
    }
    Ok((part_blocks, count))
}

/// Opens and claims the base, then registers the parts. Returns their
/// names.
fn attach(mgr: &BdevManager, cfg: &SplitCreateParams, base: &Bdev) -> Result<Vec<String>> {
    let (part_blocks, count) = geometry(cfg, base.block_size(), base.num_blocks())?;
    let me: Arc<OnceLock<Weak<SplitBase>>> = Arc::new(OnceLock::new());
    let me2 = Arc::clone(&me);
    let desc = mgr.open(base.name(), false, move |event| {
        if let Some(b) = me2.get().and_then(Weak::upgrade) {
            b.base_event(event);
        }
    })?;
    desc.claim(ClaimType::ExclusiveWrite, MODULE)?;
    let shared = Arc::new(SplitBase {
        config_base: cfg.base_bdev.clone(),
        base: base.clone(),
        desc: Mutex::new(Some(desc)),
        opener: Thread::current().map(|t| t.handle()),
        mgr: mgr.clone(),
        removing: AtomicBool::new(false),
        live_parts: AtomicUsize::new(0),
    });
    let _ = me.set(Arc::downgrade(&shared));

    let mut names = Vec::new();
    let mut registered = Vec::new();
    let mut failure = None;
    for i in 0..count {
        let name = format!("{}p{i}", cfg.base_bdev);
        let part = Arc::new(SplitBdev {
            name: name.clone(),
            base: Arc::clone(&shared),
            offset_blocks: i * part_blocks,
        });
        shared.live_parts.fetch_add(1, Ordering::AcqRel);
        match mgr.register_bdev(MODULE, part_props(&name, base, part_blocks), part) {
            Ok(b) => {
                registered.push(b);
                names.push(name);
            }
            Err(e) => {
                shared.live_parts.fetch_sub(1, Ordering::AcqRel);
                failure = Some(e);
                break;
            }
        }
    }
    if let Some(e) = failure {
        // Undo: the parts' destruct closes the base after the last one.
        if registered.is_empty() {
            shared.close_base(None);
        } else {
            unregister_parts(mgr, registered, || {});
        }
        return Err(e);
    }
    tracing::info!(base = %base.name(), count, part_blocks, "split bdev created");
    if base.is_removing() {
        shared.base_event(BdevEvent::Remove);
    }
    Ok(names)
}

fn part_props(name: &str, base: &Bdev, part_blocks: u64) -> BdevProps {
    let b = base.props();
    let mut p = BdevProps::new(name, PRODUCT_NAME, base.block_size(), part_blocks);
    // Stable across restarts: derived from the base's UUID and the name.
    p.uuid = Some(Uuid::new_v5(&base.uuid(), name.as_bytes()));
    p.phys_block_size = b.phys_block_size;
    p.required_alignment = b.required_alignment;
    p.write_cache = b.write_cache;
    p.md_size = b.md_size;
    p.md_interleave = b.md_interleave;
    p.dif_type = b.dif_type;
    p.dif_is_head_of_md = b.dif_is_head_of_md;
    p.dif_pi_format = b.dif_pi_format;
    p
}

/// What the parts of one split share: the open, claimed base.
struct SplitBase {
    /// The base name as configured (part names derive from it).
    config_base: String,
    base: Bdev,
    desc: Mutex<Option<BdevDesc>>,
    opener: Option<ThreadHandle>,
    /// Held to unregister the parts when the base goes (a cycle through
    /// the registry that unregistering the parts breaks).
    mgr: BdevManager,
    removing: AtomicBool,
    /// Parts registered and not yet destructed; the last closes the base.
    live_parts: AtomicUsize,
}

impl SplitBase {
    fn base_event(&self, event: BdevEvent) {
        match event {
            BdevEvent::Remove => {
                if self.removing.swap(true, Ordering::AcqRel) {
                    return;
                }
                tracing::info!(base = %self.base.name(), "base bdev removed; unregistering its parts");
                unregister_parts(&self.mgr, parts_of(&self.mgr, &self.config_base), || {});
            }
            BdevEvent::Resize => {
                tracing::info!(base = %self.base.name(), "base bdev resized; split parts keep their size");
            }
            BdevEvent::MediaManagement => {}
        }
    }

    /// Closes the base on the thread that opened it, then signals `done`.
    fn close_base(&self, done: Option<Done>) {
        let desc = self.desc.lock().take();
        let close = move || {
            drop(desc);
            if let Some(done) = done {
                done.done();
            }
        };
        match &self.opener {
            Some(t) => {
                let _ = t.send_msg(close);
            }
            None => close(),
        }
    }
}

/// One part.
pub struct SplitBdev {
    name: String,
    base: Arc<SplitBase>,
    offset_blocks: u64,
}

impl std::fmt::Debug for SplitBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitBdev")
            .field("name", &self.name)
            .field("base", &self.base.base.name())
            .field("offset_blocks", &self.offset_blocks)
            .finish()
    }
}

impl SplitBdev {
    /// First base block of this part.
    #[must_use]
    pub fn offset_blocks(&self) -> u64 {
        self.offset_blocks
    }

    /// The base bdev.
    #[must_use]
    pub fn base(&self) -> &Bdev {
        &self.base.base
    }
}

/// Per-thread state of a part: this thread's channel to the base.
#[derive(Debug)]
pub struct SplitChannel {
    base: BdevChannel,
}

impl BdevOps for SplitBdev {
    type Channel = SplitChannel;

    fn create_channel(&self) -> std::result::Result<SplitChannel, BoxError> {
        let desc = self.base.desc.lock();
        let desc = desc.as_ref().ok_or("split base bdev is closed")?;
        Ok(SplitChannel {
            base: desc.get_io_channel()?,
        })
    }

    #[inline]
    fn submit(&self, ch: &SplitChannel, io: BdevIo) {
        if self.base.removing.load(Ordering::Relaxed) {
            return io.complete_deferred(IoStatus::Aborted);
        }
        let Some(mut child) = ch.base.alloc_io() else {
            return io.complete_deferred(IoStatus::NoMem);
        };
        child
            .copy_request_from(&io)
            .set_tag(io.tag())
            .on_done_fn(child_done);
        // The bdev layer checked the range against the part, so the
        // translated range stays inside it.
        if io.io_type() != IoType::Reset && io.io_type() != IoType::Abort {
            child.set_offset_blocks(io.offset_blocks() + self.offset_blocks);
            if io.io_type() == IoType::Copy {
                child.set_src_offset_blocks(io.src_offset_blocks() + self.offset_blocks);
            }
        }
        child.set_parent(io);
        if let Err(e) = ch.base.submit(child) {
            let mut child = e.io;
            if let Some(parent) = child.take_parent() {
                parent.complete_deferred(IoStatus::Errno(e.error.errno()));
            }
        }
    }

    /// Block I/O the base serves. NVMe passthrough is not offered: its
    /// LBAs live inside the command, out of reach of the translation.
    fn io_type_supported(&self, io_type: IoType) -> bool {
        matches!(
            io_type,
            IoType::Read
                | IoType::Write
                | IoType::WriteZeroes
                | IoType::Unmap
                | IoType::Flush
                | IoType::Reset
                | IoType::Compare
                | IoType::CompareAndWrite
                | IoType::Copy
                | IoType::Abort
        ) && self.base.base.supports(io_type)
    }

    /// The last part to go closes the base.
    fn destruct(&self, done: Done) {
        if self.base.live_parts.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.base.close_base(Some(done));
        } else {
            done.done();
        }
    }

    fn dump_info_json(&self) -> Value {
        json!({"split": {"base_bdev": self.base.base.name(), "offset_blocks": self.offset_blocks}})
    }
}

fn child_done(mut child: BdevIo) {
    if let Some(parent) = child.take_parent() {
        parent.complete_from(&child);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(count: u32, mb: Option<u64>) -> SplitCreateParams {
        SplitCreateParams {
            base_bdev: "B".into(),
            split_count: count,
            split_size_mb: mb,
        }
    }

    #[test]
    fn geometry_follows_spdk() {
        // Even split, remainder unused.
        assert_eq!(geometry(&cfg(3, None), 512, 100).unwrap(), (33, 3));
        // Fixed size, count clamped to what fits.
        assert_eq!(geometry(&cfg(8, Some(1)), 512, 4096).unwrap(), (2048, 2));
        assert_eq!(geometry(&cfg(2, Some(0)), 4096, 10).unwrap(), (5, 2));
        // A size that is not whole blocks, parts larger than the base,
        // more parts than blocks, overflow.
        assert!(geometry(&cfg(1, Some(1)), 3 * 512, 1 << 20).is_err());
        assert!(geometry(&cfg(1, Some(4)), 512, 4096).is_err());
        assert!(geometry(&cfg(200, None), 512, 100).is_err());
        assert!(geometry(&cfg(1, Some(u64::MAX)), 512, 100).is_err());
    }
}
