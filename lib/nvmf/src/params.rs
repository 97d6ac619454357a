//! Parameters of the subsystem RPCs (SPDK v26.05's names and types; see
//! `doc/rpc.md`). Transport and target-wide parameters are in `opts.rs`,
//! the listen address in `addr.rs`.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::addr::ListenAddressParams;

/// The only target's name (SPDK's default, `tgt_name`).
pub const TARGET_NAME: &str = "nvmf_tgt";

/// `nvmf_create_subsystem`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CreateSubsystemParams {
    /// Subsystem NQN.
    pub nqn: String,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
    /// Serial number (default `00000000000000000000`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    /// Model number (default `SPDK bdev Controller`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_number: Option<String>,
    /// Highest namespace id (0 or absent: 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_namespaces: Option<u32>,
    /// Any host may connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_any_host: Option<bool>,
    /// ANA reporting: must be false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana_reporting: Option<bool>,
    /// Lowest controller id (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_cntlid: Option<u16>,
    /// Highest controller id (0xffef).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cntlid: Option<u16>,
    /// Deprecated in SPDK: DMRSL in KiB of 512-byte blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_discard_size_kib: Option<u64>,
    /// Deprecated in SPDK: WZSL in KiB (0, or a power of two >= 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_write_zeroes_size_kib: Option<u64>,
    /// Dataset Management range size limit (blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dmrsl: Option<u32>,
    /// Write Zeroes size limit (2^n 4 KiB pages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wzsl: Option<u8>,
    /// NVMe passthrough subsystem: must be false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passthrough: Option<bool>,
    /// NVM subsystem reset: must be false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_nssr: Option<bool>,
}

impl CreateSubsystemParams {
    /// Params for `nqn` with defaults elsewhere.
    #[must_use]
    pub fn new(nqn: impl Into<String>) -> Self {
        CreateSubsystemParams {
            nqn: nqn.into(),
            ..CreateSubsystemParams::default()
        }
    }
}

/// `nvmf_subsystem_add_ns`'s `namespace` object.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceParams {
    /// Namespace id (absent or 0: the first free one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    /// The bdev.
    pub bdev_name: String,
    /// Persistent reservations file: not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptpl_file: Option<String>,
    /// NGUID, 32 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nguid: Option<String>,
    /// EUI-64, 16 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eui64: Option<String>,
    /// UUID (the bdev's when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    /// ANA group id (ANA is not supported: kept, not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anagrpid: Option<u32>,
    /// Visible to no host until `nvmf_ns_add_host`: must be false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_auto_visible: Option<bool>,
    /// Hide the bdev's metadata: must be false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hide_metadata: Option<bool>,
}

impl NamespaceParams {
    /// A namespace over `bdev_name` with defaults elsewhere.
    #[must_use]
    pub fn new(bdev_name: impl Into<String>) -> Self {
        NamespaceParams {
            bdev_name: bdev_name.into(),
            ..NamespaceParams::default()
        }
    }
}

/// `nvmf_subsystem_add_ns`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AddNsParams {
    /// Subsystem NQN.
    pub nqn: String,
    /// The namespace.
    pub namespace: NamespaceParams,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
}

/// `nvmf_subsystem_remove_ns`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RemoveNsParams {
    /// Subsystem NQN.
    pub nqn: String,
    /// Namespace id.
    pub nsid: u32,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
}

/// `nvmf_subsystem_add_listener` and `nvmf_subsystem_remove_listener`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenerParams {
    /// Subsystem NQN (`discovery` for the discovery subsystem).
    pub nqn: String,
    /// Where.
    pub listen_address: ListenAddressParams,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
    /// TLS: must be false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_channel: Option<bool>,
    /// ANA state (ANA is not supported: `optimized` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ana_state: Option<String>,
    /// Socket implementation: `posix` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sock_impl: Option<String>,
    /// NUMA node hint (accepted, no effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_id: Option<i32>,
}

/// `nvmf_subsystem_add_host` and `nvmf_subsystem_remove_host`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HostParams {
    /// Subsystem NQN.
    pub nqn: String,
    /// Host NQN.
    pub host: String,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
    /// TLS PSK (a keyring key name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psk: Option<String>,
    /// DH-HMAC-CHAP host key (a keyring key name): the host
    /// authenticates every queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key: Option<String>,
    /// DH-HMAC-CHAP controller key (a keyring key name): the controller
    /// authenticates itself to a host that asks (needs `dhchap_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrlr_key: Option<String>,
    /// `remove_host`: how long to wait for the host's controllers (accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `nvmf_subsystem_set_keys`: a host's DH-HMAC-CHAP keys (keyring key
/// names; absent ones are cleared).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SetKeysParams {
    /// Subsystem NQN.
    pub nqn: String,
    /// Host NQN.
    pub host: String,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
    /// DH-HMAC-CHAP host key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key: Option<String>,
    /// DH-HMAC-CHAP controller key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrlr_key: Option<String>,
}

/// `nvmf_subsystem_allow_any_host`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AllowAnyHostParams {
    /// Subsystem NQN.
    pub nqn: String,
    /// The new setting.
    pub allow_any_host: bool,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
}

/// `nvmf_delete_subsystem`, `nvmf_subsystem_get_controllers`,
/// `_get_qpairs`, `_get_listeners`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NqnParams {
    /// Subsystem NQN.
    pub nqn: String,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
}

/// `nvmf_get_subsystems`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GetSubsystemsParams {
    /// Only this subsystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nqn: Option<String>,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
}

/// `nvmf_get_transports`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GetTransportsParams {
    /// Only this transport type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trtype: Option<String>,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
}

/// `nvmf_discovery_add_referral` and `nvmf_discovery_remove_referral`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReferralParams {
    /// The referred port.
    pub address: ListenAddressParams,
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
    /// Add only: the entry says a secure channel is required (TREQ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_channel: Option<bool>,
    /// The referred subsystem (default: the discovery NQN, a referral to
    /// another discovery service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnqn: Option<String>,
}

/// `nvmf_discovery_get_referrals`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GetReferralsParams {
    /// Target name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
}

/// `nvmf_set_max_subsystems`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MaxSubsystemsParams {
    /// Most subsystems.
    pub max_subsystems: u32,
}

/// `nvmf_set_crdt`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CrdtParams {
    /// Command retry delay time 1 (100 ms units).
    #[serde(default)]
    pub crdt1: u16,
    /// Command retry delay time 2.
    #[serde(default)]
    pub crdt2: u16,
    /// Command retry delay time 3.
    #[serde(default)]
    pub crdt3: u16,
}
