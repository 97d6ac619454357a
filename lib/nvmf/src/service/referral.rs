//! Discovery referrals (`nvmf_discovery_add_referral`,
//! `nvmf_discovery_remove_referral`, `nvmf_discovery_get_referrals`):
//! entries of the discovery log that point hosts at other ports, SPDK's
//! `spdk_nvmf_tgt_add_referral` rules. Hosts are told through the
//! discovery log change notice.

use bdevkit_nvme_spec::fabrics::{validate_nqn, DISCOVERY_NQN};
use serde_json::{json, Value};

use super::subsys::check_tgt;
use super::Target;
use crate::addr::ListenAddr;
use crate::error::{Error, Result};
use crate::params::ReferralParams;
use crate::target::Referral;
use crate::transport;

impl Target {
    /// `nvmf_discovery_add_referral`: a referral that exists already is
    /// left as it is (SPDK answers `true` too).
    pub fn add_referral(&self, p: &ReferralParams) -> Result<()> {
        check_tgt(p.tgt_name.as_deref())?;
        let addr = ListenAddr::from_params(&p.address)?;
        let discover = transport::find(addr.trtype)
            .ok_or_else(|| Error::InvalidTransport(addr.trtype.into()))?
            .listener_discover;
        let subnqn = p.subnqn.clone().unwrap_or_else(|| DISCOVERY_NQN.into());
        validate_nqn(&subnqn).map_err(|source| Error::InvalidNqn {
            nqn: subnqn.clone(),
            source,
        })?;
        let mut st = self.0.core.state.lock();
        if st.referrals.iter().any(|r| r.is(&addr, &subnqn)) {
            return Ok(());
        }
        tracing::info!(%addr, %subnqn, "discovery referral added");
        st.referrals.insert(
            0,
            Referral {
                addr,
                subnqn,
                secure_channel: p.secure_channel.unwrap_or(false),
                discover,
            },
        );
        st.discovery_changed();
        Ok(())
    }

    /// `nvmf_discovery_remove_referral`.
    pub fn remove_referral(&self, p: &ReferralParams) -> Result<()> {
        check_tgt(p.tgt_name.as_deref())?;
        let addr = ListenAddr::from_params(&p.address)?;
        let subnqn = p.subnqn.as_deref().unwrap_or(DISCOVERY_NQN);
        let mut st = self.0.core.state.lock();
        let i = st
            .referrals
            .iter()
            .position(|r| r.is(&addr, subnqn))
            .ok_or_else(|| Error::NoReferral(format!("{addr} {subnqn}")))?;
        st.referrals.remove(i);
        st.discovery_changed();
        Ok(())
    }

    /// `nvmf_discovery_get_referrals`, newest first (SPDK's order).
    #[must_use]
    pub fn referrals_json(&self) -> Vec<Value> {
        let st = self.0.core.state.lock();
        st.referrals.iter().map(referral_json).collect()
    }

    /// The `save_config` entries: the oldest first, so that replaying
    /// them (each added at the head) gives the same list again.
    pub(super) fn referrals_config_json(&self) -> Vec<Value> {
        let st = self.0.core.state.lock();
        st.referrals
            .iter()
            .rev()
            .map(|r| json!({"method": "nvmf_discovery_add_referral", "params": referral_json(r)}))
            .collect()
    }
}

/// SPDK's referral object: `{address, secure_channel, subnqn}`.
fn referral_json(r: &Referral) -> Value {
    json!({
        "address": r.addr.to_json(),
        "secure_channel": r.secure_channel,
        "subnqn": r.subnqn,
    })
}
