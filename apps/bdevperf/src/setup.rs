//! Creating the bdevs: replay an SPDK-format JSON config through the same
//! RPC handlers the daemon uses, or build the default bdev.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bdevkit::bdev::BdevManager;
use bdevkit::thread::ThreadHandle;
use bdevkit_jsonrpc::{MethodRegistry, Responder, RUNTIME};
use serde_json::Value;

/// Name and size of the bdev used when no config is given.
pub const DEFAULT_BDEV: &str = "Malloc0";
const DEFAULT_SIZE_MIB: u64 = 256;
const DEFAULT_BLOCK_SIZE: u32 = 4096;

/// Registers every module bdevperf knows with `mgr` and their RPCs.
pub fn modules(mgr: &BdevManager) -> Result<MethodRegistry> {
    let reg = MethodRegistry::new();
    bdevkit_null::register(mgr);
    bdevkit_malloc::register(mgr);
    bdevkit_aio::register(mgr);
    bdevkit_uring::register(mgr);
    bdevkit_null::rpc::register_rpcs(&reg, mgr)?;
    bdevkit_malloc::rpc::register_rpcs(&reg, mgr)?;
    bdevkit_aio::rpc::register_rpcs(&reg, mgr)?;
    bdevkit_uring::rpc::register_rpcs(&reg, mgr)?;
    reg.set_state(RUNTIME);
    Ok(reg)
}

/// Creates the default bdev on the app thread.
pub fn default_bdev(app: &ThreadHandle, mgr: &BdevManager) -> Result<String> {
    let mgr = mgr.clone();
    app.run_sync(move || {
        let blocks = DEFAULT_SIZE_MIB * 1024 * 1024 / u64::from(DEFAULT_BLOCK_SIZE);
        bdevkit_malloc::create(
            &mgr,
            bdevkit_malloc::MallocCreateParams::new(DEFAULT_BDEV, DEFAULT_BLOCK_SIZE, blocks),
        )
        .map(|b| b.name().to_string())
    })?
    .context("create the default malloc bdev")
}

/// Replays the `bdev` subsystem of an SPDK JSON config file.
pub fn load_config(
    path: &Path,
    app: &ThreadHandle,
    mgr: &BdevManager,
    reg: &MethodRegistry,
) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("read config {}", path.display()))?;
    let doc: Value = serde_json::from_str(&text)
        .with_context(|| format!("config {} is not valid JSON", path.display()))?;
    let Some(obj) = doc.as_object() else {
        bail!("Invalid JSON configuration: not enclosed in {{}}.");
    };
    let Some(subsystems) = obj.get("subsystems") else {
        eprintln!("bdevperf: warning: config has no 'subsystems' key; nothing loaded");
        return Ok(());
    };
    let Some(subsystems) = subsystems.as_array() else {
        bail!("Invalid JSON configuration: 'subsystems' should be an array.");
    };
    for sub in subsystems {
        let name = sub.get("subsystem").and_then(Value::as_str).unwrap_or("");
        if name != "bdev" {
            tracing::info!(subsystem = name, "subsystem not used by bdevperf; skipped");
            continue;
        }
        let entries = match sub.get("config") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::Null) | None => Vec::new(),
            Some(_) => {
                bail!("Invalid JSON configuration: 'config' of subsystem bdev should be an array.")
            }
        };
        for entry in entries.iter().flat_map(|e| match e {
            Value::Array(batch) => batch.clone(),
            other => vec![other.clone()],
        }) {
            let method = entry
                .get("method")
                .and_then(Value::as_str)
                .context("config entry without a method")?
                .to_string();
            let params = entry.get("params").cloned();
            match method.as_str() {
                "bdev_wait_for_examine" => {
                    let (tx, rx) = mpsc::channel();
                    let m = mgr.clone();
                    app.run_sync(move || {
                        m.wait_for_examine(move || {
                            let _ = tx.send(());
                        });
                    })?;
                    rx.recv_timeout(Duration::from_secs(60))
                        .context("bdev_wait_for_examine timed out")?;
                    continue;
                }
                "bdev_set_options" => continue,
                _ => {}
            }
            if !reg.contains(&method) {
                bail!("Method '{method}' was not found");
            }
            let (tx, rx) = mpsc::channel();
            let reg2 = reg.clone();
            let m2 = method.clone();
            app.run_sync(move || {
                reg2.dispatch(&m2, params, Responder::new(move |r| drop(tx.send(r))));
            })?;
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => bail!("config method {method} failed: {} ({})", e.message, e.code),
                Err(_) => bail!("config method {method} did not answer"),
            }
        }
    }
    Ok(())
}
