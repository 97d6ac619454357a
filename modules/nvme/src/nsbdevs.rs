//! A controller's namespace bdevs: registered by the first controller of
//! a name that has the namespace, joined as another path by the next
//! ones (multipath: same namespace id and identifiers), and left when the
//! controller goes (the bdev goes with its last path).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bdevkit::bdev::module::BdevProps;
use bdevkit_nvme_driver::Namespace;
use uuid::Uuid;

use crate::bdev::{ns_uuid, NvmeBdev};
use crate::ctrlr::NvmeCtrlr;
use crate::multipath::{NsPaths, PathOwner};
use crate::MODULE;

/// What identifies a namespace across controllers (UUID, NGUID or
/// EUI-64; `None` when it has none).
fn identity(ns: &Namespace) -> Option<Uuid> {
    ns_uuid(ns, &[], false)
}

impl NvmeCtrlr {
    /// The bdev of namespace `ns` another path of this name registered:
    /// its name and paths. `Err` when that path's namespace `ns.id` is a
    /// different namespace.
    fn sibling_bdev(&self, ns: &Namespace) -> Result<Option<(String, Arc<NsPaths>)>, String> {
        let Some(reg) = self.reg.upgrade() else {
            return Ok(None);
        };
        for c in reg.paths(&self.name) {
            if c.id == self.id {
                continue;
            }
            let found = c
                .bdevs
                .lock()
                .iter()
                .find(|b| b.0 == ns.id)
                .map(|b| (b.1.clone(), Arc::clone(&b.2)));
            let Some(found) = found else { continue };
            let theirs = c.driver().namespaces().into_iter().find(|n| n.id == ns.id);
            let same =
                theirs.is_some_and(|t| identity(&t).is_some() && identity(&t) == identity(ns));
            return if same {
                Ok(Some(found))
            } else {
                Err(format!(
                    "namespace {} of {} is not the one the other paths serve",
                    ns.id, self.name
                ))
            };
        }
        Ok(None)
    }

    /// Registers a bdev for each namespace that has none yet, or joins
    /// the bdev another path of this name has for it (on the app
    /// thread); returns the names.
    pub(crate) fn add_bdevs(self: &Arc<Self>, namespaces: &[Namespace]) -> Vec<String> {
        let id = self.driver().identify();
        let max_bytes = self.driver().max_transfer_bytes();
        let fabrics = bdevkit_nvme_driver::Transport::is_fabrics(self.driver().transport());
        let mut names = Vec::new();
        for ns in namespaces {
            if self.bdevs.lock().iter().any(|b| b.0 == ns.id) {
                continue;
            }
            match self.sibling_bdev(ns) {
                Ok(Some((name, paths))) => {
                    let owner: Arc<dyn PathOwner> = Arc::clone(self) as Arc<dyn PathOwner>;
                    paths.add(self.id, owner, self.device.clone(), || {});
                    if let Some(p) = self.policy_override() {
                        paths.set_policy(p, || {});
                    }
                    tracing::info!(bdev = %name, ctrlr = %self.name, "NVMe path added");
                    self.bdevs.lock().push((ns.id, name.clone(), paths));
                    names.push(name);
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(error = %e, "namespace not added");
                    continue;
                }
            }
            let name = format!("{}n{}", self.name, ns.id);
            let mut p = BdevProps::new(&name, "NVMe disk", ns.block_size, ns.num_blocks);
            let bs = usize::try_from(ns.block_size).unwrap_or(512);
            p.max_rw_size = u32::try_from((max_bytes / bs).min(65536)).unwrap_or(65536);
            p.required_alignment = 2;
            // The channel's PRP1/PRP2 path tests what the bdev layer would
            // (one dword-aligned segment), and what it takes is within any
            // MDTS (at least two pages); it hands the rest back. Fabrics
            // queues keep the bdev layer's test.
            p.module_checks_fit = !fabrics && max_bytes >= 2 * bdevkit_nvme_driver::sys::PAGE;
            p.write_cache = id.volatile_write_cache();
            p.max_write_zeroes = 65536;
            p.max_unmap = u32::MAX;
            p.uuid = ns_uuid(ns, &id.sn, self.options().generate_uuids);
            let paths = Arc::new(NsPaths::new(&name, ns.id, self.policy));
            let owner: Arc<dyn PathOwner> = Arc::clone(self) as Arc<dyn PathOwner>;
            paths.add(self.id, owner, self.device.clone(), || {});
            let bdev = NvmeBdev::new(Arc::clone(&paths), ns, &id, self.options().enable_flush);
            match self.mgr.register_bdev(MODULE, p, Arc::new(bdev)) {
                Ok(_) => {
                    self.bdevs.lock().push((ns.id, name.clone(), paths));
                    names.push(name);
                }
                Err(e) => tracing::error!(bdev = %name, error = %e, "cannot register NVMe bdev"),
            }
        }
        names
    }

    /// The policy this attach asked for, when not the default.
    fn policy_override(&self) -> Option<crate::multipath::Policy> {
        (self.policy != crate::multipath::Policy::default()).then_some(self.policy)
    }

    /// Namespaces changed: new ones get bdevs (or paths), vanished ones
    /// go (this path of them).
    pub(crate) fn namespaces_changed(self: &Arc<Self>) {
        let ns = self.driver().namespaces();
        self.add_bdevs(&ns);
        let gone: Vec<(u32, String, Arc<NsPaths>)> = self
            .bdevs
            .lock()
            .iter()
            .filter(|b| !ns.iter().any(|n| n.id == b.0))
            .cloned()
            .collect();
        for b in gone {
            self.bdevs.lock().retain(|x| x.0 != b.0);
            self.leave_bdev(&b, Box::new(|| {}));
        }
    }

    /// This path leaves bdev `b`: the bdev goes when it was its last
    /// path. `done` once no channel uses the path (or the bdev is
    /// unregistered).
    fn leave_bdev(&self, b: &(u32, String, Arc<NsPaths>), done: Box<dyn FnOnce() + Send>) {
        let (_, name, paths) = b;
        if paths.len() > 1 {
            paths.remove(self.id, move |_| done());
            return;
        }
        match self.mgr.get(name) {
            Some(bdev) => self.mgr.unregister(&bdev, done),
            None => done(),
        }
    }

    /// This path leaves every bdev it serves (detach, removal); `done`
    /// once it left them all.
    pub(crate) fn leave_bdevs(self: &Arc<Self>, done: impl FnOnce() + Send + 'static) {
        let bdevs: Vec<(u32, String, Arc<NsPaths>)> = std::mem::take(&mut *self.bdevs.lock());
        let left = Arc::new(AtomicUsize::new(bdevs.len() + 1));
        let done = Arc::new(parking_lot::Mutex::new(Some(done)));
        let step = move || {
            if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                if let Some(d) = done.lock().take() {
                    d();
                }
            }
        };
        let step = Arc::new(step);
        for b in &bdevs {
            let s = Arc::clone(&step);
            self.leave_bdev(b, Box::new(move || s()));
        }
        step();
    }

    /// Whether every bdev it serves has another path (so that its I/O
    /// can move there).
    pub(crate) fn has_other_paths(&self) -> bool {
        let b = self.bdevs.lock();
        !b.is_empty() && b.iter().all(|x| x.2.len() > 1)
    }
}
