//! Building blocks for virtual bdev modules: what every bdev stacked on
//! another bdev (passthru, delay, error, split) does the same way.
//!
//! * [`VbdevConfigs`]: the configurations a module keeps (the
//!   `bdev_<module>_create` calls still in force), attached or waiting for
//!   their base: creation, examine, deletion and `save_config`. What a
//!   configuration must tell it is the small trait [`VbdevConfig`].
//! * [`BaseBdev`]: the base, opened and claimed `exclusive_write`, its
//!   events delivered to the virtual bdev ([`BaseEvents`], [`BaseLink`]),
//!   a per-thread channel to it, and closing it again on the thread that
//!   opened it.
//! * [`forward`] and [`complete_parent`]: the I/O path, sending an I/O to
//!   the base as a child `BdevIo`. Generic and inlined: no allocation, no
//!   lock and no dynamic call of its own per I/O.
//! * [`props_over`], [`own_bdev`], [`unregister_own`] and [`resize_own`]:
//!   the properties of a bdev stacked on a base, and how a virtual bdev
//!   finds its own registered bdev to follow its base's removal or resize.
//!
//! `modules/passthru` uses all of it and explains each piece where it is
//! used; `doc/writing-a-module.md` walks through it. None of this is
//! required: a module with other needs (raid and its many members) uses
//! the plain bdev API instead.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::channel::BdevChannel;
use super::io::BdevIo;
use super::manager::{Bdev, BdevDesc, BdevManager};
use super::module::BdevOps;
use super::types::{BdevEvent, BdevProps, ClaimType, IoStatus};
use crate::error::{BoxError, Error, Result};
use crate::thread::{Thread, ThreadHandle};

// ---------------------------------------------------------------------------
// Configurations
// ---------------------------------------------------------------------------

/// A virtual bdev's configuration: the params of `bdev_<module>_create`,
/// as [`VbdevConfigs`] keeps them.
pub trait VbdevConfig: Clone + Serialize + Send + 'static {
    /// The module ([`super::BdevModule::name`]) whose bdevs the
    /// configurations build.
    const MODULE: &'static str;

    /// The method that recreates a configuration in a saved config
    /// (`bdev_passthru_create`).
    const CREATE_METHOD: &'static str;

    /// Required. The base bdev, by name or alias, as configured.
    fn base_name(&self) -> &str;

    /// Required. The configuration's name, unique among the module's
    /// configurations: the name of the bdev it builds (passthru, delay,
    /// error), or what names the configuration of a module that builds
    /// several bdevs from one (split: its base).
    fn name(&self) -> Cow<'_, str>;

    /// Optional. Whether the configuration's bdevs are registered, so that
    /// examine leaves it alone. Default: a bdev called [`name`](Self::name)
    /// exists.
    fn is_attached(&self, mgr: &BdevManager) -> bool {
        mgr.get(&self.name()).is_some()
    }

    /// Optional. What a second configuration with the same name fails
    /// with. Default: [`Error::Exists`] with the name.
    fn duplicate_error(&self) -> Error {
        Error::Exists(self.name().into_owned())
    }

    /// Optional. Where a saved config records the UUID the bdev got
    /// (generated or configured), so that a replay recreates it with the
    /// same UUID. Default `None`: the configuration is saved as it was
    /// given.
    fn uuid_mut(&mut self) -> Option<&mut Option<Uuid>> {
        None
    }

    /// Optional. The `params` of the saved-config entry. Default: the
    /// configuration, serialised.
    fn saved_params(&self) -> Value {
        json!(self)
    }
}

/// The configurations of one virtual bdev module (the
/// `bdev_<module>_create` calls still in force), whether or not their
/// base exists yet.
///
/// A configuration is recorded first and attached when its base is there:
/// at once by [`VbdevConfigs::create`], or later when the base registers,
/// from the module's `examine_config` through [`VbdevConfigs::waiting_for`].
/// Creation order does not matter, so a saved config replays in any order,
/// and a base that is removed and comes back gets its virtual bdev back.
///
/// The lock inside is never held while a bdev registers: registration
/// examines the new bdev, which may call back into the module.
#[derive(Debug)]
pub struct VbdevConfigs<P> {
    list: Mutex<Vec<P>>,
}

impl<P> Default for VbdevConfigs<P> {
    fn default() -> Self {
        VbdevConfigs {
            list: Mutex::new(Vec::new()),
        }
    }
}

impl<P: VbdevConfig> VbdevConfigs<P> {
    /// `bdev_<module>_create`, after the module's own checks: records
    /// `params`, and if the base exists calls `attach(&params, &base)` (on
    /// this thread, without the lock held).
    ///
    /// Returns `Some` with what `attach` returned, or `None` when the
    /// configuration waits for its base: the base is missing, or `attach`
    /// found it going away (`NotFound`).
    ///
    /// Errors: [`VbdevConfig::duplicate_error`] when a configuration has
    /// that name; any other error of `attach`, after which the
    /// configuration is forgotten again.
    pub fn create<T>(
        &self,
        mgr: &BdevManager,
        params: P,
        attach: impl FnOnce(&P, &Bdev) -> Result<T>,
    ) -> Result<Option<T>> {
        {
            let mut list = self.list.lock();
            let name = params.name();
            if list.iter().any(|c| c.name() == name) {
                return Err(params.duplicate_error());
            }
            list.push(params.clone());
        }
        let Some(base) = mgr.get(params.base_name()) else {
            return Ok(None);
        };
        match attach(&params, &base) {
            Ok(t) => Ok(Some(t)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => {
                self.remove(&params.name());
                Err(e)
            }
        }
    }

    /// The configurations waiting for `bdev` (for `examine_config`): those
    /// whose base is `bdev` (by name or alias) and whose bdevs are not
    /// registered. Copies, so that the caller attaches them without the
    /// lock held.
    #[must_use]
    pub fn waiting_for(&self, mgr: &BdevManager, bdev: &Bdev) -> Vec<P> {
        self.list
            .lock()
            .iter()
            .filter(|c| bdev.has_name(c.base_name()) && !c.is_attached(mgr))
            .cloned()
            .collect()
    }

    /// Forgets the configuration called `name`; returns whether there was
    /// one.
    pub fn remove(&self, name: &str) -> bool {
        let mut list = self.list.lock();
        let before = list.len();
        list.retain(|c| c.name() != name);
        list.len() != before
    }

    /// Changes the configuration called `name` with `f` (a setting changed
    /// at run time, so that a re-attach or a saved config keeps it);
    /// returns whether there is one.
    pub fn update(&self, name: &str, f: impl FnOnce(&mut P)) -> bool {
        match self.list.lock().iter_mut().find(|c| c.name() == name) {
            Some(c) => {
                f(c);
                true
            }
            None => false,
        }
    }

    /// `bdev_<module>_delete` for a module that builds one bdev per
    /// configuration: forgets the configuration `name` and unregisters the
    /// module's bdev of that name. `done` gets `Ok` on the calling thread
    /// once the bdev is gone, `Ok` at once when there was only a
    /// configuration waiting for its base, and `NotFound` when there was
    /// neither.
    pub fn delete(
        &self,
        mgr: &BdevManager,
        name: &str,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        let had_config = self.remove(name);
        let name2 = name.to_string();
        mgr.unregister_by_name(name, P::MODULE, move |r| match r {
            // A configuration still waiting for its base has no bdev.
            Err(Error::NotFound(_)) if had_config => done(Ok(())),
            Err(_) => done(Err(Error::NotFound(name2))),
            Ok(()) => done(Ok(())),
        });
    }

    /// `BdevModule::config_json`: one
    /// `{"method": CREATE_METHOD, "params"}` per configuration, attached or
    /// waiting, in creation order, with the UUID the bdev got where
    /// [`VbdevConfig::uuid_mut`] says.
    #[must_use]
    pub fn config_json(&self, mgr: &BdevManager) -> Vec<Value> {
        self.list
            .lock()
            .iter()
            .map(|c| {
                let mut p = c.clone();
                if let Some(uuid) = p.uuid_mut() {
                    if let Some(b) = mgr.get(&c.name()).filter(|b| b.module_name() == P::MODULE) {
                        *uuid = Some(b.uuid());
                    }
                }
                json!({"method": P::CREATE_METHOD, "params": p.saved_params()})
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// The base
// ---------------------------------------------------------------------------

/// The base of a virtual bdev: open, claimed `exclusive_write` by the
/// module, and remembered with the thread that opened it, where it is
/// closed again ([`BaseBdev::close`]).
///
/// Events of the base go to the virtual bdev through [`BaseEvents`]; a
/// removal also sets [`BaseBdev::is_removing`], which the I/O path checks
/// to fail new I/O.
pub struct BaseBdev {
    bdev: Bdev,
    module: &'static str,
    /// Taken (closed) by `close`.
    desc: Mutex<Option<BdevDesc>>,
    /// The thread that opened the base, where it is closed again.
    opener: Option<ThreadHandle>,
    /// Set when the base is going away.
    removing: AtomicBool,
}

impl fmt::Debug for BaseBdev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BaseBdev")
            .field("bdev", &self.bdev.name())
            .field("module", &self.module)
            .field("removing", &self.is_removing())
            .finish_non_exhaustive()
    }
}

/// What follows a base's events: the virtual bdev (or, for split, what
/// its parts share).
pub trait BaseEvents: Send + Sync + 'static {
    /// Required. The base.
    fn base_bdev(&self) -> &BaseBdev;

    /// Required. The base is going away. Called once, on the thread that
    /// opened it, with [`BaseBdev::is_removing`] already set so that new
    /// I/O fails. Unregister the virtual bdev here (its openers get a
    /// remove event); close the base in `destruct`, once the virtual
    /// bdev's channels are gone.
    fn base_removed(&self);

    /// Required. The base's size changed; on the thread that opened it.
    fn base_resized(&self);
}

fn deliver<T: BaseEvents>(t: &T, event: BdevEvent) {
    match event {
        BdevEvent::Remove => {
            if !t.base_bdev().removing.swap(true, Ordering::AcqRel) {
                t.base_removed();
            }
        }
        BdevEvent::Resize => t.base_resized(),
        BdevEvent::MediaManagement => {}
    }
}

/// Connects a base's events to the virtual bdev built on it, from
/// [`BaseBdev::open`].
///
/// The event callback cannot hold the virtual bdev strongly (the virtual
/// bdev holds the descriptor that holds the callback), so it finds it
/// through a `Weak` that [`BaseLink::bind`] sets once the virtual bdev
/// exists. Until then events are dropped; [`BaseLink::catch_up`] delivers
/// a removal that began meanwhile.
pub struct BaseLink<T> {
    slot: Arc<OnceLock<Weak<T>>>,
    base: Bdev,
}

impl<T> fmt::Debug for BaseLink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BaseLink")
            .field("base", &self.base.name())
            .field("bound", &self.slot.get().is_some())
            .finish()
    }
}

impl<T: BaseEvents> BaseLink<T> {
    /// From now on the base's events reach `t`. Call before registering
    /// the virtual bdev.
    pub fn bind(&self, t: &Arc<T>) {
        let _ = self.slot.set(Arc::downgrade(t));
    }

    /// Call once the virtual bdev is registered: a removal of the base
    /// that began before [`BaseLink::bind`] could not reach it, so it is
    /// delivered now.
    pub fn catch_up(self) {
        if self.base.is_removing() {
            if let Some(t) = self.slot.get().and_then(Weak::upgrade) {
                deliver(&*t, BdevEvent::Remove);
            }
        }
    }
}

impl BaseBdev {
    /// Opens `base` and claims it `exclusive_write` for `module`, on this
    /// thread (which becomes the one that closes it). Fails with `EPERM`
    /// when another module claimed it first, `NotFound` when it is gone or
    /// going away.
    ///
    /// The base's events reach the `T` given to the returned link's
    /// [`BaseLink::bind`].
    pub fn open<T: BaseEvents>(
        mgr: &BdevManager,
        base: &Bdev,
        module: &'static str,
    ) -> Result<(BaseBdev, BaseLink<T>)> {
        let slot: Arc<OnceLock<Weak<T>>> = Arc::new(OnceLock::new());
        let slot2 = Arc::clone(&slot);
        // The callback runs on this thread.
        let desc = mgr.open(base.name(), false, move |event| {
            if let Some(t) = slot2.get().and_then(Weak::upgrade) {
                deliver(&*t, event);
            }
        })?;
        // Closing the descriptor releases the claim.
        desc.claim(ClaimType::ExclusiveWrite, module)?;
        let open = BaseBdev {
            bdev: base.clone(),
            module,
            desc: Mutex::new(Some(desc)),
            opener: Thread::current().map(|t| t.handle()),
            removing: AtomicBool::new(false),
        };
        Ok((
            open,
            BaseLink {
                slot,
                base: base.clone(),
            },
        ))
    }

    /// The base bdev.
    #[must_use]
    pub fn bdev(&self) -> &Bdev {
        &self.bdev
    }

    /// Whether the base is going away (new I/O should fail with
    /// `Aborted`). One relaxed load: for the I/O path.
    #[inline]
    #[must_use]
    pub fn is_removing(&self) -> bool {
        self.removing.load(Ordering::Relaxed)
    }

    /// This thread's channel to the base, for a channel of the virtual
    /// bdev (`create_channel`). It is released on this thread when
    /// dropped. Fails once the base is closed.
    pub fn channel(&self) -> std::result::Result<BdevChannel, BoxError> {
        let desc = self.desc.lock();
        let desc = desc
            .as_ref()
            .ok_or_else(|| format!("{} base bdev is closed", self.module))?;
        Ok(desc.get_io_channel()?)
    }

    /// Closes the base (releasing the claim) on the thread that opened it,
    /// then runs `then` there. Call from `destruct`, once every channel of
    /// the virtual bdev is gone. If that thread has exited, the message is
    /// dropped, which closes the base too and drops `then` (a [`Done`]
    /// inside signals on drop).
    ///
    /// [`Done`]: super::Done
    pub fn close(&self, then: impl FnOnce() + Send + 'static) {
        let desc = self.desc.lock().take();
        let close = move || {
            drop(desc);
            then();
        };
        match &self.opener {
            Some(t) => {
                let _ = t.send_msg(close);
            }
            None => close(),
        }
    }
}

// ---------------------------------------------------------------------------
// The I/O path
// ---------------------------------------------------------------------------

/// Sends `parent` to the base through `base` (this thread's channel to
/// it) as a child I/O; returns whether the child was submitted.
///
/// * The child comes from this thread's pool. When it is empty the parent
///   completes (deferred) with `NoMem`, and the bdev layer retries it once
///   an I/O is freed.
/// * The child gets the parent's request (type, range, data segments, NVMe
///   command) and tag (so an abort forwarded below finds its target); then
///   `setup(child, parent)` sets its completion (`on_done_fn` with
///   [`complete_parent`], or `on_done`) and anything else (a translated
///   offset).
/// * The parent travels with the child: it owns the data buffers the
///   child's segments point into, and the completion takes it back.
/// * A child the base rejects hands the parent back, which completes
///   (deferred) with the rejection's errno.
///
/// The parent is never completed inside this call. No allocation and no
/// lock.
#[inline]
pub fn forward(
    base: &BdevChannel,
    parent: BdevIo,
    setup: impl FnOnce(&mut BdevIo, &BdevIo),
) -> bool {
    let Some(mut child) = base.alloc_io() else {
        parent.complete_deferred(IoStatus::NoMem);
        return false;
    };
    child.copy_request_from(&parent).set_tag(parent.tag());
    setup(&mut child, &parent);
    child.set_parent(parent);
    match base.submit(child) {
        Ok(()) => true,
        Err(e) => {
            let mut child = e.io;
            if let Some(parent) = child.take_parent() {
                parent.complete_deferred(IoStatus::Errno(e.error.errno()));
            }
            false
        }
    }
}

/// Completion of a child sent by [`forward`], for `on_done_fn`: completes
/// the parent with the child's status (and NVMe `cdw0`). Runs on the
/// submitting thread; the child returns to its pool when it drops at the
/// end.
pub fn complete_parent(mut child: BdevIo) {
    if let Some(parent) = child.take_parent() {
        parent.complete_from(&child);
    }
}

// ---------------------------------------------------------------------------
// Properties and identity
// ---------------------------------------------------------------------------

/// Properties of a bdev called `name`, `num_blocks` long, stacked on
/// `base`: the base's block size, physical block size, alignment need,
/// write cache and metadata/DIF layout. Not its `optimal_io_boundary`: a
/// virtual bdev whose blocks are the base's blocks (passthru, delay) copies
/// that as well.
#[must_use]
pub fn props_over(base: &Bdev, name: &str, product_name: &str, num_blocks: u64) -> BdevProps {
    let b = base.props();
    let mut p = BdevProps::new(name, product_name, base.block_size(), num_blocks);
    p.phys_block_size = b.phys_block_size;
    p.required_alignment = b.required_alignment;
    p.write_cache = b.write_cache;
    p.md_size = b.md_size;
    p.md_interleave = b.md_interleave;
    p.dif_type = b.dif_type;
    p.dif_is_head_of_md = b.dif_is_head_of_md;
    p.dif_pi_format = b.dif_pi_format;
    p
}

/// The bdev registered as `name` whose implementation is `ops`: how a
/// virtual bdev finds its own bdev (to unregister itself, or to follow a
/// resize of its base). `None` once it is unregistered, or when another
/// bdev has the name.
#[must_use]
pub fn own_bdev<B: BdevOps>(mgr: &BdevManager, name: &str, ops: &B) -> Option<Bdev> {
    mgr.get(name).filter(|b| {
        b.ops_as::<B>()
            .is_some_and(|o| std::ptr::eq(Arc::as_ptr(&o), ops))
    })
}

/// Unregisters the virtual bdev `name` implemented by `ops`, if it is
/// still registered ([`own_bdev`]): what a virtual bdev does when its base
/// goes away. Its openers get a remove event; `destruct` follows once they
/// closed and its channels are gone.
pub fn unregister_own<B: BdevOps>(mgr: &BdevManager, name: &str, ops: &B) {
    if let Some(me) = own_bdev(mgr, name, ops) {
        mgr.unregister(&me, || {});
    }
}

/// Resizes the virtual bdev `name` implemented by `ops` to `num_blocks`,
/// if it is still registered ([`own_bdev`]): what a virtual bdev covering
/// its whole base does when the base is resized. Its openers get a resize
/// event.
pub fn resize_own<B: BdevOps>(mgr: &BdevManager, name: &str, ops: &B, num_blocks: u64) {
    if let Some(me) = own_bdev(mgr, name, ops) {
        me.notify_resize(num_blocks);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use serde::Deserialize;

    use super::*;
    use crate::bdev::IoType;

    /// A bdev with no I/O path: enough for the control path.
    struct Plain;

    impl BdevOps for Plain {
        type Channel = ();
        fn create_channel(&self) -> std::result::Result<(), BoxError> {
            Err("no channels".into())
        }
        fn submit(&self, _ch: &(), io: BdevIo) {
            io.complete_deferred(IoStatus::Failed);
        }
        fn io_type_supported(&self, _io_type: IoType) -> bool {
            false
        }
    }

    fn plain(mgr: &BdevManager, module: &str, props: BdevProps) -> Bdev {
        mgr.register_bdev(module, props, Arc::new(Plain)).unwrap()
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    struct Cfg {
        name: String,
        base: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        uuid: Option<Uuid>,
    }

    impl VbdevConfig for Cfg {
        const MODULE: &'static str = "vtest";
        const CREATE_METHOD: &'static str = "bdev_vtest_create";
        fn base_name(&self) -> &str {
            &self.base
        }
        fn name(&self) -> Cow<'_, str> {
            Cow::Borrowed(&self.name)
        }
        fn uuid_mut(&mut self) -> Option<&mut Option<Uuid>> {
            Some(&mut self.uuid)
        }
    }

    fn cfg(name: &str, base: &str) -> Cfg {
        Cfg {
            name: name.into(),
            base: base.into(),
            uuid: None,
        }
    }

    fn names(v: &[Cfg]) -> Vec<&str> {
        v.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn configurations_wait_attach_and_save_the_uuid_they_got() {
        let mgr = BdevManager::default();
        let configs = VbdevConfigs::<Cfg>::default();
        let never = |_: &Cfg, _: &Bdev| -> Result<()> { panic!("no base yet") };
        assert!(configs
            .create(&mgr, cfg("V0", "B0"), never)
            .unwrap()
            .is_none());
        let dup = configs.create(&mgr, cfg("V0", "B9"), never).unwrap_err();
        assert!(matches!(dup, Error::Exists(n) if n == "V0"));

        let b0 = plain(&mgr, "test", BdevProps::new("B0", "Test", 512, 8));
        assert_eq!(names(&configs.waiting_for(&mgr, &b0)), ["V0"]);
        // By alias (the UUID string) as well as by name.
        assert!(configs.update("V0", |c| c.base = b0.uuid().to_string()));
        assert_eq!(names(&configs.waiting_for(&mgr, &b0)), ["V0"]);

        // Attaching now; failures other than a vanishing base undo.
        let attached = configs.create(&mgr, cfg("V2", "B0"), |c, base| {
            assert_eq!(base.name(), "B0");
            let mut p = BdevProps::new(&c.name, "VTest", 512, 8);
            p.uuid = Some(Uuid::from_u128(7));
            plain(&mgr, Cfg::MODULE, p);
            Ok(42)
        });
        assert_eq!(attached.unwrap(), Some(42));
        let vanishing =
            |_: &Cfg, base: &Bdev| -> Result<()> { Err(Error::NotFound(base.name().to_string())) };
        assert!(configs
            .create(&mgr, cfg("V3", "B0"), vanishing)
            .unwrap()
            .is_none());
        let failing = |_: &Cfg, _: &Bdev| -> Result<()> { Err(Error::InvalidArg("no".into())) };
        assert!(configs.create(&mgr, cfg("V4", "B0"), failing).is_err());
        assert_eq!(names(&configs.waiting_for(&mgr, &b0)), ["V0", "V3"]);

        let uuid0 = b0.uuid().to_string();
        assert_eq!(
            configs.config_json(&mgr),
            [
                json!({"method": "bdev_vtest_create",
                    "params": {"name": "V0", "base": uuid0}}),
                json!({"method": "bdev_vtest_create",
                    "params": {"name": "V2", "base": "B0", "uuid": Uuid::from_u128(7)}}),
                json!({"method": "bdev_vtest_create", "params": {"name": "V3", "base": "B0"}}),
            ]
        );
        assert!(configs.remove("V3"));
        assert!(!configs.remove("V3"));
        assert!(!configs.update("V3", |_| {}));
    }

    #[test]
    fn delete_answers_for_bdevs_and_waiting_configurations() {
        let mgr = BdevManager::default();
        let configs = VbdevConfigs::<Cfg>::default();
        configs
            .create(&mgr, cfg("W", "none"), |_, _| Ok(()))
            .unwrap();
        let answers = Arc::new(Mutex::new(Vec::new()));
        let record = |a: &Arc<Mutex<Vec<String>>>| {
            let a = Arc::clone(a);
            move |r: Result<()>| a.lock().push(format!("{r:?}"))
        };
        configs.delete(&mgr, "W", record(&answers));
        configs.delete(&mgr, "W", record(&answers));
        plain(&mgr, Cfg::MODULE, BdevProps::new("V", "VTest", 512, 8));
        plain(&mgr, "other", BdevProps::new("X", "Test", 512, 8));
        configs.delete(&mgr, "V", record(&answers));
        configs.delete(&mgr, "X", record(&answers));
        assert_eq!(
            *answers.lock(),
            [
                "Ok(())",
                r#"Err(NotFound("W"))"#,
                "Ok(())",
                r#"Err(NotFound("X"))"#
            ]
        );
        assert!(mgr.get("V").is_none() && mgr.get("X").is_some());
    }

    /// Counts the events it gets.
    struct Follower {
        base: BaseBdev,
        removed: AtomicUsize,
        resized: AtomicUsize,
    }

    impl BaseEvents for Follower {
        fn base_bdev(&self) -> &BaseBdev {
            &self.base
        }
        fn base_removed(&self) {
            self.removed.fetch_add(1, Ordering::SeqCst);
        }
        fn base_resized(&self) {
            self.resized.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn follow(base: BaseBdev) -> Arc<Follower> {
        Arc::new(Follower {
            base,
            removed: AtomicUsize::new(0),
            resized: AtomicUsize::new(0),
        })
    }

    #[test]
    fn the_base_is_claimed_followed_and_closed() {
        // Outside any thread events and closing run inline.
        let mgr = BdevManager::default();
        let b = plain(&mgr, "test", BdevProps::new("B", "Test", 512, 8));
        let (base, link) = BaseBdev::open::<Follower>(&mgr, &b, "vtest").unwrap();
        assert_eq!(b.claim(), Some((ClaimType::ExclusiveWrite, "vtest".into())));
        let e = BaseBdev::open::<Follower>(&mgr, &b, "other").unwrap_err();
        assert_eq!(e.errno(), libc::EPERM);

        let f = follow(base);
        link.bind(&f);
        link.catch_up();
        b.notify_resize(4);
        assert_eq!(f.resized.load(Ordering::SeqCst), 1);
        assert!(!f.base.is_removing());
        mgr.unregister(&b, || {});
        b.send_event(BdevEvent::Remove);
        assert_eq!(f.removed.load(Ordering::SeqCst), 1, "delivered once");
        assert!(f.base.is_removing());

        let closed = Arc::new(AtomicBool::new(false));
        let c2 = Arc::clone(&closed);
        f.base.close(move || c2.store(true, Ordering::SeqCst));
        assert!(closed.load(Ordering::SeqCst));
        assert!(mgr.get("B").is_none(), "closing let the removal finish");
        let e = f.base.channel().unwrap_err();
        assert_eq!(e.to_string(), "vtest base bdev is closed");
    }

    #[test]
    fn a_removal_before_bind_is_caught_up() {
        let mgr = BdevManager::default();
        let b = plain(&mgr, "test", BdevProps::new("B", "Test", 512, 8));
        let (base, link) = BaseBdev::open::<Follower>(&mgr, &b, "vtest").unwrap();
        mgr.unregister(&b, || {});
        let f = follow(base);
        link.bind(&f);
        assert_eq!(f.removed.load(Ordering::SeqCst), 0);
        link.catch_up();
        assert_eq!(f.removed.load(Ordering::SeqCst), 1);
        assert!(f.base.is_removing());
    }

    #[test]
    fn props_follow_the_base_and_own_bdev_is_this_one() {
        let mgr = BdevManager::default();
        let mut p = BdevProps::new("B", "Test", 520, 64);
        p.md_size = 8;
        p.md_interleave = true;
        p.dif_type = 1;
        p.required_alignment = 9;
        p.write_cache = true;
        p.optimal_io_boundary = 16;
        let b = plain(&mgr, "test", p);
        let v = props_over(&b, "V", "VTest", 32);
        assert_eq!((v.name.as_str(), v.product_name.as_str()), ("V", "VTest"));
        assert_eq!((v.block_size, v.num_blocks), (520, 32));
        assert_eq!((v.md_size, v.md_interleave, v.dif_type), (8, true, 1));
        assert_eq!((v.required_alignment, v.write_cache), (9, true));
        assert_eq!(v.optimal_io_boundary, 0);

        let ops = Arc::new(Plain);
        let own = mgr.register_bdev("vtest", v, Arc::clone(&ops)).unwrap();
        assert!(own_bdev(&mgr, "V", &*ops).is_some());
        assert!(own_bdev(&mgr, "V", &Plain).is_none());
        assert!(own_bdev(&mgr, "B", &*ops).is_none());

        // Another bdev's ops change nothing.
        resize_own(&mgr, "V", &Plain, 16);
        unregister_own(&mgr, "V", &Plain);
        assert_eq!(own.num_blocks(), 32);
        assert!(!own.is_removing());
        resize_own(&mgr, "V", &*ops, 16);
        assert_eq!(own.num_blocks(), 16);
        unregister_own(&mgr, "V", &*ops);
        assert!(mgr.get("V").is_none());
    }
}
