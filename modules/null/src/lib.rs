//! The `null` bdev module: a bdev that stores nothing. Reads leave the
//! buffer untouched, writes are discarded; every I/O completes from the
//! channel's poller. It measures the framework's own overhead.
//!
//! RPCs: `bdev_null_create`, `bdev_null_delete`, `bdev_null_resize`
//! (see [`rpc`]). Supported I/O: read, write, write_zeroes, reset, abort.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod rpc;

use std::sync::Arc;

use bdevkit::bdev::module::{
    Backend, BackendModule, Bdev, BdevIo, BdevManager, BdevOps, BdevProps, CompletionQueue,
    Geometry, IoStatus, IoType,
};
use bdevkit::error::BoxError;
use bdevkit::{Error, Result};
use serde_json::{json, Value};

pub use rpc::NullCreateParams;

/// Module name.
pub const MODULE: &str = "null";
/// `product_name` of null bdevs.
pub const PRODUCT_NAME: &str = "Null disk";

/// The null module: nothing to examine; its saved config is one
/// `bdev_null_create` per bdev ([`NullBdev`]'s [`Backend`]).
pub type NullModule = BackendModule<NullBdev>;

/// Adds the null module to `mgr`.
pub fn register(mgr: &BdevManager) {
    NullModule::register(mgr);
}

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
        name: "bdev_null",
        targets: &["bdevkit_null"],
        aliases: &[],
    }],
};

/// One null bdev.
#[derive(Debug)]
pub struct NullBdev {
    params: NullCreateParams,
}

/// A saved config recreates a null bdev with SPDK's `bdev_null_create`
/// entry: its geometry (the data block size: SPDK saves data + metadata
/// there, which its own create then rejects; ours replays), then its
/// preferred and optimal sizes.
impl Backend for NullBdev {
    const MODULE: &'static str = MODULE;

    fn config_params(&self, _bdev: &Bdev) -> Value {
        let p = &self.params;
        let n = |v: Option<u32>| v.unwrap_or(0);
        json!({
            "preferred_write_granularity": n(p.preferred_write_granularity),
            "preferred_write_alignment": n(p.preferred_write_alignment),
            "optimal_write_size": n(p.optimal_write_size),
            "preferred_unmap_granularity": n(p.preferred_unmap_granularity),
            "preferred_unmap_alignment": n(p.preferred_unmap_alignment),
        })
    }
}

/// Per-thread channel: I/Os wait for the next poll.
#[derive(Debug)]
pub struct NullChannel {
    q: CompletionQueue,
}

impl BdevOps for NullBdev {
    type Channel = NullChannel;

    fn create_channel(&self) -> std::result::Result<NullChannel, BoxError> {
        Ok(NullChannel {
            q: CompletionQueue::new("null_io")?,
        })
    }

    #[inline]
    fn submit(&self, ch: &NullChannel, io: BdevIo) {
        // Nothing is ever outstanding long enough to be aborted.
        let status = if io.io_type() == IoType::Abort {
            IoStatus::Failed
        } else {
            IoStatus::Success
        };
        ch.q.push(io, status);
    }

    fn io_type_supported(&self, io_type: IoType) -> bool {
        matches!(
            io_type,
            IoType::Read | IoType::Write | IoType::WriteZeroes | IoType::Reset | IoType::Abort
        )
    }
}

/// Checks and turns params into bdev properties.
fn props(p: &NullCreateParams) -> Result<BdevProps> {
    if p.name.is_empty() {
        return Err(Error::InvalidArg("name must not be empty".into()));
    }
    let mut props = Geometry::of(p)?.props(&p.name, PRODUCT_NAME)?;
    props.uuid = p.uuid;
    props.preferred_write_alignment = p.preferred_write_alignment.unwrap_or(0);
    props.preferred_write_granularity = p.preferred_write_granularity.unwrap_or(0);
    props.optimal_write_size = p.optimal_write_size.unwrap_or(0);
    props.preferred_unmap_alignment = p.preferred_unmap_alignment.unwrap_or(0);
    props.preferred_unmap_granularity = p.preferred_unmap_granularity.unwrap_or(0);
    Ok(props)
}

/// Creates a null bdev (call on a bdevkit thread).
pub fn create(mgr: &BdevManager, params: NullCreateParams) -> Result<Bdev> {
    let props = props(&params)?;
    let bdev = mgr.register_bdev(MODULE, props, Arc::new(NullBdev { params }))?;
    Ok(bdev)
}

/// Deletes the null bdev `name`; `done` gets the outcome on the calling
/// thread (at once when there is no such bdev).
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    mgr.unregister_by_name(name, MODULE, done);
}

/// Grows the null bdev `name` to `new_size_mib` MiB.
pub fn resize(mgr: &BdevManager, name: &str, new_size_mib: u64) -> Result<()> {
    let b = mgr
        .get(name)
        .filter(|b| !b.is_removing())
        .ok_or_else(|| Error::NotFound(name.to_string()))?;
    if b.module_name() != MODULE {
        return Err(Error::InvalidArg(format!("{name} is not a null bdev")));
    }
    let bytes = new_size_mib
        .checked_mul(1024 * 1024)
        .ok_or_else(|| Error::InvalidArg("new_size too large".into()))?;
    let new_blocks = bytes / u64::from(b.block_size());
    if new_blocks < b.num_blocks() {
        return Err(Error::InvalidArg(format!(
            "cannot shrink null bdev {name} from {} to {new_blocks} blocks",
            b.num_blocks()
        )));
    }
    b.notify_resize(new_blocks);
    Ok(())
}
