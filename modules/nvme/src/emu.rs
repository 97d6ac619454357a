//! Emulated controllers (`bdev_nvme_emu_create`): the driver's in-process
//! controller, kept by the module instance by name so that an attach with
//! `traddr` `emu:NAME` finds it. Each bdev manager has its own list.

use std::collections::HashMap;
use std::sync::Arc;

use bdevkit_nvme_driver::emu::{EmuController, EmuKind, EmuNamespace, EmuOptions};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One namespace of `bdev_nvme_emu_create`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmuNsParams {
    /// Namespace id.
    pub nsid: u32,
    /// `ram` or `null`.
    pub kind: String,
    /// Block size (512 or 4096).
    pub block_size: u32,
    /// Blocks.
    pub num_blocks: u64,
}

/// `bdev_nvme_emu_create` params (ours).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmuCreateParams {
    /// Name; attach it with `traddr` `emu:NAME`.
    pub name: String,
    /// Namespaces.
    pub namespaces: Vec<EmuNsParams>,
    /// Serial number.
    #[serde(default)]
    pub serial: Option<String>,
    /// Report SGLs (default true).
    #[serde(default)]
    pub sgl: Option<bool>,
    /// Spin instead of parking when idle (benchmarks).
    #[serde(default)]
    pub spin: bool,
    /// Pin the controller thread to this CPU.
    #[serde(default)]
    pub cpu: Option<usize>,
    /// No controller thread: the controller runs inside the driver's
    /// register and doorbell writes (`spin` and `cpu` do not apply).
    #[serde(default)]
    pub inline: bool,
}

impl EmuCreateParams {
    /// The controller options these params ask for (checked).
    pub fn to_options(&self) -> Result<EmuOptions> {
        let mut namespaces = Vec::new();
        for n in &self.namespaces {
            let kind = match n.kind.as_str() {
                "ram" => EmuKind::Ram,
                "null" => EmuKind::Null,
                k => return Err(Error::InvalidArg(format!("namespace kind {k}"))),
            };
            if n.block_size != 512 && n.block_size != 4096 {
                return Err(Error::InvalidArg("block_size must be 512 or 4096".into()));
            }
            namespaces.push(EmuNamespace {
                nsid: n.nsid,
                kind,
                block_size: n.block_size,
                num_blocks: n.num_blocks,
            });
        }
        let mut o = EmuOptions {
            namespaces,
            spin: self.spin,
            cpu: self.cpu,
            ..EmuOptions::default()
        };
        if let Some(s) = &self.serial {
            o.serial.clone_from(s);
        }
        if let Some(s) = self.sgl {
            o.sgl = s;
        }
        Ok(o)
    }
}

/// The emulated controllers of one module instance, by name.
#[derive(Debug, Default)]
pub(crate) struct EmuRegistry {
    map: Mutex<HashMap<String, Arc<EmuController>>>,
}

/// `emu:NAME` or `NAME` → `NAME`.
fn bare(name: &str) -> &str {
    name.strip_prefix("emu:").unwrap_or(name)
}

impl EmuRegistry {
    /// Starts controller `name` and keeps it; `inline`: without a thread,
    /// run inside the driver's register and doorbell writes.
    pub(crate) fn create(
        &self,
        name: &str,
        opts: EmuOptions,
        inline: bool,
    ) -> Result<Arc<EmuController>> {
        let mut m = self.map.lock();
        if m.contains_key(name) {
            return Err(Error::Exists(format!("emulated controller {name} exists")));
        }
        let c = if inline {
            EmuController::start_inline(name, opts)
        } else {
            EmuController::start(name, opts)
        };
        let c = Arc::new(c.map_err(Error::Driver)?);
        m.insert(name.to_string(), Arc::clone(&c));
        Ok(c)
    }

    /// Controller `name` (`emu:NAME` or `NAME`).
    pub(crate) fn lookup(&self, name: &str) -> Option<Arc<EmuController>> {
        self.map.lock().get(bare(name)).cloned()
    }

    /// Forgets controller `name`; it stops when no attached controller
    /// uses it any more.
    pub(crate) fn destroy(&self, name: &str) -> bool {
        self.map.lock().remove(bare(name)).is_some()
    }

    /// Forgets them all (module fini).
    pub(crate) fn clear(&self) {
        self.map.lock().clear();
    }
}
