//! `bdev_tgt`: the bdevkit target daemon. Serves SPDK's JSON-RPC interface
//! on a unix socket (default `/var/tmp/bdevkit.sock`, mode 0600), so that
//! `spdk-rpc -s <socket>` and `bdev_rpc` configure it; replays `--json`
//! config files; exports bdevs over NVMe/TCP (the `nvmf` subsystem, SPDK's
//! nvmf target RPCs) and to QEMU VMs over vhost-user-blk (the `vhost_blk`
//! subsystem, SPDK's vhost RPCs; sockets in the `-S` directory); stops cleanly on SIGINT/SIGTERM or
//! `spdk_kill_instance`.
#![forbid(unsafe_code)]

mod nvmf;
mod vhost;

use std::path::PathBuf;
use std::process::ExitCode;

use bdevkit_app::{default_modules, App, AppOptions, CommonArgs, ErrorChain, DEFAULT_RPC_SOCKET};
use clap::Parser;

/// bdevkit block device target: bdevs configured over SPDK-compatible JSON-RPC.
// The framework leaves the socket's default to the app: ours, shown in
// --help.
#[derive(Debug, Parser)]
#[command(
    name = "bdev_tgt",
    version,
    mut_arg("rpc_socket", |a| a.default_value(DEFAULT_RPC_SOCKET))
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,

    /// Directory of the vhost-user sockets (SPDK vhost's `-S`; default:
    /// the working directory).
    #[arg(short = 'S', long = "vhost-sock-dir", value_name = "PATH")]
    vhost_sock_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = cli.common.init_logging() {
        eprintln!("bdev_tgt: {}", ErrorChain(&e));
        return ExitCode::FAILURE;
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        pid = std::process::id(),
        "bdev_tgt starting"
    );
    if let Some(dir) = cli.vhost_sock_dir.clone() {
        let _ = vhost::SOCKET_DIR.set(dir);
    }
    let opts = AppOptions {
        subsystems: vec![nvmf::NVMF, vhost::VHOST_BLK],
        ..AppOptions::default()
    };
    let app = match App::start_with(&cli.common, &default_modules(), opts) {
        Ok(app) => app,
        Err(e) => {
            tracing::error!(error = %ErrorChain(&e), "bdev_tgt failed to start");
            eprintln!("bdev_tgt: {}", ErrorChain(&e));
            return ExitCode::FAILURE;
        }
    };
    match app.wait() {
        Ok(()) => {
            tracing::info!("bdev_tgt exited");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bdev_tgt: {}", ErrorChain(&e));
            ExitCode::FAILURE
        }
    }
}
