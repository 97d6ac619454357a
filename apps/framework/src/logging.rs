//! Logging: the `tracing` subscriber an app installs ([`init_with`],
//! [`crate::CommonArgs::init_logging`]) and its run-time control through
//! SPDK's `log_set_print_level` / `log_get_print_level` / `log_set_flag` /
//! `log_clear_flag` / `log_get_flags`.
//!
//! SPDK's model maps onto `tracing` filters: the *print level* (`ERROR`,
//! `WARNING`, `NOTICE`, `INFO`, `DEBUG`) bounds what every component
//! prints, and *flags* name components whose debug messages are wanted
//! (shown at print level `DEBUG`, as SPDK's `SPDK_DEBUGLOG`). `NOTICE` and
//! `INFO` both show `tracing`'s info messages: `tracing` has no level
//! between info and warn.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use bdevkit::bdev::module::LogFlag;
use parking_lot::Mutex;
use tracing_subscriber::reload;
use tracing_subscriber::{EnvFilter, Registry};

/// SPDK's print levels, lowest first.
pub(crate) const PRINT_LEVELS: [&str; 5] = ["ERROR", "WARNING", "NOTICE", "INFO", "DEBUG"];

/// The framework's own log flags (its components and the core's); each
/// module brings its own in its [`crate::ModuleDef`]. SPDK's names where
/// SPDK has the component.
const FRAMEWORK_FLAGS: &[LogFlag] = &[
    flag("app_config", &["bdevkit_app::config"], &[]),
    flag("app_rpc", &["bdevkit_app::rpc"], &[]),
    flag("bdev", &["bdevkit::bdev"], &[]),
    flag("reactor", &["bdevkit::thread"], &[]),
    flag("rpc", &["bdevkit_jsonrpc"], &["jsonrpc"]),
    flag("thread", &["bdevkit::thread"], &[]),
];

const fn flag(
    name: &'static str,
    targets: &'static [&'static str],
    aliases: &'static [&'static str],
) -> LogFlag {
    LogFlag {
        name,
        targets,
        aliases,
    }
}

/// Every flag `log_set_flag` knows: the framework's and those of the
/// modules the apps link ([`crate::default_modules`]), by name.
fn all_flags() -> &'static [LogFlag] {
    static ALL: OnceLock<Vec<LogFlag>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut v: Vec<LogFlag> = FRAMEWORK_FLAGS.to_vec();
        for m in crate::default_modules() {
            v.extend_from_slice(m.log_flags);
        }
        v.sort_by_key(|f| f.name);
        v.dedup_by_key(|f| f.name);
        v
    })
}

/// The flag called `name`, or that has `name` as an alias.
fn find_flag(name: &str) -> Option<&'static LogFlag> {
    let all = all_flags();
    all.iter()
        .find(|f| f.name == name)
        .or_else(|| all.iter().find(|f| f.aliases.contains(&name)))
}

/// The `tracing` targets of log flag `flag` (also accepted: its aliases,
/// and `app` for the whole framework); `None` for an unknown flag.
pub(crate) fn flag_targets(flag: &str) -> Option<Vec<String>> {
    if flag == "app" {
        return Some(vec!["bdevkit_app".into()]);
    }
    find_flag(flag).map(|f| f.targets.iter().map(|t| (*t).to_string()).collect())
}

/// Print level and flags, and the filter they make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogState {
    /// Index into [`PRINT_LEVELS`].
    level: usize,
    flags: BTreeSet<&'static str>,
}

impl LogState {
    /// From `--log-level` and the `-L` flags.
    pub(crate) fn new(log_level: &str, flags: &[String]) -> LogState {
        let level = match log_level {
            "error" | "off" => 0,
            "warn" => 1,
            "debug" | "trace" => 4,
            _ => 2,
        };
        let mut st = LogState {
            level,
            flags: BTreeSet::new(),
        };
        for f in flags {
            st.set_flag(f, true);
        }
        st
    }

    /// The `EnvFilter` directives.
    pub(crate) fn directives(&self) -> String {
        let base = match self.level {
            0 => "error",
            1 => "warn",
            _ => "info",
        };
        let mut spec = base.to_string();
        if self.level == 4 {
            for f in &self.flags {
                for t in flag_targets(f).unwrap_or_default() {
                    spec.push(',');
                    spec.push_str(&t);
                    spec.push_str("=debug");
                }
            }
        }
        spec
    }

    /// Sets or clears flag `flag` (`all`: every flag); `false` for an
    /// unknown flag.
    pub(crate) fn set_flag(&mut self, flag: &str, on: bool) -> bool {
        let names: Vec<&'static str> = if flag == "all" {
            all_flags().iter().map(|f| f.name).collect()
        } else {
            match find_flag(flag) {
                Some(f) => vec![f.name],
                None => return false,
            }
        };
        for n in names {
            if on {
                self.flags.insert(n);
            } else {
                self.flags.remove(n);
            }
        }
        true
    }

    /// `log_get_flags`' result: every flag and whether it is set.
    pub(crate) fn flags_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for f in all_flags() {
            m.insert(f.name.to_string(), self.flags.contains(f.name).into());
        }
        serde_json::Value::Object(m)
    }

    pub(crate) fn print_level(&self) -> &'static str {
        PRINT_LEVELS[self.level]
    }

    /// Sets the print level by SPDK name (any case); `false` if unknown.
    pub(crate) fn set_print_level(&mut self, name: &str) -> bool {
        match PRINT_LEVELS
            .iter()
            .position(|l| l.eq_ignore_ascii_case(name))
        {
            Some(i) => {
                self.level = i;
                true
            }
            None => false,
        }
    }
}

/// The installed subscriber's filter and the state it came from.
pub(crate) struct LogControl {
    handle: reload::Handle<EnvFilter, Registry>,
    state: Mutex<LogState>,
}

static CONTROL: OnceLock<LogControl> = OnceLock::new();

/// Installs a `tracing` subscriber writing to stderr through `filter`,
/// which the `log_*` RPCs may then replace; `log_level` (`error`, `warn`,
/// `info`, `debug`) and `flags` are what `log_get_print_level` and
/// `log_get_flags` start from. Apps call this (or
/// [`crate::CommonArgs::init_logging`]) once, first thing; libraries never
/// do.
///
/// # Errors
/// `Logging` when a subscriber is already installed.
pub fn init_with(filter: EnvFilter, log_level: &str, flags: &[String]) -> crate::Result<()> {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (filter, handle) = reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr),
        )
        .try_init()
        .map_err(|e| crate::Error::Logging(e.to_string()))?;
    let _ = CONTROL.set(LogControl {
        handle,
        state: Mutex::new(LogState::new(log_level, flags)),
    });
    Ok(())
}

/// The log control, when this process's subscriber came from
/// `init_logging`.
pub(crate) fn control() -> Option<&'static LogControl> {
    CONTROL.get()
}

impl LogControl {
    /// Runs `f` on the state, then applies the resulting filter.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut LogState) -> R) -> R {
        let mut st = self.state.lock();
        let r = f(&mut st);
        let spec = st.directives();
        match EnvFilter::try_new(&spec) {
            Ok(filter) => {
                if let Err(e) = self.handle.reload(filter) {
                    tracing::warn!(error = %e, "log filter reload failed");
                }
            }
            Err(e) => tracing::warn!(spec, error = %e, "bad log filter"),
        }
        r
    }

    /// A copy of the state.
    pub(crate) fn state(&self) -> LogState {
        self.state.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_flags_make_filters() {
        let mut st = LogState::new("info", &[]);
        assert_eq!(st.print_level(), "NOTICE");
        assert_eq!(st.directives(), "info");
        assert!(st.set_flag("bdev_raid", true));
        assert_eq!(st.directives(), "info", "flags show debug at DEBUG only");
        assert!(st.set_print_level("debug"));
        assert_eq!(st.print_level(), "DEBUG");
        assert_eq!(st.directives(), "info,bdevkit_raid=debug");
        assert!(st.set_flag("vbdev_passthru", true));
        assert!(
            st.set_flag("bdev_passthru", false),
            "our alias of the same flag"
        );
        assert_eq!(st.directives(), "info,bdevkit_raid=debug");
        assert!(!st.set_flag("nvme_tcp", true));
        assert!(!st.set_print_level("LOUD"));
        assert!(st.set_print_level("WARNING"));
        assert_eq!(st.directives(), "warn");
        assert!(st.set_flag("all", true));
        assert_eq!(st.flags_json()["rpc"], true);
        assert!(st.set_flag("all", false));
        assert_eq!(st.flags_json()["rpc"], false);
        let st = LogState::new("debug", &["bdev".into()]);
        assert_eq!(st.directives(), "info,bdevkit::bdev=debug");
        for f in all_flags() {
            EnvFilter::try_new(LogState::new("debug", &[f.name.to_string()]).directives()).unwrap();
        }
        // Modules bring their flags.
        for f in ["bdev_malloc", "aio", "bdev_nvme", "nvme", "vbdev_split"] {
            assert!(find_flag(f).is_some(), "{f}");
        }
        assert_eq!(
            flag_targets("bdev_uring").unwrap(),
            ["bdevkit_uring", "bdevkit_kfile"]
        );
    }
}
