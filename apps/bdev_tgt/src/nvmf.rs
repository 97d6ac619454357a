//! The `nvmf` framework subsystem: bdev_tgt's NVMe-oF target
//! (`bdevkit_nvmf::Target`), created at start with its RPCs, started with
//! the framework (poll groups, acceptor), saved as SPDK's `nvmf` config
//! section, and stopped before the bdevs go.

use std::sync::Arc;

use bdevkit::error::BoxError;
use bdevkit_app::{AppSubsystem, SubsystemCtx, SubsystemDef};
use bdevkit_nvmf::Target;
use serde_json::Value;

/// The subsystem definition bdev_tgt links (`nvmf` in
/// [`bdevkit_app::SUBSYSTEMS`], after `bdev`).
pub const NVMF: SubsystemDef = SubsystemDef {
    name: "nvmf",
    create,
};

struct Nvmf(Target);

fn create(ctx: &SubsystemCtx<'_>) -> Result<Arc<dyn AppSubsystem>, BoxError> {
    let t = Target::new(ctx.runtime.clone(), ctx.mgr.clone());
    bdevkit_nvmf::rpc::register_rpcs(ctx.registry, &t)?;
    Ok(Arc::new(Nvmf(t)))
}

impl AppSubsystem for Nvmf {
    fn init(&self) -> Result<(), BoxError> {
        self.0.start().map_err(|e| Box::new(e) as BoxError)
    }

    fn config_json(&self) -> Option<Vec<Value>> {
        Some(self.0.config_json())
    }

    fn fini(&self, done: Box<dyn FnOnce() + Send>) {
        self.0.shutdown(done);
    }
}
