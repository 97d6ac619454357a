//! The passthru module, its bdev, its channel and its I/O path.
//!
//! Read top to bottom: the module (configurations and examine), attaching
//! to a base, the bdev's operations, then the two functions of the I/O
//! path (`submit` and `child_done`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use bdevkit::bdev::{
    Bdev, BdevChannel, BdevDesc, BdevEvent, BdevIo, BdevManager, BdevModule, BdevOps, BdevProps,
    ClaimType, Done, IoStatus, IoType,
};
use bdevkit::error::BoxError;
use bdevkit::thread::{Thread, ThreadHandle};
use bdevkit::{Error, Result};
use parking_lot::Mutex;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::rpc::PassthruCreateParams;
use crate::{MODULE, NAMESPACE_UUID, PRODUCT_NAME};

// ---------------------------------------------------------------------------
// The module: configurations and examine
// ---------------------------------------------------------------------------

/// The passthru module: the configurations (`bdev_passthru_create` calls
/// still in force), whether or not their base exists yet.
///
/// The module never stores the [`BdevManager`]: the manager owns the
/// module, so that would be a reference cycle. Every hook gets the manager
/// as an argument instead.
#[derive(Debug, Default)]
pub struct PassthruModule {
    configs: Mutex<Vec<PassthruCreateParams>>,
}

impl BdevModule for PassthruModule {
    fn name(&self) -> &'static str {
        MODULE
    }

    /// Virtual bdev modules examine: that is how a passthru configured
    /// before its base attaches when the base registers.
    fn has_examine(&self) -> bool {
        true
    }

    /// Called for every new bdev, on the registering thread. Build every
    /// configured passthru whose base this is.
    fn examine_config(&self, mgr: &BdevManager, bdev: &Bdev) {
        // Copy the matches out: attaching registers a bdev, which examines
        // it, which may call back into this module. Never hold the lock
        // across that.
        let matches: Vec<PassthruCreateParams> = self
            .configs
            .lock()
            .iter()
            .filter(|c| names_bdev(bdev, &c.base_bdev_name) && mgr.get(&c.name).is_none())
            .cloned()
            .collect();
        for cfg in matches {
            if let Err(e) = attach(mgr, &cfg, bdev) {
                tracing::error!(bdev = %cfg.name, base = %bdev.name(), error = %e,
                    "cannot create passthru bdev");
            }
        }
    }

    /// One `bdev_passthru_create` per configuration, attached or waiting,
    /// so that a saved config recreates all of them in any order.
    fn config_json(&self, mgr: &BdevManager) -> Vec<Value> {
        self.configs
            .lock()
            .iter()
            .map(|c| {
                let mut p = c.clone();
                // The UUID the bdev actually got (generated or configured).
                if let Some(b) = mgr.get(&c.name).filter(|b| b.module_name() == MODULE) {
                    p.uuid = Some(b.uuid());
                }
                json!({"method": "bdev_passthru_create", "params": p})
            })
            .collect()
    }
}

impl PassthruModule {
    pub(crate) fn create(&self, mgr: &BdevManager, params: PassthruCreateParams) -> Result<String> {
        if params.name.is_empty() || params.base_bdev_name.is_empty() {
            return Err(Error::InvalidArg("names must not be empty".into()));
        }
        {
            let mut configs = self.configs.lock();
            if configs.iter().any(|c| c.name == params.name) {
                return Err(Error::Exists(params.name));
            }
            configs.push(params.clone());
        }
        let Some(base) = mgr.get(&params.base_bdev_name) else {
            tracing::info!(bdev = %params.name, base = %params.base_bdev_name,
                "passthru creation deferred until the base bdev appears");
            return Ok(params.name);
        };
        match attach(mgr, &params, &base) {
            Ok(_) => Ok(params.name),
            // The base is on its way out: like a missing base, wait for it.
            Err(Error::NotFound(_)) => Ok(params.name),
            Err(e) => {
                self.configs.lock().retain(|c| c.name != params.name);
                Err(e)
            }
        }
    }

    pub(crate) fn delete(
        &self,
        mgr: &BdevManager,
        name: &str,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        let had_config = {
            let mut configs = self.configs.lock();
            let before = configs.len();
            configs.retain(|c| c.name != name);
            configs.len() != before
        };
        let name2 = name.to_string();
        mgr.unregister_by_name(name, MODULE, move |r| match r {
            // A configuration still waiting for its base has no bdev.
            Err(Error::NotFound(_)) if had_config => done(Ok(())),
            Err(_) => done(Err(Error::NotFound(name2))),
            Ok(()) => done(Ok(())),
        });
    }
}

/// Whether `name` is `bdev`'s name or one of its aliases.
fn names_bdev(bdev: &Bdev, name: &str) -> bool {
    bdev.name() == name || bdev.aliases().iter().any(|a| a == name)
}

// ---------------------------------------------------------------------------
// Attaching to a base
// ---------------------------------------------------------------------------

/// Opens and claims `base`, then registers the passthru bdev on it.
fn attach(mgr: &BdevManager, cfg: &PassthruCreateParams, base: &Bdev) -> Result<Bdev> {
    // The event callback runs on this thread. It cannot hold the bdev
    // strongly (the bdev holds the descriptor that holds the callback), so
    // it finds the bdev through a weak reference set once the bdev exists.
    let me: Arc<OnceLock<Weak<PassthruBdev>>> = Arc::new(OnceLock::new());
    let me2 = Arc::clone(&me);
    let desc = mgr.open(base.name(), false, move |event| {
        if let Some(pt) = me2.get().and_then(Weak::upgrade) {
            pt.base_event(event);
        }
    })?;
    // exclusive_write: we become the base's only writer. Fails (EPERM) if
    // another module claimed it first. Closing `desc` releases the claim.
    desc.claim(ClaimType::ExclusiveWrite, MODULE)?;

    let props = props(cfg, base);
    let pt = Arc::new(PassthruBdev {
        name: cfg.name.clone(),
        base: base.clone(),
        base_desc: Mutex::new(Some(desc)),
        opener: Thread::current().map(|t| t.handle()),
        mgr: mgr.clone(),
        removing: AtomicBool::new(false),
    });
    let _ = me.set(Arc::downgrade(&pt));
    let bdev = mgr.register_bdev(MODULE, props, Arc::clone(&pt))?;
    tracing::info!(bdev = %cfg.name, base = %base.name(), "passthru bdev created");
    // A removal that started before the callback could see us.
    if base.is_removing() {
        pt.base_event(BdevEvent::Remove);
    }
    Ok(bdev)
}

/// The passthru bdev looks like its base: same geometry, metadata layout
/// and alignment needs.
fn props(cfg: &PassthruCreateParams, base: &Bdev) -> BdevProps {
    let b = base.props();
    let mut p = BdevProps::new(
        &cfg.name,
        PRODUCT_NAME,
        base.block_size(),
        base.num_blocks(),
    );
    p.uuid = Some(
        cfg.uuid
            .unwrap_or_else(|| Uuid::new_v5(&NAMESPACE_UUID, base.uuid().as_bytes())),
    );
    p.phys_block_size = b.phys_block_size;
    p.required_alignment = b.required_alignment;
    p.optimal_io_boundary = b.optimal_io_boundary;
    p.write_cache = b.write_cache;
    p.md_size = b.md_size;
    p.md_interleave = b.md_interleave;
    p.dif_type = b.dif_type;
    p.dif_is_head_of_md = b.dif_is_head_of_md;
    p.dif_pi_format = b.dif_pi_format;
    p
}

// ---------------------------------------------------------------------------
// The bdev
// ---------------------------------------------------------------------------

/// One passthru bdev.
///
/// It holds a [`BdevManager`] to unregister itself when its base goes.
/// That is a reference cycle (the manager's registry holds this bdev) which
/// unregistration breaks: the registry drops the bdev when it is gone.
pub struct PassthruBdev {
    name: String,
    base: Bdev,
    /// Taken (closed) in `destruct`.
    base_desc: Mutex<Option<BdevDesc>>,
    /// The thread that opened the base, where it is closed again.
    opener: Option<ThreadHandle>,
    mgr: BdevManager,
    /// Set when the base is going away: new I/O fails from then on.
    removing: AtomicBool,
}

impl std::fmt::Debug for PassthruBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassthruBdev")
            .field("name", &self.name)
            .field("base", &self.base.name())
            .finish_non_exhaustive()
    }
}

impl PassthruBdev {
    /// The base bdev.
    #[must_use]
    pub fn base(&self) -> &Bdev {
        &self.base
    }

    /// This bdev as registered (absent once unregistered).
    fn own_bdev(&self) -> Option<Bdev> {
        self.mgr.get(&self.name).filter(|b| {
            b.ops_as::<PassthruBdev>()
                .is_some_and(|o| std::ptr::eq(Arc::as_ptr(&o), self))
        })
    }

    /// Events of the base, on the thread that opened it.
    fn base_event(&self, event: BdevEvent) {
        match event {
            BdevEvent::Remove => {
                if self.removing.swap(true, Ordering::AcqRel) {
                    return;
                }
                tracing::info!(bdev = %self.name, base = %self.base.name(),
                    "base bdev removed; unregistering passthru bdev");
                // Our openers get a remove event; once they close and our
                // channels are gone, `destruct` closes the base.
                if let Some(me) = self.own_bdev() {
                    self.mgr.unregister(&me, || {});
                }
            }
            BdevEvent::Resize => {
                if let Some(me) = self.own_bdev() {
                    me.notify_resize(self.base.num_blocks());
                }
            }
            BdevEvent::MediaManagement => {}
        }
    }
}

/// Per-thread state: this thread's channel to the base.
#[derive(Debug)]
pub struct PassthruChannel {
    base: BdevChannel,
}

impl BdevOps for PassthruBdev {
    type Channel = PassthruChannel;

    /// Called on each thread that first uses the bdev: take this thread's
    /// channel to the base. It is released (on this thread) when our
    /// channel is destroyed.
    fn create_channel(&self) -> std::result::Result<PassthruChannel, BoxError> {
        let desc = self.base_desc.lock();
        let desc = desc.as_ref().ok_or("passthru base bdev is closed")?;
        Ok(PassthruChannel {
            base: desc.get_io_channel()?,
        })
    }

    /// Forward `io` to the base as a child I/O.
    #[inline]
    fn submit(&self, ch: &PassthruChannel, io: BdevIo) {
        if self.removing.load(Ordering::Relaxed) {
            // The base is going away: fail new I/O, later (never complete
            // inside `submit`).
            return io.complete_deferred(IoStatus::Aborted);
        }
        // A child from this thread's pool. None = pool empty: complete with
        // NoMem and the bdev layer retries the I/O when one is freed.
        let Some(mut child) = ch.base.alloc_io() else {
            return io.complete_deferred(IoStatus::NoMem);
        };
        // Same request (type, range, data segments, NVMe command), same
        // tag (so an abort forwarded below finds its target), and a plain
        // function as completion: no allocation.
        child
            .copy_request_from(&io)
            .set_tag(io.tag())
            .on_done_fn(child_done);
        // The parent travels with the child: it owns the data buffers the
        // child's segments point into, and `child_done` needs it.
        child.set_parent(io);
        if let Err(e) = ch.base.submit(child) {
            // Rejected before reaching the base (e.g. the base shrank).
            let mut child = e.io;
            if let Some(parent) = child.take_parent() {
                parent.complete_deferred(IoStatus::Errno(e.error.errno()));
            }
        }
    }

    /// Whatever the base serves (write zeroes included: the base's layer
    /// emulates it if its module lacks it).
    fn io_type_supported(&self, io_type: IoType) -> bool {
        self.base.supports(io_type)
    }

    /// Called once every opener closed and every channel is gone: close
    /// the base (releasing the claim) on the thread that opened it.
    fn destruct(&self, done: Done) {
        let desc = self.base_desc.lock().take();
        let close = move || {
            drop(desc);
            done.done();
        };
        match &self.opener {
            Some(t) => {
                // If the thread is gone the message is dropped, which
                // drops (closes) the descriptor and signals `done` too.
                let _ = t.send_msg(close);
            }
            None => close(),
        }
    }

    fn dump_info_json(&self) -> Value {
        json!({"passthru": {"name": self.name, "base_bdev_name": self.base.name()}})
    }
}

/// Completion of a child: complete the parent with the child's status.
/// Runs on the submitting thread; the child returns to the pool when it
/// drops at the end.
fn child_done(mut child: BdevIo) {
    if let Some(parent) = child.take_parent() {
        parent.complete_from(&child);
    }
}
