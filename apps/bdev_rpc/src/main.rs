//! `bdev_rpc`: a small JSON-RPC command-line client for `bdev_tgt` (and any
//! SPDK target).
//!
//! ```text
//! bdev_rpc [-s SOCK] [-t SECS] METHOD [-p key=value ...] [--json '{...}']
//! bdev_rpc [-s SOCK] save_config [-o FILE] [-i INDENT] [--subsystems a,b] [--with-batches]
//! bdev_rpc [-s SOCK] load_config [-j FILE|JSON] [--include-aliases]
//! ```
//!
//! `-p` values are JSON when they parse as JSON (`8`, `true`, `[1,2]`,
//! `"quoted"`), strings otherwise; they override keys of `--json`. The
//! result is printed as indented JSON on stdout, except a bare string
//! (the name a create method answers), which is printed as it is, without
//! quotes, as `spdk-rpc` does. An error reply prints its
//! code and message on stderr and exits 1, as do connection failures.
//! `save_config` and `load_config` follow `spdk-rpc`'s client-side
//! algorithms.
#![forbid(unsafe_code)]

use std::error::Error as _;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bdevkit_jsonrpc::{Client, ClientError, ErrorChain};
use clap::Parser;
use serde_json::{Map, Value};

const DEFAULT_SOCKET: &str = "/var/tmp/bdevkit.sock";

/// JSON-RPC client for bdev_tgt.
#[derive(Debug, Parser)]
#[command(name = "bdev_rpc", version)]
struct Cli {
    /// Server unix socket.
    #[arg(short = 's', long = "socket", value_name = "SOCK", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Seconds to wait for each response.
    #[arg(
        short = 't',
        long = "timeout",
        value_name = "SECS",
        default_value_t = 60.0
    )]
    timeout: f64,
    /// Method to call, or `save_config` / `load_config`.
    method: String,
    /// Method options (`-p key=value`, `--json '{...}'`, or those of
    /// save_config / load_config).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    rest: Vec<String>,
}

/// Arguments of a plain method call.
#[derive(Debug, Parser)]
#[command(no_binary_name = true)]
struct CallArgs {
    /// A parameter: key=value (value parsed as JSON when it is JSON).
    #[arg(short = 'p', long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// All parameters as one JSON object.
    #[arg(long = "json", value_name = "OBJECT")]
    json: Option<String>,
}

/// `save_config` options (as `spdk-rpc save_config`, plus `-o`).
#[derive(Debug, Parser)]
#[command(no_binary_name = true)]
struct SaveArgs {
    /// Write to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Indent level; negative means compact.
    #[arg(
        short = 'i',
        long = "indent",
        default_value_t = 2,
        allow_negative_numbers = true
    )]
    indent: i64,
    /// Only these subsystems (comma-separated) and their dependencies.
    #[arg(long = "subsystems", value_name = "LIST")]
    subsystems: Option<String>,
    /// Keep batch arrays in the output.
    #[arg(long)]
    with_batches: bool,
}

/// `load_config` options (as `spdk-rpc load_config`).
#[derive(Debug, Parser)]
#[command(no_binary_name = true)]
struct LoadArgs {
    /// Config file, or a literal JSON string; stdin when absent or `-`.
    #[arg(short = 'j', long = "json-conf", value_name = "FILE|JSON")]
    json_conf: Option<String>,
    /// Also accept deprecated method aliases.
    #[arg(short = 'i', long = "include-aliases")]
    include_aliases: bool,
}

/// What went wrong, for the exit message.
enum Failure {
    /// Bad command line.
    Usage(String),
    /// The server answered with an error.
    Rpc { code: i32, message: String },
    /// Anything else.
    Other(String),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Rpc(r) => Failure::Rpc {
                code: r.code,
                message: r.message,
            },
            ClientError::Timeout => Failure::Other("timeout while waiting for response".into()),
            other => Failure::Other(ErrorChain(&other).to_string()),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("{msg}");
            ExitCode::from(2)
        }
        Err(Failure::Rpc { code, message }) => {
            eprintln!("bdev_rpc: {} failed: error {code}: {message}", cli.method);
            ExitCode::FAILURE
        }
        Err(Failure::Other(msg)) => {
            eprintln!("bdev_rpc: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn connect(cli: &Cli) -> Result<Client, Failure> {
    let mut c = Client::connect_unix(&cli.socket).map_err(|e| {
        Failure::Other(format!(
            "cannot connect to {}: {}\nIs bdev_tgt running?",
            cli.socket.display(),
            e.source()
                .map_or_else(|| e.to_string(), ToString::to_string)
        ))
    })?;
    let t = if cli.timeout.is_finite() && cli.timeout > 0.0 {
        Duration::try_from_secs_f64(cli.timeout).ok()
    } else {
        None
    };
    c.set_timeout(t);
    Ok(c)
}

fn run(cli: &Cli) -> Result<(), Failure> {
    match cli.method.as_str() {
        "save_config" => {
            let a =
                SaveArgs::try_parse_from(&cli.rest).map_err(|e| Failure::Usage(e.to_string()))?;
            save_config(&mut connect(cli)?, &a)
        }
        "load_config" => {
            let a =
                LoadArgs::try_parse_from(&cli.rest).map_err(|e| Failure::Usage(e.to_string()))?;
            let text = read_conf(a.json_conf.as_deref())?;
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| Failure::Other(format!("invalid JSON config: {e}")))?;
            load_config(&mut connect(cli)?, v, a.include_aliases)
        }
        method => {
            let a =
                CallArgs::try_parse_from(&cli.rest).map_err(|e| Failure::Usage(e.to_string()))?;
            let params = build_params(&a)?;
            let result = connect(cli)?.call(method, params)?;
            print_result(&result, &mut std::io::stdout())
        }
    }
}

/// `--json` object, then each `-p key=value` on top.
fn build_params(a: &CallArgs) -> Result<Option<Value>, Failure> {
    let mut obj = match &a.json {
        None => None,
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => Some(m),
            Ok(_) => return Err(Failure::Usage("--json must be a JSON object".into())),
            Err(e) => return Err(Failure::Usage(format!("--json is not valid JSON: {e}"))),
        },
    };
    for p in &a.params {
        let Some((k, v)) = p.split_once('=') else {
            return Err(Failure::Usage(format!("-p {p}: expected key=value")));
        };
        if k.is_empty() {
            return Err(Failure::Usage(format!("-p {p}: empty key")));
        }
        obj.get_or_insert_with(Map::new)
            .insert(k.to_string(), param_value(v));
    }
    Ok(obj.map(Value::Object))
}

/// A `-p` value: JSON when it parses as JSON, otherwise a string.
fn param_value(v: &str) -> Value {
    serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()))
}

/// A method's result: a string as it is (`Null0`, as `spdk-rpc` prints
/// it), anything else as JSON indented by 2.
fn print_result(v: &Value, out: &mut dyn Write) -> Result<(), Failure> {
    match v {
        Value::String(s) => {
            writeln!(out, "{s}").map_err(|e| Failure::Other(format!("write output: {e}")))
        }
        other => print_json(other, 2, out),
    }
}

fn print_json(v: &Value, indent: i64, out: &mut dyn Write) -> Result<(), Failure> {
    let mut buf = Vec::new();
    if indent < 0 {
        serde_json::to_writer(&mut buf, v)
    } else {
        let spaces = vec![b' '; usize::try_from(indent).unwrap_or(2)];
        let fmt = serde_json::ser::PrettyFormatter::with_indent(&spaces);
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        serde::Serialize::serialize(v, &mut ser)
    }
    .map_err(|e| Failure::Other(format!("encode output: {e}")))?;
    buf.push(b'\n');
    out.write_all(&buf)
        .map_err(|e| Failure::Other(format!("write output: {e}")))
}

fn read_conf(arg: Option<&str>) -> Result<String, Failure> {
    match arg {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Failure::Other(format!("read stdin: {e}")))?;
            Ok(s)
        }
        Some(a) if std::path::Path::new(a).exists() => {
            std::fs::read_to_string(a).map_err(|e| Failure::Other(format!("read {a}: {e}")))
        }
        Some(literal) => Ok(literal.to_string()),
    }
}

/// `spdk-rpc save_config`: `framework_get_subsystems`, then
/// `framework_get_config` for each selected subsystem (and its transitive
/// dependencies), written as `{"subsystems": [...]}`.
fn save_config(c: &mut Client, a: &SaveArgs) -> Result<(), Failure> {
    let subs = c.call("framework_get_subsystems", None)?;
    let subs = subs
        .as_array()
        .ok_or_else(|| Failure::Other("framework_get_subsystems: not an array".into()))?;
    let mut deps: Vec<(String, Vec<String>)> = Vec::new();
    for s in subs {
        let name = s["subsystem"].as_str().unwrap_or_default().to_string();
        let mut all = vec![name.clone()];
        for d in s["depends_on"].as_array().into_iter().flatten() {
            let d = d.as_str().unwrap_or_default();
            if let Some((_, dd)) = deps.iter().find(|(n, _)| n == d) {
                all.extend(dd.iter().cloned());
            } else {
                all.push(d.to_string());
            }
        }
        deps.push((name, all));
    }
    let wanted: Option<Vec<String>> = match &a.subsystems {
        None => None,
        Some(list) => {
            let mut w = Vec::new();
            for s in list.split(',') {
                let (_, d) = deps
                    .iter()
                    .find(|(n, _)| n == s)
                    .ok_or_else(|| Failure::Other(format!("unknown subsystem '{s}'")))?;
                w.extend(d.iter().cloned());
            }
            Some(w)
        }
    };
    let mut out = Vec::new();
    for (name, _) in &deps {
        if wanted.as_ref().is_some_and(|w| !w.contains(name)) {
            continue;
        }
        let params = serde_json::json!({"name": name, "with_batches": a.with_batches});
        let cfg = c.call("framework_get_config", Some(params))?;
        let mut m = Map::new();
        m.insert("subsystem".into(), Value::String(name.clone()));
        m.insert("config".into(), cfg);
        out.push(Value::Object(m));
    }
    let mut top = Map::new();
    top.insert("subsystems".into(), Value::Array(out));
    let doc = Value::Object(top);
    match &a.output {
        None => print_json(&doc, a.indent, &mut std::io::stdout()),
        Some(path) => {
            let mut f = std::fs::File::create(path)
                .map_err(|e| Failure::Other(format!("create {}: {e}", path.display())))?;
            print_json(&doc, a.indent, &mut f)
        }
    }
}

fn method_list(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str().map(String::from))
        .collect()
}

fn entry_methods(e: &Value) -> Vec<Option<&str>> {
    match e {
        Value::Array(items) => items.iter().map(|i| i["method"].as_str()).collect(),
        other => vec![other["method"].as_str()],
    }
}

/// `spdk-rpc load_config` (spec 3.4): drop empty subsystems; check every
/// method exists; then repeatedly call whatever is callable in the current
/// state (batches as one batch request) and `framework_start_init` when it
/// is, until nothing more can be called.
fn load_config(c: &mut Client, doc: Value, include_aliases: bool) -> Result<(), Failure> {
    let subsystems = doc
        .get("subsystems")
        .and_then(Value::as_array)
        .ok_or_else(|| Failure::Other("invalid JSON config: no 'subsystems' array".into()))?;
    let mut pending: Vec<Vec<Value>> = subsystems
        .iter()
        .filter_map(|s| s.get("config").and_then(Value::as_array).cloned())
        .filter(|cfg| !cfg.is_empty())
        .collect();
    let get_methods = |c: &mut Client, current: bool| -> Result<Vec<String>, Failure> {
        let p = serde_json::json!({"current": current, "include_aliases": include_aliases});
        Ok(method_list(&c.call("rpc_get_methods", Some(p))?))
    };
    let all = get_methods(c, false)?;
    if pending.is_empty() {
        if all.iter().any(|m| m == "framework_start_init") {
            c.call("framework_start_init", None)?;
        }
        return Ok(());
    }
    for cfg in &pending {
        for e in cfg {
            if entry_methods(e)
                .iter()
                .any(|m| !m.is_some_and(|m| all.iter().any(|a| a == m)))
            {
                return Err(Failure::Other(
                    "Unknown method was included in the config file".into(),
                ));
            }
        }
    }
    while !pending.is_empty() {
        let allowed = get_methods(c, true)?;
        let callable = |e: &Value| {
            entry_methods(e)
                .iter()
                .all(|m| m.is_some_and(|m| allowed.iter().any(|a| a == m)))
        };
        let mut called = false;
        for cfg in &mut pending {
            let mut left = Vec::new();
            for e in std::mem::take(cfg) {
                if let Value::Array(items) = &e {
                    if items.is_empty() {
                        continue;
                    }
                }
                if !callable(&e) {
                    left.push(e);
                    continue;
                }
                call_entry(c, &e)?;
                called = true;
            }
            *cfg = left;
        }
        pending.retain(|cfg| !cfg.is_empty());
        if allowed.iter().any(|m| m == "framework_start_init") {
            c.call("framework_start_init", None)?;
            called = true;
        }
        if !called {
            break;
        }
    }
    if !pending.is_empty() {
        println!("Some configs were skipped because the RPC state that can call them passed over.");
    }
    Ok(())
}

fn call_entry(c: &mut Client, e: &Value) -> Result<(), Failure> {
    let one = |e: &Value| {
        (
            e["method"].as_str().unwrap_or_default().to_string(),
            e.get("params").cloned(),
        )
    };
    match e {
        Value::Array(items) => {
            let calls: Vec<(String, Option<Value>)> = items.iter().map(one).collect();
            for r in c.call_batch(&calls)? {
                if let Err(err) = r {
                    return Err(Failure::Rpc {
                        code: err.code,
                        message: err.message,
                    });
                }
            }
            Ok(())
        }
        single => {
            let (m, p) = one(single);
            c.call(&m, p).map(drop).map_err(Failure::from)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn param_values_are_json_when_they_parse() {
        assert_eq!(param_value("8"), json!(8));
        assert_eq!(param_value("true"), json!(true));
        assert_eq!(param_value("[1,2]"), json!([1, 2]));
        assert_eq!(param_value("Malloc0"), json!("Malloc0"));
        assert_eq!(param_value("\"8\""), json!("8"));
        assert_eq!(param_value(""), json!(""));
    }

    #[test]
    fn results_print_as_spdk_rpc_prints_them() {
        let shown = |v: Value| {
            let mut out = Vec::new();
            assert!(print_result(&v, &mut out).is_ok());
            String::from_utf8(out).unwrap()
        };
        assert_eq!(shown(json!("Null0")), "Null0\n");
        assert_eq!(shown(json!(true)), "true\n");
        assert_eq!(shown(json!(["a", "b"])), "[\n  \"a\",\n  \"b\"\n]\n");
        assert_eq!(shown(json!({"k": 1})), "{\n  \"k\": 1\n}\n");
    }

    #[test]
    fn params_merge_json_and_p() {
        let a = CallArgs::try_parse_from([
            "--json",
            r#"{"name": "x", "block_size": 512}"#,
            "-p",
            "block_size=4096",
            "-p",
            "num_blocks=8",
        ])
        .unwrap();
        assert_eq!(
            build_params(&a).ok().flatten(),
            Some(json!({"name": "x", "block_size": 4096, "num_blocks": 8}))
        );
        let none = CallArgs::try_parse_from(Vec::<String>::new()).unwrap();
        assert!(build_params(&none).ok().flatten().is_none());
        let bad = CallArgs::try_parse_from(["-p", "novalue"]).unwrap();
        assert!(build_params(&bad).is_err());
    }
}
