//! What a raid says about itself: the `bdev_raid_get_bdevs` object (also
//! its bdev's `driver_specific.raid`) and the saved-config entries that
//! recreate it.

use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::config::{placeholder, RaidState};
use crate::raid::Raid;

impl Raid {
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
            RaidState::Configuring => (0..self.num_members()).filter(|i| !ctl.absent[*i]).count(),
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
                let gone = md.is_none() && (ctl.state != RaidState::Configuring || ctl.absent[i]);
                let uuid = md
                    .map(|m| m.bdev.uuid())
                    .or(ctl.expect[i])
                    .unwrap_or_else(Uuid::nil);
                json!({
                    "name": if gone || name.is_empty() { Value::Null } else { json!(name) },
                    "uuid": uuid.to_string(),
                    "is_configured": md.is_some(),
                    "data_offset": ctl.offsets[i],
                    "data_size": if md.is_some() { ctl.sizes[i] } else { 0 },
                })
            })
            .collect();
        let mut m = Map::new();
        m.insert("uuid".into(), json!(self.uuid.to_string()));
        m.insert("strip_size_kb".into(), json!(self.strip_size_kb));
        m.insert("state".into(), json!(ctl.state.spdk_name()));
        m.insert("raid_level".into(), json!(self.level.name()));
        m.insert("superblock".into(), json!(self.superblock));
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

    /// The `bdev_raid_create` entry that recreates this raid. Only members
    /// in sync are named: a slot being rebuilt, failed or removed is
    /// written as SPDK's placeholder, so that a restart starts the raid
    /// degraded without it (and never trusts its data).
    pub(crate) fn create_entry(&self) -> Value {
        let ctl = self.ctl.lock();
        let names: Vec<String> = if ctl.state == RaidState::Configuring {
            ctl.names.clone()
        } else {
            ctl.names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    if ctl.members[i].is_some() && self.member_ok(i) {
                        n.clone()
                    } else {
                        placeholder(i)
                    }
                })
                .collect()
        };
        let mut p = Map::new();
        p.insert("name".into(), json!(self.name));
        p.insert("uuid".into(), json!(self.uuid.to_string()));
        if self.strip_size_kb != 0 {
            p.insert("strip_size_kb".into(), json!(self.strip_size_kb));
        }
        p.insert("raid_level".into(), json!(self.level.name()));
        p.insert("base_bdevs".into(), json!(names));
        if self.superblock {
            p.insert("superblock".into(), json!(true));
        }
        json!({"method": "bdev_raid_create", "params": p})
    }

    /// The `bdev_raid_add_base_bdev` entries that restart the rebuilds
    /// under way (emitted after every bdev's own entry, so the target
    /// exists when they replay).
    pub(crate) fn rebuild_entries(&self) -> Vec<Value> {
        let ctl = self.ctl.lock();
        let mut out: Vec<Value> = (0..self.num_members())
            .filter(|i| ctl.members[*i].is_some() && self.member_rebuilding(*i))
            .map(|i| {
                json!({"method": "bdev_raid_add_base_bdev",
                    "params": {"raid_bdev": self.name, "base_bdev": ctl.names[i]}})
            })
            .collect();
        out.extend(ctl.deferred.iter().map(|b| {
            json!({"method": "bdev_raid_add_base_bdev",
                "params": {"raid_bdev": self.name, "base_bdev": b}})
        }));
        out
    }
}
