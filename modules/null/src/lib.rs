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
    Bdev, BdevIo, BdevManager, BdevModule, BdevOps, BdevProps, CompletionQueue, IoStatus, IoType,
};
use bdevkit::error::BoxError;
use bdevkit::{Error, Result};
use serde_json::{json, Value};

pub use rpc::NullCreateParams;

/// Module name.
pub const MODULE: &str = "null";
/// `product_name` of null bdevs.
pub const PRODUCT_NAME: &str = "Null disk";

/// The null module.
#[derive(Debug, Default)]
pub struct NullModule;

impl BdevModule for NullModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    fn config_json(&self, mgr: &BdevManager) -> Vec<Value> {
        mgr.bdevs()
            .iter()
            .filter(|b| b.module_name() == MODULE && !b.is_removing())
            .filter_map(|b| b.ops_as::<NullBdev>().map(|n| n.config(b)))
            .collect()
    }
}

/// Adds the null module to `mgr`.
pub fn register(mgr: &BdevManager) {
    mgr.register_module(Arc::new(NullModule));
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

impl NullBdev {
    fn config(&self, b: &Bdev) -> Value {
        let p = &self.params;
        json!({
            "method": "bdev_null_create",
            "params": {
                "name": b.name(),
                "num_blocks": b.num_blocks(),
                // The data block size (SPDK saves data + metadata here,
                // which its own create then rejects; ours replays).
                "block_size": p.block_size,
                "physical_block_size": p.physical_block_size.unwrap_or(0),
                "md_size": p.md_size.unwrap_or(0),
                "dif_type": p.dif_type.unwrap_or(0),
                "dif_is_head_of_md": p.dif_is_head_of_md.unwrap_or(false),
                "dif_pi_format": p.dif_pi_format.unwrap_or(0),
                "uuid": b.uuid().to_string(),
                "preferred_write_granularity": p.preferred_write_granularity.unwrap_or(0),
                "preferred_write_alignment": p.preferred_write_alignment.unwrap_or(0),
                "optimal_write_size": p.optimal_write_size.unwrap_or(0),
                "preferred_unmap_granularity": p.preferred_unmap_granularity.unwrap_or(0),
                "preferred_unmap_alignment": p.preferred_unmap_alignment.unwrap_or(0),
            }
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
    if p.block_size == 0 || !p.block_size.is_multiple_of(512) {
        return Err(Error::InvalidArg(format!(
            "block_size {} is not a multiple of 512",
            p.block_size
        )));
    }
    if p.num_blocks == 0 {
        return Err(Error::InvalidArg(
            "num_blocks must be greater than 0".into(),
        ));
    }
    let md = p.md_size.unwrap_or(0);
    if ![0, 8, 16, 32, 64, 128].contains(&md) {
        return Err(Error::InvalidArg(format!(
            "md_size {md} must be one of 0, 8, 16, 32, 64, 128"
        )));
    }
    let dif = p.dif_type.unwrap_or(0);
    if !(0..=3).contains(&dif) {
        return Err(Error::InvalidArg(format!("dif_type {dif} must be 0-3")));
    }
    if dif != 0 && md == 0 {
        return Err(Error::InvalidArg("dif_type needs md_size".into()));
    }
    let pbs = p.physical_block_size.unwrap_or(0);
    if !pbs.is_multiple_of(512) {
        return Err(Error::InvalidArg(format!(
            "physical_block_size {pbs} is not a multiple of 512"
        )));
    }
    let mut props = BdevProps::new(&p.name, PRODUCT_NAME, p.block_size + md, p.num_blocks);
    props.uuid = p.uuid;
    props.phys_block_size = pbs;
    props.md_size = md;
    props.md_interleave = md != 0;
    props.dif_type = u32::try_from(dif).unwrap_or(0);
    props.dif_is_head_of_md = p.dif_is_head_of_md.unwrap_or(false);
    props.dif_pi_format = p.dif_pi_format.unwrap_or(0);
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
