//! A raid's configuration and control-path state: members, states,
//! creation, examine, member removal and failure, deletion.
//!
//! Each [`Raid`] lives in the module's list from `bdev_raid_create` until
//! it is deleted (or, offline, loses its last member). While it is online
//! its bdev ([`crate::io::RaidBdev`]) is registered; the I/O path lives
//! there.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::{Bdev, BdevDesc, BdevEvent, BdevManager, BdevModule, ClaimType};
use bdevkit::bdev::module::{Error, Result};
use bdevkit::thread::{current_thread_id, Thread, ThreadHandle};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::io::{Geometry, RaidBdev};
use crate::map::{ConcatMap, Raid0Map};
use crate::rpc::RaidSetOptionsParams;
use crate::{RaidCreateParams, RaidLevel, RaidState, MODULE};

/// Longest raid name (SPDK's superblock name field, 64 bytes with NUL).
pub const MAX_NAME_LEN: usize = 63;
/// Most members of one raid.
pub const MAX_MEMBERS: usize = 255;

/// Member states (one atomic per member, read by the I/O path).
pub(crate) const MEMBER_OK: u8 = 0;
/// Failed an I/O (raid1): no longer read or written.
pub(crate) const MEMBER_FAILED: u8 = 1;
/// Hot-removed: channels drop their channel to it.
pub(crate) const MEMBER_REMOVED: u8 = 2;
/// Being rebuilt (raid1): written, not read.
pub(crate) const MEMBER_REBUILDING: u8 = 3;

/// A rebuild's progress (`bdev_raid_get_bdevs`' `process`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebuildProgress {
    /// The slot being rebuilt.
    pub target: usize,
    /// Blocks copied (the window being copied starts here).
    pub done: u64,
    /// Blocks to copy.
    pub total: u64,
}

/// The raid module: every raid (configuring, online, degraded, offline)
/// and the module options.
#[derive(Debug, Default)]
pub struct RaidModule {
    raids: Mutex<Vec<Arc<Raid>>>,
    options: Mutex<RaidSetOptionsParams>,
}

impl BdevModule for RaidModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    fn has_examine(&self) -> bool {
        true
    }

    /// A new bdev may be a member a configuring raid waits for.
    fn examine_config(&self, mgr: &BdevManager, bdev: &Bdev) {
        let raids: Vec<Arc<Raid>> = self.raids.lock().clone();
        for raid in raids {
            if let Err(e) = raid.examine(mgr, bdev) {
                tracing::error!(raid = %raid.name, member = %bdev.name(), error = %e,
                    "cannot add member to raid");
            }
        }
    }

    /// `bdev_raid_set_options`, then the raids still configuring (online
    /// raids are emitted per bdev, as SPDK does).
    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        let mut out =
            vec![json!({"method": "bdev_raid_set_options", "params": *self.options.lock()})];
        for r in self.raids.lock().iter() {
            if r.state() == RaidState::Configuring {
                out.push(r.create_entry());
            }
        }
        out
    }
}

impl RaidModule {
    pub(crate) fn raids(&self) -> Vec<Arc<Raid>> {
        self.raids.lock().clone()
    }

    pub(crate) fn find(&self, name: &str) -> Option<Arc<Raid>> {
        self.raids.lock().iter().find(|r| r.name == name).cloned()
    }

    pub(crate) fn set_options(&self, o: RaidSetOptionsParams) -> Result<()> {
        if o.process_window_size_kb == Some(0) {
            return Err(Error::InvalidArg(
                "process_window_size_kb must not be 0".into(),
            ));
        }
        let mut cur = self.options.lock();
        if let Some(w) = o.process_window_size_kb {
            cur.process_window_size_kb = Some(w);
        }
        if let Some(b) = o.process_max_bandwidth_mb_sec {
            cur.process_max_bandwidth_mb_sec = Some(b);
        }
        Ok(())
    }

    fn remove(&self, raid: &Raid) {
        self.raids
            .lock()
            .retain(|r| !std::ptr::eq(Arc::as_ptr(r), raid));
    }

    /// `bdev_raid_create`.
    pub(crate) fn create(self: &Arc<Self>, mgr: &BdevManager, p: RaidCreateParams) -> Result<()> {
        validate(&p)?;
        let level = p.raid_level;
        if mgr.get(&p.name).is_some() {
            return Err(Error::Exists(p.name));
        }
        let raid = {
            let mut raids = self.raids.lock();
            if raids.iter().any(|r| r.name == p.name) {
                return Err(Error::Exists(p.name));
            }
            let raid = Arc::new(Raid {
                name: p.name.clone(),
                level,
                strip_size_kb: p.strip_size_kb.unwrap_or(0),
                uuid: p.uuid.unwrap_or_else(Uuid::new_v4),
                module: Arc::downgrade(self),
                num_members: p.base_bdevs.len(),
                member_state: p
                    .base_bdevs
                    .iter()
                    .map(|_| AtomicU8::new(MEMBER_OK))
                    .collect(),
                ctl: Mutex::new(Control {
                    names: p.base_bdevs.clone(),
                    rebuild: None,
                    state: RaidState::Configuring,
                    members: p.base_bdevs.iter().map(|_| None).collect(),
                    bdev: None,
                    data_size: 0,
                    deleting: Vec::new(),
                    delete_requested: false,
                }),
            });
            raids.push(Arc::clone(&raid));
            raid
        };
        tracing::info!(raid = %raid.name, level = level.name(), members = p.base_bdevs.len(),
            "raid created");
        for (i, name) in p.base_bdevs.iter().enumerate() {
            let Some(b) = mgr.get(name) else { continue };
            match raid.add_member(mgr, i, &b) {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => {
                    raid.delete(|_| {});
                    return Err(e);
                }
            }
        }
        if raid.all_discovered() {
            if let Err(e) = raid.start(mgr) {
                raid.delete(|_| {});
                return Err(e);
            }
        }
        Ok(())
    }
}

fn validate(p: &RaidCreateParams) -> Result<()> {
    let bad = |m: String| Err(Error::InvalidArg(m));
    if p.name.is_empty() || p.name.len() > MAX_NAME_LEN {
        return bad(format!(
            "raid name must have 1 to {MAX_NAME_LEN} characters"
        ));
    }
    let strip = p.strip_size_kb.unwrap_or(0);
    match p.raid_level {
        RaidLevel::Raid1 if strip != 0 => return bad("raid1 takes no strip size".into()),
        RaidLevel::Raid0 | RaidLevel::Concat if !strip.is_power_of_two() => {
            return bad(format!("invalid strip size {strip} KiB"));
        }
        _ => {}
    }
    let min = p.raid_level.min_members();
    if p.base_bdevs.len() < min || p.base_bdevs.len() > MAX_MEMBERS {
        return bad(format!(
            "{} needs {min} to {MAX_MEMBERS} members",
            p.raid_level.name()
        ));
    }
    if p.base_bdevs.iter().any(String::is_empty) {
        return bad("the base bdev name cannot be empty".into());
    }
    for (i, a) in p.base_bdevs.iter().enumerate() {
        if p.base_bdevs[..i].contains(a) {
            return bad(format!("{a} is listed twice"));
        }
    }
    if p.superblock.unwrap_or(false) {
        // No on-disk superblock here: the configuration lives in saved
        // configs only.
        return bad("raid superblocks are not supported".into());
    }
    Ok(())
}

/// `b` has the block size and metadata size of the members there are.
fn same_block_size(ctl: &Control, b: &Bdev) -> Result<()> {
    match ctl.members.iter().flatten().next() {
        Some(first)
            if first.bdev.block_size() != b.block_size()
                || first.bdev.props().md_size != b.props().md_size =>
        {
            Err(Error::InvalidArg(format!(
                "{} has a block size other than the raid's members",
                b.name()
            )))
        }
        _ => Ok(()),
    }
}

/// An open, claimed member.
struct MemberDesc {
    desc: BdevDesc,
    opener: Option<ThreadHandle>,
    bdev: Bdev,
}

impl MemberDesc {
    /// Closes the descriptor on the thread that opened it.
    fn close(self) {
        match self.opener {
            Some(t) if t.id() != current_thread_id() => {
                let desc = self.desc;
                let _ = t.send_msg(move || drop(desc));
            }
            _ => drop(self.desc),
        }
    }
}

struct Control {
    /// Member bdev names by slot (a replaced member changes its slot's
    /// name).
    names: Vec<String>,
    /// The rebuild running, if any.
    rebuild: Option<RebuildProgress>,
    state: RaidState,
    members: Vec<Option<MemberDesc>>,
    /// The registered bdev while online/degraded (and until destructed).
    bdev: Option<Weak<RaidBdev>>,
    /// Blocks used on each member (0 until started).
    data_size: u64,
    /// Waiting `bdev_raid_delete` callers.
    deleting: Vec<Box<dyn FnOnce(Result<()>) + Send>>,
    delete_requested: bool,
}

/// One raid: configuration and control-path state.
pub struct Raid {
    pub(crate) name: String,
    pub(crate) level: RaidLevel,
    pub(crate) strip_size_kb: u32,
    pub(crate) uuid: Uuid,
    module: Weak<RaidModule>,
    num_members: usize,
    /// `MEMBER_*`, read lock-free by the I/O path.
    pub(crate) member_state: Vec<AtomicU8>,
    ctl: Mutex<Control>,
}

impl std::fmt::Debug for Raid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Raid")
            .field("name", &self.name)
            .field("level", &self.level)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Raid {
    /// Current state.
    #[must_use]
    pub fn state(&self) -> RaidState {
        self.ctl.lock().state
    }

    /// Whether a rebuild runs.
    #[must_use]
    pub fn is_rebuilding(&self) -> bool {
        self.ctl.lock().rebuild.is_some()
    }

    /// The raid's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The level.
    #[must_use]
    pub fn level(&self) -> RaidLevel {
        self.level
    }

    pub(crate) fn member_ok(&self, i: usize) -> bool {
        self.member_state
            .get(i)
            .is_some_and(|s| s.load(Ordering::Acquire) == MEMBER_OK)
    }

    /// Whether member `i` is being rebuilt.
    pub(crate) fn member_rebuilding(&self, i: usize) -> bool {
        self.member_state
            .get(i)
            .is_some_and(|s| s.load(Ordering::Acquire) == MEMBER_REBUILDING)
    }

    /// Whether writes go to member `i`: working, or being rebuilt.
    pub(crate) fn member_writable(&self, i: usize) -> bool {
        self.member_state
            .get(i)
            .is_some_and(|s| matches!(s.load(Ordering::Acquire), MEMBER_OK | MEMBER_REBUILDING))
    }

    pub(crate) fn member_removed(&self, i: usize) -> bool {
        self.member_state
            .get(i)
            .is_some_and(|s| s.load(Ordering::Acquire) == MEMBER_REMOVED)
    }

    pub(crate) fn num_members(&self) -> usize {
        self.num_members
    }

    fn all_discovered(&self) -> bool {
        self.ctl.lock().members.iter().all(Option::is_some)
    }

    fn operational(&self) -> usize {
        (0..self.num_members())
            .filter(|i| self.member_ok(*i))
            .count()
    }

    /// Opens bdev `b` as the member of slot `i` (its events come to the
    /// raid) and claims it.
    fn open_member(self: &Arc<Self>, mgr: &BdevManager, i: usize, b: &Bdev) -> Result<MemberDesc> {
        let weak = Arc::downgrade(self);
        let desc = mgr.open(b.name(), false, move |event| {
            if let Some(raid) = weak.upgrade() {
                raid.member_event(i, event);
            }
        })?;
        desc.claim(ClaimType::ExclusiveWrite, MODULE)?;
        Ok(MemberDesc {
            desc,
            opener: Thread::current().map(|t| t.handle()),
            bdev: b.clone(),
        })
    }

    /// Opens and claims member slot `i` (bdev `b`), checking it fits.
    fn add_member(self: &Arc<Self>, mgr: &BdevManager, i: usize, b: &Bdev) -> Result<()> {
        {
            let ctl = self.ctl.lock();
            if ctl.state != RaidState::Configuring || ctl.members[i].is_some() {
                return Ok(());
            }
            same_block_size(&ctl, b)?;
        }
        let md = self.open_member(mgr, i, b)?;
        let mut ctl = self.ctl.lock();
        if ctl.state != RaidState::Configuring || ctl.members[i].is_some() {
            drop(ctl);
            md.close();
            return Ok(());
        }
        ctl.members[i] = Some(md);
        tracing::info!(raid = %self.name, member = %b.name(), slot = i, "raid member discovered");
        Ok(())
    }

    /// examine: is `b` a member this raid waits for?
    fn examine(self: &Arc<Self>, mgr: &BdevManager, b: &Bdev) -> Result<()> {
        let slot = {
            let ctl = self.ctl.lock();
            if ctl.state != RaidState::Configuring {
                return Ok(());
            }
            ctl.names
                .iter()
                .enumerate()
                .position(|(i, n)| ctl.members[i].is_none() && b.has_name(n))
        };
        let Some(i) = slot else { return Ok(()) };
        self.add_member(mgr, i, b)?;
        if self.all_discovered() {
            self.start(mgr)?;
        }
        Ok(())
    }

    /// Every member is there: compute the geometry and register the bdev.
    fn start(self: &Arc<Self>, mgr: &BdevManager) -> Result<()> {
        let (block_size, blocks, align, md) = {
            let ctl = self.ctl.lock();
            if ctl.state != RaidState::Configuring {
                return Ok(());
            }
            let bdevs: Vec<&Bdev> = ctl.members.iter().flatten().map(|m| &m.bdev).collect();
            let Some(first) = bdevs.first() else {
                return Err(Error::InvalidArg("raid without members".into()));
            };
            (
                first.block_size(),
                bdevs.iter().map(|b| b.num_blocks()).collect::<Vec<u64>>(),
                bdevs
                    .iter()
                    .map(|b| b.props().required_alignment)
                    .max()
                    .unwrap_or(0),
                first.props().clone(),
            )
        };
        let geometry = self.geometry(block_size, &blocks)?;
        let data_size = match &geometry {
            Geometry::Raid0(m) => m.member_blocks,
            Geometry::Raid1 { num_blocks } => *num_blocks,
            Geometry::Concat(_) => 0,
        };
        let ops = RaidBdev::new(Arc::clone(self), mgr.clone(), geometry);
        let mut props = ops.props(&self.name, block_size);
        props.uuid = Some(self.uuid);
        props.required_alignment = align;
        props.md_size = md.md_size;
        props.md_interleave = md.md_interleave;
        {
            let mut ctl = self.ctl.lock();
            ctl.state = RaidState::Online;
            ctl.data_size = data_size;
            ctl.bdev = Some(Arc::downgrade(&ops));
        }
        if let Err(e) = mgr.register_bdev(MODULE, props, Arc::clone(&ops)) {
            let mut ctl = self.ctl.lock();
            ctl.state = RaidState::Configuring;
            ctl.bdev = None;
            return Err(e);
        }
        tracing::info!(raid = %self.name, level = self.level.name(), "raid online");
        Ok(())
    }

    fn geometry(&self, block_size: u32, blocks: &[u64]) -> Result<Geometry> {
        let min = blocks.iter().copied().min().unwrap_or(0);
        if self.level == RaidLevel::Raid1 {
            return Ok(Geometry::Raid1 { num_blocks: min });
        }
        let strip_bytes = u64::from(self.strip_size_kb) * 1024;
        let bs = u64::from(block_size);
        if strip_bytes < bs || strip_bytes % bs != 0 {
            return Err(Error::InvalidArg(format!(
                "strip size {} KiB is not a multiple of block size {block_size}",
                self.strip_size_kb
            )));
        }
        let strip_blocks = strip_bytes / bs;
        if self.level == RaidLevel::Raid0 {
            let member_blocks = min / strip_blocks * strip_blocks;
            if member_blocks == 0 {
                return Err(Error::InvalidArg("members smaller than one strip".into()));
            }
            return Ok(Geometry::Raid0(Raid0Map {
                strip_blocks,
                members: blocks.len() as u64,
                member_blocks,
            }));
        }
        let lens: Vec<u64> = blocks
            .iter()
            .map(|b| b / strip_blocks * strip_blocks)
            .collect();
        if lens.contains(&0) {
            return Err(Error::InvalidArg(
                "a member is smaller than one strip".into(),
            ));
        }
        Ok(Geometry::Concat(ConcatMap::new(lens)))
    }

    /// Events of member `i`, on the thread that opened it.
    fn member_event(self: &Arc<Self>, i: usize, event: BdevEvent) {
        match event {
            BdevEvent::Remove => self.member_gone(i, || {}),
            BdevEvent::Resize => self.member_resized(i),
            BdevEvent::MediaManagement => {}
        }
    }

    /// Member `i` changed size. raid0 and raid1 grow once every working
    /// member has grown (raid0 by whole strips); concat keeps its size
    /// (growing a member in the middle would move every block after it),
    /// as SPDK's concat does. A raid never shrinks under its openers: a
    /// member that shrank fails the I/O beyond its end (raid1 then goes
    /// degraded).
    fn member_resized(self: &Arc<Self>, i: usize) {
        let (bdev, new_size, data_size) = {
            let ctl = self.ctl.lock();
            if !matches!(ctl.state, RaidState::Online | RaidState::Degraded) {
                // Configuring: sizes are read when the raid starts.
                return;
            }
            let Some(bdev) = ctl.bdev.as_ref().and_then(Weak::upgrade) else {
                return;
            };
            let min = ctl
                .members
                .iter()
                .enumerate()
                .filter(|(j, _)| self.member_ok(*j))
                .filter_map(|(_, m)| m.as_ref().map(|m| m.bdev.num_blocks()))
                .min()
                .unwrap_or(0);
            let (new_size, data_size) = match self.level {
                RaidLevel::Raid1 => (min, min),
                RaidLevel::Raid0 => {
                    let strip = bdev.raid0_strip_blocks().unwrap_or(1).max(1);
                    let per_member = min / strip * strip;
                    (per_member * self.num_members() as u64, per_member)
                }
                RaidLevel::Concat | RaidLevel::Raid5f => {
                    tracing::warn!(raid = %self.name, slot = i,
                        "concat member resized; concat raids keep their size");
                    return;
                }
            };
            if ctl.data_size >= data_size {
                if ctl.data_size > data_size {
                    tracing::warn!(raid = %self.name, slot = i, member = %ctl.names[i],
                        "raid member shrank below the raid's data size; I/O beyond its end fails");
                }
                return;
            }
            (bdev, new_size, data_size)
        };
        tracing::info!(raid = %self.name, slot = i, new_size, "raid members grew; raid grows");
        self.ctl.lock().data_size = data_size;
        bdev.resize(new_size);
    }

    /// The slot of member `name` (a name or alias of the member bdev),
    /// while the raid holds it.
    pub(crate) fn slot_of(&self, name: &str) -> Option<usize> {
        let ctl = self.ctl.lock();
        ctl.members.iter().enumerate().position(|(i, m)| {
            m.as_ref().is_some_and(|m| m.bdev.has_name(name)) && !self.member_removed(i)
        })
    }

    /// Member `i` is being hot-removed, or taken out by
    /// `bdev_raid_remove_base_bdev`; `done` runs once it is closed (its
    /// claim released).
    pub(crate) fn member_gone(self: &Arc<Self>, i: usize, done: impl FnOnce() + Send + 'static) {
        let mut ctl = self.ctl.lock();
        match ctl.state {
            RaidState::Configuring => {
                let md = ctl.members[i].take();
                drop(ctl);
                if let Some(md) = md {
                    tracing::info!(raid = %self.name, slot = i, "configuring raid lost a member");
                    md.close();
                }
                done();
            }
            RaidState::Offline => {
                let md = ctl.members[i].take();
                let empty = ctl.members.iter().all(Option::is_none) && ctl.bdev.is_none();
                drop(ctl);
                if let Some(md) = md {
                    md.close();
                }
                if empty {
                    self.forget();
                }
                done();
            }
            RaidState::Online | RaidState::Degraded => {
                self.member_state[i].store(MEMBER_REMOVED, Ordering::Release);
                let bdev = ctl.bdev.as_ref().and_then(Weak::upgrade);
                let tolerated = self.level == RaidLevel::Raid1 && self.operational() >= 1;
                if tolerated {
                    ctl.state = RaidState::Degraded;
                    tracing::warn!(raid = %self.name, slot = i, operational = self.operational(),
                        "raid member removed; raid degraded");
                } else {
                    ctl.state = RaidState::Offline;
                    tracing::warn!(raid = %self.name, slot = i, "raid member removed; raid offline");
                }
                drop(ctl);
                let Some(bdev) = bdev else {
                    self.close_member(i);
                    done();
                    return;
                };
                if !tolerated {
                    bdev.go_offline();
                }
                // Every thread drops its channel to the member; then the
                // member can be closed (its in-flight I/O keeps what it
                // needs alive until it completes).
                let me = Arc::clone(self);
                bdev.release_member(i, move || {
                    me.close_member(i);
                    done();
                });
            }
        }
    }

    fn close_member(&self, i: usize) {
        let md = self.ctl.lock().members[i].take();
        if let Some(md) = md {
            md.close();
        }
    }

    /// Marks member `i` failed after an I/O error (raid1), unless it is
    /// the last operational member. Returns whether the member is out.
    pub(crate) fn member_failed(&self, i: usize) -> bool {
        if self.member_rebuilding(i) {
            // A rebuild target that fails a write is out; the rebuild
            // stops at its next step.
            self.member_state[i].store(MEMBER_FAILED, Ordering::Release);
            tracing::warn!(raid = %self.name, slot = i, "rebuild target failed an I/O");
            return true;
        }
        if !self.member_ok(i) {
            return true;
        }
        let mut ctl = self.ctl.lock();
        if !self.member_ok(i) {
            return true;
        }
        if self.level != RaidLevel::Raid1
            || !matches!(ctl.state, RaidState::Online | RaidState::Degraded)
            || self.operational() < 2
        {
            return false;
        }
        self.member_state[i].store(MEMBER_FAILED, Ordering::Release);
        ctl.state = RaidState::Degraded;
        tracing::warn!(raid = %self.name, slot = i, member = %ctl.names[i],
            operational = self.operational(), "raid member failed an I/O; raid degraded");
        true
    }

    /// The raid bdev was destructed (every opener closed, every channel
    /// gone).
    pub(crate) fn bdev_destructed(&self) {
        let (close, keep, waiters) = {
            let mut ctl = self.ctl.lock();
            ctl.bdev = None;
            let keep = ctl.state == RaidState::Offline && !ctl.delete_requested;
            let close: Vec<MemberDesc> = if keep {
                Vec::new()
            } else {
                ctl.members.iter_mut().filter_map(Option::take).collect()
            };
            if !keep {
                ctl.state = RaidState::Offline;
            }
            let empty = ctl.members.iter().all(Option::is_none);
            (close, keep && !empty, std::mem::take(&mut ctl.deleting))
        };
        for md in close {
            md.close();
        }
        if !keep {
            self.forget();
        }
        for w in waiters {
            w(Ok(()));
        }
    }

    fn forget(&self) {
        if let Some(m) = self.module.upgrade() {
            m.remove(self);
        }
        tracing::info!(raid = %self.name, "raid removed");
    }

    /// `bdev_raid_delete`: unregisters the bdev (if any), closes the
    /// members and forgets the raid; `done` runs once that is done.
    pub(crate) fn delete(&self, done: impl FnOnce(Result<()>) + Send + 'static) {
        let mut ctl = self.ctl.lock();
        ctl.delete_requested = true;
        let bdev = ctl.bdev.as_ref().and_then(Weak::upgrade);
        match bdev {
            Some(b) => {
                // `bdev_destructed` answers once the bdev is gone.
                ctl.deleting.push(Box::new(done));
                drop(ctl);
                b.unregister_self();
            }
            None => {
                ctl.state = RaidState::Offline;
                let close: Vec<MemberDesc> =
                    ctl.members.iter_mut().filter_map(Option::take).collect();
                drop(ctl);
                for md in close {
                    md.close();
                }
                self.forget();
                done(Ok(()));
            }
        }
    }

    /// The `bdev_raid_get_bdevs` object.
    pub(crate) fn info_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        for (k, v) in self.raid_fields() {
            m.insert(k, v);
        }
        Value::Object(m)
    }

    /// The fields after `name` (also the bdev's `driver_specific.raid`).
    pub(crate) fn raid_fields(&self) -> Map<String, Value> {
        let ctl = self.ctl.lock();
        let discovered = ctl.members.iter().filter(|m| m.is_some()).count();
        let operational = match ctl.state {
            RaidState::Configuring => self.num_members(),
            _ => (0..self.num_members())
                .filter(|i| self.member_ok(*i) && ctl.members[*i].is_some())
                .count(),
        };
        let list: Vec<Value> = ctl
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let md = ctl.members[i].as_ref();
                let gone = md.is_none() && ctl.state != RaidState::Configuring;
                json!({
                    "name": if gone { Value::Null } else { json!(name) },
                    "uuid": md.map_or(Uuid::nil(), |m| m.bdev.uuid()).to_string(),
                    "is_configured": md.is_some(),
                    "data_offset": 0,
                    "data_size": if md.is_some() { ctl.data_size } else { 0 },
                })
            })
            .collect();
        let mut m = Map::new();
        m.insert("uuid".into(), json!(self.uuid.to_string()));
        m.insert("strip_size_kb".into(), json!(self.strip_size_kb));
        m.insert("state".into(), json!(ctl.state.spdk_name()));
        m.insert("raid_level".into(), json!(self.level.name()));
        m.insert("superblock".into(), json!(false));
        m.insert("num_base_bdevs".into(), json!(self.num_members()));
        m.insert("num_base_bdevs_discovered".into(), json!(discovered));
        m.insert("num_base_bdevs_operational".into(), json!(operational));
        if let Some(r) = ctl.rebuild {
            #[expect(clippy::cast_precision_loss, reason = "a percentage for display")]
            let percent = if r.total == 0 {
                100.0
            } else {
                r.done as f64 * 100.0 / r.total as f64
            };
            m.insert(
                "process".into(),
                json!({
                    "type": "rebuild",
                    "target": ctl.names[r.target],
                    "progress": {"blocks": r.done, "percent": percent},
                }),
            );
        }
        m.insert("base_bdevs_list".into(), Value::Array(list));
        m
    }

    /// The `bdev_raid_create` entry that recreates this raid.
    pub(crate) fn create_entry(&self) -> Value {
        let mut p = Map::new();
        p.insert("name".into(), json!(self.name));
        p.insert("uuid".into(), json!(self.uuid.to_string()));
        if self.strip_size_kb != 0 {
            p.insert("strip_size_kb".into(), json!(self.strip_size_kb));
        }
        p.insert("raid_level".into(), json!(self.level.name()));
        p.insert("base_bdevs".into(), json!(self.ctl.lock().names));
        json!({"method": "bdev_raid_create", "params": p})
    }

    /// Channels to the members for a new raid channel (`None` for missing
    /// or removed members).
    pub(crate) fn member_channels(&self) -> Vec<Option<bdevkit::bdev::module::BdevChannel>> {
        let ctl = self.ctl.lock();
        ctl.members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                m.as_ref()
                    .filter(|_| !self.member_removed(i))
                    .and_then(|m| m.desc.get_io_channel().ok())
            })
            .collect()
    }

    /// This thread's channel to member `i` (`None`: not attached).
    pub(crate) fn member_channel(&self, i: usize) -> Option<bdevkit::bdev::module::BdevChannel> {
        let ctl = self.ctl.lock();
        ctl.members
            .get(i)?
            .as_ref()
            .filter(|_| !self.member_removed(i))
            .and_then(|m| m.desc.get_io_channel().ok())
    }

    /// The slots a rebuild may read from: working members.
    pub(crate) fn rebuild_sources(&self) -> Vec<usize> {
        (0..self.num_members())
            .filter(|i| self.member_ok(*i))
            .collect()
    }

    /// The rebuild's progress, while one runs.
    #[must_use]
    pub fn rebuild_progress(&self) -> Option<RebuildProgress> {
        self.ctl.lock().rebuild
    }

    /// `bdev_raid_set_options`' process window (KiB) and bandwidth cap
    /// (MiB/s, 0 = none).
    pub(crate) fn process_options(&self) -> (u32, u32) {
        let o = self
            .module
            .upgrade()
            .map(|m| *m.options.lock())
            .unwrap_or_default();
        (
            o.process_window_size_kb.unwrap_or(1024).max(1),
            o.process_max_bandwidth_mb_sec.unwrap_or(0),
        )
    }

    /// Records rebuild progress; `None` ends it.
    pub(crate) fn set_rebuild(&self, p: Option<RebuildProgress>) {
        self.ctl.lock().rebuild = p;
    }

    /// The rebuild of slot `i` finished: the member serves reads too.
    pub(crate) fn rebuild_done(&self, i: usize) {
        let mut ctl = self.ctl.lock();
        ctl.rebuild = None;
        if self.member_rebuilding(i) {
            self.member_state[i].store(MEMBER_OK, Ordering::Release);
            if ctl.state == RaidState::Degraded && self.operational() == self.num_members() {
                ctl.state = RaidState::Online;
            }
            tracing::info!(raid = %self.name, slot = i, member = %ctl.names[i],
                state = ?ctl.state, "raid rebuild finished");
        }
    }

    /// `bdev_raid_add_base_bdev`: a configuring raid takes `name` if it is
    /// a member it waits for; a degraded raid1 takes it into a slot whose
    /// member was removed and rebuilds it from the working members (reads
    /// keep going to those until the rebuild is done). Errors: `EINVAL` no
    /// such slot, a raid0/concat, a block size other than the members' or
    /// a bdev smaller than the raid's data; `ENODEV` no such bdev; `EBUSY`
    /// a rebuild runs; `EPERM` the bdev is claimed.
    pub(crate) fn add_base_bdev(self: &Arc<Self>, mgr: &BdevManager, name: &str) -> Result<()> {
        let b = mgr
            .get(name)
            .filter(|b| !b.is_removing())
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        let (slot, bdev, data_size) = {
            let ctl = self.ctl.lock();
            match ctl.state {
                RaidState::Configuring => {
                    let slot = (0..self.num_members())
                        .find(|i| ctl.members[*i].is_none() && b.has_name(&ctl.names[*i]));
                    drop(ctl);
                    let Some(i) = slot else {
                        return Err(Error::InvalidArg(format!(
                            "configuring raid {} does not wait for {name}",
                            self.name
                        )));
                    };
                    self.add_member(mgr, i, &b)?;
                    if self.all_discovered() {
                        self.start(mgr)?;
                    }
                    return Ok(());
                }
                RaidState::Online | RaidState::Degraded if self.level == RaidLevel::Raid1 => {}
                _ => {
                    return Err(Error::InvalidArg(format!(
                        "raid {} ({}, {}) takes no new member",
                        self.name,
                        self.level.name(),
                        ctl.state.spdk_name()
                    )))
                }
            }
            if ctl.rebuild.is_some() {
                return Err(Error::Busy(format!("raid {} is rebuilding", self.name)));
            }
            let Some(slot) = (0..self.num_members()).find(|i| ctl.members[*i].is_none()) else {
                return Err(Error::InvalidArg(format!(
                    "raid {} has no empty slot",
                    self.name
                )));
            };
            same_block_size(&ctl, &b)?;
            if b.num_blocks() < ctl.data_size {
                return Err(Error::InvalidArg(format!(
                    "{name} has {} blocks, the raid needs {}",
                    b.num_blocks(),
                    ctl.data_size
                )));
            }
            let Some(bdev) = ctl.bdev.as_ref().and_then(Weak::upgrade) else {
                return Err(Error::InvalidArg(format!(
                    "raid {} is going away",
                    self.name
                )));
            };
            (slot, bdev, ctl.data_size)
        };
        let md = self.open_member(mgr, slot, &b)?;
        {
            let mut ctl = self.ctl.lock();
            let still = matches!(ctl.state, RaidState::Online | RaidState::Degraded)
                && ctl.members[slot].is_none()
                && ctl.rebuild.is_none();
            if !still {
                drop(ctl);
                md.close();
                return Err(Error::Again);
            }
            ctl.names[slot] = b.name().to_string();
            ctl.members[slot] = Some(md);
            ctl.rebuild = Some(RebuildProgress {
                target: slot,
                done: 0,
                total: data_size,
            });
            self.member_state[slot].store(MEMBER_REBUILDING, Ordering::Release);
        }
        tracing::info!(raid = %self.name, slot, member = name, blocks = data_size,
            "raid member added; rebuilding");
        crate::rebuild::start(Arc::clone(self), bdev, slot);
        Ok(())
    }

    /// Whether every member serves `t`.
    pub(crate) fn members_support(&self, t: bdevkit::bdev::module::IoType) -> bool {
        self.ctl
            .lock()
            .members
            .iter()
            .flatten()
            .all(|m| m.bdev.supports(t))
    }
}
