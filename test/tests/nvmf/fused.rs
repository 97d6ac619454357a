//! Fused Compare and Write (issue 31, point 4: the target used to run the
//! two halves as independent commands, so a Write fused to a Compare
//! that miscompared still wrote, and the reserved FUSE value 11b was
//! accepted). The pair runs as one atomic compare-and-write on the bdev
//! (malloc supports it, so Identify Controller reports FUSES bit 0): a
//! miscompare leaves the data as it was and aborts the Write with
//! "Aborted due to Failed Fused Command". Everything the specification
//! calls a broken pair is refused: FUSE 11b (Invalid Field), a second
//! half with no first, a first half followed by anything but its second
//! (Aborted due to Missing Fused Command), halves that do not match,
//! halves larger than ACWU (what fits in a slot's in-capsule buffer).
//! With `masked_fuses` hiding it, fused commands are refused (Invalid
//! Field).

use std::collections::HashMap;
use std::net::TcpStream;

use bdevkit_nvme_spec::admin::Identify;
use bdevkit_nvme_spec::cmd::{Command, Fuse};
use bdevkit_nvme_spec::fabrics::Disconnect;
use bdevkit_nvme_spec::identify::IdentifyController;
use bdevkit_nvme_spec::io::{BlockRange, Compare, Read, Write};
use bdevkit_nvme_spec::sgl::SglDescriptor;
use bdevkit_nvme_spec::tcp::Digests;
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::{Sqe, Status};
use bdevkit_nvmf::CreateTransportParams;
use bdevkit_test::nvmf::{tcp_transport, Host, NvmfEnv, Reply};

const OFF: Digests = Digests {
    header: false,
    data: false,
};

fn fill(b: u8, len: usize) -> Vec<u8> {
    vec![b; len]
}

fn write(h: &mut Host<TcpStream>, slba: u64, data: &[u8]) {
    let n = u32::try_from(data.len() / 512).unwrap();
    let c = h
        .exec_out(
            &Write::new(1, BlockRange::new(slba, n).unwrap()),
            data,
            4096,
        )
        .unwrap();
    assert!(c.status().is_success(), "write {slba}: {}", c.status());
}

fn read(h: &mut Host<TcpStream>, slba: u64, blocks: u32) -> Vec<u8> {
    let (c, d) = h
        .exec(
            &Read::new(1, BlockRange::new(slba, blocks).unwrap()),
            blocks * 512,
        )
        .unwrap();
    assert!(c.status().is_success(), "read {slba}: {}", c.status());
    d
}

/// One command of a batch: its entry, the data it carries, the bytes it
/// reads.
struct Cmd {
    sqe: Sqe,
    data: Vec<u8>,
    read_len: u32,
}

fn cmd<C: Command>(h: &mut Host<TcpStream>, c: &C, fuse: Fuse, data: Vec<u8>) -> Cmd {
    let mut sqe = c.to_sqe(h.next_cid());
    sqe.set_fuse(fuse);
    Cmd {
        sqe,
        data,
        read_len: 0,
    }
}

/// Sends the commands back to back (data in-capsule up to `icd_max`,
/// else with R2T) and returns each one's status by command id.
fn run_batch(h: &mut Host<TcpStream>, cmds: &[Cmd], icd_max: usize) -> HashMap<u16, Status> {
    for c in cmds {
        let mut s = c.sqe;
        if !c.data.is_empty() && c.data.len() <= icd_max {
            s.set_sgl1(&SglDescriptor::offset_data_block(
                0,
                u32::try_from(c.data.len()).unwrap(),
            ));
            h.send_capsule_sgl(&s, &c.data).unwrap();
        } else {
            let len = if c.data.is_empty() {
                c.read_len
            } else {
                u32::try_from(c.data.len()).unwrap()
            };
            s.set_sgl1(&SglDescriptor::transport_data_block(len));
            h.send_capsule(&s, None).unwrap();
        }
    }
    let mut out = HashMap::new();
    while out.len() < cmds.len() {
        match h.recv().unwrap() {
            Reply::Resp(c) => {
                assert!(out.insert(c.cid.get(), c.status()).is_none());
            }
            Reply::R2t {
                cid,
                ttag,
                r2to,
                r2tl,
            } => {
                let c = cmds.iter().find(|c| c.sqe.cid.get() == cid).unwrap();
                let d = &c.data[r2to as usize..(r2to + r2tl) as usize];
                h.h2c(cid, ttag, r2to, d, true).unwrap();
            }
            Reply::Data { cid, success, .. } => {
                if success {
                    assert!(out.insert(cid, Status::SUCCESS).is_none());
                }
            }
            r => panic!("{r:?}"),
        }
    }
    out
}

fn range(slba: u64, n: u32) -> BlockRange {
    BlockRange::new(slba, n).unwrap()
}

#[test]
fn a_failed_fused_compare_leaves_the_data_unchanged() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    let old = fill(0xaa, 4096);
    write(&mut io, 10, &old);
    let cmds = [
        cmd(
            &mut io,
            &Compare::new(1, range(10, 8)),
            Fuse::First,
            fill(0xbb, 4096),
        ),
        cmd(
            &mut io,
            &Write::new(1, range(10, 8)),
            Fuse::Second,
            fill(0xcc, 4096),
        ),
    ];
    let st = run_batch(&mut io, &cmds, 4096);
    let (cmp, wr) = (st[&cmds[0].sqe.cid.get()], st[&cmds[1].sqe.cid.get()]);
    assert!(cmp.is(Status::COMPARE_FAILURE), "compare: {cmp}");
    assert!(wr.is(Status::ABORTED_FAILED_FUSED), "write: {wr}");
    assert!(
        read(&mut io, 10, 8) == old,
        "the fused write wrote after a miscompare"
    );
}

#[test]
fn a_matching_fused_compare_writes_in_capsule_and_with_r2t() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    // In the capsule, and pulled by R2T.
    for (slba, len, icd_max) in [(100u64, 4096usize, 4096usize), (1000, 4096, 0)] {
        let blocks = u32::try_from(len / 512).unwrap();
        let old = fill(0x11, len);
        write(&mut io, slba, &old);
        let new = fill(0x22, len);
        let cmds = [
            cmd(
                &mut io,
                &Compare::new(1, range(slba, blocks)),
                Fuse::First,
                old.clone(),
            ),
            cmd(
                &mut io,
                &Write::new(1, range(slba, blocks)),
                Fuse::Second,
                new.clone(),
            ),
        ];
        let st = run_batch(&mut io, &cmds, icd_max);
        for c in &cmds {
            let s = st[&c.sqe.cid.get()];
            assert!(s.is_success(), "{len} bytes: {s}");
        }
        assert!(
            read(&mut io, slba, blocks) == new,
            "{len} bytes not written"
        );
        // The same pair again miscompares now: nothing changes.
        let cmds = [
            cmd(
                &mut io,
                &Compare::new(1, range(slba, blocks)),
                Fuse::First,
                old.clone(),
            ),
            cmd(
                &mut io,
                &Write::new(1, range(slba, blocks)),
                Fuse::Second,
                fill(0x33, len),
            ),
        ];
        let st = run_batch(&mut io, &cmds, icd_max);
        assert!(st[&cmds[0].sqe.cid.get()].is(Status::COMPARE_FAILURE));
        assert!(st[&cmds[1].sqe.cid.get()].is(Status::ABORTED_FAILED_FUSED));
        assert!(read(&mut io, slba, blocks) == new, "{len} bytes changed");
    }
}

#[test]
fn broken_pairs_are_refused() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    let old = fill(0x5a, 4096);
    write(&mut io, 20, &old);
    let w = |io: &mut Host<TcpStream>, fuse| {
        cmd(io, &Write::new(1, range(20, 8)), fuse, fill(0xee, 4096))
    };
    let c = |io: &mut Host<TcpStream>| {
        cmd(io, &Compare::new(1, range(20, 8)), Fuse::First, old.clone())
    };
    let id = |c: &Cmd| c.sqe.cid.get();

    // The reserved value 11b.
    let cmds = [w(&mut io, Fuse::Reserved)];
    let st = run_batch(&mut io, &cmds, 4096);
    assert!(
        st[&id(&cmds[0])].is(Status::INVALID_FIELD),
        "{}",
        st[&id(&cmds[0])]
    );
    // A second half with no first.
    let cmds = [w(&mut io, Fuse::Second)];
    let st = run_batch(&mut io, &cmds, 4096);
    assert!(
        st[&id(&cmds[0])].is(Status::ABORTED_MISSING_FUSED),
        "{}",
        st[&id(&cmds[0])]
    );
    // A first half followed by a plain command: the first is aborted, the
    // plain one runs.
    let mut plain = cmd(
        &mut io,
        &Read::new(1, range(0, 1)),
        Fuse::Normal,
        Vec::new(),
    );
    plain.read_len = 512;
    let cmds = [c(&mut io), plain];
    let st = run_batch(&mut io, &cmds, 4096);
    assert!(
        st[&id(&cmds[0])].is(Status::ABORTED_MISSING_FUSED),
        "{}",
        st[&id(&cmds[0])]
    );
    assert!(st[&id(&cmds[1])].is_success(), "{}", st[&id(&cmds[1])]);
    // A first half followed by a first half: the earlier one is aborted,
    // the later pairs with the Write after it.
    let cmds = [c(&mut io), c(&mut io), w(&mut io, Fuse::Second)];
    let st = run_batch(&mut io, &cmds, 4096);
    assert!(
        st[&id(&cmds[0])].is(Status::ABORTED_MISSING_FUSED),
        "{}",
        st[&id(&cmds[0])]
    );
    assert!(st[&id(&cmds[1])].is_success(), "{}", st[&id(&cmds[1])]);
    assert!(st[&id(&cmds[2])].is_success(), "{}", st[&id(&cmds[2])]);
    let now = read(&mut io, 20, 8);
    assert!(now == fill(0xee, 4096));
    write(&mut io, 20, &old);
    // Halves over different ranges.
    let cmds = [
        c(&mut io),
        cmd(
            &mut io,
            &Write::new(1, range(28, 8)),
            Fuse::Second,
            fill(0xee, 4096),
        ),
    ];
    let st = run_batch(&mut io, &cmds, 4096);
    assert!(
        st[&id(&cmds[0])].is(Status::INVALID_FIELD),
        "{}",
        st[&id(&cmds[0])]
    );
    assert!(
        st[&id(&cmds[1])].is(Status::ABORTED_FAILED_FUSED),
        "{}",
        st[&id(&cmds[1])]
    );
    // A second half that is not a Write.
    let cmds = [
        c(&mut io),
        cmd(
            &mut io,
            &Compare::new(1, range(20, 8)),
            Fuse::Second,
            old.clone(),
        ),
    ];
    let st = run_batch(&mut io, &cmds, 4096);
    assert!(
        st[&id(&cmds[0])].is(Status::ABORTED_MISSING_FUSED),
        "{}",
        st[&id(&cmds[0])]
    );
    assert!(
        st[&id(&cmds[1])].is(Status::INVALID_OPCODE),
        "{}",
        st[&id(&cmds[1])]
    );
    // A first half that is not a Compare.
    let cmds = [w(&mut io, Fuse::First), w(&mut io, Fuse::Second)];
    let st = run_batch(&mut io, &cmds, 4096);
    assert!(
        st[&id(&cmds[0])].is(Status::INVALID_OPCODE),
        "{}",
        st[&id(&cmds[0])]
    );
    assert!(
        st[&id(&cmds[1])].is(Status::ABORTED_MISSING_FUSED),
        "{}",
        st[&id(&cmds[1])]
    );
    // A first half that fails its own checks fails its second.
    let cmds = [
        cmd(
            &mut io,
            &Compare::new(1, range(16_380, 8)),
            Fuse::First,
            old.clone(),
        ),
        cmd(
            &mut io,
            &Write::new(1, range(16_380, 8)),
            Fuse::Second,
            fill(0xee, 4096),
        ),
    ];
    let st = run_batch(&mut io, &cmds, 4096);
    assert!(
        st[&id(&cmds[0])].is(Status::LBA_OUT_OF_RANGE),
        "{}",
        st[&id(&cmds[0])]
    );
    assert!(
        st[&id(&cmds[1])].is(Status::ABORTED_FAILED_FUSED),
        "{}",
        st[&id(&cmds[1])]
    );
    // None of it wrote.
    assert!(read(&mut io, 20, 8) == old, "a refused fused command wrote");
    assert!(
        read(&mut io, 28, 8) != fill(0xee, 4096),
        "a refused fused command wrote"
    );
}

/// FUSES and ACWU of Identify Controller.
fn fuses(h: &mut Host<TcpStream>) -> (u16, u16) {
    let (c, d) = h.exec(&Identify::controller(), 4096).unwrap();
    assert!(c.status().is_success());
    let id = IdentifyController::read_from_bytes(&d).unwrap();
    (id.fuses.get(), id.acwu.get())
}

#[test]
fn pairs_larger_than_acwu_are_refused_unless_the_capsules_hold_them() {
    let env = NvmfEnv::start();
    let (_admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    let old = fill(0x61, 65_536);
    write(&mut io, 2000, &old);
    let cmds = [
        cmd(
            &mut io,
            &Compare::new(1, range(2000, 128)),
            Fuse::First,
            old.clone(),
        ),
        cmd(
            &mut io,
            &Write::new(1, range(2000, 128)),
            Fuse::Second,
            fill(0x62, 65_536),
        ),
    ];
    let st = run_batch(&mut io, &cmds, 0);
    assert!(st[&cmds[0].sqe.cid.get()].is(Status::INVALID_FIELD));
    assert!(st[&cmds[1].sqe.cid.get()].is(Status::ABORTED_FAILED_FUSED));
    assert!(read(&mut io, 2000, 128) == old);
    // With 64 KiB capsules the same pair runs (its data still by R2T).
    let tp = CreateTransportParams {
        in_capsule_data_size: Some(65_536),
        ..tcp_transport()
    };
    let env = NvmfEnv::start_with("0x1", tp);
    let (mut admin, cntlid) = env.admin(OFF);
    assert_eq!(fuses(&mut admin), (1, 127));
    let mut io = env.io(cntlid, OFF);
    write(&mut io, 2000, &old);
    let new = fill(0x63, 65_536);
    let cmds = [
        cmd(
            &mut io,
            &Compare::new(1, range(2000, 128)),
            Fuse::First,
            old.clone(),
        ),
        cmd(
            &mut io,
            &Write::new(1, range(2000, 128)),
            Fuse::Second,
            new.clone(),
        ),
    ];
    let st = run_batch(&mut io, &cmds, 0);
    for c in &cmds {
        assert!(
            st[&c.sqe.cid.get()].is_success(),
            "{}",
            st[&c.sqe.cid.get()]
        );
    }
    assert!(read(&mut io, 2000, 128) == new);
}

#[test]
fn fuses_reports_compare_and_write_unless_masked() {
    let env = NvmfEnv::start();
    let (mut admin, _) = env.admin(OFF);
    // Compare and Write of up to 8 blocks of 512 (4 KiB capsules).
    assert_eq!(
        fuses(&mut admin),
        (1, 7),
        "malloc supports compare-and-write"
    );
    let tp = CreateTransportParams {
        masked_fuses: Some(vec!["fcws".into()]),
        ..tcp_transport()
    };
    let env = NvmfEnv::start_with("0x1", tp);
    let (mut admin, cntlid) = env.admin(OFF);
    assert_eq!(fuses(&mut admin).0, 0);
    let mut io = env.io(cntlid, OFF);
    let old = fill(0x44, 4096);
    write(&mut io, 30, &old);
    let cmds = [
        cmd(
            &mut io,
            &Compare::new(1, range(30, 8)),
            Fuse::First,
            old.clone(),
        ),
        cmd(
            &mut io,
            &Write::new(1, range(30, 8)),
            Fuse::Second,
            fill(0x45, 4096),
        ),
    ];
    let st = run_batch(&mut io, &cmds, 4096);
    for c in &cmds {
        let s = st[&c.sqe.cid.get()];
        assert!(s.is(Status::INVALID_FIELD), "{s}");
    }
    assert!(read(&mut io, 30, 8) == old);
}

/// A small deterministic generator (no time, no OS entropy).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[test]
fn any_mix_of_fused_and_plain_commands_gets_one_answer_each() {
    // Two shared buffers: the mix also waits for them.
    let tp = CreateTransportParams {
        num_shared_buffers: Some(2),
        buf_cache_size: Some(1),
        ..tcp_transport()
    };
    let env = NvmfEnv::start_with("0x1", tp);
    let (mut admin, cntlid) = env.admin(OFF);
    let mut io = env.io(cntlid, OFF);
    let mut g = Lcg(0x5eed);
    let fuses = [Fuse::Normal, Fuse::First, Fuse::Second, Fuse::Reserved];
    let mut seen: HashMap<String, u32> = HashMap::new();
    for _ in 0..300 {
        let n = 1 + g.next(6);
        let mut cmds = Vec::new();
        for _ in 0..n {
            let fuse = fuses[usize::try_from(g.next(4)).unwrap()];
            // Mostly in range, sometimes past the end; 1 block to 64 KiB.
            let slba = if g.next(10) == 0 {
                16_380
            } else {
                g.next(64) * 8
            };
            let blocks = [1u32, 8, 16, 128][usize::try_from(g.next(4)).unwrap()];
            let len = usize::try_from(blocks).unwrap() * 512;
            let r = range(slba, blocks);
            let c = match g.next(3) {
                0 => cmd(&mut io, &Compare::new(1, r), fuse, fill(0, len)),
                1 => cmd(&mut io, &Write::new(1, r), fuse, fill(0x77, len)),
                _ => {
                    let mut c = cmd(&mut io, &Read::new(1, r), fuse, Vec::new());
                    c.read_len = u32::try_from(len).unwrap();
                    c
                }
            };
            cmds.push(c);
        }
        // A plain command closes every batch: a trailing first half is
        // answered (missing its second) before the host waits.
        let mut last = cmd(
            &mut io,
            &Read::new(1, range(0, 1)),
            Fuse::Normal,
            Vec::new(),
        );
        last.read_len = 512;
        cmds.push(last);
        let icd_max = if g.next(2) == 0 { 4096 } else { 0 };
        let st = run_batch(&mut io, &cmds, icd_max);
        assert_eq!(st.len(), cmds.len());
        for s in st.values() {
            *seen.entry(s.to_string()).or_insert(0u32) += 1;
        }
    }
    eprintln!("statuses: {seen:#?}");
    // Every kind of answer came up; the target still serves, and the
    // queue's close gives every buffer back.
    assert!(seen.len() >= 6, "{seen:?}");
    let (c, _) = admin.exec(&Identify::controller(), 4096).unwrap();
    assert!(c.status().is_success());
    let cid = io.next_cid();
    let mut d = Disconnect::default().to_sqe(cid);
    d.set_sgl1(&SglDescriptor::transport_data_block(0));
    io.send_capsule(&d, None).unwrap();
    assert!(io.recv_resp().unwrap().status().is_success());
    assert_eq!(io.recv().unwrap(), Reply::Closed);
    let s = env.target.buffer_stats().unwrap();
    assert_eq!((s.shared_in_use, s.waiting), (0, 0), "{s:?}");
}
