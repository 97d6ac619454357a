//! TLS 1.3 with pre-shared keys for NVMe/TCP, as the NVMe/TCP transport
//! specification defines it and SPDK implements it (so that SPDK's
//! target and initiator, and the Linux ones with a current libnvme,
//! interoperate with ours):
//!
//! * [`psk`]: the PSK identity (`NVMe0R01 <hostnqn> <subnqn>`), the
//!   retained PSK and the TLS PSK derivations (HKDF);
//! * [`ClientConfig`] / [`ServerConfig`]: TLS 1.3 only, the two suites
//!   `TLS_AES_128_GCM_SHA256` (32-byte PSKs) and `TLS_AES_256_GCM_SHA384`
//!   (48-byte ones) only, external PSK only — no certificates, no
//!   session tickets, no early data;
//! * [`TlsConn`]: a nonblocking connection with a socket's shape (read
//!   into a buffer or a scatter list, vectored writes that pack many
//!   PDUs into few records, `WouldBlock`), and [`Stream`], plain or TLS,
//!   for a transport that has both kinds of listener or controller;
//! * [`sniff`]: tells a TLS ClientHello from an NVMe/TCP ICReq, so that
//!   each kind of listener refuses the other kind of host clearly.
//!
//! TLS is OpenSSL's (the `openssl` crate, OpenSSL built from source):
//! rustls' released versions have no TLS 1.3 external PSKs. The PSK
//! session callbacks the `openssl` crate does not wrap are declared in
//! one small file (`sys.rs`), the only one with `unsafe`.
//!
//! Key material never appears in `Debug`, `Display` or errors: keys are
//! [`psk::Key`]s (wiped when dropped, printed as their length), errors
//! name identities (NQNs, which travel in clear anyway) and OpenSSL's
//! reasons.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::sync::Arc;
//! use bdevkit_nvme_auth::TlsPsk;
//! use bdevkit_nvme_tls::{ClientConfig, Handshake, PskTable, ServerConfig, TlsConn};
//!
//! let psk = TlsPsk::parse("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:")?;
//! let (host, sub) = ("nqn.2014-08.org.nvmexpress:uuid:1", "nqn.2016-06.io.bdevkit:cnode1");
//! // Target: one table of host PSKs, one config for every connection.
//! let table = Arc::new(PskTable::new());
//! table.insert(host, sub, &psk)?;
//! let server = ServerConfig::new(table)?;
//! // Initiator: one config per controller.
//! let client = ClientConfig::new(&psk, host, sub)?;
//!
//! let (a, b) = std::os::unix::net::UnixStream::pair()?;
//! a.set_nonblocking(true)?;
//! b.set_nonblocking(true)?;
//! let mut c = TlsConn::connect(&client, a)?;
//! let mut s = TlsConn::accept(&server, b)?;
//! // Nonblocking: each side moves on as far as the socket lets it.
//! while (c.handshake()?, s.handshake()?) != (Handshake::Done, Handshake::Done) {}
//! assert_eq!(s.identity().unwrap().hostnqn(), host);
//! c.write_all(b"ICReq")?;
//! let mut buf = [0u8; 5];
//! s.read_exact(&mut buf)?;
//! assert_eq!(&buf, b"ICReq");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

// Layers, bottom up: `suite`, `sniff`, `wire` and `sys` (no crate
// imports); `error`; `psk`; `config`; `classify`; `conn`; `stream`.
mod classify;
mod config;
mod conn;
pub mod error;
pub mod psk;
mod sniff;
mod stream;
mod suite;
mod sys;
mod wire;

pub use classify::Side;
pub use config::{ClientConfig, PskStore, PskTable, ServerConfig};
pub use conn::{Handshake, PeerClose, TlsConn};
pub use error::Error;
pub use psk::{PskIdentity, RetainedPsk};
pub use sniff::{sniff, Sniff};
pub use stream::Stream;
pub use suite::Suite;
