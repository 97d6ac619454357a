//! Examine, and the module's `BdevModule` face: a new bdev may be a member
//! a configuring raid waits for by name, or carry a raid superblock, from
//! which the array reassembles with no config at all.
//!
//! Assembly follows SPDK's rules, so that arrays move between the two:
//! the raid is made from the first superblock found and waits for every
//! member that superblock says is configured, by UUID. A copy with a
//! higher sequence number replaces a raid still configuring (its members
//! are examined again against the newer copy); an older copy is read
//! through the newer one, so a member that missed writes (removed,
//! failed, or being rebuilt when the process died) is never taken as in
//! sync. Such a member is added back once the raid runs, and rebuilt.
//!
//! The top layer of the crate below `lib.rs`.

use std::sync::Arc;

use bdevkit::bdev::module::{Bdev, BdevManager, BdevModule, Done};
use bdevkit::thread::Thread;
use serde_json::{json, Value};

use crate::config::{RaidLevel, RaidState, MODULE};
use crate::persist;
use crate::raid::{MemberDesc, Raid, RaidModule};
use crate::sb::{SbMemberState, Superblock};

impl BdevModule for RaidModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    fn has_examine(&self) -> bool {
        true
    }

    /// A new bdev may be a member a configuring raid waits for by name.
    fn examine_config(&self, mgr: &BdevManager, bdev: &Bdev) {
        let raids: Vec<Arc<Raid>> = self.raids.lock().clone();
        for raid in raids {
            if let Err(e) = raid.examine_name(mgr, bdev) {
                tracing::error!(raid = %raid.name, member = %bdev.name(), error = %e,
                    "cannot add member to raid");
            }
        }
    }

    /// A new bdev no raid took by name may carry a raid superblock.
    fn examine_disk(&self, mgr: &BdevManager, bdev: &Bdev, done: Done) {
        if bdev.claim().is_some() || self.raids().iter().any(|r| r.holds(bdev)) {
            return done.done();
        }
        let (Some(t), Some(me)) = (Thread::current(), mgr.module_as::<RaidModule>(MODULE)) else {
            return done.done();
        };
        let (mgr, bdev) = (mgr.clone(), bdev.clone());
        t.spawn_local(async move {
            examine(me, mgr, bdev).await;
            done.done();
        });
    }

    /// `bdev_raid_set_options`, then the raids still configuring (online
    /// raids are emitted per bdev, as SPDK does; a superblock raid that
    /// started is found again by examine and emits nothing).
    fn config_json(&self, _mgr: &BdevManager) -> Vec<Value> {
        let mut out =
            vec![json!({"method": "bdev_raid_set_options", "params": *self.options.lock()})];
        for r in self.raids.lock().iter() {
            if r.state() == RaidState::Configuring && r.ctl.lock().sb.is_none() {
                out.push(r.create_entry());
            }
        }
        out
    }

    /// The rebuilds under way, restarted once every bdev is back.
    fn config_json_after_bdevs(&self, _mgr: &BdevManager) -> Vec<Value> {
        self.raids
            .lock()
            .iter()
            .filter(|r| !r.superblock)
            .flat_map(|r| r.rebuild_entries())
            .collect()
    }
}

/// Reads `bdev`'s superblock and assembles its raid.
async fn examine(module: Arc<RaidModule>, mgr: BdevManager, bdev: Bdev) {
    let sb = {
        let desc = match mgr.open(bdev.name(), false, |_| {}) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(bdev = %bdev.name(), error = %e, "raid examine cannot open");
                return;
            }
        };
        let Ok(ch) = desc.get_io_channel() else {
            return;
        };
        persist::read_sb(&ch).await
    };
    let sb = match sb {
        Ok(Some(sb)) => sb,
        Ok(None) => return,
        Err(why) => {
            tracing::warn!(bdev = %bdev.name(), why, "ignoring a damaged raid superblock");
            return;
        }
    };
    if sb.block_size != bdev.block_size() {
        tracing::warn!(bdev = %bdev.name(), sb_block_size = sb.block_size,
            block_size = bdev.block_size(), "raid superblock of another block size; ignored");
        return;
    }
    let again = assemble(&module, &mgr, &bdev, sb).await;
    for b in again {
        Box::pin(examine(Arc::clone(&module), mgr.clone(), b)).await;
    }
}

/// Puts `bdev`, whose superblock is `sb`, where it belongs. Returns the
/// bdevs to examine again (members of a raid a newer copy replaced).
async fn assemble(
    module: &Arc<RaidModule>,
    mgr: &BdevManager,
    bdev: &Bdev,
    sb: Superblock,
) -> Vec<Bdev> {
    let mut again = Vec::new();
    let raid = match module.find_uuid(sb.uuid) {
        Some(r) if !r.superblock => {
            tracing::warn!(raid = %r.name, bdev = %bdev.name(),
                "bdev carries the superblock of a raid created without one; ignored");
            return again;
        }
        Some(r) if sb.seq_number > r.sb_seq_number().unwrap_or(0) => {
            let busy = r.state() != RaidState::Configuring || r.ctl.lock().starting;
            if busy {
                tracing::warn!(raid = %r.name, bdev = %bdev.name(), seq = sb.seq_number,
                    "newer raid superblock found while the raid runs; ignored");
                return again;
            }
            tracing::info!(raid = %r.name, bdev = %bdev.name(), seq = sb.seq_number,
                "newer raid superblock: assembling from it");
            again = dismantle(&r);
            match adopt(module, mgr, &sb) {
                Some(r) => r,
                None => return again,
            }
        }
        Some(r) => r,
        None => match adopt(module, mgr, &sb) {
            Some(r) => r,
            None => return again,
        },
    };
    // Read through the raid's own (newest) copy.
    let entry = raid
        .ctl
        .lock()
        .sb
        .as_ref()
        .and_then(|s| s.member_by_uuid(bdev.uuid()).cloned());
    let Some(entry) = entry else {
        tracing::warn!(raid = %raid.name, bdev = %bdev.name(),
            "bdev is not a member of the raid its superblock names; ignored");
        return again;
    };
    let slot = usize::from(entry.slot);
    match raid.state() {
        RaidState::Online | RaidState::Degraded => {
            if entry.state == SbMemberState::Configured {
                tracing::warn!(raid = %raid.name, bdev = %bdev.name(),
                    "the superblock says this member is in sync but the raid runs without it; ignored");
                return again;
            }
            tracing::info!(raid = %raid.name, bdev = %bdev.name(), slot,
                "former raid member is back: adding it, it will be rebuilt");
            if let Err(e) = raid.add_base_bdev(mgr, bdev.name()).await {
                tracing::warn!(raid = %raid.name, bdev = %bdev.name(), error = %e,
                    "cannot add the former member back");
            }
        }
        RaidState::Configuring => {
            let expected = raid.ctl.lock().expect.get(slot).copied().flatten();
            if entry.state == SbMemberState::Configured && expected == Some(bdev.uuid()) {
                if let Err(e) = raid.add_member(mgr, slot, bdev) {
                    tracing::error!(raid = %raid.name, bdev = %bdev.name(), error = %e,
                        "cannot claim raid member");
                    return again;
                }
                if raid.all_discovered() {
                    if let Err(e) = raid.start_async(mgr).await {
                        tracing::error!(raid = %raid.name, error = %e, "raid did not start");
                    }
                }
            } else {
                tracing::info!(raid = %raid.name, bdev = %bdev.name(), slot,
                    "raid member not in sync: added and rebuilt once the raid runs");
                let mut ctl = raid.ctl.lock();
                if !ctl.deferred.iter().any(|n| n == bdev.name()) {
                    ctl.deferred.push(bdev.name().to_string());
                }
            }
        }
        RaidState::Offline => {}
    }
    again
}

/// A raid as superblock `sb` describes it, in the module's list; `None`
/// when it cannot be (a name taken, nothing in sync, a level or shape we
/// cannot run).
fn adopt(module: &Arc<RaidModule>, mgr: &BdevManager, sb: &Superblock) -> Option<Arc<Raid>> {
    let why = if mgr.get(&sb.name).is_some() || module.find(&sb.name).is_some() {
        Some("its name is taken")
    } else if sb.level == RaidLevel::Raid5f {
        Some("raid5f is not supported")
    } else if sb.configured() == 0 {
        Some("no member is in sync")
    } else if sb.level != RaidLevel::Raid1 && sb.configured() < usize::from(sb.num_base_bdevs) {
        Some("a raid0 or concat cannot run without a member")
    } else {
        None
    };
    if let Some(why) = why {
        tracing::warn!(raid = %sb.name, uuid = %sb.uuid, why, "raid superblock not assembled");
        return None;
    }
    let raid = Arc::new(Raid::from_sb(sb, Arc::downgrade(module)));
    module.raids.lock().push(Arc::clone(&raid));
    tracing::info!(raid = %sb.name, uuid = %sb.uuid, seq = sb.seq_number,
        members = sb.num_base_bdevs, in_sync = sb.configured(), "raid found by its superblock");
    Some(raid)
}

/// Takes a configuring raid apart (a newer superblock replaces it):
/// releases its members and forgets it. Returns the members.
fn dismantle(raid: &Raid) -> Vec<Bdev> {
    let members: Vec<MemberDesc> = {
        let mut ctl = raid.ctl.lock();
        ctl.state = RaidState::Offline;
        ctl.members.iter_mut().filter_map(Option::take).collect()
    };
    let bdevs = members.iter().map(|m| m.bdev.clone()).collect();
    for m in members {
        m.close();
    }
    raid.forget();
    bdevs
}
