//! The two sides' TLS settings: a [`ClientConfig`] per controller the
//! initiator attaches (its PSK, host and subsystem NQNs), one
//! [`ServerConfig`] per target (PSKs looked up by identity in a
//! [`PskStore`]). Both make OpenSSL contexts that do TLS 1.3 only, the two
//! NVMe/TCP suites only, PSK only (no certificates, no session tickets).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use bdevkit_nvme_auth::TlsPsk;
use openssl::ex_data::Index;
use openssl::nid::Nid;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslRef, SslSessionCacheMode,
    SslVersion,
};
use parking_lot::RwLock;

use crate::error::Error;
use crate::psk::{suite_of, Key, PskIdentity, RetainedPsk};
use crate::suite::Suite;
use crate::sys::{self, ClientPolicy, ClientPsk, ServerPolicy, ServerPsk};

/// Finds the retained PSK configured for a host and subsystem (the
/// target's `nvmf_subsystem_add_host ... psk`). Called on the thread that
/// runs the handshake, from inside OpenSSL: it must not block for long.
pub trait PskStore: Send + Sync + 'static {
    /// The retained PSK of `hostnqn` for `subnqn`, if any.
    fn retained_psk(&self, hostnqn: &str, subnqn: &str) -> Option<RetainedPsk>;
}

impl<F> PskStore for F
where
    F: Fn(&str, &str) -> Option<RetainedPsk> + Send + Sync + 'static,
{
    fn retained_psk(&self, hostnqn: &str, subnqn: &str) -> Option<RetainedPsk> {
        self(hostnqn, subnqn)
    }
}

/// A [`PskStore`] that is a table: (host NQN, subsystem NQN) → retained
/// PSK, derived once when added (as SPDK's target does).
#[derive(Default)]
pub struct PskTable {
    /// Subsystem NQN → host NQN → retained PSK.
    map: RwLock<HashMap<String, HashMap<String, RetainedPsk>>>,
}

impl fmt::Debug for PskTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PskTable")
            .field("entries", &self.len())
            .finish()
    }
}

impl PskTable {
    /// An empty table.
    #[must_use]
    pub fn new() -> PskTable {
        PskTable::default()
    }

    /// Sets the PSK of `hostnqn` for `subnqn` (replacing any).
    ///
    /// # Errors
    /// [`Error::Key`] / [`Error::Identity`] for a PSK or NQN that cannot
    /// make an identity.
    pub fn insert(&self, hostnqn: &str, subnqn: &str, psk: &TlsPsk) -> Result<(), Error> {
        let retained = RetainedPsk::derive(psk, hostnqn)?;
        // The identity must be makeable (length limits).
        PskIdentity::new(retained.suite(), hostnqn, subnqn)?;
        self.map
            .write()
            .entry(subnqn.to_owned())
            .or_default()
            .insert(hostnqn.to_owned(), retained);
        Ok(())
    }

    /// Removes the PSK of `hostnqn` for `subnqn`; whether there was one.
    pub fn remove(&self, hostnqn: &str, subnqn: &str) -> bool {
        let mut map = self.map.write();
        let Some(hosts) = map.get_mut(subnqn) else {
            return false;
        };
        let had = hosts.remove(hostnqn).is_some();
        if hosts.is_empty() {
            map.remove(subnqn);
        }
        had
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.read().values().map(HashMap::len).sum()
    }

    /// Whether it has none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.read().is_empty()
    }
}

impl PskStore for PskTable {
    fn retained_psk(&self, hostnqn: &str, subnqn: &str) -> Option<RetainedPsk> {
        self.map.read().get(subnqn)?.get(hostnqn).cloned()
    }
}

/// What the server's PSK lookup found for a connection (kept in the
/// SSL's ex data, for the error report).
#[derive(Debug, Clone, Default)]
pub(crate) enum Lookup {
    /// The client offered no PSK (the callback never ran).
    #[default]
    NotAsked,
    /// An identity not of the NVMe/TCP form (why).
    Malformed(&'static str),
    /// No PSK for it.
    Unknown(String),
    /// The identity's suite is not the configured PSK's.
    Mismatch {
        identity: String,
        asked: Suite,
        configured: Suite,
    },
    /// Found: the handshake uses it.
    Found(PskIdentity),
}

/// The client's PSK, in its context's ex data.
struct ClientKey {
    identity: PskIdentity,
    key: Key,
}

fn client_index() -> Result<Index<SslContext, ClientKey>, Error> {
    static I: OnceLock<Index<SslContext, ClientKey>> = OnceLock::new();
    if let Some(i) = I.get() {
        return Ok(*i);
    }
    let i = SslContext::new_ex_index().map_err(setup)?;
    Ok(*I.get_or_init(|| i))
}

fn store_index() -> Result<Index<SslContext, Arc<dyn PskStore>>, Error> {
    static I: OnceLock<Index<SslContext, Arc<dyn PskStore>>> = OnceLock::new();
    if let Some(i) = I.get() {
        return Ok(*i);
    }
    let i = SslContext::new_ex_index().map_err(setup)?;
    Ok(*I.get_or_init(|| i))
}

pub(crate) fn lookup_index() -> Result<Index<Ssl, Lookup>, Error> {
    static I: OnceLock<Index<Ssl, Lookup>> = OnceLock::new();
    if let Some(i) = I.get() {
        return Ok(*i);
    }
    let i = Ssl::new_ex_index().map_err(setup)?;
    Ok(*I.get_or_init(|| i))
}

pub(crate) fn setup(e: openssl::error::ErrorStack) -> Error {
    Error::Setup(e.to_string())
}

fn md_nid(s: Suite) -> Nid {
    match s {
        Suite::Aes128GcmSha256 => Nid::SHA256,
        Suite::Aes256GcmSha384 => Nid::SHA384,
    }
}

struct Client;

impl ClientPolicy for Client {
    fn client_psk(ssl: &SslRef, md: Option<Nid>) -> Option<ClientPsk<'_>> {
        let k = ssl.ssl_context().ex_data(client_index().ok()?)?;
        let suite = k.identity.suite();
        if md.is_some_and(|m| m != md_nid(suite)) {
            return None;
        }
        Some(ClientPsk {
            identity: k.identity.as_str().as_bytes(),
            key: k.key.expose(),
            cipher: suite.code(),
        })
    }
}

struct Server;

impl Server {
    fn find(ssl: &SslRef, identity: &[u8]) -> (Lookup, Option<Key>) {
        let Some(store) = store_index()
            .ok()
            .and_then(|i| ssl.ssl_context().ex_data(i))
        else {
            return (Lookup::NotAsked, None);
        };
        let parsed = std::str::from_utf8(identity)
            .map_err(|_| "not UTF-8")
            .and_then(|s| {
                PskIdentity::parse(s).map_err(|e| match e {
                    Error::Identity(why) => why,
                    _ => "malformed",
                })
            });
        let id = match parsed {
            Ok(id) => id,
            Err(why) => return (Lookup::Malformed(why), None),
        };
        let Some(retained) = store.retained_psk(id.hostnqn(), id.subnqn()) else {
            return (Lookup::Unknown(id.as_str().to_owned()), None);
        };
        match retained.tls_psk(&id) {
            Ok(key) => (Lookup::Found(id), Some(key)),
            Err(_) => (
                Lookup::Mismatch {
                    identity: id.as_str().to_owned(),
                    asked: id.suite(),
                    configured: retained.suite(),
                },
                None,
            ),
        }
    }
}

impl ServerPolicy for Server {
    type Key = KeyBytes;

    fn server_psk(ssl: &mut SslRef, identity: &[u8]) -> Option<ServerPsk<KeyBytes>> {
        let (found, key) = Server::find(ssl, identity);
        let cipher = match &found {
            Lookup::Found(id) => id.suite().code(),
            _ => [0, 0],
        };
        if let Ok(i) = lookup_index() {
            // Several identities in one ClientHello: keep the first
            // found, else the last reason.
            if !matches!(ssl.ex_data(i), Some(Lookup::Found(_))) {
                ssl.set_ex_data(i, found);
            }
        }
        key.map(|k| ServerPsk {
            key: KeyBytes(k),
            cipher,
        })
    }
}

/// A [`Key`] as bytes for the sys layer.
pub(crate) struct KeyBytes(Key);

impl AsRef<[u8]> for KeyBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.expose()
    }
}

/// The settings both sides share.
fn base(suites: &str) -> Result<SslContextBuilder, Error> {
    let mut b = SslContext::builder(SslMethod::tls()).map_err(setup)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3))
        .map_err(setup)?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3))
        .map_err(setup)?;
    b.set_ciphersuites(suites).map_err(setup)?;
    // PSK every time: no tickets, no resumption, no early data.
    b.set_options(SslOptions::NO_TICKET);
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    b.set_num_tickets(0).map_err(setup)?;
    // Read whole socket buffers, not one record header at a time.
    b.set_read_ahead(true);
    Ok(b)
}

/// An initiator's TLS settings for one controller: TLS 1.3 with the
/// suite its PSK selects, offering the PSK derived for `hostnqn` and
/// `subnqn`. Cheap to clone; make one per attach.
#[derive(Clone)]
pub struct ClientConfig {
    pub(crate) ctx: SslContext,
    identity: PskIdentity,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// Settings for a host (`hostnqn`) that connects to `subnqn` with the
    /// configured PSK `psk`.
    ///
    /// # Errors
    /// [`Error::Key`] / [`Error::Identity`] for a PSK or NQNs that make
    /// no identity, [`Error::Setup`] when OpenSSL fails.
    pub fn new(psk: &TlsPsk, hostnqn: &str, subnqn: &str) -> Result<ClientConfig, Error> {
        let retained = RetainedPsk::derive(psk, hostnqn)?;
        let identity = PskIdentity::new(suite_of(psk)?, hostnqn, subnqn)?;
        let key = retained.tls_psk(&identity)?;
        let mut b = base(identity.suite().name())?;
        sys::set_client_policy::<Client>(&mut b);
        b.set_ex_data(
            client_index()?,
            ClientKey {
                identity: identity.clone(),
                key,
            },
        );
        Ok(ClientConfig {
            ctx: b.build(),
            identity,
        })
    }

    /// The identity the client sends.
    #[must_use]
    pub fn identity(&self) -> &PskIdentity {
        &self.identity
    }

    /// The suite it offers (the only one).
    #[must_use]
    pub fn suite(&self) -> Suite {
        self.identity.suite()
    }
}

/// A target's TLS settings: TLS 1.3 with either NVMe/TCP suite, the PSK
/// of each host found in a [`PskStore`] by its identity. Cheap to clone;
/// one per transport (or listener) does for every connection.
#[derive(Clone)]
pub struct ServerConfig {
    pub(crate) ctx: SslContext,
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig").finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// Settings that take the PSKs of `store`.
    ///
    /// # Errors
    /// [`Error::Setup`] when OpenSSL fails.
    pub fn new(store: Arc<dyn PskStore>) -> Result<ServerConfig, Error> {
        let names = Suite::ALL.map(Suite::name).join(":");
        let mut b = base(&names)?;
        sys::set_server_policy::<Server>(&mut b);
        b.set_ex_data(store_index()?, store);
        Ok(ServerConfig { ctx: b.build() })
    }
}
