//! The NVMe/TCP transport (NVMe over Fabrics on TCP): every queue is a
//! TCP connection (ICReq/ICResp, then a Fabrics Connect); the controller's
//! registers are properties, read and written with Property Get/Set on
//! the admin queue ([`Transport::is_fabrics`]: the controller code routes
//! them there); the controller needs Keep Alive.
//!
//! A controller reset drops every connection and makes new ones (a new
//! association, as a Linux or SPDK host does): the admin queue is built
//! again by [`Transport::admin_queue`], each I/O queue by
//! [`Transport::reconnect_io_queue`].

mod connect;
mod paths;
mod queue;

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bdevkit_nvme_auth::{DhGroup, HashFn, HostConfig, Secret, TlsPsk};
use bdevkit_nvme_spec::fabrics::{
    uuid_nqn, Connect, ConnectData, ConnectResponse, ADMIN_QID, CNTLID_DYNAMIC,
};
use bdevkit_nvme_spec::identify::{IdentifyController, SglSupport};
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvme_spec::zerocopy::IntoBytes;
use bdevkit_nvme_spec::Command;
use bdevkit_nvme_tls::{ClientConfig, Stream, TlsConn};

use self::connect::Connecting;
use self::paths::Paths;
pub use self::paths::TcpPath;
pub use self::queue::TcpQueue;
use crate::error::{Error, Result};
use crate::sys::DmaMem;
use crate::transport::{AdminExec, QueueTransport, Transport};

/// In-capsule data the admin queue takes (NVMe/TCP: 8 KiB).
pub const ADMIN_IN_CAPSULE: usize = 8192;
/// Default largest transfer per command.
pub const DEFAULT_MAX_DATA: usize = 128 * 1024;

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct TcpOptions {
    /// IP address (or host name) of the controller.
    pub traddr: String,
    /// TCP port (SPDK's `trsvcid`, a string).
    pub trsvcid: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN (`None`: `nqn.2014-08.org.nvmexpress:uuid:<host id>`).
    pub hostnqn: Option<String>,
    /// Header and data digests to ask for.
    pub digests: Digests,
    /// Bound on connecting and on each Fabrics Connect.
    pub connect_timeout: Duration,
    /// Keep Alive Timeout sent in the admin queue's Connect (0: none).
    pub keep_alive_timeout_ms: u32,
    /// Largest transfer per command (capped by the controller's MDTS).
    pub max_data_bytes: usize,
    /// TLS 1.3 with this PSK on every queue (the handshake comes before
    /// the ICReq), and its keyring name (saved configs show the name).
    pub psk: Option<Box<(String, TlsPsk)>>,
    /// DH-HMAC-CHAP on every queue (after its Connect).
    pub dhchap: Option<Box<Dhchap>>,
}

/// DH-HMAC-CHAP keys and what the host offers (SPDK's `dhchap_key`,
/// `dhchap_ctrlr_key` of an attach, `dhchap_digests` / `dhchap_dhgroups`
/// of `bdev_nvme_set_options`). `Debug` shows names only.
#[derive(Clone)]
pub struct Dhchap {
    /// The host's key and its keyring name.
    pub key: (String, Secret),
    /// The controller's key (bidirectional) and its name.
    pub ctrlr_key: Option<(String, Secret)>,
    /// Hashes offered.
    pub hashes: Vec<HashFn>,
    /// DH groups offered.
    pub groups: Vec<DhGroup>,
}

impl std::fmt::Debug for Dhchap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dhchap")
            .field("key", &self.key.0)
            .field("ctrlr_key", &self.ctrlr_key.as_ref().map(|k| &k.0))
            .field("hashes", &self.hashes)
            .field("groups", &self.groups)
            .finish()
    }
}

impl TcpOptions {
    /// Options for `traddr:trsvcid`, subsystem `subnqn`, defaults for the rest.
    #[must_use]
    pub fn new(traddr: &str, trsvcid: &str, subnqn: &str) -> Self {
        TcpOptions {
            traddr: traddr.to_string(),
            trsvcid: trsvcid.to_string(),
            subnqn: subnqn.to_string(),
            hostnqn: None,
            digests: Digests::default(),
            connect_timeout: Duration::from_secs(10),
            keep_alive_timeout_ms: 10_000,
            max_data_bytes: DEFAULT_MAX_DATA,
            psk: None,
            dhchap: None,
        }
    }
}

/// NVMe over TCP to one controller.
#[derive(Debug)]
pub struct TcpTransport {
    opts: TcpOptions,
    /// Where new connections go (failover: alternates too).
    paths: Paths,
    hostid: [u8; 16],
    hostnqn: String,
    /// The controller id the admin queue's Connect got.
    cntlid: AtomicU16,
    /// In-capsule data the I/O queues take (from Identify Controller).
    io_in_capsule: AtomicUsize,
    /// DH-HMAC-CHAP keys new connections authenticate with
    /// ([`TcpTransport::set_dhchap`] changes them).
    dhchap: parking_lot::Mutex<Option<Box<Dhchap>>>,
}

/// A host identifier: 16 random bytes (the host NQN's UUID when derived).
fn new_host_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut id);
    }
    // A version 4 UUID.
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}

impl TcpTransport {
    /// The transport for `opts` (resolves the address; connects nothing).
    pub fn new(opts: TcpOptions) -> Result<TcpTransport> {
        let first = TcpPath::resolve(&opts.traddr, &opts.trsvcid)?;
        bdevkit_nvme_spec::fabrics::validate_nqn(&opts.subnqn)
            .map_err(|e| Error::InvalidArg(format!("subnqn: {e}")))?;
        let hostid = new_host_id();
        let hostnqn = match &opts.hostnqn {
            Some(n) => {
                bdevkit_nvme_spec::fabrics::validate_nqn(n)
                    .map_err(|e| Error::InvalidArg(format!("hostnqn: {e}")))?;
                n.clone()
            }
            None => uuid_nqn(&hostid),
        };
        // A PSK that cannot make an identity and a config fails the
        // attach, not each queue later.
        if let Some((name, psk)) = opts.psk.as_deref() {
            ClientConfig::new(psk, &hostnqn, &opts.subnqn)
                .map_err(|e| Error::InvalidArg(format!("TLS PSK {name}: {e}")))?;
        }
        let dhchap = parking_lot::Mutex::new(opts.dhchap.clone());
        Ok(TcpTransport {
            dhchap,
            opts,
            paths: Paths::new(first),
            hostid,
            hostnqn,
            cntlid: AtomicU16::new(CNTLID_DYNAMIC),
            io_in_capsule: AtomicUsize::new(0),
        })
    }

    /// The options it was made with.
    #[must_use]
    pub fn options(&self) -> &TcpOptions {
        &self.opts
    }

    /// The DH-HMAC-CHAP keys queues authenticate with now.
    #[must_use]
    pub fn dhchap(&self) -> Option<Box<Dhchap>> {
        self.dhchap.lock().clone()
    }

    /// New DH-HMAC-CHAP keys (`bdev_nvme_set_keys`): queues connected
    /// from now on (a reset reconnects them all) authenticate with them;
    /// `None` stops authenticating (unless the controller asks).
    pub fn set_dhchap(&self, d: Option<Box<Dhchap>>) {
        *self.dhchap.lock() = d;
    }

    /// The host NQN it connects as.
    #[must_use]
    pub fn hostnqn(&self) -> &str {
        &self.hostnqn
    }

    /// The address it connects to (the current path's).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.paths.current().addr
    }

    /// Its paths, the current one first (failover: the others follow in
    /// the order [`TcpTransport::failover`] tries them).
    #[must_use]
    pub fn paths(&self) -> Vec<TcpPath> {
        self.paths.list()
    }

    /// Adds an alternate path to the same controller (subsystem), which
    /// a failover may make current.
    ///
    /// # Errors
    /// [`Error::InvalidArg`] when it does not resolve or is there already.
    pub fn add_path(&self, traddr: &str, trsvcid: &str) -> Result<()> {
        self.paths.add(TcpPath::resolve(traddr, trsvcid)?)
    }

    /// Removes path `traddr:trsvcid`; true when it was the current one
    /// (then the next one is: the caller resets the controller to move
    /// there).
    ///
    /// # Errors
    /// [`Error::NoDevice`] for no such path, [`Error::InvalidArg`] for
    /// the last one.
    pub fn remove_path(&self, traddr: &str, trsvcid: &str) -> Result<bool> {
        self.paths.remove(traddr, trsvcid)
    }

    /// Makes the next path current (connections made from now on go
    /// there); false when it has one path only.
    pub fn failover(&self) -> bool {
        let moved = self.paths.failover();
        if moved {
            tracing::info!(to = %self.addr(), "NVMe/TCP failover to the next path");
        }
        moved
    }

    /// How many paths it has.
    #[must_use]
    pub fn path_count(&self) -> usize {
        self.paths.len()
    }

    /// Starts connecting queue `qid` of `entries` entries: the TCP
    /// handshake (waited for on the admin queue, which connects on a
    /// helper thread, so that a refused connection is its error; left to
    /// the kernel on an I/O queue), then ICReq/ICResp and the Fabrics
    /// Connect, which the queue's polls carry on (see
    /// [`QueueTransport::is_connecting`]).
    fn open(&self, qid: u16, entries: u16, kato_ms: u32, cntlid: u16) -> Result<TcpQueue> {
        if entries < 2 {
            return Err(Error::InvalidArg(format!("queue of {entries} entries")));
        }
        let t = self.opts.connect_timeout;
        let addr = self.addr();
        let sock = if qid == ADMIN_QID {
            TcpStream::connect_timeout(&addr, t)
        } else {
            crate::sys::tcp_connect_nonblocking(&addr)
        }
        .map_err(Error::sys("connect to the NVMe/TCP controller"))?;
        sock.set_nonblocking(true)
            .map_err(Error::sys("nonblocking socket"))?;
        let sock = match self.opts.psk.as_deref() {
            // The handshake moves on in the queue's polls, before the
            // ICReq. A config per connection (made at connect time only:
            // it keeps the transport small).
            Some((_, psk)) => {
                let tls = |e: bdevkit_nvme_tls::Error| Error::InvalidArg(e.to_string());
                let cfg = ClientConfig::new(psk, &self.hostnqn, &self.opts.subnqn).map_err(tls)?;
                Stream::Tls(Box::new(TlsConn::connect(&cfg, sock).map_err(tls)?))
            }
            None => Stream::Plain(sock),
        };
        let data = ConnectData::new(self.hostid, cntlid, &self.opts.subnqn, &self.hostnqn)
            .map_err(|e| Error::InvalidArg(e.to_string()))?;
        let c = Connect::new(qid, u32::from(entries), kato_ms);
        let in_capsule = if qid == ADMIN_QID {
            ADMIN_IN_CAPSULE
        } else {
            self.io_in_capsule.load(Ordering::Acquire)
        };
        let mut conn = Connecting::new(
            self.opts.digests,
            Instant::now() + t,
            c.to_sqe(0),
            data.as_bytes().to_vec(),
            in_capsule,
        );
        conn.auth = self.dhchap.lock().as_deref().map(|d| {
            Box::new(HostConfig {
                hostnqn: self.hostnqn.clone(),
                subnqn: self.opts.subnqn.clone(),
                key: d.key.1.clone(),
                ctrl_key: d.ctrlr_key.as_ref().map(|k| k.1.clone()),
                hashes: d.hashes.clone(),
                groups: d.groups.clone(),
            })
        });
        let mut q = TcpQueue::new(qid, entries - 1, sock, self.opts.max_data_bytes, conn)?;
        q.set_in_capsule_limit(ADMIN_IN_CAPSULE);
        q.send_ic_req();
        Ok(q)
    }
}

impl Transport for TcpTransport {
    type Queue = TcpQueue;

    fn trtype(&self) -> &'static str {
        "TCP"
    }

    fn traddr(&self) -> &str {
        &self.opts.traddr
    }

    fn is_fabrics(&self) -> bool {
        true
    }

    fn read_reg32(&self, _off: u32) -> Result<u32> {
        Err(Error::Unsupported(
            "fabrics registers are properties".into(),
        ))
    }

    fn read_reg64(&self, _off: u32) -> Result<u64> {
        Err(Error::Unsupported(
            "fabrics registers are properties".into(),
        ))
    }

    fn write_reg32(&self, _off: u32, _v: u32) -> Result<()> {
        Err(Error::Unsupported(
            "fabrics registers are properties".into(),
        ))
    }

    fn write_reg64(&self, _off: u32, _v: u64) -> Result<()> {
        Err(Error::Unsupported(
            "fabrics registers are properties".into(),
        ))
    }

    /// Connects the admin queue, waiting for it: the controller code
    /// builds it at attach and at reset, on helper threads (the bdev
    /// module's `nvme-attach` and `nvme-reset`), never on a reactor.
    fn admin_queue(&self, entries: u16) -> Result<TcpQueue> {
        let mut q = self.open(
            ADMIN_QID,
            entries,
            self.opts.keep_alive_timeout_ms,
            CNTLID_DYNAMIC,
        )?;
        let dw0 = q.wait_connected()?;
        let r = ConnectResponse::from_dword(dw0);
        self.cntlid.store(r.cntlid, Ordering::Release);
        tracing::debug!(addr = %self.addr(), digests = ?q.digests(), "NVMe/TCP admin queue connected");
        Ok(q)
    }

    /// Starts connecting an I/O queue and returns it connecting: nothing
    /// here waits for the network (the TCP handshake is the kernel's, the
    /// rest the queue's polls'), and I/O submitted meanwhile waits in it.
    fn connect_io_queue(
        &self,
        qid: u16,
        entries: u16,
        _admin: &mut dyn AdminExec,
    ) -> Result<TcpQueue> {
        self.open(qid, entries, 0, self.cntlid.load(Ordering::Acquire))
    }

    fn reconnect_io_queue(&self, q: &mut TcpQueue, admin: &mut dyn AdminExec) -> Result<()> {
        q.clear();
        let entries = q.depth() + 1;
        *q = self.connect_io_queue(q.qid(), entries, admin)?;
        Ok(())
    }

    fn disconnect_io_queue(&self, q: &mut TcpQueue, _admin: &mut dyn AdminExec) -> Result<()> {
        q.clear();
        Ok(())
    }

    fn alloc_buffer(&self, len: usize) -> Result<DmaMem> {
        DmaMem::alloc(len, false).map_err(Error::sys("buffer allocation"))
    }

    fn needs_keep_alive(&self) -> bool {
        true
    }

    fn max_data_bytes(&self) -> usize {
        self.opts.max_data_bytes
    }

    fn set_sgl_support(&self, _sgl: SglSupport) {}

    fn set_controller_data(&self, id: &IdentifyController) {
        let icd = usize::try_from(id.in_capsule_data_bytes()).unwrap_or(0);
        self.io_in_capsule.store(icd, Ordering::Release);
    }
}
