//! The target's TLS keys (NVMe/TCP with TLS 1.3 and PSK, SPDK's
//! `secure_channel` listeners): the retained PSK of each (host,
//! subsystem) pair given a `psk` at `nvmf_subsystem_add_host`, and the
//! one server config every secure listener's connections use. The keys
//! come from the app's keyring by name (SPDK's `psk` param, v24.01 on);
//! key material stays in `bdevkit_nvme_tls` (wiped when dropped, never
//! printed).

use std::sync::{Arc, OnceLock};

use bdevkit::bdev::BdevManager;
use bdevkit_keyring::Keyring;
use bdevkit_nvme_tls::{PskTable, ServerConfig};

use crate::error::{Error, Result};

/// The host PSKs and the server config over them.
#[derive(Debug, Default)]
pub(crate) struct TlsKeys {
    table: Arc<PskTable>,
    server: OnceLock<Option<ServerConfig>>,
}

impl TlsKeys {
    /// Reads key `name` from the keyring of `mgr`'s app and keeps its
    /// retained PSK for `hostnqn` on `subnqn`. SPDK's refusals: no such
    /// key, not a TLS PSK, a second PSK for the same identity.
    pub fn insert(&self, mgr: &BdevManager, hostnqn: &str, subnqn: &str, name: &str) -> Result<()> {
        let bad = |why: String| Error::Psk {
            key: name.into(),
            why,
        };
        let ring = mgr
            .service::<Keyring>()
            .ok_or_else(|| bad("the app has no keyring".into()))?;
        let key = ring
            .get(name)
            .ok_or_else(|| bad("no such key in the keyring".into()))?;
        let psk = key.tls_psk().map_err(|e| bad(e.to_string()))?;
        self.table
            .insert(hostnqn, subnqn, &psk)
            .map_err(|e| bad(e.to_string()))
    }

    /// Forgets the PSK of `hostnqn` on `subnqn` (if any).
    pub fn remove(&self, hostnqn: &str, subnqn: &str) {
        self.table.remove(hostnqn, subnqn);
    }

    /// The config secure listeners accept with; `None` (logged once)
    /// when OpenSSL cannot make one.
    pub fn server(&self) -> Option<&ServerConfig> {
        self.server
            .get_or_init(|| {
                let store: Arc<dyn bdevkit_nvme_tls::PskStore> = self.table.clone();
                ServerConfig::new(store)
                    .map_err(|e| tracing::error!(error = %e, "no TLS server config"))
                    .ok()
            })
            .as_ref()
    }
}
