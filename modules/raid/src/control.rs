//! A raid's life on the control path: creation, starting (the layout of
//! `layout.rs`, registering the bdev), member events (removal, resize),
//! `bdev_raid_add_base_bdev` and deletion.
//!
//! Below `assemble.rs` (examine and the module's `BdevModule` face): it
//! uses the raid state (`raid.rs`), the superblock writer (`persist.rs`),
//! the bdev and its I/O path (`io.rs`) and the rebuild (`rebuild.rs`).

use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bdevkit::bdev::module::{Bdev, BdevEvent, BdevManager, ClaimType, IoStatus};
use bdevkit::bdev::module::{Error, Result};
use bdevkit::thread::Thread;

use crate::config::{validate, RaidCreateParams, RaidLevel, RaidState, MODULE};
use crate::io::RaidBdev;
use crate::persist;
use crate::raid::{
    same_block_size, Control, MemberDesc, Raid, RaidModule, RebuildProgress, MEMBER_REBUILDING,
    MEMBER_REMOVED,
};

/// The raid's registered bdev, while it is there.
pub(crate) fn raid_bdev(ctl: &Control) -> Option<Arc<RaidBdev>> {
    ctl.bdev
        .as_ref()
        .and_then(Weak::upgrade)
        .and_then(|b| b.downcast::<RaidBdev>().ok())
}

impl RaidModule {
    /// `bdev_raid_create`.
    pub(crate) async fn create(
        self: &Arc<Self>,
        mgr: &BdevManager,
        p: RaidCreateParams,
    ) -> Result<()> {
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
            if p.uuid.is_some_and(|u| raids.iter().any(|r| r.uuid == u)) {
                return Err(Error::Exists(format!("a raid with uuid {:?}", p.uuid)));
            }
            let raid = Arc::new(Raid::new(&p, Arc::downgrade(self)));
            raids.push(Arc::clone(&raid));
            raid
        };
        tracing::info!(raid = %raid.name, level = level.name(), members = p.base_bdevs.len(),
            superblock = raid.superblock, "raid created");
        let r = raid.claim_named_members(mgr, &p.base_bdevs).await;
        let r = match r {
            Ok(()) if raid.all_discovered() => raid.start_async(mgr).await,
            r => r,
        };
        if let Err(e) = r {
            raid.delete(|_| {});
            return Err(e);
        }
        Ok(())
    }
}

impl Raid {
    /// Opens bdev `b` as the member of slot `i` (its events come to the
    /// raid) and claims it.
    pub(crate) fn open_member(
        self: &Arc<Self>,
        mgr: &BdevManager,
        i: usize,
        b: &Bdev,
    ) -> Result<MemberDesc> {
        if b.props().zoned.is_some() {
            // Stripes and mirrors write anywhere: zones would refuse it.
            return Err(Error::InvalidArg(format!(
                "{} is a zoned bdev: raid members must be conventional bdevs",
                b.name()
            )));
        }
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

    /// Claims the members of a new raid that exist, checking that none
    /// carries a superblock (SPDK's rule: a disk of another array is not
    /// taken over; `bdev_raid_delete -c` clears it).
    async fn claim_named_members(
        self: &Arc<Self>,
        mgr: &BdevManager,
        names: &[String],
    ) -> Result<()> {
        for (i, name) in names.iter().enumerate() {
            let Some(b) = mgr.get(name) else { continue };
            if self.ctl.lock().absent[i] {
                continue;
            }
            match self.add_member(mgr, i, &b) {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
            let found = {
                let ctl = self.ctl.lock();
                ctl.members[i]
                    .as_ref()
                    .and_then(|m| m.desc.get_io_channel().ok())
            };
            if let Some(ch) = found {
                if let Ok(Some(sb)) = persist::read_sb(&ch).await {
                    tracing::error!(raid = %self.name, member = name, other = %sb.name,
                        "member carries the superblock of a raid");
                    return Err(Error::Exists(format!(
                        "{name} holds the superblock of raid {} ({})",
                        sb.name, sb.uuid
                    )));
                }
            }
        }
        Ok(())
    }

    /// Opens and claims member slot `i` (bdev `b`), checking it fits.
    pub(crate) fn add_member(
        self: &Arc<Self>,
        mgr: &BdevManager,
        i: usize,
        b: &Bdev,
    ) -> Result<()> {
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
        if ctl.names[i].is_empty() {
            ctl.names[i] = b.name().to_string();
        }
        ctl.members[i] = Some(md);
        tracing::info!(raid = %self.name, member = %b.name(), slot = i, "raid member discovered");
        Ok(())
    }

    /// examine by name: is `b` a member this raid waits for?
    pub(crate) fn examine_name(self: &Arc<Self>, mgr: &BdevManager, b: &Bdev) -> Result<()> {
        let slot = {
            let ctl = self.ctl.lock();
            if ctl.state != RaidState::Configuring {
                return Ok(());
            }
            ctl.names.iter().enumerate().position(|(i, n)| {
                ctl.members[i].is_none() && !ctl.absent[i] && !n.is_empty() && b.has_name(n)
            })
        };
        let Some(i) = slot else { return Ok(()) };
        self.add_member(mgr, i, b)?;
        if self.all_discovered() {
            self.start(mgr)?;
        }
        Ok(())
    }

    /// Every member is there: starts the raid. A raid without superblock
    /// starts at once; a superblock raid writes its superblock first, in
    /// the background.
    pub(crate) fn start(self: &Arc<Self>, mgr: &BdevManager) -> Result<()> {
        if !self.superblock {
            return self.register(mgr);
        }
        let Some(t) = Thread::current() else {
            return Err(Error::InvalidArg(
                "raid start needs a bdevkit thread".into(),
            ));
        };
        let (me, mgr) = (Arc::clone(self), mgr.clone());
        t.spawn_local(async move {
            if let Err(e) = me.start_async(&mgr).await {
                tracing::error!(raid = %me.name, error = %e, "raid did not start");
            }
        });
        Ok(())
    }

    /// [`Raid::start`], waiting for a superblock raid to be registered.
    pub(crate) async fn start_async(self: &Arc<Self>, mgr: &BdevManager) -> Result<()> {
        if !self.superblock {
            return self.register(mgr);
        }
        {
            let mut ctl = self.ctl.lock();
            if ctl.state != RaidState::Configuring || ctl.starting {
                return Ok(());
            }
            ctl.starting = true;
        }
        let r = self.prepare_superblock();
        let r = match r {
            Ok(()) if persist::write_now(self).await => Ok(()),
            Ok(()) => Err(Error::Io(IoStatus::Failed)),
            Err(e) => Err(e),
        };
        self.ctl.lock().starting = false;
        r?;
        self.register(mgr)
    }

    /// Registers the raid bdev over the members there are.
    fn register(self: &Arc<Self>, mgr: &BdevManager) -> Result<()> {
        let (block_size, align, md, geometry, offsets, degraded) = {
            let mut ctl = self.ctl.lock();
            if ctl.state != RaidState::Configuring {
                return Ok(());
            }
            let bdevs: Vec<&Bdev> = ctl.members.iter().flatten().map(|m| &m.bdev).collect();
            let Some(first) = bdevs.first() else {
                return Err(Error::InvalidArg("raid without members".into()));
            };
            let out = (
                first.block_size(),
                bdevs
                    .iter()
                    .map(|b| b.props().required_alignment)
                    .max()
                    .unwrap_or(0),
                first.props().clone(),
            );
            let (geometry, sizes) = self.geometry_of(&ctl)?;
            if !self.superblock {
                ctl.data_size = geometry.data_size();
                ctl.sizes = sizes;
                for i in 0..self.num_members() {
                    if ctl.absent[i] {
                        self.set_member_state(&mut ctl, i, MEMBER_REMOVED);
                    }
                }
            }
            let degraded = ctl.absent.iter().any(|a| *a);
            (out.0, out.1, out.2, geometry, ctl.offsets.clone(), degraded)
        };
        let ops = RaidBdev::new(Arc::clone(self), mgr.clone(), geometry, offsets);
        let mut props = ops.props(&self.name, block_size);
        props.uuid = Some(self.uuid);
        props.required_alignment = align;
        props.md_size = md.md_size;
        props.md_interleave = md.md_interleave;
        {
            let mut ctl = self.ctl.lock();
            ctl.state = if degraded {
                RaidState::Degraded
            } else {
                RaidState::Online
            };
            let bdev: Weak<dyn Any + Send + Sync> = Arc::<RaidBdev>::downgrade(&ops);
            ctl.bdev = Some(bdev);
        }
        if let Err(e) = mgr.register_bdev(MODULE, props, Arc::clone(&ops)) {
            let mut ctl = self.ctl.lock();
            ctl.state = RaidState::Configuring;
            ctl.bdev = None;
            return Err(e);
        }
        tracing::info!(raid = %self.name, level = self.level.name(), degraded, "raid online");
        self.add_deferred(mgr);
        Ok(())
    }

    /// Adds the bdevs given to the raid while it was configuring for slots
    /// not in sync (and, for a superblock raid, former members examine
    /// found): each is rebuilt.
    fn add_deferred(self: &Arc<Self>, mgr: &BdevManager) {
        let names = std::mem::take(&mut self.ctl.lock().deferred);
        if names.is_empty() {
            return;
        }
        let Some(t) = Thread::current() else { return };
        let (me, mgr) = (Arc::clone(self), mgr.clone());
        t.spawn_local(async move {
            for n in names {
                if let Err(e) = me.add_base_bdev(&mgr, &n).await {
                    tracing::warn!(raid = %me.name, member = %n, error = %e,
                        "cannot add the member back");
                }
            }
        });
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
    /// degraded). A superblock raid records the new size on its members
    /// before it grows.
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
                .filter_map(|(j, m)| {
                    m.as_ref()
                        .map(|m| m.bdev.num_blocks().saturating_sub(ctl.offsets[j]))
                })
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
        {
            let mut ctl = self.ctl.lock();
            ctl.data_size = data_size;
            ctl.sizes.iter_mut().for_each(|s| *s = data_size);
        }
        if !self.superblock {
            bdev.resize(new_size);
            return;
        }
        let Some(t) = Thread::current() else { return };
        let me = Arc::clone(self);
        t.spawn_local(async move {
            if persist::write_now(&me).await {
                bdev.resize(new_size);
            } else {
                tracing::error!(raid = %me.name, "cannot record the new size; the raid keeps its size");
            }
        });
    }

    /// Member `i` is being hot-removed, or taken out by
    /// `bdev_raid_remove_base_bdev`; `done` runs once it is closed (its
    /// claim released) and, for a superblock raid, once the superblock on
    /// the other members no longer says it is in sync.
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
                self.set_member_state(&mut ctl, i, MEMBER_REMOVED);
                let gen = self.sb_dirty.load(Ordering::Acquire);
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
                let me = Arc::clone(self);
                // Done once the superblock no longer says it is in sync,
                // and, for a rebuild target, once the rebuild let go of
                // it (so that it can be added again at once).
                let done = move || {
                    let me2 = Arc::clone(&me);
                    persist::when_durable(&me, gen, Box::new(move |_| me2.after_rebuild(done)));
                };
                let Some(bdev) = bdev else {
                    self.close_member(i);
                    return done();
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

    /// Zeroes the superblock on every member there is (before a delete
    /// with `clear_sb`). Errors are logged; the delete goes on.
    pub(crate) async fn clear_superblocks(&self) {
        let (sb, chans) = {
            let ctl = self.ctl.lock();
            let Some(sb) = ctl.sb.clone() else { return };
            let chans: Vec<_> = ctl
                .members
                .iter()
                .flatten()
                .filter_map(|m| m.desc.get_io_channel().ok())
                .collect();
            (sb, chans)
        };
        for ch in chans {
            if let Err(why) = persist::clear_copy(&ch, &sb).await {
                tracing::warn!(raid = %self.name, member = %ch.bdev().name(), why,
                    "cannot clear the superblock");
            }
        }
    }

    /// `bdev_raid_add_base_bdev`: a configuring raid takes `name` if it is
    /// a member it waits for (or keeps it for a slot not in sync, to add
    /// once it is online); a degraded raid1 takes it into a slot whose
    /// member was removed, attaches it for writes and rebuilds it from the
    /// working members in the background (reads keep going to those until
    /// the rebuild is done). A bdev holding the superblock of another raid
    /// is refused. Errors: `EINVAL` no such slot, a raid0/concat, a block
    /// size other than the members' or a bdev smaller than the raid's
    /// data; `ENODEV` no such bdev; `EBUSY` a rebuild runs; `EPERM` the
    /// bdev is claimed; `EEXIST` another raid's superblock.
    pub(crate) async fn add_base_bdev(
        self: &Arc<Self>,
        mgr: &BdevManager,
        name: &str,
    ) -> Result<()> {
        let b = mgr
            .get(name)
            .filter(|b| !b.is_removing())
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        if let Some(i) = self.configuring_slot(&b, name)? {
            self.add_member(mgr, i, &b)?;
            if self.all_discovered() {
                return self.start_async(mgr).await;
            }
            return Ok(());
        }
        let slot = {
            let ctl = self.ctl.lock();
            match ctl.state {
                RaidState::Configuring => return Ok(()),
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
            // A former member goes back to its own slot.
            let own = ctl
                .sb
                .as_ref()
                .and_then(|s| s.member_by_uuid(b.uuid()))
                .map(|m| usize::from(m.slot))
                .filter(|i| ctl.members.get(*i).is_some_and(Option::is_none));
            let slot = own
                .or_else(|| (0..self.num_members()).find(|i| ctl.members[*i].is_none()))
                .ok_or_else(|| {
                    Error::InvalidArg(format!("raid {} has no empty slot", self.name))
                })?;
            self.check_new_member(&ctl, &b, slot)?;
            slot
        };
        let md = self.open_member(mgr, slot, &b)?;
        let ch = md.desc.get_io_channel()?;
        match persist::read_sb(&ch).await {
            Ok(Some(sb)) if sb.uuid != self.uuid => {
                md.close();
                return Err(Error::Exists(format!(
                    "{name} holds the superblock of raid {} ({})",
                    sb.name, sb.uuid
                )));
            }
            _ => {}
        }
        let bdev = {
            let mut ctl = self.ctl.lock();
            let still = matches!(ctl.state, RaidState::Online | RaidState::Degraded)
                && ctl.members[slot].is_none()
                && ctl.rebuild.is_none();
            let bdev = raid_bdev(&ctl);
            let (true, Some(bdev)) = (still, bdev) else {
                drop(ctl);
                md.close();
                return Err(Error::Again);
            };
            ctl.names[slot] = b.name().to_string();
            ctl.members[slot] = Some(md);
            ctl.absent[slot] = false;
            let total = ctl.data_size;
            ctl.sizes[slot] = total;
            ctl.rebuild = Some(RebuildProgress {
                target: slot,
                done: 0,
                total,
            });
            ctl.rebuild_task = true;
            self.set_member_state(&mut ctl, slot, MEMBER_REBUILDING);
            bdev
        };
        tracing::info!(raid = %self.name, slot, member = name, "raid member added; rebuilding");
        crate::rebuild::start(Arc::clone(self), bdev, slot);
        Ok(())
    }

    /// A configuring raid: the slot waiting for `b` (`None` when `b` is
    /// kept for a slot not in sync, or the raid is not configuring).
    fn configuring_slot(&self, b: &Bdev, name: &str) -> Result<Option<usize>> {
        let mut ctl = self.ctl.lock();
        if ctl.state != RaidState::Configuring {
            return Ok(None);
        }
        let slot = (0..self.num_members())
            .find(|i| ctl.members[*i].is_none() && !ctl.absent[*i] && b.has_name(&ctl.names[*i]));
        if slot.is_some() {
            return Ok(slot);
        }
        if self.level == RaidLevel::Raid1 && ctl.absent.iter().any(|a| *a) {
            // A slot not in sync: rebuilt once online.
            if !ctl.deferred.iter().any(|n| b.has_name(n)) {
                ctl.deferred.push(b.name().to_string());
            }
            return Ok(None);
        }
        Err(Error::InvalidArg(format!(
            "configuring raid {} does not wait for {name}",
            self.name
        )))
    }

    /// `b` may be rebuilt into slot `slot` of this online raid1.
    fn check_new_member(&self, ctl: &Control, b: &Bdev, slot: usize) -> Result<()> {
        if ctl.rebuild.is_some() {
            return Err(Error::Busy(format!("raid {} is rebuilding", self.name)));
        }
        same_block_size(ctl, b)?;
        let offset = ctl.offsets[slot];
        if b.num_blocks() < offset + ctl.data_size {
            return Err(Error::InvalidArg(format!(
                "{} has {} blocks, the raid needs {}",
                b.name(),
                b.num_blocks(),
                offset + ctl.data_size
            )));
        }
        if raid_bdev(ctl).is_none() {
            return Err(Error::InvalidArg(format!(
                "raid {} is going away",
                self.name
            )));
        }
        Ok(())
    }
}
