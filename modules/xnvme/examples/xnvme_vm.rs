//! The `io_uring_cmd` checks of the VM lane (`test/vm/xnvme.sh` runs this
//! in the guest, against QEMU's emulated controller): for `conserve_cpu`
//! false and true, a bdev over the namespace's generic char device through
//! the `bdev_xnvme_create` handler, then
//!
//! * the conformance suite (read after write, scattered writes, range
//!   checks, write zeroes reading back zeroes, flush, unmap, delete with an
//!   open descriptor);
//! * unmap reading back zeroes where the namespace says deallocated blocks
//!   read as zeroes (DLFEAT), compare (match and miscompare);
//! * `nvme_admin` Identify Controller through the bdev: the serial number
//!   the kernel reports (`SERIAL`, from sysfs);
//! * unsupported and failing commands answered with their NVMe status
//!   (`nvme_io` and `nvme_admin` with an invalid opcode, a passthrough read
//!   past the namespace's end), completion dword 0 of Get Features;
//! * the `io_uring` and `libaio` mechanisms over the block device: the
//!   conformance suite (write zeroes, emulated by the bdev layer, reading
//!   back zeroes; flush) and no unmap (SPDK's bdev_xnvme has it only for
//!   `io_uring_cmd`);
//! * `bdev_xnvme_create` failures (missing device, a block device given to
//!   `io_uring_cmd`, an unknown mechanism, a duplicate name) answer SPDK's
//!   error and register nothing; `bdev_xnvme_delete` of an unknown bdev
//!   answers -19;
//! * zero heap allocations in 100 000 steady-state reads and writes at QD 32
//!   on an `io_uring_cmd` bdev (`bdevkit_test::steady`, with its counting
//!   allocator installed here).
//!
//! Usage: `xnvme_vm NG_DEVICE BLOCK_DEVICE SERIAL` (e.g. `/dev/ng0n1
//! /dev/nvme0n1 deadbeef`); with `XNVME_EXPECT_IOPOLL=1` (or `0`) in the
//! environment it also checks that the `conserve_cpu` false bdev does (or
//! does not) use an `IOPOLL` ring (the namespace has poll queues: nvme
//! `poll_queues` > 0), and a `conserve_cpu` true bdev never does. Prints
//! one `CHECK OK` line per check; a failed check panics with its name
//! (exit status non-zero).

use bdevkit::bdev::{BdevChannel, BdevManager, IoStatus, NvmeCmd};
use bdevkit::dma::DmaBuf;
use bdevkit_jsonrpc::{MethodRegistry, RpcError};
use bdevkit_nvme_spec::admin::{GetFeatures, Identify};
use bdevkit_nvme_spec::features::NumberOfQueues;
use bdevkit_nvme_spec::identify::IdentifyController;
use bdevkit_nvme_spec::io::{BlockRange, Read};
use bdevkit_nvme_spec::zerocopy::FromBytes;
use bdevkit_nvme_spec::{Command, Sqe};
use bdevkit_test::steady::{self, CountingAlloc, MEASURED};
use bdevkit_test::{conformance, rpc, TestEnv};
use bdevkit_xnvme::XnvmeCreateParams;
use serde_json::{json, Value};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn ok(what: &str) {
    println!("CHECK OK: {what}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, ng, blk, serial] = args.as_slice() else {
        eprintln!("usage: xnvme_vm NG_DEVICE BLOCK_DEVICE SERIAL");
        std::process::exit(2);
    };
    if let Err(e) = bdevkit_xnvme::cmd_available() {
        panic!("io_uring_cmd rings unavailable: {e}");
    }
    let env = TestEnv::with_modules(
        "0x1",
        &[
            bdevkit_uring::register,
            bdevkit_aio::register,
            bdevkit_xnvme::register,
        ],
    );
    for conserve_cpu in [false, true] {
        let (ng, serial) = (ng.clone(), serial.trim().to_string());
        env.run(move |mgr| async move { bdev_checks(&mgr, &ng, &serial, conserve_cpu).await });
    }
    for mechanism in ["io_uring", "libaio"] {
        let blk = blk.clone();
        env.run(move |mgr| async move { block_checks(&mgr, &blk, mechanism).await });
    }
    let (ng, blk) = (ng.clone(), blk.clone());
    env.run(move |mgr| async move { create_errors(&mgr, &ng, &blk).await });
    let ng = args[1].clone();
    let r = steady::measure(&env, "S0", move |mgr| {
        let p = XnvmeCreateParams::new("S0", ng, "io_uring_cmd");
        bdevkit_xnvme::create(mgr, p).expect("create S0");
    });
    assert_eq!(r.failures, 0, "steady-state I/O failures");
    assert_eq!(
        r.allocs, 0,
        "{} heap allocations in {MEASURED} steady-state I/Os",
        r.allocs
    );
    ok(&format!(
        "no heap allocation in {MEASURED} steady-state io_uring_cmd I/Os at QD {}",
        steady::QD
    ));
    println!("xnvme_vm: all checks passed");
}

/// `XNVME_EXPECT_IOPOLL`: `Some(true)` when the namespace has poll queues
/// (a `conserve_cpu` false bdev must use the `IOPOLL` ring), `Some(false)`
/// when it has none, `None` when unset (no check).
fn expect_iopoll() -> Option<bool> {
    match std::env::var("XNVME_EXPECT_IOPOLL").ok()?.as_str() {
        "1" => Some(true),
        "0" => Some(false),
        other => panic!("XNVME_EXPECT_IOPOLL={other:?}: 1 or 0"),
    }
}

fn registry(mgr: &BdevManager) -> MethodRegistry {
    rpc::registry(mgr, &[bdevkit_xnvme::rpc::register_rpcs])
}

async fn bdev_checks(mgr: &BdevManager, ng: &str, serial: &str, conserve_cpu: bool) {
    let reg = registry(mgr);
    let tag = format!("conserve_cpu={conserve_cpu}");
    let params = json!({"name": "X0", "filename": ng, "io_mechanism": "io_uring_cmd", "conserve_cpu": conserve_cpu});
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_create", params.clone()).await,
        Ok(json!("X0"))
    );
    let b = mgr.get("X0").expect("X0 registered");
    assert_eq!(b.dump_info_json(), json!({}), "driver_specific is SPDK's");
    let info = bdevkit_xnvme::info(&b).expect("an xnvme bdev");
    println!(
        "X0 ({tag}): {} blocks of {} bytes, info {info}",
        b.num_blocks(),
        b.block_size()
    );
    assert_eq!(b.product_name(), "xNVMe bdev");
    assert_eq!(
        info["serial_number"],
        json!(serial),
        "serial from Identify at create"
    );
    assert_eq!(
        b.write_config_json(),
        Some(json!({"method": "bdev_xnvme_create", "params": params}))
    );
    ok(&format!(
        "create through bdev_xnvme_create, info and saved config ({tag})"
    ));
    if let Some(expect) = expect_iopoll() {
        // Only a polling bdev uses the IOPOLL ring, where there is one.
        let want = expect && !conserve_cpu;
        assert_eq!(info["iopoll"], json!(want), "iopoll ({tag})");
        ok(&format!("uses the IOPOLL ring: {want} ({tag})"));
    }

    conformance::run(mgr, "X0", None).await;
    ok(&format!("conformance suite ({tag})"));

    {
        let desc = mgr.open("X0", true, |_| {}).expect("open X0");
        let ch = desc.get_io_channel().expect("channel");
        let bs = b.block_size() as usize;
        io_checks(&ch, bs, &info, &tag).await;
        passthrough_checks(&ch, b.num_blocks(), bs, serial, &tag).await;
    }

    // The saved entry recreates the bdev through the same handler.
    let entry = b.write_config_json().expect("config entry");
    drop(b);
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_delete", json!({"name": "X0"})).await,
        Ok(json!(true))
    );
    assert!(mgr.get("X0").is_none(), "X0 gone after delete");
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_create", entry["params"].clone()).await,
        Ok(json!("X0"))
    );
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_delete", json!({"name": "X0"})).await,
        Ok(json!(true))
    );
    ok(&format!(
        "delete, and the saved entry recreates the bdev ({tag})"
    ));
}

async fn block_checks(mgr: &BdevManager, blk: &str, mechanism: &str) {
    let reg = registry(mgr);
    let params =
        json!({"name": "B0", "filename": blk, "io_mechanism": mechanism, "conserve_cpu": true});
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_create", params).await,
        Ok(json!("B0"))
    );
    let b = mgr.get("B0").expect("B0 registered");
    assert!(
        !b.supports(bdevkit::bdev::IoType::Unmap),
        "no unmap on {mechanism}"
    );
    assert!(
        b.supports(bdevkit::bdev::IoType::Flush),
        "flush on {mechanism}"
    );
    drop(b);
    conformance::run(mgr, "B0", None).await;
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_delete", json!({"name": "B0"})).await,
        Ok(json!(true))
    );
    ok(&format!("{mechanism} over {blk}: conformance suite (write zeroes reads back zeroes, flush), no unmap"));
}

async fn io_checks(ch: &BdevChannel, bs: usize, info: &Value, tag: &str) {
    let pattern = |n: usize, seed: u64| conformance::pattern(n * bs, seed);
    // Unmap reads back as zeroes where the namespace says so.
    ch.write(100, 16, pattern(16, 5))
        .await
        .expect("write before unmap");
    ch.unmap(100, 16).await.expect("unmap");
    let got = ch
        .read(100, 16, DmaBuf::new(16 * bs).expect("buf"))
        .await
        .expect("read after unmap");
    if info["deallocated_read"] == json!("zeroes") {
        assert!(
            got.iter().all(|b| *b == 0),
            "unmapped blocks read back as zeroes"
        );
        ok(&format!(
            "unmap reads back zeroes (DLFEAT: deallocated blocks read 0) ({tag})"
        ));
    } else {
        ok(&format!(
            "unmap completes; the namespace does not promise zeroes ({tag})"
        ));
    }
    // A large write zeroes (split by max_write_zeroes if needed).
    ch.write(200, 64, pattern(64, 6))
        .await
        .expect("write before write_zeroes");
    ch.write_zeroes(200, 64).await.expect("write_zeroes");
    let got = ch
        .read(200, 64, DmaBuf::new(64 * bs).expect("buf"))
        .await
        .expect("read");
    assert!(
        got.iter().all(|b| *b == 0),
        "write_zeroes reads back zeroes"
    );
    ok(&format!("write_zeroes reads back zeroes ({tag})"));
    ch.flush(0, 1).await.expect("flush");
    ok(&format!("flush completes ({tag})"));
    // Compare: the same data matches, other data is a miscompare.
    ch.write(300, 4, pattern(4, 7))
        .await
        .expect("write before compare");
    ch.compare(300, 4, pattern(4, 7))
        .await
        .expect("compare of equal data");
    match ch.compare(300, 4, pattern(4, 8)).await {
        Err(f) => assert!(
            matches!(f.error, bdevkit::Error::Io(IoStatus::Miscompare)),
            "compare of other data: {}",
            f.error
        ),
        Ok(_) => panic!("compare of other data succeeded"),
    }
    ok(&format!(
        "compare: match, and Compare Failure as a miscompare ({tag})"
    ));
}

/// Submits a passthrough command; returns the finished I/O's status,
/// completion dword 0 and buffer.
async fn passthru(
    ch: &BdevChannel,
    admin: bool,
    sqe: Sqe,
    buf: Option<DmaBuf>,
) -> (IoStatus, u32, Option<DmaBuf>) {
    let mut io = ch.alloc_io_async().await;
    let cmd = NvmeCmd {
        cdw: sqe.to_dwords(),
    };
    if admin {
        io.nvme_admin(cmd, buf);
    } else {
        io.nvme_io(cmd, buf);
    }
    let mut done = ch.submit_async(io).expect("passthrough submit").await;
    (done.status(), done.nvme_cdw0(), done.take_buf())
}

async fn passthrough_checks(ch: &BdevChannel, blocks: u64, bs: usize, serial: &str, tag: &str) {
    let buf = DmaBuf::alloc(4096, 4096).expect("buf");
    let (s, _, buf) = passthru(ch, true, Identify::controller().to_sqe(0), Some(buf)).await;
    assert_eq!(s, IoStatus::Success, "nvme_admin Identify");
    let buf = buf.expect("identify buffer back");
    let id = IdentifyController::read_from_bytes(&buf[..]).expect("identify data");
    assert_eq!(
        id.serial().trim(),
        serial.trim(),
        "serial number through nvme_admin"
    );
    ok(&format!(
        "nvme_admin Identify Controller returns serial {:?} ({tag})",
        id.serial().trim()
    ));

    // Completion dword 0 of an admin command: Get Features Number of Queues.
    let (s, cdw0, _) = passthru(
        ch,
        true,
        GetFeatures::of::<NumberOfQueues>().to_sqe(0),
        None,
    )
    .await;
    assert_eq!(s, IoStatus::Success, "Get Features");
    assert_ne!(cdw0, 0, "Number of Queues in completion dword 0");
    ok(&format!(
        "nvme_admin Get Features returns completion dword 0 {cdw0:#x} ({tag})"
    ));

    // Invalid opcodes come back with the controller's status.
    let (s, _, _) = passthru(ch, false, Sqe::new(0x7f, 0, 1), None).await;
    assert_eq!(
        s,
        IoStatus::Nvme { sct: 0, sc: 0x01 },
        "nvme_io invalid opcode"
    );
    let (s, _, _) = passthru(ch, true, Sqe::new(0xfe, 0, 0), None).await;
    assert_eq!(
        s,
        IoStatus::Nvme { sct: 0, sc: 0x01 },
        "nvme_admin invalid opcode"
    );
    ok(&format!(
        "invalid opcodes answer NVMe status Invalid Opcode (sct 0, sc 1) ({tag})"
    ));
    // A passthrough read past the end: LBA Out of Range.
    let rd = Read::new(1, BlockRange::new(blocks, 1).expect("range")).to_sqe(0);
    let (s, _, _) = passthru(ch, false, rd, Some(DmaBuf::new(bs).expect("buf"))).await;
    assert_eq!(
        s,
        IoStatus::Nvme { sct: 0, sc: 0x80 },
        "nvme_io read past the end"
    );
    ok(&format!(
        "nvme_io read past the end answers LBA Out of Range (sct 0, sc 0x80) ({tag})"
    ));
    // A passthrough read of block 0: the image's signature.
    let rd = Read::new(1, BlockRange::new(0, 1).expect("range")).to_sqe(0);
    let (s, _, buf) = passthru(ch, false, rd, Some(DmaBuf::new(bs).expect("buf"))).await;
    assert_eq!(s, IoStatus::Success, "nvme_io read");
    let buf = buf.expect("buffer back");
    assert_eq!(
        &buf[..17],
        b"VMTEST-NVME-IMAGE",
        "LBA 0 signature through nvme_io"
    );
    ok(&format!(
        "nvme_io Read of LBA 0 returns the image signature ({tag})"
    ));
}

async fn create_errors(mgr: &BdevManager, ng: &str, blk: &str) {
    let reg = registry(mgr);
    let failed = |cause: &str| {
        Err(RpcError::new(
            -32603,
            format!("Unable to create xNVMe bdev. {cause}"),
        ))
    };
    let create = |name: &str, filename: &str, mech: &str| json!({"name": name, "filename": filename, "io_mechanism": mech, "conserve_cpu": false});
    let names = |mgr: &BdevManager| {
        let mut v: Vec<String> = mgr.bdevs().iter().map(|b| b.name().to_string()).collect();
        v.sort();
        v
    };
    let before = names(mgr);
    let cases = [
        (
            create("E1", "/dev/ng9n9", "io_uring_cmd"),
            "No such file or directory",
            "missing device",
        ),
        (
            create("E2", blk, "io_uring_cmd"),
            "Invalid argument",
            "a block device given to io_uring_cmd",
        ),
        (
            create("E3", ng, "spdk"),
            "Invalid argument",
            "unknown mechanism",
        ),
        (
            create("E4", "/dev/null", "io_uring_cmd"),
            "Inappropriate ioctl for device",
            "a char device that is not NVMe",
        ),
    ];
    for (params, cause, what) in cases {
        assert_eq!(
            rpc::call(&reg, "bdev_xnvme_create", params).await,
            failed(cause),
            "{what}"
        );
        assert_eq!(names(mgr), before, "nothing registered after: {what}");
        ok(&format!(
            "bdev_xnvme_create with {what}: -32603 \"Unable to create xNVMe bdev. {cause}\""
        ));
    }
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_create", create("D", ng, "io_uring_cmd")).await,
        Ok(json!("D"))
    );
    let after = names(mgr);
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_create", create("D", ng, "io_uring_cmd")).await,
        failed("File exists"),
        "duplicate name"
    );
    assert_eq!(
        names(mgr),
        after,
        "nothing registered after a duplicate name"
    );
    ok("bdev_xnvme_create with a duplicate name: -32603 \"Unable to create xNVMe bdev. File exists\"");
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_delete", json!({"name": "D"})).await,
        Ok(json!(true))
    );
    assert_eq!(
        rpc::call(&reg, "bdev_xnvme_delete", json!({"name": "D"})).await,
        Err(RpcError::new(-19, "No such device"))
    );
    ok("bdev_xnvme_delete of an unknown bdev: -19 \"No such device\"");
}
