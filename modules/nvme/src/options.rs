//! `bdev_nvme_set_options` and `bdev_nvme_set_hotplug`: every key SPDK's
//! saved config carries is accepted (unknown keys are refused, as SPDK
//! does); those that mean something for a PCIe controller here are
//! applied: `action_on_timeout`, `timeout_us`, `timeout_admin_us`,
//! `keep_alive_timeout_ms`, `nvme_adminq_poll_period_us`,
//! `bdev_retry_count`, `io_queue_requests` (I/O queue entries),
//! `enable_flush`, `generate_uuids`, `multipath_opts` (the policy of
//! bdevs attached without their own). The others (RDMA, DH-HMAC-CHAP,
//! accel, ...: `doc/rpc.md` lists them) are kept and saved back
//! unchanged. The values live in the module instance
//! ([`crate::NvmeModule`]), one per bdev manager.

use bdevkit_nvme_auth::{DhGroup, HashFn};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::policy::MultipathOpts;
use crate::policy::Policy;
use crate::reconnect::Reconnect;

/// What happens to an I/O that times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeoutAction {
    /// Log it.
    #[default]
    None,
    /// Send an Abort for it.
    Abort,
    /// Reset the controller.
    Reset,
}

/// `bdev_nvme_set_options` params, with SPDK's names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NvmeOptions {
    /// Action on an I/O timeout.
    pub action_on_timeout: TimeoutAction,
    /// I/O timeout in µs (0 = none).
    pub timeout_us: u64,
    /// Admin command timeout in µs (0 = none).
    pub timeout_admin_us: u64,
    /// Keep alive timeout (fabrics).
    pub keep_alive_timeout_ms: u32,
    /// Deprecated alias of `transport_retry_count`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_count: Option<u32>,
    /// Arbitration burst (saved, not applied).
    pub arbitration_burst: u32,
    /// Low priority weight (saved, not applied).
    pub low_priority_weight: u32,
    /// Medium priority weight (saved, not applied).
    pub medium_priority_weight: u32,
    /// High priority weight (saved, not applied).
    pub high_priority_weight: u32,
    /// Admin queue poll period in µs.
    pub nvme_adminq_poll_period_us: u64,
    /// I/O queue poll period in µs (0 = every reactor iteration; applied
    /// as 0).
    pub nvme_ioq_poll_period_us: u64,
    /// I/O queue entries (0 = the default, 256).
    pub io_queue_requests: u32,
    /// Ring the SQ doorbell once per poll (always on here).
    pub delay_cmd_submit: bool,
    /// Transport retries (fabrics).
    pub transport_retry_count: u32,
    /// Retries of a failed I/O (not DNR, not aborted on request).
    pub bdev_retry_count: i32,
    /// RDMA ack timeout (saved, not applied).
    pub transport_ack_timeout: u32,
    /// Controller loss timeout (fabrics).
    pub ctrlr_loss_timeout_sec: i32,
    /// Reconnect delay (fabrics).
    pub reconnect_delay_sec: u32,
    /// Fast I/O fail timeout (fabrics).
    pub fast_io_fail_timeout_sec: u32,
    /// Multipath failback (saved, not applied).
    pub disable_auto_failback: bool,
    /// Derive UUIDs (from serial number and namespace id) for namespaces
    /// that report no identifier.
    pub generate_uuids: bool,
    /// IP type of service (fabrics).
    pub transport_tos: u32,
    /// NVMe error statistics (saved, not applied).
    pub nvme_error_stat: bool,
    /// RDMA SRQ size (saved, not applied).
    pub rdma_srq_size: u32,
    /// Per-path statistics (saved, not applied).
    pub io_path_stat: bool,
    /// Accel sequences (saved, not applied).
    pub allow_accel_sequence: bool,
    /// RDMA CQ size (saved, not applied).
    pub rdma_max_cq_size: u32,
    /// RDMA CM event timeout (saved, not applied).
    pub rdma_cm_event_timeout_ms: u32,
    /// DH-HMAC-CHAP digests offered by controllers attached from now on.
    pub dhchap_digests: Vec<String>,
    /// DH-HMAC-CHAP groups offered by controllers attached from now on.
    pub dhchap_dhgroups: Vec<String>,
    /// RDMA UMR per I/O (saved, not applied).
    pub rdma_umr_per_io: bool,
    /// TCP connect timeout (fabrics).
    pub tcp_connect_timeout_ms: u32,
    /// Report flush on namespaces without a volatile write cache.
    pub enable_flush: bool,
    /// The multipath policy of bdevs attached without `multipath_opts`
    /// of their own (SPDK v26.05; saved as SPDK writes it).
    pub multipath_opts: MultipathOpts,
}

impl Default for NvmeOptions {
    fn default() -> Self {
        NvmeOptions {
            action_on_timeout: TimeoutAction::None,
            timeout_us: 0,
            timeout_admin_us: 0,
            keep_alive_timeout_ms: 10_000,
            retry_count: None,
            arbitration_burst: 0,
            low_priority_weight: 0,
            medium_priority_weight: 0,
            high_priority_weight: 0,
            nvme_adminq_poll_period_us: 10_000,
            nvme_ioq_poll_period_us: 0,
            io_queue_requests: 0,
            delay_cmd_submit: true,
            transport_retry_count: 4,
            bdev_retry_count: 3,
            transport_ack_timeout: 0,
            ctrlr_loss_timeout_sec: 0,
            reconnect_delay_sec: 0,
            fast_io_fail_timeout_sec: 0,
            disable_auto_failback: false,
            generate_uuids: false,
            transport_tos: 0,
            nvme_error_stat: false,
            rdma_srq_size: 0,
            io_path_stat: false,
            allow_accel_sequence: false,
            rdma_max_cq_size: 0,
            rdma_cm_event_timeout_ms: 0,
            dhchap_digests: HashFn::names().map(String::from).collect(),
            dhchap_dhgroups: DhGroup::names().map(String::from).collect(),
            rdma_umr_per_io: false,
            tcp_connect_timeout_ms: 0,
            enable_flush: false,
            multipath_opts: MultipathOpts::of(&Policy::default()),
        }
    }
}

/// The options as one controller applies them (snapshot at attach).
#[derive(Debug, Clone, Copy)]
pub struct Applied {
    /// I/O timeout in µs.
    pub timeout_us: u64,
    /// Admin timeout in µs.
    pub timeout_admin_us: u64,
    /// Action on timeout.
    pub action_on_timeout: TimeoutAction,
    /// Retries of a failed I/O.
    pub bdev_retry_count: u32,
    /// Admin poll period.
    pub adminq_poll_period_us: u64,
    /// I/O queue entries.
    pub io_entries: u16,
    /// Flush without a write cache.
    pub enable_flush: bool,
    /// Keep alive.
    pub keep_alive_timeout_ms: u32,
    /// Derive a UUID from the serial number and namespace id for a
    /// namespace that reports no identifier.
    pub generate_uuids: bool,
    /// Reconnecting a lost fabrics controller.
    pub reconnect: Reconnect,
}

impl NvmeOptions {
    /// Checks the values SPDK checks.
    pub fn validate(&self) -> Result<(), String> {
        if self.bdev_retry_count < -1 {
            return Err("bdev_retry_count must be -1 or more".into());
        }
        if self.timeout_admin_us != 0 && self.timeout_admin_us < 1000 {
            return Err("timeout_admin_us must be 0 or at least 1000".into());
        }
        self.multipath_opts
            .policy()
            .map_err(|e| format!("multipath_opts: {}", e.message))?;
        self.reconnect().validate()
    }

    /// The policy of bdevs attached without `multipath_opts` of their
    /// own (the default one if `multipath_opts` does not parse:
    /// [`NvmeOptions::validate`] refuses those).
    #[must_use]
    pub fn default_policy(&self) -> Policy {
        self.multipath_opts.policy().unwrap_or_default()
    }

    /// The reconnect knobs.
    #[must_use]
    pub fn reconnect(&self) -> Reconnect {
        Reconnect {
            ctrlr_loss_timeout_sec: self.ctrlr_loss_timeout_sec,
            reconnect_delay_sec: self.reconnect_delay_sec,
            fast_io_fail_timeout_sec: self.fast_io_fail_timeout_sec,
        }
    }

    /// What a controller attached now applies.
    #[must_use]
    pub fn applied(&self) -> Applied {
        Applied {
            timeout_us: self.timeout_us,
            timeout_admin_us: self.timeout_admin_us,
            action_on_timeout: self.action_on_timeout,
            bdev_retry_count: u32::try_from(self.bdev_retry_count).unwrap_or(u32::MAX),
            adminq_poll_period_us: self.nvme_adminq_poll_period_us.max(100),
            io_entries: if self.io_queue_requests == 0 {
                256
            } else {
                u16::try_from(self.io_queue_requests.clamp(2, 4096)).unwrap_or(4096)
            },
            enable_flush: self.enable_flush,
            keep_alive_timeout_ms: self.keep_alive_timeout_ms,
            generate_uuids: self.generate_uuids,
            reconnect: self.reconnect(),
        }
    }
}

/// `bdev_nvme_set_hotplug` params.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HotplugParams {
    /// Poll for devices bound to vfio-pci and attach them.
    pub enable: bool,
    /// Poll period in µs (default 100000).
    #[serde(default = "default_hotplug_period")]
    pub period_us: u64,
}

fn default_hotplug_period() -> u64 {
    100_000
}

impl Default for HotplugParams {
    fn default() -> Self {
        HotplugParams {
            enable: false,
            period_us: default_hotplug_period(),
        }
    }
}

/// The `bdev_nvme_set_options` entry of a saved config.
#[must_use]
pub fn config_entry(o: &NvmeOptions) -> Value {
    serde_json::json!({"method": "bdev_nvme_set_options", "params": o})
}
