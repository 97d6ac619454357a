//! DH-HMAC-CHAP of NVMe/TCP controllers: the keys of
//! `bdev_nvme_attach_controller` (`dhchap_key`, `dhchap_ctrlr_key`:
//! keyring key names) with the hashes and groups of
//! `bdev_nvme_set_options` (`dhchap_digests`, `dhchap_dhgroups`), and
//! `bdev_nvme_set_keys`: new keys, then every path of the controller
//! resets, so that each queue authenticates again with them (SPDK
//! re-authenticates the queues in place; the outcome is the same).
//! SPDK's errors: `-ENOKEY` for a key that is not in the keyring (or not
//! a DH-HMAC-CHAP key), `-ENODEV` for no such controller.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bdevkit::bdev::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, RpcError, RUNTIME};
use bdevkit_nvme_auth::{parse_groups, parse_hashes, Secret};
use bdevkit_nvme_driver::Dhchap;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// `bdev_nvme_set_keys` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetKeysParams {
    /// Controller name.
    pub name: String,
    /// The host's key (a keyring key name; absent: stop authenticating).
    #[serde(default)]
    pub dhchap_key: Option<String>,
    /// The controller's key.
    #[serde(default)]
    pub dhchap_ctrlr_key: Option<String>,
}

/// The DH-HMAC-CHAP secret named `name` in the app's keyring.
fn secret(mgr: &BdevManager, name: &str, what: &str) -> Result<Secret, RpcError> {
    let key = mgr
        .service::<bdevkit_keyring::Keyring>()
        .and_then(|k| k.get(name))
        .ok_or_else(|| {
            tracing::error!(key = name, "Could not load {what}");
            RpcError::from_errno(libc::ENOKEY)
        })?;
    key.secret().map_err(|e| {
        tracing::error!(key = name, error = %e, "Could not load {what}");
        RpcError::from_errno(libc::ENOKEY)
    })
}

/// The keys named `key` and `ctrlr_key`, with the module's digests and
/// groups; `None` when neither is given.
///
/// # Errors
/// `-ENOKEY` (see the file's doc), `-EINVAL` for a controller key without
/// a host key.
pub fn dhchap(
    mgr: &BdevManager,
    key: Option<&str>,
    ctrlr_key: Option<&str>,
) -> Result<Option<Box<Dhchap>>, RpcError> {
    let Some(key) = key else {
        if ctrlr_key.is_some() {
            tracing::error!("dhchap_ctrlr_key requires dhchap_key");
            return Err(RpcError::from_errno(libc::EINVAL));
        }
        return Ok(None);
    };
    let k = secret(mgr, key, "DH-HMAC-CHAP key")?;
    let c = ctrlr_key
        .map(|n| secret(mgr, n, "DH-HMAC-CHAP controller key").map(|s| (n.to_string(), s)))
        .transpose()?;
    let o = crate::options(mgr).unwrap_or_default();
    let bad = |e: bdevkit_nvme_auth::Error| {
        tracing::error!(error = %e, "bad dhchap_digests / dhchap_dhgroups");
        RpcError::from_errno(libc::EINVAL)
    };
    Ok(Some(Box::new(Dhchap {
        key: (key.to_string(), k),
        ctrlr_key: c,
        hashes: parse_hashes(o.dhchap_digests.iter().map(String::as_str)).map_err(bad)?,
        groups: parse_groups(o.dhchap_dhgroups.iter().map(String::as_str)).map_err(bad)?,
    })))
}

/// Registers `bdev_nvme_set_keys`.
pub(crate) fn register(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_set_keys",
        RUNTIME,
        move |p: SetKeysParams, resp| {
            let d = match dhchap(&m, p.dhchap_key.as_deref(), p.dhchap_ctrlr_key.as_deref()) {
                Ok(d) => d,
                Err(e) => return resp.err(e),
            };
            let paths: Vec<_> = crate::controller_paths(&m, &p.name)
                .into_iter()
                .filter(|c| c.driver().transport().tcp().is_some())
                .collect();
            if paths.is_empty() {
                tracing::error!(ctrlr = %p.name, "Could not find bdev_ctrlr");
                return resp.err(RpcError::from_errno(libc::ENODEV));
            }
            let left = Arc::new(AtomicUsize::new(paths.len()));
            let failed = Arc::new(AtomicBool::new(false));
            let resp = Arc::new(Mutex::new(Some(resp)));
            for c in paths {
                if let Some(t) = c.driver().transport().tcp() {
                    t.set_dhchap(d.clone());
                }
                let (left, failed, resp) = (left.clone(), failed.clone(), resp.clone());
                let name = p.name.clone();
                c.reset(Box::new(move |r| {
                    if let Err(e) = r {
                        tracing::error!(ctrlr = %name, error = %e, "re-authentication failed");
                        failed.store(true, Ordering::Release);
                    }
                    if left.fetch_sub(1, Ordering::AcqRel) != 1 {
                        return;
                    }
                    if let Some(resp) = resp.lock().take() {
                        if failed.load(Ordering::Acquire) {
                            resp.err(RpcError::from_errno(libc::EACCES));
                        } else {
                            resp.ok(json!(true));
                        }
                    }
                }));
            }
        },
    )
}
