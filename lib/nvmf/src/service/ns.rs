//! Namespaces: a bdev opened for writing and claimed (SPDK's exclusive
//! claim of module "NVMe-oF Target"), the poll groups' channels to it,
//! and the events that change it: removal (RPC or bdev hot-remove) and
//! resize, each announced to the subsystem's controllers with a
//! Namespace Attribute Changed event.

use std::sync::{Arc, Weak};

use bdevkit::bdev::{BdevEvent, ClaimType};

use super::{Inner, Target};
use crate::error::{Error, Result};
use crate::params::NamespaceParams;
use crate::subsystem::{parse_hex, Namespace, CLAIM_MODULE};

impl Target {
    /// `nvmf_subsystem_add_ns`: `done` gets the namespace id once every
    /// poll group can reach it (on this thread).
    pub fn add_ns(
        &self,
        nqn: &str,
        p: &NamespaceParams,
        done: impl FnOnce(Result<u32>) + Send + 'static,
    ) {
        let r = self.open_ns(nqn, p);
        let (sub_id, ns) = match r {
            Ok(x) => x,
            Err(e) => return done(Err(e)),
        };
        let nsid = ns.nsid;
        let inner = Arc::clone(&self.0);
        let ns2 = Arc::clone(&ns);
        self.for_each_group(
            move |g| g.env.set_ns(sub_id, nsid, Some(&ns2)),
            move || {
                Target(inner).announce(sub_id, nsid);
                done(Ok(nsid));
            },
        );
        drop(ns);
    }

    fn open_ns(&self, nqn: &str, p: &NamespaceParams) -> Result<(u32, Arc<Namespace>)> {
        if p.no_auto_visible == Some(true) {
            return Err(Error::NotSupported("no_auto_visible"));
        }
        if p.ptpl_file.is_some() {
            return Err(Error::NotSupported("ptpl_file"));
        }
        // SPDK v26.05 deprecates it; bdevs with metadata are refused
        // below anyway, so there is nothing to hide.
        if p.hide_metadata == Some(true) {
            tracing::warn!(nqn, "hide_metadata: accepted, no effect here");
        }
        let bad = |param: &'static str| Error::SubsystemParam {
            param,
            why: "not a hex string of the right length".into(),
        };
        let nguid = p
            .nguid
            .as_deref()
            .map(|s| parse_hex::<16>(s).ok_or_else(|| bad("nguid")))
            .transpose()?;
        let eui64 = p
            .eui64
            .as_deref()
            .map(|s| parse_hex::<8>(s).ok_or_else(|| bad("eui64")))
            .transpose()?;
        let (sub_id, nsid) = {
            let st = self.0.core.state.lock();
            let s = st.find(nqn).ok_or_else(|| Error::NoSubsystem(nqn.into()))?;
            if s.discovery {
                return Err(Error::Discovery);
            }
            let nsid = match p.nsid.filter(|&n| n != 0) {
                Some(n) if n > s.max_namespaces || s.namespaces.contains_key(&n) => {
                    return Err(Error::InvalidNsid(n))
                }
                Some(n) => n,
                None => s.free_nsid().ok_or(Error::NamespacesFull)?,
            };
            (s.id, nsid)
        };
        let mgr = &self.0.core.mgr;
        let bdev = mgr
            .get(&p.bdev_name)
            .filter(|b| !b.is_removing())
            .ok_or_else(|| Error::NoBdev(p.bdev_name.clone()))?;
        let bs = bdev.block_size();
        if bs < 512 || !bs.is_power_of_two() {
            return Err(Error::BdevGeometry {
                bdev: p.bdev_name.clone(),
                why: "block size is not a power of two of at least 512",
            });
        }
        if bdev.props().md_size != 0 {
            return Err(Error::BdevGeometry {
                bdev: p.bdev_name.clone(),
                why: "metadata is not supported",
            });
        }
        let weak: Weak<Inner> = Arc::downgrade(&self.0);
        let desc = mgr
            .open(bdev.name(), true, move |ev| {
                if let Some(inner) = weak.upgrade() {
                    Target(inner).bdev_event(sub_id, nsid, ev);
                }
            })
            .map_err(|source| Error::OpenBdev {
                bdev: p.bdev_name.clone(),
                source,
            })?;
        desc.claim(ClaimType::ExclusiveWrite, CLAIM_MODULE)
            .map_err(|source| Error::OpenBdev {
                bdev: p.bdev_name.clone(),
                source,
            })?;
        // SPDK's defaults: the bdev's UUID as the UUID and as the NGUID.
        let nguid = Some(nguid.unwrap_or_else(|| *bdev.uuid().as_bytes()));
        let ns = Arc::new(Namespace {
            nsid,
            uuid: p.uuid.unwrap_or_else(|| bdev.uuid()),
            bdev,
            desc: Arc::new(desc),
            nguid,
            eui64,
            anagrpid: p.anagrpid.filter(|&g| g != 0).unwrap_or(nsid),
        });
        let mut st = self.0.core.state.lock();
        let s = st
            .by_id_mut(sub_id)
            .ok_or_else(|| Error::NoSubsystem(nqn.into()))?;
        if s.namespaces.contains_key(&nsid) {
            return Err(Error::InvalidNsid(nsid));
        }
        s.namespaces.insert(nsid, Arc::clone(&ns));
        tracing::info!(nqn, nsid, bdev = %ns.bdev.name(), "namespace added");
        Ok((sub_id, ns))
    }

    /// `nvmf_subsystem_remove_ns`.
    pub fn remove_ns(&self, nqn: &str, nsid: u32, done: impl FnOnce(Result<()>) + Send + 'static) {
        let id = {
            let st = self.0.core.state.lock();
            match st.find(nqn) {
                Some(s) if s.namespaces.contains_key(&nsid) => s.id,
                Some(_) => return done(Err(Error::NoNamespace(nsid))),
                None => return done(Err(Error::NoSubsystem(nqn.into()))),
            }
        };
        self.detach_ns(id, nsid, done);
    }

    /// Takes namespace `nsid` out of subsystem `id`: the groups drop their
    /// channels, then the descriptor closes and the controllers hear of it.
    fn detach_ns(&self, id: u32, nsid: u32, done: impl FnOnce(Result<()>) + Send + 'static) {
        let ns = {
            let mut st = self.0.core.state.lock();
            st.by_id_mut(id).and_then(|s| s.namespaces.remove(&nsid))
        };
        let Some(ns) = ns else {
            return done(Err(Error::NoNamespace(nsid)));
        };
        tracing::info!(nsid, bdev = %ns.bdev.name(), "namespace removed");
        let inner = Arc::clone(&self.0);
        self.for_each_group(
            move |g| g.env.set_ns(id, nsid, None),
            move || {
                drop(ns);
                Target(inner).announce(id, nsid);
                done(Ok(()));
            },
        );
    }

    /// Tells subsystem `id`'s controllers that `nsid` changed.
    fn announce(&self, id: u32, nsid: u32) {
        let st = self.0.core.state.lock();
        if let Some(s) = st.by_id(id) {
            for c in &s.ctrlrs {
                c.ns_changed(nsid);
            }
        }
    }

    /// A namespace's bdev is going away or changed size.
    fn bdev_event(&self, id: u32, nsid: u32, ev: BdevEvent) {
        match ev {
            BdevEvent::Remove => {
                tracing::info!(nsid, "namespace bdev hot-removed");
                self.detach_ns(id, nsid, |_| {});
            }
            BdevEvent::Resize => {
                tracing::info!(nsid, "namespace bdev resized");
                self.announce(id, nsid);
            }
            BdevEvent::MediaManagement => {}
        }
    }
}
