//! The jobs living on each reactor's threads, by id: where a message
//! sent to a job's thread finds it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::Job;

thread_local! {
    /// Jobs living on this reactor's threads, by id.
    static JOBS: RefCell<HashMap<u64, Rc<Job>>> = RefCell::new(HashMap::new());
}

/// Registers a job created on this thread.
pub fn register(job: Rc<Job>) {
    JOBS.with(|j| j.borrow_mut().insert(job.cfg.id, job));
}

/// Runs `f` on job `id` if it lives on this thread.
pub fn with_job<R>(id: u64, f: impl FnOnce(&Rc<Job>) -> R) -> Option<R> {
    let job = JOBS.with(|j| j.borrow().get(&id).cloned());
    job.as_ref().map(f)
}

/// Removes job `id` from this thread's registry.
pub fn unregister(id: u64) -> Option<Rc<Job>> {
    JOBS.with(|j| j.borrow_mut().remove(&id))
}
