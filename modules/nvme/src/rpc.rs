//! The nvme module's RPCs (SPDK's names, params and results):
//! `bdev_nvme_attach_controller`, `bdev_nvme_detach_controller`,
//! `bdev_nvme_get_controllers`, `bdev_nvme_reset_controller`,
//! `bdev_nvme_send_cmd`, `bdev_nvme_set_options`, `bdev_nvme_set_hotplug`
//! (`bdev_nvme_set_keys` and the attach's DH-HMAC-CHAP keys are in
//! `auth_rpc.rs`; multipath's `bdev_nvme_set_multipath_policy` and
//! `bdev_nvme_get_io_paths` are in `mp_rpc.rs`), the discovery ones
//! (`discovery_rpc.rs`: `bdev_nvme_start_discovery`,
//! `bdev_nvme_stop_discovery`, `bdev_nvme_get_discovery_info`);
//! and ours, `bdev_nvme_emu_create` / `bdev_nvme_emu_delete`: an emulated
//! controller to attach at `emu:NAME` (tests, benchmarks).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use bdevkit::bdev::{BdevManager, IoStatus, NvmeCmd};
use bdevkit::dma::DmaBuf;
use bdevkit::thread::Thread;
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, Responder, RpcError, RUNTIME, STARTUP};
use bdevkit_nvme_driver::{TcpOptions, Transport};
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::{Cqe, Sqe, Status};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::ctrlr::{AttachArgs, MultipathMode, NvmeCtrlr};
pub use crate::emu::{EmuCreateParams, EmuNsParams};
use crate::multipath::Policy;
use crate::options::{HotplugParams, NvmeOptions};
use crate::paths::PathSelector;
use crate::reconnect::ReconnectParams;
use crate::trid::TridParams;
use crate::Error;

/// `bdev_nvme_attach_controller` params (every key SPDK's client sends;
/// fabrics-only ones are accepted and ignored for PCIe).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct AttachParams {
    pub name: String,
    #[serde(flatten)]
    pub trid: TridParams,
    #[serde(default)]
    pub priority: Option<String>,
    #[serde(default)]
    pub subnqn: Option<String>,
    #[serde(default)]
    pub hostnqn: Option<String>,
    #[serde(default)]
    pub hostaddr: Option<String>,
    #[serde(default)]
    pub hostsvcid: Option<String>,
    #[serde(default)]
    pub prchk_reftag: bool,
    #[serde(default)]
    pub prchk_guard: bool,
    #[serde(default)]
    pub hdgst: bool,
    #[serde(default)]
    pub ddgst: bool,
    #[serde(default)]
    pub fabrics_connect_timeout_us: Option<u64>,
    #[serde(default)]
    pub multipath: Option<String>,
    #[serde(default)]
    pub num_io_queues: Option<u32>,
    #[serde(flatten)]
    pub reconnect: ReconnectParams,
    #[serde(default)]
    pub psk: Option<String>,
    #[serde(default)]
    pub dhchap_key: Option<String>,
    #[serde(default)]
    pub dhchap_ctrlr_key: Option<String>,
    #[serde(default)]
    pub max_bdevs: Option<u32>,
    #[serde(default)]
    pub allow_unrecognized_csi: bool,
    #[serde(default)]
    pub multipath_opts: Option<Value>,
    #[serde(default)]
    pub disable_sq_flow_control: bool,
}

/// `bdev_nvme_detach_controller` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct DetachParams {
    pub name: String,
    #[serde(default)]
    pub trtype: Option<String>,
    #[serde(default)]
    pub traddr: Option<String>,
    #[serde(default)]
    pub adrfam: Option<String>,
    #[serde(default)]
    pub trsvcid: Option<String>,
    #[serde(default)]
    pub subnqn: Option<String>,
    #[serde(default)]
    pub hostaddr: Option<String>,
    #[serde(default)]
    pub hostsvcid: Option<String>,
}

/// `bdev_nvme_get_controllers` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetParams {
    /// Only this controller.
    #[serde(default)]
    pub name: Option<String>,
}

/// `bdev_nvme_reset_controller` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetParams {
    /// Controller name.
    pub name: String,
    /// Only the path with this controller id.
    #[serde(default)]
    pub cntlid: Option<u16>,
}

/// `bdev_nvme_send_cmd` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct SendCmdParams {
    pub name: String,
    pub cmd_type: String,
    pub data_direction: String,
    pub cmdbuf: String,
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub metadata: Option<String>,
    #[serde(default)]
    pub data_len: Option<u32>,
    #[serde(default)]
    pub metadata_len: Option<u32>,
    #[serde(default)]
    pub timeout_ms: Option<u32>,
}

/// `bdev_nvme_emu_delete` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmuDeleteParams {
    /// Name.
    pub name: String,
}

fn b64_decode(s: &str) -> Result<Vec<u8>, RpcError> {
    URL_SAFE
        .decode(s)
        .or_else(|_| URL_SAFE_NO_PAD.decode(s))
        .map_err(|_| RpcError::new(-22, "base64url decoding failed"))
}

/// The completion of a passthrough command, as SPDK answers
/// `bdev_nvme_send_cmd`: the 16-byte CQE and, for c2h, the data.
fn send_cmd_result(st: Status, dw0: u32, data: Option<&[u8]>) -> Value {
    let mut cqe = Cqe::new(0, st, dw0);
    cqe.set_status(st);
    let mut out = json!({"cpl": URL_SAFE.encode(cqe.as_bytes())});
    if let Some(d) = data {
        out["data"] = json!(URL_SAFE.encode(d));
    }
    out
}

/// The TLS PSK named `name` in the app's keyring; SPDK's -ENOKEY when
/// there is no such key (or it is no TLS PSK).
fn tls_psk(mgr: &BdevManager, name: &str) -> Result<bdevkit_nvme_auth::TlsPsk, RpcError> {
    let key = mgr
        .service::<bdevkit_keyring::Keyring>()
        .and_then(|k| k.get(name))
        .ok_or_else(|| {
            tracing::error!(key = name, "Could not load PSK");
            RpcError::from_errno(libc::ENOKEY)
        })?;
    key.tls_psk().map_err(|e| {
        tracing::error!(key = name, error = %e, "Could not load PSK");
        RpcError::from_errno(libc::ENOKEY)
    })
}

/// The NVMe/TCP options of an attach (SPDK's checks: adrfam, NQNs).
fn tcp_options(p: &AttachParams) -> Result<TcpOptions, RpcError> {
    let svcid = p.trid.tcp_port("4420")?;
    let Some(subnqn) = p.subnqn.as_deref() else {
        return Err(RpcError::new(-22, "subnqn is required for trtype TCP"));
    };
    for (what, n) in [("subnqn", Some(subnqn)), ("hostnqn", p.hostnqn.as_deref())] {
        if let Some(n) = n {
            if let Err(e) = bdevkit_nvme_spec::fabrics::validate_nqn(n) {
                return Err(RpcError::new(-22, format!("Invalid {what} {n}: {e}")));
            }
        }
    }
    let mut o = TcpOptions::new(&p.trid.traddr, svcid, subnqn);
    o.hostnqn.clone_from(&p.hostnqn);
    o.digests = Digests {
        header: p.hdgst,
        data: p.ddgst,
    };
    if let Some(us) = p.fabrics_connect_timeout_us.filter(|&us| us > 0) {
        o.connect_timeout = std::time::Duration::from_micros(us);
    }
    Ok(o)
}

/// An admin command on the controller's admin queue.
fn send_admin(c: &NvmeCtrlr, sqe: Sqe, h2c: bool, data: &[u8], len: usize, resp: Responder) {
    let buf = if len > 0 {
        match c.driver().transport().alloc_buffer(len) {
            Ok(m) => {
                m.write_bytes(0, data);
                Some((m, len))
            }
            Err(e) => return resp.err(RpcError::from_errno(e.errno())),
        }
    } else {
        None
    };
    c.driver().submit_admin(
        sqe,
        buf,
        Box::new(move |st, dw0, buf| {
            let data = match (h2c, buf) {
                (false, Some(m)) => {
                    let mut v = vec![0u8; len];
                    m.read_bytes(0, &mut v);
                    Some(v)
                }
                _ => None,
            };
            resp.ok(send_cmd_result(st, dw0, data.as_deref()));
        }),
    );
}

/// An I/O command: an `nvme_io` on the bdev of its namespace (NSID 0: the
/// controller's first namespace), through this thread's queue pair.
fn send_io(
    mgr: &BdevManager,
    c: &NvmeCtrlr,
    sqe: Sqe,
    h2c: bool,
    data: Vec<u8>,
    len: usize,
    resp: Responder,
) {
    let nsid = sqe.nsid.get();
    let bdev = if nsid == 0 {
        c.bdev_names().into_iter().next()
    } else {
        Some(format!("{}n{nsid}", c.name()))
    };
    let Some(bdev) = bdev.filter(|b| mgr.get(b).is_some()) else {
        return resp.err(RpcError::new(-22, format!("namespace {nsid} has no bdev")));
    };
    let desc = match mgr.open(&bdev, true, |_| {}) {
        Ok(d) => d,
        Err(e) => return resp.err(RpcError::from_errno(e.errno())),
    };
    let ch = match desc.get_io_channel() {
        Ok(ch) => ch,
        Err(e) => return resp.err(RpcError::from_errno(e.errno())),
    };
    let buf = if len > 0 {
        let Ok(mut b) = DmaBuf::alloc(len, 4096) else {
            return resp.err(RpcError::from_errno(libc::ENOMEM));
        };
        b[..data.len()].copy_from_slice(&data);
        Some(b)
    } else {
        None
    };
    let Ok(t) = Thread::try_current() else {
        return resp.err(RpcError::from_errno(libc::EINVAL));
    };
    let cdw = sqe.to_dwords();
    t.spawn_local(async move {
        let mut io = ch.alloc_io_async().await;
        io.nvme_io(NvmeCmd { cdw }, buf);
        let mut done = match ch.submit_async(io) {
            Ok(f) => f.await,
            Err(e) => return resp.err(RpcError::from_errno(e.error.errno())),
        };
        let st = match done.status() {
            IoStatus::Success => Status::SUCCESS,
            IoStatus::Nvme { sct, sc } => Status::new(sct, sc),
            other => {
                drop(done);
                drop(ch);
                drop(desc);
                return resp.err(RpcError::from_errno(other.errno()));
            }
        };
        let dw0 = done.nvme_cdw0();
        let out = if h2c { None } else { done.take_buf() };
        drop(done);
        drop(ch);
        drop(desc);
        resp.ok(send_cmd_result(st, dw0, out.as_deref()));
    });
}

fn send_cmd(mgr: &BdevManager, p: SendCmdParams, resp: Responder) {
    let Some(c) = crate::controller(mgr, &p.name) else {
        resp.err(RpcError::new(
            -19,
            format!("Controller {} does not exist", p.name),
        ));
        return;
    };
    let cmd = match b64_decode(&p.cmdbuf) {
        Ok(b) if b.len() == 64 => b,
        Ok(_) => return resp.err(RpcError::new(-22, "cmdbuf must be 64 bytes")),
        Err(e) => return resp.err(e),
    };
    let mut sqe = Sqe::default();
    sqe.as_mut_bytes().copy_from_slice(&cmd);
    let h2c = match p.data_direction.as_str() {
        "h2c" => true,
        "c2h" => false,
        _ => return resp.err(RpcError::new(-22, "data_direction must be h2c or c2h")),
    };
    let data = match &p.data {
        Some(d) if h2c => match b64_decode(d) {
            Ok(b) => b,
            Err(e) => return resp.err(e),
        },
        _ => Vec::new(),
    };
    let len = usize::try_from(p.data_len.unwrap_or(0))
        .unwrap_or(0)
        .max(data.len());
    match p.cmd_type.as_str() {
        "admin" => send_admin(&c, sqe, h2c, &data, len, resp),
        "io" => send_io(mgr, &c, sqe, h2c, data, len, resp),
        _ => resp.err(RpcError::new(-22, "cmd_type must be admin or io")),
    }
}

/// Registers the module's RPCs. Handlers run on the app thread.
pub fn register_rpcs(reg: &MethodRegistry, mgr: &BdevManager) -> Result<(), jsonrpc::Error> {
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_attach_controller",
        RUNTIME,
        move |p: AttachParams, resp| {
            let tcp = if p.trid.is("tcp") {
                match tcp_options(&p) {
                    Ok(o) => Some(o),
                    Err(e) => return resp.err(e),
                }
            } else if p.trid.is("pcie") {
                None
            } else {
                resp.err(RpcError::from_errno(libc::ENOTSUP));
                return;
            };
            let mut tcp = tcp;
            match crate::auth_rpc::dhchap(
                &m,
                p.dhchap_key.as_deref(),
                p.dhchap_ctrlr_key.as_deref(),
            ) {
                Ok(None) => {}
                Ok(Some(d)) => match tcp.as_mut() {
                    Some(o) => o.dhchap = Some(d),
                    None => {
                        tracing::error!(ctrlr = %p.name, "dhchap keys are for NVMe/TCP only");
                        return resp.err(RpcError::from_errno(libc::EINVAL));
                    }
                },
                Err(e) => return resp.err(e),
            }
            if let Some(name) = &p.psk {
                match (tcp.as_mut(), tls_psk(&m, name)) {
                    (Some(o), Ok(k)) => o.psk = Some(Box::new((name.clone(), k))),
                    (None, _) => {
                        tracing::error!(ctrlr = %p.name, "psk is for NVMe/TCP only");
                        return resp.err(RpcError::from_errno(libc::EINVAL));
                    }
                    (_, Err(e)) => return resp.err(e),
                }
            }
            if p.max_bdevs == Some(0) {
                resp.err(RpcError::new(-22, "max_bdevs cannot be zero"));
                return;
            }
            if let Some(n) = p.num_io_queues {
                if n == 0 || n > 65536 {
                    resp.err(RpcError::new(-22, "num_io_queues out of range"));
                    return;
                }
            }
            let reconnect = match crate::discovery_rpc::reconnect_params(&m, &p.reconnect) {
                Ok(r) => r,
                Err(e) => return resp.err(e),
            };
            let multipath = match p.multipath.as_deref().map(MultipathMode::parse) {
                None => None,
                Some(Some(m)) => Some(m),
                Some(None) => {
                    return resp.err(RpcError::new(
                        -22,
                        "multipath must be disable, failover or multipath",
                    ))
                }
            };
            // SPDK: the module options' policy, `multipath_opts` keys over it.
            let base = crate::options(&m)
                .map(|o| o.default_policy())
                .unwrap_or_default();
            let policy = match p.multipath_opts.as_ref().map(|v| multipath_opts(v, base)) {
                None => Some(base),
                Some(Ok(p)) => Some(p),
                Some(Err(e)) => return resp.err(e),
            };
            let args = AttachArgs {
                name: p.name,
                traddr: p.trid.traddr,
                num_io_queues: p.num_io_queues,
                tcp,
                reconnect,
                multipath,
                policy,
            };
            crate::attach(
                &m,
                args,
                Box::new(move |r| match r {
                    Ok(names) => resp.ok(json!(names)),
                    Err(Error::Exists(msg)) => resp.err(RpcError::new(-114, msg)),
                    Err(Error::InvalidArg(msg)) => resp.err(RpcError::new(-22, msg)),
                    Err(e) => {
                        tracing::error!(error = %e, "attach failed");
                        resp.err(RpcError::from_errno(e.errno()));
                    }
                }),
            );
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_detach_controller",
        RUNTIME,
        move |p: DetachParams, resp| {
            let sel = PathSelector {
                trtype: p.trtype,
                traddr: p.traddr,
                adrfam: p.adrfam,
                trsvcid: p.trsvcid,
                subnqn: p.subnqn,
                hostaddr: p.hostaddr,
                hostsvcid: p.hostsvcid,
            };
            crate::detach_paths(
                &m,
                &p.name,
                &sel,
                Box::new(move |r| resp.respond_errno(r.map(|()| true), Error::errno)),
            );
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_get_controllers",
        RUNTIME,
        move |p: GetParams, resp| match crate::controllers_json(&m, p.name.as_deref()) {
            Some(list) => resp.ok(Value::Array(list)),
            None => {
                let n = p.name.unwrap_or_default();
                resp.err(RpcError::new(-22, format!("Controller {n} does not exist")));
            }
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_reset_controller",
        RUNTIME,
        move |p: ResetParams, resp| {
            // Every path of the name, or the one with `cntlid`.
            let paths: Vec<_> = crate::controller_paths(&m, &p.name)
                .into_iter()
                .filter(|c| {
                    p.cntlid
                        .is_none_or(|id| c.driver().identify().cntlid.get() == id)
                })
                .collect();
            if paths.is_empty() {
                return resp.err(RpcError::from_errno(libc::ENODEV));
            }
            let left = Arc::new(AtomicUsize::new(paths.len()));
            let failed = Arc::new(AtomicBool::new(false));
            let resp = Arc::new(Mutex::new(Some(resp)));
            for c in paths {
                let (left, failed, resp) = (left.clone(), failed.clone(), resp.clone());
                c.reset(Box::new(move |r| {
                    if r.is_err() {
                        failed.store(true, Ordering::Release);
                    }
                    if left.fetch_sub(1, Ordering::AcqRel) != 1 {
                        return;
                    }
                    if let Some(resp) = resp.lock().take() {
                        if failed.load(Ordering::Acquire) {
                            resp.err(RpcError::from_errno(libc::EIO));
                        } else {
                            resp.ok(json!(true));
                        }
                    }
                }));
            }
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded("bdev_nvme_send_cmd", RUNTIME, move |p, resp| {
        send_cmd(&m, p, resp);
    })?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_set_options",
        STARTUP | RUNTIME,
        move |p: NvmeOptions, resp| match crate::set_options(&m, p) {
            Ok(()) => resp.ok(json!(true)),
            Err(Error::NotPermitted(msg)) => {
                resp.err(RpcError::new(-1, format!("Operation not permitted: {msg}")));
            }
            // SPDK: spdk_bdev_nvme_set_opts' -EINVAL.
            Err(Error::InvalidArg(msg)) => {
                tracing::error!(%msg, "bdev_nvme_set_options");
                resp.err(RpcError::from_errno(libc::EINVAL));
            }
            Err(e) => resp.err(RpcError::from_errno(e.errno())),
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_set_hotplug",
        STARTUP | RUNTIME,
        move |p: HotplugParams, resp| {
            resp.respond_errno(crate::set_hotplug(&m, p).map(|()| true), Error::errno);
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_emu_create",
        STARTUP | RUNTIME,
        move |p: EmuCreateParams, resp| {
            resp.respond_errno(
                crate::emu_create(&m, &p).map(|_| format!("emu:{}", p.name)),
                Error::errno,
            );
        },
    )?;
    let m = mgr.clone();
    reg.register_decoded(
        "bdev_nvme_emu_delete",
        RUNTIME,
        move |p: EmuDeleteParams, resp| {
            resp.respond_errno(crate::emu_delete(&m, &p.name).map(|()| true), Error::errno);
        },
    )?;
    crate::mp_rpc::register(reg, mgr)?;
    crate::auth_rpc::register(reg, mgr)?;
    crate::discovery_rpc::register_rpcs(reg, mgr)?;
    Ok(())
}

/// An attach's `multipath_opts` (`{policy, selector, min_io}`), unset
/// keys from `base`.
fn multipath_opts(v: &Value, base: Policy) -> Result<Policy, RpcError> {
    let o: crate::options::MultipathOpts = serde_json::from_value(v.clone())
        .map_err(|e| RpcError::new(-22, format!("multipath_opts: {e}")))?;
    o.over(base)
}
