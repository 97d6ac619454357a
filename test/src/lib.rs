//! Test support for bdevkit.
//!
//! * [`daemon`]: start the real `bdev_tgt` on a private socket, call it
//!   with our client, `spdk-rpc` or `bdev_rpc`, stop it with a signal.
#![warn(missing_docs)]

pub mod daemon;
