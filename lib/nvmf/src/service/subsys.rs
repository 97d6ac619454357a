//! Target-wide settings, transports, subsystems, hosts and listeners.

use std::sync::Arc;

use bdevkit_keyring::{KeyRef, Keyring};
use bdevkit_nvme_spec::fabrics::validate_nqn;

use super::Target;
use crate::addr::ListenAddr;
use crate::core::pool::BufPool;
use crate::ctrlr::{Controller, DeathCause};
use crate::error::{Error, Result};
use crate::opts::{CreateTransportParams, SetConfigParams, TransportOpts};
use crate::params::{CreateSubsystemParams, ListenerParams, TARGET_NAME};
use crate::subsystem::{valid_model, valid_serial, Subsystem};
use crate::target::{Port, TransportRecord};
use crate::transport;

/// Checks `tgt_name` (only the default target exists).
pub(crate) fn check_tgt(name: Option<&str>) -> Result<()> {
    match name {
        None => Ok(()),
        Some(n) if n == TARGET_NAME => Ok(()),
        Some(_) => Err(Error::NotSupported("other targets than nvmf_tgt")),
    }
}

/// The controllers of `s` that lost access: their host may no longer
/// connect, or their admin queue came through a listener `s` no longer
/// has. Every change that can revoke access (host removed,
/// `allow_any_host` off, listener removed) tears these down, whatever it
/// was, so that no host keeps queues it could not open again.
fn revoked(s: &Subsystem) -> Vec<Arc<Controller>> {
    s.ctrlrs
        .iter()
        .filter(|c| !s.host_allowed(&c.hostnqn) || !s.listener_allowed(&c.listen))
        .map(Arc::clone)
        .collect()
}

/// Tears `gone` down: every queue pair of each disconnects (its I/O drains).
fn kill_all(gone: &[Arc<Controller>], why: &'static str) {
    for c in gone {
        tracing::info!(
            subnqn = %c.subnqn,
            hostnqn = %c.hostnqn,
            cntlid = c.cntlid,
            why,
            "access revoked"
        );
        c.kill(DeathCause::Removed);
    }
}

/// WZSL of SPDK's deprecated `max_write_zeroes_size_kib`.
fn wzsl_of_kib(kib: u64) -> Option<u8> {
    match kib {
        0 => Some(0),
        k if k >= 8 && k.is_power_of_two() => u8::try_from((k >> 2).ilog2()).ok(),
        _ => None,
    }
}

impl Target {
    /// `nvmf_set_config`.
    pub fn set_config(&self, p: &SetConfigParams) -> Result<()> {
        self.0.core.state.lock().conf.apply(p)
    }

    /// `nvmf_set_max_subsystems` (once).
    pub fn set_max_subsystems(&self, n: u32) -> Result<()> {
        let mut st = self.0.core.state.lock();
        if st.conf.max_subsystems_set {
            return Err(Error::Again);
        }
        st.conf.max_subsystems_set = true;
        if n != 0 {
            st.conf.max_subsystems = n;
        }
        Ok(())
    }

    /// `nvmf_set_crdt`.
    pub fn set_crdt(&self, crdt: [u16; 3]) {
        self.0.core.state.lock().conf.crdt = crdt;
    }

    /// `nvmf_create_transport`: the registry's type `trtype` names makes
    /// the transport; it listens where subsystems add listeners of its
    /// type. Call on the app thread (its accept poller runs there).
    pub fn create_transport(&self, p: &CreateTransportParams) -> Result<()> {
        check_tgt(p.tgt_name.as_deref())?;
        let o = TransportOpts::from_params(p)?;
        let def =
            transport::find(o.trtype).ok_or_else(|| Error::InvalidTransport(p.trtype.clone()))?;
        let cache = o.cache_size(self.group_count())?;
        let t = (def.create)(&o)?;
        let live = {
            let mut st = self.0.core.state.lock();
            if st.transport(def.name).is_some() {
                return Err(Error::TransportExists(def.name.into()));
            }
            tracing::info!(?o, cache, "{} transport created", def.name);
            let pool = BufPool::new(
                o.max_io_size as usize,
                o.num_shared_buffers as usize,
                cache as usize,
            );
            st.transports.push(TransportRecord {
                name: def.name,
                opts: o.clone(),
                pool: Arc::clone(&pool),
                discover: def.listener_discover,
            });
            let live = super::Live {
                trtype: def.name,
                t,
                opts: o,
                pool,
            };
            self.0.transports.lock().push(live.clone());
            live
        };
        if self.0.running.load(std::sync::atomic::Ordering::Acquire) {
            if let Some(thread) = bdevkit::thread::Thread::current() {
                self.start_accepting(&thread, live);
            }
        }
        Ok(())
    }

    /// `nvmf_create_subsystem`.
    pub fn create_subsystem(&self, p: &CreateSubsystemParams) -> Result<()> {
        check_tgt(p.tgt_name.as_deref())?;
        let param = |param: &'static str, why: &str| Error::SubsystemParam {
            param,
            why: why.into(),
        };
        validate_nqn(&p.nqn).map_err(|source| Error::InvalidNqn {
            nqn: p.nqn.clone(),
            source,
        })?;
        // Accepted without effect (doc/rpc.md): what they switch on is
        // only reported, and this target reports none of it, so a host
        // sees a plain controller (no ANA: every path optimized).
        for (key, on) in [
            ("ana_reporting", p.ana_reporting),
            ("passthrough", p.passthrough),
            ("enable_nssr", p.enable_nssr),
        ] {
            if on == Some(true) {
                tracing::warn!(nqn = %p.nqn, key, "accepted, no effect here (not supported)");
            }
        }
        let mut st = self.0.core.state.lock();
        if st.find(&p.nqn).is_some() || p.nqn == "discovery" {
            return Err(Error::SubsystemExists(p.nqn.clone()));
        }
        let max = st.conf.max_subsystems;
        if u32::try_from(st.subsystems.len()).unwrap_or(u32::MAX) >= max {
            return Err(Error::TooManySubsystems(max));
        }
        let id = st.next_subsys_id;
        let mut s = Subsystem::new(id, &p.nqn, false);
        if let Some(sn) = &p.serial_number {
            if !valid_serial(sn) {
                return Err(param("serial_number", "1-20 printable ASCII characters"));
            }
            s.serial_number.clone_from(sn);
        }
        if let Some(mn) = &p.model_number {
            if !valid_model(mn) {
                return Err(param("model_number", "1-40 printable ASCII characters"));
            }
            s.model_number.clone_from(mn);
        }
        if let Some(n) = p.max_namespaces.filter(|&n| n != 0) {
            s.max_namespaces = n;
        }
        s.allow_any_host = p.allow_any_host.unwrap_or(false);
        let (min, max) = (
            p.min_cntlid.unwrap_or(crate::subsystem::MIN_CNTLID),
            p.max_cntlid.unwrap_or(crate::subsystem::MAX_CNTLID),
        );
        if !s.set_cntlid_range(min, max) {
            return Err(param(
                "cntlid",
                &format!("invalid cntlid range [{min}-{max}]"),
            ));
        }
        if let Some(k) = p.max_discard_size_kib {
            s.dmrsl = u32::try_from(k.saturating_mul(2)).unwrap_or(u32::MAX);
        }
        if let Some(d) = p.dmrsl {
            s.dmrsl = d;
        }
        if let Some(k) = p.max_write_zeroes_size_kib {
            s.wzsl = wzsl_of_kib(k)
                .ok_or_else(|| param("max_write_zeroes_size_kib", "0 or a power of two >= 8"))?;
        }
        if let Some(w) = p.wzsl {
            s.wzsl = w;
        }
        s.ana_reporting = p.ana_reporting.unwrap_or(false);
        s.passthrough = p.passthrough.unwrap_or(false);
        s.enable_nssr = p.enable_nssr.unwrap_or(false);
        st.next_subsys_id += 1;
        st.subsystems.push(s);
        st.discovery_changed();
        tracing::info!(nqn = %p.nqn, "subsystem created");
        Ok(())
    }

    /// `nvmf_delete_subsystem`: its controllers are torn down, its
    /// listeners released, its namespaces closed; `done` on this thread.
    pub fn delete_subsystem(&self, nqn: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
        let removed = {
            let mut st = self.0.core.state.lock();
            match st.find(nqn) {
                None => Err(Error::NoSubsystem(nqn.into())),
                Some(s) if s.discovery => Err(Error::Discovery),
                Some(s) => {
                    let id = s.id;
                    let i = st.subsystems.iter().position(|s| s.id == id).unwrap_or(0);
                    let s = st.subsystems.remove(i);
                    for (h, _) in &s.host_psks {
                        self.0.core.tls.remove(h, &s.nqn);
                    }
                    for l in &s.listeners {
                        self.release_port(&mut st.ports, l);
                    }
                    st.discovery_changed();
                    Ok(s)
                }
            }
        };
        let mut sub = match removed {
            Ok(s) => s,
            Err(e) => return done(Err(e)),
        };
        for c in &sub.ctrlrs {
            c.kill(DeathCause::Removed);
        }
        let id = sub.id;
        let namespaces = std::mem::take(&mut sub.namespaces);
        tracing::info!(nqn = %sub.nqn, "subsystem deleted");
        self.for_each_group(
            move |g| {
                g.env.drop_view(id);
                g.disconnect_if(
                    &|c, _| c.is_some_and(|c| c.subsys_id == id),
                    "subsystem deleted",
                );
            },
            move || {
                drop(namespaces);
                done(Ok(()));
            },
        );
    }

    /// One subsystem fewer listens on `addr`: close the socket when none does.
    fn release_port(&self, ports: &mut Vec<Port>, addr: &ListenAddr) {
        if let Some(i) = ports.iter().position(|p| p.addr.same(addr)) {
            ports[i].users -= 1;
            if ports[i].users == 0 {
                ports.remove(i);
                if let Some(l) = self.live(addr.trtype) {
                    l.t.stop_listen(addr);
                }
            }
        }
    }

    fn listen_params(p: &ListenerParams) -> Result<ListenAddr> {
        check_tgt(p.tgt_name.as_deref())?;
        let secure = p.secure_channel == Some(true);
        // SPDK's names: `posix` for plain listeners, `ssl` for secure ones
        // (a secure listener without sock_impl is `ssl`).
        let want = if secure { "ssl" } else { "posix" };
        if p.sock_impl.as_deref().is_some_and(|s| s != want) {
            return Err(Error::NotSupported(if secure {
                "secure_channel with a sock_impl other than ssl"
            } else {
                "sock_impl other than posix (ssl needs secure_channel)"
            }));
        }
        if p.ana_state.as_deref().is_some_and(|s| s != "optimized") {
            return Err(Error::NotSupported("ana_state"));
        }
        let mut a = ListenAddr::from_params(&p.listen_address)?;
        a.secure_channel = secure;
        Ok(a)
    }

    /// `nvmf_subsystem_add_listener`: binds the socket the first time an
    /// address is used.
    pub fn add_listener(&self, p: &ListenerParams) -> Result<()> {
        let addr = Self::listen_params(p)?;
        let mut st = self.0.core.state.lock();
        if st.transport(addr.trtype).is_none() {
            return Err(Error::NoTransport(addr.trtype.into()));
        }
        let sub = st
            .find(&p.nqn)
            .ok_or_else(|| Error::NoSubsystem(p.nqn.clone()))?;
        if sub.listeners.iter().any(|l| l.same(&addr)) {
            return Err(Error::ListenerExists(addr.to_string()));
        }
        if addr.secure_channel && sub.allow_any_host {
            return Err(Error::SecureAnyHost);
        }
        if let Some(port) = st.ports.iter_mut().find(|x| x.addr.same(&addr)) {
            if port.addr.secure_channel != addr.secure_channel {
                return Err(Error::SecureMismatch(addr.to_string()));
            }
            port.users += 1;
        } else {
            match self.live(addr.trtype) {
                Some(l) if self.0.running.load(std::sync::atomic::Ordering::Acquire) => {
                    l.t.listen(&addr)?;
                }
                _ => return Err(Error::NotRunning),
            }
            let id = st.next_port_id;
            st.next_port_id = st.next_port_id.wrapping_add(1);
            st.ports.push(Port {
                addr: addr.clone(),
                users: 1,
                id,
            });
        }
        if let Some(s) = st.find_mut(&p.nqn) {
            s.listeners.push(addr);
        }
        st.discovery_changed();
        Ok(())
    }

    /// `nvmf_subsystem_remove_listener`: the subsystem's connections
    /// through it close.
    pub fn remove_listener(
        &self,
        p: &ListenerParams,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        let r = (|| {
            let addr = ListenAddr::from_params(&p.listen_address)?;
            check_tgt(p.tgt_name.as_deref())?;
            let mut st = self.0.core.state.lock();
            if st.transport(addr.trtype).is_none() {
                return Err(Error::NoTransport(addr.trtype.into()));
            }
            let s = st
                .find_mut(&p.nqn)
                .ok_or_else(|| Error::NoSubsystem(p.nqn.clone()))?;
            let i = s
                .listeners
                .iter()
                .position(|l| l.same(&addr))
                .ok_or_else(|| Error::NoListener(addr.to_string()))?;
            s.listeners.remove(i);
            let id = s.id;
            let gone = revoked(s);
            self.release_port(&mut st.ports, &addr);
            st.discovery_changed();
            Ok((id, addr, gone))
        })();
        let (id, addr, gone) = match r {
            Ok(x) => x,
            Err(e) => return done(Err(e)),
        };
        // Controllers whose admin queue came through it go whole; the I/O
        // queues of others that came through it close below.
        kill_all(&gone, "listener removed");
        self.for_each_group(
            move |g| {
                g.disconnect_if(
                    &|c, via| via.same(&addr) && c.is_some_and(|c| c.subsys_id == id),
                    "listener removed",
                );
            },
            move || done(Ok(())),
        );
    }

    /// `nvmf_subsystem_add_host`; `psk`: the name of the host's TLS PSK
    /// in the keyring (its retained PSK is derived now, as SPDK's).
    pub fn add_host(&self, nqn: &str, host: &str, psk: Option<&str>) -> Result<()> {
        self.add_host_ext(nqn, host, psk, None, None)
    }

    /// A DH-HMAC-CHAP key of the app's keyring, by name, checked to be
    /// one (its material is read again at each authentication).
    fn dhchap_key(&self, name: &str) -> Result<KeyRef> {
        let key = self
            .0
            .core
            .mgr
            .service::<Keyring>()
            .and_then(|r| r.get(name))
            .ok_or_else(|| Error::NoKey(name.into()))?;
        key.secret().map_err(|e| Error::Dhchap {
            key: name.into(),
            why: e.to_string(),
        })?;
        Ok(key)
    }

    /// The keys of `nvmf_subsystem_add_host` / `nvmf_subsystem_set_keys`
    /// looked up; a controller key needs a host key (SPDK's rule).
    fn dhchap_keys(
        &self,
        key: Option<&str>,
        ctrlr_key: Option<&str>,
    ) -> Result<(Option<KeyRef>, Option<KeyRef>)> {
        let k = key.map(|n| self.dhchap_key(n)).transpose()?;
        let c = ctrlr_key.map(|n| self.dhchap_key(n)).transpose()?;
        if k.is_none() {
            if let Some(c) = &c {
                return Err(Error::Dhchap {
                    key: c.name().into(),
                    why: "a controller key requires a host key".into(),
                });
            }
        }
        Ok((k, c))
    }

    /// `nvmf_subsystem_add_host` with its keys: a TLS PSK and
    /// DH-HMAC-CHAP keys (keyring key names).
    pub fn add_host_ext(
        &self,
        nqn: &str,
        host: &str,
        psk: Option<&str>,
        dhchap_key: Option<&str>,
        dhchap_ctrlr_key: Option<&str>,
    ) -> Result<()> {
        validate_nqn(host).map_err(|source| Error::InvalidNqn {
            nqn: host.into(),
            source,
        })?;
        let (key, ckey) = self.dhchap_keys(dhchap_key, dhchap_ctrlr_key)?;
        let mut st = self.0.core.state.lock();
        let s = st
            .find_mut(nqn)
            .ok_or_else(|| Error::NoSubsystem(nqn.into()))?;
        if s.discovery {
            return Err(Error::Discovery);
        }
        if s.hosts.iter().any(|h| h == host) {
            return Err(Error::HostExists(host.into()));
        }
        if let Some(k) = psk {
            self.0.core.tls.insert(&self.0.core.mgr, host, nqn, k)?;
            s.host_psks.push((host.into(), k.into()));
        }
        s.set_host_dhchap(host, key, ckey);
        s.hosts.push(host.into());
        st.discovery_changed();
        Ok(())
    }

    /// `nvmf_subsystem_remove_host`: the host's controllers are torn down
    /// (unless any host may connect).
    pub fn remove_host(&self, nqn: &str, host: &str) -> Result<()> {
        let mut st = self.0.core.state.lock();
        let s = st
            .find_mut(nqn)
            .ok_or_else(|| Error::NoSubsystem(nqn.into()))?;
        let i = s
            .hosts
            .iter()
            .position(|h| h == host)
            .ok_or_else(|| Error::NoHost(host.into()))?;
        s.hosts.remove(i);
        s.set_host_dhchap(host, None, None);
        if let Some(j) = s.host_psks.iter().position(|(h, _)| h == host) {
            s.host_psks.remove(j);
            self.0.core.tls.remove(host, nqn);
        }
        let gone = revoked(s);
        st.discovery_changed();
        drop(st);
        kill_all(&gone, "host removed");
        Ok(())
    }

    /// `nvmf_subsystem_set_keys`: the host's DH-HMAC-CHAP keys become
    /// these (absent ones are cleared, as SPDK); queues already
    /// authenticated stay, the next authentication (a new queue, or the
    /// host re-authenticating) uses the new keys.
    pub fn set_keys(
        &self,
        nqn: &str,
        host: &str,
        dhchap_key: Option<&str>,
        dhchap_ctrlr_key: Option<&str>,
    ) -> Result<()> {
        let (key, ckey) = self.dhchap_keys(dhchap_key, dhchap_ctrlr_key)?;
        let mut st = self.0.core.state.lock();
        let s = st
            .find_mut(nqn)
            .ok_or_else(|| Error::NoSubsystem(nqn.into()))?;
        if !s.hosts.iter().any(|h| h == host) {
            return Err(Error::NoHost(host.into()));
        }
        s.set_host_dhchap(host, key, ckey);
        Ok(())
    }

    /// `nvmf_subsystem_allow_any_host`: switched off, the controllers of
    /// hosts not on the list are torn down.
    pub fn allow_any_host(&self, nqn: &str, allow: bool) -> Result<()> {
        let mut st = self.0.core.state.lock();
        let s = st
            .find_mut(nqn)
            .ok_or_else(|| Error::NoSubsystem(nqn.into()))?;
        if s.discovery {
            return Err(Error::Discovery);
        }
        s.allow_any_host = allow;
        let gone = revoked(s);
        st.discovery_changed();
        drop(st);
        kill_all(&gone, "allow_any_host off");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wzsl_rule() {
        assert_eq!(wzsl_of_kib(0), Some(0));
        assert_eq!(wzsl_of_kib(8), Some(1));
        assert_eq!(wzsl_of_kib(16384), Some(12));
        assert_eq!(wzsl_of_kib(12), None);
        assert_eq!(wzsl_of_kib(4), None);
        assert!(check_tgt(Some("nvmf_tgt")).is_ok());
        assert!(check_tgt(Some("other")).is_err());
    }
}
