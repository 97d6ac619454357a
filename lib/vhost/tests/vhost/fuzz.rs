//! A fuzz run of guest requests through the controller's socket: random
//! virtio-blk chains (every request type and unknown ones, sectors past
//! the end, buffers of every size, device-readable where the device
//! must write, addresses outside guest memory or overflowing, missing
//! or read-only status bytes, `next` indexes that loop or run off the
//! table). Each case is a new frontend on the same controller. Whatever
//! the chains, every request is handed back or the ring is marked
//! broken, the target never writes a device-readable buffer or memory
//! no descriptor names, and afterwards the controller serves a good
//! request as before.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::common::*;

/// Device-readable buffers (headers, write data).
const R: u64 = 0x40_0000;
/// Device-writable buffers (read data, status bytes).
const W: u64 = 0x60_0000;
/// Memory no descriptor names.
const CANARY: u64 = 0x80_0000;
const SPAN: usize = 0x10_0000;

#[derive(Debug, Clone)]
enum Buf {
    /// In the readable area: (offset, len).
    Readable(u32, u32),
    /// In the writable area.
    Writable(u32, u32),
    /// Outside guest memory, across its end, or overflowing.
    Outside(u8, u32, bool),
}

#[derive(Debug, Clone)]
struct Req {
    kind: u32,
    sector: u64,
    hdr_len: u32,
    data: Vec<Buf>,
    /// None: no status descriptor.
    status: Option<Buf>,
    /// A raw `next` for the last data descriptor (a bad link).
    bad_next: Option<u16>,
}

fn len() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(16),
        Just(512),
        Just(4096),
        1u32..8192
    ]
}

fn buf() -> impl Strategy<Value = Buf> {
    prop_oneof![
        4 => (0u32..0x8_0000, len()).prop_map(|(o, l)| Buf::Readable(o, l)),
        4 => (0u32..0x8_0000, len()).prop_map(|(o, l)| Buf::Writable(o, l)),
        1 => (0u8..3, len(), any::<bool>()).prop_map(|(k, l, w)| Buf::Outside(k, l, w)),
    ]
}

fn req() -> impl Strategy<Value = Req> {
    (
        prop_oneof![
            Just(T_IN),
            Just(T_OUT),
            Just(T_FLUSH),
            Just(T_GET_ID),
            Just(T_DISCARD),
            Just(T_WRITE_ZEROES),
            any::<u32>()
        ],
        prop_oneof![0u64..2100, Just(u64::MAX), Just(u64::MAX / 512)],
        prop_oneof![4 => Just(16u32), 1 => 0u32..32],
        proptest::collection::vec(buf(), 0..5),
        prop_oneof![
            6 => (0u32..0x8_0000).prop_map(|o| Some(Buf::Writable(o, 1))),
            1 => buf().prop_map(Some),
            1 => Just(None),
        ],
        prop_oneof![9 => Just(None), 1 => any::<u16>().prop_map(Some)],
    )
        .prop_map(|(kind, sector, hdr_len, data, status, bad_next)| Req {
            kind,
            sector,
            hdr_len,
            data,
            status,
            bad_next,
        })
}

fn addr(b: &Buf) -> (u64, u32, bool) {
    match *b {
        Buf::Readable(o, l) => (R + u64::from(o), l, false),
        Buf::Writable(o, l) => (W + u64::from(o), l, true),
        Buf::Outside(k, l, w) => {
            let a = match k {
                0 => RAM + 0x1000,
                1 => RAM - 100,
                _ => u64::MAX - 8,
            };
            (a, l, w)
        }
    }
}

/// Puts `reqs` on ring 0 (request `i` in descriptors `16 i ..`), kicks,
/// and waits until all are used or the ring is marked broken; true when
/// broken.
fn run(vm: &mut Vm, reqs: &[Req]) -> bool {
    for (i, r) in reqs.iter().enumerate() {
        let hdr = R + 0x9_0000 + i as u64 * 64;
        vm.write(hdr, &r.kind.to_le_bytes());
        vm.write(hdr + 8, &r.sector.to_le_bytes());
        let mut bufs = vec![(hdr, r.hdr_len, false)];
        bufs.extend(r.data.iter().map(addr));
        bufs.extend(r.status.iter().map(addr));
        let first = u16::try_from(i * 16).unwrap();
        for (k, &(a, l, w)) in bufs.iter().enumerate() {
            let idx = first + u16::try_from(k).unwrap();
            let last = k + 1 == bufs.len();
            let mut next = idx + 1;
            if k + 2 == bufs.len() {
                if let Some(n) = r.bad_next {
                    next = n;
                }
            }
            let flags = if w { F_WRITE } else { 0 } | if last { 0 } else { F_NEXT };
            vm.put_desc(0, idx, a, l, flags, next);
        }
        vm.avail(0, first);
    }
    let want = u16::try_from(reqs.len()).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if vm.used_idx(0) == want {
            return false;
        }
        if vm.rings[0].err.read().is_ok() {
            return true;
        }
        assert!(
            Instant::now() < deadline,
            "requests neither used nor the ring broken"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn random_requests_never_reach_past_their_buffers() {
    let rig = Rig::new("0x1");
    rig.malloc("Malloc0", 2048, 512);
    rig.ctrlr("vhost.fz", "Malloc0", false);
    let sock = rig.sock("vhost.fz");
    let broken = std::cell::Cell::new(0u32);
    let cases = std::cell::Cell::new(0u32);
    let cfg = proptest::test_runner::Config {
        cases: 64,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(cfg);
    runner
        .run(&proptest::collection::vec(req(), 1..8), |reqs| {
            let mut vm = Vm::connect(&sock, 1, None);
            let fill = |v: &Vm, at: u64, byte: u8| v.write(at, &vec![byte; SPAN]);
            fill(&vm, R, 0xA5);
            fill(&vm, CANARY, 0x5A);
            // Headers go in the readable area after its fill.
            cases.set(cases.get() + 1);
            if run(&mut vm, &reqs) {
                broken.set(broken.get() + 1);
            }
            let mut r = vm.read(R, SPAN);
            // The headers the test wrote are the only change there.
            for i in 0..reqs.len() {
                let at = 0x9_0000 + i * 64;
                r[at..at + 16].fill(0xA5);
            }
            prop_assert!(
                r.iter().all(|&b| b == 0xA5),
                "a device-readable byte changed"
            );
            prop_assert!(
                vm.read(CANARY, SPAN).iter().all(|&b| b == 0x5A),
                "memory no descriptor names changed"
            );
            Ok(())
        })
        .unwrap();
    // The controller is as it was: a good write and read back.
    let mut vm = Vm::connect(&sock, 1, None);
    vm.write(DATA, &pattern(4096, 9));
    vm.blk(0, 0, T_OUT, 8, &[(DATA, 4096)]);
    vm.wait_used(0, 1);
    vm.blk(0, 1, T_IN, 8, &[(DATA + 0x8000, 4096)]);
    vm.wait_used(0, 1);
    assert_eq!((vm.status(0), vm.status(1)), (S_OK, S_OK));
    assert_eq!(vm.read(DATA + 0x8000, 4096), pattern(4096, 9));
    let (cases, broken) = (cases.get(), broken.get());
    eprintln!("fuzz: {cases} cases, {broken} rings broken");
    assert!(broken > 0 && broken < cases, "the run covers both outcomes");
    drop(vm);
    rig.finish();
}
