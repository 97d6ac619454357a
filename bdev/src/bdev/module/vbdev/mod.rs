//! Building blocks for virtual bdev modules: what every bdev stacked on
//! another bdev (passthru, delay, error, split) does the same way.
//!
//! * [`VbdevConfigs`]: the configurations a module keeps (the
//!   `bdev_<module>_create` calls still in force), attached or waiting for
//!   their base: creation, examine, deletion and `save_config`. What a
//!   configuration must tell it (and how it attaches) is the small trait
//!   [`VbdevConfig`]; [`VbdevModule`] is a whole module made of them, its
//!   [`super::BdevModule`] included.
//! * [`BaseBdev`]: the base, opened and claimed `exclusive_write`, its
//!   events delivered to the virtual bdev ([`BaseEvents`], [`BaseLink`]),
//!   a per-thread channel to it, and closing it again on the thread that
//!   opened it. A bdev covering its whole base implements [`StackedBdev`]
//!   and gets its event handling (unregister on removal, follow a resize).
//! * [`forward`] and [`complete_parent`]: the I/O path, sending an I/O to
//!   the base as a child `BdevIo`.
//! * [`props_over`], [`own_bdev`], [`unregister_own`] and [`resize_own`]:
//!   the properties of a bdev stacked on a base, and how a virtual bdev
//!   finds its own registered bdev.
//!
//! `modules/passthru` uses all of it and explains each piece where it is
//! used; `doc/writing-a-module.md` walks through it. None of this is
//! required: a module with other needs (raid and its many members) uses
//! the plain bdev API instead.
#![forbid(unsafe_code)]

mod base;
mod configs;
mod forward;

pub use base::{
    own_bdev, part_uuid, props_over, resize_own, unregister_own, BaseBdev, BaseEvents, BaseLink,
    StackedBdev,
};
pub use configs::{VbdevConfig, VbdevConfigs, VbdevModule};
pub use forward::{complete_parent, forward};

#[cfg(test)]
mod tests;
