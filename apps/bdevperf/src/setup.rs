//! Start-up: the bdev used when no config is given, and what a failed
//! start says.

use anyhow::{Context, Result};
use bdevkit::bdev::BdevManager;
use bdevkit::thread::ThreadHandle;

/// Name of the default bdev.
pub const DEFAULT_BDEV: &str = "Malloc0";
/// Its size.
pub const DEFAULT_SIZE_MIB: u64 = 256;
const DEFAULT_BLOCK_SIZE: u32 = 4096;

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

/// A socket for `bdevperf -z` of its own, suggested when the default one is
/// taken (`bdev_tgt` runs there by default).
pub const SUGGESTED_SOCKET: &str = "/var/tmp/bdevperf.sock";

/// The one line a failed app start prints. A socket in use says which to
/// pick: with no `-r`, bdevperf took `bdev_tgt`'s default socket.
pub fn start_error(e: &bdevkit_app::Error, socket_given: bool) -> anyhow::Error {
    match e {
        bdevkit_app::Error::RpcSocketInUse { path } if socket_given => anyhow::anyhow!(
            "RPC socket {} is in use by another process: pick another with -r",
            path.display()
        ),
        bdevkit_app::Error::RpcSocketInUse { path } => anyhow::anyhow!(
            "RPC socket {} is in use (is bdev_tgt running?): give bdevperf its own with -r, \
             e.g. bdevperf -z -r {SUGGESTED_SOCKET}",
            path.display()
        ),
        other => anyhow::anyhow!("{}", bdevkit_app::ErrorChain(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_in_use_says_which_to_pick() {
        let e = bdevkit_app::Error::RpcSocketInUse {
            path: bdevkit_app::DEFAULT_RPC_SOCKET.into(),
        };
        let msg = start_error(&e, false).to_string();
        assert_eq!(
            msg,
            "RPC socket /var/tmp/bdevkit.sock is in use (is bdev_tgt running?): \
             give bdevperf its own with -r, e.g. bdevperf -z -r /var/tmp/bdevperf.sock"
        );
        assert!(!msg.contains('\n'));
        let msg = start_error(&e, true).to_string();
        assert!(
            msg.ends_with("in use by another process: pick another with -r"),
            "{msg}"
        );
    }
}
