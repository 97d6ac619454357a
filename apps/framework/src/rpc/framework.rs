//! Framework methods: version, init, subsystems and config, reactors and
//! threads, `spdk_kill_instance`.

use std::sync::Arc;

use bdevkit::clock;
use bdevkit::thread::{thread_stats, Thread};
use bdevkit_jsonrpc::{self as jsonrpc, decode_params, RpcError, RUNTIME, STARTUP};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{has_params, upgrade};
use crate::config::batch_entries;
use crate::shared::{AppShared, StopReason};

/// SPDK release whose interface we implement: major.
pub const VERSION_MAJOR: u32 = 26;
/// SPDK release whose interface we implement: minor (printed as 2 digits).
pub const VERSION_MINOR: u32 = 9;
/// SPDK release whose interface we implement: patch (printed when non-zero).
pub const VERSION_PATCH: u32 = 0;

/// The version suffix: ours, after the SPDK version we are compatible with.
fn version_suffix() -> String {
    format!(" bdevkit {}", env!("CARGO_PKG_VERSION"))
}

/// `spdk_get_version`'s string, in SPDK's format:
/// `SPDK v<major>.<minor:02>[.<patch>]<suffix>`, e.g.
/// `SPDK v26.09 bdevkit 0.1.0`.
#[must_use]
pub fn version_string() -> String {
    let patch = if VERSION_PATCH == 0 {
        String::new()
    } else {
        format!(".{VERSION_PATCH}")
    };
    format!(
        "SPDK v{VERSION_MAJOR}.{VERSION_MINOR:02}{patch}{}",
        version_suffix()
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetConfigParams {
    name: String,
    #[serde(default)]
    with_batches: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KillParams {
    sig_name: String,
}

/// SPDK's accepted signals (by name or number).
fn signal_by_name(s: &str) -> Option<i32> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGKILL, SIGQUIT, SIGTERM, SIGUSR1};
    let table = [
        ("SIGINT", SIGINT),
        ("SIGTERM", SIGTERM),
        ("SIGQUIT", SIGQUIT),
        ("SIGHUP", SIGHUP),
        ("SIGKILL", SIGKILL),
        ("SIGUSR1", SIGUSR1),
    ];
    let num = s.parse::<i32>().ok();
    table
        .iter()
        .find(|(name, sig)| *name == s || num == Some(*sig))
        .map(|(_, sig)| *sig)
}

pub(crate) fn register(shared: &Arc<AppShared>) -> Result<(), jsonrpc::Error> {
    let reg = shared.registry.clone();

    reg.register("spdk_get_version", STARTUP | RUNTIME, |params, resp| {
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "spdk_get_version method requires no parameters",
            ));
        }
        resp.ok(json!({
            "version": version_string(),
            "fields": {
                "major": VERSION_MAJOR,
                "minor": VERSION_MINOR,
                "patch": VERSION_PATCH,
                "suffix": version_suffix(),
            }
        }));
    })?;

    let w = Arc::downgrade(shared);
    reg.register("framework_start_init", STARTUP, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "framework_start_init requires no parameters",
            ));
        }
        let stop = sh.stop.clone();
        sh.start_init(move |r| match r {
            Ok(()) => resp.ok(json!(true)),
            Err(_) => {
                resp.err(RpcError::internal_error("framework_initialization failed"));
                stop.stop_with(StopReason::InitFailed);
            }
        });
    })?;

    let w = Arc::downgrade(shared);
    reg.register(
        "framework_wait_init",
        STARTUP | RUNTIME,
        move |_params, resp| {
            if let Some((sh, resp)) = upgrade(&w, resp) {
                sh.wait_init_rpc(resp);
            }
        },
    )?;

    let w = Arc::downgrade(shared);
    reg.register("framework_get_subsystems", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "'framework_get_subsystems' requires no arguments",
            ));
        }
        // The built-ins, then what the app links, in the table's
        // (initialisation) order.
        let list: Vec<Value> = crate::SUBSYSTEMS
            .iter()
            .filter(|s| crate::BUILTIN_SUBSYSTEMS.contains(&s.name) || sh.linked(s.name).is_some())
            .map(|s| json!({"subsystem": s.name, "depends_on": s.depends_on}))
            .collect();
        resp.ok(Value::Array(list));
    })?;

    let w = Arc::downgrade(shared);
    reg.register("framework_get_config", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        let Ok(p) = decode_params::<GetConfigParams>(params) else {
            return resp.err(RpcError::invalid_params("Invalid arguments"));
        };
        match p.name.as_str() {
            "bdev" => {
                let entries = sh.mgr.config_json();
                let entries = if p.with_batches {
                    batch_entries(entries)
                } else {
                    entries
                };
                resp.ok(Value::Array(entries));
            }
            crate::KEYRING_SUBSYSTEM => {
                resp.ok(Value::Array(sh.keyring.config_json()));
            }
            other => {
                match sh.linked(other) {
                    // A subsystem without a config writer answers null, as SPDK.
                    Some(r) => {
                        let entries = r.sub.config_json().map(|e| {
                            if p.with_batches {
                                batch_entries(e)
                            } else {
                                e
                            }
                        });
                        resp.ok(entries.map_or(Value::Null, Value::Array));
                    }
                    None => resp.err(RpcError::invalid_params(format!(
                        "Subsystem '{other}' not found"
                    ))),
                }
            }
        }
    })?;

    let w = Arc::downgrade(shared);
    reg.register("framework_get_reactors", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "`framework_get_reactors` requires no arguments",
            ));
        }
        let now = clock::ticks();
        let reactors: Vec<Value> = sh
            .runtime
            .reactor_stats()
            .into_iter()
            .map(|r| {
                let (usr, sys) = task_cpu_times(r.tid);
                let threads: Vec<Value> = r
                    .lw_threads
                    .iter()
                    .map(|t| {
                        let s = thread_stats(t, now);
                        json!({"name": s.name, "id": s.id, "cpumask": s.cpumask, "elapsed": s.elapsed})
                    })
                    .collect();
                json!({
                    "lcore": r.lcore,
                    "numa_id": numa_id_of_cpu(r.lcore),
                    "tid": r.tid,
                    "busy": r.busy,
                    "idle": r.idle,
                    "in_interrupt": r.in_interrupt,
                    "irq": 0,
                    "sys": sys,
                    "usr": usr,
                    "lw_threads": threads,
                })
            })
            .collect();
        resp.ok(json!({
            "tick_rate": clock::tick_rate(),
            "pid": std::process::id(),
            "reactors": reactors,
        }));
    })?;

    let w = Arc::downgrade(shared);
    reg.register("thread_get_stats", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "'thread_get_stats' requires no arguments",
            ));
        }
        let threads: Vec<Value> = sh
            .runtime
            .thread_stats()
            .into_iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "id": s.id,
                    "cpumask": s.cpumask,
                    "busy": s.busy,
                    "idle": s.idle,
                    "active_pollers_count": s.active_pollers_count,
                    "timed_pollers_count": s.timed_pollers_count,
                    "paused_pollers_count": s.paused_pollers_count,
                })
            })
            .collect();
        resp.ok(json!({"tick_rate": clock::tick_rate(), "threads": threads}));
    })?;

    let w = Arc::downgrade(shared);
    reg.register("thread_get_pollers", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "'thread_get_pollers' requires no arguments",
            ));
        }
        for_each_thread_json(&sh, thread_pollers_json, resp);
    })?;

    let w = Arc::downgrade(shared);
    reg.register("thread_get_io_channels", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "'thread_get_io_channels' requires no arguments",
            ));
        }
        for_each_thread_json(
            &sh,
            |t| {
                let chans: Vec<Value> = t
                    .io_channels()
                    .into_iter()
                    .map(|(name, n)| json!({"name": name, "ref": n}))
                    .collect();
                json!({"name": t.name(), "io_channels": chans})
            },
            resp,
        );
    })?;

    let w = Arc::downgrade(shared);
    reg.register("spdk_kill_instance", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        let sig = decode_params::<KillParams>(params)
            .ok()
            .and_then(|p| signal_by_name(&p.sig_name));
        let Some(sig) = sig else {
            return resp.err(RpcError::invalid_params("Invalid parameters"));
        };
        tracing::info!(signal = sig, "spdk_kill_instance");
        // Answer first: the server flushes it before it closes.
        resp.ok(json!(true));
        let stop = sh.stop.clone();
        let deliver = move || {
            use signal_hook::consts::{SIGINT, SIGTERM};
            if sig == SIGINT || sig == SIGTERM {
                stop.stop_with(StopReason::Signal(sig));
            } else if let Err(e) = signal_hook::low_level::raise(sig) {
                tracing::error!(signal = sig, error = %e, "raise signal");
            }
        };
        match Thread::current() {
            Some(t) => t.defer(deliver),
            None => deliver(),
        }
    })?;
    Ok(())
}

/// Runs `one` on every thread (SPDK's `spdk_for_each_thread`) and answers
/// `{"tick_rate", "threads": [...]}` once all have reported.
fn for_each_thread_json(
    sh: &AppShared,
    one: fn(&Thread) -> Value,
    resp: bdevkit_jsonrpc::Responder,
) {
    let acc = Arc::new(Mutex::new(Vec::new()));
    let acc2 = Arc::clone(&acc);
    sh.runtime.for_each_thread(
        move |t| acc2.lock().push(one(t)),
        move || {
            let threads = std::mem::take(&mut *acc.lock());
            resp.ok(json!({"tick_rate": clock::tick_rate(), "threads": threads}));
        },
    );
}

fn thread_pollers_json(t: &Thread) -> Value {
    let mut active = Vec::new();
    let mut timed = Vec::new();
    let mut paused = Vec::new();
    for p in t.pollers() {
        let mut m = Map::new();
        m.insert("name".into(), json!(p.name));
        m.insert("id".into(), json!(p.id));
        m.insert("state".into(), json!(p.state));
        m.insert("run_count".into(), json!(p.run_count));
        m.insert("busy_count".into(), json!(p.busy_count));
        if p.period_us != 0 {
            m.insert(
                "period_ticks".into(),
                json!(clock::us_to_ticks(p.period_us)),
            );
        }
        let v = Value::Object(m);
        if p.state == "paused" {
            paused.push(v);
        } else if p.period_us != 0 {
            timed.push(v);
        } else {
            active.push(v);
        }
    }
    json!({
        "name": t.name(),
        "id": t.id(),
        "active_pollers": active,
        "timed_pollers": timed,
        "paused_pollers": paused,
    })
}

/// User and system CPU time of one kernel thread of this process, in clock
/// ticks (`USER_HZ`), from `/proc/self/task/<tid>/stat`; zeros when
/// unavailable.
fn task_cpu_times(tid: i32) -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return (0, 0);
    };
    parse_task_stat(&text).unwrap_or((0, 0))
}

/// `(utime, stime)` (fields 14 and 15) of a `/proc/.../stat` line. The
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted after the last `)`.
fn parse_task_stat(text: &str) -> Option<(u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // rest starts at field 3 (state); utime is field 14.
    let utime = fields.nth(11)?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

/// The NUMA node of a CPU from sysfs, or -1 when unknown.
fn numa_id_of_cpu(cpu: u32) -> i32 {
    let Ok(dir) = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}")) else {
        return -1;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("node"))
                .and_then(|n| n.parse::<i32>().ok())
        })
        .next()
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_string_has_spdk_format() {
        assert_eq!(
            version_string(),
            format!("SPDK v26.09 bdevkit {}", env!("CARGO_PKG_VERSION"))
        );
    }

    #[test]
    fn task_stat_fields() {
        let line = "1234 (reactor (0) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 17 42 0 0 20 0 1 0";
        assert_eq!(parse_task_stat(line), Some((17, 42)));
        assert_eq!(parse_task_stat("garbage"), None);
        let (u, s) = task_cpu_times(i32::try_from(std::process::id()).unwrap());
        let _ = (u, s);
    }

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(
            signal_by_name("SIGTERM"),
            Some(signal_hook::consts::SIGTERM)
        );
        assert_eq!(signal_by_name("2"), Some(signal_hook::consts::SIGINT));
        assert_eq!(signal_by_name("SIGSEGV"), None);
    }
}
