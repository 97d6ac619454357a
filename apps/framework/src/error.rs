//! The crate's error type.

use std::io;
use std::path::PathBuf;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can fail while starting, configuring or stopping an app.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The reactors could not be started.
    #[error("start reactors")]
    StartRuntime(#[source] bdevkit::Error),
    /// Registering an RPC method failed (a name registered twice).
    #[error("register rpc methods of {what}")]
    RegisterRpc {
        /// Who registered them: "framework", "bdev" or a module name.
        what: String,
        /// What the registry said.
        #[source]
        source: bdevkit_jsonrpc::Error,
    },
    /// Another live process holds the RPC socket's lock (SPDK's message).
    #[error("RPC Unix domain socket path {} in use. Specify another.", path.display())]
    RpcSocketInUse {
        /// The socket path.
        path: PathBuf,
    },
    /// The RPC socket could not be bound (path too long, not a socket, ...).
    #[error("start rpc server on {}", path.display())]
    BindRpc {
        /// The socket path.
        path: PathBuf,
        /// What the server said.
        #[source]
        source: bdevkit_jsonrpc::Error,
    },
    /// Installing the SIGINT/SIGTERM handlers failed.
    #[error("install signal handlers")]
    Signals(#[source] io::Error),
    /// The JSON config file could not be read.
    #[error("Could not read JSON config file {}", path.display())]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The JSON config file is larger than [`crate::config::MAX_CONFIG_BYTES`].
    #[error("JSON config file {} is larger than {limit} bytes (the RPC request limit)", path.display())]
    ConfigTooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: usize,
    },
    /// The JSON config is not valid JSON.
    #[error("Parsing JSON configuration failed")]
    ParseConfig(#[source] serde_json::Error),
    /// The JSON config does not have the expected shape. The message is
    /// SPDK's (e.g. "Invalid JSON configuration: not enclosed in {}.").
    #[error("{0}")]
    ConfigShape(String),
    /// A config entry names a method this application does not have.
    #[error("Method '{method}' was not found")]
    ConfigMethodNotFound {
        /// The method.
        method: String,
    },
    /// A batch in the config mixes STARTUP-only and RUNTIME-only methods.
    #[error("Batch contains methods with incompatible state requirements")]
    ConfigBatchState,
    /// A config entry was answered with an error.
    #[error("config entry {method} of subsystem {subsystem} failed: error response {{\"code\": {code}, \"message\": {message:?}}}")]
    ConfigEntry {
        /// Subsystem of the entry.
        subsystem: String,
        /// Method of the entry.
        method: String,
        /// Error code of the answer.
        code: i32,
        /// Error message of the answer.
        message: String,
    },
    /// A bdev module failed to initialise.
    #[error("framework initialization failed")]
    Init(#[source] bdevkit::Error),
    /// A framework subsystem (nvmf) failed to start or initialise.
    #[error("subsystem {name} failed to initialize")]
    InitSubsystem {
        /// The subsystem.
        name: String,
        /// Why.
        #[source]
        source: bdevkit::error::BoxError,
    },
    /// An app links a subsystem that [`crate::SUBSYSTEMS`] does not list
    /// (or `bdev`, or one twice).
    #[error("subsystem {0} is not one the framework lists (or it is linked twice)")]
    UnknownSubsystem(String),
    /// An app links a subsystem without one it depends on.
    #[error("subsystem {name} depends on {missing}, which the app does not link")]
    SubsystemDependency {
        /// The subsystem.
        name: String,
        /// The dependency the app lacks.
        missing: String,
    },
    /// `framework_start_init` while initialisation runs or ran already.
    #[error("framework initialization already started")]
    InitAgain,
    /// The app thread is gone (the runtime stopped underneath the app).
    #[error("app thread exited")]
    AppThreadGone,
    /// A blocking call was made from a reactor thread.
    #[error("blocking app call from a reactor thread would deadlock")]
    WouldDeadlock,
    /// Stop was requested before initialisation finished.
    #[error("application stopped before initialization finished")]
    Stopped,
    /// Setting up logging failed (bad filter or a subscriber already set).
    #[error("set up logging: {0}")]
    Logging(String),
}

impl Error {
    /// The errno this error maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        use libc::{EADDRINUSE, EALREADY, EFBIG, EINVAL, EIO, ENOENT, EPERM, ESHUTDOWN};
        match self {
            Error::StartRuntime(e) | Error::Init(e) => e.errno(),
            Error::RegisterRpc { source, .. } | Error::BindRpc { source, .. } => source.errno(),
            Error::Signals(e) | Error::ReadConfig { source: e, .. } => {
                e.raw_os_error().unwrap_or(EIO)
            }
            Error::ParseConfig(_)
            | Error::ConfigShape(_)
            | Error::ConfigBatchState
            | Error::ConfigEntry { .. }
            | Error::Logging(_) => EINVAL,
            Error::ConfigMethodNotFound { .. } => ENOENT,
            Error::ConfigTooLarge { .. } => EFBIG,
            Error::InitAgain => EALREADY,
            Error::InitSubsystem { .. } => EIO,
            Error::UnknownSubsystem(_) | Error::SubsystemDependency { .. } => EINVAL,
            Error::RpcSocketInUse { .. } => EADDRINUSE,
            Error::AppThreadGone | Error::Stopped => ESHUTDOWN,
            Error::WouldDeadlock => EPERM,
        }
    }
}
