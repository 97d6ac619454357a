//! Unit tests of the job: offsets and requests on a real malloc bdev.

use super::*;

/// Runs `f` on a job created on a malloc bdev of `blocks` 4 KiB
/// blocks, on a one-reactor runtime in interrupt mode.
fn on_job<R: Send + 'static>(
    blocks: u64,
    cfg: JobConfig,
    f: impl FnOnce(&Rc<Job>) -> R + Send + 'static,
) -> R {
    use bdevkit::bdev::{BdevManager, BdevOptions};
    use bdevkit::thread::{Runtime, RuntimeOptions};
    let rt = Runtime::start(RuntimeOptions::interrupt("0x1".parse().unwrap())).unwrap();
    let mgr = BdevManager::new(BdevOptions::default());
    bdevkit_malloc::register(&mgr);
    let out = rt
        .app_thread()
        .run_sync(move || {
            bdevkit_malloc::create(
                &mgr,
                bdevkit_malloc::MallocCreateParams::new("M0", 4096, blocks),
            )
            .unwrap();
            let job = Job::new(cfg, &mgr).unwrap();
            let out = f(&job);
            job.close();
            drop(job);
            mgr.unregister_all(|| {});
            out
        })
        .unwrap();
    rt.shutdown();
    out
}

pub(super) fn cfg(workload: Workload) -> JobConfig {
    JobConfig {
        id: 7,
        bdev: "M0".into(),
        core: 0,
        workload,
        rw_percentage: 0,
        queue_depth: 1,
        io_size: 4096,
        slice: (0, 1),
        range_blocks: None,
        seed: 42,
        timeout_ticks: u64::MAX,
        continue_on_failure: false,
        zipf_theta: None,
        random_map: false,
        unique_writes: false,
        zone_append: false,
    }
}

/// The next request the job would submit: offset and data.
fn next_request(job: &Job) -> (u64, Vec<u8>) {
    let mut io = job.ch.alloc_io().unwrap();
    let buf = DmaBuf::new(4096).unwrap();
    if job.plain {
        job.fill(&mut io, Some(buf));
    } else {
        job.fill_featured(&mut io, 0, Some(buf));
    }
    let off = io.offset_blocks();
    (off, io.take_buf().unwrap().as_slice().to_vec())
}

/// -U: two consecutive writes to the same (only) slot carry different
/// data; without -U the job takes the plain path and writes the same.
#[test]
fn unique_writes_differ_on_the_same_slot() {
    let unique = JobConfig {
        unique_writes: true,
        ..cfg(Workload::RandWrite)
    };
    let (a, b, plain) = on_job(1, unique, |job| {
        assert!(!job.plain);
        (next_request(job), next_request(job), job.plain)
    });
    assert!(!plain);
    assert_eq!((a.0, b.0), (0, 0), "one slot");
    assert_ne!(a.1, b.1);
    // Block address, write count, job id.
    assert_eq!(a.1[..8], 0u64.to_le_bytes());
    assert_eq!(a.1[8..16], 1u64.to_le_bytes());
    assert_eq!(b.1[8..16], 2u64.to_le_bytes());
    assert_eq!(a.1[16..24], 7u64.to_le_bytes());
    let (a, b) = on_job(1, cfg(Workload::RandWrite), |job| {
        assert!(job.plain, "no feature: the fast path");
        (next_request(job), next_request(job))
    });
    assert_eq!(a.1, b.1);
}

/// -D through the job: over exactly num_slots I/Os of a job-file range
/// every slot of the range is hit once.
#[test]
fn random_map_covers_the_range_once() {
    let c = JobConfig {
        random_map: true,
        range_blocks: Some((10, 300)),
        ..cfg(Workload::RandRead)
    };
    let offs = on_job(1024, c, |job| {
        assert_eq!((job.first_slot, job.num_slots), (10, 300));
        (0..300).map(|_| next_request(job).0).collect::<Vec<_>>()
    });
    let mut sorted = offs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (10..310).collect::<Vec<_>>());
    assert_ne!(offs, sorted, "random order");
}

/// -F through the job: offsets stay in the job's slots and the first
/// slot is the most frequent.
#[test]
fn zipf_offsets_favour_the_first_slot() {
    let c = JobConfig {
        zipf_theta: Some(1.2),
        slice: (1, 2),
        ..cfg(Workload::RandRead)
    };
    let offs = on_job(1000, c, |job| {
        (0..5000).map(|_| next_request(job).0).collect::<Vec<_>>()
    });
    assert!(offs.iter().all(|o| (500..1000).contains(o)), "in the slice");
    let first = offs.iter().filter(|o| **o == 500).count();
    let second = offs.iter().filter(|o| **o == 501).count();
    assert!(first > second && first > 1000, "{first} {second}");
}

#[test]
fn job_file_ranges_in_blocks() {
    let mut c = cfg(Workload::Read);
    c.io_size = 8192;
    c.range_blocks = Some((3, 10));
    // Whole I/Os of 2 blocks; the first holds block 3.
    assert_eq!(slots_of(&c, 100, 2).unwrap(), (1, 5));
    c.range_blocks = Some((20, 0));
    assert_eq!(slots_of(&c, 100, 2).unwrap(), (10, 40));
    c.range_blocks = Some((90, 20));
    let e = slots_of(&c, 100, 2).unwrap_err().to_string();
    assert!(e.contains("past the end of bdev M0 (100 blocks)"), "{e}");
    c.range_blocks = Some((0, 1));
    assert!(slots_of(&c, 100, 2).is_err(), "less than one I/O");
}

#[test]
fn below_is_in_range() {
    let s = Cell::new(12345);
    for _ in 0..10_000 {
        assert!(below(next_rand(&s), 7) < 7);
    }
}
