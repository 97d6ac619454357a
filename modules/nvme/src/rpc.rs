//! The nvme module's RPCs (SPDK's names, params and results):
//! `bdev_nvme_attach_controller`, `bdev_nvme_detach_controller`,
//! `bdev_nvme_get_controllers`, `bdev_nvme_reset_controller`,
//! `bdev_nvme_send_cmd`, `bdev_nvme_set_options`, `bdev_nvme_set_hotplug`;
//! and ours, `bdev_nvme_emu_create` / `bdev_nvme_emu_delete`: an emulated
//! controller to attach at `emu:NAME` (tests, benchmarks).

use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use bdevkit::bdev::BdevManager;
use bdevkit_jsonrpc::{self as jsonrpc, MethodRegistry, Responder, RpcError, RUNTIME, STARTUP};
use nvme_driver::emu::{self, EmuKind, EmuNamespace, EmuOptions};
use nvme_spec::zerocopy::IntoBytes;
use nvme_spec::Sqe;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::ctrlr::{self, AttachArgs};
use crate::options::{self, HotplugParams, NvmeOptions};
use crate::Error;

/// `bdev_nvme_attach_controller` params (every key SPDK's client sends;
/// fabrics-only ones are accepted and ignored for PCIe).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct AttachParams {
    pub name: String,
    pub trtype: String,
    pub traddr: String,
    #[serde(default)]
    pub adrfam: Option<String>,
    #[serde(default)]
    pub trsvcid: Option<String>,
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
    #[serde(default)]
    pub ctrlr_loss_timeout_sec: Option<i32>,
    #[serde(default)]
    pub reconnect_delay_sec: Option<u32>,
    #[serde(default)]
    pub fast_io_fail_timeout_sec: Option<u32>,
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
    /// Controller id (accepted; one controller per name here).
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

/// Decodes, checks and starts an emulated controller.
pub fn emu_create(p: &EmuCreateParams) -> Result<(), Error> {
    let mut namespaces = Vec::new();
    for n in &p.namespaces {
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
        spin: p.spin,
        cpu: p.cpu,
        ..EmuOptions::default()
    };
    if let Some(s) = &p.serial {
        o.serial.clone_from(s);
    }
    if let Some(s) = p.sgl {
        o.sgl = s;
    }
    emu::create(&p.name, o).map(|_| ()).map_err(Error::Driver)
}

fn send_cmd(p: SendCmdParams, resp: Responder) {
    let Some(c) = ctrlr::get(&p.name) else {
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
        "admin" => {
            let buf = if len > 0 {
                match c.driver().transport().function().alloc_dma(len) {
                    Ok(m) => {
                        m.write_bytes(0, &data);
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
                    let mut cqe = nvme_spec::Cqe::new(0, st, dw0);
                    cqe.set_status(st);
                    let mut out = json!({"cpl": URL_SAFE.encode(cqe.as_bytes())});
                    if let (false, Some(m)) = (h2c, buf) {
                        let mut v = vec![0u8; len];
                        m.read_bytes(0, &mut v);
                        out["data"] = json!(URL_SAFE.encode(&v));
                    }
                    resp.ok(out);
                }),
            );
        }
        "io" => resp.err(RpcError::new(
            -95,
            "io commands: submit an nvme_io to the namespace bdev",
        )),
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
            if !p.trtype.eq_ignore_ascii_case("pcie") {
                resp.err(RpcError::from_errno(libc::ENOTSUP));
                return;
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
            let args = AttachArgs {
                name: p.name,
                traddr: p.traddr,
                num_io_queues: p.num_io_queues,
            };
            ctrlr::attach(
                &m,
                args,
                Box::new(move |r| match r {
                    Ok(names) => resp.ok(json!(names)),
                    Err(Error::Exists(msg)) => resp.err(RpcError::new(-114, msg)),
                    Err(e) => {
                        tracing::error!(error = %e, "attach failed");
                        resp.err(RpcError::from_errno(e.errno()));
                    }
                }),
            );
        },
    )?;
    reg.register_decoded(
        "bdev_nvme_detach_controller",
        RUNTIME,
        move |p: DetachParams, resp| {
            ctrlr::detach(
                &p.name,
                Box::new(move |r| resp.respond_errno(r.map(|()| true), Error::errno)),
            );
        },
    )?;
    reg.register_decoded(
        "bdev_nvme_get_controllers",
        RUNTIME,
        move |p: GetParams, resp| {
            let list: Vec<Value> = match &p.name {
                Some(n) => match ctrlr::get(n) {
                    Some(c) => vec![c.info_json()],
                    None => {
                        return resp
                            .err(RpcError::new(-22, format!("Controller {n} does not exist")))
                    }
                },
                None => ctrlr::all().iter().map(|c| c.info_json()).collect(),
            };
            resp.ok(Value::Array(list));
        },
    )?;
    reg.register_decoded(
        "bdev_nvme_reset_controller",
        RUNTIME,
        move |p: ResetParams, resp| {
            let Some(c) = ctrlr::get(&p.name) else {
                return resp.err(RpcError::from_errno(libc::ENODEV));
            };
            crate::reset::start(
                &c,
                Some(Box::new(move |r| match r {
                    Ok(()) => resp.ok(json!(true)),
                    Err(_) => resp.err(RpcError::from_errno(libc::EIO)),
                })),
            );
        },
    )?;
    reg.register_decoded("bdev_nvme_send_cmd", RUNTIME, send_cmd)?;
    reg.register_decoded(
        "bdev_nvme_set_options",
        STARTUP | RUNTIME,
        move |p: NvmeOptions, resp| {
            if !ctrlr::all().is_empty() {
                return resp.err(RpcError::new(
                    -1,
                    "Operation not permitted: controllers are attached",
                ));
            }
            match options::set_options(p) {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => resp.err(RpcError::invalid_params(e)),
            }
        },
    )?;
    reg.register_decoded("bdev_nvme_set_hotplug", STARTUP | RUNTIME, {
        let m = mgr.clone();
        move |p: HotplugParams, resp| {
            crate::hotplug::set(&m, p);
            resp.ok(json!(true));
        }
    })?;
    reg.register_decoded(
        "bdev_nvme_emu_create",
        STARTUP | RUNTIME,
        move |p: EmuCreateParams, resp| {
            resp.respond_errno(
                emu_create(&p).map(|()| format!("emu:{}", p.name)),
                Error::errno,
            );
        },
    )?;
    reg.register_decoded(
        "bdev_nvme_emu_delete",
        RUNTIME,
        move |p: EmuDeleteParams, resp| {
            let r = if emu::destroy(&p.name) {
                Ok(true)
            } else {
                Err(Error::NotFound(p.name))
            };
            resp.respond_errno(r, Error::errno);
        },
    )?;
    Ok(())
}
