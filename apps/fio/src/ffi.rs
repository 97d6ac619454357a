//! The boundary with the C shim (`csrc/engine.c`): the `extern "C"`
//! functions it calls, with plain integers and pointers, and the two it
//! provides. All of the crate's unsafe code is here: reading the shim's
//! argument block and C strings, the job pointer fio keeps in
//! `td->io_ops_data`, and lending fio's I/O buffers to bdevkit.
//!
//! Every entry point catches panics: one must not unwind into fio (it
//! would abort the process); the job fails instead.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::time::Duration;

use bdevkit::dma::DmaBuf;

use crate::args::{JobArgs, Op};
use crate::global;
use crate::job::{self, Event, Job, Queue, Request};
use crate::zbd;

/// `struct bk_job_args` of the shim, field for field.
#[repr(C)]
#[derive(Debug)]
pub struct BkJobArgs {
    job: *const c_char,
    conf: *const c_char,
    reactor_mask: *const c_char,
    files: *const *const c_char,
    nr_files: c_uint,
    iodepth: c_uint,
    use_thread: c_int,
    zbd: c_int,
    create_serialize: c_int,
    writes: c_int,
    sizes: *const [c_ulonglong; 2],
    nr_sizes: c_uint,
}

extern "C" {
    /// The shim's `struct ioengine_ops` (fio's `get_ioengine` contract).
    fn bk_get_ioengine(ops: *mut *mut c_void);
    /// Prints a line through fio's `log_err` (stderr outside fio).
    fn bk_log(msg: *const c_char);
}

/// Prints `bdevkit: error: MSG` where fio prints its errors.
fn log_error(msg: &str) {
    let line =
        CString::new(format!("bdevkit: error: {msg}").replace('\0', " ")).unwrap_or_default();
    // SAFETY: `line` is a NUL-terminated string that lives across the call;
    // bk_log only reads it.
    unsafe { bk_log(line.as_ptr()) };
}

/// Runs `f`, turning a panic into `fallback` with a message.
fn guarded<R>(what: &str, fallback: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let why = p
                .downcast_ref::<&str>()
                .map(ToString::to_string)
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log_error(&format!("internal error in {what}: {why}"));
            fallback
        }
    }
}

/// A C string, or `None` for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
unsafe fn opt_str(p: *const c_char) -> Option<String> {
    // SAFETY: the caller's duty.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Reads the shim's argument block.
///
/// # Safety
/// `a` points to a `bk_job_args` whose strings and arrays are valid (the
/// shim fills it from fio's job, which outlives the call).
unsafe fn job_args(a: *const BkJobArgs) -> JobArgs {
    // SAFETY: the caller's duty.
    let a = unsafe { &*a };
    let mut files = Vec::with_capacity(a.nr_files as usize);
    for i in 0..a.nr_files as usize {
        // SAFETY: `files` has `nr_files` valid entries.
        let name = unsafe { *a.files.add(i) };
        // SAFETY: each entry is a fio file name (NUL-terminated) or NULL.
        files.push(unsafe { opt_str(name) }.unwrap_or_default());
    }
    let mut sizes = Vec::with_capacity(a.nr_sizes as usize);
    for i in 0..a.nr_sizes as usize {
        // SAFETY: `sizes` has `nr_sizes` valid entries.
        let [op, bytes] = unsafe { *a.sizes.add(i) };
        if let Some(op) = i32::try_from(op).ok().and_then(Op::from_raw) {
            sizes.push((op, bytes));
        }
    }
    JobArgs {
        // SAFETY: NUL-terminated strings of fio's job options, or NULL.
        job: unsafe { opt_str(a.job) }.unwrap_or_default(),
        // SAFETY: as above.
        conf: unsafe { opt_str(a.conf) }
            .filter(|s| !s.is_empty())
            .map(PathBuf::from),
        // SAFETY: as above.
        reactor_mask: unsafe { opt_str(a.reactor_mask) }.filter(|s| !s.is_empty()),
        files,
        iodepth: a.iodepth as usize,
        use_thread: a.use_thread != 0,
        zbd: a.zbd != 0,
        create_serialize: a.create_serialize != 0,
        writes: a.writes != 0,
        sizes,
    }
}

/// The job behind fio's `td->io_ops_data`.
///
/// # Safety
/// `p` is NULL or a pointer [`bdevkit_fio_init`] returned and
/// [`bdevkit_fio_cleanup`] has not freed, used on the job's own thread
/// (fio calls every engine hook of a job on that job's thread).
unsafe fn job_ref<'a>(p: *mut c_void) -> Option<&'a Job> {
    // SAFETY: the caller's duty.
    unsafe { p.cast::<Job>().as_ref() }
}

/// fio's external-engine entry point: `ioengine=external:PATH` dlsyms
/// `get_ioengine` (a cdylib exports no C object named `ioengine`).
///
/// # Safety
/// `ops` is valid for a write (fio passes the address of its pointer).
#[no_mangle]
pub unsafe extern "C" fn get_ioengine(ops: *mut *mut c_void) {
    // SAFETY: the caller's duty; the shim writes one pointer there.
    unsafe { bk_get_ioengine(ops) };
}

/// fio's `setup`: checks the job and fills `file_sizes` (one per file).
/// 0 on success; -1 after printing why.
///
/// # Safety
/// `args` as for `job_args`; `job` as for `job_ref` (NULL before
/// init); `file_sizes` is valid for `nr_files` writes.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_setup(
    args: *const BkJobArgs,
    job: *mut c_void,
    file_sizes: *mut c_ulonglong,
) -> c_int {
    guarded("setup", -1, || {
        // SAFETY: the caller's duty.
        let (args, job) = unsafe { (job_args(args), job_ref(job)) };
        match job::setup(&args, job) {
            Ok(sizes) => {
                for (i, s) in sizes.iter().enumerate() {
                    // SAFETY: one size per file, `nr_files` slots.
                    unsafe { *file_sizes.add(i) = *s };
                }
                0
            }
            Err(e) => {
                log_error(&e.to_string());
                -1
            }
        }
    })
}

/// fio's `init`, on the job's thread: the job, or NULL after printing why.
///
/// # Safety
/// `args` as for `job_args`.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_init(args: *const BkJobArgs) -> *mut c_void {
    guarded("init", std::ptr::null_mut(), || {
        // SAFETY: the caller's duty.
        let args = unsafe { job_args(args) };
        match Job::init(&args) {
            Ok(j) => Box::into_raw(Box::new(j)).cast(),
            Err(e) => {
                log_error(&e.to_string());
                std::ptr::null_mut()
            }
        }
    })
}

/// fio's `cleanup`, on the job's thread: frees the job (NULL when init
/// failed or never ran) and stops the runtime after the last one.
///
/// # Safety
/// `job` as for `job_ref`; not used again.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_cleanup(job: *mut c_void, create_serialize: c_int) {
    guarded("cleanup", (), || {
        let job = (!job.is_null()).then(|| {
            // SAFETY: a pointer from Box::into_raw in bdevkit_fio_init,
            // freed once, here.
            *unsafe { Box::from_raw(job.cast::<Job>()) }
        });
        job::cleanup(job, create_serialize != 0);
    });
}

/// fio's `iomem_alloc`: its I/O memory, or NULL.
///
/// # Safety
/// `job` as for `job_ref`.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_iomem_alloc(job: *mut c_void, len: usize) -> *mut c_void {
    guarded("iomem_alloc", std::ptr::null_mut(), || {
        // SAFETY: the caller's duty.
        match unsafe { job_ref(job) } {
            Some(j) => j
                .iomem_alloc(len)
                .map_or(std::ptr::null_mut(), |p| p.cast()),
            None => std::ptr::null_mut(),
        }
    })
}

/// fio's `iomem_free`.
///
/// # Safety
/// `job` as for `job_ref`.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_iomem_free(job: *mut c_void) {
    guarded("iomem_free", (), || {
        // SAFETY: the caller's duty.
        if let Some(j) = unsafe { job_ref(job) } {
            j.iomem_free();
        }
    });
}

/// fio's `queue`: 1 queued, 2 busy, 0 completed with `*err` (errno or 0).
///
/// # Safety
/// `job` as for `job_ref`; `err` valid for a write; for a read or a
/// write, `[buf, buf + len)` is the io_u's buffer, which fio leaves alone
/// until the engine returns the io_u from `event` (or completes it here).
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_queue(
    job: *mut c_void,
    io_u: *mut c_void,
    op: c_int,
    file: c_uint,
    offset: c_ulonglong,
    buf: *mut c_void,
    len: c_ulonglong,
    err: *mut c_int,
) -> c_int {
    let r = guarded("queue", Queue::Completed(libc::EIO), || {
        // SAFETY: the caller's duty.
        let Some(j) = (unsafe { job_ref(job) }) else {
            return Queue::Completed(libc::ENODEV);
        };
        let op = Op::from_raw(op);
        let buf = match (op, NonNull::new(buf.cast::<u8>()), usize::try_from(len)) {
            (Some(Op::Read | Op::Write), Some(p), Ok(n)) if n > 0 => {
                // SAFETY: fio's io_u buffer, valid for `len` bytes and
                // initialised (zeroed in iomem_alloc, or fio's own fill),
                // and untouched by fio until the io_u comes back from
                // `event`; the view is dropped at completion, before that
                // (job.rs, Reaper::io_done), or right here when refused.
                Some(unsafe { DmaBuf::from_raw_parts(p, n) })
            }
            _ => None,
        };
        j.queue(Request {
            io_u: io_u as u64,
            op,
            file: file as usize,
            offset,
            len,
            buf,
        })
    });
    match r {
        Queue::Queued => 1,
        Queue::Busy => 2,
        Queue::Completed(e) => {
            // SAFETY: the caller's duty.
            unsafe { *err = e };
            0
        }
    }
}

/// fio's `getevents`: completions ready (at least `min` unless the
/// timeout, in ns, passed; -1: none), or a negative errno. `*events`
/// points to them, contiguous (`struct bk_event`s, which the shim's
/// `event` reads in place), until the next call or the job's cleanup.
///
/// # Safety
/// `job` as for `job_ref`; `events` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_getevents(
    job: *mut c_void,
    min: c_uint,
    max: c_uint,
    timeout_ns: i64,
    events: *mut *const Event,
) -> c_int {
    guarded("getevents", -libc::EIO, || {
        // SAFETY: the caller's duty.
        let Some(j) = (unsafe { job_ref(job) }) else {
            return -libc::ENODEV;
        };
        let timeout = u64::try_from(timeout_ns).ok().map(Duration::from_nanos);
        let (n, at) = j.getevents(min as usize, max as usize, timeout);
        // SAFETY: the caller's duty.
        unsafe { *events = at };
        c_int::try_from(n).unwrap_or(c_int::MAX)
    })
}

/// A file name from the shim, or `ENODEV`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string valid for the call.
unsafe fn file_name(name: *const c_char) -> Result<String, i32> {
    // SAFETY: the caller's duty.
    unsafe { opt_str(name) }.ok_or(libc::ENODEV)
}

/// A zone hook's result for fio: `Ok` as given, an errno negated.
fn zone_result(what: &str, r: Result<c_int, i32>) -> c_int {
    r.unwrap_or_else(|e| {
        log_error(&format!("{what}: {}", std::io::Error::from_raw_os_error(e)));
        -e
    })
}

/// fio's `get_zoned_model` for bdev `name`: 0, or a negative errno.
///
/// # Safety
/// `name` as for `file_name`; `model` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_zoned_model(name: *const c_char, model: *mut c_int) -> c_int {
    guarded("get_zoned_model", -libc::EIO, || {
        // SAFETY: the caller's duty.
        let r = unsafe { file_name(name) }.and_then(|n| zbd::model(&n));
        zone_result(
            "zoned model",
            r.map(|m| {
                // SAFETY: the caller's duty.
                unsafe { *model = m };
                0
            }),
        )
    })
}

/// fio's `get_max_open_zones` for bdev `name`: 0, or a negative errno.
///
/// # Safety
/// `name` as for `file_name`; `max` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_max_open_zones(
    name: *const c_char,
    max: *mut c_uint,
) -> c_int {
    guarded("get_max_open_zones", -libc::EIO, || {
        // SAFETY: the caller's duty.
        let r = unsafe { file_name(name) }.and_then(|n| zbd::max_open_zones(&n));
        zone_result(
            "max open zones",
            r.map(|m| {
                // SAFETY: the caller's duty.
                unsafe { *max = m };
                0
            }),
        )
    })
}

/// fio's `report_zones`: up to `nr` zones of bdev `name` from the one
/// holding byte `offset` into `zones`; how many, or a negative errno.
///
/// # Safety
/// `job` as for `job_ref`; `name` as for `file_name`; `zones` valid for
/// `nr` writes.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_report_zones(
    job: *mut c_void,
    name: *const c_char,
    offset: u64,
    zones: *mut zbd::FioZone,
    nr: c_uint,
) -> c_int {
    guarded("report_zones", -libc::EIO, || {
        // SAFETY: the caller's duty.
        let (job, name) = unsafe { (job_ref(job), file_name(name)) };
        let r = name.and_then(|n| zbd::report(job, &n, offset, u64::from(nr)));
        zone_result(
            "zone report",
            r.map(|got| {
                for (i, z) in got.iter().take(nr as usize).enumerate() {
                    // SAFETY: the caller's duty; i < nr.
                    unsafe { *zones.add(i) = *z };
                }
                c_int::try_from(got.len().min(nr as usize)).unwrap_or(c_int::MAX)
            }),
        )
    })
}

/// fio's `reset_wp`: resets the zones of bdev `name` in `offset..offset +
/// len` (bytes); 0, or a negative errno.
///
/// # Safety
/// `job` as for `job_ref`; `name` as for `file_name`.
#[no_mangle]
pub unsafe extern "C" fn bdevkit_fio_reset_wp(
    job: *mut c_void,
    name: *const c_char,
    offset: u64,
    len: u64,
) -> c_int {
    guarded("reset_wp", -libc::EIO, || {
        // SAFETY: the caller's duty.
        let (job, name) = unsafe { (job_ref(job), file_name(name)) };
        let r = name.and_then(|n| zbd::reset(job, &n, offset, len));
        zone_result("zone reset", r.map(|()| 0))
    })
}

/// The library unloads (or the process exits): stops a runtime that jobs
/// left running.
#[no_mangle]
pub extern "C" fn bdevkit_fio_exit() {
    guarded("exit", (), global::exit);
}

#[cfg(test)]
mod tests {
    //! The entry points driven as fio's shim drives them, with integers
    //! for io_u pointers.

    use std::io::Write;

    use bdevkit_test::steady::{start_counting, stop_counting, CountingAlloc};

    use super::*;

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    const QD: usize = 8;
    const QD_C: c_uint = 8;
    const READ: c_int = 0;
    const WRITE: c_int = 1;
    const TRIM: c_int = 2;
    const FLUSH: c_int = 3;

    fn conf() -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(
            f,
            r#"{{"subsystems": [{{"subsystem": "bdev", "config": [
                {{"method": "bdev_null_create", "params": {{"name": "Null0", "num_blocks": 1024, "block_size": 4096}}}},
                {{"method": "bdev_malloc_create", "params": {{"name": "Malloc0", "num_blocks": 256, "block_size": 4096}}}}
            ]}}]}}"#
        )
        .unwrap();
        f
    }

    /// The strings a `BkJobArgs` points to.
    struct Strings {
        job: CString,
        conf: CString,
        // Owns what `ptrs` points to.
        _files: Vec<CString>,
        ptrs: Vec<*const c_char>,
        sizes: Vec<[c_ulonglong; 2]>,
    }

    fn strings(conf: &std::path::Path, files: &[&str]) -> Strings {
        let files: Vec<CString> = files.iter().map(|f| CString::new(*f).unwrap()).collect();
        let ptrs = files.iter().map(|f| f.as_ptr()).collect();
        Strings {
            job: CString::new("job").unwrap(),
            conf: CString::new(conf.to_str().unwrap()).unwrap(),
            _files: files,
            ptrs,
            sizes: vec![[0, 4096], [1, 4096]],
        }
    }

    fn block(s: &Strings) -> BkJobArgs {
        BkJobArgs {
            job: s.job.as_ptr(),
            conf: s.conf.as_ptr(),
            reactor_mask: std::ptr::null(),
            files: s.ptrs.as_ptr(),
            nr_files: c_uint::try_from(s.ptrs.len()).unwrap(),
            iodepth: QD_C,
            use_thread: 1,
            zbd: 0,
            create_serialize: 1,
            writes: 1,
            sizes: s.sizes.as_ptr(),
            nr_sizes: c_uint::try_from(s.sizes.len()).unwrap(),
        }
    }

    /// Queues one I/O; what `queue` answered and its immediate errno.
    fn queue(
        job: *mut c_void,
        tag: u64,
        op: c_int,
        file: c_uint,
        off: u64,
        buf: *mut u8,
        len: u64,
    ) -> (c_int, c_int) {
        let mut err = 0;
        // SAFETY: `job` is live, on this thread; `buf` (or NULL) is
        // `len` bytes of the job's iomem, untouched until reaped.
        let r = unsafe {
            bdevkit_fio_queue(
                job,
                tag as *mut c_void,
                op,
                file,
                off,
                buf.cast(),
                len,
                &mut err,
            )
        };
        (r, err)
    }

    /// One `getevents` (at most QD events), read as the shim reads them.
    fn getevents(job: *mut c_void, min: c_uint, timeout_ns: i64) -> Vec<Event> {
        let mut at: *const Event = std::ptr::null();
        // SAFETY: `job` is live, on this thread; `at` is writable.
        let got = unsafe { bdevkit_fio_getevents(job, min, QD_C, timeout_ns, &mut at) };
        let got = usize::try_from(got).unwrap();
        assert!(got <= QD);
        // SAFETY: `got` contiguous events at `at`, valid until the next
        // call on the job (they are copied out before it).
        (0..got).map(|i| unsafe { *at.add(i) }).collect()
    }

    /// Reaps `n` completions: (tag, errno) pairs.
    fn reap(job: *mut c_void, n: usize) -> Vec<(u64, c_int)> {
        let mut out = Vec::new();
        while out.len() < n {
            out.extend(getevents(job, 1, -1).iter().map(|e| (e.io_u, e.err)));
        }
        out
    }

    #[test]
    fn io_path_through_the_entry_points() {
        let _l = global::TEST_LOCK.lock();
        let c = conf();
        let path = c.path().to_path_buf();
        std::thread::spawn(move || {
            let s = strings(&path, &["Null0", "Malloc0"]);
            let a = block(&s);
            let mut sizes = [0u64; 2];
            // SAFETY: `a` points into `s`, alive; two size slots.
            let r = unsafe { bdevkit_fio_setup(&a, std::ptr::null_mut(), sizes.as_mut_ptr()) };
            assert_eq!(r, 0);
            assert_eq!(sizes, [4096 * 1024, 4096 * 256]);
            // SAFETY: as above.
            let job = unsafe { bdevkit_fio_init(&a) };
            assert!(!job.is_null());
            // SAFETY: the job just made, on its thread.
            let mem = unsafe { bdevkit_fio_iomem_alloc(job, QD * 4096) }.cast::<u8>();
            assert!(!mem.is_null());
            let page = |i: usize| {
                // SAFETY: `i` < QD: inside the QD pages of `mem`.
                unsafe { mem.add(i * 4096) }
            };
            // Write a pattern to Malloc0 from pages 0..4, read it into 4..8.
            for i in 0..4 {
                // SAFETY: page i is ours until queued.
                unsafe { std::ptr::write_bytes(page(i), 0x10 + u8::try_from(i).unwrap(), 4096) };
                assert_eq!(
                    queue(
                        job,
                        100 + i as u64,
                        WRITE,
                        1,
                        i as u64 * 4096,
                        page(i),
                        4096
                    )
                    .0,
                    1
                );
            }
            let mut done = reap(job, 4);
            done.sort_unstable();
            assert_eq!(done, vec![(100, 0), (101, 0), (102, 0), (103, 0)]);
            for i in 0..4 {
                assert_eq!(
                    queue(
                        job,
                        200 + i as u64,
                        READ,
                        1,
                        i as u64 * 4096,
                        page(4 + i),
                        4096
                    )
                    .0,
                    1
                );
            }
            assert!(reap(job, 4).iter().all(|&(_, e)| e == 0));
            for i in 0..4 {
                // SAFETY: reaped: the engine is done with page 4 + i.
                let got = unsafe { std::slice::from_raw_parts(page(4 + i), 4096) };
                assert!(
                    got.iter().all(|b| *b == 0x10 + u8::try_from(i).unwrap()),
                    "page {i}"
                );
            }
            // Trim and flush (whole bdev: offset and length 0) on both.
            assert_eq!(
                queue(job, 300, TRIM, 1, 8192, std::ptr::null_mut(), 8192).0,
                1
            );
            assert_eq!(queue(job, 301, FLUSH, 1, 0, std::ptr::null_mut(), 0).0, 1);
            let null_flush = queue(job, 302, FLUSH, 0, 0, std::ptr::null_mut(), 0);
            assert!(
                null_flush == (1, 0) || null_flush == (0, 0),
                "{null_flush:?}"
            );
            let n = if null_flush.0 == 1 { 3 } else { 2 };
            assert!(reap(job, n).iter().all(|&(_, e)| e == 0));
            // Unaligned, or past the end (the bdev layer refuses it):
            // completed at once with the errno, nothing left to reap.
            assert_eq!(
                queue(job, 400, READ, 0, 100, page(0), 4096),
                (0, libc::EINVAL)
            );
            assert_eq!(
                queue(job, 401, READ, 0, 4096 * 1024, page(0), 4096),
                (0, libc::EINVAL)
            );
            assert!(getevents(job, 0, 0).is_empty());
            assert_eq!(
                queue(job, 402, READ, 7, 0, page(0), 4096),
                (0, libc::ENODEV)
            );
            assert_eq!(
                queue(job, 403, 9, 0, 0, page(0), 4096),
                (0, libc::EOPNOTSUPP)
            );
            // SAFETY: no I/O in flight; the job is not used again.
            unsafe {
                bdevkit_fio_iomem_free(job);
                bdevkit_fio_cleanup(job, 1);
            }
            assert!(
                !global::is_running(),
                "the last job's cleanup stops bdevkit"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn steady_state_allocates_nothing() {
        const WARMUP: usize = 20_000;
        const MEASURED: usize = 100_000;
        let _l = global::TEST_LOCK.lock();
        let c = conf();
        let path = c.path().to_path_buf();
        let allocs = std::thread::spawn(move || {
            let s = strings(&path, &["Null0"]);
            let a = block(&s);
            let mut size = 0u64;
            // SAFETY: `a` points into `s`, alive; one size slot.
            let r = unsafe { bdevkit_fio_setup(&a, std::ptr::null_mut(), &mut size) };
            assert_eq!(r, 0);
            // SAFETY: as above.
            let job = unsafe { bdevkit_fio_init(&a) };
            // SAFETY: the job, on its thread.
            let mem = unsafe { bdevkit_fio_iomem_alloc(job, QD * 4096) }.cast::<u8>();
            let mut free: Vec<u64> = (0..u64::from(QD_C)).collect();
            let mut n = 0usize;
            let mut allocs = 0;
            while n < WARMUP + MEASURED {
                if n == WARMUP {
                    start_counting();
                }
                while let Some(slot) = free.pop() {
                    let op = if slot % 2 == 0 { READ } else { WRITE };
                    let off = (n as u64 * 7 % 1024) * 4096;
                    // SAFETY: slot < QD: its page of `mem`, not in flight.
                    let buf = unsafe { mem.add(usize::try_from(slot).unwrap() * 4096) };
                    let (r, _) = queue(job, slot, op, 0, off, buf, 4096);
                    assert_eq!(r, 1);
                }
                let mut at: *const Event = std::ptr::null();
                // SAFETY: the job, on its thread; `at` is writable.
                let got = unsafe { bdevkit_fio_getevents(job, 1, QD_C, -1, &mut at) };
                for i in 0..usize::try_from(got).unwrap() {
                    // SAFETY: `got` contiguous events at `at`, read
                    // before the next call on the job.
                    let ev = unsafe { *at.add(i) };
                    assert_eq!(ev.err, 0);
                    free.push(ev.io_u);
                    n += 1;
                }
                if n >= WARMUP + MEASURED {
                    allocs = stop_counting();
                }
            }
            // Drain what is left in flight: the cleanup waits for it.
            // SAFETY: the job is not used again.
            unsafe {
                bdevkit_fio_iomem_free(job);
                bdevkit_fio_cleanup(job, 1);
            }
            allocs
        })
        .join()
        .unwrap();
        assert_eq!(
            allocs, 0,
            "{allocs} heap allocations during {MEASURED} steady-state I/Os"
        );
    }
}
