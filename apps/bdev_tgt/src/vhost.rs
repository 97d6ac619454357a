//! The `vhost_blk` framework subsystem: bdev_tgt's vhost-user-blk target
//! (`bdevkit_vhost::VhostTarget`), created at start with its RPCs (its
//! sockets in the `-S` directory), saved as SPDK's `vhost_blk` config
//! section, and stopped before the bdevs go (frontends disconnected,
//! sockets removed).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bdevkit::error::BoxError;
use bdevkit_app::{AppSubsystem, SubsystemCtx, SubsystemDef};
use bdevkit_vhost::VhostTarget;
use serde_json::Value;

/// The subsystem definition bdev_tgt links (`vhost_blk` in
/// [`bdevkit_app::SUBSYSTEMS`], after `bdev`).
pub const VHOST_BLK: SubsystemDef = SubsystemDef {
    name: "vhost_blk",
    create,
};

/// The socket directory of `-S`, set by `main` before the app starts
/// (the subsystem is created by a plain `fn`).
pub static SOCKET_DIR: OnceLock<PathBuf> = OnceLock::new();

struct VhostBlk(VhostTarget);

fn create(ctx: &SubsystemCtx<'_>) -> Result<Arc<dyn AppSubsystem>, BoxError> {
    let t = VhostTarget::new(ctx.runtime.clone(), ctx.mgr.clone());
    if let Some(dir) = SOCKET_DIR.get() {
        t.set_socket_dir(dir);
    }
    bdevkit_vhost::rpc::register_rpcs(ctx.registry, &t)?;
    Ok(Arc::new(VhostBlk(t)))
}

impl AppSubsystem for VhostBlk {
    fn init(&self) -> Result<(), BoxError> {
        Ok(())
    }

    fn config_json(&self) -> Option<Vec<Value>> {
        Some(self.0.config_json())
    }

    fn fini(&self, done: Box<dyn FnOnce() + Send>) {
        self.0.shutdown(done);
    }
}
