//! The registry side of [`BdevManager`]: registering bdevs (names, aliases,
//! UUIDs, then examine), finding and opening them, unregistering them, and
//! the `bdev` subsystem's saved config.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};
use uuid::Uuid;

use super::bdev::{
    finish_unregister, run_on, Bdev, BdevInner, BdevState, DescEntry, DescInner, Status,
};
use super::desc::{BdevDesc, NEXT_DESC_ID};
use super::histogram::HistogramOptions;
use super::io::{BdevDevice, ChannelCore};
use super::manager::{BdevManager, MgrShared};
use super::module::ops::{BdevOps, BdevOpsDyn, Done, OpsBox};
use super::shared::BdevShared;
use super::types::{BdevEvent, BdevProps, ClaimType, IoType, ZONE_TYPES};
use crate::error::Error as BdevError;
use crate::thread::{IoDevice, Thread};

/// Longest bdev name or alias, in bytes. SPDK sets none; a name is echoed
/// in every listing and log line, so an unbounded one is a denial of
/// service (see `doc/rpc.md`).
pub const MAX_BDEV_NAME_LEN: usize = 255;

impl BdevManager {
    /// Registers a bdev implemented by `ops` for `module`, then runs examine
    /// (on the calling thread, which should be a bdevkit thread when
    /// virtual-bdev modules are loaded). Fails with `InvalidArg` for an
    /// empty or over-long name or alias, or a zero block size, and with
    /// `Exists` when the name, an alias or the UUID is taken; nothing is
    /// registered then.
    pub fn register_bdev<B: BdevOps>(
        &self,
        module: &str,
        props: BdevProps,
        ops: Arc<B>,
    ) -> Result<Bdev, BdevError> {
        if props.name.is_empty() {
            return Err(BdevError::InvalidArg("bdev name must not be empty".into()));
        }
        if let Some(long) = std::iter::once(&props.name)
            .chain(props.aliases.iter())
            .find(|n| n.len() > MAX_BDEV_NAME_LEN)
        {
            return Err(BdevError::InvalidArg(format!(
                "bdev name of {} bytes is longer than {MAX_BDEV_NAME_LEN}",
                long.len()
            )));
        }
        if props.block_size == 0 {
            return Err(BdevError::InvalidArg("block size must not be zero".into()));
        }
        let uuid = props.uuid.unwrap_or_else(Uuid::new_v4);
        let ops: Box<dyn BdevOpsDyn> = Box::new(OpsBox(ops));
        let mut supported = 0u32;
        for t in IoType::ALL {
            if ops.io_type_supported(t) {
                supported |= t.bit();
            }
        }
        supported = zone_types_checked(&props, supported)?;
        let mut aliases = props.aliases.clone();
        let uuid_str = uuid.to_string();
        if uuid_str != props.name && !aliases.contains(&uuid_str) {
            aliases.push(uuid_str);
        }
        let bdev = {
            let mut reg = self.0.reg.lock();
            if let Some(clash) = std::iter::once(&props.name)
                .chain(aliases.iter())
                .find(|n| reg.names.contains_key(n.as_str()))
            {
                return Err(BdevError::Exists(clash.clone()));
            }
            let mgr = Arc::downgrade(&self.0);
            let name = props.name.clone();
            let shared = Arc::new(BdevShared::new(props, supported));
            let inner = Arc::new_cyclic(|weak: &Weak<BdevInner>| BdevInner {
                device: channel_device(&name, weak.clone(), mgr.clone()),
                shared,
                aliases: RwLock::new(aliases.clone()),
                uuid,
                module: module.to_string(),
                ops,
                state: Mutex::new(BdevState {
                    status: Status::Registered,
                    descs: Vec::new(),
                    claim: None,
                    unregister_done: Vec::new(),
                }),
                qd: Mutex::new(Default::default()),
                on_gone: Box::new(move |b: &Bdev| forget(&mgr, b)),
            });
            let bdev = Bdev(inner);
            reg.names.insert(bdev.name().to_string(), bdev.clone());
            for a in &aliases {
                reg.names.insert(a.clone(), bdev.clone());
            }
            reg.bdevs.push(bdev.clone());
            bdev
        };
        tracing::info!(bdev = %bdev.name(), module, "bdev registered");
        let examine = {
            let opts = self.0.opts.lock();
            opts.bdev_auto_examine || {
                let ex = self.0.examine.lock();
                ex.allow
                    .iter()
                    .any(|n| n == bdev.name() || bdev.aliases().contains(n))
            }
        };
        if examine {
            self.examine_bdev(&bdev);
        }
        Ok(bdev)
    }
    fn examine_bdev(&self, bdev: &Bdev) {
        let modules = self.modules();
        for m in &modules {
            if bdev.is_removing() {
                return;
            }
            m.examine_config(self, bdev);
        }
        let claimer = bdev
            .claim()
            .and_then(|(ty, module)| (ty == ClaimType::ExclusiveWrite).then_some(module));
        for m in modules {
            if let Some(c) = &claimer {
                if m.name() != c {
                    continue;
                }
            }
            self.0.examine.lock().pending += 1;
            let me = Arc::downgrade(&self.0);
            let done = Done::new(move || {
                if let Some(me) = me.upgrade() {
                    BdevManager(me).examine_done();
                }
            });
            m.examine_disk(self, bdev, done);
        }
    }

    fn examine_done(&self) {
        let waiters = {
            let mut ex = self.0.examine.lock();
            ex.pending -= 1;
            if ex.pending == 0 {
                std::mem::take(&mut ex.waiters)
            } else {
                Vec::new()
            }
        };
        for (t, f) in waiters {
            run_on(t.as_ref(), f);
        }
    }

    /// Runs `done` (on the calling thread) once no examine is pending.
    pub fn wait_for_examine(&self, done: impl FnOnce() + Send + 'static) {
        let origin = Thread::current().map(|t| t.handle());
        let mut ex = self.0.examine.lock();
        if ex.pending == 0 {
            drop(ex);
            run_on(origin.as_ref(), Box::new(done));
        } else {
            ex.waiters.push((origin, Box::new(done)));
        }
    }

    /// `bdev_examine`: allow-lists `name` for examine (only when
    /// auto-examine is off) and examines it now if it exists.
    pub fn examine(&self, name: &str) -> Result<(), BdevError> {
        if self.0.opts.lock().bdev_auto_examine {
            return Err(BdevError::InvalidArg(
                "bdev_examine requires bdev_auto_examine=false".into(),
            ));
        }
        {
            let mut ex = self.0.examine.lock();
            if ex.allow.iter().any(|n| n == name) {
                return Err(BdevError::Exists(name.to_string()));
            }
            ex.allow.push(name.to_string());
        }
        if let Some(b) = self.get(name) {
            self.examine_bdev(&b);
        }
        Ok(())
    }

    /// Names allow-listed with [`BdevManager::examine`].
    #[must_use]
    pub fn examine_allow_list(&self) -> Vec<String> {
        self.0.examine.lock().allow.clone()
    }

    /// Looks a bdev up by name, alias or UUID string (bdevs being removed
    /// included).
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Bdev> {
        self.0.reg.lock().names.get(name).cloned()
    }

    /// Adds `alias` to `bdev` (SPDK's `spdk_bdev_alias_add`): `InvalidArg`
    /// when it is empty or longer than [`MAX_BDEV_NAME_LEN`], `Exists` when
    /// any bdev has that name or alias, `NotFound` when `bdev` is not
    /// registered here.
    pub fn alias_add(&self, bdev: &Bdev, alias: &str) -> Result<(), BdevError> {
        if alias.is_empty() || alias.len() > MAX_BDEV_NAME_LEN {
            return Err(BdevError::InvalidArg(format!(
                "alias of {} bytes: must be 1 to {MAX_BDEV_NAME_LEN}",
                alias.len()
            )));
        }
        let mut reg = self.0.reg.lock();
        if !reg.bdevs.contains(bdev) {
            return Err(BdevError::NotFound(bdev.name().to_string()));
        }
        if reg.names.contains_key(alias) {
            return Err(BdevError::Exists(alias.to_string()));
        }
        reg.names.insert(alias.to_string(), bdev.clone());
        bdev.0.aliases.write().push(alias.to_string());
        Ok(())
    }

    /// Removes `alias` from `bdev` (SPDK's `spdk_bdev_alias_del`):
    /// `NotFound` when `bdev` has no such alias.
    pub fn alias_del(&self, bdev: &Bdev, alias: &str) -> Result<(), BdevError> {
        let mut reg = self.0.reg.lock();
        let mut aliases = bdev.0.aliases.write();
        let Some(pos) = aliases.iter().position(|a| a == alias) else {
            return Err(BdevError::NotFound(alias.to_string()));
        };
        aliases.remove(pos);
        if reg.names.get(alias).is_some_and(|b| b == bdev) {
            reg.names.remove(alias);
        }
        Ok(())
    }

    /// Every registered bdev, in registration order.
    #[must_use]
    pub fn bdevs(&self) -> Vec<Bdev> {
        self.0.reg.lock().bdevs.clone()
    }

    /// How many bdevs are registered (no copy of the list: for periodic
    /// checks that must not allocate).
    #[must_use]
    pub fn bdev_count(&self) -> usize {
        self.0.reg.lock().bdevs.len()
    }

    /// Opens a bdev. `event_cb` runs on the calling thread (inline when
    /// called outside any thread) for remove and resize events.
    pub fn open(
        &self,
        name: &str,
        write: bool,
        event_cb: impl Fn(BdevEvent) + Send + Sync + 'static,
    ) -> Result<BdevDesc, BdevError> {
        let bdev = self
            .get(name)
            .ok_or_else(|| BdevError::NotFound(name.to_string()))?;
        let id = NEXT_DESC_ID.fetch_add(1, Ordering::Relaxed);
        let inner = Arc::new(DescInner {
            id,
            bdev: bdev.clone(),
            write: AtomicBool::new(write),
            closed: AtomicBool::new(false),
            event_cb: Box::new(event_cb),
        });
        let mut st = bdev.0.state.lock();
        if st.status == Status::Removing {
            return Err(BdevError::NotFound(name.to_string()));
        }
        if write {
            if let Some(c) = &st.claim {
                // Writers of a shared claim open read-only and then claim.
                return Err(BdevError::Claimed(
                    bdev.name().to_string(),
                    c.module.clone(),
                ));
            }
        }
        st.descs.push(DescEntry {
            id,
            write,
            thread: Thread::current().map(|t| t.handle()),
            inner: Arc::downgrade(&inner),
        });
        drop(st);
        Ok(BdevDesc { inner })
    }
    /// Unregisters `bdev`: open descriptors get a remove event; once the
    /// last closes and every channel is gone, the module destructs it and
    /// `done` runs on the calling thread.
    pub fn unregister(&self, bdev: &Bdev, done: impl FnOnce() + Send + 'static) {
        let origin = Thread::current().map(|t| t.handle());
        let (first, finish_now) = {
            let mut st = bdev.0.state.lock();
            st.unregister_done.push((origin, Box::new(done)));
            let first = st.status == Status::Registered;
            st.status = Status::Removing;
            (first, first && st.descs.is_empty())
        };
        if !first {
            return;
        }
        tracing::info!(bdev = %bdev.name(), "unregistering bdev");
        if finish_now {
            finish_unregister(bdev);
        } else {
            bdev.send_event(BdevEvent::Remove);
        }
    }

    /// Unregisters the bdev `name` if `module` created it (what every
    /// `bdev_<module>_delete` does). `done` gets `NotFound` at once when
    /// there is no such bdev of that module, or `Ok` once it is gone (on
    /// the calling thread).
    pub fn unregister_by_name(
        &self,
        name: &str,
        module: &str,
        done: impl FnOnce(Result<(), BdevError>) + Send + 'static,
    ) {
        match self
            .get(name)
            .filter(|b| b.module_name() == module && !b.is_removing())
        {
            Some(b) => self.unregister(&b, move || done(Ok(()))),
            None => done(Err(BdevError::NotFound(name.to_string()))),
        }
    }

    /// Unregisters every bdev, top of each stack first (unclaimed bdevs, in
    /// reverse registration order), then runs `done`.
    pub fn unregister_all(&self, done: impl FnOnce() + Send + 'static) {
        let next = {
            let reg = self.0.reg.lock();
            reg.bdevs
                .iter()
                .rev()
                .find(|b| b.claim().is_none() && !b.is_removing())
                .or_else(|| reg.bdevs.iter().rev().find(|b| !b.is_removing()))
                .cloned()
        };
        match next {
            Some(b) => {
                let me = self.clone();
                self.unregister(&b, move || me.unregister_all(done));
            }
            None => {
                let pending = !self.0.reg.lock().bdevs.is_empty();
                if pending {
                    // Removals still finishing: poll again shortly.
                    let me = self.clone();
                    match Thread::current() {
                        Some(t) => {
                            let cell = std::cell::Cell::new(Some(done));
                            t.register_poller("bdev_unregister_all", 1_000, move |p| {
                                if me.0.reg.lock().bdevs.is_empty() {
                                    p.unregister();
                                    if let Some(d) = cell.take() {
                                        d();
                                    }
                                    crate::thread::PollerStatus::Busy
                                } else {
                                    crate::thread::PollerStatus::Idle
                                }
                            });
                        }
                        None => done(),
                    }
                } else {
                    done();
                }
            }
        }
    }

    /// The `bdev` subsystem config (SPDK's order): `bdev_set_options`,
    /// `bdev_examine` entries, module entries, per-bdev entries and QoS,
    /// the modules' entries that follow every bdev, then
    /// `bdev_wait_for_examine`.
    #[must_use]
    pub fn config_json(&self) -> Vec<Value> {
        let o = self.options();
        let mut out = vec![json!({
            "method": "bdev_set_options",
            "params": {
                "bdev_io_pool_size": o.bdev_io_pool_size,
                "bdev_io_cache_size": o.bdev_io_cache_size,
                "bdev_auto_examine": o.bdev_auto_examine,
                "iobuf_small_cache_size": o.iobuf_small_cache_size,
                "iobuf_large_cache_size": o.iobuf_large_cache_size,
            }
        })];
        for n in self.examine_allow_list() {
            out.push(json!({"method": "bdev_examine", "params": {"name": n}}));
        }
        for m in self.modules() {
            out.extend(m.config_json(self));
        }
        for b in self.bdevs() {
            if b.is_removing() {
                continue;
            }
            if let Some(c) = b.write_config_json() {
                out.push(c);
            }
            let l = b.qos_limits();
            if l.iter().any(|x| *x != 0) {
                let mut p = serde_json::Map::new();
                p.insert("name".into(), json!(b.name()));
                for (k, v) in [
                    "rw_ios_per_sec",
                    "rw_mbytes_per_sec",
                    "r_mbytes_per_sec",
                    "w_mbytes_per_sec",
                ]
                .iter()
                .zip(l)
                {
                    if v != 0 {
                        p.insert((*k).into(), json!(v));
                    }
                }
                out.push(json!({"method": "bdev_set_qos_limit", "params": p}));
            }
            if let Some(h) = b.histogram_options() {
                out.push(histogram_config_json(b.name(), &h));
            }
        }
        for m in self.modules() {
            out.extend(m.config_json_after_bdevs(self));
        }
        out.push(json!({"method": "bdev_wait_for_examine"}));
        out
    }
}

/// `bdev_enable_histogram` as SPDK saves it (`name`, `enable`, `opc` when
/// one I/O type is counted), plus the range and granularity when they
/// are not the defaults (SPDK drops those; its method takes them).
fn histogram_config_json(name: &str, h: &HistogramOptions) -> Value {
    let mut p = serde_json::Map::new();
    p.insert("name".into(), json!(name));
    p.insert("enable".into(), json!(true));
    if let Some(t) = h.io_type {
        p.insert("opc".into(), json!(t.name()));
    }
    let d = HistogramOptions::default();
    if h.granularity != d.granularity {
        p.insert("granularity".into(), json!(h.granularity));
    }
    if h.min_nsec != d.min_nsec {
        p.insert("min_nsec".into(), json!(h.min_nsec));
    }
    if h.max_nsec != d.max_nsec {
        p.insert("max_nsec".into(), json!(h.max_nsec));
    }
    json!({"method": "bdev_enable_histogram", "params": p})
}

/// The io_device of a new bdev: each thread's channel is the bdev layer's
/// state plus the module's channel, made on first use.
fn channel_device(name: &str, bdev: Weak<BdevInner>, mgr: Weak<MgrShared>) -> BdevDevice {
    IoDevice::register(format!("bdev_{name}"), move || {
        let b = bdev.upgrade().ok_or("bdev is gone")?;
        let mgr = mgr.upgrade().ok_or(BdevError::RuntimeStopped)?;
        let mgmt = mgr.mgmt.get_channel()?;
        let module = b
            .ops
            .create_channel()
            .map_err(|source| BdevError::CreateChannel {
                name: b.shared.name.clone(),
                source,
            })?;
        Ok::<ChannelCore, crate::error::BoxError>(ChannelCore::new(
            Arc::clone(&b.shared),
            b.device.clone(),
            module,
            mgmt,
        ))
    })
}

/// Takes a destructed bdev out of its manager's registry.
fn forget(mgr: &Weak<MgrShared>, b: &Bdev) {
    if let Some(mgr) = mgr.upgrade() {
        let mut reg = mgr.reg.lock();
        reg.bdevs.retain(|x| x != b);
        reg.names.retain(|_, x| x != b);
    }
}

/// The served types of a bdev with `props`, its zone geometry checked: a
/// zoned bdev's zones fit it and it serves zone info and management; a bdev
/// without zones serves no zone type (whatever its module says: a virtual
/// bdev mirroring a zoned base's types without its zones).
fn zone_types_checked(props: &BdevProps, supported: u32) -> Result<u32, BdevError> {
    let Some(geo) = &props.zoned else {
        return Ok(supported & !ZONE_TYPES);
    };
    geo.validate(props.num_blocks)
        .map_err(|e| BdevError::InvalidArg(format!("zoned bdev {}: {e}", props.name)))?;
    let needed = IoType::GetZoneInfo.bit() | IoType::ZoneManagement.bit();
    if supported & needed != needed {
        return Err(BdevError::InvalidArg(format!(
            "zoned bdev {} must serve get_zone_info and zone_management",
            props.name
        )));
    }
    Ok(supported)
}
