//! Subsystems and their namespaces, hosts allow-list, listeners and
//! controllers: the target's configuration model (SPDK's
//! `lib/nvmf/subsystem.c` rules), with the JSON shapes of
//! `nvmf_get_subsystems` and `save_config`.

use std::collections::BTreeMap;
use std::sync::Arc;

use bdevkit::bdev::{Bdev, BdevDesc};
use bdevkit_keyring::KeyRef;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::addr::ListenAddr;
use crate::ctrlr::Controller;

/// SPDK's default model number.
pub const DEFAULT_MODEL_NUMBER: &str = "SPDK bdev Controller";
/// SPDK's default serial number.
pub const DEFAULT_SERIAL_NUMBER: &str = "00000000000000000000";
/// SPDK's default `max_namespaces`.
pub const DEFAULT_MAX_NAMESPACES: u32 = 32;
/// Lowest controller id (SPDK's).
pub const MIN_CNTLID: u16 = 1;
/// Highest controller id (SPDK's 0xffef).
pub const MAX_CNTLID: u16 = 0xffef;
/// SPDK's default DMRSL (1 GiB of 512-byte blocks).
pub const DEFAULT_DMRSL: u32 = 2_097_152;
/// SPDK's default WZSL (2^12 pages: 16 MiB).
pub const DEFAULT_WZSL: u8 = 12;
/// The claim a namespace holds on its bdev (SPDK's module name).
pub const CLAIM_MODULE: &str = "NVMe-oF Target";

/// A namespace: a bdev opened (and claimed) by the target.
#[derive(Debug)]
pub struct Namespace {
    /// Namespace id.
    pub nsid: u32,
    /// The bdev.
    pub bdev: Bdev,
    /// The target's descriptor (the poll groups get their channels from it).
    pub(crate) desc: Arc<BdevDesc>,
    /// UUID (the bdev's unless given).
    pub uuid: Uuid,
    /// NGUID (given, or the bdev's UUID as SPDK does).
    pub nguid: Option<[u8; 16]>,
    /// EUI-64, if given.
    pub eui64: Option<[u8; 8]>,
    /// ANA group id (SPDK's default: the nsid; saved and listed when the
    /// subsystem has `ana_reporting`, never reported to hosts: no ANA).
    pub anagrpid: u32,
}

impl Namespace {
    /// Block size (a power of two, at least 512).
    #[must_use]
    pub fn block_size(&self) -> u32 {
        self.bdev.block_size()
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02X}")).collect()
    }

    /// `nvmf_get_subsystems`'s namespace object (`anagrpid` with `ana`,
    /// the subsystem's `ana_reporting`, as SPDK).
    #[must_use]
    pub fn to_json(&self, ana: bool) -> Value {
        let mut m = Map::new();
        m.insert("nsid".into(), json!(self.nsid));
        m.insert("bdev_name".into(), json!(self.bdev.name()));
        m.insert("name".into(), json!(self.bdev.name()));
        if let Some(n) = self.nguid {
            m.insert("nguid".into(), json!(Self::hex(&n)));
        }
        if let Some(e) = self.eui64 {
            m.insert("eui64".into(), json!(Self::hex(&e)));
        }
        m.insert("uuid".into(), json!(self.uuid.to_string()));
        if ana {
            m.insert("anagrpid".into(), json!(self.anagrpid));
        }
        Value::Object(m)
    }

    /// `nvmf_subsystem_add_ns`'s `namespace` object as `save_config`
    /// writes it (`anagrpid` with `ana`).
    #[must_use]
    pub fn config_json(&self, ana: bool) -> Value {
        let mut m = Map::new();
        m.insert("nsid".into(), json!(self.nsid));
        m.insert("bdev_name".into(), json!(self.bdev.name()));
        if let Some(n) = self.nguid {
            m.insert("nguid".into(), json!(Self::hex(&n)));
        }
        if let Some(e) = self.eui64 {
            m.insert("eui64".into(), json!(Self::hex(&e)));
        }
        m.insert("uuid".into(), json!(self.uuid.to_string()));
        if ana {
            m.insert("anagrpid".into(), json!(self.anagrpid));
        }
        m.insert("no_auto_visible".into(), json!(false));
        Value::Object(m)
    }
}

/// A host's DH-HMAC-CHAP keys (`nvmf_subsystem_add_host` /
/// `nvmf_subsystem_set_keys`): keyring keys, held (SPDK holds them too),
/// read when a queue authenticates.
#[derive(Debug, Clone)]
pub struct HostDhchap {
    /// Host NQN.
    pub host: String,
    /// The host's key (`dhchap_key`).
    pub key: KeyRef,
    /// The controller's key (`dhchap_ctrlr_key`): bidirectional.
    pub ctrlr_key: Option<KeyRef>,
}

/// One subsystem (the discovery subsystem included).
#[derive(Debug)]
pub struct Subsystem {
    /// Target-unique id (poll groups index their namespace views by it).
    pub id: u32,
    /// NQN.
    pub nqn: String,
    /// The discovery subsystem.
    pub discovery: bool,
    /// Serial number (ASCII, at most 20 bytes).
    pub serial_number: String,
    /// Model number (ASCII, at most 40 bytes).
    pub model_number: String,
    /// Highest namespace id.
    pub max_namespaces: u32,
    /// Controller id range.
    pub min_cntlid: u16,
    /// Controller id range.
    pub max_cntlid: u16,
    next_cntlid: u16,
    /// Any host may connect.
    pub allow_any_host: bool,
    /// Hosts allowed to connect, in the order added.
    pub hosts: Vec<String>,
    /// Hosts given a TLS PSK: (host NQN, keyring key name).
    pub host_psks: Vec<(String, String)>,
    /// Hosts given DH-HMAC-CHAP keys: they authenticate on every queue.
    pub host_dhchap: Vec<HostDhchap>,
    /// Listeners, in the order added.
    pub listeners: Vec<ListenAddr>,
    /// Namespaces by id.
    pub namespaces: BTreeMap<u32, Arc<Namespace>>,
    /// Live controllers.
    pub ctrlrs: Vec<Arc<Controller>>,
    /// Dataset Management range size limit (blocks), Identify CNS 06h.
    pub dmrsl: u32,
    /// Write Zeroes size limit (2^n pages), Identify CNS 06h.
    pub wzsl: u8,
    /// Saved only (ANA is not supported: no ANA log page, CMIC.ANA 0).
    pub ana_reporting: bool,
    /// Saved only (no passthrough: every command is emulated).
    pub passthrough: bool,
    /// Saved only (NVM subsystem reset is not supported: CAP.NSSRS 0).
    pub enable_nssr: bool,
}

impl Subsystem {
    /// A subsystem with SPDK's defaults.
    #[must_use]
    pub fn new(id: u32, nqn: &str, discovery: bool) -> Subsystem {
        Subsystem {
            id,
            nqn: nqn.into(),
            discovery,
            serial_number: DEFAULT_SERIAL_NUMBER.into(),
            model_number: DEFAULT_MODEL_NUMBER.into(),
            max_namespaces: if discovery { 0 } else { DEFAULT_MAX_NAMESPACES },
            min_cntlid: MIN_CNTLID,
            max_cntlid: MAX_CNTLID,
            next_cntlid: MIN_CNTLID,
            allow_any_host: discovery,
            hosts: Vec::new(),
            host_psks: Vec::new(),
            host_dhchap: Vec::new(),
            listeners: Vec::new(),
            namespaces: BTreeMap::new(),
            ctrlrs: Vec::new(),
            dmrsl: DEFAULT_DMRSL,
            wzsl: DEFAULT_WZSL,
            ana_reporting: false,
            passthrough: false,
            enable_nssr: false,
        }
    }

    /// The name of the TLS PSK of `hostnqn`, if it has one.
    #[must_use]
    pub fn host_psk(&self, hostnqn: &str) -> Option<&str> {
        self.host_psks
            .iter()
            .find(|(h, _)| h == hostnqn)
            .map(|(_, k)| k.as_str())
    }

    /// The DH-HMAC-CHAP keys of `hostnqn`, if it has any.
    #[must_use]
    pub fn host_dhchap(&self, hostnqn: &str) -> Option<&HostDhchap> {
        self.host_dhchap.iter().find(|d| d.host == hostnqn)
    }

    /// Sets (or, with `key` `None`, clears) the DH-HMAC-CHAP keys of
    /// `hostnqn`.
    pub fn set_host_dhchap(
        &mut self,
        hostnqn: &str,
        key: Option<KeyRef>,
        ctrlr_key: Option<KeyRef>,
    ) {
        self.host_dhchap.retain(|d| d.host != hostnqn);
        if let Some(key) = key {
            self.host_dhchap.push(HostDhchap {
                host: hostnqn.into(),
                key,
                ctrlr_key,
            });
        }
    }

    /// Adds the key names of `hostnqn` to `m` (SPDK's order:
    /// `dhchap_key`, `dhchap_ctrlr_key`, then `psk`); never key material.
    pub fn host_key_names(&self, hostnqn: &str, m: &mut Map<String, Value>) {
        if let Some(d) = self.host_dhchap(hostnqn) {
            m.insert("dhchap_key".into(), json!(d.key.name()));
            if let Some(c) = &d.ctrlr_key {
                m.insert("dhchap_ctrlr_key".into(), json!(c.name()));
            }
        }
        if let Some(k) = self.host_psk(hostnqn) {
            m.insert("psk".into(), json!(k));
        }
    }

    /// A host as `nvmf_get_subsystems` shows it: `{nqn}`, with the names
    /// of its keys (`dhchap_key`, `dhchap_ctrlr_key`, `psk`), as SPDK.
    #[must_use]
    pub fn host_json(&self, hostnqn: &str) -> Value {
        let mut m = Map::new();
        m.insert("nqn".into(), json!(hostnqn));
        self.host_key_names(hostnqn, &mut m);
        Value::Object(m)
    }

    /// Whether `hostnqn` may connect.
    #[must_use]
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h == hostnqn)
    }

    /// Whether a host may connect through `listener` (the discovery
    /// subsystem answers on every listener of the target, as SPDK's).
    #[must_use]
    pub fn listener_allowed(&self, listener: &ListenAddr) -> bool {
        self.discovery || self.listeners.iter().any(|l| l.same(listener))
    }

    /// A free controller id in `[min_cntlid, max_cntlid]`, taken round
    /// robin (SPDK's order).
    pub fn alloc_cntlid(&mut self) -> Option<u16> {
        let span = u32::from(self.max_cntlid - self.min_cntlid) + 1;
        for _ in 0..span {
            let id = self.next_cntlid;
            self.next_cntlid = if id >= self.max_cntlid {
                self.min_cntlid
            } else {
                id + 1
            };
            if id >= self.min_cntlid && !self.ctrlrs.iter().any(|c| c.cntlid == id) {
                return Some(id);
            }
        }
        None
    }

    /// Sets the controller id range (1 <= min <= max <= 0xffef).
    pub fn set_cntlid_range(&mut self, min: u16, max: u16) -> bool {
        if min == 0 || min > max || max > MAX_CNTLID {
            return false;
        }
        self.min_cntlid = min;
        self.max_cntlid = max;
        self.next_cntlid = min;
        true
    }

    /// The first unused namespace id, if any.
    #[must_use]
    pub fn free_nsid(&self) -> Option<u32> {
        (1..=self.max_namespaces).find(|n| !self.namespaces.contains_key(n))
    }

    /// `nvmf_get_subsystems`'s object (SPDK's key order).
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("nqn".into(), json!(self.nqn));
        m.insert(
            "subtype".into(),
            json!(if self.discovery { "Discovery" } else { "NVMe" }),
        );
        m.insert(
            "listen_addresses".into(),
            Value::Array(self.listeners.iter().map(ListenAddr::to_json).collect()),
        );
        m.insert("allow_any_host".into(), json!(self.allow_any_host));
        m.insert(
            "hosts".into(),
            Value::Array(self.hosts.iter().map(|h| self.host_json(h)).collect()),
        );
        if !self.discovery {
            m.insert("serial_number".into(), json!(self.serial_number));
            m.insert("model_number".into(), json!(self.model_number));
            m.insert("max_namespaces".into(), json!(self.max_namespaces));
            m.insert("passthrough".into(), json!(self.passthrough));
            m.insert("min_cntlid".into(), json!(self.min_cntlid));
            m.insert("max_cntlid".into(), json!(self.max_cntlid));
            m.insert("dmrsl".into(), json!(self.dmrsl));
            m.insert("wzsl".into(), json!(self.wzsl));
            m.insert(
                "namespaces".into(),
                Value::Array(
                    self.namespaces
                        .values()
                        .map(|n| n.to_json(self.ana_reporting))
                        .collect(),
                ),
            );
        }
        Value::Object(m)
    }

    /// `nvmf_create_subsystem` as `save_config` writes it.
    #[must_use]
    pub fn create_config_json(&self) -> Value {
        json!({
            "method": "nvmf_create_subsystem",
            "params": {
                "nqn": self.nqn,
                "allow_any_host": self.allow_any_host,
                "serial_number": self.serial_number,
                "model_number": self.model_number,
                "max_namespaces": self.max_namespaces,
                "min_cntlid": self.min_cntlid,
                "max_cntlid": self.max_cntlid,
                "ana_reporting": self.ana_reporting,
                "dmrsl": self.dmrsl,
                "wzsl": self.wzsl,
                "passthrough": self.passthrough,
                "enable_nssr": self.enable_nssr,
            }
        })
    }

    /// The NQN used in config entries: SPDK names the discovery
    /// subsystem `discovery` in RPCs.
    #[must_use]
    pub fn rpc_nqn(&self) -> &str {
        &self.nqn
    }
}

/// Checks a serial number (ASCII printable, 1-20 bytes).
#[must_use]
pub fn valid_serial(s: &str) -> bool {
    !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Checks a model number (ASCII printable, 1-40 bytes).
#[must_use]
pub fn valid_model(s: &str) -> bool {
    !s.is_empty() && s.len() <= 40 && s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Parses SPDK's hex form of an NGUID (32 digits) or EUI-64 (16 digits).
pub fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        let hi = char::from(b[2 * i]).to_digit(16)?;
        let lo = char::from(b[2 * i + 1]).to_digit(16)?;
        *o = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cntlids_round_robin_and_skip_used() {
        let mut s = Subsystem::new(1, "nqn.2016-06.io.spdk:cnode1", false);
        assert!(s.set_cntlid_range(5, 7));
        assert_eq!(s.alloc_cntlid(), Some(5));
        assert_eq!(s.alloc_cntlid(), Some(6));
        assert_eq!(s.alloc_cntlid(), Some(7));
        assert_eq!(s.alloc_cntlid(), Some(5));
        assert!(!s.set_cntlid_range(0, 7));
        assert!(!s.set_cntlid_range(8, 7));
        assert!(!s.set_cntlid_range(1, 0xfff0));
    }

    #[test]
    fn hosts_and_hex() {
        let mut s = Subsystem::new(1, "nqn.2016-06.io.spdk:cnode1", false);
        assert!(!s.host_allowed("nqn.2014-08.org.nvmexpress:uuid:1"));
        s.hosts.push("nqn.2014-08.org.nvmexpress:uuid:1".into());
        assert!(s.host_allowed("nqn.2014-08.org.nvmexpress:uuid:1"));
        assert_eq!(
            parse_hex::<8>("0123456789abcdef"),
            Some([1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef])
        );
        assert_eq!(parse_hex::<8>("0123"), None);
        assert_eq!(parse_hex::<8>("0123456789abcdeg"), None);
        assert!(valid_serial("SPDK00000000000001"));
        assert!(!valid_serial("SPDK000000000000000001"));
        assert!(!valid_model(""));
        let j = Subsystem::new(0, bdevkit_nvme_spec::fabrics::DISCOVERY_NQN, true).to_json();
        assert_eq!(j["subtype"], "Discovery");
        assert!(j.get("namespaces").is_none());
        assert_eq!(s.to_json()["max_namespaces"], 32);
    }
}
