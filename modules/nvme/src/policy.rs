//! Multipath policies (`active_passive`, `active_active` with its
//! selectors) and their JSON form, `multipath_opts`: the policy of a
//! namespace bdev (`bdev_nvme_set_multipath_policy`), of an attach and
//! of `bdev_nvme_set_options` (the default of attaches).

use bdevkit_jsonrpc::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// `active_passive` or `active_active`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathPolicy {
    /// One path at a time (the first that takes I/O).
    #[default]
    ActivePassive,
    /// Every path that takes I/O.
    ActiveActive,
}

/// How `active_active` picks a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Selector {
    /// In turn, `rr_min_io` I/Os each.
    #[default]
    RoundRobin,
    /// The one with the fewest commands in flight.
    QueueDepth,
}

/// A namespace bdev's multipath policy (`bdev_nvme_set_multipath_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Policy.
    pub policy: PathPolicy,
    /// Selector (`active_active`).
    pub selector: Selector,
    /// I/Os per turn (`round_robin`), at least 1.
    pub rr_min_io: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            policy: PathPolicy::ActivePassive,
            selector: Selector::RoundRobin,
            rr_min_io: 1,
        }
    }
}

impl Policy {
    /// From SPDK's names; `None` keeps the current selector / count.
    ///
    /// # Errors
    /// A message for an unknown name or `rr_min_io` 0.
    pub fn parse(
        &self,
        policy: &str,
        selector: Option<&str>,
        rr_min_io: Option<u32>,
    ) -> Result<Policy, String> {
        let policy = match policy {
            "active_passive" => PathPolicy::ActivePassive,
            "active_active" => PathPolicy::ActiveActive,
            p => return Err(format!("invalid policy {p}")),
        };
        let selector = match selector {
            None => self.selector,
            Some("round_robin") => Selector::RoundRobin,
            Some("queue_depth") => Selector::QueueDepth,
            Some(s) => return Err(format!("invalid selector {s}")),
        };
        let rr_min_io = rr_min_io.unwrap_or(self.rr_min_io);
        if rr_min_io == 0 {
            return Err("rr_min_io must be at least 1".into());
        }
        Ok(Policy {
            policy,
            selector,
            rr_min_io,
        })
    }

    /// SPDK's name of the policy.
    #[must_use]
    pub fn policy_name(&self) -> &'static str {
        match self.policy {
            PathPolicy::ActivePassive => "active_passive",
            PathPolicy::ActiveActive => "active_active",
        }
    }

    /// SPDK's name of the selector.
    #[must_use]
    pub fn selector_name(&self) -> &'static str {
        match self.selector {
            Selector::RoundRobin => "round_robin",
            Selector::QueueDepth => "queue_depth",
        }
    }

    /// The `mp_policy`, `selector` (active_active) and `rr_min_io`
    /// (round_robin) keys of `driver_specific`.
    pub(crate) fn add_json(&self, out: &mut Map<String, Value>) {
        out.insert("mp_policy".into(), json!(self.policy_name()));
        if self.policy == PathPolicy::ActiveActive {
            out.insert("selector".into(), json!(self.selector_name()));
            if self.selector == Selector::RoundRobin {
                out.insert("rr_min_io".into(), json!(self.rr_min_io));
            }
        }
    }
}

/// `multipath_opts` of an attach and of `bdev_nvme_set_options` (the
/// policy of bdevs attached without their own).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultipathOpts {
    /// `active_passive` or `active_active` (another name does not
    /// decode, as in SPDK).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_policy"
    )]
    pub policy: Option<String>,
    /// `round_robin` or `queue_depth`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_selector"
    )]
    pub selector: Option<String>,
    /// I/Os per path in turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_io: Option<u32>,
}

impl MultipathOpts {
    /// The policy they give (unset keys: the defaults).
    ///
    /// # Errors
    /// -22 for unknown names or `min_io` 0.
    pub fn policy(&self) -> Result<Policy, RpcError> {
        self.over(Policy::default())
    }

    /// The policy they give, unset keys taken from `base` (SPDK starts
    /// from the module options' policy).
    ///
    /// # Errors
    /// -22 for unknown names or `min_io` 0.
    pub fn over(&self, base: Policy) -> Result<Policy, RpcError> {
        let name = self.policy.as_deref().unwrap_or(base.policy_name());
        base.parse(name, self.selector.as_deref(), self.min_io)
            .map_err(|e| RpcError::new(-22, e))
    }

    /// As SPDK writes them: `policy`; `selector` for `active_active`;
    /// `min_io` for `round_robin` there.
    #[must_use]
    pub fn of(p: &Policy) -> MultipathOpts {
        let aa = p.policy == PathPolicy::ActiveActive;
        let rr = aa && p.selector == Selector::RoundRobin;
        MultipathOpts {
            policy: Some(p.policy_name().into()),
            selector: aa.then(|| p.selector_name().into()),
            min_io: rr.then_some(p.rr_min_io),
        }
    }
}

fn de_name<'de, D: serde::Deserializer<'de>>(
    d: D,
    names: &'static [&'static str],
) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    if names.contains(&s.as_str()) {
        Ok(Some(s))
    } else {
        Err(serde::de::Error::unknown_variant(&s, names))
    }
}

fn de_policy<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    de_name(d, &["active_passive", "active_active"])
}

fn de_selector<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    de_name(d, &["round_robin", "queue_depth"])
}
