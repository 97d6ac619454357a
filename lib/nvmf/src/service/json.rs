//! Queries (`nvmf_get_*`, `nvmf_subsystem_get_*`) and the `nvmf` section
//! of `save_config`, in SPDK's shapes and order: target settings, the
//! transports, the discovery referrals, then subsystems, hosts,
//! namespaces and listeners, so that replaying the list rebuilds the target.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use uuid::Uuid;

use super::Target;
use crate::error::{Error, Result};

impl Target {
    /// `nvmf_get_transports`.
    pub fn transports_json(&self, trtype: Option<&str>) -> Result<Vec<Value>> {
        let st = self.0.core.state.lock();
        match trtype {
            Some(tt) => st
                .transport(tt)
                .map(|t| vec![t.opts.to_json()])
                .ok_or_else(|| Error::NoTransport(tt.into())),
            None => Ok(st.transports.iter().map(|t| t.opts.to_json()).collect()),
        }
    }

    /// `nvmf_get_subsystems`.
    pub fn subsystems_json(&self, nqn: Option<&str>) -> Result<Vec<Value>> {
        let st = self.0.core.state.lock();
        match nqn {
            Some(n) => st
                .find(n)
                .map(|s| vec![s.to_json()])
                .ok_or_else(|| Error::NoSubsystem(n.into())),
            None => Ok(st.subsystems.iter().map(|s| s.to_json()).collect()),
        }
    }

    /// `nvmf_subsystem_get_controllers`.
    pub fn controllers_json(&self, nqn: &str) -> Result<Vec<Value>> {
        let st = self.0.core.state.lock();
        let s = st.find(nqn).ok_or_else(|| Error::NoSubsystem(nqn.into()))?;
        Ok(s.ctrlrs
            .iter()
            .filter(|c| !c.is_dead())
            .map(|c| {
                json!({
                    "cntlid": c.cntlid,
                    "cntrltype": if c.discovery { "discovery" } else { "io" },
                    "hostnqn": c.hostnqn,
                    "hostid": Uuid::from_bytes(c.hostid).to_string(),
                    "num_io_qpairs": c.io_qpair_count(),
                })
            })
            .collect())
    }

    /// `nvmf_subsystem_get_listeners`.
    pub fn listeners_json(&self, nqn: &str) -> Result<Vec<Value>> {
        let st = self.0.core.state.lock();
        let s = st.find(nqn).ok_or_else(|| Error::NoSubsystem(nqn.into()))?;
        Ok(s.listeners
            .iter()
            .map(|l| json!({"address": l.to_json()}))
            .collect())
    }

    /// `nvmf_subsystem_get_qpairs`: asks every poll group; `done` on this thread.
    pub fn qpairs_json(&self, nqn: &str, done: impl FnOnce(Result<Vec<Value>>) + Send + 'static) {
        let id = {
            let st = self.0.core.state.lock();
            match st.find(nqn) {
                Some(s) => s.id,
                None => return done(Err(Error::NoSubsystem(nqn.into()))),
            }
        };
        let acc = Arc::new(Mutex::new(Vec::new()));
        let acc2 = Arc::clone(&acc);
        self.for_each_group(
            move |g| acc2.lock().extend(g.qpairs_json(id)),
            move || done(Ok(std::mem::take(&mut *acc.lock()))),
        );
    }

    /// The `nvmf` subsystem's config entries (`framework_get_config nvmf`).
    #[must_use]
    pub fn config_json(&self) -> Vec<Value> {
        let referrals = self.referrals_config_json();
        let st = self.0.core.state.lock();
        let mut out = vec![
            st.conf.set_config_json(),
            json!({
                "method": "nvmf_set_max_subsystems",
                "params": {"max_subsystems": st.conf.max_subsystems}
            }),
            json!({
                "method": "nvmf_set_crdt",
                "params": {
                    "crdt1": st.conf.crdt[0],
                    "crdt2": st.conf.crdt[1],
                    "crdt3": st.conf.crdt[2],
                }
            }),
        ];
        for t in &st.transports {
            out.push(json!({"method": "nvmf_create_transport", "params": t.opts.to_json()}));
        }
        // SPDK writes the referrals after the transports.
        out.extend(referrals);
        let nvm = || st.subsystems.iter().filter(|s| !s.discovery);
        out.extend(nvm().map(|s| s.create_config_json()));
        for s in nvm() {
            for h in &s.hosts {
                let mut m = serde_json::Map::new();
                m.insert("nqn".into(), json!(s.nqn));
                m.insert("host".into(), json!(h));
                s.host_key_names(h, &mut m);
                let params = Value::Object(m);
                out.push(json!({
                    "method": "nvmf_subsystem_add_host",
                    "params": params
                }));
            }
        }
        for s in nvm() {
            for n in s.namespaces.values() {
                out.push(json!({
                    "method": "nvmf_subsystem_add_ns",
                    "params": {"nqn": s.nqn, "namespace": n.config_json(s.ana_reporting)}
                }));
            }
        }
        for s in &st.subsystems {
            for l in &s.listeners {
                out.push(json!({
                    "method": "nvmf_subsystem_add_listener",
                    "params": {
                        "nqn": s.nqn,
                        "listen_address": l.to_json(),
                        "secure_channel": l.secure_channel,
                    }
                }));
            }
        }
        out
    }
}
