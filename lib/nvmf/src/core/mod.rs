//! The transport-neutral core of the target's data path: what a command
//! means, whatever transport carried it. (Subsystems, controllers, the
//! admin commands and the Connect rules are beside it: `subsystem.rs`,
//! `ctrlr.rs`, `admin.rs`, `target.rs`.)
//!
//! * `qpair`: a queue pair ([`qpair::Qpair`], generic over its transport
//!   half, [`qpair::QpTransport`]) and its service step; `close` (closing
//!   and draining); `respond` (answers, and the data to move, handed to
//!   the transport).
//! * `dispatch`: commands as they arrive, fabrics (Connect, properties)
//!   and admin; `auth`: DH-HMAC-CHAP on a queue; `exec_io`: I/O on bdevs (checks, data buffers, DSM);
//!   `fused`: fused Compare and Write.
//! * `slot`: the request slots and their state machine; `pool`: a
//!   transport's shared data buffers and each poll group's cache in front
//!   of them; `view`: a poll group's namespaces with its bdev channels.
//! * `group`: the poll group of a thread, polling each transport's side
//!   of it; `conns`: a transport poll group's table of connections.
//!
//! Steady state allocates nothing per command: slots, their in-capsule
//! buffers and the transport's queues are sized at Connect; larger
//! transfers borrow a shared buffer, allocated once.

pub(crate) mod auth;
pub(crate) mod auth_exec;
pub(crate) mod close;
pub(crate) mod conns;
pub(crate) mod dispatch;
pub(crate) mod exec_io;
pub(crate) mod fused;
pub(crate) mod group;
pub(crate) mod pool;
pub(crate) mod qpair;
pub(crate) mod respond;
pub(crate) mod slot;
pub(crate) mod view;
