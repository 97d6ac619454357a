//! What a raid is made of, as its creator states it: the level, the
//! states, the limits and the RPC params (serde, SPDK's names). The bottom
//! layer of the crate: it names no other file of it.

use bdevkit::bdev::module::{Error, Result};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// Module name (also the RPC infix).
pub const MODULE: &str = "raid";
/// `product_name` of raid bdevs.
pub const PRODUCT_NAME: &str = "Raid Volume";

/// Raid levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RaidLevel {
    /// Striping (`raid0`, `0`).
    Raid0,
    /// Mirroring (`raid1`, `1`).
    Raid1,
    /// Members end to end (`concat`).
    Concat,
    /// `raid5f`: accepted by the RPC decoder as SPDK's is, but this build
    /// has no raid5f module, so creating one fails with `EINVAL` (as an
    /// SPDK build without raid5f does).
    Raid5f,
}

impl RaidLevel {
    /// SPDK's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            RaidLevel::Raid0 => "raid0",
            RaidLevel::Raid1 => "raid1",
            RaidLevel::Concat => "concat",
            RaidLevel::Raid5f => "raid5f",
        }
    }

    /// Parses SPDK's names (`raid0`, `0`, `raid1`, `1`, `raid5f`, `5f`,
    /// `concat`), case-insensitively.
    #[must_use]
    pub fn parse(s: &str) -> Option<RaidLevel> {
        match s.to_ascii_lowercase().as_str() {
            "raid0" | "0" => Some(RaidLevel::Raid0),
            "raid1" | "1" => Some(RaidLevel::Raid1),
            "concat" => Some(RaidLevel::Concat),
            "raid5f" | "5f" => Some(RaidLevel::Raid5f),
            _ => None,
        }
    }

    /// Fewest members a raid of this level takes.
    #[must_use]
    pub fn min_members(self) -> usize {
        match self {
            RaidLevel::Raid0 | RaidLevel::Concat => 1,
            RaidLevel::Raid1 => 2,
            RaidLevel::Raid5f => 3,
        }
    }
}

/// Raid states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RaidState {
    /// Every member present and operational; the bdev is registered.
    Online,
    /// Waiting for members; no bdev yet.
    Configuring,
    /// raid1 serving from some of its members (one was removed or failed).
    Degraded,
    /// Lost a member it cannot do without, or being deleted.
    Offline,
}

impl RaidState {
    /// The state as `bdev_raid_get_bdevs` reports it (SPDK has no
    /// degraded state: a degraded raid1 is online).
    #[must_use]
    pub fn spdk_name(self) -> &'static str {
        match self {
            RaidState::Online | RaidState::Degraded => "online",
            RaidState::Configuring => "configuring",
            RaidState::Offline => "offline",
        }
    }
}

/// Longest raid name (SPDK's superblock name field, 64 bytes with NUL).
pub const MAX_NAME_LEN: usize = 63;
/// Most members of one raid.
pub const MAX_MEMBERS: usize = 255;

impl Serialize for RaidLevel {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for RaidLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        RaidLevel::parse(&s).ok_or_else(|| D::Error::custom(format!("unknown raid level {s}")))
    }
}

/// `bdev_raid_create` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidCreateParams {
    /// Raid name (at most 63 characters).
    pub name: String,
    /// Strip size in KiB: a power of two for raid0/concat, absent or 0 for
    /// raid1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_size_kb: Option<u32>,
    /// Level.
    pub raid_level: RaidLevel,
    /// Member bdev names, in order (they may not exist yet).
    pub base_bdevs: Vec<String>,
    /// UUID (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    /// Keep SPDK's raid superblock on every member (`-s`): the array then
    /// reassembles by examine, with no config, and its member states
    /// survive a crash. Members' data starts after it (1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superblock: Option<bool>,
}

impl RaidCreateParams {
    /// Params for a raid without superblock.
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        raid_level: RaidLevel,
        strip_size_kb: u32,
        base_bdevs: &[&str],
    ) -> Self {
        RaidCreateParams {
            name: name.into(),
            strip_size_kb: (strip_size_kb != 0).then_some(strip_size_kb),
            raid_level,
            base_bdevs: base_bdevs.iter().map(|s| (*s).to_string()).collect(),
            uuid: None,
            superblock: None,
        }
    }
}

/// `bdev_raid_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidDeleteParams {
    /// Raid name.
    pub name: String,
    /// Zero the superblock on every member (superblock raids), so that
    /// examine does not reassemble the array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_sb: Option<bool>,
}

/// `bdev_raid_add_base_bdev` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidAddBaseBdevParams {
    /// The raid.
    pub raid_bdev: String,
    /// The bdev to add.
    pub base_bdev: String,
}

/// `bdev_raid_remove_base_bdev` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidRemoveBaseBdevParams {
    /// The member bdev to take out of its raid.
    pub name: String,
}

/// `bdev_raid_get_bdevs` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidGetBdevsParams {
    /// `all`, `online`, `configuring` or `offline`.
    pub category: String,
}

/// `bdev_raid_set_options` params (also what `save_config` emits).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RaidSetOptionsParams {
    /// Background process window in KiB (default 1024, not 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_window_size_kb: Option<u32>,
    /// Background process bandwidth cap in MiB/s (default 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_max_bandwidth_mb_sec: Option<u32>,
}

impl Default for RaidSetOptionsParams {
    fn default() -> Self {
        RaidSetOptionsParams {
            process_window_size_kb: Some(1024),
            process_max_bandwidth_mb_sec: Some(0),
        }
    }
}

/// Checks `bdev_raid_create` params on their own (members are checked as
/// they are found).
pub(crate) fn validate(p: &RaidCreateParams) -> Result<()> {
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
    let placeholders = p
        .base_bdevs
        .iter()
        .enumerate()
        .filter(|(i, n)| is_placeholder(n, *i))
        .count();
    if placeholders > 0 {
        if p.raid_level != RaidLevel::Raid1 {
            return bad(format!(
                "{} cannot do without a member (removed_base_bdev_N)",
                p.raid_level.name()
            ));
        }
        if placeholders == p.base_bdevs.len() {
            return bad("a raid1 needs at least one member in sync".into());
        }
        if p.superblock.unwrap_or(false) {
            return bad("a superblock raid is created with all its members".into());
        }
    }
    Ok(())
}

/// The name SPDK's `save_config` writes for a member slot that holds no
/// member in sync: `removed_base_bdev_<slot>`.
#[must_use]
pub fn placeholder(slot: usize) -> String {
    format!("removed_base_bdev_{slot}")
}

/// Whether `name` is the placeholder of `slot` (read back from a saved
/// config: that slot is not in sync and the raid1 starts without it).
#[must_use]
pub fn is_placeholder(name: &str, slot: usize) -> bool {
    name.strip_prefix("removed_base_bdev_") == Some(slot.to_string().as_str())
}
