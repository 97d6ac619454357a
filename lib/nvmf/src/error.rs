//! The target's error type: what the control plane (RPCs, config replay)
//! can fail with, and its errno mapping. Protocol errors on a connection
//! are not errors of this type: they are NVMe statuses or TermReqs sent to
//! the host (see `tcp`).

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a target operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A transport of that type exists already.
    #[error("transport type '{0}' already exists")]
    TransportExists(String),
    /// No transport of that type is implemented (not in the registry).
    #[error("invalid transport type '{0}'")]
    InvalidTransport(String),
    /// The transport named by a listener was not created.
    #[error("transport {0} was not created")]
    NoTransport(String),
    /// A transport option is out of range.
    #[error("invalid transport option {option}: {why}")]
    TransportOption {
        /// The option.
        option: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// No subsystem of that NQN.
    #[error("no subsystem {0}")]
    NoSubsystem(String),
    /// A subsystem of that NQN exists.
    #[error("subsystem {0} already exists")]
    SubsystemExists(String),
    /// The NQN is not valid.
    #[error("invalid nqn {nqn}")]
    InvalidNqn {
        /// The NQN.
        nqn: String,
        /// Why.
        #[source]
        source: bdevkit_nvme_spec::fabrics::NqnError,
    },
    /// `max_subsystems` subsystems exist already.
    #[error("the target has its maximum of {0} subsystems")]
    TooManySubsystems(u32),
    /// A subsystem parameter is not valid.
    #[error("invalid subsystem parameter {param}: {why}")]
    SubsystemParam {
        /// The parameter.
        param: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The operation does not apply to the discovery subsystem.
    #[error("not allowed on the discovery subsystem")]
    Discovery,
    /// A host's TLS PSK (`psk`, a keyring key name) cannot be used.
    #[error("TLS PSK {key}: {why}")]
    Psk {
        /// The key's name.
        key: String,
        /// Why (never key material).
        why: String,
    },
    /// No key of that name in the app's keyring (`dhchap_key`,
    /// `dhchap_ctrlr_key`).
    #[error("Unable to find DH-HMAC-CHAP key: {0}")]
    NoKey(String),
    /// A host's DH-HMAC-CHAP keys cannot be used.
    #[error("DH-HMAC-CHAP key {key}: {why}")]
    Dhchap {
        /// The key's name.
        key: String,
        /// Why (never key material).
        why: String,
    },
    /// `secure_channel` on a subsystem that any host may connect to
    /// (SPDK refuses it: a PSK is per host).
    #[error("Cannot establish secure channel, when 'allow_any_host' is set")]
    SecureAnyHost,
    /// A listener address already open with the other `secure_channel`.
    #[error("listener {0} is already open with another secure_channel")]
    SecureMismatch(String),
    /// A feature this target does not have (ANA, passthrough, TLS, ...).
    #[error("{0} is not supported")]
    NotSupported(&'static str),
    /// No bdev of that name (or it is being removed).
    #[error("no bdev {0}")]
    NoBdev(String),
    /// Opening or claiming the bdev failed.
    #[error("open bdev {bdev}")]
    OpenBdev {
        /// The bdev.
        bdev: String,
        /// Why.
        #[source]
        source: bdevkit::Error,
    },
    /// The bdev's geometry cannot be a namespace (block size not a power
    /// of two of at least 512 bytes, metadata).
    #[error("bdev {bdev} cannot be a namespace: {why}")]
    BdevGeometry {
        /// The bdev.
        bdev: String,
        /// Why.
        why: &'static str,
    },
    /// The namespace id is taken, zero or above `max_namespaces`.
    #[error("invalid namespace id {0}")]
    InvalidNsid(u32),
    /// No namespace of that id.
    #[error("no namespace {0}")]
    NoNamespace(u32),
    /// Every namespace id is taken.
    #[error("no free namespace id")]
    NamespacesFull,
    /// A listen address that does not parse.
    #[error("invalid listen address: {0}")]
    ListenAddress(String),
    /// The subsystem listens there already.
    #[error("listener {0} exists")]
    ListenerExists(String),
    /// The subsystem does not listen there.
    #[error("no listener {0}")]
    NoListener(String),
    /// Binding the listening socket failed.
    #[error("listen on {addr}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The host is on the list already.
    #[error("host {0} exists")]
    HostExists(String),
    /// The host is not on the list.
    #[error("no host {0}")]
    NoHost(String),
    /// No such discovery referral.
    #[error("no referral {0}")]
    NoReferral(String),
    /// The target is not started (no poll groups yet) or is stopping.
    #[error("the nvmf target is not running")]
    NotRunning,
    /// Creating the target's poll group threads failed.
    #[error("start poll groups")]
    PollGroups(#[source] bdevkit::Error),
    /// Setting up a poll group's socket poller failed.
    #[error("poll group socket poller")]
    Poller(#[source] std::io::Error),
    /// A configuration method was called again (`nvmf_set_max_subsystems`).
    #[error("must not call more than once")]
    Again,
}

impl Error {
    /// The errno this error maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::TransportExists(_)
            | Error::SubsystemExists(_)
            | Error::ListenerExists(_)
            | Error::HostExists(_) => libc::EEXIST,
            Error::InvalidTransport(_)
            | Error::TransportOption { .. }
            | Error::InvalidNqn { .. }
            | Error::SubsystemParam { .. }
            | Error::BdevGeometry { .. }
            | Error::InvalidNsid(_)
            | Error::ListenAddress(_)
            | Error::Psk { .. }
            | Error::Dhchap { .. }
            | Error::SecureAnyHost
            | Error::SecureMismatch(_)
            | Error::Discovery => libc::EINVAL,
            Error::NoTransport(_)
            | Error::NoSubsystem(_)
            | Error::NoBdev(_)
            | Error::NoNamespace(_)
            | Error::NoListener(_)
            | Error::NoHost(_) => libc::ENODEV,
            Error::NoReferral(_) | Error::NoKey(_) => libc::ENOENT,
            Error::TooManySubsystems(_) | Error::NamespacesFull => libc::ENOSPC,
            Error::NotSupported(_) => libc::ENOTSUP,
            Error::OpenBdev { source, .. } | Error::PollGroups(source) => source.errno(),
            Error::Listen { source, .. } | Error::Poller(source) => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            Error::NotRunning => libc::ESHUTDOWN,
            Error::Again => libc::EALREADY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos() {
        assert_eq!(Error::NoSubsystem("x".into()).errno(), libc::ENODEV);
        assert_eq!(Error::TransportExists("TCP".into()).errno(), libc::EEXIST);
        let e = Error::Listen {
            addr: "1.2.3.4:1".into(),
            source: std::io::Error::from_raw_os_error(libc::EADDRINUSE),
        };
        assert_eq!(e.errno(), libc::EADDRINUSE);
        assert_eq!(e.to_string(), "listen on 1.2.3.4:1");
    }
}
