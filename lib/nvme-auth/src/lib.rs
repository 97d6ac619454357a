//! NVMe in-band authentication (DH-HMAC-CHAP, NVMe Base Specification
//! 2.0 section 8.13) and the NVMe key interchange formats, as pure logic
//! with no I/O: both sides' state machines make and check the payloads of
//! the Authentication Send and Receive fabrics commands; the NVMe-oF
//! target and initiator move them.
//!
//! # Model
//!
//! One *transaction* authenticates one queue. The host offers its hashes
//! and Diffie-Hellman groups (AUTH_Negotiate); the controller picks the
//! strongest pair both allow and challenges the host (C1, with its DH
//! public value); the host answers with R1 = HMAC over the (augmented)
//! challenge, keyed by its secret, and — to authenticate the controller
//! too — its own challenge C2; the controller checks R1 and answers with
//! Success1 (carrying R2); the host checks R2 and ends with Success2. Any
//! error ends it with AUTH_Failure1 (controller) or AUTH_Failure2 (host).
//! The computations are in [`calc`], the messages in [`msg`], the
//! state machines [`host::Host`] and [`ctrl::Controller`].
//!
//! Keys are [`Secret`]s (`DHHC-1:...`) and TLS PSKs [`TlsPsk`]
//! (`NVMeTLSkey-1:...`); their memory is wiped when dropped, and nothing
//! in this crate formats key material (`Debug` is redacted).
//!
//! ```
//! use bdevkit_nvme_auth::{CtrlConfig, Controller, DhGroup, HashFn, Host, HostConfig, HostStep, Secret};
//!
//! let host_key = Secret::generate(32, Some(HashFn::Sha256))?;
//! let ctrl_key = Secret::generate(48, None)?;
//! let (hostnqn, subnqn) = ("nqn.2014-08.org.nvmexpress:uuid:1", "nqn.2016-06.io.bdevkit:cnode1");
//! let mut host = Host::new(
//!     HostConfig {
//!         hostnqn: hostnqn.into(),
//!         subnqn: subnqn.into(),
//!         key: host_key.clone(),
//!         ctrl_key: Some(ctrl_key.clone()),
//!         hashes: HashFn::ALL.to_vec(),
//!         groups: vec![DhGroup::Ffdhe2048],
//!     },
//!     1,
//!     77,
//! );
//! let mut ctrl = Controller::new(
//!     CtrlConfig {
//!         hostnqn: hostnqn.into(),
//!         subnqn: subnqn.into(),
//!         key: host_key,
//!         ctrl_key: Some(ctrl_key),
//!         hashes: HashFn::ALL.to_vec(),
//!         groups: DhGroup::ALL.to_vec(),
//!     },
//!     1000,
//! );
//! ctrl.on_send(&host.negotiate());
//! let HostStep::SendThenReceive(reply) = host.on_message(&ctrl.on_receive().unwrap()).unwrap() else { panic!() };
//! ctrl.on_send(&reply);
//! let HostStep::SendAndFinish(success2) = host.on_message(&ctrl.on_receive().unwrap()).unwrap() else { panic!() };
//! ctrl.on_send(&success2);
//! assert!(host.is_done());
//! assert_eq!(ctrl.state(), bdevkit_nvme_auth::CtrlState::Done);
//! # Ok::<(), bdevkit_nvme_auth::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Layers: `ids` (hashes, groups), `key`, `dh`, `calc`, `msg`, then the
// state machines `host` and `ctrl`.
pub mod calc;
pub mod ctrl;
pub mod dh;
pub mod host;
pub mod ids;
pub mod key;
pub mod msg;

pub use ctrl::{Controller, CtrlConfig, CtrlState};
pub use host::{Host, HostConfig, HostFailure, HostStep};
pub use ids::{DhGroup, HashFn};
pub use key::{Secret, TlsPsk};
pub use msg::{Message, Reason};

/// Everything that fails here. Messages never hold key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A key in an interchange format is malformed.
    #[error("invalid key: {0}")]
    Key(&'static str),
    /// Diffie-Hellman: a bad group or public value.
    #[error("Diffie-Hellman: {0}")]
    Dh(&'static str),
    /// A message is malformed.
    #[error("invalid authentication message: {0}")]
    Message(&'static str),
    /// The operating system gave no random bytes.
    #[error("no random bytes")]
    Random,
}

impl Error {
    /// The errno this maps to (positive).
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            Error::Key(_) | Error::Dh(_) | Error::Message(_) => 22,
            Error::Random => 5,
        }
    }
}

/// Fills `buf` from the operating system's random source.
pub(crate) fn random(buf: &mut [u8]) -> Result<(), Error> {
    getrandom::getrandom(buf).map_err(|_| Error::Random)
}

/// A random non-zero 32-bit number: where a side starts its sequence
/// numbers.
///
/// # Errors
/// [`Error::Random`].
pub fn random_seqnum() -> Result<u32, Error> {
    let mut b = [0u8; 4];
    random(&mut b)?;
    Ok(u32::from_le_bytes(b).max(1))
}

/// A comma-separated list of SPDK names (`sha256,sha512`) as hashes.
///
/// # Errors
/// [`Error::Key`] naming none of them (the name is not secret).
pub fn parse_hashes<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Vec<HashFn>, Error> {
    names
        .into_iter()
        .map(|n| HashFn::from_name(n).ok_or(Error::Key("unknown digest")))
        .collect()
}

/// Group names (`null`, `ffdhe2048`, ...) as groups.
///
/// # Errors
/// [`Error::Key`] for an unknown name.
pub fn parse_groups<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Vec<DhGroup>, Error> {
    names
        .into_iter()
        .map(|n| DhGroup::from_name(n).ok_or(Error::Key("unknown dhgroup")))
        .collect()
}

#[cfg(test)]
mod tests;
