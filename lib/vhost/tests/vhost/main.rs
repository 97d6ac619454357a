//! The vhost-user-blk target against rings driven from the test (no VM):
//! a test frontend plays QEMU over the controller's socket (`common`).
//! One test binary, one link.

#[cfg(test)]
mod common;
#[cfg(test)]
mod data;
#[cfg(test)]
mod fuzz;
