//! The RPCs every kernel-file module has alike (SPDK names and error
//! codes): `bdev_<module>_delete {name}` → `true` once the bdev is gone,
//! and `bdev_<module>_rescan {name}` → `true` after [`crate::rescan`];
//! both answer `-19` when there is no such bdev of the module, and rescan
//! `-16` for a shrink while the bdev is open. Handlers run on the thread
//! that polls the RPC server (the app thread).

use bdevkit::bdev::module::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, ErrorChain, MethodRegistry, RUNTIME};
use serde::{Deserialize, Serialize};

use crate::disk::KfileBdev;
use crate::Error;

/// `bdev_<module>_delete` and `bdev_<module>_rescan` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NameParams {
    /// Bdev name.
    pub name: String,
}

/// Registers `bdev_<module>_delete` and `bdev_<module>_rescan` for the
/// bdevs `B` of `module`.
///
/// # Errors
/// When a method of that name is already registered.
pub fn register_delete_rescan<B: KfileBdev>(
    reg: &MethodRegistry,
    mgr: &BdevManager,
    module: &'static str,
) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        &format!("bdev_{module}_delete"),
        RUNTIME,
        move |p: NameParams, resp| {
            crate::delete(&m, module, &p.name, move |r| {
                resp.respond_errno(r.map(|()| true), Error::errno);
            });
        },
    )?;
    let m = mgr.clone();
    let method = format!("bdev_{module}_rescan");
    reg.register_decoded(&method.clone(), RUNTIME, move |p: NameParams, resp| {
        let r = crate::rescan::<B>(&m, module, &p.name);
        if let Err(e) = &r {
            tracing::error!(bdev = p.name, error = %ErrorChain(e), "{method} failed");
        }
        resp.respond_errno(r.map(|()| true), Error::errno);
    })?;
    Ok(())
}
