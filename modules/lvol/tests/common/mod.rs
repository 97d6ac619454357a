//! Set-up shared by the lvol module's integration tests.

use bdevkit::bdev::BdevManager;
use bdevkit_lvol::{CreateLvstore, LvolOptions, LvsOptions, LvsRef};

/// One MiB.
pub const MIB: u64 = 1 << 20;

/// A store `lvs` on bdev `base` with `cluster` byte clusters; its UUID.
pub async fn store(mgr: &BdevManager, base: &str, lvs: &str, cluster: u32) -> String {
    let args = CreateLvstore {
        bdev_name: base.into(),
        opts: LvsOptions {
            cluster_size: cluster,
            ..LvsOptions::new(lvs)
        },
        md_page_size: 0,
    };
    bdevkit_lvol::create_lvstore(mgr, args)
        .await
        .unwrap()
        .to_string()
}

/// An lvol `name` of `mib` MiB in store `lvs`, thin or thick; its bdev's
/// name.
pub async fn lvol(mgr: &BdevManager, lvs: &str, name: &str, mib: u64, thin: bool) -> String {
    let o = LvolOptions {
        name: name.into(),
        size_bytes: mib * MIB,
        thin,
        clear_method: bdevkit_blobstore::ClearMethod::Default,
        uuid: None,
    };
    bdevkit_lvol::create_lvol(mgr, &LvsRef::Name(lvs.into()), o)
        .await
        .unwrap()
}
