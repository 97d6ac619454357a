//! A raid's life on the control path: creation, examine, starting (the
//! geometry, registering the bdev), member events (removal, resize),
//! `bdev_raid_add_base_bdev` and deletion, and the module's `BdevModule`
//! face.
//!
//! The top layer below the public functions of `lib.rs`: it uses the raid
//! state (`raid.rs`), the bdev and its I/O path (`io.rs`) and the rebuild
//! (`rebuild.rs`).

use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::{Bdev, BdevEvent, BdevManager, BdevModule, ClaimType};
use bdevkit::bdev::module::{Error, Result};
use bdevkit::thread::Thread;
use serde_json::{json, Value};

use crate::config::{validate, RaidCreateParams, RaidLevel, RaidState, MODULE};
use crate::io::{Geometry, RaidBdev};
use crate::map::{ConcatMap, Raid0Map};
use crate::raid::{
    same_block_size, Control, MemberDesc, Raid, RaidModule, RebuildProgress, MEMBER_REBUILDING,
    MEMBER_REMOVED,
};

/// The raid's registered bdev, while it is there.
fn raid_bdev(ctl: &Control) -> Option<Arc<RaidBdev>> {
    ctl.bdev
        .as_ref()
        .and_then(Weak::upgrade)
        .and_then(|b| b.downcast::<RaidBdev>().ok())
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
            let raid = Arc::new(Raid::new(&p, Arc::downgrade(self)));
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

impl Raid {
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
            let bdev: Weak<dyn Any + Send + Sync> = Arc::<RaidBdev>::downgrade(&ops);
            ctl.bdev = Some(bdev);
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
            let Some(bdev) = raid_bdev(&ctl) else {
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
                let bdev = raid_bdev(&ctl);
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

    /// `bdev_raid_delete`: unregisters the bdev (if any), closes the
    /// members and forgets the raid; `done` runs once that is done.
    pub(crate) fn delete(&self, done: impl FnOnce(Result<()>) + Send + 'static) {
        let mut ctl = self.ctl.lock();
        ctl.delete_requested = true;
        let bdev = raid_bdev(&ctl);
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
            let Some(bdev) = raid_bdev(&ctl) else {
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
}
