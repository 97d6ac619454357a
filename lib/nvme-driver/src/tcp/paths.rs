//! The network paths of one NVMe/TCP controller (failover): the address
//! it was created with and the alternates added since, one of them
//! current. Every new connection (the admin queue at a reset, each I/O
//! queue) goes to the current path; [`Paths::failover`] makes the next
//! one current. Read at connect time only, never per command.

use std::net::{SocketAddr, ToSocketAddrs};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// One address of a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpPath {
    /// IP address or host name, as given.
    pub traddr: String,
    /// TCP port, as given.
    pub trsvcid: String,
    /// What it resolved to.
    pub addr: SocketAddr,
}

impl TcpPath {
    /// Resolves `traddr:trsvcid`.
    ///
    /// # Errors
    /// [`Error::InvalidArg`] for a bad port or an address that does not
    /// resolve.
    pub fn resolve(traddr: &str, trsvcid: &str) -> Result<TcpPath> {
        let port: u16 = trsvcid
            .parse()
            .map_err(|_| Error::InvalidArg(format!("trsvcid {trsvcid:?}")))?;
        let addr = (traddr, port)
            .to_socket_addrs()
            .map_err(|e| Error::InvalidArg(format!("traddr {traddr:?}: {e}")))?
            .next()
            .ok_or_else(|| Error::InvalidArg(format!("traddr {traddr:?}")))?;
        Ok(TcpPath {
            traddr: traddr.to_string(),
            trsvcid: trsvcid.to_string(),
            addr,
        })
    }

    fn same(&self, traddr: &str, trsvcid: &str) -> bool {
        self.traddr == traddr && self.trsvcid == trsvcid
    }
}

#[derive(Debug)]
struct Inner {
    list: Vec<TcpPath>,
    cur: usize,
}

/// The paths, the current one first in [`Paths::list`].
#[derive(Debug)]
pub(crate) struct Paths(Mutex<Inner>);

impl Paths {
    pub(crate) fn new(first: TcpPath) -> Paths {
        Paths(Mutex::new(Inner {
            list: vec![first],
            cur: 0,
        }))
    }

    /// The current path.
    pub(crate) fn current(&self) -> TcpPath {
        let g = self.0.lock();
        g.list[g.cur].clone()
    }

    /// Every path, the current one first, then the others in the order
    /// failover tries them.
    pub(crate) fn list(&self) -> Vec<TcpPath> {
        let g = self.0.lock();
        let n = g.list.len();
        (0..n).map(|i| g.list[(g.cur + i) % n].clone()).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().list.len()
    }

    /// Adds an alternate path.
    pub(crate) fn add(&self, p: TcpPath) -> Result<()> {
        let mut g = self.0.lock();
        if g.list.iter().any(|x| x.same(&p.traddr, &p.trsvcid)) {
            return Err(Error::InvalidArg(format!(
                "path {}:{} exists",
                p.traddr, p.trsvcid
            )));
        }
        g.list.push(p);
        Ok(())
    }

    /// Removes path `traddr:trsvcid` (never the last one). Returns
    /// whether it was the current one (the next one is current now).
    pub(crate) fn remove(&self, traddr: &str, trsvcid: &str) -> Result<bool> {
        let mut g = self.0.lock();
        let Some(i) = g.list.iter().position(|x| x.same(traddr, trsvcid)) else {
            return Err(Error::NoDevice(format!("path {traddr}:{trsvcid}")));
        };
        if g.list.len() == 1 {
            return Err(Error::InvalidArg("the last path".into()));
        }
        let was_current = i == g.cur;
        g.list.remove(i);
        if i < g.cur {
            g.cur -= 1;
        }
        if g.cur >= g.list.len() {
            g.cur = 0;
        }
        Ok(was_current)
    }

    /// Makes the next path current; false when there is no other.
    pub(crate) fn failover(&self) -> bool {
        let mut g = self.0.lock();
        if g.list.len() < 2 {
            return false;
        }
        g.cur = (g.cur + 1) % g.list.len();
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn p(port: &str) -> TcpPath {
        TcpPath::resolve("127.0.0.1", port).unwrap()
    }

    #[test]
    fn rotate_add_remove() {
        let ps = Paths::new(p("4420"));
        assert!(!ps.failover());
        ps.add(p("4421")).unwrap();
        ps.add(p("4422")).unwrap();
        assert!(ps.add(p("4421")).is_err());
        assert_eq!(ps.current().trsvcid, "4420");
        assert!(ps.failover());
        let order: Vec<String> = ps.list().into_iter().map(|x| x.trsvcid).collect();
        assert_eq!(order, ["4421", "4422", "4420"]);
        // Removing the current one makes the next one current.
        assert!(ps.remove("127.0.0.1", "4421").unwrap());
        assert_eq!(ps.current().trsvcid, "4422");
        assert!(!ps.remove("127.0.0.1", "4420").unwrap());
        assert_eq!(ps.current().trsvcid, "4422");
        assert!(ps.remove("127.0.0.1", "4422").is_err());
        assert!(ps.remove("127.0.0.1", "9").is_err());
        assert_eq!(ps.len(), 1);
        assert!(TcpPath::resolve("127.0.0.1", "port").is_err());
    }
}
