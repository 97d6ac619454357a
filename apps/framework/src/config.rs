//! SPDK JSON configuration files: parsing (with `//` and `/* */`
//! comments) and replay through the method registry.
//!
//! A config is `{"subsystems": [{"subsystem": NAME, "config": [ENTRY, ...]
//! | null}, ...]}`; an entry is `{"method": M, "params": {...}}` or an array
//! of such entries, sent as one batch. [`load_config`] replays one *pass*:
//! each entry whose method is callable in the registry's current state runs,
//! one after another, the next one only once the previous one answered. In
//! the RUNTIME pass, methods callable in both states are skipped (they ran
//! in the STARTUP pass). Subsystems this application does not have are
//! skipped with a notice, so a full `spdk_tgt` config loads; an unknown
//! method in a known subsystem fails the load (SPDK's json_config.c).
//!
//! A config file is at most [`MAX_CONFIG_BYTES`] (the RPC request limit):
//! a larger one fails before anything is read into memory.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use bdevkit::thread::{Thread, ThreadHandle};
use bdevkit_jsonrpc::{MethodRegistry, Responder, RpcError, RUNTIME, STARTUP};
use parking_lot::Mutex;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// One call of a config entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigCall {
    /// RPC method.
    pub method: String,
    /// Its params (an object), if any.
    pub params: Option<Value>,
}

/// One entry of a subsystem's `config` array.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigEntry {
    /// `{"method", "params"}`.
    Call(ConfigCall),
    /// An array of calls, sent as one JSON-RPC batch.
    Batch(Vec<ConfigCall>),
}

/// One element of `subsystems`.
#[derive(Debug, Clone, PartialEq)]
pub struct SubsystemConfig {
    /// Subsystem name (`bdev`, ...).
    pub name: String,
    /// Its entries (`config: null` gives none).
    pub entries: Vec<ConfigEntry>,
}

/// A parsed, shape-checked JSON config.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JsonConfig {
    /// The subsystems, in file order.
    pub subsystems: Vec<SubsystemConfig>,
}

/// Largest config file: the largest RPC request
/// ([`bdevkit_jsonrpc::DEFAULT_MAX_REQUEST_BYTES`], 64 MiB). A config is a
/// list of RPC requests; a saved config of 10 000 bdevs is about 3 MiB.
pub const MAX_CONFIG_BYTES: usize = bdevkit_jsonrpc::DEFAULT_MAX_REQUEST_BYTES;

/// Reads `path` as text, failing with [`Error::ConfigTooLarge`] without
/// reading it when the file is larger than `limit`, or once more than
/// `limit` bytes came (for pipes and devices, whose size is unknown).
fn read_limited(path: &Path, limit: usize) -> Result<String> {
    let read_error = |source| Error::ReadConfig {
        path: path.to_path_buf(),
        source,
    };
    let too_large = || Error::ConfigTooLarge {
        path: path.to_path_buf(),
        limit,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let limit64 = u64::try_from(limit).unwrap_or(u64::MAX);
    if file.metadata().map_err(read_error)?.len() > limit64 {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(limit64.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > limit {
        return Err(too_large());
    }
    String::from_utf8(bytes)
        .map_err(|e| read_error(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

impl JsonConfig {
    /// Reads and parses a config file (at most [`MAX_CONFIG_BYTES`]).
    pub fn from_file(path: &Path) -> Result<JsonConfig> {
        let text = read_limited(path, MAX_CONFIG_BYTES)?;
        Self::parse(&text)
    }

    /// Parses config text. Shape errors carry SPDK's messages.
    pub fn parse(text: &str) -> Result<JsonConfig> {
        let clean = strip_comments(text)?;
        if clean.trim().is_empty() {
            return Err(Error::ConfigShape("JSON data cannot be empty".into()));
        }
        let v: Value = serde_json::from_str(&clean).map_err(Error::ParseConfig)?;
        Self::from_value(v)
    }

    /// Shape-checks an already parsed JSON value.
    pub fn from_value(v: Value) -> Result<JsonConfig> {
        let Value::Object(mut top) = v else {
            return Err(Error::ConfigShape(
                "Invalid JSON configuration: not enclosed in {}.".into(),
            ));
        };
        let subsystems = match top.remove("subsystems") {
            None => {
                tracing::warn!("No 'subsystems' key JSON configuration file.");
                return Ok(JsonConfig::default());
            }
            Some(Value::Array(a)) => a,
            Some(_) => {
                return Err(Error::ConfigShape(
                    "Invalid JSON configuration: 'subsystems' should be an array.".into(),
                ))
            }
        };
        if subsystems.is_empty() {
            tracing::info!("'subsystems' configuration is empty");
        }
        let mut out = Vec::with_capacity(subsystems.len());
        for (i, s) in subsystems.into_iter().enumerate() {
            out.push(parse_subsystem(i, s)?);
        }
        Ok(JsonConfig { subsystems: out })
    }
}

fn shape(msg: String) -> Error {
    Error::ConfigShape(msg)
}

fn parse_subsystem(i: usize, v: Value) -> Result<SubsystemConfig> {
    let bad = |why: &str| {
        shape(format!(
            "Failed to parse subsystem configuration: subsystems[{i}]: {why}"
        ))
    };
    let Value::Object(m) = v else {
        return Err(bad("not an object"));
    };
    let mut name = None;
    let mut config = None;
    for (k, v) in m {
        match k.as_str() {
            "subsystem" => match v {
                Value::String(s) => name = Some(s),
                _ => return Err(bad("'subsystem' must be a string")),
            },
            "config" => match v {
                Value::Array(a) => config = Some(a),
                Value::Null => config = Some(Vec::new()),
                _ => return Err(bad("'config' must be an array or null")),
            },
            other => return Err(bad(&format!("unknown key '{other}'"))),
        }
    }
    let name = name.ok_or_else(|| bad("missing 'subsystem'"))?;
    let config = config.ok_or_else(|| bad("missing 'config'"))?;
    let mut entries = Vec::with_capacity(config.len());
    for (j, e) in config.into_iter().enumerate() {
        let bad_entry = |why: String| {
            shape(format!(
                "Failed to decode config entry: subsystem '{name}' entry {j}: {why}"
            ))
        };
        entries.push(match e {
            Value::Array(items) => ConfigEntry::Batch(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(k, item)| {
                        parse_call(item).map_err(|why| bad_entry(format!("batch item {k}: {why}")))
                    })
                    .collect::<Result<_>>()?,
            ),
            other => ConfigEntry::Call(parse_call(other).map_err(bad_entry)?),
        });
    }
    Ok(SubsystemConfig { name, entries })
}

fn parse_call(v: Value) -> std::result::Result<ConfigCall, String> {
    let Value::Object(m) = v else {
        return Err("not an object".into());
    };
    let mut method = None;
    let mut params = None;
    for (k, v) in m {
        match k.as_str() {
            "method" => match v {
                Value::String(s) => method = Some(s),
                _ => return Err("'method' must be a string".into()),
            },
            "params" => match v {
                Value::Object(_) => params = Some(v),
                _ => return Err("'params' must be an object".into()),
            },
            other => return Err(format!("unknown key '{other}'")),
        }
    }
    Ok(ConfigCall {
        method: method.ok_or("missing 'method'")?,
        params,
    })
}

/// Replaces `//` line comments and `/* */` block comments outside strings
/// with spaces (newlines kept, so parse errors point at the right line).
fn strip_comments(text: &str) -> Result<String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            out.push(c);
            if c == b'\\' && i + 1 < b.len() {
                out.push(b[i + 1]);
                i += 2;
                continue;
            }
            if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        match (c, b.get(i + 1)) {
            (b'"', _) => {
                in_str = true;
                out.push(c);
                i += 1;
            }
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    out.push(b' ');
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                let start = i;
                out.extend_from_slice(b"  ");
                i += 2;
                loop {
                    match (b.get(i), b.get(i + 1)) {
                        (Some(b'*'), Some(b'/')) => {
                            out.extend_from_slice(b"  ");
                            i += 2;
                            break;
                        }
                        (Some(&ch), _) => {
                            out.push(if ch == b'\n' { b'\n' } else { b' ' });
                            i += 1;
                        }
                        (None, _) => {
                            return Err(shape(format!(
                                "Parsing JSON configuration failed: unterminated /* comment at byte {start}"
                            )))
                        }
                    }
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes, so this stays UTF-8.
    String::from_utf8(out).map_err(|_| shape("Parsing JSON configuration failed: not UTF-8".into()))
}

/// How [`load_config`] treats failures and subsystems.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Log error answers and carry on (`--json-ignore-init-errors`).
    pub ignore_errors: bool,
    /// Subsystems this application has; others are skipped with a notice.
    /// Default: `keyring` and `bdev`, the framework's own (an app adds
    /// those it links).
    pub subsystems: Vec<String>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            ignore_errors: false,
            subsystems: crate::BUILTIN_SUBSYSTEMS
                .iter()
                .map(ToString::to_string)
                .collect(),
        }
    }
}

type DoneFn = Box<dyn FnOnce(Result<()>) + Send>;

/// One walk over a config's entries for the registry's current state.
struct Walk {
    registry: MethodRegistry,
    config: Arc<JsonConfig>,
    opts: LoadOptions,
    thread: ThreadHandle,
    sub: usize,
    entry: usize,
    done: Option<DoneFn>,
}

/// Replays the entries of `config` that are callable in `registry`'s
/// current state (one pass; see the module docs), one at a time, through
/// [`MethodRegistry::dispatch`], then calls `done` on this thread.
///
/// Must be called on a bdevkit thread (the app thread, where RPC handlers
/// expect to run); never blocks it: each answer, however late, continues the
/// walk through a message. Fails at once with [`Error::AppThreadGone`]
/// outside a bdevkit thread.
pub fn load_config(
    registry: &MethodRegistry,
    config: Arc<JsonConfig>,
    opts: LoadOptions,
    done: impl FnOnce(Result<()>) + Send + 'static,
) {
    let Some(thread) = Thread::current() else {
        return done(Err(Error::AppThreadGone));
    };
    let walk = Walk {
        registry: registry.clone(),
        config,
        opts,
        thread: thread.handle(),
        sub: 0,
        entry: 0,
        done: Some(Box::new(done)),
    };
    walk.advance();
}

enum Step {
    Skip,
    Run(Vec<ConfigCall>, bool),
}

impl Walk {
    fn finish(mut self, r: Result<()>) {
        if let Some(d) = self.done.take() {
            d(r);
        }
    }

    /// Runs entries until one is dispatched (its answer resumes the walk)
    /// or the config ends.
    fn advance(mut self) {
        loop {
            let Some(sub) = self.config.subsystems.get(self.sub) else {
                return self.finish(Ok(()));
            };
            if self.entry == 0 && !self.opts.subsystems.contains(&sub.name) {
                self.skip_notice(sub);
                self.sub += 1;
                continue;
            }
            let Some(entry) = sub.entries.get(self.entry) else {
                self.sub += 1;
                self.entry = 0;
                continue;
            };
            let step = match self.classify(entry) {
                Ok(s) => s,
                // SPDK's loader with --json-ignore-init-errors: a method
                // this app lacks (another module's options) is skipped.
                Err(Error::ConfigMethodNotFound { method }) if self.opts.ignore_errors => {
                    tracing::warn!(%method, "config method not found; skipping (--json-ignore-init-errors)");
                    Step::Skip
                }
                // The options of a bdev module this build lacks (SPDK's
                // saved configs carry e.g. bdev_iscsi_set_options): nothing
                // of that module can be created here, so skip with a notice.
                Err(Error::ConfigMethodNotFound { method }) if is_module_options(&method) => {
                    tracing::warn!(%method, "options of a bdev module this application does not have; skipping");
                    Step::Skip
                }
                Err(e) => return self.finish(Err(e)),
            };
            self.entry += 1;
            match step {
                Step::Skip => continue,
                Step::Run(calls, batch) => return self.dispatch(calls, batch),
            }
        }
    }

    /// The config of a subsystem this application does not have is
    /// skipped (SPDK's loader does the same); settings in it are lost, so
    /// they are named once, in the STARTUP pass (doc/rpc.md lists what
    /// spdk_tgt writes there).
    fn skip_notice(&self, sub: &SubsystemConfig) {
        let methods: Vec<&str> = sub
            .entries
            .iter()
            .flat_map(|e| match e {
                ConfigEntry::Call(c) => std::slice::from_ref(c),
                ConfigEntry::Batch(b) => b.as_slice(),
            })
            .map(|c| c.method.as_str())
            .collect();
        if methods.is_empty() || self.registry.state() != STARTUP {
            tracing::info!(subsystem = %sub.name, "subsystem not in this application; skipping its config");
        } else {
            tracing::warn!(
                subsystem = %sub.name,
                ?methods,
                "subsystem not in this application; its config is ignored"
            );
        }
    }

    fn classify(&self, entry: &ConfigEntry) -> Result<Step> {
        let mask_of = |m: &str| {
            self.registry
                .state_mask(m)
                .ok_or_else(|| Error::ConfigMethodNotFound { method: m.into() })
        };
        let (mask, calls, batch) = match entry {
            ConfigEntry::Call(c) => (mask_of(&c.method)?, vec![c.clone()], false),
            ConfigEntry::Batch(items) if items.is_empty() => return Ok(Step::Skip),
            ConfigEntry::Batch(items) => {
                let mut mask = STARTUP | RUNTIME;
                for c in items {
                    mask &= mask_of(&c.method)?;
                }
                if mask == 0 {
                    return Err(Error::ConfigBatchState);
                }
                (mask, items.clone(), true)
            }
        };
        let state = self.registry.state();
        if mask & state != state {
            return Ok(Step::Skip);
        }
        if state == RUNTIME && mask == STARTUP | RUNTIME {
            // Ran in the STARTUP pass already.
            return Ok(Step::Skip);
        }
        Ok(Step::Run(calls, batch))
    }

    fn subsystem(&self) -> String {
        self.config
            .subsystems
            .get(self.sub)
            .map(|s| s.name.clone())
            .unwrap_or_default()
    }

    fn dispatch(self, calls: Vec<ConfigCall>, batch: bool) {
        let registry = self.registry.clone();
        let n = calls.len();
        if !batch || n == 1 {
            let Some(call) = calls.into_iter().next() else {
                return self.advance();
            };
            tracing::debug!(method = %call.method, "config: calling");
            let method = call.method.clone();
            registry.dispatch(
                &call.method,
                call.params,
                Responder::new(move |r| {
                    let t = self.thread.clone();
                    let failed = r.err().map(|e| (method, e));
                    // Always continue from a message: no recursion, whatever
                    // thread answered.
                    let _ = t.send_msg(move || self.answered(failed));
                }),
            );
            return;
        }
        struct Acc {
            remaining: usize,
            failed: Option<(String, RpcError)>,
            walk: Option<Walk>,
        }
        let acc = Arc::new(Mutex::new(Acc {
            remaining: n,
            failed: None,
            walk: Some(self),
        }));
        for call in calls {
            let acc = Arc::clone(&acc);
            let method = call.method.clone();
            registry.dispatch(
                &call.method,
                call.params,
                Responder::new(move |r| {
                    let mut a = acc.lock();
                    if let Err(e) = r {
                        Walk::log_error(&method, &e);
                        a.failed.get_or_insert((method, e));
                    }
                    a.remaining -= 1;
                    if a.remaining == 0 {
                        if let Some(walk) = a.walk.take() {
                            let failed = a.failed.take();
                            drop(a);
                            let t = walk.thread.clone();
                            let _ = t.send_msg(move || walk.answered_batch(failed));
                        }
                    }
                }),
            );
        }
    }

    fn log_error(method: &str, e: &RpcError) {
        tracing::error!(
            method,
            "error response: {}",
            serde_json::to_string(e).unwrap_or_default()
        );
    }

    fn answered(self, failed: Option<(String, RpcError)>) {
        if let Some((m, e)) = &failed {
            Walk::log_error(m, e);
        }
        self.answered_batch(failed);
    }

    fn answered_batch(self, failed: Option<(String, RpcError)>) {
        match failed {
            Some((method, e)) if !self.opts.ignore_errors => {
                let subsystem = self.subsystem();
                self.finish(Err(Error::ConfigEntry {
                    subsystem,
                    method,
                    code: e.code,
                    message: e.message,
                }));
            }
            _ => self.advance(),
        }
    }
}

/// Groups consecutive entries of SPDK's batched create methods into batch
/// arrays (`framework_get_config` with `with_batches: true`).
#[must_use]
pub fn batch_entries(entries: Vec<Value>) -> Vec<Value> {
    const BATCHED: [&str; 8] = [
        "bdev_malloc_create",
        "bdev_null_create",
        "bdev_nvme_attach_controller",
        "nvmf_create_subsystem",
        "nvmf_subsystem_add_host",
        "nvmf_subsystem_add_ns",
        "nvmf_ns_add_host",
        "nvmf_subsystem_add_listener",
    ];
    let method = |v: &Value| v.get("method").and_then(Value::as_str).map(str::to_owned);
    let mut out: Vec<Value> = Vec::new();
    let mut run: Vec<Value> = Vec::new();
    let mut run_method: Option<String> = None;
    for e in entries {
        let m = method(&e);
        let batched = m.as_deref().is_some_and(|m| BATCHED.contains(&m));
        if batched && m == run_method {
            run.push(e);
            continue;
        }
        if !run.is_empty() {
            out.push(Value::Array(std::mem::take(&mut run)));
        }
        run_method = None;
        if batched {
            run_method = m;
            run.push(e);
        } else {
            out.push(e);
        }
    }
    if !run.is_empty() {
        out.push(Value::Array(run));
    }
    out
}

/// A config object as `save_config` writes it.
#[must_use]
pub fn config_document(subsystems: Vec<(String, Value)>) -> Value {
    let list = subsystems
        .into_iter()
        .map(|(name, config)| {
            let mut m = Map::new();
            m.insert("subsystem".into(), Value::String(name));
            m.insert("config".into(), config);
            Value::Object(m)
        })
        .collect();
    let mut top = Map::new();
    top.insert("subsystems".into(), Value::Array(list));
    Value::Object(top)
}

/// `bdev_<module>_set_options`: a module's options method.
fn is_module_options(method: &str) -> bool {
    method
        .strip_prefix("bdev_")
        .and_then(|m| m.strip_suffix("_set_options"))
        .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A file over the limit fails before it is read: a 1 GiB sparse file
    /// costs nothing; a device of unknown size is cut at the limit.
    #[test]
    fn config_files_over_the_limit_fail_early() {
        let dir = tempfile::tempdir().unwrap();
        let huge = dir.path().join("huge.json");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let e = JsonConfig::from_file(&huge).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "JSON config file {} is larger than 67108864 bytes (the RPC request limit)",
                huge.display()
            )
        );
        assert_eq!(e.errno(), libc::EFBIG);
        let e = read_limited(Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(
            matches!(e, Error::ConfigTooLarge { limit: 4096, .. }),
            "{e}"
        );
        // At the limit exactly it is read.
        let ok = dir.path().join("ok.json");
        std::fs::write(&ok, r#"{"subsystems": []}"#).unwrap();
        assert_eq!(read_limited(&ok, 18).unwrap(), r#"{"subsystems": []}"#);
        assert!(read_limited(&ok, 17).is_err());
        assert_eq!(JsonConfig::from_file(&ok).unwrap(), JsonConfig::default());
    }

    #[test]
    fn module_options_methods_are_recognised() {
        assert!(is_module_options("bdev_iscsi_set_options"));
        assert!(is_module_options("bdev_virtio_blk_set_options"));
        assert!(!is_module_options("bdev_set_options"));
        assert!(!is_module_options("bdev_iscsi_create"));
        assert!(!is_module_options("nvmf_set_options"));
    }

    #[test]
    fn comments_are_stripped_outside_strings() {
        let text = r#"
        // leading comment
        { /* block
             comment */ "subsystems": [ // trailing
            {"subsystem": "bdev", "config": [
                {"method": "bdev_null_create", "params": {"name": "a//b/*c*/", "block_size": 512, "num_blocks": 8}}
            ]}
        ]}"#;
        let c = JsonConfig::parse(text).unwrap();
        assert_eq!(c.subsystems.len(), 1);
        let ConfigEntry::Call(call) = &c.subsystems[0].entries[0] else {
            panic!("not a call")
        };
        assert_eq!(call.params.as_ref().unwrap()["name"], "a//b/*c*/");
        assert!(JsonConfig::parse("{ /* open").is_err());
    }

    #[test]
    fn shape_errors_use_spdk_messages() {
        let msg = |t: &str| JsonConfig::parse(t).unwrap_err().to_string();
        assert_eq!(msg("[]"), "Invalid JSON configuration: not enclosed in {}.");
        assert_eq!(
            msg(r#"{"subsystems": {}}"#),
            "Invalid JSON configuration: 'subsystems' should be an array."
        );
        assert_eq!(msg(""), "JSON data cannot be empty");
        assert_eq!(msg("{"), "Parsing JSON configuration failed");
        assert!(msg(r#"{"subsystems": [{"subsystem": 1, "config": []}]}"#)
            .starts_with("Failed to parse subsystem configuration"));
        assert!(
            msg(r#"{"subsystems": [{"subsystem": "bdev", "config": [{"params": {}}]}]}"#)
                .contains("missing 'method'")
        );
        assert!(msg(
            r#"{"subsystems": [{"subsystem": "bdev", "config": [{"method": "m", "params": []}]}]}"#
        )
        .contains("'params' must be an object"));
        assert_eq!(JsonConfig::parse("{}").unwrap(), JsonConfig::default());
        let c = JsonConfig::parse(
            r#"{"subsystems": [{"subsystem": "x", "config": null},
               {"subsystem": "bdev", "config": [[{"method": "a"}, {"method": "b", "params": {}}], []]}]}"#,
        )
        .unwrap();
        assert!(c.subsystems[0].entries.is_empty());
        assert!(matches!(&c.subsystems[1].entries[0], ConfigEntry::Batch(v) if v.len() == 2));
    }

    #[test]
    fn batching_groups_consecutive_creates() {
        let e = |m: &str, n: u32| json!({"method": m, "params": {"n": n}});
        let out = batch_entries(vec![
            e("bdev_set_options", 0),
            e("bdev_malloc_create", 1),
            e("bdev_malloc_create", 2),
            e("bdev_null_create", 3),
            e("bdev_passthru_create", 4),
            e("bdev_wait_for_examine", 5),
        ]);
        assert_eq!(out.len(), 5);
        assert_eq!(out[1].as_array().unwrap().len(), 2);
        assert_eq!(out[2].as_array().unwrap().len(), 1);
        assert_eq!(out[3]["method"], "bdev_passthru_create");
    }
}
