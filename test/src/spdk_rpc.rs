//! Where SPDK's Python RPC client (`spdk-rpc`, PyPI `spdk==26.9`) is: the
//! one lookup every test that drives a server with it uses (the daemon
//! tests here, the JSON-RPC server tests of `bdevkit-jsonrpc`, the README
//! test).
//!
//! In order:
//!
//! 1. `$SPDK_RPC`, the path of the executable (a path that is not a file
//!    fails the test: it was asked for);
//! 2. `.venv/bin/spdk-rpc` at the root of this repository, where
//!    `scripts/test.sh` installs it;
//! 3. `spdk-rpc` on `PATH`.
//!
//! With none of them the test fails, saying how to install the client,
//! unless `BDEVKIT_SKIP_SPDK_RPC=1` is set: then it prints why and returns
//! early (an explicit opt-out, never the default, so a missing client
//! cannot pass for a passing test).

use std::path::{Path, PathBuf};

/// The environment variable that lets `spdk-rpc` tests skip when the
/// client is not installed.
pub const SKIP_VAR: &str = "BDEVKIT_SKIP_SPDK_RPC";

/// How to get the client, for messages.
pub const HOW_TO_GET: &str = "run scripts/test.sh once (it installs it in .venv), \
     or `python3 -m venv .venv && .venv/bin/pip install spdk==26.9`, \
     or set SPDK_RPC=/path/to/spdk-rpc";

/// The repository root (the parent of this crate's directory).
#[must_use]
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Where the client is, from `SPDK_RPC`, the repository's `.venv` and
/// `PATH` in that order (see the module docs); `None` when it is nowhere.
///
/// # Panics
/// When `SPDK_RPC` is set to something that is not a file.
#[must_use]
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SPDK_RPC") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "SPDK_RPC={} is not a file; {HOW_TO_GET}",
            p.display()
        );
        return Some(p);
    }
    let venv = repo_root().join(".venv/bin/spdk-rpc");
    if venv.is_file() {
        return Some(venv);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("spdk-rpc"))
            .find(|p| p.is_file())
    })
}

/// The `spdk-rpc` executable for a test that needs it: [`find`], or, when
/// it is nowhere, `None` with the reason printed if `BDEVKIT_SKIP_SPDK_RPC=1`.
///
/// # Panics
/// When the client is nowhere and the caller did not opt out, with how to
/// get it.
#[must_use]
pub fn spdk_rpc() -> Option<PathBuf> {
    let found = find();
    if found.is_none() {
        let why = format!("spdk-rpc (SPDK's Python RPC client) not found: {HOW_TO_GET}");
        assert!(
            std::env::var(SKIP_VAR).as_deref() == Ok("1"),
            "{why}; or set {SKIP_VAR}=1 to skip the tests that need it"
        );
        eprintln!("skipping ({SKIP_VAR}=1): {why}");
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_root_holds_the_workspace() {
        let root = repo_root();
        assert!(root.join("Cargo.toml").is_file(), "{}", root.display());
        assert!(root.join("scripts/test.sh").is_file(), "{}", root.display());
    }
}
