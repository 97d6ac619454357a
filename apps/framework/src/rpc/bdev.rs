//! Generic bdev-layer methods: `bdev_get_bdevs`, `bdev_get_iostat`,
//! `bdev_reset_iostat`, `bdev_set_qos_limit`, `bdev_wait_for_examine`,
//! `bdev_examine`, `bdev_set_options`, `bdev_enable_histogram`,
//! `bdev_get_histogram`, `bdev_get_histogram_borders`,
//! `bdev_set_qd_sampling_period`.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdevkit::bdev::histogram::{HistogramOptions, DEFAULT_GRANULARITY};
use bdevkit::bdev::{Bdev, BdevManager, Histogram, IoStat, IoType, QueueDepthStats, ResetMode};
use bdevkit::clock;
use bdevkit::thread::{PollerStatus, Thread};
use bdevkit_jsonrpc::{self as jsonrpc, decode_params, Responder, RpcError, RUNTIME, STARTUP};
use parking_lot::Mutex;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::{errno, has_params, upgrade};
use crate::shared::AppShared;

/// How often `bdev_get_bdevs` looks again for a bdev it waits for (SPDK).
const GET_BDEVS_POLL_US: u64 = 100_000;
/// Most names `bdev_get_iostat` takes (SPDK's `SPDK_BDEV_MAX_GET_IOSTAT_BDEV_NAMES`).
const MAX_IOSTAT_NAMES: usize = 1024;
/// Most borders `bdev_get_histogram_borders` takes (SPDK's limit).
const MAX_HISTOGRAM_BORDERS: usize = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnableHistogramParams {
    name: String,
    enable: bool,
    #[serde(default)]
    opc: Option<String>,
    #[serde(default)]
    granularity: Option<u8>,
    #[serde(default)]
    min_nsec: Option<u64>,
    #[serde(default)]
    max_nsec: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QdSamplingParams {
    name: String,
    /// µs; 0 stops sampling.
    period: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetHistogramParams {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistogramBordersParams {
    name: String,
    /// Microseconds, ascending.
    borders: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetBdevsParams {
    #[serde(default)]
    name: Option<String>,
    /// Milliseconds; `spdk-rpc` may send a float (`20.0`).
    #[serde(default, deserialize_with = "de_opt_ms")]
    timeout: Option<u64>,
}

/// A non-negative JSON number of milliseconds, integer or not.
fn de_opt_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error as _;
    let n = serde_json::Number::deserialize(d)?;
    if let Some(u) = n.as_u64() {
        return Ok(Some(u));
    }
    match n.as_f64() {
        Some(f) if (0.0..1.8e19).contains(&f) => Ok(Some(f64_to_u64(f))),
        _ => Err(D::Error::custom("timeout must be a non-negative number")),
    }
}

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "caller checked 0 <= f < 1.8e19; fractions of a millisecond are dropped"
)]
fn f64_to_u64(f: f64) -> u64 {
    f as u64
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    All,
    Maxmin,
    Error,
    None,
}

impl From<Mode> for ResetMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::All => ResetMode::All,
            Mode::Maxmin => ResetMode::MaxMin,
            Mode::Error => ResetMode::Error,
            Mode::None => ResetMode::None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetIostatParams {
    /// Deprecated single name (SPDK still accepts it).
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    names: Option<Vec<String>>,
    #[serde(default)]
    per_channel: bool,
    #[serde(default)]
    reset_mode: Option<Mode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetIostatParams {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    mode: Option<Mode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QosParams {
    name: String,
    #[serde(default)]
    rw_ios_per_sec: Option<u64>,
    #[serde(default)]
    rw_mbytes_per_sec: Option<u64>,
    #[serde(default)]
    r_mbytes_per_sec: Option<u64>,
    #[serde(default)]
    w_mbytes_per_sec: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExamineParams {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetOptionsParams {
    #[serde(default)]
    bdev_io_pool_size: Option<u32>,
    #[serde(default)]
    bdev_io_cache_size: Option<u32>,
    #[serde(default)]
    bdev_auto_examine: Option<bool>,
    #[serde(default)]
    iobuf_small_cache_size: Option<u32>,
    #[serde(default)]
    iobuf_large_cache_size: Option<u32>,
}

/// A live bdev by name, alias or UUID (any case), as SPDK's open finds it.
/// Params that name a bdev.
trait BdevParams: serde::de::DeserializeOwned {
    fn bdev_name(&self) -> &str;
    /// Checks the decode cannot express (a failure answers like one).
    fn valid(&self) -> bool {
        true
    }
}

macro_rules! bdev_params {
    ($($t:ty),*) => {$(
        impl BdevParams for $t {
            fn bdev_name(&self) -> &str {
                &self.name
            }
        }
    )*};
}
bdev_params!(
    QosParams,
    QdSamplingParams,
    EnableHistogramParams,
    GetHistogramParams
);

impl BdevParams for HistogramBordersParams {
    fn bdev_name(&self) -> &str {
        &self.name
    }
    fn valid(&self) -> bool {
        self.borders.len() <= MAX_HISTOGRAM_BORDERS
    }
}

/// Registers RUNTIME method `method` on the bdev its params name: a decode
/// failure answers -32603 "spdk_json_decode_object failed", an unknown
/// bdev -19; then `f` answers.
fn register_bdev_method<P: BdevParams>(
    reg: &jsonrpc::MethodRegistry,
    shared: &Arc<AppShared>,
    method: &str,
    f: impl Fn(Bdev, P, Responder) + Send + Sync + 'static,
) -> Result<(), jsonrpc::Error> {
    let w = Arc::downgrade(shared);
    reg.register(method, RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        let p = match decode_params::<P>(params) {
            Ok(p) if p.valid() => p,
            _ => return resp.err(RpcError::decode_failed()),
        };
        let Some(b) = find_bdev(&sh.mgr, p.bdev_name()) else {
            return resp.err(errno(libc::ENODEV));
        };
        f(b, p, resp);
    })
}

/// `bdev_get_histogram`'s result: the counters base64-encoded, with their
/// layout and the tick rate.
fn histogram_json(h: &Histogram) -> Value {
    use base64::Engine as _;
    json!({
        "histogram": base64::engine::general_purpose::STANDARD.encode(h.to_le_bytes()),
        "granularity": h.granularity(),
        "min_range": h.min_range(),
        "max_range": h.max_range(),
        "tsc_rate": clock::tick_rate(),
    })
}

fn find_bdev(mgr: &BdevManager, name: &str) -> Option<Bdev> {
    mgr.get(name)
        .or_else(|| {
            let uuid = Uuid::parse_str(name).ok()?;
            mgr.get(&uuid.to_string())
                .or_else(|| mgr.bdevs().into_iter().find(|b| b.uuid() == uuid))
        })
        .filter(|b| !b.is_removing())
}

pub(crate) fn register(shared: &Arc<AppShared>) -> Result<(), jsonrpc::Error> {
    let reg = shared.registry.clone();

    let w = Arc::downgrade(shared);
    reg.register("bdev_get_bdevs", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        let Ok(p) = decode_params::<GetBdevsParams>(params) else {
            return resp.err(RpcError::decode_failed());
        };
        let Some(name) = p.name else {
            // Serialised one bdev at a time: no tree of values for
            // thousands of bdevs at once (peak memory, heap fragmentation).
            let mut out = String::from("[");
            for (i, b) in sh
                .mgr
                .bdevs()
                .iter()
                .filter(|b| !b.is_removing())
                .enumerate()
            {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&b.info_json().to_string());
            }
            out.push(']');
            return match serde_json::value::RawValue::from_string(out) {
                Ok(raw) => resp.ok_raw(raw),
                Err(_) => resp.err(RpcError::internal_error("Internal error")),
            };
        };
        if let Some(b) = find_bdev(&sh.mgr, &name) {
            return resp.ok(json!([b.info_json()]));
        }
        let timeout_ms = p.timeout.unwrap_or(0);
        match Thread::current() {
            Some(t) if timeout_ms > 0 => wait_for_bdev(&t, &sh, name, timeout_ms, resp),
            _ => resp.err(errno(libc::ENODEV)),
        }
    })?;

    let w = Arc::downgrade(shared);
    reg.register("bdev_get_iostat", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        let p = match decode_params::<GetIostatParams>(params) {
            Ok(p) if p.names.as_ref().is_none_or(|n| n.len() <= MAX_IOSTAT_NAMES) => p,
            _ => return resp.err(RpcError::decode_failed()),
        };
        get_iostat(&sh.mgr, p, resp);
    })?;

    let w = Arc::downgrade(shared);
    reg.register("bdev_reset_iostat", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        let Ok(p) = decode_params::<ResetIostatParams>(params) else {
            return resp.err(RpcError::decode_failed());
        };
        let mode = p.mode.unwrap_or(Mode::All);
        if mode == Mode::None {
            return resp.ok(json!(true));
        }
        let bdevs = match &p.name {
            Some(n) => match find_bdev(&sh.mgr, n) {
                Some(b) => vec![b],
                None => return resp.err(errno(libc::ENODEV)),
            },
            None => live_bdevs(&sh.mgr),
        };
        let left = Arc::new(Mutex::new((bdevs.len(), Some(resp))));
        let finish = |left: &Mutex<(usize, Option<Responder>)>| {
            let mut l = left.lock();
            l.0 -= 1;
            if l.0 == 0 {
                if let Some(r) = l.1.take() {
                    r.ok(json!(true));
                }
            }
        };
        if bdevs.is_empty() {
            if let Some(r) = left.lock().1.take() {
                r.ok(json!(true));
            }
            return;
        }
        for b in bdevs {
            let left = Arc::clone(&left);
            b.reset_iostat(mode.into(), move || finish(&left));
        }
    })?;

    register_bdev_method::<QosParams>(&reg, shared, "bdev_set_qos_limit", |b, p, resp| {
        let limits = [
            p.rw_ios_per_sec,
            p.rw_mbytes_per_sec,
            p.r_mbytes_per_sec,
            p.w_mbytes_per_sec,
        ];
        if limits.iter().all(Option::is_none) {
            return resp.err(RpcError::new(-libc::EINVAL, "No rate limits specified"));
        }
        b.set_qos_limits(limits, move |r| match r {
            Ok(()) => resp.ok(json!(true)),
            Err(e) => resp.err(RpcError::invalid_params(format!(
                "Failed to configure rate limit: {}",
                errno(e.errno()).message
            ))),
        });
    })?;

    register_bdev_method::<QdSamplingParams>(
        &reg,
        shared,
        "bdev_set_qd_sampling_period",
        |b, p, resp| match b.set_qd_sampling_period(p.period) {
            Ok(()) => resp.ok(json!(true)),
            Err(e) => resp.err(errno(e.errno())),
        },
    )?;

    register_bdev_method::<EnableHistogramParams>(
        &reg,
        shared,
        "bdev_enable_histogram",
        |b, p, resp| {
            let io_type = match p.opc.as_deref() {
                None => None,
                Some(name) => match IoType::ALL.into_iter().find(|t| t.name() == name) {
                    Some(t) => Some(t),
                    None => return resp.err(RpcError::internal_error("Invalid Io type")),
                },
            };
            let defaults = HistogramOptions::default();
            let opts = p.enable.then(|| HistogramOptions {
                granularity: p.granularity.unwrap_or(DEFAULT_GRANULARITY),
                min_nsec: p.min_nsec.unwrap_or(defaults.min_nsec),
                max_nsec: p.max_nsec.unwrap_or(defaults.max_nsec),
                io_type,
            });
            b.enable_histogram(opts, move |r| match r {
                Ok(()) => resp.ok(json!(true)),
                Err(e) => resp.err(errno(e.errno())),
            });
        },
    )?;

    register_bdev_method::<GetHistogramParams>(
        &reg,
        shared,
        "bdev_get_histogram",
        |b, _p, resp| {
            b.get_histogram(move |r| match r {
                Ok(h) => resp.ok(histogram_json(&h)),
                Err(e) => resp.err(RpcError::internal_error(errno(e.errno()).message)),
            });
        },
    )?;

    register_bdev_method::<HistogramBordersParams>(
        &reg,
        shared,
        "bdev_get_histogram_borders",
        |b, p, resp| {
            // µs to ticks, as SPDK converts them (whole ticks per µs).
            let per_us = clock::tick_rate() / 1_000_000;
            let borders: Vec<u64> = p
                .borders
                .iter()
                .map(|us| us.saturating_mul(per_us))
                .collect();
            b.get_histogram(move |r| match r {
                Ok(h) => resp.ok(json!({"borders_count": h.borders_count(&borders)})),
                Err(e) => resp.err(RpcError::internal_error(errno(e.errno()).message)),
            });
        },
    )?;

    let w = Arc::downgrade(shared);
    reg.register("bdev_wait_for_examine", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        if has_params(params.as_ref()) {
            return resp.err(RpcError::invalid_params(
                "bdev_wait_for_examine requires no parameters",
            ));
        }
        sh.mgr.wait_for_examine(move || resp.ok(json!(true)));
    })?;

    let w = Arc::downgrade(shared);
    reg.register("bdev_examine", RUNTIME, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        let Ok(p) = decode_params::<ExamineParams>(params) else {
            return resp.err(RpcError::invalid_params("spdk_json_decode_object failed"));
        };
        match sh.mgr.examine(&p.name) {
            Ok(()) => resp.ok(json!(true)),
            Err(e) => resp.err(errno(e.errno())),
        }
    })?;

    let w = Arc::downgrade(shared);
    reg.register("bdev_set_options", STARTUP, move |params, resp| {
        let Some((sh, resp)) = upgrade(&w, resp) else {
            return;
        };
        let Ok(p) = decode_params::<SetOptionsParams>(params) else {
            return resp.err(RpcError::invalid_params("Invalid parameters"));
        };
        let mut o = sh.mgr.options();
        if let Some(v) = p.bdev_io_pool_size {
            o.bdev_io_pool_size = v;
        }
        if let Some(v) = p.bdev_io_cache_size {
            o.bdev_io_cache_size = v;
        }
        if let Some(v) = p.bdev_auto_examine {
            o.bdev_auto_examine = v;
        }
        if let Some(v) = p.iobuf_small_cache_size {
            o.iobuf_small_cache_size = v;
        }
        if let Some(v) = p.iobuf_large_cache_size {
            o.iobuf_large_cache_size = v;
        }
        let (pool, cache) = (o.bdev_io_pool_size, o.bdev_io_cache_size);
        match sh.mgr.set_options(o, sh.runtime.reactor_count()) {
            Ok(()) => resp.ok(json!(true)),
            Err(_) => resp.err(RpcError::invalid_params(format!(
                "Pool size {pool} too small for cache size {cache}"
            ))),
        }
    })?;
    Ok(())
}

fn live_bdevs(mgr: &BdevManager) -> Vec<Bdev> {
    mgr.bdevs()
        .into_iter()
        .filter(|b| !b.is_removing())
        .collect()
}

/// Answers `[info]` once `name` appears, polling every 100 ms on `t`;
/// -110 after `timeout_ms`, -19 if the app stops first.
fn wait_for_bdev(t: &Thread, sh: &Arc<AppShared>, name: String, timeout_ms: u64, resp: Responder) {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let weak = Arc::downgrade(sh);
    let resp = RefCell::new(Some(resp));
    t.register_poller("bdev_get_bdevs_wait", GET_BDEVS_POLL_US, move |p| {
        let answer = match weak.upgrade() {
            Some(sh) if sh.stop.is_stopped() => Some(Err(errno(libc::ENODEV))),
            Some(sh) => match find_bdev(&sh.mgr, &name) {
                Some(b) => Some(Ok(json!([b.info_json()]))),
                None if Instant::now() >= deadline => Some(Err(errno(libc::ETIMEDOUT))),
                None => None,
            },
            None => Some(Err(errno(libc::ENODEV))),
        };
        match answer {
            Some(a) => {
                p.unregister();
                if let Some(r) = resp.borrow_mut().take() {
                    r.respond(a);
                }
                PollerStatus::Busy
            }
            None => PollerStatus::Idle,
        }
    });
}

/// `bdev_get_iostat`: reads (then resets per `reset_mode`) each bdev's
/// statistics and answers once all are in.
fn get_iostat(mgr: &BdevManager, p: GetIostatParams, resp: Responder) {
    let names = match (p.name, p.names) {
        (Some(_), Some(_)) => return resp.err(errno(libc::EINVAL)),
        (Some(n), None) => Some(vec![n]),
        (None, names) => names,
    };
    if p.per_channel && names.as_ref().is_none_or(|n| n.len() != 1) {
        return resp.err(errno(libc::EINVAL));
    }
    let bdevs = match &names {
        Some(names) => {
            let mut v = Vec::with_capacity(names.len());
            for n in names {
                match find_bdev(mgr, n) {
                    Some(b) => v.push(b),
                    None => return resp.err(errno(libc::ENODEV)),
                }
            }
            v
        }
        None => live_bdevs(mgr),
    };
    let reset: ResetMode = p.reset_mode.unwrap_or(Mode::None).into();
    let ticks = clock::ticks();
    let head = move |m: &mut Map<String, Value>| {
        m.insert("tick_rate".into(), json!(clock::tick_rate()));
        m.insert("ticks".into(), json!(ticks));
    };

    if p.per_channel {
        let Some(b) = bdevs.into_iter().next() else {
            return resp.err(errno(libc::EINVAL));
        };
        let b2 = b.clone();
        b.get_channel_iostats(move |chans| {
            let mut m = Map::new();
            head(&mut m);
            m.insert("name".into(), json!(b2.name()));
            let list: Vec<Value> = chans
                .iter()
                .map(|(tid, st)| {
                    let mut c = Map::new();
                    c.insert("thread_id".into(), json!(tid));
                    c.extend(st.to_json_members());
                    Value::Object(c)
                })
                .collect();
            m.insert("channels".into(), Value::Array(list));
            let out = Value::Object(m);
            if reset == ResetMode::None {
                resp.ok(out);
            } else {
                b2.reset_iostat(reset, move || resp.ok(out));
            }
        });
        return;
    }

    struct Acc {
        stats: Vec<Option<(IoStat, Option<QueueDepthStats>)>>,
        left: usize,
        resp: Option<Responder>,
    }
    let n = bdevs.len();
    let names: Vec<String> = bdevs.iter().map(|b| b.name().to_string()).collect();
    let acc = Arc::new(Mutex::new(Acc {
        stats: vec![None; n],
        left: n,
        resp: Some(resp),
    }));
    let names = Arc::new(names);
    let complete = move |acc: &Mutex<Acc>| {
        let mut a = acc.lock();
        a.left -= 1;
        if a.left > 0 {
            return;
        }
        let list: Vec<Value> = a
            .stats
            .iter()
            .zip(names.iter())
            .filter_map(|(s, name)| {
                let (s, qd) = s.as_ref()?;
                let mut o = Map::new();
                o.insert("name".into(), json!(name));
                o.extend(s.to_json_members());
                if let Some(q) = qd {
                    o.insert("queue_depth_polling_period".into(), json!(q.period_us));
                    o.insert("queue_depth".into(), json!(q.queue_depth));
                    o.insert("io_time".into(), json!(q.io_time));
                    o.insert("weighted_io_time".into(), json!(q.weighted_io_time));
                }
                Some(Value::Object(o))
            })
            .collect();
        let mut m = Map::new();
        head(&mut m);
        m.insert("bdevs".into(), Value::Array(list));
        if let Some(r) = a.resp.take() {
            r.ok(Value::Object(m));
        }
    };
    if n == 0 {
        acc.lock().left = 1;
        complete(&acc);
        return;
    }
    let complete = Arc::new(complete);
    for (i, b) in bdevs.into_iter().enumerate() {
        let acc = Arc::clone(&acc);
        let complete = Arc::clone(&complete);
        let b2 = b.clone();
        b.get_iostat(move |st| {
            acc.lock().stats[i] = Some((st, b2.qd_stats()));
            if reset == ResetMode::None {
                complete(&acc);
            } else {
                b2.reset_iostat(reset, move || complete(&acc));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_bdevs_accepts_float_timeouts() {
        let p: GetBdevsParams = decode_params(Some(json!({"name": "x", "timeout": 20.0}))).unwrap();
        assert_eq!(p.timeout, Some(20));
        let p: GetBdevsParams = decode_params(Some(json!({"timeout": 1000}))).unwrap();
        assert_eq!(p.timeout, Some(1000));
        assert!(decode_params::<GetBdevsParams>(Some(json!({"timeout": -1}))).is_err());
        assert!(decode_params::<GetBdevsParams>(Some(json!({"timeout": "1"}))).is_err());
        assert!(decode_params::<GetBdevsParams>(Some(json!({"bogus": 1}))).is_err());
    }
}
