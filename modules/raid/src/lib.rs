//! The `raid` virtual bdev module: raid0 (striping), raid1 (mirroring) and
//! concat over other bdevs.
//!
//! # Model
//!
//! `bdev_raid_create` records a raid with its member names. Members that
//! exist are opened and claimed `exclusive_write` at once; the others are
//! picked up by examine when they register. While members are missing the
//! raid is **configuring**; when the last one arrives it registers its
//! bdev and is **online**. Losing a member (hot removal, or for raid1 an
//! I/O error on it) makes a raid1 **degraded** — it keeps serving from the
//! remaining members — and a raid0/concat (or a raid1 with nothing left)
//! **offline**: its bdev is unregistered and new I/O fails.
//! `bdev_raid_get_bdevs` reports a degraded raid as SPDK does, `"online"`
//! with fewer operational members; [`Raid::state`] tells them apart.
//!
//! # I/O
//!
//! raid0 and concat declare the strip size as `optimal_io_boundary` with
//! split-on-boundary, so the bdev layer hands them strip-sized pieces; only
//! whole strips of each member are used, so a strip never straddles two
//! members (see [`map`] for the address maps). raid1 writes go to every
//! operational member and reads to one (the least busy on the channel).
//! Fan-outs keep their parent in a per-channel slot table: no allocation
//! per I/O in steady state, no lock.
//!
//! `bdev_raid_remove_base_bdev` takes a member out as a hot removal would;
//! `bdev_raid_add_base_bdev` puts a bdev into the empty slot of a degraded
//! raid1 and rebuilds it in the background (see the notes in
//! `rebuild.rs`: window by window, writes to the window being copied wait),
//! or gives a configuring raid a member it waits for.
//!
//! # What survives a restart
//!
//! Only members in sync are ever recorded as such. Without superblock,
//! `save_config` names them and writes SPDK's placeholder
//! `removed_base_bdev_<slot>` for a slot being rebuilt, failed or removed,
//! plus a `bdev_raid_add_base_bdev` after every bdev for a rebuild target:
//! a restart starts the raid1 degraded and rebuilds the target again.
//! With superblock (`bdev_raid_create -s`, SPDK's format: see [`sb`]),
//! every member carries the array and every member's state and sequence
//! number; examine reassembles the array with no config, a member whose
//! copy is older or that is not in sync is rebuilt, never trusted, and a
//! raid1 write is acknowledged only once a member-state change it depends
//! on is on the members.
//!
//! When every working member of a raid0 or raid1 has grown, the raid
//! grows (raid0 by whole strips) and its openers get a resize event; the
//! mapping stays as it was. The new blocks of a raid1 are not resynced:
//! they read as whatever each member held until written. concat keeps its
//! size (growing a middle member would move every block after it), and no
//! raid shrinks under its openers.
//!
//! When a member is hot-removed, every thread drops its channel to it
//! (the raid's own `IoDevice` walks them) before the member is closed, on
//! the thread that opened it.
//!
//! RPCs: `bdev_raid_create`, `bdev_raid_delete`, `bdev_raid_get_bdevs`,
//! `bdev_raid_set_options` (see [`rpc`]). `save_config` emits
//! `bdev_raid_set_options` and configuring raids at module level and one
//! `bdev_raid_create` per online raid bdev, as SPDK does.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Layers, each file importing only from the ones listed before it:
// `config` (levels, states, limits, params), `sb` (the superblock
// format), `wait` (small futures), `map` (address maps), `raid` (the
// shared raid state), `persist` (superblock reads and writes), `io` (the
// bdev and its I/O path), `rebuild`, `control` (creation, start, member
// events, deletion), `assemble` (examine, the module face); then this
// file's public functions and the RPC handlers of `rpc` on top.
mod assemble;
mod config;
mod control;
mod io;
mod json;
mod layout;
pub mod map;
mod persist;
mod raid;
mod rebuild;
pub mod rpc;
pub mod sb;
mod wait;

use std::sync::Arc;

use bdevkit::bdev::module::{BdevManager, Error, Result};
use serde_json::Value;

pub use config::{
    is_placeholder, placeholder, RaidAddBaseBdevParams, RaidCreateParams, RaidDeleteParams,
    RaidGetBdevsParams, RaidLevel, RaidRemoveBaseBdevParams, RaidSetOptionsParams, RaidState,
    MAX_MEMBERS, MAX_NAME_LEN, MODULE, PRODUCT_NAME,
};
pub use io::{RaidBdev, RaidChannel};
pub use raid::{Raid, RaidModule, RebuildProgress};

/// Adds the raid module to `mgr`.
pub fn register(mgr: &BdevManager) {
    mgr.register_module(Arc::new(RaidModule::default()));
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
        name: "bdev_raid",
        targets: &["bdevkit_raid"],
        aliases: &[],
    }],
};

fn module(mgr: &BdevManager) -> Result<Arc<RaidModule>> {
    mgr.module_as::<RaidModule>(MODULE)
        .ok_or_else(|| Error::InvalidArg("the raid module is not registered".into()))
}

/// `bdev_raid_create`: records the raid, claims the members that exist and
/// registers the raid bdev if all do (a superblock raid writes its
/// superblock on every member first). Returns once that is done. Call on
/// a bdevkit thread.
///
/// Errors (`EINVAL` unless noted): bad name, strip size, level or member
/// count; a member listed twice or with another block size; a member too
/// small for the superblock; a raid or bdev of that name exists, or a
/// member carries a raid superblock (`EEXIST`); a member is claimed by
/// someone else (`EPERM`). Nothing is left behind on failure.
pub async fn create(mgr: &BdevManager, params: RaidCreateParams) -> Result<()> {
    if params.raid_level == RaidLevel::Raid5f {
        return Err(Error::InvalidArg("raid5f is not supported".into()));
    }
    module(mgr)?.create(mgr, params).await
}

/// `bdev_raid_delete`: unregisters the raid bdev (if online), releases the
/// members and forgets the raid; `done` gets the outcome once it is gone.
/// `NotFound` at once when there is no such raid.
pub fn delete(mgr: &BdevManager, name: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
    delete_with(mgr, name, false, done);
}

/// [`delete`], and with `clear_sb` the superblock on every member is
/// zeroed first (so examine does not reassemble the array).
pub fn delete_with(
    mgr: &BdevManager,
    name: &str,
    clear_sb: bool,
    done: impl FnOnce(Result<()>) + Send + 'static,
) {
    let raid = match module(mgr).map(|m| m.find(name)) {
        Ok(Some(raid)) => raid,
        Ok(None) => return done(Err(Error::NotFound(name.to_string()))),
        Err(e) => return done(Err(e)),
    };
    match bdevkit::thread::Thread::current() {
        Some(t) if clear_sb && raid.has_superblock() => t.spawn_local(async move {
            raid.clear_superblocks().await;
            raid.delete(done);
        }),
        _ => raid.delete(done),
    }
}

/// `bdev_raid_remove_base_bdev`: takes member `name` out of the raid that
/// holds it, as a hot removal would, and releases it (the bdev itself stays
/// registered, unclaimed): a raid1 with another working member goes
/// degraded, a raid0 or concat (or a raid1 left with none) goes offline, a
/// configuring raid waits for the member again. `done` gets the outcome on
/// the calling thread, once the member is released; `NotFound` when no raid
/// holds `name`.
pub fn remove_base_bdev(
    mgr: &BdevManager,
    name: &str,
    done: impl FnOnce(Result<()>) + Send + 'static,
) {
    let m = match module(mgr) {
        Ok(m) => m,
        Err(e) => return done(Err(e)),
    };
    let found = m
        .raids()
        .into_iter()
        .find_map(|r| r.slot_of(name).map(|i| (r, i)));
    let Some((raid, i)) = found else {
        return done(Err(Error::NotFound(format!("{name} is not a raid member"))));
    };
    tracing::info!(raid = %raid.name(), member = name, "removing raid member");
    match bdevkit::thread::Thread::current() {
        Some(t) => {
            let h = t.handle();
            raid.member_gone(i, move || {
                let _ = h.send_msg(move || done(Ok(())));
            });
        }
        None => raid.member_gone(i, move || done(Ok(()))),
    }
}

/// `bdev_raid_add_base_bdev`: adds bdev `base` to raid `raid_name`. A
/// configuring raid takes it if it is a member it waits for (or, for a
/// raid1 with a slot not in sync, keeps it to rebuild once online); a
/// degraded raid1 takes it into a slot whose member was removed, attaches
/// it for writes and rebuilds it from the working members in the
/// background on the calling thread (`bdev_raid_get_bdevs` shows the
/// `process`); it serves reads once the rebuild is done. Call on a
/// bdevkit thread. Errors: `NotFound` no such raid or bdev; `InvalidArg`
/// no slot for it, a raid0/concat, another block size, too small; `Busy`
/// a rebuild runs; `Claimed` the bdev is claimed; `Exists` it carries
/// another raid's superblock.
pub async fn add_base_bdev(mgr: &BdevManager, raid_name: &str, base: &str) -> Result<()> {
    let raid = module(mgr)?
        .find(raid_name)
        .ok_or_else(|| Error::NotFound(format!("raid bdev {raid_name}")))?;
    raid.add_base_bdev(mgr, base).await
}

/// The raid called `name`.
#[must_use]
pub fn raid(mgr: &BdevManager, name: &str) -> Option<Arc<Raid>> {
    module(mgr).ok()?.find(name)
}

/// `bdev_raid_get_bdevs`: the raids whose state (as SPDK names it) is
/// `category`, or all of them for `"all"`. `EINVAL` for another category.
pub fn get_bdevs(mgr: &BdevManager, category: &str) -> Result<Vec<Value>> {
    let want = match category.to_ascii_lowercase().as_str() {
        "all" => None,
        c @ ("online" | "configuring" | "offline") => Some(c.to_string()),
        _ => return Err(Error::InvalidArg(format!("unknown category {category}"))),
    };
    Ok(module(mgr)?
        .raids()
        .iter()
        .filter(|r| want.as_deref().is_none_or(|w| r.state().spdk_name() == w))
        .map(|r| r.info_json())
        .collect())
}

/// `bdev_raid_set_options`: the rebuild's window and bandwidth cap.
pub fn set_options(mgr: &BdevManager, params: RaidSetOptionsParams) -> Result<()> {
    module(mgr)?.set_options(params)
}
