//! The data path against rings driven from the test (no VM): reads and
//! writes land in the bdev and come back, every request type, two rings
//! on two threads, a frontend that goes and comes back, a bdev removed
//! under I/O; and every kind of bad guest input, each failing its request
//! with a virtio status or marking its ring broken, never reaching past
//! the guest's memory and never disturbing another controller.

use crate::common::*;

fn rig_with(name: &str, readonly: bool) -> Rig {
    let rig = Rig::new("0x1");
    rig.malloc("Malloc0", 2048, 512);
    rig.ctrlr(name, "Malloc0", readonly);
    rig
}

#[test]
fn writes_land_in_the_bdev_and_read_back() {
    let rig = rig_with("vhost.0", false);
    let mut vm = Vm::connect(&rig.sock("vhost.0"), 1, None);
    // The configuration space: 2048 sectors of 512 bytes.
    let cfg = vm.config();
    assert_eq!(u64::from_le_bytes(cfg[0..8].try_into().unwrap()), 2048);
    assert_eq!(u32::from_le_bytes(cfg[20..24].try_into().unwrap()), 512);
    // Write 8 KiB from two buffers at sector 16, read it back into three.
    let data = pattern(8192, 1);
    vm.write(DATA, &data[..4096]);
    vm.write(DATA + 0x10000, &data[4096..]);
    let h = vm.blk(0, 0, T_OUT, 16, &[(DATA, 4096), (DATA + 0x10000, 4096)]);
    assert_eq!(vm.wait_used(0, 1), vec![(u32::from(h), 1)]);
    assert_eq!(vm.status(0), S_OK);
    let h = vm.blk(
        0,
        1,
        T_IN,
        16,
        &[
            (DATA + 0x20000, 1024),
            (DATA + 0x30000, 3072),
            (DATA + 0x40000, 4096),
        ],
    );
    assert_eq!(vm.wait_used(0, 1), vec![(u32::from(h), 8193)]);
    assert_eq!(vm.status(1), S_OK);
    let mut back = vm.read(DATA + 0x20000, 1024);
    back.extend(vm.read(DATA + 0x30000, 3072));
    back.extend(vm.read(DATA + 0x40000, 4096));
    assert_eq!(back, data);
    // The rest of the request types.
    vm.blk(0, 2, T_FLUSH, 0, &[]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(2), S_OK);
    let h = vm.blk(0, 3, T_GET_ID, 0, &[(DATA + 0x50000, 20)]);
    assert_eq!(vm.wait_used(0, 1), vec![(u32::from(h), 21)]);
    assert_eq!(
        vm.read(DATA + 0x50000, 20),
        b"Malloc0             ".to_vec()
    );
    // Write zeroes over sectors 16..18, discard 18..20.
    let mut seg = Vec::new();
    seg.extend(16u64.to_le_bytes());
    seg.extend(2u32.to_le_bytes());
    seg.extend(0u32.to_le_bytes());
    vm.write(DATA + 0x60000, &seg);
    vm.blk(0, 4, T_WRITE_ZEROES, 0, &[(DATA + 0x60000, 16)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(4), S_OK);
    seg[0] = 18;
    vm.write(DATA + 0x60000, &seg);
    vm.blk(0, 5, T_DISCARD, 0, &[(DATA + 0x60000, 16)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(5), S_OK);
    vm.blk(0, 6, T_IN, 16, &[(DATA + 0x70000, 4096)]);
    vm.wait_used(0, 1);
    let got = vm.read(DATA + 0x70000, 4096);
    assert!(got[..2048].iter().all(|b| *b == 0), "zeroed and discarded");
    assert_eq!(got[2048..], data[2048..4096]);
    // The kick eventfd was all it took: the call eventfd was signalled.
    assert!(vm.rings[0].call.read().unwrap() >= 1);
    drop(vm);
    rig.finish();
}

#[test]
fn two_rings_on_two_threads() {
    let rig = Rig::new("0x3");
    rig.malloc("Malloc0", 4096, 512);
    rig.ctrlr("vhost.mq", "Malloc0", false);
    let mut vm = Vm::connect(&rig.sock("vhost.mq"), 2, None);
    // Each ring writes its own half, then reads the other's.
    let at = |q: u64| (DATA + q * 0x10000, q * 2048);
    for (q, qi) in [(0u64, 0usize), (1, 1)] {
        let (buf, sector) = at(q);
        vm.write(buf, &pattern(4096, u8::try_from(q).unwrap() + 7));
        vm.blk(qi, q, T_OUT, sector, &[(buf, 4096)]);
    }
    for (q, qi) in [(0u64, 0usize), (1, 1)] {
        vm.wait_used(qi, 1);
        assert_eq!(vm.status(q), S_OK);
    }
    for (q, qi) in [(0u64, 0usize), (1, 1)] {
        let (buf, _) = at(q + 8);
        vm.blk(qi, q + 2, T_IN, at(1 - q).1, &[(buf, 4096)]);
    }
    for (q, qi) in [(0u64, 0usize), (1, 1)] {
        vm.wait_used(qi, 1);
        let want = pattern(4096, u8::try_from(1 - q).unwrap() + 7);
        assert_eq!(vm.read(at(q + 8).0, 4096), want);
    }
    let c = &rig.get(Some("vhost.mq"))[0];
    assert_eq!(c["cpumask"], "0x3");
    assert_eq!(c["sessions"][0]["max_queues"], 2);
    assert_eq!(c["sessions"][0]["started"], true);
    drop(vm);
    rig.finish();
}

#[test]
fn frontend_goes_and_comes_back() {
    let rig = rig_with("vhost.re", false);
    let mut vm = Vm::connect(&rig.sock("vhost.re"), 1, None);
    vm.write(DATA, &pattern(4096, 3));
    vm.blk(0, 0, T_OUT, 100, &[(DATA, 4096)]);
    vm.wait_used(0, 1);
    // QEMU killed: the socket closes without a word.
    drop(vm);
    // A new QEMU, new memory, the same controller.
    let mut vm = Vm::connect(&rig.sock("vhost.re"), 1, None);
    vm.blk(0, 0, T_IN, 100, &[(DATA + 0x10000, 4096)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(0), S_OK);
    assert_eq!(vm.read(DATA + 0x10000, 4096), pattern(4096, 3));
    // A ring stopped and restarted where it stopped (a guest reboot).
    let base = vm.stop(0);
    assert_eq!(base, 1);
    vm.add_ring(0, 1);
    vm.blk(0, 1, T_IN, 100, &[(DATA + 0x20000, 512)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(1), S_OK);
    assert_eq!(rig.get(None)[0]["sessions"][0]["id"], 1);
    drop(vm);
    rig.finish();
}

#[test]
fn bdev_removed_under_io_fails_requests_and_the_target_lives() {
    let rig = rig_with("vhost.hr", false);
    let mut vm = Vm::connect(&rig.sock("vhost.hr"), 1, None);
    for s in 0..8u64 {
        vm.blk(0, s, T_IN, s * 8, &[(DATA + s * 0x1000, 4096)]);
    }
    rig.delete_bdev("Malloc0");
    // Whatever was in flight completes; nothing hangs.
    vm.wait_used(0, 8);
    vm.blk(0, 9, T_IN, 0, &[(DATA, 512)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(9), S_IOERR);
    let c = &rig.get(Some("vhost.hr"))[0];
    assert_eq!(
        c["backend_specific"]["block"]["bdev"],
        serde_json::Value::Null
    );
    // The guest's next reset sees no disk.
    let cfg = vm.config();
    assert_eq!(u64::from_le_bytes(cfg[0..8].try_into().unwrap()), 0);
    assert!(
        rig.target.config_json().is_empty(),
        "a controller without bdev is not saved"
    );
    drop(vm);
    rig.finish();
}

/// Every bad request fails alone with its status; the ring goes on.
#[test]
fn bad_requests_fail_with_a_status() {
    let rig = rig_with("vhost.ro", true);
    let mut vm = Vm::connect(&rig.sock("vhost.ro"), 1, None);
    // A write to a read-only controller.
    vm.blk(0, 0, T_OUT, 0, &[(DATA, 512)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(0), S_IOERR);
    // A data buffer outside guest memory (and one that runs past its end).
    vm.blk(0, 1, T_IN, 0, &[(RAM + 0x1000, 512)]);
    vm.blk(0, 2, T_IN, 0, &[(RAM - 256, 512)]);
    vm.wait_used(0, 2);
    assert_eq!((vm.status(1), vm.status(2)), (S_IOERR, S_IOERR));
    // A short header (8 bytes, then the status).
    let (hdr, st) = Vm::hdr_status(3);
    vm.write(st, &[0xff]);
    vm.chain(0, &[(hdr, 8, false), (st, 1, true)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(3), S_UNSUPP);
    // Past the end of the bdev, not whole sectors, an unknown type.
    vm.blk(0, 4, T_IN, 2047, &[(DATA, 1024)]);
    vm.blk(0, 5, T_IN, 0, &[(DATA, 100)]);
    vm.blk(0, 6, 77, 0, &[(DATA, 512)]);
    vm.wait_used(0, 3);
    assert_eq!(
        (vm.status(4), vm.status(5), vm.status(6)),
        (S_IOERR, S_UNSUPP, S_UNSUPP)
    );
    // A chain longer than the device takes (200 buffers, indirect).
    let table = DATA + 0x100000;
    let (hdr, st) = Vm::hdr_status(7);
    vm.write(hdr, &0u32.to_le_bytes());
    vm.write(st, &[0xff]);
    let at = |i: u64| table + i * 16;
    for i in 0..200u64 {
        let (addr, len, flags) = match i {
            0 => (hdr, 16u32, F_NEXT),
            199 => (st, 1, F_WRITE),
            _ => (DATA + i * 512, 512, F_NEXT | F_WRITE),
        };
        vm.write(at(i), &addr.to_le_bytes());
        vm.write(at(i) + 8, &len.to_le_bytes());
        vm.write(at(i) + 12, &flags.to_le_bytes());
        vm.write(at(i) + 14, &u16::try_from(i + 1).unwrap().to_le_bytes());
    }
    vm.put_desc(0, 100, table, 200 * 16, F_INDIRECT, 0);
    vm.avail(0, 100);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(7), S_IOERR);
    // No writable status byte: handed back untouched, length 0.
    vm.put_desc(0, 101, hdr, 16, 0, 0);
    vm.avail(0, 101);
    assert_eq!(vm.wait_used(0, 1), vec![(101, 0)]);
    // And the ring still serves.
    vm.blk(0, 8, T_IN, 0, &[(DATA, 512)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(8), S_OK);
    drop(vm);
    rig.finish();
}

/// Chains that cannot be walked mark their ring broken; the other ring
/// of the VM and another controller carry on.
#[test]
fn unwalkable_rings_break_alone() {
    let rig = Rig::new("0x1");
    rig.malloc("Malloc0", 2048, 512);
    rig.malloc("Malloc1", 2048, 512);
    rig.ctrlr("vhost.a", "Malloc0", false);
    rig.ctrlr("vhost.b", "Malloc1", false);
    let mut a = Vm::connect(&rig.sock("vhost.a"), 4, None);
    let mut b = Vm::connect(&rig.sock("vhost.b"), 1, None);
    // Ring 0: a loop. Ring 1: a head past the queue. Ring 2: the
    // available index runs past the queue. Ring 3 stays good.
    let (hdr, _) = Vm::hdr_status(0);
    a.put_desc(0, 0, hdr, 16, F_NEXT, 1);
    a.put_desc(0, 1, hdr, 16, F_NEXT, 0);
    a.avail(0, 0);
    a.avail(1, QSIZE + 5);
    a.set_avail_idx(2, QSIZE + 1);
    for q in 0..3 {
        a.wait_broken(q);
    }
    a.blk(3, 1, T_IN, 0, &[(DATA, 512)]);
    a.wait_used(3, 1);
    assert_eq!(a.status(1), S_OK);
    // Controller b: an indirect table outside guest memory.
    b.put_desc(0, 2, RAM - 8, 32, F_INDIRECT, 0);
    b.avail(0, 2);
    b.wait_broken(0);
    // Controller a's good ring is untouched by b's trouble.
    a.blk(3, 2, T_IN, 0, &[(DATA, 512)]);
    a.wait_used(3, 1);
    assert_eq!(a.status(2), S_OK);
    // A broken ring takes nothing more.
    let before = a.used_idx(0);
    a.blk(0, 3, T_IN, 0, &[(DATA, 512)]);
    a.blk(3, 4, T_IN, 0, &[(DATA, 512)]);
    a.wait_used(3, 1);
    assert_eq!(a.used_idx(0), before);
    drop((a, b));
    rig.finish();
}

/// Protocol misuse: a ring index past what the controller serves, a ring
/// size that is not a power of two, ring addresses outside the memory.
#[test]
fn bad_ring_setup_is_refused() {
    use vhost::vhost_user::VhostUserFrontend;
    use vhost::VhostBackend;
    let rig = rig_with("vhost.p", false);
    let mut vm = Vm::connect_max(&rig.sock("vhost.p"), 1, 512);
    assert!(
        vm.front.set_vring_num(0, 100).is_err(),
        "not a power of two"
    );
    assert!(vm.front.set_vring_num(0, 4096).is_err(), "too large");
    // Index 300 is past the 256 rings a controller serves.
    assert!(
        vm.front.set_vring_num(300, 128).is_err(),
        "ring index out of range"
    );
    assert!(
        vm.front.set_vring_enable(300, true).is_err(),
        "ring index out of range"
    );
    // The ring still works.
    vm.blk(0, 0, T_IN, 0, &[(DATA, 512)]);
    vm.wait_used(0, 1);
    assert_eq!(vm.status(0), S_OK);
    drop(vm);
    rig.finish();
}
