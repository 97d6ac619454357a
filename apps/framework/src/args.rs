//! Command-line options every bdevkit application shares (SPDK's
//! `spdk_app_parse_args` subset), and the logging set-up they drive.

use std::path::PathBuf;

use bdevkit::thread::CpuSet;
use tracing_subscriber::EnvFilter;

use crate::error::{Error, Result};

/// Options common to every app. Flatten it into the app's own `clap`
/// parser (`#[command(flatten)] common: CommonArgs`). The app decides the
/// default RPC socket: `bdev_tgt` gives `-r` the default
/// [`crate::DEFAULT_RPC_SOCKET`] (shown in its `--help`), `bdevperf` leaves
/// it unset unless `-z`.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Core mask for reactors: hex (`0x3`) or a list (`[0,1]`, `[0-3]`).
    #[arg(
        short = 'm',
        long = "cpumask",
        value_name = "MASK",
        default_value = "0x1"
    )]
    pub cpumask: CpuSet,

    /// RPC listen socket path.
    #[arg(short = 'r', long = "rpc-socket", value_name = "PATH")]
    pub rpc_socket: Option<PathBuf>,

    /// JSON configuration file replayed at start-up (SPDK format; `//` and
    /// `/* */` comments allowed).
    #[arg(
        short = 'c',
        long = "json",
        visible_alias = "config",
        value_name = "FILE"
    )]
    pub json: Option<PathBuf>,

    /// Stay in the STARTUP RPC state until `framework_start_init` is called.
    #[arg(long)]
    pub wait_for_rpc: bool,

    /// Idle reactors sleep instead of polling (for shared machines and tests).
    #[arg(long)]
    pub interrupt_mode: bool,

    /// Enable debug logging for a component (repeatable): `rpc`, `app`,
    /// `bdev`, `thread`, `bdev_<module>`, `all`, or any tracing target.
    #[arg(short = 'L', long = "logflag", value_name = "FLAG")]
    pub logflag: Vec<String>,

    /// Default log level: error, warn, info, debug or trace (`RUST_LOG`,
    /// when set, takes precedence).
    #[arg(long = "log-level", value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// Log failed `--json` config entries and carry on instead of aborting.
    #[arg(long)]
    pub json_ignore_init_errors: bool,

    /// Serve only these RPC methods (comma-separated); others answer
    /// "Method not found".
    #[arg(long, value_name = "METHODS", value_delimiter = ',')]
    pub rpcs_allowed: Option<Vec<String>>,

    /// Close an RPC connection that stops half-way through a request (or
    /// does not read its answers) for this many seconds; 0 = never.
    #[arg(long, value_name = "SEC", default_value_t = bdevkit_jsonrpc::DEFAULT_STALL_TIMEOUT.as_secs())]
    pub rpc_stall_timeout: u64,
}

impl Default for CommonArgs {
    fn default() -> Self {
        CommonArgs {
            cpumask: CpuSet::single(0),
            rpc_socket: None,
            json: None,
            wait_for_rpc: false,
            interrupt_mode: false,
            logflag: Vec::new(),
            log_level: None,
            json_ignore_init_errors: false,
            rpcs_allowed: None,
            rpc_stall_timeout: bdevkit_jsonrpc::DEFAULT_STALL_TIMEOUT.as_secs(),
        }
    }
}

impl CommonArgs {
    /// The `tracing` filter these options ask for: `RUST_LOG` if set,
    /// otherwise `--log-level` (default `info`) plus one `target=debug`
    /// directive per `-L` flag.
    pub fn env_filter(&self) -> Result<EnvFilter> {
        if let Ok(spec) = std::env::var("RUST_LOG") {
            if !spec.trim().is_empty() {
                return EnvFilter::try_new(&spec)
                    .map_err(|e| Error::Logging(format!("RUST_LOG={spec:?}: {e}")));
            }
        }
        let level = self.log_level.as_deref().unwrap_or("info");
        if !["error", "warn", "info", "debug", "trace", "off"].contains(&level) {
            return Err(Error::Logging(format!(
                "unknown log level {level:?} (error, warn, info, debug, trace, off)"
            )));
        }
        let mut spec = level.to_string();
        for flag in &self.logflag {
            for target in logflag_targets(flag) {
                spec.push(',');
                spec.push_str(&target);
                spec.push_str("=debug");
            }
        }
        EnvFilter::try_new(&spec).map_err(|e| Error::Logging(format!("{spec:?}: {e}")))
    }

    /// Installs a `tracing` subscriber writing to stderr with
    /// [`CommonArgs::env_filter`]. Apps call this once, first thing;
    /// libraries never do.
    /// The filter can be changed later over RPC (`log_set_print_level`,
    /// `log_set_flag`, ...).
    pub fn init_logging(&self) -> Result<()> {
        let level = self.log_level.as_deref().unwrap_or("info");
        crate::logging::init_with(self.env_filter()?, level, &self.logflag)
    }
}

/// Parses a byte count with an optional binary suffix: `4096`, `4k`, `1M`,
/// `2g` (k/m/g in either case = KiB/MiB/GiB). `None` for anything else, for
/// zero and on overflow; the caller words the error (bdevperf's `-o`,
/// bdev_dd's `--bs`).
#[must_use]
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    // `u64::from_str` takes a leading '+'; a size does not.
    if !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|v| *v > 0)
}

/// Maps an SPDK-style `-L` log flag to tracing targets: SPDK's flag names
/// (`crate::logging`), `all`, or else taken as a crate-style target.
fn logflag_targets(flag: &str) -> Vec<String> {
    if flag == "all" {
        return vec![
            "bdevkit".into(),
            "bdevkit_jsonrpc".into(),
            "bdevkit_app".into(),
            "bdevkit_null".into(),
            "bdevkit_malloc".into(),
        ];
    }
    crate::logging::flag_targets(flag).unwrap_or_else(|| match flag.strip_prefix("bdev_") {
        Some(module) if !module.is_empty() => vec![format!("bdevkit_{module}")],
        _ => vec![flag.replace('-', "_")],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    #[test]
    fn parses_spdk_style_options() {
        let c = Cli::try_parse_from([
            "app",
            "-m",
            "[0-1]",
            "-r",
            "/tmp/x.sock",
            "--config",
            "/tmp/c.json",
            "--wait-for-rpc",
            "--interrupt-mode",
            "-L",
            "bdev_null",
            "--json-ignore-init-errors",
            "--rpcs-allowed",
            "a,b,c",
            "--rpc-stall-timeout",
            "5",
        ])
        .unwrap()
        .common;
        assert_eq!(c.cpumask.iter().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(c.rpc_socket.unwrap().to_str(), Some("/tmp/x.sock"));
        assert_eq!(c.json.unwrap().to_str(), Some("/tmp/c.json"));
        assert!(c.wait_for_rpc && c.interrupt_mode && c.json_ignore_init_errors);
        assert_eq!(c.logflag, vec!["bdev_null"]);
        assert_eq!(c.rpcs_allowed.unwrap(), vec!["a", "b", "c"]);
        assert_eq!(c.rpc_stall_timeout, 5);

        let d = Cli::try_parse_from(["app"]).unwrap().common;
        assert_eq!(d.cpumask, CpuSet::single(0));
        assert!(d.rpc_socket.is_none() && d.json.is_none() && !d.wait_for_rpc);
        assert_eq!(d.rpc_stall_timeout, 30);
        assert_eq!(d.rpc_stall_timeout, CommonArgs::default().rpc_stall_timeout);

        let j = Cli::try_parse_from(["app", "--json", "f", "-m", "0x3"])
            .unwrap()
            .common;
        assert_eq!(j.json.unwrap().to_str(), Some("f"));
        assert_eq!(j.cpumask.len(), 2);

        assert!(Cli::try_parse_from(["app", "-m", "zz"]).is_err());
    }

    #[test]
    fn sizes_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        for bad in ["0", "x", "4kb", "", "k", "-1", "+4", "99999999999g"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn log_flags_map_to_targets() {
        assert_eq!(logflag_targets("bdev_malloc"), vec!["bdevkit_malloc"]);
        assert_eq!(logflag_targets("thread"), vec!["bdevkit::thread"]);
        assert_eq!(logflag_targets("my-crate"), vec!["my_crate"]);
        let args = CommonArgs {
            log_level: Some("loud".into()),
            ..CommonArgs::default()
        };
        if std::env::var("RUST_LOG").is_err() {
            assert!(args.env_filter().is_err());
        }
    }
}
