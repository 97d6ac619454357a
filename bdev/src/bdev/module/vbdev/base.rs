//! The base of a virtual bdev: [`BaseBdev`] (opened and claimed, with a
//! per-thread channel, closed again on the thread that opened it), its
//! events ([`BaseEvents`], [`BaseLink`]), and how a virtual bdev finds its
//! own registered bdev ([`own_bdev`], [`unregister_own`], [`resize_own`])
//! and takes its properties from the base ([`props_over`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::bdev::bdev::Bdev;
use crate::bdev::channel::BdevChannel;
use crate::bdev::desc::BdevDesc;
use crate::bdev::manager::BdevManager;
use crate::bdev::module::ops::{BdevOps, Done};
use crate::bdev::types::{BdevEvent, BdevProps, ClaimType};
use crate::error::{BoxError, Result};
use crate::thread::{IoDevice, Thread, ThreadHandle};

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
        BaseBdev::open_claimed(mgr, base, module, ClaimType::ExclusiveWrite)
    }

    /// [`BaseBdev::open`] with another kind of claim: `read_many_write_none`
    /// for a base the module only reads (an lvol's external snapshot),
    /// which other readers may share.
    pub fn open_claimed<T: BaseEvents>(
        mgr: &BdevManager,
        base: &Bdev,
        module: &'static str,
        claim: ClaimType,
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
        desc.claim(claim, module)?;
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

    /// [`BaseBdev::close`], then unregisters `device` (the virtual bdev's
    /// own per-thread state, for its control path), on the thread that
    /// opened the base, then signals `done`: `destruct` of a virtual bdev
    /// with an io_device of its own (delay, error).
    pub fn close_with_device<T: 'static>(&self, device: IoDevice<T>, done: Done) {
        self.close(move || {
            device.unregister(|| {});
            done.done();
        });
    }

    /// Closes the base (releasing the claim) on the thread that opened it,
    /// then runs `then` there. Call from `destruct`, once every channel of
    /// the virtual bdev is gone. If that thread has exited, the message is
    /// dropped, which closes the base too and drops `then` (a [`Done`]
    /// inside signals on drop).
    ///
    /// [`Done`]: crate::bdev::module::Done
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

/// Properties of a bdev called `name`, `num_blocks` long, stacked on
/// `base`: the base's block size, physical block size, alignment need,
/// write cache, metadata/DIF layout and NUMA node (SPDK's passthru and
/// delay bdevs and its bdev parts, split and error, copy the NUMA node, so
/// `bdev_get_bdevs` shows the base's `numa_id` on them). Not its
/// `optimal_io_boundary`: a
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
    p.numa_id = b.numa_id;
    p
}

/// SPDK's namespace of part UUIDs (`BDEV_PART_NAMESPACE_UUID`,
/// lib/bdev/part.c).
const PART_NAMESPACE_UUID: uuid::Uuid =
    uuid::Uuid::from_u128(0x976b_899e_3e1e_4d71_ab69_c2b0_8e9d_f8b8);

/// The UUID SPDK's `spdk_bdev_part_construct` gives a part (a split part,
/// an error bdev) of `base` covering `num_blocks` blocks from
/// `offset_blocks`: v5 in SPDK's part namespace of the base's UUID bytes
/// followed by the two numbers as little-endian `u64`s (SPDK hashes that
/// struct in memory: x86-64 and aarch64 are little-endian), so the same
/// config names the same bdevs in both.
#[must_use]
pub fn part_uuid(base: uuid::Uuid, offset_blocks: u64, num_blocks: u64) -> uuid::Uuid {
    let mut name = [0u8; 32];
    name[..16].copy_from_slice(base.as_bytes());
    name[16..24].copy_from_slice(&offset_blocks.to_le_bytes());
    name[24..].copy_from_slice(&num_blocks.to_le_bytes());
    uuid::Uuid::new_v5(&PART_NAMESPACE_UUID, &name)
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
