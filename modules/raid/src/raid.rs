//! A raid's shared state: its members and their states, what the I/O path
//! and the rebuild ask of it (member states and channels, failures), its
//! JSON and saved config, and the module's list of raids.
//!
//! Each [`Raid`] lives in the module's list from `bdev_raid_create` (or
//! from examine finding its superblock) until it is deleted (or, offline,
//! loses its last member). While it is online its bdev
//! ([`crate::io::RaidBdev`], in the layer above) is registered; the I/O
//! path lives there. Creation, examine, starting, member removal,
//! resizing and deletion, which need that bdev, are in `control.rs` and
//! `assemble.rs` above; writing the superblock is `persist.rs`.
//!
//! # Member states and what is saved
//!
//! A member is *in sync* only while its state is [`MEMBER_OK`]. A member
//! being rebuilt, one that failed an I/O and a removed one are not, and
//! nothing that outlives the process says they are: `save_config` writes
//! SPDK's placeholder `removed_base_bdev_<slot>` for them (and a
//! `bdev_raid_add_base_bdev` after every bdev for a rebuild target, so
//! that a restart rebuilds it again), and the superblock marks them
//! missing or failed.
//!
//! Every change of a member state of a superblock raid is made under the
//! control lock and raises `sb_dirty`; `persist.rs` takes its snapshot
//! under the same lock and raises `sb_durable` once the superblock is on
//! the members. A raid1 write completes only when `sb_durable` has caught
//! up with the `sb_dirty` it sees, so no write is acknowledged while a
//! member that missed it is still recorded as in sync.

use std::any::Any;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::{Bdev, BdevDesc, Error, Result};
use bdevkit::thread::{current_thread_id, Thread, ThreadHandle};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::config::{is_placeholder, RaidCreateParams, RaidLevel, RaidSetOptionsParams, RaidState};
use crate::sb::{SbMember, SbMemberState, Superblock};

/// Member states (one atomic per member, read by the I/O path).
pub(crate) const MEMBER_OK: u8 = 0;
/// Failed an I/O (raid1): no longer read or written.
pub(crate) const MEMBER_FAILED: u8 = 1;
/// Hot-removed, or never there (a slot not in sync at start): channels
/// drop their channel to it.
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
    pub(crate) raids: Mutex<Vec<Arc<Raid>>>,
    pub(crate) options: Mutex<RaidSetOptionsParams>,
}

impl RaidModule {
    pub(crate) fn raids(&self) -> Vec<Arc<Raid>> {
        self.raids.lock().clone()
    }

    pub(crate) fn find(&self, name: &str) -> Option<Arc<Raid>> {
        self.raids.lock().iter().find(|r| r.name == name).cloned()
    }

    pub(crate) fn find_uuid(&self, uuid: Uuid) -> Option<Arc<Raid>> {
        self.raids.lock().iter().find(|r| r.uuid == uuid).cloned()
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
}

/// `b` has the block size and metadata size of the members there are.
pub(crate) fn same_block_size(ctl: &Control, b: &Bdev) -> Result<()> {
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
pub(crate) struct MemberDesc {
    pub(crate) desc: BdevDesc,
    pub(crate) opener: Option<ThreadHandle>,
    pub(crate) bdev: Bdev,
}

impl MemberDesc {
    /// Closes the descriptor on the thread that opened it.
    pub(crate) fn close(self) {
        match self.opener {
            Some(t) if t.id() != current_thread_id() => {
                let desc = self.desc;
                let _ = t.send_msg(move || drop(desc));
            }
            _ => drop(self.desc),
        }
    }
}

/// Someone waiting for the superblock to reach a generation: called with
/// `true` once it did, `false` when it could not be written.
pub(crate) type DurableWaiter = Box<dyn FnOnce(bool) + Send>;

/// A raid's control-path state, under its lock.
pub(crate) struct Control {
    /// Member bdev names by slot (a replaced member changes its slot's
    /// name; a slot not in sync at creation holds its placeholder; a raid
    /// found by its superblock starts with empty names).
    pub(crate) names: Vec<String>,
    /// The rebuild running, if any.
    pub(crate) rebuild: Option<RebuildProgress>,
    pub(crate) state: RaidState,
    pub(crate) members: Vec<Option<MemberDesc>>,
    /// Slots known not to be in sync when the raid starts (placeholders,
    /// superblock entries that are not configured): it starts without
    /// them, degraded.
    pub(crate) absent: Vec<bool>,
    /// Superblock raids found by examine: the UUID each configured slot
    /// waits for.
    pub(crate) expect: Vec<Option<Uuid>>,
    /// First block of the raid's data on each slot (0 without
    /// superblock).
    pub(crate) offsets: Vec<u64>,
    /// Blocks of the raid's data on each slot (0 until started).
    pub(crate) sizes: Vec<u64>,
    /// The superblock as last written or read (superblock raids once
    /// started, or found by examine).
    pub(crate) sb: Option<Superblock>,
    /// A write of the superblock is under way (`persist.rs`).
    pub(crate) persisting: bool,
    /// Waiting for `sb_durable` to reach a generation.
    pub(crate) durable_waiters: Vec<(u64, DurableWaiter)>,
    /// Bdevs `bdev_raid_add_base_bdev` gave a configuring raid for slots
    /// not in sync: added (and rebuilt) once it is online.
    pub(crate) deferred: Vec<String>,
    /// The registered bdev while online/degraded (and until destructed):
    /// the `RaidBdev` of `io.rs`, erased because that layer sits above
    /// this one; `control.rs` downcasts it.
    pub(crate) bdev: Option<Weak<dyn Any + Send + Sync>>,
    /// Blocks used on each member (0 until started).
    pub(crate) data_size: u64,
    /// The start (superblock write, registration) is under way.
    pub(crate) starting: bool,
    /// A rebuild task runs (from its start until it has let go of
    /// everything it held, after `rebuild` is cleared).
    pub(crate) rebuild_task: bool,
    /// Waiting for the rebuild task to end (a removal of its target).
    pub(crate) rebuild_waiters: Vec<Box<dyn FnOnce() + Send>>,
    /// Waiting `bdev_raid_delete` callers.
    pub(crate) deleting: Vec<Box<dyn FnOnce(Result<()>) + Send>>,
    pub(crate) delete_requested: bool,
}

/// One raid: configuration and control-path state.
pub struct Raid {
    pub(crate) name: String,
    pub(crate) level: RaidLevel,
    pub(crate) strip_size_kb: u32,
    pub(crate) uuid: Uuid,
    /// Keeps SPDK's superblock on its members.
    pub(crate) superblock: bool,
    /// Where its control path runs (superblock writes, rebuilds).
    pub(crate) home: Option<ThreadHandle>,
    module: Weak<RaidModule>,
    num_members: usize,
    /// `MEMBER_*`, read lock-free by the I/O path.
    pub(crate) member_state: Vec<AtomicU8>,
    /// Generation of the newest member-state change (superblock raids).
    pub(crate) sb_dirty: AtomicU64,
    /// Generation the superblock on the members records.
    pub(crate) sb_durable: AtomicU64,
    pub(crate) ctl: Mutex<Control>,
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

fn control(names: Vec<String>) -> Control {
    let n = names.len();
    Control {
        absent: names
            .iter()
            .enumerate()
            .map(|(i, s)| is_placeholder(s, i))
            .collect(),
        names,
        rebuild: None,
        state: RaidState::Configuring,
        members: (0..n).map(|_| None).collect(),
        expect: vec![None; n],
        offsets: vec![0; n],
        sizes: vec![0; n],
        sb: None,
        persisting: false,
        durable_waiters: Vec::new(),
        deferred: Vec::new(),
        bdev: None,
        data_size: 0,
        starting: false,
        rebuild_task: false,
        rebuild_waiters: Vec::new(),
        deleting: Vec::new(),
        delete_requested: false,
    }
}

impl Raid {
    /// A configuring raid as `bdev_raid_create` describes it, no member
    /// found yet.
    pub(crate) fn new(p: &RaidCreateParams, module: Weak<RaidModule>) -> Raid {
        Raid {
            name: p.name.clone(),
            level: p.raid_level,
            strip_size_kb: p.strip_size_kb.unwrap_or(0),
            uuid: p.uuid.unwrap_or_else(Uuid::new_v4),
            superblock: p.superblock.unwrap_or(false),
            home: Thread::current().map(|t| t.handle()),
            module,
            num_members: p.base_bdevs.len(),
            member_state: p
                .base_bdevs
                .iter()
                .map(|_| AtomicU8::new(MEMBER_OK))
                .collect(),
            sb_dirty: AtomicU64::new(0),
            sb_durable: AtomicU64::new(0),
            ctl: Mutex::new(control(p.base_bdevs.clone())),
        }
    }

    /// A configuring raid as superblock `sb` describes it: it waits for
    /// the members `sb` says are configured, by UUID.
    pub(crate) fn from_sb(sb: &Superblock, module: Weak<RaidModule>) -> Raid {
        let n = usize::from(sb.num_base_bdevs);
        let mut ctl = control(vec![String::new(); n]);
        for i in 0..n {
            match sb.member(i) {
                Some(m) if m.state == SbMemberState::Configured => {
                    ctl.expect[i] = Some(m.uuid);
                    ctl.offsets[i] = m.data_offset;
                    ctl.sizes[i] = m.data_size;
                }
                Some(m) => {
                    ctl.absent[i] = true;
                    ctl.offsets[i] = m.data_offset;
                    ctl.sizes[i] = m.data_size;
                }
                None => ctl.absent[i] = true,
            }
        }
        ctl.sb = Some(sb.clone());
        let strip_size_kb =
            u32::try_from(u64::from(sb.strip_size) * u64::from(sb.block_size) / 1024)
                .unwrap_or(u32::MAX);
        Raid {
            name: sb.name.clone(),
            level: sb.level,
            strip_size_kb,
            uuid: sb.uuid,
            superblock: true,
            home: Thread::current().map(|t| t.handle()),
            module,
            num_members: n,
            member_state: (0..n).map(|_| AtomicU8::new(MEMBER_OK)).collect(),
            sb_dirty: AtomicU64::new(0),
            sb_durable: AtomicU64::new(0),
            ctl: Mutex::new(ctl),
        }
    }

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

    /// The raid's UUID (also its bdev's).
    #[must_use]
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// Whether it keeps a superblock on its members.
    #[must_use]
    pub fn has_superblock(&self) -> bool {
        self.superblock
    }

    /// The sequence number of the superblock last written or read.
    #[must_use]
    pub fn sb_seq_number(&self) -> Option<u64> {
        self.ctl.lock().sb.as_ref().map(|s| s.seq_number)
    }

    fn state_of(&self, i: usize) -> Option<u8> {
        self.member_state.get(i).map(|s| s.load(Ordering::Acquire))
    }

    pub(crate) fn member_ok(&self, i: usize) -> bool {
        self.state_of(i) == Some(MEMBER_OK)
    }

    /// Whether member `i` is being rebuilt.
    pub(crate) fn member_rebuilding(&self, i: usize) -> bool {
        self.state_of(i) == Some(MEMBER_REBUILDING)
    }

    /// Whether writes go to member `i`: working, or being rebuilt.
    pub(crate) fn member_writable(&self, i: usize) -> bool {
        matches!(self.state_of(i), Some(MEMBER_OK | MEMBER_REBUILDING))
    }

    pub(crate) fn member_removed(&self, i: usize) -> bool {
        self.state_of(i) == Some(MEMBER_REMOVED)
    }

    /// Sets member `i`'s state. Takes the control state as proof that the
    /// caller holds the lock: a superblock raid's change is counted in
    /// `sb_dirty` before it is visible, so that the superblock written
    /// next includes it (see the file's doc).
    pub(crate) fn set_member_state(&self, _ctl: &mut Control, i: usize, state: u8) {
        if self.state_of(i) == Some(state) {
            return;
        }
        if self.superblock {
            self.sb_dirty.fetch_add(1, Ordering::AcqRel);
        }
        self.member_state[i].store(state, Ordering::Release);
    }

    /// Whether a member-state change is not on the members yet (a raid1
    /// write completing now waits for it). One load for raids without
    /// superblock.
    #[inline]
    pub(crate) fn sb_behind(&self) -> Option<u64> {
        if !self.superblock {
            return None;
        }
        let dirty = self.sb_dirty.load(Ordering::Acquire);
        (self.sb_durable.load(Ordering::Acquire) < dirty).then_some(dirty)
    }

    pub(crate) fn num_members(&self) -> usize {
        self.num_members
    }

    /// Every slot holds its member, or is known to start without one.
    pub(crate) fn all_discovered(&self) -> bool {
        let ctl = self.ctl.lock();
        ctl.members
            .iter()
            .zip(&ctl.absent)
            .all(|(m, absent)| m.is_some() || *absent)
    }

    pub(crate) fn operational(&self) -> usize {
        (0..self.num_members())
            .filter(|i| self.member_ok(*i))
            .count()
    }

    /// The slot of member `name` (a name or alias of the member bdev),
    /// while the raid holds it.
    pub(crate) fn slot_of(&self, name: &str) -> Option<usize> {
        let ctl = self.ctl.lock();
        ctl.members.iter().enumerate().position(|(i, m)| {
            m.as_ref().is_some_and(|m| m.bdev.has_name(name)) && !self.member_removed(i)
        })
    }

    /// Whether bdev `b` is one of this raid's members.
    pub(crate) fn holds(&self, b: &Bdev) -> bool {
        self.ctl
            .lock()
            .members
            .iter()
            .flatten()
            .any(|m| m.bdev.uuid() == b.uuid() && m.bdev.name() == b.name())
    }

    pub(crate) fn close_member(&self, i: usize) {
        let md = self.ctl.lock().members[i].take();
        if let Some(md) = md {
            md.close();
        }
    }

    /// Marks member `i` failed after an I/O error (raid1), unless it is
    /// the last operational member. Returns whether the member is out.
    /// Callers go through `persist::fail_member`, which records the
    /// failure in the superblock.
    pub(crate) fn member_failed(&self, i: usize) -> bool {
        if !self.member_writable(i) {
            return true;
        }
        let mut ctl = self.ctl.lock();
        if self.member_rebuilding(i) {
            // A rebuild target that fails a write is out; the rebuild
            // stops at its next step.
            self.set_member_state(&mut ctl, i, MEMBER_FAILED);
            tracing::warn!(raid = %self.name, slot = i, "rebuild target failed an I/O");
            return true;
        }
        if !self.member_ok(i) {
            return true;
        }
        if self.level != RaidLevel::Raid1
            || !matches!(ctl.state, RaidState::Online | RaidState::Degraded)
            || self.operational() < 2
        {
            return false;
        }
        self.set_member_state(&mut ctl, i, MEMBER_FAILED);
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

    pub(crate) fn forget(&self) {
        if let Some(m) = self.module.upgrade() {
            m.remove(self);
        }
        tracing::info!(raid = %self.name, "raid removed");
    }

    /// The superblock to write now: the last one with this raid's member
    /// states, sizes and sequence number raised; `None` without
    /// superblock. Call with the lock held (persist.rs).
    pub(crate) fn sb_snapshot(&self, ctl: &Control) -> Option<Superblock> {
        if !self.superblock {
            return None;
        }
        let mut sb = ctl.sb.clone()?;
        sb.seq_number += 1;
        sb.raid_size = raid_blocks(self.level, ctl);
        let mut members = Vec::with_capacity(self.num_members());
        for i in 0..self.num_members() {
            let slot = u8::try_from(i).unwrap_or(u8::MAX);
            let prev = sb.member(i).cloned();
            let was = prev.as_ref().map_or(SbMemberState::Missing, |m| m.state);
            let not_in_sync = if was == SbMemberState::Configured {
                SbMemberState::Missing
            } else {
                was
            };
            let present = ctl.members[i].as_ref().map(|m| m.bdev.uuid());
            let (uuid, state) = match (present, self.state_of(i)) {
                (Some(u), Some(MEMBER_OK)) => (u, SbMemberState::Configured),
                (Some(u), Some(MEMBER_FAILED)) => (u, SbMemberState::Failed),
                (Some(u), Some(MEMBER_REBUILDING)) => (u, not_in_sync),
                _ => (prev.as_ref().map_or(Uuid::nil(), |m| m.uuid), not_in_sync),
            };
            members.push(SbMember {
                uuid,
                data_offset: ctl.offsets[i],
                data_size: ctl.sizes[i],
                state,
                flags: prev.as_ref().map_or(0, |m| m.flags),
                slot,
            });
        }
        sb.members = members;
        Some(sb)
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

    /// First block of the raid's data on slot `i`.
    pub(crate) fn data_offset(&self, i: usize) -> u64 {
        self.ctl.lock().offsets.get(i).copied().unwrap_or(0)
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

    /// Runs `f` once no rebuild task runs (at once if none does).
    pub(crate) fn after_rebuild(&self, f: impl FnOnce() + Send + 'static) {
        let mut ctl = self.ctl.lock();
        if ctl.rebuild_task {
            ctl.rebuild_waiters.push(Box::new(f));
            return;
        }
        drop(ctl);
        f();
    }

    /// The rebuild task ended (it holds nothing any more).
    pub(crate) fn rebuild_task_ended(&self) {
        let waiters = {
            let mut ctl = self.ctl.lock();
            ctl.rebuild_task = false;
            std::mem::take(&mut ctl.rebuild_waiters)
        };
        for w in waiters {
            w();
        }
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
            self.set_member_state(&mut ctl, i, MEMBER_OK);
            if ctl.state == RaidState::Degraded && self.operational() == self.num_members() {
                ctl.state = RaidState::Online;
            }
            tracing::info!(raid = %self.name, slot = i, member = %ctl.names[i],
                state = ?ctl.state, "raid rebuild finished");
        }
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

/// The raid's size in blocks from its slots' data sizes (as the geometry
/// computes it at start).
fn raid_blocks(level: RaidLevel, ctl: &Control) -> u64 {
    match level {
        RaidLevel::Raid1 => ctl.data_size,
        RaidLevel::Raid0 | RaidLevel::Raid5f => ctl.data_size * ctl.sizes.len() as u64,
        RaidLevel::Concat => ctl.sizes.iter().sum(),
    }
}
