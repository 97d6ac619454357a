//! Transport options (`nvmf_create_transport`, `nvmf_get_transports`) and
//! target-wide settings (`nvmf_set_config`, `nvmf_set_max_subsystems`,
//! `nvmf_set_crdt`), with SPDK's names, types and defaults (SPDK v26.05's
//! TCP transport: `lib/nvmf/tcp.c`, `transport.c`; the nvmf event
//! subsystem: `module/event/subsystems/nvmf`).

use bdevkit_nvme_auth::{DhGroup, HashFn};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// NVMe/TCP's transport type (SPDK's name, which `trtype` matches
/// case-insensitively); the transports that exist are in the registry
/// (`transport/registry.rs`).
pub const TRTYPE_TCP: &str = "TCP";
/// SPDK's `max_queue_depth` default.
pub const DEFAULT_MAX_QUEUE_DEPTH: u16 = 128;
/// SPDK's `max_io_qpairs_per_ctrlr` default (128 queues with the admin queue).
pub const DEFAULT_MAX_IO_QPAIRS_PER_CTRLR: u16 = 127;
/// SPDK's `in_capsule_data_size` default.
pub const DEFAULT_IN_CAPSULE_DATA_SIZE: u32 = 4096;
/// SPDK's `max_io_size` default (also MAXH2CDATA in ICResp).
pub const DEFAULT_MAX_IO_SIZE: u32 = 131_072;
/// SPDK's `io_unit_size` default (deprecated in SPDK; kept for old configs).
pub const DEFAULT_IO_UNIT_SIZE: u32 = 131_072;
/// SPDK's TCP `num_shared_buffers` default: data buffers (each of
/// `max_io_size` here) shared by the poll groups.
pub const DEFAULT_NUM_SHARED_BUFFERS: u32 = 511;
/// Most buffers a poll group caches when `buf_cache_size` is left out.
pub const DEFAULT_BUF_CACHE_MAX: u32 = 32;
/// SPDK's `max_aq_depth` default.
pub const DEFAULT_MAX_AQ_DEPTH: u32 = 128;
/// Smallest admin queue a target accepts (NVMe-oF: 32 entries).
pub const MIN_AQ_DEPTH: u32 = 32;
/// SPDK's `abort_timeout_sec` default.
pub const DEFAULT_ABORT_TIMEOUT_SEC: u32 = 1;
/// SPDK's `acceptor_poll_rate` default (µs).
pub const DEFAULT_ACCEPTOR_POLL_RATE: u32 = 10_000;
/// SPDK's `kas` default (100 ms units: 10 s granularity).
pub const DEFAULT_KAS: u16 = 100;
/// SPDK's `min_kato` default (ms).
pub const DEFAULT_MIN_KATO: u32 = 10_000;
/// SPDK's `control_msg_num` default.
pub const DEFAULT_CONTROL_MSG_NUM: u16 = 32;
/// SPDK's default `max_subsystems`.
pub const DEFAULT_MAX_SUBSYSTEMS: u32 = 1024;
/// In-capsule data the admin queue (and a connection before its Connect)
/// accepts: SPDK's and Linux's 8 KiB.
pub const ADMIN_IN_CAPSULE_DATA_SIZE: u32 = 8192;

/// FUSES bit 0: fused Compare and Write (`masked_fuses` name `fcws`).
pub const FUSES_COMPARE_AND_WRITE: u16 = 1;

/// ONCS features `masked_oncs` can clear (SPDK's `oncs_feature` enum).
const ONCS_FEATURES: [(&str, u16); 5] = [
    ("nvmcmps", 1 << 0),
    ("nvmdsmsv", 1 << 2),
    ("nvmwzsv", 1 << 3),
    ("reservs", 1 << 5),
    ("nvmcpys", 1 << 8),
];

/// `nvmf_create_transport` params: SPDK's generic and TCP options, and the
/// other transports' options `spdk-rpc` sends (accepted, ignored).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CreateTransportParams {
    /// Transport type: `TCP` (any case; a registered transport).
    pub trtype: String,
    /// Target name (only the default target exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<String>,
    /// Most entries of an I/O queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_depth: Option<u16>,
    /// Most I/O queues per controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_io_qpairs_per_ctrlr: Option<u16>,
    /// In-capsule data bytes of an I/O queue command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_capsule_data_size: Option<u32>,
    /// Largest I/O in bytes (MDTS, MAXH2CDATA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_io_size: Option<u32>,
    /// Deprecated in SPDK; accepted, no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_unit_size: Option<u32>,
    /// Most entries of an admin queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_aq_depth: Option<u32>,
    /// Data buffers of `max_io_size` shared by the poll groups (at least 1):
    /// the bound on the transport's data buffer memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_shared_buffers: Option<u32>,
    /// Shared buffers each poll group keeps in its cache (every group's
    /// cache must fit in `num_shared_buffers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buf_cache_size: Option<u32>,
    /// SPDK's iobuf cache size; reported, no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iobuf_small_cache_size: Option<u32>,
    /// SPDK's iobuf cache size; reported, no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iobuf_large_cache_size: Option<u32>,
    /// Zero-copy receive: accepted, no effect (data is copied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zcopy: Option<bool>,
    /// C2HData SUCCESS optimisation: no response capsule after read data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c2h_success: Option<bool>,
    /// DIF insert/strip: accepted, no effect (namespaces with metadata
    /// are refused, so there is no DIF to insert or strip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dif_insert_or_strip: Option<bool>,
    /// `SO_PRIORITY` of accepted sockets (0-16): reported, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sock_priority: Option<u32>,
    /// Abort timeout; reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_timeout_sec: Option<u32>,
    /// Control messages per poll group; accepted, no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_msg_num: Option<u16>,
    /// Acceptor poll period (µs) in polling mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptor_poll_rate: Option<u32>,
    /// RDMA option; reported, no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_timeout: Option<u32>,
    /// RDMA option; reported, no effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_wr_pool_size: Option<u32>,
    /// Passthrough subsystems do not exist here; reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_command_passthru: Option<bool>,
    /// Keep alive granularity (100 ms units, > 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kas: Option<u16>,
    /// Smallest keep alive timeout (ms, > 0): shorter ones are raised to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_kato: Option<u32>,
    /// ONCS features to hide: `nvmcmps`, `nvmdsmsv`, `nvmwzsv`, `reservs`, `nvmcpys`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masked_oncs: Option<Vec<String>>,
    /// FUSES features to hide: `fcws` (fused Compare and Write: hidden,
    /// fused commands are refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masked_fuses: Option<Vec<String>>,
    /// RDMA option (`spdk-rpc` always sends it); ignored by TCP, as in SPDK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_cqe: Option<i32>,
    /// RDMA option; ignored by TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_srq_depth: Option<u32>,
    /// RDMA option (`spdk-rpc` sends `false`); ignored by TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_srq: Option<bool>,
    /// RDMA option; ignored by TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptor_backlog: Option<i32>,
    /// RDMA option (`spdk-rpc` sends `false`); ignored by TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_wr_batching: Option<bool>,
    /// vfio-user option (`spdk-rpc` sends `false`); ignored by TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_mappable_bar0: Option<bool>,
    /// vfio-user option (`spdk-rpc` sends `false`); ignored by TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_adaptive_irq: Option<bool>,
    /// vfio-user option (`spdk-rpc` sends `false`); ignored by TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_shadow_doorbells: Option<bool>,
}

/// The options of a transport: SPDK's generic transport options and the
/// TCP transport's own (`c2h_success`, `sock_priority`). The defaults
/// ([`Default`]) are SPDK's TCP transport's; another transport starts from
/// its own (its registry entry's `opts_init`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportOpts {
    /// The transport type, the registry's spelling (`TCP`).
    pub trtype: &'static str,
    /// Most entries of an I/O queue (2..=65535).
    pub max_queue_depth: u16,
    /// Most I/O queues per controller.
    pub max_io_qpairs_per_ctrlr: u16,
    /// In-capsule data bytes of an I/O command (multiple of 16, at most 8192
    /// beyond the command... as SPDK: any up to `max_io_size`).
    pub in_capsule_data_size: u32,
    /// Largest transfer (multiple of 4096).
    pub max_io_size: u32,
    /// Kept for old configs (a buffer holds a whole transfer).
    pub io_unit_size: u32,
    /// Shared data buffers (each of `max_io_size`).
    pub num_shared_buffers: u32,
    /// Buffers a poll group caches; `u32::MAX`: left out (see
    /// [`TransportOpts::cache_size`]).
    pub buf_cache_size: u32,
    /// Most entries of an admin queue (32..=4096).
    pub max_aq_depth: u32,
    /// Reported.
    pub iobuf_small_cache_size: u32,
    /// Reported.
    pub iobuf_large_cache_size: u32,
    /// C2HData SUCCESS optimisation.
    pub c2h_success: bool,
    /// `SO_PRIORITY` of accepted sockets (reported, not applied).
    pub sock_priority: u32,
    /// Reported (no zero-copy receive).
    pub zcopy: bool,
    /// Reported (no DIF).
    pub dif_insert_or_strip: bool,
    /// Reported.
    pub abort_timeout_sec: u32,
    /// Reported.
    pub control_msg_num: u16,
    /// Acceptor poll period in polling mode (µs).
    pub acceptor_poll_rate: u32,
    /// Reported.
    pub ack_timeout: u32,
    /// Reported.
    pub data_wr_pool_size: u32,
    /// Reported.
    pub disable_command_passthru: bool,
    /// Keep alive granularity, 100 ms units.
    pub kas: u16,
    /// Smallest keep alive timeout, ms (a multiple of `kas`).
    pub min_kato: u32,
    /// ONCS bits to clear.
    pub masked_oncs: u16,
    /// FUSES bits to clear (bit 0: Compare and Write).
    pub masked_fuses: u16,
}

impl Default for TransportOpts {
    fn default() -> Self {
        TransportOpts {
            trtype: TRTYPE_TCP,
            max_queue_depth: DEFAULT_MAX_QUEUE_DEPTH,
            max_io_qpairs_per_ctrlr: DEFAULT_MAX_IO_QPAIRS_PER_CTRLR,
            in_capsule_data_size: DEFAULT_IN_CAPSULE_DATA_SIZE,
            max_io_size: DEFAULT_MAX_IO_SIZE,
            io_unit_size: DEFAULT_IO_UNIT_SIZE,
            num_shared_buffers: DEFAULT_NUM_SHARED_BUFFERS,
            buf_cache_size: u32::MAX,
            max_aq_depth: DEFAULT_MAX_AQ_DEPTH,
            iobuf_small_cache_size: u32::MAX,
            iobuf_large_cache_size: u32::MAX,
            c2h_success: true,
            sock_priority: 0,
            zcopy: false,
            dif_insert_or_strip: false,
            abort_timeout_sec: DEFAULT_ABORT_TIMEOUT_SEC,
            control_msg_num: DEFAULT_CONTROL_MSG_NUM,
            acceptor_poll_rate: DEFAULT_ACCEPTOR_POLL_RATE,
            ack_timeout: 0,
            data_wr_pool_size: 0,
            disable_command_passthru: false,
            kas: DEFAULT_KAS,
            min_kato: DEFAULT_MIN_KATO,
            masked_oncs: 0,
            masked_fuses: 0,
        }
    }
}

fn bad(option: &'static str, why: impl Into<String>) -> Error {
    Error::TransportOption {
        option,
        why: why.into(),
    }
}

impl TransportOpts {
    /// These options (a transport's defaults) changed by what `p` asks
    /// for, validated. `TransportOpts::from_params` (the registry's: it
    /// knows each transport's defaults) calls it.
    pub(crate) fn apply(&self, p: &CreateTransportParams) -> Result<TransportOpts> {
        let d = self;
        let mut o = TransportOpts {
            trtype: d.trtype,
            max_queue_depth: p.max_queue_depth.unwrap_or(d.max_queue_depth),
            max_io_qpairs_per_ctrlr: p
                .max_io_qpairs_per_ctrlr
                .unwrap_or(d.max_io_qpairs_per_ctrlr),
            in_capsule_data_size: p.in_capsule_data_size.unwrap_or(d.in_capsule_data_size),
            max_io_size: p.max_io_size.unwrap_or(d.max_io_size),
            io_unit_size: p.io_unit_size.unwrap_or(d.io_unit_size),
            num_shared_buffers: p.num_shared_buffers.unwrap_or(d.num_shared_buffers),
            buf_cache_size: p.buf_cache_size.unwrap_or(d.buf_cache_size),
            max_aq_depth: p.max_aq_depth.unwrap_or(d.max_aq_depth),
            iobuf_small_cache_size: p.iobuf_small_cache_size.unwrap_or(d.iobuf_small_cache_size),
            iobuf_large_cache_size: p.iobuf_large_cache_size.unwrap_or(d.iobuf_large_cache_size),
            c2h_success: p.c2h_success.unwrap_or(d.c2h_success),
            sock_priority: p.sock_priority.unwrap_or(d.sock_priority),
            zcopy: p.zcopy.unwrap_or(d.zcopy),
            dif_insert_or_strip: p.dif_insert_or_strip.unwrap_or(d.dif_insert_or_strip),
            abort_timeout_sec: p.abort_timeout_sec.unwrap_or(d.abort_timeout_sec),
            control_msg_num: p.control_msg_num.unwrap_or(d.control_msg_num),
            acceptor_poll_rate: p.acceptor_poll_rate.unwrap_or(d.acceptor_poll_rate),
            ack_timeout: p.ack_timeout.unwrap_or(d.ack_timeout),
            data_wr_pool_size: p.data_wr_pool_size.unwrap_or(d.data_wr_pool_size),
            disable_command_passthru: p
                .disable_command_passthru
                .unwrap_or(d.disable_command_passthru),
            kas: p.kas.unwrap_or(d.kas),
            min_kato: p.min_kato.unwrap_or(d.min_kato),
            masked_oncs: 0,
            masked_fuses: 0,
        };
        for (key, on) in [
            ("zcopy", o.zcopy),
            ("dif_insert_or_strip", o.dif_insert_or_strip),
            ("sock_priority", o.sock_priority != 0),
        ] {
            if on {
                tracing::warn!(key, "nvmf_create_transport: accepted, no effect here");
            }
        }
        for name in p.masked_oncs.iter().flatten() {
            let bit = ONCS_FEATURES
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, b)| *b)
                .ok_or_else(|| bad("masked_oncs", format!("unknown feature {name}")))?;
            o.masked_oncs |= bit;
        }
        for name in p.masked_fuses.iter().flatten() {
            if name != "fcws" {
                return Err(bad("masked_fuses", format!("unknown feature {name}")));
            }
            o.masked_fuses |= FUSES_COMPARE_AND_WRITE;
        }
        o.validate()?;
        // SPDK rounds the minimum timeout up to the granularity.
        let unit = u32::from(o.kas) * 100;
        o.min_kato = o.min_kato.div_ceil(unit) * unit;
        Ok(o)
    }

    fn validate(&self) -> Result<()> {
        if self.max_queue_depth < 2 {
            return Err(bad("max_queue_depth", "must be at least 2"));
        }
        if self.max_io_qpairs_per_ctrlr == 0 {
            return Err(bad("max_io_qpairs_per_ctrlr", "must be at least 1"));
        }
        if self.max_io_size < 4096 || !self.max_io_size.is_multiple_of(4096) {
            return Err(bad("max_io_size", "must be a multiple of 4096"));
        }
        if self.max_io_size > 1 << 24 {
            return Err(bad("max_io_size", "at most 16 MiB"));
        }
        if !self.in_capsule_data_size.is_multiple_of(16)
            || self.in_capsule_data_size > self.max_io_size
        {
            return Err(bad(
                "in_capsule_data_size",
                "must be a multiple of 16, at most max_io_size",
            ));
        }
        if self.num_shared_buffers == 0 {
            return Err(bad("num_shared_buffers", "must be at least 1"));
        }
        if !(MIN_AQ_DEPTH..=4096).contains(&self.max_aq_depth) {
            return Err(bad("max_aq_depth", "must be 32..=4096"));
        }
        if self.sock_priority > 16 {
            return Err(bad("sock_priority", "at most 16"));
        }
        if self.kas == 0 {
            return Err(bad("kas", "must not be 0"));
        }
        if self.min_kato == 0 {
            return Err(bad("min_kato", "must not be 0"));
        }
        Ok(())
    }

    /// Buffers each of `groups` poll groups caches: `buf_cache_size` as
    /// given, refused when the groups' caches would not fit in the pool
    /// (SPDK's rule); left out, 3/4 of the pool shared out among the groups,
    /// at most [`DEFAULT_BUF_CACHE_MAX`]. Either way a quarter of the pool at
    /// least is never in a cache when the option is left out, and a group
    /// with requests waiting has an empty cache.
    pub fn cache_size(&self, groups: usize) -> Result<u32> {
        let groups = u32::try_from(groups.max(1)).unwrap_or(u32::MAX);
        if self.buf_cache_size == u32::MAX {
            return Ok((self.num_shared_buffers / 4 * 3 / groups).min(DEFAULT_BUF_CACHE_MAX));
        }
        if self.buf_cache_size.saturating_mul(groups) > self.num_shared_buffers {
            return Err(bad(
                "buf_cache_size",
                format!(
                    "{groups} poll groups x {} cached buffers need more than num_shared_buffers {}",
                    self.buf_cache_size, self.num_shared_buffers
                ),
            ));
        }
        Ok(self.buf_cache_size)
    }

    /// The transport as `nvmf_get_transports` and `save_config` show it
    /// (SPDK's key order). `num_shared_buffers` and `buf_cache_size`
    /// (which SPDK v26.05 no longer shows) appear when they differ from
    /// the defaults, so that a saved config keeps them.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.into(), v);
        };
        put("trtype", json!(self.trtype));
        put("max_queue_depth", json!(self.max_queue_depth));
        put(
            "max_io_qpairs_per_ctrlr",
            json!(self.max_io_qpairs_per_ctrlr),
        );
        put("in_capsule_data_size", json!(self.in_capsule_data_size));
        put("max_io_size", json!(self.max_io_size));
        put("max_aq_depth", json!(self.max_aq_depth));
        if self.num_shared_buffers != DEFAULT_NUM_SHARED_BUFFERS {
            put("num_shared_buffers", json!(self.num_shared_buffers));
        }
        if self.buf_cache_size != u32::MAX {
            put("buf_cache_size", json!(self.buf_cache_size));
        }
        put("iobuf_small_cache_size", json!(self.iobuf_small_cache_size));
        put("iobuf_large_cache_size", json!(self.iobuf_large_cache_size));
        put("dif_insert_or_strip", json!(self.dif_insert_or_strip));
        put("zcopy", json!(self.zcopy));
        put("c2h_success", json!(self.c2h_success));
        put("sock_priority", json!(self.sock_priority));
        put("abort_timeout_sec", json!(self.abort_timeout_sec));
        put("ack_timeout", json!(self.ack_timeout));
        put("data_wr_pool_size", json!(self.data_wr_pool_size));
        put(
            "disable_command_passthru",
            json!(self.disable_command_passthru),
        );
        put("kas", json!(self.kas));
        put("min_kato", json!(self.min_kato));
        Value::Object(m)
    }

    /// The keep alive timeout a controller uses when the host asks for
    /// `kato_ms` (SPDK: 0 stays 0, up to `min_kato` becomes `min_kato`,
    /// above it is rounded up to the granularity).
    #[must_use]
    pub fn effective_kato(&self, kato_ms: u32) -> u32 {
        if kato_ms == 0 {
            0
        } else if kato_ms <= self.min_kato {
            self.min_kato
        } else {
            let unit = u32::from(self.kas) * 100;
            kato_ms.div_ceil(unit).saturating_mul(unit)
        }
    }
}

/// `admin_cmd_passthru` of `nvmf_set_config`: which admin commands go to
/// an NVMe bdev of a passthrough subsystem. This target has no
/// passthrough subsystems, so the values are kept and saved only.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "SPDK's object: one flag per command"
)]
pub struct AdminCmdPassthru {
    /// Identify Controller.
    pub identify_ctrlr: bool,
    /// Identify UUID list.
    pub identify_uuid_list: bool,
    /// Get Log Page.
    pub get_log_page: bool,
    /// Get/Set Features.
    pub get_set_features: bool,
    /// Sanitize.
    pub sanitize: bool,
    /// Security Send/Receive.
    pub security_send_recv: bool,
    /// Firmware commands.
    pub fw_update: bool,
    /// NVMe-MI.
    pub nvme_mi: bool,
    /// Vendor specific commands.
    pub vendor_specific: bool,
}

/// `nvmf_set_config` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SetConfigParams {
    /// See [`AdminCmdPassthru`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_cmd_passthru: Option<AdminCmdPassthru>,
    /// Cores of the poll groups (a subset of the app's core mask).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_groups_mask: Option<String>,
    /// Which discovery log entries a host sees: `match_any`, or a comma
    /// separated set of `transport`, `address`, `svcid` that must match the
    /// listener the host asked on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery_filter: Option<String>,
    /// DH-HMAC-CHAP digests a host may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_digests: Option<Vec<String>>,
    /// DH-HMAC-CHAP groups a host may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_dhgroups: Option<Vec<String>>,
    /// `allow` or `restrict_per_listener`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dup_host_policy: Option<String>,
}

/// Discovery filter bits (SPDK's order: the string is the set's name).
pub mod filter {
    /// Transport types must match.
    pub const TRANSPORT: u8 = 1 << 0;
    /// Addresses (family and address) must match.
    pub const ADDRESS: u8 = 1 << 1;
    /// Service ids (ports) must match.
    pub const SVCID: u8 = 1 << 2;
}

const FILTER_NAMES: [&str; 8] = [
    "match_any",
    "transport",
    "address",
    "transport,address",
    "svcid",
    "transport,svcid",
    "address,svcid",
    "transport,address,svcid",
];

/// Target-wide settings (STARTUP-time RPCs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConf {
    /// Most subsystems (the discovery subsystem included).
    pub max_subsystems: u32,
    /// `nvmf_set_max_subsystems` was called.
    pub max_subsystems_set: bool,
    /// Command retry delay times (100 ms units), Identify CRDT1-3.
    pub crdt: [u16; 3],
    /// [`filter`] bits.
    pub discovery_filter: u8,
    /// Saved only.
    pub admin_cmd_passthru: AdminCmdPassthru,
    /// Poll group cores (`None`: every core of the app).
    pub poll_groups_mask: Option<String>,
    /// DH-HMAC-CHAP digests a host may use (SPDK's names).
    pub dhchap_digests: Vec<String>,
    /// DH-HMAC-CHAP groups a host may use.
    pub dhchap_dhgroups: Vec<String>,
    /// Saved only (`allow`).
    pub dup_host_policy: String,
}

impl Default for TargetConf {
    fn default() -> Self {
        TargetConf {
            max_subsystems: DEFAULT_MAX_SUBSYSTEMS,
            max_subsystems_set: false,
            crdt: [0; 3],
            discovery_filter: 0,
            admin_cmd_passthru: AdminCmdPassthru::default(),
            poll_groups_mask: None,
            dhchap_digests: HashFn::names().map(String::from).collect(),
            dhchap_dhgroups: DhGroup::names().map(String::from).collect(),
            dup_host_policy: "allow".into(),
        }
    }
}

/// Parses SPDK's discovery filter string.
pub fn parse_discovery_filter(s: &str) -> Result<u8> {
    let invalid = || Error::SubsystemParam {
        param: "discovery_filter",
        why: format!("invalid value {s}"),
    };
    let mut bits = 0u8;
    let mut any = false;
    for tok in s.split(',') {
        match tok {
            "match_any" if bits == 0 => any = true,
            "transport" if !any => bits |= filter::TRANSPORT,
            "address" if !any => bits |= filter::ADDRESS,
            "svcid" if !any => bits |= filter::SVCID,
            _ => return Err(invalid()),
        }
    }
    Ok(bits)
}

impl TargetConf {
    /// Applies `nvmf_set_config` params.
    pub fn apply(&mut self, p: &SetConfigParams) -> Result<()> {
        let mut next = self.clone();
        if let Some(a) = p.admin_cmd_passthru {
            next.admin_cmd_passthru = a;
        }
        if let Some(m) = &p.poll_groups_mask {
            m.parse::<bdevkit::thread::CpuSet>()
                .map_err(|e| Error::SubsystemParam {
                    param: "poll_groups_mask",
                    why: e.to_string(),
                })?;
            next.poll_groups_mask = Some(m.clone());
        }
        if let Some(f) = &p.discovery_filter {
            next.discovery_filter = parse_discovery_filter(f)?;
        }
        let check = |list: &[String], known: &[&str], param: &'static str| -> Result<Vec<String>> {
            for v in list {
                if !known.contains(&v.as_str()) {
                    return Err(Error::SubsystemParam {
                        param,
                        why: format!("unknown value {v}"),
                    });
                }
            }
            // Kept in SPDK's (bit) order.
            Ok(known
                .iter()
                .filter(|k| list.iter().any(|v| v == *k))
                .map(|k| (*k).to_string())
                .collect())
        };
        if let Some(d) = &p.dhchap_digests {
            next.dhchap_digests = check(d, &HashFn::names().collect::<Vec<_>>(), "dhchap_digests")?;
        }
        if let Some(g) = &p.dhchap_dhgroups {
            next.dhchap_dhgroups =
                check(g, &DhGroup::names().collect::<Vec<_>>(), "dhchap_dhgroups")?;
        }
        if let Some(d) = &p.dup_host_policy {
            if d != "allow" && d != "restrict_per_listener" {
                return Err(Error::SubsystemParam {
                    param: "dup_host_policy",
                    why: format!("unknown value {d}"),
                });
            }
            next.dup_host_policy = d.clone();
        }
        *self = next;
        Ok(())
    }

    /// `nvmf_set_config`'s entry as `save_config` writes it (SPDK's order).
    #[must_use]
    pub fn set_config_json(&self) -> Value {
        let mut params = serde_json::Map::new();
        params.insert(
            "discovery_filter".into(),
            json!(FILTER_NAMES[usize::from(self.discovery_filter & 7)]),
        );
        params.insert(
            "admin_cmd_passthru".into(),
            serde_json::to_value(self.admin_cmd_passthru).unwrap_or(Value::Null),
        );
        if let Some(m) = &self.poll_groups_mask {
            params.insert("poll_groups_mask".into(), json!(m));
        }
        params.insert("dhchap_digests".into(), json!(self.dhchap_digests));
        params.insert("dhchap_dhgroups".into(), json!(self.dhchap_dhgroups));
        params.insert("dup_host_policy".into(), json!(self.dup_host_policy));
        json!({"method": "nvmf_set_config", "params": Value::Object(params)})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_spdks() {
        let o = TransportOpts::from_params(&CreateTransportParams {
            trtype: "tcp".into(),
            ..CreateTransportParams::default()
        })
        .unwrap();
        assert_eq!(o, TransportOpts::default());
        let j = o.to_json();
        assert_eq!(j["trtype"], "TCP");
        assert_eq!(j["max_io_qpairs_per_ctrlr"], 127);
        assert_eq!(j["iobuf_large_cache_size"], u64::from(u32::MAX));
        assert!(TransportOpts::from_params(&CreateTransportParams {
            trtype: "RDMA".into(),
            ..CreateTransportParams::default()
        })
        .is_err());
    }

    #[test]
    fn kato_rules() {
        let o = TransportOpts::default();
        assert_eq!(o.effective_kato(0), 0);
        assert_eq!(o.effective_kato(5000), 10_000);
        assert_eq!(o.effective_kato(10_001), 20_000);
        assert_eq!(o.effective_kato(30_000), 30_000);
    }

    #[test]
    fn validation_and_masks() {
        let p = |f: fn(&mut CreateTransportParams)| {
            let mut p = CreateTransportParams {
                trtype: "TCP".into(),
                ..CreateTransportParams::default()
            };
            f(&mut p);
            TransportOpts::from_params(&p)
        };
        assert!(p(|p| p.max_io_size = Some(1000)).is_err());
        assert!(p(|p| p.in_capsule_data_size = Some(17)).is_err());
        assert!(p(|p| p.kas = Some(0)).is_err());
        // Accepted without effect, reported back.
        assert_eq!(
            p(|p| p.zcopy = Some(true)).unwrap().to_json()["zcopy"],
            true
        );
        assert_eq!(p(|p| p.sock_priority = Some(3)).unwrap().sock_priority, 3);
        assert!(p(|p| p.sock_priority = Some(17)).is_err());
        assert_eq!(p(|p| p.min_kato = Some(15_050)).unwrap().min_kato, 20_000);
        assert!(p(|p| p.num_shared_buffers = Some(0)).is_err());
        let o = p(|p| p.masked_oncs = Some(vec!["nvmdsmsv".into(), "nvmcmps".into()])).unwrap();
        assert_eq!(o.masked_oncs, 0b101);
        assert!(p(|p| p.masked_oncs = Some(vec!["x".into()])).is_err());
    }

    #[test]
    fn buffer_pool_options() {
        let d = TransportOpts::default();
        assert_eq!(d.num_shared_buffers, 511);
        // Left out: 3/4 of the pool over the groups, at most 32.
        assert_eq!(d.cache_size(1).unwrap(), 32);
        assert_eq!(d.cache_size(16).unwrap(), 23);
        let small = TransportOpts {
            num_shared_buffers: 6,
            ..TransportOpts::default()
        };
        assert_eq!(small.cache_size(2).unwrap(), 1);
        // Given: every group's cache must fit.
        let o = TransportOpts {
            buf_cache_size: 3,
            ..small.clone()
        };
        assert_eq!(o.cache_size(2).unwrap(), 3);
        assert!(o.cache_size(3).is_err());
        // Saved only when not the default.
        assert!(d.to_json().get("num_shared_buffers").is_none());
        assert!(d.to_json().get("buf_cache_size").is_none());
        let j = o.to_json();
        assert_eq!(j["num_shared_buffers"], 6);
        assert_eq!(j["buf_cache_size"], 3);
        let keys: Vec<&String> = j.as_object().unwrap().keys().collect();
        assert_eq!(keys[6], "num_shared_buffers");
    }

    #[test]
    fn discovery_filters() {
        assert_eq!(parse_discovery_filter("match_any").unwrap(), 0);
        assert_eq!(
            parse_discovery_filter("transport,svcid").unwrap(),
            filter::TRANSPORT | filter::SVCID
        );
        assert!(parse_discovery_filter("match_any,address").is_err());
        assert!(parse_discovery_filter("bogus").is_err());
        let mut c = TargetConf::default();
        c.apply(&SetConfigParams {
            discovery_filter: Some("address,svcid".into()),
            dhchap_digests: Some(vec!["sha512".into(), "sha256".into()]),
            ..SetConfigParams::default()
        })
        .unwrap();
        let j = c.set_config_json();
        assert_eq!(j["params"]["discovery_filter"], "address,svcid");
        assert_eq!(j["params"]["dhchap_digests"], json!(["sha256", "sha512"]));
        assert_eq!(j["params"]["dup_host_policy"], "allow");
    }
}
