//! A raid's shared state: its members and their states, what the I/O path
//! and the rebuild ask of it (member states and channels, failures), its
//! JSON, and the module's list of raids.
//!
//! Each [`Raid`] lives in the module's list from `bdev_raid_create` until
//! it is deleted (or, offline, loses its last member). While it is online
//! its bdev ([`crate::io::RaidBdev`], in the layer above) is registered;
//! the I/O path lives there. Creation, examine, starting, member removal,
//! resizing and deletion, which need that bdev, are in `control.rs` above
//! both.

use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::{Bdev, BdevDesc, Error, Result};
use bdevkit::thread::{current_thread_id, ThreadHandle};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::config::{RaidCreateParams, RaidLevel, RaidSetOptionsParams, RaidState};

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

/// A raid's control-path state, under its lock.
pub(crate) struct Control {
    /// Member bdev names by slot (a replaced member changes its slot's
    /// name).
    pub(crate) names: Vec<String>,
    /// The rebuild running, if any.
    pub(crate) rebuild: Option<RebuildProgress>,
    pub(crate) state: RaidState,
    pub(crate) members: Vec<Option<MemberDesc>>,
    /// The registered bdev while online/degraded (and until destructed):
    /// the `RaidBdev` of `io.rs`, erased because that layer sits above
    /// this one; `control.rs` downcasts it.
    pub(crate) bdev: Option<Weak<dyn Any + Send + Sync>>,
    /// Blocks used on each member (0 until started).
    pub(crate) data_size: u64,
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
    module: Weak<RaidModule>,
    num_members: usize,
    /// `MEMBER_*`, read lock-free by the I/O path.
    pub(crate) member_state: Vec<AtomicU8>,
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

impl Raid {
    /// A configuring raid as `bdev_raid_create` describes it, no member
    /// found yet.
    pub(crate) fn new(p: &RaidCreateParams, module: Weak<RaidModule>) -> Raid {
        Raid {
            name: p.name.clone(),
            level: p.raid_level,
            strip_size_kb: p.strip_size_kb.unwrap_or(0),
            uuid: p.uuid.unwrap_or_else(Uuid::new_v4),
            module,
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

    pub(crate) fn all_discovered(&self) -> bool {
        self.ctl.lock().members.iter().all(Option::is_some)
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

    pub(crate) fn close_member(&self, i: usize) {
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

    pub(crate) fn forget(&self) {
        if let Some(m) = self.module.upgrade() {
            m.remove(self);
        }
        tracing::info!(raid = %self.name, "raid removed");
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
            // A whole number, as SPDK writes it (uint32, rounded down).
            let percent = (u128::from(r.done) * 100)
                .checked_div(u128::from(r.total))
                .map_or(100, |p| u32::try_from(p).unwrap_or(100));
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
