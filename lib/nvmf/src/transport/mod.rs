//! The transport seam: what a transport implements so that the target
//! serves hosts over it (SPDK's `spdk_nvmf_transport_ops`). The core
//! (subsystems, controllers, command execution, request slots, buffers,
//! poll groups) owns what a command means; a transport owns how its bytes
//! move. NVMe/TCP (`tcp/`) is the one implementation today.
//!
//! A transport comes in four pieces, from the control path to the data
//! path:
//!
//! 1. [`TransportDef`], its type: a name (`nvmf_create_transport -t
//!    NAME`), its default options, `create`, and its discovery log entry.
//!    The registry (`registry.rs`, `TRANSPORTS`) lists every type, one
//!    line each; the RPCs and listen addresses find a type there.
//! 2. [`Transport`], one created transport (`Send + Sync`, called on the
//!    app thread): listening addresses and accepting connections. The
//!    core polls `accept` from a poller of its own on the app thread and
//!    hands each new connection to a poll group, round robin.
//! 3. [`TransportPollGroup`], the transport's side of one poll group (a
//!    lightweight thread; made there by `poll_group_create` when the
//!    group gets its first connection of this transport): it takes the
//!    connections the core hands it and polls them, one call per poll of
//!    the group, and shows them to the core as a [`QpairSet`]. The core's
//!    `Conns` is a ready-made set.
//! 4. `QpTransport` (`core/qpair.rs`, beside the queue pair it serves:
//!    its methods take it), its half of each queue pair: receive into the
//!    request slots, send responses and data, fetch host data, read the
//!    SGL. The core's queue pair is generic over it, so the I/O path has
//!    no dynamic dispatch: one virtual call per poll group poll (3), none
//!    per command.
//!
//! A new transport is a folder with these four implemented, and one line
//! in `TRANSPORTS`.

#[cfg(test)]
mod loopback;
mod registry;

use std::any::Any;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;

pub(crate) use registry::find;

use crate::addr::{DiscoverFn, ListenAddr};
use crate::core::pool::GroupBufs;
use crate::core::view::Env;
use crate::ctrlr::Controller;
use crate::error::Result;
use crate::opts::TransportOpts;

/// A connection a transport accepted, on its way to a poll group (the
/// transport's own type inside: the same transport's poll group takes it
/// back out, [`TransportPollGroup::add_qpair`]).
pub(crate) type Accepted = Box<dyn Any + Send>;

/// A transport type, as the registry lists it.
pub(crate) struct TransportDef {
    /// The type's name, as `trtype` spells it (any case matches):
    /// `TCP`. It names the transport in listen addresses, JSON and logs.
    pub name: &'static str,
    /// The type's default options (SPDK's `opts_init`), which
    /// `nvmf_create_transport` params change; `trtype` is `name`.
    pub opts_init: fn() -> TransportOpts,
    /// Checks the type's own options and makes the transport
    /// (`nvmf_create_transport`, on the app thread). It listens nowhere
    /// yet.
    pub create: fn(&TransportOpts) -> Result<Arc<dyn Transport>>,
    /// The discovery log entry of one of its listeners (SPDK's
    /// `listener_discover`).
    pub listener_discover: DiscoverFn,
}

impl std::fmt::Debug for TransportDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportDef")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// One created transport: the control path (SPDK's transport `listen`,
/// `stop_listen`, `accept`, `poll_group_create`, `destroy`). Every method
/// runs on the app thread, except `poll_group_create` (on the poll
/// group's thread); none may block. All are required.
pub(crate) trait Transport: Send + Sync + std::fmt::Debug {
    /// Starts listening on `addr`: the first subsystem listener on that
    /// address (the core counts the others). An error answers the RPC.
    fn listen(&self, addr: &ListenAddr) -> Result<()>;

    /// Stops listening on `addr` (its last subsystem listener went).
    /// Connections made through it stay; the core closes those that lost
    /// access.
    fn stop_listen(&self, addr: &ListenAddr);

    /// A file descriptor that becomes readable when `accept` has work, for
    /// interrupt mode (the core adds it to the app thread's wake-up set
    /// when the transport is created); `None`: the core polls `accept`
    /// every `acceptor_poll_rate`.
    fn accept_fd(&self) -> Option<RawFd>;

    /// Takes the connections waiting on the listeners, without blocking:
    /// each goes to `new_qpair`, which hands it to a poll group's
    /// [`TransportPollGroup::add_qpair`]. Returns how many there were.
    fn accept(&self, new_qpair: &mut dyn FnMut(Accepted)) -> usize;

    /// This transport's side of a poll group, on that group's thread.
    fn poll_group_create(&self) -> std::io::Result<Box<dyn TransportPollGroup>>;

    /// Stops listening everywhere (the target shuts down; SPDK's
    /// `destroy`). The poll groups close the connections.
    fn shutdown(&self);
}

/// A transport's side of one poll group (SPDK's transport poll group):
/// the group's connections of that transport. It lives on the group's
/// thread, and every method runs there; none may block. All are required.
pub(crate) trait TransportPollGroup: std::fmt::Debug {
    /// A file descriptor that becomes readable when `poll` has work, for
    /// interrupt mode (the core adds it to the thread's wake-up set);
    /// `None`: the group polls without sleeping.
    fn interrupt_fd(&self) -> Option<RawFd>;

    /// Takes a connection this transport's `accept` made (sent over by
    /// the core), with the transport's options and the group's side of
    /// its buffer pool, and starts serving it. One it cannot use (the
    /// peer went) is dropped.
    fn add_qpair(&self, q: Accepted, env: &Env, opts: &TransportOpts, bufs: Rc<GroupBufs>);

    /// One poll: what the connections have to do (events, then each
    /// queue pair's service step, [`crate::core::qpair::Qpair::service`]);
    /// the connections that finished go. Called by the group's poller, one
    /// call per poll; returns whether it did anything.
    fn poll(&self, env: &Env) -> bool;

    /// Its connections, for what the core does to all of them.
    fn qpairs(&self) -> &dyn QpairSet;
}

/// The connections of one transport poll group, as the core handles them
/// (keep alive, revoking access, listing, stopping). On the group's
/// thread. The core's `Conns<T>` implements it for any `QpTransport`.
pub(crate) trait QpairSet {
    /// The periodic checks of every connection (keep alive expiry, no
    /// Connect in time): the group's housekeeping timer.
    fn housekeeping(&self, now: u64);

    /// Closes the connections whose controller (or, unconnected, whose
    /// listener) matches `pred`.
    fn disconnect_if(
        &self,
        pred: &dyn Fn(Option<&Controller>, &ListenAddr) -> bool,
        why: &'static str,
    );

    /// Appends the `nvmf_subsystem_get_qpairs` objects of subsystem `id`
    /// (`thread`: the group's thread name).
    fn qpairs_json(&self, id: u32, thread: &str, out: &mut Vec<Value>);

    /// Connections open now.
    fn count(&self) -> usize;

    /// Closes every connection (their I/O drains).
    fn stop(&self);
}
