//! The split module, the shared base, the part bdevs and their I/O path.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bdevkit::bdev::module::vbdev::{self, BaseBdev, BaseEvents, VbdevConfig, VbdevModule};
use bdevkit::bdev::module::{
    Bdev, BdevChannel, BdevIo, BdevManager, BdevOps, BdevProps, BoxError, Done, Error, IoStatus,
    IoType, ModuleIo, Result,
};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::rpc::SplitCreateParams;
use crate::{MODULE, PRODUCT_NAME};

const MIB: u64 = 1024 * 1024;

/// One configuration per base bdev, which builds several parts.
impl VbdevConfig for SplitCreateParams {
    const MODULE: &'static str = MODULE;
    const CREATE_METHOD: &'static str = "bdev_split_create";
    type Attached = Vec<String>;

    fn attach(&self, mgr: &BdevManager, base: &Bdev) -> Result<Vec<String>> {
        attach(mgr, self, base)
    }

    fn base_name(&self) -> &str {
        &self.base_bdev
    }

    /// The configuration is named after its base.
    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed(&self.base_bdev)
    }

    /// Attached while any of its parts is registered.
    fn is_attached(&self, mgr: &BdevManager) -> bool {
        !parts_of(mgr, &self.base_bdev).is_empty()
    }

    fn duplicate_error(&self) -> Error {
        Error::Exists(format!("split configuration for {}", self.base_bdev))
    }

    /// SPDK saves `split_size_mb` 0 for an even split.
    fn saved_params(&self) -> Value {
        json!({
            "base_bdev": self.base_bdev,
            "split_count": self.split_count,
            "split_size_mb": self.split_size_mb.unwrap_or(0),
        })
    }
}

/// The split module: its configurations in a [`VbdevModule`], whose
/// `BdevModule` examines and emits the saved config.
pub type SplitModule = VbdevModule<SplitCreateParams>;

pub(crate) fn create(
    module: &SplitModule,
    mgr: &BdevManager,
    params: SplitCreateParams,
) -> Result<Vec<String>> {
    if params.split_count == 0 {
        return Err(Error::InvalidArg("split_count must not be 0".into()));
    }
    if params.base_bdev.is_empty() {
        return Err(Error::InvalidArg("base_bdev must not be empty".into()));
    }
    Ok(module.configure(mgr, params)?.unwrap_or_default())
}

pub(crate) fn delete(
    module: &SplitModule,
    mgr: &BdevManager,
    base_bdev: &str,
    done: impl FnOnce() + Send + 'static,
) -> Result<()> {
    if !module.configs().remove(base_bdev) {
        return Err(Error::NotFound(format!(
            "split configuration for {base_bdev}"
        )));
    }
    unregister_parts(mgr, parts_of(mgr, base_bdev), done);
    Ok(())
}

/// The registered parts of the configuration for `base_bdev`.
fn parts_of(mgr: &BdevManager, base_bdev: &str) -> Vec<Bdev> {
    mgr.bdevs()
        .into_iter()
        .filter(|b| b.module_name() == MODULE && !b.is_removing())
        .filter(|b| {
            b.ops_as::<SplitBdev>()
                .is_some_and(|p| p.shared.config_base == base_bdev)
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
    let (base_bdev, link) = BaseBdev::open(mgr, base, MODULE)?;
    let shared = Arc::new(SplitBase {
        config_base: cfg.base_bdev.clone(),
        base: base_bdev,
        mgr: mgr.clone(),
        live_parts: AtomicUsize::new(0),
    });
    link.bind(&shared);

    let mut names = Vec::new();
    let mut registered = Vec::new();
    let mut failure = None;
    for i in 0..count {
        let name = format!("{}p{i}", cfg.base_bdev);
        let part = Arc::new(SplitBdev {
            name: name.clone(),
            shared: Arc::clone(&shared),
            offset_blocks: i * part_blocks,
        });
        shared.live_parts.fetch_add(1, Ordering::AcqRel);
        let props = part_props(&name, base, i * part_blocks, part_blocks);
        match mgr.register_bdev(MODULE, props, part) {
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
    link.catch_up();
    Ok(names)
}

fn part_props(name: &str, base: &Bdev, offset_blocks: u64, part_blocks: u64) -> BdevProps {
    let mut p = vbdev::props_over(base, name, PRODUCT_NAME, part_blocks);
    // Stable across restarts, and SPDK's: derived from the base's UUID
    // and the part's block range.
    p.uuid = Some(vbdev::part_uuid(base.uuid(), offset_blocks, part_blocks));
    p
}

/// What the parts of one split share: the open, claimed base.
struct SplitBase {
    /// The base name as configured (part names derive from it).
    config_base: String,
    /// The open, claimed base (closed after the last part).
    base: BaseBdev,
    /// Held to unregister the parts when the base goes (a cycle through
    /// the registry that unregistering the parts breaks).
    mgr: BdevManager,
    /// Parts registered and not yet destructed; the last closes the base.
    live_parts: AtomicUsize,
}

impl BaseEvents for SplitBase {
    fn base_bdev(&self) -> &BaseBdev {
        &self.base
    }

    fn base_removed(&self) {
        tracing::info!(base = %self.base.bdev().name(), "base bdev removed; unregistering its parts");
        unregister_parts(&self.mgr, parts_of(&self.mgr, &self.config_base), || {});
    }

    fn base_resized(&self) {
        tracing::info!(base = %self.base.bdev().name(), "base bdev resized; split parts keep their size");
    }
}

impl SplitBase {
    /// Closes the base on the thread that opened it, then signals `done`.
    fn close_base(&self, done: Option<Done>) {
        self.base.close(move || {
            if let Some(done) = done {
                done.done();
            }
        });
    }
}

/// One part.
pub struct SplitBdev {
    name: String,
    /// The base, shared with the other parts.
    shared: Arc<SplitBase>,
    offset_blocks: u64,
}

impl std::fmt::Debug for SplitBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitBdev")
            .field("name", &self.name)
            .field("base", &self.shared.base.bdev().name())
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
        self.shared.base.bdev()
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
        Ok(SplitChannel {
            base: self.shared.base.channel()?,
        })
    }

    #[inline]
    fn submit(&self, ch: &SplitChannel, io: BdevIo) {
        if self.shared.base.is_removing() {
            return io.complete_deferred(IoStatus::Aborted);
        }
        vbdev::forward(&ch.base, io, |child| {
            child.on_done_fn(vbdev::complete_parent);
            // The child has the part's request; the bdev layer checked the
            // range against the part, so the translated range stays inside
            // it.
            let t = child.io_type();
            if t != IoType::Reset && t != IoType::Abort {
                child.set_offset_blocks(child.offset_blocks() + self.offset_blocks);
                if t == IoType::Copy {
                    child.set_src_offset_blocks(child.src_offset_blocks() + self.offset_blocks);
                }
            }
        });
    }

    /// Block I/O the base serves. NVMe passthrough is not offered: its
    /// LBAs live inside the command, out of reach of the translation.
    fn io_type_supported(&self, io_type: IoType) -> bool {
        io_type.is_block_io() && self.shared.base.bdev().supports(io_type)
    }

    /// The last part to go closes the base.
    fn destruct(&self, done: Done) {
        if self.shared.live_parts.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.close_base(Some(done));
        } else {
            done.done();
        }
    }

    fn dump_info_json(&self) -> Value {
        json!({"split": {"base_bdev": self.shared.base.bdev().name(), "offset_blocks": self.offset_blocks}})
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
